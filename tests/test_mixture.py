"""PegasosMixture: its members, its regret guarantee, the compiled rows against learn_one, persistence."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pegasos_stream import (
    AdaGradLogistic,
    NormalizedHinge,
    PegasosClassifier,
    PegasosLogistic,
    PegasosMixture,
    load,
    save,
)
from pegasos_stream.cli.assemble import build_runner, build_source
from pegasos_stream.cli.config import load_config, shipped_configs
from pegasos_stream.learners import hedge
from pegasos_stream.learners.batch import LearnBatch
from pegasos_stream.learners.calibration import OnlinePlatt
from pegasos_stream.learners.rows import Rows
from pegasos_stream.persist.checkpoint import model_digest
from pegasos_stream.persist.codec import decode, encode

N_COLUMNS = 64
PARAMS = {
    "lambdas": (1e-3, 1e-2, 1e-1),
    "lambda_t0": 0.5,
    "logistics": ((0.3, 1e-6), (2.0, 1.0)),
    "pegasos_logistics": ((1e-2, 100),),
    "normalized_hinges": (0.5,),
}


def _stream(n: int, seed: int, flip: float = 0.1) -> list[tuple[dict, bool]]:
    """Sparse examples of a linear rule, ``flip`` of the labels flipped."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        x = {c: rng.uniform(-2, 2) for c in rng.sample(range(N_COLUMNS), rng.randrange(1, 8))}
        y = (x.get(0, 0.0) + x.get(3, 0.0) - x.get(5, 0.0) > 0) != (rng.random() < flip)
        out.append((x, y))
    return out


def _rows(stream: list[tuple[dict, bool]]) -> tuple[Rows, np.ndarray]:
    return Rows.from_dicts([x for x, _ in stream]), np.array([1.0 if y else -1.0 for _, y in stream])


class _PlainMixture:
    """The mixture restated: each member's margin through its own Platt scaling, mixed by weights that are
    multiplied by each member's probability of the label, normalised, then shared: π ← (1 − α)π + α/M."""

    def __init__(self, lambdas, lambda_t0, logistics, pegasos_logistics, normalized_hinges, share):
        self.svms = [PegasosClassifier(lambda_=lam, t0=round(lambda_t0 / lam)) for lam in lambdas]
        self.logistics = [AdaGradLogistic(rate, None, epsilon) for rate, epsilon in logistics]
        self.others = [PegasosLogistic(lambda_, t0) for lambda_, t0 in pegasos_logistics]
        self.others += [NormalizedHinge(rate) for rate in normalized_hinges]
        members = len(lambdas) * (len(logistics) + 1) + len(logistics) + len(pegasos_logistics) + len(normalized_hinges)
        self.platts = [OnlinePlatt() for _ in range(members)]
        self.losses = [0.0] * members
        self.weights = [1.0 / members] * members
        self.share, self.t = share, 0

    def member_probas(self, x):
        logistic = [model.decision_function_one(x) for model in self.logistics]
        margins = []
        for svm in self.svms:
            margin = svm.decision_function_one(x)
            margins += [margin + other for other in logistic] + [margin]
        margins += logistic + [model.decision_function_one(x) for model in self.others]
        return [platt.proba(m) for platt, m in zip(self.platts, margins)], margins

    def proba(self, x):
        probas, _ = self.member_probas(x)
        return sum(w * p for w, p in zip(self.weights, probas))

    def learn(self, x, y):
        probas, margins = self.member_probas(x)
        likelihoods = [p if y else 1.0 - p for p in probas]
        for k, (platt, likelihood, m) in enumerate(zip(self.platts, likelihoods, margins)):
            self.losses[k] -= math.log(likelihood)
            platt.update(m, y)
        self.t += 1
        alpha = self.share / (self.t + 2 * self.share)
        total = sum(w * likelihood for w, likelihood in zip(self.weights, likelihoods))
        self.weights = [
            (1 - alpha) * w * likelihood / total + alpha / len(self.weights)
            for w, likelihood in zip(self.weights, likelihoods)
        ]
        for learner in (*self.svms, *self.logistics, *self.others):
            learner.learn_one(x, y)


