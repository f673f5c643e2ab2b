"""Records: the raw bytes of events, where they were read, and batches of them."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

__all__ = ["Cursors", "Record", "RecordBatch"]


class Record(NamedTuple):
    """Raw bytes of one event and where they were read.

    ``position`` names the source and place for people (``path:line``, ``<stdin>:line`` or
    ``topic/partition/offset``); ``cursor`` is the source's own note of it, for resuming.
    """

    value: bytes
    position: str
    cursor: object = None


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


class RecordBatch:
    """Records read together: their raw ``values``, the source's ``cursors``, and each one as a
    ``Record`` on demand (``batch[i]``), so that a batch of good records costs no position texts.
    ``name`` makes a position text from a cursor of the source's own type."""

    __slots__ = ("_name", "cursors", "values")

    def __init__(self, values: list[bytes], cursors: Sequence, name: Callable[[Any], str]) -> None:
        self.values = values
        self.cursors = cursors
        self._name = name

    def __len__(self) -> int:
        return len(self.values)

    def __getitem__(self, i: int) -> Record:
        return Record(self.values[i], self.position(i), self.cursors[i])

    def __iter__(self) -> Iterator[Record]:
        return map(self.__getitem__, range(len(self.values)))

    def position(self, i: int) -> str:
        """Where record ``i`` was read, for people (``Record.position``)."""
        return self._name(self.cursors[i])

    def keep(self, indices: Sequence[int]) -> RecordBatch:
        """The records at ``indices``, in that order."""
        return RecordBatch([self.values[i] for i in indices], [self.cursors[i] for i in indices], self._name)
