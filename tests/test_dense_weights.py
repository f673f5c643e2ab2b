"""PegasosClassifier(n_features=...): weights in arrays, bit-identical to the dict layout.

One example at a time, compiled rows (in place over the arrays, and over the columns a batch touches),
learn_csr and learn_many against the dict layout on the same stream; refusals of keys that are no
column; checkpoints holding the raw arrays; rows whose columns are the hashed features themselves
(``keys`` a range) for every learner that takes rows.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pegasos_stream import AdaGradLogistic, PegasosClassifier, PegasosCommittee, _compiled, load, save
from pegasos_stream.learners.batch import LearnBatch
from pegasos_stream.learners.rows import Rows
from pegasos_stream.learners.weights import COMPENSATED_SUM, DenseWeightVector, WeightVector
from pegasos_stream.persist import codec
from pegasos_stream.persist.checkpoint import model_digest

try:  # tests/ as a package
    from .streams import PEGASOS_PARAMS, int_stream, learn_in_chunks
except ImportError:  # tests/ as a plain directory: pytest puts it on sys.path
    from streams import PEGASOS_PARAMS, int_stream, learn_in_chunks

N = 16


def _stream(seed: int, n: int) -> tuple[list[dict], list[bool], list[float]]:
    return int_stream(seed, n, N)


def _bits(values) -> list[str]:
    return [float(v).hex() for v in values]


def assert_same_model(dense: PegasosClassifier, sparse: PegasosClassifier) -> None:
    """Every float and count of the two layouts' states, bit for bit; a column the dict never wrote holds 0.0."""
    u, v = dense._u, sparse._u
    assert isinstance(u, DenseWeightVector) and isinstance(v, WeightVector)
    assert _bits([u.scale, u.sq_norm, u.avg_scale, dense._b, dense._average_b]) == _bits(
        [v.scale, v.sq_norm, v.avg_scale, sparse._b, sparse._average_b]
    )
    assert (dense.t, u.n_averaged, dense._n_pos, dense._n_neg) == (sparse.t, v.n_averaged, sparse._n_pos, sparse._n_neg)
    assert dense._platt.__dict__ == sparse._platt.__dict__
    pairs = [(u.v, v.v)] + ([(u.avg_offset, v.avg_offset)] if v.average else [])
    for array, weights in pairs:
        assert _bits(array[list(weights)]) == _bits(weights.values())
        untouched = np.ones(N, dtype=bool)
        untouched[list(weights)] = False
        assert not array[untouched].any()


def _one_at_a_time(model: PegasosClassifier, xs, ys, ws) -> tuple[list[float], list[float]]:
    decisions, probas = [], []
    for x, y, w in zip(xs, ys, ws):
        decisions.append(model.decision_function_one(x))
        probas.append(model.predict_proba_one(x)[True])
        model.learn_one(x, y, w)
    return decisions, probas


@settings(max_examples=120, deadline=None)
@given(params=PEGASOS_PARAMS, seed=st.integers(0, 10**6), n=st.integers(0, 120))
def test_learn_one_over_arrays_is_bit_identical_to_dicts(params, seed, n):
    xs, ys, ws = _stream(seed, n)
    sparse, dense = PegasosClassifier(**params), PegasosClassifier(**params, n_features=N)
    assert _one_at_a_time(dense, xs, ys, ws) == _one_at_a_time(sparse, xs, ys, ws)
    assert_same_model(dense, sparse)
    assert dense.weights == {k: w for k, w in sparse.weights.items() if w}
    if params.get("average"):
        assert dense.average_weights == {k: w for k, w in sparse.average_weights.items() if w}


@settings(max_examples=120, deadline=None)
@given(
    params=PEGASOS_PARAMS,
    seed=st.integers(0, 10**6),
    n=st.integers(0, 120),
    chunk=st.integers(1, 60),
    in_place=st.booleans(),
)
def test_compiled_rows_over_arrays_are_bit_identical_to_learn_one(params, seed, n, chunk, in_place):
    """Rows whose columns are the weights' (keys a range) are learned in place; rows numbered locally over the
    columns they touch, taken out of the arrays and put back."""
    xs, ys, ws = _stream(seed, n)
    sparse = PegasosClassifier(**params)
    expected = _one_at_a_time(sparse, xs, ys, ws)
    dense = PegasosClassifier(**params, n_features=N)
    assert learn_in_chunks(dense, xs, ys, ws, chunk, N if in_place else None) == expected
    assert_same_model(dense, sparse)


