"""Online Platt scaling: margins to probabilities that keep the margins' order.

Platt (1999) maps an SVM margin f to P(y = 1 | f) = σ(a·f + b), fitting a and b by logistic
regression on held-out margins. On a stream the held-out margins come for free: each example's
margin is computed before the learner sees its label (prequential), so ``update`` is called with
that margin. a = exp(α) keeps the map strictly increasing; α and b follow AdaGrad on the log-loss
with Platt's smoothed targets (n₊+1)/(n₊+2) and 1/(n₋+2).

The logistic curve reaches 1.0 in floating point by z ≈ 37, which would tie every confident
prediction and change the ROC AUC. Beyond |z| = ``TAIL_START`` the tail therefore decays
algebraically (as 1/|z|) instead of exponentially: probabilities stay strictly ordered for |z| up
to about 5·10⁶ and never reach exactly 0 or 1.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .state import POSITIVE, check_attributes, check_count, check_float

if TYPE_CHECKING:
    from river.base.typing import ClfTarget

__all__ = ["LogisticMargin", "MarginClassifier", "OnlinePlatt", "PlattScaledMargin", "squash", "squash_slope"]

#: Where the logistic body hands over to the algebraic tail.
TAIL_START = 8.0
TAIL_MASS = TAIL_START / (1.0 + math.exp(TAIL_START))  # continuity: σ(-8) = TAIL_MASS / 8
#: The smallest tail probability: 1 - 2⁻⁵³ is the largest double below 1.
MIN_TAIL = 2.0**-53
#: |α| bound, so that a = exp(α) stays a sane finite slope.
MAX_LOG_SLOPE = 25.0


def squash(z: float) -> float:
    """A strictly increasing map of the real line into (0, 1): logistic for |z| <= 8."""
    magnitude = abs(z)
    if magnitude <= TAIL_START:
        tail = 1.0 / (1.0 + math.exp(magnitude))
    else:
        tail = max(TAIL_MASS / magnitude, MIN_TAIL)
    return 1.0 - tail if z > 0 else tail


def squash_slope(z: float) -> float:
    """The derivative of `squash` at z: p(1 − p) for |z| <= 8, where it is logistic; the slope of its tail beyond
    (0 where the tail is held at its floor)."""
    magnitude = abs(z)
    if magnitude <= TAIL_START:
        p = squash(z)
        return p * (1.0 - p)
    return TAIL_MASS / (magnitude * magnitude) if TAIL_MASS / magnitude > MIN_TAIL else 0.0


class OnlinePlatt:
    """Probability calibration of margins, fitted one example at a time.

    Parameters
    ----------
    learning_rate
        AdaGrad's base step for α and b.

    """

    def __init__(self, learning_rate: float = 0.1) -> None:
        self.learning_rate = learning_rate
        self.log_slope = 0.0  # α
        self.slope = 1.0  # a = exp(α) > 0
        self.offset = 0.0  # b
        self._sq_grad_slope = 0.0
        self._sq_grad_offset = 0.0
        self.n_pos = 0
        self.n_neg = 0

    def _check_state(self) -> None:
        """Refuse (InvalidState) a rebuilt state that ``update`` could not have left."""
        check_attributes(self, vars(OnlinePlatt()))
        check_float(self, "learning_rate", POSITIVE)
        check_float(self, "log_slope", -MAX_LOG_SLOPE, MAX_LOG_SLOPE)
        check_float(self, "slope", POSITIVE)
        check_float(self, "offset")
        check_float(self, "_sq_grad_slope", 0.0)
        check_float(self, "_sq_grad_offset", 0.0)
        check_count(self, "n_pos")
        check_count(self, "n_neg")

    def loop_settings(self) -> dict[str, float]:
        """The settings the compiled loops read for calibration, by the names of ``_loops.PARAMS``."""
        return {
            "platt_rate": self.learning_rate,
            "tail_start": TAIL_START,
            "tail_mass": TAIL_MASS,
            "min_tail": MIN_TAIL,
            "max_log_slope": MAX_LOG_SLOPE,
        }

    def loop_state(self) -> dict[str, float | int]:
        """α, a, b, the sums of squared gradients and the class counts, by the names of the compiled loops' state
        (``_loops.STATE``, ``_loops.ISTATE``)."""
        return {
            "platt_log_slope": self.log_slope,
            "platt_slope": self.slope,
            "platt_offset": self.offset,
            "platt_sq_grad_slope": self._sq_grad_slope,
            "platt_sq_grad_offset": self._sq_grad_offset,
            "platt_n_pos": self.n_pos,
            "platt_n_neg": self.n_neg,
        }

    def set_loop_state(self, values: Mapping[str, float | int]) -> None:
        """Take back the values of ``loop_state``'s names from ``values`` (which may hold others)."""
        self.log_slope, self.slope = float(values["platt_log_slope"]), float(values["platt_slope"])
        self.offset = float(values["platt_offset"])
        self._sq_grad_slope = float(values["platt_sq_grad_slope"])
        self._sq_grad_offset = float(values["platt_sq_grad_offset"])
        self.n_pos, self.n_neg = int(values["platt_n_pos"]), int(values["platt_n_neg"])

    def proba(self, margin: float) -> float:
        """P(y = 1 | margin)."""
        return squash(self.slope * margin + self.offset)

    def update(self, margin: float, positive: bool) -> None:
        """One AdaGrad step on the log-loss of (margin, label)."""
        if positive:
            target = (self.n_pos + 1.0) / (self.n_pos + 2.0)
            self.n_pos += 1
        else:
            target = 1.0 / (self.n_neg + 2.0)
            self.n_neg += 1
        slope = self.slope
        z = slope * margin + self.offset
        # The logistic's derivative of the log-loss; clamp z so exp cannot overflow.
        residual = 1.0 / (1.0 + math.exp(-max(min(z, 700.0), -700.0))) - target
        grad_slope = residual * margin * slope
        self._sq_grad_slope += grad_slope * grad_slope
        if self._sq_grad_slope > 0.0:  # a subnormal gradient squares to 0
            step = self.learning_rate * grad_slope / math.sqrt(self._sq_grad_slope)
            self.log_slope = max(min(self.log_slope - step, MAX_LOG_SLOPE), -MAX_LOG_SLOPE)
            self.slope = math.exp(self.log_slope)
        self._sq_grad_offset += residual * residual
        if self._sq_grad_offset > 0.0:
            self.offset -= self.learning_rate * residual / math.sqrt(self._sq_grad_offset)


