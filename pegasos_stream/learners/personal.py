"""Personal offsets on a shared model: for each user, Pegasos on what the shared model gets wrong for them."""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Hashable, MutableMapping
from typing import Any, ClassVar

import numpy as np
from river import base

from .attribution import contributions
from .protocols import BinaryLearner
from .state import InvalidState, check_count, check_instance, finite_floats
from .validation import binary_sign, check_lambda, check_sample_weight

__all__ = ["PersonalOffset", "PersonalPegasos"]


class PersonalOffset:
    """One user's offset d = (t0/(t + t0))·v, sparse, and the number of the user's examples learned, t.

    The scale t0/(t + t0) is the product of the shrinks (1 − η_s λ) = (s − 1 + t0)/(s + t0) of steps 1..t, in
    closed form: the weights in ``v`` are those of d divided by it, so that a shrink touches no weight.
    """

    __slots__ = ("t", "v")

    def __init__(self, t: int = 0, v: dict[Hashable, float] | None = None) -> None:
        self.t = t
        self.v: dict[Hashable, float] = {} if v is None else v

    def __getstate__(self) -> dict[str, Any]:
        return {"t": self.t, "v": self.v}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.t, self.v = state["t"], state["v"]

    def _check_state(self) -> None:
        check_count(self, "t")
        v = check_instance(self, "v", dict)
        if not (all(type(k) in (int, str) for k in v) and finite_floats(v.values())):
            raise InvalidState(f"PersonalOffset.v: expected int or str keys and finite floats, got {v!r:.60}")

    def scale(self, t0: float) -> float:
        """t0/(t + t0): d = scale·v."""
        return t0 / (self.t + t0)

    def dot(self, x: dict, t0: float) -> float:
        """⟨d, x⟩."""
        v = self.v
        return self.scale(t0) * sum(v[k] * value for k, value in x.items() if k in v)

    def to_bytes(self) -> bytes:
        """t, then the keys and weights of ``v``: int keys as int64, else a JSON list of str keys."""
        keys, weights = list(self.v), np.fromiter(self.v.values(), np.float64, len(self.v))
        if all(type(k) is int for k in keys):
            head, body = b"i", np.array(keys, np.int64).tobytes()
        elif all(type(k) is str for k in keys):
            head, body = b"s", json.dumps(keys).encode()
        else:
            raise ValueError("a personal offset is stored only with int or str feature keys")
        return struct.pack("<cqq", head, self.t, len(keys)) + weights.tobytes() + body

    @classmethod
    def from_bytes(cls, data: bytes) -> PersonalOffset:
        """The offset `to_bytes` gave ``data``."""
        head, t, n = struct.unpack_from("<cqq", data)
        start = struct.calcsize("<cqq")
        weights = np.frombuffer(data, np.float64, n, start).tolist()
        body = data[start + 8 * n :]
        keys = np.frombuffer(body, np.int64, n).tolist() if head == b"i" else json.loads(body)
        return cls(t, dict(zip(keys, weights, strict=True)))


