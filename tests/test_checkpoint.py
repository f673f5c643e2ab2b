"""Checkpoint files and model.save / Model.load: format, exactness, safety, corruption, inspect.

1. Round trips: every learner (every option of PegasosClassifier incl. a prior and average=k,
   PegasosMulticlass, KernelPegasosClassifier with each maintenance in the dense and the sparse
   store layout) saved after a stream and loaded back has the same ``model_digest``; the loaded
   model and one that never went through disk then make bit-identical decisions and end with
   equal digests. Feature keys and class labels of every type (str, int, float, bool, None,
   nested tuples; "1" next to 1) come back with their types.
2. Safety: no code runs on loading. A manifest naming a class outside the whitelist is refused;
   an archive holding an object (pickled) array is refused by ``np.load(allow_pickle=False)``,
   and the pickle in it, which would create a file, does not run.
3. Corruption: flipped bytes (magic, checksum, payload start / middle / end), truncations,
   zero-length, garbage, another format version (a re-checksummed, edited manifest), a payload
   that is not an archive: each is a CheckpointError naming the file and the reason; so is a
   checksummed file whose manifest cannot be rebuilt into a learner. ``latest_valid`` skips
   refused files, newest first, and says so; ``Checkpoints`` never reuses a number.
4. ``pegasos-stream inspect`` on a file and a directory (text and --json), and exit code 2 on a
   corrupt one.

The pause of a checkpoint of a million weights is measured by ``scripts/bench_checkpoint.py``.
"""

from __future__ import annotations

import copy
import hashlib
import io
import json
import math
import os
import random
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import yaml

from pegasos_stream import KernelPegasosClassifier, PegasosClassifier, PegasosMulticlass, cli, load, save
from pegasos_stream.cli.config import LEARNERS, config_hash, load_config
from pegasos_stream.io.inputs import FileHead
from pegasos_stream.io.sinks import NullSink
from pegasos_stream.learners.svstore import DENSE_MAX_COLUMNS
from pegasos_stream.parse.parsing import EventParser
from pegasos_stream.persist import checkpoint as ck
from pegasos_stream.persist.checkpoint import (
    FORMAT_VERSION,
    MAGIC,
    CheckpointError,
    Checkpoints,
    checkpoint_path,
    checkpoints,
    describe,
    latest_valid,
    model_digest,
    read_checkpoint,
    write_checkpoint,
)
from pegasos_stream.persist.codec import StateError
from pegasos_stream.run.evaluation import BinaryReport, MulticlassReport
from pegasos_stream.run.pending import PendingLabels
from pegasos_stream.run.runner import Runner

BIN = shutil.which("pegasos-stream", path=str(Path(sys.executable).parent)) or shutil.which("pegasos-stream")
HEADER = len(MAGIC) + 32


# -- streams -------------------------------------------------------------------------------


def _binary_stream(n: int, seed: int, vocabulary: int = 12, nnz: int = 4) -> list[tuple[dict, bool]]:
    """(x, y) pairs: ``nnz`` of ``vocabulary`` features per example, a noisy linear truth."""
    rng = random.Random(seed)
    truth = [rng.uniform(-1, 1) for _ in range(vocabulary)]
    pairs = []
    for _ in range(n):
        keys = rng.sample(range(vocabulary), nnz)
        x = {f"f{k}": rng.gauss(0, 1) for k in keys}
        score = sum(truth[k] * v for k, v in zip(keys, x.values()))
        pairs.append((x, score + rng.gauss(0, 0.2) > 0))
    return pairs


def _multiclass_stream(n: int, seed: int) -> list[tuple[dict, str]]:
    rng = random.Random(seed)
    centres = {"a": (2.0, 0.0), "b": (-1.0, 1.7), "c": (-1.0, -1.7)}
    pairs = []
    for _ in range(n):
        label = rng.choice("abc")
        cx, cy = centres[label]
        pairs.append(({"x": cx + rng.gauss(0, 1), "y": cy + rng.gauss(0, 1), "z": rng.gauss(0, 1)}, label))
    return pairs


def _prior_model() -> PegasosClassifier:
    model = PegasosClassifier(lambda_=1e-2, average=True)
    for x, y in _binary_stream(80, seed=99):
        model.learn_one(x, y)
    return model


LINEAR_PARAMS = {
    "defaults": {},
    "intercept": {"lambda_": 1e-2, "fit_intercept": True},
    "projection+average": {"projection": True, "average": True},
    "average=k+class_weight": {"average": 25, "fit_intercept": True, "class_weight": {True: 2.0, False: 0.5}},
    "balanced+horizon": {"class_weight": "balanced", "horizon": 40},
    "prior dict": {"prior": {"f0": 0.5, "f3": -0.25, "unseen": 1.0}, "projection": True},
    "prior model": {"prior": "model"},
    "everything": {
        "lambda_": 1e-3,
        "fit_intercept": True,
        "projection": True,
        "average": 30,
        "class_weight": "balanced",
        "prior": {"f1": 0.3, "f2": -0.7},
        "horizon": 60,
        "seed": 3,
    },
}

KERNEL_PARAMS = {
    "rbf merge": {"kernel": "rbf", "gamma": 0.3, "lambda_": 1e-2, "budget": 15, "maintenance": "merge"},
    "poly remove": {
        "kernel": "poly",
        "degree": 2,
        "coef0": 1.0,
        "lambda_": 1e-2,
        "budget": 15,
        "maintenance": "remove",
    },
    "linear project": {"kernel": "linear", "lambda_": 1e-2, "budget": 15, "maintenance": "project"},
    "rbf no budget": {"kernel": "rbf", "gamma": 0.3, "lambda_": 1e-2, "budget": None},
}


