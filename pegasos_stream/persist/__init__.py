"""Saving learners and runs: the state codec, checkpoint files, ``save`` and ``load``."""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

from .checkpoint import CheckpointError, Checkpoints, model_digest, read_checkpoint, write_checkpoint

__all__ = ["CheckpointError", "Checkpoints", "load", "model_digest", "save"]

Model = TypeVar("Model")


def save(model: object, path: str | Path, key: bytes | None = None) -> None:
    """Write the learner ``model`` to ``path`` atomically, as a checkpoint file (no pickle); with ``key``, signed
    (HMAC-SHA256) with it."""
    write_checkpoint(path, {"model": model}, key=key)


def load(path: str | Path, kind: type[Model] | None = None, key: bytes | None = None) -> Model:
    """The learner saved in ``path``; a CheckpointError if the file is not a sound checkpoint (its state checked
    as strictly as a configuration), (with ``kind``) holds a learner of another class, or (with ``key``) is not
    signed with that key."""
    model = read_checkpoint(path, key)[0]["model"]
    if kind is not None and not isinstance(model, kind):
        raise CheckpointError(f"{path}: holds a {type(model).__name__}, not a {kind.__name__}")
    return model
