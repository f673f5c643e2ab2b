"""Batches of examples as CSR rows, the input of the compiled replay path.

A `Rows` batch numbers its features locally: column c of the batch is the feature key ``keys[c]``,
so the learner only gathers and scatters the weights the batch touches. Rows keep the order of each
example's features (the order ``learn_one`` would sum them in).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike

from .._compiled import FAST as _fast

__all__ = ["Rows", "int64_array"]


@dataclass
class Rows:
    """CSR rows over locally numbered columns: row i holds ``keys[indices[k]]: data[k]`` for k in
    ``indptr[i]:indptr[i+1]``."""

    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray
    keys: list = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.indptr) - 1

    def row(self, i: int) -> dict:
        """Row ``i`` as a feature dict."""
        a, b = int(self.indptr[i]), int(self.indptr[i + 1])
        keys = self.keys
        return {keys[c]: v for c, v in zip(self.indices[a:b].tolist(), self.data[a:b].tolist())}

    def slice(self, start: int, stop: int) -> Rows:
        """Rows ``start:stop`` (sharing the columns)."""
        first, last = int(self.indptr[start]), int(self.indptr[stop])
        return Rows(self.indptr[start : stop + 1] - first, self.indices[first:last], self.data[first:last], self.keys)

    @classmethod
    def from_dicts(cls, dicts: Sequence[Mapping]) -> Rows:
        """Rows of feature dicts (values already checked to be finite numbers), in dict order."""
        dicts = list(dicts)
        keys: list = []
        built = None if _fast is None else _fast.rows_from_dicts(dicts, {}, keys)
        if built is None:  # not compiled, or keys or values the compiled builder leaves to Python
            return cls._from_dicts_in_python(dicts)
        indptr, indices, data = built
        return cls(int64_array(indptr), int64_array(indices), np.frombuffer(data, dtype=np.float64), keys)

    @classmethod
    def _from_dicts_in_python(cls, dicts: list[Mapping]) -> Rows:
        """``from_dicts`` for any mappings, keys and values (the columns numbered in first-seen order)."""
        vocabulary: dict = {}
        keys: list = []
        indptr, indices, data = [0], [], []
        for x in dicts:
            for key, value in x.items():
                column = vocabulary.get(key)
                if column is None:
                    column = vocabulary[key] = len(keys)
                    keys.append(key)
                indices.append(column)
                data.append(float(value))
            indptr.append(len(indices))
        return cls(
            np.array(indptr, dtype=np.int64), np.array(indices, dtype=np.int64), np.array(data, dtype=np.float64), keys
        )

    @classmethod
    def from_csr(
        cls, indptr: ArrayLike, indices: ArrayLike, data: ArrayLike, columns: Iterable[Hashable] | None = None
    ) -> Rows:
        """Rows of a CSR matrix; column j is the feature ``columns[j]`` (default: the int j).

        A malformed matrix raises a ValueError saying what is wrong: arrays that are not 1-d, indices that
        are not integers, indptr decreasing or outside indices, a column out of range or repeated within a
        row (a feature dict holds one value per key).
        """
        indptr, indices = _integers(indptr, "indptr"), _integers(indices, "indices")
        values = np.asarray(data)
        if values.ndim != 1 or (values.size and values.dtype.kind not in "biuf"):
            raise ValueError(f"data: expected a 1-d array of numbers, got a {values.ndim}-d array of {values.dtype}")
        if len(indices) != len(values):
            raise ValueError(f"indices and data: {len(indices)} and {len(values)} entries, expected as many of each")
        if not len(indptr):
            raise ValueError("indptr: expected the n + 1 bounds of n rows, got none")
        decreasing = np.flatnonzero(np.diff(indptr) < 0)
        if len(decreasing):
            row = int(decreasing[0])
            raise ValueError(
                f"indptr: row {row}: indptr[{row + 1}] = {indptr[row + 1]} decreases from indptr[{row}] = {indptr[row]}"
            )
        first, last = int(indptr[0]), int(indptr[-1])
        if first < 0 or last > len(indices):
            raise ValueError(f"indptr: runs from {first} to {last}, outside 0..{len(indices)} (the length of indices)")
        columns_used = indices[first:last]
        names = None if columns is None else list(columns)
        out_of_range = np.flatnonzero((columns_used < 0) | (names is not None and columns_used >= len(names)))
        if len(out_of_range):
            k = first + int(out_of_range[0])
            row = int(np.searchsorted(indptr, k, side="right")) - 1
            bound = "" if names is None else f" < {len(names)} (the number of columns)"
            raise ValueError(f"indices: row {row}: column {indices[k]} is out of range: expected 0 <= column{bound}")
        mask = np.zeros(int(columns_used.max(initial=-1)) + 1, dtype=bool)
        mask[columns_used] = True
        local = (np.cumsum(mask) - 1)[columns_used]  # the rank of each column among those used
        keys = np.flatnonzero(mask).tolist()
        if names is not None:
            keys = [names[j] for j in keys]
        rows = cls(indptr - first, local, np.ascontiguousarray(values[first:last], dtype=np.float64), keys)
        if _fast is None:
            _check_columns_once(rows)
        else:
            _fast.check_rows(rows.indptr, rows.indices, rows.keys)  # a column repeated within a row
        return rows


def _check_columns_once(rows: Rows) -> None:
    """A ValueError naming the first row that holds a column more than once, and that column (by its key),
    as the compiled ``check_rows`` gives it."""
    row_of = np.repeat(np.arange(len(rows)), np.diff(rows.indptr))
    cells = row_of * max(len(rows.keys), 1) + rows.indices
    ordered = np.sort(cells)
    repeated = ordered[1:][ordered[1:] == ordered[:-1]]
    if not len(repeated):
        return
    row = int(repeated.min()) // max(len(rows.keys), 1)
    seen: set[int] = set()
    for column in rows.indices[rows.indptr[row] : rows.indptr[row + 1]].tolist():
        if column in seen:
            raise ValueError(
                f"row {row}: column {rows.keys[column]!r} appears more than once (a feature dict holds one value"
                " per key; scipy's sum_duplicates() adds them up)"
            )
        seen.add(column)


def _integers(values: ArrayLike, name: str) -> np.ndarray:
    """``values`` as a 1-d C-contiguous int64 array; a ValueError naming it unless it is a 1-d array of integers."""
    array = np.asarray(values)
    if array.ndim != 1 or (array.size and array.dtype.kind not in "iu"):
        raise ValueError(f"{name}: expected a 1-d array of integers, got a {array.ndim}-d array of {array.dtype}")
    return np.ascontiguousarray(array, dtype=np.int64)


def int64_array(buffer: bytes) -> np.ndarray:
    return np.frombuffer(buffer, dtype=np.int64)
