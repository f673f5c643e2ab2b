"""Pegasos learners that all learn every example, and the one of late least hinge loss predicting.

`Members` is the state and the choice `PegasosGrid` and ``PegasosClassifier(lambda_="auto")`` share: the
members (explicit-λ `PegasosClassifier` objects), a candidate per iterate they predict with, and the discounted
running hinge loss of each candidate. A member that averages gives two candidates, its averaged iterate then its
current one (the average on a tie); any other, its current iterate. Before the members learn an example, each
candidate's hinge loss on it, max(0, 1 − y·f(x)), enters its running loss L ← γ·L + c·loss (γ the discount, c the
sample weight), and the candidate with the least L (the first on a tie) makes the decisions until the next
example.

The members take every example, or none: an example one member would refuse (its update could take its weights
near the norm bound, or its margin could overflow) is refused by all, before any learns it (see `Members.learn`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from operator import mul
from typing import Generic

import numpy as np
from river import base

from . import compiled
from .batch import LearnBatch
from .calibration import OnlinePlatt
from .protocols import ModelT, PegasosModel
from .rows import Rows
from .schedule import MAX_NORM
from .state import InvalidState, check_attributes, check_float, check_instance, check_list
from .validation import binary_sign, check_sample_weight

__all__ = ["Members"]

#: A row of ‖x‖ from this on is learned one example at a time, every member's margins first: a margin might
#: overflow for one member and not for another (a member's weights stay below MAX_NORM).
LARGE_X = 1e100
#: An example is refused when its update could take a member's ‖w‖ to this, half the norm bound at which a member
#: refuses it alone: then no member refuses an example the others take.
ROOM = MAX_NORM / 2


class Members(Generic[ModelT]):
    """Members learning alike, a running hinge loss per candidate iterate, and the decision of the least.

    Parameters
    ----------
    members
        Explicit-λ `PegasosClassifier` objects (a `PegasosModel` each), in the order ties go by.
    discount
        γ in [0, 1): how much of its running loss a candidate keeps at each example.

    """

    # Declared here so that every method sees their types (all are set in __init__).
    _members: list[ModelT]
    _losses: list[float]
    discount: float

    def __init__(self, members: Sequence[ModelT], discount: float) -> None:
        self._members = list(members)
        self.discount = discount
        self._losses = [0.0] * len(self._candidates())

    def _check_state(self) -> None:
        """Refuse (InvalidState) a rebuilt state that ``learn`` could not have left (`_check_members`)."""
        check_attributes(self, ("_members", "discount", "_losses"))
        self._check_members()

    def _check_members(self) -> None:
        """Refuse (InvalidState) members that are no list, or a discount outside [0, 1). Whoever holds the members
        checks that they are those of its settings, then `_check_losses`."""
        if not check_instance(self, "_members", list):
            raise InvalidState(f"{type(self).__name__}._members: expected at least one member")
        check_float(self, "discount", 0.0, math.nextafter(1.0, 0.0))

    def _check_losses(self) -> None:
        """Refuse (InvalidState) members (of their owner's settings) that took different numbers of steps, or running
        losses that are not a finite float >= 0 for each candidate."""
        if len({member.t for member in self._members}) > 1:
            raise InvalidState(f"{type(self).__name__}._members: they took different numbers of steps")
        check_list(self, "_losses", len(self._candidates()), 0.0)

    def _candidates(self) -> list[tuple[ModelT, bool]]:
        """(member, averaged iterate?) for each candidate, in order."""
        return [(member, averaged) for member in self._members for averaged in _iterates(member)]

    @property
    def t(self) -> int:
        """The number of steps taken so far (by every member)."""
        return self._members[0].t

    @property
    def leading(self) -> tuple[ModelT, bool]:
        """The candidate that predicts now, as (member, averaged iterate?)."""
        return self._candidates()[self._leading()]

    @property
    def leader(self) -> ModelT:
        """The member whose iterate predicts now."""
        return self.leading[0]

    def _leading(self) -> int:
        return self._losses.index(min(self._losses))

    def decide(self, x: Mapping) -> float:
        """The margin of x of the candidate that predicts now."""
        member, averaged = self.leading
        current, predicting = member._margins(x)
        return predicting if averaged else current

    def _margins(self, x: Mapping) -> list[float]:
        """Each candidate's margin of x (remembered by each member for its step)."""
        margins: list[float] = []
        for member in self._members:
            current, predicting = member._remembered_margins(x)
            margins.extend(predicting if averaged else current for averaged in _iterates(member))
        return margins

    def _add_losses(self, margins: Sequence[float], sign: float, weight: float) -> None:
        discount = self.discount
        self._losses = [
            discount * loss + weight * max(0.0, 1.0 - sign * margin) for loss, margin in zip(self._losses, margins)
        ]

    def _check_room(self, spread: float) -> None:
        """Refuse (ValueError) an update of sample weight × ‖x‖ (summed over a batch) ``spread`` that could take a
        member's weights to ROOM: a step moves them by at most ``_largest_step()`` times it."""
        for member in self._members:
            bound = member.norm + member._largest_step() * spread
            if not bound < ROOM:
                raise ValueError(f"the update could take the norm of the weights to {bound:.3g}: values too large")

    def learn(self, x: Mapping, y: base.typing.ClfTarget, w: float, platt: OnlinePlatt | None) -> None:
        """Score x, let every member learn (x, y), then fit ``platt`` (unless None) on the decision and add the
        losses. An example a member might refuse (a margin that is no finite number, an update that ``_check_room``
        refuses) raises a ValueError first: nothing is learned."""
        sign = binary_sign(y)
        weight = 1.0 if w == 1.0 else check_sample_weight(w)
        margins = self._margins(x)
        values = x.values()
        try:
            length = math.sqrt(sum(map(mul, values, values)))  # (as a member's step computes it)
        except OverflowError:
            length = math.inf
        self._check_room(weight * length)
        for member in self._members:
            member.learn_one(x, y, w)
        if platt is not None:
            platt.update(margins[self._leading()], sign > 0)
        self._add_losses(margins, sign, weight)

    def learn_run(self, batch: LearnBatch, platt: OnlinePlatt, calibrate: bool) -> tuple[int, ValueError | None]:
        """``learn`` over the batch's rows from its start, each member in its compiled loop over the rows none might
        refuse (``_safe_end``), the others one at a time; as `PegasosClassifier.learn_rows` (the same arrays, the
        same stop at a refused row), with ``platt`` giving the probabilities, and fitted on the decisions when
        ``calibrate``."""
        rows, start, decisions, probas = batch.rows, batch.start, batch.decisions, batch.probas
        n = len(rows)
        while start < n:
            end = self._safe_end(rows, batch.weights, start)
            if end > start:
                self._learn_compiled(batch.head(end).at(start), platt, calibrate)
            if end == n:
                break
            x = rows.row(end)
            decisions[end] = math.nan
            if len(probas):
                probas[end] = math.nan
            try:
                decisions[end] = decision = self.decide(x)
                if len(probas):
                    probas[end] = platt.proba(decision)
                self.learn(x, batch.signs[end] > 0, float(batch.weights[end]), platt if calibrate else None)
            except ValueError as error:
                return end, error
            start = end + 1
        return n, None

    def _safe_end(self, rows: Rows, weights: np.ndarray, start: int) -> int:
        """The first row from ``start`` on that a member might refuse (len(rows) if none): its ‖x‖ reaches
        LARGE_X, or the rows' updates up to it could take a member's weights to ROOM (``_check_room``)."""
        indptr = rows.indptr[start:]
        lengths, squares = np.diff(indptr), np.zeros(len(indptr) - 1)
        filled = np.flatnonzero(lengths)
        if len(filled):
            with np.errstate(over="ignore"):  # an overflow only makes its row unsafe
                sums = np.add.reduceat(rows.data[indptr[0] : indptr[-1]] ** 2, (indptr[:-1] - indptr[0])[filled])
            squares[filled] = sums
        norms = np.sqrt(squares)
        with np.errstate(over="ignore", invalid="ignore"):  # (inf and nan are unsafe)
            spread = np.cumsum(weights[start : len(rows)] * norms)
            safe = norms < LARGE_X
            for member in self._members:
                safe &= member.norm + member._largest_step() * spread < ROOM
        return start + int(np.argmin(safe)) if not safe.all() else len(rows)

    def _learn_compiled(self, batch: LearnBatch, platt: OnlinePlatt, calibrate: bool) -> None:
        """Every member's compiled loop over the batch's rows from its start (rows none refuses, an array entry a
        row), then each row's decision, probability, calibration and losses in order."""
        n, start = len(batch.rows), batch.start
        candidates = np.empty((len(self._losses), n))
        stops, row = [], 0
        for member in self._members:  # (an averaging member's candidates: its decisions, then its current margins)
            current = candidates[row + 1] if member.average else None
            stops.append(compiled.learn_rows(member, batch.into(candidates[row], np.empty(0), current)))
            row += len(_iterates(member))
        if any(stop != (n, None) for stop in stops):  # rows none refuses: never seen
            raise RuntimeError(f"the members stopped at {stops}")
        decisions, probas, wanted = batch.decisions, batch.probas, batch.wants_probas
        signs, weights = batch.signs[start:].tolist(), batch.weights[start:].tolist()
        for i, row_margins, sign, weight in zip(range(start, n), candidates[:, start:].T.tolist(), signs, weights):
            decisions[i] = decision = row_margins[self._leading()]
            if wanted:
                probas[i] = platt.proba(decision)
            if calibrate:
                platt.update(decision, sign > 0)
            self._add_losses(row_margins, sign, weight)

    def learn_matrix(self, values: np.ndarray, columns: list, signs: np.ndarray, platt: OnlinePlatt | None) -> None:
        """One mini-batch step of every member on the rows of ``values`` (columns named by ``columns``): each row's
        losses and calibration (unless ``platt`` is None) in order, from the margins before the step. A batch a
        member might refuse (a row of ‖x‖ from LARGE_X on, an update ``_check_room`` refuses) raises a ValueError
        first: nothing is learned."""
        with np.errstate(over="ignore", invalid="ignore"):
            norms = np.sqrt((values * values).sum(axis=1))
        if not (norms < LARGE_X).all():
            raise ValueError(f"a row of norm {float(norms.max()):.3g}: values too large")
        self._check_room(float(norms.sum()))
        candidates: list[np.ndarray] = []
        for member in self._members:
            current, predicting = member._margins_pair_many(values, columns)
            candidates.extend(predicting if averaged else current for averaged in _iterates(member))
        for row_margins, sign in zip(np.array(candidates).T.tolist(), signs.tolist()):
            if platt is not None:
                platt.update(row_margins[self._leading()], sign > 0)
            self._add_losses(row_margins, sign, 1.0)
        for member in self._members:
            member._learn_matrix(values, columns, signs)

    def decide_many(self, values: np.ndarray, columns: list) -> np.ndarray:
        """The margins of the candidate that predicts now, for every row of ``values``."""
        member, averaged = self.leading
        current, predicting = member._margins_pair_many(values, columns)
        return predicting if averaged else current


def _iterates(member: PegasosModel) -> tuple[bool, ...]:
    """Whether each candidate of ``member`` is its averaged iterate: (True, False) when it averages, else (False,)."""
    return (True, False) if member.average else (False,)
