"""AdaGradLogistic and PegasosCommittee: a dense reference, the compiled loop, refusals, persistence, the runner."""

from __future__ import annotations

import math
import random
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from pegasos_stream import AdaGradLogistic, PegasosClassifier, PegasosCommittee, load, save
from pegasos_stream.cli.assemble import build_runner, build_source
from pegasos_stream.cli.config import ConfigError, load_config
from pegasos_stream.learners.batch import LearnBatch
from pegasos_stream.learners.calibration import OnlinePlatt
from pegasos_stream.learners.rows import Rows
from pegasos_stream.persist.checkpoint import model_digest

SPAM = Path(__file__).resolve().parents[1] / "configs" / "spam.yaml"
N_COLUMNS = 64


def _stream(n: int, seed: int, keys: str = "int") -> list[tuple[dict, bool]]:
    """Sparse examples with a noisy linear rule; int columns 0..N_COLUMNS - 1 or str names."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        columns = rng.sample(range(N_COLUMNS), rng.randrange(1, 8))
        x = {(c if keys == "int" else f"f{c}"): rng.uniform(-2, 2) for c in columns}
        y = sum(v * (1 if k in (0, 3, 5, "f0", "f3", "f5") else 0.1) for k, v in x.items()) + rng.gauss(0, 0.3) > 0
        out.append((x, y))
    return out


class DenseAdaGrad:
    """AdaGrad on the logistic loss, restated on numpy vectors: G = ε + Σ g², w -= η g / √G per coordinate."""

    def __init__(self, learning_rate: float, initial_accumulator: float, n: int = N_COLUMNS):
        self.rate = learning_rate
        self.w = np.zeros(n)
        self.g2 = np.full(n, initial_accumulator)

    @staticmethod
    def vec(x: dict) -> tuple[np.ndarray, np.ndarray]:
        keys = [int(str(k).lstrip("f")) for k in x]
        return np.array(keys, dtype=np.int64), np.array(list(x.values()))

    def decision(self, x: dict) -> float:
        keys, values = self.vec(x)
        return float(self.w[keys] @ values)

    def learn(self, x: dict, y: bool, weight: float = 1.0) -> None:
        keys, values = self.vec(x)
        s = 1.0 if y else -1.0
        g = weight * -s / (1.0 + math.exp(s * self.decision(x))) * values  # ∂/∂w of weight·log(1 + exp(-s⟨w, x⟩))
        self.g2[keys] += g * g
        self.w[keys] -= self.rate * g / np.sqrt(self.g2[keys])


# -- AdaGradLogistic ---------------------------------------------------------------------------


@pytest.mark.parametrize("dense", [False, True])
@pytest.mark.parametrize("seed", [0, 1])
def test_adagrad_follows_the_dense_reference_step_by_step(seed, dense):
    model = AdaGradLogistic(learning_rate=0.3, n_features=N_COLUMNS if dense else None, initial_accumulator=1e-3)
    reference = DenseAdaGrad(0.3, 1e-3)
    rng = random.Random(seed)
    for x, y in _stream(400, seed, "int" if dense else "str"):
        weight = rng.choice([1.0, 0.5, 2.0])
        assert model.decision_function_one(x) == pytest.approx(reference.decision(x), abs=1e-9)
        model.learn_one(x, y, weight)
        reference.learn(x, y, weight)
    learned = {int(str(k).lstrip("f")): v for k, v in model.weights.items()}
    assert learned == pytest.approx({j: reference.w[j] for j in learned}, abs=1e-9)
    assert set(learned) == set(np.flatnonzero(reference.g2 != 1e-3).tolist())
    assert model.t == 400


def test_adagrad_first_steps_by_hand():
    model = AdaGradLogistic(learning_rate=0.5, initial_accumulator=0.25)
    model.learn_one({"a": 1.0, "b": -2.0}, True)  # margin 0: coef = -1/2, g = (-1/2, 1)
    assert model._g2 == {"a": 0.25 + 0.25, "b": 0.25 + 1.0}
    assert model.weights == {"a": 0.5 * 0.5 / math.sqrt(0.5), "b": -0.5 * 1.0 / math.sqrt(1.25)}
    assert model.probability(0.0) == 0.5 and model.predict_proba_one({"a": 1.0})[True] > 0.5


def _rows_and_signs(stream: list[tuple[dict, bool]]) -> tuple[Rows, np.ndarray]:
    return Rows.from_dicts([x for x, _ in stream]), np.array([1.0 if y else -1.0 for _, y in stream])


def _rows_in_place(stream: list[tuple[dict, bool]]) -> tuple[Rows, np.ndarray]:
    """The rows with the int features themselves as columns (keys ``range(N_COLUMNS)``): the weights' own columns,
    as text rows of hashed columns are."""
    rows, signs = _rows_and_signs(stream)
    columns = np.array(rows.keys, dtype=np.int64)[rows.indices]
    return Rows(rows.indptr, columns, rows.data, range(N_COLUMNS), True), signs


@pytest.mark.parametrize("layout", ["dicts", "arrays through columns", "arrays in place"])
def test_adagrad_compiled_rows_are_bit_identical_to_learn_one(layout):
    """In place, the compiled loop steps two features at a time (SSE2) and the last of a row of odd length alone."""
    dense = layout != "dicts"
    stream = _stream(300, 7, "int" if dense else "str")
    assert {len(x) % 2 for x, _ in stream} == {0, 1}
    one = AdaGradLogistic(n_features=N_COLUMNS if dense else None)
    rows_model = AdaGradLogistic(n_features=N_COLUMNS if dense else None)
    expected = []
    for i, (x, y) in enumerate(stream):
        expected.append(one.decision_function_one(x))
        one.learn_one(x, y, 0.5 if i % 3 == 0 else 1.0)
    weights = np.array([0.5 if i % 3 == 0 else 1.0 for i in range(len(stream))])
    decisions, probas = np.empty(len(stream)), np.empty(len(stream))
    for part in (slice(0, 120), slice(120, 300)):  # two batches, the second over weights the first wrote
        rows, signs = (_rows_in_place if layout == "arrays in place" else _rows_and_signs)(stream[part])
        assert rows_model.learn_rows(LearnBatch(rows, signs, weights[part], decisions[part], probas[part])) == (
            len(rows),
            None,
        )
    assert decisions.tolist() == expected
    assert probas.tolist() == [one.probability(d) for d in expected]
    assert model_digest(rows_model) == model_digest(one) and rows_model.t == one.t == 300
    if not dense:
        assert list(rows_model._w) == list(one._w)  # the same keys, first learned in the same order


def test_adagrad_dict_and_array_weights_learn_alike():
    in_dicts, in_arrays = AdaGradLogistic(), AdaGradLogistic(n_features=N_COLUMNS)
    for x, y in [({}, True), *_stream(200, 3)]:  # an example without features learns nothing but counts
        assert in_dicts.decision_function_one(x) == in_arrays.decision_function_one(x)
        in_dicts.learn_one(x, y)
        in_arrays.learn_one(x, y)
    assert in_dicts.weights == in_arrays.weights


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.dictionaries(st.integers(0, 9), st.floats(-1e3, 1e3, allow_nan=False), min_size=1, max_size=5),
            st.booleans(),
        ),
        min_size=1,
        max_size=30,
    ),
    st.floats(1e-3, 10.0),
)
def test_adagrad_steps_are_bounded_by_the_learning_rate_and_accumulators_only_grow(stream, rate):
    model = AdaGradLogistic(learning_rate=rate)
    for x, y in stream:
        before_w, before_g2 = dict(model._w), dict(model._g2)
        model.learn_one(x, y)
        for key in x:
            assert abs(model._w[key] - before_w.get(key, 0.0)) <= rate * (1 + 1e-12)
            assert model._g2[key] >= before_g2.get(key, model.initial_accumulator)
        assert all(math.isfinite(v) for v in model._w.values())


@pytest.mark.parametrize("dense", [False, True])
def test_adagrad_refuses_what_it_cannot_learn_and_stays_unchanged(dense):
    model = AdaGradLogistic(n_features=N_COLUMNS if dense else None)
    for x, y in _stream(20, 1):
        model.learn_one(x, y)
    digest = model_digest(model)
    bad = [({1: math.nan}, "finite"), ({1: "x"}, "finite number"), ({1: 1e300, 2: 1e300}, "too large")]
    if dense:
        bad += [({"word": 1.0}, "int column"), ({N_COLUMNS: 1.0}, "int column"), ({-1: 1.0}, "int column")]
    for x, message in bad:
        with pytest.raises(ValueError, match=message):  # labelled against the prediction: |k| >= 1/2
            model.learn_one(x, message != "too large" or model.decision_function_one(x) <= 0)
        assert model_digest(model) == digest
    with pytest.raises(ValueError, match="too large"):  # a finite margin whose gradient overflows
        AdaGradLogistic().learn_one({1: 1e300}, True, 1e300)
    # in a batch: the rows before the refused one are learned, the rest are not
    stream = _stream(10, 2)
    stream[6] = (bad[-1 if dense else 0][0], True)  # a column out of range, or a NaN
    rows, signs = _rows_and_signs(stream)
    decisions, probas = np.empty(10), np.empty(10)
    stop, error = model.learn_rows(LearnBatch(rows, signs, np.ones(10), decisions, probas))
    assert stop == 6 and isinstance(error, ValueError) and model.t == 26


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"learning_rate": 0.0}, "learning_rate"),
        ({"learning_rate": math.inf}, "learning_rate"),
        ({"initial_accumulator": -1.0}, "initial_accumulator"),
        ({"n_features": 0}, "n_features"),
        ({"n_features": 2.5}, "n_features"),
        ({"n_features": True}, "n_features"),
    ],
)
def test_adagrad_bad_settings_are_refused(params, message):
    with pytest.raises(ValueError, match=message):
        AdaGradLogistic(**params)


# -- PegasosCommittee --------------------------------------------------------------------------


class _PlainCommittee:
    """The committee restated: an independent PegasosClassifier and AdaGradLogistic, margins added, an
    OnlinePlatt on the sums."""

    def __init__(self, **params):
        self.svm = PegasosClassifier(lambda_=params["lambda_"], t0=params["t0"], n_features=params.get("n_features"))
        self.logistic = AdaGradLogistic(params["learning_rate"], params.get("n_features"))
        self.platt = OnlinePlatt()

    def decide(self, x):
        return self.svm.decision_function_one(x) + self.logistic.decision_function_one(x)

    def learn(self, x, y):
        self.platt.update(self.decide(x), y)
        self.svm.learn_one(x, y)
        self.logistic.learn_one(x, y)


@pytest.mark.parametrize("n_features", [None, N_COLUMNS])
def test_the_committee_adds_its_members_margins(n_features):
    params = {"lambda_": 1e-2, "t0": 10, "learning_rate": 0.2, "n_features": n_features}
    committee, plain = PegasosCommittee(**params), _PlainCommittee(**params)
    for x, y in _stream(300, 5):
        assert committee.decision_function_one(x) == plain.decide(x)
        assert committee.predict_proba_one(x)[True] == plain.platt.proba(plain.decide(x))
        committee.learn_one(x, y)
        plain.learn(x, y)
    assert committee.t == 300
    assert model_digest(committee.svm) == model_digest(plain.svm)
    assert model_digest(committee.logistic) == model_digest(plain.logistic)


@pytest.mark.parametrize("odd", [{2: 1e200, 3: 1.0}, {"word": 1.0, 3: 1.0}], ids=["huge", "foreign"])
@pytest.mark.parametrize("n_features", [None, N_COLUMNS])
def test_the_committee_rows_are_bit_identical_to_learn_one(n_features, odd):
    stream = _stream(400, 11)
    stream[150] = (odd, True)  # a row the logistic regression might refuse (a huge value, or no column): learn_one
    one, rows_model = (
        PegasosCommittee(1e-2, 10, n_features=n_features),
        PegasosCommittee(1e-2, 10, n_features=n_features),
    )
    expected, expected_probas = [], []
    for x, y in stream:
        try:
            expected.append(one.decision_function_one(x))
            expected_probas.append(one.predict_proba_one(x)[True])
        except ValueError:  # no margin: the row is refused
            expected.append(math.nan)
        try:
            one.learn_one(x, y)
        except ValueError:
            break
    stopped_at = len(expected) - 1 if one.t < len(stream) else len(stream)
    rows, signs = _rows_and_signs(stream)
    decisions, probas = np.empty(len(stream)), np.empty(len(stream))
    stop, error = rows_model.learn_rows(LearnBatch(rows, signs, np.ones(len(stream)), decisions, probas))
    assert stop == stopped_at and (error is None) == (stop == len(stream))
    assert np.array_equal(decisions[: stop + (stop < len(stream))], expected, equal_nan=True)
    assert probas[:stop].tolist() == expected_probas[:stop]
    assert model_digest(rows_model) == model_digest(one) and rows_model.t == one.t


def test_a_refused_row_leaves_both_members_untouched():
    committee = PegasosCommittee(1e-2, 10)
    for x, y in _stream(30, 4):
        committee.learn_one(x, y)
    digest = model_digest(committee)
    for x in ({1: math.inf}, {1: 1e300, 2: 1e300}):
        with pytest.raises(ValueError):
            committee.learn_one(x, True)
        assert model_digest(committee) == digest
    with pytest.raises(ValueError, match="too large"):  # the logistic regression's refusal, before the SVM learns
        committee.learn_one({1: 1e300}, True, 1e300)
    assert model_digest(committee) == digest and committee.t == 30


@pytest.mark.parametrize("n_features", [None, N_COLUMNS])
def test_a_saved_committee_loads_bit_for_bit_and_learns_on_alike(tmp_path, n_features):
    committee = PegasosCommittee(1e-2, 10, n_features=n_features)
    stream = _stream(200, 9)
    for x, y in stream[:100]:
        committee.learn_one(x, y)
    save(committee, tmp_path / "committee.pgs")
    loaded = load(tmp_path / "committee.pgs", PegasosCommittee)
    assert model_digest(loaded) == model_digest(committee) and loaded.n_features == n_features
    for x, y in stream[100:]:
        assert loaded.decision_function_one(x) == committee.decision_function_one(x)
        committee.learn_one(x, y)
        loaded.learn_one(x, y)
    assert model_digest(loaded) == model_digest(committee)


#: The committee of the spam configuration's first λ (the configuration mixes it with more).
COMMITTEE = {"kind": "committee", "lambda_": 1e-5, "t0": 30000, "learning_rate": 0.7, "initial_accumulator": 1e-6}


def _spam_job(tmp_path: Path, **model) -> Path:
    """The spam configuration with this committee for its model."""
    job = yaml.safe_load(SPAM.read_text(encoding="utf-8"))
    job["model"] = {**COMMITTEE, "n_features": job["model"]["n_features"], **model}
    path = tmp_path / "committee.yaml"
    path.write_text(yaml.safe_dump(job), encoding="utf-8")
    return path


@pytest.mark.parametrize("n_features", [None, 2**19])
def test_the_spam_configuration_runs_in_batches_as_one_at_a_time(tmp_path, n_features):
    path = _spam_job(tmp_path, n_features=n_features)
    digests, scores = set(), set()
    for batch_size in (0, 64, 4096):
        config = load_config(path, [f"run.batch_size={batch_size}", "output.type=none"])
        runner = build_runner(config)
        runner.run(build_source(config))
        assert isinstance(runner.model, PegasosCommittee) and runner.model.t == 404
        digests.add(model_digest(runner.model))
        scores.add(runner.report.summary()["roc_auc"])
    assert len(digests) == 1 and len(scores) == 1


def test_batches_bounded_by_bytes_stay_small_and_learn_the_same_model(tmp_path):
    path = _spam_job(tmp_path)
    asked: list[int] = []
    digests = set()
    for batch_bytes in (20_000, 1 << 22):
        config = load_config(path, [f"run.batch_bytes={batch_bytes}", "output.type=none"])
        runner, source = build_runner(config), build_source(config)
        read = source.read
        source.read = lambda n, read=read, small=batch_bytes < 1 << 22: (asked.append(n) if small else None) or read(n)
        runner.run(source)
        digests.add(model_digest(runner.model))
    # the sample's messages average several KB: after the first batch (64 records), a handful at a time
    assert asked[0] == 64 and 1 <= max(asked[1:]) <= 20 and len(asked) > 404 // 20
    assert len(digests) == 1


def test_n_features_must_cover_the_hashed_columns(tmp_path):
    path = _spam_job(tmp_path)
    with pytest.raises(ConfigError, match=r"model\.n_features: 1024 weight columns .*hash_bits: 19"):
        load_config(path, ["model.n_features=1024"])
    with pytest.raises(ConfigError, match=r"model\.n_features"):
        load_config(path, ["features.hash_bits=null"])
    with pytest.raises(ConfigError, match=r"model\.learning_rate"):
        load_config(path, ["model.learning_rate=-1"])
