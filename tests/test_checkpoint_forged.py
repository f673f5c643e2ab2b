"""Checkpoints are data: a forged or damaged state that gets past the checksum is refused when it is loaded.

1. Each class a learner's state is made of checks its own attributes (``_check_state``, called by the codec):
   a checkpoint re-hashed with one attribute off (a setting the constructor refuses, a count out of range, a
   value of the wrong type, a missing or unknown attribute, an array of the wrong shape or dtype, a value that
   is not finite, parts that do not fit together) is a CheckpointError naming the class and the attribute, for
   every learner kind.
2. Property: a random change to a valid state is refused with a CheckpointError, or loads to a model that
   predicts, learns and is summarised raising nothing but a ValueError (a refused example).
3. The commands on the forged checkpoints of issue 30 (item 13): ``inspect`` and ``predict`` exit 2 with one
   line, ``predict`` and ``serve`` of a directory and ``run --resume`` take the previous good checkpoint.
4. A runner state or a source position that no run writes: ``run --resume`` skips the checkpoint as a corrupt one.
"""

from __future__ import annotations

import json
import math
import random
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from forged import attribute_added, forge, node, pack, rehashed, unpack
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pegasos_stream import (
    AdaGradLogistic,
    KernelPegasosClassifier,
    PegasosClassifier,
    PegasosCommittee,
    PegasosGrid,
    PegasosMixture,
    PegasosMulticlass,
    cli,
    learners,
    save,
)
from pegasos_stream.persist.checkpoint import (
    CheckpointError,
    checkpoint_path,
    describe,
    latest_valid,
    model_digest,
    read_checkpoint,
)

# -- 1. every class checks its own state ------------------------------------------------------


def _keys(dense: bool) -> list:
    return list(range(8)) if dense else ["a", "b", "c", "d", "e"]


def _trained(model: Any, dense: bool = False, n: int = 120, seed: int = 0) -> Any:
    """``model`` after ``n`` examples of a noisy linear truth (int columns 0..7 when ``dense``)."""
    rng = random.Random(seed)
    keys = _keys(dense)
    for _ in range(n):
        x = {key: rng.gauss(0, 1) for key in rng.sample(keys, 3)}
        label = sum(x.values()) + rng.gauss(0, 0.3) > 0
        model.learn_one(x, rng.choice("xyz") if model._multiclass else label)
    return model


MODELS: dict[str, Callable[[], Any]] = {
    "linear": lambda: _trained(PegasosClassifier(lambda_=1e-2, average=True)),
    "linear dense": lambda: _trained(PegasosClassifier(lambda_=1e-2, n_features=8), dense=True),
    "auto": lambda: _trained(PegasosClassifier()),
    "grid": lambda: _trained(PegasosGrid(lambdas=(1e-3, 1e-2))),
    "committee": lambda: _trained(PegasosCommittee(lambda_=1e-2, t0=10)),
    "mixture": lambda: _trained(PegasosMixture(lambdas=(1e-2,), lambda_t0=1.0, logistics=((0.7, 1e-6),))),
    "adagrad": lambda: _trained(AdaGradLogistic()),
    "adagrad dense": lambda: _trained(AdaGradLogistic(n_features=8), dense=True),
    "multiclass": lambda: _trained(PegasosMulticlass(lambda_=1e-2)),
    "kernel": lambda: _trained(KernelPegasosClassifier(gamma=0.5, lambda_=1e-2, budget=10, maintenance="merge")),
}


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> dict[str, Path]:
    """A checkpoint file of each model of MODELS."""
    directory = tmp_path_factory.mktemp("saved")
    paths = {}
    for name, make in MODELS.items():
        paths[name] = directory / f"{name}.pgs"
        save(make(), paths[name])
    return paths


def _list(values: list) -> dict:
    return {"list": values}


def _floats(pairs: dict) -> dict:
    return {"keys": list(pairs), "values": list(pairs.values())}