def _learners():
    """(id, factory, stream of 400 pairs) for every learner configuration under test."""
    cases = []
    for name, params in LINEAR_PARAMS.items():

        def make(params=params):
            if params.get("prior") == "model":
                return PegasosClassifier(lambda_=1e-3, prior=_prior_model())
            return PegasosClassifier(**params)

        cases.append(pytest.param(make, "binary", None, id=f"linear {name}"))
    cases.append(pytest.param(PegasosMulticlass, "multiclass", None, id="multiclass defaults"))
    cases.append(
        pytest.param(
            lambda: PegasosMulticlass(lambda_=1e-2, fit_intercept=True, projection=True, horizon=50),
            "multiclass",
            None,
            id="multiclass intercept+projection+horizon",
        )
    )
    for name, params in KERNEL_PARAMS.items():
        for layout in ("dense", "sparse"):
            cases.append(
                pytest.param(
                    lambda params=params: KernelPegasosClassifier(**params),
                    "binary",
                    layout,
                    id=f"kernel {name} {layout}",
                )
            )
    return cases


def _stream_for(kind: str, layout: str | None) -> list:
    if kind == "multiclass":
        return _multiclass_stream(400, seed=5)
    if layout == "sparse":  # far more than DENSE_MAX_COLUMNS distinct features
        return _binary_stream(400, seed=6, vocabulary=2000, nnz=12)
    return _binary_stream(400, seed=7)


def _decision(model, x):
    if isinstance(model, PegasosMulticlass):
        return model.scores_one(x)
    return (model.decision_function_one(x), model.predict_proba_one(x))


# -- 1. round trips ------------------------------------------------------------------------


@pytest.mark.parametrize(("make", "kind", "layout"), _learners())
def test_save_load_round_trip_then_learning_stays_bit_identical(tmp_path, make, kind, layout):
    stream = _stream_for(kind, layout)
    model = make()
    for x, y in stream[:200]:  # prequential, as the runner does: predict, then learn
        _decision(model, x)
        model.learn_one(x, y)
    if layout is not None:  # the store is in the layout this case is about
        columns = len(model._store._column)
        assert (columns > DENSE_MAX_COLUMNS) == (layout == "sparse"), columns
        assert model._store._arrays()[0] == layout
        if model.budget is not None:
            assert model.n_support == model.budget  # maintenance has run
    path = tmp_path / "model.pgs"
    save(model, path)
    assert sorted(os.listdir(tmp_path)) == ["model.pgs"]  # no temporary file left behind

    loaded = load(path, type(model))
    assert type(loaded) is type(model)
    assert model_digest(loaded) == model_digest(model)
    assert loaded.t == model.t
    if layout is not None:
        assert loaded._store._arrays()[0] == layout
    # A model that never went through disk, and the loaded one, continue on the same stream.
    for x, y in stream[200:]:
        assert _decision(loaded, x) == _decision(model, x)  # bit for bit, not approximately
        model.learn_one(x, y)
        loaded.learn_one(x, y)
    assert loaded.t == model.t == len(stream)
    assert model_digest(loaded) == model_digest(model)
    # ...and a second round trip of the continued model is still exact.
    save(loaded, path)
    assert model_digest(load(path, type(model))) == model_digest(model)


def test_digest_tells_models_apart():
    a, b = PegasosClassifier(lambda_=1e-2), PegasosClassifier(lambda_=1e-2)
    stream = _binary_stream(50, seed=1)
    for x, y in stream:
        a.learn_one(x, y)
        b.learn_one(x, y)
    assert model_digest(a) == model_digest(b)
    x, y = stream[0]
    b.learn_one(x, y)
    assert model_digest(a) != model_digest(b)
    assert model_digest(PegasosClassifier(lambda_=1e-2)) != model_digest(PegasosClassifier(lambda_=2e-2))


def test_load_refuses_another_learner_class(tmp_path):
    save(PegasosMulticlass(), tmp_path / "m.pgs")
    with pytest.raises(CheckpointError, match=r"m\.pgs: holds a PegasosMulticlass, not a PegasosClassifier"):
        load(tmp_path / "m.pgs", PegasosClassifier)


def _typed(value):
    """``value`` with its type at every level: 1, 1.0, True and "1" all differ."""
    if isinstance(value, tuple):
        return ("tuple", tuple(_typed(item) for item in value))
    return (type(value).__name__, value)


#: Feature keys of every type river uses, with look-alikes side by side ("1" / 1, 2.5 / "2.5").
MIXED_KEYS = [
    "1",
    1,
    2.5,
    "2.5",
    False,
    None,
    -7,
    2**70,
    "",
    ("a", 1),
    ("a", "1"),
    (("n", None), 2.0, True),
    (),
    ((),),
    ("deep", (1, ("x", None, 0.5))),
]


