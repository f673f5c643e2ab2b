"""Checkpoint files: versioned, checksummed, written atomically, loaded without running code.

A checkpoint is one file: ``MAGIC``, the SHA-256 of the payload, then the payload, a numpy ``.npz``
archive holding a JSON manifest (format version, what the writer put in it, the encoded state:
the learner under "model", and whatever else the writer saves, such as the runner's buffers) and
the state's numeric arrays (read with ``allow_pickle=False``). A truncated, corrupted or foreign
file is refused with a `CheckpointError` that says why, and so is one whose members claim more
than the file holds (sizes are checked from the headers before anything is read) or whose
manifest nests deeper than a state does.

A directory of checkpoints belongs to one run at a time: ``Checkpoints`` holds an exclusive lock
on its ``.lock`` file until ``close``.
"""

from __future__ import annotations

import fcntl
import functools
import io
import json
import logging
import math
import os
import re
import shutil
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import numpy as np

from .codec import StateError, decode, encode, register

__all__ = [
    "FORMAT_VERSION",
    "CheckpointError",
    "Checkpoints",
    "DirectoryInUse",
    "WriteSchedule",
    "checkpoint_bytes",
    "checkpoint_path",
    "checkpoint_sequence",
    "checkpoints",
    "latest_valid",
    "model_digest",
    "read_checkpoint",
    "read_checkpoint_bytes",
    "sha256",
    "write_checkpoint",
]

MAGIC = b"PEGASOS\x00"
FORMAT_VERSION = 1
_NAME = re.compile(r"checkpoint-(\d{12})\.pgs$")
#: The file a run locks in its checkpoint directory.
LOCK_NAME = ".lock"
#: How deep a manifest may nest: far more than any learner's state needs.
MAX_DEPTH = 64

_log = logging.getLogger(__name__)


class CheckpointError(ValueError):
    """A checkpoint file that cannot be used; the message names the file and the reason."""


class DirectoryInUse(CheckpointError):
    """A checkpoint directory locked by another run; the message names its holder."""


def _canonical(tree: Any, arrays: dict[str, np.ndarray]) -> bytes:
    """One byte string for an encoded state: equal strings, equal states."""
    parts = [json.dumps(tree, sort_keys=True, separators=(",", ":")).encode("utf-8")]
    for name in sorted(arrays):
        array = np.ascontiguousarray(arrays[name])
        parts.append(f"{name}:{array.dtype.str}:{array.shape}".encode())
        parts.append(array.tobytes())
    return b"\x00".join(parts)


def sha256(data: bytes) -> Any:
    """``hashlib.sha256(data)``, for checkpoints and configuration hashes. hashlib (and tempfile, zipfile, socket,
    datetime below) are imported where used: hashlib loads OpenSSL, about 4 MB, which a run that writes and reads
    no checkpoint never needs, nor their import time."""
    import hashlib

    return hashlib.sha256(data)


def model_digest(model: Any) -> str:
    """SHA-256 of the canonical serialisation of a learner's state."""
    _learners()
    return sha256(_canonical(*encode(model))).hexdigest()


def _payload(manifest: dict, arrays: dict[str, np.ndarray]) -> bytes:
    buffer = io.BytesIO()
    manifest_bytes = np.frombuffer(json.dumps(manifest, sort_keys=True).encode("utf-8"), dtype=np.uint8)
    members: dict[str, Any] = {"manifest": manifest_bytes, **arrays}  # Any: savez's stubs type **kwds loosely
    np.savez(buffer, **members)
    return buffer.getvalue()


def checkpoint_bytes(state: dict[str, Any], extra: dict | None = None) -> bytes:
    """The bytes of a checkpoint file of ``state`` (``{"model": learner, ...}``) and the JSON-ready ``extra``."""
    _learners()
    tree, arrays = encode(state)
    manifest = {"format": "pegasos-stream checkpoint", "version": FORMAT_VERSION, "state": tree, **(extra or {})}
    payload = _payload(manifest, arrays)
    return MAGIC + sha256(payload).digest() + payload


