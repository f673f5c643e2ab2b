"""Cluster learners without a broker: recorded steps, their replay, deltas and the fold of a delta log.

An in-process harness runs N learners, each with its own `ClusterSync`, over one `MemoryLog`: event k is
learned by learner k mod N (the partition it reads is its number). Synced after every event, the cluster
learns one process's model bit for bit; synced every B events, it learns what a dense "delayed Pegasos"
reference learns, whose learners test each margin on their own view and whose global model takes every
step in the order of the log.
"""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import DenseReference, y_sign
from streams import int_stream

from pegasos_stream import PegasosClassifier, cli
from pegasos_stream.cli.config import ConfigError, learning_hash, validate
from pegasos_stream.distribute.cluster import (
    NEW,
    ClusterState,
    ClusterSync,
    Delta,
    MemoryLog,
    decode_delta,
    encode_delta,
)
from pegasos_stream.kafka.offsets import Partition
from pegasos_stream.learners.batch import LearnBatch
from pegasos_stream.learners.rows import Rows
from pegasos_stream.learners.steps import StepLog, StepRecorder
from pegasos_stream.persist.checkpoint import model_digest

N_FEATURES = 16
VARIANTS = [
    {},
    {"fit_intercept": True, "lambda_": 1e-2},
    {"projection": True, "average": True},
    {"class_weight": "balanced", "horizon": 50, "t0": 100},
    {"class_weight": {True: 2.0, False: 0.5}, "fit_intercept": True, "average": 10},
]


def _model(**params) -> PegasosClassifier:
    return PegasosClassifier(n_features=N_FEATURES, **{"lambda_": 1e-3, **params})


def _stream(n: int, seed: int = 0):
    xs, ys, ws = int_stream(seed, n, N_FEATURES)
    return [{k: float(v) for k, v in x.items()} for x in xs], ys, ws


# -- recording and replaying steps -----------------------------------------------------------------


@pytest.mark.parametrize("params", VARIANTS)
@pytest.mark.parametrize("batched", [False, True])
def test_replayed_steps_give_back_the_model_bit_for_bit(params, batched):
    xs, ys, ws = _stream(300, seed=1)
    recorder = StepRecorder(_model(**params))
    if batched:
        rows = Rows.from_dicts(xs)
        signs = np.array([1.0 if y else -1.0 for y in ys])
        decisions, probas = np.empty(len(xs)), np.empty(len(xs))
        assert recorder.learn_rows(LearnBatch(rows, signs, np.array(ws), decisions, probas)) == (len(xs), None)
    else:
        for x, y, w in zip(xs, ys, ws):
            recorder.decision_function_one(x)
            recorder.learn_one(x, y, w)
    steps = recorder.cut()
    assert len(steps) == 300 and recorder.recorded == 0 and len(recorder.cut()) == 0

    replayed = _model(**params)
    replayed.replay(steps)
    assert model_digest(replayed) == model_digest(recorder.model)


def test_a_log_records_what_the_margin_test_saw():
    xs, ys, ws = _stream(200, seed=2)
    recorder, reference = StepRecorder(_model()), _model()
    for x, y, w in zip(xs, ys, ws):
        recorder.learn_one(x, y, w)
    steps = recorder.cut()
    for i, (x, y, w) in enumerate(zip(xs, ys, ws)):
        margin = reference.decision_function_one(x)
        assert steps.decisions[i] == margin and steps.signs[i] == y_sign(y) and steps.weights[i] == w
        assert steps.violated[i] == (y_sign(y) * margin < 1.0)
        reference.learn_one(x, y, w)
    violated_rows = [x for x, v in zip(xs, steps.violated) if v]
    assert steps.rows() == violated_rows
    assert steps.n_positive == sum(ys) and steps.n_negative == len(ys) - sum(ys)


