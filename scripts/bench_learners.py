"""Throughput of PegasosClassifier against river, scikit-learn and (optionally) Vowpal Wabbit.

Every learner sees the same precomputed ``dict`` features, one example at a time, prequentially
(predict, then learn; one pass over the stream). Each learner makes ``--repeat`` such passes, each
from a fresh model, and the fastest counts: the others are mostly slowed by other processes on the
machine. Native thread pools (OpenBLAS, OpenMP) are limited to one thread, so every learner runs
on one core: with OpenBLAS's default of one thread per core, the O(n_features) BLAS work that each
``SGDClassifier.partial_fit`` call does wakes a second thread, and on a 2-core machine with anything
else running, each call then waits for it (we measured 4-5x slower calls, with more CPU time than
wall time). The timed loop covers exactly what a river user pays per example:

* river models and PegasosClassifier: ``predict_one(x)`` then ``learn_one(x, y)``;
* scikit-learn ``SGDClassifier(loss="hinge", alpha=λ)``: hashing per example with a stateless
  ``FeatureHasher(n_features=2**18, alternate_sign=False).transform([x])`` (no vocabulary is known in
  advance on a stream; 2^18 is 3-5x the distinct features of either dataset, and ``partial_fit`` has a
  cost per call that grows with n_features), then ``predict`` (skipped before the first fit, where the
  prediction is False) and ``partial_fit``. The transform is done once per example and timed.
  (A DictVectorizer fitted up front is not an option here: with scikit-learn 1.9 and scipy 1.17 its
  output has int64 indices, which ``SGDClassifier.partial_fit`` rejects.)
* Vowpal Wabbit (if ``vowpalwabbit`` imports): formatting ``x`` as a VW text line and parsing it once,
  then ``predict`` and ``learn`` on the parsed example (hinge loss, otherwise VW's defaults, i.e.
  adaptive normalised invariant updates, 2^20 hashed weights).

Tokenisation and feature generation happen once, before any timing. Datasets: the SpamAssassin stream
(binary word features of subject and body) and a synthetic RCV1-like stream (see ``_data``).

Memory: bytes retained by a model after two steps on one example with ``--memory-weights`` distinct
features, labelled True then False (so it holds exactly that many non-zero weights, and the second step
updates every one of them, which also fills the averaged iterate's storage), measured with
``tracemalloc`` (which sees every Python and numpy allocation still alive). Feature keys belong to the
input and are not counted, for the models or for the plain ``dict`` of floats given for comparison.

Results go to ``--out`` (default ``reports/learners.json``, the common format of ``_harness``, with the raw
per-learner results) and are printed as Markdown.

Usage: ``python scripts/bench_learners.py [--n 20242] [--repeat 3] [--lambda 1e-4] [--out reports/learners.json]``
"""

from __future__ import annotations

import argparse
import gc
import inspect
import sys
import time
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import numpy as np
from _data import Features, synthetic_rcv1_like, word_features
from _harness import (
    add_data_argument,
    add_out_argument,
    fmt,
    invocation,
    load_messages,
    section,
    warn_if_busy,
    write_document,
)
from river import linear_model, optim
from sklearn.feature_extraction import FeatureHasher
from sklearn.linear_model import SGDClassifier
from threadpoolctl import threadpool_limits

from pegasos_stream import PegasosClassifier

try:
    import vowpalwabbit
    from vowpalwabbit import pyvw
except ImportError:
    vowpalwabbit = pyvw = None

Stream = Sequence[tuple[Features, bool]]
#: One prequential step: predict x, learn (x, y), return the prediction.
Step = Callable[[Features, bool], bool]

#: Hashed feature space of scikit-learn's SGDClassifier.
SKLEARN_FEATURES = 2**18

DEFAULTS = "PegasosClassifier() (defaults)"
LOGREG = "river LogisticRegression(Hinge, l2=λ)"
PA = "river PAClassifier()"


@dataclass
class Result:
    """One learner on one dataset; ``seconds`` is the fastest of the timed passes in ``all_seconds``."""

    learner: str
    seconds: float
    all_seconds: list[float]
    examples_per_s: float
    accuracy: float
    vs_logreg: float = float("nan")
    vs_pa: float = float("nan")


def river_step(model) -> Step:
    """Prequential step for anything with river's predict_one / learn_one."""
    predict, learn = model.predict_one, model.learn_one

    def step(x: Features, y: bool) -> bool:
        y_pred = predict(x)
        learn(x, y)
        return y_pred

    return step


