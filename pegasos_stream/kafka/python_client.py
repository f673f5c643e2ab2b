"""Kafka with kafka-python: a consumer-group source that commits exactly what was processed, and a JSON sink.

Values stay bytes (no deserializer): the runner parses them, so one malformed record is a
rejected record, never a partition stuck on a deserializer error. Offsets are committed by hand
(auto-commit is off) and every call that talks to the broker has a bounded wait, so an unreachable
broker gives idle ticks and logged warnings instead of exceptions and 30 s stalls; a client whose
broker does not answer when it starts is a `BrokerUnreachable` within ``BOOTSTRAP_TIMEOUT_MS``. What is read,
claimed, committed and sought is decided by ``group.GroupSource`` (over an ``OffsetBook``); the
source does the talking.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kafka import AsyncConsumerRebalanceListener, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaError, KafkaTimeoutError
from kafka.structs import OffsetAndMetadata

from ..io.sinks import SinkError, json_line, shortened
from .group import (
    BOOTSTRAP_TIMEOUT_MS,
    CONSUMER_DEFAULTS,
    BrokerUnreachable,
    GroupSource,
    OffsetOutOfRange,
    describe,
)
from .offsets import Fetched, Partition

__all__ = [
    "CONSUMER_DEFAULTS",
    "PRODUCER_DEFAULTS",
    "BrokerUnreachable",
    "KafkaSink",
    "KafkaSource",
    "OffsetOutOfRange",
    "TopicAppender",
    "describe_kafka_error",
    "started_client",
]

#: KafkaProducer settings that ``producer`` may override (see ``CONSUMER_DEFAULTS``).
PRODUCER_DEFAULTS: dict[str, object] = {"reconnect_backoff_max_ms": 1000, "bootstrap_timeout_ms": BOOTSTRAP_TIMEOUT_MS}
#: Room for a record's framing in a produce request (the batch header and the record's lengths), besides its key
#: and value, within the producer's ``max_request_size``.
RECORD_FRAMING = 512

log = logging.getLogger(__name__)


def started_client(client: Callable[..., Any], settings: Mapping[str, Any]) -> Any:
    """``client(**settings)`` (a KafkaConsumer or KafkaProducer), or a BrokerUnreachable when no
    bootstrap server answers in time."""
    try:
        return client(**settings)
    except KafkaTimeoutError:
        raise BrokerUnreachable(settings["bootstrap_servers"], settings["bootstrap_timeout_ms"]) from None


def describe_kafka_error(error: BaseException | None) -> str:
    """An error of kafka-python in a few words."""
    return describe(error, (KafkaTimeoutError,))


class KafkaSource(GroupSource):
    """Records from Kafka topics, read in a consumer group by kafka-python (see ``GroupSource``).

    ``consumer`` holds further KafkaConsumer settings. The rebalance callbacks run on the
    consumer's IO thread, while ``read()`` waits for its poll; a member that hears of a rebalance
    polls before handing out more of what it fetched.
    """

    _errors = (KafkaError,)
    _timeouts = (KafkaTimeoutError,)

    def _start(self, servers: str | Sequence[str], group_id: str, start: str, settings: dict[str, object]) -> None:
        self._consumer = started_client(
            KafkaConsumer,
            {
                **settings,
                "bootstrap_servers": servers,
                "group_id": group_id,
                "auto_offset_reset": start,
                "enable_auto_commit": False,
                "value_deserializer": None,
            },
        )
        _keep_joins_across_polls(self._consumer._coordinator)
        self._consumer.subscribe(self.topics, listener=_Listener(self))

    def _fetch(self, timeout_ms: int, limit: int, generations: Mapping[Partition, int]) -> list[Fetched]:
        try:
            batches = self._consumer.poll(timeout_ms=timeout_ms)
        except KafkaError as error:
            if not error.retriable:
                raise
            log.warning("poll failed (%s); retrying", self._describe(error))
            batches = {}
        fetched = []
        for tp, messages in batches.items():
            if messages:
                partition = Partition(*tp)
                values = [m.value or b"" for m in messages]
                fetched.append(Fetched(partition, values, [m.offset for m in messages], generations.get(partition, 0)))
        return fetched

    def _seek_to(self, offsets: Mapping[Partition, int]) -> None:
        for partition, offset in offsets.items():
            self._consumer.seek(TopicPartition(*partition), offset)

    def _seek_to_beginning(self, partitions: set[Partition]) -> None:
        self._consumer.seek_to_beginning(*(TopicPartition(*p) for p in partitions))

    def _commit_request(self, offsets: Mapping[Partition, int], timeout: float) -> None:
        self._consumer.commit(_request(offsets), timeout_ms=int(timeout * 1000))

    def _assignment(self) -> set[Partition]:
        return {Partition(*tp) for tp in self._consumer.assignment()}

    def _end(self, partition: Partition) -> int | None:
        return self._consumer.highwater(TopicPartition(*partition))

    def _beginning(self, partition: Partition) -> int:
        tp = TopicPartition(*partition)
        return self._consumer.beginning_offsets([tp], timeout_ms=self._poll_ms)[tp]

    def _fetch_position(self, partition: Partition) -> int | None:
        try:
            return self._consumer.position(TopicPartition(*partition), timeout_ms=0)
        except KafkaError:
            return None

    def _connected(self) -> bool | None:
        """Whether the consumer has a broker connection (its metrics take a while to gather)."""
        count = (self._consumer.metrics() or {}).get("consumer-metrics", {}).get("connection-count")
        return None if count is None else count > 0

    def _close_client(self) -> None:
        self._consumer.close(autocommit=False, timeout_ms=int(self._commit_timeout * 1000))

    def _rebalance_pending(self) -> bool:
        """Whether the group asked this member to rejoin (its heartbeat heard of a rebalance, or
        that it was evicted). The member then polls before handing out more of what it fetched:
        the poll revokes its partitions and rejoins, instead of processing records that the group
        may give to another member if this one is late to rejoin."""
        return bool(self._consumer._coordinator.need_rejoin())

    async def _assigned(self, partitions: set[Partition]) -> None:
        """Note partitions assigned and make the seeks waiting for them, once the group's committed
        offsets of those with a stored offset are known (``GroupSource._give_way``)."""
        self._announce(partitions)
        stored = self._offsets.pending_seeks(partitions)
        if stored:
            try:
                answer = await self._consumer._coordinator.fetch_committed_offsets_async(
                    [TopicPartition(*p) for p in stored], timeout_ms=int(self._commit_timeout * 1000)
                )
            except KafkaError as error:
                self._unknown_committed(stored, error)
                return
            self._give_way(
                stored, {Partition(*tp): None if meta is None else meta.offset for tp, meta in answer.items()}
            )
        self._seek(self._offsets.assign(partitions))

    async def _revoked_async(self, partitions: set[Partition], lost: bool) -> None:
        """A revocation (``GroupSource._revoking``), its commit awaited: the consumer sends its request to
        rejoin the group only after this returns, so the commit still carries the current generation."""
        offsets = self._revoking(partitions, lost)
        if offsets is not None:
            self._revoked_done(partitions, offsets, await self._commit_revoked_async(offsets) if offsets else None)

    async def _commit_revoked_async(self, offsets: Mapping[Partition, int]) -> KafkaError | None:
        """``GroupSource._commit_revoked``, on the consumer's IO thread."""
        try:
            await self._consumer.commit_async(_request(offsets))
        except KafkaError as error:
            return error
        return None


