"""PegasosLogistic: a dense reference, the compiled loop bit for bit, refusals, persistence, bad settings."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from streams import learn_split, weighted_rows

from pegasos_stream import PegasosLogistic, load, save
from pegasos_stream.learners import logistic_pegasos
from pegasos_stream.learners.batch import LearnBatch
from pegasos_stream.learners.rows import Rows
from pegasos_stream.learners.weights import MIN_SCALE, DenseWeightVector, WeightVector
from pegasos_stream.persist import CheckpointError
from pegasos_stream.persist.checkpoint import model_digest

N = 32


def _key(column: int, dense: bool) -> int | str:
    """Feature ``column``'s key: the int column itself for weight arrays, a name for dicts."""
    return column if dense else f"f{column}"


def _stream(n: int, seed: int, dense: bool = True) -> list[tuple[dict, bool, float]]:
    """Sparse examples with a noisy linear rule, and sample weights (some 0)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        x = {_key(c, dense): rng.uniform(-2, 2) for c in rng.sample(range(N), rng.randrange(0, 8))}
        y = sum(x.get(_key(c, dense), 0.0) for c in (0, 3, 5)) + rng.gauss(0, 0.3) > 0
        out.append((x, y, rng.choice([1.0, 1.0, 0.5, 2.5, 0.0])))
    return out


def _sigmoid(z: float) -> float:
    return 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))


class DenseReference:
    """The update restated on a numpy vector: at step t, T = t + t0 and η = 1/(λT), w ← (1 − ηλ)·w + η·c·y·σ(−y⟨w,
    x⟩)·x, the margin taken before the step."""

    def __init__(self, lambda_: float, t0: int):
        self.lambda_, self.t0, self.t = lambda_, t0, 0
        self.w = np.zeros(N)

    @staticmethod
    def vec(x: dict) -> tuple[np.ndarray, np.ndarray]:
        return np.array([int(str(k).lstrip("f")) for k in x], dtype=np.int64), np.array(list(x.values()), dtype=float)

    def decision(self, x: dict) -> float:
        columns, values = self.vec(x)
        return float(self.w[columns] @ values)

    def learn(self, x: dict, y: bool, weight: float) -> None:
        sign = 1.0 if y else -1.0
        margin = self.decision(x)
        self.t += 1
        eta = 1.0 / (self.lambda_ * (self.t + self.t0))
        self.w *= 1.0 - eta * self.lambda_
        columns, values = self.vec(x)
        self.w[columns] += eta * weight * sign * _sigmoid(-sign * margin) * values


def _weights(model: PegasosLogistic) -> np.ndarray:
    """The model's w as a dense vector."""
    w = np.zeros(N)
    for key, value in model.weights.items():
        w[int(str(key).lstrip("f"))] = value
    return w


# -- the update ----------------------------------------------------------------------------------

EXAMPLES = st.tuples(
    st.dictionaries(st.integers(0, N - 1), st.floats(-10, 10, allow_nan=False), max_size=6),
    st.booleans(),
    st.sampled_from([1.0, 1.0, 0.5, 2.5, 0.0]),
)


@settings(max_examples=80, deadline=None)
@given(
    stream=st.lists(EXAMPLES, max_size=60),
    lambda_=st.sampled_from([1e-3, 1e-2, 0.1, 1.0]),
    t0=st.sampled_from([0, 1, 10, 5623]),
    dense=st.booleans(),
    fold_at=st.none() | st.integers(0, 59),
)
def test_the_steps_follow_a_dense_reference(stream, lambda_, t0, dense, fold_at):
    """Step by step, to 1e-9 of the weights' size: through the first step of t0 = 0 (which clears the weights), sample
    weights (0 included) and, at ``fold_at``, a scale held just above its floor, which the next shrink folds into v."""
    model = PegasosLogistic(lambda_, t0, N if dense else None)
    reference = DenseReference(lambda_, t0)
    for i, (x, y, weight) in enumerate(stream):
        x = {_key(c, dense): value for c, value in x.items()}
        if i == fold_at:
            _hold_scale(model._u, MIN_SCALE * (1.0 + 1e-12))
        size = max(1.0, float(np.abs(reference.w).max())) * (1.0 + sum(map(abs, x.values())))
        assert abs(model.decision_function_one(x) - reference.decision(x)) <= 1e-9 * size
        model.learn_one(x, y, weight)
        reference.learn(x, y, weight)
        if i == fold_at:
            assert model._u.scale == 1.0  # folded
        assert np.abs(_weights(model) - reference.w).max() <= 1e-9 * max(1.0, float(np.abs(reference.w).max()))
    assert model.t == len(stream)


