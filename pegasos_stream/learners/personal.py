"""Personal offsets on a shared model: for each user, Pegasos on what the shared model gets wrong for them."""

from __future__ import annotations

import math
from collections.abc import MutableMapping
from typing import Any, ClassVar

import numpy as np
from river import base

from .attribution import contributions
from .personal_offset import PersonalOffset, feature_columns, pegasos_scale
from .protocols import BinaryLearner
from .state import InvalidState, check_instance
from .validation import binary_sign, check_lambda, check_sample_weight

__all__ = ["PersonalPegasos"]


def _check_settings(
    shared: object,
    step: str,
    lambda_: float,
    t0: float,
    learning_rate: float,
    share_decay: float,
    max_weights: int,
    max_users: int,
) -> None:
    """Refuse (ValueError, naming the setting) settings of `PersonalPegasos` out of range."""
    if not isinstance(shared, BinaryLearner) or isinstance(shared, PersonalPegasos):
        raise ValueError(f"shared={type(shared).__name__}: expected a binary learner of this package")
    if step not in STEPS:
        raise ValueError(f"step={step!r}: expected one of {', '.join(STEPS)}")
    check_lambda(lambda_)
    for name, value, low in (("t0", t0, 1.0), ("learning_rate", learning_rate, math.ulp(0.0))):
        if isinstance(value, bool) or not (isinstance(value, (int, float)) and low <= value < math.inf):
            raise ValueError(f"{name}={value!r}: expected a finite number >= {low:g}")
    if isinstance(share_decay, bool) or not (isinstance(share_decay, (int, float)) and 0.0 <= share_decay < 1.0):
        raise ValueError(f"share_decay={share_decay!r}: expected a number in [0, 1)")
    for name, count in (("max_weights", max_weights), ("max_users", max_users)):
        if not (isinstance(count, int) and not isinstance(count, bool) and count >= 1):
            raise ValueError(f"{name}={count!r}: expected an int >= 1")


def _logistic(z: float) -> float:
    """σ(z) = 1/(1 + e^−z), without overflow."""
    if z >= 0.0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)


#: The steps an offset may take.
STEPS = ("pegasos", "adagrad")