class PersonalPegasos(base.Classifier):
    """A shared binary learner, plus for each user a sparse offset d_u learned from that user's labels.

    The score of x for user u is f(x) + ⟨d_u, x⟩, f the shared learner's decision; without a user, or for a user
    with no label yet, it is f(x), bit for bit. The shared learner learns every example as it would alone. The
    user's offset then takes a Pegasos step on the prior form of the objective, the shared model its prior:

        λ_u/2·‖d_u‖² + mean over the user's examples of max(0, 1 − y·(f(x) + ⟨d_u, x⟩)),

    at the user's t-th example η = 1/(λ_u(t + t0)): d_u ← (1 − ηλ_u)·d_u, plus η·w·y·x when y·(f(x) + ⟨d_u, x⟩) < 1,
    with f(x) and d_u as they were when x was predicted (before anything learned it). That is Pegasos on
    λ_u/2·‖w_u − w_shared‖² for w_u = w_shared + d_u. The shared model moves under the user: each step
    sees today's f, so the user's objective is that of the shared model of the moment, and d_u corrects the
    shared model where it keeps being wrong for the user, pulled to 0 (the shared model) where it is not.

    Memory is bounded twice: an offset keeps its ``max_weights`` largest weights (by |v|, the earlier one of a
    tie; the others set to 0 after each step that adds weights), and with ``store`` at most ``max_users`` offsets
    stay in memory, the least recently used one leaving for ``store`` (`PersonalOffset.to_bytes`) and coming back
    on the user's next event. ``store`` (a mapping of user to bytes: a dict, a ``dbm`` file, a stream engine's
    state) is the offsets' durable home and is not part of the learner's state.

    Parameters
    ----------
    shared
        The shared binary learner (``decision_function_one``, ``probability``, ``learn_one``).
    lambda_
        λ_u, the pull of every offset toward the shared model (> 0).
    t0
        The step counter offset of every offset (≥ 1): the first step is η = 1/(λ_u·(1 + t0)).
    max_weights
        The most weights an offset keeps.
    max_users
        The most offsets in memory when a ``store`` is given.
    store
        Where offsets leave memory for, by user; None: every offset stays in memory.

    Examples
    --------
    >>> from pegasos_stream.learners import PegasosClassifier
    >>> model = PersonalPegasos(PegasosClassifier(lambda_=0.1), lambda_=0.5)
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
        lambda_: float = 1e-3,
        t0: float = 1000.0,
        max_weights: int = 10_000,
        max_users: int = 100_000,
        store: MutableMapping[str, bytes] | None = None,
    ) -> None:
        if not isinstance(shared, BinaryLearner) or isinstance(shared, PersonalPegasos):
            raise ValueError(f"shared={type(shared).__name__}: expected a binary learner of this package")
        check_lambda(lambda_)
        if isinstance(t0, bool) or not (isinstance(t0, (int, float)) and math.isfinite(t0) and t0 >= 1):
            raise ValueError(f"t0 must be a number >= 1, got {t0!r}")
        for name, value in (("max_weights", max_weights), ("max_users", max_users)):
            if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        self.shared = shared
        self.lambda_ = lambda_
        self.t0 = t0
        self.max_weights = max_weights
        self.max_users = max_users
        self.store = store
        self._offsets: dict[str, PersonalOffset] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "store"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.store = None

    def _check_state(self) -> None:
        offsets = check_instance(self, "_offsets", dict)
        if not all(isinstance(u, str) and isinstance(o, PersonalOffset) for u, o in offsets.items()):
            raise InvalidState("PersonalPegasos._offsets: expected a dict of user names to PersonalOffset")
        if any(len(offset.v) > self.max_weights for offset in offsets.values()):
            raise InvalidState(f"PersonalPegasos._offsets: an offset holds more than {self.max_weights} weights")
        if not isinstance(self.shared, BinaryLearner):
            raise InvalidState(f"PersonalPegasos.shared: expected a binary learner, got {type(self.shared).__name__}")
        try:
            PersonalPegasos(self.shared, self.lambda_, self.t0, self.max_weights, self.max_users)
        except ValueError as error:
            raise InvalidState(f"PersonalPegasos: settings refused: {error}") from None

    @classmethod
    def _unit_test_params(cls):
        from .linear import PegasosClassifier

        yield {"shared": PegasosClassifier(lambda_=0.01), "lambda_": 0.1}

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
        return sum(len(offset.v) for offset in self._offsets.values())

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
            scale, v = offset.scale(self.t0), offset.v
            for j, value in x.items():
                if j in v:
                    parts[j] = parts.get(j, 0.0) + scale * v[j] * value
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
        """The shared learner learns (x, y); then the user's offset takes its step (see the class)."""
        sign = binary_sign(y)
        weight = 1.0 if w == 1.0 else check_sample_weight(w)
        if user is None:
            self._learn_shared(x, y, w)
            return
        offset = self.offset(user)
        margin = self.shared.decision_function_one(x) + (0.0 if offset is None else offset.dot(x, self.t0))
        self._learn_shared(x, y, w)  # refused with nothing learned, or learned
        self._step(offset or self._new_offset(user), x, sign * weight if sign * margin < 1.0 else 0.0)

    def _learn_shared(self, x: dict, y: object, w: float) -> None:
        learn: Any = self.shared.learn_one
        learn(x, y) if w == 1.0 else learn(x, y, w)

    def _new_offset(self, user: str) -> PersonalOffset:
        if not isinstance(user, str):
            raise ValueError(f"a user is a str, got {type(user).__name__}")
        offset = self._offsets[user] = PersonalOffset()
        self._evict()
        return offset

    def _step(self, offset: PersonalOffset, x: dict, signed_weight: float) -> None:
        """Step t + 1 of ``offset``: shrink (the scale), then add η·``signed_weight``·x, then keep the largest."""
        offset.t += 1
        if not signed_weight:
            return
        eta = 1.0 / (self.lambda_ * (offset.t + self.t0))
        add = eta * signed_weight / offset.scale(self.t0)
        v = offset.v
        for k, value in x.items():
            v[k] = v.get(k, 0.0) + add * value
        if len(v) > self.max_weights:
            kept = set(sorted(v, key=lambda k: -abs(v[k]))[: self.max_weights])  # stable: the earlier of a tie
            offset.v = {k: v[k] for k in v if k in kept}