def write_checkpoint(path: str | Path, state: dict[str, Any], extra: dict | None = None) -> bytes:
    """Write ``state`` (``{"model": learner, ...}``) and the JSON-ready ``extra`` to ``path`` atomically;
    the bytes written.

    The bytes go to a temporary file in the same directory, which is flushed, fsynced and renamed
    over ``path``; the directory is fsynced after, so the checkpoint survives a crash whole or not
    at all.
    """
    import tempfile

    path = Path(path)
    data = checkpoint_bytes(state, extra)
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".pgs")
    try:
        with os.fdopen(descriptor, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
    return data


def read_checkpoint(path: str | Path) -> tuple[dict[str, Any], dict]:
    """(state, manifest) from a checkpoint file; a CheckpointError if it is not a sound one."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as error:
        raise CheckpointError(f"{path}: cannot read: {error.strerror}") from None
    return read_checkpoint_bytes(data, str(path))


def read_checkpoint_bytes(data: bytes, path: str) -> tuple[dict[str, Any], dict]:
    """(state, manifest) from the bytes of a checkpoint file (a model published whole), named ``path`` in a
    CheckpointError if they are not a sound one."""
    header = len(MAGIC) + 32
    if len(data) < header or not data.startswith(MAGIC):
        raise CheckpointError(f"{path}: not a pegasos-stream checkpoint (or truncated before its header)")
    payload = data[header:]
    if sha256(payload).digest() != data[len(MAGIC) : header]:
        raise CheckpointError(f"{path}: checksum mismatch: the file is truncated or corrupted")
    try:
        _check_members(payload)
        with np.load(io.BytesIO(payload), allow_pickle=False) as archive:
            arrays = {name: archive[name] for name in archive.files}
        manifest = json.loads(arrays.pop("manifest").tobytes().decode("utf-8"))
    except Exception as error:  # whatever the archive makes the readers raise, the file is refused
        raise CheckpointError(f"{path}: unreadable payload: {error}") from None
    if _depth_exceeds(manifest, MAX_DEPTH):
        raise CheckpointError(f"{path}: the manifest nests deeper than {MAX_DEPTH} levels")
    if not isinstance(manifest, dict) or manifest.get("format") != "pegasos-stream checkpoint":
        raise CheckpointError(f"{path}: not a pegasos-stream checkpoint")
    if manifest.get("version") != FORMAT_VERSION:
        raise CheckpointError(
            f"{path}: checkpoint format version {manifest.get('version')!r}; "
            f"this program reads version {FORMAT_VERSION}"
        )
    try:
        _learners()
        state = decode(manifest.pop("state"), arrays)
    except (
        StateError,
        ValueError,
        KeyError,
        TypeError,
        IndexError,
        AttributeError,
        OverflowError,
        RecursionError,
    ) as error:
        raise CheckpointError(f"{path}: the saved state cannot be rebuilt: {error!r}") from None
    if not isinstance(state, dict) or not _is_learner(state.get("model")):
        raise CheckpointError(f"{path}: the saved state holds no complete learner")
    return state, manifest


def _check_members(payload: bytes) -> None:
    """Refuse (CheckpointError) an archive whose members declare, together, more bytes than the
    payload holds (the writer stores them uncompressed: more is a zip bomb), or whose array headers
    disagree with their member's size; nothing but the headers is read."""
    import zipfile

    with zipfile.ZipFile(io.BytesIO(payload)) as archive:
        members = archive.infolist()
        declared = sum(member.file_size for member in members)
        if declared > len(payload):
            raise CheckpointError(f"its members declare {declared} bytes in a payload of {len(payload)}")
        for member in members:
            with archive.open(member) as stream:
                version = np.lib.format.read_magic(stream)
                if version == (1, 0):
                    shape, _, dtype = np.lib.format.read_array_header_1_0(stream)
                else:
                    shape, _, dtype = np.lib.format.read_array_header_2_0(stream)
                header = stream.tell()
            if dtype.hasobject:
                continue  # pickled, with no size to check: np.load refuses it (allow_pickle=False)
            claimed = math.prod(shape) * dtype.itemsize
            if header + claimed != member.file_size:
                raise CheckpointError(
                    f"member {member.filename} claims {claimed} bytes of data in {member.file_size - header}"
                )


def _depth_exceeds(tree: Any, limit: int) -> bool:
    """Whether JSON ``tree`` nests more than ``limit`` lists and dicts deep (without recursion)."""
    stack = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        for child in children:
            if isinstance(child, (dict, list)):
                if depth + 1 > limit:
                    return True
                stack.append((child, depth + 1))
    return False


@functools.cache
def _learners() -> tuple[type, ...]:
    """The learners of the package, with every class of their states registered with the codec (loaded on the
    first checkpoint written or read: a run that writes none imports its own learner only)."""
    from .. import learners

    register(*learners.STATE_CLASSES)
    return learners.LEARNERS


def _is_learner(model: Any) -> bool:
    """A learner of this package with every attribute of the state of a new one of its class and settings (its
    ``clone()``: the settings may change what a learner is made of, as ``PegasosClassifier(lambda_="auto")`` is
    its members)."""
    if type(model) not in _learners():
        return False
    try:
        fresh = model.clone()
    except (AttributeError, TypeError, ValueError):  # settings missing or refused
        return False
    getstate = getattr(fresh, "__getstate__", None)  # (what is saved: caches left out)
    return set((getstate() if getstate is not None else vars(fresh)) or ()) <= set(vars(model))


def checkpoint_path(directory: str | Path, sequence: int) -> Path:
    """The file name of checkpoint number ``sequence`` in ``directory`` (names sort by number)."""
    return Path(directory) / f"checkpoint-{sequence:012d}.pgs"


def checkpoint_sequence(path: str | Path) -> int | None:
    """The sequence number in a checkpoint's file name (None: not a name ``Checkpoints`` gives)."""
    match = _NAME.match(Path(path).name)
    return None if match is None else int(match.group(1))


def checkpoints(directory: str | Path) -> list[Path]:
    """The checkpoint files of ``directory``, newest first."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    return sorted((p for p in directory.iterdir() if _NAME.match(p.name)), reverse=True)


def latest_valid(
    directory: str | Path, report: Callable[[str], object] | None = None
) -> tuple[Path, dict, dict] | None:
    """The newest checkpoint of ``directory`` that loads, as (path, state, manifest).

    Every newer file that is refused is said so to ``report`` (a callable taking the message; None:
    logged as a warning).
    """
    for path in checkpoints(directory):
        try:
            state, manifest = read_checkpoint(path)
        except CheckpointError as error:
            (report or _log.warning)(f"skipping {error}")
            continue
        return path, state, manifest
    return None


class WriteSchedule:
    """When the next write of a run's state is due: ``every_events`` events or ``every_seconds`` seconds after the
    last one (either may be None), counted from ``mark``."""

    def __init__(self, every_events: int | None, every_seconds: float | None) -> None:
        self.every_events = every_events
        self.every_seconds = every_seconds
        self._last_events = 0
        self._last_time = time.monotonic()

    def mark(self, events: int) -> None:
        """Count from here: ``events`` have been processed when the run starts (or resumes), or at a write."""
        self._last_events = events
        self._last_time = time.monotonic()

    @property
    def age(self) -> float:
        """Seconds since the last write (since ``mark``, the start of the run, before the first)."""
        return time.monotonic() - self._last_time

    def events_until_due(self, events: int) -> int | None:
        """How many more events until a write is due by count (None: no count is set)."""
        if self.every_events is None:
            return None
        return max(self._last_events + self.every_events - events, 1)

    def due(self, events: int) -> bool:
        """Whether a write is due, with ``events`` processed."""
        if self.every_events is not None and events - self._last_events >= self.every_events:
            return True
        return self.every_seconds is not None and time.monotonic() - self._last_time >= self.every_seconds


class Checkpoints(WriteSchedule):
    """The checkpoints of a run, in one directory: every ``every_events`` events and/or every
    ``every_seconds`` seconds, keeping the newest ``keep`` files.

    Files are numbered past the highest number already in the directory, so a file is never
    overwritten, not even one that turned out to be corrupt. The directory is locked until
    ``close`` (a `DirectoryInUse` if another process holds it; the kernel releases the lock of a
    process that dies, and the next run takes it over). A new file is written before the oldest is
    removed, so the directory needs room for ``keep + 1`` of them: a start with less free space
    than that (estimated from the newest file) is refused with a CheckpointError.
    """

    #: A checkpoint is due only once records have arrived (see `stream.runner.StateKeeper`).
    writes_when_idle = False

    def __init__(
        self,
        directory: str | Path,
        every_events: int | None = None,
        every_seconds: float | None = None,
        keep: int = 3,
        manifest: dict | None = None,
    ) -> None:
        super().__init__(every_events, every_seconds)
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.keep = keep
        self.manifest = manifest or {}
        # Released by ``close``, or when the object is collected or the interpreter exits.
        self._release = weakref.finalize(self, _unlock, self.directory / LOCK_NAME, _lock(self.directory))
        for stale in self.directory.glob(".tmp-*.pgs"):  # left by a writer that was killed mid-write
            stale.unlink(missing_ok=True)
        existing = checkpoints(self.directory)
        try:
            _check_free_space(self.directory, existing, keep)
        except BaseException:
            self.close()
            raise
        self._sequence = (checkpoint_sequence(existing[0]) or 0) if existing else 0
        self._written: int | None = None  # events covered by this run's last checkpoint
        self.pauses: list[float] = []  # seconds each write held the loop
        #: Called with (sequence number, the file's bytes, its manifest less the state) after each write.
        self.on_write: Callable[[int, bytes, dict], object] | None = None

    def write(self, model: Any, runner_state: dict, source_position: dict) -> Path | None:
        """Write the next checkpoint and drop the ones past ``keep``; None when this run's last
        checkpoint already covers every event. Its manifest holds, besides ``manifest``, the source
        position, the events processed, the learner's step count ``t`` and ``written_at`` (Unix time)."""
        events = runner_state["counts"][0]
        if events == self._written:
            return None
        start = time.perf_counter()
        self._sequence += 1
        path = checkpoint_path(self.directory, self._sequence)
        extra = {**self.manifest, "source": source_position, "events": events, "t": model.t, "written_at": time.time()}
        data = write_checkpoint(path, {"model": model, "runner": runner_state}, extra)
        for old in checkpoints(self.directory)[self.keep :]:
            old.unlink(missing_ok=True)
        self._written = events
        self.mark(events)
        self.pauses.append(time.perf_counter() - start)
        if self.on_write is not None:
            self.on_write(self._sequence, data, extra)
        return path

    def close(self) -> None:
        """Release the directory (idempotent)."""
        self._release()


def _lock(directory: Path) -> IO[str]:
    """The lock file of ``directory``, open and exclusively locked, with this process's pid, host and
    start time written in it; a DirectoryInUse naming the holder if another process has it."""
    path = directory / LOCK_NAME
    while True:
        # Appending: the holder's record stays until this process holds the lock. The handle holds
        # the lock for as long as it is open, past this function: no context manager.
        handle = open(path, "a+", encoding="utf-8")  # noqa: SIM115
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read()
            handle.close()
            raise DirectoryInUse(f"checkpoint directory {directory} is in use by {_holder(holder)}") from None
        except BaseException:
            handle.close()
            raise
        try:
            same_file = os.stat(path).st_ino == os.fstat(handle.fileno()).st_ino
        except FileNotFoundError:
            same_file = False
        if same_file:
            break
        handle.close()  # its holder removed it as we opened it: lock the file that is there now
    handle.seek(0)
    left = handle.read()
    if left and _gone(left):
        _log.warning(
            "checkpoint directory %s: taking over the lock left by %s, which is gone", directory, _holder(left)
        )
    import socket
    from datetime import datetime, timezone

    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    handle.seek(0)
    handle.truncate()
    handle.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "started": started}))
    handle.flush()
    return handle


