"""Poison records: whatever a record makes the parser or the learner raise, it is a rejected record
with its position; anything else that stops a run leaves the checkpoint (and Kafka's committed
offsets) at the last record processed, so that ``--resume`` learns every event exactly once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from kafka_helpers import kafka_source_config

from pegasos_stream import cli
from pegasos_stream.cli import assemble
from pegasos_stream.cli.assemble import build_checkpoints, build_runner, build_source
from pegasos_stream.cli.config import load_config
from pegasos_stream.io.sinks import NullSink, SinkError
from pegasos_stream.persist import model_digest
from pegasos_stream.persist.checkpoint import latest_valid
from pegasos_stream.testing.kafka_broker import committed_offset

try:  # tests/ as a package
    from .streams import binary_events, jsonl
except ImportError:  # tests/ as a plain directory: pytest puts it on sys.path
    from streams import binary_events, jsonl

GOOD = 1000
POISON_AT = 450  # the 1-based line number of the bad record in a file

POISONS = {
    "digits": b'{"id": "poison", "x": {"f1": 1' + b"0" * 5000 + b'}, "label": true}',
    "nesting": b'{"id": "poison", "x": ' + b"[" * 3000 + b"]" * 3000 + b', "label": true}',
}
MALFORMED = b'{"id": "malformed", "x": {"f1": 1.0}'


def _good_lines(n: int = GOOD, seed: int = 5) -> list[bytes]:
    return jsonl(binary_events(n, seed))


def _with_bad(bad: bytes, at: int = POISON_AT) -> list[bytes]:
    """The good lines with ``bad`` as line ``at`` (1-based)."""
    lines = _good_lines()
    return lines[: at - 1] + [bad] + lines[at - 1 :]


def _job(directory: Path, lines: list[bytes] | None, batch_size: int, dead_letters: Path, source: dict | None = None):
    """A job over ``lines`` (written to directory/events.jsonl) or ``source``, with checkpoints in
    directory/ck and dead letters at ``dead_letters``."""
    directory.mkdir(parents=True, exist_ok=True)
    if source is None:
        assert lines is not None
        path = directory / "events.jsonl"
        path.write_bytes(b"".join(line + b"\n" for line in lines))
        source = {"type": "file", "path": str(path)}
    config = {
        "model": {"kind": "linear", "lambda_": 0.01, "fit_intercept": True},
        "features": {"type": "dict"},
        "source": source,
        "output": {"type": "file", "path": str(directory / "out.jsonl")},
        "errors": {"on_error": "skip", "dead_letter": {"type": "file", "path": str(dead_letters)}},
        "run": {"batch_size": batch_size},
        "checkpoint": {"dir": str(directory / "ck")},
    }
    job = directory / "job.yaml"
    job.write_text(yaml.safe_dump(config), encoding="utf-8")
    return job


def _newest(job: Path) -> tuple[dict, dict]:
    """(state, manifest) of the newest checkpoint of ``job``."""
    found = latest_valid(job.parent / "ck")
    assert found is not None
    return found[1], found[2]


def _run_in_process(job: Path) -> None:
    """``run --config job`` without the command line's start-up checks: a dead-letter file in a
    directory that does not exist is refused at start-up there, and here fails at its first line,
    as a dead-letter file that can no longer be written in the middle of a run does."""
    config = load_config(job)
    runner = build_runner(config)
    source = build_source(config)
    checkpoints = build_checkpoints(config)
    try:
        runner.run(source, config["run"]["max_events"], config["run"]["stop_when_idle"], checkpoints=checkpoints)
    finally:
        source.close()
        if checkpoints is not None:
            checkpoints.close()
        runner.sink.close()


def _clean_digest(tmp_path: Path, batch_size: int) -> str:
    """The model digest of a run over the good lines alone."""
    job = _job(tmp_path / "clean", _good_lines(), batch_size, tmp_path / "clean" / "dead.jsonl")
    assert cli.main(["run", "--config", str(job)]) == 0
    state, manifest = _newest(job)
    assert manifest["t"] == GOOD
    return model_digest(state["model"])


BATCH_SIZES = [pytest.param(0, id="one-at-a-time"), pytest.param(256, id="batched")]


@pytest.mark.parametrize("batch_size", BATCH_SIZES)
@pytest.mark.parametrize("poison", sorted(POISONS))
def test_a_poison_record_is_rejected_with_its_position_and_the_run_goes_on(tmp_path, poison, batch_size, caplog):
    dead = tmp_path / "run" / "dead.jsonl"
    job = _job(tmp_path / "run", _with_bad(POISONS[poison]), batch_size, dead)
    assert cli.main(["run", "--config", str(job)]) == 0
    state, manifest = _newest(job)
    assert (manifest["events"], manifest["t"]) == (GOOD + 1, GOOD)
    assert state["runner"]["counts"][3] == 1  # rejected
    assert model_digest(state["model"]) == _clean_digest(tmp_path, batch_size)
    position = f"{tmp_path / 'run' / 'events.jsonl'}:{POISON_AT}"
    [entry] = [json.loads(line) for line in dead.read_text(encoding="utf-8").splitlines()]
    assert entry["position"] == position and entry["error"].startswith(f"{position}: ")
    assert f"rejected {position}: " in caplog.text


@pytest.mark.parametrize("batch_size", BATCH_SIZES)
def test_a_dead_letter_sink_that_fails_stops_at_the_last_record_processed_and_resume_learns_each_once(
    tmp_path, batch_size
):
    dead = tmp_path / "run" / "missing" / "dead.jsonl"  # its directory does not exist yet
    job = _job(tmp_path / "run", _with_bad(MALFORMED), batch_size, dead)
    with pytest.raises(SinkError, match=r"dead\.jsonl: cannot write: No such file or directory"):
        _run_in_process(job)
    state, manifest = _newest(job)
    processed = POISON_AT - 1  # the good records before the bad one
    assert (manifest["events"], manifest["t"], manifest["source"]["line"]) == (processed, processed, processed)
    assert state["runner"]["counts"][:3] == [processed, processed, processed]  # events, predicted, learned

    dead.parent.mkdir()
    assert cli.main(["run", "--config", str(job), "--resume"]) == 0
    state, manifest = _newest(job)
    assert (manifest["events"], manifest["t"]) == (GOOD + 1, GOOD)
    assert model_digest(state["model"]) == _clean_digest(tmp_path, batch_size)
    [entry] = [json.loads(line) for line in dead.read_text(encoding="utf-8").splitlines()]
    assert entry["position"].endswith(f"events.jsonl:{POISON_AT}")
    predicted = [json.loads(line)["id"] for line in (tmp_path / "run" / "out.jsonl").read_text().splitlines()]
    assert predicted == [f"e{i}" for i in range(GOOD)]  # each once


class _FailingSink:
    """A sink that fails at its ``fail_at``-th emit (1-based), as a full disk would."""

    def __init__(self, fail_at: int) -> None:
        self.fail_at = fail_at
        self.emitted: list[dict] = []

    def emit(self, obj: dict) -> None:
        if len(self.emitted) + 1 == self.fail_at:
            raise OSError("no space left on device")
        self.emitted.append(obj)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


@pytest.mark.parametrize("batch_size", BATCH_SIZES)
def test_a_failing_output_sink_leaves_the_checkpoint_at_the_last_record_whose_prediction_it_took(tmp_path, batch_size):
    """A record counts as processed once its prediction was emitted. One at a time, the checkpoint written as the
    run stops ends before the record whose emit failed (the 300th). In the compiled path a run of rows (the batch
    of lines 201 to 300, cut at the checkpoint due at 300) is learned before its predictions are emitted: the model
    is ahead of what was emitted, so no checkpoint is written past the one at 200."""
    job = _job(tmp_path / "run", _with_bad(MALFORMED, 400), batch_size, tmp_path / "run" / "dead.jsonl")
    config = load_config(job, ["checkpoint.every_events=100"])
    runner = build_runner(config)
    runner.sink = _FailingSink(fail_at=300)
    source = build_source(config)
    checkpoints = build_checkpoints(config)
    assert checkpoints is not None
    try:
        with pytest.raises(OSError, match="no space left"):
            runner.run(source, checkpoints=checkpoints)
    finally:
        source.close()
        checkpoints.close()
    state, manifest = _newest(job)
    processed = 200 if batch_size else 299
    assert (manifest["events"], manifest["t"], manifest["source"]["line"]) == (processed,) * 3
    assert runner.model.t == (300 if batch_size else 299)

    assert cli.main(["run", "--config", str(job), "--resume", "--set", "checkpoint.every_events=100"]) == 0
    state, manifest = _newest(job)
    assert (manifest["events"], manifest["t"]) == (GOOD + 1, GOOD)
    assert model_digest(state["model"]) == _clean_digest(tmp_path, batch_size)
    predicted = [json.loads(line)["id"] for line in (tmp_path / "run" / "out.jsonl").read_text().splitlines()]
    assert predicted == [f"e{i}" for i in range(processed, GOOD)]  # the first 299 went to the failing sink


class _UndeliveredSink(_FailingSink):
    """A sink that takes every emit, then reports at its ``fail_at``-th flush (1-based) that some were never
    delivered, as a Kafka output whose broker stopped answering does."""

    def __init__(self, fail_at: int) -> None:
        super().__init__(fail_at=0)
        self.flushes_left = fail_at

    def flush(self) -> None:
        self.flushes_left -= 1
        if self.flushes_left == 0:
            raise SinkError("topic out: 3 message(s) not delivered within 10 s")


@pytest.mark.parametrize("batch_size", BATCH_SIZES)
def test_an_output_not_delivered_at_a_checkpoint_leaves_the_previous_checkpoint_and_one_error_line(
    tmp_path, batch_size, monkeypatch, capsys
):
    job = _job(tmp_path / "run", _good_lines(), batch_size, tmp_path / "run" / "dead.jsonl")
    sink = _UndeliveredSink(fail_at=3)  # the flushes before the checkpoints at 100 and 200 go through
    monkeypatch.setattr(assemble, "_sink", lambda kind, section, key: sink if key == "output" else NullSink())
    assert cli.main(["run", "--config", str(job), "--set", "checkpoint.every_events=100"]) == 1
    assert capsys.readouterr().err.splitlines() == ["error: topic out: 3 message(s) not delivered within 10 s"]
    _, manifest = _newest(job)
    assert (manifest["events"], manifest["t"], manifest["source"]["line"]) == (200, 200, 200)


# -- Kafka -------------------------------------------------------------------------------------

KAFKA_TOTAL = GOOD + 1
KAFKA_POISON_OFFSET = POISON_AT  # the 451st message of 1,001


def _kafka_messages(bad: bytes) -> list[bytes]:
    return _with_bad(bad, KAFKA_POISON_OFFSET + 1)


def _kafka_job(directory: Path, broker: str, topic: str, group: str, dead_letters: Path, client: str) -> Path:
    source = kafka_source_config(broker, topic, group, client)
    job = _job(directory, None, 256, dead_letters, source)
    config = yaml.safe_load(job.read_text(encoding="utf-8"))
    config["run"].update(max_events=KAFKA_TOTAL, stop_when_idle=20)
    job.write_text(yaml.safe_dump(config), encoding="utf-8")
    return job


def test_kafka_poison_record_is_rejected_and_every_good_event_learned(
    tmp_path, kafka_client, kafka_broker, kafka_topic, produce
):
    topic = kafka_topic(1)
    produce(kafka_broker, topic, _kafka_messages(POISONS["digits"]))
    dead = tmp_path / "dead.jsonl"
    job = _kafka_job(tmp_path, kafka_broker, topic, f"{topic}-group", dead, kafka_client)
    assert cli.main(["run", "--config", str(job)]) == 0
    state, manifest = _newest(job)
    assert (manifest["events"], manifest["t"]) == (KAFKA_TOTAL, GOOD)
    assert manifest["source"] == {"offsets": [[topic, 0, KAFKA_TOTAL]]}
    assert committed_offset(kafka_broker, f"{topic}-group", topic) == KAFKA_TOTAL
    [entry] = [json.loads(line) for line in dead.read_text(encoding="utf-8").splitlines()]
    assert entry["position"] == f"{topic}/0/{KAFKA_POISON_OFFSET}"
    assert model_digest(state["model"]) == _clean_digest(tmp_path, 256)


def test_kafka_failing_dead_letter_sink_commits_only_what_was_processed(
    tmp_path, kafka_client, kafka_broker, kafka_topic, produce
):
    topic = kafka_topic(1)
    produce(kafka_broker, topic, _kafka_messages(MALFORMED))
    group = f"{topic}-group"
    dead = tmp_path / "missing" / "dead.jsonl"
    job = _kafka_job(tmp_path, kafka_broker, topic, group, dead, kafka_client)
    with pytest.raises(SinkError, match=r"dead\.jsonl: cannot write: No such file or directory"):
        _run_in_process(job)
    state, manifest = _newest(job)
    assert (manifest["events"], manifest["t"]) == (KAFKA_POISON_OFFSET, KAFKA_POISON_OFFSET)
    assert manifest["source"] == {"offsets": [[topic, 0, KAFKA_POISON_OFFSET]]}
    assert committed_offset(kafka_broker, group, topic) == KAFKA_POISON_OFFSET

    dead.parent.mkdir()
    assert cli.main(["run", "--config", str(job), "--resume"]) == 0
    state, manifest = _newest(job)
    assert (manifest["events"], manifest["t"]) == (KAFKA_TOTAL, GOOD)
    assert committed_offset(kafka_broker, group, topic) == KAFKA_TOTAL
    assert model_digest(state["model"]) == _clean_digest(tmp_path, 256)
