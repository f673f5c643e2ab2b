"""Explanations: each feature's part of a score, exact for the linear learners and first order for the mixture."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pegasos_stream import cli
from pegasos_stream.cli.assemble import build_features
from pegasos_stream.cli.config import config_file, load_config
from pegasos_stream.learners import (
    AdaGradLogistic,
    KernelPegasosClassifier,
    PegasosClassifier,
    PegasosCommittee,
    PegasosLogistic,
    PegasosMixture,
    PegasosMulticlass,
    PersonalPegasos,
)
from pegasos_stream.learners.attribution import contributions, top_contributions

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "pegasos_stream" / "data" / "spam-sample.jsonl.gz"
DIM = 16


def _stream(seed: int, n: int) -> list[tuple[dict, bool]]:
    rng = np.random.default_rng(seed)
    direction = rng.normal(size=DIM)
    events = []
    for _ in range(n):
        columns = rng.choice(DIM, size=rng.integers(1, 8), replace=False)
        x = {int(c): float(rng.normal()) for c in columns}
        events.append((x, bool(sum(direction[c] * v for c, v in x.items()) + 0.3 * rng.normal() > 0)))
    return events


LINEAR = {
    "pegasos": lambda: PegasosClassifier(lambda_=0.01),
    "pegasos with bias, averaged": lambda: PegasosClassifier(lambda_=0.01, fit_intercept=True, average=True),
    "pegasos in arrays": lambda: PegasosClassifier(lambda_=0.01, n_features=DIM),
    "adagrad logistic": lambda: AdaGradLogistic(),
    "pegasos logistic": lambda: PegasosLogistic(lambda_=0.01, t0=10),
    "committee": lambda: PegasosCommittee(n_features=DIM),
}


@pytest.mark.parametrize("make", LINEAR.values(), ids=LINEAR.keys())
@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 80))
def test_a_linear_learners_parts_add_up_to_its_decision(make, seed, n):
    model = make()
    events = _stream(seed, n + 1)
    for x, y in events[:-1]:
        model.learn_one(x, y)
    x = events[-1][0]
    parts = contributions(model, x)
    assert list(parts) == list(x)
    assert model.decision_function_one({}) + sum(parts.values()) == pytest.approx(
        model.decision_function_one(x), abs=1e-9
    )


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 120))
def test_a_mixtures_parts_are_its_decisions_derivative_along_x(seed, n):
    """Σ_j part_j = d/ds D(s·x) at s = 1 (the members' margins are linear in x): central differences agree."""
    model = PegasosMixture(lambdas=[0.01], logistics=[[0.5, 1e-6], [5.0, 1.0]], n_features=DIM)
    events = _stream(seed, n + 1)
    for x, y in events[:-1]:
        model.learn_one(x, y)
    x = events[-1][0]
    h = 1e-5

    def along(s: float) -> float:
        return model.decision_function_one({j: s * v for j, v in x.items()})

    derivative = (along(1 + h) - along(1 - h)) / (2 * h)
    assert sum(contributions(model, x).values()) == pytest.approx(derivative, rel=1e-4, abs=1e-6)


def test_a_personal_learners_parts_add_the_users_offset():
    model = PersonalPegasos(PegasosClassifier(lambda_=0.01), lambda_=0.05, t0=3)
    for i, (x, y) in enumerate(_stream(7, 200)):
        model.learn_one(x, y, user="ann" if i % 2 else "bob")
    x = _stream(8, 1)[0][0]
    shared, ann = contributions(model, x), contributions(model, x, "ann")
    assert shared == contributions(model.shared, x)
    assert sum(ann.values()) - sum(shared.values()) == pytest.approx(model.personal_margin(x, "ann"), abs=1e-12)
    assert contributions(model.shared, x, "ann") == shared  # a learner without users ignores one


@pytest.mark.parametrize("model", [KernelPegasosClassifier(), PegasosMulticlass()], ids=["kernel", "multiclass"])
def test_a_learner_without_parts_is_refused(model):
    with pytest.raises(ValueError, match="no explanation"):
        contributions(model, {0: 1.0})


def test_the_top_parts_are_the_largest_by_magnitude_earlier_first_among_equals():
    assert top_contributions({"a": 0.1, "b": -0.5, "c": 0.5, "d": 0.0}, 3) == [("b", -0.5), ("c", 0.5), ("a", 0.1)]


@pytest.mark.parametrize("reader", ["bytes", "email"])
def test_every_feature_of_a_message_has_its_name(reader):
    features = build_features(load_config(config_file("spam"), [f"features.reader={reader}"]))
    with gzip.open(SAMPLE, "rt", encoding="utf-8") as lines:
        texts = [json.loads(line)["text"] for line, _ in zip(lines, range(40))]
    for text in texts:
        names = features.feature_names(text)
        assert list(names) == list(features.transform_one(text))
        assert all(name[:2] in ("c:", "w:", "s:") for name in names.values())


@pytest.fixture(scope="module")
def spam_checkpoint(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("explain") / "ck"
    assert cli.main(["run", "--config", "spam", "--set", f"checkpoint.dir={directory}", "--output", "/dev/null"]) == 0
    return directory


def test_predict_explains_a_message_by_its_features(spam_checkpoint, tmp_path, capsys):
    message = tmp_path / "m.eml"
    message.write_bytes(b"Subject: FREE money!!!\n\nClick now to win $1000 cash, limited offer\n")
    capsys.readouterr()
    assert cli.main(["predict", "--model", str(spam_checkpoint), "--explain", "5", str(message)]) == 0
    prediction = json.loads(capsys.readouterr().out)
    parts = [part for _, part in prediction["explain"]]
    assert len(parts) == 5 and parts == sorted(parts, key=lambda part: -abs(part))
    assert all(name[:2] in ("c:", "w:", "s:") and math.isfinite(part) for name, part in prediction["explain"])
    assert cli.main(["predict", "--model", str(spam_checkpoint), str(message)]) == 0
    assert "explain" not in json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("k", ["0", "1001", "ten"])
def test_a_number_of_features_out_of_range_is_refused(spam_checkpoint, k, capsys):
    with pytest.raises(SystemExit) as stopped:
        cli.main(["predict", "--model", str(spam_checkpoint), "--explain", k, "-"])
    assert stopped.value.code == 2 and "from 1 to 1000" in capsys.readouterr().err


class _Provider:
    origin, last_refusal = "a test", None

    def __init__(self, served) -> None:
        self.current = served

    def refresh(self) -> bool:
        return False


def test_spamds_report_and_rspamds_checkv2_name_the_features_that_weigh_most(spam_checkpoint):
    werkzeug_test = pytest.importorskip("werkzeug.test")
    from pegasos_stream.cli.serve import served_model
    from pegasos_stream.persist.checkpoint import latest_valid
    from pegasos_stream.run.predictions import EXPLAINED
    from pegasos_stream.serve.http_api import PredictionApp
    from pegasos_stream.serve.serving import Serving
    from pegasos_stream.serve.spamd import FEATURE_RULE, SpamdRequest, SpamdService

    found = latest_valid(spam_checkpoint)
    assert found is not None
    serving = Serving(_Provider(served_model(found[1]["model"], found[2]["config"], 1, None, {})))
    service = SpamdService(serving)
    message = b"Subject: FREE money!!!\n\nClick now to win $1000 cash, limited offer\n"
    report = service.answer(SpamdRequest("REPORT", "SPAMC/1.5", {}, message)).decode()
    explained = service.verdict(message, explain=EXPLAINED).explanation
    lines = [line for line in report.splitlines() if FEATURE_RULE in line]
    assert len(lines) == len(explained) == EXPLAINED
    assert all(f"({part:+.3f})" in line for line, (_, part) in zip(lines, explained, strict=True))
    assert service.verdict(message).explanation == ()  # CHECK, SYMBOLS, PROCESS: no explanation computed
    answer = werkzeug_test.Client(PredictionApp(serving)).post("/checkv2", data=message).get_json()
    options = answer["symbols"]["PEGASOS_STREAM"]["options"]
    assert options == [f"{name} ({part:+.3f})" for name, part in explained]
