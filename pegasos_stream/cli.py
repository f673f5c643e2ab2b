"""The ``pegasos-stream`` command line."""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

from .evaluation import BinaryReport
from .features import EmailFeatures
from .linear import PegasosClassifier

SAMPLE_STREAM = "spam-sample.jsonl.gz"


def read_events(path: str) -> Iterator[dict]:
    """JSON events, one per line, from a file (gzip when it ends in .gz) or '-' for stdin."""
    if path == "-":
        lines = sys.stdin
    elif path.endswith(".gz"):
        lines = gzip.open(path, "rt", encoding="utf-8")
    else:
        lines = open(path, encoding="utf-8")
    with lines:
        for number, line in enumerate(lines, 1):
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as error:
                    raise SystemExit(f"{path}:{number}: not a JSON object: {error}") from None


def evaluate(events: Iterator[dict], model: PegasosClassifier, features: EmailFeatures) -> dict:
    """Prequential evaluation: score each message, then learn its label."""
    report = BinaryReport()
    start = time.perf_counter()
    for event in events:
        x = features.transform_one(event["text"])
        spam = event["label"] == "spam"
        score = model.decision_function_one(x)
        report.update(spam, score > 0.0, score)
        model.learn_one(x, spam)
    elapsed = time.perf_counter() - start
    summary = report.summary()
    summary["examples_per_s"] = summary["n"] / elapsed if elapsed else float("nan")
    summary["t"] = model.t
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pegasos-stream", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    run_eval = commands.add_parser("eval", help="replay a labelled email stream prequentially")
    run_eval.add_argument("--input", help="JSON lines {text, label: spam|ham}; default: the bundled sample")
    run_eval.add_argument("--lambda", dest="lambda_", type=float, default=1e-4)
    run_eval.add_argument("--horizon", type=int, default=None)
    run_eval.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)

    if args.input:
        events = read_events(args.input)
    else:
        sample = resources.files("pegasos_stream") / "data" / SAMPLE_STREAM
        events = read_events(str(Path(str(sample))))
    model = PegasosClassifier(lambda_=args.lambda_, horizon=args.horizon)
    summary = evaluate(events, model, EmailFeatures())
    if args.json:
        print(json.dumps(summary))
    else:
        for key, value in summary.items():
            print(f"{key:>20}: {value:.6g}" if isinstance(value, float) else f"{key:>20}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
