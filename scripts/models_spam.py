"""pegasos_stream's models on the SpamAssassin stress streams: the shipped one and the alternatives.

Prequential evaluation as in the TREC spam track: each message is scored, then learnt; (1-ROCA)% is
100·(1 − exact ROC AUC of all the scores of the run), spam positive. Every run gets the features of
``configs/spam.yaml`` (the compiled byte reader, 2^20 columns), computed once per stream, and learns
in the compiled loop (``learn_rows``, bit for bit ``learn_one``). The models: the one
``configs/spam.yaml`` builds (a `PegasosCommittee`); each of its two members alone (its
`PegasosClassifier`, λ = 1e-5 and t0 = 30,000, the previous shipped model, and its `AdaGradLogistic`);
`PegasosClassifier` at λ = 1e-4 without ``t0`` (the default before that); `PegasosGrid` at its
defaults (four λ, no ``t0``). The streams are those
of ``scripts/_stress.py`` (as is, subject and sender only, body only, spam at about 13% and 3%,
shuffled, newest first).

Usage: ``python scripts/models_spam.py [--streams asis,short,...] [--limit N] [--out reports/models.json]``
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

import numpy as np
from _harness import REPO, add_data_argument, add_out_argument, fmt, invocation, load_messages, section, write_document
from _stress import STREAMS, build_stream
from sklearn.metrics import roc_auc_score

from pegasos_stream import AdaGradLogistic, PegasosClassifier, PegasosCommittee, PegasosGrid
from pegasos_stream.cli.assemble import build_features, build_model
from pegasos_stream.cli.config import load_config
from pegasos_stream.learners.rows import Rows

SPAM_CONFIG = REPO / "configs" / "spam.yaml"


Model = PegasosCommittee | PegasosClassifier | AdaGradLogistic | PegasosGrid


def prequential(model: Model, rows: Rows, labels: np.ndarray) -> float:
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
    add_out_argument(parser, "models.json")
    args = parser.parse_args()
    names = args.streams.split(",")
    if unknown := set(names) - set(STREAMS):
        parser.error(f"unknown stream(s): {', '.join(sorted(unknown))}")

    config = load_config(SPAM_CONFIG)
    features, shipped = build_features(config), build_model(config)
    if not isinstance(shipped, PegasosCommittee):
        sys.exit(f"error: configs/spam.yaml builds a {type(shipped).__name__}, expected a PegasosCommittee")
    models: dict[str, Callable[[], Model]] = {
        "configs/spam.yaml": shipped.clone,
        f"its Pegasos (λ = {shipped.lambda_:g}, t0 = {shipped.t0})": shipped.svm.clone,
        f"its AdaGradLogistic (η = {shipped.learning_rate:g})": shipped.logistic.clone,
        "λ = 1e-4, t0 = 0": lambda: PegasosClassifier(lambda_=1e-4),
        "PegasosGrid()": PegasosGrid,
    }
    messages = load_messages(args.data)
    runs = []
    for name in names:
        stream = build_stream(name, messages)[: args.limit]
        labels = np.array([is_spam for _, is_spam in stream])
        rows = Rows(*features.transform_texts([text for text, _ in stream]))
        print(f"{name}: {len(stream):,} messages ...", file=sys.stderr)
        run = {"stream": name, "messages": len(stream), "spam": int(labels.sum())}
        run.update((model, prequential(make(), rows, labels)) for model, make in models.items())
        runs.append(run)

    write_document(
        args.out,
        "pegasos_stream's models on the SpamAssassin stress streams",
        invocation(),
        [
            section(
                "(1-ROCA)%, prequential, the features of configs/spam.yaml",
                ["stream", ">messages", ">spam", *(f">{model}" for model in models)],
                [[r["stream"], r["messages"], r["spam"], *(fmt(r[model], ".3f") for model in models)] for r in runs],
                notes=[f"configs/spam.yaml: {dict(config['model'])}."],
            )
        ],
        runs=runs,
    )


if __name__ == "__main__":
    main()
