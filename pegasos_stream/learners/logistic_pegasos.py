"""Pegasos on the logistic loss: L2-regularised logistic regression by stochastic sub-gradient steps."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from functools import partial
from operator import mul
from typing import cast

import numpy as np
from river import base

from .._compiled import LOOPS as _loops
from .adagrad import MAX_EXPONENT
from .batch import LearnBatch, learn_batch
from .calibration import LogisticMargin
from .compiled import Stored, gather, scatter
from .schedule import MAX_NORM, refuse_overflow
from .state import InvalidState, check_count, check_equal, check_parts, new_like
from .validation import binary_sign, check_lambda, check_sample_weight, check_t0, reject_features
from .weights import COMPENSATED_SUM, MIN_SCALE, DenseWeightVector, WeightVector, check_n_features, weight_columns

__all__ = ["PegasosLogistic"]


class PegasosLogistic(LogisticMargin, base.Classifier):
    """Binary logistic regression trained by Pegasos's stochastic sub-gradient steps, with lazily scaled weights.

    Minimises λ/2·‖w‖² + mean of c·log(1 + exp(−y·⟨w, x⟩)), y ∈ {-1, +1}, c the sample weight: Pegasos's method
    and its analysis hold for any convex loss with bounded gradients (Shalev-Shwartz et al., 2011), and this is the
    logistic one. At step t (counting from 1, this example included), with T = t + t0 and η = 1/(λ·T), the example
    moves the weights as w ← (1 − 1/T)·w + η·c·y·σ(−y·f(x))·x, where f(x) = ⟨w, x⟩ is evaluated before the step
    and σ(z) = 1/(1 + e^−z) (1 − 1/T is 1 − ηλ). There is no bias: add a constant feature for one (it is then
    regularised like every weight). The weights are stored as w = s·v, so the shrink is O(1) and a step costs
    O(non-zeros of x); s is folded into v when it falls below 1e-9.

    Parameters
    ----------
    lambda_
        Regularisation strength λ > 0.
    t0
        Start the step counter η uses at t0: η = 1/(λ·(t + t0)). Pegasos's first steps (η = 1/λ, then 1/(2λ), ...)
        let the first examples dominate the weights; an offset tempers them, as the t0 of Bottou's SGD schedule
        does. The objective is the same. With t0 = 0 the first step clears the weights (1 − 1/T = 0).
    n_features
        None for weights in a dict, keyed by any feature name. An integer n keeps them in a float64 array of n
        columns instead, for features that are int columns 0..n − 1 (hashed features, svmlight indices): the
        compiled batch then reads and writes the weights in place. The same stream gives the same floats in either
        layout. Other keys are refused.

    Notes
    -----
    ``predict_proba_one`` is the model's own probability σ(f(x)) (with an algebraic tail beyond |f(x)| = 8, so
    that it is never exactly 0 or 1; see `pegasos_stream.learners.calibration.squash`).

    Examples
    --------

    >>> from river import datasets, evaluate, metrics, preprocessing
    >>> from pegasos_stream import PegasosLogistic

    >>> model = preprocessing.StandardScaler() | PegasosLogistic(lambda_=1e-2)
    >>> evaluate.progressive_val_score(datasets.Phishing(), model, metrics.Accuracy() + metrics.ROCAUC())
    Accuracy: 88.88%
    ROCAUC: 95.23%

    >>> model["PegasosLogistic"].t
    1250

    """

    # Declared here so that every method sees their types (all are set in __init__).
    lambda_: float
    t0: int
    n_features: int | None
    _u: WeightVector | DenseWeightVector
    _t: int

    def __init__(self, lambda_: float = 1e-5, t0: int = 5623, n_features: int | None = None):
        check_lambda(lambda_)
        check_t0(t0)
        first = 1.0 / (float(lambda_) * (int(t0) + 1))
        if not (math.isfinite(first) and first > 0.0):
            raise ValueError(
                f"lambda_={lambda_!r}, t0={t0!r}: the first step 1/(lambda_·(1 + t0)) is {first!r}, expected a finite"
                " number > 0"
            )
        self.lambda_ = float(lambda_)
        self.t0 = int(t0)
        self.n_features = check_n_features(n_features)
        self._u = WeightVector() if self.n_features is None else DenseWeightVector(self.n_features)
        self._t = 0

    @classmethod
    def _unit_test_params(cls):
        yield {}
        yield {"lambda_": 1e-3, "t0": 0}
        yield {"lambda_": 0.05, "t0": 10}

    def _check_state(self) -> None:
        """Refuse (InvalidState) settings the constructor refuses, or a rebuilt state that no sequence of steps
        leaves; the weights have checked their own."""
        fresh = new_like(self)
        check_equal(self, fresh, ("lambda_", "t0", "n_features"))  # as the constructor keeps them
        check_parts(self, fresh, ("_u",))
        if self._u.average or (self.n_features is not None and len(self._u.v) != self.n_features):
            raise InvalidState(f"PegasosLogistic._u: expected weights of n_features={self.n_features}, not averaged")
        check_count(self, "_t")

    @property
    def t(self) -> int:
        """The number of examples learned."""
        return self._t

    @property
    def weights(self) -> dict:
        """w as a dict (a copy; with ``n_features``, the non-zero weights)."""
        return self._u.to_dict()

    def decision_function_one(self, x: Mapping) -> float:
        """The margin f(x) = ⟨w, x⟩."""
        try:
            margin = self._u.dot(x)
        except (TypeError, OverflowError):
            margin = math.nan
        if not math.isfinite(margin):
            reject_features(x)  # names the value that is no finite number, or the largest one
        return margin

    def learn_one(self, x: Mapping, y: base.typing.ClfTarget, w: float = 1.0) -> None:
        sign = binary_sign(y)
        weight = 1.0 if w == 1.0 else check_sample_weight(w)
        margin = self.decision_function_one(x)
        t_eff = self._t + 1 + self.t0
        rate = 1.0 / (self.lambda_ * t_eff)
        shrink = 1.0 - 1.0 / t_eff
        coef = weight * sign / (1.0 + math.exp(max(min(sign * margin, MAX_EXPONENT), -MAX_EXPONENT)))
        u = self._u
        if coef:  # everything that can fail is checked first: a refused step leaves the model untouched
            values = x.values()
            refuse_overflow(shrink * u.norm() + rate * abs(coef) * math.sqrt(sum(map(mul, values, values))))
        self._t += 1
        u.scale_by(shrink)
        if coef:
            u.add(x, rate * coef)

    def learn_rows(self, batch: LearnBatch) -> tuple[int, ValueError | None]:
        """``learn_one`` over the batch's rows from its start (signs ±1, sample weights), in a compiled loop that
        leaves the model bit-identical to the ``learn_one`` loop; ``decisions`` and ``probas`` (or none, empty)
        receive each row's margin and probability before it was learned. A row ``learn_one`` refuses stops the run
        unlearned: returns (that row, the error), or (len(rows), None) when every row is learned."""
        columns: np.ndarray | range | None = None  # with weight arrays: the columns the rows' keys name
        if isinstance(self._u, DenseWeightVector):
            columns = weight_columns(batch.rows.keys, len(self._u.v))
            compiled = _loops is not None and columns is not None  # (None: a key that is no column: learn_one's)
        else:
            batch = replace(batch, rows=batch.rows.numbered_locally())  # (dict weights are gathered for its keys)
            compiled = _loops is not None
        return learn_batch(self, batch, partial(self._learn_compiled, columns=columns) if compiled else None)

    def _learn_compiled(self, batch: LearnBatch, columns: np.ndarray | range | None) -> int:
        """Run the compiled loop over the batch's rows from its start: over the weight array in place (through
        ``columns`` unless they are the rows' own), or over the weights of the rows' keys gathered out of the dict
        and scattered back; the row the loop stopped before (len(rows) when it learned them all)."""
        rows, start, u = batch.rows, batch.start, self._u
        if isinstance(u, DenseWeightVector):
            v, mapped = u.v, None if isinstance(columns, range) else columns
            present, new = np.empty(0, dtype=bool), np.empty(0, dtype=np.int64)  # every column is present
        else:
            keys = cast(list, rows.keys)
            v, present = gather(u.v, keys)
            stored, mapped, new = Stored(v, present), None, np.empty(len(keys), dtype=np.int64)
        stop, n_new, scale, sq_norm = _loops.learn_pegasos_logistic_rows(
            rows.indptr, rows.indices, rows.data, batch.signs, batch.weights, mapped, v, present, new,
            batch.decisions, u.scale, u.sq_norm, self._t, self.lambda_, self.t0, MIN_SCALE, MAX_NORM, COMPENSATED_SUM,
            start, rows.distinct,
        )  # fmt: skip
        if isinstance(u, WeightVector):
            scatter(u.v, keys, v, stored, new[:n_new])
        u.scale, u.sq_norm = scale, sq_norm
        self._t += stop - start
        return stop
