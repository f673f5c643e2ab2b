"""Utilities for testing and benchmarking (they import nothing else of the package)."""
