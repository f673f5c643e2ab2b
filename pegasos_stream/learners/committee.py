"""Pegasos and an AdaGrad logistic regression on one feature pass; the decision is the sum of their margins."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace

import numpy as np
from river import base

from .adagrad import AdaGradLogistic
from .batch import LearnBatch
from .calibration import OnlinePlatt, PlattScaledMargin
from .compiled import calibrate_rows
from .linear import PegasosClassifier
from .rows import Rows
from .state import InvalidState, check_parts, new_like
from .validation import binary_sign, check_sample_weight

__all__ = ["PegasosCommittee"]


class PegasosCommittee(PlattScaledMargin, base.Classifier):
    """A linear SVM trained by Pegasos and a logistic regression trained by AdaGrad, added up.

    Both members learn every example; the decision is the sum of their margins f(x) = f_svm(x) + f_log(x),
    a product of experts. They err differently, so the sum ranks better than either: the SVM's steps
    η = 1/(λ(t + t0)) fall alike for every feature and give a stable, regularised model; the logistic
    regression's per-feature steps keep a rare feature (a new spam campaign's words, the few spam of a
    mostly clean stream) weighty from its first sightings, and its loss learns from every example, not
    only from margin violations. On the spam stress streams (``scripts/models_spam.py``) the sum beats
    each member and every tuned peer on every stream. The probability is an online Platt scaling of the
    sum, as `PegasosClassifier`'s is of its margin.

    Parameters
    ----------
    lambda_
        The SVM's regularisation strength λ > 0 (`PegasosClassifier`).
    t0
        The SVM's step counter offset (`PegasosClassifier`).
    horizon
        The SVM's step counter saturation (`PegasosClassifier`).
    learning_rate
        The logistic regression's step η > 0 (`AdaGradLogistic`).
    n_features
        None for weights in dicts, or both members' weights in arrays of int columns 0..n − 1 (hashed features;
        `PegasosClassifier` and `AdaGradLogistic`).
    initial_accumulator
        The logistic regression's ε > 0 (`AdaGradLogistic`).

    Examples
    --------

    >>> from river import datasets, evaluate, metrics, preprocessing
    >>> from pegasos_stream import PegasosCommittee

    >>> model = preprocessing.StandardScaler() | PegasosCommittee(lambda_=1e-2)
    >>> evaluate.progressive_val_score(datasets.Phishing(), model, metrics.Accuracy() + metrics.ROCAUC())
    Accuracy: 89.28%
    ROCAUC: 95.18%

    """

    # Declared here so that every method sees their types (all are set in __init__).
    svm: PegasosClassifier
    logistic: AdaGradLogistic

    def __init__(
        self,
        lambda_: float = 1e-5,
        t0: int = 30_000,
        horizon: int | None = None,
        learning_rate: float = 0.7,
        n_features: int | None = None,
        initial_accumulator: float = 1e-6,
    ):
        self.lambda_ = lambda_
        self.t0 = t0
        self.horizon = horizon
        self.learning_rate = learning_rate
        self.n_features = n_features
        self.initial_accumulator = initial_accumulator
        self.svm = PegasosClassifier(lambda_=lambda_, t0=t0, horizon=horizon, n_features=n_features)
        self.logistic = AdaGradLogistic(learning_rate, n_features, initial_accumulator)
        self._platt = OnlinePlatt()

    @classmethod
    def _unit_test_params(cls):
        yield {}
        yield {"lambda_": 1e-2, "t0": 10, "horizon": 20, "learning_rate": 0.1, "initial_accumulator": 0.1}

    def _check_state(self) -> None:
        """Refuse (InvalidState) settings the constructor refuses, or members that are not those of these settings,
        at one step count."""
        fresh = new_like(self)
        check_parts(self, fresh, ("svm", "logistic", "_platt"))
        if self.svm.t != self.logistic.t:
            raise InvalidState(f"PegasosCommittee: its members took {self.svm.t} and {self.logistic.t} steps")

    @property
    def t(self) -> int:
        """The number of examples learned (by each member)."""
        return self.svm.t

    @property
    def learners(self) -> list[PegasosClassifier | AdaGradLogistic]:
        """The learners whose weights make the committee."""
        return [self.svm, self.logistic]

    def decision_function_one(self, x: Mapping) -> float:
        """f_svm(x) + f_log(x)."""
        return self.svm.decision_function_one(x) + self.logistic.decision_function_one(x)

    def learn_one(self, x: Mapping, y: base.typing.ClfTarget, w: float = 1.0) -> None:
        sign = binary_sign(y)
        step = self.logistic._prepare(x, sign, 1.0 if w == 1.0 else check_sample_weight(w))
        decision = self.svm._remembered_margins(x)[1] + step.margin  # as decision_function_one gives it
        self.svm.learn_one(x, y, w)  # refused with nothing learned, or learned
        self.logistic._step(x, step)  # then never refused
        self._platt.update(decision, sign > 0)

    def learn_rows(self, batch: LearnBatch, parts: np.ndarray | None = None) -> tuple[int, ValueError | None]:
        """``learn_one`` over the batch's rows from its start, each member in its compiled loop; as
        `PegasosClassifier.learn_rows` (the same arrays, the same stop at a refused row). ``parts``, when
        given (2 × len(rows)), receives the SVM's and the logistic regression's margins of each row learned.

        The logistic regression learns only the rows the SVM learned, and only rows it cannot refuse: a row
        whose features are large enough that its margin or gradient might overflow, or with a feature that is
        no column of its weight arrays, goes through ``learn_one``.
        """
        rows, start, decisions, probas = batch.rows, batch.start, batch.decisions, batch.probas
        n = len(rows)
        if self.n_features is None:
            rows = rows.numbered_locally()  # (dict weights are gathered for the keys the rows use)
            batch = replace(batch, rows=rows)
        columns = self.logistic.columns_of(rows.keys)  # the logistic regression's weight column of each key
        safe = self._safe_rows(rows, batch.weights, columns)
        while start < n:
            end = start + int(np.argmin(safe[start:])) if not safe[start:].all() else n
            if end > start:
                stop, error = self._learn_members(batch.at(start), end, columns, parts)
                if error is not None:
                    self._predict_refused(rows.row(stop), stop, decisions, probas, parts)
                    return stop, error
                start = end
            if start < n:
                x = rows.row(start)
                self._predict_refused(x, start, decisions, probas, parts)
                try:
                    self.learn_one(x, batch.signs[start] > 0, float(batch.weights[start]))
                except ValueError as error:
                    return start, error
                start += 1
        return n, None

    def _safe_rows(self, rows: Rows, weights: np.ndarray, columns: np.ndarray | range | None) -> np.ndarray:
        """Which rows the logistic regression cannot refuse while it learns this batch: their features are
        columns of its weights, |f(x)| is at most η·(t + rows)·‖x‖₁ (no step moves a weight by more than η)
        and a gradient's square at most (c·‖x‖₁)²."""
        foreign = self.logistic.foreign_keys(rows.keys, columns)
        if foreign is not None and foreign.any():
            counts = np.concatenate(([0], np.cumsum(foreign[rows.indices])))
            native = counts[rows.indptr[1:]] == counts[rows.indptr[:-1]]
        else:
            native = np.ones(len(rows), dtype=bool)
        bound = self.logistic.learning_rate * (self.logistic.t + len(rows))
        data = rows.data
        if len(data):  # first the bound for every row at once: max |x_j| times the most non-zeros of a row
            largest = max(float(data.max()), -float(data.min())) * float(np.diff(rows.indptr).max())
            steepest = float(weights.max()) * largest
            if math.isfinite(bound * largest) and math.isfinite(steepest * steepest):
                return native
        with np.errstate(over="ignore", invalid="ignore"):  # an overflow (or inf − inf) only makes rows unsafe
            total = np.concatenate(([0.0], np.cumsum(np.abs(data))))
            l1 = total[rows.indptr[1:]] - total[rows.indptr[:-1]]
            steepest = weights * l1
            return native & np.isfinite(bound * l1) & np.isfinite(steepest * steepest)

    def _learn_members(
        self, batch: LearnBatch, end: int, columns: np.ndarray | range | None, parts: np.ndarray | None
    ) -> tuple[int, ValueError | None]:
        """The SVM's compiled loop over the batch's rows from its start to ``end``, then the logistic regression's
        over the rows the SVM learned (``columns``: its weight column of each key, if known), then the sums of
        their margins (and each, into ``parts``) and their probabilities."""
        start = batch.start
        svm_margins, logistic_margins, member_probas = np.empty(end), np.empty(end), np.empty(end)
        svm_batch = batch.head(end).into(svm_margins, member_probas)
        stop, error = self.svm.learn_rows(svm_batch)
        logistic_batch = svm_batch.into(logistic_margins, np.empty(0)).head(stop)  # (its probabilities unused)
        learned = self.logistic.learn_rows(logistic_batch, columns=columns)
        if learned[1] is not None:  # safe rows only: never seen
            raise RuntimeError(f"the committee's logistic regression refused a safe row: {learned}")
        sums = svm_margins[start:stop] + logistic_margins[start:stop]
        if parts is not None:
            parts[:, start:stop] = svm_margins[start:stop], logistic_margins[start:stop]
        batch.decisions[start:stop] = sums
        calibrate_rows(self._platt, sums, batch.signs[start:stop], batch.probas[start:stop])
        return stop, error

    def _predict_refused(
        self, x: dict, i: int, decisions: np.ndarray, probas: np.ndarray, parts: np.ndarray | None = None
    ) -> None:
        """Row ``i``'s decision and probability (and its members' margins, into ``parts``) before ``learn_one``
        takes it: NaN if a margin is not finite."""
        decisions[i] = probas[i] = np.nan
        if parts is not None:
            parts[:, i] = np.nan
        try:
            margins = self.svm.decision_function_one(x), self.logistic.decision_function_one(x)
        except ValueError:
            return
        decisions[i] = decision = margins[0] + margins[1]
        probas[i] = self._platt.proba(decision)
        if parts is not None:
            parts[:, i] = margins
