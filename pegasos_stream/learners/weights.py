"""Lazily scaled sparse weights: w = scale · v over plain dicts.

The dict counterpart of scikit-learn's ``WeightVector`` (``sklearn/utils/_weight_vector.pyx.tp``):
shrinking every weight is O(1) (multiply ``scale``), while ``dot`` and ``add`` cost O(nnz(x)).
A running ‖v‖² makes the norm O(1). When ``scale`` underflows past ``MIN_SCALE`` it is folded
into ``v`` (O(nnz(v)), rarely) and the squared norm is recomputed exactly.

``WeightVector`` also keeps the averaged iterate with Bottou's sparse trick: the sum of all
iterates is held as ``S = avg_scale · v + avg_offset`` so that adding the current iterate to
``S`` is O(1) and changing ``v`` at a few coordinates is O(nnz(x)).

``DenseWeightVector`` is the same vector over float64 arrays of ``n_features`` columns, for features
that are int columns (hashed features, svmlight indices): 8 bytes a weight instead of a dict entry,
and a batch's compiled loop reads and writes the arrays in place. Both give the same floats. With
``max_features``, the arrays widen as larger columns arrive (``widen``), up to that many.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Hashable, Iterable, Mapping, Sequence
from itertools import repeat
from operator import add, mul

import numpy as np

from .._compiled import LOOPS as _loops
from .schedule import MAX_NORM
from .state import (
    InvalidState,
    check_array,
    check_attributes,
    check_count,
    check_flag,
    check_float,
    check_floats,
    check_instance,
    finite_floats,
)
from .validation import reject_features

__all__ = [
    "COMPENSATED_SUM",
    "MIN_SCALE",
    "DenseWeightVector",
    "SharedScaleWeights",
    "WeightVector",
    "check_columns",
    "check_n_features",
    "dense_columns",
    "sparse_dot",
    "weight_columns",
    "widened_length",
]

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
    result = None if _loops is None else _loops.sparse_dot(v, x, COMPENSATED_SUM)
    if result is None:
        return sum(map(mul, map(v.get, x, repeat(0.0)), x.values()))
    return result


def _axpy(v: dict, x: Features, c: float) -> None:
    """v += c·x in place, in O(nnz(x))."""
    v.update(zip(x, map(add, map(v.get, x, repeat(0.0)), map(mul, repeat(c), x.values()))))


def _axpy_sq_norm(v: dict, x: Features, c: float) -> float:
    """v += c·x in place; returns the change of ‖v‖², computed coordinate by coordinate (in C when compiled,
    with the same result, for the ``v`` and ``x`` ``sparse_dot`` takes there)."""
    change = None if _loops is None else _loops.axpy_sq_norm(v, x, c, COMPENSATED_SUM)
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

    def _check_scale(self, sq_sum: float) -> None:
        """Refuse (InvalidState) a scale outside [MIN_SCALE, 1] (it only shrinks, and is folded below MIN_SCALE), a
        running ‖v‖² that is no finite float >= 0, or values whose norm (``sq_sum``: their ‖v‖²) is past the bound no
        step takes the weights to (with room for rounding)."""
        check_float(self, "scale", MIN_SCALE, 1.0)
        check_float(self, "sq_norm", 0.0)
        norm = self.scale * math.sqrt(sq_sum)
        if not norm < 2 * MAX_NORM:
            raise InvalidState(f"{type(self).__name__}: weights of norm {norm:.3g}, past the bound {MAX_NORM:g}")

    def _clear(self) -> None:
        raise NotImplementedError


class _AveragedLazyScale(_LazyScale):
    """`_LazyScale` with the running sum of iterates S = avg_scale · v + avg_offset of ``n_averaged`` iterates; its
    scalars by the names of the compiled loop's state."""

    n_averaged: int
    avg_scale: float

    def loop_state(self) -> dict[str, float | int]:
        """The scale, ‖v‖², the average's scale and the count of iterates averaged, by the names of the compiled
        loop's state (``_loops.STATE``, ``_loops.ISTATE``)."""
        return {
            "scale": self.scale,
            "sq_norm": self.sq_norm,
            "average_scale": self.avg_scale,
            "n_averaged": self.n_averaged,
        }

    def set_loop_state(self, values: Mapping[str, float | int]) -> None:
        """Take back the values of ``loop_state``'s names from ``values`` (which may hold others)."""
        self.scale, self.sq_norm = float(values["scale"]), float(values["sq_norm"])
        self.avg_scale, self.n_averaged = float(values["average_scale"]), int(values["n_averaged"])


