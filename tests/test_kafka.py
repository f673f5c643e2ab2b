"""The Kafka sources (of each client) and KafkaSink against a real broker (tansu, see conftest): no mocks.

Every wait is bounded; a consumer-group join takes about 1 s with the tests' settings (see kafka_helpers).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Iterator

import pytest
from kafka import KafkaConsumer, TopicPartition
from kafka_helpers import GROUP_SETTINGS

from pegasos_stream.io.records import Record
from pegasos_stream.kafka import group as group_module
from pegasos_stream.kafka.group import GroupSource
from pegasos_stream.kafka.python_client import KafkaSink, OffsetOutOfRange
from pegasos_stream.parse.parsing import BadRecord, EventParser
from pegasos_stream.testing import kafka_broker as tansu


def _source(
    source_class: type[GroupSource],
    address: str,
    topic: str,
    group: str | None = None,
    consumer: dict | None = None,
    **options: float,
) -> GroupSource:
    group = group or f"group-{uuid.uuid4().hex[:8]}"
    return source_class(address, [topic], group, consumer=consumer or GROUP_SETTINGS, **options)


def _take(items: Iterator[Record | None], count: int, timeout: float = 20.0) -> list[Record]:
    """The next ``count`` records, past any idle ticks."""
    records: list[Record] = []
    deadline = time.monotonic() + timeout
    while len(records) < count:
        assert time.monotonic() < deadline, f"only {len(records)} of {count} records within {timeout:g} s"
        item = next(items)
        if item is not None:
            records.append(item)
    return records


def _idle(items: Iterator[Record | None], ticks: int, timeout: float = 10.0) -> list[Record]:
    """Records met while waiting for ``ticks`` idle ticks in a row."""
    records: list[Record] = []
    quiet = 0
    deadline = time.monotonic() + timeout
    while quiet < ticks:
        assert time.monotonic() < deadline, f"no {ticks} idle ticks in a row within {timeout:g} s"
        item = next(items)
        if item is None:
            quiet += 1
        else:
            records.append(item)
            quiet = 0
    return records


def _events(partition: int, count: int) -> list[bytes | None]:
    """JSON events, with malformed bytes and a tombstone among them."""
    values: list[bytes | None] = [
        json.dumps({"id": f"p{partition}-{i}", "x": {"f": i}, "label": i % 2 == 0}).encode() for i in range(count)
    ]
    values[3] = b'{"id": "broken", "x": '
    values[5] = b"\xff\xfe not utf-8"
    values[7] = None
    return values


def test_every_message_once_in_order_then_a_second_consumer_continues(source_class, kafka_broker, kafka_topic, produce):
    topic = kafka_topic(2)
    sent = {0: _events(0, 12), 1: _events(1, 9)}
    for partition, values in sent.items():
        produce(kafka_broker, topic, values, partition=partition)
    group = f"group-{uuid.uuid4().hex[:8]}"

    first = _source(source_class, kafka_broker, topic, group)
    before = _take(iter(first), 13)  # stops in the middle of a poll's batch
    first.commit()
    first.close()
    more = [json.dumps({"id": f"late-{i}", "x": {"f": i}}).encode() for i in range(3)]
    produce(kafka_broker, topic, more, partition=1)
    sent[1] += more

    second = _source(source_class, kafka_broker, topic, group)
    items = iter(second)
    after = _take(items, 12 + 9 + 3 - 13)
    assert _idle(items, 2) == []
    assert second.lag() == 0
    second.close()

    records = before + after
    cursors = [record.cursor for record in records]
    assert len(set(cursors)) == len(cursors), "a message was yielded twice"
    for partition, values in sent.items():
        mine = [record for record in records if record.cursor[1] == partition]
        assert [record.cursor for record in mine] == [(topic, partition, offset) for offset in range(len(values))]
        assert [record.position for record in mine] == [f"{topic}/{partition}/{o}" for o in range(len(values))]
        assert [record.value for record in mine] == [value or b"" for value in values]

    parser = EventParser()
    assert parser.parse(records[0]).id in ("p0-0", "p1-0")
    malformed = next(record for record in records if record.cursor[1:] == (0, 5))
    with pytest.raises(BadRecord, match=f"^{topic}/0/5: invalid UTF-8"):
        parser.parse(malformed)


def test_seek_resumes_from_stored_offsets(source_class, kafka_broker, kafka_topic, produce):
    topic = kafka_topic(2)
    for partition in (0, 1):
        produce(kafka_broker, topic, [f"{partition}:{i}".encode() for i in range(10)], partition=partition)
    source = _source(source_class, kafka_broker, topic)
    source.seek({(topic, 0): 7, (topic, 1): 3})  # before the assignment: applied when it comes
    items = iter(source)
    records = _take(items, 3 + 7)
    assert _idle(items, 1) == []
    source.close()
    assert sorted(record.cursor for record in records) == [(topic, 0, o) for o in range(7, 10)] + [
        (topic, 1, o) for o in range(3, 10)
    ]


def test_lag_counts_what_is_left_and_reaches_zero(source_class, kafka_broker, kafka_topic, produce):
    topic = kafka_topic(1)
    produce(kafka_broker, topic, [b"{}"] * 20)
    source = _source(source_class, kafka_broker, topic)
    items = iter(source)
    lags = []
    for _ in range(20):
        _take(items, 1)
        lags.append(source.lag())
    assert all(isinstance(lag, int) and lag >= 0 for lag in lags)
    assert lags == list(range(19, -1, -1))
    assert _idle(items, 1) == []
    assert source.lag() == 0
    source.close()


def test_a_rebalance_calls_on_revoke_and_commits_what_was_yielded(source_class, kafka_broker, kafka_topic, produce):
    topic = kafka_topic(2)
    for partition in (0, 1):
        produce(kafka_broker, topic, [b"old"] * 5, partition=partition)
    group = f"group-{uuid.uuid4().hex[:8]}"
    first = _source(source_class, kafka_broker, topic, group)
    revoked: list[set[tuple[str, int]]] = []

    def on_revoke(partitions: set[tuple[str, int]]) -> None:
        revoked.append(partitions)
        first.commit()  # allowed in the hook, though the source commits after it anyway

    first.on_revoke = on_revoke
    first_items = iter(first)
    _take(first_items, 10)

    second = _source(source_class, kafka_broker, topic, group)
    second_items = iter(second)
    seen: list[Record] = []
    deadline = time.monotonic() + 25
    while not (revoked and first.lag() is not None and second.lag() is not None):
        assert time.monotonic() < deadline, "the group did not rebalance"
        seen += [item for item in (next(first_items), next(second_items)) if item is not None]
    assert revoked and revoked[0] == {(topic, 0), (topic, 1)}
    assert seen == [], "records committed on revoke were delivered again"

    for partition in (0, 1):
        produce(kafka_broker, topic, [b"new"] * 2, partition=partition)
    deadline = time.monotonic() + 15
    while len(seen) < 4:
        assert time.monotonic() < deadline, f"only {len(seen)} of 4 new records"
        seen += [item for item in (next(first_items), next(second_items)) if item is not None]
    assert sorted(record.cursor for record in seen) == [(topic, p, o) for p in (0, 1) for o in (5, 6)]
    first.close()
    second.close()


def _read_records(source: GroupSource, n: int, count: int, timeout: float = 20.0) -> list[Record]:
    """Batches of up to ``n`` read and claimed until ``count`` records came (no more)."""
    records: list[Record] = []
    deadline = time.monotonic() + timeout
    while len(records) < count:
        assert time.monotonic() < deadline, f"only {len(records)} of {count} records within {timeout:g} s"
        size = min(n, count - len(records))
        batch = source.read(size)
        assert len(batch) <= size
        claimed = source.claim(batch)
        records += [claimed[i] for i in range(len(claimed))]
    return records


def test_batches_claim_offsets_and_drop_what_a_revocation_overtook(source_class, kafka_broker, kafka_topic, produce):
    topic = kafka_topic(2)
    for partition in (0, 1):
        produce(kafka_broker, topic, [b"%d:%d" % (partition, i) for i in range(30)], partition=partition)
    source = _source(source_class, kafka_broker, topic)
    records = _read_records(source, 7, 40)
    for partition in (0, 1):
        mine = [record.cursor[2] for record in records if record.cursor[1] == partition]
        assert mine == list(range(len(mine)))  # offset order, nothing skipped
    offsets = {(t, p): o for t, p, o in source.position()["offsets"]}
    assert sum(offsets.values()) == 40

    # A rebalance (or a seek) between a read and its claim: the records read are not claimed, the
    # position does not move, and the partitions, still assigned, give those records again.
    batch = source.read(5)
    assert len(batch) == 5
    source._offsets.invalidate({(topic, 0), (topic, 1)})
    assert len(source.claim(batch)) == 0
    assert {(t, p): o for t, p, o in source.position()["offsets"]} == offsets
    rest = _read_records(source, 100, 20)
    assert _idle(iter(source), 1) == []
    source.close()
    everything = sorted(record.cursor for record in records + rest)
    assert everything == [(topic, p, o) for p in (0, 1) for o in range(30)]


def test_sink_round_trips_json_to_a_topic(kafka_broker, kafka_topic):
    topic = kafka_topic(1)
    predictions = [
        {"id": 1, "score": 0.25, "prediction": False},
        {"id": "mail-7", "score": 1.5, "prediction": True},
        {"score": -0.5, "prediction": False},
    ]
    sink = KafkaSink(kafka_broker, topic)
    for prediction in predictions:
        sink.emit(prediction)
    sink.flush()
    sink.close()

    consumer = KafkaConsumer(bootstrap_servers=kafka_broker, enable_auto_commit=False)
    partition = TopicPartition(topic, 0)
    consumer.assign([partition])
    consumer.seek(partition, 0)
    messages = []
    deadline = time.monotonic() + 10
    while len(messages) < len(predictions) and time.monotonic() < deadline:
        for batch in consumer.poll(timeout_ms=500).values():
            messages += batch
    consumer.close()
    assert [json.loads(message.value) for message in messages] == predictions
    assert [message.key for message in messages] == [b"1", b"mail-7", None]


class _RequestClock:
    """The clock of ``GroupSource.commit``'s deadline (its module's ``time``), moved only by the seconds each commit
    request is given, as if the request took all of them, and by the commit's pauses between attempts."""

    def __init__(self) -> None:
        self.now = 0.0
        self.given: list[float] = []  # the timeout of each request

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_a_broker_outage_gives_idle_ticks_then_recovers(
    source_class, own_kafka_broker, create_topic, produce, caplog, monkeypatch
):
    caplog.set_level(logging.INFO, logger=source_class.__module__)
    broker = own_kafka_broker
    create_topic(broker.address, "events")
    produce(broker.address, "events", [b"before-%d" % i for i in range(5)])
    # 6 s sessions: the member outlives the outage's idle ticks and commit, so that its partition is still its own
    # to commit; commits of 1 s (5 s by default), which the commit in the outage waits out
    source = _source(source_class, broker.address, "events", consumer=tansu.GROUP_SETTINGS, commit_timeout=1.0)
    items = iter(source)
    assert [record.value for record in _take(items, 5)] == [b"before-%d" % i for i in range(5)]

    broker.stop()
    assert _idle(items, 4) == []
    clock, request = _RequestClock(), source._commit_request

    def timed(offsets, timeout: float) -> None:
        clock.given.append(timeout)
        clock.now += timeout
        return request(offsets, timeout)

    with monkeypatch.context() as patched:
        patched.setattr(group_module, "time", clock)
        patched.setattr(source, "_commit_request", timed)
        source.commit()  # the 5 records yielded are still to commit: it fails, boundedly
    assert 1 <= len(clock.given) <= source._commit_attempts and clock.now <= source._commit_timeout, clock.given
    assert "is unreachable" in caplog.text
    assert "could not commit offsets events/0:5" in caplog.text
    caplog.clear()

    broker.start()  # same port, empty memory storage
    create_topic(broker.address, "events")
    produce(broker.address, "events", [b"after-%d" % i for i in range(3)])
    after = _take(items, 3, timeout=25)
    assert [record.value for record in after] == [b"after-0", b"after-1", b"after-2"]
    assert [record.position for record in after] == ["events/0/0", "events/0/1", "events/0/2"]
    assert "is reachable again" in caplog.text
    source.close()


