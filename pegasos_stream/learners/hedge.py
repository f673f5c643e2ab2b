"""Exponential weights over members' probabilities, with a decreasing fixed share: the mixing loop of `PegasosMixture`.

Each member k gives the probability p_k of the positive class; the mixture predicts p = Σ_k π_k p_k, as the
log-odds log Σ_k π_k p_k − log Σ_k π_k (1 − p_k) computed from the members' log-probabilities. After an example of
label y and sample weight w, each weight is multiplied by p_k(y)^w and the weights are normalised (Hedge with η = 1
on the log loss); then a fraction α_s = c/(s + 2c) of the total is spread evenly over the members, s being the
number of examples learned so far (Herbster and Warmuth's fixed share, at the decreasing rate of Koolen and de
Rooij). c = 0 is plain Hedge, the Bayes mixture.

**Guarantee.** With unit sample weights, on any T examples and for every member k,

    Σ_t −log p(y_t | x_t) ≤ L_k(T) + ln M + Σ_{s=1}^{T−1} −ln(1 − α_s),

L_k(T) the member's cumulative log loss: each step's loss is ℓ_k + ln v_k − ln π_k (v the weights after the
multiplication), the share keeps π_k ≥ (1 − α_s)·v_k, and the sum telescopes from π_k = 1/M. The last term is
`share_cost`, about c·ln T: the price of following the member that predicts best lately rather than overall.

The loop is sequential (the share makes each step's weights depend on the last), so it runs compiled
(``_loops.mix_rows``) when the compiled module is in use; `mix_rows_python` is its reference, the same
floating-point operations in the same order.
"""

from __future__ import annotations

import math

import numpy as np

from .._compiled import LOOPS as _loops

__all__ = ["initial_log_weights", "mix_rows", "mix_rows_python", "share_cost", "share_rate"]


def initial_log_weights(members: int) -> list[float]:
    """The log-weights of ``members`` members, even."""
    return [-math.log(members)] * members


def _log(value: float) -> float:
    """ln(value) for value >= 0, as C's log: −inf for 0 (an α/m that underflows)."""
    return math.log(value) if value > 0.0 else -math.inf


def share_rate(share: float, learned: int) -> float:
    """α_s = c/(s + 2c): the fraction of the weights spread evenly after the s-th example learned (0 for c = 0)."""
    return share / (learned + 2.0 * share) if share > 0.0 else 0.0


def share_cost(share: float, learned: int) -> float:
    """Σ_{s=1}^{T−1} −ln(1 − α_s) for T = ``learned``: the share's part of the regret bound, in closed form
    (the product Π (s + 2c)/(s + c) is a ratio of Gamma functions)."""
    if share <= 0.0 or learned < 2:
        return 0.0
    c, t = float(share), float(learned)
    return math.lgamma(t + 2 * c) - math.lgamma(1 + 2 * c) - math.lgamma(t + c) + math.lgamma(1 + c)


def _log_sum_exp(values: list[float]) -> float:
    """log Σ exp(values), the terms added in order."""
    top = max(values)
    total = 0.0
    for value in values:
        total += math.exp(value - top)
    return top + math.log(total)


def mix_rows_python(
    log_p: np.ndarray,
    log_q: np.ndarray,
    decisions: np.ndarray,
    log_weights: list[float],
    update: tuple[np.ndarray, np.ndarray, list[float], int, float] | None,
) -> None:
    """The reference of `mix_rows`, in Python."""
    members, n = log_p.shape
    p_rows, q_rows = log_p.T.tolist(), log_q.T.tolist()
    positives: list[bool] = []
    sample_weights: list[float] = []
    if update is not None:
        signs, weights, losses, learned, share = update
        positives, sample_weights = (signs > 0).tolist(), weights.tolist()
    for i in range(n):
        p, q = p_rows[i], q_rows[i]
        decisions[i] = _log_sum_exp([w + v for w, v in zip(log_weights, p)]) - _log_sum_exp(
            [w + v for w, v in zip(log_weights, q)]
        )
        if update is None:
            continue
        likelihoods = p if positives[i] else q
        for k in range(members):
            loss = -sample_weights[i] * likelihoods[k]
            losses[k] += loss
            log_weights[k] -= loss
        total = _log_sum_exp(log_weights)
        alpha = share_rate(share, learned + i + 1)
        keep, spread = (math.log1p(-alpha), _log(alpha / members)) if alpha > 0.0 else (0.0, 0.0)
        for k in range(members):
            weight = log_weights[k] - total
            if alpha > 0.0:
                weight += keep
                top = max(weight, spread)
                weight = top + math.log1p(math.exp(-abs(weight - spread)))
            log_weights[k] = weight


def mix_rows(
    log_p: np.ndarray,
    log_q: np.ndarray,
    decisions: np.ndarray,
    log_weights: list[float],
    update: tuple[np.ndarray, np.ndarray, list[float], int, float] | None = None,
) -> None:
    """The mixture's decision of each row into ``decisions``, from the members' log-probabilities of the positive
    (``log_p``) and the negative class (``log_q``), one row per member and one column per example. With ``update``
    (the examples' signs and sample weights, the members' cumulative losses, the examples learned before these,
    the share c), each example then updates ``log_weights`` and the losses in place before the next is mixed."""
    if _loops is None:
        mix_rows_python(log_p, log_q, decisions, log_weights, update)
        return
    state = np.array(log_weights, dtype=np.float64)
    flat_p, flat_q = np.ascontiguousarray(log_p).reshape(-1), np.ascontiguousarray(log_q).reshape(-1)
    if update is None:
        _loops.mix_rows(flat_p, flat_q, decisions, state, np.empty(0), np.empty(0), np.empty(0), 0, 0.0, False)
        return
    signs, weights, losses, learned, share = update
    totals = np.array(losses, dtype=np.float64)
    _loops.mix_rows(flat_p, flat_q, decisions, state, signs, weights, totals, learned, share, True)
    log_weights[:] = state.tolist()
    losses[:] = totals.tolist()
