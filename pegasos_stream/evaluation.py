"""Prequential evaluation: every example is scored before its label is learned."""

from __future__ import annotations

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
    """Running confusion counts plus every score, for an exact ROC AUC at the end."""

    tp: int = 0
    fp: int = 0
    tn: int = 0
    fn: int = 0
    scores: list[float] = field(default_factory=list)
    positives: list[bool] = field(default_factory=list)

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

    def summary(self) -> dict[str, float]:
        n = self.n
        precision = self.tp / (self.tp + self.fp) if self.tp + self.fp else 0.0
        recall = self.tp / (self.tp + self.fn) if self.tp + self.fn else 0.0
        auc = roc_auc(self.scores, self.positives)
        return {
            "n": n,
            "accuracy": (self.tp + self.tn) / n if n else float("nan"),
            "f1": 2 * precision * recall / (precision + recall) if precision + recall else 0.0,
            "false_positive_rate": self.fp / (self.fp + self.tn) if self.fp + self.tn else 0.0,
            "roc_auc": auc,
            "one_minus_roca_pct": 100.0 * (1.0 - auc),
        }