def sklearn_step(alpha: float) -> Step:
    """SGDClassifier(loss="hinge") fed one row at a time, hashed by a FeatureHasher."""
    hasher = FeatureHasher(n_features=SKLEARN_FEATURES, input_type="dict", alternate_sign=False)
    model = SGDClassifier(loss="hinge", alpha=alpha)
    classes = np.array([False, True])
    fitted = False

    def step(x: Features, y: bool) -> bool:
        nonlocal fitted
        row = hasher.transform([x])
        y_pred = bool(model.predict(row)[0]) if fitted else False
        model.partial_fit(row, [y], classes=classes)
        fitted = True
        return y_pred

    return step


def vw_step() -> Step:
    """Vowpal Wabbit with hinge loss; x is formatted as a text line and parsed once per example."""
    workspace = pyvw.Workspace("--loss_function hinge --quiet")

    def step(x: Features, y: bool) -> bool:
        line = ("1 |f " if y else "-1 |f ") + " ".join(f"{k}:{v}" for k, v in x.items())
        example = workspace.parse(line)
        y_pred = workspace.predict(example) > 0
        workspace.learn(example)
        workspace.finish_example(example)
        return y_pred

    return step


def pegasos_default_lambda() -> float:
    """The default ``lambda_`` of PegasosClassifier, read from its signature."""
    return inspect.signature(PegasosClassifier).parameters["lambda_"].default


def learners(lam: float) -> dict[str, Callable[[], Step]]:
    """Factories of fresh learners, by display name."""
    factories: dict[str, Callable[[], Step]] = {DEFAULTS: lambda: river_step(PegasosClassifier())}
    if lam != pegasos_default_lambda():
        factories[f"PegasosClassifier(lambda_={lam:g})"] = lambda: river_step(PegasosClassifier(lambda_=lam))
    factories |= {
        f"PegasosClassifier(lambda_={lam:g}, average=True)": lambda: river_step(
            PegasosClassifier(lambda_=lam, average=True)
        ),
        f"PegasosClassifier(lambda_={lam:g}, projection=True)": lambda: river_step(
            PegasosClassifier(lambda_=lam, projection=True)
        ),
        LOGREG: lambda: river_step(linear_model.LogisticRegression(loss=optim.losses.Hinge(), l2=lam)),
        PA: lambda: river_step(linear_model.PAClassifier()),
        "river Perceptron()": lambda: river_step(linear_model.Perceptron()),
        "sklearn SGDClassifier(hinge, alpha=λ) + FeatureHasher": lambda: sklearn_step(lam),
    }
    if vowpalwabbit is not None:
        factories["Vowpal Wabbit (pyvw, hinge)"] = vw_step
    return factories


def prequential(step: Step, stream: Stream) -> tuple[float, float]:
    """One timed predict-then-learn pass; returns (seconds, accuracy)."""
    correct = 0
    start = time.perf_counter()
    for x, y in stream:
        correct += step(x, y) == y
    seconds = time.perf_counter() - start
    return seconds, correct / len(stream)


def benchmark(stream: Stream, factories: dict[str, Callable[[], Step]], repeat: int) -> list[Result]:
    """Time ``repeat`` fresh passes of every learner over ``stream``; keep the fastest; add the ratios.

    Every pass starts from a new model, so the accuracy is the same in each (all learners are
    deterministic); the minimum is the pass least disturbed by other processes.
    """
    results = []
    for name, factory in factories.items():
        times = []
        for _ in range(repeat):
            step = factory()
            gc.collect()
            seconds, accuracy = prequential(step, stream)
            times.append(seconds)
        best = min(times)
        results.append(Result(name, best, times, len(stream) / best, accuracy))
        print(f"  {name}: {len(stream) / best:,.0f} ex/s, accuracy {accuracy:.4f}", file=sys.stderr)
    rate = {r.learner: r.examples_per_s for r in results}
    for r in results:
        r.vs_logreg = r.examples_per_s / rate[LOGREG]
        r.vs_pa = r.examples_per_s / rate[PA]
    return results


def retained_bytes(build: Callable[[], object]) -> int:
    """Bytes allocated by ``build()`` that are still alive once it returns (tracemalloc)."""
    gc.collect()
    tracemalloc.start()
    built = build()
    gc.collect()
    size = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del built
    return size


def trained(model, x: Features):
    """``model`` after ``learn_one(x, True)`` then ``learn_one(x, False)``."""
    model.learn_one(x, True)
    model.learn_one(x, False)
    return model


def memory_table(n_weights: int) -> list[dict]:
    """Bytes retained per non-zero weight (= MB per million) by each model and by a plain dict of floats."""
    x = {f"m{i}": 1.0 for i in range(n_weights)}
    builds: dict[str, Callable[[], object]] = {
        "plain dict {key: float}": lambda: {k: v * 0.5 for k, v in x.items()},
        "PegasosClassifier()": lambda: trained(PegasosClassifier(), x),
        "PegasosClassifier(average=True)": lambda: trained(PegasosClassifier(average=True), x),
        "river LogisticRegression(Hinge)": lambda: trained(
            linear_model.LogisticRegression(loss=optim.losses.Hinge()), x
        ),
    }
    rows = []
    for name, build in builds.items():
        size = retained_bytes(build)
        rows.append({"model": name, "bytes_per_weight": size / n_weights})
    base = rows[0]["bytes_per_weight"]
    for row in rows:
        row["vs_plain_dict"] = row["bytes_per_weight"] / base
    return rows


