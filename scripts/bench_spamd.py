"""``serve --spamd`` under load, on loopback: messages/s and latency for 1, 8 and 64 concurrent ``spamc`` clients,
and the service's resident memory over a long run; beside SpamAssassin's own ``spamd`` where it is installed.

A model of ``configs/spam.yaml`` is trained on the first ``--train`` messages of the SpamAssassin stream; the
next ones are checked (``spamc -c``), each client a thread that runs one ``spamc`` process per message, as a mail
server's pipe does. With ``spamd`` on the PATH, the same messages go to it (stock rules, network tests off) in the
same run, the two servers alternating by concurrency level (A, B, A, B...): the ratio is ours ÷ spamd's rate.
Latency is the wall time of one ``spamc`` process (its start-up included, as a mail server pays it). Memory: the
server's VmRSS (``/proc``) before, and after every ``--rss-every`` of ``--rss-messages`` messages sent over raw
sockets (the protocol without a process per message, so that the long run is the server's work alone).

Usage: ``python scripts/bench_spamd.py [--data ...] [--messages 2000] [--rss-messages 100000]``
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from _harness import (
    add_data_argument,
    add_out_argument,
    fmt,
    percentile,
    read_json_lines,
    section,
    warn_if_busy,
    write_results,
)

CONCURRENCY = (1, 8, 64)


def train(data: Path, count: int, work: Path) -> tuple[Path, list[bytes]]:
    """A checkpoint of the spam configuration on the first ``count`` messages, and the messages after them."""
    records = list(read_json_lines(data))
    events = work / "train.jsonl"
    events.write_text("".join(json.dumps(r) + "\n" for r in records[:count]), encoding="utf-8")
    directory = work / "ck"
    command = [sys.executable, "-m", "pegasos_stream.cli", "run", "--config", "spam", "--input", str(events)]
    subprocess.run([*command, "--set", f"checkpoint.dir={directory}", "--output", os.devnull], check=True)
    return directory, [r["text"].encode() for r in records[count:]]


class Server:
    """A spamd-protocol server in a process of its own, on a free loopback port."""

    def __init__(self, argv: list[str], port: int) -> None:
        self.port = port
        self.process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"{argv[0]} did not listen on port {port}")

    def rss_mb(self) -> float:
        """The resident memory of the server and its children (spamd forks), MB."""
        pids = [self.process.pid]
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children")
        if children.exists():
            pids += [int(p) for p in children.read_text().split()]
        total = 0
        for pid in pids:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        return total / 1024

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=60)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def check(port: int, message: bytes) -> tuple[float, bool]:
    """Seconds for one ``spamc -c`` of ``message``, and whether it was scored (spamc says 0/0 when not)."""
    start = time.perf_counter()
    done = subprocess.run(["spamc", "-d", "127.0.0.1", "-p", str(port), "-c"], input=message, capture_output=True)
    return time.perf_counter() - start, not done.stdout.startswith(b"0/0")


def load(port: int, messages: list[bytes], clients: int) -> dict:
    """``messages`` checked by ``clients`` concurrent spamc clients: rate, p50, p99, and the share not scored."""
    start = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        checks = list(pool.map(lambda m: check(port, m), messages))
    seconds = time.perf_counter() - start
    latencies = sorted(latency for latency, _ in checks)
    return {
        "rate": len(messages) / seconds,
        "p50_ms": 1000 * statistics.median(latencies),
        "p99_ms": 1000 * percentile(latencies, 0.99),
        "unscored": sum(not scored for _, scored in checks) / len(checks),
    }


def raw_check(port: int, message: bytes) -> None:
    """One CHECK over a raw socket."""
    with socket.create_connection(("127.0.0.1", port), timeout=60) as connection:
        connection.sendall(b"CHECK SPAMC/1.5\r\nContent-length: %d\r\n\r\n" % len(message) + message)
        connection.shutdown(socket.SHUT_WR)
        while connection.recv(4096):
            pass


def memory(server: Server, messages: list[bytes], total: int, every: int) -> list[tuple[int, float]]:
    """(messages sent, RSS MB) at the start and after every ``every`` of ``total`` messages."""
    points = [(0, server.rss_mb())]
    with ThreadPoolExecutor(8) as pool:
        for done in range(every, total + 1, every):
            list(pool.map(lambda i: raw_check(server.port, messages[i % len(messages)]), range(every)))
            points.append((done, server.rss_mb()))
    return points


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_data_argument(parser)
    parser.add_argument("--train", type=int, default=3000, help="messages the model is trained on")
    parser.add_argument("--messages", type=int, default=2000, help="messages checked at each concurrency")
    parser.add_argument("--spamd-messages", type=int, default=300, help="messages checked by spamd at each level")
    parser.add_argument("--rss-messages", type=int, default=100_000, help="messages of the memory run")
    parser.add_argument("--rss-every", type=int, default=10_000, help="RSS read after every this many")
    add_out_argument(parser, "spamd.json")
    args = parser.parse_args()
    if shutil.which("spamc") is None:
        sys.exit("spamc is not installed (Debian: apt-get install spamc)")
    warn_if_busy()
    with tempfile.TemporaryDirectory() as work:
        checkpoint, messages = train(args.data, args.train, Path(work))
        ours_port = free_port()
        ours = Server(
            [sys.executable, "-m", "pegasos_stream.cli", "serve", "--model", str(checkpoint)]
            + ["--spamd", f"127.0.0.1:{ours_port}"],
            ours_port,
        )
        peer = None
        if shutil.which("spamd"):
            peer_port = free_port()
            peer = Server(["spamd", "-L", "-i", "127.0.0.1", "-p", str(peer_port), "--max-children", "8"], peer_port)
        rows, results = [], {}
        try:
            for clients in CONCURRENCY:
                mine = load(ours.port, messages[: args.messages], clients)
                theirs = load(peer.port, messages[: args.spamd_messages], clients) if peer else None
                results[clients] = {"ours": mine, "spamd": theirs}
                ratio = mine["rate"] / theirs["rate"] if theirs else None
                rows.append([
                    clients,
                    f"{mine['rate']:,.0f}", f"{mine['p50_ms']:.1f}", f"{mine['p99_ms']:.1f}",
                    f"{100 * mine['unscored']:.1f}%",
                    fmt(theirs and theirs["rate"], ",.1f"), fmt(theirs and theirs["p50_ms"], ".0f"),
                    fmt(theirs and theirs["p99_ms"], ".0f"), fmt(ratio, ".0f"),
                ])  # fmt: skip
                print(f"  {clients} clients: {rows[-1]}", file=sys.stderr)
            points = memory(ours, messages, args.rss_messages, args.rss_every)
        finally:
            ours.close()
            if peer is not None:
                peer.close()
    columns = [">clients", ">ours msg/s", ">ours p50 ms", ">ours p99 ms", ">ours unscored", ">spamd msg/s"]
    columns += [">spamd p50 ms"]
    columns += [">spamd p99 ms", ">ours ÷ spamd"]
    notes = [
        f"Each level: {args.messages:,} messages for ours, {args.spamd_messages:,} for spamd (SpamAssassin's"
        " stream after the training messages), one spamc process per message."
        + ("" if peer else " spamd is not installed here: no peer column."),
        "Memory of serve --spamd (VmRSS, MB) after n messages over raw sockets: "
        + ", ".join(f"{n:,}: {mb:.1f}" for n, mb in points),
    ]
    write_results(
        args,
        "serve --spamd under load",
        [section("spamc clients on loopback", columns, rows, notes)],
        results=results,
        rss=points,
    )


if __name__ == "__main__":
    main()