#: (model, path of the attribute, its forged value (or DROP), what the refusal says).
DROP = object()
FORGED = [
    ("linear", ("lambda_",), 0.0, "PegasosClassifier: settings refused: lambda_=0.0"),
    ("linear", ("lambda_",), "fast", "PegasosClassifier: settings refused: lambda_='fast'"),
    ("linear", ("_t",), {"int": "9" * 4000}, "PegasosClassifier._t: expected an integer from 0 to 9007199254740992"),
    ("linear", ("_t",), {"int": "-5"}, "PegasosClassifier._t: expected an integer from 0"),
    ("linear", ("_t",), 12.0, "PegasosClassifier._t: expected an integer"),
    ("linear", ("_u", "v"), "abc", "WeightVector.v: expected a dict of finite floats"),
    ("linear", ("_u", "v"), _floats({"a": {"float": "nan"}}), "WeightVector.v: expected a dict of finite floats"),
    ("linear", ("_u", "v"), _floats({"a": 1e300}), "WeightVector: weights of norm"),
    ("linear", ("_u", "scale"), {"float": "nan"}, "WeightVector.scale: expected a finite float from 1e-09 to 1"),
    ("linear", ("_u", "scale"), 0.0, "WeightVector.scale: expected a finite float from 1e-09 to 1"),
    ("linear", ("_u", "avg_offset"), DROP, "WeightVector: missing avg_offset"),
    ("linear", ("_u", "n_averaged"), True, "WeightVector.n_averaged: expected an integer"),
    ("linear", ("_u",), {"int": "1"}, "PegasosClassifier._u: expected the parts its settings make"),
    ("linear", ("_radius",), 3.0, "PegasosClassifier._radius: expected 10.0, as its settings make it, got 3.0"),
    ("linear", ("_last_scored",), _list([]), "PegasosClassifier._last_scored: expected None"),
    ("linear", ("_b",), {"float": "inf"}, "PegasosClassifier._b: expected a finite float"),
    ("linear", ("average",), {"int": "-1"}, "PegasosClassifier: settings refused: average=-1"),
    ("linear", ("projection",), "yes", "PegasosClassifier.projection: expected true or false"),
    ("linear", ("_platt", "slope"), -1.0, "OnlinePlatt.slope: expected a finite float > 0"),
    ("linear", ("_platt", "n_pos"), {"int": "-1"}, "OnlinePlatt.n_pos: expected an integer from 0"),
    ("linear", ("_platt",), {"int": "5"}, "PegasosClassifier._platt: expected the parts its settings make"),
    ("linear dense", ("_u", "v"), np.zeros(3), "PegasosClassifier._u: expected weights of 8 columns"),
    ("linear dense", ("_u", "v"), np.zeros(8, np.float32), "DenseWeightVector.v: expected a float64 array"),
    ("linear dense", ("_u", "v"), np.zeros((8, 1)), "DenseWeightVector.v: expected a float64 array of shape (-1,)"),
    ("linear dense", ("_u", "v"), np.full(8, np.nan), "DenseWeightVector.v: expected finite values"),
    ("linear dense", ("_u", "avg_offset"), np.zeros(8), "DenseWeightVector.avg_offset: expected a float64 array"),
    ("linear dense", ("_u", "v"), DROP, "DenseWeightVector: missing v"),
    ("linear dense", ("n_features",), {"int": "4"}, "PegasosClassifier._u: expected weights of 4 columns"),
    ("auto", ("_grid", "_losses"), _list([0.0]), "Members._losses: expected a list of 6 finite floats >= 0"),
    ("auto", ("_grid", "discount"), 1.0, "Members.discount: expected a finite float from 0 to 1"),
    ("auto", ("_grid", "_members"), _list([]), "Members._members: expected at least one member"),
    ("auto", ("_grid",), DROP, "PegasosClassifier._grid: expected the parts its settings make, ('Members', None)"),
    ("grid", ("_losses",), _list([-1.0, 0.0]), "PegasosGrid._losses: expected a list of 2 finite floats >= 0"),
    ("grid", ("discount",), 1.0, "PegasosGrid: settings refused: discount=1.0"),
    ("grid", ("lambdas",), {"tuple": [1e-3]}, "PegasosGrid._members: expected the parts its settings make"),
    ("committee", ("svm", "_t"), {"int": "3"}, "PegasosCommittee: its members took 3 and 120 steps"),
    ("committee", ("lambda_",), 0.5, "PegasosCommittee.svm: expected the parts its settings make"),
    ("mixture", ("_log_weights",), _list([{"float": "nan"}] * 3), "PegasosMixture._log_weights: expected a list"),
    ("mixture", ("_log_weights",), _list([0.0, 0.0, 0.0]), "PegasosMixture._log_weights: expected the logs of"),
    ("mixture", ("_losses",), _list([1.0]), "PegasosMixture._losses: expected a list of 3 finite floats >= 0"),
    ("mixture", ("_platts",), _list([]), "PegasosMixture._platts: expected the parts its settings make"),
    ("mixture", ("share",), -1.0, "PegasosMixture: settings refused: share=-1.0"),
    ("adagrad", ("_g2",), _floats({"a": 0.0}), "AdaGradLogistic._g2: expected a dict of finite floats >= 1e-06"),
    ("adagrad", ("_w",), _floats({"a": 1e6}), "AdaGradLogistic._w: a weight of 1e+06, more than η·t = 84"),
    ("adagrad", ("_w",), np.zeros(8), "AdaGradLogistic._w: expected the parts its settings make"),
    ("adagrad dense", ("_w",), np.zeros(7), "AdaGradLogistic._w: expected a float64 array of shape (8,)"),
    ("adagrad dense", ("_g2",), np.zeros(8), "AdaGradLogistic._g2: expected finite values >= 1e-06"),
    ("multiclass", ("_b",), _floats({"zz": 0.0}), "PegasosMulticlass._b: expected a bias for each class"),
    ("multiclass", ("_w", "rows"), "rows", "SharedScaleWeights.rows: expected dict"),
    ("multiclass", ("fit_intercept",), {"int": "1"}, "PegasosMulticlass.fit_intercept: expected true or false"),
    ("kernel", ("_store", "_nnz"), {"int": "0"}, "SupportVectorStore._nnz: expected the number of entries"),
    ("kernel", ("_store", "labels"), np.full(10, 0.5), "SupportVectorStore.labels: expected -1.0 or 1.0"),
    ("kernel", ("_store", "betas"), np.zeros(3), "SupportVectorStore.betas: expected a float64 array of shape (10,)"),
    ("kernel", ("_store", "sq_norms"), np.full(10, -1.0), "SupportVectorStore.sq_norms: expected finite values >= 0"),
    ("kernel", ("_store", "_column"), _floats({"zz": {"int": "0"}}), "SupportVectorStore._rows: expected the columns"),
    (
        "kernel",
        ("_store", "_column"),
        _floats({"zz": {"int": "1"}}),
        "SupportVectorStore._column: expected the columns",
    ),
    ("kernel", ("_store", "keep_gram"), True, "SupportVectorStore.gram: expected a float64 array of shape (10, 10)"),
    ("kernel", ("_kernel", "gamma"), -1.0, "RBF: gamma=-1.0: expected a finite number > 0"),
    ("kernel", ("budget",), {"int": "2"}, "KernelPegasosClassifier._store: 10 vectors, over the budget"),
    ("kernel", ("maintenance",), "cut", "KernelPegasosClassifier: settings refused: maintenance='cut'"),
]


