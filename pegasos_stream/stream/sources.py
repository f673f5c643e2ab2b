"""Where events come from: files (plain or gzip), standard input; Kafka lives in `kafka`.

A source hands out records in batches: ``read(n)`` gives up to ``n`` records as a ``RecordBatch``,
an empty one when nothing arrived for ``poll_seconds`` (an idle tick, so the runner can check its
idle timeout, print statistics and stop cleanly) and None once the input has ended. The runner
``claim``s each batch just before processing it; ``position()`` then covers it, and ``commit()``
marks everything claimed as processed upstream. A source that needs time before records can flow
(a Kafka consumer joining its group) has a ``ready`` property; idle ticks before it is ready do not
count as idle time.
"""

from __future__ import annotations

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

__all__ = ["FileSource", "Source", "StdinSource"]

#: Bytes a file is read by: a system call per megabyte, not per 8 KiB, when replaying a large log.
READ_BUFFER = 1 << 20
#: A batch read from a file stops growing past this many bytes, whatever the number of records asked
#: for, so that large records (e.g. whole emails) keep the memory a batch holds bounded.
BATCH_BYTES = 1 << 26
#: Lines a file is read by, between checks of the batch's size.
LINES_PER_READ = 4096


class Source:
    """The interface of every source, with the defaults of a source that has nothing upstream."""

    name: str

    def read(self, n: int) -> RecordBatch | None:
        """Up to ``n`` records (empty: an idle tick; None: the input has ended)."""
        raise NotImplementedError

    def claim(self, batch: RecordBatch) -> RecordBatch:
        """The records of ``batch`` to process now; from here on ``position()`` covers them."""
        return batch

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

    def position(self) -> dict:
        """Where a resumed run starts: every record claimed so far counts as read."""
        raise NotImplementedError


class FileSource(Source):
    """JSON lines or svmlight lines from a file; gzip when the name ends in ``.gz``.

    ``offset`` is the byte offset (in the decompressed stream) after the last record read and
    ``line`` its line number, so a reader can be reopened exactly where it stopped. A record's
    cursor is its (offset after it, line number); blank lines are counted and skipped.
    """

    def __init__(self, path: str | Path, offset: int = 0, line: int = 0) -> None:
        self.path = Path(path)
        self.name = str(path)
        if self.path.suffix == ".gz":
            compressed = gzip.GzipFile(self.path, "rb")
            self._raw: BinaryIO = compressed.fileobj  # type: ignore[assignment]
            self._file: BinaryIO = io.BufferedReader(compressed, buffer_size=READ_BUFFER)
        else:
            # held open while the source is read, until close()
            self._file = self._raw = open(self.path, "rb", buffering=READ_BUFFER)  # noqa: SIM115
        self._size = os.path.getsize(self.path)
        if offset:
            self._file.seek(offset)
        self.offset = offset
        self.line = line

    def read(self, n: int) -> RecordBatch | None:
        while raws := self._lines(n):
            first = self.line + 1
            ends = list(accumulate(map(len, raws), initial=self.offset))
            self.line += len(raws)
            self.offset = ends[-1]
            values = [raw.rstrip(b"\r\n") for raw in raws]
            batch = RecordBatch(values, _line_cursors(ends, first), self._position)
            if all(map(bytes.strip, values)):
                return batch
            kept = [i for i, value in enumerate(values) if value.strip()]
            if kept:
                return batch.keep(kept)
        return None

    def _lines(self, n: int) -> list[bytes]:
        """The next lines, up to ``n`` of them or ``BATCH_BYTES``, whichever comes first."""
        lines: list[bytes] = []
        size = 0
        while len(lines) < n and size < BATCH_BYTES:
            wanted = min(n - len(lines), LINES_PER_READ)
            more = list(islice(self._file, wanted))
            lines += more
            size += sum(map(len, more))
            if len(more) < wanted:  # the end of the file
                break
        return lines

    def _position(self, cursor: tuple[int, int]) -> str:
        return f"{self.name}:{cursor[1]}"

    def close(self) -> None:
        self._file.close()

    def progress(self) -> tuple[int, int]:
        return self._raw.tell(), self._size

    def position(self) -> dict:
        return {"offset": self.offset, "line": self.line}


class StdinSource(Source):
    """Lines from standard input, with idle ticks: reads the descriptor as data arrives and hands
    out the complete lines it has (never waiting for more once it has one).

    Standard input cannot be re-read: a resumed run skips the first ``skip`` lines instead, which
    is exact only when the same stream is fed again from its start.
    """

    name = "<stdin>"

    def __init__(self, poll_seconds: float = 0.5, stream: BinaryIO | None = None, skip: int = 0) -> None:
        self._fd = (stream or sys.stdin.buffer).fileno()
        self._poll_seconds = poll_seconds
        self._skip = skip
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._fd, selectors.EVENT_READ)
        self._lines: deque[bytes] = deque()  # complete lines not handed out yet
        self._partial = b""
        self._ended = False
        self.line = 0

    def read(self, n: int) -> RecordBatch | None:
        while True:
            if not self._lines and not self._fill():
                return None if self._ended else RecordBatch([], [], self._position)
            values: list[bytes] = []
            lines: list[int] = []
            while self._lines and len(values) < n:
                value = self._lines.popleft().rstrip(b"\r")
                self.line += 1
                if value.strip() and self.line > self._skip:
                    values.append(value)
                    lines.append(self.line)
            if values:
                return RecordBatch(values, _numbered_cursors(lines), self._position)

    def _fill(self) -> bool:
        """Wait up to ``poll_seconds`` for data; whether complete lines came."""
        if self._ended or not self._selector.select(self._poll_seconds):
            return False
        chunk = os.read(self._fd, 1 << 16)
        if not chunk:
            self._ended = True
            if self._partial:
                self._lines.append(self._partial)
        else:
            lines = (self._partial + chunk).split(b"\n")
            self._partial = lines.pop()
            self._lines.extend(lines)
        return bool(self._lines)

    def _position(self, cursor: tuple[None, int]) -> str:
        return f"{self.name}:{cursor[1]}"

    def close(self) -> None:
        """Stop watching standard input (it belongs to the process)."""
        self._selector.close()

    def position(self) -> dict:
        return {"line": self.line}


def _line_cursors(ends: list[int], first: int) -> Cursors:
    """The cursors of lines ``first``, ``first + 1``, ...: (the offset after the line, its number),
    with ``ends`` the offsets before the first line and after each."""
    return Cursors(len(ends) - 1, lambda i: (ends[i + 1], first + i))


def _numbered_cursors(lines: list[int]) -> Cursors:
    """The cursors (None, line number) of lines read from standard input."""
    return Cursors(len(lines), lambda i: (None, lines[i]))
