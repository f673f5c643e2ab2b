"""Records: the raw bytes of events, where they were read, and batches of them."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple, overload

import numpy as np

from .._compiled import BLOCKS as _blocks

__all__ = ["Cursors", "Lines", "Record", "RecordBatch"]


class Record(NamedTuple):
    """Raw bytes of one event and where they were read.

    ``position`` names the source and place for people (``path:line``, ``<stdin>:line``,
    ``topic/partition/offset``, or a message's ``path:number`` or file path); ``cursor`` is the
    source's own note of it, for resuming. A mail source gives each message the ``label`` configured
    for it (None: none), and an ``error`` when it could not read the record (the reason, e.g. a file
    that cannot be opened): such a record is rejected like a malformed one. A maildir of users' mail
    gives each message its ``user`` (None: none).
    """

    value: bytes
    position: str
    cursor: object = None
    label: object = None
    error: str | None = None
    user: str | None = None


class Cursors(Sequence):
    """The cursors of a batch's records, each made when asked for (``make(i)``): a batch of good
    records needs none of them, so it costs no object per record."""

    __slots__ = ("_length", "_make")

    def __init__(self, length: int, make: Callable[[int], object]) -> None:
        self._length = length
        self._make = make

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, i: int) -> object:  # type: ignore[override]
        if not 0 <= i < self._length:
            raise IndexError(i)
        return self._make(i)


class Lines(Sequence[bytes]):
    """The records of a block read from a file, left in it: record i is ``block[starts[i]:ends[i]]``, made
    when asked for, and ``spans()`` hands them to a compiled parser without a copy."""

    __slots__ = ("block", "ends", "starts")

    def __init__(self, block: bytes, starts: np.ndarray, ends: np.ndarray) -> None:
        self.block = block
        self.starts = starts
        self.ends = ends

    def __len__(self) -> int:
        return len(self.starts)

    @overload
    def __getitem__(self, i: int) -> bytes: ...
    @overload
    def __getitem__(self, i: slice) -> Lines: ...
    def __getitem__(self, i: int | slice) -> bytes | Lines:
        if isinstance(i, slice):
            return Lines(self.block, self.starts[i], self.ends[i])
        return self.block[self.starts[i] : self.ends[i]]

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.tolist())

    def tolist(self) -> list[bytes]:
        """The records as bytes objects."""
        if _blocks is not None:
            return _blocks.span_list(self.block, self.starts, self.ends)
        block = self.block
        return [block[start:end] for start, end in zip(self.starts.tolist(), self.ends.tolist(), strict=True)]

    def spans(self) -> tuple[bytes, np.ndarray, np.ndarray]:
        """(block, starts, ends), as the compiled parsers take them."""
        return self.block, self.starts, self.ends

    def nbytes(self) -> int:
        """The bytes of the records."""
        return int((self.ends - self.starts).sum())


class RecordBatch:
    """Records read together: their raw ``values``, the source's ``cursors``, and each one as a
    ``Record`` on demand (``batch[i]``), so that a batch of good records costs no position texts.
    ``name`` makes a position text from a cursor of the source's own type; ``labels`` and ``users``
    (one per record) and ``errors`` ({index: reason}) are what a mail source says of its records."""

    __slots__ = ("_name", "cursors", "errors", "labels", "users", "values")

    def __init__(
        self,
        values: list[bytes] | Lines,
        cursors: Sequence,
        name: Callable[[Any], str],
        labels: Sequence | None = None,
        errors: dict[int, str] | None = None,
        users: Sequence[str | None] | None = None,
    ) -> None:
        self.values = values
        self.cursors = cursors
        self._name = name
        self.labels = labels
        self.errors = errors or {}
        self.users = users

    def __len__(self) -> int:
        return len(self.values)

    def __getitem__(self, i: int) -> Record:
        label = None if self.labels is None else self.labels[i]
        user = None if self.users is None else self.users[i]
        return Record(self.values[i], self.position(i), self.cursors[i], label, self.errors.get(i), user)

    def __iter__(self) -> Iterator[Record]:
        return map(self.__getitem__, range(len(self.values)))

    def nbytes(self) -> int:
        """The bytes of the records' values."""
        values = self.values
        return values.nbytes() if isinstance(values, Lines) else sum(map(len, values))

    def sizes(self) -> list[int]:
        """The bytes of each record's value."""
        values = self.values
        return (values.ends - values.starts).tolist() if isinstance(values, Lines) else list(map(len, values))

    def position(self, i: int) -> str:
        """Where record ``i`` was read, for people (``Record.position``)."""
        return self._name(self.cursors[i])

    def slice(self, start: int, stop: int) -> RecordBatch:
        """The records ``start:stop`` (0 <= start <= stop <= len), as a batch of their own; none is copied."""
        cursors = self.cursors
        return RecordBatch(
            self.values[start:stop],
            Cursors(stop - start, lambda i: cursors[start + i]),
            self._name,
            None if self.labels is None else self.labels[start:stop],
            {i - start: error for i, error in self.errors.items() if start <= i < stop},
            None if self.users is None else self.users[start:stop],
        )

    def keep(self, indices: Sequence[int]) -> RecordBatch:
        """The records at ``indices``, in that order."""
        return RecordBatch(
            [self.values[i] for i in indices],
            [self.cursors[i] for i in indices],
            self._name,
            None if self.labels is None else [self.labels[i] for i in indices],
            {new: self.errors[old] for new, old in enumerate(indices) if old in self.errors} if self.errors else None,
            None if self.users is None else [self.users[i] for i in indices],
        )
