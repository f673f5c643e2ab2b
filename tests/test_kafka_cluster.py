"""Cluster learners against a real broker (tansu, see conftest): `run` with a ``cluster`` section.

Each event of these streams is an svmlight line with a column of its own, which only it has: every event is a
margin violation and leaves its own weight, so the cluster's model says which events it learned, and how often
(its step count against its weights).
"""

from __future__ import annotations

import hashlib
import json
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest
import yaml
from http_helpers import http_json
from kafka import KafkaProducer
from kafka_helpers import kafka_source_config
from test_kafka_rebalance import BIN
from test_serve import Serve

from pegasos_stream.distribute.cluster import state_of_snapshot
from pegasos_stream.distribute.publishing import ModelTopicReader
from pegasos_stream.kafka.delta_topic import DeltaTopic
from pegasos_stream.persist.checkpoint import latest_valid, model_digest, read_checkpoint

COLUMNS = 1 << 14
WAIT = 60


def _line(i: int) -> bytes:
    """Event ``i``: a label, and a column of its own (so its margin is 0 when it comes: a violation)."""
    return b"%s %d:1" % (b"+1" if i % 3 else b"-1", i + 1)


def _job(directory: Path, broker: str, topic: str, group: str, client: str, **sections) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    config = {
        "model": {"kind": "linear", "lambda_": 0.01, "n_features": COLUMNS},
        "source": {**kafka_source_config(broker, topic, group, client), "format": "svmlight"},
        "output": {"type": "file", "path": str(directory / "out.jsonl")},
        "evaluation": {"stats_every_seconds": 60},
        "kafka": {"bootstrap_servers": broker},
        **sections,
    }
    path = directory / "job.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def _start(job: Path) -> subprocess.Popen:
    with open(job.parent / "run.err", "ab") as log:
        return subprocess.Popen([BIN, "run", "--config", str(job)], stdout=subprocess.DEVNULL, stderr=log)


def _summary(job: Path) -> dict:
    """The summary line a run writes last on standard error."""
    return json.loads((job.parent / "run.err").read_text().strip().splitlines()[-1])


def _newest_snapshot(broker: str, topic: str):
    reader = ModelTopicReader(broker, topic)
    try:
        newest, refused = reader.read()
    finally:
        reader.close()
    assert newest is not None and not refused
    return state_of_snapshot(newest.data, topic)[0]


@pytest.mark.parametrize("merge", ["sequential"])  # (additive: tests/test_cluster.py, in one process)
def test_one_cluster_learner_learns_the_model_of_one_run(
    merge, tmp_path, kafka_client, kafka_broker, kafka_topic, produce
):
    """N = 1: the cluster's model, published and held by the learner, is the model `run` learns on its own."""
    topic = kafka_topic(1)
    produce(kafka_broker, topic, [_line(i) for i in range(700)])
    alone = _job(
        tmp_path / "alone",
        kafka_broker,
        topic,
        f"alone-{uuid.uuid4().hex[:8]}",
        kafka_client,
        checkpoint={"dir": str(tmp_path / "alone" / "ck"), "every_events": 100},
        run={"stop_when_idle": 2},
    )
    models = f"models-{uuid.uuid4().hex[:8]}"
    clustered = _job(
        tmp_path / "cluster",
        kafka_broker,
        topic,
        f"cluster-{uuid.uuid4().hex[:8]}",
        kafka_client,
        cluster={
            "delta_topic": f"deltas-{uuid.uuid4().hex[:8]}",
            "merge": merge,
            "sync_every_events": 64,
            "sync_every_ms": 200,
            "max_record_bytes": 1024,  # deltas of several chunks
        },
        publish={"topic": models},
        run={"stop_when_idle": 2},
    )
    started = [(job, _start(job)) for job in (alone, clustered)]  # at once: groups of their own, nothing shared
    for job, process in started:
        assert process.wait(timeout=WAIT) == 0, (job.parent / "run.err").read_text()[-3000:]

    found = latest_valid(tmp_path / "alone" / "ck")
    assert found is not None
    expected = read_checkpoint(found[0])[0]["model"]
    summary = _summary(clustered)["cluster"]
    assert summary["t"] == expected.t == 700
    assert summary["model_sha256"] == model_digest(expected)
    assert summary["deltas_sent"] == summary["deltas_folded"] > 1 and summary["deltas_refused"] == 0
    assert model_digest(_newest_snapshot(kafka_broker, models).model) == model_digest(expected)