@pytest.mark.parametrize("share", [0.0, 3.0])
def test_the_mixture_weights_its_members_by_their_log_loss_and_shares(share):
    mixture, plain = PegasosMixture(**PARAMS, share=share), _PlainMixture(**PARAMS, share=share)
    for x, y in _stream(300, 3):
        assert mixture.predict_proba_one(x)[True] == pytest.approx(plain.proba(x), rel=1e-9, abs=1e-12)
        mixture.learn_one(x, y)
        plain.learn(x, y)
    assert list(mixture.member_losses.values()) == pytest.approx(plain.losses, rel=1e-9)
    weights = mixture.member_weights
    assert list(weights.values()) == pytest.approx(plain.weights, rel=1e-9, abs=1e-300)
    assert sum(weights.values()) == pytest.approx(1.0) and list(weights) == [
        *("svm(0.001)+logistic(0.3)", "svm(0.001)+logistic(2)", "svm(0.001)"),
        *("svm(0.01)+logistic(0.3)", "svm(0.01)+logistic(2)", "svm(0.01)"),
        *("svm(0.1)+logistic(0.3)", "svm(0.1)+logistic(2)", "svm(0.1)"),
        *("logistic(0.3)", "logistic(2)", "pegasos_logistic(0.01)", "normalized_hinge(0.5)"),
    ]
    assert mixture.t == 300 and model_digest(mixture.svms[0]) == model_digest(plain.svms[1])
    assert model_digest(mixture.logistic_regressions[0]) == model_digest(plain.logistics[1])
    assert model_digest(mixture.logistic_svms[0]) == model_digest(plain.others[0])
    assert model_digest(mixture.hinges[0]) == model_digest(plain.others[1])


@settings(max_examples=40, deadline=None)
@given(
    st.integers(0, 10**6),
    st.integers(1, 400),
    st.floats(0.0, 0.5),
    st.sampled_from([(1e-4,), (1e-3, 1e-1), (1e-5, 1e-3, 1e-1)]),
    st.sampled_from([0.0, 0.5, 3.0, 8.0, 20.0]),
)
def test_the_mixture_never_loses_more_than_its_regret_bound_to_its_best_member(seed, n, flip, lambdas, share):
    mixture = PegasosMixture(lambdas=lambdas, lambda_t0=0.3, logistics=((0.7, 1e-6), (5.0, 1.0)), share=share)
    rows, signs = _rows(_stream(n, seed, flip))
    decisions, probas = np.empty(n), np.empty(n)
    assert mixture.learn_rows(LearnBatch(rows, signs, np.ones(n), decisions, probas)) == (n, None)
    mixed_loss = -np.log(np.where(signs > 0, probas, 1.0 - probas)).sum()
    losses = np.array(list(mixture.member_losses.values()))
    members = len(losses)
    assert mixture.regret_bound == pytest.approx(
        math.log(members) + sum(-math.log1p(-share / (s + 2 * share)) for s in range(1, n)), rel=1e-9, abs=1e-12
    )
    assert mixed_loss <= losses.min() + mixture.regret_bound + 1e-9 * n
    if share == 0.0:  # the telescoping identity behind the bound: the mixture's loss is −log of the mean of e^{−L_k}
        assert mixed_loss == pytest.approx(-np.log(np.mean(np.exp(losses.min() - losses))) + losses.min(), rel=1e-9)
    assert np.array_equal(decisions > 0, probas > 0.5)


