"""NormalizedHinge: a dense reference, scale invariance, the compiled loop bit for bit, refusals, persistence."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from streams import learn_split, weighted_rows

from pegasos_stream import NormalizedHinge, load, save
from pegasos_stream.learners import normalized_hinge
from pegasos_stream.learners.batch import LearnBatch
from pegasos_stream.learners.rows import Rows
from pegasos_stream.persist import CheckpointError
from pegasos_stream.persist.checkpoint import model_digest

N = 32


def _key(column: int, dense: bool) -> int | str:
    """Feature ``column``'s key: the int column itself for weight arrays, a name for dicts."""
    return column if dense else f"f{column}"


def _stream(n: int, seed: int, dense: bool = True) -> list[tuple[dict, bool, float]]:
    """Sparse examples with a noisy linear rule, features of different scales, and sample weights (some 0)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        x = {_key(c, dense): rng.uniform(-2, 2) * (c + 1) for c in rng.sample(range(N), rng.randrange(0, 8))}
        y = sum(x.get(_key(c, dense), 0.0) / (c + 1) for c in (0, 3, 5)) + rng.gauss(0, 0.3) > 0
        out.append((x, y, rng.choice([1.0, 1.0, 0.5, 2.5, 0.0])))
    return out


class DenseReference:
    """The update restated on numpy vectors: when y·⟨w, x⟩ < 1 − 10⁻⁹, over x's non-zero features (|x_j| at least 2⁻⁶³):
    w_j ← w_j·N_j/|x_j| where |x_j| > N_j > 0, N_j ← max(N_j, |x_j|), G_j ← G_j + c·x_j², r = 1/(√G·N),
    s = min(c·η, (1 − y⟨w, x⟩)/Σ x_j²·r_j), w_j ← w_j + y·s·r_j·x_j."""

    def __init__(self, rate: float):
        self.rate = rate
        self.w, self.g2, self.scales = np.zeros(N), np.zeros(N), np.zeros(N)

    @staticmethod
    def vec(x: dict) -> tuple[np.ndarray, np.ndarray]:
        return np.array([int(str(k).lstrip("f")) for k in x], dtype=np.int64), np.array(list(x.values()), dtype=float)

    def decision(self, x: dict) -> float:
        columns, values = self.vec(x)
        return float(self.w[columns] @ values)

    def learn(self, x: dict, y: bool, weight: float) -> None:
        sign = 1.0 if y else -1.0
        margin = self.decision(x)
        columns, values = self.vec(x)
        keep = values != 0
        columns, values = columns[keep], values[keep]
        if sign * margin >= 1.0 - 1e-9 or weight == 0.0 or not len(columns):
            return
        values = np.where(np.abs(values) < 2.0**-63, np.copysign(2.0**-63, values), values)
        sizes, scales = np.abs(values), self.scales[columns]
        grown = (sizes > scales) & (scales > 0)
        self.w[columns[grown]] *= scales[grown] / sizes[grown]
        self.scales[columns] = np.maximum(scales, sizes)
        self.g2[columns] += weight * values * values
        rates = 1.0 / (np.sqrt(self.g2[columns]) * self.scales[columns])
        step = min(weight * self.rate, (1.0 - sign * margin) / float(values * values @ rates))
        self.w[columns] += sign * step * rates * values


def _weights(model: NormalizedHinge) -> np.ndarray:
    """The model's w as a dense vector."""
    w = np.zeros(N)
    for key, value in model.weights.items():
        w[int(str(key).lstrip("f"))] = value
    return w


# -- the update ----------------------------------------------------------------------------------

EXAMPLES = st.tuples(
    st.dictionaries(
        st.integers(0, N - 1), st.floats(-1e3, 1e3, allow_nan=False) | st.sampled_from([0.0, 1e-30]), max_size=6
    ),
    st.booleans(),
    st.sampled_from([1.0, 1.0, 0.5, 2.5, 0.0]),
)


@settings(max_examples=80, deadline=None)
@given(stream=st.lists(EXAMPLES, max_size=60), rate=st.sampled_from([0.01, 0.5, 10.0]), dense=st.booleans())
def test_the_steps_follow_a_dense_reference(stream, rate, dense):
    """Step by step, to 1e-9 of the margins' size: zeros, values below 2⁻⁶³ and sample weights (0 included)."""
    model, reference = NormalizedHinge(rate, N if dense else None), DenseReference(rate)
    for x, y, weight in stream:
        x = {_key(c, dense): value for c, value in x.items()}
        size = 1.0 + float(np.abs(reference.w[DenseReference.vec(x)[0]] * DenseReference.vec(x)[1]).sum())
        assert abs(model.decision_function_one(x) - reference.decision(x)) <= 1e-9 * size
        model.learn_one(x, y, weight)
        reference.learn(x, y, weight)
        assert np.abs(_weights(model) - reference.w).max(initial=0.0) <= 1e-9 * np.abs(reference.w).max(initial=1.0)
    assert model.t == len(stream)


