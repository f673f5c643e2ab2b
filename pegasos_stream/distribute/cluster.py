"""Several learners in one consumer group: deltas of what each learned, folded in the order of one log.

Pegasos keeps w_t = S_t/(λ·t) (without projection or a horizon), S_t the sum of c·y·x over the violated
examples: pieces learned apart add up. Each learner of a cluster learns the partitions the group gives it
and, every ``sync_every_events`` events or ``sync_every_ms``, publishes a `Delta`: the steps it took since its
last one (a `StepLog`: ΔS as its terms, Δt, the class counts, the decisions its Platt scaling saw) and the input
offsets they cover. Every learner folds every delta, its own included, in the order of the delta log, into the
cluster's model (`ClusterState`); between two syncs it predicts and learns on its own copy.

Two merge rules. ``additive``: a delta holds the example of each violated step, and is folded by replaying its
steps (`PegasosClassifier.replay`): the floating-point operations ``learn_one`` performs, at the cluster's step
counter, with the learner's margin test; the model differs from one process's only in what each learner's test
saw, its own copy, up to one sync old ("delayed Pegasos"). ``sequential``: a delta holds every example it covers,
and is folded by learning them again, with the cluster's model's own tests: the model is one process's on the
events in the order of the log. Either way, every learner that has folded a log's prefix holds the same model,
bit for bit, and one learner alone holds the model one process learns.

A delta is folded only when, for each partition it covers, it starts where the cluster's last folded delta of
that partition ended: an event is learned exactly once across the cluster, whatever the timing of rebalances,
restarts, SIGKILLs and a broker that delivers a record twice. A learner whose delta is refused takes its
partitions up again where the cluster left them. `ClusterState` and `ClusterSync` know nothing of Kafka:
`kafka.delta_topic` carries the deltas.
"""

from __future__ import annotations

import copy
import json
import logging
import struct
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, cast

import numpy as np

from ..kafka.offsets import Partition
from ..learners.batch import LearnBatch
from ..learners.rows import Rows
from ..learners.steps import StepLog, StepRecorder
from ..persist.checkpoint import WriteSchedule, checkpoint_bytes, model_digest, read_checkpoint_bytes

if TYPE_CHECKING:
    from ..kafka.group import GroupSource
    from ..learners.linear import PegasosClassifier
    from .publishing import ModelPublisher

__all__ = [
    "NEW",
    "ClusterState",
    "ClusterSync",
    "Delta",
    "DeltaChannel",
    "MemoryLog",
    "SnapshotPublisher",
    "decode_delta",
    "encode_delta",
    "snapshot",
    "state_of_snapshot",
]

_log = logging.getLogger(__name__)

_MAGIC = b"PGSDELTA1"
_HEADER = struct.Struct("<I")

#: A partition the cluster has not learned from yet: a delta may start it anywhere.
NEW = -1


@dataclass
class Delta:
    """The steps one learner took between two syncs and the input they cover.

    ``ranges`` maps each partition read to [start, end): the offsets processed (``start`` is `NEW` for a
    partition the learner started before the cluster had learned from it). ``config`` is the digest of the
    configuration that learned it: deltas of another configuration are never folded.
    """

    learner: str
    sequence: int
    config: str
    ranges: dict[Partition, tuple[int, int]]
    steps: StepLog

    @property
    def events(self) -> int:
        """Δt: the steps it holds."""
        return len(self.steps)


def encode_delta(delta: Delta) -> bytes:
    """The bytes of ``delta``: a JSON header, then its arrays' raw little-endian bytes. The columns go as int32
    when they fit (the usual case), and rows whose values are all equal (binary features of unit length, as the
    shipped spam features are) as one value each: 4 bytes a non-zero instead of 16."""
    arrays = {name: _little_endian(array) for name, array in delta.steps.arrays().items()}
    columns = arrays["indices"]
    if len(columns) and columns.min() >= 0 and columns.max() < 2**31:
        arrays["indices"] = columns.astype("<i4")
    lengths = _row_lengths(arrays["indptr"])
    firsts = arrays["data"][arrays["indptr"][:-1][lengths > 0]]
    constant = bool(len(columns)) and np.array_equal(arrays["data"], np.repeat(firsts, lengths[lengths > 0]))
    if constant:  # (a row of no value keeps none)
        arrays["data"] = firsts
    header = {
        "learner": delta.learner,
        "sequence": delta.sequence,
        "config": delta.config,
        "ranges": [[topic, partition, start, end] for (topic, partition), (start, end) in sorted(delta.ranges.items())],
        "arrays": [[name, array.dtype.str, len(array)] for name, array in arrays.items()],
        "every_row": delta.steps.every_row,
        "constant_rows": constant,
    }
    text = json.dumps(header, sort_keys=True).encode()
    return b"".join([_MAGIC, _HEADER.pack(len(text)), text, *(array.data for array in arrays.values())])