def _mixed_x(rng: random.Random, k: int = 5) -> dict:
    return {key: rng.gauss(0, 1) for key in rng.sample(MIXED_KEYS, k)}


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(
            lambda: PegasosClassifier(lambda_=1e-2, average=3, prior={"1": 0.5, 1: -0.5, ("t", None): 0.1}), id="linear"
        ),
        pytest.param(
            lambda: KernelPegasosClassifier(gamma=0.2, lambda_=1e-2, budget=8, maintenance="merge"), id="kernel"
        ),
    ],
)
def test_feature_keys_of_every_type_round_trip_exactly(tmp_path, make):
    rng = random.Random(3)
    model = make()
    # Also enough plain features for the weights to go to a float array (>= 32 values).
    for _ in range(120):
        x = {**_mixed_x(rng), **{f"p{j}": rng.gauss(0, 1) for j in rng.sample(range(40), 3)}}
        model.learn_one(x, rng.random() < 0.5)
    save(model, tmp_path / "m.pgs")
    loaded = load(tmp_path / "m.pgs", type(model))
    if isinstance(model, PegasosClassifier):
        maps = [(model._u.v, loaded._u.v), (model._u.avg_offset, loaded._u.avg_offset), (model._prior, loaded._prior)]
        assert len(model._u.v) >= 32  # the array encoding of a dict of floats is exercised too
    else:
        maps = [(a, b) for a, b in zip(model._store.features, loaded._store.features)]
        maps.append((model._store._column, loaded._store._column))
    assert any("1" in a and 1 in a for a, _ in maps)  # both look-alikes are in one dict
    for original, restored in maps:
        assert [_typed(k) for k in restored] == [_typed(k) for k in original]  # same keys, types, order
        assert list(restored.values()) == list(original.values())
    assert model_digest(loaded) == model_digest(model)
    x = _mixed_x(random.Random(8), 8)
    assert loaded.decision_function_one(x) == model.decision_function_one(x)


def test_multiclass_labels_of_every_type_round_trip_exactly(tmp_path):
    labels = ["1", 1, 2.5, ("c", 2), (("n", None), False)]
    rng = random.Random(4)
    model = PegasosMulticlass(lambda_=1e-2, fit_intercept=True)
    for _ in range(150):
        model.learn_one(_mixed_x(rng), rng.choice(labels))
    save(model, tmp_path / "m.pgs")
    loaded = load(tmp_path / "m.pgs", PegasosMulticlass)
    assert [_typed(c) for c in loaded.classes] == [_typed(c) for c in model.classes]
    assert sorted(map(repr, model.classes)) == sorted(map(repr, labels))
    for label in model.classes:
        assert [_typed(k) for k in loaded._w.rows[label]] == [_typed(k) for k in model._w.rows[label]]
    assert model_digest(loaded) == model_digest(model)


def test_runner_state_with_mixed_ids_round_trips(tmp_path):
    """What a run checkpoints besides the learner: pending examples keyed by ids of any type."""
    runner_state = {
        "counts": [10, 9, 7, 1],
        "pending": [["1", {"a": 1, "b": 2.5}, 0.25, 3.5], [1, {"a": -0.0}, -1.5, 0.0], [("k", None), {}, 0.0, 1e-300]],
        "pending_counts": [0, 1, 2],
        "report": {"tp": 3, "scores": [0.1, -2.0, float("inf")], "positives": [True, False, True]},
    }
    path = tmp_path / "c.pgs"
    write_checkpoint(path, {"model": PegasosClassifier(), "runner": runner_state}, {"source": {"offset": 5}})
    state, manifest = read_checkpoint(path)
    assert manifest["source"] == {"offset": 5} and manifest["version"] == FORMAT_VERSION
    restored = state["runner"]
    assert [_typed(p[0]) for p in restored["pending"]] == [
        ("str", "1"),
        ("int", 1),
        ("tuple", (("str", "k"), ("NoneType", None))),
    ]
    assert restored == runner_state
    assert [_typed(v) for v in restored["pending"][0][1].values()] == [("int", 1), ("float", 2.5)]
    assert math.copysign(1.0, restored["pending"][1][1]["a"]) == -1.0  # -0.0 stays -0.0


def _runner_with_pending(model, entries: list[tuple]) -> Runner:
    """A runner whose pending store holds ``entries`` (id, x, score), with a clock at 1000 s."""
    pending = PendingLabels(max_pending=10**6, max_age_seconds=1e9, clock=lambda: 1000.0)
    report = MulticlassReport() if model._multiclass else BinaryReport(window=None)
    runner = Runner(model, None, EventParser("json", None, None, 1 << 20), NullSink(), pending, report)
    for event_id, x, score in entries:
        runner.pending.add(event_id, x, score)
    return runner


def _typed_pending(runner: Runner) -> list:
    return [
        (_typed(key), [(_typed(k), _typed(v)) for k, v in p.x.items()], _typed(p.score), p.arrived)
        for key, p in runner.pending.items()
    ]


def _members(path: Path) -> int:
    with zipfile.ZipFile(io.BytesIO(path.read_bytes()[HEADER:])) as archive:
        return len(archive.namelist())


