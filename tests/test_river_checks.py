"""river's own estimator checks, for every learner variant and inside pipelines."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from river import checks, compose, feature_extraction, multiclass, preprocessing

from pegasos_stream import (
    AdaGradLogistic,
    NormalizedHinge,
    PegasosClassifier,
    PegasosCommittee,
    PegasosGrid,
    PegasosLogistic,
    PegasosMixture,
    PegasosMulticlass,
)
from pegasos_stream.features import DictHasher

SAMPLE = Path(__file__).resolve().parents[1] / "pegasos_stream" / "data" / "spam-sample.jsonl.gz"


def _variants():
    for params in PegasosClassifier._unit_test_params():
        yield PegasosClassifier(**params)
    for params in PegasosMulticlass._unit_test_params():
        yield PegasosMulticlass(**params)
    for params in PegasosGrid._unit_test_params():
        yield PegasosGrid(**params)
    for params in PegasosCommittee._unit_test_params():
        yield PegasosCommittee(**params)
    for params in PegasosMixture._unit_test_params():
        yield PegasosMixture(**params)
    for params in AdaGradLogistic._unit_test_params():
        yield AdaGradLogistic(**params)
    for params in PegasosLogistic._unit_test_params():
        yield PegasosLogistic(**params)
    for params in NormalizedHinge._unit_test_params():
        yield NormalizedHinge(**params)
    yield preprocessing.StandardScaler() | PegasosClassifier()
    yield DictHasher(10) | PegasosCommittee(n_features=2**10)  # weights in arrays need int columns
    yield DictHasher(10) | AdaGradLogistic(n_features=2**10)
    yield DictHasher(10) | PegasosLogistic(n_features=2**10)
    yield DictHasher(10) | NormalizedHinge(n_features=2**10)
    yield DictHasher(10) | PegasosMixture(n_features=2**10)
    yield multiclass.OneVsRestClassifier(PegasosClassifier())


def _params() -> list:
    """Each variant, the first of each class and the first pipeline in the fast tier, the others marked slow."""
    seen: set[str] = set()
    params = []
    for model in _variants():
        kind = type(model).__name__
        first = kind not in seen
        seen.add(kind)
        marks = () if first else (pytest.mark.slow,)
        params.append(pytest.param(model, marks=marks, id=repr(model).replace("\n", " ")))
    return params


@pytest.mark.parametrize("model", _params())
def test_check_estimator(model):
    checks.check_estimator(model)


def _as_words(x: dict) -> str:
    """Phishing's numeric features as a sentence of feature=value words."""
    return " ".join(f"{name}_{value}" for name, value in sorted(x.items()))


def test_check_estimator_bag_of_words_pipeline():
    """river's checks feed dicts (Phishing), so the text comes from a transformer in front.

    The mini-batch checks are left out: ``FuncTransformer.transform_many`` hands BagOfWords a
    frame, not text, so this chain has no mini-batch path (river's own LogisticRegression fails
    them identically in this pipeline).
    """
    model = compose.FuncTransformer(_as_words) | feature_extraction.BagOfWords() | PegasosClassifier()
    ran = 0
    for check in checks.yield_checks(model):
        if "_many_" not in check.__name__:
            check(model.clone())
            ran += 1
    assert ran >= 30


def _spam_sample(n: int = 120):
    with gzip.open(SAMPLE, "rt", encoding="utf-8") as lines:
        for line, _ in zip(lines, range(n)):
            event = json.loads(line)
            yield event["text"], event["label"] == "spam"


@pytest.mark.slow
def test_river_checks_on_raw_text():
    """river's dataset-driven checks on a text stream, through BagOfWords."""
    model = feature_extraction.BagOfWords() | PegasosClassifier()
    ran = 0
    for check in checks.yield_checks(model):
        dataset = getattr(check, "keywords", {}).get("dataset")
        if dataset is None or check.__name__ in model._unit_test_skips():
            continue
        if any(part in check.__name__ for part in ("features", "aliasing", "_many_")):
            continue  # those edit or tabulate the keys of dict input, which raw text does not have
        check.func(model.clone(), dataset=list(_spam_sample()))
        ran += 1
    assert ran >= 10


def test_bag_of_words_mini_batches():
    """BagOfWords.transform_many's sparse frame feeds learn_many and predict_many."""
    pd = pytest.importorskip("pandas")
    texts, labels = zip(*_spam_sample(60))
    model = feature_extraction.BagOfWords() | PegasosClassifier()
    model.learn_many(pd.Series(texts[:40]), pd.Series(labels[:40]))
    learner = model["PegasosClassifier"]
    assert learner.t == 1 and learner.weights
    held_out = pd.Series(texts[40:])
    assert model.predict_many(held_out).tolist() == [model.predict_one(t) for t in held_out]
    probas = model.predict_proba_many(held_out)
    for i, text in enumerate(held_out):
        assert probas.iloc[i][True] == pytest.approx(model.predict_proba_one(text)[True], rel=1e-12)
