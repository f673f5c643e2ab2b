"""Which file a source position was taken from, and whether it is still that file.

A file source's position holds the identity of its file (`FileHead.identity`): its resolved path, its size on
disk and the SHA-256 of its first bytes (``HEAD_BYTES`` at most, fewer for a smaller file; of the bytes on disk,
compressed for a gzip file). The same file grown since (a log or an mbox appended to) is still that input;
`changed` says why a file is no longer the one identified: shorter than it was, or other first bytes.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

__all__ = ["HEAD_BYTES", "FileHead", "changed", "check_position"]

#: The bytes at the start of a file whose digest identifies it.
HEAD_BYTES = 1 << 16
#: The counts a source position may hold, each an integer >= 0 below 2**63 (a file's byte offset and line, an
#: mbox's message, the messages of standard input).
_COUNTS = ("offset", "line", "message", "messages")
#: The largest offset or count of a position: what a file offset can be.
_MAX_COUNT = 2**63 - 1


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _MAX_COUNT


def check_position(position: object) -> None:
    """Refuse (ValueError) a saved source position that no source gives: counts that are no integers from 0 to
    2**63 − 1, a maildir's last file that is no path, Kafka offsets that are not [topic, partition, offset]
    (the identity of a file is checked where it is used, `changed`)."""
    if not isinstance(position, dict):
        raise ValueError(f"source position: expected a mapping, got {position!r:.80}")
    for name in _COUNTS:
        if name in position and not _count(position[name]):
            raise ValueError(f"source position: {name}: expected an integer from 0 to {_MAX_COUNT}")
    if not isinstance(position.get("last", ""), (str, type(None))):
        raise ValueError("source position: last: expected the path of a message file")
    offsets = position.get("offsets", [])
    if not isinstance(offsets, list) or not all(_kafka_offset(item) for item in offsets):
        raise ValueError("source position: offsets: expected [topic, partition, offset] triples")


def _kafka_offset(item: object) -> bool:
    """Whether ``item`` is a [topic, partition, next offset] of a Kafka position."""
    return isinstance(item, list) and len(item) == 3 and isinstance(item[0], str) and all(map(_count, item[1:]))


def _digest(data: bytes) -> str:
    import hashlib  # (loads OpenSSL: only a run that reads a file pays for it)

    return hashlib.sha256(data).hexdigest()


def _head(path: str | Path, size: int) -> bytes:
    """The first ``size`` bytes of the file at ``path`` (fewer when it is shorter; none read when ``size`` is 0)."""
    if not size:
        return b""
    with open(path, "rb") as file:
        return file.read(size)


class FileHead:
    """The resolved path of a file, its size and its first bytes, read when a source opens it (none of a file
    that is not a regular one: what is read of a pipe is gone for the source). Their digest is taken when a
    position first asks for it: hashlib loads OpenSSL, which a run that writes no checkpoint never needs."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(Path(path).resolve())
        found = os.stat(path)
        self._size = found.st_size
        self._head = _head(path, HEAD_BYTES if stat.S_ISREG(found.st_mode) else 0)
        self._head_bytes = len(self._head)
        self._head_sha256: str | None = None

    def identity(self, file: BinaryIO) -> dict:
        """The identity a position records, with the size on disk of ``file``, the source's open file (once it is
        closed, the last size seen)."""
        if not file.closed:
            self._size = os.fstat(file.fileno()).st_size
        if self._head_sha256 is None:
            self._head_sha256, self._head = _digest(self._head), b""
        return {"path": self.path, "size": self._size, "head_bytes": self._head_bytes, "head_sha256": self._head_sha256}


def changed(identity: object, path: str | Path) -> str | None:
    """Why the file at ``path`` is no longer the one ``identity`` names (None: it is, grown or not): it is shorter
    than it was, or its first bytes differ. A ValueError for an identity that is not one `FileHead` gives."""
    fields = identity if isinstance(identity, dict) else {}
    size, head_bytes, head_sha256 = fields.get("size"), fields.get("head_bytes"), fields.get("head_sha256")
    if not (isinstance(size, int) and isinstance(head_bytes, int) and 0 <= head_bytes <= HEAD_BYTES):
        raise ValueError(f"not an input identity: {identity!r:.200}")
    now = os.path.getsize(path)
    if now < size:
        return f"it holds {now} bytes, fewer than the {size} it held then"
    if _digest(_head(path, head_bytes)) != head_sha256:
        return f"its first {head_bytes} bytes are not those it held then"
    return None
