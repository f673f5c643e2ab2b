"""Where events come from: files (plain or gzip), standard input; Kafka lives in the `kafka` package, mail in `mail`.

A source hands out records in batches: ``read(n)`` gives up to ``n`` records as a ``RecordBatch``,
an empty one when nothing arrived for ``poll_seconds`` (an idle tick, so the runner can check its
idle timeout, print statistics and stop cleanly) and None once the input has ended. The runner
``claim``s each batch just before processing it; ``position()`` then covers it, and ``commit()``
marks everything claimed as processed upstream. If the run stops inside a batch, the runner
``unclaim``s the records it did not process, so that neither covers them. A source that needs time
before records can flow (a Kafka consumer joining its group) has a ``ready`` property; idle ticks
before it is ready do not count as idle time. A file source that reads on through a record that does
not end (a line of /dev/zero) hands out an empty batch, not ready, after each ``MAX_READ_BYTES``, so
that a read never holds the runner longer than reading them takes: a signal is seen within that time.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import selectors
import sys
import zlib
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from itertools import islice
from pathlib import Path
from typing import BinaryIO, NamedTuple, TypeVar, cast

import numpy as np

from .._compiled import BLOCKS as _blocks
from .inputs import FileHead
from .records import Cursors, Lines, Record, RecordBatch
from .threads import helper_thread

__all__ = [
    "MAX_READ_BYTES",
    "FileSource",
    "GzipInput",
    "Source",
    "SourceError",
    "StdinReader",
    "StdinSource",
    "check_whole",
    "open_input",
]

#: Bytes a file is read by: a system call per 2 MiB, not per 8 KiB, when replaying a large log, and few batches (a
#: batch holds the lines of one block at most, and each costs the runner and the learner their fixed part).
READ_BUFFER = 2 << 20
#: The longest end of a block after its last line that also starts the next block, read in after it: the block then
#: needs no copy to be joined to the rest of its last line (see `_read_block`).
MAX_CARRY = 1 << 16
#: A batch read from a message file or Kafka stops growing past this many bytes, whatever the number of
#: records asked for, so that large records (e.g. whole emails) keep the memory a batch holds bounded (a
#: batch of a file's lines is bounded by the blocks it is read in: see ``FileSource``).
BATCH_BYTES = 1 << 26
#: Bytes standard input is read by.
READ_CHUNK = 1 << 16
#: A read of a file goes through at most this many bytes before it hands out what it has, an empty batch (not
#: ``ready``) when that is nothing: a record that never ends (/dev/zero, a huge sparse file) holds the runner, and a
#: signal waits, only as long as reading these bytes takes.
MAX_READ_BYTES = 1 << 25


def _read_block(file: BinaryIO, carry: bytes) -> tuple[bytes, bytes]:
    """The next block of ``READ_BUFFER`` bytes (fewer at the end of the file), ``carry`` and then the bytes of
    ``file`` after it; and, when the block is whole, its end after its last "\\n" if that is at most ``MAX_CARRY``
    bytes (else b""), to carry to the start of the next block: (the block, that end). Compiled, what is read is read
    in after the carry, nothing copied, and every block whole has the same size, so that one freed holds the next."""
    if _blocks is not None:
        return _blocks.read_block(file, carry, READ_BUFFER, MAX_CARRY)
    block = carry + file.read(READ_BUFFER - len(carry))
    if len(block) < READ_BUFFER:
        return block, b""
    cut = block.rfind(b"\n", max(len(block) - MAX_CARRY - 1, 0)) + 1
    return block, block[cut:] if cut else b""


class _Blocks:
    """The file in blocks of ``READ_BUFFER`` bytes, in order, each one after the first starting with the end of the one
    before it after its last line end, when that is at most ``MAX_CARRY`` bytes (``carry``; `_read_block`): its
    reader leaves that end to the next block, instead of joining it to the rest of its line in a copy. On more than
    one core, each next block is read on the reading thread (the read runs without the GIL) while the caller uses the
    last. The file is touched by one thread at a time: ``settle`` before it is moved or closed."""

    def __init__(self, file: BinaryIO) -> None:
        self.file = file
        self.carry = b""  # the end of the last block, after its last line end, which starts the next
        self._next: Future[tuple[bytes, bytes]] | None = None  # the next block and its carry, being read

    def read(self) -> bytes:
        """The next block (empty at the end of the file); a read's error is raised here."""
        if self._next is None:
            block, self.carry = _read_block(self.file, self.carry)
        else:
            upcoming, self._next = self._next, None
            block, self.carry = upcoming.result()
        reading = helper_thread("file-read")
        if block and reading is not None:
            self._next = reading.submit(_read_block, self.file, self.carry)
        return block

    def settle(self) -> None:
        """Wait for the block being read, and forget it and the carry (before the file is moved or closed)."""
        if self._next is not None:
            upcoming, self._next = self._next, None
            with contextlib.suppress(Exception):  # (a read that failed fails again if it is asked for)
                upcoming.result()
        self.carry = b""


