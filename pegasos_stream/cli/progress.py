"""The progress bar of ``eval`` on a terminal (tqdm), with the package's log lines written above it."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator
from typing import Any, TextIO

from ..io.sources import Source
from ..run.runner import RunStats

__all__ = ["BAR_FORMAT", "ProgressBar"]

#: The share of the input read, the events processed (the count a statistics line gives), the bytes read of the
#: input's size, the time taken and left, and the rate of events.
BAR_FORMAT = "{percentage:3.0f}%|{bar}| {n_fmt} events{postfix} [{elapsed}<{remaining}, {rate_fmt}]"

#: The bar redraws at most this often (seconds); a log line redraws it at once.
REDRAW_SECONDS = 0.5

#: The size of a terminal that gives none (the bar follows the terminal's width otherwise).
COLUMNS, ROWS = 100, 24

MIB = 2**20


class ProgressBar:
    """On a terminal, a bar on ``stream`` (stderr) of an input of known size: it counts the events processed,
    fills as the input is read, and says the bytes read, the rate and the time left. While it is ``shown``, the
    package's log lines (the statistics line, rejections) go above it, and it redraws below them.

    It counts events; its total is an estimate, the events so far over the share of the input read, so that it
    fills as that share grows and the rate and the time left are tqdm's own."""

    def __init__(self, stats: RunStats, source: Source, stream: TextIO | None = None) -> None:
        self._stats = stats
        stream = stream or sys.stderr
        self._bar = _bar(stream) if stream.isatty() and source.progress() is not None else None

    def __call__(self, source: Source) -> None:
        """Bring the bar to the events processed and the input read so far."""
        progress = source.progress()
        if self._bar is None or progress is None:
            return
        done, size = progress
        events = self._stats.events
        if done:
            self._bar.total = max(events, round(events * size / done))
        self._bar.set_postfix_str(f"{done / MIB:,.1f}/{size / MIB:,.1f} MiB", refresh=False)
        self._bar.update(events - self._bar.n)

    @contextlib.contextmanager
    def shown(self) -> Iterator[None]:
        """While the run lasts, the package's log lines go above the bar; the bar is closed after it, left on
        the terminal at its last count."""
        if self._bar is None:
            yield
            return
        from tqdm.contrib.logging import logging_redirect_tqdm

        try:
            with logging_redirect_tqdm([logging.getLogger("pegasos_stream")]):
                yield
        finally:
            self._bar.close()


def _bar(stream: TextIO) -> Any:
    """A tqdm bar on ``stream``, at no event yet (tqdm is imported only then: it loads ``importlib.metadata``,
    and with it the email and zip packages, which a run off a terminal does without)."""
    from tqdm import tqdm

    size = {"dynamic_ncols": True} if _sized(stream) else {"ncols": COLUMNS, "nrows": ROWS}
    return tqdm(file=stream, unit=" events", bar_format=BAR_FORMAT, mininterval=REDRAW_SECONDS, **size)


def _sized(stream: TextIO) -> bool:
    """Whether the terminal ``stream`` writes to gives its size (a pseudo-terminal never sized gives 0 × 0, in
    which tqdm would draw nothing)."""
    try:
        return all(os.get_terminal_size(stream.fileno()))
    except (OSError, ValueError):
        return False
