"""svmlight replay end to end: ``pegasos-stream eval`` on a large log against bare learning, Vowpal Wabbit and
scikit-learn.

A synthetic RCV1-like log (``_stream_data``; fixed seed; default 200,000 lines, ~71 non-zeros over 47,236
features) written to a temporary directory. ``pegasos-stream eval --config configs/replay-svmlight.yaml
--input LOG --set errors.dead_letter.type=none --json`` (batched: C svmlight parsing and the compiled
loop over weight arrays that widen as columns come, the configuration as shipped), the same with
``--set run.batch_size=0`` (the record-by-record loop), the same with ``--set model.n_features=FEATURES+1`` (arrays
of a fixed size, told beforehand), against bare learning on
rows parsed before timing, in chunks of 50,000 lines (so memory stays bounded): ``decision_function_one``
+ ``learn_one`` on dicts from the runner's ``EventParser``, and ``learn_csr`` on CSR rows from
``parse_svmlight``. All five are the same model, so they must give the same accuracy and AUC. Runner
overhead = 1 − eval rate / bare ``learn_one`` rate (target ≤ 20%) and 1 − eval rate / bare ``learn_csr``
rate. Peers: Vowpal Wabbit (``vw`` on the PATH if there is one, else VW's own C++ driver through pyvw,
``-d FILE``, which is what the CLI runs; in the alternating rounds without predictions written, paired with
ours as shipped (no flag), whose rate per round over VW's is reported, and with ours with arrays of a fixed
size; once more with ``-r`` to score its predictions; plus pyvw fed one text line at a time from Python; the
VW text file is written once, untimed) and scikit-learn: ``load_svmlight_file`` + one epoch of
``SGDClassifier.fit`` (batch; no prequential metrics), and per-row ``decision_function`` + ``partial_fit`` on the
loaded matrix (streaming).

The same pair, each as a fresh process (``python -m pegasos_stream.cli eval`` as shipped, and a Python
running VW's driver through pyvw), alternating for ``--repeat`` rounds: start-up and imports counted. Both sides'
Python modules are byte-compiled first, as an install leaves them (``compileall`` of the package: a checkout run with
``PYTHONDONTWRITEBYTECODE`` would otherwise compile every module of ours at each start, and none of pyvw's).

Peak memory: ours as shipped and VW's driver through pyvw, each once in a fresh Python process
(its own peak resident set, from ``os.wait4`` in a small parent process), and their ratio (target ≤ 2).

Accuracy and (1 − ROCA)% are prequential and exact (``_harness.prequential_metrics``). Native thread
pools are limited to one thread. Times: fastest of ``--repeat`` alternating passes for the runner and
bare learning, of ``--peer-repeat`` passes for the peers.

Usage: ``python scripts/bench_stream_replay.py [--lines 200000] [--gzip] [--sklearn-stream-lines N]
[--repeat 3] [--peer-repeat 1] [--profile] [--out reports/stream_replay.json]``
"""

from __future__ import annotations

import argparse
import compileall
import itertools
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
from _harness import (
    REPO,
    Row,
    add_out_argument,
    add_pass_arguments,
    alternate,
    cli_rate,
    eval_pass,
    eval_row,
    fastest,
    fmt,
    min_median,
    passes_note,
    prepare_timing,
    prequential_metrics,
    profile_cli,
    rows_section,
    same_metrics,
    scored_row,
    shown_command,
    write_results,
    yes,
)
from _stream_data import add_stream_arguments, iter_svmlight_lines, svmlight_to_vw, write_svmlight

import pegasos_stream
from pegasos_stream.cli.assemble import build_model, build_parser
from pegasos_stream.cli.config import load_config
from pegasos_stream.io.records import Record
from pegasos_stream.parse.fastparse import parse_svmlight

try:
    from vowpalwabbit import pyvw
except ImportError:
    pyvw = None

SVMLIGHT_CONFIG = REPO / "configs" / "replay-svmlight.yaml"
#: λ of the configuration, used for the scikit-learn peers' alpha.
LAMBDA = load_config(SVMLIGHT_CONFIG)["model"]["lambda_"]
#: Lines of the svmlight log parsed (untimed) per chunk for bare learning.
CHUNK = 50_000