class _Listener(AsyncConsumerRebalanceListener):
    """Routes the consumer's rebalance callbacks to its KafkaSource. They are coroutines, so that
    the revocation can wait for its commit before the consumer rejoins the group."""

    def __init__(self, source: KafkaSource) -> None:
        self.source = source

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await self.source._revoked_async({Partition(*tp) for tp in revoked}, lost=False)

    async def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        await self.source._revoked_async({Partition(*tp) for tp in lost}, lost=True)

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        await self.source._assigned({Partition(*tp) for tp in assigned})


def _keep_joins_across_polls(coordinator: Any) -> None:
    """Make the consumer take the assignment of a group join that completed between two of its polls.

    kafka-python (3.0) keeps a join in flight across polls that time out, but when the join completes while
    no poll waits for it, the next poll sends another JoinGroup and drops the assignment the first one got.
    That second join is a rebalance of its own (the group leader's join starts one). A broker that forms a
    generation without waiting for every member (tansu, or any broker once a member is late) then gives a
    partition to another member before its owner has revoked it and committed what it processed: the records
    since its last commit are learned twice. Here the next join attempt takes the assignment the completed
    one got, unless the member's generation changed since (it was reset by a failed request).
    """
    join = coordinator._do_join_and_sync_async
    complete = coordinator._on_join_complete_async
    untaken: list[tuple[object, bytes]] = []  # a completed join's generation and assignment, until taken

    async def join_and_sync() -> bytes:
        if untaken and untaken[0][0] is coordinator._generation:
            return untaken.pop()[1]
        untaken.clear()
        assignment = await join()
        untaken.append((coordinator._generation, assignment))
        return assignment

    async def join_complete(*args: object) -> None:
        untaken.clear()
        await complete(*args)

    coordinator._do_join_and_sync_async = join_and_sync
    coordinator._on_join_complete_async = join_complete


