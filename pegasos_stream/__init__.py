"""Streaming online SVM (Pegasos) for river."""

from .linear import PegasosClassifier
from .multiclass import PegasosMulticlass

__all__ = ["PegasosClassifier", "PegasosMulticlass"]
__version__ = "0.1.0"
