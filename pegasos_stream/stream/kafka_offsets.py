"""The offset bookkeeping of a Kafka consumer-group source, without Kafka.

An ``OffsetBook`` holds what a ``KafkaSource`` decides, and the source does the talking to the
broker: which partitions are assigned; messages fetched and not read yet; what the last read took;
each partition's next offset to process (what a checkpoint's position holds) and what was committed;
seeks waiting for their partition's assignment. Each partition has a generation, which moves on when
the partition is revoked or sought: records fetched under an older generation are dropped instead of
claimed, and their partition, when still assigned, is sought back to the first of them so that they
are fetched again. Every method holds the book's lock, as rebalance callbacks come from the
consumer's IO thread.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

__all__ = ["Dropped", "Fetched", "OffsetBook", "Partition", "Seeks"]


class Partition(NamedTuple):
    """A topic's partition (equal to kafka-python's ``TopicPartition`` of the same numbers)."""

    topic: str
    partition: int


class Fetched(NamedTuple):
    """Messages of one partition from one poll (at least one): their values, their offsets, and the
    partition's generation when the poll started."""

    partition: Partition
    values: list[bytes]
    offsets: list[int]
    generation: int

    @property
    def nbytes(self) -> int:
        """The bytes of the values."""
        return sum(map(len, self.values))


class Dropped(NamedTuple):
    """What a claim leaves out of its batch: the indices of the records it keeps, and for the
    partitions of the others that are still assigned, the offset to seek back to."""

    kept: list[int]
    seek_back: dict[Partition, int]


class Seeks(NamedTuple):
    """Seeks for the consumer to make: partitions to offsets, and partitions to their beginning."""

    offsets: dict[Partition, int]
    to_beginning: set[Partition]


