"""The hinge loss by normalized adaptive steps that never overshoot the margin (Vowpal Wabbit's default update)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from functools import partial
from typing import cast

import numpy as np
from river import base

from .._compiled import LOOPS as _loops
from .batch import LearnBatch, learn_batch
from .calibration import LogisticMargin
from .compiled import Stored, gather, scatter
from .feature_weights import FeatureWeights
from .rows import Rows
from .state import InvalidState, check_array, check_count, check_floats, check_parts, new_like
from .validation import binary_sign, check_positive, check_sample_weight, reject_features
from .weights import COMPENSATED_SUM, check_n_features

__all__ = ["NormalizedHinge"]

#: The least |x_j| a step uses: a smaller non-zero value counts as ±2⁻⁶³ (its square, 2⁻¹²⁶, is the least normal
#: float32), so that its rate 1/(√G_j·N_j) stays finite; Vowpal Wabbit's bound.
X_MIN = 2.0**-63
X2_MIN = X_MIN * X_MIN
#: How far below 1 a margin must be to take a step: a step stops at the margin, and an example seen again right
#: after its step lands within rounding of 1, on either side; a step there would move the weights by nothing yet
#: add to G, so that the order of the features (the rounding) would decide the rates that follow.
MARGIN_SLACK = 1e-9


class NormalizedHinge(FeatureWeights, LogisticMargin, base.Classifier):
    """Binary linear classifier on the hinge loss, by per-feature steps normalized by each feature's scale and sized
    not to overshoot the margin (Ross, Mineiro & Langford, 2013; Karampatziakis & Langford, 2011).

    An example (x, y), y ∈ {-1, +1}, with sample weight c > 0 and margin f(x) = ⟨w, x⟩ (before the step) below 1
    (y·f(x) < 1 − 10⁻⁹: `MARGIN_SLACK`) takes a step; the others leave the weights as they are. For each feature j
    of x (in order, zeros skipped, a |x_j| below 2⁻⁶³ counted as ±2⁻⁶³): when |x_j| exceeds the largest |x_j| seen
    so far, N_j, the weight is rescaled w_j ← w_j·N_j/|x_j| and N_j ← |x_j|; then G_j ← G_j + c·x_j². With the
    rates r_j = 1/(√G_j·N_j) and p = Σ_j x_j²·r_j, the step is w_j ← w_j + y·s·r_j·x_j, s = min(c·η, (1 − y·f(x))/p):
    AdaGrad's per-feature steps in units of each feature's scale, at most the step that brings the margin to exactly
    1. A feature's rate does not depend on the scale of its values, so features need no scaling, and the step that
    stops at the margin keeps a large η from overshooting. These are the ``--adaptive --normalized --invariant``
    defaults of Vowpal Wabbit's hinge loss, without its bias and its global rescaling of η (which the stopping step
    cancels).

    Parameters
    ----------
    learning_rate
        η > 0, the largest step per unit of sample weight (the step that reaches the margin is most often the
        smaller).
    n_features
        None for weights in dicts, keyed by any feature name. An integer n keeps them in three arrays of n floats
        instead (w, G and N), for features that are int columns 0..n − 1 (hashed features): a batch's compiled
        loop then reads and writes them in place. Other keys are refused.

    Notes
    -----
    ``predict_proba_one`` is σ(f(x)) (with an algebraic tail beyond |f(x)| = 8, so that it is never exactly 0 or
    1; see `pegasos_stream.learners.calibration.squash`): a score in the margin's order, not a calibrated
    probability.

    Examples
    --------

    >>> from river import datasets, evaluate, metrics, preprocessing
    >>> from pegasos_stream import NormalizedHinge

    >>> model = preprocessing.StandardScaler() | NormalizedHinge()
    >>> evaluate.progressive_val_score(datasets.Phishing(), model, metrics.Accuracy() + metrics.ROCAUC())
    Accuracy: 89.36%
    ROCAUC: 95.28%

    """

    # Declared here so that every method sees their types (all are set in __init__).
    learning_rate: float
    n_features: int | None
    _g2: dict | np.ndarray
    _scales: dict | np.ndarray

    def __init__(self, learning_rate: float = 0.5, n_features: int | None = None):
        self.learning_rate = check_positive("learning_rate", learning_rate)
        self.n_features = check_n_features(n_features)
        # w, G_j (the sums of c·x_j²) and N_j (the largest |x_j|, 0 for a feature never stepped on).
        self._w: dict | np.ndarray = {} if n_features is None else np.zeros(n_features)
        self._g2 = {} if n_features is None else np.zeros(n_features)
        self._scales = {} if n_features is None else np.zeros(n_features)
        self._t = 0

    @classmethod
    def _unit_test_params(cls):
        yield {}
        yield {"learning_rate": 0.01}

    def _check_state(self) -> None:
        """Refuse (InvalidState) settings the constructor refuses, or a rebuilt state that no sequence of steps
        leaves: three dicts of the same keys, or three arrays of ``n_features``; finite weights, G_j >= 0 and
        N_j >= 0, both 0 or both > 0."""
        fresh = new_like(self)
        check_parts(self, fresh, ("_w", "_g2", "_scales"))
        if self.n_features is None:
            weights = check_floats(self, "_w")
            g2_dict, scales_dict = check_floats(self, "_g2", 0.0), check_floats(self, "_scales", 0.0)
            if not (weights.keys() == g2_dict.keys() == scales_dict.keys()):
                raise InvalidState("NormalizedHinge: _w, _g2 and _scales: expected the same features")
            g2, scales = np.array(list(g2_dict.values())), np.array(list(scales_dict.values()))
        else:
            check_array(self, "_w", (self.n_features,))
            g2 = check_array(self, "_g2", (self.n_features,), 0.0)
            scales = check_array(self, "_scales", (self.n_features,), 0.0)
        if not np.array_equal(g2 > 0, scales > 0):
            raise InvalidState("NormalizedHinge._g2, _scales: expected both 0 or both > 0 for each feature")
        check_count(self, "_t")

    @property
    def weights(self) -> dict:
        """w as a dict (a copy; with ``n_features``, the columns stepped on so far)."""
        if isinstance(self._w, dict):
            return dict(self._w)
        stepped = np.flatnonzero(cast(np.ndarray, self._scales)).tolist()
        return dict(zip(stepped, self._w[stepped].tolist()))

    def learn_one(self, x: Mapping, y: base.typing.ClfTarget, w: float = 1.0) -> None:
        sign, weight = binary_sign(y), 1.0 if w == 1.0 else check_sample_weight(w)
        if isinstance(self._w, np.ndarray) and _loops is not None:
            self._learn_in_place(x, sign, weight)
            return
        margin = self.decision_function_one(x)
        if sign * margin < 1.0 - MARGIN_SLACK and weight * X2_MIN > 0.0:  # (c so small that c·x_j² is 0: no step)
            features = _clamped(x)
            largest = max((abs(value) for _, value in features), default=0.0)
            if not math.isfinite(weight * largest * largest):
                reject_features(x)  # finite values whose square overflows: G_j would be infinite
            self._step(features, sign, weight, 1.0 - sign * margin)
        self._t += 1

    def _learn_in_place(self, x: Mapping, sign: float, weight: float) -> None:
        """``learn_one`` over the weight arrays: x as one row through the compiled loop; the ValueError naming its
        feature when the loop refuses it (a margin or a square that is not finite), with nothing learned."""
        columns, values = self._dense_example(x)
        every = range(len(self._w))  # (the row's columns are the weights')
        rows = Rows(np.array([0, len(values)], dtype=np.int64), columns, values, every, True)
        batch = LearnBatch.new(rows, np.array([sign]), np.array([weight]), probas=False)
        if self._learn_compiled(batch, every) == 0:
            reject_features(x)

    def _step(self, features: list[tuple], sign: float, weight: float, error: float) -> None:
        """The step of the example of ``features`` (key, value; non-zero, clamped), whose margin fell ``error``
        short of 1."""
        w, g2, scales = self._w, self._g2, self._scales
        get = (lambda store, key: store.get(key, 0.0)) if isinstance(w, dict) else (lambda store, key: store[key])
        rates, reach = [], 0.0
        for key, value in features:
            size, scale = abs(value), get(scales, key)
            if size > scale:
                if scale > 0.0:
                    w[key] = get(w, key) * (scale / size)
                scales[key] = scale = size
            w[key] = get(w, key)  # (a dict learner then holds the feature in all three)
            g2[key] = total = get(g2, key) + weight * (value * value)
            rate = 1.0 / (math.sqrt(total) * scale)
            rates.append(rate)
            reach += value * value * rate
        move = sign * min(weight * self.learning_rate, error / reach if reach > 0.0 else math.inf)
        for (key, value), rate in zip(features, rates):
            w[key] = w[key] + move * value * rate

    def learn_rows(self, batch: LearnBatch) -> tuple[int, ValueError | None]:
        """``learn_one`` over the batch's rows from its start (signs ±1, sample weights), in a compiled loop that
        leaves the model bit-identical to the ``learn_one`` loop; ``decisions`` and ``probas`` (or none, empty)
        receive each row's margin and probability before it was learned. A row ``learn_one`` refuses stops the
        run unlearned: returns (that row, the error), or (len(rows), None) when every row is learned."""
        if isinstance(self._w, dict):
            batch = replace(batch, rows=batch.rows.numbered_locally())  # (dict weights are gathered for its keys)
        columns = None if _loops is None else self.columns_of(batch.rows.keys)  # None: every row through learn_one
        return learn_batch(self, batch, None if columns is None else partial(self._learn_compiled, columns=columns))

    def _learn_compiled(self, batch: LearnBatch, columns: np.ndarray | range) -> int:
        """Run the compiled loop over the batch's rows from its start (around it, gather the entries the rows touch
        out of the dicts and scatter them back); the row the loop stopped before (len(rows) when it learned them
        all)."""
        rows, start = batch.rows, batch.start
        looked_up = None if isinstance(columns, range) else columns  # (None: the rows' columns are the weights')
        new = np.empty(0 if looked_up is None else len(rows.keys), dtype=np.int64)

        def loop(w: np.ndarray, g2: np.ndarray, scales: np.ndarray, present: np.ndarray) -> tuple[int, int]:
            return _loops.learn_hinge_rows(
                rows.indptr, rows.indices, rows.data, batch.signs, batch.weights, looked_up, w, g2, scales,
                present, new, batch.decisions, self.learning_rate, COMPENSATED_SUM, start, rows.distinct,
            )  # fmt: skip

        stores = (self._w, self._g2, self._scales)
        if isinstance(self._w, np.ndarray):
            w, g2, scales = cast(tuple[np.ndarray, np.ndarray, np.ndarray], stores)
            stop = loop(w, g2, scales, np.empty(0, dtype=bool))[0]  # every column is present
        else:
            keys = cast(list, rows.keys)
            gathered = [gather(cast(dict, store), keys) for store in stores]
            present = gathered[0][1]
            stored = [Stored(values, present) for values, _ in gathered]
            stop, n_new = loop(gathered[0][0], gathered[1][0], gathered[2][0], present)
            for store, (values, _), before in zip(stores, gathered, stored):
                scatter(cast(dict, store), keys, values, before, new[:n_new])
        self._t += stop - start
        return stop


def _clamped(x: Mapping) -> list[tuple]:
    """The non-zero features of x as (key, value), a value below X_MIN in size as ±X_MIN."""
    return [(key, value if abs(value) >= X_MIN else math.copysign(X_MIN, value)) for key, value in x.items() if value]