@settings(max_examples=100, deadline=None)
@given(
    st.integers(1, 9),
    st.integers(0, 60),
    st.integers(0, 10**6),
    st.floats(0.0, 50.0),
    st.integers(0, 10**9),
    st.booleans(),
)
@example(members=2, n=1, seed=0, share=5e-324, learned=0, update=True)  # α/m underflows to 0: its log is −inf
def test_the_compiled_mixing_loop_is_bit_identical_to_its_python_reference(members, n, seed, share, learned, update):
    if hedge._loops is None:
        pytest.skip("the compiled module is not in use")
    rng = np.random.default_rng(seed)
    probas = np.clip(rng.uniform(-0.2, 1.2, (members, n)), 2.0**-53, 1 - 2.0**-53)
    log_p, log_q = np.log(probas), np.log(1.0 - probas)
    signs, weights = np.where(rng.random(n) < 0.5, 1.0, -1.0), rng.choice([0.0, 0.5, 1.0, 3.0], n)
    start = list(rng.normal(-math.log(members), 2.0, members))
    results = []
    for mix in (hedge.mix_rows, hedge.mix_rows_python):
        decisions, log_weights, losses = np.empty(n), list(start), [0.5] * members
        mix(log_p, log_q, decisions, log_weights, (signs, weights, losses, learned, share) if update else None)
        results.append((decisions.tobytes(), log_weights, losses))
    assert results[0] == results[1]


@pytest.mark.parametrize("n_features", [None, N_COLUMNS])
def test_the_mixture_rows_are_bit_identical_to_learn_one(n_features):
    stream = _stream(500, 11)
    one, batched = PegasosMixture(**PARAMS, n_features=n_features), PegasosMixture(**PARAMS, n_features=n_features)
    expected, expected_probas = [], []
    for x, y in stream:
        expected.append(one.decision_function_one(x))
        expected_probas.append(one.predict_proba_one(x)[True])
        one.learn_one(x, y)
    rows, signs = _rows(stream)
    decisions, probas = np.empty(len(stream)), np.empty(len(stream))
    for start, stop in ((0, 1), (1, 77), (77, 300), (300, 500)):
        part = Rows.from_dicts([x for x, _ in stream[start:stop]])
        learned = batched.learn_rows(
            LearnBatch(part, signs[start:stop], np.ones(stop - start), decisions[start:stop], probas[start:stop])
        )
        assert learned == (stop - start, None)
    assert decisions.tolist() == pytest.approx(expected, rel=1e-12) and probas.tolist() == pytest.approx(
        expected_probas, rel=1e-12
    )
    assert model_digest(batched) == model_digest(one) and batched.t == one.t == 500
    assert batched.member_losses == one.member_losses
    del rows


def test_a_refused_row_leaves_every_learner_untouched():
    mixture = PegasosMixture(**PARAMS)
    for x, y in _stream(30, 4):
        mixture.learn_one(x, y)
    digest = model_digest(mixture)
    for x in ({1: math.inf}, {1: math.nan}, {1: "1"}):
        with pytest.raises(ValueError):
            mixture.learn_one(x, True)
        assert model_digest(mixture) == digest
    stream = _stream(20, 5)
    stream[7] = ({1: math.inf}, True)
    rows, signs = _rows(stream)
    decisions, probas = np.empty(20), np.empty(20)
    stop, error = mixture.learn_rows(LearnBatch(rows, signs, np.ones(20), decisions, probas))
    assert stop == 7 and isinstance(error, ValueError) and mixture.t == 37 and math.isnan(decisions[7])


@pytest.mark.parametrize("n_features", [None, N_COLUMNS])
def test_a_saved_mixture_loads_bit_for_bit_and_learns_on_alike(tmp_path, n_features):
    mixture = PegasosMixture(**PARAMS, n_features=n_features)
    stream = _stream(200, 9)
    for x, y in stream[:100]:
        mixture.learn_one(x, y)
    save(mixture, tmp_path / "mixture.pgs")
    loaded = load(tmp_path / "mixture.pgs", PegasosMixture)
    assert model_digest(loaded) == model_digest(mixture) and loaded.member_losses == mixture.member_losses
    for x, y in stream[100:]:
        assert loaded.decision_function_one(x) == mixture.decision_function_one(x)
        mixture.learn_one(x, y)
        loaded.learn_one(x, y)
    assert model_digest(loaded) == model_digest(mixture)


