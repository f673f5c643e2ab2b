"""Why a binary learner scores x as it does: each feature's part of the decision.

For a learner whose decision is linear in x (Pegasos, with or without its bias or averaging; the logistic
regressions; a committee), f(x) = f({}) + Σ_j (f({j: x_j}) − f({})) exactly, and feature j's part is
f({j: x_j}) − f({}). A mixture's decision is not linear in x: its parts are first order (gradient × input), each
member's linear parts weighted by the decision's derivative in that member's margin at x
(`PegasosMixture.contributions`). A personal learner adds its user's offset, ⟨d_u, x⟩ (linear).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from typing import Any

__all__ = ["contributions", "linear_contributions", "top_contributions"]


def linear_contributions(decide: Callable[[dict], float], x: Mapping[Hashable, float]) -> dict[Hashable, float]:
    """Each feature's part f({j: x_j}) − f({}) of the decision ``decide``, linear in x."""
    base = decide({})
    return {j: decide({j: value}) - base for j, value in x.items()}


def contributions(model: Any, x: Mapping[Hashable, float], user: str | None = None) -> dict[Hashable, float]:
    """Each feature's part of ``model``'s decision on x (for ``user``, with a learner that takes users: a personal
    one; any other ignores it); a ValueError for a learner whose parts are not defined here (multiclass, kernel)."""
    own = getattr(model, "contributions", None)
    if own is not None:
        return own(x, user) if user is not None and getattr(model, "takes_users", False) else own(x)
    if getattr(model, "_multiclass", False) or hasattr(model, "n_support"):
        raise ValueError(f"no explanation for a {type(model).__name__}: only a binary linear learner or mixture's")
    return linear_contributions(model.decision_function_one, x)


def top_contributions(parts: Mapping[Hashable, float], k: int) -> list[tuple[Hashable, float]]:
    """The ``k`` largest parts by magnitude, largest first (the earlier feature first among equals)."""
    return sorted(parts.items(), key=lambda item: -abs(item[1]))[:k]
