"""Pegasos over a grid of regularisation strengths, chosen online by their recent hinge loss."""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence

import numpy as np
from river import base

from .calibration import OnlinePlatt, PlattScaledMargin
from .linear import PegasosClassifier
from .rows import Rows
from .validation import binary_sign, check_lambda, check_sample_weight

__all__ = ["PegasosGrid"]


class PegasosGrid(PlattScaledMargin, base.Classifier):
    """Binary Pegasos for every λ of a grid at once; the one with the least recent loss predicts.

    No single λ suits every stream: a small one keeps more of what rare features said, a large one
    forgets and adapts faster. Each member (a `PegasosClassifier` per λ, the other settings shared)
    learns every example. Before it does, its hinge loss on the example, max(0, 1 − y·f_λ(x)),
    enters its running loss L_λ ← γ·L_λ + loss (γ = ``discount``: the last 1/(1 − γ) examples count
    most). The decision is the margin of the member with the least L_λ (the first of the grid on a
    tie), so the grid predicts as its best λ of late, on one feature pass; the probability is an
    online Platt scaling of that decision, like `PegasosClassifier`'s.

    Parameters
    ----------
    lambdas
        The regularisation strengths of the members, each > 0, in the order ties go by.
    discount
        γ in [0, 1): how much of its running loss a member keeps at each example.
    class_weight
        As `PegasosClassifier`'s, for every member.
    horizon
        As `PegasosClassifier`'s, for every member.
    t0
        As `PegasosClassifier`'s, for every member.

    Examples
    --------

    >>> from river import datasets, evaluate, metrics
    >>> from pegasos_stream import PegasosGrid
    >>> model = PegasosGrid(lambdas=(1e-3, 1e-2, 1e-1))
    >>> evaluate.progressive_val_score(datasets.Phishing(), model, metrics.ROCAUC())
    ROCAUC: 89.97%

    """

    # Declared here so that every method sees their types (all are set in __init__).
    lambdas: tuple[float, ...]
    discount: float
    _members: list[PegasosClassifier]
    _losses: list[float]

    def __init__(
        self,
        lambdas: Sequence[float] = (1e-4, 3e-4, 1e-3, 3e-3),
        discount: float = 0.999,
        class_weight: str | dict | None = None,
        horizon: int | None = None,
        t0: int = 0,
    ):
        if isinstance(lambdas, (str, bytes, Mapping)) or not isinstance(lambdas, Sequence) or not lambdas:
            raise ValueError(f"lambdas={lambdas!r}: expected a non-empty list of numbers > 0")
        for lambda_ in lambdas:
            check_lambda(lambda_)
        if isinstance(discount, bool) or not isinstance(discount, numbers.Real) or not 0.0 <= discount < 1.0:
            raise ValueError(f"discount={discount!r}: expected a number from 0 to 1 (1 excluded)")
        self.lambdas = tuple(float(lambda_) for lambda_ in lambdas)
        self.discount = float(discount)
        self.class_weight = class_weight
        self.horizon = horizon
        self.t0 = t0
        self._members = [
            PegasosClassifier(lambda_=lambda_, class_weight=class_weight, horizon=horizon, t0=t0)
            for lambda_ in self.lambdas
        ]
        self._losses = [0.0] * len(self.lambdas)
        self._platt = OnlinePlatt()

    @classmethod
    def _unit_test_params(cls):
        yield {}
        yield {"lambdas": (1e-2, 1e-1), "discount": 0.9, "class_weight": "balanced", "horizon": 20, "t0": 10}

    @property
    def t(self) -> int:
        """The number of steps taken so far (by every member)."""
        return self._members[0].t

    @property
    def leader(self) -> PegasosClassifier:
        """The member that predicts now: the least running loss, the first on a tie."""
        return self._members[self._leading()]

    def _leading(self) -> int:
        return self._losses.index(min(self._losses))

    @property
    def norm(self) -> float:
        """‖w‖ of the member that predicts now."""
        return self.leader.norm

    def decision_function_one(self, x: Mapping) -> float:
        """The margin of the member that predicts now."""
        return self.leader.decision_function_one(x)

    def learn_one(self, x: Mapping, y: base.typing.ClfTarget, w: float = 1.0) -> None:
        sign = binary_sign(y)
        weight = 1.0 if w == 1.0 else check_sample_weight(w)
        margins = [member.decision_function_one(x) for member in self._members]  # remembered by each member
        self._platt.update(margins[self._leading()], sign > 0)
        self._add_losses(margins, sign, weight)
        for member in self._members:
            member.learn_one(x, y, w)

    def _add_losses(self, margins: Sequence[float], sign: float, weight: float) -> None:
        discount = self.discount
        self._losses = [
            discount * loss + weight * max(0.0, 1.0 - sign * margin) for loss, margin in zip(self._losses, margins)
        ]

    def learn_rows(
        self,
        rows: Rows,
        signs: np.ndarray,
        weights: np.ndarray,
        decisions: np.ndarray,
        probas: np.ndarray,
        start: int = 0,
    ) -> tuple[int, ValueError | None]:
        """``learn_one`` over rows ``start:``, each member in its compiled loop; as
        `PegasosClassifier.learn_rows` (the same arrays, the same stop at a refused row)."""
        margins = np.empty((len(self._members), len(rows)))
        member_probas = np.empty(len(rows))
        stops = [
            member.learn_rows(rows, signs, weights, row, member_probas, start)
            for member, row in zip(self._members, margins)
        ]
        stop, error = stops[0]
        if any(other != stop for other, _ in stops):  # the members check rows alike: never seen
            raise RuntimeError(f"the members of the grid stopped at rows {[other for other, _ in stops]}")
        rows_margins = margins[:, start:stop].T.tolist()
        for i, row_margins, sign, weight in zip(
            range(start, stop), rows_margins, signs[start:stop].tolist(), weights[start:stop].tolist()
        ):
            decisions[i] = decision = row_margins[self._leading()]
            probas[i] = self._platt.proba(decision)
            self._platt.update(decision, sign > 0)
            self._add_losses(row_margins, sign, weight)
        if error is not None:  # the refused row was predicted, as by learn_one, when its margin is finite
            decisions[stop] = decision = margins[self._leading(), stop]
            probas[stop] = self._platt.proba(decision) if np.isfinite(decision) else np.nan
        return stop, error