def bare_pass(path: Path) -> tuple[float, dict]:
    """decision_function_one + learn_one over dicts parsed (untimed, in chunks) by the runner's parser."""
    config = load_config(SVMLIGHT_CONFIG)
    model = build_model(config)
    parser = build_parser(config, model)  # (as the runner parses: the names are the arrays' columns)
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


def compiled_pass(path: Path) -> tuple[float, dict]:
    """learn_csr over CSR rows parsed (untimed, in chunks) by the runner's C svmlight parser."""
    config = load_config(SVMLIGHT_CONFIG)
    model, max_bytes = build_model(config), config["source"]["max_bytes"]
    scores = []
    seconds = 0.0
    lines = iter_svmlight_lines(path)
    while chunk := list(itertools.islice(lines, CHUNK)):
        status, rows, signs = parse_svmlight(chunk, max_bytes, None, model.max_features)
        if (status == 2).any():
            raise RuntimeError(f"{path}: a line outside the C parser's grammar; learn_csr would skip it")
        start = time.perf_counter()
        scores.append(model.learn_csr(rows.indptr, rows.indices, rows.data, signs))  # (the arrays' columns)
        seconds += time.perf_counter() - start
    return seconds, {"scores": np.concatenate(scores)}


def read_scores(path: Path) -> list[float]:
    """The first number of each line of a VW prediction file."""
    with open(path, encoding="ascii") as lines:
        return [float(line.split()[0]) for line in lines if line.strip()]


def vw_driver_pass(vw_file: Path, predictions: Path | None) -> tuple[float, dict]:
    """Vowpal Wabbit's own driver over the text file: the vw binary if on PATH, else through pyvw; its raw
    predictions written to ``predictions`` (None: none written, as our eval writes none)."""
    options = ["--loss_function", "hinge", "--quiet", *(["-r", str(predictions)] if predictions else [])]
    binary = shutil.which("vw")
    start = time.perf_counter()
    if binary:
        subprocess.run([binary, "-d", str(vw_file), *options], check=True, timeout=600)
    else:
        workspace = pyvw.Workspace(" ".join(["-d", str(vw_file), *options]))
        workspace.run_parser()
        workspace.finish()
    seconds = time.perf_counter() - start
    return seconds, {"scores": read_scores(predictions) if predictions else [], "binary": binary}


#: Vowpal Wabbit's driver over a text file (argv[1]) through pyvw, in a fresh Python: for its peak memory.
VW_DRIVER = (
    "import sys; from vowpalwabbit import pyvw; "
    "w = pyvw.Workspace('-d ' + sys.argv[1] + ' --loss_function hinge --quiet'); w.run_parser(); w.finish()"
)


#: Runs argv[1:] and prints its peak resident set (KiB, from wait4), from a small process: a child forked from a
#: large one (this benchmark, holding its data) would count the large one's pages as its own until it execs.
RSS_PROBE = (
    "import os, subprocess, sys; p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL); "
    "_, status, usage = os.wait4(p.pid, 0); print(usage.ru_maxrss); sys.exit(os.waitstatus_to_exitcode(status))"
)


def peak_rss_mb(argv: list[str]) -> float:
    """The peak resident memory, in MB, of a fresh process running ``argv`` to its end."""
    probe = subprocess.run([sys.executable, "-c", RSS_PROBE, *argv], capture_output=True, text=True, check=False)
    if probe.returncode:
        raise RuntimeError(f"{shlex.join(argv)} exited with {probe.returncode}: {probe.stderr[-2000:]}")
    return int(probe.stdout) / 1024


def fresh_process_pass(argv: list[str]) -> tuple[float, dict]:
    """The wall-clock seconds of ``argv`` run to its end in a fresh process (start-up and imports included)."""
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, timeout=600)
    return time.perf_counter() - start, {}


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