def _unlock(path: Path, handle: IO[str]) -> None:
    """Remove the lock file ``path``, then release the lock ``handle`` holds on it."""
    path.unlink(missing_ok=True)  # while locked: no other process holds this file
    handle.close()


def _holder(record: str) -> str:
    """Who a lock file's record names: "pid 123 on host h (since ...)"."""
    try:
        holder = json.loads(record)
        return f"pid {holder['pid']} on host {holder['host']} (since {holder['started']})"
    except (ValueError, TypeError, KeyError):
        return "another process"


def _gone(record: str) -> bool:
    """Whether the process a lock file's record names has ended (a record from this process, or
    one naming a live process, is not a stale lock: its handle was dropped without ``close``)."""
    import socket

    try:
        holder = json.loads(record)
        pid = int(holder["pid"])
        if holder["host"] != socket.gethostname():
            return True  # it would still hold the lock
    except (ValueError, TypeError, KeyError):
        return True
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's
        return False
    return False


def _check_free_space(directory: Path, existing: list[Path], keep: int) -> None:
    """Refuse (CheckpointError) to start when ``directory`` lacks room for ``keep + 1`` checkpoints
    the size of the newest one (less the room its kept files already take)."""
    if not existing:
        return
    sizes = [path.stat().st_size for path in existing]
    needed = max(sizes[0], (keep + 1) * sizes[0] - sum(sizes[:keep]))
    free = shutil.disk_usage(directory).free
    if free < needed:
        raise CheckpointError(
            f"checkpoint directory {directory} has {free} bytes free; its checkpoints need {needed} more "
            f"(keep + 1 = {keep + 1} files of about {sizes[0]} bytes: a new one is written before the oldest "
            "is removed)"
        )


