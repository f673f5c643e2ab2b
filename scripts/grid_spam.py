"""PegasosGrid against each of its λ alone, on the SpamAssassin stress streams.

Prequential evaluation as in the TREC spam track: each message is scored, then learnt; (1-ROCA)% is
100·(1 − exact ROC AUC of all the scores of the run), spam positive. Every run gets the features of
``configs/spam.yaml`` (the compiled byte reader, 2^20 columns), computed once per stream, and learns
in the compiled loop (``learn_rows``, bit for bit ``learn_one``). The runs: `PegasosClassifier` at
each λ of the grid, and the grid of ``configs/spam.yaml`` (`PegasosGrid`). The streams are those of
``scripts/_stress.py`` (as is, subject and sender only, body only, spam at about 13% and 3%,
shuffled, newest first).

Usage: ``python scripts/grid_spam.py [--streams asis,short,...] [--limit N] [--out reports/grid.json]``
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
from _harness import REPO, add_data_argument, add_out_argument, fmt, invocation, load_messages, section, write_document
from _stress import STREAMS, build_stream
from sklearn.metrics import roc_auc_score

from pegasos_stream import PegasosClassifier, PegasosGrid
from pegasos_stream.cli.assemble import build_features, build_model
from pegasos_stream.cli.config import load_config
from pegasos_stream.learners.rows import Rows

SPAM_CONFIG = REPO / "configs" / "spam.yaml"


def prequential(model: PegasosClassifier | PegasosGrid, rows: Rows, labels: np.ndarray) -> float:
    """(1-ROCA)% of ``model``'s decisions, each before its message is learnt."""
    decisions, probas = np.empty(len(labels)), np.empty(len(labels))
    signs = np.where(labels, 1.0, -1.0)
    _, error = model.learn_rows(rows, signs, np.ones(len(labels)), decisions, probas, 0)
    if error is not None:
        raise error
    return 100 * (1 - roc_auc_score(labels, decisions))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_data_argument(parser)
    parser.add_argument("--streams", default=",".join(STREAMS), help=f"comma-separated, of: {', '.join(STREAMS)}")
    parser.add_argument("--limit", type=int, help="the first N messages of each stream")
    add_out_argument(parser, "grid.json")
    args = parser.parse_args()
    names = args.streams.split(",")
    if unknown := set(names) - set(STREAMS):
        parser.error(f"unknown stream(s): {', '.join(sorted(unknown))}")

    config = load_config(SPAM_CONFIG)
    features, grid = build_features(config), build_model(config)
    messages = load_messages(args.data)
    runs = []
    for name in names:
        stream = build_stream(name, messages)[: args.limit]
        labels = np.array([is_spam for _, is_spam in stream])
        rows = Rows(*features.transform_texts([text for text, _ in stream]))
        print(f"{name}: {len(stream):,} messages ...", file=sys.stderr)
        run = {"stream": name, "messages": len(stream), "spam": int(labels.sum())}
        for lambda_ in grid.lambdas:
            run[f"{lambda_:g}"] = prequential(PegasosClassifier(lambda_=lambda_), rows, labels)
        run["grid"] = prequential(grid.clone(), rows, labels)
        runs.append(run)

    lambdas = [f"{lambda_:g}" for lambda_ in grid.lambdas]
    write_document(
        args.out,
        "PegasosGrid against each of its λ alone, SpamAssassin stress streams",
        invocation(),
        [
            section(
                "(1-ROCA)%, prequential, the features of configs/spam.yaml",
                ["stream", ">messages", ">spam", *(f">λ = {lam}" for lam in lambdas), ">grid"],
                [
                    [
                        r["stream"],
                        r["messages"],
                        r["spam"],
                        *(fmt(r[lam], ".3f") for lam in lambdas),
                        fmt(r["grid"], ".3f"),
                    ]
                    for r in runs
                ],
                notes=[f"grid: PegasosGrid(lambdas={grid.lambdas}, discount={grid.discount}), from configs/spam.yaml."],
            )
        ],
        runs=runs,
    )


if __name__ == "__main__":
    main()
