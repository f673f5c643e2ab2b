"""The pause of a checkpoint of a large model: a PegasosClassifier with a million weights written and read back.

A ``PegasosClassifier(lambda_=1e-4, average=False)`` learns ``--weights`` distinct features, 10,000 per
example (alternating labels), so that it holds that many weights. ``Checkpoints.write`` then writes
``--writes`` checkpoints of it (each covering one more event: a write that covers no new event is
skipped); its ``pauses`` are the time each write held the loop (serialisation, fsync, rename, pruning
old files). The newest file is read back with ``read_checkpoint``, timed, and must hold the same model
(``model_digest``).

Usage: ``python scripts/bench_checkpoint.py [--weights 1000000] [--writes 3] [--out reports/checkpoint.json]``
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _harness import add_out_argument, section, warn_if_busy, write_results

from pegasos_stream import PegasosClassifier
from pegasos_stream.persist.checkpoint import Checkpoints, model_digest, read_checkpoint

#: Features learnt per example.
BLOCK = 10_000


def trained(n_weights: int) -> PegasosClassifier:
    """A model holding ``n_weights`` weights, learnt ``BLOCK`` features at a time."""
    model = PegasosClassifier(lambda_=1e-4, average=False)
    for i, start in enumerate(range(0, n_weights, BLOCK)):
        model.learn_one({f"f{j}": 1.0 for j in range(start, min(start + BLOCK, n_weights))}, i % 2 == 0)
    if len(model.weights) != n_weights:
        raise RuntimeError(f"the model holds {len(model.weights):,} weights, not {n_weights:,}")
    return model


def measure(model: PegasosClassifier, writes: int, directory: Path) -> dict:
    """Write ``writes`` checkpoints of ``model`` and read the last back: size, pauses, load time."""
    writer = Checkpoints(directory, keep=1)
    for k in range(writes):
        state = {"counts": [100 + k, 100, 100, 0], "pending": [], "pending_counts": [0, 0, 0], "report": {}}
        path = writer.write(model, state, {"offset": 0, "line": 100})
    if writer.write(model, state, {"offset": 0, "line": 100}) is not None:
        raise RuntimeError("a checkpoint covering no new event was written")
    start = time.perf_counter()
    loaded = read_checkpoint(path)[0]["model"]
    load_seconds = time.perf_counter() - start
    if model_digest(loaded) != model_digest(model):
        raise RuntimeError(f"{path} does not hold the model written")
    return {"bytes": path.stat().st_size, "pauses_seconds": writer.pauses, "load_seconds": load_seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weights", type=int, default=1_000_000, help="weights of the model")
    parser.add_argument("--writes", type=int, default=3, help="checkpoints written")
    add_out_argument(parser, "checkpoint.json")
    args = parser.parse_args()
    if args.writes < 1 or args.weights < 1:
        parser.error("--weights and --writes must be at least 1")

    warn_if_busy()
    print(f"learning {args.weights:,} weights ...", file=sys.stderr)
    model = trained(args.weights)
    with tempfile.TemporaryDirectory(prefix="bench_checkpoint_") as directory:
        result = measure(model, args.writes, Path(directory))
    pauses = result["pauses_seconds"]
    table = section(
        f"Checkpoint of a PegasosClassifier with {args.weights:,} weights",
        [">weights", ">file (MB)", ">pauses of the writes (ms)", ">median pause (ms)", ">load (ms)"],
        [
            [
                f"{args.weights:,}",
                f"{result['bytes'] / 1e6:.1f}",
                ", ".join(f"{p * 1000:.0f}" for p in pauses),
                f"{statistics.median(pauses) * 1000:.0f}",
                f"{result['load_seconds'] * 1000:.0f}",
            ]
        ],
        [
            "Pause: the time Checkpoints.write held the loop (serialise, write, fsync, rename, prune). "
            "Load: read_checkpoint of the newest file; it holds the same model (model_digest)."
        ],
    )
    write_results(
        args,
        "The pause of a checkpoint of a large model",
        [table],
        results={"weights": args.weights, **result},
    )


if __name__ == "__main__":
    main()
