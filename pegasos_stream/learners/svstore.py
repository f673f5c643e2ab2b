"""The support-vector store of kernel Pegasos: copies of the examples, their labels and β.

Kernel values between one example and every stored vector come from one numpy operation over
contiguous arrays: a dense row matrix while the stored vectors use few distinct features
(``DENSE_MAX_COLUMNS``), and a sparse (CSR-like) layout with cached squared norms beyond that, as
for text. Feature keys map to columns through an index that is compacted when most of its columns
belong to vectors no longer stored, so memory follows the store, not the stream.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping

import numpy as np

from .kernels import Kernel, Linear
from .state import (
    InvalidState,
    check_array,
    check_attributes,
    check_count,
    check_flag,
    check_instance,
    finite_floats,
    is_count,
)

__all__ = ["DENSE_MAX_COLUMNS", "SupportVectorStore"]

#: Up to this many distinct features, the vectors are kept as rows of a dense matrix.
DENSE_MAX_COLUMNS = 256


def identity(x: Mapping, label: float) -> tuple[frozenset, float]:
    """What makes two examples the same support vector: equal features and equal label."""
    return frozenset(x.items()), label


class SupportVectorStore:
    """Stored examples x_j (copies), labels y_j ∈ {−1, +1} and coefficients β_j, oldest first.

    Parameters
    ----------
    kernel
        The kernel of ``kernel_row``.
    keep_gram
        Also maintain the Gram matrix K(x_i, x_j) of the stored vectors (for projection).

    """

    def __init__(self, kernel: Kernel, keep_gram: bool = False) -> None:
        self.kernel = kernel
        self.keep_gram = keep_gram
        self.features: list[dict] = []
        self.labels = np.zeros(0)
        self.betas = np.zeros(0)
        self.sq_norms = np.zeros(0)
        self.gram = np.zeros((0, 0))
        self._rows: list[tuple[np.ndarray, np.ndarray]] = []  # (columns, values) of each vector
        self._positions: dict[tuple[frozenset, float], int] = {}
        self._column: dict[Hashable, int] = {}
        self._nnz = 0
        self._layout: tuple | None = None  # the arrays of kernel_row, rebuilt after a change

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        del state["_positions"], state["_layout"]  # derived from the vectors
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._layout = None
        self._positions = {identity(x, y): i for i, (x, y) in enumerate(zip(self.features, self.labels))}

    def _check_state(self) -> None:
        """Refuse (InvalidState) a rebuilt store whose vectors, labels, coefficients, norms, Gram matrix and column
        index do not fit together as ``append`` and ``delete`` leave them."""
        check_attributes(self, vars(SupportVectorStore(Linear())))
        check_instance(self, "kernel", Kernel)
        n = len(check_instance(self, "features", list))
        if not np.isin(check_array(self, "labels", (n,)), (-1.0, 1.0)).all():
            raise InvalidState("SupportVectorStore.labels: expected -1.0 or 1.0")
        check_array(self, "betas", (n,))
        check_array(self, "sq_norms", (n,), 0.0)
        check_array(self, "gram", (n, n) if check_flag(self, "keep_gram") else (0, 0))
        columns = list(check_instance(self, "_column", dict).values())
        if not (all(map(is_count, columns)) and sorted(columns) == list(range(len(columns)))):
            raise InvalidState("SupportVectorStore._column: expected the columns 0 to n - 1, each once")
        if len(check_instance(self, "_rows", list)) != n or not all(map(self._encodes, self.features, self._rows)):
            raise InvalidState("SupportVectorStore._rows: expected the columns and values of each vector")
        if check_count(self, "_nnz") != sum(len(columns) for columns, _ in self._rows):
            raise InvalidState("SupportVectorStore._nnz: expected the number of entries of the vectors")

    def _encodes(self, x: object, row: object) -> bool:
        """Whether ``row`` is the (columns, values) of the vector ``x``, a dict of finite floats (``_encode``)."""
        if not (isinstance(x, dict) and finite_floats(x.values()) and x.keys() <= self._column.keys()):
            return False
        made = self._encode(x, grow=False)
        return (
            isinstance(row, tuple)
            and len(row) == 2
            and all(isinstance(part, np.ndarray) and part.dtype == expected.dtype for part, expected in zip(row, made))
            and all(map(np.array_equal, row, made))
        )

    def __len__(self) -> int:
        return len(self.features)

    def find(self, x: Mapping, label: float) -> int | None:
        """The position of the vector with these features and this label, if stored."""
        return self._positions.get(identity(x, label))

    def coefficients(self) -> np.ndarray:
        """β_j·y_j for every stored vector."""
        return self.betas * self.labels

    # -- changes ---------------------------------------------------------------------------

    def append(self, x: Mapping, label: float, beta: float) -> None:
        """Store a copy of x as the newest vector (x must not be stored already)."""
        x = {key: float(value) for key, value in x.items()}
        columns, values = self._encode(x, grow=True)
        self._positions[identity(x, label)] = len(self.features)
        self.features.append(x)
        self._rows.append((columns, values))
        self._nnz += len(columns)
        self.labels = np.append(self.labels, label)
        self.betas = np.append(self.betas, float(beta))
        self.sq_norms = np.append(self.sq_norms, float(values @ values))
        self._layout = None
        if self.keep_gram:
            row = self.kernel_row(x)
            n = len(row)
            gram = np.empty((n, n))
            gram[:-1, :-1] = self.gram
            gram[-1, :] = row
            gram[:, -1] = row
            self.gram = gram

    def delete(self, positions: list[int]) -> None:
        """Remove the vectors at these positions; the others keep their order."""
        drop = set(positions)
        keep = [i for i in range(len(self.features)) if i not in drop]
        self.features = [self.features[i] for i in keep]
        self._rows = [self._rows[i] for i in keep]
        self.labels = self.labels[keep]
        self.betas = self.betas[keep]
        self.sq_norms = self.sq_norms[keep]
        if self.keep_gram:
            self.gram = self.gram[np.ix_(keep, keep)]
        self._positions = {identity(x, y): i for i, (x, y) in enumerate(zip(self.features, self.labels))}
        self._nnz = sum(len(columns) for columns, _ in self._rows)
        self._layout = None
        if len(self._column) > 2 * self._nnz + DENSE_MAX_COLUMNS:
            self._compact_columns()

    def _compact_columns(self) -> None:
        """Forget the columns that no stored vector uses any more, and renumber the rest."""
        self._column = {}
        self._rows = [self._encode(x, grow=True) for x in self.features]

    def _encode(self, x: Mapping, grow: bool) -> tuple[np.ndarray, np.ndarray]:
        """x as (column indices, values); unknown features get a column only when ``grow``."""
        column = self._column
        if grow:
            for key in x:
                if key not in column:
                    column[key] = len(column)
            items = list(x.items())
        else:
            items = [(key, value) for key, value in x.items() if key in column]
        columns = np.fromiter((column[key] for key, _ in items), dtype=np.intp, count=len(items))
        values = np.fromiter((value for _, value in items), dtype=float, count=len(items))
        return columns, values

    # -- kernel values ---------------------------------------------------------------------

    def _arrays(self) -> tuple:
        """The stored vectors as arrays: ("dense", matrix) or ("sparse", columns, values, owner, scratch)."""
        if self._layout is None:
            n, d = len(self._rows), len(self._column)
            lengths = [len(columns) for columns, _ in self._rows]
            columns = np.concatenate([c for c, _ in self._rows]) if n else np.zeros(0, np.intp)
            values = np.concatenate([v for _, v in self._rows]) if n else np.zeros(0)
            owner = np.repeat(np.arange(n), lengths)
            if d <= DENSE_MAX_COLUMNS:
                matrix = np.zeros((n, d))
                matrix[owner, columns] = values
                self._layout = ("dense", matrix)
            else:
                self._layout = ("sparse", columns, values, owner, np.zeros(d))
        return self._layout

    def dots(self, x: Mapping) -> np.ndarray:
        """⟨x_j, x⟩ for every stored vector, in one numpy operation."""
        columns, values = self._encode(x, grow=False)
        layout = self._arrays()
        if layout[0] == "dense":
            return layout[1][:, columns] @ values
        _, sv_columns, sv_values, owner, scratch = layout
        scratch[columns] = values
        dots = np.bincount(owner, weights=sv_values * scratch[sv_columns], minlength=len(self._rows))
        scratch[columns] = 0.0
        return dots

    def kernel_row(self, x: Mapping, sq_norm: float | None = None) -> np.ndarray:
        """K(x_j, x) for every stored vector; ``sq_norm`` is ‖x‖² when the caller has it."""
        if not self.features:
            return np.zeros(0)
        if sq_norm is None:
            sq_norm = math.fsum(value * value for value in x.values())
        return self.kernel(self.dots(x), self.sq_norms, sq_norm)
