"""Crammer–Singer multiclass Pegasos: one weight vector per class, one shared scale."""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from operator import mul
from typing import Any

from river import base

from .schedule import effective_step, refuse_overflow
from .state import InvalidState, check_count, check_equal, check_flag, check_floats, check_parts, new_like
from .validation import check_horizon, check_lambda, check_sample_weight, reject_features
from .weights import SharedScaleWeights

__all__ = ["PegasosMulticlass"]


class PegasosMulticlass(base.Classifier):
    """Multiclass linear SVM (Crammer & Singer) trained by Pegasos.

    Each class k has weights w_k and the score s_k(x) = ⟨w_k, x⟩ + b_k. At step t, with
    η = 1/(λ·t), every w_k shrinks by (1 − ηλ) (one shared scale, so O(1)); then, if the true
    class y does not beat the best other class r by a margin of 1 (s_y − s_r < 1, scores before
    the step), w_y += η·x and w_r −= η·x. This minimises λ/2·Σ‖w_k‖² + mean of
    max(0, 1 + max_{r≠y} s_r(x) − s_y(x)).

    Classes are discovered as they arrive, in order; a new class starts at zero. Until a
    second class is known there is nothing to separate, and a step only shrinks.

    Parameters
    ----------
    lambda_
        Regularisation strength λ > 0.
    fit_intercept
        Learn an unregularised bias per class (b_y += η, b_r −= η on a violation).
    projection
        After each step, project W onto the Frobenius ball of radius 1/√λ.
    horizon
        None for η = 1/(λt); an integer H saturates the step counter at H (keeps adapting).
    seed
        Accepted for a uniform interface; learning is deterministic.

    Examples
    --------

    >>> from river import datasets, evaluate, metrics, preprocessing
    >>> from pegasos_stream import PegasosMulticlass

    >>> model = preprocessing.StandardScaler() | PegasosMulticlass(lambda_=1e-3)
    >>> evaluate.progressive_val_score(datasets.ImageSegments(), model, metrics.Accuracy())
    Accuracy: 83.41%

    """

    def __init__(
        self,
        lambda_: float = 1e-4,
        fit_intercept: bool = False,
        projection: bool = False,
        horizon: int | None = None,
        seed: int | None = None,
    ):
        check_lambda(lambda_)
        check_horizon(horizon)
        self.lambda_ = lambda_
        self.fit_intercept = fit_intercept
        self.projection = projection
        self.horizon = horizon
        self.seed = seed

        self._radius = 1.0 / math.sqrt(lambda_)
        self._w = SharedScaleWeights()
        self._b: dict[Hashable, float] = {}
        self._t = 0

    @classmethod
    def _unit_test_params(cls):
        yield {}
        yield {"fit_intercept": True, "projection": True, "lambda_": 1e-2}
        yield {"horizon": 50}

    def _check_state(self) -> None:
        """Refuse (InvalidState) settings the constructor refuses, or a rebuilt state that no sequence of steps
        leaves: a bias for each class of the weights, in their order."""
        fresh = new_like(self)
        check_flag(self, "fit_intercept")
        check_flag(self, "projection")
        check_equal(self, fresh, ("_radius",))
        check_parts(self, fresh, ("_w",))
        if list(check_floats(self, "_b")) != list(self._w.rows):
            raise InvalidState("PegasosMulticlass._b: expected a bias for each class of the weights, in their order")
        check_count(self, "_t")

    @property
    def _multiclass(self) -> bool:
        return True

    @property
    def t(self) -> int:
        """The number of steps taken so far."""
        return self._t

    @property
    def classes(self) -> list:
        """The classes seen so far, in order of first appearance."""
        return list(self._b)

    @property
    def weights(self) -> dict:
        """{class: {feature: weight}} with the scale folded in."""
        return self._w.to_dicts()

    @property
    def norm(self) -> float:
        """‖W‖_F, in O(1)."""
        return self._w.norm()

    @property
    def intercepts(self) -> dict:
        """{class: bias}."""
        return dict(self._b)

    def scores_one(self, x: Mapping) -> dict:
        """{class: ⟨w_k, x⟩ + b_k} for every known class."""
        try:
            scores = self._w.scores(x)
            ok = all(math.isfinite(s) for s in scores.values())
        except (TypeError, OverflowError):
            ok = False
        if not ok:
            reject_features(x)
        for label, b in self._b.items():
            scores[label] += b
        return scores

    def predict_one(self, x: Mapping, **kwargs: Any) -> base.typing.ClfTarget | None:
        scores = self.scores_one(x)
        return max(scores, key=scores.__getitem__) if scores else None

    def predict_proba_one(self, x: Mapping, **kwargs: Any) -> dict[base.typing.ClfTarget, float]:
        scores = self.scores_one(x)
        if not scores:
            return {}
        top = max(scores.values())
        exps = {label: math.exp(s - top) for label, s in scores.items()}
        total = sum(exps.values())
        return {label: e / total for label, e in exps.items()}

    def learn_one(self, x: Mapping, y: base.typing.ClfTarget, w: float = 1.0) -> None:
        if not isinstance(y, Hashable) or y is None:
            raise ValueError(f"unknown label {y!r}: a class label must be hashable and not None")
        weight = 1.0 if w == 1.0 else check_sample_weight(w)
        scores = self.scores_one(x)
        rivals = [label for label in scores if label != y]
        rival = max(rivals, key=scores.__getitem__) if rivals else None
        violated = rival is not None and weight > 0 and scores.get(y, 0.0) - scores[rival] < 1.0

        t = self._t + 1
        t_eff = effective_step(t, self.horizon)
        rate = weight / (self.lambda_ * t_eff)
        shrink = 1.0 - 1.0 / t_eff
        if violated:
            values = x.values()
            bound = shrink * self._w.norm() + 2.0 * rate * math.sqrt(sum(map(mul, values, values)))
            refuse_overflow(bound)

        if y not in self._b:
            self._w.add_row(y)
            self._b[y] = 0.0
        self._t = t
        self._w.scale_by(shrink)
        if violated:
            self._w.add(y, x, rate)
            self._w.add(rival, x, -rate)
            if self.fit_intercept:
                self._b[y] += rate
                self._b[rival] -= rate
        if self.projection:
            norm = self._w.norm()
            if norm > self._radius:
                self._w.scale_by(self._radius / norm)
