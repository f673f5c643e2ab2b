"""The ``pegasos-stream`` command line.

The command runs numpy's OpenBLAS with one thread unless ``OPENBLAS_NUM_THREADS`` is set: a stream is learned
an example or a small batch at a time, which never gives its threads work worth sharing, yet each thread it
starts spins on a core for a while when numpy loads, the core the parse helper and the read-ahead use.
"""

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # read by OpenBLAS when numpy first loads, so before that

from .main import main

__all__ = ["main"]
