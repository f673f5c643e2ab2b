"""Pegasos for several λ beside logistic regressions of several step sizes, their members mixed by prequential log
loss."""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence

import numpy as np
from river import base

from .adagrad import AdaGradLogistic
from .batch import LearnBatch
from .calibration import OnlinePlatt, squash_slope
from .committee import PegasosCommittee
from .compiled import calibrate_rows
from .hedge import initial_log_weights, mix_rows, share_cost
from .linear import PegasosClassifier
from .logistic_pegasos import PegasosLogistic
from .normalized_hinge import NormalizedHinge
from .state import InvalidState, check_list, check_parts, new_like
from .validation import MAX_STEP_COUNT, binary_sign, check_lambdas, check_sample_weight

__all__ = ["PegasosMixture"]


class PegasosMixture(base.Classifier):
    """Members of several regularisation strengths and step sizes, weighted by how well each has predicted so far.

    No single setting suits every stream: long mail wants a weak regularisation, short texts a stronger one, a small
    homogeneous stream large uniform steps. For each λ of ``lambdas`` a Pegasos SVM learns every example (its step
    counter offset t0 = ``lambda_t0``/λ, so that every SVM's first step is η = 1/``lambda_t0``), beside a logistic
    regression with AdaGrad's steps for each (η, ε) of ``logistics``: ε small gives AdaGrad's per-feature steps,
    which keep a rare feature weighty from its first sightings; ε large next to the squared gradients gives steps of
    nearly η/√ε for every feature, a plain logistic regression with large steps. All of them read one feature pass.
    For each (λ, t0) of ``pegasos_logistics`` a `PegasosLogistic` (Pegasos's steps on the logistic loss) learns
    beside them: the loss of the SGD logistic regressions a short text favours, and a member that learns from every
    example, where the hinge loss learns only from margin violations. For each η of ``normalized_hinges`` a
    `NormalizedHinge` learns too: the hinge loss by AdaGrad's per-feature steps in units of each feature's largest
    value so far, each step stopping at the margin.
    The members are, for each λ, the SVM's margin plus each logistic regression's and the SVM's margin alone, then
    each logistic regression's margin alone, then each logistic SVM's, then each normalized hinge's. Each member's
    margin is calibrated online into a probability p_k (`OnlinePlatt`); the mixture predicts p(x) = Σ_k π_k p_k(x).
    After each example the weights π_k are multiplied by the probability each member gave its label (to the power of
    its sample weight) and normalised, the exponentially weighted average forecaster with η = 1 on the log loss; then
    a fraction α_s = c/(s + 2c) of them, s the examples learned so far and c = ``share``, is spread evenly over the
    members (fixed share at a decreasing rate, `hedge`), so that a member that starts badly and learns to predict
    best takes the lead within a few hundred examples rather than never. ``share=0`` gives the plain Bayes mixture,
    π_k ∝ exp(−L_k). The decision is the log-odds log p − log(1 − p), and the probability is p.

    **Guarantee.** With unit sample weights, on any stream of T examples, the mixture's cumulative log loss
    is at most its best member's plus the ``regret_bound``:

        Σ_t −log p(y_t | x_t) ≤ min_k L_k(T) + ln M + Σ_{s=1}^{T−1} −ln(1 − α_s),

    L_k the member's prequential log loss, M = len(lambdas)·(len(logistics) + 1) + len(logistics) +
    len(pegasos_logistics) + len(normalized_hinges) and the last term
    about c·ln T (``share=0``: ln M alone). The bound holds whatever the members are; ``member_losses`` and
    ``member_weights`` show where the mixture stands.

    Parameters
    ----------
    lambdas
        The SVMs' regularisation strengths, each > 0.
    lambda_t0
        λ·t0 of every SVM (> 0, and at most 2**53 λ): its first step is η = 1/``lambda_t0``, and its step
        η = 1/(λ(t + t0)).
    horizon
        The SVMs' step counter saturation (`PegasosClassifier`).
    logistics
        The logistic regressions' (η, ε), each > 0 (`AdaGradLogistic`'s ``learning_rate`` and
        ``initial_accumulator``); the first learns beside the first SVM in a `PegasosCommittee`.
    n_features
        None for weights in dicts, or every learner's weights in arrays of int columns 0..n − 1.
    share
        c ≥ 0 of the share rate α_s = c/(s + 2c).
    pegasos_logistics
        The (λ, t0) of each `PegasosLogistic` (none by default).
    normalized_hinges
        The η of each `NormalizedHinge` (none by default).

    Examples
    --------

    >>> from river import datasets, evaluate, metrics, preprocessing
    >>> from pegasos_stream import PegasosMixture

    >>> model = preprocessing.StandardScaler() | PegasosMixture(lambdas=(1e-3, 1e-2), lambda_t0=1.0)
    >>> evaluate.progressive_val_score(datasets.Phishing(), model, metrics.Accuracy() + metrics.ROCAUC())
    Accuracy: 89.04%
    ROCAUC: 94.27%

    >>> weights = model["PegasosMixture"].member_weights
    >>> len(weights), max(weights, key=weights.get)
    (8, 'logistic(0.7)')

    """

    # Declared here so that every method sees their types (all are set in __init__).
    lambdas: tuple[float, ...]
    lambda_t0: float
    logistics: tuple[tuple[float, float], ...]
    share: float
    committee: PegasosCommittee
    svms: list[PegasosClassifier]
    logistic_regressions: list[AdaGradLogistic]
    pegasos_logistics: list[tuple[float, int]]
    logistic_svms: list[PegasosLogistic]
    normalized_hinges: list[float]
    hinges: list[NormalizedHinge]
    _platts: list[OnlinePlatt]
    _losses: list[float]
    _log_weights: list[float]

    def __init__(
        self,
        lambdas: Sequence[float] = (1e-5, 1e-4, 1e-3),
        lambda_t0: float = 0.3,
        horizon: int | None = None,
        logistics: Sequence[Sequence[float]] = ((0.7, 1e-6), (10.0, 1.0)),
        n_features: int | None = None,
        share: float = 3.0,
        pegasos_logistics: Sequence[Sequence[float]] = (),
        normalized_hinges: Sequence[float] = (),
    ):
        checked = _check_settings(lambdas, lambda_t0, logistics, share, pegasos_logistics, normalized_hinges)
        self.lambdas = checked
        self.lambda_t0 = float(lambda_t0)
        self.horizon = horizon
        self.logistics = tuple((float(rate), float(epsilon)) for rate, epsilon in logistics)
        self.n_features = n_features
        self.share = float(share)
        # a list: river's clone takes an empty tuple for a class and its settings
        self.pegasos_logistics = [(float(lambda_), int(t0)) for lambda_, t0 in pegasos_logistics]
        (first_rate, first_epsilon), *other_logistics = self.logistics
        first, *others = self.lambdas
        self.committee = PegasosCommittee(first, self._t0(first), horizon, first_rate, n_features, first_epsilon)
        self.svms = [
            PegasosClassifier(lambda_=lambda_, t0=self._t0(lambda_), horizon=horizon, n_features=n_features)
            for lambda_ in others
        ]
        self.logistic_regressions = [AdaGradLogistic(rate, n_features, epsilon) for rate, epsilon in other_logistics]
        self.logistic_svms = [PegasosLogistic(lambda_, t0, n_features) for lambda_, t0 in self.pegasos_logistics]
        self.hinges = [NormalizedHinge(rate, n_features) for rate in normalized_hinges]
        self.normalized_hinges = [hinge.learning_rate for hinge in self.hinges]
        members = len(self.member_names)
        self._platts = [OnlinePlatt() for _ in range(members)]
        self._losses = [0.0] * members
        self._log_weights = initial_log_weights(members)

    def __setstate__(self, state: dict) -> None:
        """The saved state; one saved before ``share`` existed mixes on as it did, by exp(−L_k) (share 0), and one
        saved before ``pegasos_logistics`` or ``normalized_hinges`` existed has none of them."""
        self.__dict__.update(state)
        if "pegasos_logistics" not in state:
            self.pegasos_logistics, self.logistic_svms = [], []
        if "normalized_hinges" not in state:
            self.normalized_hinges, self.hinges = [], []
        if "_log_weights" not in state and "_losses" in state:
            losses = np.array(self._losses)
            self.share = 0.0
            self._log_weights = (losses.min() - losses - np.log(np.exp(losses.min() - losses).sum())).tolist()

    def _check_state(self) -> None:
        """Refuse (InvalidState) settings the constructor refuses, learners that are not those of these settings
        or that took different numbers of steps, or calibrations, losses and log-weights that are not one per
        member (finite floats, the losses >= 0, the weights adding up to 1)."""
        fresh = new_like(self)
        check_parts(self, fresh, ("committee", "svms", "logistic_regressions", "logistic_svms", "hinges", "_platts"))
        if len({learner.t for learner in self.learners}) > 1:
            raise InvalidState("PegasosMixture: its learners took different numbers of steps")
        members = len(fresh._losses)
        check_list(self, "_losses", members, 0.0)
        log_weights = check_list(self, "_log_weights", members)
        top = max(log_weights)
        if not abs(top + math.log(math.fsum(math.exp(weight - top) for weight in log_weights))) <= 1e-6:
            raise InvalidState("PegasosMixture._log_weights: expected the logs of weights that add up to 1")

    def _t0(self, lambda_: float) -> int:
        return round(self.lambda_t0 / lambda_)

    @classmethod
    def _unit_test_params(cls):
        yield {}
        yield {"lambdas": (1e-2,), "lambda_t0": 1.0, "horizon": 20, "logistics": ((0.1, 1e-6),), "share": 0.0}
        yield {"lambdas": (1e-3,), "logistics": ((0.7, 1e-6),), "pegasos_logistics": ((1e-2, 10),)}
        yield {"lambdas": (1e-3,), "logistics": ((0.7, 1e-6),), "normalized_hinges": (0.5,)}

    @property
    def t(self) -> int:
        """The number of examples learned (by each learner)."""
        return self.committee.t

    @property
    def learners(self) -> list[PegasosClassifier | AdaGradLogistic | PegasosLogistic | NormalizedHinge]:
        """The learners whose weights make the mixture: its SVMs, its logistic regressions and its hinges."""
        return [*self.committee.learners, *self._others()]

    @property
    def member_names(self) -> list[str]:
        """The members, in order: for each λ, "svm(λ)+logistic(η)" for each logistic regression and "svm(λ)"; then
        "logistic(η)" for each logistic regression; then "pegasos_logistic(λ)" for each of ``pegasos_logistics``;
        then "normalized_hinge(η)" for each of ``normalized_hinges``."""
        logistics = [f"logistic({rate:g})" for rate, _ in self.logistics]
        svms = [f"svm({lambda_:g})" for lambda_ in self.lambdas]
        sums = [name for svm in svms for name in (*(f"{svm}+{logistic}" for logistic in logistics), svm)]
        pegasos_logistics = [f"pegasos_logistic({lambda_:g})" for lambda_, _ in self.pegasos_logistics]
        return sums + logistics + pegasos_logistics + [f"normalized_hinge({rate:g})" for rate in self.normalized_hinges]

    @property
    def regret_bound(self) -> float:
        """ln M + Σ_{s=1}^{T−1} −ln(1 − α_s), T = `t`: the most by which the mixture's cumulative log loss so far
        exceeds its best member's (unit weights)."""
        return math.log(len(self._losses)) + share_cost(self.share, self.t)

    @property
    def member_losses(self) -> dict[str, float]:
        """Each member's prequential log loss L_k so far."""
        return dict(zip(self.member_names, self._losses))

    @property
    def member_weights(self) -> dict[str, float]:
        """Each member's weight π_k in the next prediction (they add up to 1)."""
        weights = np.exp(self._log_weights)
        return dict(zip(self.member_names, (weights / weights.sum()).tolist()))

    def _member_margins(self, svm_margins: np.ndarray, logistic_margins: np.ndarray, others: np.ndarray) -> np.ndarray:
        """The members' margins (one row each) from the SVMs', the logistic regressions' and the other learners' (the
        logistic SVMs' and the hinges', one row each)."""
        sums = [row for svm in svm_margins for row in (*(svm + logistic for logistic in logistic_margins), svm)]
        return np.stack([*sums, *logistic_margins, *others])

    def decision_function_one(self, x: Mapping) -> float:
        """log p(x) − log(1 − p(x)), p the mixture's probability."""
        return float(self._mixed(self._margins_one(x), update=None)[0][0])

    def predict_one(self, x: Mapping, **kwargs) -> bool:
        return self.decision_function_one(x) > 0.0

    def probability(self, decision: float) -> float:
        """p, from the decision log p − log(1 − p)."""
        return float(_logistic(np.array([decision]))[0])

    def predict_proba_one(self, x: Mapping, **kwargs) -> dict[base.typing.ClfTarget, float]:
        p = float(self._mixed(self._margins_one(x), update=None)[1][0])
        return {False: 1.0 - p, True: p}

    def contributions(self, x: Mapping) -> dict:
        """Each feature's part of the decision on x, to first order: Σ_k g_k·(m_k({j: x_j}) − m_k({})), m_k member
        k's margin (linear in x) and g_k = ∂D/∂m_k at x, D = log Σπp − log Σπ(1 − p) and p_k = squash(a_k·m_k +
        b_k) its calibration (`attribution`)."""
        margins = self._margins_one(x)[:, 0]
        weights = np.exp(np.array(self._log_weights))
        weights /= weights.sum()
        p = np.array([platt.proba(margin) for platt, margin in zip(self._platts, margins.tolist())])
        slopes = np.array(
            [platt.slope * squash_slope(platt.slope * m + platt.offset) for platt, m in zip(self._platts, margins)]
        )
        mixed, rest = max(float(weights @ p), _TINY), max(float(weights @ (1.0 - p)), _TINY)
        gradient = weights * (1.0 / mixed + 1.0 / rest) * slopes
        base = self._margins_one({})[:, 0]
        return {j: float(gradient @ (self._margins_one({j: value})[:, 0] - base)) for j, value in x.items()}

    def _margins_one(self, x: Mapping) -> np.ndarray:
        """The members' margins of x, one column."""
        svm_margins = [svm.decision_function_one(x) for svm in (self.committee.svm, *self.svms)]
        logistic_margins = [logistic.decision_function_one(x) for logistic in self._logistics()]
        learners: list[PegasosLogistic | NormalizedHinge] = [*self.logistic_svms, *self.hinges]
        others = [learner.decision_function_one(x) for learner in learners]
        return self._member_margins(
            np.array(svm_margins)[:, None], np.array(logistic_margins)[:, None], np.array(others).reshape(-1, 1)
        )

    def _logistics(self) -> list[AdaGradLogistic]:
        return [self.committee.logistic, *self.logistic_regressions]

    def _others(self) -> list[PegasosClassifier | AdaGradLogistic | PegasosLogistic | NormalizedHinge]:
        """The learners besides the committee, in the order of their margins' rows."""
        return [*self.svms, *self.logistic_regressions, *self.logistic_svms, *self.hinges]

    def learn_one(self, x: Mapping, y: base.typing.ClfTarget, w: float = 1.0) -> None:
        sign = binary_sign(y)
        weight = 1.0 if w == 1.0 else check_sample_weight(w)
        margins = self._margins_one(x)  # remembered by each SVM for its step
        self.committee.learn_one(x, y, w)  # refused with nothing learned, or learned
        for learner in self._others():
            learner.learn_one(x, y, w)
        self._mixed(margins, update=(np.array([sign]), np.array([weight])))

    def learn_rows(self, batch: LearnBatch) -> tuple[int, ValueError | None]:
        """``learn_one`` over the batch's rows from its start, each learner in its compiled loop; as
        `PegasosClassifier.learn_rows` (the same arrays, the same stop at a refused row)."""
        rows, signs, weights, start = batch.rows, batch.signs, batch.weights, batch.start
        decisions, probas = batch.decisions, batch.probas
        n = len(rows)
        svm_margins, logistic_margins = np.empty((len(self.lambdas), n)), np.empty((len(self.logistics), n))
        other_margins = np.empty((len(self.logistic_svms) + len(self.hinges), n))
        parts, unused = np.empty((2, n)), np.empty(n)
        stops = [self.committee.learn_rows(batch.into(unused, unused), parts=parts)]
        svm_margins[0], logistic_margins[0] = parts
        stops += [  # (their probabilities are not wanted: the mixture calibrates their margins itself)
            learner.learn_rows(batch.into(margins, np.empty(0)))
            for learner, margins in zip(self._others(), (*svm_margins[1:], *logistic_margins[1:], *other_margins))
        ]
        stop, error = stops[0]
        if any(other != stop for other, _ in stops):  # the learners check rows alike: never seen
            raise RuntimeError(f"the learners of the mixture stopped at rows {[other for other, _ in stops]}")
        margins = self._member_margins(
            svm_margins[:, start:stop], logistic_margins[:, start:stop], other_margins[:, start:stop]
        )
        decisions[start:stop], probas[start:stop] = self._mixed(
            margins, update=(signs[start:stop], weights[start:stop])
        )
        if error is not None:  # the refused row is predicted, as by learn_one, when its margins are finite
            decisions[stop] = probas[stop] = np.nan
            try:
                decisions[stop] = decision = self.decision_function_one(rows.row(stop))
                probas[stop] = self.probability(decision)
            except ValueError:
                pass
        return stop, error

    def _mixed(
        self, margins: np.ndarray, update: tuple[np.ndarray, np.ndarray] | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The mixture's decisions and probabilities of rows with these member ``margins`` (one row per
        member), in order. With ``update`` (the rows' signs and sample weights, the rows the learners have just
        learned), each row's members' calibrations, losses and weights then learn it, before the next row is
        mixed."""
        n = margins.shape[1]
        member_probas = np.empty(margins.shape)
        for platt, row, probas in zip(self._platts, margins, member_probas):
            if update is None:
                probas[:] = [platt.proba(margin) for margin in row.tolist()]
            else:
                calibrate_rows(platt, np.ascontiguousarray(row), update[0], probas)
        decisions = np.empty(n)
        log_p, log_q = np.log(member_probas), np.log(1.0 - member_probas)
        if update is None:
            mix_rows(log_p, log_q, decisions, self._log_weights)
        else:
            signs, weights = update
            mix_rows(log_p, log_q, decisions, self._log_weights, (signs, weights, self._losses, self.t - n, self.share))
        return decisions, _logistic(decisions)


def _check_settings(
    lambdas: Sequence[float],
    lambda_t0: float,
    logistics: Sequence[Sequence[float]],
    share: float,
    pegasos_logistics: Sequence[Sequence[float]],
    normalized_hinges: Sequence[float],
) -> tuple[float, ...]:
    """The mixture's λs as floats (`check_lambdas`), once every setting is in range (a ValueError saying which is
    not)."""
    checked = check_lambdas(lambdas)
    _check_lambda_t0(lambda_t0, checked)
    if not (_is_list(logistics) and logistics and all(map(_is_pair, logistics))):
        raise ValueError(f"logistics={logistics!r}: expected a non-empty list of [learning rate, ε] pairs")
    if isinstance(share, bool) or not isinstance(share, numbers.Real) or not 0 <= share < math.inf:
        raise ValueError(f"share={share!r}: expected a finite number >= 0")
    if not (_is_list(pegasos_logistics) and all(map(_is_pair, pegasos_logistics))):
        raise ValueError(f"pegasos_logistics={pegasos_logistics!r}: expected a list of [λ, t0] pairs")
    if not _is_list(normalized_hinges):  # (each rate is NormalizedHinge's to check)
        raise ValueError(f"normalized_hinges={normalized_hinges!r}: expected a list of learning rates")
    return checked


def _check_lambda_t0(lambda_t0: float, lambdas: tuple[float, ...]) -> None:
    """Refuse a λ·t0 that is not a number > 0 giving each SVM (of the checked ``lambdas``) a t0 in range."""
    number = not isinstance(lambda_t0, bool) and isinstance(lambda_t0, numbers.Real)
    if not (number and lambda_t0 > 0 and lambda_t0 / min(lambdas) <= MAX_STEP_COUNT):  # each SVM's t0 in range
        raise ValueError(
            f"lambda_t0={lambda_t0!r}: expected a finite number > 0 with lambda_t0/λ at most 2**53 for each λ of"
            " lambdas"
        )


def _is_list(value: object) -> bool:
    """Whether ``value`` is a sequence of items (not a string, not a mapping)."""
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes, Mapping))


def _is_pair(value: object) -> bool:
    """Whether ``value`` is a sequence of two items (not a string)."""
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes)) and len(value) == 2


#: The least mixed probability a gradient divides by.
_TINY = 1e-300


def _logistic(decisions: np.ndarray) -> np.ndarray:
    """1/(1 + e^−d) of each decision, without overflow."""
    low = np.exp(-np.abs(decisions))
    return np.where(decisions >= 0, 1.0 / (1.0 + low), low / (1.0 + low))
