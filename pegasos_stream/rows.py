"""Batches of examples as CSR rows, the input of the compiled replay path.

A `Rows` batch numbers its features locally: column c of the batch is the feature key ``keys[c]``,
so the learner only gathers and scatters the weights the batch touches. Rows keep the order of each
example's features (the order ``learn_one`` would sum them in).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from . import _fast

__all__ = ["Rows", "name_table", "parse_json_events", "parse_svmlight"]


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
        return cls(_int64(indptr), _int64(indices), np.frombuffer(data, dtype=np.float64), keys)

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


def parse_svmlight(
    values: list[bytes], max_bytes: int, names: list | None = None
) -> tuple[np.ndarray, Rows, np.ndarray]:
    """svmlight lines at C speed: (status of each line, the rows, their labels as ±1.0).

    Status 0: the line is the next row; 1: nothing to learn (blank or comment); 2: the line is outside
    the plain ASCII grammar (or too long) and the Python parser must take it, to give the same event
    (e.g. ``1_0`` as a number, a repeated name) or the same error. ``names``, a list passed to every
    call of a run, keeps the str of each numbered name (``"17"``) from call to call, so each is made
    and hashed once and the learner's weight lookups match it by identity.
    """
    vocabulary: dict = {}
    keys: list = []
    names = [] if names is None else names
    status, indptr, indices, data, labels = _fast.parse_svmlight(values, vocabulary, keys, max_bytes, names)
    rows = Rows(_int64(indptr), _int64(indices), np.frombuffer(data, dtype=np.float64), keys)
    return np.frombuffer(status, dtype=np.uint8), rows, np.frombuffer(labels, dtype=np.float64)


def parse_json_events(
    values: list[bytes], fields: Mapping[str, str], max_bytes: int, names: object = None
) -> tuple[np.ndarray, Rows, list, list]:
    """Labelled JSON feature events at C speed: (status of each value, the rows, their ids, their labels).

    ``fields`` names the members, as ``EventParser.fields``. Status 0: the value is an object of the id
    (optional: None stands for the record's position), the features and the label in the plain ASCII
    grammar, and is the next row, with the id and label json gives; 2: anything else (text, unlabelled,
    escapes, repeated names, huge integers, too long...), for the Python parser to give the same event
    or the same error. ``names``, a ``name_table()`` passed to every call of a run, keeps the feature
    names from call to call, so each str is made and hashed once and the learner's weight lookups
    match it by identity.
    """
    keys: list = []
    status, indptr, indices, data, ids, labels = _fast.parse_json_events(
        values, fields["id"], fields["x"], fields["label"], fields["text"], max_bytes, names or name_table(), keys
    )
    rows = Rows(_int64(indptr), _int64(indices), np.frombuffer(data, dtype=np.float64), keys)
    return np.frombuffer(status, dtype=np.uint8), rows, ids, labels


def name_table() -> object:
    """An empty table of feature names, for the calls of ``parse_json_events`` of one run."""
    return _fast.name_table()


def _int64(buffer: bytes) -> np.ndarray:
    return np.frombuffer(buffer, dtype=np.int64)
