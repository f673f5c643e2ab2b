"""Helper threads that run a stream's work beside the thread that learns: one per kind of work, started on first use,
and none when the process has one core to run on."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

__all__ = ["helper_thread"]

_threads: dict[str, ThreadPoolExecutor] = {}  # by name


def helper_thread(name: str) -> ThreadPoolExecutor | None:
    """The helper thread ``name`` (its own work queue), or None when this process has one core to run on."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if cores < 2:
        return None
    if name not in _threads:
        _threads[name] = ThreadPoolExecutor(1, thread_name_prefix=name)
    return _threads[name]
