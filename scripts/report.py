"""Run every benchmark and gather their results into ``reports/README.md``.

Each benchmark script writes one JSON document in the common format of ``_harness`` to ``reports/``. This
runs them in turn, in the order of ``BENCHMARKS``, as ``python scripts/<name>.py --out reports/<file>``
with this same Python; their output streams through and each one's wall time is printed. A script that
does not exist yet, or whose ``--help`` does not list ``--out``, is skipped; a failing one is reported
with the end of its stderr, the others still run, and the exit status is then 1.

Then it writes ``reports/README.md`` from every document present in ``reports/`` (also those not run this
time): how it was produced, a headline table gathered from the documents' ``headline`` rows, and each
document in full (figure paths are relative to the JSON files, so they link from ``reports/`` as they
are). The headline table also replaces the lines between ``<!-- headline:start -->`` and
``<!-- headline:end -->`` in the top-level README.md, when both markers are there (not with ``--quick``).

    python scripts/report.py                       # everything at full size (expect tens of minutes)
    python scripts/report.py --quick               # reduced sizes, to check the whole pipeline
    python scripts/report.py --only bench_kernel   # run one script (README.md still gathers all)
    python scripts/report.py --skip bench_stream_kafka
    python scripts/report.py --no-run              # only rebuild README.md from reports/*.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import time
from collections import deque
from datetime import datetime, timezone
from typing import NamedTuple

from _harness import REPO, invocation, markdown, markdown_table

REPORTS = REPO / "reports"
README = REPO / "README.md"
HEADLINE_START, HEADLINE_END = "<!-- headline:start -->", "<!-- headline:end -->"
#: Lines of a failing script's stderr repeated in the summary.
TAIL_LINES = 20


class Benchmark(NamedTuple):
    """A benchmark run: its result file in ``reports/``, its reduced-size options for ``--quick``, and, for a second
    run of a script under another name, the script and the options of its full-size run."""

    out: str
    quick: dict[str, list[str]]
    script: str | None = None  # (None: the benchmark's name)
    full: tuple[tuple[str, list[str]], ...] = ()


#: Benchmark runs (``scripts/<name>.py``, or the script named), in the order they run and appear in the report.
BENCHMARKS = {
    "bench_spam": Benchmark(
        "spam_stress.json", {"--corpus": ["both"], "--limit": ["1500"], "--quick": []}, full=(("--corpus", ["both"]),)
    ),
    "models_spam": Benchmark("models.json", {"--limit": ["1500"]}),
    "bench_learners": Benchmark("learners.json", {"--n": ["2000"], "--repeat": ["1"], "--memory-weights": ["100000"]}),
    "bench_river_defaults": Benchmark("river_defaults.json", {"--events": ["1000"]}),
    "horizon_spam": Benchmark("horizon.json", {"--horizons": ["none,2000"], "--lambdas": ["1e-4"]}),
    "bench_scale": Benchmark(
        "scale.json", {"--n": ["50000"], "--n-test": ["5000"], "--budget-seconds": ["10"], "--max-passes": ["2"]}
    ),
    "bench_kernel": Benchmark("kernel.json", {"--budgets": ["50"], "--passes": ["1"]}),
    "bench_stream_spam": Benchmark("stream_spam.json", {"--limit": ["1500"], "--repeat": ["1"]}),
    "bench_stream_replay": Benchmark(
        "stream_replay.json", {"--lines": ["20000"], "--sklearn-stream-lines": ["2000"], "--repeat": ["1"]}
    ),
    "bench_stream_replay_1m": Benchmark(
        "stream_replay_1m.json",
        {"--lines": ["40000"], "--sklearn-stream-lines": ["2000"], "--repeat": ["1"]},
        script="bench_stream_replay",
        full=(("--lines", ["1000000"]), ("--sklearn-stream-lines", ["20000"]), ("--repeat", ["3"])),
    ),
    "bench_stream_kafka": Benchmark("stream_kafka.json", {"--events": ["5000"], "--repeat": ["1"]}),
    "bench_cluster": Benchmark("cluster.json", {"--quick": []}),
    "bench_checkpoint": Benchmark("checkpoint.json", {"--weights": ["100000"]}),
    "bench_pass": Benchmark("pass.json", {"--n": ["100000"], "--repeat": ["1"]}),
    "bench_event": Benchmark("event.json", {"--limit": ["500"], "--repeat": ["1"]}),
    "bench_personal": Benchmark("personal.json", {"--limit": ["1500"]}),
    "bench_personal_memory": Benchmark("personal_memory.json", {"--users": ["10000", "100000"]}),
    "bench_users": Benchmark("users.json", {"--limit": ["600"], "--rounds": ["1"]}),
    "bench_spamd": Benchmark(
        "spamd.json",
        {
            "--train": ["500"],
            "--messages": ["200"],
            "--spamd-messages": ["30"],
            "--rss-messages": ["5000"],
            "--rss-every": ["1000"],
        },
    ),
    "bench_abuse": Benchmark(
        "abuse.json", {"--train": ["500"], "--messages": ["200"], "--slow": ["600"], "--slow-seconds": ["10"]}
    ),
}


class Outcome(NamedTuple):
    """What became of one script: status "ok", "failed" or "skipped", with a reason or stderr tail."""

    name: str
    status: str
    detail: str = ""
    seconds: float | None = None


def lists_option(help_text: str, option: str) -> bool:
    """Whether ``option`` appears as a whole option name in a ``--help`` text."""
    return re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", help_text) is not None


def run(name: str, benchmark: Benchmark, quick: bool) -> Outcome:
    """Run one benchmark script, streaming its output; stderr is also kept for the summary."""
    script = f"scripts/{benchmark.script or name}.py"
    if not (REPO / script).is_file():
        return Outcome(name, "skipped", f"{script} does not exist yet")
    helped = subprocess.run(
        [sys.executable, script, "--help"], cwd=REPO, capture_output=True, text=True, errors="replace", check=False
    )
    if helped.returncode != 0:
        return Outcome(name, "failed", "--help failed:\n" + "".join(helped.stderr.splitlines(True)[-TAIL_LINES:]))
    if not lists_option(helped.stdout, "--out"):
        return Outcome(name, "skipped", f"{script} does not accept --out yet")
    arguments = [script, "--out", f"reports/{benchmark.out}"]
    for option, values in benchmark.quick.items() if quick else benchmark.full:
        if lists_option(helped.stdout, option):
            arguments += [option, *values]
        else:
            print(f"note: {script} does not list {option}; running without it", flush=True)

    print(f"\n=== {name}: {shlex.join(['python', *arguments])}", flush=True)
    start = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, *arguments],
        cwd=REPO,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    for line in process.stderr:
        sys.stderr.write(line)
        sys.stderr.flush()
        tail.append(line)
    returncode = process.wait()
    seconds = time.perf_counter() - start
    status = "ok" if returncode == 0 else "failed"
    print(f"=== {name}: {status if returncode == 0 else f'failed (exit {returncode})'} in {seconds:.1f} s", flush=True)
    return Outcome(name, status, "" if returncode == 0 else "".join(tail), seconds)


def load_documents() -> dict[str, dict]:
    """The result documents present in ``reports/``, by script name, in ``BENCHMARKS`` order."""
    documents = {}
    for name, benchmark in BENCHMARKS.items():
        path = REPORTS / benchmark.out
        if not path.is_file():
            continue
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as error:
            print(f"note: {path.relative_to(REPO)} is unreadable ({error}); left out of the report")
            continue
        if not {"title", "command", "environment", "sections"} <= document.keys():
            print(f"note: {path.relative_to(REPO)} is not in the common result format; left out of the report")
            continue
        documents[name] = document
    return documents


def distinct(documents: dict[str, dict], key: str) -> str:
    """The values of one environment fact across the documents, comma-separated."""
    return ", ".join(sorted({str(d["environment"].get(key)) for d in documents.values()}))


def utc(iso: str) -> str:
    """An ISO 8601 time as ``YYYY-MM-DD HH:MM UTC``."""
    return datetime.fromisoformat(iso).astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def provenance(documents: dict[str, dict], outcomes: list[Outcome]) -> str:
    """The paragraph saying how the report was produced and on what."""
    now = utc(datetime.now(timezone.utc).isoformat())
    lines = [f"Assembled by `{invocation()}` at {now} from the JSON documents in this directory."]
    if documents:
        dates = sorted(utc(d["environment"]["date"]) for d in documents.values() if d["environment"].get("date"))
        if dates:
            when = f"at {dates[0]}" if dates[0] == dates[-1] else f"between {dates[0]} and {dates[-1]}"
            lines.append(f"The benchmarks started {when}, each with the command shown under its heading.")
        lines.append(
            f"Commit {distinct(documents, 'commit')}; Python {distinct(documents, 'python')}; "
            f"{distinct(documents, 'machine')} with {distinct(documents, 'cpus')} CPUs; "
            f"river {distinct(documents, 'river')}, scikit-learn {distinct(documents, 'scikit-learn')}, "
            f"numpy {distinct(documents, 'numpy')}, vowpalwabbit {distinct(documents, 'vowpalwabbit')}."
        )
    for outcome in outcomes:
        if outcome.status == "failed":
            earlier = "; its section below is from an earlier run" if outcome.name in documents else ""
            lines.append(f"`{outcome.name}` failed in this run{earlier}.")
        elif outcome.status == "skipped":
            lines.append(f"`{outcome.name}` was skipped: {outcome.detail}.")
    if missing := [name for name in BENCHMARKS if name not in documents]:
        lines.append("No results from " + ", ".join(f"`{name}`" for name in missing) + ".")
    return " ".join(lines)


def headline_table(documents: dict[str, dict]) -> str | None:
    """Every document's headline rows as one table (None when there are none)."""
    rows = [row for d in documents.values() for row in d.get("headline", [])]
    return markdown_table(["benchmark", ">pegasos_stream", "best peer", ">peer"], rows) if rows else None


