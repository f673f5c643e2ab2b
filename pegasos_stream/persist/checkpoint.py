"""Checkpoint files: versioned, checksummed, written atomically, loaded without running code.

A checkpoint is one file: ``MAGIC``, the SHA-256 of the payload, then the payload, a numpy ``.npz``
archive holding a JSON manifest (format version, what the writer put in it, the encoded state:
the learner under "model", and whatever else the writer saves, such as the runner's buffers) and
the state's numeric arrays (read with ``allow_pickle=False``). A truncated, corrupted or foreign
file is refused with a `CheckpointError` that says why, and so is one whose members claim more
than the file holds (sizes are checked from the headers before anything is read), whose
manifest nests deeper than a state does, or whose state is not one a learner leaves (each class of
a learner's state checks its own, see `learners.state`). Only a regular file is read, opened without
waiting (a FIFO or a device is refused before anything is read), and up to a size bound if one is given.

Written with a key, a checkpoint starts with ``KEYED_MAGIC`` and carries the HMAC-SHA256 of its payload
under that key after the SHA-256; read with a key, a checkpoint without a valid HMAC under it is refused
(for a directory that another party can write). Read without a key, either kind is read.

A directory of checkpoints belongs to one run at a time: ``Checkpoints`` holds an exclusive lock
on its ``.lock`` file until ``close``.
"""

from __future__ import annotations

import fcntl
import io
import json
import logging
import math
import os
import re
import shutil
import stat
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import numpy as np

from .codec import decode, encode, register_learners