def test_learn_csr_and_learn_many_over_arrays_equal_dicts():
    xs, ys, _ = _stream(3, 300)
    sparse, dense = (
        PegasosClassifier(lambda_=1e-2, average=True),
        PegasosClassifier(lambda_=1e-2, average=True, n_features=N),
    )
    indptr = np.cumsum([0] + [len(x) for x in xs])
    indices = np.array([k for x in xs for k in x], dtype=np.int64)
    data = np.array([float(v) for x in xs for v in x.values()])
    assert dense.learn_csr(indptr, indices, data, ys).tolist() == sparse.learn_csr(indptr, indices, data, ys).tolist()
    assert_same_model(dense, sparse)
    for first in range(0, 40, 8):  # mini-batch steps over frames of int columns
        columns = sorted({k for x in xs[first : first + 8] for k in x})
        frame = pd.DataFrame([[x.get(k, 0.0) for k in columns] for x in xs[first : first + 8]], columns=columns)
        for model in (sparse, dense):
            model.learn_many(frame, pd.Series(ys[first : first + 8]))
        assert dense.predict_proba_many(frame).values.tolist() == sparse.predict_proba_many(frame).values.tolist()
    assert _bits(dense.average_weights.values()) == _bits(w for w in sparse.average_weights.values() if w)


@pytest.mark.parametrize("key", ["word", N, -1, 2.5, (1,)], ids=["str", "past the end", "negative", "float", "tuple"])
def test_a_key_that_is_no_column_is_refused_with_nothing_learned(key):
    model = PegasosClassifier(lambda_=1e-2, n_features=N)
    xs, ys, _ = _stream(1, 40)
    for x, y in zip(xs, ys):
        model.learn_one(x, y)
    digest = model_digest(model)
    x = {1: 0.5, key: 1.0}
    with pytest.raises(ValueError, match=re.escape(f"feature {key!r}: expected an int column from 0 to {N - 1}")):
        model.learn_one(x, True)
    with pytest.raises(ValueError, match="expected an int column"):
        model.decision_function_one(x)
    assert model_digest(model) == digest

    rows, signs = Rows.from_dicts([xs[0], xs[1], x, xs[2]]), np.array([1.0, -1.0, 1.0, -1.0])
    decisions, probas = np.empty(4), np.empty(4)
    stop, error = model.learn_rows(LearnBatch(rows, signs, np.ones(4), decisions, probas))
    assert stop == 2 and "expected an int column" in str(error) and model.t == 42
    with pytest.raises(ValueError, match="expected an int column"):
        PegasosClassifier(n_features=N, prior={key: 1.0})


@pytest.mark.parametrize("n_features", [0, -3, 2.5, True, 2**40])
def test_n_features_must_be_a_whole_number_of_columns(n_features):
    with pytest.raises(ValueError, match="n_features"):
        PegasosClassifier(n_features=n_features)


def test_a_saved_model_holds_its_weights_as_raw_arrays_and_learns_on_alike(tmp_path):
    xs, ys, ws = _stream(7, 200)
    model = PegasosClassifier(lambda_=1e-2, average=5, prior={2: 0.5}, n_features=N)
    _one_at_a_time(model, xs[:100], ys[:100], ws[:100])
    _, arrays = codec.encode(model)
    assert any(array.dtype == np.float64 and array.shape == (N,) for array in arrays.values())
    save(model, tmp_path / "dense.pgs")
    loaded = load(tmp_path / "dense.pgs", PegasosClassifier)
    assert model_digest(loaded) == model_digest(model) and loaded.n_features == N
    assert _one_at_a_time(loaded, xs[100:], ys[100:], ws[100:]) == _one_at_a_time(model, xs[100:], ys[100:], ws[100:])
    assert model_digest(loaded) == model_digest(model)