def test_a_recorder_learns_nothing_it_refuses_and_records_nothing_of_it():
    recorder = StepRecorder(_model())
    with pytest.raises(ValueError, match="feature 'a'"):
        recorder.learn_one({"a": 1.0}, True)
    with pytest.raises(ValueError):
        recorder.learn_one({1: float("nan")}, True)
    assert recorder.t == 0 and recorder.recorded == 0
    with pytest.raises(ValueError, match="weights in arrays"):
        StepRecorder(PegasosClassifier())
    with pytest.raises(TypeError, match="learn_many"):
        recorder.learn_many(None, None)


def test_learn_rows_names_columns_through_the_rows_keys():
    """Rows numbered locally (keys: the weight columns they use) record the weight columns themselves."""
    xs, ys, _ = _stream(50, seed=3)
    rows = Rows.from_dicts(xs)  # keys: a list of the columns, in order of first use
    assert not isinstance(rows.keys, range)
    recorder = StepRecorder(_model())
    signs = np.array([1.0 if y else -1.0 for y in ys])
    recorder.learn_rows(LearnBatch(rows, signs, np.ones(50), np.empty(50), np.empty(0)))
    steps = recorder.cut()
    assert steps.rows() == [x for x, v in zip(xs, steps.violated) if v]


@settings(max_examples=30, deadline=None)
@given(
    n=st.integers(0, 60),
    seed=st.integers(0, 10_000),
    params=st.sampled_from(VARIANTS),
    cut=st.integers(0, 60),
)
def test_replay_in_pieces_is_replay_at_once(n, seed, params, cut):
    """Folding a log cut anywhere into two deltas gives the model one log gives (the order is all that counts)."""
    xs, ys, ws = _stream(n, seed)
    recorder = StepRecorder(_model(**params))
    for i, (x, y, w) in enumerate(zip(xs, ys, ws)):
        if i == min(cut, n):
            first = recorder.cut()
        recorder.learn_one(x, y, w)
    if cut >= n:
        first = recorder.cut()
    second = recorder.cut()
    pieces = _model(**params)
    pieces.replay(first)
    pieces.replay(second)
    assert model_digest(pieces) == model_digest(recorder.model)


# -- deltas: bytes and folds ------------------------------------------------------------------------


def _delta(learner="a", sequence=1, ranges=None, n=20, config="c") -> Delta:
    xs, ys, ws = _stream(n, seed=sequence)
    recorder = StepRecorder(_model())
    for x, y, w in zip(xs, ys, ws):
        recorder.learn_one(x, y, w)
    return Delta(learner, sequence, config, ranges or {Partition("in", 0): (0, n)}, recorder.cut())


def test_a_delta_survives_its_bytes():
    delta = _delta(ranges={Partition("in", 0): (NEW, 7), Partition("in", 3): (5, 18)})
    back = decode_delta(encode_delta(delta))
    assert (back.learner, back.sequence, back.config, back.ranges) == ("a", 1, "c", delta.ranges)
    for name, array in delta.steps.arrays().items():
        assert np.array_equal(getattr(back.steps, name), array)
    assert back.events == 20


def test_rows_of_equal_values_go_as_one_value_each():
    """Binary features of unit length (the spam features): every row's values are equal, and a delta holds one
    value a row instead of one a non-zero; it comes back the same."""
    recorder = StepRecorder(_model(), every_row=True)
    for i in range(30):
        columns = [(i * 7 + j) % N_FEATURES for j in range(i % 5)]  # (a row without features, every fifth)
        recorder.learn_one({c: 1.0 / max(1, len(columns)) ** 0.5 for c in columns}, i % 3 == 0)
    delta = Delta("a", 1, "c", {Partition("in", 0): (0, 30)}, recorder.cut())
    data = encode_delta(delta)
    assert b'"constant_rows": true' in data
    back = decode_delta(data)
    for name, array in delta.steps.arrays().items():
        assert np.array_equal(getattr(back.steps, name), array)
    arrays = delta.steps.arrays()
    arrays["data"] = arrays["data"].copy()
    arrays["data"][-1] *= 2  # one value of a row differs: the values go one a non-zero
    varied = encode_delta(Delta("a", 1, "c", delta.ranges, StepLog.from_arrays(arrays, every_row=True)))
    assert b'"constant_rows": false' in varied
    saved = 8 * (len(arrays["data"]) - int((np.diff(arrays["indptr"]) > 0).sum()))
    assert len(varied) - len(data) == saved + len("false") - len("true")  # (and the header's word)
    with pytest.raises(ValueError, match="rows' values do not match its rows"):
        decode_delta(varied.replace(b'"constant_rows": false', b'"constant_rows": true '))


