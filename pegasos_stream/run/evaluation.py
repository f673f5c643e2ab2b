"""Prequential evaluation: every example is scored before its label is learned."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..learners.state import is_count

#: Positives compared at a time by ``roc_auc``.
RANK_CHUNK = 1 << 16


def check_report(state: object, multiclass: bool) -> None:
    """Refuse (ValueError) a saved report (``state()``) that a learner's report could not take up: a multiclass
    report's for a binary learner or the reverse, counts that are no integers >= 0, or not a float score and a
    bool for each example kept."""
    counts = ("correct", "n") if multiclass else ("tp", "fp", "tn", "fn")
    fields = set(counts) if multiclass else {*counts, "scores", "positives"}
    if not isinstance(state, dict) or set(state) != fields:
        kind = "multiclass" if multiclass else "binary"
        raise ValueError(f"report: expected {', '.join(sorted(fields))} (the report of a {kind} learner)")
    if not all(is_count(state[name]) for name in counts) or (multiclass and state["correct"] > state["n"]):
        raise ValueError(f"report: expected {', '.join(counts)} to be integers >= 0" + (", correct <= n" * multiclass))
    if not multiclass and not _is_score_log(state["scores"], state["positives"]):
        raise ValueError("report: expected a float score and a bool label for each example kept")


def _is_score_log(scores: object, positives: object) -> bool:
    """Whether a saved binary report keeps a float score and a bool label for each example: two lists alike long."""
    return (
        isinstance(scores, list)
        and isinstance(positives, list)
        and len(scores) == len(positives)
        and all(type(score) is float for score in scores)
        and all(type(positive) is bool for positive in positives)
    )


def roc_auc(scores: np.ndarray | Sequence[float], positives: np.ndarray | Sequence[bool]) -> float:
    """Exact area under the ROC curve (ties count one half); nan without both classes.

    Mann-Whitney: 2U counts, for each positive, twice the negatives below it and once those tied with it, an
    exact integer: left + right of its place among the sorted negatives' scores (searched a chunk of
    positives at a time, so a sorted copy of the negatives' scores is the memory it takes). A NaN score
    ranks above every other and ties with none, in the order of the scores (as a stable sort leaves it).
    """
    score_array = np.asarray(scores, dtype=np.float64)
    is_positive = np.asarray(positives, dtype=bool)
    n_pos = int(np.count_nonzero(is_positive))
    n_neg = len(is_positive) - n_pos
    if not n_pos or not n_neg:
        return float("nan")
    nan = np.isnan(score_array)
    finite_negative = np.logical_or(is_positive, nan)
    np.logical_not(finite_negative, out=finite_negative)
    negatives = score_array[finite_negative]
    negatives.sort()  # (in place: the copy is the one array of the negatives' scores)
    del finite_negative
    doubled_u = 0
    for start in range(0, len(score_array), RANK_CHUNK):
        chunk = slice(start, start + RANK_CHUNK)
        part = np.sort(score_array[chunk][is_positive[chunk] & ~nan[chunk]])  # (sorted: each search starts on)
        doubled_u += int(np.searchsorted(negatives, part, side="left").sum())
        doubled_u += int(np.searchsorted(negatives, part, side="right").sum())
    if nan.any():  # a NaN positive wins over every finite negative and the NaN negatives before it
        positive_nan = is_positive[nan]
        negatives_before = np.cumsum(~positive_nan) - ~positive_nan
        doubled_u += 2 * int((len(negatives) + negatives_before[positive_nan]).sum())
    return doubled_u / (2.0 * n_pos * n_neg)


@dataclass(frozen=True)
class AucComparison:
    """Two score runs' ROC AUCs on the same examples and the standard error of their difference (DeLong)."""

    auc_a: float
    auc_b: float
    standard_error: float

    @property
    def difference(self) -> float:
        """AUC(a) − AUC(b)."""
        return self.auc_a - self.auc_b

    def interval(self, z: float = 1.959963984540054) -> tuple[float, float]:
        """The difference ± z standard errors (z for 95% by default)."""
        return self.difference - z * self.standard_error, self.difference + z * self.standard_error


