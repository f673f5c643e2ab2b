"""Start-up checks: what would otherwise fail after the first event (or as a traceback) is refused
before it, with one line that names the file, flag or key at fault."""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from pathlib import Path

__all__ = ["StartupError", "check_files", "check_plot", "checkpoint_directory_error"]


class StartupError(Exception):
    """Something a command needs cannot be used; the message names it, and the flag or key that gave it."""


def check_files(config: dict, given_as: Mapping[str, str]) -> None:
    """A file source can be read; an output and a dead-letter file can be written (created at their
    first line, in a directory that exists). ``given_as`` names the flag a key's value came from
    (``{"source.path": "--input"}``); a key given in the configuration is named by its path."""
    if config["source"]["type"] == "file":
        _check_readable(config["source"]["path"], given_as.get("source.path", "source.path"))
    if config["output"]["type"] == "file":
        _check_writable(config["output"]["path"], given_as.get("output.path", "output.path"))
    dead = config["errors"]["dead_letter"]
    if dead["type"] == "file":
        _check_writable(dead["path"], "errors.dead_letter.path")


def check_plot(path: str) -> None:
    """``--plot PATH`` can be written, and matplotlib is there to draw it."""
    _check_writable(path, "--plot")
    try:
        importlib.import_module("matplotlib")
    except ImportError as error:
        raise StartupError(f"--plot needs matplotlib ({error}): pip install 'pegasos-stream[plot]'") from None


def checkpoint_directory_error(directory: str, error: OSError) -> StartupError:
    """The start-up error of a checkpoint directory that cannot be created, locked or written."""
    if isinstance(error, FileExistsError):
        return StartupError(f"checkpoint.dir {directory}: not a directory")
    where = f" ({error.filename})" if error.filename and str(error.filename) != str(directory) else ""
    return StartupError(f"checkpoint.dir {directory}: cannot be used: {error.strerror}{where}")


def _check_readable(path: str, name: str) -> None:
    try:
        with open(path, "rb"):
            pass
    except OSError as error:
        raise StartupError(f"{name} {path}: cannot read: {error.strerror}") from None


def _check_writable(path: str, name: str) -> None:
    file = Path(path)
    directory = file.parent
    if file.is_dir():
        raise StartupError(f"{name} {path}: is a directory")
    if not directory.is_dir():
        raise StartupError(f"{name} {path}: the directory {directory} does not exist")
    if file.exists():
        if not os.access(file, os.W_OK):
            raise StartupError(f"{name} {path}: cannot write: permission denied")
    elif not os.access(directory, os.W_OK | os.X_OK):
        raise StartupError(f"{name} {path}: cannot create a file in {directory}: permission denied")
