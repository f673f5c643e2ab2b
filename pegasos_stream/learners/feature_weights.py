"""A margin over weights kept per feature, in a dict or in an array of int columns: the part `AdaGradLogistic` and
`NormalizedHinge` share."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from operator import mul
from typing import cast

import numpy as np

from .._compiled import LOOPS as _loops
from .validation import reject_features
from .weights import COMPENSATED_SUM, is_column, sparse_dot, weight_columns

__all__ = ["FeatureWeights"]


class FeatureWeights:
    """The margin f(x) = ⟨w, x⟩ of weights ``_w``: a dict keyed by any feature name, or an array of ``n_features``
    floats for features that are int columns 0..n − 1 (other keys refused), and the columns a batch's keys name."""

    _w: dict | np.ndarray
    _t: int

    @property
    def t(self) -> int:
        """The number of examples learned."""
        return self._t

    def decision_function_one(self, x: Mapping) -> float:
        """The margin f(x) = ⟨w, x⟩."""
        try:
            if isinstance(self._w, dict):
                margin = sparse_dot(self._w, x)
            elif _loops is not None:
                margin = _loops.dense_dot(self._w, *self._dense_example(x), COMPENSATED_SUM)
            else:
                self._check_columns(x)
                margin = sum(map(mul, map(self._w.item, x), x.values()))
        except (TypeError, OverflowError):
            margin = math.nan
        return self._finite(x, margin)

    @staticmethod
    def _finite(x: Mapping, margin: float) -> float:
        """``margin``, or the ValueError naming the feature of ``x`` that made it no finite number."""
        if not math.isfinite(margin):
            reject_features(x)
        return margin

    def _dense_example(self, x: Mapping) -> tuple[np.ndarray, np.ndarray]:
        """(columns, values) of ``x`` for the compiled passes over the weight arrays; a ValueError naming a
        feature that is no column or a value that is no number."""
        columns = self.columns_of(list(x))
        if columns is None:
            self._check_columns(x)
        try:
            values = np.fromiter(x.values(), np.float64, len(x))
        except (TypeError, ValueError, OverflowError):
            reject_features(x)  # names the value that is no finite number
        return cast(np.ndarray, columns), values

    def _check_columns(self, x: Mapping) -> None:
        """With ``n_features``: a ValueError for a feature that is no int column 0..n_features − 1."""
        n = len(self._w)
        for key in x:
            if not is_column(key, n):
                raise ValueError(f"feature {key!r}: expected an int column from 0 to {n - 1} (n_features={n})")

    def _is_column(self, key: object) -> bool:
        """Whether ``key`` names a column of the weight arrays: an int from 0 to n_features − 1."""
        return is_column(key, len(self._w))

    def foreign_keys(self, keys: Sequence, columns: np.ndarray | range | None) -> np.ndarray | None:
        """Which of ``keys`` are no weight column (with ``n_features``: not an int from 0 to n_features − 1),
        given their ``columns_of(keys)``; None when none is."""
        if isinstance(self._w, dict) or columns is not None:
            return None
        return np.array([not self._is_column(key) for key in keys], dtype=bool)

    def columns_of(self, keys: Sequence) -> np.ndarray | range | None:
        """The weight column of each key of a batch: its position (dicts) or the key (arrays: ``keys`` itself
        when it is a range of columns from 0, the rows' columns then being the weights' columns); None when some
        key is no column of the arrays (the batch then goes through ``learn_one``)."""
        if isinstance(self._w, dict):
            return np.arange(len(keys), dtype=np.int64)
        return weight_columns(keys, len(self._w))
