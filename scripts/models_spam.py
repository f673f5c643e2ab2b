"""pegasos_stream's models on the stress streams of SpamAssassin and Ling-Spam: the shipped one, its members and the
alternatives.

Prequential evaluation as in the TREC spam track: each message is scored, then learnt; (1-ROCA)% is
100·(1 − exact ROC AUC of all the scores of the run), spam positive. Every run gets the features of
``configs/spam.yaml`` (the compiled byte reader: 4-grams, words and shapes), computed once per stream, and
learns in the compiled loop (``learn_rows``, bit for bit ``learn_one``). The models: the one
``configs/spam.yaml`` builds (a `PegasosMixture`); each of its members alone, by its raw margin (for each λ,
the SVM plus each logistic regression and the SVM alone; each logistic regression, logistic Pegasos and normalized
hinge alone); `PegasosClassifier`
at λ = 1e-4 without ``t0`` (exact Pegasos, the default before "auto"); ``PegasosClassifier()`` (λ chosen
online); `PegasosGrid` at its defaults. The streams are the shapes of ``scripts/_stress.py`` on the corpora each
applies to (as is, subject and sender only, subject only, body only, no blank line, list-archive tokens, spam at
about 13%, 3% and 75%, shuffled, newest first, hard ham; with ``--corpus both``, the two corpora interleaved too).

Usage: ``python scripts/models_spam.py [--corpus spamassassin|lingspam|both] [--streams asis,short,...]
[--limit N] [--out reports/models.json]``
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from functools import partial

import numpy as np
from _harness import (
    REPO,
    add_data_argument,
    add_lingspam_argument,
    add_out_argument,
    fmt,
    invocation,
    section,
    write_document,
)
from _stress import BOTH, CORPORA, SHAPES, build_streams
from sklearn.metrics import roc_auc_score

from pegasos_stream import (
    AdaGradLogistic,
    NormalizedHinge,
    PegasosClassifier,
    PegasosCommittee,
    PegasosGrid,
    PegasosLogistic,
    PegasosMixture,
)
from pegasos_stream.cli.assemble import build_features, build_model
from pegasos_stream.cli.config import load_config
from pegasos_stream.learners.batch import LearnBatch
from pegasos_stream.learners.rows import Rows

SPAM_CONFIG = REPO / "configs" / "spam.yaml"


Model = (
    PegasosMixture
    | PegasosCommittee
    | PegasosClassifier
    | AdaGradLogistic
    | PegasosLogistic
    | NormalizedHinge
    | PegasosGrid
)


def prequential(model: Model, rows: Rows, labels: np.ndarray) -> float:
    """(1-ROCA)% of ``model``'s decisions, each before its message is learnt."""
    decisions, probas = np.empty(len(labels)), np.empty(len(labels))
    signs = np.where(labels, 1.0, -1.0)
    _, error = model.learn_rows(LearnBatch(rows, signs, np.ones(len(labels)), decisions, probas, 0))
    if error is not None:
        raise error
    return 100 * (1 - roc_auc_score(labels, decisions))


def members(mixture: PegasosMixture) -> dict[str, Callable[[], Model]]:
    """A fresh learner of each member of ``mixture``, by its name: for each λ, the SVM plus each logistic regression
    (a `PegasosCommittee`, scored by the sum of their margins) and the SVM alone; then each logistic regression
    alone, each logistic Pegasos and each normalized hinge."""
    made: dict[str, Callable[[], Model]] = {}
    for lambda_ in mixture.lambdas:
        settings = {
            "t0": round(mixture.lambda_t0 / lambda_),
            "horizon": mixture.horizon,
            "n_features": mixture.n_features,
        }
        for rate, epsilon in mixture.logistics:
            made[f"svm({lambda_:g})+logistic({rate:g})"] = partial(
                PegasosCommittee, lambda_, learning_rate=rate, initial_accumulator=epsilon, **settings
            )
        made[f"svm({lambda_:g})"] = partial(PegasosClassifier, lambda_=lambda_, **settings)
    for rate, epsilon in mixture.logistics:
        made[f"logistic({rate:g})"] = partial(AdaGradLogistic, rate, mixture.n_features, epsilon)
    for lambda_, t0 in mixture.pegasos_logistics:
        made[f"pegasos_logistic({lambda_:g})"] = partial(PegasosLogistic, lambda_, t0, mixture.n_features)
    for rate in mixture.normalized_hinges:
        made[f"normalized_hinge({rate:g})"] = partial(NormalizedHinge, rate, mixture.n_features)
    assert list(made) == mixture.member_names
    return made


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    corpus_help = "the corpus whose streams run ('both', the default: both, and the stream mixing them)"
    parser.add_argument("--corpus", choices=[*CORPORA, BOTH], default=BOTH, help=corpus_help)
    add_data_argument(parser)
    add_lingspam_argument(parser)
    parser.add_argument("--streams", default=",".join(SHAPES), help=f"comma-separated shapes, of: {', '.join(SHAPES)}")
    parser.add_argument("--limit", type=int, help="the first N messages of each stream")
    add_out_argument(parser, "models.json")
    args = parser.parse_args()
    if unknown := set(args.streams.split(",")) - set(SHAPES):
        parser.error(f"unknown shape(s): {', '.join(sorted(unknown))}")

    config = load_config(SPAM_CONFIG)
    features, shipped = build_features(config), build_model(config)
    if not isinstance(shipped, PegasosMixture):
        sys.exit(f"error: configs/spam.yaml builds a {type(shipped).__name__}, expected a PegasosMixture")
    models: dict[str, Callable[[], Model]] = {"configs/spam.yaml (the mixture)": shipped.clone}
    models.update((f"member {name}", make) for name, make in members(shipped).items())
    models["λ = 1e-4, t0 = 0 (exact Pegasos)"] = lambda: PegasosClassifier(lambda_=1e-4)
    models["PegasosClassifier() (λ chosen online)"] = PegasosClassifier
    models["PegasosGrid()"] = PegasosGrid
    streams, _ = build_streams(args, args.streams.split(","))
    runs = []
    for name, stream in streams.items():
        labels = np.array([is_spam for _, is_spam in stream])
        rows = Rows(*features.transform_texts([text for text, _ in stream]))
        print(f"{name}: {len(stream):,} messages ...", file=sys.stderr)
        run = {"stream": name, "messages": len(stream), "spam": int(labels.sum())}
        run.update((model, prequential(make(), rows, labels)) for model, make in models.items())
        runs.append(run)

    shown = " and ".join(label for corpus, label in CORPORA.items() if args.corpus in (corpus, BOTH))
    write_document(
        args.out,
        f"pegasos_stream's models on the stress streams of {shown}",
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
