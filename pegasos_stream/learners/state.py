"""Checking a state rebuilt from a checkpoint as strictly as a configuration: its attributes, their types, ranges,
shapes and finiteness.

Each class a learner's state is made of checks its own attributes in ``_check_state()``, which the state codec
calls once it has rebuilt an object (after the objects that object holds: a learner checks that its parts fit
together, not what each part checks of itself). A learner's settings are checked by its constructor: `new_like`
builds a new learner of the same settings, whose attributes, derived values and parts the rebuilt one must
match. A state that is off is an `InvalidState` naming the class and the attribute, so that a forged or damaged
checkpoint is refused when it is loaded rather than failing later, at a prediction or a step.
"""

from __future__ import annotations

import math
import reprlib
from collections.abc import Collection, Iterable
from typing import Any

import numpy as np

__all__ = [
    "MAX_COUNT",
    "POSITIVE",
    "InvalidState",
    "check_array",
    "check_attributes",
    "check_count",
    "check_equal",
    "check_flag",
    "check_float",
    "check_floats",
    "check_instance",
    "check_list",
    "check_parts",
    "finite_floats",
    "is_count",
    "new_like",
]

#: The largest count (steps, examples) a state may hold: beyond it a count is no longer exact as a float, and no
#: stream is that long.
MAX_COUNT = 2**53
#: The ``low`` of a float that must be > 0.
POSITIVE = math.ulp(0.0)

_shown = reprlib.Repr()
_shown.maxstring = _shown.maxother = 60
_shown.maxlong = 40


class InvalidState(ValueError):
    """A rebuilt state that no learner could have left: the message names the class and the attribute."""


def _fail(obj: object, name: str, expected: str, value: Any) -> InvalidState:
    return InvalidState(f"{type(obj).__name__}.{name}: expected {expected}, got {_shown.repr(value)}")


def _class_default(cls: type, name: str) -> bool:
    """Whether ``cls`` gives ``name`` a plain value, which a state saved before the attribute existed loads with."""
    for klass in cls.__mro__:
        if name in vars(klass):
            value = vars(klass)[name]
            return not (callable(value) or hasattr(value, "__get__"))
    return False


def check_attributes(obj: object, required: Collection[str]) -> None:
    """Refuse a state missing one of ``required`` (unless its class gives it a default) or holding another."""
    present = vars(obj)
    missing = [name for name in required if name not in present and not _class_default(type(obj), name)]
    if missing:
        raise InvalidState(f"{type(obj).__name__}: missing {', '.join(missing)}")
    unknown = sorted(str(name) for name in present if name not in required)
    if unknown:
        raise InvalidState(f"{type(obj).__name__}: unknown attributes {', '.join(unknown)[:200]}")


def new_like(learner: Any) -> Any:
    """A new learner of ``learner``'s class and settings (its ``clone()``), after checking that it holds the
    attributes of one (`check_attributes`): the settings are refused as its constructor refuses them, and must be
    as it keeps them (None for an explicit λ's t0, kept as 0, is refused)."""
    try:
        fresh = type(learner).clone(learner)  # (the class's: an attribute of the state could shadow the method)
    except (ValueError, TypeError, OverflowError, AttributeError) as error:
        raise InvalidState(f"{type(learner).__name__}: settings refused: {error}") from None
    getstate = getattr(fresh, "__getstate__", None)  # (what is saved: caches left out)
    check_attributes(learner, set((getstate() if getstate is not None else vars(fresh)) or ()))
    check_equal(learner, fresh, type(fresh)._get_params(fresh))  # the settings as the constructor keeps them
    return fresh


def check_equal(obj: object, fresh: object, names: Collection[str]) -> None:
    """Refuse a setting, or a value derived from the settings (``names``), that is not ``fresh``'s (a new one of
    those settings): of another type, or another value."""
    for name in names:
        value, expected = getattr(obj, name), getattr(fresh, name)
        if type(value) is not type(expected) or value != expected:
            raise _fail(obj, name, f"{_shown.repr(expected)}, as its settings make it", value)


def _made(part: Any) -> Any:
    """What a part is made as: the name of its class and (a river object) its settings; for a list, each item's."""
    if isinstance(part, list):
        return [_made(item) for item in part]
    settings = getattr(type(part), "_get_params", None)
    return type(part).__name__, settings(part) if settings is not None else None


