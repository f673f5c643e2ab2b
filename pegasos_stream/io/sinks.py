"""Where predictions and rejected records go: standard output, a file; the Kafka sink is `kafka.python_client`'s.

A sink has accepted what it was given once ``flush`` returns: a file has written it, Kafka has acknowledged it.
A sink that cannot take or deliver something raises a `SinkError` (from ``emit`` or ``flush``), which the runner
never covers with a checkpoint. A sink with a bound on the size of what it takes (Kafka's ``max_request_size``)
sends an object over it in its `shortened` form.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import math
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, Protocol, TextIO

__all__ = [
    "KEPT_CHARS",
    "KEPT_VALUE_BYTES",
    "JsonLinesSink",
    "NullSink",
    "Sink",
    "SinkError",
    "dead_letter",
    "json_line",
    "repair_last_line",
    "shortened",
]

#: The characters of a text field (an id, a reason) that the shortened form of an object keeps.
KEPT_CHARS = 1024
#: The bytes of a rejected record that the shortened form of its dead letter keeps.
KEPT_VALUE_BYTES = 64 * 1024
#: Bytes a file's end is read back by, to find where its last line starts.
READ_BACK = 1 << 16

_log = logging.getLogger(__name__)


class SinkError(RuntimeError):
    """A sink could not take or deliver what it was given; the message names it and says why."""


class Sink(Protocol):
    def emit(self, obj: dict) -> None: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...


class JsonLinesSink:
    """One JSON object per line, to a file (appended; created at the first line) or to stdout. A
    number JSON has no form for (NaN, an infinity) is written as null. A file whose last line has no
    line end (a run stopped while writing it) is repaired first (`repair_last_line`). A write that fails
    is a SinkError naming the file (a reader of standard output that went away stays a BrokenPipeError),
    and so is every flush after a write to the open file failed: what its buffers held then may be lost."""

    def __init__(self, path: str | Path | None = None) -> None:
        self._path = None if path is None or str(path) == "-" else Path(path)
        self._out: TextIO | None = None if self._path else sys.stdout
        self._failure: str | None = None  # why a write failed
        if self._path is not None:
            repair_last_line(self._path)

    def emit(self, obj: dict) -> None:
        out = self._out
        try:
            if out is None:
                assert self._path is not None  # without a path the sink writes to stdout
                # held open across emits, until close()
                out = self._out = open(self._path, "a", encoding="utf-8")  # noqa: SIM115
            out.write(json_line(obj) + "\n")
        except BrokenPipeError:
            raise
        except OSError as error:  # (a file that could not be opened has lost nothing)
            raise self._failed(error, lost=self._out is not None) from None

    def flush(self) -> None:
        with self._writing():
            if self._out is not None:
                self._out.flush()

    def close(self) -> None:
        """Flush, and close the file: closed even when what is left cannot be written (a SinkError then)."""
        try:
            self.flush()
        finally:
            if self._path is not None and self._out is not None:
                out, self._out = self._out, None
                with contextlib.suppress(OSError):  # (what a failed flush left is dropped)
                    out.close()

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """A write's OSError as a SinkError (a BrokenPipeError as it is); a SinkError at once after a failed write."""
        if self._failure is not None:
            raise SinkError(self._failure)
        try:
            yield
        except BrokenPipeError:
            raise
        except OSError as error:
            raise self._failed(error) from None

    def _failed(self, error: OSError, lost: bool = True) -> SinkError:
        """The SinkError of ``error``; after it, when what the buffers held may be ``lost``, every flush fails too."""
        failure = f"{self._path or '<stdout>'}: cannot write: {error.strerror or error}"
        if lost:
            self._failure = failure
        return SinkError(failure)


def _last_line_start(file: BinaryIO) -> int:
    """The offset after the last line end of ``file`` (0: it has none)."""
    end = file.seek(0, os.SEEK_END)
    while end > 0:
        start = max(end - READ_BACK, 0)
        file.seek(start)
        cut = file.read(end - start).rfind(b"\n")
        if cut >= 0:
            return start + cut + 1
        end = start
    return 0


def repair_last_line(path: Path) -> None:
    """End the last line of the file at ``path`` if it lacks only its line end (it holds one JSON value), or drop it
    (logging how many bytes) if it was cut short: what follows is never appended to a partial line. A partial
    line is the output of a record after the last checkpoint, which a resumed run predicts again. Only a regular
    file is looked at; one that cannot be is a SinkError."""
    try:
        if not path.is_file():
            return
        with open(path, "r+b") as file:
            start = _last_line_start(file)
            file.seek(start)
            last = file.read()
            if last and _is_json(last):
                file.write(b"\n")
            elif last:
                file.truncate(start)
                _log.warning("%s: dropped its last line, cut short (%d bytes without a line end)", path, len(last))
    except OSError as error:
        raise SinkError(f"{path}: cannot repair its last line: {error.strerror or error}") from None


def _is_json(text: bytes) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


class NullSink:
    """Discards everything (evaluation runs that only want the metrics)."""

    def emit(self, obj: dict) -> None:
        pass

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


def json_line(obj: object) -> str:
    """``obj`` as JSON, with NaN and the infinities as null."""
    try:
        return json.dumps(obj, default=str, allow_nan=False)
    except ValueError:  # a number out of JSON's range
        return json.dumps(_finite(obj), default=str)


def _finite(value: object) -> object:
    """``value`` with each NaN or infinite float, in it or in its dicts and lists, replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value


def dead_letter(position: str, reason: str, value: bytes) -> dict:
    """The dead-letter entry of a rejected record: where it was, why, and its bytes (base64)."""
    return {"position": position, "error": reason, "value_b64": base64.b64encode(value).decode("ascii")}


def shortened(obj: dict) -> dict:
    """``obj`` (a prediction or a dead letter) in a bounded form, for a sink that cannot take it whole: a text longer
    than ``KEPT_CHARS`` (an id, a reason) keeps its first ``KEPT_CHARS`` characters, with ``<key>_chars`` its length
    and ``<key>_sha256`` the SHA-256 of its UTF-8; a dead letter's record (``value_b64``) longer than
    ``KEPT_VALUE_BYTES`` keeps its first ``KEPT_VALUE_BYTES`` bytes, with ``value_bytes`` its size and
    ``value_sha256`` its SHA-256. (hashlib, which loads OpenSSL, is imported here, where it is used.)"""
    import hashlib

    short: dict = {}
    for key, value in obj.items():
        record = base64.b64decode(value) if key == "value_b64" and isinstance(value, str) else None
        if record is not None and len(record) > KEPT_VALUE_BYTES:
            short[key] = base64.b64encode(record[:KEPT_VALUE_BYTES]).decode("ascii")
            short["value_bytes"], short["value_sha256"] = len(record), hashlib.sha256(record).hexdigest()
        elif record is None and isinstance(value, str) and len(value) > KEPT_CHARS:
            short[key], short[f"{key}_chars"] = value[:KEPT_CHARS], len(value)
            short[f"{key}_sha256"] = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()
        else:
            short[key] = value
    return short
