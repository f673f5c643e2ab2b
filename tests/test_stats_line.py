"""The statistics line comes at its interval, whether events trickle in or arrive in long batches,
and says which of its figures are cumulative and which are recent."""

from __future__ import annotations

import gzip
import json
import logging
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pegasos_stream.cli.assemble import build_runner
from pegasos_stream.cli.config import load_config
from pegasos_stream.stream.records import RecordBatch
from pegasos_stream.stream.sources import Source

ROOT = Path(__file__).resolve().parents[1]
COMMAND = [sys.executable, "-m", "pegasos_stream.cli"]
SAMPLE = ROOT / "pegasos_stream" / "data" / "spam-sample.jsonl.gz"
STATS = re.compile(
    r"cumulative: events=(\d+) learned=\d+ rejected=\d+( empty_bodies=\d+)? accuracy=\S+ t=\d+; "
    r"last ([\d.]+) s: events=(\d+) rate=\d+/s; last \d+ scores: roc_auc=\S+; now: pending=\d+"
    r"( members=(?:[^ :,]+:[\d.]+,?)+)?( norm=\S+)?"
)


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


class _TrickleSource(Source):
    """``count`` binary events, one a read, each read ``pause`` seconds of ``clock`` after the one before."""

    name = "trickle"

    def __init__(self, count: int, pause: float, clock: list[float]) -> None:
        self._count, self._pause, self._clock, self._read = count, pause, clock, 0

    def read(self, n: int) -> RecordBatch | None:
        if self._read == self._count:
            return None
        self._clock[0] += self._pause
        i = self._read
        self._read += 1
        event = {"id": i, "x": {"a": (i % 3) - 1.0, "b": 1.0}, "label": i % 3 == 2}
        return RecordBatch([json.dumps(event).encode()], [i], lambda cursor: f"trickle:{cursor}")


def test_the_stats_line_comes_at_its_interval_while_events_trickle_in(caplog):
    """Events one every 0.15 s of a driven clock, a line every 0.5 s: each line comes at the first batch
    0.5 s or more after the one before, with the events processed between them."""
    config = load_config(None, ["model.lambda_=0.01", "output.type=none", "evaluation.stats_every_seconds=0.5"])
    runner = build_runner(config)
    clock = [1000.0]
    runner.clock = lambda: clock[0]
    with caplog.at_level(logging.INFO, logger="pegasos_stream"):
        stats = runner.run(_TrickleSource(16, 0.15, clock))
    assert stats.events == 16
    lines = _stats_lines("\n".join(record.getMessage() for record in caplog.records))
    assert [events for events, _, _ in lines] == [4, 8, 12, 16]  # at 0.6 s, 1.2 s, 1.8 s, 2.4 s of the clock
    _check_intervals(lines, 0.5, 16)
    assert all(seconds == pytest.approx(0.6) for _, seconds, _ in lines)


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
