"""``serve --http`` under load and abuse, on loopback: what clients get, whether health checks are answered
throughout, and the service's resident memory.

A model of ``configs/spam.yaml`` is trained on the first ``--train`` messages of the SpamAssassin stream
(`bench_spamd.train`); the service then answers, in order:

1. **load**: the next messages POSTed raw to ``/predict`` (``message/rfc822``) by 1, 8 and 64 clients, each on a
   keep-alive connection of its own: messages/s and p50/p99 latency;
2. **slowloris**: ``--slow`` connections that send a request line, then one header byte a second, never
   finishing, for ``--slow-seconds``, while 8 clients go on predicting: their p50/p99 and how many slow
   connections the service let go;
3. **huge**, twice: JSON arrays of one event more than a request takes, array bodies over 16 MiB, and a 65 MiB
   raw message, each sent by 64 clients at once: the status codes they got (0: the connection was closed, as
   the service closes one after answering 413 from a body's announced length) and p99.

All along, a prober GETs ``/health`` on a new connection every 0.1 s (its own timeout 5 s): the share
answered 200 and the p99 and largest latency, per phase. The service's VmRSS (``/proc``) is read before the
first phase and after each. Everything stays on 127.0.0.1 and stops by itself.

Usage: ``python scripts/bench_abuse.py [--data ...] [--messages 2000] [--slow 600]``
"""

from __future__ import annotations

import argparse
import http.client
import json
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from _harness import add_data_argument, add_out_argument, fmt, percentile, section, warn_if_busy, write_results
from bench_spamd import Server, free_port, train

CONCURRENCY = (1, 8, 64)
#: One event more than a request may carry, and more array bytes than one may send (serve.http_api's limits).
TOO_MANY_EVENTS, TOO_MANY_BYTES = 1001, 17 << 20
#: A raw message over the largest request body (64 MiB).
HUGE_MESSAGE = 65 << 20


def post(connection: http.client.HTTPConnection, path: str, body: bytes, kind: str) -> tuple[float, int]:
    """Seconds for one POST on ``connection`` (read whole), and its status."""
    start = time.perf_counter()
    connection.request("POST", path, body=body, headers={"Content-Type": kind})
    response = connection.getresponse()
    response.read()
    return time.perf_counter() - start, response.status


def clients(port: int, bodies: list[bytes], count: int, path: str, kind: str) -> list[tuple[float, int]]:
    """``bodies`` POSTed by ``count`` concurrent clients, each on a keep-alive connection of its own (a new one
    after an error): (seconds, status) of each, status 0 for a connection that failed."""
    shares = [bodies[i::count] for i in range(count)]

    def client(share: list[bytes]) -> list[tuple[float, int]]:
        results, connection = [], http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        for body in share:
            try:
                results.append(post(connection, path, body, kind))
            except (OSError, http.client.HTTPException):
                results.append((0.0, 0))
                connection.close()
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        connection.close()
        return results

    with ThreadPoolExecutor(count) as pool:
        return [result for results in pool.map(client, shares) for result in results]


def latency_row(results: list[tuple[float, int]], seconds: float | None = None) -> dict:
    """p50 and p99 in ms of the answered requests, the statuses, and the rate over ``seconds``."""
    answered = [latency for latency, status in results if status]
    row = {
        "p50_ms": 1000 * statistics.median(answered) if answered else None,
        "p99_ms": 1000 * percentile(answered, 0.99) if answered else None,
        "statuses": dict(Counter(status for _, status in results)),
    }
    if seconds is not None:
        row["rate"] = len(results) / seconds
    return row


