"""Prequential evaluation: every example is scored before its label is learned."""

from __future__ import annotations

from collections import deque
from itertools import islice
from dataclasses import dataclass, field


def roc_auc(scores: list[float], positives: list[bool]) -> float:
    """Exact area under the ROC curve (ties count one half); nan without both classes."""
    n_pos = sum(positives)
    n_neg = len(positives) - n_pos
    if not n_pos or not n_neg:
        return float("nan")
    order = sorted(range(len(scores)), key=scores.__getitem__)
    rank_sum = 0.0  # sum of the (tie-averaged, 1-based) ranks of the positives
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and scores[order[j + 1]] == scores[order[i]]:
            j += 1
        mid_rank = (i + j) / 2.0 + 1.0
        rank_sum += mid_rank * sum(positives[order[k]] for k in range(i, j + 1))
        i = j + 1
    return (rank_sum - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg)


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
    scores: deque = field(default_factory=deque)
    positives: deque = field(default_factory=deque)

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

    @property
    def n(self) -> int:
        return self.tp + self.fp + self.tn + self.fn

    def recent_summary(self, last: int = 10_000) -> dict[str, float]:
        """Accuracy so far and the ROC AUC of the last ``last`` scores: cheap enough for a stats line."""
        n = self.n
        start = max(0, len(self.scores) - last)
        return {
            "accuracy": (self.tp + self.tn) / n if n else float("nan"),
            "roc_auc": roc_auc(list(islice(self.scores, start, None)), list(islice(self.positives, start, None))),
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

    def summary(self) -> dict[str, float]:
        return {"n": self.n, "accuracy": self.correct / self.n if self.n else float("nan")}

    recent_summary = summary
