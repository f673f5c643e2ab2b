"""Where predictions and rejected records go: standard output, a file; Kafka lives in `kafka`."""

from __future__ import annotations

import base64
import json
import math
import sys
from pathlib import Path
from typing import Protocol, TextIO

__all__ = ["JsonLinesSink", "NullSink", "Sink", "dead_letter", "json_line"]


class Sink(Protocol):
    def emit(self, obj: dict) -> None: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...


class JsonLinesSink:
    """One JSON object per line, to a file (appended; created at the first line) or to stdout. A
    number JSON has no form for (NaN, an infinity) is written as null."""

    def __init__(self, path: str | Path | None = None) -> None:
        self._path = None if path is None or str(path) == "-" else Path(path)
        self._out: TextIO | None = None if self._path else sys.stdout

    def emit(self, obj: dict) -> None:
        out = self._out
        if out is None:
            assert self._path is not None  # without a path the sink writes to stdout
            # held open across emits, until close()
            out = self._out = open(self._path, "a", encoding="utf-8")  # noqa: SIM115
        out.write(json_line(obj) + "\n")

    def flush(self) -> None:
        if self._out is not None:
            self._out.flush()

    def close(self) -> None:
        self.flush()
        if self._path is not None and self._out is not None:
            self._out.close()
            self._out = None


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
