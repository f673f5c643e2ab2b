"""Kernelized Pegasos with a budget on the number of support vectors."""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from operator import mul

from river import base

from .budget import check_maintenance, maintain
from .calibration import OnlinePlatt, PlattScaledMargin
from .kernels import make_kernel
from .state import InvalidState, check_count, check_equal, check_parts, new_like
from .svstore import SupportVectorStore
from .validation import binary_sign, check_lambda, check_sample_weight, reject_features

__all__ = ["KernelPegasosClassifier"]


class KernelPegasosClassifier(PlattScaledMargin, base.Classifier):
    """Binary kernel SVM trained by kernelized Pegasos, within a budget of support vectors.

    Each support vector j keeps a count β_j of the margin violations it caused, and
    f(x) = 1/(λ·t) · Σ β_j·y_j·K(x_j, x), with f = 0 while t = 0. A step computes y·f(x) with the
    current state, then increments t, and on a violation (y·f(x) < 1) adds the example's weight to
    its β, storing a copy of it if it is new (the same features with the same label count as the
    same vector, so replaying a stream does not duplicate it). This is exactly linear Pegasos in
    the feature space of K (Shalev-Shwartz & Ben-David, *Understanding Machine Learning*, §16.3):
    with ``kernel="linear"`` it makes the decisions of `PegasosClassifier`.

    Parameters
    ----------
    kernel
        "linear" ⟨x, z⟩, "poly" (⟨x, z⟩ + coef0)^degree or "rbf" exp(−γ‖x − z‖²).
    gamma
        γ of the RBF kernel.
    degree
        Degree of the polynomial kernel.
    coef0
        Constant term of the polynomial kernel.
    lambda_
        Regularisation strength λ > 0.
    budget
        The most support vectors ever held; None for no limit.
    maintenance
        How an insertion past the budget is undone (see `pegasos_stream.budget`): "remove",
        "merge" (RBF only) or "project". Unused without a budget.
    max_sv_features
        The most features a merged vector keeps (its entries of largest |value|, see
        `pegasos_stream.learners.budget`); None for the union of the merged vectors' features, which
        grows with every merge. Stored examples are kept whole, so the store holds at most
        budget × max(max_sv_features, the largest example) entries. The default is the most
        character 4-grams an `EmailFeatures` example has (3,000 characters).
    seed
        Accepted for a uniform interface; learning is deterministic (ties go to the oldest vector).

    Examples
    --------

    >>> from river import datasets, evaluate, metrics
    >>> from pegasos_stream import KernelPegasosClassifier

    >>> model = KernelPegasosClassifier(gamma=1.0, lambda_=1e-3, budget=100, maintenance="merge")
    >>> evaluate.progressive_val_score(datasets.Bananas(), model, metrics.Accuracy())
    Accuracy: 88.42%

    >>> model.n_support
    100

    """

    def __init__(
        self,
        kernel: str = "rbf",
        gamma: float = 1.0,
        degree: int = 3,
        coef0: float = 1.0,
        lambda_: float = 1e-4,
        budget: int | None = 500,
        maintenance: str = "merge",
        max_sv_features: int | None = 3000,
        seed: int | None = None,
    ):
        check_lambda(lambda_)
        for name, value in (("budget", budget), ("max_sv_features", max_sv_features)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1):
                raise ValueError(f"{name}={value!r}: expected None or an integer >= 1")
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.lambda_ = lambda_
        self.budget = budget
        self.maintenance = maintenance
        self.max_sv_features = max_sv_features
        self.seed = seed

        self._kernel = make_kernel(kernel, gamma, degree, coef0)
        if budget is not None:
            check_maintenance(maintenance, self._kernel)
        self._store = SupportVectorStore(self._kernel, keep_gram=maintenance == "project")
        self._t = 0
        self._platt = OnlinePlatt()

    @classmethod
    def _unit_test_params(cls):
        yield {}
        yield {"budget": 20, "maintenance": "remove", "kernel": "poly", "degree": 2}
        yield {"budget": 20, "maintenance": "merge", "gamma": 0.5}
        yield {"budget": 20, "maintenance": "project", "kernel": "linear", "lambda_": 1e-2}

    def _check_state(self) -> None:
        """Refuse (InvalidState) settings the constructor refuses, or a store that is not one of this kernel and
        maintenance, or holds more vectors than the budget."""
        fresh = new_like(self)
        check_parts(self, fresh, ("_kernel", "_store", "_platt"))
        check_equal(self._kernel, fresh._kernel, vars(fresh._kernel))
        check_parts(self._store, fresh._store, ("kernel",))
        check_equal(self._store.kernel, fresh._kernel, vars(fresh._kernel))
        check_equal(self._store, fresh._store, ("keep_gram",))
        if self.budget is not None and len(self._store) > self.budget:
            raise InvalidState(f"KernelPegasosClassifier._store: {len(self._store)} vectors, over the budget")
        check_count(self, "_t")

    @property
    def t(self) -> int:
        """The number of steps taken so far."""
        return self._t

    @property
    def n_support(self) -> int:
        """How many support vectors are stored."""
        return len(self._store)

    @property
    def support_vectors(self) -> list[tuple[dict, bool, float]]:
        """(features, label, β) of every support vector, oldest first; copies."""
        store = self._store
        return [(dict(x), bool(y > 0), float(beta)) for x, y, beta in zip(store.features, store.labels, store.betas)]

    def decision_function_one(self, x: Mapping) -> float:
        """f(x) = 1/(λ·t) · Σ β_j·y_j·K(x_j, x)."""
        values = x.values()
        try:  # ‖x‖² is finite exactly when every value is a finite number (short of overflow)
            sq_norm = sum(map(mul, values, values))
            ok = math.isfinite(sq_norm)
        except (TypeError, OverflowError):
            ok = False
        if ok and self._t and len(self._store):
            try:
                kernel_row = self._store.kernel_row(x, sq_norm)
                f = float(self._store.coefficients() @ kernel_row) / (self.lambda_ * self._t)
            except (TypeError, ValueError, OverflowError):
                f = math.nan
            ok = math.isfinite(f)
        elif ok:
            f = 0.0
        if not ok:
            reject_features(x)
        return f

    def learn_one(self, x: Mapping, y: base.typing.ClfTarget, w: float = 1.0) -> None:
        sign = binary_sign(y)
        weight = 1.0 if w == 1.0 else check_sample_weight(w)
        f = self.decision_function_one(x)
        self._t += 1
        if sign * f < 1.0 and weight:
            store = self._store
            position = store.find(x, sign)
            if position is None:
                store.append(x, sign, weight)
                if self.budget is not None:
                    maintain(store, self.maintenance, self.budget, self.max_sv_features)
            else:
                store.betas[position] += weight
        self._platt.update(f, sign > 0)
