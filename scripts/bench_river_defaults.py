"""PegasosClassifier at its defaults against river's linear classifiers at theirs, as a river user runs them.

Each model is the last step of ``preprocessing.StandardScaler() | model`` in ``evaluate.progressive_val_score``
with ``metrics.Accuracy() + metrics.ROCAUC()``: each event is scored by ``predict_proba_one`` (the accuracy is
that of its most probable class, the ROC AUC river's, from the probability of True over its 10 thresholds), then
learned. The models:

* ``PegasosClassifier()``: the defaults (``lambda_="auto"``: λ chosen online among three, steps of at most 0.1,
  averaged iterates, a regularised bias);
* ``PegasosClassifier(lambda_=1e-4)``: exact Pegasos at the λ that was the default before, no bias, t0 = 0;
* river's ``LogisticRegression()``, ``PAClassifier()``, ``ALMAClassifier()``, ``Perceptron()`` and
  ``SoftmaxRegression()`` (binary labels are two classes to it).

The streams: every binary classification set river ships in its package (those it downloads, such as CreditCard or
Elec2, are left out), whole; and binary streams of ``river.datasets.synth``, ``--events`` events each, seeded (42):
the drifting hyperplane of the issue and a still one, Agrawal's functions 0 (at chance for a linear model) and 6,
SEA with 10% label noise, STAGGER, Sine, Mixed, a two-class RandomRBF and RandomTree, and two concept drift streams
(Agrawal 0 to 2, river's default, and SEA's threshold 8 to 9.5, at mid-stream over a tenth of it).

The summary table sets ``PegasosClassifier()`` against the best river model of each metric on each stream (the
best accuracy and the best ROC AUC may be two models); every model's figures follow. Learning is deterministic:
a rerun gives the same table. Results go to ``--out`` (default ``reports/river_defaults.json``, the common format
of ``_harness``, with every figure) and are printed as Markdown.

Usage: ``python scripts/bench_river_defaults.py [--events 5000] [--streams Phishing,SEA] [--out PATH]``
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Callable, Iterable

from _harness import add_out_argument, fmt, section, write_results
from river import base, datasets, evaluate, linear_model, metrics, preprocessing
from river.datasets import synth

from pegasos_stream import PegasosClassifier

#: A stream's events, drawn afresh for each model.
Stream = Callable[[int], Iterable]

DEFAULTS = "PegasosClassifier()"
EXACT = "PegasosClassifier(lambda_=1e-4), exact Pegasos"
#: The models, by name: ours first, then river's linear classifiers at their defaults.
MODELS: dict[str, Callable[[], base.Classifier]] = {
    DEFAULTS: PegasosClassifier,
    EXACT: lambda: PegasosClassifier(lambda_=1e-4),
    "LogisticRegression()": linear_model.LogisticRegression,
    "PAClassifier()": linear_model.PAClassifier,
    "ALMAClassifier()": linear_model.ALMAClassifier,
    "Perceptron()": linear_model.Perceptron,
    "SoftmaxRegression()": linear_model.SoftmaxRegression,
}
RIVER = [name for name in MODELS if not name.startswith("PegasosClassifier")]
SEED = 42


def bundled() -> dict[str, Stream]:
    """Every binary classification set river ships in its package (a FileDataset it need not download)."""
    found = {}
    for name in sorted(datasets.__all__):
        cls = getattr(datasets, name)
        if not isinstance(cls, type) or not issubclass(cls, datasets.base.FileDataset):
            continue
        if issubclass(cls, datasets.base.RemoteDataset) or cls().task != datasets.base.BINARY_CLF:
            continue
        found[name] = lambda events, cls=cls: cls()
    return found


def generated() -> dict[str, Stream]:
    """Binary streams of river's generators, seeded; each takes the first ``events`` events (a concept drift at
    mid-stream, over a tenth of it: river's default position, 5,000 events in, is past the end of a short stream)."""
    makers: dict[str, Callable[[int], Iterable]] = {
        "Hyperplane, drifting": lambda n: synth.Hyperplane(
            seed=SEED, n_features=10, mag_change=0.001, noise_percentage=0.05
        ),
        "Hyperplane": lambda n: synth.Hyperplane(seed=SEED),
        "Agrawal 0": lambda n: synth.Agrawal(classification_function=0, seed=SEED),
        "Agrawal 6": lambda n: synth.Agrawal(classification_function=6, seed=SEED),
        "SEA, 10% noise": lambda n: synth.SEA(variant=0, noise=0.1, seed=SEED),
        "STAGGER": lambda n: synth.STAGGER(seed=SEED),
        "Sine": lambda n: synth.Sine(seed=SEED),
        "Mixed": lambda n: synth.Mixed(seed=SEED),
        "RandomRBF, 2 classes": lambda n: synth.RandomRBF(seed_model=SEED, seed_sample=SEED, n_classes=2),
        "RandomTree, 2 classes": lambda n: synth.RandomTree(seed_tree=SEED, seed_sample=SEED, n_classes=2),
        "ConceptDriftStream, Agrawal 0 to 2": lambda n: synth.ConceptDriftStream(
            seed=SEED, position=n // 2, width=n // 10
        ),
        "ConceptDriftStream, SEA 8 to 9.5": lambda n: synth.ConceptDriftStream(
            synth.SEA(variant=0, noise=0.1, seed=SEED),
            synth.SEA(variant=3, noise=0.1, seed=SEED),
            seed=SEED,
            position=n // 2,
            width=n // 10,
        ),
    }
    return {name: lambda events, make=make: itertools.islice(make(events), events) for name, make in makers.items()}