class SourceError(RuntimeError):
    """The source cannot go on (the message says why); the run stops at the last record processed."""


class Source:
    """The interface of every source, with the defaults of a source that has nothing upstream."""

    name: str

    def read(self, n: int) -> RecordBatch | None:
        """Up to ``n`` records (empty: an idle tick, or a read that went on through a record not ended yet; None:
        the input has ended)."""
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
    ``line`` its line number, so a reader can be reopened exactly where it stopped; the position holds
    them with the file's identity (`io.inputs`), which says what they are offsets into. A record's
    cursor is its (offset after it, line number); blank lines are counted and skipped. The file is
    read a block of ``READ_BUFFER`` bytes at a time (the next one read ahead on another thread, see
    `_Blocks`) and a batch's records are left in their block (`Lines`), none copied unless asked for: a batch
    holds the lines of one block at most.
    With ``max_bytes``, a longer line is never held whole: it is handed out cut to its first
    ``max_bytes + 1`` bytes (which the parser refuses), the rest of it skipped as it is read.
    """

    def __init__(self, path: str | Path, offset: int = 0, line: int = 0, max_bytes: int | None = None) -> None:
        self.path = Path(path)
        self.name = str(path)
        self._head = FileHead(self.path)
        self._raw, self._file, self._size = open_input(self.path)
        if offset:
            self._file.seek(offset)
        self._blocks = _Blocks(self._file)
        self.offset = offset
        self.line = line
        self.max_bytes = max_bytes
        # the bytes of a line kept to tell how to hand it out: a record of max_bytes, its "\r\n" (-1: all)
        self._keep = -1 if max_bytes is None else max_bytes + 2
        self._lines = _BlockLines(b"", *_NO_SPANS)  # the lines of the last block read ...
        self._next = 0  # ... and the first of them not handed out yet
        self._partial: list[bytes] = []  # the kept pieces of a line that goes on in the next block
        self._partial_size = 0  # the bytes of that line read so far
        self._ended = False  # whether the file has been read to its end
        self._read_from = (offset, line)  # the position before the last batch read
        self.ready = True  # False: the last read went through MAX_READ_BYTES without a line (no idle time)

    def read(self, n: int) -> RecordBatch | None:
        """Up to ``n`` lines (blank ones skipped) of the block read last, or of the next one with a line end; an
        empty batch (``ready`` False: no idle time) when ``MAX_READ_BYTES`` went by without one (a line that does
        not end, blank lines); None at the end of the file."""
        self._read_from = (self.offset, self.line)
        n = max(n, 1)
        self.ready, blocks = True, max(MAX_READ_BYTES // READ_BUFFER, 1)
        while True:
            if len(self._lines.sizes) == self._next and not self._ended:
                if not blocks:
                    self.ready = False
                    return RecordBatch([], (), self._position)
                blocks -= 1
                self._fill()
                continue
            lines, start = self._lines, self._next
            if start == len(lines.sizes):
                check_whole(self._file, self.name, f"line {self.line:,}" if self.line else "none")
                return None
            stop = self._next = min(len(lines.sizes), start + n)
            ends = self.offset + np.cumsum(lines.sizes[start:stop])
            first = self.line + 1
            self.line += stop - start
            self.offset = int(ends[-1])
            batch = RecordBatch(
                Lines(lines.block, lines.starts[start:stop], lines.ends[start:stop]),
                _line_cursors(ends, first),
                self._position,
            )
            blank = lines.blank[start:stop]
            if not blank.any():
                return batch
            if not blank.all():
                return batch.keep(np.flatnonzero(~blank).tolist())

    def _fill(self) -> None:
        """Read the next block: its lines, the first with the rest of the line the last block ended in (unless that
        block carried it to this one, see `_Blocks`); at the end of the file, a last line without a line end, or
        nothing more. A block without a line end goes on that line."""
        block = self._blocks.read()
        if not block:  # the end of the file
            self._ended = True
            if not self._partial_size:
                return
            block = b"\n"  # ends the last line, which takes the bytes read of it
            self._partial_size -= 1
        if b"\n" not in block:
            self._add_partial(block)
            return
        extra = self._partial_size - sum(map(len, self._partial))  # bytes of that line not kept
        buffer = b"".join([*self._partial, block])  # (the block itself when there is no partial line: no copy)
        lines = _split_lines(buffer, self._keep)
        lines.sizes[0] += extra
        self._partial, self._partial_size = [], 0
        if not self._blocks.carry:  # (a carry is the end of the last line, and starts the next block)
            self._add_partial(buffer[lines.used :])
        self._lines, self._next = lines, 0

    def _add_partial(self, piece: bytes) -> None:
        """Add ``piece`` to the line that goes on in the next block, keeping its first ``max_bytes + 2`` bytes."""
        kept = piece if self._keep < 0 else piece[: max(self._keep - sum(map(len, self._partial)), 0)]
        if kept:
            self._partial.append(kept)
        self._partial_size += len(piece)

    def unclaim(self, batch: RecordBatch, done: int) -> None:
        """Back to the end of record ``done - 1`` of ``batch`` (the last read), or to where the batch
        was read from: the next read starts with record ``done``."""
        self.offset, self.line = batch.cursors[done - 1] if done else self._read_from
        self._blocks.settle()
        self._file.seek(self.offset)
        self._lines, self._next = _BlockLines(b"", *_NO_SPANS), 0
        self._partial, self._partial_size = [], 0
        self._ended = False

    def _position(self, cursor: tuple[int, int]) -> str:
        return f"{self.name}:{cursor[1]}"

    def close(self) -> None:
        self._blocks.settle()
        self._file.close()

    def progress(self) -> tuple[int, int] | None:
        return (self._raw.tell(), self._size) if self._raw.seekable() else None  # a pipe has no size

    def position(self) -> dict:
        return {"offset": self.offset, "line": self.line, "input": self._head.identity(self._raw)}


def _fast_gzip() -> tuple[type[gzip.GzipFile] | None, tuple[type[Exception], ...]]:
    """ISA-L's gzip file and the error its decompressor raises, where isal is installed (not where no wheel of it is
    built: the standard library's decompressor reads gzip there)."""
    try:
        from isal import igzip, isal_zlib
    except ImportError:
        return None, ()
    return igzip.IGzipFile, (cast("type[Exception]", isal_zlib.error),)  # (its stub types it as an instance)