def _row_lengths(indptr: np.ndarray) -> np.ndarray:
    """The number of values of each row of ``indptr``, as int64."""
    bounds = np.asarray(indptr, dtype=np.int64)
    return bounds[1:] - bounds[:-1]


def _little_endian(array: np.ndarray) -> np.ndarray:
    """``array``, C-contiguous in little-endian byte order (itself, on a little-endian machine)."""
    return np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<"))


def decode_delta(data: bytes) -> Delta:
    """The delta of ``encode_delta``'s bytes; a ValueError saying what is wrong with bytes that are not one."""
    if not data.startswith(_MAGIC) or len(data) < len(_MAGIC) + _HEADER.size:
        raise ValueError("not a delta (no PGSDELTA1 header)")
    (length,) = _HEADER.unpack_from(data, len(_MAGIC))
    start = len(_MAGIC) + _HEADER.size
    try:
        header = json.loads(data[start : start + length])
        ranges = {Partition(str(t), int(p)): (int(a), int(b)) for t, p, a, b in header["ranges"]}
        arrays: dict[str, np.ndarray] = {}
        offset = start + length
        for name, dtype, count in header["arrays"]:
            kind = np.dtype(dtype)
            size = kind.itemsize * int(count)
            if offset + size > len(data):
                raise ValueError(f"its array {name} runs past its end")
            arrays[str(name)] = np.frombuffer(data, kind, int(count), offset)
            offset += size
        if offset != len(data):
            raise ValueError(f"{len(data) - offset} bytes follow its arrays")
        if header.get("constant_rows"):
            lengths = _row_lengths(arrays["indptr"])
            if (lengths < 0).any() or len(arrays["data"]) != int((lengths > 0).sum()):
                raise ValueError("its rows' values do not match its rows")
            arrays["data"] = np.repeat(arrays["data"], lengths[lengths > 0])
        steps = StepLog.from_arrays(arrays, bool(header.get("every_row", False)))
        return Delta(str(header["learner"]), int(header["sequence"]), str(header["config"]), ranges, steps)
    except (KeyError, TypeError, json.JSONDecodeError) as error:
        raise ValueError(f"a malformed delta header ({type(error).__name__}: {error})") from None


