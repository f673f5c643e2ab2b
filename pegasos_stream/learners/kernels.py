"""Kernels as functions of inner products and squared norms.

Every kernel here is a function of ⟨x, z⟩, ‖x‖² and ‖z‖², so one pass of inner products between an
example and all stored support vectors (a numpy operation) gives every kernel value at once.
"""

from __future__ import annotations

import math

import numpy as np

from .state import InvalidState

__all__ = ["KERNELS", "Kernel", "make_kernel"]


class Kernel:
    """K(x, z) evaluated from dots = ⟨x_j, z⟩ and the squared norms of both sides."""

    name = ""

    def __call__(self, dots: np.ndarray, sq_norms: np.ndarray, z_sq_norm: float) -> np.ndarray:
        raise NotImplementedError

    def pair(self, dot: float, x_sq_norm: float, z_sq_norm: float) -> float:
        """K for one pair, from ⟨x, z⟩, ‖x‖² and ‖z‖²."""
        return float(self(np.array([dot]), np.array([x_sq_norm]), z_sq_norm)[0])

    def _check_state(self) -> None:
        """Refuse (InvalidState) parameters ``make_kernel`` refuses, or attributes it does not give."""
        parameters = {"gamma": 1.0, "degree": 3, "coef0": 1.0, **vars(self)}
        try:
            made = make_kernel(self.name, **parameters)
        except (ValueError, TypeError) as error:
            raise InvalidState(f"{type(self).__name__}: {error}") from None
        if vars(made) != vars(self):
            raise InvalidState(f"{type(self).__name__}: expected the attributes {sorted(vars(made))}")


class Linear(Kernel):
    """K(x, z) = ⟨x, z⟩."""

    name = "linear"

    def __call__(self, dots, sq_norms, z_sq_norm):
        return dots


class Polynomial(Kernel):
    """K(x, z) = (⟨x, z⟩ + coef0)^degree."""

    name = "poly"

    def __init__(self, degree: int, coef0: float) -> None:
        self.degree = degree
        self.coef0 = coef0

    def __call__(self, dots, sq_norms, z_sq_norm):
        return (dots + self.coef0) ** self.degree


class RBF(Kernel):
    """K(x, z) = exp(−γ‖x − z‖²), with ‖x − z‖² = ‖x‖² + ‖z‖² − 2⟨x, z⟩ (clipped at 0)."""

    name = "rbf"

    def __init__(self, gamma: float) -> None:
        self.gamma = gamma

    def __call__(self, dots, sq_norms, z_sq_norm):
        sq_dist = np.maximum(sq_norms + z_sq_norm - 2.0 * dots, 0.0)
        return np.exp(-self.gamma * sq_dist)


KERNELS = ("linear", "poly", "rbf")


def make_kernel(name: str, gamma: float, degree: int, coef0: float) -> Kernel:
    """The kernel called ``name``; a ValueError for an unknown name or a bad parameter."""
    if name == "linear":
        return Linear()
    if name == "poly":
        if isinstance(degree, bool) or not isinstance(degree, int) or degree < 1:
            raise ValueError(f"degree={degree!r}: expected an integer >= 1")
        if not math.isfinite(coef0):
            raise ValueError(f"coef0={coef0!r}: expected a finite number")
        return Polynomial(degree, coef0)
    if name == "rbf":
        if not (math.isfinite(gamma) and gamma > 0):
            raise ValueError(f"gamma={gamma!r}: expected a finite number > 0")
        return RBF(gamma)
    raise ValueError(f"kernel={name!r}: expected one of {', '.join(KERNELS)}")
