"""The stream loop: read, parse, predict, emit, learn (now or when the label arrives), report."""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, cast

import numpy as np

from ..features import DictHasher, EmailFeatures
from ..io.inputs import check_position
from ..io.records import Record, RecordBatch
from ..io.sinks import NullSink, Sink, SinkError
from ..io.sources import Source
from ..learners.batch import LearnBatch
from ..learners.personal import PersonalPegasos
from ..learners.protocols import BinaryLearner, CompiledLearner, MulticlassLearner
from ..learners.state import is_count
from ..learners.validation import binary_sign
from ..parse.batches import BatchParser, Parsed, ParsedBatch, parse_record
from ..parse.parsing import BadRecord, Event, EventParser
from .diagnosis import AllRejected, LeadingRejections
from .evaluation import BinaryReport, MulticlassReport, UserReports, check_report
from .pending import PendingLabels, check_pending
from .predictions import Predictor, binary_classes, forwarded_event, prediction_output
from .rejections import give_back, reject, rejection_reason

__all__ = [
    "RunMonitor",
    "RunStats",
    "Runner",
    "StateKeeper",
    "check_resumable",
    "check_snapshot",
    "takes_hashed_columns",
]

_log = logging.getLogger(__name__)

#: Records read at most at a time while the pace of the learner is not known (see `Runner._read_size`).
FIRST_BATCH = 64
#: A batch holds at most this fraction of the statistics interval's work (see `Runner._read_size`) ...
STATS_BATCHES = 4
#: ... and at least this many seconds of it (or ``batch_size`` records).
MIN_BATCH_SECONDS = 0.1


@dataclass
class RunStats:
    """Counts of what the runner did, and when it saw its first and last records."""

    events: int = 0
    predicted: int = 0
    learned: int = 0
    rejected: int = 0
    first: float | None = None
    last: float | None = None
    timed: int = 0  # records between ``first`` and ``last``

    def seen(self, count: int, start: float, end: float) -> None:
        """``count`` records were processed from ``start`` to ``end``."""
        if self.first is None:
            self.first = start
        self.timed += count
        self.last = end

    def rate(self) -> float:
        """Records per second while records were flowing (start-up and idle waits excluded)."""
        if self.first is None or self.last is None or self.last == self.first:
            return math.nan
        return self.timed / (self.last - self.first)


# -- what watches a run ------------------------------------------------------------------------


class RunMonitor(Protocol):
    """What watches a run from outside it (the metrics of `run.metrics`), called in the runner's thread."""

    def tick(self, idle: bool) -> None:
        """A batch was processed (``idle``: the source had nothing) and the loop goes round again."""

    def rejected(self, reason: str) -> None:
        """A record was rejected: "malformed" (it is no event) or "refused" (the learner refused a value)."""


class StateKeeper(Protocol):
    """What keeps a run's state durable: its checkpoints (`persist.checkpoint.Checkpoints`), or a cluster
    learner's syncs (`distribute.cluster.ClusterSync`). The source's offsets are committed after each ``write``."""

    #: Whether a write may be due while no record arrives (a cluster learner folds the others' deltas then).
    writes_when_idle: bool

    def mark(self, events: int) -> None:
        """Count from here: ``events`` have been processed when the run starts (or resumes)."""

    def due(self, events: int) -> bool:
        """Whether a write is due, with ``events`` processed."""

    def events_until_due(self, events: int) -> int | None:
        """How many more events until a write is due by count (None: not by count)."""

    def write(self, model: Any, runner_state: dict, source_position: dict) -> object:
        """Make the state durable: the learner, the runner's ``snapshot()`` and the source's ``position()``."""


# -- the binary and the multiclass handling of predictions and labels --------------------------

#: What a prediction is scored by when its label arrives: the margin (binary) or the class predicted.
Prediction = TypeVar("Prediction", contravariant=True)


class _Task(Protocol[Prediction]):
    """How the runner checks labels and learns for one kind of learner (`Predictor` predicts)."""

    def check_label(self, label: object) -> None:
        """A ValueError for a label the learner would refuse."""

    def learn(self, x: dict, label: object, prediction: Prediction, user: str | None) -> None:
        """Learn ``x`` with ``label`` (as ``user``'s, with a learner of personal models), and report ``prediction``
        against it."""


