"""A Kafka consumer-group source, whatever its client: what it hands out, claims, commits and seeks.

``GroupSource`` decides, with an ``OffsetBook``, everything a Kafka source promises: what a read hands
out, what a claim keeps, what a commit sends and when, where a partition resumes, whether an offset
resumed from lies within its partition's log, and what a rebalance does (a revocation's checkpoint
and commit, an assignment's seeks). A subclass talks to the broker through a few methods (``_fetch``,
``_seek_to``, ``_commit_request``, ...): ``python_client.KafkaSource`` with kafka-python,
``confluent_client.ConfluentKafkaSource`` with confluent-kafka. Neither client is imported here.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from bisect import bisect_right
from collections.abc import Callable, Mapping, Sequence
from itertools import accumulate

from ..io.records import Cursors, RecordBatch
from ..io.sources import BATCH_BYTES, Source, SourceError
from .offsets import Fetched, OffsetBook, Partition, Seeks

__all__ = [
    "BOOTSTRAP_TIMEOUT_MS",
    "CONSUMER_DEFAULTS",
    "BrokerUnreachable",
    "GroupSource",
    "OffsetOutOfRange",
    "describe",
]

#: How long a client waits, when it starts, for a broker of its bootstrap servers to answer (kafka-python
#: waits 30 s): an unreachable broker is a `BrokerUnreachable` within seconds.
BOOTSTRAP_TIMEOUT_MS = 5000

#: Consumer settings that ``consumer`` may override: reconnect within a second once the broker
#: is back, notice a dead group member in seconds rather than after the 45 s default, and give up
#: starting after ``BOOTSTRAP_TIMEOUT_MS``.
CONSUMER_DEFAULTS: dict[str, object] = {
    "reconnect_backoff_max_ms": 1000,
    "session_timeout_ms": 10_000,
    "heartbeat_interval_ms": 3_000,
    "bootstrap_timeout_ms": BOOTSTRAP_TIMEOUT_MS,
}

#: Settings the source owns: its own arguments, or what its offset handling relies on (in kafka-python's
#: names; librdkafka's, with dots for the underscores, are refused alike).
_RESERVED = ("bootstrap_servers", "group_id", "auto_offset_reset", "enable_auto_commit", "value_deserializer")


class BrokerUnreachable(ConnectionError):
    """No broker of a client's bootstrap servers answered within its ``bootstrap_timeout_ms``, as the
    client started; the message names the servers."""

    def __init__(self, servers: str | Sequence[str], timeout_ms: float) -> None:
        servers = servers if isinstance(servers, str) else ",".join(servers)
        super().__init__(f"no Kafka broker answered at {servers} within {timeout_ms / 1000:g} s")


class OffsetOutOfRange(SourceError):
    """An offset to resume from is outside its partition's log (the broker lost data, or retention
    removed records not processed yet)."""


class GroupSource(Source):
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
        Further settings of the client's consumer; they override ``CONSUMER_DEFAULTS``.
    commit_timeout
        Seconds a ``commit()`` may take, over at most ``commit_attempts`` attempts.

    Attributes
    ----------
    on_revoke
        Called with the partitions about to be revoked in a rebalance (or already lost with the
        group membership), before the source commits them and forgets their offsets; the runner
        sets it to write a checkpoint. It runs inside the client's poll, while ``read()`` waits for
        it, and may call ``commit()``, which there leaves the commit to the revocation: the source
        commits the revoked partitions before it rejoins the group, while its generation is still
        current, so the next owner of a partition starts exactly after its last record processed here.
    on_assign
        Called with the partitions the group just assigned, before their positions are settled; returns offsets
        to start some of them at (a cluster learner's ``ClusterSync.assigned``), which weigh as ``seek()``'s. It
        runs inside the client's poll; an error it raises stops the source at the next poll.

    """

    #: The exceptions of the client by which a request to the broker fails (or gets no answer in time).
    _errors: tuple[type[BaseException], ...] = ()
    #: Those of them that mean no answer in time.
    _timeouts: tuple[type[BaseException], ...] = ()

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
        reserved = sorted(key for key in consumer or {} if key.replace(".", "_") in _RESERVED)
        if reserved:
            raise ValueError(f"consumer settings {reserved} are set by {type(self).__name__} itself")
        self._on_offset_out_of_range = on_offset_out_of_range
        self.topics = [topics] if isinstance(topics, str) else list(topics)
        self.name = "kafka:" + ",".join(self.topics)
        self.on_revoke: Callable[[set[Partition]], None] | None = None
        self.on_assign: Callable[[set[Partition]], Mapping[tuple[str, int], int]] | None = None
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
        self._log = logging.getLogger(type(self).__module__)  # the logger of the client's module
        self._start(bootstrap_servers, group_id, start, {**CONSUMER_DEFAULTS, **(consumer or {})})

    # -- what a client does ----------------------------------------------------------------------

    def _start(self, servers: str | Sequence[str], group_id: str, start: str, settings: dict[str, object]) -> None:
        """Make the consumer, with ``settings`` (``CONSUMER_DEFAULTS`` under the ``consumer`` given), and
        subscribe to the topics; a BrokerUnreachable when no bootstrap server answers in time."""
        raise NotImplementedError

    def _fetch(self, timeout_ms: int, limit: int, generations: Mapping[Partition, int]) -> list[Fetched]:
        """Poll for up to ``limit`` messages (a hint), waiting up to ``timeout_ms`` when none has
        arrived: what came, each partition's tagged with its generation in ``generations`` (0 when absent)."""
        raise NotImplementedError

    def _seek_to(self, offsets: Mapping[Partition, int]) -> None:
        """Fetch each partition from its offset next."""
        raise NotImplementedError

    def _seek_to_beginning(self, partitions: set[Partition]) -> None:
        """Fetch each partition from its beginning next."""
        raise NotImplementedError

    def _commit_request(self, offsets: Mapping[Partition, int], timeout: float) -> None:
        """Commit ``offsets`` for the group, waiting up to ``timeout`` seconds; one of ``_errors`` when
        the broker does not take them."""
        raise NotImplementedError

    def _assignment(self) -> set[Partition]:
        """The partitions the group gave this consumer."""
        raise NotImplementedError

    def _end(self, partition: Partition) -> int | None:
        """The high watermark of ``partition`` that fetches brought (None before any)."""
        raise NotImplementedError

    def _beginning(self, partition: Partition) -> int:
        """The first offset of the log of ``partition``, asked of the broker (one of ``_errors`` without an answer)."""
        raise NotImplementedError

    def _fetch_position(self, partition: Partition) -> int | None:
        """The offset the consumer fetches ``partition`` from next, where it knows it."""
        raise NotImplementedError

    def _connected(self) -> bool | None:
        """Whether the client has a connection to a broker (None: not known yet)."""
        raise NotImplementedError

    def _close_client(self) -> None:
        """Leave the group and close the connections."""
        raise NotImplementedError

    def _rebalance_pending(self) -> bool:
        """Whether the group asked this member to rejoin, so that it polls before handing out more of
        what it fetched (the poll revokes its partitions and rejoins)."""
        return False

    # -- the source ------------------------------------------------------------------------------

    def read(self, n: int) -> RecordBatch:
        """Up to ``n`` fetched records: waits up to ``poll_seconds`` when none is fetched, then takes
        whatever more has already arrived (polls that do not wait), so a backlog comes in large batches
        (of ``BATCH_BYTES`` at most, beyond one poll's worth)."""
        count = self._offsets.fetched_count()
        if not count or self._rebalance_pending():
            self._poll(self._poll_ms, n)
            count = self._offsets.fetched_count()
        if 0 < count < n:
            self._drain(n, count)
        parts = self._offsets.read(n)
        values: list[bytes] = []
        for part in parts:
            values += part.values
        return RecordBatch(values, _cursors(parts), _position)

    def _drain(self, n: int, count: int) -> None:
        """With ``count`` records fetched, poll without waiting for what has arrived meanwhile, up to
        ``n`` records or ``BATCH_BYTES`` (for a client whose poll hands out a few hundred at a time)."""
        size = self._offsets.fetched_bytes()
        while count < n and size < BATCH_BYTES and (fetched := self._poll(0, n - count)):
            count += sum(len(entry.values) for entry in fetched)
            size += sum(entry.nbytes for entry in fetched)

    def claim(self, batch: RecordBatch) -> RecordBatch:
        dropped = self._offsets.claim(batch.cursors)
        if dropped is None:
            return batch
        self._seek_to(dropped.seek_back)
        return batch.keep(dropped.kept)

    def unclaim(self, batch: RecordBatch, done: int) -> None:
        """Records ``done``.. of the last claimed ``batch`` were not processed: ``position()`` no
        longer covers them, and they are read again."""
        cursors = [batch.cursors[i] for i in range(done, len(batch))]
        self._seek_to(self._offsets.unclaim(cursors))

    def _poll(self, timeout_ms: int, limit: int) -> list[Fetched]:
        """Fetch the next messages, noting each partition's generation before the poll; what came."""
        fetched = self._fetch(timeout_ms, limit, self._offsets.generations())
        if self._failure is not None:
            raise self._failure
        self._watch_broker()
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
        assigned = self._assignment()
        for partition, offset in unverified.items():
            end = self._end(partition)
            if partition not in assigned or (partition not in first and end is None):
                continue  # not fetched from yet
            if first.get(partition) == offset:
                self._offsets.verified(partition)
                continue
            try:
                beginning = self._beginning(partition)
            except self._errors:
                continue  # checked at the next poll
            if partition not in first and end is not None and beginning <= offset <= end:
                self._offsets.verified(partition)
                continue
            problem = f"the offset {offset} to resume {_position((*partition, offset))} from is outside its partition"
            problem += f" (offsets {beginning} to {'?' if end is None else end})"
            if self._on_offset_out_of_range == "stop":
                self._offsets.withhold(partition)
                raise OffsetOutOfRange(f"{problem}; stopping (on_offset_out_of_range is 'stop')")
            self._log.warning("%s; reading it from its beginning (on_offset_out_of_range is 'earliest')", problem)
            self._seek(self._offsets.seek({partition: beginning}))

    def commit(self) -> None:
        """Commit the offsets of everything claimed so far; on failure say so and keep them pending.

        Retries within ``commit_timeout`` seconds; a failed commit is repeated by the next one.
        """
        offsets = self._offsets.uncommitted()
        if not offsets or threading.get_ident() == self._listener_thread:
            return  # (in on_revoke: the revocation commits, once on_revoke returns)
        deadline = time.monotonic() + self._commit_timeout
        error: BaseException | None = None
        for _ in range(self._commit_attempts):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                self._commit_request(offsets, remaining)
            except self._errors as failure:
                error = failure
                time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
            else:
                self._offsets.committed(offsets)
                return
        self._log.warning(
            "could not commit offsets %s (%s); the next commit retries", _positions(offsets), self._describe(error)
        )

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
        assigned = self._assignment()
        if not assigned:
            return None
        total = self._offsets.fetched_count()
        for partition in assigned:
            high = self._end(partition)
            position = None if high is None else self._fetch_position(partition)
            if high is None or position is None:
                return None
            total += max(0, high - position)
        return total

    def partition_lags(self) -> dict[tuple[str, int], int]:
        """Records after the last one processed in each assigned partition: its high watermark, which
        each fetch response brings (no request of its own), less its next offset to process (the
        consumer's fetch position before anything is polled from it). A partition not fetched from yet
        is left out."""
        ends = {}
        for partition in self._assignment():
            end = self._end(partition)
            if end is not None:
                ends[partition] = end
        offsets = self._offsets.next_offsets(ends)
        lags: dict[tuple[str, int], int] = {}
        for partition, end in ends.items():
            offset = offsets.get(partition)
            if offset is None:
                offset = self._fetch_position(partition)
            if offset is not None:
                lags[partition] = max(0, end - offset)
        return lags

    def close(self) -> None:
        """Commit what was claimed, leave the group and close the connections."""
        if self._closed:
            return
        self.commit()
        self._closed = True
        self._close_client()

    def assignment(self) -> set[Partition]:
        """The partitions the group gives this consumer now."""
        return self._assignment()

    @property
    def ready(self) -> bool:
        """Whether the group has given this consumer its partitions (joining takes seconds)."""
        return bool(self._assignment())

    def rewind(self) -> None:
        """Read every partition from its beginning, ignoring the group's committed offsets (a
        resumed run with no checkpoint: the checkpoints, not the group, say what was learned)."""
        self._seek(self._offsets.rewind())

    def _seek(self, seeks: Seeks) -> None:
        """Make the seeks the offset book asks for."""
        self._seek_to(seeks.offsets)
        if seeks.to_beginning:
            self._seek_to_beginning(seeks.to_beginning)

    # -- rebalances and broker watch -----------------------------------------------------------

    def _announce(self, partitions: set[Partition]) -> None:
        """Tell ``on_assign`` of ``partitions`` assigned, and seek those it gives offsets for at their assignment."""
        if self.on_assign is None:
            return
        try:
            starts = self.on_assign(partitions)
        except Exception as error:  # raised by the next poll, outside the client's callback
            self._failure = SourceError(f"at the assignment of {sorted(partitions)}: {error}")
            return
        if starts:
            self._seek(self._offsets.seek(starts))

    def _give_way(self, stored: Mapping[Partition, int], committed: Mapping[Partition, int | None]) -> None:
        """At the assignment of partitions with ``stored`` offsets (from a checkpoint), the group's
        ``committed`` offsets of them: a stored offset that the committed one has passed gives way to
        it (another member processed the records between since the checkpoint was written). Not with
        ``on_assign``: the starts it gives (a cluster's log) are what was learned, which no commit overrides."""
        if self.on_assign is not None:
            return
        later: dict[tuple[str, int], int] = {}
        for partition, offset in committed.items():
            if offset is not None and offset > stored[partition]:
                later[partition] = offset
                self._log.info(
                    "%s/%d: the group committed offset %d, past this checkpoint's %d (another member "
                    "processed the records between); resuming there",
                    *partition,
                    offset,
                    stored[partition],
                )
        self._offsets.seek(later)

    def _unknown_committed(self, stored: Mapping[Partition, int], error: BaseException) -> None:
        """The group's committed offsets of partitions with ``stored`` offsets could not be learned:
        the next poll stops the source."""
        self._failure = SourceError(
            f"cannot learn the group's committed offsets of {_positions(stored)} to resume from "
            f"({self._describe(error)}); stopping, so that no record is learned twice"
        )

    def _revoking(self, partitions: set[Partition], lost: bool) -> dict[Partition, int] | None:
        """The first steps of a revocation: drop what was fetched from ``partitions`` and let
        ``on_revoke`` write what it holds. The offsets to commit then, before ``_revoked_done``
        (none when the partitions were lost); None when there is nothing to do (closing)."""
        if self._closed or not partitions:
            return None
        self._offsets.revoke(partitions, lost=lost)
        self._listener_thread = threading.get_ident()
        try:
            if self.on_revoke is not None:
                self.on_revoke(partitions)
        finally:
            self._listener_thread = None
        return {} if lost else self._offsets.uncommitted()

    def _revoked_done(
        self, partitions: set[Partition], offsets: Mapping[Partition, int], error: BaseException | None
    ) -> None:
        """The last step of a revocation, once ``offsets`` were committed (or failed with ``error``):
        forget the partitions."""
        if offsets and error is not None:
            self._log.warning(
                "could not commit offsets %s on revocation (%s); the next owner reads again what was processed "
                "since the last commit",
                _positions(offsets),
                self._describe(error),
            )
        elif offsets:
            self._offsets.committed(offsets)
        self._offsets.forget(partitions)

    def _revoked(self, partitions: set[Partition], lost: bool) -> None:
        """A revocation, for a client whose rebalance callbacks may block: the partitions are committed
        before this returns, and so before the consumer rejoins the group, under its current generation."""
        offsets = self._revoking(partitions, lost)
        if offsets is not None:
            self._revoked_done(partitions, offsets, self._commit_revoked(offsets) if offsets else None)

    def _commit_revoked(self, offsets: Mapping[Partition, int]) -> BaseException | None:
        """Commit the offsets of partitions revoked, once; the error when that failed."""
        try:
            self._commit_request(offsets, self._commit_timeout)
        except self._errors as error:
            return error
        return None

    def _watch_broker(self) -> None:
        """Say when the consumer loses its last broker connection and when it has one again (checked
        once per ``poll_seconds`` at most)."""
        now = time.monotonic()
        if now - self._watched < self._poll_ms / 1000:
            return
        self._watched = now
        reachable = self._connected()
        if reachable is None or reachable == self._reachable:
            return
        self._reachable = reachable
        if reachable:
            self._log.info("broker %s is reachable again", self._servers)
        else:
            self._log.warning("broker %s is unreachable; retrying (idle until it is back)", self._servers)

    def _describe(self, error: BaseException | None) -> str:
        return describe(error, self._timeouts)


def describe(error: BaseException | None, timeouts: tuple[type[BaseException], ...] = ()) -> str:
    """An error of a Kafka client in a few words ("no answer in time" for one of ``timeouts``)."""
    if isinstance(error, timeouts):
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
