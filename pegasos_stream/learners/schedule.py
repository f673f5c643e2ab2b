"""The step schedule shared by the linear learners: the step counter η uses, and the norm bound."""

from __future__ import annotations

__all__ = ["MAX_NORM", "effective_step", "refuse_overflow"]

#: An update that would take ‖w‖ past this is refused: the lazily scaled values stay far from overflow.
MAX_NORM = 1e140


def effective_step(t: int, horizon: int | None, t0: int = 0) -> int:
    """The step counter η = 1/(λ·t) uses: t, saturated at ``horizon`` when one is set, plus ``t0``."""
    return (t if horizon is None else min(t, horizon)) + t0


def refuse_overflow(bound: float) -> None:
    """Refuse an update whose weights' norm could reach ``bound`` >= MAX_NORM (before any change)."""
    if not bound < MAX_NORM:
        raise ValueError(f"the update would take the norm of the weights to {bound:.3g}: values too large")