class WeightVector(_AveragedLazyScale):
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

    def _check_state(self) -> None:
        """Refuse (InvalidState) a rebuilt state that no sequence of steps leaves."""
        check_attributes(self, vars(WeightVector()))
        values = check_floats(self, "v").values()
        check_flag(self, "average")
        check_count(self, "n_averaged")
        check_float(self, "avg_scale", 0.0)
        check_floats(self, "avg_offset")
        self._check_scale(sum(map(mul, values, values)))

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


#: The most columns ``n_features`` may ask for.
MAX_COLUMNS = 2**28


def check_n_features(n_features: object) -> int | None:
    """``n_features`` as an int, or None; a ValueError unless it is None or a whole number from 1 to MAX_COLUMNS."""
    if n_features is None:
        return None
    if (
        isinstance(n_features, bool)
        or not isinstance(n_features, numbers.Integral)
        or not 1 <= int(n_features) <= MAX_COLUMNS
    ):
        raise ValueError(f"n_features={n_features!r}: expected None or a whole number from 1 to {MAX_COLUMNS}")
    return int(n_features)


#: The columns weight arrays that widen start with when not told (``n_features``).
START_COLUMNS = 1 << 10


def check_columns(n_features: object, max_features: object) -> tuple[int | None, int | None]:
    """(``n_features``, ``max_features``) as ints or None, the first ``START_COLUMNS`` (at most ``max_features``)
    when only ``max_features`` is given; a ValueError unless each is None or a whole number from 1 to
    MAX_COLUMNS, and ``max_features`` at least ``n_features``."""
    limit = check_n_features(max_features) if max_features is not None else None
    if limit is None:
        return check_n_features(n_features), None
    start = min(START_COLUMNS, limit) if n_features is None else check_n_features(n_features)
    if start is None or start > limit:
        raise ValueError(f"max_features={max_features!r}: expected a whole number from n_features={n_features}")
    return start, limit


def widened_length(column: int, length: int, max_features: int) -> int:
    """The columns of arrays of ``length`` widened to hold ``column`` (below ``max_features``): the smallest power
    of two above it, at most ``max_features``; ``length`` when they hold it already. The arrays' length thus
    depends on the largest column seen, not on the order or batches it came in."""
    if column < length:
        return length
    return min(max_features, 1 << column.bit_length())


def is_column(key: object, n_features: int) -> bool:
    """Whether ``key`` names a column of weight arrays of ``n_features``: an int from 0 to n_features − 1 (False
    and True are 0 and 1, as dict keys are)."""
    return (type(key) is int or isinstance(key, numbers.Integral)) and 0 <= int(key) < n_features  # (int: no ABC)


def weight_columns(keys: Sequence, n_features: int) -> np.ndarray | range | None:
    """The columns of weight arrays of ``n_features`` that a batch's ``keys`` name: ``keys`` itself when it is a
    range from 0 within them (the rows' columns are the weights' columns), else ``dense_columns(keys)``."""
    if isinstance(keys, range) and keys.start == 0 and keys.step == 1 and len(keys) <= n_features:
        return keys
    return dense_columns(keys, n_features)


def dense_columns(keys: Sequence, n_features: int) -> np.ndarray | None:
    """``keys`` as int64 columns of weight arrays of ``n_features``; None when some key is no such column."""
    if isinstance(keys, range):
        inside = not keys or (keys.step > 0 and keys.start >= 0 and keys[-1] < n_features)
        return np.arange(keys.start, keys.stop, keys.step, dtype=np.int64) if inside else None
    try:
        given = np.array(keys) if len(keys) else np.zeros(0, dtype=np.int64)
    except (ValueError, TypeError, OverflowError):  # tuples of different lengths, say
        return None
    if (
        given.ndim != 1
        or given.dtype.kind not in "iub"
        or (len(given) and not 0 <= given.min() <= given.max() < n_features)
    ):
        return None
    return given.astype(np.int64, copy=False)


