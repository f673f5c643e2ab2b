"""Dense numpy reference of kernelized Pegasos with NO budget -- for tests only.

Algorithm 2 of Shalev-Shwartz, Singer, Srebro & Cotter, "Pegasos" (2011); Shalev-Shwartz &
Ben-David, *Understanding Machine Learning*, §16.3. Linear Pegasos in the feature space φ of K:
w_t = 1/(λt) · Σ_j β_j y_j φ(x_j), where β_j counts the margin violations caused by (x_j, y_j),
so only the counts β need to be stored.

State: t, and a list of DISTINCT (x_j, y_j) with counts β_j (oldest first); y_j ∈ {-1, +1}.

    K(x, z) = <x, z>                       "linear"
            = (<x, z> + coef0) ** degree   "poly"
            = exp(-gamma * ||x - z||^2)    "rbf"   (||x - z||^2 from the difference vector)

    f(x) = 1/(λ t) · Σ_j β_j y_j K(x_j, x)        (f = 0 while t = 0 or there is no x_j)

    learn(x, y, w=1):
        s      = +1 for True/1, -1 for False/0/-1
        margin = s · f(x)                           (with the state before the step)
        t     += 1
        if margin < 1 and w > 0:
            if some stored (x_j, y_j) has x_j == x (dict equality) and y_j == s:  β_j += w
            else:                                   append (copy of x, s, β = w)

With w = 1 throughout, every β_j is an integer count. Vectors are dense numpy arrays over a fixed
vocabulary {feature key: column} built by the test from the whole stream; f is a plain Python
sum, one kernel evaluation per stored pair, with no caching of norms, Gram rows or layouts.
"""

from __future__ import annotations

import math

import numpy as np

try:
    from .reference import y_sign
except ImportError:  # tests/ as a plain directory: pytest puts it on sys.path
    from reference import y_sign


def kernel_function(kernel: str, gamma: float = 1.0, degree: int = 3, coef0: float = 1.0):
    """K(u, v) on dense numpy vectors, straight from the definition."""
    if kernel == "linear":
        return lambda u, v: float(np.dot(u, v))
    if kernel == "poly":
        return lambda u, v: float((np.dot(u, v) + coef0) ** degree)
    if kernel == "rbf":
        return lambda u, v: math.exp(-gamma * float(np.sum((u - v) ** 2)))
    raise ValueError(kernel)


class KernelPegasosReference:
    """Unbudgeted kernel Pegasos, formula by formula (see the module docstring)."""

    def __init__(self, vocab: dict, kernel="rbf", gamma=1.0, degree=3, coef0=1.0, lambda_=1e-4):
        self.vocab = dict(vocab)
        self.K = kernel_function(kernel, gamma, degree, coef0)
        self.lambda_ = float(lambda_)
        self.t = 0
        self.support = []  # [x (dict copy), dense x, y in {-1, +1}, beta], oldest first

    def vec(self, x: dict) -> np.ndarray:
        v = np.zeros(len(self.vocab))
        for key, value in x.items():
            v[self.vocab[key]] = float(value)
        return v

    def terms(self, x: dict) -> list[float]:
        """The summands β_j y_j K(x_j, x) / (λ t) of f(x)."""
        if self.t == 0:
            return []
        v = self.vec(x)
        return [beta * y * self.K(xv, v) / (self.lambda_ * self.t) for _, xv, y, beta in self.support]

    def decision(self, x: dict) -> float:
        return float(sum(self.terms(x)))

    def learn(self, x: dict, y, w: float = 1.0) -> float:
        """One step; returns the margin s·f(x) it was decided on."""
        s = y_sign(y)
        margin = s * self.decision(x)
        self.t += 1
        if margin < 1.0 and w > 0:
            for entry in self.support:
                if entry[0] == x and entry[2] == s:
                    entry[3] += w
                    break
            else:
                self.support.append([dict(x), self.vec(x), s, float(w)])
        return margin

    @property
    def support_vectors(self) -> list[tuple[dict, bool, float]]:
        """(features, label, β) as the package reports them, oldest first."""
        return [(dict(x), y > 0, beta) for x, _, y, beta in self.support]
