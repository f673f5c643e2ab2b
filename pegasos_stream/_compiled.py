"""Whether the compiled modules are in use: the one place that imports them.

The compiled modules, each in the subpackage it serves (``pegasos_stream.learners._loops``,
``pegasos_stream.parse._parse``, ``pegasos_stream.io._blocks``, ``pegasos_stream.features._text``), are optional: an
install without a C compiler has none, and ``PEGASOS_STREAM_PURE_PYTHON=1`` in the environment leaves them unused.
Each is loaded on first use (``from pegasos_stream._compiled import LOOPS``), so that a subpackage that uses its own
loads no other subpackage.
Without them every caller takes its Python code path, the reference the compiled code mirrors bit for bit:
the same models, predictions and errors, more slowly.
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING, Any

__all__ = [
    "BLOCKS",
    "LOOPS",
    "MODULES",
    "NAMES",
    "PARSE",
    "PURE_PYTHON",
    "PURE_PYTHON_VARIABLE",
    "TEXT",
    "describe",
    "in_use",
    "load",
]

#: The environment variable that, set to anything but "" or "0", leaves the compiled modules unused.
PURE_PYTHON_VARIABLE = "PEGASOS_STREAM_PURE_PYTHON"

#: Whether the environment asks for the Python code paths only.
PURE_PYTHON = os.environ.get(PURE_PYTHON_VARIABLE, "") not in ("", "0")

#: The compiled modules of the package.
MODULES = (
    "pegasos_stream.learners._loops",
    "pegasos_stream.parse._parse",
    "pegasos_stream.io._blocks",
    "pegasos_stream.features._text",
)

#: The name each is known by here, and the module: the subpackage that may use it is the one it lies in (or one that
#: may import that subpackage, by the rule of ARCHITECTURE.md).
NAMES = {
    "LOOPS": "pegasos_stream.learners._loops",
    "PARSE": "pegasos_stream.parse._parse",
    "BLOCKS": "pegasos_stream.io._blocks",
    "TEXT": "pegasos_stream.features._text",
}


def load(name: str) -> Any:
    """The compiled module ``name``; None when it is not built (or does not load) or `PURE_PYTHON`."""
    if PURE_PYTHON:
        return None
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


# Each compiled module (or None: its callers then run their Python code), typed by its stub (``_loops.pyi``...):
# LOOPS, the learners' loops; PARSE, the parsers of svmlight and JSON records; BLOCKS, the reading of a file's blocks
# and lines and malloc's setting (``keep_freed_memory``, which the command line sets for a run); TEXT, the reader and
# hashing of ``EmailFeatures(reader="bytes")``. Loaded on first use, by ``__getattr__``.
if TYPE_CHECKING:
    from .features import _text as TEXT
    from .io import _blocks as BLOCKS
    from .learners import _loops as LOOPS
    from .parse import _parse as PARSE
else:

    def __getattr__(name: str) -> Any:
        if name not in NAMES:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        module = globals()[name] = load(NAMES[name])
        return module


def in_use() -> dict[str, bool]:
    """Whether each compiled module is in use, by module name."""
    return {name: load(name) is not None for name in MODULES}


def describe() -> str:
    """One line saying which code runs: the compiled modules, or the Python code paths and why."""
    used = in_use()
    if all(used.values()):
        return "compiled modules in use: " + ", ".join(name.removeprefix("pegasos_stream.") for name in used)
    if PURE_PYTHON:
        return f"pure Python: {PURE_PYTHON_VARIABLE} is set"
    missing = ", ".join(name for name, present in used.items() if not present)
    return f"pure Python, compiled modules not built: {missing}"
