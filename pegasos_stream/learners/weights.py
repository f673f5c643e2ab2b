"""Lazily scaled sparse weights: w = scale · v over plain dicts.

The dict counterpart of scikit-learn's ``WeightVector`` (``sklearn/utils/_weight_vector.pyx.tp``):
shrinking every weight is O(1) (multiply ``scale``), while ``dot`` and ``add`` cost O(nnz(x)).
A running ‖v‖² makes the norm O(1). When ``scale`` underflows past ``MIN_SCALE`` it is folded
into ``v`` (O(nnz(v)), rarely) and the squared norm is recomputed exactly.

``WeightVector`` also keeps the averaged iterate with Bottou's sparse trick: the sum of all
iterates is held as ``S = avg_scale · v + avg_offset`` so that adding the current iterate to
``S`` is O(1) and changing ``v`` at a few coordinates is O(nnz(x)).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping
from itertools import repeat
from operator import add, mul

from .._compiled import FAST as _fast

__all__ = ["COMPENSATED_SUM", "MIN_SCALE", "SharedScaleWeights", "WeightVector", "sparse_dot"]

#: Below this the scale is folded into the stored values (as in scikit-learn).
MIN_SCALE = 1e-9
#: Rebase the running sum of iterates once avg_scale·|v| could exceed this multiple of |S|,
#: which bounds the cancellation in S = avg_scale·v + avg_offset (it grows with a saturated step size).
MAX_AVERAGE_CANCELLATION = 16.0

Features = Mapping[Hashable, float]


#: Whether this Python's sum() of floats is compensated (Neumaier, since 3.12): the compiled loops
#: sum as it does.
COMPENSATED_SUM = sum([0.1] * 10) == 1.0


def sparse_dot(v: dict, x: Features) -> float:
    """⟨v, x⟩ for a sparse dict ``v``, in O(nnz(x)), summed in the order of ``x`` (in C when compiled, with the
    same result, for a dict ``x`` of str or int keys and float, int or bool values and a ``v`` of floats)."""
    result = None if _fast is None else _fast.sparse_dot(v, x, COMPENSATED_SUM)
    if result is None:
        return sum(map(mul, map(v.get, x, repeat(0.0)), x.values()))
    return result


def _axpy(v: dict, x: Features, c: float) -> None:
    """v += c·x in place, in O(nnz(x))."""
    v.update(zip(x, map(add, map(v.get, x, repeat(0.0)), map(mul, repeat(c), x.values()))))


def _axpy_sq_norm(v: dict, x: Features, c: float) -> float:
    """v += c·x in place; returns the change of ‖v‖², computed coordinate by coordinate (in C when compiled,
    with the same result, for the ``v`` and ``x`` ``sparse_dot`` takes there)."""
    change = None if _fast is None else _fast.axpy_sq_norm(v, x, c, COMPENSATED_SUM)
    if change is not None:
        return change
    old = list(map(v.get, x, repeat(0.0)))
    new = list(map(add, old, map(mul, repeat(c), x.values())))
    v.update(zip(x, new))
    return sum(map(mul, new, new)) - sum(map(mul, old, old))


class _LazyScale:
    """The scale and the running squared norm of ``v``; subclasses say how to fold and clear."""

    def __init__(self) -> None:
        self.scale = 1.0
        self.sq_norm = 0.0  # ‖v‖²; the weights' norm is scale·√sq_norm

    def norm(self) -> float:
        """‖w‖ in O(1)."""
        return self.scale * math.sqrt(max(self.sq_norm, 0.0))

    def scale_by(self, c: float) -> None:
        """w ← c·w in O(1); c == 0 clears the weights (the Pegasos step at t = 1)."""
        if c == 0.0:
            self._clear()
            return
        self.scale *= c
        if self.scale < MIN_SCALE:
            self.fold_scale()

    def fold_scale(self) -> None:
        """Multiply ``scale`` into the stored values and reset it to 1 (O(nnz(v)))."""
        raise NotImplementedError

    def _clear(self) -> None:
        raise NotImplementedError


class WeightVector(_LazyScale):
    """A sparse weight vector w = scale · v, optionally tracking the average of its iterates.

    Parameters
    ----------
    average
        Track the average of the iterates: call ``accumulate_average`` once per step.

    """

    def __init__(self, average: bool = False) -> None:
        super().__init__()
        self.v: dict = {}
        self.average = average
        self.n_averaged = 0  # iterates summed so far
        self.avg_scale = 0.0  # S = avg_scale · v + avg_offset
        self.avg_offset: dict = {}

    def dot(self, x: Features) -> float:
        """⟨w, x⟩ in O(nnz(x))."""
        return sparse_dot(self.v, x) * self.scale

    def add(self, x: Features, c: float) -> None:
        """w ← w + c·x in O(nnz(x)); the running sum of iterates is left unchanged."""
        d = c / self.scale
        self.sq_norm += _axpy_sq_norm(self.v, x, d)
        if self.average and self.avg_scale:
            _axpy(self.avg_offset, x, -self.avg_scale * d)

    def accumulate_average(self) -> None:
        """Add the current iterate to the running sum S, in O(1)."""
        self.avg_scale += self.scale
        self.n_averaged += 1
        if self.avg_scale > MAX_AVERAGE_CANCELLATION * self.n_averaged * self.scale:
            self.fold_scale()

    def gather(self, keys: Iterable[Hashable]) -> list[float]:
        """[w_j for j in keys] (0 where absent)."""
        s = self.scale
        return [s * vj for vj in map(self.v.get, keys, repeat(0.0))]

    def average_gather(self, keys: Iterable[Hashable]) -> list[float]:
        """[w̄_j for j in keys] (0 where absent or before any iterate)."""
        n = self.n_averaged or 1
        a, v, offset = self.avg_scale, self.v, self.avg_offset
        return [(a * v.get(j, 0.0) + offset.get(j, 0.0)) / n for j in keys]

    def dots(self, x: Features) -> tuple[float, float]:
        """(⟨w, x⟩, ⟨w̄, x⟩), sharing the pass over v."""
        vx = sparse_dot(self.v, x)
        if not self.n_averaged:
            return vx * self.scale, 0.0
        average = (self.avg_scale * vx + sparse_dot(self.avg_offset, x)) / self.n_averaged
        return vx * self.scale, average

    def fold_scale(self) -> None:
        if self.average and self.avg_scale:
            offset, a = self.avg_offset, self.avg_scale
            for j, vj in self.v.items():
                offset[j] = offset.get(j, 0.0) + a * vj
            self.avg_scale = 0.0
        s = self.scale
        self.v = {j: s * vj for j, vj in self.v.items()}
        self.sq_norm = math.fsum(vj * vj for vj in self.v.values())
        self.scale = 1.0

    def _clear(self) -> None:
        self.fold_scale()  # moves the running sum into avg_offset before v is dropped
        self.v = {}
        self.sq_norm = 0.0

    def to_dict(self) -> dict:
        """The actual weights {j: scale·v_j}."""
        s = self.scale
        return {j: s * vj for j, vj in self.v.items()}

    def average_to_dict(self) -> dict:
        """The averaged weights {j: S_j / n}."""
        n = self.n_averaged
        if not n:
            return {}
        a, v, offset = self.avg_scale, self.v, self.avg_offset
        keys = v.keys() | offset.keys()
        return {j: (a * v.get(j, 0.0) + offset.get(j, 0.0)) / n for j in keys}


class SharedScaleWeights(_LazyScale):
    """One sparse dict of weights per class, all sharing one scale: W = scale · V.

    Shrinking every class (the Pegasos regularisation step) is one multiplication;
    ``sq_norm`` is the squared Frobenius norm of V.
    """

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[Hashable, dict] = {}

    def add_row(self, label: Hashable) -> None:
        """Start a new class with zero weights."""
        self.rows[label] = {}

    def scores(self, x: Features) -> dict:
        """{label: ⟨w_label, x⟩} for every class, in O(classes · nnz(x))."""
        s = self.scale
        return {label: sparse_dot(v, x) * s for label, v in self.rows.items()}

    def add(self, label: Hashable, x: Features, c: float) -> None:
        """w_label ← w_label + c·x in O(nnz(x))."""
        self.sq_norm += _axpy_sq_norm(self.rows[label], x, c / self.scale)

    def fold_scale(self) -> None:
        s = self.scale
        self.rows = {label: {j: s * vj for j, vj in v.items()} for label, v in self.rows.items()}
        self.sq_norm = math.fsum(vj * vj for v in self.rows.values() for vj in v.values())
        self.scale = 1.0

    def _clear(self) -> None:
        self.rows = {label: {} for label in self.rows}
        self.sq_norm = 0.0
        self.scale = 1.0

    def to_dicts(self) -> dict:
        """{label: {j: scale·v_j}}."""
        s = self.scale
        return {label: {j: s * vj for j, vj in v.items()} for label, v in self.rows.items()}