def describe(path: str | Path) -> dict:
    """The summary ``pegasos-stream inspect`` prints: PATH is a file, or a directory for its newest
    valid checkpoint (the newer files refused are logged)."""
    path = Path(path)
    if path.is_dir():
        found = latest_valid(path)
        if found is None:
            raise CheckpointError(f"{path}: no valid checkpoint")
        path, state, manifest = found
    else:
        state, manifest = read_checkpoint(path)
    model = state["model"]
    if hasattr(model, "n_support"):
        size: dict[str, Any] = {"support_vectors": model.n_support}
    else:  # a committee or a mixture counts the weights of every learner it holds
        size = {"weights": sum(_n_weights(learner) for learner in getattr(model, "learners", [model]))}
    if hasattr(model, "member_weights"):
        size["member_weights"] = model.member_weights
    return {
        "path": str(path),
        "format_version": manifest["version"],
        "config_sha256": manifest.get("config_sha256"),
        "learner": type(model).__name__,
        "t": model.t,
        **size,
        "events": manifest.get("events"),
        "source": manifest.get("source"),
        "model_sha256": model_digest(model),
    }


def _n_weights(model: Any) -> int:
    weights = model.weights
    if weights and isinstance(next(iter(weights.values())), dict):  # one dict per class
        return sum(len(row) for row in weights.values())
    return len(weights)