@pytest.mark.parametrize(("model", "path", "value", "refusal"), FORGED, ids=[f"{c[0]} {c[3][:60]}" for c in FORGED])
def test_a_state_with_one_attribute_off_is_refused_naming_it(tmp_path, saved, model, path, value, refusal):
    forged = forge(saved[model], tmp_path / "forged.pgs", ("model", *path), value, value is DROP)
    with pytest.raises(CheckpointError) as refused:
        read_checkpoint(forged)
    assert str(refused.value).startswith(f"{forged}: the saved state cannot be rebuilt: {refusal}"), refused.value


@pytest.mark.parametrize(
    ("model", "path"), [("linear", ()), ("linear", ("_u",)), ("kernel", ("_store",)), ("grid", ("_platt",))]
)
def test_an_attribute_no_class_has_is_refused_even_one_named_like_a_method(tmp_path, saved, model, path):
    """An unknown attribute is never set: one named like a method would shadow it (``predict_one`` a number)."""
    forged = attribute_added(saved[model], tmp_path / "forged.pgs", ("model", *path), "predict_one", {"int": "5"})
    with pytest.raises(CheckpointError, match="unknown attributes predict_one"):
        read_checkpoint(forged)


def test_members_out_of_their_order_are_not_those_of_the_settings(tmp_path, saved):
    manifest, arrays = unpack(saved["auto"].read_bytes())
    members = node(manifest, "model", "_grid", "_members")["list"]
    members.reverse()  # each member sound on its own, but not at the λ its place says
    forged = tmp_path / "forged.pgs"
    forged.write_bytes(pack(manifest, arrays))
    with pytest.raises(CheckpointError, match=r"Members._members: expected the parts its settings make"):
        read_checkpoint(forged)