def test_a_learner_resumes_from_the_cluster_snapshot_and_delta_log(tmp_path, kafka_broker, kafka_topic, produce):
    """A learner that starts again takes the newest snapshot up and folds the deltas after it; events already
    learned are not read again."""
    topic = kafka_topic(2)
    names = {
        "group": f"g-{uuid.uuid4().hex[:8]}",
        "deltas": f"d-{uuid.uuid4().hex[:8]}",
        "models": f"m-{uuid.uuid4().hex[:8]}",
    }
    job = _job(
        tmp_path / "a",
        kafka_broker,
        topic,
        names["group"],
        "kafka-python",
        cluster={"delta_topic": names["deltas"], "sync_every_events": 50, "sync_every_ms": 200},
        publish={"topic": names["models"], "every_events": 120},
        run={"stop_when_idle": 2},
    )
    for part in range(2):
        for p in range(2):
            produce(
                kafka_broker,
                topic,
                [_line(i) for i in range(part * 1000 + p * 300, part * 1000 + p * 300 + 250)],
                partition=p,
            )
        assert _start(job).wait(timeout=WAIT) == 0, (job.parent / "run.err").read_text()[-3000:]
        summary = _summary(job)
        assert summary["cluster"]["t"] == 500 * (part + 1)
        assert summary["events"] == 500  # the second run reads only the new events
    cluster = _newest_snapshot(kafka_broker, names["models"])
    assert cluster.model.t == 1000 and model_digest(cluster.model) == summary["cluster"]["model_sha256"]
    learned = {column - 1 for column in cluster.model.weights} - {-1}
    assert learned == {part * 1000 + p * 300 + i for part in range(2) for p in range(2) for i in range(250)}
    # a replica takes the snapshot up with its own input (the configuration stored is the job's, not the learner's)
    replica = Serve(
        "--model-topic", names["models"], "--set", f"kafka.bootstrap_servers={kafka_broker}", "--input", "-",
        "--output", "-",
    )  # fmt: skip
    try:
        assert f"serving model version {cluster.folded} from model topic" in replica.wait_for("serving model version")
    finally:
        replica.kill()


