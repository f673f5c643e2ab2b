"""Prequential evaluation: every example is scored before its label is learned."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

import numpy as np


def roc_auc(scores: Sequence[float], positives: Sequence[bool]) -> float:
    """Exact area under the ROC curve (ties count one half); nan without both classes.

    Mann-Whitney: the sum of the positives' tie-averaged ranks, kept doubled so it is an exact integer.
    """
    score_array = np.asarray(scores, dtype=np.float64)
    is_positive = np.asarray(positives, dtype=bool)
    n_pos = int(np.count_nonzero(is_positive))
    n_neg = len(is_positive) - n_pos
    if not n_pos or not n_neg:
        return float("nan")
    order = np.argsort(score_array, kind="stable")
    ordered = score_array[order]
    starts = np.concatenate(([0], np.flatnonzero(ordered[1:] != ordered[:-1]) + 1))
    ends = np.concatenate((starts[1:], [len(ordered)]))
    doubled_ranks = np.repeat(starts + ends + 1, ends - starts)  # 2 × (mean 1-based rank of the tie group)
    doubled_sum = int(doubled_ranks[is_positive[order]].sum())
    return (doubled_sum - n_pos * (n_pos + 1)) / (2.0 * n_pos * n_neg)


@dataclass
class BinaryReport:
    """Running confusion counts and the scores for an exact ROC AUC.

    With ``window`` None every score is kept (a finite replay); otherwise the AUC covers the last
    ``window`` scores, so a long-running job keeps bounded memory and sees recent quality.
    """

    window: int | None = None
    tp: int = 0
    fp: int = 0
    tn: int = 0
    fn: int = 0
    scores: deque[float] = field(default_factory=deque)
    positives: deque[bool] = field(default_factory=deque)

    def __post_init__(self) -> None:
        self.scores = deque(self.scores, maxlen=self.window)
        self.positives = deque(self.positives, maxlen=self.window)

    def update(self, positive: bool, predicted: bool, score: float) -> None:
        if positive:
            self.tp += predicted
            self.fn += not predicted
        else:
            self.fp += predicted
            self.tn += not predicted
        self.scores.append(score)
        self.positives.append(positive)

    def update_many(self, positives: np.ndarray, scores: np.ndarray) -> None:
        """``update`` for each (positive, score > 0, score), in order."""
        predicted = scores > 0.0
        self.tp += int(np.count_nonzero(positives & predicted))
        self.fn += int(np.count_nonzero(positives & ~predicted))
        self.fp += int(np.count_nonzero(~positives & predicted))
        self.tn += int(np.count_nonzero(~positives & ~predicted))
        self.scores.extend(scores.tolist())
        self.positives.extend(positives.tolist())

    @property
    def n(self) -> int:
        return self.tp + self.fp + self.tn + self.fn

    def state(self) -> dict[str, Any]:
        """The counts and the scores kept, JSON-ready (``window`` is configuration, not state)."""
        return {
            "tp": self.tp,
            "fp": self.fp,
            "tn": self.tn,
            "fn": self.fn,
            "scores": list(self.scores),
            "positives": list(self.positives),
        }

    def restore(self, state: Mapping[str, Any]) -> None:
        """Take up a ``state()`` (of a report with any window: the newest ``window`` scores are kept)."""
        self.tp, self.fp, self.tn, self.fn = state["tp"], state["fp"], state["tn"], state["fn"]
        self.scores = deque(state["scores"], maxlen=self.window)
        self.positives = deque(state["positives"], maxlen=self.window)

    def recent_summary(self, last: int = 10_000) -> dict[str, float]:
        """Accuracy so far, and the ROC AUC of the last ``last`` scores (of the ``scored`` last ones,
        when fewer are kept): cheap enough for a stats line."""
        n = self.n
        start = max(0, len(self.scores) - last)
        return {
            "accuracy": (self.tp + self.tn) / n if n else float("nan"),
            "roc_auc": roc_auc(list(islice(self.scores, start, None)), list(islice(self.positives, start, None))),
            "scored": len(self.scores) - start,
        }

    def summary(self) -> dict[str, float]:
        n = self.n
        precision = self.tp / (self.tp + self.fp) if self.tp + self.fp else 0.0
        recall = self.tp / (self.tp + self.fn) if self.tp + self.fn else 0.0
        auc = roc_auc(list(self.scores), list(self.positives))
        return {
            "n": n,
            "accuracy": (self.tp + self.tn) / n if n else float("nan"),
            "f1": 2 * precision * recall / (precision + recall) if precision + recall else 0.0,
            "false_positive_rate": self.fp / (self.fp + self.tn) if self.fp + self.tn else 0.0,
            "roc_auc": auc,
            "one_minus_roca_pct": 100.0 * (1.0 - auc),
        }


@dataclass
class MulticlassReport:
    """Running accuracy of a multiclass learner."""

    correct: int = 0
    n: int = 0

    def update(self, label: object, predicted: object) -> None:
        self.correct += label == predicted
        self.n += 1

    def state(self) -> dict[str, Any]:
        """The counts, JSON-ready."""
        return {"correct": self.correct, "n": self.n}

    def restore(self, state: Mapping[str, Any]) -> None:
        """Take up a ``state()``."""
        self.correct, self.n = state["correct"], state["n"]

    def summary(self) -> dict[str, float]:
        return {"n": self.n, "accuracy": self.correct / self.n if self.n else float("nan")}

    recent_summary = summary