_FastGzipFile, _FAST_GZIP_ERRORS = _fast_gzip()
_T = TypeVar("_T")
#: What a decompressor raises at damaged data (gzip.BadGzipFile is an OSError).
_DAMAGE: tuple[type[Exception], ...] = (EOFError, OSError, zlib.error, *_FAST_GZIP_ERRORS)


class GzipInput(io.RawIOBase):
    """The decompressed bytes of a gzip file, handed out as they are decompressed, which end where the compressed data
    ends early, is corrupt or is not gzip: ``damage`` then says how (None while the data is whole).

    ISA-L's decompressor (`isal`, about twice zlib's speed) reads them where it is installed. It hands out nothing of
    the chunk in which it meets damage, so that the standard library's then takes over from the last byte handed out
    and reads up to the damage itself: every byte before it is read, and a file cut short (or still being written)
    gives each of its whole records."""

    def __init__(self, path: Path) -> None:
        self.disk_file: BinaryIO = open(path, "rb")  # noqa: SIM115 (closed with this file)
        self._fast = _FastGzipFile is not None  # ISA-L's decompressor reads, until it meets damage
        self._gzip: gzip.GzipFile = (_FastGzipFile or gzip.GzipFile)(fileobj=self.disk_file, mode="rb")
        self._position = 0  # the bytes handed out (ISA-L's tell() counts those it decompressed before damage too)
        self.damage: str | None = None

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        if self.damage is not None:
            return 0
        data = self._attempt(lambda: self._gzip.read1(len(buffer)), lambda: b"")
        buffer[: len(data)] = data
        self._position += len(data)
        return len(data)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self.damage = None
        self._position = self._attempt(lambda: self._gzip.seek(offset, whence), lambda: self._gzip.tell())
        return self._position

    def _attempt(self, action: Callable[[], _T], at_damage: Callable[[], _T]) -> _T:
        """``action`` on the decompressed bytes; where it meets damage, ``action`` again on the standard library's
        decompressor when ISA-L's met it, else ``at_damage()``, the damage recorded."""
        try:
            return action()
        except _DAMAGE as error:
            if not self._fast:
                self.damage = _damage(error, self._position)
                return at_damage()
        self._fast = False  # the standard library's takes over from the last byte handed out
        self._gzip.close()  # (not the disk file, which it was given)
        self.disk_file.seek(0)
        self._gzip = gzip.GzipFile(fileobj=self.disk_file, mode="rb")
        self._attempt(lambda: self._gzip.seek(self._position), lambda: self._gzip.tell())
        return self._attempt(action, at_damage)

    def tell(self) -> int:
        return self._position

    def close(self) -> None:
        self._gzip.close()
        self.disk_file.close()
        super().close()