class DenseWeightVector(_AveragedLazyScale):
    """`WeightVector` over arrays: w = scale · v, with v (and the average's offset) float64 arrays of
    ``n_features`` columns, indexed by int features 0..n_features − 1; any other key is refused.

    Every operation computes the floats `WeightVector` computes for the same features, in the same order
    (``sparse_dot``'s sums, ``_axpy_sq_norm``'s running norm), so the two layouts learn bit-identical
    models. A column never written holds 0.0 where the dict holds no key: ``to_dict`` lists the non-zero
    weights. Folding the scale is O(n_features), as rare as in the dict layout.

    Parameters
    ----------
    n_features
        The number of columns.
    average
        Track the average of the iterates: call ``accumulate_average`` once per step.
    max_features
        None: the arrays keep ``n_features`` columns. An int: a column from ``n_features`` to
        ``max_features`` − 1 widens them (`widened_length`) where it would be refused. A new column holds
        0.0 as a column never written does, so the floats learned are those of arrays that held it from the start.

    """

    max_features: int | None = None  # a class default: states saved before max_features existed load with None

    def __init__(self, n_features: int, average: bool = False, max_features: int | None = None) -> None:
        super().__init__()
        self.v = np.zeros(n_features)
        self.average = average
        self.n_averaged = 0
        self.avg_scale = 0.0
        self.avg_offset = np.zeros(n_features if average else 0)
        self.max_features = max_features

    def _check_state(self) -> None:
        """Refuse (InvalidState) a rebuilt state that no sequence of steps leaves: the arrays float64, finite, and
        of one length (the offset of none without ``average``), at most ``max_features``."""
        check_attributes(self, vars(DenseWeightVector(1)))
        v = check_array(self, "v", (-1,))
        limit = self.max_features
        if limit is not None and not (isinstance(limit, int) and len(v) <= limit <= MAX_COLUMNS):
            raise InvalidState(f"DenseWeightVector.max_features: expected an int from {len(v)} to {MAX_COLUMNS}")
        check_array(self, "avg_offset", (len(v) if check_flag(self, "average") else 0,))
        check_count(self, "n_averaged")
        check_float(self, "avg_scale", 0.0)
        with np.errstate(over="ignore"):
            self._check_scale(float(v @ v))

    def widen(self, column: int) -> None:
        """Widen the arrays to hold ``column`` (from 0 to ``max_features`` − 1, with ``max_features``), in
        O(columns); the columns they held keep their values, the new ones hold 0.0."""
        length = widened_length(column, len(self.v), self.max_features or len(self.v))
        if length > len(self.v):
            self.v = np.concatenate((self.v, np.zeros(length - len(self.v))))
            if self.average:
                self.avg_offset = np.concatenate((self.avg_offset, np.zeros(length - len(self.avg_offset))))

    def columns_of(self, keys: Sequence) -> np.ndarray | None:
        """``keys`` as int64 columns of the arrays (`dense_columns`), the arrays widened first to hold them when they
        widen and every key is an int column below ``max_features``; None when some key is no column."""
        columns = dense_columns(keys, len(self.v))
        if columns is not None or self.max_features is None or not len(keys):
            return columns
        columns = dense_columns(keys, self.max_features)
        if columns is not None:
            self.widen(int(columns.max()))
        return columns

    def example(self, x: Features) -> tuple[np.ndarray, np.ndarray]:
        """(columns, values) of ``x``; a ValueError naming a key that is no column or a value that is no number."""
        columns = self.columns_of(list(x))
        if columns is None:
            n = self.max_features or len(self.v)
            setting = "max_features" if self.max_features else "n_features"
            for key in x:
                if not is_column(key, n):
                    raise ValueError(f"feature {key!r}: expected an int column from 0 to {n - 1} ({setting}={n})")
        try:
            values = np.fromiter(x.values(), np.float64, len(x))
        except (TypeError, ValueError, OverflowError):
            reject_features(x)  # names the value that is no number
        return columns, values  # type: ignore[return-value]

    def _dot(self, values: np.ndarray, columns: np.ndarray, x: np.ndarray) -> float:
        if _loops is not None:
            return _loops.dense_dot(values, columns, x, COMPENSATED_SUM)
        return sum(map(mul, values[columns].tolist(), x.tolist()))

    def dot(self, x: Features) -> float:
        """⟨w, x⟩ in O(nnz(x)) (in C over the dict itself when its keys and values are plain)."""
        vx = None if _loops is None else _loops.dense_dict_dot(self.v, x, COMPENSATED_SUM)
        if vx is None:
            columns, values = self.example(x)  # (which may widen the arrays)
            vx = self._dot(self.v, columns, values)
        return vx * self.scale

    def add(self, x: Features, c: float) -> None:
        """w ← w + c·x in O(nnz(x)); the running sum of iterates is left unchanged."""
        if _loops is not None and not (self.average and self.avg_scale):
            change = _loops.dense_dict_axpy(self.v, x, c / self.scale, COMPENSATED_SUM)
            if change is not None:
                self.sq_norm += change
                return
        self.add_columns(*self.example(x), c)

    def add_columns(self, columns: np.ndarray, values: np.ndarray, c: float) -> None:
        """``add`` of the example ``values`` at ``columns`` (int64 columns within the arrays, each once)."""
        d = c / self.scale
        if _loops is not None:
            self.sq_norm += _loops.dense_axpy(self.v, columns, values, d, COMPENSATED_SUM)
        else:
            old = self.v[columns].tolist()
            new = list(map(add, old, map(mul, repeat(d), values.tolist())))
            self.v[columns] = new
            self.sq_norm += sum(map(mul, new, new)) - sum(map(mul, old, old))
        if self.average and self.avg_scale:
            offset = self.avg_offset
            offset[columns] = offset[columns] + (-self.avg_scale * d) * values

    def accumulate_average(self) -> None:
        """Add the current iterate to the running sum S, in O(1)."""
        self.avg_scale += self.scale
        self.n_averaged += 1
        if self.avg_scale > MAX_AVERAGE_CANCELLATION * self.n_averaged * self.scale:
            self.fold_scale()

    def _columns(self, keys: Iterable[Hashable]) -> np.ndarray:
        keys = list(keys)
        columns = self.columns_of(keys)
        if columns is None:
            raise ValueError(f"features {keys!r}: expected int columns from 0 to {len(self.v) - 1}")
        return columns

    def gather(self, keys: Iterable[Hashable]) -> list[float]:
        """[w_j for j in keys]."""
        columns = self._columns(keys)  # (which may widen the arrays)
        return (self.v[columns] * self.scale).tolist()

    def average_gather(self, keys: Iterable[Hashable]) -> list[float]:
        """[w̄_j for j in keys] (0 before any iterate)."""
        columns = self._columns(keys)
        return ((self.avg_scale * self.v[columns] + self._offset(columns)) / (self.n_averaged or 1)).tolist()

    def _offset(self, columns: np.ndarray) -> np.ndarray | float:
        return self.avg_offset[columns] if self.average else 0.0

    def dots(self, x: Features) -> tuple[float, float]:
        """(⟨w, x⟩, ⟨w̄, x⟩), sharing the pass over v."""
        columns, values = self.example(x)
        vx = self._dot(self.v, columns, values)
        if not self.n_averaged:
            return vx * self.scale, 0.0
        average = (self.avg_scale * vx + self._dot(self.avg_offset, columns, values)) / self.n_averaged
        return vx * self.scale, average

    def fold_scale(self) -> None:
        if self.average and self.avg_scale:
            self.avg_offset += self.avg_scale * self.v
            self.avg_scale = 0.0
        self.v *= self.scale
        self.sq_norm = math.fsum((self.v * self.v).tolist())
        self.scale = 1.0

    def _clear(self) -> None:
        self.fold_scale()  # moves the running sum into avg_offset before v is dropped
        self.v[:] = 0.0
        self.sq_norm = 0.0

    def to_dict(self) -> dict:
        """The non-zero weights {j: scale·v_j}."""
        columns = np.flatnonzero(self.v)
        return dict(zip(columns.tolist(), (self.scale * self.v[columns]).tolist()))

    def average_to_dict(self) -> dict:
        """The non-zero averaged weights {j: S_j / n}."""
        if not self.n_averaged:
            return {}
        total = (self.avg_scale * self.v + self.avg_offset) / self.n_averaged
        columns = np.flatnonzero(total)
        return dict(zip(columns.tolist(), total[columns].tolist()))


class SharedScaleWeights(_LazyScale):
    """One sparse dict of weights per class, all sharing one scale: W = scale · V.

    Shrinking every class (the Pegasos regularisation step) is one multiplication;
    ``sq_norm`` is the squared Frobenius norm of V.
    """

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[Hashable, dict] = {}

    def _check_state(self) -> None:
        """Refuse (InvalidState) a rebuilt state that no sequence of steps leaves: a row of another label than a
        class label, or of values that are not finite floats."""
        check_attributes(self, vars(SharedScaleWeights()))
        rows = check_instance(self, "rows", dict)
        for label, row in rows.items():
            if label is None or not isinstance(row, dict) or not finite_floats(row.values()):
                raise InvalidState(f"SharedScaleWeights.rows: the row of {label!r:.60} is not a dict of finite floats")
        self._check_scale(sum(value * value for row in rows.values() for value in row.values()))

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