@pytest.mark.parametrize("model", [PegasosClassifier(), PegasosMulticlass()], ids=["scores", "classes"])
def test_the_pending_store_is_a_few_arrays_whatever_its_size_and_keeps_every_type(tmp_path, model):
    """The runner checkpoints its pending examples as columns (ids, scores, ages, CSR rows over a
    key list): the archive has as many members for 3,000 examples as for 30, the ids, keys, values
    and scores (margins, or predicted classes of any type) come back with their types, in order,
    and a checkpoint of the earlier layout (one [id, x, score, age] entry each) still restores."""
    rng = random.Random(3)
    odd_keys = [1, 1.0, True, 0.0, -0.0, None, ("a", 1), ("a", True), ("a", (None, 2.5)), "1"]
    ids = ["7", 7, 7.5, False, None, ("e", 1)]
    classes = ["spam", 1, True, ("c", None)]

    def entries(n: int) -> list[tuple]:
        made = []
        for i in range(n):
            x = {f"w{rng.randrange(500)}": rng.gauss(0, 1) for _ in range(40)}  # 40 floats: one array each before
            x[odd_keys[i % len(odd_keys)]] = -0.0 if i % 2 else 3
            score = rng.gauss(0, 1) if not model._multiclass else classes[i % len(classes)]
            made.append((ids[i] if i < len(ids) else f"e{i}", x, score))
        return made

    members = []
    for n in (30, 3000):
        runner = _runner_with_pending(model, entries(n))
        runner.pending.clock = lambda: 1250.0  # the examples have waited 250 s
        path = tmp_path / f"{n}.pgs"
        write_checkpoint(path, {"model": model, "runner": runner.snapshot()})
        members.append(_members(path))
        restored = _runner_with_pending(model, [])
        restored.pending.clock = lambda: 5000.0
        restored.restore(read_checkpoint(path)[0]["runner"])
        assert len(restored.pending) == n
        assert _typed_pending(restored) == [
            (*entry[:3], arrived + 3750.0) for *entry, arrived in _typed_pending(runner)
        ]
    assert members[0] == members[1] <= 8

    old_layout = {
        **runner.snapshot(),
        "pending": [[key, p.x, p.score, 1250.0 - p.arrived] for key, p in runner.pending.items()],
    }
    restored = _runner_with_pending(model, [])
    restored.pending.clock = lambda: 5000.0
    restored.restore(old_layout)
    assert _typed_pending(restored) == [(*entry[:3], arrived + 3750.0) for *entry, arrived in _typed_pending(runner)]


def test_saving_an_object_outside_the_whitelist_is_refused_and_writes_nothing(tmp_path):
    model = PegasosClassifier()
    model._platt = object()  # not a saveable class
    with pytest.raises(StateError, match="an object of type object cannot be saved"):
        save(model, tmp_path / "m.pgs")

    class Sub(PegasosClassifier):  # a subclass is not the whitelisted class either
        pass

    with pytest.raises(StateError, match="type Sub cannot be saved"):
        save(Sub(), tmp_path / "m.pgs")
    assert os.listdir(tmp_path) == []


# -- 2. loading runs no code ----------------------------------------------------------------


def _unpack(path: Path) -> tuple[dict, dict[str, np.ndarray]]:
    """(manifest, arrays) of a checkpoint file, read without the package's loader."""
    with np.load(io.BytesIO(path.read_bytes()[HEADER:]), allow_pickle=False) as archive:
        arrays = {name: archive[name] for name in archive.files}
    return json.loads(arrays.pop("manifest").tobytes()), arrays


def _repack(path: Path, manifest, arrays: dict[str, np.ndarray]) -> Path:
    """Write ``manifest`` and ``arrays`` as a checkpoint with a valid checksum."""
    payload = ck._payload(manifest, arrays)
    path.write_bytes(MAGIC + hashlib.sha256(payload).digest() + payload)
    return path


def _saved_model(tmp_path: Path) -> Path:
    model = PegasosClassifier(lambda_=1e-2, average=True)
    for x, y in _binary_stream(60, seed=2, vocabulary=50):
        model.learn_one(x, y)
    save(model, tmp_path / "good.pgs")
    return tmp_path / "good.pgs"


def _rename_objects(tree, old: str, new: str):
    if isinstance(tree, dict):
        return {k: (new if k == "object" and v == old else _rename_objects(v, old, new)) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_rename_objects(item, old, new) for item in tree]
    return tree


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("PegasosClassifier", "os.system"),
        ("PegasosClassifier", "Popen"),
        ("PegasosClassifier", "subprocess.Popen"),
        ("PegasosClassifier", "BinaryReport"),  # a class of the package, but not a saveable one
        ("PegasosClassifier", "__builtins__"),
        ("OnlinePlatt", "system"),  # nested inside the learner
        ("WeightVector", "eval"),
    ],
)
def test_manifest_naming_a_class_outside_the_whitelist_is_refused(tmp_path, old, new):
    manifest, arrays = _unpack(_saved_model(tmp_path))
    assert f'"object": "{old}"' in json.dumps(manifest)
    evil = _repack(tmp_path / "evil.pgs", {**manifest, "state": _rename_objects(manifest["state"], old, new)}, arrays)
    with pytest.raises(CheckpointError) as refused:
        read_checkpoint(evil)
    assert str(evil) in str(refused.value)
    assert f"an object of type {new!r} cannot be loaded" in str(refused.value)
    with pytest.raises(CheckpointError):
        load(evil, PegasosClassifier)


