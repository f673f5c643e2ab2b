"""Dense numpy reference implementations of the Pegasos learners -- for tests only.

They follow the documented algorithm formula by formula, with no optimisation at all:
w is a plain numpy vector indexed through a fixed vocabulary ``{feature key: column}`` that the
test builds from the stream, there is no lazy scaling, and the average is the plain mean of
the iterates (sum of the iterates divided by t).

Binary learner, ``learn_one(x, y, w)``:

    s      = +1 for True/1, -1 for False/0/-1;  n_pos / n_neg += 1
    cost   = w * class_cost(y)      1 | class_weight[y] (missing -> 1) | "balanced":
                                    min((n + 2 a) / (2 (n_y + a)), M), counts including the current
                                    example, a = BALANCED_SMOOTHING / lambda, M = BALANCED_MAX_COST
    margin = s * (<w_r + u, x> + b)
    t += 1;  te = min(t, horizon) (or t) + t0;  eta = 1 / (lambda * te)
    u     <- (1 - 1/te) u
    b     <- (1 - 1/te) b                                          (fit_intercept="regularised" only)
    if margin < 1:  u <- u + eta cost s x;   b <- b + eta cost s   (fit_intercept only; "regularised":
                    b <- b + min(eta, MAX_BIAS_STEP) cost s)
    projection:     u <- min(1, (1/sqrt(lambda)) / ||u||) u        (b never projected)
    average:        ubar = (u_k + ... + u_t) / (t - k + 1), bbar likewise, k = 1 for True else k = average
    decision(x)   = <w_r + ubar, x> + bbar once t >= k, else <w_r + u, x> + b

``learn_many(xs, ys)`` is ONE step: all k labels are counted first (balanced costs use the
counts after the whole batch), all margins use the pre-step weights, then t += 1 once, u is
shrunk once and u += (eta/k) sum_{margin_i < 1} cost_i s_i x_i  (b likewise).

Multiclass (Crammer-Singer), ``learn_one(x, y, w)``:

    new class -> appended with w_k = 0, b_k = 0;  score_k = <w_k, x> + b_k
    r = argmax_{k != y} score_k (earliest on ties);  margin = score_y - score_r
    t += 1;  te, eta as above;  W <- (1 - 1/te) W
    if r exists and margin < 1:  w_y += eta w x;  w_r -= eta w x;  (b_y += eta w;  b_r -= eta w)
    projection: W <- min(1, (1/sqrt(lambda)) / ||W||_F) W
"""

from __future__ import annotations

import numpy as np


def y_sign(y) -> int:
    """+1 for True / 1, -1 for False / 0 / -1 (bools, numpy bools, ints or floats)."""
    if y == 1:
        return 1
    if y == 0 or y == -1:
        return -1
    raise ValueError(f"bad label {y!r}")


class _Dense:
    """Shared helpers: vocabulary, dict <-> dense vector."""

    def __init__(self, vocab: dict, lambda_: float, horizon, t0: int = 0):
        self.vocab = dict(vocab)
        self.lambda_ = float(lambda_)
        self.horizon = horizon
        self.t0 = t0
        self.t = 0

    def vec(self, x) -> np.ndarray:
        """A feature dict as a dense vector (a ready-made numpy vector is passed through)."""
        if isinstance(x, np.ndarray):
            return x
        v = np.zeros(len(self.vocab))
        for key, value in x.items():
            v[self.vocab[key]] = float(value)
        return v

    def as_dict(self, v: np.ndarray) -> dict:
        return {key: float(v[j]) for key, j in self.vocab.items()}

    def _tick(self):
        """t += 1 and return (te, eta)."""
        self.t += 1
        te = (min(self.t, self.horizon) if self.horizon else self.t) + self.t0
        return te, 1.0 / (self.lambda_ * te)


