#!/usr/bin/env python3
"""Memory of personal filters for many users: bytes per user in memory and resident memory at a fixed number of
offsets in memory, for 10k, 100k and 1M users.

Each event is one user's label of a message of ``--features`` hashed features (columns of 2^19, value
1/√features, labels alternating with the parity of the first column); each user labels ``--per-user`` messages,
the users taking turns in a seeded order. `PersonalPegasos` (its shipped offset settings, a shared
``PegasosClassifier(lambda_=1e-5, n_features=2**19)``) keeps at most ``--in-memory`` offsets in memory; the
others leave for a store on disk (SQLite, one row of bytes per user; any mapping of user to bytes serves, and a
stream engine's state store is the deployment's). At the end: the offsets in memory, their bytes per user
(the growth of the resident memory per offset in memory), the process's peak and final resident memory, the store's size
on disk and the events per second. Each user count runs in a fresh interpreter.

    python scripts/bench_personal_memory.py [--users 10000 100000 1000000] [--in-memory 10000]
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, MutableMapping
from pathlib import Path

import numpy as np
from _harness import add_out_argument, section, warn_if_busy, write_results
from bench_memory import resident_bytes

from pegasos_stream.cli.config import load_config
from pegasos_stream.learners import PegasosClassifier, PersonalPegasos

REPO = Path(__file__).resolve().parents[1]
COLUMNS = 2**19


class SqliteStore(MutableMapping[str, bytes]):
    """A mapping of user to bytes in one SQLite table (a store for offsets that leave memory)."""

    def __init__(self, path: Path) -> None:
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=OFF")
        self.db.execute("PRAGMA synchronous=OFF")
        self.db.execute("CREATE TABLE IF NOT EXISTS offsets (user TEXT PRIMARY KEY, data BLOB)")

    def __getitem__(self, user: str) -> bytes:
        row = self.db.execute("SELECT data FROM offsets WHERE user = ?", (user,)).fetchone()
        if row is None:
            raise KeyError(user)
        return row[0]

    def __setitem__(self, user: str, data: bytes) -> None:
        self.db.execute("INSERT OR REPLACE INTO offsets VALUES (?, ?)", (user, data))

    def __delitem__(self, user: str) -> None:
        self.db.execute("DELETE FROM offsets WHERE user = ?", (user,))

    def __contains__(self, user: object) -> bool:
        return self.db.execute("SELECT 1 FROM offsets WHERE user = ?", (user,)).fetchone() is not None

    def __iter__(self) -> Iterator[str]:
        return (row[0] for row in self.db.execute("SELECT user FROM offsets"))

    def __len__(self) -> int:
        return self.db.execute("SELECT COUNT(*) FROM offsets").fetchone()[0]


def measure(users: int, in_memory: int, per_user: int, features: int) -> dict:
    """Learn ``per_user`` labels of each of ``users`` users; the figures at the end."""
    shipped = load_config(REPO / "configs" / "personal.yaml", [])["model"]
    settings = {k: v for k, v in shipped.items() if k not in ("kind", "shared")}
    rng = np.random.default_rng(7)
    order = np.repeat(np.arange(users, dtype=np.int32), per_user)
    rng.shuffle(order)
    value = 1.0 / math.sqrt(features)
    with tempfile.TemporaryDirectory(prefix="bench_personal_memory_") as directory:
        store = SqliteStore(Path(directory) / "offsets.sqlite")
        model = PersonalPegasos(
            PegasosClassifier(lambda_=1e-5, n_features=COLUMNS), **settings, max_users=in_memory, store=store
        )
        model.shared.learn_one({0: 1.0}, True)  # (its arrays touched: in the baseline)
        baseline = resident_bytes()
        start = time.perf_counter()
        for user in order:  # each message's columns drawn as it comes: the benchmark holds no stream in memory
            row = rng.integers(0, COLUMNS, size=features).tolist()
            model.learn_one(dict.fromkeys(row, value), bool(row[0] & 1), user=f"user{user}")
        seconds = time.perf_counter() - start
        rss = resident_bytes()
        return {
            "users": users,
            "in_memory": model.users,
            "events": len(order),
            "weights_in_memory": model.personal_weights,
            "bytes_per_user_in_memory": (rss - baseline) / max(model.users, 1),
            "rss_bytes": rss,
            "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            "store_bytes": (Path(directory) / "offsets.sqlite").stat().st_size,
            "stored_users": len(store),
            "events_per_s": len(order) / seconds,
        }


def run(users: int, args: argparse.Namespace) -> dict:
    """``measure`` in a fresh interpreter."""
    command = [sys.executable, __file__, "--measure", str(users), "--in-memory", str(args.in_memory)]
    command += ["--per-user", str(args.per_user), "--features", str(args.features)]
    return json.loads(subprocess.run(command, stdout=subprocess.PIPE, check=True, text=True).stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--in-memory", type=int, default=10_000, help="the most offsets in memory (max_users)")
    parser.add_argument("--per-user", type=int, default=2, help="labels per user")
    parser.add_argument("--features", type=int, default=50, help="hashed features per message")
    parser.add_argument("--measure", type=int, help="measure this many users alone and print its JSON")
    add_out_argument(parser, "personal_memory.json")
    args = parser.parse_args()
    if args.measure is not None:
        print(json.dumps(measure(args.measure, args.in_memory, args.per_user, args.features)))
        return
    warn_if_busy()
    rows = [run(users, args) for users in args.users]
    columns = ["users", ">offsets in memory", ">weights in memory", ">bytes per user in memory", ">RSS (MB)",
               ">peak RSS (MB)", ">store on disk (MB)", ">events/s"]  # fmt: skip
    table = section(
        f"PersonalPegasos, at most {args.in_memory:,} offsets in memory, {args.per_user} labels per user, "
        f"{args.features} features per message",
        columns,
        [
            [
                f"{row['users']:,}",
                f"{row['in_memory']:,}",
                f"{row['weights_in_memory']:,}",
                f"{row['bytes_per_user_in_memory']:,.0f}",
                f"{row['rss_bytes'] / 1e6:,.0f}",
                f"{row['peak_rss_bytes'] / 1e6:,.0f}",
                f"{row['store_bytes'] / 1e6:,.0f}",
                f"{row['events_per_s']:,.0f}",
            ]
            for row in rows
        ],
        [
            "Each user count in a fresh interpreter. Bytes per user in memory: the growth of the resident memory "
            "from before the first event (the shared model's 2^19 float64 columns and the interpreter in it; "
            "each message's columns are drawn as it comes) to the end, per offset in memory (each its arrays of "
            "columns, weights and AdaGrad's sums, with the allocator's overhead, and the SQLite cache). The store "
            "is a SQLite table of one row of bytes per user."
        ],
    )
    write_results(args, "Memory of personal filters for many users", [table], rows=rows)


if __name__ == "__main__":
    main()
