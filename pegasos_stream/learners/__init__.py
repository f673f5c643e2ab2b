"""The learners: linear, multiclass and kernel Pegasos, an AdaGrad logistic regression, their grid and
committee, and the parts they are made of.

Nothing here knows about files, streams or the command line.
"""

from .adagrad import AdaGradLogistic
from .calibration import OnlinePlatt
from .committee import PegasosCommittee
from .grid import PegasosGrid
from .kernel import KernelPegasosClassifier
from .kernels import RBF, Linear, Polynomial
from .linear import PegasosClassifier
from .multiclass import PegasosMulticlass
from .svstore import SupportVectorStore
from .weights import DenseWeightVector, SharedScaleWeights, WeightVector

__all__ = [
    "LEARNERS",
    "STATE_CLASSES",
    "AdaGradLogistic",
    "KernelPegasosClassifier",
    "PegasosClassifier",
    "PegasosCommittee",
    "PegasosGrid",
    "PegasosMulticlass",
]

#: The learners of this package.
LEARNERS = (
    PegasosClassifier,
    PegasosGrid,
    PegasosCommittee,
    AdaGradLogistic,
    PegasosMulticlass,
    KernelPegasosClassifier,
)

#: Every class a learner's state is made of (its attributes are plain data or objects of these).
STATE_CLASSES = (
    *LEARNERS,
    WeightVector,
    DenseWeightVector,
    SharedScaleWeights,
    OnlinePlatt,
    SupportVectorStore,
    Linear,
    Polynomial,
    RBF,
)