class MarginClassifier:
    """Mixin for a binary classifier: its label from the sign of ``decision_function_one``, its probabilities from
    ``probability`` of that margin."""

    def decision_function_one(self, x: Mapping[Any, Any]) -> float:
        raise NotImplementedError

    def probability(self, margin: float) -> float:
        """P(True) for a margin, as ``predict_proba_one`` gives it."""
        raise NotImplementedError

    def predict_one(self, x: Mapping[Any, Any], **kwargs: Any) -> bool:
        return self.decision_function_one(x) > 0.0

    def predict_proba_one(self, x: Mapping[Any, Any], **kwargs: Any) -> dict[ClfTarget, float]:
        p = self.probability(self.decision_function_one(x))
        return {False: 1.0 - p, True: p}


class PlattScaledMargin(MarginClassifier):
    """Mixin for a binary classifier whose margins are calibrated online: the class keeps an ``OnlinePlatt`` as
    ``_platt`` and updates it with each margin before learning."""

    _platt: OnlinePlatt

    def probability(self, margin: float) -> float:
        """P(True) for a margin, as ``predict_proba_one`` gives it."""
        return self._platt.proba(margin)


class LogisticMargin(MarginClassifier):
    """Mixin for a logistic model: its probability is σ(margin) (`squash`)."""

    def probability(self, margin: float) -> float:
        """P(True) for a margin: σ(margin), as ``predict_proba_one`` gives it."""
        return squash(margin)