class _BinaryTask:
    """A binary learner: labels are binary classes, and a prediction is scored by its margin."""

    def __init__(self, model: BinaryLearner, report: BinaryReport) -> None:
        self.model = model
        self.report = report
        self.users: UserReports | None = None  # a report per user, when asked for (`Runner.report_users`)

    def check_label(self, label: object) -> None:
        binary_sign(label)

    def learn(self, x: dict, label: object, prediction: float, user: str | None = None) -> None:
        positive = binary_sign(label) > 0
        if user is not None and isinstance(self.model, PersonalPegasos):
            self.model.learn_one(x, positive, user=user)
        else:
            self.model.learn_one(x, positive)
        self.report.update(positive, prediction > 0.0, prediction)
        if self.users is not None:
            self.users.update(user, positive, prediction)


class _CompiledBinaryTask(_BinaryTask):
    """A binary learner that also learns runs of CSR rows in its compiled loop."""

    model: CompiledLearner

    def __init__(self, model: CompiledLearner, report: BinaryReport) -> None:
        super().__init__(model, report)

    def learn_rows(self, batch: LearnBatch) -> tuple[int, ValueError | None]:
        """The compiled loop from the batch's start up to the first row the learner refuses (see
        ``learn_rows``); the rows learned are reported."""
        end, error = self.model.learn_rows(batch)
        first = batch.start
        self.report.update_many(batch.signs[first:end] > 0, batch.decisions[first:end])
        return end, error


class _MulticlassTask:
    """A multiclass learner: labels are hashable, and a prediction is scored by its class."""

    def __init__(self, model: MulticlassLearner, report: MulticlassReport) -> None:
        self.model = model
        self.report = report

    def check_label(self, label: object) -> None:
        try:
            hash(label)
        except TypeError:
            raise ValueError(f"unknown label {label!r}: a class label must be hashable") from None

    def learn(self, x: dict, label: object, prediction: object, user: str | None = None) -> None:
        self.model.learn_one(x, label)
        self.report.update(label, prediction)


def _task(model: BinaryLearner | MulticlassLearner, report: BinaryReport | MulticlassReport) -> _Task[Any]:
    """The handling of ``model`` that ``report`` (a binary or a multiclass one) calls for."""
    if isinstance(report, BinaryReport) and isinstance(model, CompiledLearner):
        return _CompiledBinaryTask(model, report)
    if isinstance(report, BinaryReport) and isinstance(model, BinaryLearner):
        return _BinaryTask(model, report)
    if isinstance(report, MulticlassReport) and isinstance(model, MulticlassLearner):
        return _MulticlassTask(model, report)
    raise TypeError(f"a {type(report).__name__} cannot report on a {type(model).__name__}")


def check_snapshot(snapshot: object, multiclass: bool) -> None:
    """Refuse (ValueError) a saved runner state (`Runner.snapshot`) that ``restore`` could not take up for a
    (``multiclass`` or binary) learner: counts that are no integers >= 0, pending examples that could not be put
    back (`check_pending`), another learner's report (`check_report`)."""
    fields = {"counts": 4, "pending_counts": 3}
    if not isinstance(snapshot, dict) or not {*fields, "pending", "report"} <= set(snapshot):
        raise ValueError("runner state: expected counts, pending, pending_counts and report")
    for name, length in fields.items():
        counts = snapshot[name]
        if not (isinstance(counts, list) and len(counts) == length and all(map(is_count, counts))):
            raise ValueError(f"runner state: {name}: expected {length} integers >= 0")
    if not is_count(snapshot.get("empty_bodies", 0)):
        raise ValueError("runner state: empty_bodies: expected an integer >= 0")
    check_pending(snapshot["pending"])
    check_report(snapshot["report"], multiclass)


def check_resumable(state: dict, manifest: dict) -> None:
    """Refuse (ValueError) a checkpoint a run cannot resume from: its runner state (`check_snapshot`), its count of
    events or its source position (`check_position`) are not what a run writes."""
    if not is_count(manifest.get("events")):
        raise ValueError("events: expected an integer >= 0")
    check_position(manifest.get("source"))
    check_snapshot(state.get("runner"), state["model"]._multiclass)


@dataclass
class _Loop:
    """What the loop of a run (`Runner.run`) carries from one read to the next."""

    last_event: float  # when records last arrived (or the source was still joining its group)
    last_stats: float  # when the statistics line was last logged (at first: when the run started)
    events_at_stats: int  # the records processed then
    pace: float | None = None  # records processed per second in the last batch
    # whether the source's position may be checkpointed and committed: it covers only records processed, and
    # not the first records of a run that rejected each of them (read again once the cause is mended)
    keep_position: bool = True


