"""Where events come from: files (plain or gzip), standard input; Kafka lives in `kafka`, mail in `mail`.

A source hands out records in batches: ``read(n)`` gives up to ``n`` records as a ``RecordBatch``,
an empty one when nothing arrived for ``poll_seconds`` (an idle tick, so the runner can check its
idle timeout, print statistics and stop cleanly) and None once the input has ended. The runner
``claim``s each batch just before processing it; ``position()`` then covers it, and ``commit()``
marks everything claimed as processed upstream. If the run stops inside a batch, the runner
``unclaim``s the records it did not process, so that neither covers them. A source that needs time
before records can flow (a Kafka consumer joining its group) has a ``ready`` property; idle ticks
before it is ready do not count as idle time.
"""

from __future__ import annotations

import functools
import gzip
import io
import os
import selectors
import sys
from collections import deque
from collections.abc import Iterator
from itertools import accumulate, islice
from pathlib import Path
from typing import BinaryIO

from .records import Cursors, Record, RecordBatch

__all__ = ["FileSource", "Source", "SourceError", "StdinReader", "StdinSource", "open_input"]

#: Bytes a file is read by: a system call per megabyte, not per 8 KiB, when replaying a large log.
READ_BUFFER = 1 << 20
#: A batch read from a file stops growing past this many bytes, whatever the number of records asked
#: for, so that large records (e.g. whole emails) keep the memory a batch holds bounded.
BATCH_BYTES = 1 << 26
#: Lines a file is read by, between checks of the batch's size.
LINES_PER_READ = 4096
#: Bytes standard input is read by.
READ_CHUNK = 1 << 16


class SourceError(RuntimeError):
    """The source cannot go on (the message says why); the run stops at the last record processed."""


class Source:
    """The interface of every source, with the defaults of a source that has nothing upstream."""

    name: str

    def read(self, n: int) -> RecordBatch | None:
        """Up to ``n`` records (empty: an idle tick; None: the input has ended)."""
        raise NotImplementedError

    def claim(self, batch: RecordBatch) -> RecordBatch:
        """The records of ``batch`` to process now; from here on ``position()`` covers them."""
        return batch

    def unclaim(self, batch: RecordBatch, done: int) -> None:
        """Records ``done..`` of ``batch``, the last claimed, were not processed: ``position()`` (and
        ``commit()``) must no longer cover them. A NotImplementedError when the source cannot."""
        raise NotImplementedError

    def __iter__(self) -> Iterator[Record | None]:
        """Records one by one, claimed as they are yielded, with None for idle ticks."""
        while (batch := self.read(1)) is not None:
            yield from self.claim(batch) if batch else [None]

    def commit(self) -> None:
        """Mark every record claimed so far as processed upstream (nothing to do by default)."""

    def close(self) -> None:
        """Release what the source holds."""

    def progress(self) -> tuple[int, int] | None:
        """(bytes read, total bytes) when the input size is known."""
        return None

    def lag(self) -> int | None:
        """Records waiting upstream (Kafka consumer lag), when known."""
        return None

    def partition_lags(self) -> dict[tuple[str, int], int]:
        """Records waiting upstream after the last one processed, by (topic, partition), where known."""
        return {}

    def position(self) -> dict:
        """Where a resumed run starts: every record claimed so far counts as read."""
        raise NotImplementedError


