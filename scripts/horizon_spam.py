"""Effect of PegasosClassifier's ``horizon`` on the chronological SpamAssassin stream.

Prequential evaluation as in the TREC spam track: each message is scored by ``decision_function_one``
(prediction: score > 0, i.e. spam), then learnt. Reported per (features, λ, horizon): accuracy over
the whole stream, exact ROC AUC of all the scores (``sklearn.metrics.roc_auc_score``), (1-ROCA)%,
and error and (1-ROCA)% over the last third of the stream (where a finite horizon has had time to act).

Features:

* ``char4``: binary hashed character 4-grams of the first 3000 characters of the raw message,
  L2-normalised (Sculley & Wachman 2007);
* ``words``: binary lowercase word tokens of subject and body, L2-normalised.

With ``horizon=H`` the step size stops decreasing at t = H (η = 1/(λH) from then on), so horizons at or
above the stream length (6,046 messages) behave exactly like ``None``.

Results go to ``--out`` (default ``reports/horizon.json``, the common format of ``_harness``, with the raw
runs) and are printed as Markdown.

Usage: ``python scripts/horizon_spam.py [--lambdas 1e-4,1e-5] [--horizons none,500,...] [--out reports/horizon.json]``
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import numpy as np
from _data import char_ngram_matrix, csr_rows, l2_normalise, word_features
from _harness import add_data_argument, add_out_argument, fmt, invocation, load_messages, section, write_document
from sklearn.metrics import roc_auc_score

from pegasos_stream import PegasosClassifier

FEATURE_SETS = ("char4", "words")


def parse_horizon(text: str) -> int | None:
    """'none' -> None, otherwise a positive int."""
    return None if text.lower() == "none" else int(text)


def featurise(texts: Sequence[str], kind: str) -> list[dict]:
    """Feature dicts of one kind for every message, computed once."""
    if kind == "char4":
        return csr_rows(char_ngram_matrix(texts))
    return [l2_normalise(word_features(text)) for text in texts]


def prequential_scores(stream: Sequence[dict], labels: Sequence[bool], lam: float, horizon: int | None) -> np.ndarray:
    """Decision values of each message before it is learnt, in stream order."""
    model = PegasosClassifier(lambda_=lam, horizon=horizon)
    scores = np.empty(len(stream))
    for i, (x, y) in enumerate(zip(stream, labels, strict=True)):
        scores[i] = model.decision_function_one(x)
        model.learn_one(x, y)
    return scores


def evaluate(scores: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """Accuracy and ROC AUC over the stream; error and (1-ROCA)% over its last third."""
    correct = (scores > 0) == labels
    auc = roc_auc_score(labels, scores)
    tail = slice(2 * len(labels) // 3, None)
    tail_auc = roc_auc_score(labels[tail], scores[tail])
    return {
        "accuracy": float(correct.mean()),
        "roc_auc": float(auc),
        "one_minus_roca_pct": 100 * (1 - auc),
        "last_third_error_pct": 100 * float(1 - correct[tail].mean()),
        "last_third_one_minus_roca_pct": 100 * (1 - tail_auc),
    }


def results_section(rows: list[dict], n: int) -> dict:
    """All runs as one report section."""
    return section(
        f"PegasosClassifier on SpamAssassin ({n:,} messages, chronological, prequential)",
        [
            "features",
            ">λ",
            ">horizon",
            ">accuracy",
            ">ROC AUC",
            ">(1-ROCA)%",
            ">error % last third",
            ">(1-ROCA)% last third",
        ],
        [
            [
                r["features"],
                fmt(r["lambda"], "g"),
                r["horizon"] or "None",
                fmt(r["accuracy"], ".4f"),
                fmt(r["roc_auc"], ".5f"),
                fmt(r["one_minus_roca_pct"], ".3f"),
                fmt(r["last_third_error_pct"], ".2f"),
                fmt(r["last_third_one_minus_roca_pct"], ".3f"),
            ]
            for r in rows
        ],
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_data_argument(parser)
    parser.add_argument(
        "--horizons", default="none,500,1000,2000,5000,10000", help="comma-separated; 'none' = no horizon"
    )
    parser.add_argument("--lambdas", default="1e-4,1e-5", help="comma-separated λ values")
    parser.add_argument("--features", default=",".join(FEATURE_SETS), help="comma-separated: char4, words")
    add_out_argument(parser, "horizon.json")
    args = parser.parse_args()
    horizons = [parse_horizon(h) for h in args.horizons.split(",")]
    lambdas = [float(v) for v in args.lambdas.split(",")]
    kinds = args.features.split(",")
    if unknown := set(kinds) - set(FEATURE_SETS):
        parser.error(f"unknown feature set(s): {', '.join(sorted(unknown))}")

    messages = load_messages(args.data)
    texts = [m.text for m in messages]
    labels = np.array([m.is_spam for m in messages])
    rows = []
    for kind in kinds:
        stream = featurise(texts, kind)
        for lam in lambdas:
            for horizon in horizons:
                print(f"{kind} λ={lam:g} horizon={horizon} ...", file=sys.stderr)
                scores = prequential_scores(stream, labels.tolist(), lam, horizon)
                rows.append({"features": kind, "lambda": lam, "horizon": horizon, **evaluate(scores, labels)})

    write_document(
        args.out,
        "Effect of PegasosClassifier's horizon on the chronological SpamAssassin stream",
        invocation(),
        [results_section(rows, len(messages))],
        n_messages=len(messages),
        runs=rows,
    )


if __name__ == "__main__":
    main()
