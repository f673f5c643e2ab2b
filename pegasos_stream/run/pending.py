"""Examples waiting for their label: delayed feedback, bounded in count and age."""

from __future__ import annotations

import math
import numbers
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["PendingLabels", "check_pending"]


@dataclass
class Pending:
    """A predicted example: its features, the score it got, when, whose it is (None: no user's), and, for a run
    that forwards its events (``output.forward``), the JSON record it came in (None otherwise)."""

    x: dict
    score: float
    arrived: float
    user: str | None = None
    record: str | None = None


class PendingLabels:
    """Predicted examples by id, until their label arrives.

    At most ``max_pending`` are kept, for at most ``max_age_seconds``: the oldest go first, and are
    counted as ``dropped`` (over the count) or ``expired`` (too old).
    """

    def __init__(self, max_pending: int, max_age_seconds: float, clock: Callable[[], float] = time.monotonic):
        self.max_pending = max_pending
        self.max_age_seconds = max_age_seconds
        self.clock = clock
        self._waiting: OrderedDict[Hashable, Pending] = OrderedDict()
        self.dropped = 0
        self.expired = 0
        self.unmatched = 0

    def __len__(self) -> int:
        return len(self._waiting)

    def add(
        self, event_id: Hashable, x: dict, score: float, user: str | None = None, record: str | None = None
    ) -> None:
        """Keep x (and ``record``) until its label comes; a repeated id replaces the earlier example."""
        self._waiting.pop(event_id, None)
        self._waiting[event_id] = Pending(x, score, self.clock(), user, record)
        while len(self._waiting) > self.max_pending:
            self._waiting.popitem(last=False)
            self.dropped += 1

    def items(self):
        """(id, Pending) pairs, oldest first."""
        return self._waiting.items()

    def restore(self, event_id: Hashable, x: dict, score: float, arrived: float) -> None:
        """Put back an example saved by a checkpoint, keeping the order of arrival."""
        self._waiting[event_id] = Pending(x, score, arrived)

    def columns(self, now: float) -> dict[str, Any]:
        """The waiting examples, oldest first, as a few columns whatever their number: ``ids``,
        ``scores``, ``ages`` (seconds waited at ``now``) and the x dicts as CSR rows (``indptr``,
        ``indices`` into the list of distinct ``keys``, ``values``); ids and keys keep their types. When an example
        is a user's, ``users`` too: each example's user, or None; and when one keeps its record, ``records``."""
        ids: list = []
        scores: list = []
        ages: list[float] = []
        indptr = [0]
        keys: list = []
        columns_by_key: dict[Hashable, int] = {}
        indices: list[int] = []
        values: list = []
        for event_id, pending in self._waiting.items():
            ids.append(event_id)
            scores.append(pending.score)
            ages.append(now - pending.arrived)
            for key, value in pending.x.items():
                signature = key if type(key) is str else _signature(key)
                column = columns_by_key.get(signature)
                if column is None:
                    column = columns_by_key[signature] = len(keys)
                    keys.append(key)
                indices.append(column)
                values.append(value)
            indptr.append(len(indices))
        users = [pending.user for pending in self._waiting.values()]
        records = [pending.record for pending in self._waiting.values()]
        return {
            **({"users": users} if any(user is not None for user in users) else {}),
            **({"records": records} if any(record is not None for record in records) else {}),
            "ids": ids,
            "scores": _floats_as_array(scores),
            "ages": np.array(ages, dtype=np.float64),
            "indptr": np.array(indptr, dtype=np.int64),
            "keys": keys,
            "indices": np.array(indices, dtype=np.int32 if len(keys) <= np.iinfo(np.int32).max else np.int64),
            "values": _floats_as_array(values),
        }

    def restore_columns(self, columns: dict[str, Any], now: float) -> None:
        """Put back the examples ``columns`` (made at another time) holds; a ValueError, before any
        is put back, if the columns do not fit together (`check_pending`)."""
        check_pending(columns)
        ids, keys = list(columns["ids"]), list(columns["keys"])
        scores, values = _items(columns["scores"]), _items(columns["values"])
        ages = np.asarray(columns["ages"], dtype=np.float64).tolist()
        indptr, indices = np.asarray(columns["indptr"]).tolist(), np.asarray(columns["indices"]).tolist()
        users = columns.get("users", [None] * len(ids))
        records = columns.get("records", [None] * len(ids))
        for row, event_id in enumerate(ids):
            start, end = indptr[row], indptr[row + 1]
            x = dict(zip([keys[column] for column in indices[start:end]], values[start:end]))
            self._waiting[event_id] = Pending(x, scores[row], now - ages[row], users[row], records[row])

    def take(self, event_id: Hashable) -> Pending | None:
        """The example waiting under this id, removed; None (counted as unmatched) if there is none."""
        self.expire()
        pending = self._waiting.pop(event_id, None)
        if pending is None:
            self.unmatched += 1
        return pending

    def expire(self) -> None:
        """Forget the examples that waited longer than ``max_age_seconds``."""
        limit = self.clock() - self.max_age_seconds
        while self._waiting:
            oldest = next(iter(self._waiting.values()))
            if oldest.arrived >= limit:
                break
            self._waiting.popitem(last=False)
            self.expired += 1