@pytest.mark.slow
@pytest.mark.parametrize("merge", ["sequential"])  # the default; what is learned once does not depend on the merge
def test_two_learners_and_two_replicas_agree_through_a_sigkill_and_a_restart(
    merge, tmp_path, kafka_broker, kafka_topic, produce
):
    """Two learners on a 4-partition topic, one of them publishing, two `serve` replicas following the model
    topic. Learner "b" is SIGKILLed mid-stream and starts again; a replica is SIGKILLed and starts again. Once the
    stream drains, both learners, the model topic and both replicas hold one model, whose step count is the number
    of events and whose weights name each event once."""
    topic = kafka_topic(4)
    group, deltas, models = (f"{kind}-{uuid.uuid4().hex[:8]}" for kind in ("g", "d", "m"))
    events: list[int] = []
    produced = threading.Event()

    def producer() -> None:
        for wave in range(24):
            for p in range(4):
                batch = [wave * 400 + p * 100 + i for i in range(60)]
                produce(kafka_broker, topic, [_line(i) for i in batch], partition=p)
                events.extend(batch)
            time.sleep(0.6)
        produced.set()

    cluster = {"delta_topic": deltas, "merge": merge, "sync_every_events": 100, "sync_every_ms": 300}
    jobs = {
        "a": _job(
            tmp_path / "a",
            kafka_broker,
            topic,
            group,
            "kafka-python",
            cluster=cluster,
            publish={"topic": models, "every_seconds": 1},
            run={"stop_when_idle": 5},
        ),
        "b": _job(
            tmp_path / "b", kafka_broker, topic, group, "kafka-python", cluster=cluster, run={"stop_when_idle": 5}
        ),
    }
    connection = tmp_path / "connection.yaml"
    connection.write_text(yaml.safe_dump({"kafka": {"bootstrap_servers": kafka_broker}}))

    def replica() -> Serve:
        return Serve("--model-topic", models, "--config", str(connection), "--http", "127.0.0.1:0", "--reload-s", "0.2")

    replicas = [replica(), replica()]
    runs = {name: _start(job) for name, job in jobs.items()}
    writer = threading.Thread(target=producer, daemon=True)
    writer.start()
    try:
        output_b = tmp_path / "b" / "out.jsonl"  # (flushed at each sync)
        deadline = time.monotonic() + WAIT
        while not (output_b.exists() and output_b.stat().st_size > 0):  # until "b" has learned and synced
            assert runs["b"].poll() is None and time.monotonic() < deadline, (tmp_path / "b" / "run.err").read_text()
            time.sleep(0.2)
        runs["b"].send_signal(signal.SIGKILL)  # its steps since its last sync are lost with it, and learned again
        runs["b"].wait(timeout=10)
        replicas[1].kill()
        runs["b"] = _start(jobs["b"])
        replicas[1] = replica()
        assert produced.wait(timeout=90)
        for run in runs.values():
            assert run.wait(timeout=90) == 0
        urls = [server.wait_for("serving predictions on ").split(" on ")[1].split()[0] for server in replicas]
        published = _newest_snapshot(kafka_broker, models)
        healths = []
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            healths = [http_json(f"{url}/health")[1] for url in urls]
            if all(h.get("model_t") == published.model.t for h in healths):
                break
            time.sleep(0.3)
    finally:
        for run in runs.values():
            if run.poll() is None:
                run.kill()
        for server in replicas:
            server.kill()

    summaries = {name: _summary(job)["cluster"] for name, job in jobs.items()}
    digest = model_digest(published.model)
    assert {s["model_sha256"] for s in summaries.values()} == {digest}
    assert {h["model_sha256"] for h in healths} == {digest}
    assert published.model.t == len(events) == 24 * 4 * 60
    assert {column - 1 for column in published.model.weights} - {-1} == set(events)
    print(summaries)


def test_the_delta_topic_gives_deltas_whole_or_says_why_not(kafka_broker):
    """Deltas go out in chunks and come back whole; chunks without their end record (a learner killed while
    sending) are passed over, and an end record whose chunks are missing or do not match is refused by name."""
    topic = f"deltas-{uuid.uuid4().hex[:8]}"
    writer = DeltaTopic(kafka_broker, topic, max_record_bytes=1024)
    try:
        first, second = bytes(range(256)) * 20, b"second delta" * 300
        writer.send(first)
        chunks = [(f"dead/chunk/{i:06d}".encode(), b"x" * 10) for i in range(2)]  # no end record: never comes
        end = json.dumps({"n_chunks": 1, "bytes": 3, "sha256": hashlib.sha256(b"abc").hexdigest()}).encode()
        records = [
            *chunks,
            (b"gap/end", end),  # its one chunk is missing
            (b"bent/chunk/000000", b"abd"),
            (b"bent/end", end),  # its chunk does not match its digest
        ]
        producer = KafkaProducer(bootstrap_servers=kafka_broker)
        for key, value in records:
            producer.send(topic, value, key=key, partition=0).get(timeout=10)
        producer.close()
        writer.send(second)
        got = list(writer.read())
    finally:
        writer.close()
    assert [data for _, data in got if isinstance(data, bytes)] == [first, second]
    refused = [str(data) for _, data in got if isinstance(data, ValueError)]
    assert len(refused) == 2
    assert "delta gap" in refused[0] and "1 of its 1 chunks are missing" in refused[0]
    assert "delta bent" in refused[1] and "do not match its end record" in refused[1]
    first_chunks = -(-len(first) // 1024)
    # a learner starting over after any of the later deltas would read again from the dead delta's first chunk
    assert [offset for offset, _ in got] == [first_chunks + 1] + [first_chunks + 1] * 3
    again = DeltaTopic(kafka_broker, topic, offset=got[0][0])
    try:
        assert [data for _, data in again.read() if isinstance(data, bytes)] == [second]
    finally:
        again.close()
