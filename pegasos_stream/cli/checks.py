"""Start-up checks: what would otherwise fail after the first event (or as a traceback) is refused
before it, with one line that names the file, flag or key at fault."""

from __future__ import annotations

import errno
import importlib
import logging
import os
import stat
from collections.abc import Mapping
from pathlib import Path

from ..io.mail import is_maildir, maildir_folders
from ..parse.parsing import MAIL_FORMATS
from .settings import JobSettings, SourceSettings

__all__ = [
    "MIN_KEY_BYTES",
    "StartupError",
    "check_files",
    "check_mail_labels",
    "check_plot",
    "checkpoint_directory_error",
    "checkpoint_key",
    "secret",
]

#: The fewest bytes of a checkpoint key.
MIN_KEY_BYTES = 16

_log = logging.getLogger(__name__)


class StartupError(Exception):
    """Something a command needs cannot be used; the message names it, and the flag or key that gave it."""


def check_files(settings: JobSettings, given_as: Mapping[str, str]) -> None:
    """A file source can be read; an output and a dead-letter file can be written (created at their
    first line, in a directory that exists). ``given_as`` names the flag a key's value came from
    (``{"source.path": "--input"}``); a key given in the configuration is named by its path."""
    for section, name, check in (
        (settings.source, "source.path", _check_readable),
        (settings.output, "output.path", _check_writable),
        (settings.errors.dead_letter, "errors.dead_letter.path", _check_writable),
    ):
        if section.type == "file":
            assert section.path is not None  # (validation requires the path of a file)
            check(section.path, given_as.get(name, name))


def check_mail_labels(settings: JobSettings, evaluate: bool) -> None:
    """Mail that a run would learn nothing from is refused: a maildir with neither ``source.folders`` nor
    ``source.label``, and, for ``eval`` (which scores what it learns), any mail without a label. ``run`` predicts
    unlabelled mail of a file or standard input, and says so. A maildir read as users' Maildirs must not be a
    Maildir itself (its folders would be taken for users)."""
    source = settings.source
    if source.users == "directories" and source.path is not None and is_maildir(source.path):
        raise StartupError(
            f"source.users: directories reads a directory of users' Maildirs, each directory of it one user's, but"
            f" {source.path} is a Maildir itself (it holds cur or new): give its parent, or leave source.users out"
        )
    if source.label is not None or source.folders:
        return
    if source.type == "maildir":
        raise StartupError(_maildir_without_labels(source))
    if source.format not in MAIL_FORMATS:
        return
    if source.type == "kafka":
        _log.info("the messages of %s are learned by the labels they carry (X-Pegasos-Label)", ", ".join(source.topics))
        return
    where = source.path if source.type == "file" else "standard input"
    if evaluate:
        raise StartupError(
            f"source.label: the messages of {where} carry no label, and eval learns from labels: set the label of"
            " every message of this input, e.g. --set source.label=spam"
        )
    _log.info("the messages of %s carry no label (source.label): they are predicted, not learned", where)


def _maildir_without_labels(source: SourceSettings) -> str:
    """The refusal of a maildir without labels, with the fix."""
    labels = source.labels
    positive, negative = (labels.positive, labels.negative) if labels.positive is not None else (1, 0)
    path = source.path
    assert path is not None  # (validation requires the path of a maildir)
    folders = maildir_folders(path, source.users == "directories") if os.path.isdir(path) else []
    found = f" (its folders: {', '.join(folders)})" if folders else ""
    return (
        f"source.folders: the messages of the maildir {path} take the label of their folder, and source.folders"
        f" names none, so nothing would be learned: set it, e.g. --set 'source.folders={{Spam: {positive}, INBOX:"
        f" {negative}}}'{found}, or source.label for every message"
    )


def check_plot(path: str, settings: JobSettings) -> None:
    """``--plot PATH`` can be written, in a format matplotlib (which must be there) writes, and the learner is
    binary: the curve is of its error rate."""
    if settings.model["kind"] == "multiclass":
        raise StartupError("--plot draws a binary learner's error rate; a multiclass run reports its accuracy only")
    _check_writable(path, "--plot")
    try:
        backend_bases = importlib.import_module("matplotlib.backend_bases")
    except ImportError as error:
        raise StartupError(f"--plot needs matplotlib ({error}): pip install 'pegasos-stream[plot]'") from None
    formats = backend_bases.FigureCanvasBase.get_supported_filetypes()
    suffix = Path(path).suffix.lower().lstrip(".")
    if suffix and suffix not in formats:
        raise StartupError(f"--plot {path}: not an image format matplotlib writes ({', '.join(sorted(formats))})")


def checkpoint_key(
    key_file: str | None, key_env: str | None, names: tuple[str, str] = ("checkpoint.key_file", "checkpoint.key_env")
) -> bytes | None:
    """The key that signs and checks checkpoints (HMAC-SHA256), as `secret` reads it."""
    return secret(key_file, key_env, names, "checkpoint key")


def secret(key_file: str | None, key_env: str | None, names: tuple[str, str], what: str) -> bytes | None:
    """A secret (``what``: "checkpoint key"): the bytes of the file ``key_file`` (less the line break that ends it)
    or of the environment variable ``key_env``; None when neither is given. A StartupError, naming the key or flag
    of ``names`` (file, variable) that gave it, when both are given, the file cannot be read, the variable is not
    set, or the secret has fewer than ``MIN_KEY_BYTES`` bytes."""
    file_name, env_name = names
    if key_file is not None and key_env is not None:
        raise StartupError(f"{file_name} and {env_name}: give the {what} once, not both")
    if key_file is not None:
        where = f"{file_name} {key_file}"
        try:
            key = Path(key_file).read_bytes().rstrip(b"\r\n")
        except OSError as error:
            raise StartupError(f"{where}: cannot read: {error.strerror}") from None
    elif key_env is not None:
        where = f"{env_name} {key_env}"
        value = os.environ.get(key_env)
        if value is None:
            raise StartupError(f"{where}: the environment variable is not set")
        key = os.fsencode(value)  # (its bytes, as the environment holds them)
    else:
        return None
    if len(key) < MIN_KEY_BYTES:
        raise StartupError(f"{where}: a {what} of {len(key)} bytes; a key needs at least {MIN_KEY_BYTES}")
    return key


def checkpoint_directory_error(directory: str, error: OSError) -> StartupError:
    """The start-up error of a checkpoint directory that cannot be created, locked or written."""
    if isinstance(error, FileExistsError):
        return StartupError(f"checkpoint.dir {directory}: not a directory")
    where = f" ({error.filename})" if error.filename and str(error.filename) != str(directory) else ""
    return StartupError(f"checkpoint.dir {directory}: cannot be used: {error.strerror}{where}")


def _check_readable(path: str, name: str) -> None:
    """A StartupError when the file at ``path`` cannot be read; a pipe is not opened (that would take it from the
    writer waiting on it), only its permission checked."""
    try:
        if stat.S_ISFIFO(os.stat(path).st_mode):
            if not os.access(path, os.R_OK):
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)
            return
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
