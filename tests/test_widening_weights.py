"""Weight arrays that widen as larger int columns arrive (``max_features``): the floats of arrays that held every
column from the start, whatever the order and batches the columns come in, and a bounded length."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pegasos_stream import PegasosClassifier, load, save
from pegasos_stream.learners.batch import LearnBatch
from pegasos_stream.learners.rows import Rows
from pegasos_stream.learners.state import InvalidState
from pegasos_stream.learners.weights import START_COLUMNS, DenseWeightVector, WeightVector, widened_length
from pegasos_stream.persist import codec
from pegasos_stream.persist.checkpoint import model_digest

try:  # tests/ as a package
    from .streams import PEGASOS_PARAMS, int_stream, learn_in_chunks
except ImportError:  # tests/ as a plain directory: pytest puts it on sys.path
    from streams import PEGASOS_PARAMS, int_stream, learn_in_chunks

#: The columns of the streams (0..N − 1); the widening arrays start with 1 column and may hold up to LIMIT.
N, LIMIT = 40, 100


def _bits(values) -> list[str]:
    return [float(v).hex() for v in values]


def _state(model: PegasosClassifier) -> tuple:
    """Every float and count of a model's state; the weights as {column: bits} of the non-zero ones."""
    u = model._u
    weights = [u.v] + ([u.avg_offset] if u.average else [])
    if isinstance(u, WeightVector):
        tables = [{k: w for k, w in table.items() if w} for table in weights]
    else:
        tables = [dict(zip(np.flatnonzero(a).tolist(), a[np.flatnonzero(a)].tolist())) for a in weights]
    floats = [u.scale, u.sq_norm, u.avg_scale, model._b, model._average_b]
    counts = (model.t, u.n_averaged, model._n_pos, model._n_neg)
    return _bits(floats), counts, model._platt.__dict__, [{k: _bits([w]) for k, w in t.items()} for t in tables]


def _one_at_a_time(model: PegasosClassifier, xs, ys, ws) -> list[tuple[float, float]]:
    outputs = []
    for x, y, w in zip(xs, ys, ws):
        outputs.append((model.decision_function_one(x), model.predict_proba_one(x)[True]))
        model.learn_one(x, y, w)
    return outputs


@settings(max_examples=100, deadline=None)
@given(params=PEGASOS_PARAMS, seed=st.integers(0, 10**6), n=st.integers(0, 80))
def test_learn_one_over_widening_arrays_is_bit_identical_to_dicts(params, seed, n):
    xs, ys, ws = int_stream(seed, n, N)
    dicts, widening = PegasosClassifier(**params), PegasosClassifier(**params, n_features=1, max_features=LIMIT)
    assert _one_at_a_time(widening, xs, ys, ws) == _one_at_a_time(dicts, xs, ys, ws)
    assert _state(widening) == _state(dicts)
    columns = [k for x in xs for k in x] + list(params.get("prior") or {})
    assert len(widening._u.v) == widened_length(max(columns, default=0), 1, LIMIT)


@settings(max_examples=100, deadline=None)
@given(
    params=PEGASOS_PARAMS,
    seed=st.integers(0, 10**6),
    n=st.integers(0, 80),
    chunk=st.integers(1, 40),
    in_place=st.booleans(),
)
def test_compiled_rows_widen_the_arrays_as_learn_one_does(params, seed, n, chunk, in_place):
    """Rows numbered by the arrays' columns up to the limit (keys ``range(LIMIT)``, as the svmlight parser gives
    them) or numbered locally: the arrays widen to hold them, and learn what one row at a time learns."""
    xs, ys, ws = int_stream(seed, n, N)
    dicts = PegasosClassifier(**params)
    expected = _one_at_a_time(dicts, xs, ys, ws)
    widening = PegasosClassifier(**params, n_features=1, max_features=LIMIT)
    decisions, probas = learn_in_chunks(widening, xs, ys, ws, chunk, LIMIT if in_place else None)
    assert list(zip(decisions, probas)) == expected
    assert _state(widening) == _state(dicts)


