"""The compiled replay path gives what one record at a time gives, bit for bit.

``PegasosClassifier.learn_csr``/``learn_rows`` against a ``learn_one`` loop (every variant, rare
branches included), the C svmlight parser against the Python one, and the runner's batches against
its record-by-record loop.
"""

from __future__ import annotations

import json
import math
import pickle
import random
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from pegasos_stream import PegasosClassifier, cli
from pegasos_stream.checkpoint import checkpoints, model_digest, read_checkpoint
from pegasos_stream.events import BadRecord, EventParser, Record
from pegasos_stream.rows import Rows, parse_svmlight

PARAMS = st.fixed_dictionaries(
    {},
    optional={
        "lambda_": st.sampled_from([1e-4, 1e-2, 0.3, 2.0]),
        "fit_intercept": st.booleans(),
        "projection": st.booleans(),
        "average": st.sampled_from([False, True, 1, 7, 40]),
        "class_weight": st.sampled_from([None, "balanced", {True: 3.0, False: 0.5}]),
        "prior": st.sampled_from([None, {0: 0.5, 3: -1.0, 9: 0.25}]),
        "horizon": st.sampled_from([None, 1, 2, 5, 30]),  # small horizons fold the scale often
    },
)


def _stream(seed: int, n: int, n_features: int) -> tuple[list[dict], list[bool], list[float]]:
    rng = random.Random(seed)
    xs, ys, ws = [], [], []
    for _ in range(n):
        keys = rng.sample(range(n_features), rng.randint(0, min(6, n_features)))
        xs.append({k: rng.choice([1, rng.gauss(0, 3), rng.uniform(-1e3, 1e3)]) for k in keys})
        ys.append(rng.random() < 0.4)
        ws.append(rng.choice([1.0, 1.0, 0.0, 2.5]))
    return xs, ys, ws


