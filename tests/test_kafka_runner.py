"""`pegasos-stream run` against a real Kafka-protocol broker (tansu, started by conftest)."""

from __future__ import annotations

import gzip
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml
from kafka_helpers import GROUP_SETTINGS, kafka_source_config

from pegasos_stream import cli
from pegasos_stream.cli.config import load_config, shipped_configs
from pegasos_stream.parse import batches
from pegasos_stream.persist.checkpoint import latest_valid
from pegasos_stream.testing.kafka_broker import committed_offset, consume

SAMPLE = Path(__file__).resolve().parents[1] / "pegasos_stream" / "data" / "spam-sample.jsonl.gz"


def _config(tmp_path: Path, broker: str, topic: str, group: str, client: str) -> Path:
    config = {
        "model": {"kind": "linear", "lambda_": 0.01},
        "features": {"type": "dict"},
        # no checkpoint.dir: the run commits offsets that no saved model covers, as the opt-in allows
        "source": {**kafka_source_config(broker, topic, group, client), "commit_without_checkpoint": True},
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
    code = cli.main(["run", "--config", str(config), "--output", str(output), "--stop-when-idle", "2"])
    assert code == 0
    summary_line = capsys.readouterr().err.strip().splitlines()[-1]
    return json.loads(summary_line)


def test_run_predicts_each_message_once_and_a_second_run_continues(
    tmp_path, kafka_client, kafka_broker, kafka_topic, produce, capsys
):
    topic = kafka_topic(1)
    first = _events(range(30))
    first[10] = b'{"id": 10, "x": {"a": "not a number"}, "label": true}'
    first[20] = b"\xff\xfe not even UTF-8"
    produce(kafka_broker, topic, first)
    config = _config(tmp_path, kafka_broker, topic, "runner-group", kafka_client)

    summary = _run(config, tmp_path / "out1.jsonl", capsys)
    expected = [i for i in range(30) if i not in (10, 20)]
    assert _predicted_ids(tmp_path / "out1.jsonl") == expected  # each once, in order
    assert summary["events"] == 30 and summary["learned"] == 28 and summary["rejected"] == 2

    produce(kafka_broker, topic, _events(range(30, 40)))
    summary = _run(config, tmp_path / "out2.jsonl", capsys)
    assert _predicted_ids(tmp_path / "out2.jsonl") == list(range(30, 40))  # nothing twice
    assert summary["events"] == 10 and summary["learned"] == 10

    assert committed_offset(kafka_broker, "runner-group", topic) == 40


def test_one_kafka_section_connects_the_source_the_output_and_the_dead_letter_topic(
    tmp_path, kafka_client, kafka_broker, kafka_topic, produce, capsys
):
    """Only kafka.bootstrap_servers names the broker (on a port of its own, not the default 9092): the source
    reads from it, and the predictions and the rejected record go to their topics on it."""
    mail, predictions, rejected = kafka_topic(1), kafka_topic(1), kafka_topic(1)
    produce(kafka_broker, mail, [*_events(range(6)), b"not JSON", *_events(range(6, 10))])
    group = f"{mail}-group"
    config = {
        "kafka": {"bootstrap_servers": kafka_broker},
        "model": {"kind": "linear", "lambda_": 0.01},
        "features": {"type": "dict"},
        "source": {
            "type": "kafka",
            "client": kafka_client,
            "topics": [mail],
            "group_id": group,
            "consumer": GROUP_SETTINGS,
            "poll_seconds": 0.2,
        },
        "output": {"type": "kafka", "topic": predictions},
        "errors": {"dead_letter": {"type": "kafka", "topic": rejected}},
        "checkpoint": {"dir": "checkpoints"},
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")

    assert cli.main(["run", "--config", str(path), "--stop-when-idle", "2"]) == 0
    summary = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
    assert (summary["events"], summary["learned"], summary["rejected"]) == (11, 10, 1)
    assert [json.loads(value)["id"] for value in consume(kafka_broker, predictions, 10)] == list(range(10))
    [dead] = [json.loads(value) for value in consume(kafka_broker, rejected, 1)]
    assert dead["position"] == f"{mail}/0/6" and "malformed JSON" in dead["error"]
    assert committed_offset(kafka_broker, group, mail) == 11  # committed once the checkpoint covered it
    found = latest_valid(tmp_path / "checkpoints")
    assert found is not None and found[2]["source"] == {"offsets": [[mail, 0, 11]]}


def test_text_events_read_in_pieces_give_what_one_at_a_time_gives(
    tmp_path, kafka_client, kafka_broker, kafka_topic, produce, capsys
):
    """Messages of the bundled spam sample from Kafka, with a malformed record and an unlabelled message among them:
    batches read in pieces on a helper thread (`BatchParser._text_pieces`, the most pieces) predict and learn what
    one record at a time does."""
    with gzip.open(SAMPLE, "rb") as sample:
        lines = sample.read().splitlines()[:90]
    lines[30] = b'{"id": "m1", "text": "unterminated'
    lines[50] = json.dumps({"id": "u1", "text": json.loads(lines[50])["text"]}).encode()  # its label never comes
    topic = kafka_topic(1)
    produce(kafka_broker, topic, lines)
    helper = ThreadPoolExecutor(1)
    outputs = []
    for batch_size, group in ((0, "one-at-a-time"), (4096, "pieces")):
        with pytest.MonkeyPatch.context() as patch:
            if group == "pieces":
                patch.setattr(batches, "helper_thread", lambda name: helper)
                patch.setattr(batches, "TEXT_PIECE_BYTES", 1)
            config = load_config(shipped_configs()["spam"], [f"run.batch_size={batch_size}"])
            kafka = kafka_source_config(kafka_broker, topic, group, kafka_client)
            fields = {key: config["source"][key] for key in ("format", "fields", "labels")}  # the sample's JSON
            config["source"] = {**kafka, **fields, "commit_without_checkpoint": True}
            path = tmp_path / f"{group}.yaml"
            path.write_text(yaml.safe_dump(config), encoding="utf-8")
            summary = _run(path, tmp_path / f"{group}.jsonl", capsys)
        outputs.append(((tmp_path / f"{group}.jsonl").read_text(encoding="utf-8"), summary))
    helper.shutdown()
    (one, one_summary), (pieces, pieces_summary) = outputs
    assert one.count("\n") == 89 and one_summary["learned"] == 88 and one_summary["rejected"] == 1
    assert pieces == one
    same = ("events", "learned", "rejected", "empty_bodies", "accuracy", "roc_auc")
    assert {key: pieces_summary[key] for key in same} == {key: one_summary[key] for key in same}