class FileSource(Source):
    """JSON lines or svmlight lines from a file; gzip when the name ends in ``.gz``.

    ``offset`` is the byte offset (in the decompressed stream) after the last record read and
    ``line`` its line number, so a reader can be reopened exactly where it stopped. A record's
    cursor is its (offset after it, line number); blank lines are counted and skipped. With
    ``max_bytes``, a longer line is never held whole: it is handed out cut to its first
    ``max_bytes + 1`` bytes (which the parser refuses), the rest of it skipped as it is read.
    """

    def __init__(self, path: str | Path, offset: int = 0, line: int = 0, max_bytes: int | None = None) -> None:
        self.path = Path(path)
        self.name = str(path)
        self._raw, self._file, self._size = open_input(self.path)
        if offset:
            self._file.seek(offset)
        self.offset = offset
        self.line = line
        self.max_bytes = max_bytes
        # the most a line is read by at once: a record of max_bytes and its "\r\n" (-1: no bound)
        self._limit = -1 if max_bytes is None else max_bytes + 2
        self._pieces = iter(functools.partial(self._file.readline, self._limit), b"")
        self._lines_per_read = (
            LINES_PER_READ if max_bytes is None else min(LINES_PER_READ, BATCH_BYTES // self._limit + 1)
        )
        self._read_from = (offset, line)  # the position before the last batch read

    def read(self, n: int) -> RecordBatch | None:
        self._read_from = (self.offset, self.line)
        while True:
            values, sizes = self._lines(n)
            if not values:
                return None
            first = self.line + 1
            ends = list(accumulate(sizes, initial=self.offset))
            self.line += len(values)
            self.offset = ends[-1]
            batch = RecordBatch(values, _line_cursors(ends, first), self._position)
            if all(map(bytes.strip, values)):
                return batch
            kept = [i for i, value in enumerate(values) if value.strip()]
            if kept:
                return batch.keep(kept)

    def _lines(self, n: int) -> tuple[list[bytes], list[int]]:
        """The next lines, up to ``n`` of them or ``BATCH_BYTES``, whichever comes first, without
        their line ends, and the bytes each took in the file."""
        values: list[bytes] = []
        sizes: list[int] = []
        total = 0
        while len(values) < n and total < BATCH_BYTES:
            wanted = min(n - len(values), self._lines_per_read)
            pieces = list(islice(self._pieces, wanted))
            piece_sizes = list(map(len, pieces))
            if pieces and max(piece_sizes) == self._limit:
                more, more_sizes = self._cut_long_lines(pieces)
            else:
                more, more_sizes = [piece.rstrip(b"\r\n") for piece in pieces], piece_sizes
            values += more
            sizes += more_sizes
            total += sum(more_sizes)
            if len(pieces) < wanted:  # the end of the file
                break
        return values, sizes

    def _cut_long_lines(self, pieces: list[bytes]) -> tuple[list[bytes], list[int]]:
        """``pieces`` read by at most ``max_bytes + 2`` bytes as lines: each line longer than
        ``max_bytes`` cut to ``max_bytes + 1`` bytes (read on past the end of ``pieces`` if the last
        line goes on), and the bytes each took."""
        assert self.max_bytes is not None  # only a bounded read cuts lines
        values: list[bytes] = []
        sizes: list[int] = []
        long = False  # whether the last line has not ended with its last piece
        for piece in pieces:
            if long:
                sizes[-1] += len(piece)
            else:
                values.append(piece[: self.max_bytes + 1] if _unended(piece, self._limit) else piece.rstrip(b"\r\n"))
                sizes.append(len(piece))
            long = _unended(piece, self._limit)
        if long:
            sizes[-1] += self._skip_line()
        return values, sizes

    def _skip_line(self) -> int:
        """Read past the rest of the current line, a buffer at a time; the bytes skipped."""
        skipped = 0
        while piece := self._file.readline(READ_BUFFER):
            skipped += len(piece)
            if piece.endswith(b"\n"):
                break
        return skipped

    def unclaim(self, batch: RecordBatch, done: int) -> None:
        """Back to the end of record ``done - 1`` of ``batch`` (the last read), or to where the batch
        was read from: the next read starts with record ``done``."""
        self.offset, self.line = batch.cursors[done - 1] if done else self._read_from
        self._file.seek(self.offset)

    def _position(self, cursor: tuple[int, int]) -> str:
        return f"{self.name}:{cursor[1]}"

    def close(self) -> None:
        self._file.close()

    def progress(self) -> tuple[int, int]:
        return self._raw.tell(), self._size

    def position(self) -> dict:
        return {"offset": self.offset, "line": self.line}


def open_input(path: Path) -> tuple[BinaryIO, BinaryIO, int]:
    """A file to read, decompressed when its name ends in ``.gz``: (the file on disk, what to read,
    the size on disk), the first for progress and the second held open until the source closes."""
    if path.suffix == ".gz":
        compressed = gzip.GzipFile(path, "rb")
        raw: BinaryIO = compressed.fileobj  # type: ignore[assignment]
        return raw, io.BufferedReader(compressed, buffer_size=READ_BUFFER), os.path.getsize(path)
    # held open while the source is read, until close()
    file = open(path, "rb", buffering=READ_BUFFER)  # noqa: SIM115
    return file, file, os.path.getsize(path)


class StdinReader:
    """Standard input (or ``stream``) read as data arrives: ``read()`` waits up to ``poll_seconds``
    and gives what came, up to ``READ_CHUNK`` bytes (None: nothing yet; b"": the input has ended).
    Standard input that is a regular file (``< events.jsonl``) is read like a pipe."""

    def __init__(self, poll_seconds: float = 0.5, stream: BinaryIO | None = None) -> None:
        self._fd = (stream or sys.stdin.buffer).fileno()
        self._poll_seconds = poll_seconds
        self._selector: selectors.BaseSelector | None = selectors.DefaultSelector()
        try:
            self._selector.register(self._fd, selectors.EVENT_READ)
        except PermissionError:  # a regular file: always readable, and epoll cannot watch it
            self._selector.close()
            self._selector = None

    def read(self) -> bytes | None:
        if self._selector is not None and not self._selector.select(self._poll_seconds):
            return None
        return os.read(self._fd, READ_CHUNK)

    def close(self) -> None:
        """Stop watching standard input (it belongs to the process)."""
        if self._selector is not None:
            self._selector.close()


class StdinSource(Source):
    """Lines from standard input, with idle ticks: reads the descriptor as data arrives and hands
    out the complete lines it has (never waiting for more once it has one). Standard input that is
    a regular file (``< events.jsonl``) is read like a pipe. With ``max_bytes``, a longer line is
    never held whole: it is handed out cut to its first ``max_bytes + 1`` bytes (which the parser
    refuses), the rest of it dropped as it arrives.

    Standard input cannot be re-read: a resumed run skips the first ``skip`` lines instead, which
    is exact only when the same stream is fed again from its start.
    """

    name = "<stdin>"

    def __init__(
        self, poll_seconds: float = 0.5, stream: BinaryIO | None = None, skip: int = 0, max_bytes: int | None = None
    ) -> None:
        self._input = StdinReader(poll_seconds, stream)
        self._skip = skip
        self.max_bytes = max_bytes
        self._lines: deque[bytes] = deque()  # complete lines not handed out yet, without their line ends
        self._partial: list[bytes] = []  # the pieces kept of the line being read
        self._partial_size = 0  # the bytes of the line being read so far
        self._ended = False
        self.line = 0
        self._taken: list[bytes] = []  # the lines taken from the queue by the last read
        self._taken_from = 1  # the number of the first of them

    def read(self, n: int) -> RecordBatch | None:
        while True:
            if not self._lines and not self._fill():
                return None if self._ended else RecordBatch([], [], self._position)
            values: list[bytes] = []
            lines: list[int] = []
            self._taken, self._taken_from = [], self.line + 1
            while self._lines and len(values) < n:
                value = self._lines.popleft()
                self._taken.append(value)
                self.line += 1
                if value.strip() and self.line > self._skip:
                    values.append(value)
                    lines.append(self.line)
            if values:
                return RecordBatch(values, _numbered_cursors(lines), self._position)

    def _fill(self) -> bool:
        """Wait up to ``poll_seconds`` for data; whether complete lines came."""
        chunk = None if self._ended else self._input.read()
        if chunk is None:
            return False
        if not chunk:
            self._ended = True
            if self._partial_size:
                self._lines.append(self._end_line(b""))
        else:
            lines = chunk.split(b"\n")
            rest = lines.pop()
            if lines:
                self._lines.append(self._end_line(lines[0]))
                self._lines.extend(line.rstrip(b"\r") for line in islice(lines, 1, None))
            self._extend_line(rest)
        return bool(self._lines)

    def _extend_line(self, piece: bytes) -> None:
        """Add ``piece`` to the line being read (keeping at most its first ``max_bytes + 1`` bytes)."""
        kept = piece if self.max_bytes is None else piece[: max(self.max_bytes + 1 - self._partial_size, 0)]
        if kept:
            self._partial.append(kept)
        self._partial_size += len(piece)

    def _end_line(self, piece: bytes) -> bytes:
        """The line being read, ended by ``piece``: without its "\r", or cut if longer than ``max_bytes``."""
        self._extend_line(piece)
        line = b"".join(self._partial)
        cut = self.max_bytes is not None and self._partial_size > self.max_bytes + 1
        self._partial, self._partial_size = [], 0
        return line if cut else line.rstrip(b"\r")

    def unclaim(self, batch: RecordBatch, done: int) -> None:
        """Put the lines from record ``done`` of ``batch`` (the last read) on back: the next read
        starts with it."""
        first = batch.cursors[done][1]
        self._lines.extendleft(reversed(self._taken[first - self._taken_from :]))
        self.line = first - 1

    def _position(self, cursor: tuple[None, int]) -> str:
        return f"{self.name}:{cursor[1]}"

    def close(self) -> None:
        self._input.close()

    def position(self) -> dict:
        return {"line": self.line}


def _unended(piece: bytes, limit: int) -> bool:
    """Whether a line read by at most ``limit`` bytes goes on past ``piece``."""
    return len(piece) == limit and not piece.endswith(b"\n")


def _line_cursors(ends: list[int], first: int) -> Cursors:
    """The cursors of lines ``first``, ``first + 1``, ...: (the offset after the line, its number),
    with ``ends`` the offsets before the first line and after each."""
    return Cursors(len(ends) - 1, lambda i: (ends[i + 1], first + i))


def _numbered_cursors(lines: list[int]) -> Cursors:
    """The cursors (None, line number) of lines read from standard input."""
    return Cursors(len(lines), lambda i: (None, lines[i]))