@pytest.mark.parametrize(
    ("mangle", "message"),
    [
        (lambda data: b"nonsense", "not a delta"),
        (lambda data: data[:-8], "runs past its end"),
        (lambda data: data + b"\0", "follow its arrays"),
        (lambda data: data.replace(b'"learner"', b'"learnxr"'), "malformed delta header"),
    ],
)
def test_bytes_that_are_no_delta_are_refused_by_name(mangle, message):
    with pytest.raises(ValueError, match=message):
        decode_delta(mangle(encode_delta(_delta())))


def test_a_delta_is_folded_only_where_the_cluster_left_its_partitions():
    state = ClusterState(_model())
    first = _delta("a", 1, {Partition("in", 0): (NEW, 20)})
    assert state.fold(first, "c") is None
    assert state.covered == {("in", 0): 20} and state.model.t == 20
    # the same delta again (a record delivered twice), or a learner's older delta
    assert "repeats delta 1 of learner a" in state.fold(first, "c")
    # another learner that read the partition from where the cluster was before
    assert "starts in/0 at 10, where the cluster has learned up to 20" in state.fold(
        _delta("b", 1, {Partition("in", 0): (10, 30)}), "c"
    )
    assert "another configuration" in state.fold(_delta("b", 1, {Partition("in", 0): (20, 40)}, config="d"), "c")
    assert state.model.t == 20 and state.folded == 1
    # a delta covering several partitions is folded whole or not at all
    both = _delta("b", 2, {Partition("in", 0): (20, 40), Partition("in", 1): (NEW, 5)})
    assert state.fold(both, "c") is None
    assert state.covered == {("in", 0): 40, ("in", 1): 5} and state.model.t == 40
    assert "starts in/1 at" in state.fold(_delta("a", 2, {Partition("in", 1): (NEW, 9)}), "c")
    # a delta whose arrays a learner could not have recorded is not folded, and changes nothing
    for name, change, reason in [
        ("indices", N_FEATURES, "columns outside the model's 16"),
        ("indices", -N_FEATURES, "columns outside"),
        ("data", np.nan, "not finite numbers"),
        ("weights", -2.0, "weights >= 0"),
    ]:
        bad = _delta("c", 1, {Partition("in", 2): (NEW, 20)})
        arrays = bad.steps.arrays()
        arrays[name] = arrays[name] + change
        bad.steps = StepLog.from_arrays(arrays)
        assert reason in state.fold(bad, "c")
    assert state.model.t == 40 and state.folded == 2


# -- the in-process cluster --------------------------------------------------------------------------


def _position(offsets: dict[Partition, int]) -> dict:
    return {"offsets": [[t, p, o] for (t, p), o in sorted(offsets.items())]}


class Harness:
    """N learners over one memory log; learner i reads partition i."""

    def __init__(self, n: int, every: int, every_row: bool = False, **params) -> None:
        self.log = MemoryLog()
        self.offsets: list[dict[Partition, int]] = [{} for _ in range(n)]
        self.events = [0] * n
        self.syncs = [
            ClusterSync(
                StepRecorder(_model(**params), every_row),
                ClusterState(_model(**params)),
                self.log.channel(),
                f"learner-{i}",
                "config",
                every_events=every,
                every_ms=None,
            )
            for i in range(n)
        ]

    def learn(self, i: int, x: dict, y: bool, w: float) -> None:
        sync = self.syncs[i]
        sync.recorder.decision_function_one(x)
        sync.recorder.learn_one(x, y, w)
        partition = Partition("in", i)
        self.offsets[i][partition] = self.offsets[i].get(partition, 0) + 1
        self.events[i] += 1

    def sync(self, i: int) -> None:
        self.syncs[i].write(None, {"counts": [self.events[i], 0, 0, 0]}, _position(self.offsets[i]))


