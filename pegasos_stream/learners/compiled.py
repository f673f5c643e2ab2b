"""The compiled replay of `PegasosClassifier.learn_one` over many rows (``pegasos_stream.learners._loops``).

``learn_csr`` checks a CSR matrix, its labels and weights, then learns its rows; ``learn_rows`` runs the
compiled loop over `Rows` and takes each row the loop stops before (a rare branch, a refusal) through
``learn_one``. Around each run of the loop, the weights the rows touch are gathered out of the model's
dicts into arrays and scattered back. Without the compiled module (see `pegasos_stream._compiled`),
``learn_rows`` takes every row through ``learn_one``, which gives the same model bit for bit.

The loop reads its settings from one array and the model's state from two (floats and integers), whose
entries the compiled module names in order (``_loops.PARAMS``, ``STATE``, ``ISTATE``). The model says
its settings and state by those names (``_loop_settings``, ``_loop_state``: see `LoopModel`) and takes its state
back (``_set_loop_state``); the arrays are put in the compiled module's order here (`settings_array`,
`state_arrays`), and read back by name.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, cast

import numpy as np
from numpy.typing import ArrayLike

from .._compiled import LOOPS as _loops
from .batch import LearnBatch
from .rows import Rows
from .schedule import effective_step
from .validation import binary_sign, check_sample_weight
from .weights import DenseWeightVector, WeightVector, weight_columns

if TYPE_CHECKING:
    from .calibration import OnlinePlatt
    from .protocols import LoopModel

__all__ = [
    "LOOP_COUNTS",
    "Stored",
    "calibrate_rows",
    "gather",
    "learn_csr",
    "learn_rows",
    "scatter",
    "settings_array",
    "state_arrays",
]

#: The entries of ``_loops.ISTATE`` that are no model's state: the counts the loop returns (0 in), how many
#: columns it first wrote into v and into the average's offset.
LOOP_COUNTS = ("n_new_v", "n_new_offset")


def settings_array(settings: Mapping[str, float]) -> np.ndarray:
    """The compiled loops' settings array: each of ``_loops.PARAMS`` from ``settings``, 0 for a name it lacks (a
    setting its loop does not read)."""
    return np.array([settings.get(name, 0.0) for name in _loops.PARAMS], dtype=np.float64)


def state_arrays(values: Mapping[str, float | int]) -> tuple[np.ndarray, np.ndarray]:
    """The compiled loops' state arrays (``_loops.STATE``: floats, ``_loops.ISTATE``: integers), each entry from
    ``values`` by its name, 0 for a name it lacks (`LOOP_COUNTS`, or the state of another part)."""
    state = np.array([values.get(name, 0.0) for name in _loops.STATE], dtype=np.float64)
    return state, np.array([values.get(name, 0) for name in _loops.ISTATE], dtype=np.int64)


def _state_values(state: np.ndarray, istate: np.ndarray) -> dict[str, float | int]:
    """The entries of the state arrays as the loop left them, by name (Python floats and ints), for their owners
    to take back (`LOOP_COUNTS` too)."""
    values: dict[str, float | int] = dict(zip(_loops.STATE, state.tolist()))
    values.update(zip(_loops.ISTATE, istate.tolist()))
    return values


def learn_csr(
    model: LoopModel,
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
    batch = LearnBatch.new(rows, signs, weights, probas=False)
    stop, refusal = model.learn_rows(batch)
    if refusal is not None:
        raise ValueError(f"row {stop}: {refusal}") from None
    return batch.decisions


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


def learn_rows(model: LoopModel, batch: LearnBatch) -> tuple[int, ValueError | None]:
    """`PegasosClassifier.learn_rows`: (the row it stopped at, its error), or (len(rows), None).

    Arrays the compiled loop cannot take (formats, lengths, CSR structure) raise a ValueError before
    anything is learned. Without the compiled module, each row goes through ``learn_one``.
    """
    rows, start = batch.rows, batch.start
    n = len(rows)
    u = model._u
    columns: np.ndarray | range | None = None  # with weight arrays: the columns the rows' keys name
    if isinstance(u, DenseWeightVector):
        rows = _widened(u, rows)
        columns = weight_columns(rows.keys, len(u.v))
        compiled = (
            _loops is not None and columns is not None
        )  # (None: a key that is no column, which learn_one refuses)
    else:
        rows = rows.numbered_locally()  # (dict weights are gathered for the keys the rows use)
        compiled = _loops is not None
    batch = replace(batch, rows=rows)
    while start < n:
        # the step whose shrink clears the weights (a model's first) is learn_one's, as the compiled loop would
        # find after checking every row
        clears = effective_step(model._t + 1, model.horizon, cast(int, model.t0)) == 1
        stop = _learn_compiled(model, batch.at(start), columns) if compiled and not clears else start
        if stop == n:
            break
        error = _learn_one(model, batch, stop)  # a rare branch (a fold of the scale, a refusal), or not compiled
        if error is not None:
            return stop, error
        start = stop + 1
    return n, None


def _learn_one(model: LoopModel, batch: LearnBatch, i: int) -> ValueError | None:
    """Row ``i`` of ``batch`` predicted (its outputs nan when no decision could be made) and learned by
    ``learn_one``; the error that refused it, if any."""
    x = batch.rows.row(i)
    decisions, probas, margins = batch.decisions, batch.probas, batch.margins
    calibrated = batch.wants_probas
    decisions[i] = math.nan
    if calibrated:
        probas[i] = math.nan
    if margins is not None:
        margins[i] = math.nan
    try:
        margin, decisions[i] = model._margins(x)
        if margins is not None:
            margins[i] = margin
        if calibrated:
            probas[i] = model.probability(decisions[i])
        model.learn_one(x, batch.signs[i] > 0, float(batch.weights[i]))
    except ValueError as error:
        model._last_scored = None
        return error
    return None


def _widened(u: DenseWeightVector, rows: Rows) -> Rows:
    """``rows`` over weight arrays ``u`` that widen (``max_features``), which now hold every column the rows use:
    rows numbered by the arrays' columns (keys ``range``) as numbered by the widened arrays, any other rows as they
    are. Rows with a column past ``max_features`` are left as they are, to be refused."""
    keys = rows.keys
    if u.max_features is None or not len(rows.indices):
        return rows
    if not isinstance(keys, range):
        u.columns_of(keys)  # (widens the arrays to hold the rows' keys)
        return rows
    if keys.start != 0 or keys.step != 1 or len(keys) <= len(u.v):
        return rows
    low, high = int(rows.indices.min()), int(rows.indices.max())
    if low < 0 or high >= min(len(keys), u.max_features):
        return rows
    u.widen(high)
    return Rows(rows.indptr, rows.indices, rows.data, range(len(u.v)), rows.distinct)


def _learn_compiled(model: LoopModel, batch: LearnBatch, columns: np.ndarray | range | None) -> int:
    """Run the compiled loop over ``batch`` from its start, over the weights the rows touch: weight arrays in place
    when the rows' columns are theirs (``columns`` a range), else the ``columns`` the rows touch taken out of the
    arrays and put back, or the keys of rows numbered locally taken out of the dicts and put back.

    Returns the row the loop stopped before (len(rows) when it learned them all).
    """
    u = model._u
    if isinstance(u, DenseWeightVector) and columns is not None:
        untracked = (np.zeros(0, dtype=bool), np.zeros(0, dtype=np.int64))  # every column is present
        prior = model._prior_array() if model._prior else np.zeros(0)
        if isinstance(columns, range):
            return _loop(model, batch, u.v, u.avg_offset, prior, untracked, untracked)[0]
        v, offset = u.v[columns], u.avg_offset[columns] if u.average else u.avg_offset
        stop = _loop(model, batch, v, offset, prior[columns] if model._prior else prior, untracked, untracked)[0]
        u.v[columns] = v
        if u.average:
            u.avg_offset[columns] = offset
        return stop
    assert isinstance(u, WeightVector)
    keys = cast(list, batch.rows.keys)
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
    stop, counts = _loop(model, batch, v, offset, prior, (present_v, new_v), (present_offset, new_offset))
    scatter(u.v, keys, v, stored_v, new_v[: counts["n_new_v"]])
    if u.average:
        scatter(u.avg_offset, keys, offset, stored_offset, new_offset[: counts["n_new_offset"]])
    return stop


def _loop(
    model: LoopModel,
    batch: LearnBatch,
    v: np.ndarray,
    offset: np.ndarray,
    prior: np.ndarray,
    v_presence: tuple[np.ndarray, np.ndarray],
    offset_presence: tuple[np.ndarray, np.ndarray],
) -> tuple[int, dict[str, int]]:
    """``_loops.learn_rows`` over the weights ``v`` (the average's ``offset``, the ``prior``) of the rows' columns,
    with the model's state read before and given back after; (the row it stopped before, the counts of columns
    first written). The presence pairs are (flags, list of columns first written), empty when all are present."""
    rows, margins = batch.rows, batch.margins
    state, istate = state_arrays(model._loop_state())
    stop = _loops.learn_rows(
        rows.indptr, rows.indices, rows.data, batch.signs, batch.weights, v, offset, prior, v_presence[0],
        offset_presence[0], v_presence[1], offset_presence[1], state, istate, settings_array(model._loop_settings()),
        batch.decisions, batch.probas, batch.start, rows.distinct, np.empty(0) if margins is None else margins,
    )  # fmt: skip
    values = _state_values(state, istate)
    model._set_loop_state(values)
    return stop, {name: int(values[name]) for name in LOOP_COUNTS}


def calibrate_rows(platt: OnlinePlatt, margins: np.ndarray, signs: np.ndarray, probas: np.ndarray) -> None:
    """For each margin in order, its probability ``platt.proba(margin)`` into ``probas``, then
    ``platt.update(margin, sign > 0)``: compiled when the compiled module is in use (the same operations, as
    `learn_rows` calibrates a `PegasosClassifier`), else in Python."""
    if _loops is None:
        for i, margin, sign in zip(range(len(margins)), margins.tolist(), signs.tolist()):
            probas[i] = platt.proba(margin)
            platt.update(margin, sign > 0)
        return
    state, istate = state_arrays(platt.loop_state())  # (the entries of no calibration are left 0, as its settings)
    _loops.platt_rows(margins, signs, probas, state, istate, settings_array(platt.loop_settings()))
    platt.set_loop_state(_state_values(state, istate))


def gather(weights: dict, keys: list) -> tuple[np.ndarray, np.ndarray]:
    """(the values of ``keys``, 0.0 where absent; whether each is present)."""
    values, present = np.empty(len(keys)), np.empty(len(keys), dtype=bool)
    if _loops is None:
        found = [weights.get(key) for key in keys]
        present[:] = [value is not None for value in found]
        values[:] = [0.0 if value is None else float(value) for value in found]
    else:
        _loops.gather(weights, keys, values, present)
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
        if _loops is None:
            weights.update((keys[column], value) for column, value in zip(columns.tolist(), values[columns].tolist()))
        else:
            _loops.scatter(weights, keys, values, columns.astype(np.int64, copy=False))
