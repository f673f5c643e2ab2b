"""Saving learners and runs: the state codec, checkpoint files, ``save`` and ``load``."""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

from .checkpoint import CheckpointError, Checkpoints, model_digest, read_checkpoint, write_checkpoint

__all__ = ["CheckpointError", "Checkpoints", "load", "model_digest", "save"]

Model = TypeVar("Model")


def save(model: object, path: str | Path) -> None:
    """Write the learner ``model`` to ``path`` atomically, as a checkpoint file (no pickle)."""
    write_checkpoint(path, {"model": model})


def load(path: str | Path, kind: type[Model] | None = None) -> Model:
    """The learner saved in ``path``; a CheckpointError if the file is not a sound checkpoint, or
    (with ``kind``) holds a learner of another class."""
    model = read_checkpoint(path)[0]["model"]
    if kind is not None and not isinstance(model, kind):
        raise CheckpointError(f"{path}: holds a {type(model).__name__}, not a {kind.__name__}")
    return model
