"""Users partitioned by key: `run` forwarding events (``output.forward``) and the instances of ``users``.

The reference is one `PersonalPegasos` learning the stream in one process: the instances' offsets, and every score
they write, must equal its own bit for bit, whichever instance holds a user, across a SIGKILL of an instance.
"""

from __future__ import annotations

import gzip
import json
import math
import signal
import subprocess
import time
from collections import Counter
from importlib import resources
from pathlib import Path
from typing import cast

import pytest
import yaml
from kafka import KafkaProducer
from kafka_helpers import GROUP_SETTINGS
from test_kafka_rebalance import BIN

from pegasos_stream import cli
from pegasos_stream.cli.assemble import build_features, build_model
from pegasos_stream.cli.config import ConfigError, config_file, load_config, validate
from pegasos_stream.cli.settings import settings_of
from pegasos_stream.cli.users import connection_properties
from pegasos_stream.kafka.python_client import _message
from pegasos_stream.learners.personal import PersonalPegasos
from pegasos_stream.learners.personal_offset import PersonalOffset
from pegasos_stream.parse.parsing import BadRecord
from pegasos_stream.persist.checkpoint import latest_valid
from pegasos_stream.testing.environments import users_command
from pegasos_stream.users.instance import (
    DecodedOffsets,
    SharedModel,
    UserInstance,
    offset_digest,
    parse_user_event,
)

#: The events of these tests: the shipped personal sample's first ones, its users each split in three.
EVENTS = 180


#: The command of the instances (see `users_command`).
USERS_BIN = users_command(Path(__file__).resolve().parents[1])


def _events(count: int = EVENTS) -> list[dict]:
    with gzip.open(resources.files("pegasos_stream") / "data" / "personal-sample.jsonl.gz", "rt") as lines:
        events = [json.loads(line) for _, line in zip(range(count), lines, strict=False)]
    return [{**event, "user": f"{event['user']}-{i % 3}"} for i, event in enumerate(events)]


def _reference(
    events: list[dict],
) -> tuple[list[tuple[float, int]], dict[str, float], dict[tuple[str, int], str]]:
    """One PersonalPegasos on ``events``: the shared learner's f(x) of each event before it learned it and the
    examples it had learned then, the score of each event (by id) and the digest of each user's offset after each
    of its labels (by user and t)."""
    config = load_config(config_file("personal"))
    model, features = build_model(config), build_features(config)
    shared, scores, digests = [], {}, {}
    for event in events:
        x = features.transform_one(event["text"])
        shared.append((model.shared.decision_function_one(x), model.shared.t))
        scores[event["id"]] = model.decision_function_one(x, event["user"])
        model.learn_one(x, event["label"] == "spam", user=event["user"])
        offset = model.offset(event["user"])
        digests[event["user"], offset.t] = offset_digest(offset)
    return shared, scores, digests


def _forwarded(event: dict, shared: tuple[float, int]) -> bytes:
    record = {"id": event["id"], "user": event["user"], "text": event["text"], "label": event["label"] == "spam"}
    return json.dumps({**record, "shared_score": shared[0], "shared_t": shared[1]}).encode()


def _instance(**kwargs) -> UserInstance:
    config = load_config(config_file("personal"))
    return UserInstance(build_model(config), build_features(config), ("ham", "spam"), **kwargs)


def test_an_instance_learns_each_users_offset_as_one_personal_learner_does():
    """Forwarded events, each user's offset the state of its own: every score and every offset after a label equal
    one PersonalPegasos's, bit for bit."""
    events = _events()
    shared, scores, digests = _reference(events)
    instance, states = _instance(digests=True), {}
    for i, (event, f) in enumerate(zip(events, shared, strict=True)):
        where = f"users[0]@{i}"
        user_event = parse_user_event(_forwarded(event, f), event["user"].encode(), where)
        stored = states.get(event["user"])  # (every other one a copy, as a state read from disk: decoded again)
        stored = bytes(bytearray(stored)) if stored is not None and i % 2 else stored
        output, state = instance.process(user_event, stored)
        assert output["score"] == scores[event["id"]]
        assert output["predicted"] == ("spam" if output["score"] > 0 else "ham")
        assert output["digest"] == digests[event["user"], output["t"]]
        assert state is not None
        states[event["user"]] = state
    assert len(states) == len({event["user"] for event in events}) > 3


