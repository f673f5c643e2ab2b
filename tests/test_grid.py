"""PegasosGrid: its members, its choice and its compiled path against a plain restatement."""

from __future__ import annotations

import math
import random
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from pegasos_stream import PegasosClassifier, PegasosGrid, load, save
from pegasos_stream.cli.assemble import build_runner, build_source
from pegasos_stream.cli.config import ConfigError, load_config
from pegasos_stream.learners.batch import LearnBatch
from pegasos_stream.learners.calibration import OnlinePlatt
from pegasos_stream.learners.rows import Rows
from pegasos_stream.persist.checkpoint import model_digest

SPAM = Path(__file__).resolve().parents[1] / "configs" / "spam.yaml"


def _stream(n: int, seed: int) -> list[tuple[dict, bool]]:
    """Sparse examples whose best regularisation changes half way (the label rule flips)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        x = {f"f{rng.randrange(40)}": rng.uniform(-1, 1) for _ in range(rng.randrange(1, 6))}
        y = (sum(x.values()) > 0) != (i > n // 2)
        out.append((x, y))
    return out


class _Plain:
    """The grid restated: independent PegasosClassifiers, a list of discounted hinge losses, the
    first least one predicts, an OnlinePlatt on its margins."""

    def __init__(self, lambdas, discount, **params):
        self.members = [PegasosClassifier(lambda_=lam, **params) for lam in lambdas]
        self.losses = [0.0] * len(lambdas)
        self.discount = discount
        self.platt = OnlinePlatt()

    def decide(self, x):
        best = min(range(len(self.losses)), key=lambda k: (self.losses[k], k))
        return self.members[best].decision_function_one(x)

    def learn(self, x, y):
        decision = self.decide(x)
        sign = 1.0 if y else -1.0
        margins = [m.decision_function_one(x) for m in self.members]
        self.platt.update(decision, y)
        self.losses = [self.discount * loss + max(0.0, 1.0 - sign * f) for loss, f in zip(self.losses, margins)]
        for m in self.members:
            m.learn_one(x, y)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10**6), st.sampled_from([0.0, 0.9, 0.999]), st.sampled_from([None, "balanced"]))
def test_the_grid_predicts_with_its_least_recently_wrong_member(seed, discount, class_weight):
    lambdas = (1e-3, 1e-2, 1e-1)
    grid = PegasosGrid(lambdas, discount, class_weight=class_weight)
    plain = _Plain(lambdas, discount, class_weight=class_weight)
    for x, y in _stream(300, seed):
        assert grid.decision_function_one(x) == plain.decide(x)
        assert grid.predict_proba_one(x)[True] == plain.platt.proba(plain.decide(x))
        grid.learn_one(x, y)
        plain.learn(x, y)
    assert grid.t == 300
    assert [model_digest(m) for m in grid._members] == [model_digest(m) for m in plain.members]


def test_the_leader_changes_when_the_stream_does():
    grid = PegasosGrid((1e-3, 1e-1), discount=0.99)
    leaders = []
    for x, y in _stream(2000, 3):
        grid.learn_one(x, y)
        leaders.append(grid.leader.lambda_)
    assert len(set(leaders)) == 2


@pytest.mark.parametrize("start", [0, 5])
def test_learn_rows_is_learn_one_row_by_row_bit_for_bit(start):
    examples = _stream(400, 11)
    one, rows_model = PegasosGrid((1e-3, 1e-2, 1e-1), 0.95), PegasosGrid((1e-3, 1e-2, 1e-1), 0.95)
    expected_decisions, expected_probas = [], []
    for x, y in examples[start:]:
        decision = one.decision_function_one(x)
        expected_decisions.append(decision)
        expected_probas.append(one.probability(decision))
        one.learn_one(x, y)
    rows = Rows.from_dicts([x for x, _ in examples])
    signs = np.array([1.0 if y else -1.0 for _, y in examples])
    decisions, probas = np.full(len(examples), np.nan), np.full(len(examples), np.nan)
    assert rows_model.learn_rows(LearnBatch(rows, signs, np.ones(len(examples)), decisions, probas, start)) == (
        len(examples),
        None,
    )
    assert decisions[start:].tolist() == expected_decisions
    assert probas[start:].tolist() == expected_probas
    assert model_digest(rows_model) == model_digest(one)


def test_learn_rows_stops_at_a_refused_row_as_every_member_does():
    grid = PegasosGrid((1e-2, 1e-1))
    rows = Rows.from_dicts([{"a": 1.0}, {"a": 1e308, "b": 1e308}, {"a": -1.0}])
    signs, weights = np.array([1.0, 1.0, -1.0]), np.ones(3)
    decisions, probas = np.zeros(3), np.zeros(3)
    stop, error = grid.learn_rows(LearnBatch(rows, signs, weights, decisions, probas, 0))
    assert stop == 1 and isinstance(error, ValueError)
    assert grid.t == 1 and all(member.t == 1 for member in grid._members)


def test_a_saved_grid_loads_bit_for_bit_and_learns_on_alike(tmp_path):
    examples = _stream(600, 5)
    grid = PegasosGrid()
    for x, y in examples[:300]:
        grid.learn_one(x, y)
    save(grid, tmp_path / "grid.pgs")
    loaded = load(tmp_path / "grid.pgs", PegasosGrid)
    assert model_digest(loaded) == model_digest(grid) and loaded.lambdas == grid.lambdas
    for x, y in examples[300:]:
        assert loaded.decision_function_one(x) == grid.decision_function_one(x)
        grid.learn_one(x, y)
        loaded.learn_one(x, y)
    assert model_digest(loaded) == model_digest(grid)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"lambdas": ()}, "lambdas"),
        ({"lambdas": "0.1"}, "lambdas"),
        ({"lambdas": (0.1, 0.0)}, "lambda"),
        ({"discount": 1.0}, "discount"),
        ({"discount": -0.1}, "discount"),
        ({"discount": True}, "discount"),
        ({"horizon": -3}, "horizon"),
    ],
)
def test_bad_settings_are_refused(params, message):
    with pytest.raises(ValueError, match=message):
        PegasosGrid(**params)


def test_the_spam_configuration_runs_a_grid_in_batches_as_one_at_a_time(tmp_path):
    job = yaml.safe_load(SPAM.read_text(encoding="utf-8"))
    job["model"] = {"kind": "grid", "lambdas": [1e-4, 1e-3]}
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump(job), encoding="utf-8")
    digests = set()
    for batch_size in (0, 4096):
        config = load_config(path, [f"run.batch_size={batch_size}", "output.type=none"])
        runner = build_runner(config)
        runner.run(build_source(config))
        assert runner.model.t > 100 and math.isfinite(runner.report.summary()["roc_auc"])
        digests.add(model_digest(runner.model))
    assert len(digests) == 1
    with pytest.raises(ConfigError, match=r"model\.discount"):
        load_config(path, ["model.discount=2"])