def measure(args: argparse.Namespace, tmp: Path) -> tuple[dict, dict, list[str]]:
    """The report section, the raw results and the headline row: eval of a large svmlight log vs bare
    learning, Vowpal Wabbit and scikit-learn."""
    log = tmp / ("replay.svm.gz" if args.gzip else "replay.svm")
    print(f"writing {args.lines:,} svmlight lines to {log} ...", file=sys.stderr)
    start = time.perf_counter()
    shape = write_svmlight(log, args.lines, args.features, args.nnz, args.seed)
    shape["bytes"] = log.stat().st_size
    shape["write_seconds"] = time.perf_counter() - start
    argv = [
        "eval", "--config", str(SVMLIGHT_CONFIG), "--input", str(log),
        "--set", "errors.dead_letter.type=none", "--json",
    ]  # fmt: skip
    one_at_a_time = [*argv, "--set", "run.batch_size=0"]
    fixed = [*argv, "--set", f"model.n_features={args.features + 1}"]  # svmlight names count from 1
    vw_file = tmp / "replay.vw" if pyvw is not None or shutil.which("vw") else None
    if vw_file is not None:
        svmlight_to_vw(log, vw_file)  # untimed
    runs = {
        "eval": lambda: eval_pass(argv),
        "eval_fixed": lambda: eval_pass(fixed),
        **({"vw": lambda: vw_driver_pass(vw_file, None)} if vw_file is not None else {}),
        "eval_one_at_a_time": lambda: eval_pass(one_at_a_time),
        "bare": lambda: bare_pass(log),
        "compiled": lambda: compiled_pass(log),
    }
    timings = alternate(args.repeat, runs)
    paired, paired_fixed = (
        [
            [vw / ours for ours, vw in zip(timings[name][1], timings["vw"][1], strict=True)]
            for name in ("eval", "eval_fixed")
        ]
        if vw_file is not None
        else ([], [])
    )
    timed_eval = "whole command in-process: config, read + svmlight parsing, learning, exact AUC"
    run = load_config(SVMLIGHT_CONFIG)["run"]
    batches = f"batches of {run['batch_size']:,} lines and {run['batch_bytes'] / 2**20:g} MiB at most"
    runner = eval_row(
        "pegasos-stream eval, as shipped", f"{timed_eval} ({batches}); arrays that widen", timings["eval"]
    )
    record_by_record = eval_row(
        "pegasos-stream eval, record by record (--set run.batch_size=0)", timed_eval, timings["eval_one_at_a_time"]
    )
    arrays = eval_row(
        f"pegasos-stream eval, arrays of a fixed size (--set model.n_features={args.features + 1})",
        f"{timed_eval}; the size told beforehand",
        timings["eval_fixed"],
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
    pegasos_rows = [runner, arrays, record_by_record, bare, compiled]
    rows = list(pegasos_rows)
    vw_driver = None
    fresh: list[float] = []
    if vw_file is not None and pyvw is not None:  # the same pair, each a fresh process: start-up counted
        compileall.compile_dir(Path(pegasos_stream.__file__).parent, quiet=1)  # as an install leaves it
        fresh_runs = alternate(
            args.repeat,
            {
                "ours": lambda: fresh_process_pass([sys.executable, "-m", "pegasos_stream.cli", *argv]),
                "vw": lambda: fresh_process_pass([sys.executable, "-c", VW_DRIVER, str(vw_file)]),
            },
        )
        fresh = [vw / ours for ours, vw in zip(fresh_runs["ours"][1], fresh_runs["vw"][1], strict=True)]
    rss = {"ours": peak_rss_mb([sys.executable, "-m", "pegasos_stream.cli", *argv])}
    if vw_file is not None and pyvw is not None:
        rss["vw"] = peak_rss_mb([sys.executable, "-c", VW_DRIVER, str(vw_file)])
    print(f"  peak RSS {rss}", file=sys.stderr)
    if vw_file is not None:
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
    n_features = args.features
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

    overhead = 1.0 - runner.rate / bare.rate
    overhead_compiled = 1.0 - runner.rate / compiled.rate
    overhead_record_by_record = 1.0 - record_by_record.rate / bare.rate
    same = same_metrics(pegasos_rows)
    vs_vw = runner.rate / vw_driver.rate if vw_driver else None
    paired_note = (
        f"Paired with Vowpal Wabbit's driver (no predictions written by either side; both read the log from a "
        f"file), {args.repeat} rounds, ours as shipped (no flag) ÷ VW's rate per round: min "
        f"**{min(paired):.2f}**, median **{statistics.median(paired):.2f}**, max {max(paired):.2f} (target ≥ 1.5); "
        f"ours with arrays of a fixed size told beforehand ÷ VW's: {min_median(paired_fixed)}. "
        "Both parse on a second thread (VW its text, ours half of each batch of svmlight lines): a free core helps "
        "both. "
        + (
            f"Each side as a fresh process instead (`python -m pegasos_stream.cli eval ...` against a Python running "
            f"VW's driver through pyvw; start-up and imports counted, both packages byte-compiled), {args.repeat} "
            f"rounds: min **{min(fresh):.2f}**, median **{statistics.median(fresh):.2f}**."
            if fresh
            else ""
        )
        if paired
        else "Vowpal Wabbit not installed: no paired ratio."
    )
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
            f"The five pegasos-stream rows reproduce the same accuracy and (1−ROCA)%: {yes(same)}; the bare "
            f"compiled decisions are bit-identical to the bare learn_one ones: {yes(identical)}."
        ),
        paired_note,
        (
            f"Peak resident memory of a fresh process replaying the log (wait4): ours as shipped "
            f"{rss['ours']:.1f} MB, Vowpal Wabbit's driver through pyvw {rss['vw']:.1f} MB (both with a Python "
            f"interpreter): ours ÷ VW's = **{rss['ours'] / rss['vw']:.2f}** (target ≤ 2)."
            if "vw" in rss
            else f"Peak resident memory of a fresh process replaying the log (wait4): ours {rss['ours']:.1f} MB."
        ),
        passes_note(args),
        f"Command: `{command}` (record by record: `--set run.batch_size=0` added).",
    ]
    title = (
        f"svmlight replay, {shape['n']:,} synthetic RCV1-like lines "
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
        "paired_eval_over_vw_driver": paired,
        "paired_eval_fixed_arrays_over_vw_driver": paired_fixed,
        "paired_fresh_processes_vw_over_ours": fresh,
        "peak_rss_mb": rss,
        "pegasos_rows_same_metrics": same,
        "compiled_decisions_identical": identical,
        "data": shape,
    }
    vw_rate = (len(positives) / min(timings["vw"][1])) if paired else None
    headline = [
        f"svmlight replay end to end, {shape['n'] / 1000:g}k lines (events/s, fastest of {args.repeat} paired passes,"
        " configs/replay-svmlight.yaml as shipped, no flag"
        + (f"; ours ÷ VW per round: {min_median(paired)}" if paired else "")
        + (f"; with --set model.n_features={args.features + 1}: {min_median(paired_fixed)}" if paired else "")
        + (f", as fresh processes: {min_median(fresh)}" if fresh else "")
        + (f"; peak RSS {rss['ours']:.0f} MB, VW's {rss['vw']:.0f} MB)" if "vw" in rss else ")"),
        fmt(runner.rate, ",.0f"),
        "Vowpal Wabbit (vw driver, no predictions written)",
        fmt(vw_rate, ",.0f"),
    ]
    if args.profile:
        raw["profile"] = profile_cli(argv, args.profile_top)
    return rows_section(title, rows, bare, notes), raw, headline


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=200_000, help="lines of the synthetic svmlight log")
    add_stream_arguments(parser, mean_nnz=75.0, seed=0)
    parser.add_argument("--gzip", action="store_true", help="write (and replay) the log gzip-compressed")
    parser.add_argument("--sklearn-stream-lines", type=int, help="limit scikit-learn's per-row partial_fit to N lines")
    add_pass_arguments(parser)
    add_out_argument(parser, "stream_replay.json")
    args = parser.parse_args()

    prepare_timing()
    with tempfile.TemporaryDirectory(prefix="bench_stream_replay_") as directory:
        table, raw, headline = measure(args, Path(directory))
    write_results(
        args,
        "svmlight replay end to end: pegasos-stream eval against bare learning, Vowpal Wabbit and scikit-learn",
        [table],
        headline=[headline],
        vw_binary=shutil.which("vw"),
        results=raw,
    )


if __name__ == "__main__":
    main()
