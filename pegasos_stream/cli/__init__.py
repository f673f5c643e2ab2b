"""The ``pegasos-stream`` command line."""

from .main import main

__all__ = ["main"]
