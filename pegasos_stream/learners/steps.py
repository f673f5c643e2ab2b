"""The steps a Pegasos learner took, recorded so that another copy of the model can take them too.

A Pegasos step at global step t is decided by one test, y·f(x) < 1, on the model that predicted x; what
it does to the weights depends on t and on the model it is applied to. `StepLog` keeps, for each step,
what the test saw (the label, the sample weight, the decision, whether the margin was violated) and the
example of each violated step, in order. `PegasosClassifier.replay` applies a log to a model: the same
floating-point operations ``learn_one`` performs, with the recorded test in place of a new one. Applied to
the model that recorded them, a log gives back that model bit for bit; applied to another, it adds the
log's ΔS = Σ c·y·x and Δt to that model's (S, t) (see the cluster mode of `distribute.cluster`).

`StepRecorder` is the learner a run learns with when its steps are to be shared: it predicts and learns
with a `PegasosClassifier` (weights in arrays) and records each step into its log, with the example of every
step when asked (``every_row``: another model can then learn the examples again, with its own tests).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Generic

import numpy as np

from .batch import LearnBatch
from .protocols import ModelT
from .validation import binary_sign, check_sample_weight
from .weights import weight_columns

__all__ = ["StepLog", "StepRecorder"]


@dataclass
class StepLog:
    """Steps in the order taken: per step its label sign (±1.0), sample weight, decision (the predicting
    margin, which online Platt scaling learns from) and whether the margin was violated; the example of
    each violated step as a CSR row over the weight columns (``indptr``/``indices``/``data``), or of every
    step with ``every_row``.
    """

    signs: np.ndarray = field(default_factory=lambda: np.empty(0))
    weights: np.ndarray = field(default_factory=lambda: np.empty(0))
    decisions: np.ndarray = field(default_factory=lambda: np.empty(0))
    violated: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=bool))
    indptr: np.ndarray = field(default_factory=lambda: np.zeros(1, dtype=np.int64))
    indices: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    data: np.ndarray = field(default_factory=lambda: np.empty(0))
    every_row: bool = False

    def __len__(self) -> int:
        return len(self.signs)

    @property
    def n_positive(self) -> int:
        return int((self.signs > 0).sum())

    @property
    def n_negative(self) -> int:
        return len(self.signs) - self.n_positive

    def arrays(self) -> dict[str, np.ndarray]:
        """The log as named arrays (``from_arrays`` takes them back)."""
        return {name: getattr(self, name) for name in _ARRAYS}

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray], every_row: bool = False) -> StepLog:
        """A log from ``arrays()`` (and its ``every_row``); a ValueError when they do not make one."""
        log = cls(
            **{name: np.asarray(arrays[name], dtype=dtype) for name, dtype in _ARRAYS.items()}, every_row=every_row
        )
        n = len(log.signs)
        rows = n if every_row else int(log.violated.sum())
        if not (len(log.weights) == len(log.decisions) == len(log.violated) == n):
            raise ValueError("a step log's per-step arrays differ in length")
        if len(log.indptr) != rows + 1 or log.indptr[0] != 0 or np.any(np.diff(log.indptr) < 0):
            what = "step" if every_row else "violated step"
            raise ValueError(f"a step log's indptr does not describe one row per {what}")
        if log.indptr[-1] != len(log.indices) or len(log.indices) != len(log.data):
            raise ValueError("a step log's indptr, indices and data do not match")
        if n and not np.all(np.abs(log.signs) == 1.0):
            raise ValueError("a step log's signs must be -1.0 or +1.0")
        return log

    def rows(self) -> list[dict[int, float]]:
        """The example of each violated step (of every step, with ``every_row``), as a feature dict in the
        order it was learned."""
        bounds = self.indptr.tolist()
        indices, data = self.indices.tolist(), self.data.tolist()
        return [dict(zip(indices[a:b], data[a:b])) for a, b in zip(bounds, bounds[1:])]


_ARRAYS: dict[str, Any] = {
    "signs": np.float64,
    "weights": np.float64,
    "decisions": np.float64,
    "violated": np.bool_,
    "indptr": np.int64,
    "indices": np.int64,
    "data": np.float64,
}


class _Pieces:
    """A `StepLog` being recorded, in pieces joined by ``cut``."""

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        self.per_step: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        self.lengths: list[np.ndarray] = []
        self.indices: list[np.ndarray] = []
        self.data: list[np.ndarray] = []
        self.count = 0

    def add(
        self,
        signs: np.ndarray,
        weights: np.ndarray,
        decisions: np.ndarray,
        violated: np.ndarray,
        lengths: np.ndarray,
        indices: np.ndarray,
        data: np.ndarray,
    ) -> None:
        self.per_step.append((signs, weights, decisions, violated))
        self.lengths.append(lengths)
        self.indices.append(indices)
        self.data.append(data)
        self.count += len(signs)

    def cut(self, every_row: bool) -> StepLog:
        if not self.per_step:
            return StepLog(every_row=every_row)
        signs, weights, decisions, violated = (np.concatenate(part) for part in zip(*self.per_step))
        lengths = np.concatenate(self.lengths).astype(np.int64)
        log = StepLog(
            signs,
            weights,
            decisions,
            violated,
            np.concatenate(([0], np.cumsum(lengths))).astype(np.int64),
            np.concatenate(self.indices).astype(np.int64),
            np.concatenate(self.data).astype(np.float64),
            every_row,
        )
        self.clear()
        return log


class StepRecorder(Generic[ModelT]):
    """Predicts and learns with ``model``, a `PegasosClassifier` with weights in arrays (``n_features``), and
    records every step it takes; ``cut()`` hands the steps recorded since the last cut over as a `StepLog`,
    with the example of every step when ``every_row`` (else of the violated ones only).

    It answers as the model does (``decision_function_one``, ``probability``, ``learn_one``, ``learn_rows``,
    ``t``, ...). ``model`` may be replaced between steps (a cluster learner takes up the merged model).
    """

    _multiclass = False

    def __init__(self, model: ModelT, every_row: bool = False) -> None:
        if model.n_features is None or model.lambda_ == "auto":
            raise ValueError(
                "recording steps needs a PegasosClassifier with an explicit lambda_ and weights in arrays (n_features)"
            )
        self.model = model
        self.every_row = every_row
        self._pieces = _Pieces()

    # -- what the model answers ----------------------------------------------------------------

    @property
    def t(self) -> int:
        return self.model.t

    @property
    def n_features(self) -> int | None:
        return self.model.n_features

    @property
    def norm(self) -> float:
        return self.model.norm

    @property
    def recorded(self) -> int:
        """Steps recorded since the last cut."""
        return self._pieces.count

    def decision_function_one(self, x: Mapping) -> float:
        return self.model.decision_function_one(x)

    def probability(self, margin: float) -> float:
        return self.model.probability(margin)

    def predict_one(self, x: Mapping) -> bool:
        return self.model.predict_one(x)

    def predict_proba_one(self, x: Mapping) -> dict:
        return self.model.predict_proba_one(x)

    # -- learning, recorded ----------------------------------------------------------------------

    def learn_one(self, x: Mapping, y: bool | str | int, w: float = 1.0) -> None:
        model = self.model
        sign = binary_sign(y)
        weight = 1.0 if w == 1.0 else check_sample_weight(w)
        columns, values = model._u.example(x)  # type: ignore[union-attr]  # refuses a key that is no column
        margin, decision = model._remembered_margins(x)
        model.learn_one(x, y, weight)
        violated = sign * margin < 1.0
        kept = violated or self.every_row
        self._pieces.add(
            np.array([sign]),
            np.array([weight]),
            np.array([decision]),
            np.array([violated]),
            np.array([len(columns)] if kept else [], dtype=np.int64),
            columns if kept else columns[:0],
            values if kept else values[:0],
        )

    def learn_rows(self, batch: LearnBatch) -> tuple[int, ValueError | None]:
        """``PegasosClassifier.learn_rows``, recorded. With an averaged model, whose decisions are not the
        margins its test uses, each row is learned by ``learn_one``."""
        if self.model.average:
            return self._learn_rows_one_by_one(batch)
        end, error = self.model.learn_rows(batch)
        rows, start = batch.rows, batch.start
        if end > start:
            learned_signs = batch.signs[start:end]
            violated = learned_signs * batch.decisions[start:end] < 1.0
            chosen = np.arange(start, end) if self.every_row else np.flatnonzero(violated) + start
            first = rows.indptr[chosen]
            lengths = rows.indptr[chosen + 1] - first
            at = np.repeat(first - np.cumsum(lengths) + lengths, lengths) + np.arange(int(lengths.sum()))
            columns = rows.indices[at]
            named = weight_columns(rows.keys, self.model.n_features or 0)
            if not isinstance(named, range):  # (None cannot be: rows with a key that is no column are not learned)
                columns = np.asarray(named)[columns]
            self._pieces.add(
                learned_signs.copy(),
                batch.weights[start:end].copy(),
                batch.decisions[start:end].copy(),
                violated,
                lengths,
                columns,
                rows.data[at],
            )
        return end, error

    def _learn_rows_one_by_one(self, batch: LearnBatch) -> tuple[int, ValueError | None]:
        decisions, probas = batch.decisions, batch.probas
        for i in range(batch.start, len(batch.rows)):
            x = batch.rows.row(i)
            decisions[i] = np.nan
            if len(probas):
                probas[i] = np.nan
            try:
                decisions[i] = self.model.decision_function_one(x)
                if len(probas):
                    probas[i] = self.model.probability(decisions[i])
                self.learn_one(x, batch.signs[i] > 0, float(batch.weights[i]))
            except ValueError as error:
                self.model._last_scored = None
                return i, error
        return len(batch.rows), None

    def learn_many(self, X: object, y: object) -> None:
        raise TypeError("a StepRecorder learns one example at a time: learn_many's mini-batch step is not recorded")

    def cut(self) -> StepLog:
        """The steps recorded since the last cut, and a new log."""
        return self._pieces.cut(self.every_row)

    def discard(self) -> None:
        """Forget the steps recorded since the last cut (the model they were taken on is being replaced)."""
        self._pieces.clear()
