"""The learning curve of ``eval --plot``: the prequential error rate, cumulative and over a recent window whose
length follows the run's."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

if TYPE_CHECKING:
    from ..run.evaluation import BinaryReport

__all__ = ["WINDOW_SHARE", "ErrorCurves", "error_curves", "learning_curve", "write_learning_curve"]

#: The recent window is this share of the run (a tenth), one example at least.
WINDOW_SHARE = 10


class ErrorCurves(NamedTuple):
    """The error rates of a run, each example predicted before it was learned."""

    cumulative: np.ndarray  # over examples 1..i, for i = 1..n
    recent: np.ndarray  # over the ``window`` examples up to i, for i = window..n
    window: int


def error_curves(scores: np.ndarray, positives: np.ndarray) -> ErrorCurves:
    """The cumulative and the recent error rate of the predictions ``scores > 0`` of labels ``positives``."""
    errors = (np.asarray(scores, dtype=np.float64) > 0.0) != np.asarray(positives, dtype=bool)
    window = max(1, len(errors) // WINDOW_SHARE)
    counted = np.concatenate([[0], np.cumsum(errors, dtype=np.int64)])
    cumulative = counted[1:] / np.arange(1, len(errors) + 1)
    recent = (counted[window:] - counted[:-window]) / window
    return ErrorCurves(cumulative, recent, window)


def learning_curve(report: BinaryReport, title: str) -> Any:
    """The figure (matplotlib's) of ``report``'s error rates against the number of examples."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = error_curves(report.scores, report.positives)
    examples = len(curves.cumulative)
    figure, axes = plt.subplots(figsize=(8, 4))
    axes.plot(np.arange(1, examples + 1), curves.cumulative, label="cumulative")
    recent_label = f"last {curves.window:,} examples"
    axes.plot(np.arange(curves.window, examples + 1), curves.recent, label=recent_label, alpha=0.8)
    axes.set_title(f"{title}: prequential error rate, {examples:,} examples")
    axes.set_xlabel("examples (each predicted before it is learned)")
    axes.set_ylabel("error rate")
    axes.set_ylim(bottom=0.0)
    axes.legend()
    figure.tight_layout()
    return figure


def write_learning_curve(report: BinaryReport, path: str, title: str) -> None:
    """Write ``report``'s learning curve to the image ``path``, in the format its name ends with (PNG, SVG, PDF...;
    PNG for a name without one)."""
    import matplotlib.pyplot as plt

    figure = learning_curve(report, title)
    try:
        figure.savefig(path, dpi=120, format=None if Path(path).suffix else "png")
    finally:
        plt.close(figure)