def test_a_column_past_the_limit_is_refused_with_nothing_learned():
    model = PegasosClassifier(lambda_=1e-2, max_features=LIMIT)
    xs, ys, ws = int_stream(2, 60, N)
    _one_at_a_time(model, xs, ys, ws)
    digest, length = model_digest(model), len(model._u.v)
    x = {1: 0.5, LIMIT: 1.0}
    message = re.escape(f"feature {LIMIT}: expected an int column from 0 to {LIMIT - 1} (max_features={LIMIT})")
    with pytest.raises(ValueError, match=message):
        model.learn_one(x, True)
    with pytest.raises(ValueError, match=message):
        model.decision_function_one(x)
    assert model_digest(model) == digest
    rows = Rows(np.array([0, 1, 3]), np.array([2, 1, LIMIT]), np.ones(3), range(2 * LIMIT))
    stop, error = model.learn_rows(LearnBatch(rows, np.array([1.0, -1.0]), np.ones(2), np.empty(2), np.empty(2)))
    assert stop == 1 and "max_features" in str(error)
    assert len(model._u.v) == length and model.t == 61  # the first row learned, the arrays as they were
    model.learn_one({LIMIT - 1: 1.0}, True)
    assert len(model._u.v) == LIMIT  # the smallest power of two above 99 is past the limit: the limit


def test_the_arrays_start_small_and_settings_are_checked():
    model = PegasosClassifier(lambda_=1e-2, max_features=2**20)
    assert (model.n_features, model.max_features, len(model._u.v)) == (START_COLUMNS, 2**20, START_COLUMNS)
    assert PegasosClassifier(lambda_=1e-2, max_features=8).n_features == 8
    assert PegasosClassifier(lambda_=1e-2, n_features=5, max_features=8).n_features == 5
    with pytest.raises(ValueError, match="max_features=4: expected a whole number from n_features=5"):
        PegasosClassifier(lambda_=1e-2, n_features=5, max_features=4)
    for limit in (0, 2.5, True, 2**40):
        with pytest.raises(ValueError, match="n_features"):
            PegasosClassifier(lambda_=1e-2, max_features=limit)
    auto = PegasosClassifier(max_features=64)  # lambda_="auto": each member's arrays widen
    auto.learn_one({50: 1.0}, True)
    assert all(len(member._u.v) == 64 for member in auto._grid._members)


def test_a_widened_model_saves_loads_and_learns_on_alike(tmp_path):
    xs, ys, ws = int_stream(7, 200, N)
    model = PegasosClassifier(lambda_=1e-2, average=5, prior={2: 0.5}, n_features=4, max_features=LIMIT)
    _one_at_a_time(model, xs[:100], ys[:100], ws[:100])
    assert len(model._u.v) == 64
    save(model, tmp_path / "widened.pgs")
    loaded = load(tmp_path / "widened.pgs", PegasosClassifier)
    assert model_digest(loaded) == model_digest(model) and len(loaded._u.v) == 64
    assert _one_at_a_time(loaded, xs[100:], ys[100:], ws[100:]) == _one_at_a_time(model, xs[100:], ys[100:], ws[100:])
    assert model_digest(loaded) == model_digest(model)


@pytest.mark.parametrize(
    "forge",
    [
        lambda u: setattr(u, "v", np.zeros(LIMIT + 1)),  # past the limit
        lambda u: setattr(u, "v", np.zeros(2)),  # below n_features
        lambda u: setattr(u, "max_features", LIMIT * 2),  # another limit than the settings'
        lambda u: setattr(u, "max_features", "100"),
    ],
    ids=["past the limit", "below n_features", "another limit", "a string limit"],
)
def test_a_forged_length_or_limit_is_refused_on_load(forge):
    model = PegasosClassifier(lambda_=1e-2, n_features=4, max_features=LIMIT)
    model.learn_one({30: 1.0}, True)
    forge(model._u)
    with pytest.raises(ValueError, match=r"DenseWeightVector|PegasosClassifier\._u"):
        codec.decode(*codec.encode(model))


def test_a_vector_saved_before_the_limit_existed_loads_with_none():
    vector = DenseWeightVector(4)
    del vector.max_features  # as a state saved before it existed
    vector._check_state()
    assert vector.max_features is None
    vector.widen(10)  # (without a limit, a no-op)
    assert len(vector.v) == 4
    vector.max_features = 3
    with pytest.raises(InvalidState, match="max_features: expected an int from 4"):
        vector._check_state()
