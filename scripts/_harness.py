"""The harness every benchmark script shares: the result format, data loading, paired passes.

**Result format.** Every benchmark writes one JSON document, ``{"title", "command", "environment",
"sections"}``, where a section is ``{"title", "columns", "rows", "notes", "figures"}``: rows are lists of
cells already formatted as text, figures are PNG paths relative to the JSON file. An optional
``"headline"`` holds rows ``[benchmark, pegasos_stream value, best peer, peer value]``; other keys carry
raw results. ``markdown(document)`` renders it; ``scripts/report.py`` gathers every document into
``reports/README.md``.

**Data.** The SpamAssassin stream and the Ling-Spam corpus live outside the repository, in ``shared/data`` next
to it; every script that reads them takes ``--data`` (and ``--lingspam-data``) to point elsewhere
(``load_messages``, ``read_json_lines``).

**Paired passes.** ``alternate`` runs the passes of several systems in turn (A, B, A, B, …), so that a
slow spell of the machine hits them all, and keeps the fastest of each; ``prequential_metrics`` scores
the decisions of a pass exactly. ``run_cli`` and ``Row`` time ``pegasos-stream`` in-process and table
it against bare learning and peers.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import gc
import gzip
import io
import json
import os
import platform
import pstats
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import NamedTuple

import numpy as np
from scipy.stats import rankdata
from threadpoolctl import threadpool_limits

# -- machine facts and the result format -------------------------------------------------------

REPO = Path(__file__).resolve().parents[1]

#: Distributions whose versions are recorded with every result (missing ones are recorded as None).
PACKAGES = ("pegasos-stream", "river", "scikit-learn", "numpy", "vowpalwabbit", "kafka-python", "confluent-kafka")

#: When the benchmark started (scripts import this module at start-up), and the 1-minute load average then.
STARTED = datetime.now(timezone.utc).isoformat(timespec="seconds")
LOAD_AT_START = os.getloadavg()[0]


def git_commit() -> str | None:
    """The repository's commit, with "+changes" when tracked files differ from it."""
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


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def environment() -> dict:
    """Versions and machine facts recorded with the results."""
    return {
        "date": STARTED,
        "commit": git_commit(),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "processor": platform.processor(),
        "cpus": os.cpu_count(),
        "load_average_1min": LOAD_AT_START,
        "load_average_1min_at_end": os.getloadavg()[0],
        **{package: _version(package) for package in PACKAGES},
    }


def invocation() -> str:
    """The running script's command line, as typed from the repository root: ``python scripts/x.py ...``."""
    script = Path(sys.argv[0]).resolve()
    shown = script.relative_to(REPO) if script.is_relative_to(REPO) else script
    return shlex.join(["python", str(shown), *sys.argv[1:]])


def add_out_argument(parser: argparse.ArgumentParser, filename: str) -> None:
    """Add ``--out PATH``, the JSON result file, defaulting to ``reports/<filename>`` in the repository."""
    parser.add_argument(
        "--out",
        type=Path,
        default=REPO / "reports" / filename,
        help=f"JSON result file (default: reports/{filename} in the repository)",
    )


def warn_if_busy() -> None:
    """Say on stderr when the machine is already loaded (timings would be noisy)."""
    if os.getloadavg()[0] > 1.0:
        print("warning: the machine is busy (1-minute load average > 1); timings will be noisy", file=sys.stderr)


def prepare_timing() -> None:
    """Limit native thread pools to one thread (threadpoolctl); warn when the machine is busy."""
    threadpool_limits(limits=1)
    warn_if_busy()


def fmt(value: float | None, spec: str) -> str:
    """``format(value, spec)``, or an en dash for a missing value."""
    return "–" if value is None else format(value, spec)


def percentile(values: Sequence[float], q: float) -> float:
    """The value at rank ``q`` (0 to 1) of ``values``: the ``int(q·n)``-th smallest, the largest at most."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def min_median(ratios: Sequence[float]) -> str:
    """The smallest and the median of paired ratios, as the headlines give them: "min 1.20, median 1.29"."""
    return f"min {min(ratios):.2f}, median {statistics.median(ratios):.2f}"


def cell(text: object) -> str:
    """Text for a Markdown table cell (a pipe would end the cell)."""
    return str(text).replace("|", "\\|")


def markdown_table(columns: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A Markdown table; columns whose title starts with a space-free '>' are right-aligned.

    ``markdown_table([">n", "name"], ...)`` right-aligns ``n``; the '>' is not printed.
    """
    titles = [c[1:] if c.startswith(">") else c for c in columns]
    rules = ["---:" if c.startswith(">") else "---" for c in columns]
    lines = ["| " + " | ".join(cell(t) for t in titles) + " |", "| " + " | ".join(rules) + " |"]
    lines += ["| " + " | ".join(cell(value) for value in row) + " |" for row in rows]
    return "\n".join(lines)


