"""Memory of a stream with ever-new feature names: resident memory, checkpoint size and save pause.

Every event carries ``--names`` feature names never seen before (value 1/√names, alternating labels),
as a long-running filter on character n-grams meets them. A ``PegasosClassifier(lambda_=1e-4)``
learns them one event at a time with ``learn_one``, on the names as they come ("plain"), hashed
into 2^``--hash-bits`` columns by ``DictHasher`` ("hashed", weights in a dict) and hashed likewise into
a model with ``n_features=2**hash_bits`` ("arrays", weights in a float64 array). At each of ``--at``
events: the process's resident memory (``/proc/self/statm``), its growth since before the model was
made, per weight held (for "arrays": per column, every column being held, against the 8 bytes of a
float64 array), the weights held, and the size of ``pegasos_stream.persist.save`` of the model and the
seconds it took. Each variant runs in a fresh interpreter, so that none inherits another's heap.

Usage: ``python scripts/bench_memory.py [--at 100000 500000] [--names 50] [--hash-bits 20]
[--out reports/memory.json]``
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _harness import add_out_argument, section, warn_if_busy, write_results

from pegasos_stream import PegasosClassifier
from pegasos_stream.features import DictHasher
from pegasos_stream.persist import save

VARIANTS = ("plain", "hashed", "arrays")
#: How the table names each variant.
LABELS = {
    "plain": "plain (dict)",
    "hashed": "DictHasher({bits}), dict",
    "arrays": "DictHasher({bits}), n_features=2**{bits} (array)",
}


def resident_bytes() -> int:
    """The resident set size of this process, from /proc/self/statm."""
    with open("/proc/self/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def measure_variant(variant: str, at: list[int], names: int, hash_bits: int) -> list[dict]:
    """Learn up to max(at) events of ever-new names; one measurement at each count in ``at``."""
    baseline = resident_bytes()
    model = PegasosClassifier(lambda_=1e-4, n_features=2**hash_bits if variant == "arrays" else None)
    hasher = DictHasher(hash_bits) if variant != "plain" else None
    value = 1.0 / math.sqrt(names)
    results, learn_seconds, learnt = [], 0.0, 0
    with tempfile.TemporaryDirectory(prefix="bench_memory_") as directory:
        path = Path(directory) / "model.ckpt"
        for target in sorted(at):
            start = time.perf_counter()
            for event in range(learnt, target):
                x = {f"e{event}_{j}": value for j in range(names)}
                model.learn_one(hasher.transform_one(x) if hasher is not None else x, event % 2 == 0)
            learnt = target
            learn_seconds += time.perf_counter() - start
            rss = resident_bytes()  # before the save and the copy of the weights below
            start = time.perf_counter()
            save(model, path)
            save_seconds = time.perf_counter() - start
            held = 2**hash_bits if variant == "arrays" else len(model.weights)
            results.append(
                {
                    "variant": variant,
                    "events": target,
                    "weights": held,
                    "rss_bytes": rss,
                    "growth_bytes_per_weight": (rss - baseline) / held,
                    "checkpoint_bytes": path.stat().st_size,
                    "save_seconds": save_seconds,
                    "learn_seconds": learn_seconds,
                }
            )
            print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    return results


def run_variant(variant: str, args: argparse.Namespace) -> list[dict]:
    """``measure_variant`` in a fresh interpreter (this script with ``--variant``)."""
    command = [sys.executable, __file__, "--variant", variant, "--names", str(args.names)]
    command += ["--hash-bits", str(args.hash_bits), "--at", *map(str, args.at)]
    done = subprocess.run(command, stdout=subprocess.PIPE, check=True, text=True)
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--at", type=int, nargs="+", default=[100_000, 500_000], help="events at which to measure")
    parser.add_argument("--names", type=int, default=50, help="new feature names per event")
    parser.add_argument("--hash-bits", type=int, default=20, help="DictHasher's hash_bits")
    parser.add_argument("--variant", choices=VARIANTS, help="measure this variant alone and print its JSON")
    add_out_argument(parser, "memory.json")
    args = parser.parse_args()
    if args.variant is not None:
        print(json.dumps(measure_variant(args.variant, args.at, args.names, args.hash_bits)))
        return

    warn_if_busy()
    rows = [row for variant in VARIANTS for row in run_variant(variant, args)]
    table = section(
        f"PegasosClassifier.learn_one, {args.names} new feature names per event",
        [
            "variant",
            ">events",
            ">weights",
            ">RSS (MB)",
            ">RSS growth per weight (bytes)",
            ">checkpoint (MB)",
            ">save (s)",
            ">learning (s)",
        ],
        [
            [
                LABELS[row["variant"]].format(bits=args.hash_bits),
                f"{row['events']:,}",
                f"{row['weights']:,}",
                f"{row['rss_bytes'] / 1e6:,.0f}",
                f"{row['growth_bytes_per_weight']:.1f}",
                f"{row['checkpoint_bytes'] / 1e6:,.1f}",
                f"{row['save_seconds']:.2f}",
                f"{row['learn_seconds']:.1f}",
            ]
            for row in rows
        ],
        [
            "Each variant in a fresh interpreter; RSS from /proc/self/statm before the save, its growth from before "
            "the model was made, per weight held (arrays: per column; a float64 array takes 8 bytes a weight); "
            "learning time is cumulative and includes building each event's dict (and hashing it)."
        ],
    )
    write_results(args, "Memory of a stream with ever-new feature names", [table], rows=rows)


if __name__ == "__main__":
    main()
