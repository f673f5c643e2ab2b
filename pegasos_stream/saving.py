"""``model.save(path)`` and ``Model.load(path)`` for the learners, through checkpoint files."""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

__all__ = ["Saveable"]

Model = TypeVar("Model", bound="Saveable")


class Saveable:
    """Saving and loading a learner without pickle (see `pegasos_stream.checkpoint`)."""

    def save(self, path: str | Path) -> None:
        """Write the learner to ``path`` atomically."""
        from .checkpoint import write_checkpoint  # the checkpoint module imports the learners

        write_checkpoint(path, {"model": self})

    @classmethod
    def load(cls: type[Model], path: str | Path) -> Model:
        """The learner saved in ``path``; a CheckpointError if the file is not a sound one of this class."""
        from .checkpoint import CheckpointError, read_checkpoint

        model = read_checkpoint(path)[0]["model"]
        if not isinstance(model, cls):
            raise CheckpointError(f"{path}: holds a {type(model).__name__}, not a {cls.__name__}")
        return model