def test_an_offset_beyond_a_partition_that_lost_its_data_stops_or_restarts_it(
    source_class, own_kafka_broker, create_topic, produce, caplog
):
    broker = own_kafka_broker
    create_topic(broker.address, "events")
    produce(broker.address, "events", [b"old-%d" % i for i in range(10)])
    source = _source(source_class, broker.address, "events")
    _take(iter(source), 10)
    stored = source.position()
    assert stored == {"offsets": [["events", 0, 10]]}
    source.close()

    broker.stop()
    broker.start()  # the broker lost the topic: it comes back with fewer records
    create_topic(broker.address, "events")
    produce(broker.address, "events", [b"new-%d" % i for i in range(4)])
    offsets = {(topic, partition): offset for topic, partition, offset in stored["offsets"]}

    stopping = source_class(broker.address, ["events"], "stop-group", consumer=GROUP_SETTINGS)
    stopping.seek(offsets)
    with pytest.raises(OffsetOutOfRange, match=r"offset 10 .* events/0/10 .* \(offsets 0 to 4\)"):
        _read_records(stopping, 10, 1)
    assert stopping.position() == stored  # the checkpoint still says where it stood
    assert stopping._offsets.uncommitted() == {}  # and the group is not told to go there
    stopping.close()

    caplog.set_level(logging.WARNING, logger=source_class.__module__)
    restarting = source_class(
        broker.address, ["events"], "restart-group", consumer=GROUP_SETTINGS, on_offset_out_of_range="earliest"
    )
    restarting.seek(offsets)
    records = _take(iter(restarting), 4)
    assert [record.value for record in records] == [b"new-%d" % i for i in range(4)]
    assert "outside its partition (offsets 0 to 4); reading it from its beginning" in caplog.text
    assert restarting.position() == {"offsets": [["events", 0, 4]]}
    restarting.close()


def test_settings_the_source_owns_are_refused(source_class):
    with pytest.raises(ValueError, match="enable_auto_commit"):
        source_class("127.0.0.1:9", ["t"], "g", consumer={"enable_auto_commit": True})
    with pytest.raises(ValueError, match="start"):
        source_class("127.0.0.1:9", ["t"], "g", start="middle")
    with pytest.raises(ValueError, match="on_offset_out_of_range"):
        source_class("127.0.0.1:9", ["t"], "g", on_offset_out_of_range="latest")