def spam_stream(args: argparse.Namespace) -> list[tuple[Features, bool]]:
    """SpamAssassin in chronological order as (binary word features, is_spam)."""
    return [(word_features(m.text), m.is_spam) for m in load_messages(args.data)]


def results_section(title: str, stream: Stream, results: list[Result], notes: list[str]) -> dict:
    """One dataset's results as a report section."""
    nnz = np.mean([len(x) for x, _ in stream])
    return section(
        f"{title}: {len(stream):,} examples, {nnz:.1f} non-zeros per example",
        ["learner", ">examples/s", ">µs/example", ">prequential accuracy", ">× LogReg", ">× PA"],
        [
            [
                r.learner,
                fmt(r.examples_per_s, ",.0f"),
                fmt(1e6 / r.examples_per_s, ",.1f"),
                fmt(r.accuracy, ".4f"),
                fmt(r.vs_logreg, ".2f"),
                fmt(r.vs_pa, ".2f"),
            ]
            for r in results
        ],
        notes,
    )


def memory_section(rows: list[dict], n_weights: int) -> dict:
    """The memory measurements as a report section."""
    return section(
        f"Memory retained per non-zero weight (tracemalloc, {n_weights:,} weights, keys not counted)",
        ["storage", ">bytes per weight (= MB per million weights)", ">× plain dict"],
        [[row["model"], fmt(row["bytes_per_weight"], ".1f"), fmt(row["vs_plain_dict"], ".2f")] for row in rows],
    )


def headline_row(benchmark: str, results: list[Result]) -> list[str]:
    """Default PegasosClassifier against the fastest learner that is not a PegasosClassifier."""
    ours = next(r for r in results if r.learner == DEFAULTS)
    peer = max((r for r in results if not r.learner.startswith("PegasosClassifier")), key=lambda r: r.examples_per_s)
    return [benchmark, fmt(ours.examples_per_s, ",.0f"), peer.learner, fmt(peer.examples_per_s, ",.0f")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_data_argument(parser)
    parser.add_argument(
        "--n",
        type=int,
        default=20_242,
        help="synthetic RCV1-like examples (default: 20242, as rcv1.binary's train set)",
    )
    parser.add_argument("--repeat", type=int, default=3, help="timed passes per learner; the fastest counts")
    parser.add_argument("--lambda", dest="lam", type=float, default=1e-4, help="λ for Pegasos, LogReg, SGD")
    parser.add_argument("--seed", type=int, default=0, help="numpy seed of the synthetic stream")
    parser.add_argument("--memory-weights", type=int, default=1_000_000, help="weights for the memory test")
    add_out_argument(parser, "learners.json")
    args = parser.parse_args()

    if vowpalwabbit is None:
        print("note: vowpalwabbit is not installed; skipping Vowpal Wabbit (pip install vowpalwabbit)")
    factories = learners(args.lam)
    threadpool_limits(limits=1)
    datasets = {
        "SpamAssassin, binary word features": (
            "per-event learning, SpamAssassin words (examples/s)",
            spam_stream(args),
        ),
        f"Synthetic RCV1-like (47,236 features, seed {args.seed})": (
            "per-event learning, synthetic RCV1-like (examples/s)",
            synthetic_rcv1_like(args.n, seed=args.seed),
        ),
    }
    warn_if_busy()
    note = f"λ = {args.lam:g}; fastest of {args.repeat} passes; ratios are throughput relative to {LOGREG} and {PA}."
    raw: dict[str, dict] = {}
    sections, headline = [], []
    for title, (headline_label, stream) in datasets.items():
        print(f"{title} ...", file=sys.stderr)
        results = benchmark(stream, factories, args.repeat)
        raw[title] = {
            "n_examples": len(stream),
            "mean_nnz": float(np.mean([len(x) for x, _ in stream])),
            "results": [asdict(r) for r in results],
        }
        sections.append(results_section(title, stream, results, [note]))
        headline.append(headline_row(headline_label, results))
    memory = memory_table(args.memory_weights)
    sections.append(memory_section(memory, args.memory_weights))
    write_document(
        args.out,
        "Per-example learning throughput: PegasosClassifier against river, scikit-learn and Vowpal Wabbit",
        invocation(),
        sections,
        headline=headline,
        **{"lambda": args.lam},
        repeat=args.repeat,
        datasets=raw,
        memory=memory,
    )


if __name__ == "__main__":
    main()
