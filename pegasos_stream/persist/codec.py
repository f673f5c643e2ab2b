"""Learner state as JSON plus numeric arrays: a safe, exact replacement for pickle.

``encode(obj)`` turns a learner (or any object built from the classes in ``REGISTRY``, plain
containers, numbers, strings and numpy arrays) into a JSON-ready tree and a dict of float arrays;
``decode`` rebuilds it. Nothing but the listed classes can be created, and no code is run: the
classes are rebuilt from their attributes. Floats survive bit for bit (JSON keeps ``repr``, arrays
keep their bytes), and so do feature keys of every type river uses: str, int, float, bool, None
and tuples of these. A class that defines ``_check_state()`` has it called on each object rebuilt (after the
objects it holds): a state that is off raises there, a ValueError, and the object is never handed out.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["REGISTRY", "StateError", "decode", "encode", "register", "register_learners"]

#: The classes ``decode`` may rebuild, by name: nothing else is ever created from a state.
REGISTRY: dict[str, type[object]] = {}


def register(*classes: type) -> None:
    """Let ``encode``/``decode`` save and rebuild objects of ``classes`` (from their attributes, or
    ``__getstate__``/``__setstate__``); a name already taken by another class is refused."""
    for cls in classes:
        taken = REGISTRY.setdefault(cls.__name__, cls)
        if taken is not cls:
            raise ValueError(f"{cls.__qualname__}: the name {cls.__name__!r} is registered to {taken.__qualname__}")


#: Dicts of at least this many float values go to an array rather than into the JSON.
_ARRAY_MIN = 32


class StateError(ValueError):
    """A state that cannot be encoded or decoded."""


def _key(key: Any) -> Any:
    """A dict key as JSON: strings as they are, everything else tagged."""
    if isinstance(key, str):
        return key
    if isinstance(key, bool):
        return ["b", key]
    if isinstance(key, int):
        return ["i", str(key)]
    if isinstance(key, float):
        return ["f", repr(key)]
    if key is None:
        return ["n"]
    if isinstance(key, tuple):
        return ["t", [_key(item) for item in key]]
    raise StateError(f"a feature key of type {type(key).__name__} cannot be saved: {key!r}")


def _unkey(encoded: Any) -> Any:
    if isinstance(encoded, str):
        return encoded
    tag = encoded[0]
    if tag == "b":
        return bool(encoded[1])
    if tag == "i":
        return int(encoded[1])
    if tag == "f":
        return float(encoded[1])
    if tag == "n":
        return None
    if tag == "t":
        return tuple(_unkey(item) for item in encoded[1])
    raise StateError(f"unknown key tag {tag!r}")


class _Encoder:
    def __init__(self) -> None:
        self.arrays: dict[str, np.ndarray] = {}

    def _array(self, values: np.ndarray) -> str:
        name = f"a{len(self.arrays)}"
        self.arrays[name] = values
        return name

    def __call__(self, obj: Any) -> Any:
        if obj is None or isinstance(obj, (bool, str, int, float)):
            return _scalar(obj)
        if isinstance(obj, np.generic):
            return self(obj.item())
        if isinstance(obj, np.ndarray):
            if obj.dtype.kind not in "fiub":
                raise StateError(f"an array of dtype {obj.dtype} cannot be saved")
            return {"array": self._array(obj)}
        if isinstance(obj, (list, tuple)):
            return {"list" if isinstance(obj, list) else "tuple": [self(item) for item in obj]}
        if isinstance(obj, dict):
            return self._dict(obj)
        return self._object(obj)

    def _dict(self, obj: dict[Any, Any]) -> dict[str, Any]:
        """A dict as its tagged keys and its values: the values in an array when they are many floats."""
        keys = [_key(key) for key in obj]
        values = list(obj.values())
        if len(values) >= _ARRAY_MIN and all(type(value) is float for value in values):
            return {"keys": keys, "floats": self._array(np.array(values, dtype=np.float64))}
        return {"keys": keys, "values": [self(value) for value in values]}

    def _object(self, obj: object) -> dict[str, Any]:
        """An object of a registered class as its class name and its attributes (or ``__getstate__``)."""
        name = type(obj).__name__
        if REGISTRY.get(name) is not type(obj):
            raise StateError(f"an object of type {name} cannot be saved")
        getstate = getattr(obj, "__getstate__", None)
        state = (getstate() if getstate is not None else obj.__dict__) or {}
        return {"object": name, "attributes": self(dict(state))}


def _scalar(obj: bool | str | int | float | None) -> Any:
    """None, a bool, a string or a float as JSON has it; an int (of any size) and a float JSON has not
    (inf, nan) tagged."""
    if isinstance(obj, int) and not isinstance(obj, bool):
        return {"int": str(obj)}
    if isinstance(obj, float) and not math.isfinite(obj):
        return {"float": repr(obj)}
    return obj


@functools.cache
def register_learners() -> tuple[type, ...]:
    """The package's learners, with every class of their states registered (on the first ``encode`` or ``decode``:
    importing the codec loads no learner, so a run that saves nothing imports its own learner only)."""
    from .. import learners

    register(*learners.STATE_CLASSES)
    return learners.LEARNERS


def encode(obj: Any) -> tuple[Any, dict[str, np.ndarray]]:
    """(JSON-ready tree, named arrays) of ``obj``."""
    register_learners()
    encoder = _Encoder()
    return encoder(obj), encoder.arrays


def decode(tree: Any, arrays: dict[str, np.ndarray]) -> Any:
    """The object that ``encode`` turned into ``tree`` and ``arrays``."""
    register_learners()
    return _decode(tree, arrays)


def _decode(tree: Any, arrays: dict[str, np.ndarray]) -> Any:
    if tree is None or isinstance(tree, (bool, str, float, int)):
        return tree
    if isinstance(tree, dict):
        for tag, rebuild in _NODES.items():
            if tag in tree:
                return rebuild(tree, arrays)
    raise StateError(f"unexpected state node {tree!r:.80}")


def _decode_dict(tree: dict[str, Any], arrays: dict[str, np.ndarray]) -> dict[Any, Any]:
    """The dict of a ``keys`` node: its values from the node's ``floats`` array or its ``values`` list."""
    keys = [_unkey(key) for key in tree["keys"]]
    if "floats" in tree:
        values = arrays[tree["floats"]].tolist()
    else:
        values = [_decode(value, arrays) for value in tree["values"]]
    if len(keys) != len(values):
        raise StateError("a dict's keys and values differ in number")
    return dict(zip(keys, values))