__all__ = [
    "FORMAT_VERSION",
    "KEYED_MAGIC",
    "MAGIC",
    "CheckpointError",
    "CheckpointWriteError",
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
#: The magic of a checkpoint that carries an HMAC-SHA256 of its payload after its SHA-256.
KEYED_MAGIC = b"PEGASOS\x01"
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


class CheckpointWriteError(RuntimeError):
    """A checkpoint could not be written (a full disk); the message names the directory, the file and why. The
    checkpoints written before are kept."""


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
    return sha256(_canonical(*encode(model))).hexdigest()


def _payload(manifest: dict, arrays: dict[str, np.ndarray]) -> bytes:
    buffer = io.BytesIO()
    manifest_bytes = np.frombuffer(json.dumps(manifest, sort_keys=True).encode("utf-8"), dtype=np.uint8)
    members: dict[str, Any] = {"manifest": manifest_bytes, **arrays}  # Any: savez's stubs type **kwds loosely
    np.savez(buffer, **members)
    return buffer.getvalue()


def _hmac(key: bytes, payload: bytes) -> bytes:
    """HMAC-SHA256 of ``payload`` under ``key`` (hmac, like hashlib, imported where used)."""
    import hmac

    return hmac.new(key, payload, "sha256").digest()


def checkpoint_bytes(state: dict[str, Any], extra: dict | None = None, key: bytes | None = None) -> bytes:
    """The bytes of a checkpoint file of ``state`` (``{"model": learner, ...}``) and the JSON-ready ``extra``; with
    ``key``, carrying the HMAC-SHA256 of its payload under it."""
    tree, arrays = encode(state)
    manifest = {"format": "pegasos-stream checkpoint", "version": FORMAT_VERSION, "state": tree, **(extra or {})}
    payload = _payload(manifest, arrays)
    if key is None:
        return MAGIC + sha256(payload).digest() + payload
    return KEYED_MAGIC + sha256(payload).digest() + _hmac(key, payload) + payload


def write_checkpoint(
    path: str | Path, state: dict[str, Any], extra: dict | None = None, key: bytes | None = None
) -> bytes:
    """Write ``state`` (``{"model": learner, ...}``) and the JSON-ready ``extra`` to ``path`` atomically (with
    ``key``, signed by it: `checkpoint_bytes`); the bytes written.

    The bytes go to a temporary file in the same directory, which is flushed, fsynced and renamed
    over ``path``; the directory is fsynced after, so the checkpoint survives a crash whole or not
    at all.
    """
    import tempfile

    path = Path(path)
    data = checkpoint_bytes(state, extra, key)
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


def read_checkpoint(
    path: str | Path, key: bytes | None = None, max_bytes: int | None = None
) -> tuple[dict[str, Any], dict]:
    """(state, manifest) from a checkpoint file; a CheckpointError if it is not a sound one (`read_checkpoint_bytes`
    with ``key``), not a regular file, or larger than ``max_bytes``."""
    return read_checkpoint_bytes(_file_bytes(Path(path), max_bytes), str(path), key)


#: What a file that is not a regular one is, by the test of its mode.
_FILE_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _file_bytes(path: Path, max_bytes: int | None) -> bytes:
    """The bytes of the regular file ``path`` (a symbolic link is followed): as many as it held when opened, and
    refused (a CheckpointError) beyond ``max_bytes``. It is opened without blocking (a FIFO would wait for a
    writer) and refused unless it is a regular file: nothing is read of a FIFO or a device, which could block, or
    never end."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as error:
        raise CheckpointError(f"{path}: cannot read: {error.strerror}") from None
    try:
        found = os.fstat(descriptor)
        if not stat.S_ISREG(found.st_mode):
            kind = next((name for test, name in _FILE_KINDS if test(found.st_mode)), "of another kind")
            raise CheckpointError(f"{path}: not a regular file ({kind}): a checkpoint is read from a file only")
        if max_bytes is not None and found.st_size > max_bytes:
            raise CheckpointError(f"{path}: more than {max_bytes} bytes, the most a checkpoint may take here")
        with os.fdopen(descriptor, "rb", closefd=False) as file:
            return file.read(found.st_size)  # (a file written since is refused by its checksum)
    except OSError as error:
        raise CheckpointError(f"{path}: cannot read: {error.strerror}") from None
    finally:
        os.close(descriptor)


def read_checkpoint_bytes(data: bytes, path: str, key: bytes | None = None) -> tuple[dict[str, Any], dict]:
    """(state, manifest) from the bytes of a checkpoint file (a model published whole), named ``path`` in a
    CheckpointError if they are not a sound one; with ``key``, also if they carry no valid HMAC under it."""
    manifest, arrays = _read_manifest(_checked_payload(data, path, key), path)
    return _rebuild_state(manifest, arrays, path), manifest


def _checked_payload(data: bytes, path: str, key: bytes | None) -> bytes:
    """The payload of a checkpoint's bytes, after its header, once its checksum (and, with ``key``, its HMAC)
    holds; a CheckpointError if not."""
    keyed = data.startswith(KEYED_MAGIC)
    header = len(MAGIC) + (64 if keyed else 32)
    if len(data) < header or not (keyed or data.startswith(MAGIC)):
        raise CheckpointError(f"{path}: not a pegasos-stream checkpoint (or truncated before its header)")
    payload = data[header:]
    if sha256(payload).digest() != data[len(MAGIC) : len(MAGIC) + 32]:
        raise CheckpointError(f"{path}: checksum mismatch: the file is truncated or corrupted")
    if key is not None:
        _check_hmac(data[len(MAGIC) + 32 : header] if keyed else None, key, payload, path)
    return payload


def _read_manifest(payload: bytes, path: str) -> tuple[dict, dict[str, np.ndarray]]:
    """(manifest, the other arrays) of a checkpoint's payload; a CheckpointError if the archive is unreadable or
    the manifest is not one of this format's version."""
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
    return manifest, arrays


def _rebuild_state(manifest: dict, arrays: dict[str, np.ndarray], path: str) -> dict[str, Any]:
    """The state the manifest holds (taken out of it), rebuilt from it and ``arrays``; a CheckpointError if it
    cannot be, or holds no learner."""
    try:
        learners = register_learners()
        state = decode(manifest.pop("state"), arrays)
    except ValueError as error:  # (a StateError, or a state a class refuses: the message says what is wrong)
        raise CheckpointError(f"{path}: the saved state cannot be rebuilt: {error}") from None
    except (KeyError, TypeError, IndexError, AttributeError, OverflowError, RecursionError) as error:
        raise CheckpointError(f"{path}: the saved state cannot be rebuilt: {error!r}") from None
    if not isinstance(state, dict) or type(state.get("model")) not in learners:
        raise CheckpointError(f"{path}: the saved state holds no learner")
    return state


def _check_hmac(carried: bytes | None, key: bytes, payload: bytes, path: str) -> None:
    """Refuse (CheckpointError) a checkpoint whose HMAC (``carried``; None: it carries none) is not that of
    ``payload`` under ``key``."""
    import hmac

    if carried is None:
        raise CheckpointError(f"{path}: carries no HMAC, and a checkpoint key is set: refused")
    if not hmac.compare_digest(carried, _hmac(key, payload)):
        raise CheckpointError(f"{path}: its HMAC is not that of the checkpoint key (another key, or forged): refused")


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
    directory: str | Path,
    report: Callable[[str], object] | None = None,
    key: bytes | None = None,
    check: Callable[[dict, dict], object] | None = None,
) -> tuple[Path, dict, dict] | None:
    """The newest checkpoint of ``directory`` that loads (with ``key``: `read_checkpoint`) and that ``check`` (if
    given, called with its state and manifest) takes, raising no ValueError, as (path, state, manifest).

    Every newer file that is refused is said so to ``report`` (a callable taking the message; None:
    logged as a warning).
    """
    for path in checkpoints(directory):
        try:
            state, manifest = read_checkpoint(path, key)
            if check is not None:
                _checked(check, state, manifest, path)
        except CheckpointError as error:
            (report or _log.warning)(f"skipping {error}")
            continue
        return path, state, manifest
    return None