@pytest.mark.parametrize("params", VARIANTS)
@pytest.mark.parametrize("n", [1, 2, 3])
def test_a_cluster_synced_after_every_event_learns_one_process_model_bit_for_bit(params, n):
    xs, ys, ws = _stream(240, seed=4)
    single = _model(**params)
    for x, y, w in zip(xs, ys, ws):
        single.decision_function_one(x)
        single.learn_one(x, y, w)

    cluster = Harness(n, every=1, **params)
    for k, (x, y, w) in enumerate(zip(xs, ys, ws)):
        cluster.learn(k % n, x, y, w)
        for i in range(n):  # the learner first, then the others fold its delta
            cluster.sync((k + i) % n)
    for sync in cluster.syncs:
        assert model_digest(sync.state.model) == model_digest(single)
        assert model_digest(sync.recorder.model) == model_digest(single)
        assert sync.state.model.t == 240


@pytest.mark.parametrize("params", VARIANTS)
def test_one_learner_syncing_every_b_events_learns_one_process_model_bit_for_bit(params):
    xs, ys, ws = _stream(500, seed=5)
    single = _model(**params)
    for x, y, w in zip(xs, ys, ws):
        single.learn_one(x, y, w)
    cluster = Harness(1, every=64, **params)
    for k, (x, y, w) in enumerate(zip(xs, ys, ws)):
        cluster.learn(0, x, y, w)
        if (k + 1) % 64 == 0:
            cluster.sync(0)
    cluster.sync(0)
    assert model_digest(cluster.syncs[0].state.model) == model_digest(single)


@pytest.mark.parametrize("params", VARIANTS)
@pytest.mark.parametrize(("n", "every"), [(2, 10), (3, 7)])
def test_a_sequential_cluster_learns_one_process_model_of_the_log_order_bit_for_bit(params, n, every):
    """With the sequential merge, the cluster's model is the model one process learns from the events in the order
    their deltas reached the log, whatever each learner's own tests saw."""
    xs, ys, ws = _stream(400, seed=9)
    cluster = Harness(n, every=every, every_row=True, **params)
    pending: list[list[int]] = [[] for _ in range(n)]
    order: list[int] = []
    for k, (x, y, w) in enumerate(zip(xs, ys, ws)):
        i = k % n
        cluster.learn(i, x, y, w)
        pending[i].append(k)
        if cluster.events[i] % every == 0:
            cluster.sync(i)
            order += pending[i]
            pending[i] = []
    for i in range(n):
        cluster.sync(i)
        order += pending[i]
    for i in range(n):
        cluster.sync(i)
    single = _model(**params)
    for k in order:
        single.learn_one(xs[k], ys[k], ws[k])
    assert {model_digest(sync.state.model) for sync in cluster.syncs} == {model_digest(single)}


@pytest.mark.parametrize("params", VARIANTS)
def test_a_log_of_every_example_replays_as_its_violated_steps_do(params):
    xs, ys, ws = _stream(200, seed=10)
    every, violated = StepRecorder(_model(**params), every_row=True), StepRecorder(_model(**params))
    for recorder in (every, violated):
        for x, y, w in zip(xs, ys, ws):
            recorder.learn_one(x, y, w)
    complete = every.cut()
    assert complete.every_row and len(complete.rows()) == 200
    assert decode_delta(encode_delta(Delta("a", 1, "c", {}, complete))).steps.every_row
    replayed, expected = _model(**params), _model(**params)
    replayed.replay(complete)
    expected.replay(violated.cut())
    assert model_digest(replayed) == model_digest(expected) == model_digest(every.model)


