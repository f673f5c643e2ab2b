"""Serving: predictions of a model that never learns, for a stream of records or for requests.

A `ModelProvider` holds the model served, a `ServedModel` (what predicts with it, how records become its
events, its version and when it was written), and looks for a newer one when asked (``refresh``). A newer
model replaces the current one whole, in one assignment, so that each batch of records or each request is
predicted by one model from start to end, whatever thread asks; a newer one that cannot be served is refused,
the last `Refusal` kept for ``/health``, and the model served goes on. `Serving` predicts records with the current
model and keeps the counts; `serve_stream` ties it to a source and sinks, and `Watcher` refreshes the
provider and watches the age of the model from a thread of its own.

Predicting leaves a learner's model as it was, but not every learner's object untouched: a
`PegasosClassifier` remembers its last margins (for a ``learn_one`` that follows), and the kernel learner's
sparse layout works in a scratch array. So the predictions of one model are made one at a time, under its
lock; the features, the costly part for text, are worked out outside it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from ..io.records import Record, RecordBatch
from ..io.sinks import Sink
from ..io.sources import Source
from ..parse.parsing import EventParser
from ..run.predictions import Predictor, prediction_output, record_features
from ..run.rejections import give_back, reject, rejection_reason
from .access import AccessLog

__all__ = ["ModelProvider", "NoModel", "Refusal", "ServedModel", "Serving", "Watcher", "serve_stream", "unanswered"]

_log = logging.getLogger(__name__)

#: What a record comes to: its prediction, the error that rejects it, or None (nothing to predict: a
#: comment, a label-only event).
Outcome = dict | Exception | None


@dataclass(frozen=True)
class ServedModel:
    """A model to serve: its predictor and parser, its ``version`` (higher: newer), when it was written
    (Unix time; None for an untrained model) and what else to show of it (``about``: its file, its step
    count...)."""

    predictor: Predictor
    parser: EventParser
    version: int
    written_at: float | None
    about: dict = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock, compare=False, repr=False)

    def age(self) -> float | None:
        """Seconds since the model was written (None: an untrained model)."""
        return None if self.written_at is None else max(0.0, time.time() - self.written_at)


@dataclass(frozen=True)
class Refusal:
    """A newer model that was not served: why, and when (Unix time)."""

    reason: str
    at: float

    def about(self) -> dict:
        """The refusal as ``/health`` shows it: the reason, and the seconds since."""
        return {"reason": self.reason, "age_s": round(max(0.0, time.time() - self.at), 3)}


class ModelProvider(Protocol):
    """Where the models served come from (a checkpoint file or directory; a model topic)."""

    #: Where the models come from, for people ("a checkpoint in DIR").
    origin: str
    #: The last newer model refused (None: none was).
    last_refusal: Refusal | None

    @property
    def current(self) -> ServedModel | None:
        """The model to predict with (None while there is none yet); replaced whole by ``refresh``."""

    def refresh(self) -> bool:
        """Take up a newer model, if there is one that can be served; whether the model changed."""


class NoModel(RuntimeError):
    """There is no model to predict with yet; the message says where one is awaited."""


class Serving:
    """Predicts records with the current model of ``provider``; counts what it served and refused, and says
    when the model is older than ``max_staleness_s`` seconds. Safe to call from several threads."""

    def __init__(self, provider: ModelProvider, max_staleness_s: float | None = None) -> None:
        self.provider = provider
        self.max_staleness_s = max_staleness_s
        #: Where each request a protocol answers is logged (and, with metrics, counted).
        self.access = AccessLog()
        self.served = 0
        self.errors = 0
        self._counts = threading.Lock()
        self._said_stale: int | None = None  # the version last said to be stale

    def predict(self, records: Iterable[Record]) -> list[Outcome]:
        """What each record comes to, all with one model; a NoModel when there is none yet. Each prediction
        is `prediction_output` with the model's ``model_version`` and ``model_age_s``. Nothing is counted
        (`count`: what the caller served and refused)."""
        served = self.provider.current
        if served is None:
            raise NoModel(f"no model yet: waiting for {self.provider.origin}")
        age = served.age()
        model = {"model_version": served.version, "model_age_s": None if age is None else round(age, 3)}
        predictor = served.predictor
        outcomes: list[Outcome] = []
        for record in records:
            try:
                found = record_features(served.parser, predictor, record)
                if found is None:
                    outcomes.append(None)
                    continue
                event, x = found
                with served.lock:
                    score, proba, predicted, _ = predictor.predict(x, event.user)
            except (ValueError, TypeError, OverflowError) as error:  # a BadRecord, or a value the model refused
                outcomes.append(error)
                continue
            outcomes.append({**prediction_output(event.id, predicted, score, proba), **model})
        return outcomes

    def count(self, served: int, errors: int) -> None:
        """``served`` predictions went out, ``errors`` records or requests were refused."""
        with self._counts:
            self.served += served
            self.errors += errors

    def stale(self, served: ServedModel) -> bool:
        """Whether ``served`` is older than ``max_staleness_s`` (an untrained model has no age)."""
        age = served.age()
        return self.max_staleness_s is not None and age is not None and age > self.max_staleness_s

    def check_staleness(self) -> None:
        """Say (a warning, once per model) when the model served has become stale."""
        served = self.provider.current
        if served is None or served.version == self._said_stale or not self.stale(served):
            return
        self._said_stale = served.version
        _log.warning(
            "warning: model version %d is %.0f s old, more than --max-staleness-s %g (no newer model from %s)",
            served.version,
            served.age(),
            self.max_staleness_s,
            self.provider.origin,
        )

    def health(self) -> dict:
        """The state of the service: ``status`` ("ok", "stale", "untrained" or "waiting" for a first model),
        the model's version, age and what else is known of it, the counts, and the last newer model refused
        (``last_refusal``: its reason and the seconds since; null when none was)."""
        served = self.provider.current
        refusal = self.provider.last_refusal
        counts = {
            "served": self.served,
            "errors": self.errors,
            "max_staleness_s": self.max_staleness_s,
            "last_refusal": None if refusal is None else refusal.about(),
        }
        if served is None:
            return {"status": "waiting", "waiting_for": self.provider.origin, "model_version": None, **counts}
        age = served.age()
        status = "untrained" if age is None else "stale" if self.stale(served) else "ok"
        rounded = None if age is None else round(age, 3)
        return {"status": status, "model_version": served.version, "model_age_s": rounded, **served.about, **counts}


class Watcher:
    """From a daemon thread, every ``every`` seconds until ``close``: ``refresh`` the provider of ``serving``,
    and say when its model has become stale."""

    def __init__(self, serving: Serving, every: float) -> None:
        self.serving = serving
        self.every = every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="pegasos-stream model watcher", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _watch(self) -> None:
        while not self._stop.wait(self.every):
            try:
                self.serving.provider.refresh()
            except Exception as error:  # the model served goes on serving; the next round looks again
                _log.warning("looking for a newer model failed: %s: %s", type(error).__name__, error)
            self.serving.check_staleness()


def serve_stream(
    serving: Serving,
    source: Source,
    sink: Sink,
    dead_letters: Sink | None = None,
    batch_size: int = 1000,
    max_events: int | None = None,
    stop_when_idle: float | None = None,
    stop: threading.Event | None = None,
    on_error: str = "skip",
    answer_each: bool = False,
) -> int:
    """Predict the records of ``source`` until it ends, ``max_events`` records, ``stop_when_idle`` seconds
    without one, or ``stop``; the number of records processed.

    Each batch (what the source has at hand, up to ``batch_size`` records: standard input's complete lines
    as they arrive) is predicted by one model; its predictions go to ``sink``, its bad records, named by
    their position, are logged and go to ``dead_letters`` (``on_error: stop``: a StopRun instead), then both
    are flushed and the source committed: nothing is learned, so nothing else needs saving first. A run
    stopped inside a batch gives the records it did not write back to the source first. With ``answer_each``
    (a co-process, whose client reads one answer per line it writes), a record without a prediction gets one
    too, in its place: ``{"position", "error"}`` naming why (`unanswered`).
    """
    events = 0
    last_event = time.monotonic()
    while not (stop is not None and stop.is_set()) and (max_events is None or events < max_events):
        records = source.read(batch_size if max_events is None else min(batch_size, max_events - events))
        if records is None:
            break
        now = time.monotonic()
        if records or not getattr(source, "ready", True):
            last_event = now  # (not idle while the source is still joining its group)
        elif stop_when_idle is not None and now - last_event >= stop_when_idle:
            _log.info("no event for %g s: stopping", stop_when_idle)
            break
        if records:
            events += _serve_batch(serving, source, records, (sink, dead_letters), on_error, answer_each)
    return events


def _serve_batch(
    serving: Serving,
    source: Source,
    records: RecordBatch,
    sinks: tuple[Sink, Sink | None],
    on_error: str,
    answer_each: bool,
) -> int:
    """Claim and predict a batch of ``records`` read from ``source`` (see `serve_stream`), then flush the sinks
    (predictions, dead letters) and commit the source; the number of records claimed. Stopped inside the batch, it
    gives the records it did not write back to the source."""
    sink, dead_letters = sinks
    records = source.claim(records)
    done = served = rejected = 0
    try:
        for record, outcome in zip(records, serving.predict(records)):
            if isinstance(outcome, dict):
                sink.emit(outcome)
                served += 1
            else:
                if outcome is not None:
                    reject(record, outcome, dead_letters, on_error)
                    rejected += 1
                if answer_each:
                    sink.emit(unanswered(record, outcome))
            done += 1
    except BaseException:
        give_back(source, records, done)
        raise
    finally:
        serving.count(served, rejected)
    sink.flush()
    if dead_letters is not None:
        dead_letters.flush()
    source.commit()
    return len(records)


def unanswered(record: Record, outcome: Exception | None) -> dict:
    """The answer to a record without a prediction: its position, and why (``outcome``: the error that rejected
    it; None: it held nothing to predict, a label alone or a comment)."""
    if outcome is None:
        return {"position": record.position, "error": "nothing to predict (a label alone, or a comment)"}
    return {"position": record.position, "error": rejection_reason(record, outcome)}