@settings(max_examples=60, deadline=None)
@given(
    stream=st.lists(EXAMPLES, max_size=40),
    exponents=st.lists(st.integers(-20, 20), min_size=N, max_size=N),
)
def test_the_margins_do_not_depend_on_the_scale_of_a_feature(stream, exponents):
    """Every feature j multiplied by 2^k_j throughout the stream: the same margins, bit for bit (the weights take
    2^−k_j), since each feature's rate is in units of its own largest value."""
    plain, scaled = NormalizedHinge(0.5, N), NormalizedHinge(0.5, N)
    for x, y, weight in stream:
        x = {c: value for c, value in x.items() if value == 0.0 or abs(value) >= 1e-3}  # (none clamped)
        bigger = {c: math.ldexp(value, exponents[c]) for c, value in x.items()}
        assert scaled.decision_function_one(bigger) == plain.decision_function_one(x)
        plain.learn_one(x, y, weight)
        scaled.learn_one(bigger, y, weight)
    for c, value in plain.weights.items():
        assert scaled.weights[c] == math.ldexp(value, -exponents[c])


def test_the_first_steps_by_hand():
    model = NormalizedHinge(learning_rate=1.0)
    model.learn_one({"a": 1.0, "b": -2.0}, True)  # N = (1, 2), G = (1, 4), r = (1, 1/4), Σx²r = 2, s = 1/2
    assert model.weights == {"a": 0.5, "b": -0.25} and model.t == 1
    assert model.decision_function_one({"a": 1.0, "b": -2.0}) == 1.0  # the step stops at the margin
    model.learn_one({"a": 1.0, "b": -2.0}, True)  # y·f = 1: no step
    assert model.weights == {"a": 0.5, "b": -0.25} and model.t == 2
    model.learn_one({"b": -4.0}, False, 2.0)  # y·f = −1; N_b 2 → 4 halves w_b; G_b = 4 + 2·16, r_b = 1/24
    assert model.weights == {"a": 0.5, "b": -0.125 + 2.0 * 4.0 / 24.0}  # s = min(2·η, 2/(16/24)) = 2
    assert model.predict_proba_one({"a": 2.0})[True] == model.probability(1.0) == 1.0 / (1.0 + math.exp(-1.0))


# -- the compiled loop ---------------------------------------------------------------------------

LAYOUTS = ["dicts", "arrays through columns", "arrays in place"]


def _rows(stream: list[tuple[dict, bool, float]], layout: str) -> tuple[Rows, np.ndarray, np.ndarray]:
    """(rows, signs, sample weights): columns numbered locally, or the int features themselves (keys a range)."""
    return weighted_rows(stream, N if layout == "arrays in place" else None)


@pytest.mark.parametrize("splits", [(), (1,), (120,), (7, 50, 243)], ids=str)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_learn_rows_is_learn_one_bit_for_bit(layout, splits):
    """Decisions, probabilities and the model (its dicts' order included), in batches split anywhere, the last
    taken from its ``start`` in the whole batch."""
    stream = _stream(300, 7, dense=layout != "dicts")
    stream[5] = ({**stream[5][0], _key(2, layout != "dicts"): 1e-25}, True, 1.0)  # a value counted as 2⁻⁶³
    n_features = None if layout == "dicts" else N
    one, batched = NormalizedHinge(0.5, n_features), NormalizedHinge(0.5, n_features)
    expected, expected_probas = [], []
    for x, y, weight in stream:
        expected.append(one.decision_function_one(x))
        expected_probas.append(one.predict_proba_one(x)[True])
        one.learn_one(x, y, weight)
    decisions, probas = learn_split(batched, *_rows(stream, layout), splits)
    assert decisions == expected and probas == expected_probas
    assert model_digest(batched) == model_digest(one) and batched.t == one.t == 300
    if layout == "dicts":
        for store in ("_w", "_g2", "_scales"):  # the same keys, first stepped on in the same order
            assert list(getattr(batched, store)) == list(getattr(one, store)) == list(one._w)


def test_learn_rows_without_the_compiled_loop_learns_the_same(monkeypatch):
    stream = _stream(200, 3)
    rows, signs, weights = _rows(stream, "arrays in place")
    results = []
    for fast in (normalized_hinge._loops, None):
        monkeypatch.setattr(normalized_hinge, "_loops", fast)
        model, decisions, probas = NormalizedHinge(n_features=N), np.empty(200), np.empty(200)
        assert model.learn_rows(LearnBatch(rows, signs, weights, decisions, probas)) == (200, None)
        results.append((model_digest(model), decisions.tolist(), probas.tolist()))
    assert results[0] == results[1]


# -- refusals ------------------------------------------------------------------------------------


