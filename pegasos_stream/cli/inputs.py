"""What a checkpoint's source position means for the input a resumed run is given.

A position applies to the input it was taken from and to no other. It names that input: a file's position holds
the file's identity (`io.inputs`); any other position, and a file's written before positions held one, is
named by the source of the configuration stored beside it (its type, and its path, resolved in the working
directory). Another input is read from its beginning (Kafka topics the position holds no offsets of start where
the consumer group committed, else at ``source.start``); the same file grown since goes on where the position
stands; the same file changed in the part already read is refused.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from ..io.inputs import changed
from .checks import StartupError
from .settings import JobConfig, settings_of

__all__ = ["resume_position"]

_log = logging.getLogger(__name__)


class _Input(NamedTuple):
    """An input: its source type, and the resolved path of a file or a maildir (None for the others)."""

    type: str
    path: str | None

    def __str__(self) -> str:
        return {"stdin": "standard input", "kafka": "Kafka"}.get(self.type) or f"{self.type} {self.path}"


def _input(kind: object, path: object) -> _Input | None:
    """The input a source of type ``kind`` reads, at ``path`` (None: one that names none)."""
    if kind in ("stdin", "kafka"):
        return _Input(kind, None)
    if kind in ("file", "maildir") and isinstance(path, str):
        return _Input(kind, str(Path(path).resolve()))
    return None


def _taken_from(position: dict, stored: object) -> _Input | None:
    """The input ``position`` was taken from: the file its identity names, else the input of the ``stored``
    configuration's source (None when it names none: the position applies as it did before inputs were named)."""
    identity = position.get("input")
    if isinstance(identity, dict) and isinstance(identity.get("path"), str):
        return _Input("file", identity["path"])
    source = stored.get("source") if isinstance(stored, dict) else None
    return _input(source.get("type"), source.get("path")) if isinstance(source, dict) else None


def resume_position(config: JobConfig, manifest: dict, checkpoint: Path) -> dict | None:
    """Where the configured input starts, resumed from checkpoint ``checkpoint`` (its ``manifest``): at the stored
    position when it was taken from this input; at its beginning (None), said in one line, when it was taken from
    another; a StartupError when this is its file, changed in the part read since."""
    position = manifest["source"]
    source = settings_of(config).source
    reading, taken_from = _input(source.type, source.path), _taken_from(position, manifest.get("config"))
    if taken_from is not None and taken_from != reading:
        _log.info("%s is not the input of %s (%s): reading it from its beginning", reading, checkpoint, taken_from)
        return None
    if source.type == "file" and "input" in position:
        assert source.path is not None  # (validation requires the path of a file source)
        _check_unchanged(position["input"], source.path, checkpoint)
    elif source.type == "stdin":
        skipped = f"{position['line']} lines" if "line" in position else f"{position['messages']} messages"
        _log.info("standard input cannot be re-read: skipping its first %s", skipped)
    elif source.type == "kafka":
        _say_new_topics(source.topics, position, checkpoint)
    return position


def _check_unchanged(identity: object, path: str, checkpoint: Path) -> None:
    """A StartupError when the file at ``path`` is not the one ``identity`` names, grown or not."""
    try:
        problem = changed(identity, path)
    except ValueError as error:
        raise StartupError(f"{checkpoint}: its source position names no input ({error})") from None
    except OSError as error:
        raise StartupError(f"{path}: cannot read: {error.strerror}") from None
    if problem is not None:
        raise StartupError(
            f"{path} changed since {checkpoint} read it ({problem}): its position there would fall elsewhere; to"
            " learn it as a new input, give it under another name"
        )


def _say_new_topics(topics: Sequence[str], position: dict, checkpoint: Path) -> None:
    """Say which of the Kafka ``topics`` the position holds no offsets of, and where they start."""
    stored = {offset[0] for offset in position.get("offsets", [])}
    new = [topic for topic in topics if topic not in stored]
    if stored and new:
        _log.info(
            "%s holds no offsets of the topics %s: they start at the consumer group's committed offsets"
            " (source.start where none)",
            checkpoint,
            ", ".join(new),
        )