def _hold_scale(u: WeightVector | DenseWeightVector, scale: float) -> None:
    """The same weights w = scale·v held at ``scale`` (v divided by it)."""
    u.fold_scale()
    if isinstance(u, WeightVector):
        u.v = {key: value / scale for key, value in u.v.items()}
        u.sq_norm = math.fsum(value * value for value in u.v.values())
    else:
        u.v /= scale
        u.sq_norm = math.fsum((u.v * u.v).tolist())
    u.scale = scale


def test_the_first_steps_by_hand():
    model = PegasosLogistic(lambda_=0.5, t0=1)
    model.learn_one({"a": 1.0, "b": -2.0}, True)  # T = 2, η = 1, margin 0: w = 1·σ(0)·x
    assert model.weights == {"a": 0.5, "b": -1.0} and model.t == 1
    assert model.decision_function_one({"a": 2.0}) == 1.0 and model.predict_one({"a": 2.0}) is True
    assert model.predict_proba_one({"a": 2.0})[True] == model.probability(1.0) == 1.0 / (1.0 + math.exp(-1.0))
    model.learn_one({"b": 1.0}, False, 2.0)  # T = 3, η = 2/3: w = (2/3)·w − (2/3)·2·σ(−1)·x_b
    assert model.weights == pytest.approx({"a": 1 / 3, "b": -2 / 3 - 4 / 3 / (1.0 + math.e)}, rel=1e-15)


# -- the compiled loop ---------------------------------------------------------------------------

LAYOUTS = ["dicts", "arrays through columns", "arrays in place"]


def _rows(stream: list[tuple[dict, bool, float]], layout: str) -> tuple[Rows, np.ndarray, np.ndarray]:
    """(rows, signs, sample weights): columns numbered locally, or the int features themselves (keys a range)."""
    return weighted_rows(stream, N if layout == "arrays in place" else None)


def _model(case: str, layout: str) -> PegasosLogistic:
    if case == "first step clears":
        return PegasosLogistic(lambda_=0.05, t0=0, n_features=None if layout == "dicts" else N)
    model = PegasosLogistic(lambda_=1e-3, t0=1000, n_features=None if layout == "dicts" else N)
    model._u.scale = MIN_SCALE * 1.01  # (w = 0 at any scale) the scale folds some 11 steps in
    return model