@pytest.mark.parametrize("dense", [False, True], ids=["dicts", "arrays"])
def test_a_refused_example_leaves_the_model_untouched(dense):
    model = NormalizedHinge(n_features=N if dense else None)
    for x, y, weight in _stream(20, 1, dense):
        model.learn_one(x, y, weight)
    digest = model_digest(model)
    key = _key(1, dense)
    bad = [
        ({key: math.nan}, "finite"),
        ({key: math.inf, _key(2, dense): 1.0}, "finite"),
        ({key: "x"}, "finite number"),
        ({key: 1e200}, "too large"),  # a finite margin, a square that overflows
    ]
    if dense:
        bad += [({"word": 1.0}, "int column"), ({N: 1.0}, "int column"), ({-1: 1.0}, "int column")]
    for x, message in bad:
        with pytest.raises(ValueError, match=message):  # labelled against the prediction: a step
            model.learn_one(x, message != "too large" or model.decision_function_one(x) <= 0)
        assert model_digest(model) == digest
    with pytest.raises(ValueError, match="sample weight"):
        model.learn_one({key: 1.0}, True, -1.0)
    with pytest.raises(ValueError, match="unknown label"):
        model.learn_one({key: 1.0}, 2)
    assert model_digest(model) == digest and model.t == 20


@pytest.mark.parametrize("value", [math.nan, 1e200], ids=["nan", "too large"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_refused_row_stops_the_batch_unlearned(layout, value):
    """The rows before it are learned (compiled), it is not: the model is the one that learned them one at a time."""
    dense = layout != "dicts"
    stream = _stream(10, 2, dense)
    x, y, _ = stream[6]
    stream[6] = ({**x, _key(9, dense): value}, y, 1.0)
    model, reference = (
        NormalizedHinge(n_features=N if dense else None),
        NormalizedHinge(n_features=N if dense else None),
    )
    for x, y, weight in stream[:6]:
        reference.learn_one(x, y, weight)
    if value == 1e200:  # labelled against the prediction: a step
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
    model = NormalizedHinge(0.5, n_features)
    stream = _stream(200, 9, dense=n_features is not None)
    for x, y, weight in stream[:100]:
        model.learn_one(x, y, weight)
    save(model, tmp_path / "model.pgs")
    loaded = load(tmp_path / "model.pgs", NormalizedHinge)
    assert model_digest(loaded) == model_digest(model) and loaded.n_features == n_features and loaded.t == 100
    for x, y, weight in stream[100:]:
        assert loaded.decision_function_one(x) == model.decision_function_one(x)
        model.learn_one(x, y, weight)
        loaded.learn_one(x, y, weight)
    assert model_digest(loaded) == model_digest(model)


def _set(name: str, value: object):
    return lambda model: setattr(model, name, value)


def _set_entry(name: str, key: object, value: float):
    return lambda model: getattr(model, name).__setitem__(key, value)


def _unstepped_scale(model: NormalizedHinge) -> None:
    """A scale for a column never stepped on (G_j = 0)."""
    model._scales[int(np.flatnonzero(model._g2 == 0.0)[0])] = 1.0


FORGED = {
    "negative count": (_set("_t", -1), N, r"NormalizedHinge\._t: expected an integer"),
    "settings refused": (_set("learning_rate", 0.0), N, r"NormalizedHinge: settings refused: learning_rate=0\.0"),
    "arrays of other columns": (_set("_g2", np.zeros(N + 1)), N, r"NormalizedHinge\._g2"),
    "a negative sum of squares": (_set_entry("_g2", 1, -1.0), N, r"NormalizedHinge\._g2"),
    "a weight that is no number": (_set_entry("_w", 1, math.nan), N, r"NormalizedHinge\._w"),
    "a scale without its sum": (_unstepped_scale, N, r"expected both 0 or both > 0"),
    "dicts of other features": (_set_entry("_g2", "other", 1.0), None, r"expected the same features"),
}


@pytest.mark.parametrize("case", FORGED, ids=list(FORGED))
def test_a_state_no_steps_leave_is_refused_on_load(tmp_path, case):
    change, n_features, message = FORGED[case]
    model = NormalizedHinge(n_features=n_features)
    for x, y, weight in _stream(20, 5, dense=n_features is not None):
        model.learn_one(x, y, weight)
    change(model)
    save(model, tmp_path / "forged.pgs")
    with pytest.raises(CheckpointError, match=message):
        load(tmp_path / "forged.pgs")


# -- settings ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "params",
    [
        {"learning_rate": 0.0},
        {"learning_rate": -1.0},
        {"learning_rate": math.inf},
        {"learning_rate": math.nan},
        {"learning_rate": True},
        {"learning_rate": "0.5"},
        {"n_features": 0},
        {"n_features": 2.5},
    ],
)
def test_bad_settings_are_refused(params):
    with pytest.raises(ValueError, match=next(iter(params))):
        NormalizedHinge(**params)


def test_settings_are_kept_as_numbers_of_their_kind():
    model = NormalizedHinge(learning_rate=1, n_features=np.int32(8))
    assert (model.learning_rate, model.n_features) == (1.0, 8)
    assert type(model.learning_rate) is float and type(model.n_features) is int