class HealthProber(threading.Thread):
    """GETs /health every 0.1 s on a new connection, keeping (phase, seconds, status) of each probe."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.port, self.phase = port, "start"
        self.probes: list[tuple[str, float, int]] = []
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(0.1):
            phase, start, status = self.phase, time.perf_counter(), 0
            try:
                connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
                connection.request("GET", "/health")
                status = connection.getresponse().status
                connection.close()
            except (OSError, http.client.HTTPException):
                pass
            self.probes.append((phase, time.perf_counter() - start, status))

    def summary(self, phase: str) -> dict:
        probes = [(seconds, status) for name, seconds, status in self.probes if name == phase]
        latencies = [seconds for seconds, _ in probes]
        return {
            "probes": len(probes),
            "answered": sum(status == 200 for _, status in probes) / max(len(probes), 1),
            "p99_ms": 1000 * percentile(latencies, 0.99) if latencies else None,
            "max_ms": 1000 * max(latencies) if latencies else None,
        }


def slowloris(port: int, count: int, seconds: float) -> int:
    """``count`` connections that each send a request line, then a header byte a second for ``seconds``; how many
    of them the service closed before the end."""
    sockets = []
    for _ in range(count):
        try:
            connection = socket.create_connection(("127.0.0.1", port), timeout=5)
            connection.sendall(b"POST /predict HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            sockets.append(connection)
        except OSError:
            pass
    closed: set[int] = set()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for i, connection in enumerate(sockets):
            if i not in closed:
                try:
                    connection.sendall(b"a")
                except OSError:
                    closed.add(i)
        time.sleep(1.0)
    for connection in sockets:
        connection.close()
    return len(closed) + count - len(sockets)


def huge_bodies(event: dict) -> dict[str, tuple[str, str, bytes]]:
    """The oversized requests: (path, content type, body) by name."""
    padded = {**event, "text": event["text"] + " " * (TOO_MANY_BYTES // 100)}
    return {
        "array of 1,001 events": ("/predict", "application/json", json.dumps([event] * TOO_MANY_EVENTS).encode()),
        "array of 17 MiB": ("/predict", "application/json", json.dumps([padded] * 100).encode()),
        "raw message of 65 MiB": ("/predict", "message/rfc822", b"Subject: x\n\n" + b"a" * HUGE_MESSAGE),
    }


def run_phases(server: Server, messages: list[bytes], args: argparse.Namespace) -> dict:
    port, prober = server.port, HealthProber(server.port)
    prober.start()
    rss = {"before": server.rss_mb()}
    results: dict = {"load": {}, "huge": {}}
    for count in CONCURRENCY:
        prober.phase = f"load {count}"
        start = time.perf_counter()
        answers = clients(port, messages[: args.messages], count, "/predict", "message/rfc822")
        results["load"][count] = latency_row(answers, time.perf_counter() - start)
    rss["after load"] = server.rss_mb()
    prober.phase = "slowloris"
    with ThreadPoolExecutor(1) as pool:
        slow = pool.submit(slowloris, port, args.slow, args.slow_seconds)
        time.sleep(2.0)  # the slow connections open first
        answers = clients(port, messages[: args.messages // 4], 8, "/predict", "message/rfc822")
        results["slowloris"] = {**latency_row(answers), "let_go": slow.result(), "connections": args.slow}
    rss["after slowloris"] = server.rss_mb()
    event = {"id": "x", "text": messages[0].decode("latin-1")}
    for phase in ("huge", "huge again"):  # the second round shows whether the memory of the first stays flat
        prober.phase = phase
        for name, (path, kind, body) in huge_bodies(event).items():
            results["huge"][f"{phase}: 64 × {name}"] = latency_row(clients(port, [body] * 64, 64, path, kind))
        rss[f"after {phase}"] = server.rss_mb()
    prober.stopped.set()
    prober.join()
    phases = [*(f"load {count}" for count in CONCURRENCY), "slowloris", "huge", "huge again"]
    results["health"] = {phase: prober.summary(phase) for phase in phases}
    results["rss_mb"] = rss
    return results


def report(results: dict, args: argparse.Namespace) -> list[dict]:
    """The result tables."""
    load = [
        [count, fmt(row["rate"], ",.0f"), fmt(row["p50_ms"], ".1f"), fmt(row["p99_ms"], ".1f"), row["statuses"]]
        for count, row in results["load"].items()
    ]
    slow = results["slowloris"]
    abuse = [["8 clients predicting under slowloris", fmt(slow["p50_ms"], ".1f"), fmt(slow["p99_ms"], ".1f")]]
    abuse[0].append(slow["statuses"])
    for name, row in results["huge"].items():
        abuse.append([name, fmt(row["p50_ms"], ".1f"), fmt(row["p99_ms"], ".1f"), row["statuses"]])
    health = [
        [phase, row["probes"], fmt(100 * row["answered"], ".1f"), fmt(row["p99_ms"], ".1f"), fmt(row["max_ms"], ".1f")]
        for phase, row in results["health"].items()
    ]
    note = (
        f"{args.messages:,} SpamAssassin messages after the first {args.train:,} (the model's), raw to /predict."
        f" Slowloris: {args.slow} connections held {args.slow_seconds:g} s, of which the service let"
        f" {slow['let_go']} go. Service VmRSS, MB: "
        + ", ".join(f"{when} {mb:.1f}" for when, mb in results["rss_mb"].items())
    )
    return [
        section(
            "Load: raw messages to /predict", [">clients", ">msg/s", ">p50 ms", ">p99 ms", "statuses"], load, [note]
        ),
        section("Abuse: what the clients got", ["requests", ">p50 ms", ">p99 ms", "statuses"], abuse, [note]),
        section(
            "GET /health throughout (a probe every 0.1 s)",
            ["phase", ">probes", ">answered %", ">p99 ms", ">max ms"],
            health,
            [note],
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_data_argument(parser)
    parser.add_argument("--train", type=int, default=3000, help="messages the model is trained on")
    parser.add_argument("--messages", type=int, default=2000, help="messages predicted at each concurrency")
    parser.add_argument("--slow", type=int, default=600, help="slowloris connections (the service holds 500)")
    parser.add_argument("--slow-seconds", type=float, default=30.0, help="how long they are held")
    add_out_argument(parser, "abuse.json")
    args = parser.parse_args()
    warn_if_busy()
    with tempfile.TemporaryDirectory() as work:
        checkpoint, messages = train(args.data, args.train, Path(work))
        port = free_port()
        argv = [sys.executable, "-m", "pegasos_stream.cli", "serve", "--model", str(checkpoint)]
        server = Server([*argv, "--http", f"127.0.0.1:{port}"], port)
        try:
            results = run_phases(server, messages, args)
        finally:
            server.close()
    write_results(args, "serve --http under load and abuse", report(results, args), results=results)


if __name__ == "__main__":
    main()
