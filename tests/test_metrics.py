"""The metrics of a run in the Prometheus text format: scraped over HTTP from a real run, the server's
life, the missing library, the rate and refreshes, and the Kafka lag per partition."""

from __future__ import annotations

import json
import math
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
import yaml
from http_helpers import free_port
from kafka_helpers import GROUP_SETTINGS
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from pegasos_stream import cli
from pegasos_stream.cli.assemble import build_runner
from pegasos_stream.cli.config import load_config
from pegasos_stream.io.sources import FileSource
from pegasos_stream.kafka.offsets import Fetched, OffsetBook, Partition
from pegasos_stream.run.metrics import REFRESH_SECONDS, RunMetrics

try:  # tests/ as a package
    from .streams import binary_events, jsonl
except ImportError:  # tests/ as a plain directory: pytest puts it on sys.path
    from streams import binary_events, jsonl

ROOT = Path(__file__).resolve().parents[1]
BIN = shutil.which("pegasos-stream", path=str(Path(sys.executable).parent)) or shutil.which("pegasos-stream")


def _job(tmp_path: Path, **sections: dict) -> Path:
    config = {
        "model": {"kind": "linear", "lambda_": 0.01},
        "features": {"type": "dict"},
        "source": {"type": "stdin", "poll_seconds": 0.1},
        "output": {"type": "none"},
        **sections,
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a scrape, by name and labels."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        return _samples(answer.read().decode("utf-8"))


def _value(samples: dict, name: str, **labels: str) -> float:
    return samples[(f"pegasos_stream_{name}", tuple(sorted(labels.items())))]


def test_a_run_serves_its_figures_while_it_waits_for_more_input(tmp_path):
    port = free_port()
    job = _job(
        tmp_path,
        metrics={"port": port},
        checkpoint={"dir": str(tmp_path / "checkpoints"), "every_events": 20},
    )
    labelled = jsonl(binary_events(40, seed=7))
    unlabelled = [json.dumps({"id": f"u{i}", "x": {"f1": 1.0}}).encode() for i in range(5)]
    malformed = [b'{"id": "cut", "x": ', b"\xff\xfe not UTF-8", b'{"id": "nan", "x": {"f1": NaN}, "label": true}']
    refused = [b'{"id": "odd", "x": {"f1": 1.0}, "label": "maybe"}']  # not a binary label: the learner refuses it
    lines = labelled[:20] + malformed + unlabelled + refused + labelled[20:]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [BIN, "run", "--config", str(job), "--input", "-"],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        proc.stdin.write(b"".join(line + b"\n" for line in lines))
        proc.stdin.flush()  # the pipe stays open: the run waits for more
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, proc.stderr.read().decode()
            try:
                samples = _scrape(port)
            except urllib.error.URLError:  # not listening yet
                samples = {}
            # the recent figures catch up once the stream falls idle (and appear once there are some)
            recent, events = (
                samples.get((f"pegasos_stream_{name}", ())) for name in ("recent_examples", "events_total")
            )
            if recent == 40 and events == len(lines):
                break
            assert time.monotonic() < deadline, f"the scrapes never showed every record: {samples}"
            time.sleep(0.1)
        proc.stdin.close()
        assert proc.wait(timeout=30) == 0
        stderr = proc.stderr.read().decode()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()
    summary = json.loads(stderr.strip().splitlines()[-1])
    assert f"metrics on http://127.0.0.1:{port}/metrics" in stderr
    assert _value(samples, "events_total") == summary["events"] == len(lines)
    assert _value(samples, "predictions_total") == len(labelled) + len(unlabelled)
    assert _value(samples, "learned_total") == summary["learned"] == len(labelled)
    assert _value(samples, "rejected_total", reason="malformed") == len(malformed)
    assert _value(samples, "rejected_total", reason="refused") == len(refused)
    assert summary["rejected"] == len(malformed) + len(refused)
    assert _value(samples, "pending_labels") == summary["pending"] == len(unlabelled)
    assert _value(samples, "events_per_second") > 0
    # the recent window (10,000 examples) holds all 40: its figures are those of the whole run
    assert _value(samples, "recent_roc_auc") == pytest.approx(summary["roc_auc"], abs=1e-12)
    assert _value(samples, "recent_error_ratio") == pytest.approx(1 - summary["accuracy"], abs=1e-12)
    assert _value(samples, "checkpoint_pause_seconds") > 0  # checkpoints at 20 and 40 records
    assert _value(samples, "checkpoint_age_seconds") >= 0
    assert ("process_resident_memory_bytes", ()) in samples or sys.platform != "linux"
    assert not any(name.startswith("pegasos_stream_kafka") for name, _ in samples)  # not a Kafka source


def _refused_connection(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


def test_the_server_stops_with_the_run_and_the_next_run_in_the_process_serves_its_own(tmp_path, capsys):
    events = tmp_path / "events.jsonl"
    events.write_bytes(b"".join(line + b"\n" for line in jsonl(binary_events(30, seed=1))))
    port = free_port()
    job = _job(tmp_path, source={"type": "file", "path": str(events)}, metrics={"port": port})
    for _ in range(2):  # the same port, and registries that do not collide
        assert cli.main(["run", "--config", str(job)]) == 0
        assert f"metrics on http://127.0.0.1:{port}/metrics" in capsys.readouterr().err
        assert _refused_connection(port)


def test_a_port_in_use_is_a_one_line_error(tmp_path, capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        job = _job(tmp_path, source={"type": "file", "path": str(tmp_path / "none.jsonl")}, metrics={"port": port})
        (tmp_path / "none.jsonl").write_bytes(b"")
        assert cli.main(["run", "--config", str(job)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"configuration error: metrics.port: cannot listen on 127.0.0.1:{port}: Address already in use"]


def test_without_prometheus_client_a_run_with_metrics_stops_naming_the_extra(tmp_path):
    """A sitecustomize blocks the import of prometheus_client in the child, as if it were not installed."""
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text("import sys\nsys.modules['prometheus_client'] = None\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(blocker), os.environ.get("PYTHONPATH")]))}
    events = tmp_path / "events.jsonl"
    events.write_bytes(b"".join(line + b"\n" for line in jsonl(binary_events(5, seed=2))))
    job = _job(tmp_path, source={"type": "file", "path": str(events)})
    command = [sys.executable, "-m", "pegasos_stream.cli", "run", "--config", str(job)]
    without = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert without.returncode == 0, without.stderr  # no metrics section: the library is not needed
    assert json.loads(without.stderr.strip().splitlines()[-1])["learned"] == 5
    with_metrics = subprocess.run(
        [*command, "--set", f"metrics.port={free_port()}"], env=env, capture_output=True, text=True, timeout=60
    )
    assert with_metrics.returncode == 2
    assert with_metrics.stderr.strip().splitlines() == [
        "configuration error: metrics.port is set, but prometheus_client is not installed:"
        " pip install 'pegasos-stream[metrics]'"
    ]


def test_the_rate_covers_the_last_minute_and_the_figures_are_worked_out_when_due(tmp_path):
    events = tmp_path / "events.jsonl"
    events.write_bytes(b"".join(line + b"\n" for line in jsonl(binary_events(100, seed=3))))
    config = load_config(None, ["output.type=none", "run.batch_size=10"])
    runner = build_runner(config)
    source = FileSource(events)
    now = [0.0]
    metrics = RunMetrics(runner, source, clock=lambda: now[0])

    def scrape() -> dict:
        return _samples(generate_latest(metrics.registry).decode())

    runner.monitor = metrics
    runner.run(source, max_events=30)  # in batches of 10; the first works the figures out, at time 0
    samples = scrape()
    assert math.isnan(_value(samples, "events_per_second")) and _value(samples, "recent_examples") == 10
    now[0] = 10.0
    runner.run(source, max_events=60)  # due again after the first batch: 40 records in 10 s
    samples = scrape()
    assert _value(samples, "events_per_second") == 4.0 and _value(samples, "recent_examples") == 40
    now[0] = 10.0 + REFRESH_SECONDS / 2
    runner.run(source, max_events=90)  # not due, and a file is never idle: the figures stay
    samples = scrape()
    assert _value(samples, "events_per_second") == 4.0 and _value(samples, "recent_examples") == 40
    assert _value(samples, "events_total") == 90  # the counts are read when scraped
    now[0] = 80.0
    runner.run(source, max_events=100)  # due: the rate covers the last minute, from the sample at 10 s
    samples = scrape()
    assert _value(samples, "events_per_second") == pytest.approx((100 - 40) / (80 - 10))
    assert _value(samples, "recent_examples") == 100
    source.close()


def test_a_mixture_shows_its_members_weights_and_a_mail_run_its_empty_bodies(tmp_path):
    mail = tmp_path / "mail.jsonl"
    texts = ["Subject: headers only\n\n", "Subject: s\n\nbuy now", "Subject: re : x\nthanks"]
    mail.write_text("".join(json.dumps({"text": t, "label": "ham"}) + "\n" for t in texts), encoding="utf-8")
    config = load_config(ROOT / "configs" / "spam.yaml", [f"source.path={mail}", "output.type=none"])
    runner = build_runner(config)
    source = FileSource(mail)
    metrics = RunMetrics(runner, source, clock=lambda: 0.0)
    runner.monitor = metrics
    runner.run(source)
    source.close()
    samples = _samples(generate_latest(metrics.registry).decode())
    assert _value(samples, "empty_bodies_total") == 1
    weights = {labels: value for (name, labels), value in samples.items() if name == "pegasos_stream_member_weight"}
    assert weights == {(("member", name),): weight for name, weight in runner.model.member_weights.items()}
    assert len(weights) == 5


# -- the Kafka lag per partition ------------------------------------------------------------


def test_the_next_offset_to_process_is_the_claimed_one_else_the_first_polled():
    book = OffsetBook()
    first, second, third = Partition("t", 0), Partition("t", 1), Partition("t", 2)
    book.assign([first, second, third])
    assert book.next_offsets([first, second, third]) == {}  # nothing polled: the consumer's position
    book.add([Fetched(first, [b"a", b"b", b"c"], [5, 6, 7], 0), Fetched(second, [b"d"], [40], 0)])
    assert book.next_offsets([first, second, third]) == {first: 5, second: 40}
    book.read(2)
    book.claim([("t", 0, 5), ("t", 0, 6)])
    assert book.next_offsets([first, second]) == {first: 7, second: 40}
    book.seek({third: 12})
    assert book.next_offsets([third]) == {third: 12}


def test_kafka_lag_per_partition_against_a_broker(source_class, kafka_broker, kafka_topic, produce):
    topic = kafka_topic(2)
    produced = {0: 12, 1: 7}
    for partition, count in produced.items():
        produce(kafka_broker, topic, [f'{{"id": {i}}}'.encode() for i in range(count)], partition)
    source = source_class(kafka_broker, [topic], f"lag-{uuid.uuid4().hex[:8]}", consumer=GROUP_SETTINGS)
    runner = build_runner(load_config(None, ["output.type=none"]))
    claimed = dict.fromkeys(produced, 0)
    seen: list[dict] = []
    try:
        deadline = time.monotonic() + 30
        while sum(claimed.values()) < sum(produced.values()):
            assert time.monotonic() < deadline, f"claimed {claimed} of {produced}"
            batch = source.claim(source.read(4))
            for index in range(len(batch)):
                claimed[batch.cursors[index][1]] += 1
            lags = source.partition_lags()
            # every partition known is at its records less those claimed: nothing else counts
            assert lags == {key: produced[key[1]] - claimed[key[1]] for key in lags}, (lags, claimed)
            seen.append(lags)
            metrics = RunMetrics(runner, source)
            metrics.tick(idle=False)  # the first round works the figures out
            samples = _samples(generate_latest(metrics.registry).decode())
            scraped = {
                (dict(labels)["topic"], int(dict(labels)["partition"])): value
                for (name, labels), value in samples.items()
                if name == "pegasos_stream_kafka_lag_records"
            }
            assert scraped == lags
    finally:
        source.close()
    assert any(lag > 0 for lags in seen for lag in lags.values())
    assert seen[-1] == {(topic, 0): 0, (topic, 1): 0}