def test_every_class_of_a_state_checks_its_own():
    """A class the codec may rebuild and that checks nothing would take any forged attribute."""
    for cls in learners.STATE_CLASSES:
        assert callable(getattr(cls, "_check_state", None)), cls


def test_sound_states_of_every_kind_load_as_they_were_saved(saved):
    for name, path in saved.items():
        model = read_checkpoint(path)[0]["model"]
        assert model_digest(model) == model_digest(MODELS[name]()), name


# -- 2. property: a random change is refused or loads to a usable model ------------------------


def _nodes(tree: Any, path: tuple = ()) -> list[tuple[tuple, Any]]:
    """(path (keys and indices), node) of every node of a JSON tree."""
    found = [(path, tree)]
    if isinstance(tree, dict):
        for key, child in tree.items():
            found += _nodes(child, (*path, key))
    elif isinstance(tree, list):
        for index, child in enumerate(tree):
            found += _nodes(child, (*path, index))
    return found


def _is_number(node: Any) -> bool:
    """Whether ``node`` is an encoded number: a JSON float, or an {"int": ...} or {"float": ...}."""
    return isinstance(node, float) or (isinstance(node, dict) and len(node) == 1 and {*node} <= {"int", "float"})


def _replaced(tree: Any, path: tuple, value: Any, drop: bool) -> Any:
    if not path:
        return value
    head, *rest = path
    if isinstance(tree, dict):
        if drop and not rest:
            return {key: child for key, child in tree.items() if key != head}
        return {**tree, head: _replaced(tree[head], tuple(rest), value, drop)}
    items = list(tree)
    if drop and not rest:
        return items[:head] + items[head + 1 :]
    items[head] = _replaced(items[head], tuple(rest), value, drop)
    return items


numbers = (
    st.floats(-1e6, 1e6)
    | st.integers(-3, 10**6).map(lambda i: {"int": str(i)})
    | st.sampled_from([0.0, -0.0, 1.0, 1e-300, 1e300, {"int": "0"}, {"int": "1"}])
)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats()
    | st.text(max_size=5)
    | st.sampled_from([{"int": "-1"}, {"int": "9" * 30}, {"float": "nan"}, {"float": "-inf"}, {"array": "a0"}]),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.sampled_from(["list", "keys", "x"]), children),
    max_leaves=6,
)


def _exercise(model: Any, dense: bool) -> None:
    """Predict, learn and summarise, as the commands do: a refused example (ValueError) is all that may go wrong."""
    rng = random.Random(1)
    for _ in range(3):
        x = {key: rng.gauss(0, 1) for key in _keys(dense)[:3]}
        try:
            if model._multiclass:
                model.predict_proba_one(x)
                model.learn_one(x, "x")
            else:
                model.predict_proba_one(x)
                model.learn_one(x, True)
        except ValueError:
            pass