def test_decoded_offsets_are_reused_only_for_the_very_bytes_and_within_their_budget():
    offsets = DecodedOffsets(max_bytes=50)  # (an offset of one weight: 34 bytes)
    first, second = PersonalOffset.of(1, {1: 0.5}), PersonalOffset.of(2, {2: 0.25})
    data = first.to_bytes()
    offsets.keep("ann", data, first)
    assert offsets.take("ann", data) is first
    offsets.keep("ann", data, first)
    copy = offsets.take("ann", bytes(bytearray(data)))
    assert copy is not first and copy.weights() == first.weights() and copy.t == first.t
    offsets.keep("ann", data, first)
    offsets.keep("bob", second.to_bytes(), second)  # over 50 bytes together: ann's leaves
    assert offsets.take("ann", data) is not first


def test_mail_without_a_shared_score_is_scored_with_the_newest_shared_model_and_left_unlearned():
    events = _events(40)
    config = load_config(config_file("personal"))
    reference = build_model(config)
    features = build_features(config)
    for event in events:
        reference.learn_one(features.transform_one(event["text"]), event["label"] == "spam", user=event["user"])
    user = events[0]["user"]
    stored = reference.offset(user).to_bytes()
    served = SharedModel(reference.shared, 7)
    instance = _instance(shared=lambda: served)
    mail = json.dumps({"id": "new", "user": user, "text": events[-1]["text"]}).encode()
    output, state = instance.process(parse_user_event(mail, user.encode(), "users[1]@0"), stored)
    x = features.transform_one(events[-1]["text"])
    assert output["score"] == reference.decision_function_one(x, user)
    assert output["model_version"] == 7 and "t" not in output
    assert state is None
    with pytest.raises(BadRecord, match=r"users\[1\]@0: no shared model yet"):
        _instance().process(parse_user_event(mail, user.encode(), "users[1]@0"), stored)


@pytest.mark.parametrize(
    ("value", "key", "reason"),
    [
        (b"{not json", b"ann", "not JSON"),
        (b"[1]", b"ann", "expected a JSON object"),
        (b'{"user": "bob", "text": "hi"}', b"ann", "equal to the record's key"),
        (b'{"user": "ann", "text": "hi"}', None, "equal to the record's key"),
        (b'{"user": "ann"}', b"ann", "either text or x"),
        (b'{"user": "ann", "text": "hi", "x": {"a": 1}}', b"ann", "either text or x"),
        (b'{"user": "ann", "x": {"a": "b"}}', b"ann", "finite numbers"),
        (b'{"user": "ann", "text": 3}', b"ann", "text: expected str"),
        (b'{"user": "ann", "text": "hi", "label": true}', b"ann", "a label without shared_score"),
        (b'{"user": "ann", "text": "hi", "label": "spam", "shared_score": 1}', b"ann", "label: expected bool"),
        (b'{"user": "ann", "text": "hi", "shared_score": "1"}', b"ann", "shared_score: expected a number"),
        (b'{"user": "ann", "text": "hi", "shared_score": 1e999}', b"ann", "a finite number"),
        (b'{"user": "ann", "text": "hi", "shared_score": 1, "shared_t": -1}', b"ann", "shared_t: expected a count"),
        (b'{"user": "ann", "text": "hi", "shared_score": 1, "shared_t": true}', b"ann", "shared_t: expected a count"),
        (b'{"user": "ann", "text": "hi", "shared_score": 1, "shared_t": 2.5}', b"ann", "shared_t: expected int"),
    ],
)
def test_a_bad_users_record_is_refused_naming_where_it_is(value, key, reason):
    with pytest.raises(BadRecord, match=r"^users\[2\]@5: ") as refused:
        parse_user_event(value, key, "users[2]@5")
    assert reason in refused.value.reason


