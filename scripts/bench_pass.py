"""One pass over RCV1-like rows: ``PegasosClassifier.learn_csr`` against scikit-learn's ``partial_fit``, paired.

Data: ``_stream_data.rcv1_like_rows`` (``--n`` rows over 47,236 features, about 71 non-zeros a row, unit
norm, 5% label noise), built once in memory as one scipy CSR matrix (float64 values, int32 indices, as
scipy makes them) with its labels as a bool array. Every pass gets these very arrays.

Passes, each on a fresh model, the clock around the learning calls only:

* **ours, arrays**: ``PegasosClassifier(lambda_=1e-4, n_features=47236).learn_csr(indptr, indices, data, y)``:
  weights in a float64 array, the matrix's columns as they are (checked: within the array, none twice in a
  row), the labels turned into signs vectorised, and ``predict_proba_one``'s online Platt calibration fitted
  on every margin (two exponentials a row);
* **ours, arrays, no calibration**: the same with ``calibrate=False``: the work scikit-learn's hinge model does
  (margins, no probabilities: its ``SGDClassifier(loss="hinge")`` has no ``predict_proba``);
* **ours, dicts**: ``PegasosClassifier(lambda_=1e-4).learn_csr``, weights in a dict (the matrix's columns
  numbered, the weights gathered and scattered), for reference;
* **scikit-learn**: ``SGDClassifier(loss="hinge", alpha=1e-4, learning_rate="optimal", fit_intercept=False,
  shuffle=False).partial_fit(X, y, classes=[False, True])``.

Each in two forms: one call for the whole pass, and a call per 50,000-row chunk (``--chunk``): the chunks
are sliced out of the matrix (``X[a:b]``) before the clock starts, and both sides get the same chunk
matrices (ours their indptr, indices and data).

Pairing: ``--repeat`` rounds, each running every pass of one form back to back (ours, scikit-learn, ours with
dicts), so that a slow spell of the machine hits them all; per form the ratio of each round's seconds,
ours ÷ scikit-learn, smallest / median / largest (below 1: ours faster). With ``--load N``, N processes spin
on the CPU during the whole measurement (the machine under load). The objective λ/2·‖w‖² + mean hinge loss
after each first pass says whether the passes learn alike (Pegasos and SGD's "optimal" schedule are
different algorithms: the objective is context, not the race). Native thread pools: one thread.

Usage: ``python scripts/bench_pass.py [--n 781265] [--chunk 50000] [--repeat 5] [--load 0]
[--out reports/pass.json]``
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import time
from collections.abc import Callable

import numpy as np
import scipy.sparse as sp
from _harness import add_out_argument, min_median, section, write_results
from _stream_data import rcv1_like_rows
from sklearn.linear_model import SGDClassifier
from threadpoolctl import threadpool_limits

from pegasos_stream import PegasosClassifier

LAMBDA = 1e-4
N_FEATURES = 47_236
#: Ours with weight arrays and without the online calibration: the same outputs as scikit-learn's hinge model.
NO_CALIBRATION = "ours (arrays, calibrate=False)"


def build(n: int, seed: int) -> tuple[sp.csr_matrix, np.ndarray]:
    """The rows as one CSR matrix and their labels."""
    indptr, indices, data, labels = [0], [], [], []
    for columns, values, label in rcv1_like_rows(n, N_FEATURES, seed=seed):
        indices.append(columns)
        data.append(values)
        indptr.append(indptr[-1] + len(columns))
        labels.append(label)
    matrix = sp.csr_matrix((np.concatenate(data), np.concatenate(indices), np.array(indptr)), shape=(n, N_FEATURES))
    return matrix, np.array(labels, dtype=bool)


def objective(w: np.ndarray, matrix: sp.csr_matrix, labels: np.ndarray) -> float:
    """λ/2·‖w‖² + mean of max(0, 1 − y⟨w, x⟩)."""
    margins = np.where(labels, 1.0, -1.0) * (matrix @ w)
    return LAMBDA / 2 * float(w @ w) + float(np.maximum(0.0, 1.0 - margins).mean())


Chunks = list[tuple[sp.csr_matrix, np.ndarray]]


def chunks(matrix: sp.csr_matrix, labels: np.ndarray, size: int | None) -> Chunks:
    """The rows as (matrix, labels) of ``size`` rows each (one chunk of all of them for None)."""
    n = matrix.shape[0]
    if size is None:
        return [(matrix, labels)]
    return [(matrix[a : a + size], labels[a : a + size]) for a in range(0, n, size)]


def ours(parts: Chunks, arrays: bool, calibrate: bool = True) -> tuple[float, np.ndarray]:
    """Seconds of learn_csr over the chunks, and the weights learned."""
    model = PegasosClassifier(lambda_=LAMBDA, n_features=N_FEATURES if arrays else None, calibrate=calibrate)
    start = time.perf_counter()
    for part, labels in parts:
        model.learn_csr(part.indptr, part.indices, part.data, labels)
    seconds = time.perf_counter() - start
    w = np.zeros(N_FEATURES)
    weights = model.weights
    w[list(weights)] = list(weights.values())
    return seconds, w


def sklearn(parts: Chunks) -> tuple[float, np.ndarray]:
    """Seconds of partial_fit over the chunks, and the weights learned."""
    model = SGDClassifier(loss="hinge", alpha=LAMBDA, learning_rate="optimal", fit_intercept=False, shuffle=False)
    classes = np.array([False, True])
    start = time.perf_counter()
    for part, labels in parts:
        model.partial_fit(part, labels, classes=classes)
    return time.perf_counter() - start, model.coef_.ravel().copy()


def _spin() -> None:
    while True:
        pass


def measure(args: argparse.Namespace) -> list[dict]:
    matrix, labels = build(args.n, args.seed)
    forms: dict[str, int | None] = {"one call": None, f"{args.chunk:,}-row chunks": args.chunk}
    results = []
    for form, size in forms.items():
        parts = chunks(matrix, labels, size)
        passes: dict[str, Callable[[], tuple[float, np.ndarray]]] = {
            "ours (arrays)": lambda parts=parts: ours(parts, arrays=True),
            "scikit-learn": lambda parts=parts: sklearn(parts),
            NO_CALIBRATION: lambda parts=parts: ours(parts, arrays=True, calibrate=False),
            "ours (dicts)": lambda parts=parts: ours(parts, arrays=False),
        }
        for run in passes.values():  # warm-up, not counted
            run()
        times: dict[str, list[float]] = {name: [] for name in passes}
        weights: dict[str, np.ndarray] = {}
        for _ in range(args.repeat):
            for name, run in passes.items():
                seconds, w = run()
                times[name].append(seconds)
                weights.setdefault(name, w)
        ratios = {
            name: [a / b for a, b in zip(times[name], times["scikit-learn"], strict=True)]
            for name in ("ours (arrays)", NO_CALIBRATION, "ours (dicts)")
        }
        results.append(
            {
                "form": form,
                "seconds": times,
                "ratios": ratios,
                "objective": {name: objective(w, matrix, labels) for name, w in weights.items()},
            }
        )
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=781_265, help="rows (RCV1's training set size by default)")
    parser.add_argument("--chunk", type=int, default=50_000, help="rows per call in the chunked form")
    parser.add_argument("--repeat", type=int, default=5, help="paired rounds per form")
    parser.add_argument("--load", type=int, default=0, help="processes spinning on the CPU while measuring")
    parser.add_argument("--seed", type=int, default=0)
    add_out_argument(parser, "pass.json")
    args = parser.parse_args()
    spinners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(args.load)]
    for spinner in spinners:
        spinner.start()
    try:
        with threadpool_limits(1):
            results = measure(args)
    finally:
        for spinner in spinners:
            spinner.terminate()
    rows = []
    for result in results:
        for name, ratios in result["ratios"].items():
            ours_times, theirs = result["seconds"][name], result["seconds"]["scikit-learn"]
            rows.append(
                [
                    result["form"],
                    name,
                    f"{min(ours_times):.3f} / {statistics.median(ours_times):.3f}",
                    f"{min(theirs):.3f} / {statistics.median(theirs):.3f}",
                    f"{min(ratios):.2f}",
                    f"{statistics.median(ratios):.2f}",
                    f"{max(ratios):.2f}",
                    f"{result['objective'][name]:.4f} vs {result['objective']['scikit-learn']:.4f}",
                ]
            )
    load = f"{args.load} spinning processes" if args.load else "no other load"
    table = section(
        f"One pass over {args.n:,} RCV1-like rows ({N_FEATURES:,} features), λ = {LAMBDA:g}: "
        f"ours ÷ scikit-learn partial_fit, {args.repeat} paired rounds, {os.cpu_count()} cores, {load}",
        [
            "form", "ours", ">ours s (min / median)", ">scikit-learn s (min / median)", ">ratio min", ">ratio median",
            ">ratio max", ">objective after a pass (ours vs scikit-learn)",
        ],
        rows,
        [
            "Ratio: our seconds ÷ scikit-learn's in the same round (below 1: ours faster). Both learn from the same "
            "chunk matrices in memory; ours checks them (bounds, no column twice in a row) and turns the bool labels "
            "into signs inside the clock. Same work: ours with calibrate=False gives what scikit-learn's hinge model "
            "gives, a margin per row and no probability; ours (arrays) also fits its online Platt calibration.",
            "Each round runs ours (arrays), scikit-learn, ours without calibration and ours with dicts back to back.",
        ],
    )  # fmt: skip
    one_call = results[0]
    ratios = one_call["ratios"][NO_CALIBRATION]
    calibrated = one_call["ratios"]["ours (arrays)"]
    headline = [
        f"one pass over {args.n:,} RCV1-like rows in one call, margins only (s, fastest of {args.repeat} paired "
        f"passes; our time ÷ scikit-learn's per round: {min_median(ratios)}; with our calibration fitted too: "
        f"{min_median(calibrated)})",
        f"{min(one_call['seconds'][NO_CALIBRATION]):.3f}",
        "scikit-learn SGDClassifier.partial_fit",
        f"{min(one_call['seconds']['scikit-learn']):.3f}",
    ]
    write_results(args, "One pass: learn_csr against partial_fit", [table], results=results, headline=[headline])


if __name__ == "__main__":
    main()