class _CreatesAFile:
    """Pickled, it unpickles by calling open(path, "w"): a visible side effect of running code."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_an_object_array_in_the_archive_is_refused_without_unpickling(tmp_path):
    manifest, arrays = _unpack(_saved_model(tmp_path))
    marker = tmp_path / "code-ran"
    armed = np.empty(1, dtype=object)
    armed[0] = _CreatesAFile(str(marker))
    evil = _repack(tmp_path / "evil.pgs", manifest, {**arrays, "a0": armed})
    # The payload is live: a loader that allows pickle runs it.
    with np.load(io.BytesIO(evil.read_bytes()[HEADER:]), allow_pickle=True) as archive:
        archive["a0"]
    assert marker.exists()
    marker.unlink()

    with pytest.raises(CheckpointError) as refused:
        read_checkpoint(evil)
    assert str(evil) in str(refused.value) and "unreadable payload" in str(refused.value)
    assert "allow_pickle=False" in str(refused.value)  # numpy's own refusal
    assert not marker.exists()
    # Under another name too: every array of the archive is read, not only those the state uses.
    evil2 = _repack(tmp_path / "evil2.pgs", manifest, {**arrays, "extra": armed})
    with pytest.raises(CheckpointError, match="allow_pickle=False"):
        load(evil2, PegasosClassifier)
    assert not marker.exists()


# -- 3. corruption -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def good_checkpoint(tmp_path_factory) -> Path:
    """A run-style checkpoint: a learner and runner state (a few hundred kB)."""
    directory = tmp_path_factory.mktemp("good")
    model = PegasosClassifier(lambda_=1e-3, average=True)
    for x, y in _binary_stream(300, seed=4, vocabulary=3000, nnz=20):
        model.learn_one(x, y)
    state = {"counts": [300, 300, 300, 0], "pending": [], "pending_counts": [0, 0, 0], "report": {"tp": 1}}
    return Checkpoints(directory).write(model, state, {"offset": 123, "line": 4})


NOT_A_CHECKPOINT = "not a pegasos-stream checkpoint (or truncated before its header)"
CHECKSUM = "checksum mismatch: the file is truncated or corrupted"


def _flip_positions(size: int) -> list[tuple[str, int, str]]:
    return [
        ("magic first byte", 0, NOT_A_CHECKPOINT),
        ("magic last byte", len(MAGIC) - 1, NOT_A_CHECKPOINT),
        ("checksum first byte", len(MAGIC), CHECKSUM),
        ("checksum last byte", HEADER - 1, CHECKSUM),
        ("payload first byte", HEADER, CHECKSUM),
        ("payload middle", (HEADER + size) // 2, CHECKSUM),
        ("payload last byte", size - 1, CHECKSUM),
    ]


def _refused(path: Path, reason: str) -> str:
    with pytest.raises(CheckpointError) as refused:
        read_checkpoint(path)
    message = str(refused.value)
    assert message.startswith(f"{path}: "), message
    assert reason in message, message
    return message


def test_a_flipped_byte_anywhere_is_refused_with_the_reason(tmp_path, good_checkpoint):
    data = good_checkpoint.read_bytes()
    read_checkpoint(good_checkpoint)  # the original is sound
    for _name, position, reason in _flip_positions(len(data)):
        damaged = bytearray(data)
        damaged[position] ^= 0xFF
        path = tmp_path / f"flip-{position}.pgs"
        path.write_bytes(bytes(damaged))
        _refused(path, reason)
        with pytest.raises(CheckpointError, match=reason.split(" (")[0]):
            load(path, PegasosClassifier)


def test_truncations_and_empty_and_garbage_files_are_refused(tmp_path, good_checkpoint):
    data = good_checkpoint.read_bytes()
    for length in (0, 1, len(MAGIC), HEADER - 1, HEADER, HEADER + 1, HEADER + 100, len(data) // 2, len(data) - 1):
        path = tmp_path / f"cut-{length}.pgs"
        path.write_bytes(data[:length])
        _refused(path, NOT_A_CHECKPOINT if length < HEADER else CHECKSUM)
    rng = random.Random(0)
    garbage = tmp_path / "garbage.pgs"
    garbage.write_bytes(bytes(rng.getrandbits(8) for _ in range(5000)))
    _refused(garbage, NOT_A_CHECKPOINT)
    # Garbage behind a valid header and checksum gets past the checksum, not past the archive reader.
    noise = bytes(rng.getrandbits(8) for _ in range(5000))
    framed = tmp_path / "framed.pgs"
    framed.write_bytes(MAGIC + hashlib.sha256(noise).digest() + noise)
    _refused(framed, "unreadable payload")
    missing = tmp_path / "missing.pgs"
    _refused(missing, "cannot read: No such file or directory")
    _refused(tmp_path, "not a regular file (a directory)")


def test_another_format_version_or_format_is_refused(tmp_path, good_checkpoint):
    manifest, arrays = _unpack(good_checkpoint)
    assert manifest["version"] == FORMAT_VERSION == 1
    for version, shown in ((2, "2"), (0, "0"), ("1", "'1'"), (None, "None")):
        path = _repack(tmp_path / f"v{version}.pgs", {**manifest, "version": version}, arrays)
        _refused(path, f"checkpoint format version {shown}; this program reads version {FORMAT_VERSION}")
    path = _repack(tmp_path / "other.pgs", {**manifest, "format": "something else"}, arrays)
    _refused(path, "not a pegasos-stream checkpoint")
    no_manifest = tmp_path / "no-manifest.pgs"
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    no_manifest.write_bytes(MAGIC + hashlib.sha256(buffer.getvalue()).digest() + buffer.getvalue())
    _refused(no_manifest, "unreadable payload")
    # The unedited manifest, re-packed the same way, loads: the edits are what is refused.
    state, _ = read_checkpoint(_repack(tmp_path / "same.pgs", manifest, arrays))
    assert model_digest(state["model"]) == model_digest(read_checkpoint(good_checkpoint)[0]["model"])


def _edit_value(manifest: dict, key: str, value) -> dict:
    """The manifest with the learner's attribute ``key`` replaced by the encoded ``value``."""
    edited = copy.deepcopy(manifest)
    attributes = edited["state"]["values"][edited["state"]["keys"].index("model")]["attributes"]
    attributes["values"][attributes["keys"].index(key)] = value
    return edited


