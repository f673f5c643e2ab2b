"""Budgeted kernel Pegasos against scikit-learn's SVC on river's Bananas.

The first 4,000 points are the training stream, the remaining 1,300 the test set. γ and λ (for
Pegasos) and γ and C (for SVC) are picked on a small grid by training on the first 3,200 points and
scoring on the next 800; the chosen settings are then trained on all 4,000. For each budget and
maintenance strategy, one pass and five passes over the stream are measured: test accuracy,
training time, predict latency per example (``predict_one`` over the test set, best of three
passes) and support vectors; merging for each bound on a merged vector's features
(``max_sv_features``, ``none`` for no bound).

The text part streams the first ``--text-messages`` SpamAssassin messages (binary character 4-grams,
``EmailFeatures``) through an RBF model with a budget of 200 that merges, predicting each message
before learning it, for each bound: prequential accuracy and (1−ROCA)%, events/s over the whole
stream and over its last 500 events, and the feature entries held by the support vectors.

    python scripts/bench_kernel.py [--out reports/kernel.json] [--budgets 50 100 200 500] [--passes 1 5]
        [--max-sv-features none 3000 1000] [--parts bananas text] [--text-messages 3000] [--data PATH]

Results go to ``--out`` in the common format of ``_harness`` (with the raw rows and the chosen γ and λ) and
are printed as Markdown.

BLAS threads are pinned to one: the solves of the "project" strategy are small, and threads only
contend on a 2-core machine.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import time
from typing import Any

import numpy as np
from _harness import (
    add_data_argument,
    add_out_argument,
    fmt,
    invocation,
    load_messages,
    markdown_table,
    prequential_metrics,
    section,
    warn_if_busy,
    write_document,
)
from river import datasets
from sklearn.svm import SVC

from pegasos_stream import KernelPegasosClassifier
from pegasos_stream.features import EmailFeatures

N_TRAIN = 4000
N_VALIDATION = 800
GAMMAS = (0.5, 1.0, 2.0)
LAMBDAS = (1e-2, 1e-3, 1e-4)
SVC_CS = (0.1, 1.0, 10.0, 100.0)
#: The text model: RBF on unit-length 4-gram vectors, a budget of 200, merging.
TEXT_PARAMS: dict[str, Any] = {"gamma": 1.0, "lambda_": 1e-3, "budget": 200, "maintenance": "merge"}
#: The events/s at the end of the text stream are measured over this many events.
TEXT_TAIL = 500


def sv_feature_bound(text: str) -> int | None:
    """A ``--max-sv-features`` value: a positive integer, or ``none``."""
    return None if text.lower() == "none" else int(text)


def load() -> tuple[list, list]:
    data = list(datasets.Bananas())
    return data[:N_TRAIN], data[N_TRAIN:]


def as_arrays(data: list) -> tuple[np.ndarray, np.ndarray]:
    return np.array([[x["1"], x["2"]] for x, _ in data]), np.array([y for _, y in data])


def accuracy(model: KernelPegasosClassifier, data: list) -> float:
    return float(np.mean([model.predict_one(x) == y for x, y in data]))


def predict_latency(predict, inputs: list, repeats: int = 3) -> float:
    """Seconds per prediction, one input at a time: the best of ``repeats`` passes."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for x in inputs:
            predict(x)
        best = min(best, (time.perf_counter() - start) / len(inputs))
    return best


def train(params: dict, data: list, passes: int) -> tuple[KernelPegasosClassifier, float]:
    model = KernelPegasosClassifier(**params)
    start = time.perf_counter()
    for _ in range(passes):
        for x, y in data:
            model.learn_one(x, y)
    return model, time.perf_counter() - start


def pick_pegasos(train_data: list) -> dict:
    """γ and λ by hold-out accuracy, unbudgeted, one pass."""
    fit, held_out = train_data[: N_TRAIN - N_VALIDATION], train_data[N_TRAIN - N_VALIDATION :]
    scores = {}
    for gamma in GAMMAS:
        for lambda_ in LAMBDAS:
            model, _ = train({"gamma": gamma, "lambda_": lambda_, "budget": None}, fit, 1)
            scores[(gamma, lambda_)] = accuracy(model, held_out)
    gamma, lambda_ = max(scores, key=scores.get)
    return {"gamma": gamma, "lambda_": lambda_}


