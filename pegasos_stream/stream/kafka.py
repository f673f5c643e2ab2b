"""Kafka: a consumer-group source that commits exactly what was processed, and a JSON sink.

Values stay bytes (no deserializer): the runner parses them, so one malformed record is a
rejected record, never a partition stuck on a deserializer error. Offsets are committed by hand
(auto-commit is off) and every call that talks to the broker has a bounded wait, so an unreachable
broker gives idle ticks and logged warnings instead of exceptions and 30 s stalls; a client whose
broker does not answer when it starts is a `BrokerUnreachable` within ``BOOTSTRAP_TIMEOUT_MS``. What is read,
claimed, committed and sought is decided by an ``OffsetBook``; the source does the talking.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from bisect import bisect_right
from collections.abc import Callable, Mapping, Sequence
from itertools import accumulate
from typing import Any

from kafka import AsyncConsumerRebalanceListener, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaError, KafkaTimeoutError
from kafka.structs import OffsetAndMetadata

from .kafka_offsets import Fetched, OffsetBook, Partition, Seeks
from .records import Cursors, RecordBatch
from .sources import BATCH_BYTES, Source, SourceError

__all__ = [
    "CONSUMER_DEFAULTS",
    "PRODUCER_DEFAULTS",
    "BrokerUnreachable",
    "KafkaSink",
    "KafkaSource",
    "OffsetOutOfRange",
]

#: How long a client waits, when it starts, for a broker of its bootstrap servers to answer (kafka-python
#: waits 30 s): an unreachable broker is a `BrokerUnreachable` within seconds.
BOOTSTRAP_TIMEOUT_MS = 5000

#: KafkaConsumer settings that ``consumer`` may override: reconnect within a second once the broker
#: is back, notice a dead group member in seconds rather than after the 45 s default, and give up
#: starting after ``BOOTSTRAP_TIMEOUT_MS``.
CONSUMER_DEFAULTS: dict[str, object] = {
    "reconnect_backoff_max_ms": 1000,
    "session_timeout_ms": 10_000,
    "heartbeat_interval_ms": 3_000,
    "bootstrap_timeout_ms": BOOTSTRAP_TIMEOUT_MS,
}

#: KafkaProducer settings that ``producer`` may override (see ``CONSUMER_DEFAULTS``).
PRODUCER_DEFAULTS: dict[str, object] = {"reconnect_backoff_max_ms": 1000, "bootstrap_timeout_ms": BOOTSTRAP_TIMEOUT_MS}

#: Settings the source owns: the arguments of KafkaSource, or what its offset handling relies on.
_RESERVED = ("bootstrap_servers", "group_id", "auto_offset_reset", "enable_auto_commit", "value_deserializer")

log = logging.getLogger(__name__)


class BrokerUnreachable(ConnectionError):
    """No broker of a client's bootstrap servers answered within its ``bootstrap_timeout_ms``, as the
    client started; the message names the servers."""


def _started(client: Callable[..., Any], settings: Mapping[str, Any]) -> Any:
    """``client(**settings)`` (a KafkaConsumer or KafkaProducer), or a BrokerUnreachable when no
    bootstrap server answers in time."""
    try:
        return client(**settings)
    except KafkaTimeoutError:
        servers = settings["bootstrap_servers"]
        servers = servers if isinstance(servers, str) else ",".join(servers)
        raise BrokerUnreachable(
            f"no Kafka broker answered at {servers} within {settings['bootstrap_timeout_ms'] / 1000:g} s"
        ) from None


class OffsetOutOfRange(SourceError):
    """An offset to resume from is outside its partition's log (the broker lost data, or retention
    removed records not processed yet)."""


class KafkaSource(Source):
    """Records from Kafka topics, read in a consumer group.

    ``read(n)`` hands out up to ``n`` fetched messages (polling when none is left), in offset order
    within each partition; a record's value is the message's bytes (``b""`` for a tombstone), its
    cursor (topic, partition, offset) and its position "topic/partition/offset".
    A poll of ``poll_seconds`` that brings nothing gives an empty batch. ``claim()`` drops the
    records of partitions revoked since they were read and advances the offsets over the others;
    ``commit()`` commits the offset after the last record claimed from each partition; ``seek()``
    resumes from offsets stored elsewhere.

    A partition starts at the offset ``seek()`` gave for it, else at the group's committed offset,
    else at ``start``; one assigned again right after its revocation continues from its next offset
    to process. An offset given to ``seek()`` gives way, at the partition's assignment, to a later
    offset committed by the group (another member processed the partition since it was stored);
    the offset resumed from is checked against the partition's log once it is fetched from: beyond
    its end (the broker lost data) or before its beginning (retention removed records),
    ``on_offset_out_of_range`` decides.

    Parameters
    ----------
    start
        Where a partition without a committed offset starts: "earliest" or "latest".
    on_offset_out_of_range
        "stop": raise ``OffsetOutOfRange``, naming the partition, the offset and the partition's
        range; the offset stays in ``position()`` and out of commits. "earliest": log a warning and
        read the partition from its beginning.
    consumer
        Further KafkaConsumer settings; they override ``CONSUMER_DEFAULTS``.
    commit_timeout
        Seconds a ``commit()`` may take, over at most ``commit_attempts`` attempts.

    Attributes
    ----------
    on_revoke
        Called with the partitions about to be revoked in a rebalance (or already lost with the
        group membership), before the source commits them and forgets their offsets; the runner
        sets it to write a checkpoint. It runs on the consumer's IO thread, while ``read()`` waits
        for its poll, and may call ``commit()``, which there leaves the commit to the revocation:
        the source commits the revoked partitions before it rejoins the group, while its generation
        is still current, so the next owner of a partition starts exactly after its last record
        processed here.

    """

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str],
        topics: str | Sequence[str],
        group_id: str,
        start: str = "earliest",
        consumer: Mapping[str, object] | None = None,
        poll_seconds: float = 0.5,
        commit_timeout: float = 5.0,
        commit_attempts: int = 3,
        on_offset_out_of_range: str = "stop",
    ) -> None:
        if start not in ("earliest", "latest"):
            raise ValueError(f"start must be 'earliest' or 'latest', not {start!r}")
        if on_offset_out_of_range not in ("stop", "earliest"):
            raise ValueError(f"on_offset_out_of_range must be 'stop' or 'earliest', not {on_offset_out_of_range!r}")
        self._on_offset_out_of_range = on_offset_out_of_range
        reserved = sorted(set(consumer or {}) & set(_RESERVED))
        if reserved:
            raise ValueError(f"consumer settings {reserved} are set by KafkaSource itself")
        self.topics = [topics] if isinstance(topics, str) else list(topics)
        self.name = "kafka:" + ",".join(self.topics)
        self.on_revoke: Callable[[set[Partition]], None] | None = None
        self._servers = bootstrap_servers if isinstance(bootstrap_servers, str) else ",".join(bootstrap_servers)
        self._poll_ms = int(poll_seconds * 1000)
        self._commit_timeout = commit_timeout
        self._commit_attempts = commit_attempts
        self._offsets = OffsetBook()
        self._listener_thread: int | None = None
        self._reachable = True
        self._watched = -math.inf  # when _watch_broker last looked
        self._closed = False
        self._failure: SourceError | None = None  # from a rebalance callback, raised by the next poll
        self._consumer = _started(
            KafkaConsumer,
            {
                **CONSUMER_DEFAULTS,
                **(consumer or {}),
                "bootstrap_servers": bootstrap_servers,
                "group_id": group_id,
                "auto_offset_reset": start,
                "enable_auto_commit": False,
                "value_deserializer": None,
            },
        )
        self._consumer.subscribe(self.topics, listener=_Listener(self))

    def read(self, n: int) -> RecordBatch:
        """Up to ``n`` fetched records: waits up to ``poll_seconds`` when none is fetched, then takes
        whatever more has already arrived (polls that do not wait), so a backlog comes in large batches
        (of ``BATCH_BYTES`` at most, beyond one poll's worth)."""
        count = self._offsets.fetched_count()
        if not count or self._rebalance_pending():
            self._poll(self._poll_ms)
            count = self._offsets.fetched_count()
        if 0 < count < n:  # drain what has arrived meanwhile, up to n records or BATCH_BYTES
            size = self._offsets.fetched_bytes()
            while count < n and size < BATCH_BYTES and (fetched := self._poll(0)):
                count += sum(len(entry.values) for entry in fetched)
                size += sum(entry.nbytes for entry in fetched)
        parts = self._offsets.read(n)
        values: list[bytes] = []
        for part in parts:
            values += part.values
        return RecordBatch(values, _cursors(parts), _position)

    def claim(self, batch: RecordBatch) -> RecordBatch:
        dropped = self._offsets.claim(batch.cursors)
        if dropped is None:
            return batch
        for partition, offset in dropped.seek_back.items():
            self._consumer.seek(TopicPartition(*partition), offset)
        return batch.keep(dropped.kept)

    def unclaim(self, batch: RecordBatch, done: int) -> None:
        """Records ``done``.. of the last claimed ``batch`` were not processed: ``position()`` no
        longer covers them, and they are read again."""
        cursors = [batch.cursors[i] for i in range(done, len(batch))]
        for partition, offset in self._offsets.unclaim(cursors).items():
            self._consumer.seek(TopicPartition(*partition), offset)

    def _poll(self, timeout_ms: int) -> list[Fetched]:
        """Fetch the next messages, noting each partition's generation before the poll; what came."""
        generations = self._offsets.generations()
        try:
            batches = self._consumer.poll(timeout_ms=timeout_ms)
        except KafkaError as error:
            if not error.retriable:
                raise
            log.warning("poll failed (%s); retrying", _describe(error))
            batches = {}
        if self._failure is not None:
            raise self._failure
        self._watch_broker()
        fetched = []
        for tp, messages in batches.items():
            if messages:
                partition = Partition(*tp)
                values = [m.value or b"" for m in messages]
                fetched.append(Fetched(partition, values, [m.offset for m in messages], generations.get(partition, 0)))
        self._offsets.add(fetched)
        self._check_sought(fetched)
        return fetched

    def _check_sought(self, fetched: list[Fetched]) -> None:
        """Check the offsets given to ``seek()`` of the partitions fetched from against their logs."""
        unverified = self._offsets.unverified()
        if not unverified:
            return
        generations = self._offsets.generations()
        first = {e.partition: e.offsets[0] for e in reversed(fetched) if e.generation == generations.get(e.partition)}
        assigned = self._consumer.assignment()
        for partition, offset in unverified.items():
            tp = TopicPartition(*partition)
            end = self._consumer.highwater(tp)
            if tp not in assigned or (partition not in first and end is None):
                continue  # not fetched from yet
            if first.get(partition) == offset:
                self._offsets.verified(partition)
                continue
            try:
                beginning = self._consumer.beginning_offsets([tp], timeout_ms=self._poll_ms)[tp]
            except KafkaError:
                continue  # checked at the next poll
            if partition not in first and end is not None and beginning <= offset <= end:
                self._offsets.verified(partition)
                continue
            problem = f"the offset {offset} to resume {_position((*partition, offset))} from is outside its partition"
            problem += f" (offsets {beginning} to {'?' if end is None else end})"
            if self._on_offset_out_of_range == "stop":
                self._offsets.withhold(partition)
                raise OffsetOutOfRange(f"{problem}; stopping (on_offset_out_of_range is 'stop')")
            log.warning("%s; reading it from its beginning (on_offset_out_of_range is 'earliest')", problem)
            self._seek(self._offsets.seek({partition: beginning}))

    def commit(self) -> None:
        """Commit the offsets of everything claimed so far; on failure say so and keep them pending.

        Retries within ``commit_timeout`` seconds; a failed commit is repeated by the next one.
        """
        offsets = self._offsets.uncommitted()
        if not offsets:
            return
        request = {TopicPartition(*p): OffsetAndMetadata(offset, "", -1) for p, offset in offsets.items()}
        if threading.get_ident() == self._listener_thread:
            return  # the revocation commits, once on_revoke returns
        deadline = time.monotonic() + self._commit_timeout
        error: Exception | None = None
        for _ in range(self._commit_attempts):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                self._consumer.commit(request, timeout_ms=int(remaining * 1000))
            except KafkaError as failure:
                error = failure
                time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
            else:
                self._offsets.committed(offsets)
                return
        log.warning("could not commit offsets %s (%s); the next commit retries", _positions(offsets), _describe(error))

    def seek(self, offsets: Mapping[tuple[str, int], int]) -> None:
        """Resume partitions at stored offsets ({(topic, partition): next offset}), now for those
        assigned and at their assignment for the others."""
        self._seek(self._offsets.seek(offsets))

    def position(self) -> dict:
        """{"offsets": [[topic, partition, next offset], ...]}: where a resumed run starts, covering
        every record claimed so far and the partitions resumed but not read from since."""
        offsets = self._offsets.position()
        return {"offsets": [[topic, partition, offset] for (topic, partition), offset in sorted(offsets.items())]}

    def lag(self) -> int | None:
        """Records waiting after the last one read: fetched ones and those still in the partitions."""
        assigned = self._consumer.assignment()
        if not assigned:
            return None
        total = self._offsets.fetched_count()
        for tp in assigned:
            high = self._consumer.highwater(tp)
            if high is None:
                return None
            try:
                position = self._consumer.position(tp, timeout_ms=0)
            except KafkaError:
                return None
            if position is None:
                return None
            total += max(0, high - position)
        return total

    def partition_lags(self) -> dict[tuple[str, int], int]:
        """Records after the last one processed in each assigned partition: its high watermark, which
        each fetch response brings (no request of its own), less its next offset to process (the
        consumer's fetch position before anything is polled from it). A partition not fetched from yet
        is left out."""
        ends = {}
        for tp in self._consumer.assignment():
            end = self._consumer.highwater(tp)
            if end is not None:
                ends[Partition(*tp)] = end
        offsets = self._offsets.next_offsets(ends)
        lags: dict[tuple[str, int], int] = {}
        for partition, end in ends.items():
            offset = offsets.get(partition)
            if offset is None:
                try:
                    offset = self._consumer.position(TopicPartition(*partition), timeout_ms=0)
                except KafkaError:
                    continue
            if offset is not None:
                lags[partition] = max(0, end - offset)
        return lags

    def close(self) -> None:
        """Commit what was claimed, leave the group and close the connections."""
        if self._closed:
            return
        self.commit()
        self._closed = True
        self._consumer.close(autocommit=False, timeout_ms=int(self._commit_timeout * 1000))

    # -- rebalances and broker watch -----------------------------------------------------------

    @property
    def ready(self) -> bool:
        """Whether the group has given this consumer its partitions (joining takes seconds)."""
        return bool(self._consumer.assignment())

    def rewind(self) -> None:
        """Read every partition from its beginning, ignoring the group's committed offsets (a
        resumed run with no checkpoint: the checkpoints, not the group, say what was learned)."""
        self._seek(self._offsets.rewind())

    def _seek(self, seeks: Seeks) -> None:
        """Make the seeks the offset book asks for."""
        for partition, offset in seeks.offsets.items():
            self._consumer.seek(TopicPartition(*partition), offset)
        if seeks.to_beginning:
            self._consumer.seek_to_beginning(*(TopicPartition(*p) for p in seeks.to_beginning))

    def _rebalance_pending(self) -> bool:
        """Whether the group asked this member to rejoin (its heartbeat heard of a rebalance, or
        that it was evicted). The member then polls before handing out more of what it fetched:
        the poll revokes its partitions and rejoins, instead of processing records that the group
        may give to another member if this one is late to rejoin."""
        return bool(self._consumer._coordinator.need_rejoin())

    async def _assigned(self, partitions: set[TopicPartition]) -> None:
        """Note partitions assigned and make the seeks waiting for them. A stored offset (from a
        checkpoint) that the group's committed offset has passed gives way to it: another member
        processed the records between since the checkpoint was written."""
        stored = self._offsets.pending_seeks(partitions)
        if stored:
            try:
                answer = await self._consumer._coordinator.fetch_committed_offsets_async(
                    [TopicPartition(*p) for p in stored], timeout_ms=int(self._commit_timeout * 1000)
                )
            except KafkaError as error:
                self._failure = SourceError(
                    f"cannot learn the group's committed offsets of {_positions(stored)} to resume from "
                    f"({_describe(error)}); stopping, so that no record is learned twice"
                )
                return
            later: dict[tuple[str, int], int] = {}
            for tp, meta in answer.items():
                partition = Partition(*tp)
                if meta is not None and meta.offset > stored[partition]:
                    later[partition] = meta.offset
                    log.info(
                        "%s/%d: the group committed offset %d, past this checkpoint's %d (another member "
                        "processed the records between); resuming there",
                        *partition,
                        meta.offset,
                        stored[partition],
                    )
            self._offsets.seek(later)
        self._seek(self._offsets.assign(partitions))

    async def _revoked(self, partitions: set[TopicPartition], lost: bool) -> None:
        """Drop what was fetched from ``partitions``, let ``on_revoke`` write what it holds, then
        (unless they were lost) commit them and wait for the answer: the consumer sends its request to
        rejoin the group only after this returns, so the commit still carries the current generation."""
        if self._closed or not partitions:
            return
        self._offsets.revoke(partitions, lost=lost)
        self._listener_thread = threading.get_ident()
        try:
            if self.on_revoke is not None:
                self.on_revoke({Partition(*tp) for tp in partitions})
        finally:
            self._listener_thread = None
        if not lost:
            await self._commit_revoked()
        self._offsets.forget(partitions)

    async def _commit_revoked(self) -> None:
        offsets = self._offsets.uncommitted()
        if not offsets:
            return
        request = {TopicPartition(*p): OffsetAndMetadata(offset, "", -1) for p, offset in offsets.items()}
        try:
            await self._consumer.commit_async(request)
        except KafkaError as error:
            log.warning(
                "could not commit offsets %s on revocation (%s); the next owner reads again what was processed "
                "since the last commit",
                _positions(offsets),
                _describe(error),
            )
        else:
            self._offsets.committed(offsets)

    def _watch_broker(self) -> None:
        """Say when the consumer loses its last broker connection and when it has one again (checked
        once per ``poll_seconds`` at most: the consumer's metrics take a while to gather)."""
        now = time.monotonic()
        if now - self._watched < self._poll_ms / 1000:
            return
        self._watched = now
        count = (self._consumer.metrics() or {}).get("consumer-metrics", {}).get("connection-count")
        if count is None:
            return
        reachable = count > 0
        if reachable != self._reachable:
            self._reachable = reachable
            if reachable:
                log.info("broker %s is reachable again", self._servers)
            else:
                log.warning("broker %s is unreachable; retrying (idle until it is back)", self._servers)


class _Listener(AsyncConsumerRebalanceListener):
    """Routes the consumer's rebalance callbacks to its KafkaSource. They are coroutines, so that
    the revocation can wait for its commit before the consumer rejoins the group."""

    def __init__(self, source: KafkaSource) -> None:
        self.source = source

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await self.source._revoked(set(revoked), lost=False)

    async def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        await self.source._revoked(set(lost), lost=True)

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        await self.source._assigned(set(assigned))


def _describe(error: BaseException | None) -> str:
    if isinstance(error, KafkaTimeoutError):
        return "no answer in time"
    detail = str(error)
    return type(error).__name__ + (f": {detail}" if detail and detail != "None" else "")


def _cursors(parts: list[Fetched]) -> Cursors:
    """The cursors (topic, partition, offset) of records read from ``parts`` in turn."""
    starts = list(accumulate((len(part.offsets) for part in parts), initial=0))

    def cursor(i: int) -> tuple[str, int, int]:
        index = bisect_right(starts, i) - 1
        (topic, partition), offsets = parts[index].partition, parts[index].offsets
        return topic, partition, offsets[i - starts[index]]

    return Cursors(starts[-1], cursor)


def _position(cursor: tuple[str, int, int]) -> str:
    return "/".join(map(str, cursor))


def _positions(offsets: Mapping[Partition, int]) -> str:
    return ", ".join(f"{topic}/{partition}:{offset}" for (topic, partition), offset in sorted(offsets.items()))


class KafkaSink:
    """One JSON message per object, keyed by its ``id`` when it has one."""

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str],
        topic: str,
        producer: Mapping[str, object] | None = None,
        flush_timeout: float = 10.0,
    ) -> None:
        self.topic = topic
        self._flush_timeout = flush_timeout
        self._failed = 0
        self._error: Exception | None = None
        self._producer = _started(
            KafkaProducer, {**PRODUCER_DEFAULTS, **(producer or {}), "bootstrap_servers": bootstrap_servers}
        )

    def emit(self, obj: dict) -> None:
        key = None if obj.get("id") is None else str(obj["id"]).encode()
        future = self._producer.send(self.topic, json.dumps(obj, default=str).encode(), key=key)
        future.add_errback(self._undelivered)

    def flush(self) -> None:
        """Wait up to ``flush_timeout`` seconds for delivery; say what is late or failed."""
        try:
            self._producer.flush(timeout=self._flush_timeout)
        except KafkaTimeoutError:
            log.warning("messages to %s not delivered within %g s; still retrying", self.topic, self._flush_timeout)
        if self._failed:
            log.warning(
                "%d messages to %s could not be delivered (%s)", self._failed, self.topic, _describe(self._error)
            )
            self._failed = 0

    def close(self) -> None:
        self.flush()
        self._producer.close(timeout=self._flush_timeout)

    def _undelivered(self, error: Exception) -> None:
        self._failed += 1
        self._error = error
