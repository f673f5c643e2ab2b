"""Budget maintenance for kernel Pegasos (Wang, Crammer & Vucetic, JMLR 2012, "BSGD").

When an insertion takes the store past its budget, one of these restores it, working on the
coefficients α_j = β_j·y_j:

- ``remove``: drop the vector with the smallest |α| (ties: the oldest).
- ``merge`` (RBF only): merge that vector x_m with the same-label partner x_n whose merger loses
  the least: z = h·x_m + (1−h)·x_n with h ∈ [0, 1] found by golden-section search, α_z chosen so
  α_z·φ(z) is the projection of α_m·φ(x_m) + α_n·φ(x_n) on φ(z). z holds the union of the two
  vectors' features; with a bound on its size (``max_features``), only its entries of largest |value|
  are kept (ties: the earlier in z), and α_z is the projection on φ of that pruned z,
  α_m·K(x_m, z) + α_n·K(x_n, z). A z equal to a stored vector of the same label adds to that
  vector's β, as any example already in the store does.
- ``project``: drop that vector and add its projection onto the span of the others to their
  coefficients (a B×B linear solve on the Gram matrix kept by the store: O(B³) per maintenance).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from .kernels import RBF
from .svstore import SupportVectorStore

__all__ = ["MAINTENANCE", "check_maintenance", "maintain"]

_INV_PHI = (math.sqrt(5.0) - 1.0) / 2.0
_GOLDEN_ITERATIONS = 40  # the bracket shrinks to 0.618⁴⁰ ≈ 4e-9
_PROJECTION_RIDGE = 1e-8


def _smallest(store: SupportVectorStore) -> int:
    """The vector with the smallest |α| = |β|; np.argmin takes the first, i.e. the oldest."""
    return int(np.argmin(np.abs(store.betas)))


def remove(store: SupportVectorStore) -> None:
    store.delete([_smallest(store)])


def _best_merge_fraction(a_m: float, a_n: np.ndarray, k: np.ndarray) -> np.ndarray:
    """argmax over h ∈ [0, 1] of a_m·k^((1−h)²) + a_n·k^(h²), for every candidate at once."""

    def merged(h: np.ndarray) -> np.ndarray:
        return a_m * k ** ((1.0 - h) ** 2) + a_n * k ** (h * h)

    lo, hi = np.zeros_like(k), np.ones_like(k)
    for _ in range(_GOLDEN_ITERATIONS):
        c = hi - _INV_PHI * (hi - lo)
        d = lo + _INV_PHI * (hi - lo)
        keep_left = merged(c) > merged(d)
        hi = np.where(keep_left, d, hi)
        lo = np.where(keep_left, lo, c)
    return (lo + hi) / 2.0


def prune(z: dict, max_features: int) -> dict:
    """z's ``max_features`` entries of largest |value|, in z's order; ties go to the earlier entry."""
    magnitudes = np.abs(np.fromiter(z.values(), dtype=float, count=len(z)))
    keep = np.sort(np.argsort(-magnitudes, kind="stable")[:max_features])
    items = list(z.items())
    return dict(items[i] for i in keep)


def _kernel_pair(store: SupportVectorStore, x: dict, z: dict) -> float:
    """K(x, z) for two dicts, with the store's kernel."""
    dot = math.fsum(value * x.get(key, 0.0) for key, value in z.items())
    x_sq_norm = math.fsum(value * value for value in x.values())
    z_sq_norm = math.fsum(value * value for value in z.values())
    return store.kernel.pair(dot, x_sq_norm, z_sq_norm)


def merge(store: SupportVectorStore, max_features: int | None = None) -> None:
    m = _smallest(store)
    label = store.labels[m]
    partners = np.flatnonzero(store.labels == label)
    partners = partners[partners != m]
    if not len(partners):
        remove(store)
        return
    x_m = store.features[m]
    k = store.kernel_row(x_m)[partners]
    a_m = abs(store.betas[m])
    a_n = np.abs(store.betas[partners])
    h = _best_merge_fraction(a_m, a_n, k)
    a_z = a_m * k ** ((1.0 - h) ** 2) + a_n * k ** (h * h)
    # ‖α_m φ_m + α_n φ_n − α_z φ_z‖² with K(z, z) = 1 and same-sign coefficients
    degradation = a_m * a_m + a_n * a_n + 2.0 * a_m * a_n * k - a_z * a_z
    best = int(np.argmin(degradation))
    n, h_best = int(partners[best]), float(h[best])
    x_n = store.features[n]
    # keys in a fixed order (x_m's, then x_n's new ones): a set's order would follow the process's str hashes
    z = {key: h_best * x_m.get(key, 0.0) + (1.0 - h_best) * x_n.get(key, 0.0) for key in {**x_m, **x_n}}
    beta_z = float(a_z[best])
    if max_features is not None and len(z) > max_features:
        z = prune(z, max_features)
        beta_z = float(a_m * _kernel_pair(store, x_m, z) + a_n[best] * _kernel_pair(store, x_n, z))
    store.delete([m, n])
    existing = store.find(z, label)
    if existing is None:
        store.append(z, label, beta_z)
    else:
        store.betas[existing] += beta_z


def project(store: SupportVectorStore) -> None:
    p = _smallest(store)
    alpha_p = store.betas[p] * store.labels[p]
    rest = [i for i in range(len(store)) if i != p]
    gram = store.gram[np.ix_(rest, rest)]
    target = store.gram[rest, p] * alpha_p
    # A ridge of 1e-8 of the mean self-similarity keeps near-duplicate vectors from making the
    # system singular; it changes the projection by a relative amount of that order.
    ridge = _PROJECTION_RIDGE * float(np.mean(np.diag(gram)) or 1.0)
    delta = np.linalg.solve(gram + ridge * np.eye(len(rest)), target)
    store.betas[rest] += delta * store.labels[rest]  # α_j += Δα_j, β_j = α_j·y_j
    store.delete([p])


_STRATEGIES = {"remove": remove, "merge": merge, "project": project}
MAINTENANCE = tuple(_STRATEGIES)


def check_maintenance(maintenance: str, kernel: object) -> None:
    """Refuse an unknown strategy, or merging with a kernel other than RBF."""
    if maintenance not in _STRATEGIES:
        raise ValueError(f"maintenance={maintenance!r}: expected one of {', '.join(MAINTENANCE)}")
    if maintenance == "merge" and not isinstance(kernel, RBF):
        raise ValueError("maintenance='merge' needs kernel='rbf' (the merge is derived for RBF)")


def maintain(store: SupportVectorStore, maintenance: str, budget: int, max_features: int | None = None) -> None:
    """Bring the store back within ``budget`` vectors; a merged vector keeps at most ``max_features``."""
    strategy = (
        functools.partial(merge, max_features=max_features) if maintenance == "merge" else _STRATEGIES[maintenance]
    )
    while len(store) > budget:
        strategy(store)
