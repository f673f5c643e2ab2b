"""OffsetBook, the Kafka source's offset bookkeeping, without a broker: examples, then a state
machine that drives it as KafkaSource does against a model consumer, with rebalances, seeks and
commits at any point, and checks what it hands out, claims and commits."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule

from pegasos_stream.kafka.offsets import Dropped, Fetched, OffsetBook, Partition, Seeks

P0, P1, P2 = (Partition("events", i) for i in range(3))


def _value(p: Partition, offset: int) -> bytes:
    return b"%d:%d" % (p.partition, offset)


def _fetched(p: Partition, start: int, count: int, generation: int = 0) -> Fetched:
    offsets = list(range(start, start + count))
    return Fetched(p, [_value(p, o) for o in offsets], offsets, generation)


def _cursors(parts: Iterable[Fetched]) -> list[tuple[str, int, int]]:
    return [(part.partition.topic, part.partition.partition, o) for part in parts for o in part.offsets]


def _book(*assigned: Partition) -> OffsetBook:
    book = OffsetBook()
    assert book.assign(assigned) == Seeks({}, set())
    return book


def _read_and_claim(book: OffsetBook, n: int) -> tuple[list[tuple[str, int, int]], Dropped | None]:
    cursors = _cursors(book.read(n))
    return cursors, book.claim(cursors)


# -- examples ------------------------------------------------------------------------------


def test_reads_take_fetched_records_in_order_and_claims_move_the_position():
    book = _book(P0, P1)
    book.add([_fetched(P0, 0, 3), _fetched(P1, 5, 2)])
    assert (book.fetched_count(), book.fetched_bytes()) == (5, 15)

    parts = book.read(2)  # the middle of the first poll's partition
    assert parts == [_fetched(P0, 0, 2)]
    assert book.claim(_cursors(parts)) is None
    assert book.position() == {P0: 2}
    assert book.fetched_count() == 3

    parts = book.read(10)
    assert parts == [_fetched(P0, 2, 1), _fetched(P1, 5, 2)]
    assert book.claim(_cursors(parts)) is None
    assert book.position() == {P0: 3, P1: 7}
    assert book.read(10) == []
    assert book.claim([]) is None
    assert book.position() == {P0: 3, P1: 7}


def test_a_revocation_between_read_and_claim_drops_what_it_overtook():
    book = _book(P0, P1)
    book.add([_fetched(P0, 0, 2), _fetched(P1, 0, 2), _fetched(P0, 2, 2)])
    cursors, dropped = _read_and_claim(book, 2)
    assert dropped is None
    cursors = _cursors(book.read(3))  # P1 0-1, P0 2
    book.revoke([P0])
    assert book.fetched_count() == 0  # P0 3 is gone with its partition
    assert book.claim(cursors) == Dropped([0, 1], {})  # P0 is not assigned: nothing to seek
    assert book.position() == {P0: 2, P1: 2}
    book.forget([P0])
    assert book.position() == {P1: 2}


def test_an_invalidation_between_read_and_claim_seeks_back_to_the_first_record_dropped():
    book = _book(P0, P1)
    book.add([_fetched(P0, 4, 3), _fetched(P1, 0, 2), _fetched(P0, 7, 2)])
    cursors = _cursors(book.read(5))
    book.invalidate([P0])  # a seek, say: P0 stays assigned
    assert book.claim(cursors) == Dropped([3, 4], {P0: 4})
    assert book.position() == {P1: 2}
    assert book.read(10) == []  # P0 7-8 were fetched after the records dropped: fetched again too


def test_what_a_poll_brings_across_a_rebalance_is_dropped_at_its_claim():
    book = _book(P0, P1)
    generations = book.generations()  # the poll starts
    book.revoke([P0, P1])  # a rebalance while it waits
    book.forget([P0, P1])
    book.assign([P0])
    book.add([_fetched(P0, 10, 2, generations.get(P0, 0))])
    cursors, dropped = _read_and_claim(book, 5)
    assert dropped == Dropped([], {P0: 10})
    assert book.position() == {}

    book.add([_fetched(P0, 10, 2, book.generations()[P0])])  # polled again after the seek back
    cursors, dropped = _read_and_claim(book, 5)
    assert dropped is None
    assert cursors == [("events", 0, 10), ("events", 0, 11)]
    assert book.position() == {P0: 12}


def test_a_partition_assigned_again_starts_a_new_generation():
    book = _book(P0)
    book.add([_fetched(P0, 0, 3)])
    _read_and_claim(book, 3)
    first = book.generations().get(P0, 0)
    book.revoke([P0])
    book.forget([P0])
    assert book.assign([P0]) == Seeks({P0: 3}, set())  # its next offset: the fetch position is not trusted
    second = book.generations()[P0]
    assert second > first
    book.add([_fetched(P0, 3, 1, second)])
    assert _read_and_claim(book, 3)[1] is None
    assert book.position() == {P0: 4}


def test_commits_send_what_was_claimed_once_and_retry_what_failed():
    book = _book(P0, P1)
    assert book.uncommitted() == {}
    book.add([_fetched(P0, 0, 3), _fetched(P1, 0, 2)])
    _read_and_claim(book, 3)
    book.read(1)  # read, not claimed: not committed
    checkpoint = book.position()
    assert book.uncommitted() == checkpoint == {P0: 3}
    assert book.uncommitted() == {P0: 3}  # a commit that failed is not noted: the next one retries
    book.committed({P0: 3})
    assert book.uncommitted() == {}
    book.claim([("events", 1, 0)])
    assert book.uncommitted() == {P1: 1}
    book.revoke([P1])
    assert book.uncommitted() == {P1: 1}  # the last commit of a partition revoked
    book.forget([P1])
    assert book.uncommitted() == {}


def test_a_partition_forgotten_is_committed_again_after_its_reassignment():
    book = _book(P0)
    book.add([_fetched(P0, 0, 2)])
    _read_and_claim(book, 2)
    book.committed(book.uncommitted())
    book.revoke([P0])
    book.forget([P0])
    book.assign([P0])
    book.add([_fetched(P0, 0, 2, book.generations()[P0])])  # started again from an older commit
    _read_and_claim(book, 2)
    assert book.uncommitted() == {P0: 2}


def test_seeks_wait_for_their_assignment_and_the_position_round_trips():
    first = _book(P0, P1)
    first.add([_fetched(P0, 0, 4), _fetched(P1, 0, 6)])
    _read_and_claim(first, 7)
    stored = first.position()
    assert stored == {P0: 4, P1: 3}

    resumed = OffsetBook()
    assert resumed.seek(stored) == Seeks({}, set())  # nothing assigned yet
    assert resumed.position() == stored  # a checkpoint before any record still says where to start
    assert resumed.assign([P1]) == Seeks({P1: 3}, set())
    assert resumed.assign([P0]) == Seeks({P0: 4}, set())
    assert resumed.assign([P0]) == Seeks({}, set())  # once
    resumed.add([_fetched(P1, 3, 3, resumed.generations()[P1])])
    assert _read_and_claim(resumed, 10)[1] is None
    assert resumed.position() == {P0: 4, P1: 6}


def test_a_seek_of_an_assigned_partition_applies_now_and_drops_what_was_fetched():
    book = _book(P0, P1)
    book.add([_fetched(P0, 0, 5), _fetched(P1, 0, 1)])
    _read_and_claim(book, 2)
    assert book.seek({("events", 0): 1, ("events", 2): 9}) == Seeks({P0: 1}, set())
    assert book.fetched_count() == 1  # P1's
    assert book.position() == {P0: 1, P2: 9}
    assert book.assign([P2]) == Seeks({P2: 9}, set())


def test_rewind_seeks_each_partition_not_claimed_from_to_its_beginning_once():
    book = _book(P0, P1)
    book.add([_fetched(P0, 7, 1)])
    _read_and_claim(book, 1)
    assert book.rewind() == Seeks({}, {P1})
    assert book.assign([P2]) == Seeks({}, {P2})
    book.revoke([P1, P2])
    book.forget([P1, P2])
    assert book.assign([P1, P2]) == Seeks({}, set())


def test_a_partition_kept_through_a_rebalance_is_sought_to_its_next_offset():
    # kafka-python keeps the fetch position of a partition the same consumer gets back, past what
    # the revocation dropped: the assignment seeks it to the first record not processed.
    book = _book(P0, P1, P2)
    book.add([_fetched(P0, 0, 10), _fetched(P1, 5, 3)])
    _read_and_claim(book, 4)  # P0 0-3; P0 4-9 and P1 5-7 fetched, not read
    book.revoke([P0, P1, P2])
    book.forget([P0, P1, P2])
    assert book.assign([P0, P1, P2]) == Seeks({P0: 4, P1: 5}, set())
    assert book.assign([P0]) == Seeks({}, set())  # once


def test_partitions_lost_or_given_to_another_member_meanwhile_start_at_the_group_offsets():
    book = _book(P0, P1)
    book.add([_fetched(P0, 0, 3), _fetched(P1, 0, 3)])
    _read_and_claim(book, 6)
    book.revoke([P0], lost=True)  # the membership was lost: others may have read it since
    book.forget([P0])
    book.revoke([P1])
    book.forget([P1])
    assert book.assign([P2]) == Seeks({}, set())  # P1 went elsewhere
    assert book.assign([P0, P1]) == Seeks({}, set())


def test_rewind_of_an_assigned_partition_drops_what_was_fetched():
    book = _book(P0)
    book.add([_fetched(P0, 3, 2)])
    assert book.rewind() == Seeks({}, {P0})
    assert book.fetched_count() == 0
    book.add([_fetched(P0, 0, 5, book.generations()[P0])])
    cursors, dropped = _read_and_claim(book, 10)
    assert dropped is None
    assert [offset for _, _, offset in cursors] == [0, 1, 2, 3, 4]


def test_a_seek_revoked_before_any_claim_is_committed_with_the_revocation():
    book = OffsetBook()
    book.seek({("events", 0): 5})
    assert book.assign([P0]) == Seeks({P0: 5}, set())
    book.revoke([P0])
    assert book.uncommitted() == {P0: 5}  # the group's next member starts there, not past it
    assert book.position() == {P0: 5}


def test_the_position_drops_a_seek_once_its_partition_is_forgotten():
    book = OffsetBook()
    book.seek({("events", 0): 5})
    book.assign([P0])
    book.add([_fetched(P0, 5, 5, book.generations()[P0])])
    _read_and_claim(book, 10)
    assert book.position() == {P0: 10}
    book.revoke([P0])
    book.forget([P0])
    assert book.position() == {}  # not the stale 5: everything up to 10 was processed


def test_a_batch_with_a_stale_part_drops_its_partition_even_when_its_last_part_is_fresh():
    book = _book(P0)
    generations = book.generations()  # a poll starts
    assert book.seek({("events", 0): 20}) == Seeks({P0: 20}, set())
    book.add([_fetched(P0, 0, 2, generations.get(P0, 0))])  # the poll brings records from before the seek
    book.add([_fetched(P0, 20, 2, book.generations()[P0])])
    _, dropped = _read_and_claim(book, 10)
    assert dropped == Dropped([], {P0: 20})
    assert book.position() == {P0: 20}


def test_unclaim_moves_the_position_back_to_the_first_record_not_processed():
    book = _book(P0, P1)
    book.add([_fetched(P0, 0, 4), _fetched(P1, 0, 3), _fetched(P0, 4, 2)])
    cursors, _ = _read_and_claim(book, 8)  # P0 0-3, P1 0-2, P0 4
    assert book.position() == {P0: 5, P1: 3}
    book.revoke([P1])
    assert book.unclaim(cursors[2:]) == {P0: 2}  # processed P0 0-1 only; P1 is no longer assigned
    assert book.position() == {P0: 2, P1: 0}
    assert book.uncommitted() == {P0: 2, P1: 0}
    assert book.fetched_count() == 0  # P0 5 is fetched again after the seek back


# -- properties ----------------------------------------------------------------------------

PARTITIONS = [P0, P1, P2]


class ModelConsumer:
    """Just enough of a group member: each partition's log length, the positions of the partitions
    assigned, and the group's committed offsets. A partition assigned starts at its committed
    offset (0 without one)."""

    def __init__(self) -> None:
        self.lengths = dict.fromkeys(PARTITIONS, 0)
        self.positions: dict[Partition, int] = {}
        self.committed: dict[Partition, int] = {}

    def seek(self, p: Partition, offset: int) -> None:
        assert p in self.positions, f"seek of {p}, which is not assigned"
        self.positions[p] = offset

    def poll(self, max_records: int) -> dict[Partition, list[int]]:
        batches = {}
        for p, position in sorted(self.positions.items()):
            end = min(self.lengths[p], position + max_records)
            if end > position:
                batches[p] = list(range(position, end))
                self.positions[p] = end
        return batches


class SourceModel(RuleBasedStateMachine):
    """OffsetBook driven as KafkaSource drives it, and as the runner drives the source: a poll
    tags what it brings with the generations taken when it started; a claim follows its read;
    a revocation checkpoints then commits (unless the partitions were lost); other commits follow a
    checkpoint. Rebalances happen at any point, within a poll or between a read and its claim.

    Properties: records of one partition and generation are claimed in offset order, each once,
    and position() is past the last; every commit sends the offsets of the checkpoint just taken,
    and the group's committed offset never goes back unless the partition was sought; in the end
    every record from a partition's last seek on is claimed, exactly once in a run without lost
    partitions, failed commits on revocation or seeks.
    """

    def __init__(self) -> None:
        super().__init__()
        self.book = OffsetBook()
        self.consumer = ModelConsumer()
        self.started = False  # whether a poll was made: seek() and rewind() come before, as the CLI calls them
        self.polling: dict[Partition, int] | None = None  # generations when the poll in progress started
        self.batch: list[Fetched] | None = None  # read, not claimed
        self.last_claimed: dict[tuple[Partition, int], int] = {}  # by (partition, generation)
        self.claims: Counter[tuple[Partition, int]] = Counter()
        self.eras = dict.fromkeys(PARTITIONS, 0)  # seeks made of each partition
        self.era_start = dict.fromkeys(PARTITIONS, 0)
        self.claimed_in_era: dict[Partition, set[int]] = {p: set() for p in PARTITIONS}
        self.last_commit: dict[Partition, tuple[int, int]] = {}  # (offset, era)
        self.exact = True

    # -- the source and the consumer -------------------------------------------------------

    def _seek(self, seeks: Seeks) -> None:
        targets = {**seeks.offsets, **dict.fromkeys(seeks.to_beginning, 0)}
        for p, offset in targets.items():
            self.consumer.seek(p, offset)
            self.eras[p] += 1
            self.era_start[p] = offset
            self.claimed_in_era[p] = set()

    def _assign(self, partitions: set[Partition]) -> None:
        for p in partitions:
            self.consumer.positions[p] = self.consumer.committed.get(p, 0)
        self._seek(self.book.assign(partitions))

    def _commit(self, checkpoint: dict[Partition, int], succeeds: bool, noted: bool) -> None:
        offsets = self.book.uncommitted()
        for p, offset in offsets.items():
            assert offset == checkpoint[p], "a commit past the checkpoint"
        if not succeeds:
            return
        for p, offset in offsets.items():
            previous = self.last_commit.get(p)
            if previous is not None and previous[1] == self.eras[p]:
                assert offset >= previous[0], f"the committed offset of {p} went back"
            self.last_commit[p] = (offset, self.eras[p])
        self.consumer.committed.update(offsets)
        if noted:  # a commit made within a revocation is sent, not waited for: not noted
            self.book.committed(offsets)

    # -- rules -----------------------------------------------------------------------------

    @rule(p=st.sampled_from(PARTITIONS), count=st.integers(1, 8))
    def produce(self, p: Partition, count: int) -> None:
        self.consumer.lengths[p] += count

    @precondition(lambda self: self.polling is None and self.batch is None)
    @rule()
    def start_poll(self) -> None:
        self.started = True
        self.polling = self.book.generations()

    @precondition(lambda self: self.polling is not None)
    @rule(max_records=st.integers(1, 6))
    def finish_poll(self, max_records: int) -> None:
        assert self.polling is not None
        generations, self.polling = self.polling, None
        self.book.add(
            Fetched(p, [_value(p, o) for o in offsets], offsets, generations.get(p, 0))
            for p, offsets in self.consumer.poll(max_records).items()
        )

    @precondition(lambda self: self.polling is None and self.batch is None)
    @rule(n=st.integers(1, 10))
    def read(self, n: int) -> None:
        self.batch = self.book.read(n)
        assert sum(len(part.values) for part in self.batch) <= n
        for part in self.batch:
            assert part.values == [_value(part.partition, o) for o in part.offsets]

    @precondition(lambda self: self.batch is not None)
    @rule()
    def claim(self) -> None:
        assert self.batch is not None
        parts, self.batch = self.batch, None
        generations = self.book.generations()
        cursors = _cursors(parts)
        dropped = self.book.claim(cursors)
        if dropped is None:
            kept = cursors
        else:
            kept = [cursors[i] for i in dropped.kept]
            first_dropped: dict[Partition, int] = {}
            for i in sorted(set(range(len(cursors))) - set(dropped.kept)):
                first_dropped.setdefault(Partition(*cursors[i][:2]), cursors[i][2])
            assigned = {p: offset for p, offset in first_dropped.items() if p in self.consumer.positions}
            assert dropped.seek_back == assigned, "a partition still assigned is not sought back to what it dropped"
            for p, offset in dropped.seek_back.items():
                self.consumer.seek(p, offset)
        for topic, partition, _ in kept:
            assert (topic, partition) in self.consumer.positions, "a claim kept a record of a partition revoked"
        ends = {}
        for topic, partition, offset in kept:
            p = Partition(topic, partition)
            generation = generations.get(p, 0)
            previous = self.last_claimed.get((p, generation))
            assert previous is None or offset == previous + 1, f"{p} claimed {offset} after {previous}"
            self.last_claimed[p, generation] = offset
            self.claims[p, offset] += 1
            self.claimed_in_era[p].add(offset)
            ends[p] = offset + 1
        position = self.book.position()
        assert {p: position[p] for p in ends} == ends

    @precondition(lambda self: bool(self.consumer.positions))
    @rule(data=st.data(), lost=st.booleans(), commit_fails=st.booleans())
    def revoke(self, data: st.DataObject, lost: bool, commit_fails: bool) -> None:
        partitions = data.draw(st.sets(st.sampled_from(sorted(self.consumer.positions)), min_size=1))
        self._revoke(partitions, lost, commit_fails)

    @precondition(lambda self: bool(self.consumer.positions))
    @rule(data=st.data(), commit_fails=st.booleans())
    def rebalance_keeping_positions(self, data: st.DataObject, commit_fails: bool) -> None:
        """An eager rebalance: every partition revoked, then some assigned again; the consumer keeps
        the fetch position of those it had (as kafka-python does), past what the revocation dropped."""
        positions = dict(self.consumer.positions)
        self._revoke(set(positions), lost=False, commit_fails=commit_fails)
        assigned = data.draw(st.sets(st.sampled_from(PARTITIONS), min_size=1))
        for p in assigned:
            self.consumer.positions[p] = positions.get(p, self.consumer.committed.get(p, 0))
        self._seek(self.book.assign(assigned))

    def _revoke(self, partitions: set[Partition], lost: bool, commit_fails: bool) -> None:
        self.book.revoke(partitions, lost=lost)
        checkpoint = self.book.position()  # the runner's on_revoke
        if not lost:
            self._commit(checkpoint, succeeds=not commit_fails, noted=False)
        self.exact &= not (lost or commit_fails)
        self.book.forget(partitions)
        for p in partitions:
            del self.consumer.positions[p]

    @precondition(lambda self: len(self.consumer.positions) < len(PARTITIONS))
    @rule(data=st.data())
    def assign(self, data: st.DataObject) -> None:
        free = [p for p in PARTITIONS if p not in self.consumer.positions]
        self._assign(data.draw(st.sets(st.sampled_from(free), min_size=1)))

    @precondition(lambda self: not self.started)
    @rule(data=st.data())
    def seek(self, data: st.DataObject) -> None:
        partitions = data.draw(st.sets(st.sampled_from(PARTITIONS), min_size=1))
        offsets = {p: data.draw(st.integers(0, self.consumer.lengths[p])) for p in sorted(partitions)}
        self.exact = False
        self._seek(self.book.seek(offsets))

    @precondition(lambda self: not self.started)
    @rule()
    def rewind(self) -> None:
        self.exact = False
        self._seek(self.book.rewind())

    @precondition(lambda self: self.polling is None and self.batch is None)
    @rule(fails=st.booleans())
    def checkpoint_and_commit(self, fails: bool) -> None:
        self._commit(self.book.position(), succeeds=not fails, noted=True)

    def teardown(self) -> None:
        """Finish what is under way, assign every partition and read to the end."""
        if self.polling is not None:
            self.finish_poll(100)
        if self.batch is not None:
            self.claim()
        self._assign({p for p in PARTITIONS if p not in self.consumer.positions})
        for _ in range(100):
            self.start_poll()
            self.finish_poll(100)
            self.read(1000)
            if not self.batch:
                break
            self.claim()
        else:
            pytest.fail("the partitions were not read to their end")
        self.batch = None
        for p in PARTITIONS:
            missed = set(range(self.era_start[p], self.consumer.lengths[p])) - self.claimed_in_era[p]
            assert not missed, f"records of {p} never claimed: {sorted(missed)}"
        if self.exact:
            everything = Counter({(p, o): 1 for p in PARTITIONS for o in range(self.consumer.lengths[p])})
            assert self.claims == everything


SourceModel.TestCase.settings = settings(
    max_examples=300,
    stateful_step_count=40,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_offset_book_against_a_model_consumer = pytest.mark.slow(SourceModel.TestCase)