class Runner:
    """Predicts every event with features, learns every label, and reports on the way.

    ``run`` works in any thread: process-wide matters (signal handlers calling ``request_stop``,
    the garbage collector) are the caller's, the command line's. The statistics line and the idle
    stop (info) go to this module's logger, rejections (warnings) to `run.rejections`'s.

    Parameters
    ----------
    model
        A learner of this package (binary or multiclass).
    features
        `EmailFeatures` turns an event's text into features; `DictHasher` hashes the features events
        carry into a fixed number of columns (one record at a time: the compiled batch path learns
        the names as they come); None: events must carry ``x``, used as they are.
    parser
        Records to events.
    sink
        Receives one prediction ``{"id", "predicted", "score", "proba"}`` per predicted event (see
        `run.predictions`: the class predicted is named as ``parser``'s labels are).
    pending
        Where examples wait for a delayed label.
    report
        The prequential metrics: a `BinaryReport` for a binary learner, a `MulticlassReport` for a
        multiclass one.
    on_error
        "skip": count a bad record, send it to ``dead_letters`` and go on; "stop": raise StopRun
        (the bad record is not processed: the last checkpoint ends before it). A bad record is one
        the parser cannot take (whatever it raised) or one the learner refuses.
    dead_letters
        Receives the bad records (None: only counted and logged).
    stats_every_seconds
        How often a statistics line is logged (a batch is cut to what the learner processes before
        the line is due, see ``_read_size``; a source waiting for records ticks every poll).
    batch_bytes
        Read about this many bytes of records at most at a time (from the mean size of the records of the
        last batch; None: no bound), so that a batch of large records (emails) holds little memory and stays
        in the processor's caches.
    batch_size
        Read up to this many records at a time (as many as the source has at hand: a file's next
        lines, the complete lines waiting on standard input, the messages a Kafka consumer has
        fetched) and learn each run of labelled feature events in them with the learner's compiled
        loop (``learn_rows``), which gives the same model, predictions and metrics as one record at a
        time. 0, a learner without ``learn_rows`` or ``on_error: stop`` (which must stop right after
        the bad record): one at a time.
    stop_after_leading_rejections
        A run of which each of the first this many records is rejected (each record, when the input ends
        before) stops with `AllRejected`, saying what the records look like, and neither checkpoints nor
        commits them (0: never; see `run.diagnosis`). No checkpoint is due until a record is taken.
    forward
        Emit each event with input, with the learner's score, in place of its prediction (`forwarded_event`,
        ``output.forward``): the input of the instances that learn the users' offsets (`pegasos_stream.users`). A
        learner of personal models then learns and predicts with its shared learner alone.

    """

    def __init__(
        self,
        model: BinaryLearner | MulticlassLearner,
        features: EmailFeatures | DictHasher | None,
        parser: EventParser,
        sink: Sink,
        pending: PendingLabels,
        report: BinaryReport | MulticlassReport,
        on_error: str = "skip",
        dead_letters: Sink | None = None,
        stats_every_seconds: float = 10.0,
        batch_size: int = 0,
        batch_bytes: int | None = None,
        stop_after_leading_rejections: int = 0,
        forward: bool = False,
    ) -> None:
        self.model = model
        self.features = features
        self.parser = parser
        self.sink = sink
        self.pending = pending
        self.report = report
        self.on_error = on_error
        self.dead_letters = dead_letters
        self.stats_every_seconds = stats_every_seconds
        self._forwarding = forward
        # forwarding, a learner of personal models learns and predicts with its shared learner alone
        learner = model.shared if forward and isinstance(model, PersonalPegasos) else model
        self._task = _task(learner, report)
        multiclass = isinstance(report, MulticlassReport)
        if forward and multiclass:
            raise TypeError("forwarded events carry a binary learner's scores")
        self.predictor = Predictor(learner, features, binary_classes(parser.labels), multiclass)
        self._compiled = self._task if isinstance(self._task, _CompiledBinaryTask) else None
        batched = self._compiled is not None and on_error == "skip"
        self.batch_size = batch_size if batched else 0
        self.batch_bytes = batch_bytes
        self._record_bytes = 0.0  # the mean size of the records of the last batch read
        self.stats = RunStats()
        self._empty_bodies_before = 0  # those of the run this one resumed
        self._emits = not isinstance(sink, NullSink)
        self._batches = BatchParser(parser, features, takes_hashed_columns(learner, features), ids=self._emits)
        self.monitor: RunMonitor | None = None  # told of each round of the loop and each rejection (metrics)
        self._stop_requested = False
        self._lock = threading.Lock()  # one record, or one checkpoint, at a time
        # the model learned records whose predictions are not all emitted (see ``_learn_rows``)
        self._learned_unemitted = False
        # a flush of the outputs, or a checkpoint, failed: no later checkpoint may cover the records since the last
        self._unsaved = False
        self.stop_after_leading_rejections = stop_after_leading_rejections
        self._leading: LeadingRejections | None = None  # the watch over the first records, while all are rejected
        #: The clock of the statistics line's interval and the idle stop (a test drives its own).
        self.clock: Callable[[], float] = time.monotonic

    # -- one record ------------------------------------------------------------------------

    def process(self, record: Record) -> None:
        """Everything one record leads to; a bad one is rejected without touching the model. The
        record is counted (``stats.events``) once it is completely processed."""
        self._handle(record, parse_record(self.parser, record))
        self.stats.events += 1

    def _handle(self, record: Record, parsed: Parsed) -> None:
        try:
            if isinstance(parsed, BadRecord):
                raise parsed
            if parsed is None:
                return
            if parsed.label is not None:  # refused before anything is predicted or emitted
                self._task.check_label(parsed.label)
            if parsed.has_input:
                self._predict_and_learn(parsed, record)
            else:
                self._late_label(parsed, record)
        except (ValueError, TypeError, OverflowError) as error:  # BadRecord, or a value the learner refused
            self._reject(record, error)

    def _predict_and_learn(self, event: Event, record: Record) -> None:
        x = self.predictor.features_of(event)
        score, proba, predicted, prediction = self.predictor.predict(x, event.user)
        if self._forwarding:
            self._forward_and_learn(event, record, x, score, prediction)
            return
        self.sink.emit(prediction_output(event.id, predicted, score, proba))
        self.stats.predicted += 1
        if event.label is None:
            self.pending.add(event.id, x, prediction, event.user)
        else:
            self._learn(x, event.label, prediction, event.user)

    def _forward_and_learn(self, event: Event, record: Record, x: dict, score: float, prediction: Any) -> None:
        """Forwarding: the shared learner learns a labelled event, then the event goes out with its label, f(x)
        and t before it learned it. An event it refuses goes out without its label (scored, not learned: no offset
        learns what the shared learner refused) before its record is rejected; an event without a label waits,
        its record kept to go out again with its label."""
        shared_t = cast(BinaryLearner, self.predictor.model).t
        self.stats.predicted += 1
        emit, fields = self.sink.emit, self.parser.fields
        if event.label is None:
            emit(forwarded_event(record.value, fields, event.id, score, None, shared_t))
            self.pending.add(event.id, x, prediction, event.user, record.value.decode())
            return
        try:
            self._learn(x, event.label, prediction, event.user)
        except Exception:
            emit(forwarded_event(record.value, fields, event.id, score, None, shared_t))
            raise
        emit(forwarded_event(record.value, fields, event.id, score, binary_sign(event.label) > 0, shared_t))

    def _late_label(self, event: Event, record: Record) -> None:
        waiting = self.pending.take(event.id)
        if waiting is None:
            if self._leading is not None:
                self._leading.note_unmatched(record)
            return
        if waiting.record is None:
            self._learn(waiting.x, event.label, waiting.score, waiting.user)
            return
        # forwarding: the event goes out again, with its label and the shared learner's f(x) before it learns it
        shared = cast(BinaryLearner, self.predictor.model)
        shared_score, shared_t = shared.decision_function_one(waiting.x), shared.t
        self._learn(waiting.x, event.label, waiting.score, waiting.user)
        positive = binary_sign(event.label) > 0
        self.sink.emit(forwarded_event(waiting.record, self.parser.fields, event.id, shared_score, positive, shared_t))

    def _learn(self, x: dict, label: object, prediction: object, user: str | None) -> None:
        self._task.learn(x, label, prediction, user)
        self.stats.learned += 1

    def _reject(self, record: Record, error: Exception) -> None:
        """Stop, or log, dead-letter and count ``record`` (counted once its dead letter is out)."""
        reject(record, error, self.dead_letters, self.on_error)
        if self._leading is not None:
            self._leading.note(record, rejection_reason(record, error))
        self.stats.rejected += 1
        if self.monitor is not None:
            self.monitor.rejected("malformed" if isinstance(error, BadRecord) else "refused")

    # -- many records: the compiled loop ------------------------------------------------------

    @property
    def _single_records_batched(self) -> bool:
        """Whether a batch of one record goes through `process_many`, as a live stream's often is: with text features,
        whose compiled reader and loop learn a message two to three times as fast as ``learn_one`` over its dict; not
        one record at a time (``batch_size`` 0), which is ``learn_one``'s path."""
        return self.batch_size > 0 and isinstance(self.features, EmailFeatures)

    def process_many(self, records: RecordBatch) -> None:
        """``process`` for each record, in order; with a compiled learner, each run of labelled
        feature events in between the others (text, unlabelled, label-only or bad records) is
        learned by its compiled loop. ``stats.events`` counts the records processed so far."""
        compiled = self._compiled
        if compiled is None:
            for index in range(len(records)):
                self.process(records[index])
            return
        counted = self.stats.events  # the records before this batch
        for start, batch in self._batches.pieces(records):
            self._process_parsed(compiled, batch, counted + start)

    def _process_parsed(self, compiled: _CompiledBinaryTask, batch: ParsedBatch, counted: int) -> None:
        """``process_many`` of the records of a batch parsed, ``counted`` the records before them."""
        records = batch.records
        learned = 0
        for before, index in enumerate(sorted(batch.others)):
            row = index - before  # the rows of the records before this one
            self._learn_rows(compiled, batch, learned, row, counted)
            learned = row
            self._handle(records[index], batch.others[index])
            self.stats.events = counted + index + 1
        self._learn_rows(compiled, batch, learned, len(batch.indices), counted)

    def _learn_rows(
        self, compiled: _CompiledBinaryTask, batch: ParsedBatch, start: int, stop: int, counted: int
    ) -> None:
        """Predict, learn, report and emit rows ``start:stop``; a row the learner refuses is rejected.
        The records of the rows learned count as processed (``stats.events``, from ``counted`` before
        the batch) once their predictions are emitted; the model learned them before, and is ahead of
        the records processed while they are emitted (``_learned_unemitted``)."""
        if start == stop:
            return
        part = LearnBatch.new(batch.rows.slice(start, stop), batch.signs[start:stop])
        decisions, probas = part.decisions, part.probas
        first = 0
        while first < stop - start:
            end, error = compiled.learn_rows(part.at(first))
            # a row refused by learn_one was still predicted (as one at a time), unless its margin was not finite
            predicted = end + (error is not None and not math.isnan(decisions[end]))
            self.stats.learned += end - first
            self.stats.predicted += predicted - first
            if self._emits:
                self._learned_unemitted = True
                learned_t = cast(BinaryLearner, self.predictor.model).t if self._forwarding else 0
                first_t = learned_t - (end - first)  # (the examples learned before row ``first``)
                rows = (start + first, end - first, first_t)
                self._emit_rows(batch, rows, decisions[first:predicted], probas[first:predicted])
                self._learned_unemitted = False
            if end > first:
                self.stats.events = counted + batch.indices[start + end - 1] + 1
            if error is not None:
                self._reject(batch.records[batch.indices[start + end]], error)
                self.stats.events = counted + batch.indices[start + end] + 1
            first = end + 1

    def _emit_rows(
        self, batch: ParsedBatch, rows: tuple[int, int, int], decisions: np.ndarray, probas: np.ndarray
    ) -> None:
        """Emit the predictions of the rows from ``start`` on, or forwarding, their events (an event without an id
        is named by its position); ``rows``: (``start``, how many of them the learner learned, the examples it had
        learned before the first). Forwarded, a row it refused goes out without its label: no offset learns it."""
        (start, learned, first_t), emit, position = rows, self.sink.emit, batch.records.position
        stop = start + len(decisions)
        indices, ids = batch.indices[start:stop], cast(list, batch.ids)[start:stop]
        if self._forwarding:
            records, fields = batch.records, self.parser.fields
            signs = batch.signs[start:stop].tolist()
            for row, (index, event_id, score, sign) in enumerate(zip(indices, ids, decisions.tolist(), signs)):
                event_id = position(index) if event_id is None else event_id
                label = sign > 0 if row < learned else None
                emit(forwarded_event(records[index].value, fields, event_id, score, label, first_t + row))
            return
        negative, positive = self.predictor.classes
        for index, event_id, score, proba in zip(indices, ids, decisions.tolist(), probas.tolist()):
            event_id = position(index) if event_id is None else event_id
            emit(prediction_output(event_id, positive if proba > 0.5 else negative, score, proba))  # binary_prediction

    def report_users(self) -> UserReports:
        """Report each user's labelled predictions apart from here on (a binary learner's; the records one at a
        time, the way the users of events reach the learner), and return those reports."""
        if not isinstance(self._task, _BinaryTask):
            raise TypeError("a report per user is made of a binary learner's predictions")
        self._task.users = users = UserReports()
        self._compiled = None
        self.batch_size = 0
        return users

    @property
    def user_reports(self) -> UserReports | None:
        """The reports per user, when `report_users` asked for them."""
        return self._task.users if isinstance(self._task, _BinaryTask) else None

    @property
    def empty_bodies(self) -> int:
        """Messages that kept no body text (`EmailFeatures.empty_bodies`), a resumed run's included."""
        return self._empty_bodies_before + self._empty_bodies_read()

    def _empty_bodies_read(self) -> int:
        return self.features.empty_bodies if isinstance(self.features, EmailFeatures) else 0

    # -- state for checkpoints -------------------------------------------------------------

    def snapshot(self) -> dict:
        """Everything besides the learner that the next update or report depends on."""
        now = self.pending.clock()
        return {
            "counts": [self.stats.events, self.stats.predicted, self.stats.learned, self.stats.rejected],
            "pending": self.pending.columns(now),
            "pending_counts": [self.pending.dropped, self.pending.expired, self.pending.unmatched],
            "report": self.report.state(),
            "empty_bodies": self.empty_bodies,
        }

    def restore(self, snapshot: dict) -> None:
        """Take up the state of ``snapshot`` (from a checkpoint of the same configuration)."""
        self.stats.events, self.stats.predicted, self.stats.learned, self.stats.rejected = snapshot["counts"]
        now = self.pending.clock()
        if isinstance(snapshot["pending"], dict):  # columns
            self.pending.restore_columns(snapshot["pending"], now)
        else:  # one [id, x, score, age] entry each, as checkpoints written before the columns hold them
            for key, x, score, age in snapshot["pending"]:
                self.pending.restore(key, x, score, now - age)
        self.pending.dropped, self.pending.expired, self.pending.unmatched = snapshot["pending_counts"]
        self.report.restore(snapshot["report"])
        self._empty_bodies_before = snapshot.get("empty_bodies", 0) - self._empty_bodies_read()

    # -- the loop --------------------------------------------------------------------------

    def request_stop(self, *_: object) -> None:
        """Finish the current record, then stop; callable from any thread, or as a signal handler."""
        self._stop_requested = True

    @property
    def stop_requested(self) -> bool:
        """Whether `request_stop` was called (a signal, say): the run stops, or stopped, before its input ended."""
        return self._stop_requested

    def run(
        self,
        source: Source,
        max_events: int | None = None,
        stop_when_idle: float | None = None,
        on_progress: Callable[[Source], None] | None = None,
        checkpoints: StateKeeper | None = None,
    ) -> RunStats:
        """Consume ``source`` until it ends, ``max_events`` records, an idle period or ``request_stop``.

        With ``checkpoints``, a checkpoint is written when one is due, when partitions are revoked
        and at the end; the source's offsets are committed only once a checkpoint covers them. A record
        counts as processed once its prediction and any dead letter are emitted, and a checkpoint is
        written only once the sinks have accepted them (``flush``). When something other than a bad
        record (a sink that fails, an interrupt) stops the run inside a batch, the records of the batch
        not processed are given back to the source first (``Source.unclaim``), so that the last
        checkpoint and commit end at the last record processed. No checkpoint is written past the last
        one when a flush or a checkpoint failed, or when the model learned records whose predictions it
        could not emit (the compiled loop learns a run of rows before they are emitted).
        """
        started = self.clock()
        loop = _Loop(started, started, self.stats.events)
        if checkpoints is not None:
            self._start_checkpoints(checkpoints, source)
        self._leading = self._leading_watch()
        try:
            while not self._enough(max_events):
                size = self._read_size(max_events, checkpoints, loop.last_stats + self.stats_every_seconds, loop.pace)
                records = source.read(size)
                if records is None:
                    self._watch_leading(ended=True)
                    break
                arrived = bool(records)
                if arrived:
                    records = self._take(source, records, loop, on_progress)
                now = self._after_read(source, checkpoints, loop, arrived, idle=not records)
                if self._stop_requested:
                    break
                if stop_when_idle is not None and now - loop.last_event >= stop_when_idle:
                    _log.info("no event for %g s: stopping", stop_when_idle)
                    break
        except BaseException as error:
            covered = loop.keep_position and not isinstance(error, AllRejected)
            self._end_failed(source, checkpoints, covered and not self._learned_unemitted and not self._unsaved)
            raise
        self._end(source, checkpoints)
        return self.stats

    def _start_checkpoints(self, checkpoints: StateKeeper, source: Source) -> None:
        """Start the run's checkpoints at the records processed so far, and have a source whose partitions can be
        revoked write one when they are."""
        checkpoints.mark(self.stats.events)
        if hasattr(source, "on_revoke"):
            source.on_revoke = lambda partitions: self._checkpoint(checkpoints, source)

    def _take(
        self, source: Source, records: RecordBatch, loop: _Loop, on_progress: Callable[[Source], None] | None
    ) -> RecordBatch:
        """Claim and process a batch read from ``source``, timed (``stats.seen``, ``loop.pace``), then watch the first
        records and report progress; the records claimed. Stopped inside the batch, it gives the records not
        processed back to the source (``loop.keep_position`` False when it cannot take them)."""
        self._record_bytes = records.nbytes() / len(records)
        started = time.perf_counter()
        with self._lock:
            records = source.claim(records)
            counted = self.stats.events
            try:
                if len(records) == 1 and not self._single_records_batched:
                    self.process(records[0])
                elif records:
                    self.process_many(records)
            except BaseException:
                loop.keep_position = give_back(source, records, self.stats.events - counted)
                raise
        ended = time.perf_counter()
        self.stats.seen(len(records), started, ended)
        loop.pace = len(records) / (ended - started) if records and ended > started else loop.pace
        self._watch_leading()
        if on_progress is not None and records:
            on_progress(source)  # before the statistics line, so that both give the same count
        return records

    def _after_read(
        self, source: Source, checkpoints: StateKeeper | None, loop: _Loop, arrived: bool, idle: bool
    ) -> float:
        """What follows each read, whether records ``arrived`` or not: a checkpoint when one is due, the statistics
        line when it is due, and the monitor's tick (``idle``: no record was processed); the clock's time after
        the checkpoint."""
        if (
            checkpoints is not None
            and self._leading is None
            and (arrived or checkpoints.writes_when_idle)
            and checkpoints.due(self.stats.events)
        ):
            self._checkpoint(checkpoints, source)
        now = self.clock()  # after the batch and its checkpoint, however long they took
        if arrived or not getattr(source, "ready", True):
            loop.last_event = now  # (not idle while the source is still joining its group)
        if now - loop.last_stats >= self.stats_every_seconds:
            self._log_stats(source, now - loop.last_stats, self.stats.events - loop.events_at_stats)
            self._flush_outputs()
            if checkpoints is None and self._leading is None:
                source.commit()
            loop.last_stats, loop.events_at_stats = now, self.stats.events
        if self.monitor is not None:
            self.monitor.tick(idle=idle)
        return now

    def _end(self, source: Source, checkpoints: StateKeeper | None) -> None:
        """A final checkpoint and commit (without checkpoints: the outputs flushed, then the source committed)."""
        if checkpoints is not None:
            self._checkpoint(checkpoints, source)
        else:
            self._flush_outputs()
            source.commit()

    def _end_failed(self, source: Source, checkpoints: StateKeeper | None, covered: bool) -> None:
        """The end of a run stopped by an error: `_end` when the source's position covers only the records processed
        and the model learned nothing more (``covered``), else the outputs flushed; a sink that fails again (as the
        one that stopped the run may) leaves the checkpoint and commit where they were."""
        with contextlib.suppress(SinkError):
            if covered:
                self._end(source, checkpoints)
            else:
                self._flush_outputs()

    def _leading_watch(self) -> LeadingRejections | None:
        """The watch over the first records of the run (None: ``stop_after_leading_rejections`` is 0)."""
        if not self.stop_after_leading_rejections:
            return None
        multiclass = isinstance(self.report, MulticlassReport)
        limit = self.stop_after_leading_rejections
        return LeadingRejections(limit, self.parser, multiclass, self.stats.events, self.stats.rejected)

    def _watch_leading(self, ended: bool = False) -> None:
        """Stop watching the first records once one was not rejected; `AllRejected` once each of them was (each
        record of the input, when it has ``ended``)."""
        if self._leading is not None and not self._leading.check(self.stats.events, self.stats.rejected, ended):
            self._leading = None

    def _enough(self, max_events: int | None) -> bool:
        """Whether ``max_events`` records have been processed (none are, with ``max_events`` 0)."""
        return max_events is not None and self.stats.events >= max_events

    def _read_size(
        self, max_events: int | None, checkpoints: StateKeeper | None, stats_due: float, pace: float | None
    ) -> int:
        """How many records to read next: ``batch_size`` (or 1), never past ``max_events`` or a
        checkpoint that is due, nor more than the learner processes, at ``pace`` (records per second
        in the last batch), before the statistics line is due at ``stats_due``, or in a
        ``STATS_BATCHES``-th of the statistics interval (but ``MIN_BATCH_SECONDS`` at least), so
        that a misjudged pace delays the line little; ``FIRST_BATCH`` while the pace is not known;
        nor more than ``batch_bytes`` of records of the last batch's mean size; nor past the first
        records a run watches while each is rejected (`LeadingRejections`)."""
        size = self.batch_size or 1
        if size > 1:
            seconds = min(stats_due - self.clock(), self.stats_every_seconds / STATS_BATCHES)
            size = min(size, FIRST_BATCH if pace is None else max(1, int(pace * max(seconds, MIN_BATCH_SECONDS))))
            if self.batch_bytes is not None and self._record_bytes:
                size = min(size, max(1, int(self.batch_bytes / self._record_bytes)))
        if max_events is not None:
            size = min(size, max_events - self.stats.events)
        if checkpoints is not None:
            size = min(size, checkpoints.events_until_due(self.stats.events) or size)
        if self._leading is not None:
            size = min(size, self._leading.left(self.stats.events))
        return size

    def _flush_outputs(self) -> None:
        """Flush the sinks: what they were given is accepted (a SinkError when not, after which no checkpoint of the
        run covers the records since the last one)."""
        try:
            self.sink.flush()
            if self.dead_letters is not None:
                self.dead_letters.flush()
        except BaseException:
            self._unsaved = True
            raise

    def _checkpoint(self, checkpoints: StateKeeper, source: Source) -> None:
        """Flush the outputs, write a checkpoint of everything processed, then commit the source. A run whose
        checkpoint failed writes no other one (its error stops the run)."""
        with self._lock:
            self._flush_outputs()
            try:
                checkpoints.write(self.model, self.snapshot(), source.position())
            except BaseException:
                self._unsaved = True
                raise
        source.commit()

    def _log_stats(self, source: Source, seconds: float, events: int) -> None:
        """The statistics line: cumulative counts and accuracy (a resumed run's included), the
        ``events`` of the last ``seconds``, the ROC AUC of the recent scores, and the state now."""
        if not _log.isEnabledFor(logging.INFO):
            return
        summary = self.report.recent_summary()
        line = f"cumulative: events={self.stats.events} learned={self.stats.learned} rejected={self.stats.rejected}"
        if isinstance(self.features, EmailFeatures):
            line += f" empty_bodies={self.empty_bodies}"
        line += (
            f" accuracy={summary['accuracy']:.4f} t={self.model.t}"
            f"; last {seconds:.3g} s: events={events} rate={events / seconds if seconds else math.nan:.0f}/s"
        )
        if "roc_auc" in summary:
            line += f"; last {summary['scored']} scores: roc_auc={summary['roc_auc']:.4f}"
        line += f"; now: pending={len(self.pending)}"
        support, norm, lag = getattr(self.model, "n_support", None), getattr(self.model, "norm", None), source.lag()
        members = getattr(self.model, "member_weights", None)
        if members is not None:
            line += " members=" + ",".join(f"{name}:{weight:.3f}" for name, weight in members.items())
        if support is not None:
            line += f" svs={support}"
        elif norm is not None:
            line += f" norm={norm:.4g}"
        if lag is not None:
            line += f" lag={lag}"
        _log.info(line)


def takes_hashed_columns(model: object, features: EmailFeatures | DictHasher | None) -> bool:
    """Whether ``model`` keeps weight arrays (``n_features``, or widening up to ``max_features``) of every column
    ``features`` hash into: a batch's rows then index them directly, with no numbering of the batch's features."""
    columns = getattr(model, "max_features", None) or getattr(model, "n_features", None)
    bits = None if features is None else features.hash_bits
    return isinstance(columns, int) and bits is not None and 2**bits <= columns