class OffsetBook:
    """Offsets of a consumer in a group, from fetch to commit.

    The source feeds it: ``assign``/``revoke``/``forget`` from the rebalance listener, ``add`` after
    each poll (tagged with the ``generations()`` taken before it), ``committed`` after a commit
    succeeded. It answers: ``read`` (the records to hand out), ``claim`` (which of them to process
    and where to seek back), ``uncommitted`` (what a commit sends), ``seek``/``rewind``/``assign``
    (the seeks to make now), ``position`` (where a resumed run starts).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._assigned: set[Partition] = set()
        self._generations: dict[Partition, int] = {}
        self._fetched: deque[Fetched] = deque()  # polled, not read yet
        self._read: dict[Partition, tuple[int, int]] = {}  # the last read: (generation, next offset)
        self._claimed: dict[Partition, int] = {}  # the offset after the last record claimed
        self._committed: dict[Partition, int] = {}
        self._seeks: dict[Partition, int] = {}  # offsets given to seek(), until their partition is assigned
        self._resumed: dict[Partition, int] = {}  # offsets given to seek(), for position()
        self._rewind = False  # start every partition from its beginning, whatever the group committed
        self._rewound: set[Partition] = set()

    # -- fetch, read, claim ----------------------------------------------------------------

    def generations(self) -> dict[Partition, int]:
        """Each partition's generation (0 when absent), to tag what the next poll brings."""
        with self._lock:
            return dict(self._generations)

    def add(self, fetched: Iterable[Fetched]) -> None:
        """Keep polled messages until they are read."""
        with self._lock:
            self._fetched.extend(fetched)

    def fetched_count(self) -> int:
        """Records fetched and not read yet."""
        with self._lock:
            return sum(len(entry.values) for entry in self._fetched)

    def fetched_bytes(self) -> int:
        """The bytes of the records fetched and not read yet."""
        with self._lock:
            return sum(entry.nbytes for entry in self._fetched)

    def read(self, n: int) -> list[Fetched]:
        """Up to ``n`` fetched records in the order fetched, partition by partition; the batch the
        next ``claim`` claims."""
        parts: list[Fetched] = []
        count = 0
        with self._lock:
            self._read = {}
            while self._fetched and count < n:
                entry = self._fetched[0]
                taken = n - count
                if taken >= len(entry.values):
                    self._fetched.popleft()
                    part = entry
                else:
                    self._fetched[0] = entry._replace(values=entry.values[taken:], offsets=entry.offsets[taken:])
                    part = entry._replace(values=entry.values[:taken], offsets=entry.offsets[:taken])
                self._read[part.partition] = (part.generation, part.offsets[-1] + 1)
                count += len(part.values)
                parts.append(part)
        return parts

    def claim(self, cursors: Sequence[tuple[str, int, int]]) -> Dropped | None:
        """Claim the batch last read, whose records are at ``cursors`` (topic, partition, offset).

        The next offset of each partition read moves past its records, unless the partition's
        generation moved on since their poll: those records are dropped, with what is fetched of
        the partition. None when every record is kept.
        """
        with self._lock:
            read, self._read = self._read, {}
            stale = {p for p, (generation, _) in read.items() if self._generations.get(p, 0) != generation}
            self._claimed.update((p, end) for p, (_, end) in read.items() if p not in stale)
            if not stale:
                return None
            self._discard_fetched(stale)
            kept: list[int] = []
            first: dict[Partition, int] = {}
            for i, (topic, partition, offset) in enumerate(cursors):
                if (topic, partition) in stale:
                    first.setdefault(Partition(topic, partition), offset)
                else:
                    kept.append(i)
            return Dropped(kept, {p: offset for p, offset in first.items() if p in self._assigned})

    def invalidate(self, partitions: Iterable[tuple[str, int]]) -> None:
        """Move the generation of ``partitions`` on: what was fetched from them and not claimed yet,
        read or not, is dropped."""
        with self._lock:
            self._invalidate({Partition(*p) for p in partitions})

    # -- commits ---------------------------------------------------------------------------

    def uncommitted(self) -> dict[Partition, int]:
        """The next offsets to commit: those claimed since the last commit that succeeded."""
        with self._lock:
            return {p: offset for p, offset in self._claimed.items() if self._committed.get(p) != offset}

    def committed(self, offsets: Mapping[Partition, int]) -> None:
        """Note a commit that succeeded."""
        with self._lock:
            self._committed.update(offsets)

    def position(self) -> dict[Partition, int]:
        """The next offset of each partition claimed from, and of those sought and not claimed from
        since: where a resumed run starts."""
        with self._lock:
            return {**self._resumed, **self._claimed}

    # -- assignment and seeks --------------------------------------------------------------

    def assign(self, partitions: Iterable[tuple[str, int]]) -> Seeks:
        """Note partitions assigned; the seeks waiting for them."""
        assigned = {Partition(*p) for p in partitions}
        with self._lock:
            self._assigned |= assigned
            return self._apply_seeks(assigned)

    def revoke(self, partitions: Iterable[tuple[str, int]]) -> None:
        """Note partitions revoked (or lost): what was fetched from them is dropped. Their offsets
        stay until ``forget``, for a last commit."""
        revoked = {Partition(*p) for p in partitions}
        with self._lock:
            self._assigned -= revoked
            self._invalidate(revoked)

    def forget(self, partitions: Iterable[tuple[str, int]]) -> None:
        """Drop the claimed and committed offsets of partitions revoked."""
        with self._lock:
            for p in partitions:
                self._claimed.pop(Partition(*p), None)
                self._committed.pop(Partition(*p), None)

    def seek(self, offsets: Mapping[tuple[str, int], int]) -> Seeks:
        """Resume partitions at stored offsets ({(topic, partition): next offset}): the seeks to make
        now, for the partitions assigned; the others are sought at their assignment."""
        sought = {Partition(*p): offset for p, offset in offsets.items()}
        with self._lock:
            self._resumed.update(sought)
            self._seeks.update(sought)
            return self._apply_seeks(self._assigned)

    def rewind(self) -> Seeks:
        """Start every partition not claimed from at its beginning, once: the seeks to make now, for
        the partitions assigned; the others are sought at their assignment."""
        with self._lock:
            self._rewind = True
            return self._apply_seeks(self._assigned)

    def _apply_seeks(self, partitions: set[Partition]) -> Seeks:
        sought = {p: self._seeks.pop(p) for p in partitions & self._seeks.keys()}
        self._invalidate(set(sought))
        for p in sought:
            self._claimed.pop(p, None)
        to_beginning: set[Partition] = set()
        if self._rewind:
            to_beginning = partitions - self._rewound - self._claimed.keys()
            self._rewound |= to_beginning
        return Seeks(sought, to_beginning)

    def _invalidate(self, partitions: set[Partition]) -> None:
        for p in partitions:
            self._generations[p] = self._generations.get(p, 0) + 1
        self._discard_fetched(partitions)

    def _discard_fetched(self, partitions: set[Partition]) -> None:
        if partitions:
            self._fetched = deque(entry for entry in self._fetched if entry.partition not in partitions)
