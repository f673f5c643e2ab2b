"""The learners: linear, multiclass and kernel Pegasos, an AdaGrad logistic regression, Pegasos on the logistic
loss, the hinge loss by normalized adaptive steps, their grid, committee and mixture, and the parts they are made
of.

Nothing here knows about files, streams or the command line. Each module loads on first use, so a run of
one learner imports that learner only.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .adagrad import AdaGradLogistic
    from .committee import PegasosCommittee
    from .grid import PegasosGrid
    from .kernel import KernelPegasosClassifier
    from .linear import PegasosClassifier
    from .logistic_pegasos import PegasosLogistic
    from .mixture import PegasosMixture
    from .multiclass import PegasosMulticlass
    from .normalized_hinge import NormalizedHinge
    from .personal import PersonalPegasos

    LEARNERS: tuple[type, ...]
    STATE_CLASSES: tuple[type, ...]

__all__ = [
    "LEARNERS",
    "STATE_CLASSES",
    "AdaGradLogistic",
    "KernelPegasosClassifier",
    "NormalizedHinge",
    "PegasosClassifier",
    "PegasosCommittee",
    "PegasosGrid",
    "PegasosLogistic",
    "PegasosMixture",
    "PegasosMulticlass",
    "PersonalPegasos",
]

#: The module of each class this package exports (and of the classes of a learner's state).
_WHERE = {
    "AdaGradLogistic": ".adagrad",
    "OnlinePlatt": ".calibration",
    "PegasosCommittee": ".committee",
    "PegasosGrid": ".grid",
    "KernelPegasosClassifier": ".kernel",
    "RBF": ".kernels",
    "Linear": ".kernels",
    "Polynomial": ".kernels",
    "PegasosClassifier": ".linear",
    "PegasosLogistic": ".logistic_pegasos",
    "Members": ".members",
    "PegasosMixture": ".mixture",
    "PegasosMulticlass": ".multiclass",
    "NormalizedHinge": ".normalized_hinge",
    "PersonalOffset": ".personal_offset",
    "PersonalPegasos": ".personal",
    "SupportVectorStore": ".svstore",
    "DenseWeightVector": ".weights",
    "SharedScaleWeights": ".weights",
    "WeightVector": ".weights",
}

#: The learners of this package (LEARNERS).
_LEARNERS = (
    "PegasosClassifier",
    "PegasosGrid",
    "PegasosCommittee",
    "PegasosMixture",
    "AdaGradLogistic",
    "PegasosLogistic",
    "NormalizedHinge",
    "PegasosMulticlass",
    "KernelPegasosClassifier",
    "PersonalPegasos",
)
#: LEARNERS; STATE_CLASSES, every class a learner's state is made of (its attributes are plain data or objects
#: of these).
_GROUPS = {
    "LEARNERS": _LEARNERS,
    "STATE_CLASSES": (
        *_LEARNERS,
        "Members",
        "PersonalOffset",
        "WeightVector",
        "DenseWeightVector",
        "SharedScaleWeights",
        "OnlinePlatt",
        "SupportVectorStore",
        "Linear",
        "Polynomial",
        "RBF",
    ),
}


def __getattr__(name: str) -> Any:
    if name in _GROUPS:
        value: Any = tuple(__getattr__(member) for member in _GROUPS[name])
    elif name in _WHERE:
        value = getattr(import_module(_WHERE[name], __name__), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