class DelayedPegasos:
    """Dense "delayed Pegasos": each learner tests margins on its own view (the global model at its last sync,
    plus its own steps since); the global model takes every learner's steps at a sync, in the order of the syncs,
    with the test each learner made. Plain Pegasos with a bias: w ← (1 − 1/t)·w + (1/(λt))·y·x, b += y/(λt)."""

    def __init__(self, n: int, lambda_: float) -> None:
        self.lambda_ = lambda_
        self.global_ = DenseReference({j: j for j in range(N_FEATURES)}, lambda_, fit_intercept=True)
        self.views = [copy.deepcopy(self.global_) for _ in range(n)]
        self.pending: list[list[tuple[dict, int, bool]]] = [[] for _ in range(n)]

    def learn(self, i: int, x: dict, y: bool) -> None:
        margin = self.views[i].learn_one(x, y)
        self.pending[i].append((x, y_sign(y), margin < 1.0))

    def sync(self, i: int) -> None:
        g = self.global_
        for x, s, violated in self.pending[i]:
            g.t += 1
            eta = 1.0 / (self.lambda_ * g.t)
            g.u = (1.0 - 1.0 / g.t) * g.u
            if violated:
                g.u = g.u + eta * s * g.vec(x)
                g.b = g.b + eta * s
        self.pending[i] = []
        self.views[i] = copy.deepcopy(g)


@pytest.mark.parametrize(("n", "every"), [(2, 10), (3, 7), (4, 25)])
def test_a_cluster_syncing_every_b_events_learns_delayed_pegasos(n, every):
    xs, ys, _ = _stream(600, seed=6)
    reference = DelayedPegasos(n, lambda_=1e-2)
    cluster = Harness(n, every=every, lambda_=1e-2, fit_intercept=True)
    for k, (x, y) in enumerate(zip(xs, ys)):
        i = k % n
        reference.learn(i, x, y)
        cluster.learn(i, x, y, 1.0)
        if cluster.events[i] % every == 0:
            reference.sync(i)
            cluster.sync(i)
    for i in range(n):
        reference.sync(i)
        cluster.sync(i)
    for i in range(n):  # every learner folds the deltas sent after its last sync
        cluster.sync(i)
    merged = cluster.syncs[0].state.model
    assert merged.t == 600
    expected = reference.global_
    weights = merged.weights
    got = np.array([weights.get(j, 0.0) for j in range(N_FEATURES)])
    np.testing.assert_allclose(got, expected.u, rtol=1e-9, atol=1e-9 * max(1.0, np.abs(expected.u).max()))
    assert merged.intercept == pytest.approx(expected.b, rel=1e-9, abs=1e-12)
    digests = {model_digest(sync.state.model) for sync in cluster.syncs}
    assert len(digests) == 1


def test_a_refused_delta_takes_the_learners_partitions_back_where_the_cluster_left_them():
    """Two learners read the same partition (a rebalance seen late): the second delta to reach the log is not
    folded, and its learner seeks back to the cluster's offset and relearns from there."""
    log = MemoryLog()
    sought: list[dict] = []
    xs, ys, ws = _stream(30, seed=7)
    a = ClusterSync(StepRecorder(_model()), ClusterState(_model()), log.channel(), "a", "c", None, None)
    b = ClusterSync(
        StepRecorder(_model()),
        ClusterState(_model()),
        log.channel(),
        "b",
        "c",
        None,
        None,
        seek=sought.append,
        assigned=lambda: {Partition("in", 0)},
    )
    for x, y, w in zip(xs[:20], ys[:20], ws[:20]):
        a.recorder.learn_one(x, y, w)
    for x, y, w in zip(xs[:10], ys[:10], ws[:10]):
        b.recorder.learn_one(x, y, w)
    a.write(None, {"counts": [20, 0, 0, 0]}, _position({Partition("in", 0): 20}))
    b.write(None, {"counts": [10, 0, 0, 0]}, _position({Partition("in", 0): 10}))
    assert sought == [{("in", 0): 20}] and b.refused == 1
    assert b.state.model.t == a.state.model.t == 20
    assert model_digest(b.recorder.model) == model_digest(a.state.model)  # its own steps are dropped
    # from there on, b's deltas start where the cluster left the partition
    for x, y, w in zip(xs[20:], ys[20:], ws[20:]):
        b.recorder.learn_one(x, y, w)
    b.write(None, {"counts": [20, 0, 0, 0]}, _position({Partition("in", 0): 30}))
    assert b.refused == 1 and b.state.covered == {("in", 0): 30} and b.state.model.t == 30