def _crafted_cases(manifest: dict) -> dict:
    model_at = manifest["state"]["keys"].index("model")

    def with_model(node) -> dict:
        return {**manifest, "state": {"keys": ["model"], "values": [node]}}

    empty = {"keys": [], "values": []}
    u = manifest["state"]["values"][model_at]["attributes"]
    u_node = u["values"][u["keys"].index("_u")]
    bad_key = copy.deepcopy(u_node)
    at = bad_key["attributes"]["keys"].index("avg_offset")
    bad_key["attributes"]["values"][at] = {"keys": [["f", "zz"]], "values": [1.0]}
    return {
        "an integer that is not a number": _edit_value(manifest, "_t", {"int": "abc"}),
        "a float that is not a number": _edit_value(manifest, "_b", {"float": "zz"}),
        "a float feature key that is not a number": _edit_value(manifest, "_u", bad_key),
        "an unknown key tag": _edit_value(manifest, "_prior", {"keys": [["q", 1]], "values": [1.0]}),
        "a manifest that is not a JSON object": [manifest],
        "a store without its attributes": with_model({"object": "SupportVectorStore", "attributes": empty}),
        "a learner without its attributes": with_model({"object": "PegasosClassifier", "attributes": empty}),
        "a model that is not a learner": with_model({"int": "5"}),
    }


CRAFTED = [
    "an integer that is not a number",
    "a float that is not a number",
    "a float feature key that is not a number",
    "an unknown key tag",
    "a manifest that is not a JSON object",
    "a store without its attributes",
    "a learner without its attributes",
    "a model that is not a learner",
]


@pytest.mark.parametrize("case", CRAFTED)
def test_a_checksummed_file_whose_state_cannot_be_rebuilt_is_refused(tmp_path, good_checkpoint, case):
    """Past the checksum (a crafted or foreign file): still a CheckpointError, so that
    ``latest_valid`` (and so ``run --resume``) falls back and ``inspect`` exits 2, rather than
    a ValueError / AttributeError escaping."""
    manifest, arrays = _unpack(good_checkpoint)
    directory = tmp_path / "checkpoints"
    directory.mkdir()
    shutil.copy(good_checkpoint, checkpoint_path(directory, 1))
    crafted = _repack(checkpoint_path(directory, 2), _crafted_cases(manifest)[case], arrays)
    with pytest.raises(CheckpointError) as refused:
        read_checkpoint(crafted)
    assert str(refused.value).startswith(f"{crafted}: ")
    skipped = []
    found = latest_valid(directory, report=skipped.append)
    assert found is not None and found[0] == checkpoint_path(directory, 1)
    assert len(skipped) == 1 and skipped[0].startswith(f"skipping {crafted}: ")


def _checksummed(path: Path, payload: bytes) -> Path:
    path.write_bytes(MAGIC + hashlib.sha256(payload).digest() + payload)
    return path


def _npy(shape: tuple, descr: str, data: bytes) -> bytes:
    """An .npy member: a header declaring ``shape`` and ``descr``, then ``data`` (whatever its size)."""
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {"descr": descr, "fortran_order": False, "shape": shape})
    return buffer.getvalue() + data


def _with_member(payload: bytes, name: str, member: bytes, compression: int = zipfile.ZIP_STORED) -> bytes:
    buffer = io.BytesIO(payload)
    with zipfile.ZipFile(buffer, "a", compression=compression) as archive:
        archive.writestr(name, member)
    return buffer.getvalue()


def _nested_manifest(levels: int) -> bytes:
    """A manifest whose state is ``levels`` lists deep, wrapped in "list" nodes."""
    head = b'{"format": "pegasos-stream checkpoint", "version": 1, "state": '
    return head + b'{"list": [' * levels + b"]}" * levels + b"}"


def _manifest_payload(manifest: bytes, arrays: dict[str, np.ndarray]) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, manifest=np.frombuffer(manifest, dtype=np.uint8), **arrays)
    return buffer.getvalue()


BOMB = 64 << 20  # bytes of zeros, deflated to about 64 kB
HUGE = 10**11  # elements claimed by a 64-byte member
MEMBER_CASES = {
    "array claiming 1e11 elements": (
        lambda payload, arrays: _with_member(payload, "huge.npy", _npy((HUGE,), "<f8", bytes(64))),
        f"unreadable payload: member huge.npy claims {8 * HUGE} bytes of data in 64",
    ),
    "array claiming fewer bytes than it holds": (
        lambda payload, arrays: _with_member(payload, "short.npy", _npy((2,), "<f8", bytes(64))),
        "unreadable payload: member short.npy claims 16 bytes of data in 64",
    ),
    "zip bomb": (
        lambda payload, arrays: _with_member(
            payload, "bomb.npy", _npy((BOMB,), "|u1", bytes(BOMB)), compression=zipfile.ZIP_DEFLATED
        ),
        "unreadable payload: its members declare ",
    ),
    "manifest nested 100000 deep": (
        lambda payload, arrays: _manifest_payload(_nested_manifest(100_000), arrays),
        "unreadable payload: ",
    ),
    "manifest nested 100 deep": (
        lambda payload, arrays: _manifest_payload(_nested_manifest(100), arrays),
        "the manifest nests deeper than 64 levels",
    ),
}