def _csr(xs: list[dict]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    indptr = np.cumsum([0] + [len(x) for x in xs])
    indices = np.array([k for x in xs for k in x], dtype=np.int64)
    data = np.array([float(v) for x in xs for v in x.values()])
    return indptr, indices, data


def _one_at_a_time(params: dict, xs, ys, ws) -> tuple[PegasosClassifier, list[float]]:
    model = PegasosClassifier(**params)
    decisions = []
    for x, y, w in zip(xs, ys, ws):
        decisions.append(model.decision_function_one(x))
        model.learn_one(x, y, w)
    return model, decisions


@settings(max_examples=120, deadline=None)
@given(params=PARAMS, seed=st.integers(0, 10**6), n=st.integers(0, 120), chunk=st.integers(1, 60))
def test_learn_csr_is_bit_identical_to_learn_one(params, seed, n, chunk):
    xs, ys, ws = _stream(seed, n, 12)
    reference, expected = _one_at_a_time(params, xs, ys, ws)
    model = PegasosClassifier(**params)
    indptr, indices, data = _csr(xs)
    decisions = [
        model.learn_csr(indptr[s : s + chunk + 1], indices, data, ys[s : s + chunk], sample_weight=ws[s : s + chunk])
        for s in range(0, n, chunk)
    ]
    assert np.concatenate(decisions or [np.empty(0)]).tolist() == expected
    assert pickle.dumps(model) == pickle.dumps(reference)  # every float, count and dict order
    assert model_digest(model) == model_digest(reference)


def test_learn_csr_names_columns_and_takes_any_label_form():
    xs, ys, _ = _stream(3, 200, 8)
    names = [f"w{j}" for j in range(8)]
    reference, expected = _one_at_a_time({}, [{names[k]: v for k, v in x.items()} for x in xs], ys, [1.0] * 200)
    model = PegasosClassifier()
    labels = np.where(ys, 1, -1)  # ±1 ints, as svmlight gives them
    decisions = model.learn_csr(*_csr(xs), labels, columns=names)
    assert decisions.tolist() == expected
    assert pickle.dumps(model) == pickle.dumps(reference)


def test_a_refused_row_stops_learn_csr_after_the_rows_before_it():
    xs = [{0: 1.0}, {1: -2.0}, {0: 1e139, 1: 1e139}, {1: 1.0}]
    ys = [True, False, False, True]
    model = PegasosClassifier(lambda_=1e-4)
    with pytest.raises(ValueError, match=r"^row 2: the update would take the norm"):
        model.learn_csr(*_csr(xs), ys)
    reference, _ = _one_at_a_time({"lambda_": 1e-4}, xs[:2], ys[:2], [1.0, 1.0])
    assert pickle.dumps(model) == pickle.dumps(reference)

    with pytest.raises(ValueError, match=r"^row 0: feature 1 has value nan"):
        PegasosClassifier().learn_csr(*_csr([{0: 1.0, 1: math.nan}]), [True])


def test_learn_rows_stops_at_a_refused_row_and_resumes_after_it():
    xs = [{"a": 1.0}, {"a": 1e139, "b": 1e139}, {"b": 1.0}]
    rows, signs = Rows.from_dicts(xs), np.array([1.0, -1.0, -1.0])
    model = PegasosClassifier()
    decisions, probas = np.empty(3), np.empty(3)
    stop, error = model.learn_rows(rows, signs, np.ones(3), decisions, probas)
    assert stop == 1 and "norm of the weights" in str(error)
    assert model.learn_rows(rows, signs, np.ones(3), decisions, probas, start=2) == (3, None)
    reference = PegasosClassifier()
    for index, (x, y) in enumerate([(xs[0], True), (xs[2], False)]):
        decision = reference.decision_function_one(x)
        assert (decisions[2 * index], probas[2 * index]) == (decision, reference.probability(decision))
        reference.learn_one(x, y)
    assert pickle.dumps(model) == pickle.dumps(reference)


# -- the svmlight parser ---------------------------------------------------------------------

TOKENS = st.sampled_from(
    ["1:0.5", "2:1", "3:-2e-3", "10:.5", "007:1", "a:1", "x_1:2.5", "3:1", "qid:4", "4:1_0", "5:inf", "6:nan",
     "7:1e400", ":1", "8:", "9:1:2", "é:1", "0:0", "12345678:1", "5:+1.", "6:0x1p3", "\t", "\x0c", "\x1f"]
)  # fmt: skip
LABELS = st.sampled_from(["+1", "-1", "1", "0", "1.0", "-0", "2", "abc", "1e0", "+1_0", ""])


@settings(max_examples=400, deadline=None)
@given(label=LABELS, tokens=st.lists(TOKENS, max_size=6), comment=st.sampled_from(["", " # c", "#x:1", " # ü"]))
def test_the_c_svmlight_parser_agrees_with_the_python_one(label, tokens, comment):
    line = (" ".join([label, *tokens]) + comment).encode("utf-8")
    status, rows, signs = parse_svmlight([line], max_bytes=1000)
    try:
        event = EventParser("svmlight").parse(Record(line, "f:1"))
    except BadRecord:
        event = "bad"
    if status[0] == 0:
        assert event != "bad" and event is not None
        assert rows.row(0) == event.x and list(rows.row(0)) == list(event.x)
        assert signs[0] == (1.0 if event.label else -1.0)
    elif status[0] == 1:
        assert event is None
    plain = all(t in ("1:0.5", "2:1", "3:-2e-3", "10:.5", "007:1", "a:1", "x_1:2.5", "0:0") for t in tokens)
    distinct = len({t.split(":")[0] for t in tokens}) == len(tokens)
    if label in ("+1", "-1", "1", "0", "1.0", "-0", "1e0") and plain and distinct and comment.isascii():
        assert status[0] == 0  # the common case takes the compiled path


def test_long_lines_go_to_the_python_parser():
    status, rows, _ = parse_svmlight([b"+1 1:1 2:1", b"-1 " + b"3:1 " * 100], max_bytes=50)
    assert status.tolist() == [0, 2] and len(rows) == 1


# -- the runner ------------------------------------------------------------------------------


def _eval(tmp_path: Path, log: Path, fmt: str, batch_size: int, tag: str) -> tuple[list, list, list]:
    """Run a job over ``log``: (each checkpoint's events, model digest and runner state; the
    predictions; the positions of the rejected records)."""
    out, dead, directory = tmp_path / f"pred-{tag}.jsonl", tmp_path / f"dead-{tag}.jsonl", tmp_path / f"ck-{tag}"
    config = {
        "model": {"kind": "linear", "lambda_": 0.05, "fit_intercept": True, "average": 25},
        "features": {"type": "dict"},
        "source": {"type": "file", "path": str(log), "format": fmt, "max_bytes": 400},
        "output": {"type": "file", "path": str(out)},
        "errors": {"on_error": "skip", "dead_letter": {"type": "file", "path": str(dead)}},
        "run": {"batch_size": batch_size},
        "checkpoint": {"dir": str(directory), "every_events": 37, "keep": 100},
    }
    path = tmp_path / f"job-{tag}.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    assert cli.main(["run", "--config", str(path)]) == 0
    states = []
    for checkpoint in sorted(checkpoints(directory)):
        state, manifest = read_checkpoint(checkpoint)
        runner = state["runner"]
        runner["pending"] = [entry[:3] for entry in runner["pending"]]  # without its age, a wall-clock reading
        states.append((manifest["events"], manifest["source"], model_digest(state["model"]), runner))
    predictions = [json.loads(line) for line in out.read_text().splitlines()]
    rejected = [json.loads(line)["position"] for line in dead.read_text().splitlines()] if dead.exists() else []
    return states, predictions, rejected


def _svmlight_log(n: int) -> list[bytes]:
    rng = random.Random(5)
    lines = []
    for i in range(n):
        pairs = " ".join(f"{j}:{rng.gauss(0, 1):.4g}" for j in sorted(rng.sample(range(1, 30), 4)))
        lines.append(f"{rng.choice(['+1', '-1', '0'])} {pairs}".encode())
        if i % 23 == 5:
            lines.append(rng.choice([b"# a comment", b"+1 1:nan", b"3 1:1", b"+1 1:1_0 2:1", b"-1 4:1 4:2",
                                     b"+1 2:\xff", b"", b"+1 " + b"9:1 " * 200, b"-1 1:1e200 2:1e200 # huge"]))  # fmt: skip
    return lines


def _json_log(n: int) -> list[bytes]:
    rng = random.Random(6)
    lines = []
    for i in range(n):
        event = {"id": f"e{i}", "x": {f"f{j}": rng.gauss(0, 1) for j in rng.sample(range(30), 4)}}
        if i % 17 != 3:  # some wait for a delayed label
            event["label"] = rng.random() < 0.5
        lines.append(json.dumps(event).encode())
        if i % 17 == 9:
            lines.append(json.dumps({"id": f"e{i - 6}", "label": True}).encode())
        if i % 29 == 11:
            lines.append(rng.choice([b"{bad json", b'{"id": 1, "x": {"a": "b"}, "label": true}', b'{"x": {}, "label": 7}']))
    return lines


@pytest.mark.parametrize("fmt", ["svmlight", "json"])
def test_the_runner_batches_give_what_one_record_at_a_time_gives(tmp_path, fmt):
    lines = _svmlight_log(400) if fmt == "svmlight" else _json_log(400)
    log = tmp_path / "log"
    log.write_bytes(b"\n".join(lines) + b"\n")
    one = _eval(tmp_path, log, fmt, 0, "one")
    assert len(one[0]) > 10 and len(one[2]) > 3
    for size in (1 << 14, 50):
        batched = _eval(tmp_path, log, fmt, size, f"b{size}")
        assert batched[0] == one[0]  # every checkpoint: events, source position, model, counts, metrics
        assert batched[1] == one[1]  # every prediction, in order
        assert batched[2] == one[2]  # the same records rejected