class PersonalPegasos(base.Classifier):
    """A shared binary learner, plus for each user a sparse offset d_u learned from that user's labels.

    The score of x for user u is f(x) + ⟨d_u, x⟩, f the shared learner's decision; without a user, or for a user
    with no label yet, it is f(x), bit for bit. The shared learner learns every example as it would alone. The
    user's offset then takes a step on the prior form of the objective, the shared model its prior, with f(x) and
    d_u as they were when x was predicted (before anything learned it), m = f(x) + ⟨d_u, x⟩:

    * ``step="pegasos"``: Pegasos on λ_u/2·‖d_u‖² + the mean hinge loss max(0, 1 − y·m), which is Pegasos on
      λ_u/2·‖w_u − w_shared‖² for w_u = w_shared + d_u: at the user's t-th example η = 1/(λ_u(t + t0)),
      d_u ← (1 − ηλ_u)·d_u, plus η·w·y·x when y·m < 1.
    * ``step="adagrad"``: AdaGrad on the logistic loss log(1 + e^(−y·m)) from d_u = 0: with c = −w·y·σ(−y·m),
      for each feature j of x, G_j += (c·x_j)² and d_j −= ``learning_rate``·c·x_j/√(G_j + 1e-6). Its prior is the
      start, d_u = 0, and each feature's steps shrink as its gradients add up (λ_u and t0 are not used). A
      feature seen in few of the user's messages keeps large steps: the first labels of a user correct the shared
      model quickly where it is wrong for them, as a model of the user's own would, without losing what the
      shared model knows elsewhere (`scripts/bench_personal.py`). Before the step, d_u ← (1 − ρ·s³)·d_u, s the
      user's share of the shared learner's labels (the user's t over the shared learner's, this example counted
      in both) and ρ ``share_decay``: the pull toward the shared model grows with how much of the shared model is
      the user's own. A user with every label (s = 1) keeps about the corrections of their last 1/ρ labels; one
      of a sixth of them is pulled 216 times less, and one of a few labels hardly at all. Without it, a user whose
      mail the shared model mostly learned from keeps the corrections of its first labels long after the shared
      model has learned them too, counted twice.

    The shared model moves under the user: each step sees today's f, so the user's objective is that of the shared
    model of the moment, and d_u corrects it where it keeps being wrong for the user, and stays near 0 (the shared
    model) where it is not.

    Memory is bounded twice: an offset holds at most ``max_weights`` weights (past them, it keeps its largest four
    fifths, by |v|, the lower column of a tie, the others set to 0), and with ``store`` at most ``max_users`` offsets
    stay in memory, the least recently used one leaving for ``store`` (`PersonalOffset.to_bytes`) and coming back
    on the user's next event. ``store`` (a mapping of user to bytes: a dict, a ``dbm`` file, a stream engine's
    state) is the offsets' durable home and is not part of the learner's state.

    Parameters
    ----------
    shared
        The shared binary learner (``decision_function_one``, ``probability``, ``learn_one``).
    step
        "pegasos" or "adagrad" (see above).
    lambda_
        λ_u, the pull of every offset toward the shared model (> 0; Pegasos's steps).
    t0
        The step counter offset of every offset (≥ 1): the first step is η = 1/(λ_u·(1 + t0)) (Pegasos's steps).
    learning_rate
        AdaGrad's η (> 0; AdaGrad's steps).
    share_decay
        ρ, the decay of an offset at a step of a user with every label (in [0, 1); AdaGrad's steps; 0: none).
    max_weights
        The most weights an offset keeps.
    max_users
        The most offsets in memory when a ``store`` is given.
    store
        Where offsets leave memory for, by user; None: every offset stays in memory.

    Examples
    --------
    >>> from pegasos_stream.learners import PegasosClassifier
    >>> model = PersonalPegasos(PegasosClassifier(lambda_=0.1))
    >>> for x, y in [({"a": 1.0}, True), ({"b": 1.0}, False)] * 3:
    ...     model.learn_one(x, y, user="ann")
    >>> model.learn_one({"a": 1.0}, False, user="bob")
    >>> model.decision_function_one({"a": 1.0}) == model.shared.decision_function_one({"a": 1.0})
    True
    >>> model.decision_function_one({"a": 1.0}, user="bob") < model.decision_function_one({"a": 1.0})
    True
    """

    #: Its scores and steps are a user's (`attribution.contributions` asks).
    takes_users: ClassVar[bool] = True

    def __init__(
        self,
        shared: BinaryLearner,
        step: str = "adagrad",
        lambda_: float = 1e-3,
        t0: float = 1000.0,
        learning_rate: float = 0.3,
        share_decay: float = 0.01,
        max_weights: int = 100_000,
        max_users: int = 100_000,
        store: MutableMapping[str, bytes] | None = None,
    ) -> None:
        _check_settings(shared, step, lambda_, t0, learning_rate, share_decay, max_weights, max_users)
        self.shared = shared
        self.step = step
        self.lambda_ = lambda_
        self.t0 = t0
        self.learning_rate = learning_rate
        self.share_decay = share_decay
        self.max_weights = max_weights
        self.max_users = max_users
        self.store = store
        self._offsets: dict[str, PersonalOffset] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "store"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update({"share_decay": 0.0, **state})  # (a model saved before share_decay: none)
        self.store = None

    def _check_state(self) -> None:
        try:
            _check_settings(
                self.shared,
                self.step,
                self.lambda_,
                self.t0,
                self.learning_rate,
                self.share_decay,
                self.max_weights,
                self.max_users,
            )
        except ValueError as error:
            raise InvalidState(f"PersonalPegasos: settings refused: {error}") from None
        offsets = check_instance(self, "_offsets", dict)
        if not all(isinstance(u, str) and isinstance(o, PersonalOffset) for u, o in offsets.items()):
            raise InvalidState("PersonalPegasos._offsets: expected a dict of user names to PersonalOffset")
        if any(o.size > self.max_weights or (o.g is None) != (self.step == "pegasos") for o in offsets.values()):
            raise InvalidState(
                f"PersonalPegasos._offsets: an offset of more than {self.max_weights} weights, or of other steps"
            )

    @classmethod
    def _unit_test_params(cls):
        from .linear import PegasosClassifier

        yield {"shared": PegasosClassifier(lambda_=0.01)}
        yield {"shared": PegasosClassifier(lambda_=0.01), "step": "pegasos", "lambda_": 0.1}

    @property
    def _multiclass(self) -> bool:
        return False

    @property
    def t(self) -> int:
        """The examples the shared learner learned."""
        return self.shared.t

    @property
    def users(self) -> int:
        """The number of offsets in memory."""
        return len(self._offsets)

    @property
    def personal_weights(self) -> int:
        """The weights of the offsets in memory."""
        return sum(offset.size for offset in self._offsets.values())

    def offset(self, user: str) -> PersonalOffset | None:
        """The user's offset, from memory or the store (then in memory as the most recently used); None for a user
        with no label yet."""
        offset = self._offsets.pop(user, None)
        if offset is None and self.store is not None and user in self.store:
            offset = PersonalOffset.from_bytes(self.store[user])
        if offset is not None:
            self._offsets[user] = offset
            self._evict()
        return offset

    def _evict(self) -> None:
        """Move the least recently used offsets to the store while more than ``max_users`` are in memory."""
        if self.store is None:
            return
        while len(self._offsets) > self.max_users:
            user = next(iter(self._offsets))
            self.store[user] = self._offsets.pop(user).to_bytes()

    def personal_margin(self, x: dict, user: str | None) -> float:
        """⟨d_u, x⟩: 0 without a user or for a user with no label yet."""
        offset = None if user is None else self.offset(user)
        return 0.0 if offset is None else offset.dot(x, self.t0)

    def decision_function_one(self, x: dict, user: str | None = None) -> float:
        """f(x) + ⟨d_u, x⟩."""
        shared = self.shared.decision_function_one(x)
        return shared if user is None else shared + self.personal_margin(x, user)

    def contributions(self, x: dict, user: str | None = None) -> dict:
        """Each feature's part of the score of x for ``user``: the shared learner's (`attribution.contributions`),
        plus the user's offset's d_j·x_j."""
        parts = contributions(self.shared, x)
        offset = None if user is None else self.offset(user)
        if offset is not None:
            for j, weight in offset.found(x, self.t0).items():
                parts[j] = parts.get(j, 0.0) + weight * x[j]
        return parts

    def probability(self, score: float) -> float:
        """P(True) for a score: the shared learner's calibration."""
        return self.shared.probability(score)

    def predict_one(self, x: dict, user: str | None = None, **kwargs: Any) -> bool:
        return self.decision_function_one(x, user) > 0.0

    def predict_proba_one(self, x: dict, user: str | None = None, **kwargs: Any) -> dict:
        p = self.probability(self.decision_function_one(x, user))
        return {False: 1.0 - p, True: p}

    def learn_one(self, x: dict, y: object, w: float = 1.0, user: str | None = None) -> None:
        """The shared learner learns (x, y); then the user's offset takes its step (see the class). A step the
        offset refuses (values whose squares overflow: a ValueError) leaves it as it was, the shared step taken, as
        an instance of the users' offsets does with the event forwarded to it."""
        sign = binary_sign(y)
        weight = 1.0 if w == 1.0 else check_sample_weight(w)
        if user is None:
            self._learn_shared(x, y, w)
            return
        offset = self.offset(user)
        shared_score, shared_t = self.shared.decision_function_one(x), self.shared.t
        self._learn_shared(x, y, w)  # refused with nothing learned, or learned
        offset = self._new_offset(user) if offset is None else offset
        self.learn_offset(offset, x, sign > 0, shared_score, weight, shared_t=shared_t)

    def learn_offset(
        self,
        offset: PersonalOffset,
        x: dict,
        positive: bool,
        shared_score: float,
        w: float = 1.0,
        personal_score: float | None = None,
        shared_t: int | None = None,
        x_columns: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> None:
        """The step of a user's ``offset`` for (x, ``positive``) of weight ``w`` (see the class), ``shared_score``
        the shared learner's f(x) before it learned x and ``shared_t`` the examples it had learned then (None: no
        share decay): what `learn_one` takes after the shared learner's step, and what an instance that holds only
        some users' offsets takes from the shared learner's process. ``personal_score``, ⟨d_u, x⟩, and ``x_columns``,
        x's `feature_columns`, when the caller has them already."""
        sign = 1.0 if positive else -1.0
        columns, values = feature_columns(x) if x_columns is None else x_columns
        if personal_score is None:
            personal_score = offset.dot_columns(columns, values, self.t0)
        margin = shared_score + personal_score
        t = offset.t + 1  # (set once the step is taken: a step refused leaves the offset as it was)
        if self.step == "pegasos":
            if sign * margin < 1.0 and w:
                eta = 1.0 / (self.lambda_ * (t + self.t0))
                offset.pegasos_step(columns, values, eta * (sign * w) / pegasos_scale(t, self.t0))
        else:
            decay = 1.0
            if self.share_decay and shared_t is not None:
                decay -= self.share_decay * min(1.0, t / (shared_t + 1)) ** 3
            gradient = -sign * w * _logistic(-sign * margin)
            offset.adagrad_step(columns, values, gradient, self.learning_rate, decay)
        offset.t = t
        offset.keep(self.max_weights)

    def new_offset(self) -> PersonalOffset:
        """An offset of no label yet, for this learner's steps."""
        return PersonalOffset(g=None if self.step == "pegasos" else np.empty(0, np.float64))

    def _learn_shared(self, x: dict, y: object, w: float) -> None:
        learn: Any = self.shared.learn_one
        learn(x, y) if w == 1.0 else learn(x, y, w)

    def _new_offset(self, user: str) -> PersonalOffset:
        if not isinstance(user, str):
            raise ValueError(f"a user is a str, got {type(user).__name__}")
        offset = self._offsets[user] = self.new_offset()
        self._evict()
        return offset
