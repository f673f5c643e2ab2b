"""A user's personal offset: sparse weights over int columns in sorted arrays, its steps and its bytes."""

from __future__ import annotations

import json
import numbers
import struct
from collections.abc import Hashable, Mapping
from typing import Any

import numpy as np

from .state import InvalidState, check_count

__all__ = [
    "ADAGRAD_EPSILON",
    "PersonalOffset",
    "column",
    "feature_columns",
    "kept_after",
    "largest_bytes",
    "pegasos_scale",
]

#: AdaGrad's ε, under the square root of each feature's sum of squared gradients.
ADAGRAD_EPSILON = 1e-6

#: The ints that are their own column.
_INT64 = (-(2**63), 2**63 - 1)
#: The head of an offset's bytes: its form, whether it has AdaGrad's sums, t, the number of weights. Form ``c``:
#: then the scale of AdaGrad's weights, columns, weights, sums; the forms ``i`` and ``s`` (weights, sums, then
#: int or str keys; the scale 1) are read too.
_HEAD = "<c?qq"
_SCALE = "<d"
#: A scale below which AdaGrad's weights are multiplied out (the scale back to 1), far above the smallest float.
_SMALLEST_SCALE = 1e-100


def column(key: Hashable) -> int:
    """The int64 column of a feature key: an int in the int64 range is itself; any other key, the first 8 bytes of
    BLAKE2b of its UTF-8 form (a str) or of its repr (another key), read as a signed integer. Two keys share a
    column only if they are equal or their hashes collide (a chance of about n²/2⁶⁵ among n keys)."""
    if isinstance(key, numbers.Integral) and _INT64[0] <= key <= _INT64[1]:
        return int(key)
    import hashlib  # (here: it loads OpenSSL, which a run of hashed features never needs)

    form = key.encode("utf-8", "surrogatepass") if isinstance(key, str) else b"\0" + repr(key).encode()
    return int.from_bytes(hashlib.blake2b(form, digest_size=8).digest(), "little", signed=True)


def feature_columns(x: Mapping) -> tuple[np.ndarray, np.ndarray]:
    """x's columns (int64, `column`) and values (float64), in x's order."""
    n = len(x)
    keys = x.keys() if all(type(k) is int for k in x) else map(column, x)
    try:
        return np.fromiter(keys, np.int64, n), np.fromiter(x.values(), np.float64, n)
    except OverflowError:  # an int key beyond int64
        return np.fromiter(map(column, x), np.int64, n), np.fromiter(x.values(), np.float64, n)


def largest_bytes(max_weights: int, adagrad: bool) -> int:
    """The most bytes `PersonalOffset.to_bytes` gives for an offset of at most ``max_weights`` weights."""
    return struct.calcsize(_HEAD) + struct.calcsize(_SCALE) + max_weights * (24 if adagrad else 16)


def pegasos_scale(t: int, t0: float) -> float:
    """t0/(t + t0): the product of Pegasos's shrinks (1 − η_s λ), η_s = 1/(λ(s + t0)), of steps 1..t."""
    return t0 / (t + t0)