class ClusterState:
    """The cluster's model and what it covers: the fold of a delta log's prefix.

    ``model`` is the merged `PegasosClassifier`; ``covered`` the next offset of each input partition after
    the last delta folded; ``log_offset`` the delta log's offset to read from next; ``folded`` the number of
    deltas folded and ``last_sequence`` each learner's last folded delta.
    """

    def __init__(
        self, model: PegasosClassifier, covered: Mapping[Partition, int] | None = None, log_offset: int = 0
    ) -> None:
        self.model = model
        self.covered: dict[Partition, int] = dict(covered or {})
        self.log_offset = log_offset
        self.folded = 0
        self.last_sequence: dict[str, int] = {}

    def refusal(self, delta: Delta, config: str) -> str | None:
        """Why ``delta`` cannot be folded now (None: it can)."""
        if delta.config != config:
            return f"it was learned with another configuration ({delta.config[:12]}, not {config[:12]})"
        if delta.sequence <= self.last_sequence.get(delta.learner, -1):
            return f"it repeats delta {delta.sequence} of learner {delta.learner}, folded already"
        steps, columns = delta.steps, self.model.n_features or 0
        if len(steps.indices) and not (steps.indices.min() >= 0 and steps.indices.max() < columns):
            return f"it names columns outside the model's {columns}"
        finite = (np.isfinite(array).all() for array in (steps.data, steps.weights, steps.decisions))
        if not all(finite) or (steps.weights < 0).any():
            return "its values, weights or decisions are not finite numbers (weights >= 0)"
        for (topic, partition), (start, end) in sorted(delta.ranges.items()):
            covered = self.covered.get(Partition(topic, partition))
            if end < start and start != NEW:
                return f"its range of {topic}/{partition} ends at {end}, before its start {start}"
            if covered is not None and start != covered:
                return f"it starts {topic}/{partition} at {start}, where the cluster has learned up to {covered}"
        return None

    def fold(self, delta: Delta, config: str, learned: PegasosClassifier | None = None) -> str | None:
        """Fold ``delta`` when it fits (``refusal``); None when folded, else why not. A delta whose steps were
        taken on this very model (``learned``: the model they gave) is folded by taking that model up.

        A delta of every example (``every_row``: the ``sequential`` merge) is learned again, example by example,
        by the cluster's model; any other replays its steps (the ``additive`` merge)."""
        refused = self.refusal(delta, config)
        if refused is not None:
            return refused
        steps = delta.steps
        if learned is not None:
            self.model = learned
        elif steps.every_row:
            rows = Rows(steps.indptr, steps.indices, steps.data, range(self.model.n_features or 0), True)
            end, error = self.model.learn_rows(LearnBatch.new(rows, steps.signs, steps.weights, probas=False))
            if error is not None:  # (rows a learner learned; a refusal here is an overflow of the merged weights)
                raise error
        else:
            self.model.replay(steps)
        for partition, (_, end) in delta.ranges.items():
            self.covered[Partition(*partition)] = end
        self.last_sequence[delta.learner] = delta.sequence
        self.folded += 1
        return None


def snapshot(state: ClusterState, manifest: Mapping[str, Any], config: str) -> tuple[bytes, dict]:
    """A checkpoint of the cluster's model, with what a learner starting from it needs (under ``cluster``: its
    coverage, the delta log's offset, and ``config``, the digest of the configuration its deltas were learned
    with) and ``manifest`` (the configuration), as ``run``'s checkpoints are: its bytes, and its manifest less
    the state."""
    model = state.model
    extra = {
        **manifest,
        "cluster": {
            "learning_sha256": config,
            "log_offset": state.log_offset,
            "folded": state.folded,
            "covered": [[topic, partition, offset] for (topic, partition), offset in sorted(state.covered.items())],
            "last_sequence": state.last_sequence,
        },
        "t": model.t,
        "events": model.t,
        "written_at": time.time(),
    }
    return checkpoint_bytes({"model": model}, extra), extra


def state_of_snapshot(data: bytes, where: str) -> tuple[ClusterState, dict]:
    """The cluster state of a `snapshot`'s bytes, and its manifest; a CheckpointError for bytes that are no
    checkpoint, a ValueError for a checkpoint that is no cluster's."""
    checkpoint, manifest = read_checkpoint_bytes(data, where)
    about = manifest.get("cluster")
    try:
        covered = {Partition(str(t), int(p)): int(o) for t, p, o in about["covered"]}  # type: ignore[index]
        state = ClusterState(checkpoint["model"], covered, int(about["log_offset"]))  # type: ignore[index]
        state.folded = int(about["folded"])  # type: ignore[index]
        state.last_sequence = {str(k): int(v) for k, v in about["last_sequence"].items()}  # type: ignore[index]
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"{where}: not a snapshot of a cluster's model (no cluster section in its manifest)") from None
    return state, manifest


class SnapshotPublisher:
    """Publishes the cluster's model with ``publisher`` when it is due (a `ClusterSync`'s ``on_fold``), its version
    the number of deltas folded: every learner that folded as many publishes the same model under it."""

    def __init__(self, publisher: ModelPublisher, manifest: Mapping[str, Any], config: str) -> None:
        self.publisher = publisher
        self.manifest = dict(manifest)
        self.config = config
        self._handed = -1  # the version last handed to the publisher

    def __call__(self, state: ClusterState) -> None:
        if state.folded not in (0, self._handed) and self.publisher.due(state.model.t):
            self._hand(state)

    def close(self, state: ClusterState) -> None:
        """Hand the publisher the last state if it has not had it (it publishes it as it closes)."""
        if state.folded not in (0, self._handed):
            self._hand(state)

    def _hand(self, state: ClusterState) -> None:
        data, extra = snapshot(state, self.manifest, self.config)
        self.publisher.checkpoint_written(state.folded, data, extra)
        self._handed = state.folded


