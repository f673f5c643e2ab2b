"""The stream loop: read, parse, predict, emit, learn (now or when the label arrives), report."""

from __future__ import annotations

import gc
import math
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TextIO

import numpy as np
from river import base

from ..features import EmailFeatures
from ..learners.rows import Rows
from ..learners.validation import binary_sign
from .evaluation import BinaryReport, MulticlassReport
from .fastparse import name_table, parse_json_events, parse_svmlight
from .parsing import BadRecord, Event, EventParser
from .pending import PendingLabels
from .records import Record, RecordBatch
from .sinks import NullSink, Sink, dead_letter
from .sources import Source

if TYPE_CHECKING:
    from ..persist.checkpoint import Checkpoints

__all__ = ["RunStats", "Runner", "StopRun"]


class StopRun(RuntimeError):
    """A bad record with ``on_error: stop``: the message names the record's position."""


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
        if self.first is None or self.last == self.first:
            return math.nan
        return self.timed / (self.last - self.first)


class Runner:
    """Predicts every event with features, learns every label, and reports on the way.

    Parameters
    ----------
    model
        A learner of this package (binary or multiclass).
    features
        Turns an event's text into features (None: events must carry ``x``).
    parser
        Records to events.
    sink
        Receives one prediction ``{"id", "score", "proba", "label"}`` per predicted event.
    pending
        Where examples wait for a delayed label.
    report
        The prequential metrics.
    on_error
        "skip": count a bad record, send it to ``dead_letters`` and go on; "stop": raise StopRun.
    dead_letters
        Receives the bad records (None: only counted and reported).
    stats_every_seconds
        How often a statistics line goes to ``log``.
    log
        Where rejections and statistics go (None: whatever ``sys.stderr`` is at the time).
    batch_size
        Read up to this many records at a time (as many as the source has at hand: a file's next
        lines, the complete lines waiting on standard input, the messages a Kafka consumer has
        fetched) and learn each run of labelled feature events in them with the learner's compiled
        loop (``learn_rows``), which gives the same model, predictions and metrics as one record at a
        time. 0, a learner without ``learn_rows`` or ``on_error: stop`` (which must stop right after
        the bad record): one at a time.

    """

    def __init__(
        self,
        model: base.Classifier,
        features: EmailFeatures | None,
        parser: EventParser,
        sink: Sink,
        pending: PendingLabels,
        report: BinaryReport | MulticlassReport,
        on_error: str = "skip",
        dead_letters: Sink | None = None,
        stats_every_seconds: float = 10.0,
        log: TextIO | None = None,
        batch_size: int = 0,
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
        self.log = log
        compiled = hasattr(model, "learn_rows") and on_error == "skip"
        self.batch_size = batch_size if compiled else 0
        self.stats = RunStats()
        self._binary = not model._multiclass
        self._emits = not isinstance(sink, NullSink)
        self._svmlight_names: list = []  # the str of each numbered svmlight name, made once per run
        self._json_names = name_table()  # the JSON feature names, likewise
        self._label_signs = parser.label_signs()
        self._stop_requested = False
        self._lock = threading.Lock()  # one record, or one checkpoint, at a time

    # -- one record ------------------------------------------------------------------------

    def process(self, record: Record) -> None:
        """Everything one record leads to; a bad one is rejected without touching the model."""
        self.stats.events += 1
        self._handle(record, self._parse(record))

    def _parse(self, record: Record) -> Event | BadRecord | None:
        try:
            return self.parser.parse(record)
        except BadRecord as error:
            return error

    def _handle(self, record: Record, parsed: Event | BadRecord | None) -> None:
        try:
            if isinstance(parsed, BadRecord):
                raise parsed
            if parsed is None:
                return
            self._check_label(parsed.label)
            if parsed.has_input:
                self._predict_and_learn(parsed)
            else:
                self._late_label(parsed)
        except ValueError as error:  # BadRecord, or a value the learner refused
            self._reject(record, error)

    # -- many records: the compiled loop ------------------------------------------------------

    def process_many(self, records: RecordBatch) -> None:
        """``process`` for each record, in order; each run of labelled feature events in between the
        others (text, unlabelled, label-only or bad records) is learned by the compiled loop."""
        self.stats.events += len(records)
        batch = self._rows(records)
        learned = 0
        for before, index in enumerate(sorted(batch.others)):
            row = index - before  # the rows of the records before this one
            self._learn_rows(batch, learned, row)
            learned = row
            self._handle(records[index], batch.others[index])
        self._learn_rows(batch, learned, len(batch.indices))

    def _rows(self, records: RecordBatch) -> _ParsedBatch:
        if self.parser.format == "svmlight" and not self.parser.labels:
            status, rows, signs = parse_svmlight(records.values, self.parser.max_bytes, self._svmlight_names)
            others = {int(i): None for i in np.flatnonzero(status == 1)}
            others.update((int(i), self._parse(records[i])) for i in np.flatnonzero(status == 2))
            indices = np.flatnonzero(status == 0).tolist()
            return _ParsedBatch(records, rows, signs, indices, [None] * len(indices), others)
        if self.parser.format == "json":
            parsed = self._json_rows(records)
            if parsed is not None:
                return parsed
        return self._dict_rows(records)

    def _json_rows(self, records: RecordBatch) -> _ParsedBatch | None:
        """The batch through the C JSON parser; None when a row's label is not a binary class (rare:
        the Python parser then takes the whole batch, to reject those records as one at a time)."""
        status, rows, ids, labels = parse_json_events(
            records.values, self.parser.fields, self.parser.max_bytes, self._json_names
        )
        table = self._label_signs
        try:
            signs = np.array([table[label] for label in labels], dtype=np.float64)
        except KeyError:
            return None
        others = {int(i): self._parse(records[i]) for i in np.flatnonzero(status == 2)}
        return _ParsedBatch(records, rows, signs, np.flatnonzero(status == 0).tolist(), ids, others)

    def _dict_rows(self, records: RecordBatch) -> _ParsedBatch:
        dicts, signs, indices, ids, others = [], [], [], [], {}
        for index in range(len(records)):
            parsed = self._parse(records[index])
            sign = _sign(parsed)
            if sign is None:
                others[index] = parsed
            else:
                dicts.append(parsed.x)
                signs.append(sign)
                indices.append(index)
                ids.append(parsed.id)
        return _ParsedBatch(records, Rows.from_dicts(dicts), np.array(signs), indices, ids, others)

    def _learn_rows(self, batch: _ParsedBatch, start: int, stop: int) -> None:
        """Predict, emit, learn and report rows ``start:stop``; a row the learner refuses is rejected."""
        if start == stop:
            return
        part, part_signs = batch.rows.slice(start, stop), batch.signs[start:stop]
        decisions, probas = np.empty(stop - start), np.empty(stop - start)
        weights = np.ones(stop - start)
        first = 0
        while first < stop - start:
            end, error = self.model.learn_rows(part, part_signs, weights, decisions, probas, first)
            # a row refused by learn_one was still predicted (as one at a time), unless its margin was not finite
            predicted = end + (error is not None and not math.isnan(decisions[end]))
            if self._emits:
                self._emit_rows(batch, start + first, decisions[first:predicted], probas[first:predicted])
            self.stats.predicted += predicted - first
            self.stats.learned += end - first
            self.report.update_many(part_signs[first:end] > 0, decisions[first:end])
            if error is not None:
                self._reject(batch.records[batch.indices[start + end]], error)
            first = end + 1

    def _emit_rows(self, batch: _ParsedBatch, start: int, decisions: np.ndarray, probas: np.ndarray) -> None:
        """Emit the predictions of the rows from ``start`` on (an event without an id is named by its
        position)."""
        emit, position = self.sink.emit, batch.records.position
        stop = start + len(decisions)
        for index, event_id, score, proba in zip(
            batch.indices[start:stop], batch.ids[start:stop], decisions.tolist(), probas.tolist()
        ):
            event_id = position(index) if event_id is None else event_id
            emit({"id": event_id, "score": score, "proba": proba, "label": score > 0.0})

    def _check_label(self, label: object) -> None:
        """Refuse a label the learner would refuse, before anything is predicted or emitted."""
        if label is None:
            return
        if self._binary:
            binary_sign(label)
        else:
            try:
                hash(label)
            except TypeError:
                raise ValueError(f"unknown label {label!r}: a class label must be hashable") from None

    def _features(self, event: Event) -> dict:
        if event.x is not None:
            return event.x
        if self.features is None:
            raise BadRecord(event.position, "a text event needs features.type: email")
        return self.features.transform_one(event.text)

    def _predict_and_learn(self, event: Event) -> None:
        x = self._features(event)
        if self._binary:
            score = self.model.decision_function_one(x)
            proba = self.model.probability(score)
            label = score > 0.0
        else:
            probas = self.model.predict_proba_one(x)
            label = max(probas, key=probas.__getitem__) if probas else None
            proba = probas.get(label, 0.0) if probas else 0.0
            score = proba
        self.sink.emit({"id": event.id, "score": score, "proba": proba, "label": label})
        self.stats.predicted += 1
        if event.label is None:
            self.pending.add(event.id, x, score if self._binary else label)
        else:
            self._learn(x, event.label, score if self._binary else label)

    def _late_label(self, event: Event) -> None:
        waiting = self.pending.take(event.id)
        if waiting is not None:
            self._learn(waiting.x, event.label, waiting.score)

    def _learn(self, x: dict, label: object, prediction: object) -> None:
        self.model.learn_one(x, label)
        self.stats.learned += 1
        if self._binary:
            self.report.update(binary_sign(label) > 0, prediction > 0.0, prediction)
        else:
            self.report.update(label, prediction)

    def _reject(self, record: Record, error: ValueError) -> None:
        reason = str(error) if isinstance(error, BadRecord) else f"{record.position}: {error}"
        if self.on_error == "stop":
            raise StopRun(reason)
        self.stats.rejected += 1
        print(f"rejected {reason}", file=self.log or sys.stderr)
        if self.dead_letters is not None:
            self.dead_letters.emit(dead_letter(record.position, reason, record.value))

    # -- state for checkpoints -------------------------------------------------------------

    def snapshot(self) -> dict:
        """Everything besides the learner that the next update or report depends on."""
        now = self.pending.clock()
        report = self.report
        return {
            "counts": [self.stats.events, self.stats.predicted, self.stats.learned, self.stats.rejected],
            "pending": [[key, p.x, p.score, now - p.arrived] for key, p in self.pending.items()],
            "pending_counts": [self.pending.dropped, self.pending.expired, self.pending.unmatched],
            "report": {
                name: list(value) if isinstance(value, deque) else value
                for name, value in vars(report).items()
                if name != "window"
            },
        }

    def restore(self, snapshot: dict) -> None:
        """Take up the state of ``snapshot`` (from a checkpoint of the same configuration)."""
        self.stats.events, self.stats.predicted, self.stats.learned, self.stats.rejected = snapshot["counts"]
        now = self.pending.clock()
        for key, x, score, age in snapshot["pending"]:
            self.pending.restore(key, x, score, now - age)
        self.pending.dropped, self.pending.expired, self.pending.unmatched = snapshot["pending_counts"]
        for name, value in snapshot["report"].items():
            if name in ("scores", "positives"):
                getattr(self.report, name).extend(value)
            else:
                setattr(self.report, name, value)

    # -- the loop --------------------------------------------------------------------------

    def request_stop(self, *_: object) -> None:
        """Finish the current record, then stop (installed for SIGTERM and SIGINT)."""
        self._stop_requested = True

    def run(
        self,
        source: Source,
        max_events: int | None = None,
        stop_when_idle: float | None = None,
        on_progress: Callable[[Source], None] | None = None,
        checkpoints: Checkpoints | None = None,
    ) -> RunStats:
        """Consume ``source`` until it ends, ``max_events`` records, an idle period or a signal.

        With ``checkpoints``, a checkpoint is written when one is due, when partitions are revoked
        and at the end; the source's offsets are committed only once a checkpoint covers them.
        """
        previous = {sig: signal.signal(sig, self.request_stop) for sig in (signal.SIGTERM, signal.SIGINT)}
        last_event = last_stats = time.monotonic()
        if checkpoints is not None:
            checkpoints.mark(self.stats.events)
            if hasattr(source, "on_revoke"):
                source.on_revoke = lambda partitions: self._checkpoint(checkpoints, source)
        # What exists now (modules, the model, the source's client) outlives the run: set aside from
        # garbage collection, it is not traversed again by every full collection the stream triggers.
        gc.freeze()
        try:
            while (records := source.read(self._read_size(max_events, checkpoints))) is not None:
                now = time.monotonic()
                if records:
                    started = time.perf_counter()
                    with self._lock:
                        records = source.claim(records)
                        if len(records) == 1:
                            self.process(records[0])
                        elif records:
                            self.process_many(records)
                    self.stats.seen(len(records), started, time.perf_counter())
                    last_event = now
                    if checkpoints is not None and checkpoints.due(self.stats.events):
                        self._checkpoint(checkpoints, source)
                elif not getattr(source, "ready", True):
                    last_event = now  # not idle while the source is still joining its group
                if now - last_stats >= self.stats_every_seconds:
                    self._print_stats(source)
                    self.sink.flush()
                    if checkpoints is None:
                        source.commit()
                    last_stats = now
                if on_progress is not None and records:
                    on_progress(source)
                if self._stop_requested or (max_events is not None and self.stats.events >= max_events):
                    break
                if stop_when_idle is not None and now - last_event >= stop_when_idle:
                    print(f"no event for {stop_when_idle:g} s: stopping", file=self.log or sys.stderr)
                    break
        finally:
            gc.unfreeze()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            if checkpoints is not None:
                self._checkpoint(checkpoints, source)
            else:
                self._flush_outputs()
                source.commit()
        return self.stats

    def _read_size(self, max_events: int | None, checkpoints: Checkpoints | None) -> int:
        """How many records to read next: ``batch_size`` (or 1), never past ``max_events`` or a
        checkpoint that is due."""
        size = self.batch_size or 1
        if max_events is not None:
            size = min(size, max(max_events - self.stats.events, 1))
        if checkpoints is not None:
            size = min(size, checkpoints.events_until_due(self.stats.events) or size)
        return size

    def _flush_outputs(self) -> None:
        self.sink.flush()
        if self.dead_letters is not None:
            self.dead_letters.flush()

    def _checkpoint(self, checkpoints: Checkpoints, source: Source) -> None:
        """Flush the outputs, write a checkpoint of everything processed, then commit the source."""
        with self._lock:
            self._flush_outputs()
            checkpoints.write(self.model, self.snapshot(), source.position())
        source.commit()

    def _print_stats(self, source: Source) -> None:
        summary = self.report.recent_summary()
        size = getattr(self.model, "n_support", None)
        model_size = f"svs={size}" if size is not None else f"norm={self.model.norm:.4g}"
        lag = source.lag()
        print(
            f"events={self.stats.events} rate={self.stats.rate():.0f}/s "
            f"accuracy={summary.get('accuracy', math.nan):.4f} roc_auc={summary.get('roc_auc', math.nan):.4f} "
            f"t={self.model.t} {model_size} pending={len(self.pending)} rejected={self.stats.rejected}"
            + (f" lag={lag}" if lag is not None else ""),
            file=self.log or sys.stderr,
            flush=True,
        )


@dataclass
class _ParsedBatch:
    """A batch of records parsed: its labelled feature events as CSR ``rows`` with their label
    ``signs``, the index of each row's record, each row's event id (None: the record's position),
    and every other record's parse ({index: Event, BadRecord or None})."""

    records: RecordBatch
    rows: Rows
    signs: np.ndarray
    indices: list[int]
    ids: list
    others: dict


def _sign(parsed: Event | BadRecord | None) -> float | None:
    """The label's sign for a labelled feature event with a binary label; None for anything else."""
    if not isinstance(parsed, Event) or parsed.x is None or parsed.label is None:
        return None
    try:
        return binary_sign(parsed.label)
    except ValueError:
        return None