def svc_row(train_data: list, test_data: list) -> dict:
    X, y = as_arrays(train_data)
    X_test, y_test = as_arrays(test_data)
    cut = N_TRAIN - N_VALIDATION
    scores = {}
    for gamma in GAMMAS:
        for C in SVC_CS:
            scores[(gamma, C)] = SVC(kernel="rbf", gamma=gamma, C=C).fit(X[:cut], y[:cut]).score(X[cut:], y[cut:])
    gamma, C = max(scores, key=scores.get)
    start = time.perf_counter()
    svc = SVC(kernel="rbf", gamma=gamma, C=C).fit(X, y)
    train_s = time.perf_counter() - start
    latency = predict_latency(lambda row: svc.predict(row[None, :]), list(X_test))
    return {
        "learner": f"sklearn SVC (gamma={gamma}, C={C})",
        "budget": None,
        "maintenance": "-",
        "max_sv_features": "-",
        "passes": "batch",
        "test_accuracy": float(svc.score(X_test, y_test)),
        "train_s": train_s,
        "predict_us": latency * 1e6,
        "n_support": int(svc.n_support_.sum()),
    }


def pegasos_row(
    params: dict, budget, maintenance: str, passes: int, train_data, test_data, max_sv_features: int | None = None
) -> dict:
    settings = {**params, "budget": budget, "max_sv_features": max_sv_features}
    if budget is not None:
        settings["maintenance"] = maintenance
    model, train_s = train(settings, train_data, passes)
    test_accuracy = accuracy(model, test_data)
    latency = predict_latency(model.predict_one, [x for x, _ in test_data])
    return {
        "learner": f"KernelPegasos (gamma={params['gamma']}, lambda={params['lambda_']})",
        "budget": budget,
        "maintenance": maintenance,
        "max_sv_features": max_sv_features if maintenance == "merge" else "-",
        "passes": passes,
        "test_accuracy": test_accuracy,
        "train_s": train_s,
        "predict_us": latency * 1e6,
        "n_support": model.n_support,
    }


COLUMNS = (
    "learner",
    ">budget",
    "maintenance",
    ">max SV features",
    ">passes",
    ">test accuracy",
    ">train s",
    ">predict µs/example",
    ">SVs",
)


def table_row(r: dict) -> list[str]:
    """One result as table cells."""
    return [
        r["learner"],
        "∞" if r["budget"] is None else str(r["budget"]),
        r["maintenance"],
        "∞" if r["max_sv_features"] is None else str(r["max_sv_features"]),
        str(r["passes"]),
        f"{fmt(100 * r['test_accuracy'], '.2f')}%",
        fmt(r["train_s"], ".2f"),
        fmt(r["predict_us"], ".1f"),
        str(r["n_support"]),
    ]


def headline_row(svc: dict, rows: list[dict]) -> list[str]:
    """The most accurate kernel Pegasos setting against SVC."""
    best = max((r for r in rows if r is not svc), key=lambda r: r["test_accuracy"])
    budget = "no budget" if best["budget"] is None else f"budget {best['budget']}, {best['maintenance']}"
    passes = f"{best['passes']} pass" + ("" if best["passes"] == 1 else "es")
    return [
        "test accuracy, river Bananas (RBF kernel)",
        f"{100 * best['test_accuracy']:.2f}% ({budget}, {passes})",
        svc["learner"],
        f"{100 * svc['test_accuracy']:.2f}%",
    ]


TEXT_COLUMNS = (
    ">max SV features",
    ">events",
    ">prequential accuracy",
    ">(1−ROCA)%",
    ">events/s",
    f">events/s, last {TEXT_TAIL}",
    ">SV feature entries",
    ">largest SV",
)


def text_row(examples: list[tuple[dict, bool]], max_sv_features: int | None) -> dict:
    """Predict, then learn, every example with a budgeted merging RBF model; features are precomputed."""
    model = KernelPegasosClassifier(**TEXT_PARAMS, max_sv_features=max_sv_features)
    scores, seconds = [], []
    for x, y in examples:
        start = time.perf_counter()
        scores.append(model.decision_function_one(x))
        model.learn_one(x, y)
        seconds.append(time.perf_counter() - start)
    accuracy, roca = prequential_metrics(scores, [y for _, y in examples])
    sizes = [len(x) for x, _, _ in model.support_vectors]
    return {
        "max_sv_features": max_sv_features,
        "events": len(examples),
        "accuracy": accuracy,
        "one_minus_roca_pct": roca,
        "events_per_s": len(examples) / sum(seconds),
        "tail_events_per_s": len(seconds[-TEXT_TAIL:]) / sum(seconds[-TEXT_TAIL:]),
        "sv_entries": sum(sizes),
        "largest_sv": max(sizes),
    }


