"""Kafka output and dead-letter topics against a real broker (tansu, started by conftest): a prediction or a dead
letter over the producer's ``max_request_size`` goes out in its bounded form, so that neither stops the run nor
stops every resume after it, and a message the broker never acknowledges is an error, never a checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from kafka_helpers import kafka_source_config

from pegasos_stream import cli
from pegasos_stream.io.sinks import SinkError
from pegasos_stream.kafka.python_client import KafkaSink
from pegasos_stream.persist.checkpoint import latest_valid
from pegasos_stream.testing.kafka_broker import committed_offset, consume

HUGE_ID = "X" * 600_000  # its prediction, keyed by the id, is over the producer's 1 MiB max_request_size
HUGE_BAD_RECORD = b"not JSON " + b"Y" * 800_000  # its dead letter holds it in base64: over 1 MiB


def _event(i: int, event_id: str | None = None) -> bytes:
    return json.dumps({"id": event_id or f"e{i}", "x": {"a": float(i % 3), "b": 1.0}, "label": i % 2 == 0}).encode()


def _job(tmp_path: Path, broker: str, topic: str, predictions: str, dead_letters: str) -> Path:
    config = {
        "kafka": {"bootstrap_servers": broker},
        "model": {"kind": "linear", "lambda_": 0.01},
        "features": {"type": "dict"},
        "source": kafka_source_config(broker, topic, f"{topic}-group"),
        "output": {"type": "kafka", "topic": predictions},
        "errors": {"dead_letter": {"type": "kafka", "topic": dead_letters}},
        "checkpoint": {"dir": str(tmp_path / "ck")},
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


@pytest.mark.parametrize("huge", ["prediction", "dead-letter"])
def test_an_output_over_max_request_size_goes_out_bounded_and_every_record_is_handled(
    tmp_path, kafka_broker, kafka_topic, produce, huge
):
    topic, predictions, dead_letters = kafka_topic(1), kafka_topic(1), kafka_topic(1)
    middle = _event(10, HUGE_ID) if huge == "prediction" else HUGE_BAD_RECORD
    produce(kafka_broker, topic, [*map(_event, range(10)), middle, *map(_event, range(11, 21))])
    job = _job(tmp_path, kafka_broker, topic, predictions, dead_letters)
    for _ in range(2):  # and a resume finds nothing left to do
        assert cli.main(["run", "--config", str(job), "--resume", "--stop-when-idle", "2"]) == 0
    assert committed_offset(kafka_broker, f"{topic}-group", topic) == 21
    found = latest_valid(tmp_path / "ck")
    assert found is not None and found[2]["events"] == 21
    bad = huge == "dead-letter"
    written = [json.loads(value) for value in consume(kafka_broker, predictions, 21 - bad, timeout=10)]
    rejected = [json.loads(value) for value in consume(kafka_broker, dead_letters, 1, timeout=5 if bad else 1)]
    if huge == "prediction":
        assert [p["id"] for p in written] == [f"e{i}" for i in range(10)] + [HUGE_ID[:1024]] + [
            f"e{i}" for i in range(11, 21)
        ]
        assert written[10]["id_chars"] == len(HUGE_ID) and len(written[10]["id_sha256"]) == 64
        assert rejected == []
    else:
        assert [p["id"] for p in written] == [f"e{i}" for i in range(21) if i != 10]
        [entry] = rejected
        assert entry["position"] == f"{topic}/0/10" and entry["value_bytes"] == len(HUGE_BAD_RECORD)


def test_a_message_the_broker_never_acknowledges_is_a_sink_error(own_kafka_broker, create_topic):
    broker = own_kafka_broker
    create_topic(broker.address, "out")
    sink = KafkaSink(broker.address, "out", {"delivery_timeout_ms": 2000, "request_timeout_ms": 1000}, 5.0)
    sink.emit({"id": "first"})
    sink.flush()  # delivered: the producer knows the topic
    broker.stop()
    sink.emit({"id": "second"})
    with pytest.raises(SinkError, match=r"^topic out: 1 message\(s\) not delivered"):
        sink.flush()
