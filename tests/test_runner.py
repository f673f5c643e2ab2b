"""The stream runner end to end: the CLI, bad records, delayed labels, stdin and signals, replays."""

from __future__ import annotations

import base64
import functools
import gc
import gzip
import io
import json
import math
import os
import pty
import random
import re
import selectors
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from pegasos_stream import PegasosClassifier, PegasosMulticlass, cli
from pegasos_stream.cli.assemble import build_runner, build_source
from pegasos_stream.cli.config import load_config, shipped_configs
from pegasos_stream.cli.main import process_wide
from pegasos_stream.features import EmailFeatures
from pegasos_stream.io.records import Record, RecordBatch
from pegasos_stream.io.sinks import JsonLinesSink
from pegasos_stream.learners.calibration import OnlinePlatt
from pegasos_stream.persist.checkpoint import Checkpoints, latest_valid, model_digest
from pegasos_stream.run.evaluation import BinaryReport
from pegasos_stream.run.pending import PendingLabels
from pegasos_stream.run.rejections import StopRun

try:  # tests/ as a package
    from .streams import binary_events, jsonl
except ImportError:  # tests/ as a plain directory: pytest puts it on sys.path
    from streams import binary_events, jsonl
from pegasos_stream.io.sources import FileSource, Source
from pegasos_stream.parse import batches

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "pegasos_stream" / "data" / "spam-sample.jsonl.gz"
SPAM_CONFIG = ROOT / "configs" / "spam.yaml"
BIN = shutil.which("pegasos-stream", path=str(Path(sys.executable).parent)) or shutil.which("pegasos-stream")


# -- helpers -------------------------------------------------------------------------------


def _write_lines(path: Path, lines: list[bytes]) -> Path:
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return path


def _write_config(path: Path, config: dict) -> Path:
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def _in_process(config: dict, source=None, max_events=None):
    """Run a runner built from ``config`` over its source; returns the runner."""
    runner = build_runner(config)
    source = source or build_source(config)
    try:
        runner.run(source, max_events)
    finally:
        source.close()
        runner.sink.close()
        if runner.dead_letters is not None:
            runner.dead_letters.close()
    return runner


def _readjsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _summary(stderr: str) -> dict:
    """The run summary: the last line of stderr, one JSON object."""
    return json.loads(stderr.strip().splitlines()[-1])


def _f1(tp, fp, fn):
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    return 2 * precision * recall / (precision + recall) if precision + recall else 0.0


def _pairwise_auc(scores, positives) -> float:
    """AUC by counting ordered (positive, negative) pairs, ties one half."""
    pos = [s for s, p in zip(scores, positives) if p]
    neg = [s for s, p in zip(scores, positives) if not p]
    wins = sum((sp > sn) + 0.5 * (sp == sn) for sp in pos for sn in neg)
    return wins / (len(pos) * len(neg))


@functools.lru_cache(maxsize=1)
def _spam_prequential():
    """A hand-written prequential loop over the bundled sample, as configs/spam.yaml describes it: Pegasos for
    λ = 1e-5, a logistic regression with AdaGrad's steps (η = 0.7, ε = 1e-6), Pegasos on the logistic loss
    (λ = 1e-5, t0 = 5623) and the hinge loss by normalized adaptive steps (η = 4) written out here; the members
    (the SVM plus the logistic regression, the SVM alone, the logistic regression alone, the logistic Pegasos, the
    normalized hinge) calibrated by their Platt scaling and mixed by weights multiplied by each member's probability
    of the label, normalised, then shared: π ← (1 − α)π + α/5 with α = 8/(t + 16) after the t-th message."""
    features = EmailFeatures(
        reader="bytes", char_ngram=4, words=True, shapes=True, max_chars=3000, binary=True, normalize=True, hash_bits=19
    )
    svms = [PegasosClassifier(lambda_=1e-5, t0=30000)]
    logistics = [(0.7, 1e-6, {}, {})]  # (η, ε, weights, ε plus the sum of squared gradients)
    scale, unscaled = 1.0, {}  # the logistic Pegasos's weights, scale·unscaled
    hinge, hinge_squares, hinge_scales = {}, {}, {}  # the normalized hinge's w, G and N
    platts = [OnlinePlatt() for _ in range(5)]
    mix = [1.0 / 5] * 5
    rows = []
    with gzip.open(SAMPLE, "rt", encoding="utf-8") as lines:
        for line in lines:
            event = json.loads(line)
            x = features.transform_one(event["text"])
            logistic = [
                sum(weights.get(key, 0.0) * value for key, value in x.items()) for _, _, weights, _ in logistics
            ]
            margins = []
            for svm in svms:
                margins += [svm.decision_function_one(x) + other for other in logistic] + [svm.decision_function_one(x)]
            pegasos_logistic = scale * sum(unscaled.get(key, 0.0) * value for key, value in x.items())
            hinge_margin = sum(hinge.get(key, 0.0) * value for key, value in x.items())
            margins += [*logistic, pegasos_logistic, hinge_margin]
            probas = [platt.proba(margin) for platt, margin in zip(platts, margins)]
            p = sum(w * q for w, q in zip(mix, probas))
            not_p = sum(w * (1.0 - q) for w, q in zip(mix, probas))
            positive = event["label"] == "spam"
            rows.append((event["id"], math.log(p) - math.log(not_p), positive))
            likelihoods = [q if positive else 1.0 - q for q in probas]
            alpha = 8.0 / (len(rows) + 16.0)
            mix = [(1 - alpha) * w * q / (p if positive else not_p) + alpha / 5 for w, q in zip(mix, likelihoods)]
            for platt, margin in zip(platts, margins):
                platt.update(margin, positive)
            for svm in svms:
                svm.learn_one(x, positive)
            sign = 1.0 if positive else -1.0
            for (rate, epsilon, weights, squares), margin in zip(logistics, logistic):
                coef = -sign / (1.0 + math.exp(sign * margin))
                for key, value in x.items():
                    g = coef * value
                    squares[key] = squares.get(key, epsilon) + g * g
                    weights[key] = weights.get(key, 0.0) - rate * g / math.sqrt(squares[key])
            steps = len(rows) + 5623  # T = t + t0: w ← (1 − 1/T)·w + y·σ(−y·m)/(λT)·x
            scale *= 1.0 - 1.0 / steps
            coef = sign / (1.0 + math.exp(sign * pegasos_logistic)) / (1e-5 * steps)
            for key, value in x.items():
                unscaled[key] = unscaled.get(key, 0.0) + coef * value / scale
            if sign * hinge_margin < 1.0 - 1e-9:  # N_j: the largest |x_j|; G_j: the sum of x_j²; a step to the margin
                for key, value in x.items():
                    if abs(value) > hinge_scales.get(key, 0.0):
                        hinge[key] = hinge.get(key, 0.0) * hinge_scales.get(key, 0.0) / abs(value)
                        hinge_scales[key] = abs(value)
                    hinge_squares[key] = hinge_squares.get(key, 0.0) + value * value
                rates = {key: 1.0 / (math.sqrt(hinge_squares[key]) * hinge_scales[key]) for key in x}
                reach = sum(value * value * rates[key] for key, value in x.items())
                step = sign * min(4.0, (1.0 - sign * hinge_margin) / reach)
                for key, value in x.items():
                    hinge[key] += step * value * rates[key]
    return rows, svms[0]


# -- eval on the default configuration -----------------------------------------------------


