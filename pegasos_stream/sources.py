"""Where events come from: files (plain or gzip), standard input; Kafka lives in `kafka`.

A source is an iterable of ``Record`` or ``None``: ``None`` is an idle tick, yielded when nothing
arrived for ``poll_seconds``, so the runner can check its idle timeout, print statistics and stop
cleanly. ``commit()`` marks every record yielded so far as processed. A source that needs time
before records can flow (a Kafka consumer joining its group) has a ``ready`` property; idle ticks
before it is ready do not count as idle time.
"""

from __future__ import annotations

import gzip
import os
import selectors
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, Protocol

from .events import Record

__all__ = ["FileSource", "Source", "StdinSource"]


class Source(Protocol):
    name: str

    def __iter__(self) -> Iterator[Record | None]: ...

    def commit(self) -> None: ...

    def close(self) -> None: ...

    def progress(self) -> tuple[int, int] | None:
        """(bytes read, total bytes) when the input size is known."""
        ...

    def lag(self) -> int | None:
        """Records waiting upstream (Kafka consumer lag), when known."""
        ...

    def position(self) -> dict:
        """Where a resumed run starts: everything yielded so far counts as read."""
        ...


class FileSource:
    """JSON lines or svmlight lines from a file; gzip when the name ends in ``.gz``.

    ``offset`` is the byte offset (in the decompressed stream) after the last record yielded and
    ``line`` its line number, so a reader can be reopened exactly where it stopped.
    """

    def __init__(self, path: str | Path, offset: int = 0, line: int = 0) -> None:
        self.path = Path(path)
        self.name = str(path)
        self._file: BinaryIO = gzip.open(self.path, "rb") if self.path.suffix == ".gz" else open(self.path, "rb")
        self._raw = self._file.fileobj if isinstance(self._file, gzip.GzipFile) else self._file  # type: ignore[attr-defined]
        self._size = os.path.getsize(self.path)
        if offset:
            self._file.seek(offset)
        self.offset = offset
        self.line = line

    def __iter__(self) -> Iterator[Record | None]:
        for raw in self._file:
            self.line += 1
            self.offset += len(raw)
            value = raw.rstrip(b"\r\n")
            if value.strip():
                yield Record(value, f"{self.name}:{self.line}", (self.offset, self.line))

    def commit(self) -> None:
        """Nothing to do: a file's position is kept by whoever checkpoints ``offset``."""

    def close(self) -> None:
        self._file.close()

    def progress(self) -> tuple[int, int]:
        return self._raw.tell(), self._size

    def lag(self) -> None:
        return None

    def position(self) -> dict:
        return {"offset": self.offset, "line": self.line}


class StdinSource:
    """Lines from standard input, with idle ticks: reads the descriptor as data arrives.

    Standard input cannot be re-read: a resumed run skips the first ``skip`` lines instead, which
    is exact only when the same stream is fed again from its start.
    """

    name = "<stdin>"

    def __init__(self, poll_seconds: float = 0.5, stream: BinaryIO | None = None, skip: int = 0) -> None:
        self._fd = (stream or sys.stdin.buffer).fileno()
        self._poll_seconds = poll_seconds
        self._skip = skip
        self.line = 0

    def __iter__(self) -> Iterator[Record | None]:
        selector = selectors.DefaultSelector()
        selector.register(self._fd, selectors.EVENT_READ)
        pending = b""
        try:
            while True:
                if not selector.select(self._poll_seconds):
                    yield None
                    continue
                chunk = os.read(self._fd, 1 << 16)
                if not chunk:
                    break
                lines = (pending + chunk).split(b"\n")
                pending = lines.pop()
                for raw in lines:
                    yield from self._record(raw)
            if pending:
                yield from self._record(pending)
        finally:
            selector.close()

    def _record(self, raw: bytes) -> Iterator[Record]:
        self.line += 1
        value = raw.rstrip(b"\r")
        if value.strip() and self.line > self._skip:
            yield Record(value, f"{self.name}:{self.line}", (None, self.line))

    def commit(self) -> None:
        """Nothing to do: standard input cannot be re-read."""

    def close(self) -> None:
        """Standard input belongs to the process."""

    def progress(self) -> None:
        return None

    def lag(self) -> None:
        return None

    def position(self) -> dict:
        return {"line": self.line}
