"""One event at a time: ``predict_proba_one`` + ``learn_one`` on hashed email features against Vowpal Wabbit, paired.

Features: ``EmailFeatures(reader="bytes", char_ngram=4, max_chars=3000, binary=True, normalize=True,
hash_bits=20)`` of the first ``--limit`` SpamAssassin messages (about 1,000 non-zeros each), made before any
timing, as dicts {column: value}. Every pass runs over them in order, one event at a time, from a fresh model:

* **ours, arrays**: ``PegasosClassifier(lambda_=1e-5, t0=30000, n_features=2**20)``: ``predict_proba_one(x)``
  then ``learn_one(x, y)`` (the weights in an array);
* **ours, dicts**: the same with weights in a dict (``n_features=None``);
* **Vowpal Wabbit**: ``pyvw.Workspace("--loss_function hinge --quiet -b 20")``, each example already formatted
  as a text line ``±1 |f column:value ...`` before timing: ``parse``, ``predict``, ``learn``, ``finish_example``.

Pairing: ``--repeat`` rounds of (arrays, dicts, VW) back to back; per round our time ÷ VW's, smallest / median /
largest (below 1: ours faster). Native thread pools: one thread.

Usage: ``python scripts/bench_event.py [--data PATH] [--limit 3000] [--repeat 7] [--out reports/event.json]``
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from _harness import add_data_argument, add_out_argument, load_messages, min_median, section, write_results
from threadpoolctl import threadpool_limits
from vowpalwabbit import pyvw

from pegasos_stream import PegasosClassifier
from pegasos_stream.features import EmailFeatures

HASH_BITS = 20


def ours(xs: list[dict], ys: list[bool], n_features: int | None) -> float:
    """Seconds of one prequential pass of PegasosClassifier."""
    model = PegasosClassifier(lambda_=1e-5, t0=30_000, n_features=n_features)
    predict, learn = model.predict_proba_one, model.learn_one
    start = time.perf_counter()
    for x, y in zip(xs, ys, strict=True):
        predict(x)
        learn(x, y)
    return time.perf_counter() - start


def vw(lines: list[str]) -> float:
    """Seconds of one pass of Vowpal Wabbit over the formatted lines: parse, predict, learn, finish."""
    workspace = pyvw.Workspace(f"--loss_function hinge --quiet -b {HASH_BITS}")
    start = time.perf_counter()
    for line in lines:
        example = workspace.parse(line)
        workspace.predict(example)
        workspace.learn(example)
        workspace.finish_example(example)
    seconds = time.perf_counter() - start
    workspace.finish()
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_data_argument(parser)
    parser.add_argument("--limit", type=int, default=3000, help="the first N messages")
    parser.add_argument("--repeat", type=int, default=7, help="paired rounds")
    add_out_argument(parser, "event.json")
    args = parser.parse_args()
    messages = load_messages(args.data)[: args.limit]
    features = EmailFeatures(
        reader="bytes", char_ngram=4, max_chars=3000, binary=True, normalize=True, hash_bits=HASH_BITS
    )
    xs, ys = [features.transform_one(m.text) for m in messages], [m.is_spam for m in messages]
    lines = [("1 |f " if y else "-1 |f ") + " ".join(f"{k}:{v}" for k, v in x.items()) for x, y in zip(xs, ys)]
    passes: dict[str, Callable[[], float]] = {
        "PegasosClassifier, weights in an array (n_features=2**20)": lambda: ours(xs, ys, 2**HASH_BITS),
        "PegasosClassifier, weights in a dict": lambda: ours(xs, ys, None),
        "Vowpal Wabbit (pyvw, hinge, -b 20), lines formatted beforehand": lambda: vw(lines),
    }
    times: dict[str, list[float]] = {name: [] for name in passes}
    with threadpool_limits(1):
        for run in passes.values():  # warm-up, not counted
            run()
        for _ in range(args.repeat):
            for name, run in passes.items():
                times[name].append(run())
    arrays_name, vw_name = next(iter(passes)), list(passes)[-1]
    n = len(xs)
    rows = []
    for name, seconds in times.items():
        ratios = [a / b for a, b in zip(seconds, times[vw_name], strict=True)]
        rows.append(
            [
                name,
                f"{min(seconds) / n * 1e6:.1f}",
                f"{statistics.median(seconds) / n * 1e6:.1f}",
                f"{min(ratios):.2f} / {statistics.median(ratios):.2f} / {max(ratios):.2f}",
            ]
        )
    nnz = sum(map(len, xs)) / n
    table = section(
        f"One event at a time over {n:,} SpamAssassin messages ({nnz:,.0f} non-zeros each on average), "
        f"{args.repeat} paired rounds",
        ["system", ">fastest µs/event", ">median µs/event", ">time ÷ VW's per round (min / median / max)"],
        rows,
        ["Per round, each system's seconds ÷ Vowpal Wabbit's in the same round (below 1: faster than VW)."],
    )
    arrays = [a / b for a, b in zip(times[arrays_name], times[vw_name], strict=True)]
    headline = [
        f"per event, predict_proba_one + learn_one, SpamAssassin hashed 4-grams (µs/event, fastest of {args.repeat} "
        f"paired rounds; our time ÷ VW's: {min_median(arrays)})",
        f"{min(times[arrays_name]) / n * 1e6:.1f}",
        "Vowpal Wabbit (pyvw, hinge), lines formatted beforehand",
        f"{min(times[vw_name]) / n * 1e6:.1f}",
    ]
    write_results(args, "One event at a time against Vowpal Wabbit", [table], times=times, headline=[headline])


if __name__ == "__main__":
    main()