def kept_after(most: int) -> int:
    """The weights an offset keeps when it grows past ``most``: four fifths of them (at least one)."""
    return max(1, most * 4 // 5)


class PersonalOffset:
    """One user's offset d = s·v over int64 columns: ``columns`` sorted ascending and ``v`` their weights; the
    number of the user's examples learned, t; and with AdaGrad's steps, each weight's sum of squared gradients,
    ``g`` (None with Pegasos's).

    With Pegasos's steps s = t0/(t + t0), the product of the shrinks (1 − η_s λ) = (s − 1 + t0)/(s + t0) of steps
    1..t in closed form: ``v`` holds the weights of d divided by it, so that a shrink touches no weight. With
    AdaGrad's, s is ``s``, the product of the decays of its steps so far. A feature is a column by `column`. Each
    weight's step is the same floating-point operations as on a dict of weights, the dot product's terms are added
    in x's order, and the arrays are their own bytes: a step costs a search of x's columns and a store a copy.
    """

    __slots__ = ("columns", "g", "s", "t", "v")

    def __init__(
        self,
        t: int = 0,
        columns: np.ndarray | None = None,
        v: np.ndarray | None = None,
        g: np.ndarray | None = None,
        s: float = 1.0,
    ) -> None:
        self.t = t
        self.columns = np.empty(0, np.int64) if columns is None else columns
        self.v = np.empty(0, np.float64) if v is None else v
        self.g = g
        self.s = s

    @classmethod
    def of(cls, t: int, weights: Mapping, sums: Mapping | None = None) -> PersonalOffset:
        """The offset of ``weights`` (and AdaGrad's ``sums``) by feature key."""
        columns, v = feature_columns(weights)
        order = np.argsort(columns, kind="stable")
        g = None if sums is None else np.fromiter((sums[k] for k in weights), np.float64, len(weights))[order]
        return cls(t, columns[order], v[order], g)

    def weights(self) -> dict[int, float]:
        """The stored weights ``v`` by column."""
        return dict(zip(self.columns.tolist(), self.v.tolist(), strict=True))

    @property
    def size(self) -> int:
        """The number of weights."""
        return len(self.columns)

    def __getstate__(self) -> dict[str, Any]:
        return {"t": self.t, "columns": self.columns, "v": self.v, "g": self.g, "s": self.s}

    def __setstate__(self, state: dict[str, Any]) -> None:
        if isinstance(state["v"], dict):  # the form of weights by feature key
            state = PersonalOffset.of(state["t"], state["v"], state.get("g")).__getstate__()
        self.t, self.columns, self.v, self.g = (state[key] for key in ("t", "columns", "v", "g"))
        self.s = state.get("s", 1.0)

    def _check_state(self) -> None:
        check_count(self, "t")
        columns, v, g = self.columns, self.v, self.g
        if not (_array_of(columns, np.int64) and _array_of(v, np.float64) and len(columns) == len(v)):
            raise InvalidState("PersonalOffset: expected int64 columns and float64 weights, as many")
        if np.any(columns[1:] <= columns[:-1]) or not np.isfinite(v).all():
            raise InvalidState("PersonalOffset: expected columns in ascending order and finite weights")
        if g is not None and not (_array_of(g, np.float64) and len(g) == len(v) and _finite_sums(g)):
            raise InvalidState("PersonalOffset.g: expected a finite float >= 0 for each weight")
        if not (type(self.s) is float and _SMALLEST_SCALE <= self.s <= 1.0) or (g is None and self.s != 1.0):
            raise InvalidState(f"PersonalOffset.s: expected a float in [1e-100, 1] (1 with Pegasos's), got {self.s!r}")

    def scale(self, t0: float) -> float:
        """s: d = s·v (t0/(t + t0) with Pegasos's steps, ``s`` with AdaGrad's)."""
        return self.s if self.g is not None else pegasos_scale(self.t, t0)

    def _decayed(self, factor: float) -> tuple[float, np.ndarray]:
        """The scale and the weights of ``factor``·d (0 < factor <= 1): the scale times ``factor``, the weights as
        they are until it falls below 1e-100, then multiplied out (a new array) and the scale 1."""
        s = self.s * factor
        return (s, self.v) if s >= _SMALLEST_SCALE else (1.0, self.v * s)

    def _find(self, columns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each of ``columns``: where it is or would go in ``self.columns``, and whether it is there."""
        at = np.searchsorted(self.columns, columns)
        if not len(self.columns):
            return at, np.zeros(len(columns), bool)
        return at, self.columns[np.minimum(at, len(self.columns) - 1)] == columns

    def dot(self, x: Mapping, t0: float) -> float:
        """⟨d, x⟩."""
        return self.dot_columns(*feature_columns(x), t0)

    def dot_columns(self, columns: np.ndarray, values: np.ndarray, t0: float) -> float:
        """⟨d, x⟩ for x's ``columns`` and ``values``; the terms added in their order."""
        at, found = self._find(columns)
        return self.scale(t0) * sum((self.v[at[found]] * values[found]).tolist())

    def found(self, x: Mapping, t0: float) -> dict:
        """d_j for each feature j of x that has a weight."""
        columns, _ = feature_columns(x)
        at, found = self._find(columns)
        scale, keys = self.scale(t0), [key for key, there in zip(x, found.tolist(), strict=True) if there]
        return dict(zip(keys, (scale * self.v[at[found]]).tolist(), strict=True))

    def pegasos_step(self, columns: np.ndarray, values: np.ndarray, add: float) -> None:
        """v_j += ``add``·x_j for each feature j of x (``add`` = η·y·w/s); a ValueError, and the offset as it was,
        when a weight would not be finite."""
        at, found = self._find(columns)
        new = ~found
        with np.errstate(over="ignore", invalid="ignore"):  # (checked below)
            old_v, new_v = self.v[at[found]] + add * values[found], 0.0 + add * values[new]
        _check_finite(old_v, new_v)
        self.v[at[found]] = old_v
        self._insert(at[new], columns[new], new_v, None)

    def adagrad_step(
        self, columns: np.ndarray, values: np.ndarray, gradient: float, rate: float, decay: float = 1.0
    ) -> None:
        """d ← ``decay``·d, then G_j += (c·x_j)² and d_j −= ``rate``·c·x_j/√(G_j + ε) for each feature j of x,
        c = ``gradient`` (v_j by that over the scale); a ValueError, and the offset as it was, when a sum or a
        weight would not be finite."""
        g = self.g
        if g is None:
            raise ValueError("an offset of Pegasos's steps takes no AdaGrad step")
        scale, v = self._decayed(decay)
        at, found = self._find(columns)
        new = ~found
        with np.errstate(over="ignore", invalid="ignore"):  # (checked below)
            parts = gradient * values
            old, part = at[found], parts[found]
            old_g = g[old] + part * part
            old_v = v[old] - rate * part / np.sqrt(old_g + ADAGRAD_EPSILON) / scale
            part = parts[new]
            new_g = 0.0 + part * part
            new_v = 0.0 - rate * part / np.sqrt(new_g + ADAGRAD_EPSILON) / scale
        _check_finite(old_g, old_v, new_g, new_v)
        g[old], v[old] = old_g, old_v
        self.s, self.v = scale, v
        self._insert(at[new], columns[new], new_v, new_g)

    def _insert(self, at: np.ndarray, columns: np.ndarray, v: np.ndarray, g: np.ndarray | None) -> None:
        """Add the weights ``v`` (and sums ``g``) of new ``columns``, each at its place ``at``."""
        if not len(columns):
            return
        order = np.argsort(columns, kind="stable")
        at = at[order]
        self.columns = np.insert(self.columns, at, columns[order])
        self.v = np.insert(self.v, at, v[order])
        if self.g is not None and g is not None:
            self.g = np.insert(self.g, at, g[order])

    def keep(self, most: int) -> None:
        """Past ``most`` weights, keep the largest ``kept_after(most)`` (by |v|; the lower column of a tie), the
        others set to 0: at most ``most`` weights, and a sort only once the offset has grown by a fifth again."""
        if len(self.v) > most:
            kept = np.sort(np.argsort(-np.abs(self.v), kind="stable")[: kept_after(most)])
            self.columns, self.v = self.columns[kept], self.v[kept]
            if self.g is not None:
                self.g = self.g[kept]

    def to_bytes(self) -> bytes:
        """t, then the scale, the columns, the weights and, with AdaGrad's steps, the sums."""
        head = struct.pack(_HEAD, b"c", self.g is not None, self.t, len(self.v)) + struct.pack(_SCALE, self.s)
        arrays = (self.columns, self.v) if self.g is None else (self.columns, self.v, self.g)
        return b"".join((head, *(array.data for array in arrays)))

    @classmethod
    def from_bytes(cls, data: bytes) -> PersonalOffset:
        """The offset `to_bytes` gave ``data``."""
        form, adagrad, t, n = struct.unpack_from(_HEAD, data)
        if form not in (b"c", b"i", b"s"):
            raise ValueError(f"an offset's bytes of form {form!r}: expected c, i or s")
        start, columns = struct.calcsize(_HEAD), form == b"c"
        scale = struct.unpack_from(_SCALE, data, start)[0] if columns else 1.0
        start += struct.calcsize(_SCALE) if columns else 0
        dtypes = ([np.int64] if columns else []) + [np.float64] * (2 if adagrad else 1)
        arrays = [np.frombuffer(data, dtype, n, start + 8 * n * i).copy() for i, dtype in enumerate(dtypes)]
        if columns:
            return cls(t, arrays[0], arrays[1], arrays[2] if adagrad else None, scale)
        body = data[start + 8 * n * len(arrays) :]
        keys = np.frombuffer(body, np.int64, n).tolist() if form == b"i" else json.loads(body)
        weights = dict(zip(keys, arrays[0].tolist(), strict=True))
        return cls.of(t, weights, dict(zip(keys, arrays[1].tolist(), strict=True)) if adagrad else None)


def _check_finite(*arrays: np.ndarray) -> None:
    """A ValueError when a value of ``arrays`` is not finite: a step the offset refuses."""
    if not all(np.isfinite(array).all() for array in arrays):
        raise ValueError("x: values too large for a personal offset (a weight or a sum of squares would overflow)")


def _finite_sums(g: np.ndarray) -> bool:
    """Whether every sum of squared gradients is finite and >= 0."""
    return bool(np.isfinite(g).all() and (g >= 0.0).all())


def _array_of(array: object, dtype: type) -> bool:
    """Whether ``array`` is a 1-d numpy array of ``dtype``."""
    return isinstance(array, np.ndarray) and array.dtype == dtype and array.ndim == 1