@pytest.mark.parametrize("case", MEMBER_CASES)
def test_members_claiming_more_than_the_file_holds_are_refused_before_reading(tmp_path, good_checkpoint, case):
    """Sizes are checked from the zip directory and the .npy headers before a member is read, and
    nesting before the state is rebuilt: a crafted newer checkpoint is refused, not a crash (a
    MemoryError, a RecursionError), and ``latest_valid`` falls back to the good one before it."""
    craft, reason = MEMBER_CASES[case]
    _, arrays = _unpack(good_checkpoint)
    directory = tmp_path / "checkpoints"
    directory.mkdir()
    shutil.copy(good_checkpoint, checkpoint_path(directory, 1))
    crafted = _checksummed(checkpoint_path(directory, 2), craft(good_checkpoint.read_bytes()[HEADER:], arrays))
    message = _refused(crafted, reason)
    skipped: list[str] = []
    found = latest_valid(directory, report=skipped.append)
    assert found is not None and found[0] == checkpoint_path(directory, 1)
    assert skipped == [f"skipping {message}"]


def test_latest_valid_falls_back_past_corrupt_files_newest_first(tmp_path, good_checkpoint):
    model = read_checkpoint(good_checkpoint)[0]["model"]
    runs = Checkpoints(tmp_path, keep=10)
    state = {"counts": [0, 0, 0, 0], "pending": [], "pending_counts": [0, 0, 0], "report": {}}
    paths = []
    for events in (100, 200, 300, 400):
        state["counts"][0] = events
        paths.append(runs.write(model, state, {"line": events}))
    assert paths == [checkpoint_path(tmp_path, n) for n in (1, 2, 3, 4)]
    assert checkpoints(tmp_path) == paths[::-1]
    # Files that are not checkpoints by name are not looked at.
    (tmp_path / ".tmp-half-written.pgs").write_bytes(b"partial")
    (tmp_path / "checkpoint-7.pgs").write_bytes(b"short number")
    (tmp_path / "notes.txt").write_text("hello")
    assert checkpoints(tmp_path) == paths[::-1]

    def newest(report):
        found = latest_valid(tmp_path, report=report.append)
        return found and (found[0], found[2]["events"])

    report: list[str] = []
    assert newest(report) == (paths[3], 400) and report == []

    paths[3].write_bytes(paths[3].read_bytes()[:-10])  # truncated
    report = []
    assert newest(report) == (paths[2], 300)
    assert report == [f"skipping {paths[3]}: {CHECKSUM}"]

    data = bytearray(paths[2].read_bytes())
    data[HEADER + 5] ^= 1  # one bit
    paths[2].write_bytes(bytes(data))
    report = []
    assert newest(report) == (paths[1], 200)
    assert report == [f"skipping {paths[3]}: {CHECKSUM}", f"skipping {paths[2]}: {CHECKSUM}"]

    for path in paths[:2]:
        path.write_bytes(b"")
    report = []
    assert latest_valid(tmp_path, report=report.append) is None
    assert report == [
        f"skipping {paths[3]}: {CHECKSUM}",
        f"skipping {paths[2]}: {CHECKSUM}",
        f"skipping {paths[1]}: {NOT_A_CHECKPOINT}",
        f"skipping {paths[0]}: {NOT_A_CHECKPOINT}",
    ]
    assert latest_valid(tmp_path / "no-such-dir") is None

    # A new writer numbers past every existing file, corrupt or not, and overwrites none of them.
    runs.close()  # one writer at a time: the directory is locked
    before = {p: p.read_bytes() for p in paths}
    again = Checkpoints(tmp_path, keep=10).write(model, state, {"line": 500})
    assert again == checkpoint_path(tmp_path, 5)
    assert {p: p.read_bytes() for p in paths} == before
    assert latest_valid(tmp_path)[0] == again


def test_keep_drops_the_oldest_files(tmp_path):
    writer = Checkpoints(tmp_path, every_events=10, keep=3)
    state = {"counts": [0, 0, 0, 0], "pending": [], "pending_counts": [0, 0, 0], "report": {}}
    model = PegasosClassifier()
    for events in range(10, 60, 10):
        state["counts"][0] = events
        writer.write(model, state, {})
    writer.close()  # removes the lock file
    assert checkpoints(tmp_path) == [checkpoint_path(tmp_path, n) for n in (5, 4, 3)]
    assert [n for n in os.listdir(tmp_path) if not n.startswith("checkpoint-")] == []  # no temporary files
    assert len(writer.pauses) == 5 and all(p > 0 for p in writer.pauses)
    writer.mark(50)
    assert not writer.due(59) and writer.due(60)


# -- 4. inspect ------------------------------------------------------------------------------


def _tiny_run(tmp_path: Path, model: dict, n: int = 120, features: dict | None = None) -> tuple[Path, dict]:
    """A real `run` (in process) over n events with checkpoints (``features``: dict features, as they come by
    default); returns (checkpoint dir, config)."""
    events = tmp_path / "events.jsonl"
    rng = random.Random(1)
    events.write_text(
        "".join(
            json.dumps({"id": i, "x": {"a": rng.gauss(0, 1), "b": rng.gauss(0, 1)}, "label": rng.random() < 0.5}) + "\n"
            for i in range(n)
        )
    )
    config = {
        "model": model,
        "features": features or {"type": "dict"},
        "source": {"type": "file", "path": str(events)},
        "output": {"type": "none"},
        "checkpoint": {"dir": str(tmp_path / "ck"), "every_events": 50, "keep": 3},
    }
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(config))
    assert cli.main(["run", "--config", str(job)]) == 0
    return tmp_path / "ck", load_config(job)