class DeltaChannel(Protocol):
    """Where a cluster's deltas go and come from: a log read from the offset it was opened at (a Kafka topic:
    `kafka.delta_topic.DeltaTopic`; `MemoryLog` in one process)."""

    def send(self, data: bytes) -> None:
        """Append the bytes of a delta to the log, once acknowledged."""

    def read(self) -> Iterable[tuple[int, bytes | ValueError]]:
        """The deltas after the last one read, to the log's end now: (the offset to read again from, were this
        learner to start over after this delta; its bytes or why it cannot be read)."""


class MemoryLog:
    """A delta log in memory, for learners in one process (tests, simulations): ``channel()`` opens it."""

    def __init__(self) -> None:
        self.records: list[bytes] = []

    def channel(self, offset: int = 0) -> _MemoryChannel:
        """A reader and writer of the log, reading from ``offset``."""
        return _MemoryChannel(self, offset)


class _MemoryChannel:
    def __init__(self, log: MemoryLog, offset: int) -> None:
        self.log = log
        self.offset = offset

    def send(self, data: bytes) -> None:
        self.log.records.append(data)

    def read(self) -> Iterable[tuple[int, bytes | ValueError]]:
        while self.offset < len(self.log.records):
            self.offset += 1
            yield self.offset, self.log.records[self.offset - 1]