def compare_roc_auc(
    scores_a: np.ndarray | Sequence[float],
    scores_b: np.ndarray | Sequence[float],
    positives: np.ndarray | Sequence[bool],
) -> AucComparison:
    """Two runs' scores of the same examples compared by ROC AUC, with DeLong, DeLong & Clarke-Pearson's (1988)
    paired standard error of the difference, which counts the examples as a sample and the scores as given.

    Each positive's placement is the share of negatives it outscores (a tie half), each negative's the share of
    positives that outscore it; an AUC is the mean of either. The variance of AUC(a) − AUC(b) is that of the
    difference of the two runs' placements, over the positives ÷ their count plus over the negatives ÷ theirs.
    Refuses (ValueError) a score that is not finite, runs of other lengths than the labels, or fewer than two
    examples of a class.
    """
    is_positive = np.asarray(positives, dtype=bool)
    runs = [np.asarray(scores, dtype=np.float64) for scores in (scores_a, scores_b)]
    if any(run.shape != is_positive.shape for run in runs):
        raise ValueError("compare_roc_auc: expected one score of each run per label")
    if not all(np.isfinite(run).all() for run in runs):
        raise ValueError("compare_roc_auc: expected finite scores")
    if min(np.count_nonzero(is_positive), np.count_nonzero(~is_positive)) < 2:
        raise ValueError("compare_roc_auc: expected at least two examples of each class")
    placements = [_placements(run[is_positive], run[~is_positive]) for run in runs]
    variance = 0.0
    for side in (0, 1):  # the positives' placements, then the negatives'
        difference = placements[0][side] - placements[1][side]
        variance += float(np.var(difference, ddof=1)) / len(difference)
    auc_a, auc_b = (float(np.mean(positive)) for positive, _ in placements)
    return AucComparison(auc_a, auc_b, float(np.sqrt(variance)))


