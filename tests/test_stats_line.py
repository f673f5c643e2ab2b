"""The statistics line comes at its interval, whether events trickle in or arrive in long batches,
and says which of its figures are cumulative and which are recent."""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMAND = [sys.executable, "-m", "pegasos_stream.cli"]
SAMPLE = ROOT / "pegasos_stream" / "data" / "spam-sample.jsonl.gz"
STATS = re.compile(
    r"cumulative: events=(\d+) learned=\d+ rejected=\d+( empty_bodies=\d+)? accuracy=\S+ t=\d+; "
    r"last ([\d.]+) s: events=(\d+) rate=\d+/s; last \d+ scores: roc_auc=\S+; now: pending=\d+"
    r"( members=(?:[^ :,]+:[\d.]+,?)+)?( norm=\S+)?"
)

#: Writes ``count`` binary events to standard output, one every ``pause`` seconds.
SLOW_WRITER = """
import json, sys, time
count, pause = int(sys.argv[1]), float(sys.argv[2])
for i in range(count):
    print(json.dumps({"id": i, "x": {"a": (i % 3) - 1.0, "b": 1.0}, "label": i % 3 == 2}), flush=True)
    time.sleep(pause)
"""


def _stats_lines(stderr: str) -> list[tuple[int, float, int]]:
    """(cumulative events, seconds since the previous line, events in them) of each statistics line."""
    found = [STATS.fullmatch(line) for line in stderr.splitlines() if line.startswith("cumulative: ")]
    assert all(found), stderr
    return [(int(m[1]), float(m[3]), int(m[4])) for m in found if m]


def _check_intervals(lines: list[tuple[int, float, int]], interval: float, total: int) -> None:
    """At least two lines came while the events did, each ``interval`` seconds (and a little) after
    the one before, with the events processed between them."""
    cumulative = [events for events, _, _ in lines]
    assert cumulative == sorted(set(cumulative)) and len([n for n in cumulative if n < total]) >= 2, lines
    assert [events for _, _, events in lines] == [b - a for a, b in zip([0, *cumulative], cumulative)]
    for _, seconds, _ in lines:
        assert interval <= seconds < interval + 1.0, lines


def test_the_stats_line_comes_at_its_interval_while_events_trickle_in(tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text(json.dumps({"model": {"lambda_": 0.01}, "source": {"poll_seconds": 0.1}}), encoding="utf-8")
    writer = subprocess.Popen([sys.executable, "-c", SLOW_WRITER, "16", "0.15"], stdout=subprocess.PIPE)
    try:
        args = ["run", "--config", str(job), "--input", "-", "--output", str(tmp_path / "predictions.jsonl")]
        args += ["--set", "evaluation.stats_every_seconds=0.5"]
        runner = subprocess.run([*COMMAND, *args], stdin=writer.stdout, capture_output=True, timeout=120)
    finally:
        writer.stdout.close()
        writer.wait(timeout=30)
    stderr = runner.stderr.decode()
    assert runner.returncode == 0, stderr
    lines = _stats_lines(stderr)
    assert len(lines) >= 3, stderr  # a run of about 2.4 s
    _check_intervals(lines, 0.5, 16)
    assert json.loads(stderr.splitlines()[-1])["events"] == 16


def test_the_stats_line_comes_at_its_interval_when_a_file_is_read_in_long_batches(tmp_path):
    """Messages that take long to learn (the Python email reader): a file is read in batches, which
    must end in time for the line (before, one batch held the whole file, and no line came)."""
    events = tmp_path / "mail.jsonl"
    events.write_bytes(gzip.decompress(SAMPLE.read_bytes()) * 3)
    args = ["eval", "--json", "--input", str(events), "--set", "features.reader=email"]
    done = subprocess.run(
        [*COMMAND, *args, "--set", "evaluation.stats_every_seconds=0.25"], capture_output=True, timeout=300
    )
    assert done.returncode == 0, done.stderr.decode()
    total = json.loads(done.stdout)["events"]
    assert total == 3 * 404
    lines = _stats_lines(done.stderr.decode())
    _check_intervals(lines, 0.25, total)
    mixture = [line for line in done.stderr.decode().splitlines() if line.startswith("cumulative: ")][-1]
    assert re.search(r" empty_bodies=\d+ ", mixture) and " members=svm(1e-05)+logistic(0.7):" in mixture  # spam.yaml's