def test_run_forwards_each_event_with_the_shared_learners_score(tmp_path):
    """``output.forward``: the shared learner alone learns, and each event goes out with its f(x) before it learned
    it, its user and its label, keyed by user."""
    events = _events(60)
    source = tmp_path / "events.jsonl"
    source.write_text("".join(json.dumps(event) + "\n" for event in events))
    out = tmp_path / "forwarded.jsonl"
    flags = ["--input", str(source), "--output", str(out), "--set", "output.forward=true"]
    status = cli.main(["run", "--config", "personal", *flags])
    assert status == 0
    forwarded = [json.loads(line) for line in out.read_text().splitlines()]
    shared, _, _ = _reference(events)
    assert [(record["shared_score"], record["shared_t"]) for record in forwarded] == shared
    assert [record["shared_t"] for record in forwarded] == list(range(len(events)))
    assert [(r["id"], r["user"], r["text"], r["label"]) for r in forwarded] == [
        (e["id"], e["user"], e["text"], e["label"] == "spam") for e in events
    ]
    assert _message(forwarded[0])[0] == events[0]["user"].encode()
    assert _message({"id": 3, "score": 1.0})[0] == b"3"


@pytest.mark.parametrize("read", ["file", "stdin"])
def test_an_event_the_shared_learner_refuses_is_forwarded_without_its_label(read, tmp_path):
    """A labelled event whose step the shared learner refuses (values that take its norm to inf) is rejected, and
    goes out scored but without its label: no offset learns what the shared learner refused. One at a time
    (standard input) and in compiled batches (a file of hashed features) alike."""
    config = tmp_path / "personal.yaml"
    model = {"kind": "personal", "shared": {"kind": "linear", "lambda_": 0.01}}
    config.write_text(yaml.safe_dump({"model": model, "features": {"type": "dict", "hash_bits": 10}}))
    lines = [
        {"id": 1, "user": "ann", "x": {"a": 1.0}, "label": 1},
        {"id": 2, "user": "ann", "x": {"a": 1e300, "b": -1e300}, "label": 0},
        {"id": 3, "user": "ann", "x": {"a": 1.0}, "label": 0},
    ]
    events = tmp_path / "events.jsonl"
    events.write_text("".join(json.dumps(line) + "\n" for line in lines))
    flags = ["--config", str(config), "--set", "output.forward=true"]
    done = subprocess.run(
        [BIN, "run", *flags, "--input", str(events) if read == "file" else "-"],
        input=events.read_bytes() if read == "stdin" else None,
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr.decode()
    forwarded = [json.loads(line) for line in done.stdout.decode().splitlines()]
    assert [(f["id"], f.get("label"), f["shared_t"]) for f in forwarded] == [(1, True, 0), (2, None, 1), (3, False, 1)]
    assert "the update would take the norm of the weights to inf" in done.stderr.decode()


def test_a_late_label_is_forwarded_with_its_event_and_the_offsets_learn_it_as_one_personal_learner_does(tmp_path):
    """A label that comes after its event (``{"id", "label"}``): a forwarding run forwards the event again with the
    label and the shared learner's f(x) before it learns it, so that the instances' offsets equal one
    PersonalPegasos's over the same stream, delayed labels included, bit for bit; also when the run stopped between
    an event and its label, and resumed from its checkpoint."""
    stream: list[dict] = []
    labels: list[dict] = []  # the late labels, each after the two events that follow its own
    for i, event in enumerate(_events(90)):
        if i % 3:
            stream.append(event)
        else:  # every third event comes unlabelled
            stream.append({key: value for key, value in event.items() if key != "label"})
            labels.append({"id": event["id"], "label": event["label"]})
        if i % 3 == 2:
            stream.append(labels.pop())
    source = tmp_path / "events.jsonl"
    source.write_text("".join(json.dumps(event) + "\n" for event in stream))
    single = ["run", "--config", "personal", "--input", str(source), "--output", str(tmp_path / "scores.jsonl")]
    assert cli.main([*single, "--set", f"checkpoint.dir={tmp_path / 'ck'}"]) == 0
    reference = cast(PersonalPegasos, latest_valid(tmp_path / "ck")[1]["model"])  # type: ignore[index]
    out = tmp_path / "forwarded.jsonl"
    forward = [*single[:-1], str(out), "--set", "output.forward=true", "--set", f"checkpoint.dir={tmp_path / 'fw'}"]
    assert cli.main([*forward, "--max-events", "49"]) == 0  # stopped with an event's label still to come
    first = out.read_text().splitlines()
    assert cli.main([*forward, "--resume"]) == 0
    lines = out.read_text().splitlines()
    lines = lines if lines[: len(first)] == first else first + lines  # (appended to, or written anew)
    assert "label" not in stream[48] and len(first) == 49  # (the checkpoint held an event waiting for its label)
    forwarded = [json.loads(line) for line in lines]
    late = [record for record in forwarded if record["id"] in {e["id"] for e in stream if "text" not in e}]
    assert [("label" in record) for record in late] == [False, True] * 30  # each late one twice: with its label
    assert set(stream[3]) == {"id", "label"} and stream[3]["id"] == stream[0]["id"]  # (a label two events late)
    instance, states = _instance(), {}
    for i, record in enumerate(forwarded):
        user_event = parse_user_event(json.dumps(record).encode(), record["user"].encode(), f"users[0]@{i}")
        _, state = instance.process(user_event, states.get(record["user"]))
        states[record["user"]] = state if state is not None else states.get(record["user"])
    assert {user: offset_digest(PersonalOffset.from_bytes(state)) for user, state in states.items()} == {
        user: offset_digest(reference.offset(user)) for user in states
    }
    assert sum(PersonalOffset.from_bytes(state).t for state in states.values()) == 90


def test_forwarding_needs_a_binary_learner_and_json_events():
    with pytest.raises(ConfigError, match=r"output\.forward: forwards JSON events, not source\.format 'mbox'"):
        load_config(config_file("spam"), ["output.forward=true", "source.format=mbox", "source.type=stdin"])
    with pytest.raises(ConfigError, match=r"output\.forward: forwards JSON events, not source\.format 'svmlight'"):
        load_config(config_file("spam"), ["output.forward=true", "source.format=svmlight"])
    with pytest.raises(ConfigError, match=r"output\.forward: forwarded events carry a binary"):
        validate({"model": {"kind": "multiclass"}, "output": {"forward": True}})


def test_an_instance_needs_a_personal_configuration(capsys):
    status = cli.main(["users", "--config", "spam", "--input-topic", "a", "--output-topic", "b", "--state-dir", "s"])
    assert status == 2
    assert "users: model.kind: expected personal" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("producer", "refusal"),
    [
        ("message.max.bytes=1000000", "a user's offset (model.max_weights=100000) takes up to 2,404,122 bytes"),
        ("message.max.bytes=lots", "message.max.bytes=lots: expected a number of bytes"),
    ],
)
def test_an_instance_refuses_a_producer_whose_records_cannot_hold_an_offset(producer, refusal, capsys):
    flags = ["--input-topic", "a", "--output-topic", "b", "--state-dir", "s", "--producer", producer]
    assert cli.main(["users", "--config", "personal", *flags]) == 2
    assert refusal in capsys.readouterr().err