class ClusterSync(WriteSchedule):
    """One learner's part in a cluster, to a `Runner` what its `Checkpoints` are: ``due`` says when to sync,
    ``write`` syncs (publishes this learner's delta, then folds the log to its end and takes the cluster's
    model up), and ``assigned`` (the source's ``on_assign``) says where the partitions the group gives it start.

    Parameters
    ----------
    recorder
        The learner the runner learns with; its model is replaced by a copy of the cluster's at each sync.
    state
        The cluster's model and coverage, folded up to where this learner starts.
    channel
        The delta log.
    learner
        This learner's name in its deltas (unique in the cluster; a restarted learner takes a new one).
    config
        The digest of the configuration: deltas of another are not folded.
    every_events, every_ms
        Sync after this many events processed, or this many milliseconds (either may be None).
    seek
        Moves assigned partitions to offsets (``GroupSource.seek``), when a delta of this learner was refused.
    assigned
        The partitions assigned to this learner now (``GroupSource.assignment``).
    on_fold
        Called after each sync with the state (a publisher of the cluster's model).
    """

    #: A learner with no record to process still folds the others' deltas as they come.
    writes_when_idle = True

    def __init__(
        self,
        recorder: StepRecorder[PegasosClassifier],
        state: ClusterState,
        channel: DeltaChannel,
        learner: str,
        config: str,
        every_events: int | None = 1000,
        every_ms: float | None = 1000.0,
        seek: Callable[[Mapping[tuple[str, int], int]], None] | None = None,
        assigned: Callable[[], set[Partition]] | None = None,
        on_fold: Callable[[ClusterState], None] | None = None,
    ) -> None:
        super().__init__(every_events, None if every_ms is None else every_ms / 1000)
        self.recorder = recorder
        self.state = state
        self.channel = channel
        self.learner = learner
        self.config = config
        self.seek = seek
        self.assigned_now = assigned
        self.on_fold = on_fold
        self.sequence = 0
        self.refused = 0  # deltas of this learner the cluster refused
        self._base = 0  # the deltas folded into the model the recorder learns on
        self.pauses: list[float] = []  # seconds each sync held the loop
        self._starts: dict[Partition, int] = {}  # where this learner's next delta starts each partition
        self.catch_up()
        self._take_model_up()

    # -- what the runner asks of its checkpoints ------------------------------------------------

    def write(self, model: Any, runner_state: dict, source_position: dict) -> None:
        """Sync: publish the steps since the last sync and the offsets they cover, fold the log to its end and
        take the cluster's model up."""
        started = time.perf_counter()
        position = {Partition(t, p): offset for t, p, offset in source_position.get("offsets", [])}
        ranges = {
            p: (self._starts.get(p, self.state.covered.get(p, NEW)), end)
            for p, end in position.items()
            if end != self._starts.get(p, self.state.covered.get(p))
        }
        steps = self.recorder.cut()
        mine = None
        if ranges:
            self.sequence += 1
            mine = Delta(self.learner, self.sequence, self.config, ranges, steps)
            self.channel.send(encode_delta(mine))
            self._starts.update((p, end) for p, (_, end) in ranges.items())
        refused = self.catch_up(mine)
        if refused:
            self._take_up_again(mine)
        self._take_model_up()
        self.mark(runner_state["counts"][0])
        if self.on_fold is not None:
            self.on_fold(self.state)
        self.pauses.append(time.perf_counter() - started)

    def summary(self) -> dict:
        """What this learner did in the cluster, and the cluster's model it holds now."""
        return {
            "model_sha256": model_digest(self.state.model),
            "t": self.state.model.t,
            "deltas_folded": self.state.folded,
            "deltas_sent": self.sequence,
            "deltas_refused": self.refused,
            "covered": {
                f"{topic}/{partition}": offset for (topic, partition), offset in sorted(self.state.covered.items())
            },
        }

    def attach(self, source: GroupSource) -> None:
        """Take part in ``source``'s rebalances: start the partitions it is assigned where the cluster left them,
        and move them back there when a delta of this learner is refused."""
        source.on_assign = self.assigned
        self.seek = source.seek
        self.assigned_now = source.assignment

    def _take_model_up(self) -> None:
        """Learn on from a copy of the cluster's model, with no step recorded on it yet."""
        self.recorder.model = copy.deepcopy(self.state.model)
        self.recorder.discard()
        self._base = self.state.folded

    # -- the log -----------------------------------------------------------------------------

    def catch_up(self, mine: Delta | None = None) -> bool:
        """Fold the log to its end; whether ``mine`` (this learner's delta just sent) was refused."""
        refused = False
        for after, data in self.channel.read():
            self.state.log_offset = after
            if isinstance(data, ValueError):
                _log.warning("delta log: %s; skipped", data)
                continue
            try:
                delta = decode_delta(data)
            except ValueError as error:
                _log.warning("delta log: %s; skipped", error)
                continue
            ours = mine is not None and (delta.learner, delta.sequence) == (mine.learner, mine.sequence)
            # this learner's delta, right after the model it learned on: its model is the fold (bit for bit)
            learned = self.recorder.model if ours and self.state.folded == self._base else None
            reason = self.state.fold(delta, self.config, learned)
            if reason is not None:
                refused |= ours
                _log.warning(
                    "delta %d of learner %s not folded: %s%s",
                    delta.sequence,
                    delta.learner,
                    reason,
                    "; taking its partitions up again where the cluster left them" if ours else "",
                )
        return refused

    def _take_up_again(self, mine: Delta | None) -> None:
        """This learner's delta ``mine`` was refused: its partitions go back to where the cluster left them."""
        self.refused += 1
        if mine is None:
            return
        assigned = self.assigned_now() if self.assigned_now is not None else set()
        back = {p: self.state.covered[p] for p in mine.ranges if p in self.state.covered}
        for p in mine.ranges:
            self._starts.pop(p, None)
        self._starts.update(back)
        if self.seek is not None:
            moves: dict[tuple[str, int], int] = {p: offset for p, offset in back.items() if p in assigned}
            if moves:
                self.seek(moves)

    def assigned(self, partitions: set[Partition]) -> dict[tuple[str, int], int]:
        """The group gave this learner ``partitions``: fold the log to its end (a learner that had them published
        its last delta before giving them up), and start each where the cluster left it."""
        self.catch_up()
        starts = {p: self.state.covered[p] for p in partitions if p in self.state.covered}
        for p in partitions:
            self._starts.pop(p, None)
        self._starts.update(starts)
        return cast(dict[tuple[str, int], int], starts)
