"""Pegasos: primal estimated sub-gradient solver for the linear SVM, one example at a time."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from operator import mul
from types import ModuleType
from typing import ClassVar, cast

import numpy as np
from river import base

from . import compiled
from .batch import LearnBatch
from .calibration import OnlinePlatt, PlattScaledMargin
from .members import Members
from .schedule import MAX_NORM, effective_step, refuse_overflow
from .state import InvalidState, check_count, check_equal, check_flag, check_float, check_parts, new_like
from .steps import StepLog
from .validation import (
    binary_sign,
    check_average,
    check_features,
    check_fit_intercept,
    check_horizon,
    check_lambda,
    check_sample_weight,
    check_t0,
    reject_features,
)
from .weights import (
    COMPENSATED_SUM,
    MAX_AVERAGE_CANCELLATION,
    MIN_SCALE,
    DenseWeightVector,
    WeightVector,
    check_columns,
    sparse_dot,
)

__all__ = ["PegasosClassifier"]

#: An example a step adds: a feature dict, or (with weight arrays) its columns and values.
Example = Mapping | tuple[np.ndarray, np.ndarray]


class PegasosClassifier(PlattScaledMargin, base.MiniBatchClassifier):
    """Binary linear SVM trained by Pegasos, with lazily scaled sparse weights.

    At global step t (counting from 1), with η = 1/(λ·t), the example (x, y), y ∈ {-1, +1}, moves the
    weights as w ← (1 − ηλ)·w, plus η·c·y·x when y·f(x) < 1, where f(x) = ⟨w, x⟩ + b is evaluated
    before the step and c is the example's cost (sample weight × class weight). This minimises
    λ/2·‖w‖² + mean of c·max(0, 1 − y·f(x)) (Shalev-Shwartz et al., 2011). The weights are stored as
    w = s·v, so the shrink is O(1) and a step costs O(non-zeros of x).

    By default (``lambda_="auto"``) λ is chosen online. A member per λ of ``AUTO_LAMBDAS`` (1e-4, 1e-3, 1e-2), each
    a `PegasosClassifier` at that λ, learns every example; each member's averaged iterate and current iterate are
    candidates, and the candidate of least discounted running hinge loss makes the decisions (`Members`: the loss
    of an example is taken before the members learn it, γ = ``AUTO_DISCOUNT`` = 0.999, the first candidate on a
    tie, averaged before current). Unless set otherwise, the members start their step counters at
    t0 = ``AUTO_T0`` = 1000, average their iterates and learn a regularised bias. Pegasos's first steps, 1/λ,
    1/(2λ), ..., let the first examples of a short stream dominate the weights; with t0 = 1000 the members' first
    steps are about 10, 1 and 0.1, so that the choice finds the step size the features' scale wants (unit-norm text
    large steps, standardised columns small ones) as well as λ. A step costs one of each member. An explicit λ is
    exact Pegasos, with no bias, no averaging and t0 = 0 unless set.

    Parameters
    ----------
    lambda_
        Regularisation strength λ > 0, or "auto" (the default): λ chosen online among ``AUTO_LAMBDAS``.
    fit_intercept
        Learn a bias b, with the step of w. True: unregularised, b += η·c·y on a violation, neither shrunk nor
        projected, as in the Pegasos paper's discussion of the bias (§6): shrinking it would pull every decision
        toward 0 and make the solution depend on a translation of the labels; early steps of η = 1/λ can throw it
        far. "regularised": shrunk with w, as the weight of a constant feature (λ/2·b² joins the objective), with
        steps of at most ``MAX_BIAS_STEP`` = 0.2: b ← (1 − 1/t')·b + min(η, 0.2)·c·y on a violation, t' the step
        counter η uses; so no step moves it by more than 0.2·c, and |b| never exceeds the largest c/λ of the stream
        (a bias of value 1 weighs as much as a whole unit-norm text, whose words share its steps). Not projected.
        None (the default): "regularised" with ``lambda_="auto"``, else False.
    projection
        After each step, project w onto the ball of radius 1/√λ (centred on ``prior``), which
        contains the optimum; O(1) thanks to the running norm.
    average
        Predict with the average of the iterates (and of b), kept in O(nnz(x)) per step by Bottou's
        sparse averaging trick; learning still steps on the current iterate. True averages
        w_1..w_t; an integer k starts the average at step k (w_k..w_t) and predicts with the current
        iterate before that, as scikit-learn's ``SGDClassifier(average=k)``: the first iterates of
        Pegasos take steps of size 1/(λt) and can dominate an average taken from the start. None (the
        default): True with ``lambda_="auto"``, else False.
    class_weight
        Cost of each class in the hinge term: None (1 for both), a dict label → cost, or
        "balanced": min((n + 2α)/(2·(n_y + α)), M), from running class counts n_y of n examples
        that include the current one, smoothed by α = 0.05/λ pseudo-examples per class
        (``BALANCED_SMOOTHING``/λ) and bounded by M = 5 (``BALANCED_MAX_COST``): every cost lies
        between 1/2 and 5.
    prior
        Regularise toward these weights instead of 0: λ/2·‖w − w_prior‖² (transfer learning).
        A dict of weights, or a fitted `PegasosClassifier`, whose predicting weights are copied.
    horizon
        None for the textbook schedule. An integer H saturates the step counter used for η at H,
        so η never falls below 1/(λ·H) and the model keeps adapting on a long, drifting stream.
    t0
        Start the step counter η uses at t0: η = 1/(λ·(t + t0)), with ``horizon`` saturating t.
        Pegasos's first steps (η = 1/λ, then 1/(2λ), ...) let the first examples dominate the weights
        and leave them too large to see most margin violations; an offset tempers them, as the t0 of
        Bottou's SGD schedule does. The regularised objective is the same. None (the default): ``AUTO_T0`` = 1000
        with ``lambda_="auto"``, else 0.
    n_features
        None for weights in a dict, keyed by any feature name. An integer n keeps them in float64 arrays of n
        columns instead, for features that are int columns 0..n − 1 (hashed features, svmlight indices): 8 bytes
        a weight instead of a dict entry, checkpoints that hold the raw array, and a compiled batch that reads
        and writes the weights in place (no gathering out of a dict and scattering back). The same stream
        gives the same floats in either layout. Other keys are refused.
    max_features
        None: the arrays keep ``n_features`` columns. An int: a column from ``n_features`` to ``max_features`` − 1
        widens them, to the smallest power of two above it (at most ``max_features``), where it would be
        refused; for int columns whose range the stream reveals (svmlight indices). The floats are those of
        arrays that held every column from the start. Without ``n_features``, they start at ``START_COLUMNS``
        (1024) columns.
    calibrate
        Fit ``predict_proba_one``'s online Platt scaling on each example's margin (the default). False
        leaves it at its start, the logistic of the margin 1/(1 + e^−f(x)) (for |f(x)| ≤ 8; a slower tail
        beyond), and spares each step two exponentials: for a stream scored by its margins (ranking, AUC)
        or decided at 0.
    seed
        Accepted for a uniform interface with the other learners; learning is deterministic,
        so the same stream always gives the same model.

    Notes
    -----
    Labels may be bool, numpy bool, 0/1 or -1/+1; ``predict_one`` answers with a bool.
    ``predict_proba_one`` uses online Platt scaling (see `pegasos_stream.calibration`): fitted
    on each example's margin before it is learned, strictly increasing in the margin and never
    exactly 0 or 1, so ranking by probability is ranking by margin.

    ``learn_many`` is one mini-batch Pegasos step: the sub-gradient averaged over the k rows, with
    every margin computed before the step; t advances by one.

    With ``lambda_="auto"``, ``weights``, ``intercept`` and ``norm`` are those of the iterate that predicts now
    (of the member ``leader``); the probability is the Platt scaling of its decisions (the members do not
    calibrate), and ``replay`` (recorded steps, for a cluster) needs an explicit λ.

    Examples
    --------

    >>> from river import datasets, evaluate, metrics, preprocessing
    >>> from pegasos_stream import PegasosClassifier

    >>> model = preprocessing.StandardScaler() | PegasosClassifier()
    >>> evaluate.progressive_val_score(datasets.Phishing(), model, metrics.Accuracy() + metrics.ROCAUC())
    Accuracy: 89.52%
    ROCAUC: 95.31%

    >>> model["PegasosClassifier"].t
    1250
    >>> model["PegasosClassifier"].leader.lambda_
    0.01

    Exact Pegasos at λ = 1e-4 (the default before "auto"), whose first steps are the largest:

    >>> model = preprocessing.StandardScaler() | PegasosClassifier(lambda_=1e-4)
    >>> evaluate.progressive_val_score(datasets.Phishing(), model, metrics.Accuracy() + metrics.ROCAUC())
    Accuracy: 83.12%
    ROCAUC: 84.17%

    """

    #: "balanced" counts α = BALANCED_SMOOTHING/λ pseudo-examples of each class besides the real ones
    #: (> 0). Its costs start near 1 and follow the class proportions once the stream is some α examples
    #: long: a cost taken from a handful of counts stays in the weights (w sums every past step), for
    #: longer the smaller λ. The first example of a class after many of the other gets a step of about
    #: 1/(2λα) = 10 (times ‖x‖) once the stream is much longer than α, whatever λ, where the raw
    #: counts would give 1/(2λ).
    BALANCED_SMOOTHING: ClassVar[float] = 0.05
    #: The largest "balanced" cost: no step is more than this many times an unweighted one, and
    #: classes down to 1/(2·BALANCED_MAX_COST) of the stream are fully balanced.
    BALANCED_MAX_COST: ClassVar[float] = 5.0
    #: The largest step of the regularised bias (``fit_intercept="regularised"``), per unit of cost.
    MAX_BIAS_STEP: ClassVar[float] = 0.2
    #: The regularisation strengths of the members of ``lambda_="auto"``, in the order ties go by.
    AUTO_LAMBDAS: ClassVar[tuple[float, ...]] = (1e-4, 1e-3, 1e-2)
    #: The t0 of every member of ``lambda_="auto"`` when none is given: first steps 1/(λ·(1 + AUTO_T0)) of about
    #: 10, 1 and 0.1.
    AUTO_T0: ClassVar[int] = 1000
    #: γ of ``lambda_="auto"``'s running losses: about the last 1/(1 − γ) = 1,000 examples count.
    AUTO_DISCOUNT: ClassVar[float] = 0.999

    # Declared here so that every method sees their types (all are set in __init__). With lambda_="auto", the
    # settings are kept as given (None: the members' default) and the model is the members': "_grid" and "_platt".
    lambda_: float | str
    fit_intercept: bool | str | None
    projection: bool
    average: bool | int | None
    class_weight: str | dict | None
    horizon: int | None
    t0: int | None = 0  # a class default: states saved before t0 existed load with 0
    # a class default: explicit-λ states (saved before "auto" existed too) have none
    _grid: Members[PegasosClassifier] | None = None
    _class_cost: dict[float, float] | None
    _prior: dict
    _radius: float
    _average_from: int | None
    n_features: int | None = None  # a class default: states saved before n_features existed load with None
    max_features: int | None = None  # another
    calibrate: bool = True  # a class default: states saved before calibrate existed load with True
    _u: WeightVector | DenseWeightVector
    _b: float
    _average_b: float
    _t: int
    _n_pos: int
    _n_neg: int

    def __init__(
        self,
        lambda_: float | str = "auto",
        fit_intercept: bool | str | None = None,
        projection: bool = False,
        average: bool | int | None = None,
        class_weight: str | dict | None = None,
        prior: dict | PegasosClassifier | None = None,
        horizon: int | None = None,
        t0: int | None = None,
        n_features: int | None = None,
        max_features: int | None = None,
        calibrate: bool = True,
        seed: int | None = None,
    ):
        auto = _check_settings(lambda_, fit_intercept, horizon, t0, average)
        if isinstance(prior, PegasosClassifier):
            prior = prior.average_weights if prior.average else prior.weights
        self.lambda_ = lambda_
        self.fit_intercept = False if fit_intercept is None and not auto else fit_intercept
        self.projection = projection
        self.average = False if average is None and not auto else average
        self.class_weight = class_weight
        self.prior = prior
        self.horizon = horizon
        self.t0 = (None if auto else 0) if t0 is None else int(t0)
        self.n_features, self.max_features = check_columns(n_features, max_features)
        self.calibrate = bool(calibrate)
        self.seed = seed
        if auto:
            self._grid = Members([self._auto_member(strength) for strength in self.AUTO_LAMBDAS], self.AUTO_DISCOUNT)
            self._platt = OnlinePlatt()
            return
        self._start_from_prior()

    def _start_from_prior(self) -> None:
        """The state of an explicit λ before its first step: w = prior, no example seen."""
        lambda_, average = cast(float, self.lambda_), cast(bool | int, self.average)  # (settled for an explicit λ)
        self._class_cost = self._parse_class_weight(self.class_weight)
        self._prior = self._parse_prior(self.prior)
        self._radius = 1.0 / math.sqrt(lambda_)
        self._average_from = int(average) or None  # the first step in the average (True: 1)
        # w = prior + u
        self._u = (
            WeightVector(average=bool(average))
            if self.n_features is None
            else DenseWeightVector(self.n_features, bool(average), self.max_features)
        )
        if self.n_features is not None and self._prior:
            self._prior_array()  # refuses a prior with a key that is no column
        self._b = 0.0
        self._average_b = 0.0
        self._t = 0
        self._n_pos = 0
        self._n_neg = 0
        self._platt = OnlinePlatt()
        self._last_scored: tuple[int, dict, tuple[float, float]] | None = None

    def _auto_member(self, lambda_: float) -> PegasosClassifier:
        """The member of ``lambda_="auto"`` at strength ``lambda_``: these settings, a None as members take it."""
        return PegasosClassifier(
            lambda_=lambda_,
            fit_intercept="regularised" if self.fit_intercept is None else self.fit_intercept,
            projection=self.projection,
            average=True if self.average is None else self.average,
            class_weight=self.class_weight,
            prior=self.prior,
            horizon=self.horizon,
            t0=self.AUTO_T0 if self.t0 is None else self.t0,
            n_features=self.n_features,
            max_features=self.max_features,
            calibrate=False,
        )

    @staticmethod
    def _parse_class_weight(class_weight: str | dict | None) -> dict[float, float] | None:
        """{+1: cost, -1: cost} for a dict, None otherwise (no weights, or "balanced")."""
        if class_weight is None or class_weight == "balanced":
            return None
        if not isinstance(class_weight, Mapping):
            raise ValueError(f"class_weight={class_weight!r}: expected None, 'balanced' or a dict label -> cost")
        costs = {1.0: 1.0, -1.0: 1.0}
        for label, cost in class_weight.items():
            costs[binary_sign(label)] = check_sample_weight(cost)
        return costs

    def _prior_array(self) -> np.ndarray:
        """With ``n_features`` and a prior: the prior as an array of the weight columns (a cache, not saved, rebuilt
        when the arrays widen)."""
        u = cast(DenseWeightVector, self._u)
        cached = self.__dict__.get("_prior_columns")
        if cached is None or len(cached) != len(u.v):
            columns, values = u.example(self._prior)  # (widens the arrays to hold the prior's columns)
            cached = np.zeros(len(u.v))
            cached[columns] = values
            self._prior_columns = cached
        return cached

    @staticmethod
    def _parse_prior(prior: Mapping | None) -> dict:
        if prior is None:
            return {}
        if not isinstance(prior, Mapping):
            raise ValueError(f"prior: expected a dict of weights or a PegasosClassifier, got {prior!r}")
        check_features(prior)
        return {j: float(wj) for j, wj in prior.items()}

    @classmethod
    def _unit_test_params(cls):
        yield {}
        yield {"lambda_": 1e-4}
        yield {"fit_intercept": True, "lambda_": 1e-2}
        yield {"projection": True, "average": True, "lambda_": 1e-4}
        yield {"class_weight": "balanced", "horizon": 50, "t0": 100}
        yield {"class_weight": {True: 2.0, False: 0.5}, "fit_intercept": True, "average": 10, "lambda_": 1e-4}
        yield {"prior": {"empty_server_form_handler": 0.5, "popup_window": -0.25}, "projection": True}
        yield {"calibrate": False, "average": True, "lambda_": 1e-4}
        yield {"fit_intercept": "regularised", "lambda_": 1e-3, "t0": 10}
        yield {"fit_intercept": False, "average": False, "calibrate": False}

    def _unit_test_skips(self):
        # learn_many is one mini-batch step (averaged sub-gradient, t += 1), by design not a
        # loop of learn_one steps.
        return {"check_learn_many_matches_learn_one"}

    # -- read-only state -------------------------------------------------------------------

    @property
    def t(self) -> int:
        """The number of steps taken so far."""
        return self._t if self._grid is None else self._grid.t

    @property
    def leader(self) -> PegasosClassifier:
        """The member of ``lambda_="auto"`` whose weights predict now (the model itself with an explicit λ)."""
        return self if self._grid is None else self._grid.leader

    @property
    def weights(self) -> dict:
        """The current weights w = prior + u, as a plain dict; with ``lambda_="auto"``, those that predict now."""
        if self._grid is not None:
            member, averaged = self._grid.leading
            return member.average_weights if averaged else member.weights
        return self._with_prior(self._u.to_dict())

    @property
    def intercept(self) -> float:
        """The current bias b; with ``lambda_="auto"``, the one that predicts now."""
        if self._grid is not None:
            member, averaged = self._grid.leading
            return member.average_intercept if averaged else member.intercept
        return self._b

    @property
    def norm(self) -> float:
        """‖w − w_prior‖ of the current weights (‖w‖ without a prior), in O(1); with ``lambda_="auto"``, of the
        leader's."""
        return self._u.norm() if self._grid is None else self._grid.leader.norm

    @property
    def average_weights(self) -> dict:
        """The averaged weights predictions use: the current ones until averaging has begun (the leader's with
        ``lambda_="auto"``)."""
        if self._grid is not None:
            return self._grid.leader.average_weights
        self._require_average()
        if not self._u.n_averaged:
            return self.weights
        return self._with_prior(self._u.average_to_dict())

    @property
    def average_intercept(self) -> float:
        """The averaged bias predictions use: the current one until averaging has begun (the leader's with
        ``lambda_="auto"``)."""
        if self._grid is not None:
            return self._grid.leader.average_intercept
        self._require_average()
        return self._average_b if self._u.n_averaged else self._b

    def _require_average(self) -> None:
        if not self.average:
            raise AttributeError("the averaged iterate is only kept with average set")

    def _with_prior(self, u: dict) -> dict:
        if not self._prior:
            return u
        return {j: self._prior.get(j, 0.0) + u.get(j, 0.0) for j in self._prior.keys() | u.keys()}

    # -- inference -------------------------------------------------------------------------

    def _margins(self, x: Mapping) -> tuple[float, float]:
        """(⟨w, x⟩ + b, predicting margin): the current iterate's margin, which learning uses, and
        the margin of the predicting weights (the same until averaging has begun).

        The pair is remembered with a copy of x and the step counter, so that ``learn_one`` right
        after a prediction on an unchanged x (the prequential pattern) needs no second pass over
        the weights: equal features and an unchanged model give the same margins.
        """
        try:
            averaging = self._u.n_averaged > 0
            if averaging:
                current, predicting = self._u.dots(x)
            else:
                current = predicting = self._u.dot(x)
            if self._prior:
                prior = sparse_dot(self._prior, x)
                current += prior
                predicting += prior
            ok = math.isfinite(current) and math.isfinite(predicting)
        except (TypeError, OverflowError):
            ok = False
        if not ok:
            reject_features(x)
        margins = (current + self._b, predicting + (self._average_b if averaging else self._b))
        self._last_scored = (self._t, dict(x), margins)
        return margins

    def _remembered_margins(self, x: Mapping) -> tuple[float, float]:
        """``_margins(x)``, from the last prediction when the model and x are unchanged since."""
        last = self._last_scored
        if last is not None and last[0] == self._t and last[1] == x:
            return last[2]
        return self._margins(x)

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        if "_last_scored" in state:
            state["_last_scored"] = None  # a cache, not part of the model
        state.pop("_prior_columns", None)  # another (rebuilt from the prior)
        return state

    def _check_state(self) -> None:
        """Refuse (InvalidState) settings the constructor refuses, or a rebuilt state that no sequence of steps
        leaves; the parts it holds (weights, calibration, members) have checked their own."""
        fresh = new_like(self)
        check_flag(self, "projection")
        check_flag(self, "calibrate")
        check_parts(self, fresh, ("_grid", "_platt"))
        if self._grid is not None:
            check_parts(self._grid, fresh._grid, ("_members",))
            check_equal(self._grid, fresh._grid, ("discount",))
            self._grid._check_losses()
            return
        check_equal(self, fresh, ("_class_cost", "_prior", "_radius", "_average_from", "_last_scored"))
        check_parts(self, fresh, ("_u",))
        if self._u.average != fresh._u.average or not _same_layout(self._u, fresh._u):
            columns = _columns_wanted(fresh._u)
            raise InvalidState(f"PegasosClassifier._u: expected weights{columns} with average={fresh._u.average}")
        check_float(self, "_b")
        check_float(self, "_average_b")
        for name in ("_t", "_n_pos", "_n_neg"):
            check_count(self, name)

    def decision_function_one(self, x: Mapping) -> float:
        """The signed margin ⟨w, x⟩ + b of the predicting weights (averaged if ``average``; with
        ``lambda_="auto"``, of the iterate that predicts now)."""
        if self._grid is not None:
            return self._grid.decide(x)
        return self._margins(x)[1]

    # -- learning --------------------------------------------------------------------------

    def learn_one(self, x: Mapping, y: base.typing.ClfTarget, w: float = 1.0) -> None:
        if self._grid is not None:
            self._grid.learn(x, y, w, self._platt if self.calibrate else None)
            return
        sign = binary_sign(y)
        weight = 1.0 if w == 1.0 else check_sample_weight(w)
        margin, decision = self._remembered_margins(x)

        n_pos, n_neg = (self._n_pos + 1, self._n_neg) if sign > 0 else (self._n_pos, self._n_neg + 1)
        if sign * margin < 1.0:
            coef = weight * self._cost(sign, n_pos, n_neg) * sign
            self._step(((x, coef),) if coef else (), coef, 1)
        else:
            self._step((), 0.0, 1)
        self._n_pos, self._n_neg = n_pos, n_neg
        self._last_scored = None  # the model moved on; do not hold on to x
        if self.calibrate:
            self._platt.update(decision, sign > 0)

    def replay(self, steps: StepLog) -> None:
        """Take the steps of ``steps`` (a `StepRecorder`'s log), each as ``learn_one`` would with the margin test
        recorded in place of its own: on the model that recorded them, the same model bit for bit; on another,
        its (S, t) plus the steps' ΔS and Δt. A step the model refuses (a weight that would overflow) raises
        a ValueError; the steps before it are taken. Only an explicit λ replays (``lambda_="auto"`` is several
        models)."""
        if self._grid is not None:
            raise ValueError('replay needs a PegasosClassifier with an explicit lambda_, not "auto"')
        bounds, columns, values = steps.indptr.tolist(), steps.indices, steps.data
        violated_steps = steps.violated.tolist()
        signs = steps.signs.tolist()
        n_pos, n_neg = self._n_pos, self._n_neg  # counts of the steps taken
        row = 0  # the row of the next violated step
        taken = 0
        try:
            for index, weight in enumerate(steps.weights.tolist()):
                sign = signs[index]
                pos, neg = (n_pos + 1, n_neg) if sign > 0 else (n_pos, n_neg + 1)
                if violated_steps[index]:
                    row = index if steps.every_row else row
                    x = (columns[bounds[row] : bounds[row + 1]], values[bounds[row] : bounds[row + 1]])
                    row += 1
                    coef = weight * self._cost(sign, pos, neg) * sign
                    self._step(((x, coef),) if coef else (), coef, 1)
                else:
                    self._shrink_step()
                n_pos, n_neg, taken = pos, neg, index + 1
        finally:  # the counts and the calibration of the steps taken (Platt's state depends on nothing else)
            self._n_pos, self._n_neg = n_pos, n_neg
            if self.calibrate:
                compiled.calibrate_rows(self._platt, steps.decisions[:taken], steps.signs[:taken], np.empty(taken))
            self._last_scored = None

    def _shrink_step(self) -> None:
        """``_step((), 0.0, 1)``: a step without a violation, in fewer operations (replays take many)."""
        t = self._t + 1
        t_eff = effective_step(t, self.horizon, cast(int, self.t0))
        shrink = 1.0 - 1.0 / t_eff
        self._t = t
        self._u.scale_by(shrink)
        if self.fit_intercept == "regularised":  # (as _step adds a step·0.0: -0.0 becomes 0.0)
            self._b = shrink * self._b + 0.0
        elif self.fit_intercept:
            self._b += 0.0
        if self._average_from is not None and t >= self._average_from:
            self._u.accumulate_average()
            self._average_b += (self._b - self._average_b) / self._u.n_averaged

    def learn_many(self, X, y) -> None:
        X_nw = _frames().into_frame(X)
        columns = list(X_nw.columns)
        values = _finite_matrix(X_nw)
        signs = np.array([binary_sign(label) for label in _frames().into_series(y).to_list()])
        k = len(signs)
        if k != len(values):
            raise ValueError(f"learn_many: {len(values)} rows but {k} labels")
        if not k:
            return
        if self._grid is not None:
            self._grid.learn_matrix(values, columns, signs, self._platt if self.calibrate else None)
        else:
            self._learn_matrix(values, columns, signs)

    def _learn_matrix(self, values: np.ndarray, columns: list, signs: np.ndarray) -> None:
        """``learn_many``'s step on the rows of ``values`` (at least one; columns named by ``columns``)."""
        k = len(signs)
        margins, decisions = self._margins_pair_many(values, columns)
        n_pos = self._n_pos + int((signs > 0).sum())
        n_neg = self._n_neg + int((signs < 0).sum())
        coefs = np.array([self._cost(s, n_pos, n_neg) * s for s in signs.tolist()])
        coefs[signs * margins >= 1.0] = 0.0
        gradient = (coefs @ values).tolist()
        step = {j: g for j, g in zip(columns, gradient) if g != 0.0}
        self._step(((step, 1.0),) if step else (), float(coefs.sum()), k)
        self._n_pos, self._n_neg = n_pos, n_neg
        if self.calibrate:
            for decision, s in zip(decisions.tolist(), signs.tolist()):
                self._platt.update(decision, s > 0)

    def _step(self, gradient: Sequence[tuple[Example, float]], bias_coef: float, k: int) -> None:
        """One Pegasos step: u ← (1 − 1/t)·u + (η/k)·Σ c·x over ``gradient``, b += (η/k)·bias_coef. An example
        is a feature dict, or (with weight arrays) a pair of arrays (columns, values), as a replay gives them.

        Everything that can fail is checked first, so a refused step leaves the model untouched.
        """
        t = self._t + 1
        t_eff = effective_step(t, self.horizon, cast(int, self.t0))
        rate = 1.0 / (cast(float, self.lambda_) * t_eff * k)
        shrink = 1.0 - 1.0 / t_eff
        u = self._u
        if gradient:
            bound = shrink * u.norm()
            for x, c in gradient:
                if isinstance(x, Mapping):
                    values = x.values()
                    bound += rate * abs(c) * math.sqrt(sum(map(mul, values, values)))
                else:
                    bound += rate * abs(c) * math.sqrt(float(x[1] @ x[1]))
            refuse_overflow(bound)

        self._t = t
        u.scale_by(shrink)
        if self.fit_intercept == "regularised":
            self._b = shrink * self._b + min(rate, self.MAX_BIAS_STEP) * bias_coef
        elif self.fit_intercept:
            self._b += rate * bias_coef
        if gradient:
            for x, c in gradient:
                if isinstance(x, Mapping):
                    u.add(x, rate * c)
                else:
                    cast(DenseWeightVector, u).add_columns(*x, rate * c)
            if self.projection:  # a shrink alone never leaves the ball
                norm = u.norm()
                if norm > self._radius:
                    u.scale_by(self._radius / norm)
        if self._average_from is not None and t >= self._average_from:
            u.accumulate_average()
            self._average_b += (self._b - self._average_b) / u.n_averaged

    def _largest_step(self) -> float:
        """The most a step moves the weights per unit of sample weight × ‖x‖ from now on: the next step's rate (no
        later one is larger) times the largest class cost."""
        if self.class_weight == "balanced":
            cost = self.BALANCED_MAX_COST
        else:
            cost = max(self._class_cost.values()) if self._class_cost else 1.0
        return cost / (cast(float, self.lambda_) * effective_step(self._t + 1, self.horizon, cast(int, self.t0)))

    def _cost(self, sign: float, n_pos: int, n_neg: int) -> float:
        """The class cost of an example of this sign, given the class counts including it."""
        if self.class_weight == "balanced":
            alpha = self.BALANCED_SMOOTHING / cast(float, self.lambda_)
            n_y = n_pos if sign > 0 else n_neg
            return min((n_pos + n_neg + 2.0 * alpha) / (2.0 * (n_y + alpha)), self.BALANCED_MAX_COST)
        if self._class_cost is None:
            return 1.0
        return self._class_cost[sign]

    # -- compiled replay: learn_one over many rows -------------------------------------------

    def learn_csr(self, indptr, indices, data, y, columns=None, sample_weight=None) -> np.ndarray:
        """Learn the rows of a CSR matrix in order, exactly as ``learn_one`` on each row would.

        The loop runs compiled and leaves the model bit-identical to the ``learn_one`` loop (its
        Platt calibration included). Column j is the feature ``columns[j]`` (default: the int j).
        Returns each row's decision (the ``decision_function_one`` value) before it was learned.
        A malformed matrix (indptr decreasing or past indices, a column out of range or repeated
        within a row, arrays of the wrong shape or type) or labels and weights that do not match
        its rows raise a ValueError saying what is wrong, before anything is learned.
        A row ``learn_one`` would refuse raises a ValueError naming it; the rows before it are learned.
        """
        return compiled.learn_csr(self, indptr, indices, data, y, columns, sample_weight)

    def learn_rows(self, batch: LearnBatch) -> tuple[int, ValueError | None]:
        """``learn_one`` over the batch's rows from its ``start`` (finite values, signs ±1.0, checked weights),
        compiled (with ``lambda_="auto"``, each member's loop).

        Fills the batch's ``decisions`` and ``probas`` (what ``decision_function_one`` and ``probability`` gave
        before each row was learned; ``probas`` may be empty when they are not wanted), and its ``margins`` when
        given (the current iterate's; an explicit λ only). Stops at the first row ``learn_one`` refuses, which is
        left unlearned: returns (that row, the error), or (len(rows), None) when every row is learned. The refused
        row's decision is nan when no decision could be made (a non-finite margin). Arrays the compiled loop
        cannot take (1-d C-contiguous float64 signs, weights, decisions and probas, one per row, or no probas;
        rows with a column repeated or out of range) raise a ValueError first.
        """
        if self._grid is not None:
            return self._grid.learn_run(batch, self._platt, self.calibrate)
        return compiled.learn_rows(self, batch)

    # -- the compiled loop's view: settings and state by the names of pegasos_stream.learners._loops -------------

    def _loop_settings(self) -> dict[str, float]:
        """The settings the compiled loop reads, by the names of ``_loops.PARAMS`` (an explicit λ).

        With ``class_weight="balanced"``, "balanced" is the pseudo-count of each class (> 0) and "cost_pos"
        and "cost_neg" bound the costs; otherwise "balanced" is 0 and they are the costs. "fit_intercept" is 0 for
        no bias, 1 for the unregularised one, and −MAX_BIAS_STEP (< 0) for the regularised one.
        """
        lambda_ = cast(float, self.lambda_)  # (an explicit λ: "auto" learns with its members)
        balanced = self.class_weight == "balanced"
        if balanced:
            costs = {1.0: self.BALANCED_MAX_COST, -1.0: self.BALANCED_MAX_COST}
        else:
            costs = self._class_cost or {1.0: 1.0, -1.0: 1.0}
        return {
            "lambda": lambda_,
            "horizon": self.horizon or 0,
            "t0": cast(int, self.t0),
            "average_from": self._average_from or 0,
            "fit_intercept": -self.MAX_BIAS_STEP
            if self.fit_intercept == "regularised"
            else float(bool(self.fit_intercept)),
            "projection": self.projection,
            "radius": self._radius,
            "cost_pos": costs[1.0],
            "cost_neg": costs[-1.0],
            "balanced": self.BALANCED_SMOOTHING / lambda_ if balanced else 0.0,
            "has_prior": bool(self._prior),
            "compensated_sum": COMPENSATED_SUM,
            "min_scale": MIN_SCALE,
            "max_average_cancellation": MAX_AVERAGE_CANCELLATION,
            "max_norm": MAX_NORM,
            "calibrate": self.calibrate,
            **self._platt.loop_settings(),
        }

    def _loop_state(self) -> dict[str, float | int]:
        """The state the compiled loop reads and writes, by the names of ``_loops.STATE`` and ``_loops.ISTATE``: the
        weights' (`WeightVector.loop_state`), the bias and its average, the step and class counts, and the
        calibration's (`OnlinePlatt.loop_state`); an explicit λ."""
        return {
            **self._u.loop_state(),
            "intercept": self._b,
            "average_intercept": self._average_b,
            "t": self._t,
            "n_pos": self._n_pos,
            "n_neg": self._n_neg,
            **self._platt.loop_state(),
        }

    def _set_loop_state(self, values: Mapping[str, float | int]) -> None:
        """Take back the state of ``_loop_state``'s names from ``values`` (which may hold others), as the compiled
        loop left it: the model moved on, and forgets the margins it remembered."""
        self._u.set_loop_state(values)
        self._b, self._average_b = float(values["intercept"]), float(values["average_intercept"])
        self._t, self._n_pos, self._n_neg = int(values["t"]), int(values["n_pos"]), int(values["n_neg"])
        self._platt.set_loop_state(values)
        self._last_scored = None

    # -- mini-batch inference ----------------------------------------------------------------

    def _margins_many(self, values: np.ndarray, columns: list, averaged: bool) -> np.ndarray:
        """Margins of every row of ``values`` (columns named by ``columns``)."""
        gather = self._u.average_gather if averaged else self._u.gather
        w = np.array(gather(columns))
        if self._prior:
            w += np.array([self._prior.get(j, 0.0) for j in columns])
        return values @ w + (self._average_b if averaged else self._b)

    def _margins_pair_many(self, values: np.ndarray, columns: list) -> tuple[np.ndarray, np.ndarray]:
        """(current iterate's margins, predicting margins) of every row of ``values``, as ``_margins`` of each."""
        margins = self._margins_many(values, columns, averaged=False)
        return margins, self._margins_many(values, columns, averaged=True) if self._u.n_averaged else margins

    def _decisions_many(self, X):
        X_nw = _frames().into_frame(X)
        columns = list(X_nw.columns)
        values = _finite_matrix(X_nw)
        if self._grid is not None:
            return X_nw, self._grid.decide_many(values, columns)
        return X_nw, self._margins_many(values, columns, self._u.n_averaged > 0)

    def predict_many(self, X):
        X_nw, decisions = self._decisions_many(X)
        return _frames().to_native_series(decisions > 0.0, name=None, like=X_nw)

    def predict_proba_many(self, X):
        X_nw, decisions = self._decisions_many(X)
        p = np.array([self._platt.proba(d) for d in decisions.tolist()])
        return _frames().to_native_frame({False: 1.0 - p, True: p}, like=X_nw)


def _check_settings(
    lambda_: float | str,
    fit_intercept: bool | str | None,
    horizon: int | None,
    t0: int | None,
    average: bool | int | None,
) -> bool:
    """Whether λ is "auto", once every setting is in range (a ValueError saying which is not)."""
    auto = isinstance(lambda_, str) and lambda_ == "auto"
    if not auto:
        try:
            check_lambda(cast(float, lambda_))
        except ValueError as error:
            raise ValueError(f"{error}, or 'auto'") from None
    check_fit_intercept(fit_intercept)
    check_horizon(horizon)
    if t0 is not None:
        check_t0(t0)
    check_average(average)
    return auto


def _frames() -> ModuleType:
    """river's data-frame helpers, imported on first use: only the mini-batch methods need them, and they cost a
    process 45 ms and 10 MB at start-up."""
    from river.utils import dataframe

    return dataframe


def _finite_matrix(X_nw) -> np.ndarray:
    """The frame as a float matrix; a ValueError naming the row and column of a bad value.

    Numeric, boolean and backend-specific (e.g. pandas sparse) columns convert directly; any other
    column (strings, objects) is checked value by value first, so that "1.0" is refused as in
    ``learn_one`` rather than parsed.
    """
    direct = all(dtype.is_numeric() or dtype.is_boolean() or str(dtype) == "Unknown" for dtype in X_nw.schema.values())
    if direct:
        values = _frames().to_numpy(X_nw)
        if np.isfinite(values).all():
            return values
    for row, x in enumerate(X_nw.iter_rows(named=True)):
        try:
            check_features(x)
        except ValueError as error:
            raise ValueError(f"row {row}: {error}") from None
    return _frames().to_numpy(X_nw)


def _same_layout(u: WeightVector | DenseWeightVector, fresh: WeightVector | DenseWeightVector) -> bool:
    """Whether weights ``u`` have the layout of a new learner's ``fresh``: both dicts, or arrays of its columns
    (any from its ``n_features`` to its ``max_features`` when they widen) with its limit."""
    if not isinstance(fresh, DenseWeightVector):
        return not isinstance(u, DenseWeightVector)
    if not isinstance(u, DenseWeightVector) or u.max_features != fresh.max_features:
        return False
    return len(fresh.v) <= len(u.v) <= (fresh.max_features or len(fresh.v))


def _columns_wanted(fresh: WeightVector | DenseWeightVector) -> str:
    """The columns of ``fresh``'s weights, in words: "" for dicts."""
    if not isinstance(fresh, DenseWeightVector):
        return ""
    if fresh.max_features is None:
        return f" of {len(fresh.v)} columns"
    return f" of {len(fresh.v)} to {fresh.max_features} columns"
