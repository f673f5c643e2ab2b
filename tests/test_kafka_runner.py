"""`pegasos-stream run` against a real Kafka-protocol broker (tansu, started by conftest)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from pegasos_stream import cli
from pegasos_stream.testing.kafka_broker import committed_offset, kafka_source_config


def _config(tmp_path: Path, broker: str, topic: str, group: str) -> Path:
    config = {
        "model": {"kind": "linear", "lambda_": 0.01},
        "features": {"type": "dict"},
        "source": kafka_source_config(broker, topic, group),
        "evaluation": {"stats_every_seconds": 1},
    }
    path = tmp_path / "kafka.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def _events(ids: range) -> list[bytes]:
    return [json.dumps({"id": i, "x": {"a": (i % 7) - 3.0, "b": 1.0}, "label": i % 7 > 3}).encode() for i in ids]


def _predicted_ids(path: Path) -> list[int]:
    return [json.loads(line)["id"] for line in path.read_text(encoding="utf-8").splitlines()]


def _run(config: Path, output: Path, capsys) -> dict:
    code = cli.main(["run", "--config", str(config), "--output", str(output), "--stop-when-idle", "4"])
    assert code == 0
    summary_line = capsys.readouterr().err.strip().splitlines()[-1]
    return json.loads(summary_line)


def test_run_predicts_each_message_once_and_a_second_run_continues(
    tmp_path, kafka_broker, kafka_topic, produce, capsys
):
    topic = kafka_topic(1)
    first = _events(range(30))
    first[10] = b'{"id": 10, "x": {"a": "not a number"}, "label": true}'
    first[20] = b"\xff\xfe not even UTF-8"
    produce(kafka_broker, topic, first)
    config = _config(tmp_path, kafka_broker, topic, "runner-group")

    summary = _run(config, tmp_path / "out1.jsonl", capsys)
    expected = [i for i in range(30) if i not in (10, 20)]
    assert _predicted_ids(tmp_path / "out1.jsonl") == expected  # each once, in order
    assert summary["events"] == 30 and summary["learned"] == 28 and summary["rejected"] == 2

    produce(kafka_broker, topic, _events(range(30, 40)))
    summary = _run(config, tmp_path / "out2.jsonl", capsys)
    assert _predicted_ids(tmp_path / "out2.jsonl") == list(range(30, 40))  # nothing twice
    assert summary["events"] == 10 and summary["learned"] == 10

    assert committed_offset(kafka_broker, "runner-group", topic) == 40