def test_an_assignment_starts_partitions_where_the_cluster_left_them():
    log = MemoryLog()
    a = ClusterSync(StepRecorder(_model()), ClusterState(_model()), log.channel(), "a", "c", None, None)
    b = ClusterSync(StepRecorder(_model()), ClusterState(_model()), log.channel(), "b", "c", None, None)
    xs, ys, ws = _stream(12, seed=8)
    for x, y, w in zip(xs, ys, ws):
        a.recorder.learn_one(x, y, w)
    a.write(None, {"counts": [12, 0, 0, 0]}, _position({Partition("in", 0): 112, Partition("in", 1): 3}))
    assert b.assigned({Partition("in", 0), Partition("in", 2)}) == {("in", 0): 112}
    assert b.state.model.t == 12


def test_steplog_from_arrays_refuses_inconsistent_arrays():
    good = _delta().steps.arrays()
    with pytest.raises(ValueError, match="differ in length"):
        StepLog.from_arrays({**good, "weights": good["weights"][:-1]})
    with pytest.raises(ValueError, match="one row per violated step"):
        StepLog.from_arrays({**good, "indptr": good["indptr"][:-1]})
    with pytest.raises(ValueError, match="do not match"):
        StepLog.from_arrays({**good, "data": good["data"][:-1]})
    with pytest.raises(ValueError, match="signs"):
        StepLog.from_arrays({**good, "signs": good["signs"] * 2})


# -- the cluster section of a configuration -----------------------------------------------------------


def _cluster_config(**changes) -> dict:
    config = {
        "model": {"kind": "linear", "lambda_": 0.01},
        "features": {"type": "dict", "hash_bits": 10},
        "source": {"type": "kafka", "topics": ["events"], "group_id": "learners"},
        "cluster": {"delta_topic": "deltas"},
    }
    for section, value in changes.items():
        config[section] = {**config.get(section, {}), **value}
    return config


def test_a_cluster_configuration_validates_and_leaves_the_job_hash_alone():
    config = validate(_cluster_config())
    assert config["cluster"]["sync_every_events"] == 1000 and config["cluster"]["sync_every_ms"] == 1000.0
    alone = validate(
        {key: value for key, value in _cluster_config().items() if key != "cluster"} | {"checkpoint": {"dir": "ck"}}
    )
    assert learning_hash(config) == learning_hash(alone)
    other = validate(_cluster_config(model={"lambda_": 0.02}))
    assert learning_hash(other) != learning_hash(config)
    assert learning_hash(validate(_cluster_config(output={"type": "stdout"}))) == learning_hash(config)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"source": {"type": "stdin"}}, "source.type must be kafka"),
        ({"checkpoint": {"dir": "ck"}}, "checkpoint.dir must not be set"),
        ({"model": {"kind": "kernel"}}, "model.kind must be linear, not kernel"),
        ({"features": {"hash_bits": None}}, "set features.hash_bits"),
    ],
)
def test_a_cluster_configuration_that_cannot_work_is_refused_by_name(changes, message):
    with pytest.raises(ConfigError, match=message):
        validate(_cluster_config(**changes))


def test_a_cluster_learner_does_not_resume_from_checkpoints(tmp_path, capsys):
    job = tmp_path / "job.yaml"
    job.write_text(json.dumps(_cluster_config()))
    assert cli.main(["run", "--config", str(job), "--resume"]) == 2
    assert "--resume: a cluster learner (cluster.delta_topic) always starts" in capsys.readouterr().err