def section(
    title: str,
    columns: Sequence[str],
    rows: Sequence[Sequence[object]],
    notes: Sequence[str] = (),
    figures: Sequence[str] = (),
) -> dict:
    """One table of a result document."""
    return {
        "title": title,
        "columns": list(columns),
        "rows": [[str(value) for value in row] for row in rows],
        "notes": list(notes),
        "figures": list(figures),
    }


def markdown(document: dict, level: int = 2) -> str:
    """A result document as Markdown: a heading per section, its table, notes and figures."""
    hashes = "#" * level
    env = document["environment"]
    parts = [
        f"{hashes} {document['title']}",
        f"Command: `{document['command']}`. Run {env.get('date', 'at an unrecorded date')}, commit {env['commit']}, "
        f"Python {env['python']}, {env['cpus']} CPUs, "
        f"1-minute load average {env['load_average_1min']:.2f} at start"
        + (f", {env['load_average_1min_at_end']:.2f} at end." if "load_average_1min_at_end" in env else "."),
    ]
    for sec in document["sections"]:
        parts.append(f"{hashes}# {sec['title']}")
        parts.append(markdown_table(sec["columns"], sec["rows"]))
        parts += sec["notes"]
        parts += [f"![{sec['title']}]({figure})" for figure in sec["figures"]]
    return "\n\n".join(parts)


def write_document(path: Path, title: str, command: str, sections: Sequence[dict], **extra: object) -> dict:
    """Write the JSON result document to ``path`` (and print its Markdown); returns the document."""
    document = {"title": title, "command": command, "environment": environment(), "sections": list(sections), **extra}
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as out:
        json.dump(document, out, indent=2, default=str)
    print(markdown(document))
    return document


def write_results(args: argparse.Namespace, title: str, sections: Sequence[dict], **extra: object) -> dict:
    """``write_document`` to ``args.out``, with the command line and its parsed ``arguments``."""
    arguments = {key: _relative(value) if isinstance(value, Path) else str(value) for key, value in vars(args).items()}
    return write_document(args.out, title, invocation(), sections, arguments=arguments, **extra)


def _relative(path: Path) -> str:
    """``path`` relative to the repository when it can be (so a result names no machine's folders)."""
    return os.path.relpath(path.resolve(), REPO)


# -- data --------------------------------------------------------------------------------------

#: ``../shared/data/spamassassin.jsonl.gz`` relative to the repository root.
DEFAULT_DATA = REPO.parent / "shared" / "data" / "spamassassin.jsonl.gz"
#: ``../shared/data/lingspam.jsonl.gz`` relative to the repository root.
DEFAULT_LINGSPAM = DEFAULT_DATA.with_name("lingspam.jsonl.gz")


class Message(NamedTuple):
    """One email of the stream (``time`` is "" for Ling-Spam, which has no delivery times)."""

    id: str
    time: str
    is_spam: bool
    text: str


def add_data_argument(parser: argparse.ArgumentParser) -> None:
    """Add the ``--data`` option (path of spamassassin.jsonl.gz) to ``parser``."""
    parser.add_argument(
        "--data",
        type=Path,
        default=DEFAULT_DATA,
        help="spamassassin.jsonl.gz (default: ../shared/data/ next to the repository)",
    )


def add_lingspam_argument(parser: argparse.ArgumentParser) -> None:
    """Add the ``--lingspam-data`` option (path of lingspam.jsonl.gz) to ``parser``."""
    parser.add_argument(
        "--lingspam-data",
        type=Path,
        default=DEFAULT_LINGSPAM,
        help="lingspam.jsonl.gz (default: ../shared/data/ next to the repository)",
    )