@pytest.mark.parametrize(
    "params, message",
    [
        ({"lambdas": ()}, "lambdas"),
        ({"lambdas": (0.0,)}, "lambda"),
        ({"lambda_t0": 0}, "lambda_t0"),
        ({"lambdas": "1e-3"}, "lambdas"),
        ({"logistics": ()}, "logistics"),
        ({"logistics": ((0.7,),)}, "logistics"),
        ({"logistics": ((-1.0, 1e-6),)}, "learning_rate"),
        ({"share": -1.0}, "share"),
        ({"pegasos_logistics": "1e-5"}, "pegasos_logistics"),
        ({"pegasos_logistics": ((1e-5,),)}, "pegasos_logistics"),
        ({"pegasos_logistics": ((0.0, 10),)}, "lambda"),
        ({"normalized_hinges": 0.5}, "normalized_hinges"),
        ({"normalized_hinges": ("0.5",)}, "learning_rate"),
        ({"normalized_hinges": (0.0,)}, "learning_rate"),
        ({"share": math.nan}, "share"),
        ({"share": True}, "share"),
    ],
)
def test_bad_settings_are_refused(params, message):
    with pytest.raises(ValueError, match=message):
        PegasosMixture(**params)


def test_the_decision_and_the_probabilities_are_python_floats():
    mixture = PegasosMixture(**PARAMS)
    x, y = _stream(1, 2)[0]
    mixture.learn_one(x, y)
    assert type(mixture.decision_function_one(x)) is float
    assert {type(p) for p in mixture.predict_proba_one(x).values()} == {float}
    assert type(mixture.probability(0.5)) is float


@pytest.mark.parametrize("n_features", [None, 2**19])
def test_the_shipped_spam_configuration_runs_in_batches_as_one_at_a_time(n_features):
    digests, scores = set(), set()
    for batch_size in (0, 64, 4096):
        overrides = [f"run.batch_size={batch_size}", "output.type=none", f"model.n_features={json.dumps(n_features)}"]
        config = load_config(shipped_configs()["spam"], overrides)
        runner = build_runner(config)
        runner.run(build_source(config))
        assert isinstance(runner.model, PegasosMixture) and runner.model.t == 404 and runner.stats.rejected == 0
        digests.add(model_digest(runner.model))
        scores.add(runner.report.summary()["roc_auc"])
    assert len(digests) == 1 and len(scores) == 1


def test_a_mixture_saved_before_the_share_mixes_on_by_its_losses(tmp_path):
    plain = PegasosMixture(**{**PARAMS, "pegasos_logistics": (), "normalized_hinges": ()}, share=0.0)
    stream = _stream(120, 13)
    for x, y in stream[:60]:
        plain.learn_one(x, y)
    save(plain, tmp_path / "mixture.pgs")  # (registers the learners' classes with the codec)
    tree, arrays = encode(plain)
    for name in ("share", "_log_weights", "pegasos_logistics", "logistic_svms", "normalized_hinges", "hinges"):
        # (as saved before they existed)
        index = tree["attributes"]["keys"].index(name)
        del tree["attributes"]["keys"][index], tree["attributes"]["values"][index]
    old = decode(tree, arrays)
    assert old.share == 0.0 and old.member_weights == pytest.approx(plain.member_weights, rel=1e-12)
    for x, y in stream[60:]:
        assert old.decision_function_one(x) == pytest.approx(plain.decision_function_one(x), rel=1e-9, abs=1e-12)
        old.learn_one(x, y)
        plain.learn_one(x, y)
