"""Streaming online SVM (Pegasos) for river."""

from .kernel_pegasos import KernelPegasosClassifier
from .linear import PegasosClassifier
from .multiclass import PegasosMulticlass

__all__ = ["KernelPegasosClassifier", "PegasosClassifier", "PegasosMulticlass"]
__version__ = "0.1.0"