def _hashed_and_local(xs: list[dict]) -> tuple[Rows, Rows]:
    """The same rows twice: columns numbered locally (keys a list), and the int features themselves (a range)."""
    local = Rows.from_dicts(xs)
    return Rows(local.indptr, np.array(local.keys, dtype=np.int64)[local.indices], local.data, range(N)), local


@pytest.mark.parametrize(
    "make",
    [
        lambda: PegasosClassifier(lambda_=1e-2, average=True),
        lambda: AdaGradLogistic(learning_rate=0.3),
        lambda: AdaGradLogistic(learning_rate=0.3, n_features=N),
        lambda: PegasosCommittee(1e-2, 10),
        lambda: PegasosCommittee(1e-2, 10, n_features=N),
    ],
    ids=["pegasos dicts", "adagrad dicts", "adagrad arrays", "committee dicts", "committee arrays"],
)
def test_rows_of_hashed_columns_teach_every_learner_what_local_rows_do(make):
    """Learners over arrays learn such rows in place; learners over dicts number their columns first."""
    xs, ys, _ = _stream(5, 200)
    signs = np.where(ys, 1.0, -1.0)
    hashed, local = _hashed_and_local(xs)
    results = []
    for rows in (hashed, local):
        model, decisions, probas = make(), np.empty(200), np.empty(200)
        assert model.learn_rows(LearnBatch(rows, signs, np.ones(200), decisions, probas)) == (200, None)
        results.append((model_digest(model), decisions.tolist(), probas.tolist()))
    assert results[0] == results[1]
    assert not any(math.isnan(d) for d in results[0][1])


def test_numbered_locally_names_the_columns_the_rows_use():
    hashed, local = _hashed_and_local([{5: 1.0, 2: -1.0}, {9: 0.5, 5: 2.0}])
    numbered = hashed.numbered_locally()
    assert [numbered.row(i) for i in range(2)] == [local.row(i) for i in range(2)] == [hashed.row(i) for i in range(2)]
    assert sorted(numbered.keys) == [2, 5, 9] and local.numbered_locally() is local


DICT_KEYS = st.one_of(st.integers(-2, N + 1), st.booleans(), st.sampled_from(["a", 2.0, 3.5]))
DICT_VALUES = st.one_of(st.floats(-1e3, 1e3), st.integers(-(10**400), 10**400), st.booleans(), st.just(math.nan))


@pytest.mark.skipif(_compiled.LOOPS is None, reason="the compiled module is not in use")
@settings(max_examples=300, deadline=None)
@given(x=st.dictionaries(DICT_KEYS, DICT_VALUES, max_size=8), c=st.floats(-10, 10))
def test_the_one_example_passes_over_a_dict_give_the_array_passes_bits(x, c):
    """dense_dict_dot and dense_dict_axpy take the dict as it is, or leave it (None, nothing written) to the passes
    over its columns and values, which name what they refuse; where they take it, the same bits."""
    fast = _compiled.LOOPS
    u = DenseWeightVector(N)
    u.v[:] = np.linspace(-1.0, 1.0, N)
    vx = fast.dense_dict_dot(u.v, x, COMPENSATED_SUM)
    before = u.v.copy()
    change = fast.dense_dict_axpy(u.v, x, c, COMPENSATED_SUM)
    try:
        columns, values = u.example(x)
    except ValueError:
        assert vx is None and change is None and np.array_equal(u.v, before)
        return
    plain = all(type(key) is int for key in x) and all(type(value) in (int, float, bool) for value in x.values())
    assert (vx is None) == (change is None) == (not (x and plain))  # bool keys, for one, are left to Python
    if vx is None:
        assert np.array_equal(u.v, before)
        return
    assert _bits([vx]) == _bits([fast.dense_dot(before, columns, values, COMPENSATED_SUM)])
    expected = before.copy()
    assert _bits([change]) == _bits([fast.dense_axpy(expected, columns, values, c, COMPENSATED_SUM)])
    assert _bits(u.v) == _bits(expected)
