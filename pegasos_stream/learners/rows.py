"""Batches of examples as CSR rows, the input of the compiled replay path.

A `Rows` batch numbers its features locally: column c of the batch is the feature key ``keys[c]``,
so the learner only gathers and scatters the weights the batch touches. Rows keep the order of each
example's features (the order ``learn_one`` would sum them in).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from .. import _fast

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
    def from_dicts(cls, dicts: Sequence[dict]) -> Rows:
        """Rows of feature dicts (values already checked to be finite numbers), in dict order."""
        vocabulary: dict = {}
        keys: list = []
        indptr, indices, data = _fast.rows_from_dicts(list(dicts), vocabulary, keys)
        return cls(int64_array(indptr), int64_array(indices), np.frombuffer(data, dtype=np.float64), keys)

    @classmethod
    def from_csr(
        cls, indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, columns: Iterable[Hashable] | None = None
    ) -> Rows:
        """Rows of a CSR matrix; column j is the feature ``columns[j]`` (default: the int j)."""
        indptr = np.asarray(indptr, dtype=np.int64)
        first, last = int(indptr[0]), int(indptr[-1])
        columns_used = np.asarray(indices, dtype=np.int64)[first:last]
        mask = np.zeros(int(columns_used.max(initial=-1)) + 1, dtype=bool)
        mask[columns_used] = True
        local = (np.cumsum(mask) - 1)[columns_used]  # the rank of each column among those used
        names = np.flatnonzero(mask).tolist()
        if columns is not None:
            columns = list(columns)
            names = [columns[j] for j in names]
        return cls(
            indptr - first,
            local,
            np.ascontiguousarray(np.asarray(data)[first:last], dtype=np.float64),
            names,
        )


def int64_array(buffer: bytes) -> np.ndarray:
    return np.frombuffer(buffer, dtype=np.int64)
