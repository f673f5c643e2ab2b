"""pegasos_stream: a streaming online SVM (Pegasos) for river.

The learners load on first use, so ``import pegasos_stream.run`` or the command line pays only
for what it needs.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .learners import (
        AdaGradLogistic,
        KernelPegasosClassifier,
        NormalizedHinge,
        PegasosClassifier,
        PegasosCommittee,
        PegasosGrid,
        PegasosLogistic,
        PegasosMixture,
        PegasosMulticlass,
    )
    from .persist import load, save

__all__ = [
    "AdaGradLogistic",
    "KernelPegasosClassifier",
    "NormalizedHinge",
    "PegasosClassifier",
    "PegasosCommittee",
    "PegasosGrid",
    "PegasosLogistic",
    "PegasosMixture",
    "PegasosMulticlass",
    "compiled_available",
    "load",
    "save",
]

__version__ = "0.1.0"

_WHERE = {
    "AdaGradLogistic": ".learners",
    "KernelPegasosClassifier": ".learners",
    "NormalizedHinge": ".learners",
    "PegasosClassifier": ".learners",
    "PegasosCommittee": ".learners",
    "PegasosGrid": ".learners",
    "PegasosLogistic": ".learners",
    "PegasosMixture": ".learners",
    "PegasosMulticlass": ".learners",
    "load": ".persist",
    "save": ".persist",
}


def compiled_available() -> bool:
    """Whether the compiled modules are in use. They are not when the install had no C compiler, or when
    ``PEGASOS_STREAM_PURE_PYTHON=1`` is set; the Python code paths then give the same results, more slowly.
    ``pegasos-stream --version`` says which code runs, and why."""
    from ._compiled import in_use

    return all(in_use().values())


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(_WHERE[name], __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
