"""Runner overhead on the spam path: ``pegasos-stream eval`` on SpamAssassin against bare learning and peers.

``pegasos-stream eval --config configs/spam.yaml --input SPAMASSASSIN --json``, called in-process
(``pegasos_stream.cli.main``) and timed from the call to its return (configuration, gzip, JSON,
features, learning, the exact ROC AUC at the end). Compared with *bare learning*: the same
``EmailFeatures`` and ``PegasosClassifier`` (built from the same configuration) running
``transform_one`` + ``decision_function_one`` + ``learn_one`` over messages parsed from JSON before the
clock starts. Runner overhead = 1 − eval rate / bare rate (target ≤ 20%). Peers, each reading the same
gzip file and parsing its JSON inside the timed loop: river ``BagOfWords() | LogisticRegression()`` on
the raw message (``predict_proba_one`` then ``learn_one``), and scikit-learn ``HashingVectorizer``
(binary character 4-grams of the first 3,000 characters of the raw message, case kept, L2-normalised,
2^20 columns) + ``SGDClassifier(loss="hinge", alpha=λ)`` with ``decision_function`` then
``partial_fit`` per event. EmailFeatures takes its 3,000 characters from the *parsed* message (subject,
sender, decoded body), the scikit-learn pipeline from the raw one (headers first), so their features
differ.

Accuracy and (1 − ROCA)% are prequential and exact (``_harness.prequential_metrics``). Native thread
pools are limited to one thread. Times: fastest of ``--repeat`` alternating passes for the runner and
bare learning, of ``--peer-repeat`` passes for the peers.

Usage: ``python scripts/bench_stream_spam.py [--data PATH] [--limit N] [--repeat 3] [--peer-repeat 1] [--profile]
[--out reports/stream_spam.json]``
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path

import numpy as np
from _data import char_ngram_vectorizer
from _harness import (
    REPO,
    Row,
    add_data_argument,
    add_out_argument,
    add_pass_arguments,
    alternate,
    cli_rate,
    eval_pass,
    eval_row,
    fastest,
    load_messages,
    passes_note,
    prepare_timing,
    profile_cli,
    read_json_lines,
    rows_section,
    same_metrics,
    scored_row,
    shown_command,
    write_results,
    yes,
)

from pegasos_stream.cli.assemble import build_features, build_model
from pegasos_stream.cli.config import load_config

SPAM_CONFIG = REPO / "configs" / "spam.yaml"


def bare_pass(config: dict, messages: list[tuple[str, bool]]) -> tuple[float, dict]:
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


def river_pass(path: Path, limit: int | None) -> tuple[float, dict]:
    """river BagOfWords | LogisticRegression on the raw message, from the file (its first ``limit``)."""
    from river import feature_extraction, linear_model

    model = feature_extraction.BagOfWords() | linear_model.LogisticRegression()
    scores, positives = [], []
    start = time.perf_counter()
    for event in itertools.islice(read_json_lines(path), limit):
        y = event["label"] == "spam"
        text = event["text"]
        scores.append(model.predict_proba_one(text).get(True, 0.0) - 0.5)
        model.learn_one(text, y)
        positives.append(y)
    return time.perf_counter() - start, {"scores": scores, "positives": positives}


def sklearn_pass(path: Path, alpha: float, limit: int | None) -> tuple[float, dict]:
    """HashingVectorizer(char 4-grams of the first 3,000 raw characters) + SGDClassifier.partial_fit, over the
    file (its first ``limit`` messages)."""
    from sklearn.linear_model import SGDClassifier

    vectorizer = char_ngram_vectorizer()
    model = SGDClassifier(loss="hinge", alpha=alpha)
    classes = np.array([False, True])
    scores, positives = [], []
    fitted = False
    start = time.perf_counter()
    for event in itertools.islice(read_json_lines(path), limit):
        y = event["label"] == "spam"
        row = vectorizer.transform([event["text"][:3000]])
        scores.append(float(model.decision_function(row)[0]) if fitted else 0.0)
        model.partial_fit(row, [y], classes=classes)
        fitted = True
        positives.append(y)
    return time.perf_counter() - start, {"scores": scores, "positives": positives}


def measure(args: argparse.Namespace) -> tuple[dict, dict]:
    """The report section and the raw results: eval vs bare learning, river and scikit-learn."""
    messages = [(m.text, m.is_spam) for m in load_messages(args.data)][: args.limit]  # exits clearly if missing
    config = load_config(SPAM_CONFIG)
    argv = ["eval", "--config", str(SPAM_CONFIG), "--input", str(args.data), "--json"]
    if args.limit is not None:
        argv += ["--max-events", str(args.limit)]
    print(f"{len(messages):,} SpamAssassin messages ...", file=sys.stderr)
    timings = alternate(args.repeat, {"eval": lambda: eval_pass(argv), "bare": lambda: bare_pass(config, messages)})
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
    rows: list[Row] = [runner, bare]
    rows.append(
        scored_row(
            "river BagOfWords() | LogisticRegression()",
            "gzip + JSON, predict_proba_one + learn_one on the raw message",
            fastest(args.peer_repeat, lambda: river_pass(args.data, args.limit)),
        )
    )
    print(f"  river {rows[-1].rate:,.0f}/s", file=sys.stderr)
    alpha = config["model"]["lambda_"]
    rows.append(
        scored_row(
            "scikit-learn HashingVectorizer(char 4-grams) + SGDClassifier(hinge)",
            "gzip + JSON, transform + decision_function + partial_fit per message",
            fastest(args.peer_repeat, lambda: sklearn_pass(args.data, alpha, args.limit)),
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
    title = f"Spam filter, SpamAssassin ({len(messages):,} messages), configs/spam.yaml"
    raw = {
        "command": command,
        "rows": [row.to_json() for row in rows],
        "overhead": overhead,
        "bare_reproduces_eval_metrics": same,
        "features": dict(config["features"]),
    }
    if args.profile:
        raw["profile"] = profile_cli(argv, args.profile_top)
    return rows_section(title, rows, bare, notes), raw


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_data_argument(parser)
    parser.add_argument("--limit", type=int, help="only the first N messages (a quick check)")
    add_pass_arguments(parser)
    add_out_argument(parser, "stream_spam.json")
    args = parser.parse_args()

    prepare_timing()
    table, raw = measure(args)
    write_results(
        args,
        "Runner overhead on the spam path: pegasos-stream eval against bare learning and peers",
        [table],
        results=raw,
    )


if __name__ == "__main__":
    main()
