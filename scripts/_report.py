"""Output shared by the benchmark scripts: machine facts, Markdown tables and the JSON result files.

Every benchmark writes one JSON document, ``{"title", "command", "environment", "sections"}``, where a
section is ``{"title", "columns", "rows", "notes", "figures"}``: rows are lists of cells already
formatted as text, figures are PNG paths relative to the JSON file. An optional ``"headline"`` holds
rows ``[benchmark, pegasos_stream value, best peer, peer value]``; other keys carry raw results.
``markdown(document)`` renders it; ``scripts/report.py`` gathers every document into ``reports/README.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
from collections.abc import Sequence
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

#: Distributions whose versions are recorded with every result (missing ones are recorded as None).
PACKAGES = ("pegasos-stream", "river", "scikit-learn", "numpy", "vowpalwabbit", "kafka-python")

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


def fmt(value: float | None, spec: str) -> str:
    """``format(value, spec)``, or an en dash for a missing value."""
    return "–" if value is None else format(value, spec)


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