def test_an_instance_connects_as_the_kafka_section_says_tls_and_sasl_included():
    sets = ["kafka.security_protocol=SASL_SSL", "kafka.sasl_mechanism=SCRAM-SHA-512"]
    sets += ["kafka.sasl_plain_username=pegasos", "kafka.sasl_plain_password=secret", "kafka.ssl_cafile=ca.pem"]
    connection = settings_of(load_config(config_file("personal"), sets)).kafka
    assert connection_properties(connection) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "pegasos",
        "sasl.password": "secret",
        "ssl.ca.location": "ca.pem",  # (a path of --set: as given, from the working directory)
    }
    assert connection_properties(settings_of(load_config(config_file("personal"), [])).kafka) == {}
    kerberos = settings_of(load_config(config_file("personal"), ["kafka.sasl_kerberos_domain_name=x"])).kafka
    with pytest.raises(ConfigError, match=r"users: kafka\.sasl_kerberos_domain_name: not available"):
        connection_properties(kerberos)


# -- real processes on the test broker ------------------------------------------------------------------------


def _read_outputs(broker: str, topic: str) -> list[dict]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    settings = {"bootstrap.servers": broker, "group.id": f"check-{time.time()}", "enable.auto.commit": False}
    consumer = Consumer({**settings, "isolation.level": "read_committed"})
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        outputs: list[dict] = []
        idle = 0  # polls in a row that found nothing: the committed records are all read
        while idle < 2:
            message = consumer.poll(0.5)
            idle = idle + 1 if message is None else 0
            if message is not None and not message.error():
                outputs.append(json.loads(message.value()))
        return outputs
    finally:
        consumer.close()