def _damage(error: Exception, position: int) -> str:
    """What is wrong with a gzip file's data, as ``error`` says at ``position`` in the decompressed bytes."""
    if isinstance(error, EOFError):
        return "its gzip data ends before the end-of-stream marker (the file is cut short, or still being written)"
    if isinstance(error, gzip.BadGzipFile) and position == 0:
        return f"not gzip data, though its name ends in .gz ({error})"
    if isinstance(error, (gzip.BadGzipFile, zlib.error)):  # a member's checksum is checked at its end only
        return f"its gzip data is corrupt ({error}): the records read before it may hold damaged bytes"
    return f"it cannot be read ({error})"


def check_whole(file: BinaryIO, name: str, last: str) -> None:
    """Raise the `SourceError` that ends a source reading ``file`` (from `open_input`) once it has read all of it, when
    its gzip data is damaged: the source's ``name`` and the ``last`` record it read ("line 851") said."""
    raw = getattr(file, "raw", None)
    if isinstance(raw, GzipInput) and raw.damage is not None:
        raise SourceError(
            f"{name}: {raw.damage}, after {raw.tell():,} bytes decompressed (the last record read: {last})"
        )


def open_input(path: Path) -> tuple[BinaryIO, BinaryIO, int]:
    """A file to read, decompressed when its name ends in ``.gz`` (a `GzipInput`: `check_whole` raises its
    damage at its end): (the file on disk, what to read, the size on disk), the first for progress and the
    second held open until the source closes."""
    if path.suffix == ".gz":
        decompressed = GzipInput(path)
        return decompressed.disk_file, io.BufferedReader(decompressed, buffer_size=READ_BUFFER), os.path.getsize(path)
    # held open while the source is read, until close()
    file = open(path, "rb", buffering=READ_BUFFER)  # noqa: SIM115
    return file, file, os.path.getsize(path)


class StdinReader:
    """Standard input (or ``stream``) read as data arrives: ``read()`` waits up to ``poll_seconds``
    and gives what came, up to ``READ_CHUNK`` bytes (None: nothing yet; b"": the input has ended).
    Standard input that is a regular file (``< events.jsonl``) is read like a pipe."""

    def __init__(self, poll_seconds: float = 0.5, stream: BinaryIO | None = None) -> None:
        self._stream = stream or sys.stdin.buffer  # held: its descriptor is read
        self._fd = self._stream.fileno()
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


class _BlockLines(NamedTuple):
    """The lines of a block that end in "\\n": their records' spans in ``block``, the bytes each line takes,
    which records are blank, and the bytes up to the last "\\n" (``split_lines``)."""

    block: bytes
    starts: np.ndarray
    ends: np.ndarray
    sizes: np.ndarray
    blank: np.ndarray
    used: int


_NO_SPANS = (
    np.zeros(0, dtype=np.int64),
    np.zeros(0, dtype=np.int64),
    np.zeros(0, dtype=np.int64),
    np.zeros(0, dtype=bool),
    0,
)


def _split_lines(block: bytes, keep: int) -> _BlockLines:
    """The lines of ``block`` that end in "\\n" (compiled where it can be: ``_blocks.split_lines``): a record is the
    line without its "\\n" and the "\\r"s before it, or, for a line of ``keep`` bytes or more (keep >= 0), its first
    keep - 1 bytes."""
    if _blocks is not None:
        starts, ends, sizes, blank, used = _blocks.split_lines(block, keep)
        return _BlockLines(
            block,
            np.frombuffer(starts, dtype=np.int64),
            np.frombuffer(ends, dtype=np.int64),
            np.frombuffer(sizes, dtype=np.int64).copy(),  # (the first line's size is corrected in place)
            np.frombuffer(blank, dtype=bool),
            used,
        )
    used = block.rfind(b"\n") + 1
    spans = []
    start = 0
    for line in block[:used].split(b"\n")[:-1]:
        end = start + keep - 1 if 0 <= keep <= len(line) else start + len(line.rstrip(b"\r"))
        spans.append((start, end, len(line) + 1, not block[start:end].strip()))
        start += len(line) + 1
    columns = list(zip(*spans)) or [(), (), (), ()]
    return _BlockLines(
        block,
        np.array(columns[0], dtype=np.int64),
        np.array(columns[1], dtype=np.int64),
        np.array(columns[2], dtype=np.int64),
        np.array(columns[3], dtype=bool),
        used,
    )


def _line_cursors(ends: np.ndarray, first: int) -> Cursors:
    """The cursors of lines ``first``, ``first + 1``, ...: (the offset after the line, its number), with ``ends``
    the offsets after each."""
    return Cursors(len(ends), lambda i: (int(ends[i]), first + i))


def _numbered_cursors(lines: list[int]) -> Cursors:
    """The cursors (None, line number) of lines read from standard input."""
    return Cursors(len(lines), lambda i: (None, lines[i]))