@pytest.mark.parametrize("name", ["linear", "linear dense", "auto", "mixture", "adagrad dense", "kernel", "multiclass"])
@settings(max_examples=60, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_a_random_change_is_refused_or_loads_a_model_that_only_refuses_examples(tmp_path_factory, saved, name, data):
    manifest, arrays = unpack(saved[name].read_bytes())
    nodes = _nodes(manifest["state"])
    numeric = [path for path, found in nodes if _is_number(found)]
    if data.draw(st.booleans()):  # a number another number, half the time: a state that may well load
        path, drop, value = data.draw(st.sampled_from(numeric)), False, data.draw(numbers)
    else:
        path = data.draw(st.sampled_from([path for path, _ in nodes]))
        drop, value = bool(path) and data.draw(st.booleans()), data.draw(json_values)
    changed = {**manifest, "state": _replaced(manifest["state"], path, value, drop)}
    forged = tmp_path_factory.mktemp("random") / "forged.pgs"
    forged.write_bytes(pack(changed, arrays))
    try:
        model = read_checkpoint(forged)[0]["model"]
    except CheckpointError:
        return
    describe(forged)
    _exercise(model, dense="dense" in name)


# -- 3. the commands on forged checkpoints ---------------------------------------------------------


def _events(n: int, seed: int, first: int = 0) -> bytes:
    rng = random.Random(seed)
    lines = []
    for i in range(first, first + n):
        x = {"a": rng.gauss(0, 1), "b": rng.gauss(0, 1), "c": 1.0}
        lines.append(json.dumps({"id": i, "x": x, "label": x["a"] + 0.5 * x["b"] > 0}))
    return ("\n".join(lines) + "\n").encode()


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory) -> Path:
    """A job's directory: job.yaml (a linear model, averaged), train.jsonl (200 events) learned into
    checkpoints/checkpoint-1, and more.jsonl (100 other events)."""
    work = tmp_path_factory.mktemp("job")
    (work / "job.yaml").write_text(
        yaml.safe_dump({"model": {"lambda_": 0.01, "average": True}, "checkpoint": {"dir": "checkpoints"}})
    )
    (work / "train.jsonl").write_bytes(_events(200, seed=1))
    (work / "more.jsonl").write_bytes(_events(100, seed=2, first=1000))
    args = ["run", "--config", str(work / "job.yaml"), "--input", str(work / "train.jsonl"), "--output", "-"]
    assert cli.main([*args[:-1], str(work / "out.jsonl")]) == 0
    return work


#: The forged states of issue 30 (item 13), each re-hashed over a sound checkpoint.
ISSUE_13 = {
    "lambda_=0": (("lambda_",), 0.0),
    "a non-numeric lambda_": (("lambda_",), "fast"),
    "a 4,000-digit t": (("_t",), {"int": "9" * 4000}),
    "a negative t": (("_t",), {"int": "-5"}),
    "a string weight vector": (("_u", "v"), "abc"),
    "a missing array": (("_u", "avg_offset"), DROP),
    "a NaN scale": (("_u", "scale"), {"float": "nan"}),
}


