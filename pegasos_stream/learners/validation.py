"""Checking what a learner is given: parameters, binary labels, feature values, sample weights.

The learners compute on the raw values at C speed and call into here only when the result is not
a finite number, so that validation costs nothing on good input and still names the culprit.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Hashable, Mapping, Sequence

__all__ = [
    "MAX_STEP_COUNT",
    "MIN_LAMBDA",
    "SIGNS",
    "binary_sign",
    "check_average",
    "check_features",
    "check_fit_intercept",
    "check_horizon",
    "check_lambda",
    "check_lambdas",
    "check_positive",
    "check_sample_weight",
    "check_t0",
    "reject_features",
]

# Equality-based lookup: True == 1 and np.True_ == 1 hash alike, so one table serves bool, numpy
# bool, 0/1 and -1/+1 in int or float form.
SIGNS = {1: 1.0, 0: -1.0, -1: -1.0}


def binary_sign(y: object) -> float:
    """+1.0 for a positive label (True, 1), -1.0 for a negative one (False, 0, -1)."""
    try:
        sign = SIGNS.get(y)  # type: ignore[call-overload]
    except TypeError:  # unhashable
        sign = None
    if sign is None:
        raise ValueError(f"unknown label {y!r}: a binary label is True/False, 1/0 or 1/-1")
    return sign


def check_features(x: Mapping[Hashable, object]) -> None:
    """Raise a ValueError naming the first feature whose value is not a finite real number."""
    for key, value in x.items():
        try:
            if (type(value) is float or isinstance(value, numbers.Real)) and math.isfinite(value):  # (float: no ABC)
                continue
        except OverflowError:  # an int beyond the float range
            pass
        raise ValueError(f"feature {key!r} has value {value!r}: expected a finite number")


def reject_features(x: Mapping[Hashable, object]) -> None:
    """Raise the ValueError for features whose margin came out as no finite number.

    Names the first bad value, or else the largest one, whose magnitude overflowed the arithmetic.
    """
    check_features(x)
    key = max(x, key=lambda k: abs(x[k]))  # type: ignore[arg-type]
    raise ValueError(f"feature {key!r} has value {x[key]!r}: too large, the margin overflows")


def check_sample_weight(w: object) -> float:
    """The sample weight as a float; a ValueError unless it is a finite number >= 0."""
    if isinstance(w, numbers.Real) and math.isfinite(w) and float(w) >= 0.0:
        return float(w)
    raise ValueError(f"sample weight {w!r}: expected a finite number >= 0")


def check_positive(name: str, value: object) -> float:
    """The setting ``name`` as a float; a ValueError unless it is a finite number > 0 (a bool is no number)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or float(value) <= 0:
        raise ValueError(f"{name}={value!r}: expected a finite number > 0")
    return float(value)


#: The smallest regularisation strength accepted. The first Pegasos step is η₁ = 1/λ: it moves the
#: weights by ‖x‖/λ, which must stay below the norm bound ``schedule.MAX_NORM`` (1e140) for examples
#: of any sensible norm (up to 1e40); the projection radius 1/√λ is then at most 1e50.
MIN_LAMBDA = 1e-100
#: The largest step counter setting (t0, horizon, the first averaged step): the compiled loop takes them as floats,
#: exact up to 2**53; a larger one would be refused at the first step.
MAX_STEP_COUNT = 2**53


def check_lambda(lambda_: float) -> None:
    """Refuse a regularisation strength that is not a number >= MIN_LAMBDA (a bool is no number)."""
    number = isinstance(lambda_, numbers.Real) and not isinstance(lambda_, bool)
    if not (number and math.isfinite(lambda_) and lambda_ >= MIN_LAMBDA):
        raise ValueError(
            f"lambda_={lambda_!r}: expected a finite number >= {MIN_LAMBDA:g} (> 0, and not so small that"
            " the first step 1/lambda_ overflows; a bool is not a number)"
        )


def check_lambdas(lambdas: Sequence[float]) -> tuple[float, ...]:
    """A non-empty list of regularisation strengths as floats, each checked by `check_lambda`."""
    if isinstance(lambdas, (str, bytes, Mapping)) or not isinstance(lambdas, Sequence) or not lambdas:
        raise ValueError(f"lambdas={lambdas!r}: expected a non-empty list of numbers > 0")
    for lambda_ in lambdas:
        check_lambda(lambda_)
    return tuple(float(lambda_) for lambda_ in lambdas)


def _is_count(value: object, low: int) -> bool:
    """Whether ``value`` is an integer from ``low`` to ``MAX_STEP_COUNT`` (a bool is no integer)."""
    return not isinstance(value, bool) and isinstance(value, numbers.Integral) and low <= int(value) <= MAX_STEP_COUNT


def check_horizon(horizon: int | None) -> None:
    """Refuse a horizon that is neither None nor an integer from 1 to ``MAX_STEP_COUNT``."""
    if horizon is not None and not _is_count(horizon, 1):
        raise ValueError(f"horizon={horizon!r}: expected None or an integer from 1 to 2**53")


def check_t0(t0: int) -> None:
    """Refuse a t0 that is not an integer from 0 to ``MAX_STEP_COUNT``."""
    if not _is_count(t0, 0):
        raise ValueError(f"t0={t0!r}: expected an integer from 0 to 2**53")


def check_average(average: bool | int | None) -> None:
    """Refuse an average (the first step in the average; True: 1) that is neither None, a bool nor an integer from
    0 (no average) to ``MAX_STEP_COUNT``."""
    if average is not None and not isinstance(average, bool) and not _is_count(average, 0):
        raise ValueError(f"average={average!r}: expected None, a bool or an integer from 1 to 2**53")


def check_fit_intercept(fit_intercept: bool | str | None) -> None:
    """Refuse a fit_intercept that is not None, a bool or "regularised"."""
    if not (fit_intercept is None or isinstance(fit_intercept, bool) or fit_intercept == "regularised"):
        raise ValueError(f"fit_intercept={fit_intercept!r}: expected a bool (true or false), 'regularised' or None")