def _request(offsets: Mapping[Partition, int]) -> dict[TopicPartition, OffsetAndMetadata]:
    return {TopicPartition(*p): OffsetAndMetadata(offset, "", -1) for p, offset in offsets.items()}


class KafkaSink:
    """One JSON message per object, keyed by its ``user``, else its ``id``, when it has one (`_message`). An object
    whose message would be over the producer's ``max_request_size`` goes in its `shortened` form. A message that
    cannot be sent, or that the broker has not acknowledged by the end of a ``flush`` (within ``flush_timeout``
    seconds), is a SinkError."""

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str],
        topic: str,
        producer: Mapping[str, object] | None = None,
        flush_timeout: float = 10.0,
    ) -> None:
        self.topic = topic
        self._flush_timeout = flush_timeout
        self._failed = 0  # messages the producer gave up on (counted on its IO thread) ...
        self._failed_reported = 0  # ... and how many of them a flush has reported
        self._error: Exception | None = None
        self._producer = started_client(
            KafkaProducer, {**PRODUCER_DEFAULTS, **(producer or {}), "bootstrap_servers": bootstrap_servers}
        )
        self._max_bytes = int(self._producer.config["max_request_size"]) - RECORD_FRAMING

    def emit(self, obj: dict) -> None:
        key, value = _message(obj)
        if len(value) + len(key or b"") > self._max_bytes:
            key, value = _message(shortened(obj))
            if len(value) + len(key or b"") > self._max_bytes:
                raise SinkError(
                    f"topic {self.topic}: a message of {len(value)} bytes, even shortened, is over the producer's"
                    f" max_request_size ({self._max_bytes + RECORD_FRAMING} bytes)"
                )
        try:
            future = self._producer.send(self.topic, value, key=key)
        except KafkaError as error:
            raise SinkError(f"topic {self.topic}: cannot send: {describe_kafka_error(error)}") from None
        future.add_errback(self._undelivered)

    def flush(self) -> None:
        """Wait up to ``flush_timeout`` seconds until every message sent is acknowledged; a SinkError saying what
        was not."""
        try:
            self._producer.flush(timeout=self._flush_timeout)
        except KafkaTimeoutError:
            raise SinkError(f"topic {self.topic}: messages not delivered within {self._flush_timeout:g} s") from None
        failed = self._failed
        if failed > self._failed_reported:
            count, self._failed_reported = failed - self._failed_reported, failed
            raise SinkError(
                f"topic {self.topic}: {count} message(s) not delivered ({describe_kafka_error(self._error)})"
            )

    def close(self) -> None:
        try:
            self.flush()
        finally:
            self._producer.close(timeout=self._flush_timeout)

    def _undelivered(self, error: Exception) -> None:
        self._error = error
        self._failed += 1


class TopicAppender:
    """Records appended to ``topic`` one at a time, each acknowledged by every in-sync replica (``acks=all``)
    before `append` returns: for a service that answers for a record only once it is kept."""

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str],
        topic: str,
        producer: Mapping[str, object] | None = None,
        timeout: float = 10.0,
    ) -> None:
        self.topic = topic
        self._timeout = timeout
        settings = {**PRODUCER_DEFAULTS, "acks": "all", **(producer or {}), "bootstrap_servers": bootstrap_servers}
        self._producer = started_client(KafkaProducer, settings)

    def append(self, value: bytes, key: bytes | None) -> str:
        """Append one record; where it is (``topic/partition/offset``). An OSError when the broker has not
        acknowledged it within the timeout, or refused it."""
        try:
            metadata = self._producer.send(self.topic, value, key=key).get(timeout=self._timeout)
        except KafkaError as error:
            raise OSError(f"topic {self.topic}: not appended: {describe_kafka_error(error)}") from None
        return f"{self.topic}/{metadata.partition}/{metadata.offset}"

    def close(self) -> None:
        self._producer.close(timeout=self._timeout)


def _message(obj: dict) -> tuple[bytes | None, bytes]:
    """The key and the value (JSON) of the message of ``obj``: keyed by its user when it has one (an event
    forwarded to the users' instances, in the partition of its user), else by its id, if any."""
    name = obj.get("user") if isinstance(obj.get("user"), str) else obj.get("id")
    key = None if name is None else str(name).encode("utf-8", "surrogatepass")
    return key, json_line(obj).encode()  # (ASCII: JSON with its escapes)
