"""Pegasos over a grid of regularisation strengths, chosen online by their recent hinge loss."""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence

from river import base

from .batch import LearnBatch
from .calibration import OnlinePlatt, PlattScaledMargin
from .linear import PegasosClassifier
from .members import Members
from .state import check_parts, new_like
from .validation import check_lambdas

__all__ = ["PegasosGrid"]


class PegasosGrid(Members[PegasosClassifier], PlattScaledMargin, base.Classifier):
    """Binary Pegasos for every λ of a grid at once; the one with the least recent loss predicts.

    No single λ suits every stream: a small one keeps more of what rare features said, a large one
    forgets and adapts faster. Each member (a `PegasosClassifier` per λ, the other settings shared)
    learns every example. Before it does, its hinge loss on the example, max(0, 1 − y·f_λ(x)),
    enters its running loss L_λ ← γ·L_λ + loss (γ = ``discount``: the last 1/(1 − γ) examples count
    most). The decision is the margin of the member with the least L_λ (the first of the grid on a
    tie), so the grid predicts as its best λ of late, on one feature pass; the probability is an
    online Platt scaling of that decision, like `PegasosClassifier`'s. (`Members` is this choice;
    ``PegasosClassifier(lambda_="auto")`` makes it too.)

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

    def __init__(
        self,
        lambdas: Sequence[float] = (1e-4, 3e-4, 1e-3, 3e-3),
        discount: float = 0.999,
        class_weight: str | dict | None = None,
        horizon: int | None = None,
        t0: int = 0,
    ):
        checked = check_lambdas(lambdas)
        if isinstance(discount, bool) or not isinstance(discount, numbers.Real) or not 0.0 <= discount < 1.0:
            raise ValueError(f"discount={discount!r}: expected a number from 0 to 1 (1 excluded)")
        self.lambdas = checked
        self.discount = float(discount)  # (set again by Members: here for the order of the attributes saved)
        self.class_weight = class_weight
        self.horizon = horizon
        self.t0 = t0
        members = [
            PegasosClassifier(lambda_=lambda_, class_weight=class_weight, horizon=horizon, t0=t0)
            for lambda_ in self.lambdas
        ]
        super().__init__(members, self.discount)
        self._platt = OnlinePlatt()

    @classmethod
    def _unit_test_params(cls):
        yield {}
        yield {"lambdas": (1e-2, 1e-1), "discount": 0.9, "class_weight": "balanced", "horizon": 20, "t0": 10}

    def _check_state(self) -> None:
        """Refuse (InvalidState) settings the constructor refuses, or members and losses that ``learn`` could not
        have left: a member per λ, of these settings."""
        fresh = new_like(self)
        self._check_members()
        check_parts(self, fresh, ("_members", "_platt"))
        self._check_losses()

    @property
    def learners(self) -> list[PegasosClassifier]:
        """The learners of the grid, one per λ."""
        return list(self._members)

    @property
    def norm(self) -> float:
        """‖w‖ of the member that predicts now."""
        return self.leader.norm

    def decision_function_one(self, x: Mapping) -> float:
        """The margin of the member that predicts now."""
        return self.decide(x)

    def learn_one(self, x: Mapping, y: base.typing.ClfTarget, w: float = 1.0) -> None:
        self.learn(x, y, w, self._platt)

    def learn_rows(self, batch: LearnBatch) -> tuple[int, ValueError | None]:
        """``learn_one`` over the batch's rows from its start, each member in its compiled loop; as
        `PegasosClassifier.learn_rows` (the same arrays, the same stop at a refused row)."""
        return self.learn_run(batch, self._platt, True)