def streams() -> dict[str, Stream]:
    """Every stream of the benchmark, by name: the bundled sets, then the generated ones."""
    return {**{f"{name} (bundled)": stream for name, stream in bundled().items()}, **generated()}


def score(stream: Stream, events: int, make: Callable[[], base.Classifier]) -> dict[str, float]:
    """Prequential accuracy and ROC AUC of ``StandardScaler() | make()`` over the stream, and its length."""
    accuracy, auc = metrics.Accuracy(), metrics.ROCAUC()
    model = preprocessing.StandardScaler() | make()
    evaluate.progressive_val_score(stream(events), model, accuracy + auc)
    return {"events": accuracy.cm.n_samples, "accuracy": accuracy.get(), "roc_auc": auc.get()}


def best(results: dict[str, dict[str, float]], metric: str) -> tuple[str, float]:
    """The river model with the highest ``metric`` (the first listed on a tie) and its value."""
    name = max(RIVER, key=lambda model: results[model][metric])
    return name, results[name][metric]


def summary_section(runs: dict[str, dict[str, dict[str, float]]]) -> dict:
    """PegasosClassifier() against the best river model per metric, per stream."""
    rows, within, ahead = [], 0, {"accuracy": 0, "roc_auc": 0}
    for stream, results in runs.items():
        ours, exact = results[DEFAULTS], results[EXACT]
        (acc_name, acc), (auc_name, auc) = best(results, "accuracy"), best(results, "roc_auc")
        gap_acc, gap_auc = ours["accuracy"] - acc, ours["roc_auc"] - auc
        within += gap_acc >= -0.01 and gap_auc >= -0.01
        ahead["accuracy"] += gap_acc > 0
        ahead["roc_auc"] += gap_auc > 0
        rows.append(
            [
                stream,
                f"{ours['events']:,}",
                fmt(100 * ours["accuracy"], ".2f"),
                f"{100 * acc:.2f} ({acc_name})",
                fmt(100 * gap_acc, "+.2f"),
                fmt(ours["roc_auc"], ".4f"),
                f"{auc:.4f} ({auc_name})",
                fmt(gap_auc, "+.4f"),
                f"{100 * exact['accuracy']:.2f} / {exact['roc_auc']:.4f}",
            ]
        )
    n = len(runs)
    return section(
        "PegasosClassifier() against the best river linear model at its defaults, per metric",
        [
            "stream",
            ">events",
            ">accuracy %",
            ">best river accuracy %",
            ">Δ points",
            ">ROC AUC",
            ">best river ROC AUC",
            ">Δ",
            ">exact Pegasos λ = 1e-4: accuracy % / ROC AUC",
        ],
        rows,
        [
            f"Within 1 point of accuracy and 0.01 of ROC AUC of the best river model on {within} of {n} streams; "
            f"ahead in accuracy on {ahead['accuracy']}, in ROC AUC on {ahead['roc_auc']}.",
            "Every model is `preprocessing.StandardScaler() | model` in `evaluate.progressive_val_score` with "
            "`metrics.Accuracy() + metrics.ROCAUC()` (from `predict_proba_one`); river's models: "
            + ", ".join(f"`{name}`" for name in RIVER)
            + ".",
        ],
    )


def detail_section(runs: dict[str, dict[str, dict[str, float]]]) -> dict:
    """Every model's figures on every stream."""
    return section(
        "Every model on every stream",
        ["stream", "model", ">accuracy %", ">ROC AUC"],
        [
            [stream, model, fmt(100 * result["accuracy"], ".2f"), fmt(result["roc_auc"], ".4f")]
            for stream, results in runs.items()
            for model, result in results.items()
        ],
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=5000, help="events of each generated stream (default: 5000)")
    parser.add_argument("--streams", help="comma-separated names of the streams to run (default: all)")
    add_out_argument(parser, "river_defaults.json")
    args = parser.parse_args()
    chosen = streams()
    if args.streams:
        names = [name.strip() for name in args.streams.split(",")]
        if unknown := [name for name in names if name not in chosen]:
            parser.error(f"unknown stream(s) {', '.join(unknown)}; the streams are: {', '.join(chosen)}")
        chosen = {name: chosen[name] for name in names}

    runs: dict[str, dict[str, dict[str, float]]] = {}
    for stream, draw in chosen.items():
        print(f"{stream} ...", file=sys.stderr)
        runs[stream] = {model: score(draw, args.events, make) for model, make in MODELS.items()}
    write_results(
        args,
        "PegasosClassifier at its defaults against river's linear models at theirs",
        [summary_section(runs), detail_section(runs)],
        runs=runs,
    )


if __name__ == "__main__":
    main()