def write_report(documents: dict[str, dict], outcomes: list[Outcome], headline: str | None) -> None:
    """Write ``reports/README.md``."""
    parts = ["# pegasos_stream benchmarks", provenance(documents, outcomes)]
    if headline:
        parts += ["## Headline", headline]
    parts += [markdown(document, level=2) for document in documents.values()]
    REPORTS.mkdir(exist_ok=True)
    (REPORTS / "README.md").write_text("\n\n".join(parts) + "\n", encoding="utf-8")
    print(f"wrote {(REPORTS / 'README.md').relative_to(REPO)} ({len(documents)} documents)")


def update_readme(headline: str) -> None:
    """Put the headline table between the headline markers of the top-level README.md."""
    lines = README.read_text(encoding="utf-8").splitlines(keepends=True)
    stripped = [line.strip() for line in lines]
    if HEADLINE_START not in stripped or HEADLINE_END not in stripped[stripped.index(HEADLINE_START) :]:
        print(f"note: README.md has no {HEADLINE_START} ... {HEADLINE_END} block; left alone")
        return
    start = stripped.index(HEADLINE_START)
    end = stripped.index(HEADLINE_END, start)
    README.write_text("".join([*lines[: start + 1], "\n", headline + "\n", "\n", *lines[end:]]), encoding="utf-8")
    print("updated the headline table in README.md")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="reduced sizes (each script's quick options)")
    parser.add_argument("--only", nargs="+", choices=list(BENCHMARKS), metavar="NAME", help="run only these")
    parser.add_argument(
        "--skip", nargs="+", choices=list(BENCHMARKS), default=[], metavar="NAME", help="run all but these"
    )
    parser.add_argument("--no-run", action="store_true", help="run nothing; rebuild README.md from reports/*.json")
    args = parser.parse_args()
    if args.no_run and (args.quick or args.only or args.skip):
        parser.error("--no-run runs nothing: --quick, --only and --skip do not apply")

    outcomes = []
    if not args.no_run:
        for name, benchmark in BENCHMARKS.items():
            if (args.only is None or name in args.only) and name not in args.skip:
                outcomes.append(run(name, benchmark, args.quick))
        print()
        print(
            markdown_table(
                ["script", "status", ">wall s", "note"],
                [
                    [
                        o.name,
                        o.status,
                        "" if o.seconds is None else f"{o.seconds:.1f}",
                        o.detail if o.status == "skipped" else "",
                    ]
                    for o in outcomes
                ],
            )
        )
        for outcome in outcomes:
            if outcome.status == "failed":
                print(f"\n--- {outcome.name} failed; end of its stderr:\n{outcome.detail.rstrip()}")
        print()

    documents = load_documents()
    headline = headline_table(documents)
    write_report(documents, outcomes, headline)
    if args.quick:
        print("note: --quick results are not headline numbers; README.md left alone")
    elif headline:
        update_readme(headline)
    else:
        print("note: no headline rows in the documents; README.md left alone")
    sys.exit(1 if any(o.status == "failed" for o in outcomes) else 0)


if __name__ == "__main__":
    main()
