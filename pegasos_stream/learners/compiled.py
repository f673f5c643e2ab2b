"""The compiled replay of `PegasosClassifier.learn_one` over many rows (``pegasos_stream._fast``).

``learn_csr`` checks a CSR matrix, its labels and weights, then learns its rows; ``learn_rows`` runs the
compiled loop over `Rows` and takes each row the loop stops before (a rare branch, a refusal) through
``learn_one``. Around each run of the loop, the weights the rows touch are gathered out of the model's
dicts into arrays and scattered back. Without the compiled module (see `pegasos_stream._compiled`),
``learn_rows`` takes every row through ``learn_one``, which gives the same model bit for bit.

The loop reads its settings from one array and the model's state from two (floats and integers), whose
entries the compiled module names in order (``_fast.PARAMS``, ``_fast.STATE``, ``_fast.ISTATE``); the arrays
are built and read back here by those names, through `params`, `STATE_HOMES` and `ISTATE_HOMES`.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable
from typing import TYPE_CHECKING, NamedTuple, cast

import numpy as np
from numpy.typing import ArrayLike

from .._compiled import FAST as _fast
from .calibration import MAX_LOG_SLOPE, MIN_TAIL, TAIL_MASS, TAIL_START, OnlinePlatt
from .rows import Rows
from .schedule import MAX_NORM, effective_step
from .validation import binary_sign, check_sample_weight
from .weights import (
    COMPENSATED_SUM,
    MAX_AVERAGE_CANCELLATION,
    MIN_SCALE,
    DenseWeightVector,
    WeightVector,
    weight_columns,
)

if TYPE_CHECKING:
    from .linear import PegasosClassifier

__all__ = [
    "ISTATE_HOMES",
    "STATE_HOMES",
    "Stored",
    "calibrate_rows",
    "gather",
    "learn_csr",
    "learn_rows",
    "params",
    "scatter",
]

#: Where the model keeps each entry of ``_fast.STATE``: (its holder: "" the model, "_u" its weights,
#: "_platt" its calibration; the attribute).
STATE_HOMES: dict[str, tuple[str, str]] = {
    "scale": ("_u", "scale"),
    "sq_norm": ("_u", "sq_norm"),
    "intercept": ("", "_b"),
    "average_intercept": ("", "_average_b"),
    "average_scale": ("_u", "avg_scale"),
    "platt_log_slope": ("_platt", "log_slope"),
    "platt_slope": ("_platt", "slope"),
    "platt_offset": ("_platt", "offset"),
    "platt_sq_grad_slope": ("_platt", "_sq_grad_slope"),
    "platt_sq_grad_offset": ("_platt", "_sq_grad_offset"),
}

#: Where the model keeps each entry of ``_fast.ISTATE``, as `STATE_HOMES`; None for the counts the loop
#: returns (0 in): how many columns it first wrote into v and into the average's offset.
ISTATE_HOMES: dict[str, tuple[str, str] | None] = {
    "t": ("", "_t"),
    "n_averaged": ("_u", "n_averaged"),
    "n_pos": ("", "_n_pos"),
    "n_neg": ("", "_n_neg"),
    "platt_n_pos": ("_platt", "n_pos"),
    "platt_n_neg": ("_platt", "n_neg"),
    "n_new_v": None,
    "n_new_offset": None,
}


def params(model: PegasosClassifier) -> dict[str, float]:
    """The settings the compiled loop reads, by the names of ``_fast.PARAMS``.

    With ``class_weight="balanced"``, "balanced" is the pseudo-count of each class (> 0) and "cost_pos"
    and "cost_neg" bound the costs; otherwise "balanced" is 0 and they are the costs. "fit_intercept" is 0 for no
    bias, 1 for the unregularised one, and −MAX_BIAS_STEP (< 0) for the regularised one.
    """
    lambda_ = cast(float, model.lambda_)  # (an explicit λ: "auto" learns with its members)
    balanced = model.class_weight == "balanced"
    if balanced:
        costs = {1.0: model.BALANCED_MAX_COST, -1.0: model.BALANCED_MAX_COST}
    else:
        costs = model._class_cost or {1.0: 1.0, -1.0: 1.0}
    return {
        "lambda": lambda_,
        "horizon": model.horizon or 0,
        "t0": cast(int, model.t0),
        "average_from": model._average_from or 0,
        "fit_intercept": -model.MAX_BIAS_STEP
        if model.fit_intercept == "regularised"
        else float(bool(model.fit_intercept)),
        "projection": model.projection,
        "radius": model._radius,
        "cost_pos": costs[1.0],
        "cost_neg": costs[-1.0],
        "balanced": model.BALANCED_SMOOTHING / lambda_ if balanced else 0.0,
        "has_prior": bool(model._prior),
        "compensated_sum": COMPENSATED_SUM,
        "platt_rate": model._platt.learning_rate,
        "tail_start": TAIL_START,
        "tail_mass": TAIL_MASS,
        "min_tail": MIN_TAIL,
        "max_log_slope": MAX_LOG_SLOPE,
        "min_scale": MIN_SCALE,
        "max_average_cancellation": MAX_AVERAGE_CANCELLATION,
        "max_norm": MAX_NORM,
        "calibrate": model.calibrate,
    }


def learn_csr(
    model: PegasosClassifier,
    indptr: ArrayLike,
    indices: ArrayLike,
    data: ArrayLike,
    y: ArrayLike,
    columns: Iterable[Hashable] | None = None,
    sample_weight: ArrayLike | None = None,
) -> np.ndarray:
    """`PegasosClassifier.learn_csr`: the rows' decisions before each was learned.

    A malformed matrix, a label count or sample weight count that does not match the rows raise a
    ValueError before anything is learned.
    """
    # with weight arrays and no columns named, the rows' columns are the weights' (no numbering)
    rows = Rows.from_csr(
        indptr, indices, data, columns, (model.max_features or model.n_features) if columns is None else None
    )
    labels = np.asarray(y)
    if labels.ndim != 1 or len(labels) != len(rows):
        raise ValueError(f"learn_csr: {len(rows)} rows but labels of shape {labels.shape}")
    signs = _signs(labels)
    if sample_weight is None:
        weights = np.ones(len(rows))
    else:
        given = np.asarray(sample_weight)
        if given.ndim != 1 or len(given) != len(rows):
            raise ValueError(f"learn_csr: {len(rows)} rows but sample weights of shape {given.shape}")
        weights = _sample_weights(given)
    decisions = np.empty(len(rows))
    stop, refusal = model.learn_rows(rows, signs, weights, decisions, np.empty(0))  # (no probabilities wanted)
    if refusal is not None:
        raise ValueError(f"row {stop}: {refusal}") from None
    return decisions


def _signs(labels: np.ndarray) -> np.ndarray:
    """The ±1.0 sign of each binary label (vectorised for bool and number arrays, ``binary_sign``'s rule)."""
    if labels.dtype.kind in "biuf" and np.isin(labels, (-1, 0, 1)).all():
        return np.where(labels == 1, 1.0, -1.0)
    return np.array([binary_sign(label) for label in labels.tolist()], dtype=np.float64)


def _sample_weights(given: np.ndarray) -> np.ndarray:
    """The sample weights as float64, each a finite number >= 0 (``check_sample_weight``'s rule, vectorised for
    int and float arrays)."""
    if given.dtype.kind in "iuf":
        weights = given.astype(np.float64)
        if np.isfinite(weights).all() and (weights >= 0.0).all():
            return weights
    return np.array([check_sample_weight(w) for w in given.tolist()], dtype=np.float64)


def learn_rows(
    model: PegasosClassifier,
    rows: Rows,
    signs: np.ndarray,
    weights: np.ndarray,
    decisions: np.ndarray,
    probas: np.ndarray,
    start: int = 0,
    margins: np.ndarray | None = None,
) -> tuple[int, ValueError | None]:
    """`PegasosClassifier.learn_rows`: (the row it stopped at, its error), or (len(rows), None).

    Arrays the compiled loop cannot take (formats, lengths, CSR structure) raise a ValueError before
    anything is learned. Without the compiled module, each row goes through ``learn_one``.
    """
    n = len(rows)
    u = model._u
    columns: np.ndarray | range | None = None  # with weight arrays: the columns the rows' keys name
    if isinstance(u, DenseWeightVector):
        rows = _widened(u, rows)
        columns = weight_columns(rows.keys, len(u.v))
        compiled = _fast is not None and columns is not None  # (None: a key that is no column, which learn_one refuses)
    else:
        rows = rows.numbered_locally()  # (dict weights are gathered for the keys the rows use)
        compiled = _fast is not None
    while start < n:
        # the step whose shrink clears the weights (a model's first) is learn_one's, as the compiled loop would
        # find after checking every row
        clears = effective_step(model._t + 1, model.horizon, cast(int, model.t0)) == 1
        stop = (
            _learn_compiled(_Batch(model, rows, signs, weights, decisions, probas, start, margins), columns)
            if compiled and not clears
            else start
        )
        if stop == n:
            break
        x = rows.row(stop)  # a rare branch (a fold of the scale, a refusal), or not compiled: learn_one takes it
        calibrated = len(probas) > 0
        decisions[stop] = math.nan
        if calibrated:
            probas[stop] = math.nan
        if margins is not None:
            margins[stop] = math.nan
        try:
            margin, decisions[stop] = model._margins(x)
            if margins is not None:
                margins[stop] = margin
            if calibrated:
                probas[stop] = model._platt.proba(decisions[stop])
            model.learn_one(x, signs[stop] > 0, float(weights[stop]))
        except ValueError as error:
            model._last_scored = None
            return stop, error
        start = stop + 1
    return n, None


def _widened(u: DenseWeightVector, rows: Rows) -> Rows:
    """``rows`` over weight arrays ``u`` that widen (``max_features``), which now hold every column the rows use:
    rows numbered by the arrays' columns (keys ``range``) as numbered by the widened arrays, any other rows as they
    are. Rows with a column past ``max_features`` are left as they are, to be refused."""
    keys = rows.keys
    if u.max_features is None or not len(rows.indices):
        return rows
    if not isinstance(keys, range):
        u._widen_for(keys)
        return rows
    if keys.start != 0 or keys.step != 1 or len(keys) <= len(u.v):
        return rows
    low, high = int(rows.indices.min()), int(rows.indices.max())
    if low < 0 or high >= min(len(keys), u.max_features):
        return rows
    u.widen(high)
    return Rows(rows.indptr, rows.indices, rows.data, range(len(u.v)), rows.distinct)


def _learn_compiled(batch: _Batch, columns: np.ndarray | range | None) -> int:
    """Run the compiled loop over ``batch`` from its start, over the weights the rows touch: weight arrays in place
    when the rows' columns are theirs (``columns`` a range), else the ``columns`` the rows touch taken out of the
    arrays and put back, or the keys of rows numbered locally taken out of the dicts and put back.

    Returns the row the loop stopped before (len(rows) when it learned them all).
    """
    model, rows = batch.model, batch.rows
    u = model._u
    if isinstance(u, DenseWeightVector) and columns is not None:
        untracked = (np.zeros(0, dtype=bool), np.zeros(0, dtype=np.int64))  # every column is present
        prior = model._prior_array() if model._prior else np.zeros(0)
        if isinstance(columns, range):
            return _loop(batch, u.v, u.avg_offset, prior, untracked, untracked)[0]
        v, offset = u.v[columns], u.avg_offset[columns] if u.average else u.avg_offset
        stop = _loop(batch, v, offset, prior[columns] if model._prior else prior, untracked, untracked)[0]
        u.v[columns] = v
        if u.average:
            u.avg_offset[columns] = offset
        return stop
    assert isinstance(u, WeightVector)
    keys = cast(list, rows.keys)
    m = len(keys)
    v, present_v = gather(u.v, keys)
    stored_v = Stored(v, present_v)
    if u.average:
        offset, present_offset = gather(u.avg_offset, keys)
        stored_offset = Stored(offset, present_offset)
    else:
        offset, present_offset = np.zeros(m), np.ones(m, dtype=bool)
    prior = gather(model._prior, keys)[0] if model._prior else np.zeros(m)
    new_v, new_offset = np.empty(m, dtype=np.int64), np.empty(m, dtype=np.int64)
    stop, counts = _loop(batch, v, offset, prior, (present_v, new_v), (present_offset, new_offset))
    scatter(u.v, keys, v, stored_v, new_v[: counts["n_new_v"]])
    if u.average:
        scatter(u.avg_offset, keys, offset, stored_offset, new_offset[: counts["n_new_offset"]])
    return stop


class _Batch(NamedTuple):
    """What one call of the compiled loop learns: the rows from ``start``, with their arrays (``margins`` None when
    the current iterate's margins are not wanted)."""

    model: PegasosClassifier
    rows: Rows
    signs: np.ndarray
    weights: np.ndarray
    decisions: np.ndarray
    probas: np.ndarray
    start: int
    margins: np.ndarray | None


def _loop(
    batch: _Batch,
    v: np.ndarray,
    offset: np.ndarray,
    prior: np.ndarray,
    v_presence: tuple[np.ndarray, np.ndarray],
    offset_presence: tuple[np.ndarray, np.ndarray],
) -> tuple[int, dict[str, int]]:
    """``_fast.learn_rows`` over the weights ``v`` (the average's ``offset``, the ``prior``) of the rows' columns,
    with the model's state read before and written back after; (the row it stopped before, the counts of columns
    first written). The presence pairs are (flags, list of columns first written), empty when all are present."""
    model, rows, signs, weights, decisions, probas, start, margins = batch
    state = np.array(_read(model, STATE_HOMES, _fast.STATE), dtype=np.float64)
    istate = np.array(_read(model, ISTATE_HOMES, _fast.ISTATE), dtype=np.int64)
    settings = params(model)
    stop = _fast.learn_rows(
        rows.indptr, rows.indices, rows.data, signs, weights, v, offset, prior, v_presence[0], offset_presence[0],
        v_presence[1], offset_presence[1], state, istate,
        np.array([settings[name] for name in _fast.PARAMS], dtype=np.float64), decisions, probas, start, rows.distinct,
        np.empty(0) if margins is None else margins,
    )  # fmt: skip
    _write(model, STATE_HOMES, _fast.STATE, state.tolist())
    _write(model, ISTATE_HOMES, _fast.ISTATE, istate.tolist())
    model._last_scored = None
    return stop, dict(zip(_fast.ISTATE, istate.tolist()))


#: The settings calibration reads from the compiled parameters, besides "platt_rate" (the others are left 0).
_PLATT_SETTINGS = {
    "tail_start": TAIL_START,
    "tail_mass": TAIL_MASS,
    "min_tail": MIN_TAIL,
    "max_log_slope": MAX_LOG_SLOPE,
}


def calibrate_rows(platt: OnlinePlatt, margins: np.ndarray, signs: np.ndarray, probas: np.ndarray) -> None:
    """For each margin in order, its probability ``platt.proba(margin)`` into ``probas``, then
    ``platt.update(margin, sign > 0)``: compiled when the compiled module is in use (the same operations, as
    `learn_rows` calibrates a `PegasosClassifier`), else in Python."""
    if _fast is None:
        for i, margin, sign in zip(range(len(margins)), margins.tolist(), signs.tolist()):
            probas[i] = platt.proba(margin)
            platt.update(margin, sign > 0)
        return
    # the entries of the state arrays a model keeps in its "_platt": (index, attribute of the OnlinePlatt)
    floats = [(i, STATE_HOMES[name][1]) for i, name in enumerate(_fast.STATE) if STATE_HOMES[name][0] == "_platt"]
    ints = [(i, home[1]) for i, name in enumerate(_fast.ISTATE) if (home := ISTATE_HOMES[name]) and home[0] == "_platt"]
    state, istate = np.zeros(len(_fast.STATE)), np.zeros(len(_fast.ISTATE), dtype=np.int64)
    for array, entries in ((state, floats), (istate, ints)):
        for index, attribute in entries:
            array[index] = getattr(platt, attribute)
    settings = np.array([_PLATT_SETTINGS.get(name, 0.0) for name in _fast.PARAMS])
    settings[_fast.PARAMS.index("platt_rate")] = platt.learning_rate
    _fast.platt_rows(margins, signs, probas, state, istate, settings)
    for array, entries in ((state, floats), (istate, ints)):
        for index, attribute in entries:
            setattr(platt, attribute, array[index].item())


def _read(model: PegasosClassifier, homes: dict, names: tuple[str, ...]) -> list:
    """The model's value of each name (0 for a count the loop returns)."""
    return [0 if homes[name] is None else getattr(_holder(model, homes[name][0]), homes[name][1]) for name in names]


def _write(model: PegasosClassifier, homes: dict, names: tuple[str, ...], values: list) -> None:
    """Store each named value back where the model keeps it."""
    for name, value in zip(names, values):
        if homes[name] is not None:
            setattr(_holder(model, homes[name][0]), homes[name][1], value)


def _holder(model: PegasosClassifier, attribute: str) -> object:
    return getattr(model, attribute) if attribute else model


def gather(weights: dict, keys: list) -> tuple[np.ndarray, np.ndarray]:
    """(the values of ``keys``, 0.0 where absent; whether each is present)."""
    values, present = np.empty(len(keys)), np.empty(len(keys), dtype=bool)
    if _fast is None:
        found = [weights.get(key) for key in keys]
        present[:] = [value is not None for value in found]
        values[:] = [0.0 if value is None else float(value) for value in found]
    else:
        _fast.gather(weights, keys, values, present)
    return values, present


class Stored:
    """The columns of the keys a weight dict held when gathered, and the bits of their values then."""

    def __init__(self, values: np.ndarray, present: np.ndarray) -> None:
        self.columns = np.flatnonzero(present)
        self.bits = values[self.columns].view(np.int64)

    def changed(self, values: np.ndarray) -> np.ndarray:
        """The columns whose value is no longer the same float (bit for bit) in ``values``."""
        return self.columns[values[self.columns].view(np.int64) != self.bits]


def scatter(weights: dict, keys: list, values: np.ndarray, stored: Stored, new: np.ndarray) -> None:
    """Store the changed values of the ``stored`` keys (as new floats: a float in the dict is never written
    into), then add the ``new`` ones in the order they were first written (the order ``learn_one`` inserts
    them in)."""
    for columns in (stored.changed(values), new):
        if _fast is None:
            weights.update((keys[column], value) for column, value in zip(columns.tolist(), values[columns].tolist()))
        else:
            _fast.scatter(weights, keys, values, columns.astype(np.int64, copy=False))