def _until(condition, seconds: float = 90.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.5)


def _users_instance(
    broker: str, topics: tuple[str, str], state: Path, group: str, guarantee: str, models: str = ""
) -> subprocess.Popen:
    state.mkdir(parents=True, exist_ok=True)
    flags = ["--config", "personal", "--set", f"kafka.bootstrap_servers={json.dumps(broker)}"]
    flags += ["--input-topic", topics[0], "--output-topic", topics[1], "--state-dir", str(state), "--group", group]
    flags += ["--digests"]
    for name, value in GROUP_SETTINGS.items():  # the Kafka tests' sessions, as librdkafka names them
        flags += ["--consumer", f"{name.replace('_', '.')}={value}"]
    # The test broker (tansu) reports a partition's high watermark as its last batch's first offset + 1: a changelog
    # written in batches of several records then looks behind the offset a state store holds, and Quix Streams'
    # recovery check stops an instance a partition comes back to (InvalidStoreChangelogOffset). One record a batch
    # keeps the watermark true; Kafka's own is always the last offset + 1.
    flags += ["--guarantee", guarantee, "--producer", "batch.num.messages=1"]
    flags += ["--model-topic", models, "--reload-s", "0.5"] if models else []
    with open(state / "err.log", "ab") as log:
        return subprocess.Popen([cast(str, USERS_BIN), "users", *flags], stdout=subprocess.DEVNULL, stderr=log)