def test_eval_default_config_matches_a_hand_written_prequential_loop(capsys):
    assert cli.main(["eval", "--json"]) == 0
    out = capsys.readouterr().out
    lines = out.strip().splitlines()
    assert len(lines) == 1, out
    report = json.loads(lines[0])
    assert isinstance(report, dict)
    for key in ("n", "accuracy", "f1", "roc_auc", "one_minus_roca_pct", "examples_per_s"):
        assert key in report, key

    rows, model = _spam_prequential()
    scores = [score for _, score, _ in rows]
    positives = [positive for _, _, positive in rows]
    tp = sum(p and s > 0 for _, s, p in rows)
    fp = sum(not p and s > 0 for _, s, p in rows)
    tn = sum(not p and s <= 0 for _, s, p in rows)
    fn = sum(p and s <= 0 for _, s, p in rows)
    auc = _pairwise_auc(scores, positives)

    assert report["n"] == len(rows) == 404
    assert report["events"] == report["learned"] == 404 and report["rejected"] == 0
    assert report["t"] == model.t == 404
    assert report["accuracy"] == (tp + tn) / len(rows)
    assert report["f1"] == _f1(tp, fp, fn)
    assert report["roc_auc"] == pytest.approx(auc, abs=1e-12)  # the same ranking: the scores agree to ~1e-12
    assert report["one_minus_roca_pct"] == pytest.approx(100.0 * (1.0 - auc), abs=1e-10)
    assert report["false_positive_rate"] == fp / (fp + tn)
    assert report["examples_per_s"] > 0
    # and the figures are those of an independent implementation
    metrics = pytest.importorskip("sklearn.metrics")
    assert report["roc_auc"] == pytest.approx(metrics.roc_auc_score(positives, scores), abs=1e-12)
    assert report["f1"] == pytest.approx(metrics.f1_score(positives, [s > 0 for s in scores]), abs=1e-12)
    assert 0.8 < report["accuracy"] < 1.0  # the filter learns something on 404 messages


def test_eval_on_a_terminal_shows_progress_events_bytes_rate_and_time_left():
    """The progress bar is drawn when stderr is a terminal (a real pseudo-terminal here, which gives no size)."""
    leader, follower = pty.openpty()
    with os.fdopen(leader, "rb", buffering=0) as terminal:
        done = subprocess.run(
            [sys.executable, "-m", "pegasos_stream.cli", "eval", "--json"],
            stdout=subprocess.PIPE,
            stderr=follower,
            timeout=120,
        )
        os.close(follower)
        shown = b""
        try:
            while chunk := terminal.read(4096):
                shown += chunk
        except OSError:  # the terminal is read to its end
            pass
    assert done.returncode == 0 and json.loads(done.stdout)["events"] == 404
    bar = [drawn for drawn in shown.decode("utf-8", "replace").split("\r") if "%|" in drawn][-1]
    expected = r"100%\|\S+\| 404 events, [0-9.]+/[0-9.]+ MiB \[[0-9:]+<[0-9:]+, *[0-9.]+ events/s\]"
    assert re.fullmatch(expected, bar), bar


def test_eval_text_report(capsys):
    assert cli.main(["eval", "--max-events", "50"]) == 0
    out = capsys.readouterr().out
    fields = {key.strip(): value.strip() for key, value in (line.split(":", 1) for line in out.strip().splitlines())}
    assert set(fields) >= {"n", "accuracy", "roc_auc", "examples_per_s"}
    assert int(fields["n"]) == 50 and 0.0 < float(fields["accuracy"]) <= 1.0


# -- malformed records ---------------------------------------------------------------------

BAD_LINES = [
    b'{"id": "bad-json", "x": {"f1": 1.0}',
    b'{"id": "bad-utf8", "x": {"caf\xe9": 1.0}, "label": true}',
    b"[1, 2, 3]",
    b'{"id": "bad-x", "x": [1, 2], "label": true}',
    b'{"id": "bad-nan", "x": {"f1": NaN}, "label": true}',
    b'{"id": "bad-inf", "x": {"f1": -Infinity}, "label": false}',
    b'{"id": "bad-str", "x": {"f1": "1.0"}, "label": false}',
    b'{"id": "bad-bool", "x": {"f1": true}, "label": true}',
    b'{"id": "bad-nothing"}',
    b'{"id": "bad-label", "x": {"f1": 1.0}, "label": "maybe"}',
    b'{"id": "bad-text", "text": "a text, but features.type is dict", "label": true}',
    b'{"id": "bad-big", "x": {"f1": 1.0}, "label": true, "pad": "' + b"p" * 400 + b'"}',
]


def _interleaved(tmp_path: Path):
    """A stream of 40 good events with the bad lines interleaved, and the same without them."""
    good = jsonl(binary_events(40, seed=1))
    lines, bad_at = [], {}
    bad = iter(BAD_LINES)
    for i, line in enumerate(good):
        lines.append(line)
        if i % 3 == 1:
            extra = next(bad, None)
            if extra is not None:
                lines.append(extra)
                bad_at[len(lines)] = extra  # 1-based line number
    assert len(bad_at) == len(BAD_LINES)
    full = _write_lines(tmp_path / "events.jsonl", lines)
    clean = _write_lines(tmp_path / "clean.jsonl", good)
    return full, clean, bad_at, good


def _job(tmp_path: Path, source: Path, **sections) -> Path:
    config = {
        "model": {"kind": "linear", "lambda_": 0.01, "fit_intercept": True},
        "features": {"type": "dict"},
        "source": {"type": "file", "path": str(source), "max_bytes": 300},
        "output": {"type": "file", "path": str(tmp_path / "predictions.jsonl")},
        "errors": {"on_error": "skip", "dead_letter": {"type": "file", "path": str(tmp_path / "rejected.jsonl")}},
    }
    for section, values in sections.items():
        config[section] = {**config.get(section, {}), **values}
    return _write_config(tmp_path / "job.yaml", config)


def test_bad_records_are_skipped_reported_and_dead_lettered(tmp_path):
    full, clean, bad_at, good = _interleaved(tmp_path)
    job = _job(tmp_path, full)
    done = subprocess.run([BIN, "run", "--config", str(job)], capture_output=True, timeout=60)
    stderr = done.stderr.decode("utf-8")
    assert done.returncode == 0, stderr

    # each bad record is reported on stderr with its position, and counted
    rejected_lines = [line for line in stderr.splitlines() if line.startswith("rejected ")]
    assert len(rejected_lines) == len(BAD_LINES)
    for line_no, report in zip(sorted(bad_at), rejected_lines):
        assert report.startswith(f"rejected {full}:{line_no}: "), report
    summary = _summary(stderr)
    assert summary["events"] == len(good) + len(BAD_LINES)
    assert summary["rejected"] == len(BAD_LINES)
    assert summary["learned"] == summary["n"] == summary["t"] == len(good)

    # each is in the dead-letter file, its bytes intact
    dead = _readjsonl(tmp_path / "rejected.jsonl")
    assert [entry["position"] for entry in dead] == [f"{full}:{n}" for n in sorted(bad_at)]
    for entry, line_no in zip(dead, sorted(bad_at)):
        value = base64.b64decode(entry["value_b64"])
        if len(bad_at[line_no]) > 300:  # past max_bytes a line is skipped as it streams: its first 301 bytes stay
            assert value == bad_at[line_no][:301]
        else:
            assert value == bad_at[line_no]
        assert entry["error"].startswith(f"{full}:{line_no}: ")
    reasons = [entry["error"] for entry in dead]
    for fragment in (
        "malformed JSON",
        "invalid UTF-8",
        "expected a JSON object",
        "must be an object",
        "finite number",
        "expected a number",
        "nothing to predict",
        "unknown label 'maybe'",
        "needs features.type: email",
        "exceeds 300",
    ):
        assert any(fragment in reason for reason in reasons), fragment

    # the run went on: every good event predicted, with the scores of a run over the clean stream
    predictions = _readjsonl(tmp_path / "predictions.jsonl")
    assert [p["id"] for p in predictions] == [json.loads(line)["id"] for line in good]
    clean_config = load_config(
        job,
        [f"source.path={clean}", f"output.path={tmp_path / 'clean-predictions.jsonl'}", "errors.dead_letter.type=none"],
    )
    _in_process(clean_config)
    assert predictions == _readjsonl(tmp_path / "clean-predictions.jsonl")