@pytest.mark.parametrize("splits", [(), (1,), (120,), (7, 50, 243)], ids=str)
@pytest.mark.parametrize("case", ["first step clears", "scale folds"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_learn_rows_is_learn_one_bit_for_bit(layout, case, splits):
    """Decisions, probabilities and the model (its dict's order included), in batches split anywhere, the last
    taken from its ``start`` in the whole batch; the rows learn_one takes itself (the first step, a fold) included."""
    stream = _stream(300, 7, dense=layout != "dicts")
    one, batched = _model(case, layout), _model(case, layout)
    expected, expected_probas = [], []
    for x, y, weight in stream:
        expected.append(one.decision_function_one(x))
        expected_probas.append(one.predict_proba_one(x)[True])
        one.learn_one(x, y, weight)
    decisions, probas = learn_split(batched, *_rows(stream, layout), splits)
    assert decisions == expected and probas == expected_probas
    assert model_digest(batched) == model_digest(one) and batched.t == one.t == 300
    if layout == "dicts":
        assert list(batched._u.v) == list(one._u.v)  # the same keys, first learned in the same order
    if case == "scale folds":
        assert one._u.scale > 1e-3


def test_learn_rows_without_the_compiled_loop_learns_the_same(monkeypatch):
    stream = _stream(200, 3)
    rows, signs, weights = _rows(stream, "arrays in place")
    results = []
    for fast in (logistic_pegasos._loops, None):
        monkeypatch.setattr(logistic_pegasos, "_loops", fast)
        model, decisions, probas = PegasosLogistic(lambda_=0.01, t0=0, n_features=N), np.empty(200), np.empty(200)
        assert model.learn_rows(LearnBatch(rows, signs, weights, decisions, probas)) == (200, None)
        results.append((model_digest(model), decisions.tolist(), probas.tolist()))
    assert results[0] == results[1]


def test_learn_rows_may_leave_the_probabilities_out():
    stream = _stream(50, 4, dense=False)
    rows, signs, weights = _rows(stream, "dicts")
    with_probas, without = PegasosLogistic(), PegasosLogistic()
    decisions, other = np.empty(50), np.empty(50)
    assert with_probas.learn_rows(LearnBatch(rows, signs, weights, decisions, np.empty(50))) == (50, None)
    assert without.learn_rows(LearnBatch(rows, signs, weights, other, np.empty(0))) == (50, None)
    assert decisions.tolist() == other.tolist() and model_digest(with_probas) == model_digest(without)


# -- refusals ------------------------------------------------------------------------------------


@pytest.mark.parametrize("dense", [False, True], ids=["dicts", "arrays"])
def test_a_refused_example_leaves_the_model_untouched(dense):
    model = PegasosLogistic(lambda_=0.01, n_features=N if dense else None)
    for x, y, weight in _stream(20, 1):
        model.learn_one(x, y, weight)
    digest = model_digest(model)
    bad = [
        ({1: math.nan}, "finite"),
        ({1: math.inf, 2: 1.0}, "finite"),
        ({1: "x"}, "finite number"),
        ({1: 1e200}, "too large"),  # a finite margin, a step past the norm bound
        ({1: 1e300, 2: -1e300}, "too large"),
    ]
    if dense:
        bad += [({"word": 1.0}, "int column"), ({N: 1.0}, "int column"), ({-1: 1.0}, "int column")]
    for x, message in bad:
        with pytest.raises(ValueError, match=message):  # labelled against the prediction: a full step
            model.learn_one(x, message != "too large" or model.decision_function_one(x) <= 0)
        assert model_digest(model) == digest
    with pytest.raises(ValueError, match="sample weight"):
        model.learn_one({1: 1.0}, True, -1.0)
    with pytest.raises(ValueError, match="unknown label"):
        model.learn_one({1: 1.0}, 2)
    assert model_digest(model) == digest and model.t == 20


@pytest.mark.parametrize("value", [math.nan, 1e200], ids=["nan", "too large"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_refused_row_stops_the_batch_unlearned(layout, value):
    """The rows before it are learned (compiled), it is not: the model is the one that learned them one at a time."""
    stream = _stream(10, 2, dense=layout != "dicts")
    x, y, _ = stream[6]
    stream[6] = ({**x, _key(9, layout != "dicts"): value}, y, 1.0)
    model, reference = _model("first step clears", layout), _model("first step clears", layout)
    for x, y, weight in stream[:6]:
        reference.learn_one(x, y, weight)
    if value == 1e200:  # labelled against the prediction: a full step
        x, _, weight = stream[6]
        stream[6] = (x, reference.decision_function_one(x) <= 0, weight)
    rows, signs, weights = _rows(stream, layout)
    decisions, probas = np.empty(10), np.empty(10)
    stop, error = model.learn_rows(LearnBatch(rows, signs, weights, decisions, probas))
    assert stop == 6 and isinstance(error, ValueError)
    assert ("finite" if math.isnan(value) else "too large") in str(error)
    assert model_digest(model) == model_digest(reference) and model.t == 6
    assert math.isnan(decisions[6]) == math.isnan(value)


# -- persistence ---------------------------------------------------------------------------------


@pytest.mark.parametrize("n_features", [None, N], ids=["dicts", "arrays"])
def test_a_saved_model_loads_bit_for_bit_and_learns_on_alike(tmp_path, n_features):
    model = PegasosLogistic(lambda_=0.01, t0=10, n_features=n_features)
    stream = _stream(200, 9, dense=n_features is not None)
    for x, y, weight in stream[:100]:
        model.learn_one(x, y, weight)
    save(model, tmp_path / "model.pgs")
    loaded = load(tmp_path / "model.pgs", PegasosLogistic)
    assert model_digest(loaded) == model_digest(model) and loaded.n_features == n_features and loaded.t == 100
    for x, y, weight in stream[100:]:
        assert loaded.decision_function_one(x) == model.decision_function_one(x)
        model.learn_one(x, y, weight)
        loaded.learn_one(x, y, weight)
    assert model_digest(loaded) == model_digest(model)


def _set(name: str, value: object):
    return lambda model: setattr(model, name, value)


FORGED = {
    "negative count": (_set("_t", -1), r"PegasosLogistic\._t: expected an integer"),
    "settings refused": (_set("lambda_", 0.0), r"PegasosLogistic: settings refused: lambda_=0\.0"),
    "a setting not as kept": (_set("lambda_", 1), r"PegasosLogistic\.lambda_: expected 1\.0\b"),
    "unknown attribute": (_set("extra", 1), r"PegasosLogistic: unknown attributes extra"),
    "dict weights for arrays": (_set("_u", WeightVector()), r"PegasosLogistic\._u: expected the parts"),
    "arrays of other columns": (_set("_u", DenseWeightVector(N + 1)), r"expected weights of n_features=32"),
    "averaged weights": (_set("_u", DenseWeightVector(N, average=True)), r"expected weights of n_features=32"),
}


@pytest.mark.parametrize("case", FORGED, ids=list(FORGED))
def test_a_state_no_steps_leave_is_refused_on_load(tmp_path, case):
    change, message = FORGED[case]
    model = PegasosLogistic(n_features=N)
    for x, y, weight in _stream(20, 5):
        model.learn_one(x, y, weight)
    change(model)
    save(model, tmp_path / "forged.pgs")
    with pytest.raises(CheckpointError, match=message):
        load(tmp_path / "forged.pgs")


# -- settings ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"lambda_": 0.0}, "lambda_"),
        ({"lambda_": -1.0}, "lambda_"),
        ({"lambda_": math.inf}, "lambda_"),
        ({"lambda_": math.nan}, "lambda_"),
        ({"lambda_": True}, "lambda_"),
        ({"lambda_": "auto"}, "lambda_"),
        ({"lambda_": 1e-200}, "lambda_"),  # the first step 1/λ would overflow the norm bound
        ({"lambda_": 1e300, "t0": 2**53}, r"the first step 1/\(lambda_·\(1 \+ t0\)\) is 0\.0"),
        ({"t0": -1}, "t0"),
        ({"t0": 2.5}, "t0"),
        ({"t0": True}, "t0"),
        ({"t0": 2**53 + 1}, "t0"),
        ({"n_features": 0}, "n_features"),
        ({"n_features": 2.5}, "n_features"),
        ({"n_features": True}, "n_features"),
    ],
)
def test_bad_settings_are_refused(params, message):
    with pytest.raises(ValueError, match=message):
        PegasosLogistic(**params)


def test_settings_are_kept_as_numbers_of_their_kind():
    model = PegasosLogistic(lambda_=1, t0=np.int64(3), n_features=np.int32(8))
    assert (model.lambda_, model.t0, model.n_features) == (1.0, 3, 8)
    assert type(model.lambda_) is float and type(model.t0) is int and type(model.n_features) is int