def _checked(check: Callable[[dict, dict], object], state: dict, manifest: dict, path: Path) -> None:
    """``check(state, manifest)``, its ValueError a CheckpointError naming ``path``."""
    try:
        check(state, manifest)
    except ValueError as error:
        raise CheckpointError(f"{path}: {error}") from None


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
    than that (estimated from the newest file; in a directory without one, by ``check_room`` from the
    state the run starts with) is refused with a CheckpointError. A write that fails is a
    CheckpointWriteError. With ``key``, each checkpoint is signed with it (`checkpoint_bytes`).
    """

    #: A checkpoint is due only once records have arrived (see `run.runner.StateKeeper`).
    writes_when_idle = False

    def __init__(
        self,
        directory: str | Path,
        every_events: int | None = None,
        every_seconds: float | None = None,
        keep: int = 3,
        manifest: dict | None = None,
        key: bytes | None = None,
    ) -> None:
        super().__init__(every_events, every_seconds)
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.keep = keep
        self.manifest = manifest or {}
        self.key = key  # each checkpoint is signed with it (HMAC-SHA256), when set
        # Released by ``close``, or when the object is collected or the interpreter exits.
        self._release = weakref.finalize(self, _unlock, self.directory / LOCK_NAME, _lock(self.directory))
        for stale in self.directory.glob(".tmp-*.pgs"):  # left by a writer that was killed mid-write
            stale.unlink(missing_ok=True)
        existing = checkpoints(self.directory)
        try:
            if existing:
                sizes = [path.stat().st_size for path in existing]
                _check_free_space(self.directory, sizes[0], sizes, keep)
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
        try:
            data = write_checkpoint(path, {"model": model, "runner": runner_state}, extra, self.key)
        except OSError as error:
            raise CheckpointWriteError(
                f"checkpoint directory {self.directory}: cannot write {path.name}: {error.strerror or error}"
                " (the checkpoints written before are kept)"
            ) from None
        for old in checkpoints(self.directory)[self.keep :]:
            old.unlink(missing_ok=True)
        self._written = events
        self.mark(events)
        self.pauses.append(time.perf_counter() - start)
        if self.on_write is not None:
            self.on_write(self._sequence, data, extra)
        return path

    def check_room(self, model: Any, runner_state: dict) -> None:
        """In a directory without a checkpoint yet, refuse (CheckpointError) to start without room for ``keep + 1``
        checkpoints of ``model`` and ``runner_state``, the state the run starts with (its first one's size)."""
        if not checkpoints(self.directory):
            size = len(checkpoint_bytes({"model": model, "runner": runner_state}, self.manifest, self.key))
            _check_free_space(self.directory, size, [], self.keep)

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


def _check_free_space(directory: Path, size: int, sizes: list[int], keep: int) -> None:
    """Refuse (CheckpointError) to start when ``directory`` lacks room for ``keep + 1`` checkpoints of ``size``
    bytes, less the room its checkpoints of ``sizes`` bytes (newest first) already take."""
    needed = max(size, (keep + 1) * size - sum(sizes[:keep]))
    free = shutil.disk_usage(directory).free
    if free < needed:
        raise CheckpointError(
            f"checkpoint directory {directory} has {free} bytes free; its checkpoints need {needed} more "
            f"(keep + 1 = {keep + 1} files of about {size} bytes: a new one is written before the oldest "
            "is removed)"
        )


def describe(path: str | Path, key: bytes | None = None) -> dict:
    """The summary ``pegasos-stream inspect`` prints: PATH is a file, or a directory for its newest
    valid checkpoint (the newer files refused are logged); with ``key``, only checkpoints signed with it."""
    path = Path(path)
    if path.is_dir():
        found = latest_valid(path, key=key)
        if found is None:
            raise CheckpointError(f"{path}: no valid checkpoint")
        path, state, manifest = found
    else:
        state, manifest = read_checkpoint(path, key)
    model = state["model"]
    size = _size(getattr(model, "shared", model))  # (a personal learner: its shared learner's, and its users')
    if hasattr(model, "personal_weights"):
        size.update(users=model.users, personal_weights=model.personal_weights)
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


def _size(model: Any) -> dict[str, Any]:
    """How big a learner is: its support vectors, or the weights of every learner it holds (a committee's, a
    mixture's), and a mixture's member weights."""
    if hasattr(model, "n_support"):
        size: dict[str, Any] = {"support_vectors": model.n_support}
    else:
        size = {"weights": sum(_n_weights(learner) for learner in getattr(model, "learners", [model]))}
    if hasattr(model, "member_weights"):
        size["member_weights"] = model.member_weights
    return size


def _n_weights(model: Any) -> int:
    weights = model.weights
    if weights and isinstance(next(iter(weights.values())), dict):  # one dict per class
        return sum(len(row) for row in weights.values())
    return len(weights)