def _decode_object(tree: dict[str, Any], arrays: dict[str, np.ndarray]) -> object:
    """The object of an ``object`` node: a registered class given its attributes, then checked."""
    cls = REGISTRY.get(tree["object"])
    if cls is None:
        raise StateError(f"an object of type {tree['object']!r} cannot be loaded")
    obj = cls.__new__(cls)
    attributes = _decode(tree["attributes"], arrays)
    if not isinstance(attributes, dict) or not all(isinstance(name, str) for name in attributes):
        raise StateError(f"the attributes of a {tree['object']} are not named")
    setstate = getattr(cls, "__setstate__", None)
    if setstate is not None:
        setstate(obj, attributes)
    else:
        obj.__dict__.update(attributes)
    check = getattr(cls, "_check_state", None)
    if check is not None:
        check(obj)
    return obj


#: How ``decode`` rebuilds a dict node, by the first of these tags it holds.
_NODES: dict[str, Callable[[dict[str, Any], dict[str, np.ndarray]], Any]] = {
    "int": lambda tree, arrays: int(tree["int"]),
    "float": lambda tree, arrays: float(tree["float"]),
    "array": lambda tree, arrays: np.array(arrays[tree["array"]]),
    "list": lambda tree, arrays: [_decode(item, arrays) for item in tree["list"]],
    "tuple": lambda tree, arrays: tuple(_decode(item, arrays) for item in tree["tuple"]),
    "keys": _decode_dict,
    "object": _decode_object,
}
