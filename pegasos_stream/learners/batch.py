"""A batch of rows a learner learns in its compiled loop (``learn_rows``), with the arrays it fills."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from .rows import Rows

__all__ = ["LearnBatch"]


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
        return replace(self, start=start)

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