def _forged_directory(work: Path, case: str, tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the job's checkpoint directory with a forged checkpoint 2 beside the sound checkpoint 1."""
    directory = tmp_path / "checkpoints"
    shutil.copytree(work / "checkpoints", directory, ignore=shutil.ignore_patterns(".lock"))
    path, value = ISSUE_13[case]
    forged = forge(checkpoint_path(directory, 1), checkpoint_path(directory, 2), ("model", *path), value, value is DROP)
    return directory, forged


@pytest.mark.parametrize("case", list(ISSUE_13))
def test_the_commands_refuse_a_forged_checkpoint_in_one_line_and_fall_back_to_a_sound_one(
    trained_run, tmp_path, capsys, monkeypatch, case
):
    work = trained_run
    directory, forged = _forged_directory(work, case, tmp_path)
    capsys.readouterr()
    # inspect and predict of the file itself: one line, status 2
    assert cli.main(["inspect", str(forged)]) == 2
    said = capsys.readouterr()
    assert said.out == "" and said.err.startswith(f"error: {forged}: the saved state cannot be rebuilt: ")
    assert len(said.err.splitlines()) == 1
    assert cli.main(["predict", "--model", str(forged), str(work / "more.jsonl")]) == 2
    said = capsys.readouterr()
    assert said.out == "" and said.err.startswith(f"error: --model {forged}: the saved state cannot be rebuilt: ")
    # predict of the directory: the sound checkpoint, the forged one skipped and said so
    assert cli.main(["predict", "--model", str(directory), str(work / "more.jsonl")]) == 0
    said = capsys.readouterr()
    assert len(said.out.splitlines()) == 100 and f"skipping {forged}: " in said.err
    # serve (a stream) of the directory: model version 1
    out = tmp_path / "served.jsonl"
    args = ["serve", "--model", str(directory), "--input", str(work / "more.jsonl"), "--output", str(out)]
    assert cli.main(args) == 0
    assert {json.loads(line)["model_version"] for line in out.read_text().splitlines()} == {1}
    assert f"refusing the checkpoint {forged}: the saved state cannot be rebuilt: " in capsys.readouterr().err
    # run --resume: from the sound checkpoint, on new events
    monkeypatch.chdir(tmp_path)
    args = ["run", "--config", str(work / "job.yaml"), "--input", str(work / "more.jsonl"), "--output", "/dev/null"]
    assert cli.main([*args, "--set", f"checkpoint.dir={directory}", "--resume", "--accept-config"]) == 0
    said = capsys.readouterr().err
    assert f"skipping {forged}: " in said and f"resuming from {checkpoint_path(directory, 1)} (t=200" in said
    assert json.loads(said.splitlines()[-1])["t"] == 300


# -- 4. runner state and source position ---------------------------------------------------------

#: Runner states and positions no run writes, re-hashed into a checkpoint of a run.
RUNNER_FORGED: dict[str, Callable[[dict], None]] = {
    "negative counts": lambda m: _set(m, ("runner", "counts"), _list([{"int": "-1"}] * 4)),
    "counts missing": lambda m: _set(m, ("runner", "counts"), DROP),
    "a multiclass report for a binary learner": lambda m: _set(
        m, ("runner", "report"), _floats({"correct": {"int": "1"}, "n": {"int": "2"}})
    ),
    "pending columns that do not fit": lambda m: _set(m, ("runner", "pending", "ids"), _list([{"int": "1"}])),
    "pending that are not columns": lambda m: _set(m, ("runner", "pending"), "x"),
    "a negative offset": lambda m: m["source"].update(offset=-5),
    "an offset past any file": lambda m: m["source"].update(offset=10**30),
    "a position that is no mapping": lambda m: m.update(source=[1, 2]),
    "events missing": lambda m: m.pop("events"),
}


def _set(manifest: dict, path: tuple, value: Any) -> None:
    parent = node(manifest, *path[:-1])
    at = parent["keys"].index(path[-1])
    if value is DROP:
        del parent["keys"][at], parent["values"][at]
    else:
        parent["values"][at] = value


@pytest.mark.parametrize("case", list(RUNNER_FORGED))
def test_run_resume_skips_a_checkpoint_whose_runner_state_or_position_no_run_writes(
    trained_run, tmp_path, capsys, monkeypatch, case
):
    work = trained_run
    directory = tmp_path / "checkpoints"
    shutil.copytree(work / "checkpoints", directory, ignore=shutil.ignore_patterns(".lock"))
    forged = rehashed(checkpoint_path(directory, 1), checkpoint_path(directory, 2), RUNNER_FORGED[case])
    read_checkpoint(forged)  # a sound learner: only what a run takes up is off
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    args = ["run", "--config", str(work / "job.yaml"), "--input", str(work / "train.jsonl"), "--output", "/dev/null"]
    assert cli.main([*args, "--set", f"checkpoint.dir={directory}", "--resume", "--accept-config"]) == 0
    said = capsys.readouterr().err
    assert f"skipping {forged}: " in said and f"resuming from {checkpoint_path(directory, 1)}" in said, said
    assert json.loads(said.splitlines()[-1])["t"] == 200  # the same input, read to its end already


def test_latest_valid_takes_a_check_of_the_state_and_manifest(trained_run, tmp_path):
    directory = tmp_path / "checkpoints"
    shutil.copytree(trained_run / "checkpoints", directory, ignore=shutil.ignore_patterns(".lock"))
    said: list[str] = []

    def refuse(state: dict, manifest: dict) -> None:
        raise ValueError(f"not this one (t={state['model'].t}, {manifest['events']} events)")

    assert latest_valid(directory, said.append, check=refuse) is None
    assert said == [f"skipping {checkpoint_path(directory, 1)}: not this one (t=200, 200 events)"]
    assert not math.isnan(latest_valid(directory, check=lambda *_: None)[2]["events"])