class DenseReference(_Dense):
    """Binary Pegasos, straight from the formulas (see the module docstring)."""

    BALANCED_SMOOTHING = 0.05
    BALANCED_MAX_COST = 5.0
    MAX_BIAS_STEP = 0.2

    def __init__(
        self,
        vocab,
        lambda_=1e-4,
        fit_intercept=False,
        projection=False,
        average=False,
        class_weight=None,
        prior=None,
        horizon=None,
        t0=0,
    ):
        super().__init__(vocab, lambda_, horizon, t0)
        self.fit_intercept = fit_intercept
        self.projection = projection
        self.average = average
        self.class_weight = class_weight
        self.w_r = self.vec(prior or {})  # fixed prior vector
        self.u = np.zeros(len(self.vocab))
        self.b = 0.0
        self.u_sum = np.zeros(len(self.vocab))  # sum of the iterates u_k..u_t
        self.b_sum = 0.0
        self.n_averaged = 0
        self.n_pos = self.n_neg = 0

    # -- costs -----------------------------------------------------------------------
    def class_cost(self, s: int) -> float:
        if self.class_weight is None:
            return 1.0
        if self.class_weight == "balanced":
            a, n_y = self.BALANCED_SMOOTHING / self.lambda_, self.n_pos if s > 0 else self.n_neg
            return min((self.n_pos + self.n_neg + 2.0 * a) / (2.0 * (n_y + a)), self.BALANCED_MAX_COST)
        by_sign = {y_sign(k): float(v) for k, v in self.class_weight.items()}
        return by_sign.get(s, 1.0)

    def _count(self, s: int):
        if s > 0:
            self.n_pos += 1
        else:
            self.n_neg += 1

    # -- the model -------------------------------------------------------------------
    def raw(self, x) -> float:
        """<w_r + u, x> + b with the current iterate."""
        return float((self.w_r + self.u) @ self.vec(x) + self.b)

    def decision(self, x) -> float:
        if self.n_averaged:
            n = self.n_averaged
            return float((self.w_r + self.u_sum / n) @ self.vec(x) + self.b_sum / n)
        return self.raw(x)

    @property
    def weights(self) -> dict:
        return self.as_dict(self.w_r + self.u)

    @property
    def intercept(self) -> float:
        return self.b

    @property
    def average_weights(self) -> dict:
        return self.as_dict(self.w_r + (self.u_sum / self.n_averaged if self.n_averaged else self.u))

    @property
    def average_intercept(self) -> float:
        return self.b_sum / self.n_averaged if self.n_averaged else self.b

    # -- learning --------------------------------------------------------------------
    def _step(self, xs, signs, costs):
        """One Pegasos step on k examples (k = 1 for learn_one)."""
        margins = [s * self.raw(x) for x, s in zip(xs, signs)]  # pre-step weights
        te, eta = self._tick()
        self.u = (1.0 - 1.0 / te) * self.u
        if self.fit_intercept == "regularised":
            self.b = (1.0 - 1.0 / te) * self.b
        k = len(xs)
        for x, s, c, m in zip(xs, signs, costs, margins):
            if m < 1:
                self.u = self.u + (eta / k) * c * s * self.vec(x)
                if self.fit_intercept == "regularised":
                    self.b = self.b + min(eta / k, self.MAX_BIAS_STEP) * c * s
                elif self.fit_intercept:
                    self.b = self.b + (eta / k) * c * s
        if self.projection:
            r = 1.0 / np.sqrt(self.lambda_)
            norm = np.linalg.norm(self.u)
            if norm > r:
                self.u = (r / norm) * self.u
        if self.average and self.t >= int(self.average):
            self.u_sum = self.u_sum + self.u
            self.b_sum = self.b_sum + self.b
            self.n_averaged += 1
        return margins

    def learn_one(self, x, y, w=1.0):
        s = y_sign(y)
        self._count(s)
        return self._step([x], [s], [w * self.class_cost(s)])[0]

    def learn_many(self, xs, ys):
        signs = [y_sign(y) for y in ys]
        for s in signs:
            self._count(s)
        return self._step(list(xs), signs, [self.class_cost(s) for s in signs])


class DenseMulticlassReference(_Dense):
    """Crammer-Singer multiclass Pegasos, straight from the formulas."""

    def __init__(self, vocab, lambda_=1e-4, fit_intercept=False, projection=False, horizon=None):
        super().__init__(vocab, lambda_, horizon)
        self.fit_intercept = fit_intercept
        self.projection = projection
        self.classes: list = []
        self.W = np.zeros((0, len(self.vocab)))
        self.b = np.zeros(0)

    def scores(self, x) -> np.ndarray:
        return self.W @ self.vec(x) + self.b

    def competitor(self, x, y):
        """Index of argmax_{k != y} score_k (earliest on ties), or None if y is the only class."""
        sc = self.scores(x)
        others = [k for k in range(len(self.classes)) if self.classes[k] != y]
        return max(others, key=lambda k: sc[k]) if others else None  # max keeps the first maximum

    @property
    def weights(self) -> dict:
        return {c: self.as_dict(self.W[k]) for k, c in enumerate(self.classes)}

    @property
    def intercepts(self) -> dict:
        return {c: float(self.b[k]) for k, c in enumerate(self.classes)}

    def learn_one(self, x, y, w=1.0):
        if y not in self.classes:
            self.classes.append(y)
            self.W = np.vstack([self.W, np.zeros(len(self.vocab))])
            self.b = np.append(self.b, 0.0)
        yi = self.classes.index(y)
        r = self.competitor(x, y)
        sc = self.scores(x)
        margin = sc[yi] - sc[r] if r is not None else None
        te, eta = self._tick()
        self.W = (1.0 - 1.0 / te) * self.W
        if r is not None and margin < 1:
            xv = self.vec(x)
            self.W[yi] += eta * w * xv
            self.W[r] -= eta * w * xv
            if self.fit_intercept:
                self.b[yi] += eta * w
                self.b[r] -= eta * w
        if self.projection:
            radius = 1.0 / np.sqrt(self.lambda_)
            norm = np.linalg.norm(self.W)  # Frobenius norm over all classes
            if norm > radius:
                self.W = (radius / norm) * self.W
        return margin
