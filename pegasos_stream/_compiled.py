"""Whether the compiled modules are in use: the one place that imports them.

The compiled modules (``pegasos_stream._fast``, ``pegasos_stream.features._text``) are optional: an install
without a C compiler has neither, and ``PEGASOS_STREAM_PURE_PYTHON=1`` in the environment leaves them unused.
Without them every caller takes its Python code path, the reference the compiled code mirrors bit for bit:
the same models, predictions and errors, more slowly.
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING, Any

__all__ = ["FAST", "MODULES", "PURE_PYTHON", "PURE_PYTHON_VARIABLE", "describe", "in_use", "load"]

#: The environment variable that, set to anything but "" or "0", leaves the compiled modules unused.
PURE_PYTHON_VARIABLE = "PEGASOS_STREAM_PURE_PYTHON"

#: Whether the environment asks for the Python code paths only.
PURE_PYTHON = os.environ.get(PURE_PYTHON_VARIABLE, "") not in ("", "0")

#: The compiled modules of the package.
MODULES = ("pegasos_stream._fast", "pegasos_stream.features._text")


def load(name: str) -> Any:
    """The compiled module ``name``; None when it is not built (or does not load) or `PURE_PYTHON`."""
    if PURE_PYTHON:
        return None
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


#: The compiled module of the learners and the parsers, or None (its callers then run their Python code); typed by its
#: stub, ``_fast.pyi``.
if TYPE_CHECKING:
    from . import _fast as FAST
else:
    FAST = load("pegasos_stream._fast")


def in_use() -> dict[str, bool]:
    """Whether each compiled module is in use, by module name."""
    return {name: load(name) is not None for name in MODULES}


def describe() -> str:
    """One line saying which code runs: the compiled modules, or the Python code paths and why."""
    used = in_use()
    if all(used.values()):
        return "compiled modules in use"
    if PURE_PYTHON:
        return f"pure Python: {PURE_PYTHON_VARIABLE} is set"
    missing = ", ".join(name for name, present in used.items() if not present)
    return f"pure Python, compiled modules not built: {missing}"
