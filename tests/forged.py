"""Forged checkpoints, as someone who can write a checkpoint directory would make them: a checkpoint's manifest
and arrays unpacked, an attribute of its state replaced, and the file packed again under a checksum (or an HMAC)
that matches, so that only what is inside is wrong."""

from __future__ import annotations

import copy
import hashlib
import hmac
import io
import json
from pathlib import Path
from typing import Any

import numpy as np

MAGIC = b"PEGASOS\x00"
#: The magic of a checkpoint that carries an HMAC-SHA256 after its SHA-256.
KEYED_MAGIC = b"PEGASOS\x01"


def unpack(data: bytes) -> tuple[dict, dict[str, np.ndarray]]:
    """(manifest, arrays) of a checkpoint file's bytes, read without the package's loader."""
    header = len(MAGIC) + (64 if data.startswith(KEYED_MAGIC) else 32)
    with np.load(io.BytesIO(data[header:]), allow_pickle=False) as archive:
        arrays = {name: archive[name] for name in archive.files}
    return json.loads(arrays.pop("manifest").tobytes()), arrays


def pack(manifest: Any, arrays: dict[str, np.ndarray], key: bytes | None = None) -> bytes:
    """The bytes of a checkpoint of ``manifest`` and ``arrays`` whose checksum (and, with ``key``, HMAC) match."""
    buffer = io.BytesIO()
    members: dict[str, Any] = {"manifest": np.frombuffer(json.dumps(manifest).encode(), dtype=np.uint8), **arrays}
    np.savez(buffer, **members)
    payload = buffer.getvalue()
    digest = hashlib.sha256(payload).digest()
    if key is None:
        return MAGIC + digest + payload
    return KEYED_MAGIC + digest + hmac.new(key, payload, hashlib.sha256).digest() + payload


def _child(node: dict, name: str | int) -> Any:
    """The value named ``name`` of an encoded object (its attribute) or dict (its key), or item ``name`` of an
    encoded list or tuple."""
    if "list" in node or "tuple" in node:
        return node.get("list", node.get("tuple"))[name]
    mapping = node["attributes"] if "object" in node else node
    return mapping["values"][mapping["keys"].index(name)]


def node(manifest: dict, *path: str | int) -> Any:
    """The encoded value at ``path`` (keys and attribute names) of the manifest's state."""
    found = manifest["state"]
    for name in path:
        found = _child(found, name)
    return found


def edited(manifest: dict, path: tuple[str | int, ...], value: Any = None, drop: bool = False) -> dict:
    """A copy of ``manifest`` with the encoded value at ``path`` replaced by ``value`` (or, with ``drop``, the
    attribute or key removed)."""
    manifest = copy.deepcopy(manifest)
    parent = node(manifest, *path[:-1])
    if isinstance(path[-1], int):
        parent.get("list", parent.get("tuple"))[path[-1]] = value
        return manifest
    mapping = parent["attributes"] if "object" in parent else parent
    at = mapping["keys"].index(path[-1])
    if drop:
        del mapping["keys"][at], mapping["values"][at]
    else:
        mapping["values"][at] = value
    return manifest


def forge(
    source: Path,
    target: Path,
    path: tuple[str | int, ...],
    value: Any = None,
    drop: bool = False,
    key: bytes | None = None,
) -> Path:
    """Write to ``target`` the checkpoint ``source`` with the state's value at ``path`` replaced by ``value`` (an
    encoded value, or a numpy array, stored as an array of its own) or dropped, under a checksum that matches (and,
    with ``key``, an HMAC under it)."""
    manifest, arrays = unpack(source.read_bytes())
    if isinstance(value, np.ndarray):
        arrays = {**arrays, "forged": value}
        value = {"array": "forged"}
    target.write_bytes(pack(edited(manifest, path, value, drop), arrays, key))
    return target


def attribute_added(source: Path, target: Path, path: tuple[str | int, ...], name: str, value: Any) -> Path:
    """Write to ``target`` the checkpoint ``source`` with the attribute ``name`` added, encoded ``value``, to the
    object at ``path``."""
    manifest, arrays = unpack(source.read_bytes())
    mapping = node(manifest, *path)["attributes"]
    mapping["keys"].append(name)
    mapping["values"].append(value)
    target.write_bytes(pack(manifest, arrays))
    return target


def rehashed(source: Path, target: Path, change: Any) -> Path:
    """Write to ``target`` the checkpoint ``source`` with ``change(manifest)`` applied to its (JSON) manifest, under a
    checksum that matches."""
    manifest, arrays = unpack(source.read_bytes())
    change(manifest)
    target.write_bytes(pack(manifest, arrays))
    return target