def check_pending(pending: object) -> None:
    """Refuse (ValueError) saved pending examples (`PendingLabels.columns`, or the [id, x, score, age] entries of
    checkpoints written before the columns) that could not be put back: columns that do not fit together, an id or
    a feature key that is no dict key, a feature value that is no number, an age that is no finite float (a score
    is a margin or a predicted class: any value)."""
    if isinstance(pending, list):  # (entries)
        if not all(isinstance(entry, (list, tuple)) and len(entry) == 4 and _entry(*entry) for entry in pending):
            raise ValueError("pending examples: expected [id, features, score, age] entries")
        return
    if not isinstance(pending, dict) or set(pending) - _OPTIONAL_COLUMNS != _COLUMNS:
        raise ValueError(f"pending examples: expected the columns {', '.join(sorted(_COLUMNS))} (and users, records)")
    _check_column_types(pending)
    _check_column_layout(pending)
    for name in _OPTIONAL_COLUMNS:
        column = pending.get(name, [None] * len(pending["ids"]))
        if not (isinstance(column, list) and all(item is None or isinstance(item, str) for item in column)):
            raise ValueError(f"pending examples: {name} must be a list of strings or nulls")
        if len(column) != len(pending["ids"]):
            raise ValueError(f"pending examples: {name} and ids differ in length")


def _check_column_types(pending: dict) -> None:
    """Refuse (ValueError) pending columns of the wrong types: ids and keys that are no lists of dict keys, scores
    that are no list, values that are no numbers, ages that are no finite floats, indptr and indices that are no
    integer arrays."""
    ids, keys, indptr, indices = pending["ids"], pending["keys"], pending["indptr"], pending["indices"]
    if not (isinstance(ids, list) and isinstance(keys, list) and all(map(_hashable, (*ids, *keys)))):
        raise ValueError("pending examples: ids and keys must be lists of dict keys")
    scores, values, ages = pending["scores"], pending["values"], pending["ages"]
    if not ((_floats(scores) or isinstance(scores, list)) and _numbers(values) and _floats(ages)):
        raise ValueError("pending examples: expected a list of scores, feature values that are numbers, float ages")
    if not np.isfinite(ages).all():
        raise ValueError("pending examples: an age is not finite")
    if not (_integers(indptr) and _integers(indices)):
        raise ValueError("pending examples: indptr and indices must be one-dimensional integer arrays")


def _check_column_layout(pending: dict) -> None:
    """Refuse (ValueError) pending columns, each of its type, that do not fit together: one id, score and age per
    row of indptr, indptr spanning indices and values without decreasing, indices within the key list."""
    ids, keys, scores, ages = pending["ids"], pending["keys"], pending["scores"], pending["ages"]
    indptr, indices, values = pending["indptr"], pending["indices"], pending["values"]
    if not len(ids) == len(scores) == len(ages) == indptr.size - 1:
        raise ValueError("pending examples: ids, scores, ages and indptr differ in length")
    if indptr[0] != 0 or indptr[-1] != indices.size or indices.size != len(values):
        raise ValueError("pending examples: indptr does not span indices and values")
    if (np.diff(indptr) < 0).any():
        raise ValueError("pending examples: indptr decreases")
    if indices.size and (indices.min() < 0 or indices.max() >= len(keys)):
        raise ValueError("pending examples: a feature index is outside the key list")


#: The columns of `PendingLabels.columns`, and those it has only when some example has one: its user, its record.
_COLUMNS = {"ids", "scores", "ages", "indptr", "keys", "indices", "values"}
_OPTIONAL_COLUMNS = {"users", "records"}


def _hashable(value: object) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def _integers(column: object) -> bool:
    """Whether ``column`` is a one-dimensional integer array."""
    return isinstance(column, np.ndarray) and column.dtype.kind in "iu" and column.ndim == 1


def _floats(column: object) -> bool:
    """Whether ``column`` is a one-dimensional float64 array."""
    return isinstance(column, np.ndarray) and column.dtype == np.float64 and column.ndim == 1


def _numbers(column: object) -> bool:
    """Whether ``column`` is a column of numbers as `_floats_as_array` makes one: a float64 array, or a list."""
    return _floats(column) or (isinstance(column, list) and all(isinstance(value, numbers.Real) for value in column))


def _entry(event_id: object, x: object, _score: object, age: object) -> bool:
    """Whether (``event_id``, ``x``, a score, ``age``) is a pending example as checkpoints held them once."""
    return (
        _hashable(event_id)
        and isinstance(x, dict)
        and all(isinstance(value, numbers.Real) for value in x.values())
        and isinstance(age, float)
        and math.isfinite(age)
    )


def _signature(key: Any) -> Hashable:
    """A dict key for ``key`` that tells apart keys Python finds equal (1, 1.0 and True; 0.0 and
    -0.0; tuples of these), so that each keeps its own type in the key list."""
    if type(key) is str:
        return key
    if isinstance(key, tuple):
        return ("tuple", *map(_signature, key))
    if isinstance(key, float):
        return ("float", repr(key))
    return (type(key).__name__, key)


def _floats_as_array(values: list) -> np.ndarray | list:
    """``values`` as a float64 array when each is a float (bit for bit), else the list as it is."""
    if all(type(value) is float for value in values):
        return np.array(values, dtype=np.float64)
    return values


def _items(column: np.ndarray | list) -> list:
    """A column made by ``_floats_as_array`` as a list again."""
    return column.tolist() if isinstance(column, np.ndarray) else list(column)
