"""The offset bookkeeping of a Kafka consumer-group source, without Kafka.

An ``OffsetBook`` holds what a ``KafkaSource`` decides, and the source does the talking to the
broker: which partitions are assigned; messages fetched and not read yet; what the last read took;
each partition's next offset to process (what a checkpoint's position holds) and what was committed;
seeks waiting for their partition's assignment. Each partition has a generation, which moves on when
the partition is revoked or sought: records fetched under an older generation are dropped instead of
claimed, and their partition, when still assigned, is sought back to its next offset to process so
that they are fetched again. The consumer's own fetch position is never trusted past a revocation: a
partition revoked and assigned again in the next assignment (kafka-python keeps its fetch position,
past the records the revocation dropped) is sought to its next offset to process. Every method holds
the book's lock, as rebalance callbacks come from the consumer's IO thread.
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
    """Messages of one partition from one poll (at least one): their values, their offsets (ascending;
    a ``range`` when they follow each other), and the partition's generation when the poll started."""

    partition: Partition
    values: list[bytes]
    offsets: Sequence[int]
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
        self._claimed: dict[Partition, int] = {}  # the next offset to process: past the last claim, or sought
        self._first_polled: dict[Partition, int] = {}  # of a partition's generation, until a claim
        self._committed: dict[Partition, int] = {}
        self._seeks: dict[Partition, int] = {}  # offsets given to seek(), until their partition is assigned
        self._resumed: dict[Partition, int] = {}  # offsets given to seek(), for position() until assigned
        self._unverified: dict[Partition, int] = {}  # offsets of seek() applied, until checked against the log
        self._handover: dict[Partition, int] = {}  # next offsets of partitions revoked, for the next assignment
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
            for entry in fetched:
                self._fetched.append(entry)
                if entry.generation == self._generations.get(entry.partition, 0):
                    self._first_polled.setdefault(entry.partition, entry.offsets[0])

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
                # a partition read under two generations counts as read under none (-1): stale
                previous = self._read.get(part.partition, (part.generation, 0))[0]
                generation = part.generation if previous == part.generation else -1
                self._read[part.partition] = (generation, part.offsets[-1] + 1)
                count += len(part.values)
                parts.append(part)
        return parts

    def claim(self, cursors: Sequence[tuple[str, int, int]]) -> Dropped | None:
        """Claim the batch last read, whose records are at ``cursors`` (topic, partition, offset).

        The next offset of each partition read moves past its records, unless the partition's
        generation moved on since the poll of any of them: those records are dropped, with what is
        fetched of the partition, which is sought back to its next offset to process (that of its
        first record dropped when none is known). None when every record is kept.
        """
        with self._lock:
            read, self._read = self._read, {}
            stale = {p for p, (generation, _) in read.items() if self._generations.get(p, 0) != generation}
            self._claimed.update((p, end) for p, (_, end) in read.items() if p not in stale)
            for p in read.keys() - stale:
                self._first_polled.pop(p, None)
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
            return Dropped(
                kept, {p: self._claimed.get(p, offset) for p, offset in first.items() if p in self._assigned}
            )

    def unclaim(self, cursors: Sequence[tuple[str, int, int]]) -> dict[Partition, int]:
        """Records claimed but not processed, at ``cursors`` in claim order: each partition's next
        offset moves back to the first of them, and what is fetched of it is dropped. The seeks to
        make now, for the partitions assigned."""
        first: dict[Partition, int] = {}
        for topic, partition, offset in cursors:
            first.setdefault(Partition(topic, partition), offset)
        with self._lock:
            for p, offset in first.items():
                self._claimed[p] = min(offset, self._claimed.get(p, offset))
            self._invalidate(set(first))
            return {p: offset for p, offset in first.items() if p in self._assigned}

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

    def next_offsets(self, partitions: Iterable[tuple[str, int]]) -> dict[Partition, int]:
        """The next offset to process of each of ``partitions`` where it is known: past the last claim
        (or sought), else the first offset polled since the partition's assignment."""
        with self._lock:
            known = {}
            for p in map(Partition._make, partitions):
                offset = self._claimed.get(p, self._first_polled.get(p))
                if offset is not None:
                    known[p] = offset
            return known

    def position(self) -> dict[Partition, int]:
        """The next offset of each partition claimed from, and of those sought and not claimed from
        since: where a resumed run starts."""
        with self._lock:
            return {**self._resumed, **self._claimed}

    # -- assignment and seeks --------------------------------------------------------------

    def assign(self, partitions: Iterable[tuple[str, int]]) -> Seeks:
        """Note partitions assigned; the seeks waiting for them, and those of partitions revoked
        (not lost) just before: the next offset to process where it is known."""
        assigned = {Partition(*p) for p in partitions}
        with self._lock:
            self._assigned |= assigned
            handover, self._handover = self._handover, {}
            return self._apply_seeks(assigned, {p: handover[p] for p in assigned & handover.keys()})

    def revoke(self, partitions: Iterable[tuple[str, int]], lost: bool = False) -> None:
        """Note partitions revoked (or lost): what was fetched from them is dropped. Their offsets
        stay until ``forget``, for a last commit. Unless they were lost (and may have been read by
        another member since), the next assignment that gives them back seeks them to their next
        offset to process."""
        revoked = {Partition(*p) for p in partitions}
        with self._lock:
            self._assigned -= revoked
            if not lost:
                for p in revoked:
                    offset = self._claimed.get(p, self._first_polled.get(p))
                    if offset is not None:
                        self._handover[p] = offset
            self._invalidate(revoked)

    def forget(self, partitions: Iterable[tuple[str, int]]) -> None:
        """Drop the claimed and committed offsets of partitions revoked."""
        with self._lock:
            for p in partitions:
                self._claimed.pop(Partition(*p), None)
                self._committed.pop(Partition(*p), None)
                self._unverified.pop(Partition(*p), None)

    def seek(self, offsets: Mapping[tuple[str, int], int]) -> Seeks:
        """Resume partitions at stored offsets ({(topic, partition): next offset}): the seeks to make
        now, for the partitions assigned; the others are sought at their assignment."""
        sought = {Partition(*p): offset for p, offset in offsets.items()}
        with self._lock:
            self._resumed.update(sought)
            self._seeks.update(sought)
            return self._apply_seeks(self._assigned)

    def pending_seeks(self, partitions: Iterable[tuple[str, int]]) -> dict[Partition, int]:
        """The offsets given to ``seek()`` that wait for the assignment of some of ``partitions``."""
        with self._lock:
            return {Partition(*p): self._seeks[Partition(*p)] for p in partitions if Partition(*p) in self._seeks}

    def rewind(self) -> Seeks:
        """Start every partition not claimed from at its beginning, once: the seeks to make now, for
        the partitions assigned; the others are sought at their assignment."""
        with self._lock:
            self._rewind = True
            return self._apply_seeks(self._assigned)

    def unverified(self) -> dict[Partition, int]:
        """Offsets given to ``seek()`` and applied, not yet checked against their partition's log."""
        with self._lock:
            return dict(self._unverified)

    def verified(self, partition: Partition) -> None:
        """Note the offset sought of ``partition`` found within its log."""
        with self._lock:
            self._unverified.pop(partition, None)

    def withhold(self, partition: Partition) -> None:
        """Keep the next offset of ``partition`` for ``position()`` but out of commits (an offset
        sought outside its partition's log)."""
        with self._lock:
            self._unverified.pop(partition, None)
            offset = self._claimed.pop(partition, None)
            if offset is not None:
                self._resumed[partition] = offset

    def _apply_seeks(self, partitions: set[Partition], handover: Mapping[Partition, int] | None = None) -> Seeks:
        stored = {p: self._seeks.pop(p) for p in partitions & self._seeks.keys()}
        sought = {**(handover or {}), **stored}
        self._invalidate(set(sought))
        self._claimed.update(sought)
        self._unverified.update(stored)
        for p in stored:
            self._resumed.pop(p, None)
        to_beginning: set[Partition] = set()
        if self._rewind:
            to_beginning = partitions - self._rewound - self._claimed.keys()
            self._rewound |= to_beginning
            self._invalidate(to_beginning)
        return Seeks(sought, to_beginning)

    def _invalidate(self, partitions: set[Partition]) -> None:
        for p in partitions:
            self._generations[p] = self._generations.get(p, 0) + 1
            self._first_polled.pop(p, None)
        self._discard_fetched(partitions)

    def _discard_fetched(self, partitions: set[Partition]) -> None:
        if partitions:
            self._fetched = deque(entry for entry in self._fetched if entry.partition not in partitions)