def test_inspect_prints_the_summary_of_a_file_and_of_a_directory(tmp_path, capsys):
    directory, config = _tiny_run(tmp_path, {"kind": "linear", "lambda_": 0.01, "average": True})
    capsys.readouterr()
    newest = checkpoints(directory)[0]
    events = newest.parent.parent / "events.jsonl"
    with open(events, "rb") as file:
        identity = FileHead(events).identity(file)
    state, manifest = read_checkpoint(newest)
    expected = {
        "path": str(newest),
        "format_version": 1,
        "config_sha256": config_hash(config),
        "learner": "PegasosClassifier",
        "t": 120,
        "weights": 2,
        "events": 120,
        "source": {
            "offset": events.stat().st_size,
            "line": 120,
            "input": identity,
        },
        "model_sha256": model_digest(state["model"]),
    }
    assert manifest["source"] == expected["source"]
    expected["source"] = manifest["source"]  # as stored (keys sorted), for the text form below
    assert cli.main(["inspect", str(newest), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == expected
    assert cli.main(["inspect", str(directory), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == expected
    assert cli.main(["inspect", str(directory)]) == 0
    text = capsys.readouterr().out
    rows = dict(line.strip().split(": ", 1) for line in text.splitlines())
    assert rows == {key: str(value) for key, value in expected.items()}
    for label in ("format_version", "config_sha256", "t", "weights", "source", "model_sha256"):
        assert label in rows


@pytest.mark.parametrize(
    "model, learners",
    [({"kind": "committee", "lambda_": 0.01}, 2), ({"kind": "mixture", "lambdas": [0.01, 0.1]}, 4)],
    ids=["committee", "mixture"],
)
def test_inspect_counts_the_weights_of_every_learner_of_a_committee_or_a_mixture(tmp_path, capsys, model, learners):
    directory, _ = _tiny_run(tmp_path, model)
    capsys.readouterr()
    assert cli.main(["inspect", str(directory), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["t"] == 120 and summary["weights"] == 2 * learners  # features "a" and "b" in each learner
    if model["kind"] == "mixture":
        members = summary["member_weights"]
        assert list(members) == [
            *("svm(0.01)+logistic(0.7)", "svm(0.01)+logistic(10)", "svm(0.01)"),
            *("svm(0.1)+logistic(0.7)", "svm(0.1)+logistic(10)", "svm(0.1)"),
            *("logistic(0.7)", "logistic(10)"),
        ]
        assert sum(members.values()) == pytest.approx(1.0)
    else:
        assert "member_weights" not in summary


def test_inspect_counts_support_vectors_of_a_kernel_model(tmp_path, capsys):
    directory, _ = _tiny_run(tmp_path, {"kind": "kernel", "gamma": 0.5, "lambda_": 0.01, "budget": 7})
    capsys.readouterr()
    assert cli.main(["inspect", str(directory), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["learner"] == "KernelPegasosClassifier"
    assert summary["support_vectors"] == 7 and "weights" not in summary
    # A model saved by model.save has no run around it: those fields are null.
    model = read_checkpoint(checkpoints(directory)[0])[0]["model"]
    save(model, tmp_path / "m.pgs")
    assert describe(tmp_path / "m.pgs") == {
        "path": str(tmp_path / "m.pgs"),
        "format_version": 1,
        "config_sha256": None,
        "learner": "KernelPegasosClassifier",
        "t": 120,
        "support_vectors": 7,
        "events": None,
        "source": None,
        "model_sha256": model_digest(model),
    }


@pytest.mark.parametrize(
    "model, features",
    [
        ({"kind": kind} if kind != "personal" else {"kind": kind, "shared": {"kind": "linear"}}, None)
        for kind in LEARNERS
    ]
    + [({"kind": "linear", "lambda_": 0.01, "n_features": 2**12}, {"type": "dict", "hash_bits": 12})],
    ids=[*LEARNERS, "linear-array"],
)
def test_inspect_summarises_every_kind_of_learner(tmp_path, capsys, model, features):
    """Each learner at its defaults (a linear one: lambda_="auto"), and a linear one with its weights in an
    array, as JSON and as text: the model's digest, its steps and its size."""
    directory, _ = _tiny_run(tmp_path, model, features=features)
    capsys.readouterr()
    assert cli.main(["inspect", str(directory), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    state, _ = read_checkpoint(summary["path"])
    assert summary["learner"] == LEARNERS[model["kind"]] == type(state["model"]).__name__
    assert summary["model_sha256"] == model_digest(state["model"]) and summary["t"] == 120
    assert summary.get("weights", summary.get("support_vectors", 0)) > 0
    assert cli.main(["inspect", summary["path"]]) == 0
    text = capsys.readouterr().out
    assert f"model_sha256: {summary['model_sha256']}" in text


def test_inspect_a_corrupt_file_exits_2_with_the_reason(tmp_path):
    directory, _ = _tiny_run(tmp_path, {"kind": "linear", "lambda_": 0.01})
    files = checkpoints(directory)
    newest = files[0]
    newest.write_bytes(newest.read_bytes()[:-1])
    done = subprocess.run([BIN, "inspect", str(newest)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr == f"error: {newest}: {CHECKSUM}\n"
    # The directory: the newest is skipped (and said so), the previous one summarised.
    done = subprocess.run([BIN, "inspect", str(directory), "--json"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stderr == f"skipping {newest}: {CHECKSUM}\n"
    assert json.loads(done.stdout)["path"] == str(files[1])
    # Every file corrupt: exit 2, each skip reported, then why.
    for path in files:
        path.write_bytes(b"\x00" * 10)
    done = subprocess.run([BIN, "inspect", str(directory)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [f"skipping {p}: {NOT_A_CHECKPOINT}" for p in files] + [
        f"error: {directory}: no valid checkpoint"
    ]