def text_table_row(r: dict) -> list[str]:
    return [
        "∞" if r["max_sv_features"] is None else f"{r['max_sv_features']:,}",
        f"{r['events']:,}",
        f"{r['accuracy']:.4f}",
        f"{r['one_minus_roca_pct']:.3f}",
        f"{r['events_per_s']:.1f}",
        f"{r['tail_events_per_s']:.1f}",
        f"{r['sv_entries']:,}",
        f"{r['largest_sv']:,}",
    ]


def bananas_section(args: argparse.Namespace) -> tuple[dict, dict]:
    """The Bananas table and the raw results (SVC, chosen parameters, rows)."""
    train_data, test_data = load()
    svc = svc_row(train_data, test_data)
    params = pick_pegasos(train_data)
    rows = [svc]
    for passes in args.passes:
        rows.append(pegasos_row(params, None, "-", passes, train_data, test_data))
    for budget in args.budgets:
        for maintenance in ("remove", "merge", "project"):
            bounds = args.max_sv_features if maintenance == "merge" else [None]
            for max_sv_features in bounds:
                for passes in args.passes:
                    rows.append(
                        pegasos_row(params, budget, maintenance, passes, train_data, test_data, max_sv_features)
                    )
                    print(markdown_table(COLUMNS, [table_row(rows[-1])]).splitlines()[-1], flush=True)
    print()
    note = (
        f"{N_TRAIN:,} training points, {len(test_data):,} test points. γ and λ (Pegasos) and γ and C (SVC) picked on "
        f"the grid γ ∈ {GAMMAS}, λ ∈ {LAMBDAS}, C ∈ {SVC_CS} by training on the first {N_TRAIN - N_VALIDATION:,} "
        f"points and scoring on the next {N_VALIDATION:,}. Predict latency: one example at a time, best of 3 passes."
    )
    table = section("Results", COLUMNS, [table_row(r) for r in rows], [note])
    return table, {"headline": [headline_row(svc, rows)], "svc": svc, "pegasos_params": params, "rows": rows}


def text_section(args: argparse.Namespace) -> tuple[dict, dict]:
    """The text table and its raw rows."""
    features = EmailFeatures()
    messages = load_messages(args.data)[: args.text_messages]
    examples = [(features.transform_one(m.text), m.is_spam) for m in messages]
    rows = []
    for max_sv_features in args.max_sv_features:
        rows.append(text_row(examples, max_sv_features))
        print(markdown_table(TEXT_COLUMNS, [text_table_row(rows[-1])]).splitlines()[-1], flush=True)
    settings = ", ".join(f"{key}={value!r}" for key, value in TEXT_PARAMS.items())
    note = (
        f"The first {len(examples):,} SpamAssassin messages in delivery order, binary character 4-grams of the first "
        f"3,000 characters, unit length; KernelPegasosClassifier({settings}); each message predicted, then learnt. "
        "Feature extraction is not timed."
    )
    table = section(
        "Text: SpamAssassin, RBF kernel, budget 200, merging", TEXT_COLUMNS, [text_table_row(r) for r in rows], [note]
    )
    return table, {"text_rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budgets", type=int, nargs="+", default=[50, 100, 200, 500])
    parser.add_argument("--passes", type=int, nargs="+", default=[1, 5])
    parser.add_argument(
        "--max-sv-features",
        type=sv_feature_bound,
        nargs="+",
        default=[None, 3000, 1000],
        help="bounds on a merged vector's features to compare (none: no bound)",
    )
    parser.add_argument("--parts", nargs="+", choices=("bananas", "text"), default=["bananas", "text"])
    parser.add_argument("--text-messages", type=int, default=3000, help="SpamAssassin messages of the text part")
    add_data_argument(parser)
    add_out_argument(parser, "kernel.json")
    args = parser.parse_args()

    warn_if_busy()
    sections, extra = [], {}
    for part, measure in (("bananas", bananas_section), ("text", text_section)):
        if part in args.parts:
            table, raw = measure(args)
            sections.append(table)
            extra.update(raw)
    write_document(
        args.out,
        "Budgeted kernel Pegasos against scikit-learn's SVC on river's Bananas, and on text",
        invocation(),
        sections,
        **extra,
    )


if __name__ == "__main__":
    main()