@pytest.mark.slow
@pytest.mark.skipif(USERS_BIN is None, reason="no environment with the users extra (Quix Streams): .ci/run makes one")
@pytest.mark.parametrize("guarantee", ["exactly-once", "at-least-once"])
def test_instances_hold_every_users_offset_exactly_across_a_sigkill(guarantee, tmp_path, kafka_broker, kafka_topic):
    """The shared learner's run forwards a stream to a topic of 4 partitions, which two instances share. One is
    SIGKILLed mid-stream and started again with no state of its own: every user's offset ends with each of its
    labels learned once, equal to one PersonalPegasos's, and every score written on the way equals its own; with
    exactly-once, each event's output is committed once."""
    events = _events()
    _, scores, digests = _reference(events)
    labels = Counter(event["user"] for event in events)
    users_topic, scores_topic = kafka_topic(4), kafka_topic(1)
    forward = [BIN, "run", "--config", "personal", "--input", "-", "--set", "output.type=kafka"]
    forward += ["--set", f"output.topic={users_topic}", "--set", "output.forward=true"]
    forward += ["--set", f"kafka.bootstrap_servers={json.dumps(kafka_broker)}"]
    shared = subprocess.Popen(forward, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    topics, group = (users_topic, scores_topic), f"{users_topic}-instances"
    first = _users_instance(kafka_broker, topics, tmp_path / "a", group, guarantee)
    second = _users_instance(kafka_broker, topics, tmp_path / "b", group, guarantee)
    processes = [shared, first, second]
    try:
        # both instances own partitions (an instance makes its state's folder of a partition when it is given it)
        # before any event comes, so that the first one's kill takes partitions away mid-stream
        _until(lambda: all(any((tmp_path / name / group / "default").glob("*/*")) for name in "ab"))
        half = len(events) // 2
        shared.stdin.write(b"".join(json.dumps(event).encode() + b"\n" for event in events[:half]))
        shared.stdin.flush()
        _until(lambda: len({o["id"] for o in _read_outputs(kafka_broker, scores_topic)}) >= half)
        assert any((tmp_path / "a" / group / "default").glob("*/*")), "the first instance owned no partition"
        first.send_signal(signal.SIGKILL)
        first.wait()
        shared.stdin.write(b"".join(json.dumps(event).encode() + b"\n" for event in events[half:]))
        shared.stdin.close()
        again = _users_instance(kafka_broker, topics, tmp_path / "a-again", group, guarantee)
        processes.append(again)

        outputs: list[dict] = []

        def learned_all() -> bool:
            outputs[:] = _read_outputs(kafka_broker, scores_topic)
            last = {o["user"]: o["t"] for o in outputs if "t" in o}
            return all(last.get(user, 0) >= count for user, count in labels.items())

        _until(learned_all, 120)
    finally:
        for process in processes[1:]:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
    assert not [o for o in outputs if "error" in o]
    for output in outputs:  # every score and offset written, the repeated ones too, is the reference's own
        assert output["score"] == scores[output["id"]] and math.isfinite(output["score"])
        assert output["digest"] == digests[output["user"], output["t"]]
    final = {}
    for output in outputs:
        final[output["user"]] = max(final.get(output["user"], 0), output["t"])
    assert final == dict(labels)  # each label learned once: none twice, none lost
    assert {o["id"] for o in outputs} == {event["id"] for event in events}
    if guarantee == "exactly-once":
        assert len(outputs) == len(events)
    assert second.returncode == 0 and processes[-1].returncode == 0


@pytest.mark.slow
@pytest.mark.skipif(USERS_BIN is None, reason="no environment with the users extra (Quix Streams): .ci/run makes one")
def test_an_instance_scores_mail_with_the_shared_model_of_the_model_topic(tmp_path, kafka_broker, kafka_topic):
    """Mail to score (no shared_score) gets the newest model run published, plus the user's offset."""
    events = _events(60)
    users_topic, scores_topic, models = kafka_topic(2), kafka_topic(1), kafka_topic(1)
    source = tmp_path / "events.jsonl"
    source.write_text("".join(json.dumps(event) + "\n" for event in events))
    broker = ["--set", f"kafka.bootstrap_servers={json.dumps(kafka_broker)}"]
    forward = ["--input", str(source), "--set", "output.type=kafka", "--set", f"output.topic={users_topic}"]
    forward += ["--set", "output.forward=true", "--set", f"publish.topic={models}"]
    forward += ["--set", f"checkpoint.dir={json.dumps(str(tmp_path / 'ck'))}"]
    subprocess.run([BIN, "run", "--config", "personal", *broker, *forward], check=True, capture_output=True)
    user, text = events[0]["user"], events[-1]["text"]
    topics = (users_topic, scores_topic)
    instance = _users_instance(kafka_broker, topics, tmp_path / "a", f"{users_topic}-i", "exactly-once", models)
    try:
        _until(lambda: len(_read_outputs(kafka_broker, scores_topic)) >= len(events))
        producer = KafkaProducer(bootstrap_servers=kafka_broker)  # (keyed as run's sink keys: the user's partition)
        producer.send(users_topic, json.dumps({"id": "new", "user": user, "text": text}).encode(), key=user.encode())
        producer.send(users_topic, b"{not json", key=user.encode())
        producer.close(timeout=10)
        outputs: list[dict] = []
        errors: list[dict] = []

        def scored() -> bool:
            outputs[:] = [o for o in _read_outputs(kafka_broker, scores_topic) if o.get("id") == "new"]
            errors[:] = [o for o in _read_outputs(kafka_broker, scores_topic) if "error" in o]
            return bool(outputs and errors)

        _until(scored, 60)
    finally:
        instance.send_signal(signal.SIGTERM)
        assert instance.wait(30) == 0
    config = load_config(config_file("personal"))
    reference, features = build_model(config), build_features(config)
    for event in events:
        reference.learn_one(features.transform_one(event["text"]), event["label"] == "spam", user=event["user"])
    assert outputs[0]["score"] == reference.decision_function_one(features.transform_one(text), user)
    assert outputs[0]["model_version"] >= 1 and "t" not in outputs[0]
    assert errors[0]["position"].startswith(f"{users_topic}[") and "not JSON" in errors[0]["error"]


@pytest.mark.slow
@pytest.mark.skipif(USERS_BIN is None, reason="no environment with the users extra (Quix Streams): .ci/run makes one")
def test_an_offset_larger_than_a_default_kafka_record_is_kept_and_recovered(tmp_path, kafka_broker, kafka_topic):
    """The sample's first 260 events, its three users whole: one offset passes 1,000,000 bytes, librdkafka's
    default record. An instance takes the first 200 and stops; another, with no state of its own, recovers the
    offsets from the changelog and takes the rest: every offset after each label equals one PersonalPegasos's."""
    with gzip.open(resources.files("pegasos_stream") / "data" / "personal-sample.jsonl.gz", "rt") as lines:
        events = [json.loads(line) for _, line in zip(range(260), lines, strict=False)]
    source, forwarded_file = tmp_path / "events.jsonl", tmp_path / "forwarded.jsonl"
    source.write_text("".join(json.dumps(event) + "\n" for event in events))
    forward = ["--input", str(source), "--output", str(forwarded_file), "--set", "output.forward=true"]
    subprocess.run([BIN, "run", "--config", "personal", *forward], check=True, capture_output=True)
    forwarded = forwarded_file.read_bytes().splitlines()
    config = load_config(config_file("personal"))
    model, features = build_model(config), build_features(config)
    digests, largest = {}, 0
    for event in events:
        model.learn_one(features.transform_one(event["text"]), event["label"] == "spam", user=event["user"])
        offset = model.offset(event["user"])
        digests[event["user"], offset.t] = offset_digest(offset)
        largest = max(largest, len(offset.to_bytes()))
    assert largest > 1_000_000
    users_topic, scores_topic = kafka_topic(1), kafka_topic(1)
    topics, group = (users_topic, scores_topic), f"{users_topic}-instances"
    producer = KafkaProducer(bootstrap_servers=kafka_broker)
    for part, state, count in ((forwarded[:200], "a", 200), (forwarded[200:], "b", 260)):
        for record in part:
            producer.send(users_topic, record, key=json.loads(record)["user"].encode())
        producer.flush(timeout=10)
        instance = _users_instance(kafka_broker, topics, tmp_path / state, group, "exactly-once")
        try:
            _until(lambda count=count: len(_read_outputs(kafka_broker, scores_topic)) >= count)
        finally:
            instance.send_signal(signal.SIGTERM)
            assert instance.wait(30) == 0, (tmp_path / state / "err.log").read_text()
    producer.close(timeout=10)
    outputs = _read_outputs(kafka_broker, scores_topic)
    assert len(outputs) == 260
    assert all(output["digest"] == digests[output["user"], output["t"]] for output in outputs)
