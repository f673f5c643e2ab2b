"""A batch of rows a learner learns in its compiled loop (``learn_rows``), with the arrays it fills."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from .calibration import squash
from .rows import Rows
from .validation import check_features

__all__ = ["LearnBatch", "learn_batch"]


@dataclass(frozen=True, eq=False)
class LearnBatch:
    """The rows a ``learn_rows`` call learns from ``start`` on, and the arrays it writes into.

    ``signs`` (±1.0) and ``weights`` (sample weights) give one value per row. ``decisions`` and ``probas``
    receive each row's decision and probability before it was learned (``probas`` empty when none is wanted);
    ``margins``, when given, the current iterate's margin of each row (a `PegasosClassifier` of an explicit λ;
    other learners leave it). The fields are fixed, the output arrays are written in place.
    """

    rows: Rows
    signs: np.ndarray
    weights: np.ndarray
    decisions: np.ndarray
    probas: np.ndarray
    start: int = 0
    margins: np.ndarray | None = None

    @classmethod
    def new(cls, rows: Rows, signs: np.ndarray, weights: np.ndarray | None = None, probas: bool = True) -> LearnBatch:
        """A batch of ``rows`` from the first (sample weights 1.0 unless given) with new output arrays: decisions, and
        probabilities unless ``probas`` is False."""
        n = len(rows)
        weights = np.ones(n) if weights is None else weights
        return cls(rows, signs, weights, np.empty(n), np.empty(n if probas else 0))

    @property
    def wants_probas(self) -> bool:
        """Whether the probabilities are wanted (``probas`` not empty)."""
        return len(self.probas) > 0

    def at(self, start: int) -> LearnBatch:
        """This batch, learned from row ``start``."""
        return LearnBatch(self.rows, self.signs, self.weights, self.decisions, self.probas, start, self.margins)

    def into(self, decisions: np.ndarray, probas: np.ndarray, margins: np.ndarray | None = None) -> LearnBatch:
        """The same rows, signs, weights and start, their outputs into these arrays: a part's batch, for a learner
        made of parts."""
        return LearnBatch(self.rows, self.signs, self.weights, decisions, probas, self.start, margins)

    def head(self, n: int) -> LearnBatch:
        """The first ``n`` rows, with the first ``n`` entries of each array (views: what is written goes into this
        batch's arrays)."""
        rows = self.rows if n == len(self.rows) else self.rows.slice(0, n)
        margins = None if self.margins is None else self.margins[:n]
        return LearnBatch(
            rows, self.signs[:n], self.weights[:n], self.decisions[:n], self.probas[:n], self.start, margins
        )


class _OneAtATime(Protocol):
    """A learner's one-example margin and step."""

    def decision_function_one(self, x: Mapping) -> float: ...

    def learn_one(self, x: Mapping, y: bool, w: float = 1.0) -> None: ...


def learn_batch(
    learner: _OneAtATime, batch: LearnBatch, run: Callable[[LearnBatch], int] | None
) -> tuple[int, ValueError | None]:
    """``learn_one`` over the batch's rows from its start, for a learner whose probability is σ of its margin: its
    compiled ``run`` (None: none) learns from a start up to the row it stops before, and that row (a rare branch or a
    refusal) goes through ``learn_one``; ``decisions`` and ``probas`` (unless empty) receive each row's margin and
    probability before it was learned. Returns (the row ``learn_one`` refused, the error) with that row unlearned, or
    (len(rows), None) when every row is learned."""
    rows, start, decisions, probas = batch.rows, batch.start, batch.decisions, batch.probas
    n, wanted = len(rows), batch.wants_probas
    while start < n:
        stop = start if run is None else run(batch.at(start))
        if wanted:
            probas[start:stop] = [squash(margin) for margin in decisions[start:stop].tolist()]
        if stop == n:
            break
        x = rows.row(stop)
        decisions[stop] = math.nan
        if wanted:
            probas[stop] = math.nan
        try:
            check_features(x)
            decisions[stop] = margin = learner.decision_function_one(x)
            if wanted:
                probas[stop] = squash(margin)
            learner.learn_one(x, batch.signs[stop] > 0, float(batch.weights[stop]))
        except ValueError as error:
            return stop, error
        start = stop + 1
    return n, None