def read_json_lines(path: Path) -> Iterator[dict]:
    """The JSON objects of a gzipped JSON-lines file, read and parsed lazily."""
    with gzip.open(path, "rb") as lines:
        for line in lines:
            if line.strip():
                yield json.loads(line)


def first_svm(model: dict) -> dict:
    """The first Pegasos SVM of a spam configuration's model section: a linear model's or a committee's
    ``lambda_`` and ``t0``, a mixture's first λ and its t0 (``lambda_t0``/λ)."""
    if "lambdas" not in model:
        return {"lambda_": model["lambda_"], "t0": model.get("t0", 0)}
    lambda_ = model["lambdas"][0]
    return {"lambda_": lambda_, "t0": round(model["lambda_t0"] / lambda_)}


def load_messages(path: Path, option: str = "--data") -> list[Message]:
    """Read a corpus of the shared data (the chronological SpamAssassin stream, or Ling-Spam in its order); exit
    with a clear message, naming the ``option`` that points elsewhere, if the file is missing."""
    if not path.is_file():
        sys.exit(
            f"error: data not found at {path}\n"
            f"  expected shared/data/{path.name} next to the repository; pass {option} PATH"
        )
    return [Message(r["id"], r.get("time", ""), r["label"] == "spam", r["text"]) for r in read_json_lines(path)]


# -- paired passes -----------------------------------------------------------------------------

Timing = tuple[float, list[float], dict]
"""(fastest seconds, the seconds of every pass, the details the fastest pass returned)."""


def alternate(passes: int, runs: dict[str, Callable[[], tuple[float, dict]]]) -> dict[str, Timing]:
    """``passes`` rounds of each run (it returns (seconds, details)) in turn, A, B, A, B, …, so that a slow
    spell of the machine hits them all; the Timing of each."""
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


def prequential_metrics(
    scores: Sequence[float] | np.ndarray, positives: Sequence[bool] | np.ndarray
) -> tuple[float, float]:
    """(accuracy of score > 0, 100·(1 − ROC AUC)) from all scores; ties count one half."""
    scores = np.asarray(scores, dtype=float)
    positives = np.asarray(positives, dtype=bool)
    accuracy = float(np.mean((scores > 0.0) == positives))
    n_pos = int(positives.sum())
    n_neg = positives.size - n_pos
    ranks = rankdata(scores)  # average ranks of ties
    auc = (ranks[positives].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg)
    return accuracy, 100.0 * (1.0 - float(auc))


# -- pegasos-stream against bare learning and peers --------------------------------------------

#: Columns of a table of Rows.
ROW_COLUMNS = [
    "system", "timed", ">events", ">seconds", ">events/s", ">× bare learn_one", ">prequential accuracy",
    ">(1−ROCA)%", ">all passes (s)",
]  # fmt: skip


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


def shown_command(argv: Sequence[str]) -> str:
    """The ``pegasos-stream`` command line, with paths relative to the repository."""
    return "pegasos-stream " + " ".join(os.path.relpath(a, REPO) if os.path.isabs(a) else a for a in argv)


def run_cli(argv: list[str]) -> tuple[float, str, str]:
    """``pegasos-stream ARGV`` in-process: (seconds from the call to its return, stdout, stderr)."""
    from pegasos_stream.cli import main

    out, err = io.StringIO(), io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
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
    """A table of rows; rates relative to ``bare``."""
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


def add_pass_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--repeat``, ``--peer-repeat`` and ``--profile`` for a benchmark of eval against bare learning."""
    parser.add_argument("--repeat", type=int, default=3, help="passes of eval and of bare learning; the fastest counts")
    parser.add_argument("--peer-repeat", type=int, default=1, help="passes of each peer; the fastest counts")
    parser.add_argument("--profile", action="store_true", help="also print a cProfile of one eval run")
    parser.add_argument("--profile-top", type=int, default=25, help="functions shown by --profile")


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


def profile_cli(argv: list[str], top: int) -> str:
    """A cProfile of one in-process ``pegasos-stream ARGV`` run, printed: the ``top`` functions by own time."""
    from pegasos_stream.cli import main

    profiler = cProfile.Profile()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        profiler.runcall(main, argv)
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).strip_dirs().sort_stats("tottime").print_stats(top)
    print(f"\n### cProfile of one `pegasos-stream {argv[0]}` run, by own time\n\n```\n{text.getvalue().strip()}\n```")
    return text.getvalue()