def check_parts(obj: object, fresh: object, names: Collection[str]) -> None:
    """Refuse a part (an object, or a list of them) that is not of the class and the settings of ``fresh``'s, a
    new one of the same settings (each part has checked its own state)."""
    for name in names:
        made, expected = _made(getattr(obj, name)), _made(getattr(fresh, name))
        if made != expected:
            raise _fail(obj, name, f"the parts its settings make, {_shown.repr(expected)}", made)


def is_count(value: object, low: int = 0, high: int = MAX_COUNT) -> bool:
    """Whether ``value`` is an integer from ``low`` to ``high`` (a bool is no integer)."""
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def check_count(obj: object, name: str, low: int = 0, high: int = MAX_COUNT) -> int:
    """The integer attribute ``name``, refused unless it lies from ``low`` to ``high`` (`is_count`)."""
    value = getattr(obj, name)
    if not is_count(value, low, high):
        raise _fail(obj, name, f"an integer from {low} to {high}", value)
    return value


def check_flag(obj: object, name: str) -> bool:
    """The bool attribute ``name``, refused unless it is one."""
    value = getattr(obj, name)
    if not isinstance(value, bool):
        raise _fail(obj, name, "true or false", value)
    return value


def _finite(value: Any, low: float) -> bool:
    return isinstance(value, float) and math.isfinite(value) and value >= low


def finite_floats(values: Iterable[Any], low: float = -math.inf) -> bool:
    """Whether every one of ``values`` is a finite float from ``low`` on."""
    return all(_finite(value, low) for value in values)


def _from(low: float) -> str:
    """The lower bound ``low`` in a message ("" for none)."""
    if low == -math.inf:
        return ""
    return " > 0" if low == POSITIVE else f" >= {low:g}"


def check_float(obj: object, name: str, low: float = -math.inf, high: float = math.inf) -> float:
    """The float attribute ``name``, refused unless it is a finite float from ``low`` to ``high``."""
    value = getattr(obj, name)
    if not (_finite(value, low) and value <= high):
        bounds = _from(low) if high == math.inf else f" from {low:g} to {high:g}"
        raise _fail(obj, name, f"a finite float{bounds}", value)
    return value


def check_instance(obj: object, name: str, kind: type | tuple[type, ...]) -> Any:
    """The attribute ``name``, refused unless it is an instance of ``kind``."""
    value = getattr(obj, name)
    if not isinstance(value, kind):
        kinds = kind if isinstance(kind, tuple) else (kind,)
        raise _fail(obj, name, " or ".join(k.__name__ for k in kinds), value)
    return value


def check_list(obj: object, name: str, length: int, low: float = -math.inf) -> list[float]:
    """The list attribute ``name``, refused unless it holds ``length`` finite floats from ``low`` on."""
    value = getattr(obj, name)
    if not (isinstance(value, list) and len(value) == length and finite_floats(value, low)):
        raise _fail(obj, name, f"a list of {length} finite floats{_from(low)}", value)
    return value


def check_floats(obj: object, name: str, low: float = -math.inf) -> dict:
    """The dict attribute ``name``, refused unless each value is a finite float from ``low`` on."""
    value = getattr(obj, name)
    if not isinstance(value, dict) or not finite_floats(value.values(), low):
        raise _fail(obj, name, f"a dict of finite floats{_from(low)}", value)
    return value


def check_array(obj: object, name: str, shape: tuple[int, ...], low: float = -math.inf) -> np.ndarray:
    """The float64 array attribute ``name``, refused unless it has ``shape`` (-1: any length) and every value is
    finite and at least ``low``."""
    value = getattr(obj, name)
    fits = isinstance(value, np.ndarray) and value.dtype == np.float64 and value.ndim == len(shape)
    if not fits or any(wanted not in (-1, got) for wanted, got in zip(shape, value.shape)):
        shown = f"an array of {value.dtype} and shape {value.shape}" if isinstance(value, np.ndarray) else value
        raise _fail(obj, name, f"a float64 array of shape {shape}", shown)
    with np.errstate(invalid="ignore"):
        if not (np.isfinite(value).all() and (low == -math.inf or (value >= low).all())):
            raise InvalidState(f"{type(obj).__name__}.{name}: expected finite values{_from(low)}")
    return value