def test_bad_records_leave_the_model_identical_to_the_clean_stream(tmp_path, caplog):
    full, clean, _bad_at, good = _interleaved(tmp_path)
    job = _job(tmp_path, full)
    quiet = ["output.type=none", "errors.dead_letter.type=none"]
    with_bad = _in_process(load_config(job, quiet))
    without = _in_process(load_config(job, quiet + [f"source.path={clean}"]))
    assert with_bad.stats.rejected == len(BAD_LINES) and without.stats.rejected == 0
    assert with_bad.model.t == without.model.t == len(good)
    assert with_bad.model.weights == without.model.weights
    assert with_bad.model.intercept == without.model.intercept
    assert vars(with_bad.model._platt) == vars(without.model._platt)
    assert with_bad.report.summary() == without.report.summary()
    # and identical to learning the good events directly
    direct = PegasosClassifier(lambda_=0.01, fit_intercept=True)
    for line in good:
        event = json.loads(line)
        direct.learn_one(event["x"], event["label"])
    assert direct.weights == with_bad.model.weights and direct.t == with_bad.model.t
    # every rejection was reported on the runner's log (the clean run rejected nothing)
    assert caplog.text.count("rejected ") == len(BAD_LINES)


def test_on_error_stop_exits_1_naming_the_position(tmp_path):
    full, _clean, bad_at, _good = _interleaved(tmp_path)
    job = _job(tmp_path, full)
    done = subprocess.run(
        [BIN, "run", "--config", str(job), "--set", "errors.on_error=stop"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1, done.stderr
    first_bad = min(bad_at)
    assert f"stopped: {full}:{first_bad}: malformed JSON" in done.stderr
    # it stopped there: only the good events before it were predicted
    assert len(_readjsonl(tmp_path / "predictions.jsonl")) == first_bad - 1


def test_on_error_stop_learns_nothing_from_the_bad_record(tmp_path):
    """A record that parses and is predicted, but whose update the learner refuses (a value so large
    the norm of w would blow up): the run stops at it and the model is that of the events before."""
    good = binary_events(30, seed=2)
    bad = {"id": "huge", "x": {"unseen": 1e200}, "label": True}  # margin 0: a violation, a giant step
    lines = jsonl(good[:14]) + jsonl([bad]) + jsonl(good[14:])
    path = _write_lines(tmp_path / "events.jsonl", lines)
    config = load_config(_job(tmp_path, path), ["errors.on_error=stop", "output.type=none"])
    runner = build_runner(config)
    with pytest.raises(StopRun, match=rf"^{path}:15: "), process_wide(runner):  # as the command line runs it
        runner.run(FileSource(path))
    assert gc.get_freeze_count() == 0  # the heap set aside during the run is given back, even on a stop
    before = PegasosClassifier(lambda_=0.01, fit_intercept=True)
    for event in good[:14]:
        before.learn_one(event["x"], event["label"])
    assert runner.model.t == before.t == 14
    assert runner.model.weights == before.weights
    assert runner.model.intercept == before.intercept
    assert vars(runner.model._platt) == vars(before._platt)
    assert runner.stats.learned == 14


def test_out_of_range_integer_is_rejected_and_the_run_goes_on(tmp_path, caplog):
    """A JSON integer too large for a float must be a bad record like NaN, not crash the run."""
    good = jsonl(binary_events(3, seed=3))
    huge = b'{"id": "huge-int", "x": {"f1": 1' + b"0" * 400 + b'}, "label": true}'
    path = _write_lines(tmp_path / "events.jsonl", [good[0], huge, good[1], good[2]])
    config = load_config(
        _job(tmp_path, path), ["output.type=none", "errors.dead_letter.type=none", "source.max_bytes=100000"]
    )
    runner = _in_process(config)
    assert runner.stats.rejected == 1
    assert runner.stats.learned == 3
    assert f"rejected {path}:2: " in caplog.text


# -- delayed labels ------------------------------------------------------------------------


def _delayed_stream():
    """Labeled events, unlabeled ones, and later label-only events (shuffled, some unmatched)."""
    rng = random.Random(4)
    events = binary_events(60, seed=4)
    stream, later = [], []
    for event in events:
        if rng.random() < 0.5:
            stream.append({"id": event["id"], "x": event["x"]})  # predicted now, labelled later
            later.append({"id": event["id"], "label": event["label"]})
        else:
            stream.append(event)
        if later and rng.random() < 0.3:
            stream.append(later.pop(rng.randrange(len(later))))
    never = later.pop()  # one example never gets its label
    rng.shuffle(later)
    stream += later
    stream.insert(10, {"id": "ghost-1", "label": True})  # labels of nothing
    stream.append({"id": "ghost-2", "label": False})
    stream.append(dict(later[0]))  # the same label twice: the second has nothing left to match
    return stream, never


def test_delayed_labels_learn_from_the_stored_features(tmp_path):
    stream, never = _delayed_stream()
    path = _write_lines(tmp_path / "events.jsonl", jsonl(stream))
    out = tmp_path / "predictions.jsonl"
    config = load_config(
        None,
        [
            "model.lambda_=0.01",
            "source.type=file",
            f"source.path={path}",
            "output.type=file",
            f"output.path={out}",
        ],
    )
    runner = _in_process(config)

    # the same learner, learning each pair when its label arrives, from the features it was predicted on
    model = PegasosClassifier(lambda_=0.01)
    waiting, predicted, learned_scores, learned_positives = {}, [], [], []
    unmatched = 0
    for event in stream:
        if "x" in event:
            score = model.decision_function_one(event["x"])
            predicted.append((event["id"], score))
            if "label" in event:
                learned_scores.append(score)
                learned_positives.append(event["label"])
                model.learn_one(event["x"], event["label"])
            else:
                waiting[event["id"]] = (event["x"], score)
        elif event["id"] in waiting:
            x, score = waiting.pop(event["id"])
            learned_scores.append(score)
            learned_positives.append(event["label"])
            model.learn_one(x, event["label"])
        else:
            unmatched += 1

    assert unmatched == 3
    assert list(waiting) == [never["id"]]
    assert runner.model.t == model.t == len(learned_scores)
    assert runner.model.weights == model.weights
    assert vars(runner.model._platt) == vars(model._platt)
    # every event with features predicted once, with the score of that moment
    predictions = _readjsonl(out)
    assert [(p["id"], p["score"]) for p in predictions] == predicted
    # the metrics count each example once, with the score it had when predicted
    assert list(runner.report.scores) == learned_scores
    assert list(runner.report.positives) == learned_positives
    assert runner.pending.unmatched == 3
    assert len(runner.pending) == 1 and runner.pending.dropped == runner.pending.expired == 0
    assert runner.stats.learned == len(learned_scores) and runner.stats.rejected == 0


def test_max_pending_drops_the_oldest(tmp_path, capsys):
    events = binary_events(5, seed=5, prefix="u")
    stream = [{"id": e["id"], "x": e["x"]} for e in events] + [{"id": e["id"], "label": e["label"]} for e in events]
    path = _write_lines(tmp_path / "events.jsonl", jsonl(stream))
    overrides = [
        "model.lambda_=0.01",
        "source.type=file",
        f"source.path={path}",
        "output.type=none",
        "delayed_labels.max_pending=3",
    ]
    runner = _in_process(load_config(None, overrides))
    assert runner.pending.dropped == 2  # u0 and u1 made room for u3 and u4
    assert runner.pending.unmatched == 2  # so their labels found nothing
    assert runner.pending.expired == 0 and len(runner.pending) == 0
    model = PegasosClassifier(lambda_=0.01)
    for event in events[2:]:
        model.learn_one(event["x"], event["label"])
    assert runner.model.t == 3 and runner.model.weights == model.weights

    # the command line reports the same counts
    assert (
        cli.main(
            [
                "eval",
                "--json",
                "--config",
                str(_write_config(tmp_path / "job.yaml", {})),
                *[arg for o in overrides for arg in ("--set", o)],
            ]
        )
        == 0
    )
    summary = json.loads(capsys.readouterr().out)
    assert (summary["expired"], summary["unmatched_labels"], summary["learned"], summary["pending"]) == (2, 2, 3, 0)


def test_max_age_expires_with_an_injected_clock():
    config = load_config(None, ["model.lambda_=0.01", "output.type=none"])
    runner = build_runner(config)
    now = [0.0]
    runner.pending = PendingLabels(max_pending=100, max_age_seconds=10.0, clock=lambda: now[0])
    events = {e["id"]: e for e in binary_events(3, seed=6, prefix="m")}

    def feed(at: float, obj: dict, line: int) -> None:
        now[0] = at
        runner.process(Record(json.dumps(obj).encode(), f"<test>:{line}"))

    feed(0.0, {"id": "m0", "x": events["m0"]["x"]}, 1)
    feed(4.0, {"id": "m1", "x": events["m1"]["x"]}, 2)
    feed(6.0, {"id": "m2", "x": events["m2"]["x"]}, 3)
    feed(10.0, {"id": "m0", "label": events["m0"]["label"]}, 4)  # exactly 10 s old: still waiting
    assert runner.model.t == 1 and runner.pending.expired == 0
    feed(15.0, {"id": "m2", "label": events["m2"]["label"]}, 5)  # m1 (4 s) is now too old; m2 (6 s) is not
    assert runner.pending.expired == 1 and runner.model.t == 2
    feed(15.0, {"id": "m1", "label": events["m1"]["label"]}, 6)  # too late
    assert runner.pending.unmatched == 1 and runner.model.t == 2 and len(runner.pending) == 0
    model = PegasosClassifier(lambda_=0.01)
    for name in ("m0", "m2"):
        model.learn_one(events[name]["x"], events[name]["label"])
    assert runner.model.weights == model.weights
    assert runner.stats.predicted == 3 and runner.stats.learned == 2 and runner.stats.rejected == 0


# -- standard input, idle timeout and signals ----------------------------------------------


def _kernel_events(n: int, seed: int = 7) -> list[dict]:
    rng = random.Random(seed)
    events = []
    for i in range(n):
        a, b = rng.uniform(-1, 1), rng.uniform(-1, 1)
        events.append({"id": f"s{i}", "x": {"a": a, "b": b}, "label": a * a + b * b < 0.5})
    return events


def _read_lines(proc: subprocess.Popen, count: int, timeout: float, stream: io.IOBase | None = None) -> list[bytes]:
    """``count`` lines from the process's stdout (or ``stream``), without blocking past ``timeout``."""
    fd = (stream or proc.stdout).fileno()
    selector = selectors.DefaultSelector()
    selector.register(fd, selectors.EVENT_READ)
    data, deadline = b"", time.monotonic() + timeout
    try:
        while data.count(b"\n") < count:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not selector.select(remaining):
                break
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            data += chunk
    finally:
        selector.close()
    return data.splitlines()


def _spawn(*args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [BIN, *args], cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )


def _reap(proc: subprocess.Popen) -> None:
    """Close the pipes of ``proc``, killing it if it still runs."""
    proc.stdin.close()
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    proc.stdout.close()
    proc.stderr.close()


def test_stdin_stops_by_itself_when_idle():
    """The process stops by itself on an open pipe (when, to the read: test_stats_line drives the clock)."""
    events = _kernel_events(40)
    proc = _spawn("run", "--config", "configs/kernel-rbf.yaml", "--input", "-", "--stop-when-idle", "1")
    try:
        proc.stdin.write(b"\n".join(jsonl(events)) + b"\n")
        proc.stdin.flush()  # and the pipe stays open
        lines = _read_lines(proc, len(events), timeout=30)
        assert len(lines) == len(events)
        proc.wait(timeout=15)
        assert proc.poll() == 0
        assert not proc.stdin.closed  # it stopped by itself, not because the input ended
        lines += proc.stdout.read().splitlines()
        stderr = proc.stderr.read().decode()
    finally:
        _reap(proc)
    predictions = [json.loads(line) for line in lines]
    assert [p["id"] for p in predictions] == [e["id"] for e in events]  # each exactly once, in order
    for p in predictions:  # no source.labels in the configuration: the classes are true and false
        assert set(p) == {"id", "predicted", "score", "proba"}
        assert 0.0 < p["proba"] < 1.0 and p["predicted"] is (p["proba"] > 0.5)
    assert "no event for 1 s: stopping" in stderr
    summary = _summary(stderr)
    assert summary["events"] == summary["learned"] == summary["t"] == len(events)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_stops_a_run_waiting_on_open_stdin(sig):
    events = _kernel_events(2)
    proc = _spawn("run", "--config", "configs/kernel-rbf.yaml", "--input", "-")
    try:
        proc.stdin.write(b"\n".join(jsonl(events)) + b"\n")
        proc.stdin.flush()
        lines = _read_lines(proc, 2, timeout=30)  # the runner is in its loop, waiting for more
        assert [json.loads(line)["id"] for line in lines] == ["s0", "s1"]
        proc.send_signal(sig)
        returncode = proc.wait(timeout=30)  # stdin stays open: only the signal can end the run
        stderr = proc.stderr.read().decode()
    finally:
        _reap(proc)
    assert returncode == 0, stderr
    assert "no event for" not in stderr  # stopped by the signal: stdin stayed open and no idle stop is set
    assert "Traceback" not in stderr
    summary = _summary(stderr)
    assert summary["events"] == 2 and summary["t"] == 2


#: Inputs that hold no line end (mbox: no message) for as long as they are read: /dev/zero (read as a pipe is), and
#: a sparse file of 20 GB of zero bytes (read in blocks, as any file is).
ENDLESS_LINES = {
    "dev-zero-json": ("json", "/dev/zero"),
    "dev-zero-mbox": ("mbox", "/dev/zero"),
    "sparse-20GB-json": ("json", "sparse"),
    "sparse-20GB-mbox": ("mbox", "sparse"),
}


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
@pytest.mark.parametrize("input_format, path", list(ENDLESS_LINES.values()), ids=list(ENDLESS_LINES))
def test_a_signal_stops_a_run_reading_a_line_that_never_ends(tmp_path, sig, input_format, path):
    """The source hands back an empty batch after each ``MAX_READ_BYTES`` that end no record, so the loop sees the
    signal (and logs its statistics meanwhile); the run stops with its summary."""
    if path == "sparse":
        path = str(tmp_path / "sparse.jsonl")
        with open(path, "wb") as sparse:
            sparse.truncate(20 << 30)  # 20 GB of zero bytes, on no disk
    config = {
        "model": {"kind": "linear", "lambda_": 0.01},
        "features": {"type": "email" if input_format == "mbox" else "dict"},
        "source": {"type": "file", "path": path, "format": input_format},
        "output": {"type": "none"},
        "evaluation": {"stats_every_seconds": 0.2},
        "checkpoint": {"dir": str(tmp_path / "ck")},
    }
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(config), encoding="utf-8")
    proc = _spawn("run", "--config", str(job))
    try:
        reading = [line for line in _read_lines(proc, 3, 30, proc.stderr) if line.startswith(b"cumulative:")]
        assert reading, "the run never got back to its loop"
        proc.send_signal(sig)
        returncode = proc.wait(timeout=30)
        stderr = proc.stderr.read().decode()
    finally:
        _reap(proc)
    assert returncode == 0, stderr
    assert "Traceback" not in stderr
    assert _summary(stderr)["events"] == 0


# -- svmlight replay -----------------------------------------------------------------------


def _svmlight_pairs(n: int, seed: int = 8):
    rng = random.Random(seed)
    truth = [rng.uniform(-1, 1) for _ in range(30)]
    pairs, lines = [], []
    for i in range(n):
        indices = sorted(rng.sample(range(1, 31), 6))
        x = {str(j): rng.uniform(-2, 2) for j in indices}
        y = sum(truth[int(j) - 1] * v for j, v in x.items()) > 0
        pairs.append((x, y))
        label = rng.choice(["+1", "1"]) if y else rng.choice(["-1", "0"])
        tokens = [label]
        if i % 7 == 0:
            tokens.append(f"qid:{i // 7}")
        tokens += [f"{j}:{v!r}" for j, v in x.items()]
        line = " ".join(tokens)
        if i % 5 == 0:
            line += f" # example {i}"
        lines.append(line)
    return pairs, lines


def test_svmlight_replay_matches_learning_the_pairs(tmp_path, monkeypatch, capsys):
    pairs, lines = _svmlight_pairs(300)
    with gzip.open(tmp_path / "train.svm.gz", "wt", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")
    monkeypatch.chdir(tmp_path)  # --input is relative to the working directory
    dead = tmp_path / "rejected.jsonl"
    args = [
        "--config",
        str(ROOT / "configs" / "replay-svmlight.yaml"),
        "--input",
        "train.svm.gz",
        "--set",
        f"errors.dead_letter.path={dead}",
    ]
    assert cli.main(["eval", "--json", *args]) == 0
    report = json.loads(capsys.readouterr().out)

    model = PegasosClassifier(lambda_=1e-4)
    scores, positives = [], []
    for x, y in pairs:
        scores.append(model.decision_function_one(x))
        positives.append(y)
        model.learn_one(x, y)
    tp = sum(p and s > 0 for s, p in zip(scores, positives))
    fp = sum(not p and s > 0 for s, p in zip(scores, positives))
    tn = sum(not p and s <= 0 for s, p in zip(scores, positives))
    fn = sum(p and s <= 0 for s, p in zip(scores, positives))
    assert report["n"] == report["t"] == len(pairs) and report["rejected"] == 0
    assert report["accuracy"] == (tp + tn) / len(pairs)
    assert report["f1"] == _f1(tp, fp, fn)
    assert report["roc_auc"] == _pairwise_auc(scores, positives)
    assert not dead.exists() or dead.read_text() == ""

    config = load_config(
        ROOT / "configs" / "replay-svmlight.yaml",
        ["source.type=file", "source.path=train.svm.gz", "errors.dead_letter.type=none"],
    )
    runner = _in_process(config)
    # by default the weights are in arrays that widen as columns come: the names are their int columns
    assert runner.model.max_features is not None and len(runner.model._u.v) == 1024  # (as they start: columns ≤ 30)
    assert runner.model.weights == {int(j): w for j, w in model.weights.items()} and runner.model.t == model.t


@pytest.mark.parametrize("limit", [None, 64])
def test_svmlight_replay_widens_its_arrays_to_the_limit_and_sets_aside_a_line_past_it(tmp_path, capsys, limit):
    """The shipped replay learns svmlight columns in weight arrays with no setting: they widen up to
    model.max_features (by default ARRAY_COLUMNS), and a line naming a column past it is set aside, named."""
    top = 2**22 if limit is None else limit
    lines = ["1 3:1 9:0.5", f"-1 2:1 {top - 1}:2", f"1 {top}:1", "-1 5:1"]
    (tmp_path / "train.svm").write_text("\n".join(lines) + "\n")
    dead = tmp_path / "rejected.jsonl"
    settings = [f"errors.dead_letter.path={dead}"] + ([] if limit is None else [f"model.max_features={limit}"])
    args = ["--config", str(ROOT / "configs" / "replay-svmlight.yaml"), "--input", str(tmp_path / "train.svm")]
    assert cli.main(["eval", "--json", *args, *(f"--set={item}" for item in settings)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["learned"], report["rejected"]) == (3, 1)
    [rejected] = [json.loads(line) for line in dead.read_text().splitlines()]
    assert rejected["position"].endswith("train.svm:3")
    assert f"svmlight feature '{top}' is no column from 0 to {top - 1}" in rejected["error"]
    assert "model.max_features" in rejected["error"]

    config = load_config(
        ROOT / "configs" / "replay-svmlight.yaml",
        ["source.type=file", f"source.path={tmp_path / 'train.svm'}", "errors.dead_letter.type=none"]
        + ([] if limit is None else [f"model.max_features={limit}"]),
    )
    model = _in_process(config).model
    assert (model.max_features, len(model._u.v)) == (top, top)  # widened to the largest column seen
    assert sorted(model.weights) == [2, 3, 5, 9, top - 1]


def test_svmlight_names_that_are_no_columns_are_refused_with_what_would_take_them(tmp_path, capsys):
    """The shipped replay refuses a line named by words (no columns of its arrays), saying which setting takes them;
    model.max_features: null keeps the names as strings in dicts, and features.hash_bits hashes them."""
    log = tmp_path / "named.svm"
    log.write_text("1 spam:1 offer:2\n-1 meeting:1\n1 offer:1\n")
    args = ["eval", "--json", "--config", str(ROOT / "configs" / "replay-svmlight.yaml"), "--input", str(log)]
    assert cli.main([*args, "--set", "errors.dead_letter.type=none"]) == 2
    err = capsys.readouterr().err
    assert "svmlight feature 'spam' is no column from 0 to 4194303 of the model's weight arrays" in err
    assert "features.hash_bits hashes names into columns; model.max_features: null keeps them in dicts" in err
    for setting in ("model.max_features=null", "features.hash_bits=18"):
        assert cli.main([*args, "--set", "errors.dead_letter.type=none", "--set", setting]) == 0
        assert json.loads(capsys.readouterr().out)["learned"] == 3


# -- --max-events and --output --------------------------------------------------------------


def test_a_calibrated_svm_predicts_by_its_probability(tmp_path, capsys):
    """A Platt-scaled SVM's probability is not always on the side of its margin's sign: the class predicted follows
    the probability, on the compiled batch path and one event at a time alike."""
    config = yaml.safe_load(SPAM_CONFIG.read_text())
    config["model"] = {"kind": "linear", "lambda_": 1e-2, "n_features": 2**19}
    path = tmp_path / "linear.yaml"
    path.write_text(yaml.safe_dump(config))
    runs = {}
    for batch in (True, False):
        out = tmp_path / f"batch-{batch}.jsonl"
        args = ["run", "--config", str(path), "--output", str(out)]
        assert cli.main(args if batch else [*args, "--set", "run.batch_size=0"]) == 0
        runs[batch] = _readjsonl(out)
    capsys.readouterr()
    assert runs[True] == runs[False]
    predictions = runs[True]
    assert sum((p["score"] > 0) != (p["proba"] > 0.5) for p in predictions) >= 5  # the two disagree at times
    assert all(p["predicted"] == ("spam" if p["proba"] > 0.5 else "ham") for p in predictions)


def test_max_events_and_output_file(tmp_path, capsys):
    out = tmp_path / "predictions.jsonl"
    assert cli.main(["run", "--config", str(SPAM_CONFIG), "--max-events", "25", "--output", str(out)]) == 0
    captured = capsys.readouterr()
    assert captured.out == ""  # predictions went to the file
    summary = _summary(captured.err)
    assert summary["events"] == summary["t"] == 25
    predictions = _readjsonl(out)
    assert len(predictions) == 25
    rows, _ = _spam_prequential()
    assert [p["id"] for p in predictions] == [row[0] for row in rows[:25]]
    assert [p["score"] for p in predictions] == pytest.approx([row[1] for row in rows[:25]], rel=1e-9, abs=1e-12)
    for p in predictions:  # the classes named as source.labels names them, never the true label
        assert set(p) == {"id", "predicted", "score", "proba"}
        assert 0.0 < p["proba"] < 1.0
        assert p["predicted"] == ("spam" if p["proba"] > 0.5 else "ham")
    assert {p["predicted"] for p in predictions} == {"spam", "ham"}


@pytest.mark.parametrize("batch_size", [0, 64])
def test_max_events_zero_processes_no_event(tmp_path, batch_size):
    path = _write_lines(tmp_path / "events.jsonl", jsonl(binary_events(5)))
    config = load_config(_job(tmp_path, path), [f"run.batch_size={batch_size}"])
    runner = _in_process(config, max_events=0)
    assert (runner.stats.events, runner.model.t) == (0, 0)
    assert not (tmp_path / "predictions.jsonl").exists()


def _strict_json(line: str) -> object:
    """``line`` as JSON, refusing NaN and the infinities, which are not JSON."""

    def refuse(constant: str) -> object:
        raise ValueError(f"{constant} is not JSON")

    return json.loads(line, parse_constant=refuse)


@pytest.mark.parametrize("batch_size", [0, 64])
def test_an_id_without_a_json_form_is_named_by_its_position(tmp_path, batch_size):
    lines = [b'{"id": NaN, "x": {"f1": 1.0}, "label": true}', b'{"id": -Infinity, "x": {"f1": 2.0}, "label": false}']
    path = _write_lines(tmp_path / "events.jsonl", lines)
    _in_process(load_config(_job(tmp_path, path), [f"run.batch_size={batch_size}"]))
    text = (tmp_path / "predictions.jsonl").read_text(encoding="utf-8")
    assert [_strict_json(line)["id"] for line in text.splitlines()] == [f"{path}:1", f"{path}:2"]


def test_the_json_lines_sink_writes_a_non_finite_number_as_null(tmp_path):
    sink = JsonLinesSink(tmp_path / "out.jsonl")
    sink.emit({"id": "a", "score": float("inf"), "proba": float("nan"), "label": True, "more": [float("-inf")]})
    sink.close()
    [line] = (tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines()
    assert _strict_json(line) == {"id": "a", "score": None, "proba": None, "label": True, "more": [None]}


def test_run_reads_stdin_redirected_from_a_file(tmp_path):
    events = binary_events(30, seed=4)
    path = _write_lines(tmp_path / "events.jsonl", jsonl(events))
    job = _job(tmp_path, path)
    with path.open("rb") as stdin:
        args = ["run", "--config", str(job), "--input", "-", "--output", "-"]
        done = subprocess.run([BIN, *args], stdin=stdin, capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert [json.loads(line)["id"] for line in done.stdout.splitlines()] == [e["id"] for e in events]
    assert _summary(done.stderr.decode())["t"] == len(events)


def test_eval_max_events_one_with_output_file(tmp_path, capsys):
    out = tmp_path / "predictions.jsonl"
    assert cli.main(["eval", "--json", "--max-events", "1", "--output", str(out)]) == 0
    assert json.loads(capsys.readouterr().out)["events"] == 1
    assert len(_readjsonl(out)) == 1


# -- multiclass ----------------------------------------------------------------------------


def test_multiclass_config_runs_and_reports_accuracy(tmp_path, capsys):
    rng = random.Random(9)
    centres = {"red": (2.0, 0.0), "green": (-1.0, 1.7), "blue": (-1.0, -1.7)}
    events = []
    for i in range(300):
        label = rng.choice(sorted(centres))
        cx, cy = centres[label]
        events.append(
            {"id": i, "x": {"a": cx + rng.gauss(0, 0.5), "b": cy + rng.gauss(0, 0.5), "bias": 1.0}, "label": label}
        )
    _write_lines(tmp_path / "colours.jsonl", jsonl(events))
    job = _write_config(
        tmp_path / "multiclass.yaml",
        {
            "model": {"kind": "multiclass", "lambda_": 0.01},
            "features": {"type": "dict"},
            "source": {"type": "file", "path": "colours.jsonl"},
        },
    )
    assert cli.main(["eval", "--json", "--config", str(job)]) == 0
    report = json.loads(capsys.readouterr().out)

    model = PegasosMulticlass(lambda_=0.01)
    correct = 0
    for event in events:
        correct += model.predict_one(event["x"]) == event["label"]
        model.learn_one(event["x"], event["label"])
    assert report["n"] == report["t"] == 300 and report["rejected"] == 0
    assert report["accuracy"] == correct / 300
    assert report["accuracy"] > 0.85

    out = tmp_path / "predictions.jsonl"
    assert cli.main(["run", "--config", str(job), "--output", str(out), "--max-events", "100"]) == 0
    capsys.readouterr()
    predictions = _readjsonl(out)
    assert len(predictions) == 100
    assert all(set(p) == {"id", "predicted", "score", "proba"} for p in predictions)
    assert predictions[0]["predicted"] is None  # no class known yet
    assert {p["predicted"] for p in predictions[1:]} <= set(centres)
    assert all(0.0 <= p["proba"] <= 1.0 for p in predictions)
    late_hits = sum(p["predicted"] == events[p["id"]]["label"] for p in predictions[50:])
    assert late_hits >= 40  # the predictions written are those of a learner that learns


def test_a_multiclass_learner_replays_a_svmlight_log_of_several_classes(tmp_path):
    """svmlight labels 1, 2 and 3 are three classes for ``model.kind: multiclass`` (a binary learner
    would refuse the 2 and 3), learned and predicted as ints."""
    lines = [f"{1 + i % 3} {1 + i % 3}:1 {4 + i % 5}:0.5 9:1" for i in range(300)]
    _write_lines(tmp_path / "classes.svm", [line.encode() for line in lines])
    job = _write_config(
        tmp_path / "job.yaml",
        {
            "model": {"kind": "multiclass", "lambda_": 0.01},
            "features": {"type": "dict"},
            "source": {"type": "file", "path": "classes.svm", "format": "svmlight"},
        },
    )
    out = tmp_path / "out.jsonl"
    done = subprocess.run(
        [BIN, "eval", "--config", str(job), "--json", "--output", str(out)], capture_output=True, timeout=120
    )
    assert done.returncode == 0, done.stderr.decode()
    report = json.loads(done.stdout)
    assert (report["rejected"], report["learned"], report["n"]) == (0, 300, 300)
    assert report["accuracy"] > 0.9
    predicted = [prediction["predicted"] for prediction in _readjsonl(out)]
    assert predicted[0] is None and set(predicted[1:]) == {1, 2, 3}


def test_rejections_go_to_the_current_stderr(tmp_path, monkeypatch):
    """The runner's log must follow ``sys.stderr`` as it is when the run starts (as the summary does),
    not the object bound when the module was imported."""
    import contextlib

    path = _write_lines(tmp_path / "events.jsonl", [b'{"x": {"a": 1}, "label": true}', b"not json"])
    monkeypatch.chdir(tmp_path)
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        assert (
            cli.main(
                [
                    "run",
                    "--config",
                    str(_write_config(tmp_path / "job.yaml", {})),
                    "--input",
                    path.name,
                    "--output",
                    str(tmp_path / "out.jsonl"),
                ]
            )
            == 0
        )
    assert _summary(err.getvalue())["rejected"] == 1  # the summary follows sys.stderr ...
    assert "rejected events.jsonl:2: malformed JSON" in err.getvalue()  # ... and so must the rejections


def test_eval_plot_writes_a_learning_curve(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    png = tmp_path / "curve.png"
    assert cli.main(["eval", "--json", "--max-events", "120", "--plot", str(png)]) == 0
    assert json.loads(capsys.readouterr().out)["n"] == 120
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# -- the runner on its own: any thread, the report's state ----------------------------------


class _EndlessSource(Source):
    """The records of ``lines``, then idle ticks until the run is stopped."""

    name = "<endless>"

    def __init__(self, lines: list[bytes]) -> None:
        self._lines = lines
        self._read = 0

    def read(self, n: int) -> RecordBatch:
        start = self._read
        values = self._lines[start : start + n]
        if not values:
            time.sleep(0.01)
        self._read += len(values)
        return RecordBatch(values, range(start + 1, start + 1 + len(values)), lambda line: f"<endless>:{line}")

    def position(self) -> dict:
        return {"line": self._read}


class _BrokenSink:
    """A sink that fails at its first emit, as a full disk would."""

    def emit(self, obj: dict) -> None:
        raise OSError("no space left on device")

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


def test_a_source_that_cannot_give_records_back_is_neither_checkpointed_nor_committed(tmp_path, caplog):
    """The run stops inside a batch and the source has no ``unclaim``: a final checkpoint would
    cover records never processed, so there is none (and an error says so)."""
    runner = build_runner(load_config(None, ["model.lambda_=0.01", "run.batch_size=16", "output.type=none"]))
    runner.dead_letters = _BrokenSink()
    lines = jsonl(binary_events(20, seed=9))
    lines[4] = b"not JSON"  # its dead letter fails: records 5 to 16 of the first batch are not processed
    directory = tmp_path / "ck"
    checkpoints = Checkpoints(directory)
    try:
        with pytest.raises(OSError, match="no space left"):
            runner.run(_EndlessSource(lines), checkpoints=checkpoints)
    finally:
        checkpoints.close()
    assert latest_valid(directory) is None
    assert "<endless> cannot give back the records not processed" in caplog.text


def test_run_works_in_a_worker_thread_and_stops_on_request():
    """``Runner.run`` leaves signals to the command line, so it runs in any thread; ``request_stop``
    from another thread ends the run."""
    events = binary_events(50, seed=9)
    runner = build_runner(load_config(None, ["model.lambda_=0.01", "output.type=none"]))
    outcome: dict = {}

    def work() -> None:
        try:
            outcome["stats"] = runner.run(_EndlessSource(jsonl(events)))
        except Exception as error:
            outcome["error"] = error

    worker = threading.Thread(target=work)
    worker.start()
    deadline = time.monotonic() + 30
    while runner.stats.events < len(events) and worker.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    runner.request_stop()
    worker.join(timeout=10)
    assert not worker.is_alive()
    assert "error" not in outcome, outcome["error"]
    assert outcome["stats"].events == outcome["stats"].learned == len(events)
    model = PegasosClassifier(lambda_=0.01)
    for event in events:
        model.learn_one(event["x"], event["label"])
    assert runner.model.weights == model.weights


def test_the_command_line_settings_of_a_run_last_as_long_as_it():
    runner = build_runner(load_config(None, ["output.type=none"]))
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    thresholds = gc.get_threshold()
    with process_wide(runner):
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold() == (max(thresholds[0], 20_000), *thresholds[1:])
        assert signal.getsignal(signal.SIGTERM) == signal.getsignal(signal.SIGINT) == runner.request_stop
    assert gc.get_freeze_count() == 0 and gc.get_threshold() == thresholds
    assert {sig: signal.getsignal(sig) for sig in handlers} == handlers


@pytest.mark.parametrize("kind", ["linear", "multiclass"])
def test_the_report_state_keeps_the_layout_of_earlier_checkpoints(tmp_path, kind):
    """A snapshot holds the report as checkpoints written before reports had a state of their own
    (every field but the window, deques as lists), and a runner restored from it reports the same."""
    path = _write_lines(tmp_path / "events.jsonl", jsonl(binary_events(60, seed=10)))
    config = load_config(_job(tmp_path, path), [f"model.kind={kind}", "output.type=none"])
    runner = _in_process(config)
    report = runner.report
    if isinstance(report, BinaryReport):
        earlier_layout = {
            **{name: getattr(report, name) for name in ("tp", "fp", "tn", "fn")},
            "scores": report.scores.tolist(),
            "positives": report.positives.tolist(),
        }
    else:
        earlier_layout = {"correct": report.correct, "n": report.n}
    snapshot = runner.snapshot()
    assert snapshot["report"] == earlier_layout
    restored = build_runner(config)
    restored.restore({**snapshot, "report": earlier_layout})
    assert restored.snapshot()["report"] == earlier_layout
    assert restored.report.summary() == runner.report.summary()


@pytest.mark.parametrize("reader", ["bytes", pytest.param("email", marks=pytest.mark.slow)])
def test_text_events_learned_in_batches_give_the_model_and_predictions_of_one_at_a_time(tmp_path, reader):
    """The bundled spam sample through the shipped spam configuration: a batch's texts become rows
    at once (compiled for the "bytes" reader), and the run is bit-for-bit the one-at-a-time run; so is a run of
    batches of one record (a live stream's), which go through the batch path too (`_single_records_batched`)."""
    results = []
    for batch_size in (0, 1, 7, 4096):
        output = tmp_path / f"predictions-{batch_size}.jsonl"
        overrides = [
            f"features.reader={reader}",
            f"run.batch_size={batch_size}",
            "output.type=file",
            f"output.path={output}",
        ]
        runner = _in_process(load_config(Path(__file__).parents[1] / "configs" / "spam.yaml", overrides))
        results.append((model_digest(runner.model), output.read_text(encoding="utf-8"), runner.model.t))
    assert results[0][2] > 100
    assert all(result == results[0] for result in results[1:])


def test_odd_text_records_among_plain_ones_give_in_batches_what_one_at_a_time_gives(tmp_path):
    """Text events the compiled JSON reader leaves to Python (a lone surrogate escape, no label, a feature event
    in a text stream), malformed records and delayed labels among plain text events: each batch size gives
    the one-at-a-time run's model, predictions, rejections and empty bodies; so do batches read in pieces, each
    but the first on the helper thread (`BatchParser._text_pieces`), and pieces of which one fails to be read (its
    records and the batch's after it are parsed one at a time)."""
    with gzip.open(SAMPLE, "rb") as sample:
        plain = sample.read().splitlines()[:60]
    odd = [
        b'{"id": "s1", "text": "Subject: \\udc80 win cash now", "label": "spam"}',  # a lone surrogate
        b'{"id": "b1", "text": "caf\xc3 bad UTF-8", "label": "ham"}',  # rejected
        b'{"id": "u1", "text": "Subject: meeting at noon"}',  # predicted, its label comes later
        b'{"id": "u1", "label": "ham"}',
        b'{"id": "f1", "x": {"a": 1.0}, "label": "spam"}',  # a feature event: "a" is no column of the arrays
        b'{"id": "m1", "text": "unterminated',  # malformed
        b'{"id": "e1", "text": "caf\\u00e9 \\ud83d\\ude00 ok", "label": "ham", "extra": [1]}',  # nested: Python
        b'{"id": "h1", "text": "Subject: headers only\\nFrom: a@example.com\\n\\n", "label": "spam"}',  # no body
    ]
    lines = [line for pair in zip(plain[:8], odd) for line in pair] + plain[8:]
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    unreadable = json.loads(plain[30])["text"].encode("utf-8", "surrogatepass")
    read_texts, failures = EmailFeatures.read_texts, []

    def failing_read(features, texts, hashed_columns=False):
        if unreadable in texts:
            failures.append(len(texts))
            raise MemoryError
        return read_texts(features, texts, hashed_columns)

    results = []
    helper = ThreadPoolExecutor(1)
    variants = [(0, ""), (1, ""), (5, ""), (4096, ""), (5, "pieces"), (16, "pieces"), (4096, "pieces"), (16, "failing")]
    for batch_size, pieces in variants:  # (the batches with "f1" are parsed one record at a time: a feature event)
        output = tmp_path / f"predictions-{batch_size}-{pieces}.jsonl"
        overrides = [f"source.path={path}", f"run.batch_size={batch_size}", "output.type=file", f"output.path={output}"]
        with pytest.MonkeyPatch.context() as patch:
            if pieces:
                patch.setattr(batches, "helper_thread", lambda name: helper)
                patch.setattr(batches, "TEXT_PIECE_BYTES", 1)  # the most pieces of a batch: MAX_TEXT_PIECES
            if pieces == "failing":
                patch.setattr(EmailFeatures, "read_texts", failing_read)
            runner = _in_process(load_config(Path(__file__).parents[1] / "configs" / "spam.yaml", overrides))
        outcome = (model_digest(runner.model), output.read_text(encoding="utf-8"), runner.stats.rejected)
        results.append((*outcome, runner.empty_bodies))
    helper.shutdown()
    assert results[0][2] == 3 and results[0][1].count("\n") == len(lines) - 4  # three rejected, one label-only
    assert results[0][3] == 4  # s1 and u1 (a subject alone), h1 and the sample's 45th message (headers only)
    assert failures or not batches.COMPILED  # the failing run read a piece in Python (pieces are compiled only)
    assert all(result == results[0] for result in results[1:])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 1 << 18), max_size=40), st.integers(1, 1 << 17), st.integers(1, 6))
def test_a_batch_of_texts_is_cut_into_consecutive_pieces_of_about_equal_text(lengths, piece_bytes, most):
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(batches, "TEXT_PIECE_BYTES", piece_bytes)
        patch.setattr(batches, "MAX_TEXT_PIECES", most)
        cuts = batches._text_cuts(lengths)
    assert cuts[0][0] == 0 and cuts[-1][1] == len(lengths)
    assert all(end == next_first for (_, end), (next_first, _) in zip(cuts, cuts[1:]))
    assert all(end > first for first, end in cuts) or cuts == [(0, 0)]
    total = sum(lengths)
    assert len(cuts) <= max(1, min(most, total // piece_bytes))
    share = total / len(cuts) + 1  # a piece's text after its first is within its share of the bytes
    assert all(sum(lengths[first + 1 : end]) <= share for first, end in cuts)


def test_python_dash_m_runs_the_command_line():
    """``python -m pegasos_stream.cli`` is the ``pegasos-stream`` command (what ``-m cProfile`` needs)."""
    done = subprocess.run(
        [sys.executable, "-m", "pegasos_stream.cli", "eval", "--json", "--max-events", "20"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["events"] == 20


@pytest.mark.parametrize(("hash_bits", "max_names"), [(3, 1 << 20), (12, 1 << 20), (12, 30)])
@pytest.mark.parametrize("form", ["json", "svmlight"])
def test_hashed_feature_events_in_batches_give_the_model_and_predictions_of_one_at_a_time(
    tmp_path, monkeypatch, form, hash_bits, max_names
):
    """Feature events hashed into columns (features.hash_bits; 2**3 columns: names share columns in most rows):
    each batch size gives the one-at-a-time run's model, predictions and rejections, with the records the
    compiled parser leaves to Python among them, and with the names kept starting again every few batches."""
    monkeypatch.setattr(batches, "MAX_HASHED_NAMES", max_names)
    rng = random.Random(hash_bits)
    names = [f"w{j}" for j in range(40)]
    events = [
        {"id": f"e{i}", "x": {name: round(rng.uniform(-2, 2), 3) for name in rng.sample(names, 6)}, "label": i % 3 > 0}
        for i in range(300)
    ]
    if form == "json":
        lines = [json.dumps(event).encode() for event in events]
        odd = [
            b'{"id": "n1", "x": {"w1": 1e999}, "label": true}',  # not finite: the hasher refuses it
            b'{"id": "s1", "x": {"w\\u0031": 2.0, "w2": 1.0}, "label": false}',  # an escape: Python
            b'{"id": "u1", "x": {"w3": 1.0}}',  # predicted, its label comes later
            b'{"id": "u1", "label": true}',
            b'{"id": "m1", "x": {"w3": ',  # malformed
        ]
    else:
        lines = [
            (("+1 " if event["label"] else "-1 ") + " ".join(f"{k}:{v}" for k, v in event["x"].items())).encode()
            for event in events
        ]
        odd = [b"+1 w1:1e999", b"-1 w1:1 w1:2", b"# a comment", b"+1 w2:x"]
    mixed = [line for pair in zip(lines[: len(odd)], odd, strict=True) for line in pair] + lines[len(odd) :]
    path = tmp_path / "events.txt"
    path.write_bytes(b"\n".join(mixed) + b"\n")
    results = []
    for batch_size in (0, 7, 4096):
        output = tmp_path / f"predictions-{batch_size}.jsonl"
        overrides = [f"features.hash_bits={hash_bits}", f"source.format={form}", f"run.batch_size={batch_size}"]
        runner = _in_process(load_config(_job(tmp_path, path, output={"path": str(output)}), overrides))
        results.append((model_digest(runner.model), output.read_text(encoding="utf-8"), runner.stats.rejected))
    assert results[0][2] >= 2 and runner.model.t >= 300
    assert results[1] == results[0] and results[2] == results[0]


# -- messages that keep no body text -------------------------------------------------------


def test_messages_that_keep_no_body_text_are_counted_in_the_summary_and_the_checkpoint(tmp_path, capsys):
    messages = [
        ("Subject: headers only\nFrom: a@example.com\n\n", "spam"),
        ("Subject: s\nContent-Type: image/gif\nContent-Transfer-Encoding: base64\n\nR0lGOD==", "ham"),
        ("Subject: re : meeting\nthanks , i ' ll be there", "ham"),  # no blank line: a body all the same
    ]
    path = _write_lines(
        tmp_path / "mail.jsonl",
        [json.dumps({"id": str(i), "text": text, "label": label}).encode() for i, (text, label) in enumerate(messages)],
    )
    assert cli.main(["eval", "--input", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["empty_bodies"] == 2

    config = load_config(shipped_configs()["spam"], [f"source.path={path}", "output.type=none"])
    runner = _in_process(config)
    resumed = build_runner(config)
    resumed.restore(runner.snapshot())
    assert runner.empty_bodies == resumed.empty_bodies == 2
