"""Batches of examples as CSR rows, the input of the compiled replay path.

A `Rows` batch names its columns by ``keys``: column c of the batch is the feature key ``keys[c]``.
Usually the batch numbers its features locally, so that a learner with dict weights only gathers and
scatters the weights the batch touches; for a learner whose weights are arrays of int columns, the keys
may be ``range(n)``, the columns then being the features themselves (hashed features need no
numbering). Rows keep the order of each example's features (the order ``learn_one`` would sum them in).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike

from .._compiled import LOOPS as _loops

__all__ = ["Rows", "int64_array"]


@dataclass
class Rows:
    """CSR rows: row i holds ``keys[indices[k]]: data[k]`` for k in ``indptr[i]:indptr[i+1]``.

    ``indptr`` is int64 and ``data`` float64; ``indices`` is int64, or int32 as a CSR matrix's indices may be
    (scipy's usually are: the compiled loops read them as they are, without a copy).

    ``distinct`` says that no row holds a column twice, as the rows this package builds (from dicts, checked
    CSR matrices, its parsers and feature readers): the compiled loops then skip that check (a row holding a
    column twice is no feature dict, and would not learn what ``learn_one`` learns).
    """

    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray
    keys: list | range = field(default_factory=list)
    distinct: bool = False

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
        return Rows(
            self.indptr[start : stop + 1] - first,
            self.indices[first:last],
            self.data[first:last],
            self.keys,
            self.distinct,
        )

    def numbered_locally(self) -> Rows:
        """These rows over local columns, named by a list of the keys they use (in the order of the columns), for
        a learner that gathers the weights of a batch; the rows themselves when their keys are a list already."""
        if isinstance(self.keys, list):
            return self
        used, local = np.unique(self.indices, return_inverse=True)
        keys = self.keys
        return Rows(self.indptr, local.astype(np.int64), self.data, [keys[c] for c in used.tolist()], self.distinct)

    @classmethod
    def from_dicts(cls, dicts: Sequence[Mapping]) -> Rows:
        """Rows of feature dicts (values already checked to be finite numbers), in dict order."""
        dicts = list(dicts)
        keys: list = []
        built = None if _loops is None else _loops.rows_from_dicts(dicts, {}, keys)
        if built is None:  # not compiled, or keys or values the compiled builder leaves to Python
            return cls._from_dicts_in_python(dicts)
        indptr, indices, data = built
        return cls(int64_array(indptr), int64_array(indices), np.frombuffer(data, dtype=np.float64), keys, True)

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
            np.array(indptr, dtype=np.int64),
            np.array(indices, dtype=np.int64),
            np.array(data, dtype=np.float64),
            keys,
            True,
        )

    @classmethod
    def from_csr(
        cls,
        indptr: ArrayLike,
        indices: ArrayLike,
        data: ArrayLike,
        columns: Iterable[Hashable] | None = None,
        n_columns: int | None = None,
    ) -> Rows:
        """Rows of a CSR matrix; column j is the feature ``columns[j]`` (default: the int j). With ``n_columns``
        (and no ``columns``), the rows keep the matrix's columns, below n_columns (keys ``range(n_columns)``:
        for a learner with weight arrays, no numbering of the columns); otherwise the columns the rows use are
        numbered locally.

        A malformed matrix raises a ValueError saying what is wrong: arrays that are not 1-d, indices that
        are not integers, indptr decreasing or outside indices, a column out of range or repeated within a
        row (a feature dict holds one value per key).
        """
        indptr, columns_used, values = _trimmed_csr(indptr, indices, data)
        names = None if columns is None else list(columns)
        if names is None and n_columns is not None:
            rows = cls(indptr, columns_used, values, range(n_columns))
            if _loops is None:
                _check_bounds(rows.indptr, columns_used, n_columns)
            rows._check_columns_once()  # (compiled: the bounds too)
            rows.distinct = True
            return rows
        _check_bounds(indptr, columns_used, len(names) if names is not None else None)
        mask = np.zeros(int(columns_used.max(initial=-1)) + 1, dtype=bool)
        mask[columns_used] = True
        local = (np.cumsum(mask) - 1)[columns_used]  # the rank of each column among those used
        keys = np.flatnonzero(mask).tolist()
        if names is not None:
            keys = [names[j] for j in keys]
        rows = cls(indptr, local, values, keys)
        rows._check_columns_once()
        rows.distinct = True
        return rows

    def _check_columns_once(self) -> None:
        """A ValueError naming the first row that holds a column more than once, and that column (by its key)."""
        if _loops is not None:
            keys = self.keys
            _loops.check_rows(self.indptr, self.indices, keys if isinstance(keys, list) else len(keys))
            return
        row_of = np.repeat(np.arange(len(self)), np.diff(self.indptr))
        cells = row_of * max(len(self.keys), 1) + self.indices
        ordered = np.sort(cells)
        repeated = ordered[1:][ordered[1:] == ordered[:-1]]
        if not len(repeated):
            return
        row = int(repeated.min()) // max(len(self.keys), 1)
        seen: set[int] = set()
        for column in self.indices[self.indptr[row] : self.indptr[row + 1]].tolist():
            if column in seen:
                raise ValueError(
                    f"row {row}: column {self.keys[column]!r} appears more than once (a feature dict holds one"
                    " value per key; scipy's sum_duplicates() adds them up)"
                )
            seen.add(column)


def _trimmed_csr(indptr: ArrayLike, indices: ArrayLike, data: ArrayLike) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(indptr, indices, data) of a CSR matrix, checked (a ValueError saying what is wrong) and trimmed to the
    entries its rows span: indptr from 0, data as contiguous float64."""
    indptr, indices = _integers(indptr, "indptr"), _integers(indices, "indices", keep_int32=True)
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
    return indptr - first, indices[first:last], np.ascontiguousarray(values[first:last], dtype=np.float64)


def _check_bounds(indptr: np.ndarray, indices: np.ndarray, n_columns: int | None) -> None:
    """A ValueError naming the first row with a column below 0 or, given ``n_columns``, not below it (as the compiled
    check names it)."""
    low, high = (int(indices.min()), int(indices.max())) if len(indices) else (0, -1)
    if low >= 0 and (n_columns is None or high < n_columns):
        return
    k = int(np.flatnonzero((indices < 0) | (n_columns is not None and indices >= n_columns))[0])
    row = int(np.searchsorted(indptr, k, side="right")) - 1
    bound = "" if n_columns is None else f" < {n_columns}"
    raise ValueError(f"row {row}: column {indices[k]} is out of range: expected 0 <= column{bound}")


def _integers(values: ArrayLike, name: str, keep_int32: bool = False) -> np.ndarray:
    """``values`` as a 1-d C-contiguous int64 array (int32 ones kept as they are with ``keep_int32``); a ValueError
    naming it unless it is a 1-d array of integers."""
    array = np.asarray(values)
    if array.ndim != 1 or (array.size and array.dtype.kind not in "iu"):
        raise ValueError(f"{name}: expected a 1-d array of integers, got a {array.ndim}-d array of {array.dtype}")
    dtype = np.int32 if keep_int32 and array.dtype == np.int32 else np.int64
    return np.ascontiguousarray(array, dtype=dtype)


def int64_array(buffer: bytes) -> np.ndarray:
    return np.frombuffer(buffer, dtype=np.int64)