def _placements(positive: np.ndarray, negative: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The share of negatives each positive outscores and of positives that outscore each negative, a tie half."""
    negatives, positives = np.sort(negative), np.sort(positive)
    below = np.searchsorted(negatives, positive, side="left") + np.searchsorted(negatives, positive, side="right")
    not_above = np.searchsorted(positives, negative, side="left") + np.searchsorted(positives, negative, side="right")
    return below / (2.0 * len(negatives)), 1.0 - not_above / (2.0 * len(positives))


class ScoreLog:
    """Scores and their labels, in order, the newest ``window`` of them (every one for None): float64 and bool
    arrays grown by doubling, 9 bytes an example (a deque of Python floats takes about 40)."""

    def __init__(self, window: int | None = None) -> None:
        self.window = window
        self._scores = np.empty(0, dtype=np.float64)
        self._positives = np.empty(0, dtype=bool)
        self._end = 0  # entries filled; those kept are the last ``window`` of them

    def __len__(self) -> int:
        return self._end if self.window is None else min(self._end, self.window)

    @property
    def scores(self) -> np.ndarray:
        """The scores kept, oldest first (a view: copy it to keep it)."""
        return self._scores[self._end - len(self) : self._end]

    @property
    def positives(self) -> np.ndarray:
        """Whether each score kept belongs to a positive (a view, as ``scores``)."""
        return self._positives[self._end - len(self) : self._end]

    def extend(self, scores: np.ndarray | Sequence[float], positives: np.ndarray | Sequence[bool]) -> None:
        """Append scores and their labels, in order."""
        scores, positives = np.asarray(scores, dtype=np.float64), np.asarray(positives, dtype=bool)
        if self.window is not None and len(scores) > self.window:
            first = len(scores) - self.window
            scores, positives = scores[first:], positives[first:]
        if self._end + len(scores) > len(self._scores):
            self._make_room(len(scores))
        self._scores[self._end : self._end + len(scores)] = scores
        self._positives[self._end : self._end + len(scores)] = positives
        self._end += len(scores)

    def append(self, score: float, positive: bool) -> None:
        """Append one score and its label."""
        if self._end == len(self._scores):
            self._make_room(1)
        self._scores[self._end] = score
        self._positives[self._end] = positive
        self._end += 1

    def _make_room(self, more: int) -> None:
        """Move the entries kept to the front of arrays with room for ``more`` and as many again."""
        kept_scores, kept_positives = self.scores, self.positives
        capacity = max(2 * (len(kept_scores) + more), 1024)
        self._scores, self._positives = np.empty(capacity, dtype=np.float64), np.empty(capacity, dtype=bool)
        self._scores[: len(kept_scores)] = kept_scores
        self._positives[: len(kept_scores)] = kept_positives
        self._end = len(kept_scores)


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
    log: ScoreLog = field(init=False)

    def __post_init__(self) -> None:
        self.log = ScoreLog(self.window)

    @property
    def scores(self) -> np.ndarray:
        """The scores kept, oldest first."""
        return self.log.scores

    @property
    def positives(self) -> np.ndarray:
        """Whether each score kept belongs to a positive."""
        return self.log.positives

    def update(self, positive: bool, predicted: bool, score: float) -> None:
        if positive:
            self.tp += predicted
            self.fn += not predicted
        else:
            self.fp += predicted
            self.tn += not predicted
        self.log.append(score, positive)

    def update_many(self, positives: np.ndarray, scores: np.ndarray) -> None:
        """``update`` for each (positive, score > 0, score), in order."""
        predicted = scores > 0.0
        self.tp += int(np.count_nonzero(positives & predicted))
        self.fn += int(np.count_nonzero(positives & ~predicted))
        self.fp += int(np.count_nonzero(~positives & predicted))
        self.tn += int(np.count_nonzero(~positives & ~predicted))
        self.log.extend(scores, positives)

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
            "scores": self.scores.tolist(),
            "positives": self.positives.tolist(),
        }

    def restore(self, state: Mapping[str, Any]) -> None:
        """Take up a ``state()`` (of a report with any window: the newest ``window`` scores are kept)."""
        self.tp, self.fp, self.tn, self.fn = state["tp"], state["fp"], state["tn"], state["fn"]
        self.log = ScoreLog(self.window)
        self.log.extend(state["scores"], state["positives"])

    def recent_summary(self, last: int = 10_000) -> dict[str, float]:
        """Accuracy so far, and the ROC AUC of the last ``last`` scores (of the ``scored`` last ones,
        when fewer are kept): cheap enough for a stats line."""
        n = self.n
        scores, positives = self.scores[-last:], self.positives[-last:]
        return {
            "accuracy": (self.tp + self.tn) / n if n else float("nan"),
            "roc_auc": roc_auc(scores, positives),
            "scored": len(scores),
        }

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


class UserReports:
    """A `BinaryReport` per user, every score kept (a finite replay): how the model does on each user's mail."""

    def __init__(self) -> None:
        self._reports: dict[str, BinaryReport] = {}

    def __len__(self) -> int:
        return len(self._reports)

    def update(self, user: str | None, positive: bool, score: float) -> None:
        """Report a labelled prediction of ``user``'s (nothing for an event without a user)."""
        if user is not None:
            self._reports.setdefault(user, BinaryReport()).update(positive, score > 0.0, score)

    def summary(self) -> dict[str, dict[str, float]]:
        """For each user, in order of their first label: n, the positives (spam), accuracy and (1−ROCA)%."""
        return {
            user: {
                "n": report.n,
                "positives": report.tp + report.fn,
                "accuracy": (summary := report.summary())["accuracy"],
                "one_minus_roca_pct": summary["one_minus_roca_pct"],
            }
            for user, report in self._reports.items()
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
