"""Cluster mode with real processes: learners and ``serve`` replicas against one tansu broker on loopback.

Protocol (one tansu broker, in memory, on 127.0.0.1; every learner and replica a ``pegasos-stream`` process):

1. **Learners, N = 1 vs 2.** The events are produced once to a 4-partition topic (event k to partition k mod 4).
   Each pass starts N ``pegasos-stream run`` processes at once, in a fresh consumer group with a fresh delta topic
   (``cluster: {sync_every_events: 1000, sync_every_ms: 1000}``, ``run: {stop_when_idle: LEARNER_IDLE_S}``), and
   waits for them to end. The cluster's rate is the events learned (the sum of the learners' ``events``) over the
   wall time from the first record any learner processed to the last one any learner processed: group joins before
   and the idle wait after are left out, the syncs in between are in. The learners' ``RunStats`` hold those times
   (``time.perf_counter``: CLOCK_MONOTONIC, one clock for every process of the machine), but the summary line gives
   only their ratio, ``examples_per_s``; so each process runs the CLI's ``main`` through `LAUNCHER`, which writes the
   times of the first and last records, of each sync and of each partition assignment, and CPU times, to a file when
   the process ends, and changes nothing else. tansu's group coordinator often hands the second member its
   partitions a rebalance (about 3 s) after the first: such a pass measures the join, not the cluster, so an N = 2
   pass is stopped once one learner has written predictions and the other none for 2 s (`in_step`), or set aside
   when its learners' first records came more than SKEW_S apart, and run again, ATTEMPTS times at most (the notes
   count them). Each pass checks that the final cluster ``t`` of every learner is the number of events, that all
   learners hold the same ``model_sha256`` and that no delta was refused (``cluster.merge`` is the package's default
   unless ``--merge`` says otherwise). A round runs a plain ``run`` (the same job without its ``cluster`` section:
   the reference), N = 1, N = 2; the paired ratio is (N = 2 rate) ÷ (N = 1 rate) within a round. The delta topic is
   read back after each pass: the bytes of its records' values per event learned.
2. **Replicas, R = 1 vs 2.** One cluster learner learns the events topic and publishes the cluster's model to a
   model topic; then each pass starts R ``serve --model-topic`` processes reading that events topic in a fresh
   consumer group of their own, predictions to files, ``--stop-when-idle REPLICA_IDLE_S``. The rate is the events
   predicted over the wall time from the start of the first batch any replica predicted to the end of the last
   (``Serving.predict``, timed by `LAUNCHER`); R = 2 passes out of step are run again as above. Rounds of R = 1, 2.
3. **Model age.** A thread of this process produces events at LIVE_RATE events/s to a fresh 4-partition topic for
   LIVE_S seconds while 2 cluster learners learn them, one of them publishing the cluster's model
   (``publish.every_seconds: 1``), and 2 replicas (``--reload-s 0.2``) predict the same topic in a group of their
   own; all start at once. Model age is the ``model_age_s`` of every prediction (seconds since the snapshot that
   predicted it was written); versions are those the predictions name and the manifests of the model topic.

The machine has 2 cores, shared by the broker, the learners or replicas, this process and whatever else runs on
it: each pass also notes the cores each of them used (``/proc/stat``, the children's rusage, the broker's
``/proc/PID/stat``), so that a busy machine shows. Child processes run with ``OPENBLAS_NUM_THREADS=1`` and this
process's niceness. Run alone: ``python scripts/_cluster_processes.py [--data PATH] [--quick] [--json PATH]
[--merge additive|sequential]``; ``process_sections`` gives the sections to another benchmark.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml
from _harness import DEFAULT_DATA, REPO, environment, fmt, invocation, markdown, min_median, read_json_lines, section
from _stream_data import rcv1_like_rows
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient

from pegasos_stream.testing.kafka_broker import (
    GROUP_SETTINGS,
    TansuBroker,
    create_topic,
    kafka_source_config,
    produce,
    tansu_binary,
)

#: Partitions of the events topics.
PARTITIONS = 4
#: How often a cluster learner syncs.
SYNC = {"sync_every_events": 1000, "sync_every_ms": 1000}
#: Seconds without a record after which learners and replicas stop (a cluster learner that stops early holds the
#: cluster's model without the deltas sent after it left).
LEARNER_IDLE_S, REPLICA_IDLE_S = 5.0, 3.0
#: Longest wait for a process to end.
TIMEOUT_S = 180.0
#: The SpamAssassin stream is repeated to about this many events (QUICK_EVENTS with ``quick``).
EVENTS, QUICK_EVENTS = 24_000, 6_000
#: Rounds of passes of the learners and of the replicas (the QUICK_ ones with ``quick``).
LEARNER_ROUNDS, REPLICA_ROUNDS = 4, 3
QUICK_LEARNER_ROUNDS, QUICK_REPLICA_ROUNDS = 2, 1
#: A pass of 2 processes whose first records are further apart than this (seconds) is run again, at most
#: ATTEMPTS times in all.
SKEW_S, ATTEMPTS = 0.5, 6
#: The live stream of the model-age measurement: its events per second and duration (seconds).
LIVE_RATE, LIVE_S, QUICK_LIVE_S = 200, 40.0, 20.0
#: Predictions from this many seconds after both replicas' first ones count as steady (the backlog that built up
#: while they waited for a first model and joined their group is predicted by then).
CATCH_UP_S = 3.0
#: The spam job's Pegasos as a cluster learns it: linear (cluster learners replay Pegasos steps).
SPAM_MODEL = {"kind": "linear", "lambda_": 1.0e-5, "t0": 30000}
#: The synthetic stream used when the SpamAssassin file is missing: its columns and mean draws per row.
SYNTHETIC_COLUMNS, SYNTHETIC_NNZ = 47_236, 75.0

#: Runs ``pegasos-stream`` (its ``main``, as the console script does) and, when it ends, writes to the file named
#: by $CLUSTER_BENCH_MARKS the times (``time.perf_counter``) that ``RunStats.seen`` (records processed),
#: ``ClusterSync.write`` (syncs), ``Serving.predict`` (predictions) and ``GroupSource._announce`` (assignments) saw,
#: and the process's CPU time (``time.process_time``) at the end of its first batch of records (the start of its
#: first prediction) and of its last.
LAUNCHER = r"""
import atexit, json, os, sys, time
from pegasos_stream.distribute import cluster
from pegasos_stream.kafka import group as kafka_group
from pegasos_stream.run import runner
from pegasos_stream.serve import serving
marks = {"started": time.perf_counter(), "first": None, "last": None, "records": 0, "first_count": 0, "syncs": [],
         "assigned": [], "predict_first": None, "predict_last": None, "predicted": 0, "cpu_first": 0, "cpu_last": 0,
         "batches": []}
seen, write = runner.RunStats.seen, cluster.ClusterSync.write
predict, announce = serving.Serving.predict, kafka_group.GroupSource._announce
def _seen(self, count, start, end):
    seen(self, count, start, end)
    if count:
        if marks["first"] is None:
            marks["first"], marks["first_count"], marks["cpu_first"] = start, count, time.process_time()
        marks["last"], marks["records"], marks["cpu_last"] = end, marks["records"] + count, time.process_time()
def _write(self, *args, **kwargs):
    start = time.perf_counter()
    try:
        return write(self, *args, **kwargs)
    finally:
        marks["syncs"].append([start, time.perf_counter()])
def _predict(self, records):
    records = list(records)
    start, cpu = time.perf_counter(), time.process_time()
    outcomes = predict(self, records)
    if records:
        if marks["predict_first"] is None:
            marks["predict_first"], marks["cpu_first"] = start, cpu
        marks["predict_last"], marks["predicted"] = time.perf_counter(), marks["predicted"] + len(records)
        marks["cpu_last"] = time.process_time()
        marks["batches"].append([start, len(records)])
    return outcomes
def _announce(self, partitions):
    marks["assigned"].append([time.perf_counter(), sorted(p[1] for p in partitions)])
    return announce(self, partitions)
runner.RunStats.seen, cluster.ClusterSync.write = _seen, _write
serving.Serving.predict, kafka_group.GroupSource._announce = _predict, _announce
def _save():
    with open(os.environ["CLUSTER_BENCH_MARKS"], "w") as out:
        json.dump(marks, out)
atexit.register(_save)
from pegasos_stream.cli import main
sys.argv[0] = "pegasos-stream"
sys.exit(main(sys.argv[1:]))
"""


# -- the events --------------------------------------------------------------------------------


@dataclass
class Workload:
    """The events and the parts of a job that read and learn them."""

    name: str
    values: list[bytes]
    model: dict
    features: dict | None
    source: dict  # format, fields, labels

    def job(self, **sections: object) -> dict:
        """A job's configuration: this workload's model, features and source format, and ``sections``."""
        config: dict = {"model": self.model}
        if self.features is not None:
            config["features"] = self.features
        config.update(sections)
        config["source"] = {**config["source"], **self.source}
        return config


def spam_workload(data: Path, events: int) -> Workload:
    """The SpamAssassin stream repeated to about ``events`` events (whole passes; ids made unique), with the
    features of ``configs/spam.yaml`` and a linear Pegasos."""
    spam = yaml.safe_load((REPO / "configs" / "spam.yaml").read_text(encoding="utf-8"))
    rows = [(r["id"], r["text"], r["label"]) for r in read_json_lines(data)]
    repeats = max(1, round(events / len(rows)))
    values = [
        json.dumps({"id": f"{i}#{r}", "text": text, "label": label}).encode()
        for r in range(repeats)
        for i, text, label in rows
    ]
    return Workload(
        f"SpamAssassin emails, {len(rows):,} × {repeats}, JSON text events with the features of configs/spam.yaml",
        values,
        SPAM_MODEL,
        spam["features"],
        {key: spam["source"][key] for key in ("format", "fields", "labels")},
    )


def synthetic_workload(events: int) -> Workload:
    """RCV1-like svmlight lines (``_stream_data.rcv1_like_rows``); their columns count from 1, hence n_features + 1."""
    values = [
        (("+1 " if label else "-1 ") + " ".join(f"{j}:{v:.6g}" for j, v in zip((c + 1).tolist(), x.tolist()))).encode()
        for c, x, label in rcv1_like_rows(events, SYNTHETIC_COLUMNS, SYNTHETIC_NNZ, 0)
    ]
    return Workload(
        f"RCV1-like svmlight lines ({SYNTHETIC_COLUMNS:,} columns, about {SYNTHETIC_NNZ:g} per row; no SpamAssassin "
        "file)",
        values,
        {"kind": "linear", "lambda_": 1.0e-4, "n_features": SYNTHETIC_COLUMNS + 1},
        None,
        {"format": "svmlight"},
    )


def workload(data: Path | None, events: int) -> Workload:
    """The SpamAssassin stream when its file is there, else the synthetic one."""
    path = data if data is not None else DEFAULT_DATA
    return spam_workload(path, events) if path.is_file() else synthetic_workload(events)


def produce_spread(address: str, topic: str, values: Sequence[bytes], chunk: int = 1000) -> None:
    """Send ``values`` to ``topic``, event k to partition k mod PARTITIONS (``chunk`` at a time: ``produce`` waits at
    most 10 s for a flush)."""
    for p in range(PARTITIONS):
        mine = values[p::PARTITIONS]
        for start in range(0, len(mine), chunk):
            produce(address, topic, mine[start : start + chunk], partition=p)


# -- processes ---------------------------------------------------------------------------------


def _name(kind: str) -> str:
    return f"{kind}-{uuid.uuid4().hex[:8]}"


class Process:
    """One ``pegasos-stream`` process run by `LAUNCHER`, its stderr and marks in files of ``directory``."""

    def __init__(self, directory: Path, args: Sequence[str]) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.err = directory / "stderr.txt"
        self.marks_path = directory / "marks.json"
        env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "CLUSTER_BENCH_MARKS": str(self.marks_path)}
        with open(self.err, "wb") as err:
            self.process = subprocess.Popen(
                [sys.executable, "-c", LAUNCHER, *args],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
                env=env,
                cwd=directory,
            )

    def wait(self, timeout: float = TIMEOUT_S) -> None:
        """Wait for the end; a RuntimeError with the end of stderr when it failed."""
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise RuntimeError(
                f"{self.directory.name} did not end within {timeout:g} s:\n{self.stderr()[-3000:]}"
            ) from None
        if code != 0:
            raise RuntimeError(f"{self.directory.name} exited with {code}:\n{self.stderr()[-3000:]}")

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)

    def stderr(self) -> str:
        return self.err.read_text(encoding="utf-8", errors="replace")

    def summary(self) -> dict:
        """The JSON summary line a run or a stream serve writes last on stderr."""
        return json.loads(self.stderr().strip().splitlines()[-1])

    def marks(self) -> dict:
        return json.loads(self.marks_path.read_text(encoding="utf-8"))

    def remarks(self) -> list[str]:
        """Lines of stderr (but the summary) that warn, refuse or fail."""
        words = ("warning", "refus", "error", "traceback", "exception", "could not")
        return [
            line
            for line in self.stderr().splitlines()
            if not line.startswith("{") and any(word in line.lower() for word in words)
        ]


@contextlib.contextmanager
def processes() -> Iterator[list[Process]]:
    """A list to start processes into; every one still running is killed on the way out."""
    started: list[Process] = []
    try:
        yield started
    finally:
        for process in started:
            process.kill()


#: The broker's process id, for its CPU time (set while `process_sections` runs).
BROKER_PID: int | None = None
#: ``cluster.merge`` of the learners' jobs (None: the package's default; set while `process_sections` runs).
MERGE: str | None = None


def cluster_section(deltas: str) -> dict:
    """A learner's ``cluster`` section: the delta topic ``deltas``, SYNC, and MERGE when set."""
    return {"delta_topic": deltas, **SYNC, **({"merge": MERGE} if MERGE else {})}


def merge_mode() -> str:
    """The merge rule the learners use: MERGE, or the package's default (``cluster.merge`` in its schema)."""
    from pegasos_stream.cli.config import SCHEMA

    default = getattr(SCHEMA["cluster"].get("merge"), "default", None)
    return MERGE or (f"{default} (the default)" if default else "the package's only one (no cluster.merge)")


_TICK = os.sysconf("SC_CLK_TCK")


def machine_busy() -> float:
    """CPU seconds the machine's cores have been busy (user, nice, system, irq, softirq of /proc/stat)."""
    user, nice, system, _idle, _iowait, irq, softirq = map(int, Path("/proc/stat").read_text().split()[1:8])
    return (user + nice + system + irq + softirq) / _TICK


def broker_cpu() -> float:
    """The broker's CPU seconds so far (0 when unknown)."""
    if BROKER_PID is not None:
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{BROKER_PID}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / _TICK
    return 0.0


def cpu_now() -> dict[str, float]:
    """CPU seconds so far: the machine's busy time (all cores), the waited-for children's, the broker's and this
    process's, and the wall clock."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {
        "wall": time.perf_counter(),
        "machine": machine_busy(),
        "processes": children.ru_utime + children.ru_stime,
        "broker": broker_cpu(),
        "this": time.process_time(),
    }


class Sampler(threading.Thread):
    """Samples, every ``every`` seconds until ``stop``, the machine's busy CPU seconds, the broker's and this
    process's; ``cores`` tells how many cores each used between two times (linear between samples)."""

    def __init__(self, every: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.every = every
        self.samples: list[tuple[float, float, float, float]] = []
        self.done = threading.Event()

    def run(self) -> None:
        while True:
            self.samples.append((time.perf_counter(), machine_busy(), broker_cpu(), time.process_time()))
            if self.done.wait(self.every):
                return

    def stop(self) -> None:
        self.done.set()
        self.join(timeout=5)

    def cores(self, start: float, end: float) -> dict[str, float]:
        """Cores used on average from ``start`` to ``end`` (``time.perf_counter``): machine, broker, this."""
        if end <= start or len(self.samples) < 2:
            return {"machine": float("nan"), "broker": float("nan"), "this": float("nan")}
        times, *series = (np.array(column) for column in zip(*self.samples))
        used = [(np.interp(end, times, x) - np.interp(start, times, x)) / (end - start) for x in series]
        return dict(zip(("machine", "broker", "this"), map(float, used)))


def cpu_between(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """The cores each kind used on average between two `cpu_now` (``others``: what the rest of the machine used)."""
    wall = after["wall"] - before["wall"]
    cores = {key: (after[key] - before[key]) / wall for key in ("machine", "processes", "broker", "this")}
    cores["others"] = max(0.0, cores["machine"] - cores["processes"] - cores["broker"] - cores["this"])
    return {"wall_s": wall, **cores}


@dataclass
class Ran:
    """What processes run together left: their summaries, marks, stderr remarks, the processes, and the cores
    used meanwhile (`cpu_between`)."""

    summaries: list[dict]
    marks: list[dict]
    remarks: list[str]
    processes: list[Process]
    cpu: dict[str, float]
    sampler: Sampler

    def span_cores(self, start: float, end: float, processes: float) -> dict[str, float]:
        """Cores used from ``start`` to ``end``: by the processes (``processes``, from their marks), the broker,
        and the rest of the machine (less this process)."""
        cores = self.sampler.cores(start, end)
        others = max(0.0, cores["machine"] - processes - cores["broker"] - cores["this"])
        return {"processes": processes, "broker": cores["broker"], "others": others, "machine": cores["machine"]}


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


class OutOfStep(Exception):
    """The processes of a pass did not start together (`in_step`): it was stopped."""


def in_step(lag: float = 2.0) -> Callable[[list[Process]], bool]:
    """A watch for `run_all`: False once some of the processes have written predictions (``predictions.jsonl`` in
    their directories) and the others none for ``lag`` seconds. A learner flushes at its first sync (after its first
    batch), a replica after each batch: processes that start together write within a second of each other."""
    since: list[float] = []

    def watch(started: list[Process]) -> bool:
        written = [_size(p.directory / "predictions.jsonl") > 0 for p in started]
        if any(written) and not all(written):
            since.append(time.monotonic())
            return since[-1] - since[0] <= lag
        since.clear()
        return True

    return watch


def run_all(starts: Sequence[Callable[[], Process]], watch: Callable[[list[Process]], bool] | None = None) -> Ran:
    """Start the processes at once and wait for them all; an OutOfStep (after killing them) when ``watch`` says so."""
    before = cpu_now()
    sampler = Sampler()
    sampler.start()
    try:
        with processes() as started:
            started += [start() for start in starts]
            deadline = time.monotonic() + TIMEOUT_S
            while any(p.process.poll() is None for p in started) and time.monotonic() < deadline:
                if watch is not None and not watch(started):
                    raise OutOfStep
                time.sleep(0.1)
            for process in started:
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
    finally:
        sampler.stop()
    return Ran(
        [p.summary() for p in started],
        [p.marks() for p in started],
        [line for p in started for line in p.remarks()],
        list(started),
        cpu_between(before, cpu_now()),
        sampler,
    )


def learner_job(
    directory: Path, work: Workload, address: str, topic: str, group: str, **sections: object
) -> Callable[[], Process]:
    """Writes a learner's job file (``work`` on ``topic`` as ``group``, predictions to a file, stopping when idle,
    and ``sections``); what starts its ``run``. Without a ``cluster`` section it is a plain run, which keeps no
    checkpoints either (``source.commit_without_checkpoint``)."""
    directory.mkdir(parents=True, exist_ok=True)
    source = kafka_source_config(address, topic, group)
    if "cluster" not in sections:
        source["commit_without_checkpoint"] = True
    config = work.job(
        source=source,
        output={"type": "file", "path": str(directory / "predictions.jsonl")},
        evaluation={"stats_every_seconds": 60},
        kafka={"bootstrap_servers": address},
        run={"stop_when_idle": LEARNER_IDLE_S},
        **sections,
    )
    path = directory / "job.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return lambda: Process(directory, ["run", "--config", str(path)])


def replica(
    directory: Path, address: str, models: str, topic: str, group: str, reload_s: float
) -> Callable[[], Process]:
    """What starts ``serve --model-topic models`` predicting ``topic`` as ``group`` to a file, stopping when idle."""
    directory.mkdir(parents=True, exist_ok=True)
    connection = directory / "connection.yaml"
    connection.write_text(yaml.safe_dump({"kafka": {"bootstrap_servers": address}}), encoding="utf-8")
    args = [
        "serve", "--model-topic", models, "--config", str(connection), "--reload-s", f"{reload_s:g}",
        "--output", str(directory / "predictions.jsonl"), "--stop-when-idle", f"{REPLICA_IDLE_S:g}",
        "--set", f"source.group_id={group}", "--set", f"source.topics=[{topic}]",
    ]  # fmt: skip
    return lambda: Process(directory, args)


# -- reading topics back -----------------------------------------------------------------------


def topic_records(address: str, topic: str, timeout: float = 60.0) -> list[tuple[bytes | None, bytes | None]]:
    """Every (key, value) of partition 0 of ``topic``, in order, up to its end offset now."""
    consumer = KafkaConsumer(
        bootstrap_servers=address,
        enable_auto_commit=False,
        max_partition_fetch_bytes=64 << 20,
        fetch_max_bytes=64 << 20,
    )
    try:
        partition = TopicPartition(topic, 0)
        consumer.assign([partition])
        consumer.seek_to_beginning(partition)
        end = consumer.end_offsets([partition])[partition]
        records: list[tuple[bytes | None, bytes | None]] = []
        deadline = time.monotonic() + timeout
        while consumer.position(partition) < end and time.monotonic() < deadline:
            for messages in consumer.poll(timeout_ms=1000).values():
                records += [(m.key, m.value) for m in messages]
        return records
    finally:
        consumer.close()


def delta_bytes(address: str, topic: str) -> dict:
    """The delta topic's records: their count, the bytes of their values, and the deltas (end records)."""
    records = topic_records(address, topic)
    ends = [json.loads(value) for key, value in records if key and key.endswith(b"/end") and value]
    return {
        "records": len(records),
        "value_bytes": sum(len(value or b"") for _, value in records),
        "deltas": len(ends),
        "delta_bytes": sum(end["bytes"] for end in ends),
    }


def manifests(address: str, topic: str) -> list[dict]:
    """The manifests published to the model topic ``topic``, in order."""
    return [
        json.loads(value)
        for key, value in topic_records(address, topic)
        if key and key.endswith(b"/manifest") and value
    ]


def delete_topics(address: str, topics: Sequence[str]) -> None:
    """Delete ``topics`` (to free the in-memory broker); a failure is only said."""
    try:
        admin = KafkaAdminClient(bootstrap_servers=address, request_timeout_ms=10_000)
        try:
            admin.delete_topics(list(topics), timeout_ms=10_000)
        finally:
            admin.close()
    except Exception as error:
        print(f"  (could not delete {', '.join(topics)}: {type(error).__name__}: {error})", file=sys.stderr)


# -- passes ------------------------------------------------------------------------------------


@dataclass
class Pass:
    """One pass: what ran, the events processed over the wall span of processing, and the rest measured."""

    kind: str  # "run", "N=1", "N=2", "R=1", "R=2"
    events: int
    seconds: float
    skew: float  # seconds between the first and the last process's first record
    details: dict = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.events / self.seconds

    def to_json(self) -> dict:
        return {
            "kind": self.kind,
            "events": self.events,
            "seconds": self.seconds,
            "rate": self.rate,
            "skew": self.skew,
            **self.details,
            "problems": self.problems,
        }


def cpu_per_1000(marks: Sequence[dict], counted: str) -> float:
    """The processes' CPU milliseconds per 1,000 records within their spans (for learners, from the end of their
    first batch: its records are left out), all threads of each process counted."""
    cpu = sum(m["cpu_last"] - m["cpu_first"] for m in marks)
    records = sum(m[counted] - m["first_count"] for m in marks)
    return 1e6 * cpu / records if records else float("nan")


def busy_cores(marks: Sequence[dict], first: str, last: str) -> float:
    """The cores the processes used on average over their joint span (CPU times as for `cpu_per_1000`)."""
    span = max(m[last] for m in marks) - min(m[first] for m in marks)
    return sum(m["cpu_last"] - m["cpu_first"] for m in marks) / span if span > 0 else float("nan")


def _in_span(syncs: list[list[float]], first: float, last: float) -> list[float]:
    """The durations of the syncs that started between ``first`` and ``last``."""
    return [end - start for start, end in syncs if first <= start <= last]


def learner_pass(tmp: Path, address: str, work: Workload, topic: str, n: int) -> Pass:
    """N cluster learners at once, in a fresh group with a fresh delta topic (N = 0: one plain run); checked."""
    group, deltas = _name("group"), _name("deltas")
    cluster = {"cluster": cluster_section(deltas)} if n else {}
    starts = [
        learner_job(tmp / f"learners-{group}" / f"l{i}", work, address, topic, group, **cluster) for i in range(n or 1)
    ]
    try:
        ran = run_all(starts, in_step() if n > 1 else None)
    except OutOfStep:
        delete_topics(address, [deltas])
        raise
    summaries, marks = ran.summaries, ran.marks
    events = sum(s["events"] for s in summaries)
    expected = len(work.values)
    problems = [] if events == expected else [f"the learners processed {events} events of {expected}"]
    if any(m["first"] is None for m in marks):
        problems.append(f"a learner processed no record: {[s['events'] for s in summaries]}")
        marks = [m for m in marks if m["first"] is not None]
    firsts, lasts = [m["first"] for m in marks], [m["last"] for m in marks]
    syncs = [_in_span(m["syncs"], a, b) for m, a, b in zip(marks, firsts, lasts)]
    details: dict = {
        "per_learner_events": [s["events"] for s in summaries],
        "per_learner_examples_per_s": [s["examples_per_s"] for s in summaries],
        "first_records_s": [a - min(firsts) for a in firsts],
        "assigned_s": [[[at - m["started"], parts] for at, parts in m["assigned"]] for m in marks],
        "syncs_in_span": [len(s) for s in syncs],
        "sync_seconds_in_span": [sum(s) for s in syncs],
        "sync_share": statistics.mean(sum(s) / (b - a) for s, a, b in zip(syncs, firsts, lasts)),
        "sync_ms_median": 1000 * statistics.median([x for s in syncs for x in s]) if any(syncs) else None,
        "cpu_ms_per_1000": cpu_per_1000(marks, "records"),
        "busy_cores": busy_cores(marks, "first", "last"),
        "span_cores": ran.span_cores(min(firsts), max(lasts), busy_cores(marks, "first", "last")),
        "cpu": ran.cpu,
        "remarks": ran.remarks,
    }
    if n:
        clusters = [s["cluster"] for s in summaries]
        if {c["t"] for c in clusters} != {expected}:
            problems.append(f"final cluster t {[c['t'] for c in clusters]}, not {expected}")
        if len({c["model_sha256"] for c in clusters}) != 1:
            problems.append(f"the learners hold different models: {[c['model_sha256'][:12] for c in clusters]}")
        if any(c["deltas_refused"] for c in clusters):
            problems.append(f"deltas refused: {[c['deltas_refused'] for c in clusters]}")
        details["clusters"] = clusters
        details["delta_topic"] = delta_bytes(address, deltas)
        delete_topics(address, [deltas])
    kind = f"N={n}" if n else "run"
    return Pass(kind, events, max(lasts) - min(firsts), max(firsts) - min(firsts), details, problems)


def replica_pass(tmp: Path, address: str, models: str, topic: str, r: int, expected: int) -> Pass:
    """R replicas at once on ``topic`` in a fresh group; checked."""
    group = _name("serve")
    starts = [replica(tmp / f"{group}-r{i}", address, models, topic, group, 5.0) for i in range(r)]
    ran = run_all(starts, in_step() if r > 1 else None)
    summaries, marks = ran.summaries, ran.marks
    events = sum(s["served"] for s in summaries)
    lines = 0
    for process in ran.processes:
        with open(process.directory / "predictions.jsonl", "rb") as predictions:
            lines += sum(1 for _ in predictions)
    problems = [] if events == lines == expected else [f"served {events} (lines {lines}) of {expected}"]
    if any(m["predict_first"] is None for m in marks):
        problems.append(f"a replica predicted no record: {[s['served'] for s in summaries]}")
        marks = [m for m in marks if m["predict_first"] is not None]
    firsts, lasts = [m["predict_first"] for m in marks], [m["predict_last"] for m in marks]
    details = {
        "per_replica_events": [s["served"] for s in summaries],
        "first_batches_s": [a - min(firsts) for a in firsts],
        "assigned_s": [[[at - m["started"], parts] for at, parts in m["assigned"]] for m in marks],
        "model_versions": [s["model_version"] for s in summaries],
        "cpu_ms_per_1000": cpu_per_1000(marks, "predicted"),
        "busy_cores": busy_cores(marks, "predict_first", "predict_last"),
        "span_cores": ran.span_cores(min(firsts), max(lasts), busy_cores(marks, "predict_first", "predict_last")),
        "cpu": ran.cpu,
        "remarks": ran.remarks,
    }
    return Pass(f"R={r}", events, max(lasts) - min(firsts), max(firsts) - min(firsts), details, problems)


def _rates(passes: Sequence[Pass]) -> str:
    return ", ".join(f"{p.rate:,.0f}" for p in passes)


def _median(passes: Sequence[Pass], value: Callable[[Pass], float], spec: str) -> str:
    """The median of ``value`` over ``passes``, formatted; an en dash for none."""
    return fmt(statistics.median(value(p) for p in passes) if passes else None, spec)


def _said(passes: Sequence[Pass], who: str) -> list[str]:
    remarks = sorted({line for p in passes for line in p.details["remarks"]})
    return [f"{who}' stderr said (distinct lines): " + " | ".join(remarks[:8])] if remarks else []


def _setaside_note(done: Rounds, what: str) -> str:
    """What became of the passes whose processes did not start together."""
    if not done.setaside and not done.stopped:
        return f"Every {what} pass started together: the first records of both processes came within {SKEW_S:g} s."
    checks = "; ".join(f"{p.kind}: {', '.join(p.problems)}" for p in done.setaside if p.problems)
    skews = ", ".join(f"{p.skew:.2f}" for p in done.setaside)
    return (
        f"Run again: {done.stopped + len(done.setaside)} {what} passes whose processes did not start together (tansu "
        "gave one of them its partitions a group rebalance, about 3 s, after the other, which had its share of the "
        f"events to itself meanwhile): {done.stopped} stopped once one process had written predictions and the other "
        "none for 2 s"
        + (
            f"; {len(done.setaside)} ran to the end with first records {skews} s apart (more than {SKEW_S:g} s), "
            f"rates {_rates(done.setaside)} /s, first record to last, so the late join counts"
            if done.setaside
            else ""
        )
        + (f"; their checks: {checks}." if checks else ".")
    )


@dataclass
class Rounds:
    """Rounds of passes of several kinds (each kind a number of processes), run in turn within each round; a kind's
    pass whose processes never started together (`aligned`) is None."""

    kinds: tuple[int, ...]
    label: str  # "N" for learners, "R" for replicas
    passes: list[dict[int, Pass | None]] = field(default_factory=list)
    setaside: list[Pass] = field(default_factory=list)  # passes whose first records were more than SKEW_S apart
    stopped: int = 0  # passes stopped because their processes were out of step (`in_step`)
    loads: list[float] = field(default_factory=list)

    def aligned(self, run: Callable[[], Pass]) -> Pass | None:
        """``run`` until its processes' first records are within SKEW_S of each other, ATTEMPTS times at most (None
        when they never were); the others are set aside, or were stopped."""
        for _ in range(ATTEMPTS):
            try:
                done = run()
            except OutOfStep:
                self.stopped += 1
                print("    stopped: one process wrote predictions, the other none for 2 s; again", file=sys.stderr)
                continue
            if done.skew <= SKEW_S:
                return done
            self.setaside.append(done)
            print(f"    {done.kind}: first records {done.skew:.2f} s apart; set aside", file=sys.stderr)
        return None

    def run(self, rounds: int, one: Callable[[int], Pass], unit: str) -> None:
        self.loads.append(os.getloadavg()[0])
        for round_ in range(rounds):
            passes: dict[int, Pass | None] = {}
            for kind in self.kinds:
                done = passes[kind] = self.aligned(lambda kind=kind: one(kind))
                if done is not None:
                    print(
                        f"  round {round_ + 1} {done.kind}: {done.rate:,.0f} {unit} over {done.seconds:.2f} s, skew "
                        f"{done.skew:.2f} s, cores in span (these/broker/others) "
                        + "/".join(f"{done.details['span_cores'][k]:.2f}" for k in ("processes", "broker", "others"))
                        + f"; {'; '.join(done.problems) or 'checks ok'}",
                        file=sys.stderr,
                    )
            self.passes.append(passes)
            self.loads.append(os.getloadavg()[0])

    def of(self, kind: int) -> list[Pass]:
        return [p for passes in self.passes if (p := passes[kind]) is not None]

    def ratios(self, one: int, two: int) -> list[tuple[float, float]]:
        """(rate of ``two`` ÷ rate of ``one``, the most cores others used in either pass) of each round with both."""
        return [
            (b.rate / a.rate, max(a.details["span_cores"]["others"], b.details["span_cores"]["others"]))
            for passes in self.passes
            if (a := passes[one]) is not None and (b := passes[two]) is not None
        ]

    def common_cells(self, kind: int) -> list[str]:
        """events, events/s min / median, span, CPU ms/1k events, cores in span (medians)."""
        these = self.of(kind)
        return [
            f"{these[0].events:,}" if these else "–",
            f"{min(p.rate for p in these):,.0f} / {statistics.median(p.rate for p in these):,.0f}" if these else "–",
            _median(these, lambda p: p.seconds, ".2f"),
            _median(these, lambda p: p.details["cpu_ms_per_1000"], ",.0f"),
            " / ".join(
                _median(these, lambda p, key=key: p.details["span_cores"][key], ".2f")
                for key in ("processes", "broker", "others")
            ),
        ]

    def checks(self, kind: int) -> str:
        problems = [x for p in self.of(kind) for x in p.problems]
        missing = sum(passes[kind] is None for passes in self.passes)
        return ("failed: " + "; ".join(problems) if problems else "ok") + (
            f"; {missing} of {len(self.passes)} rounds without one (never in step)" if missing else ""
        )

    def ratio_notes(self, one: int, two: int, what: str, unit: str) -> str:
        ratios = self.ratios(one, two)
        quiet = [r for r, others in ratios if others < QUIET_CORES]
        rounds = "; ".join(
            f"round {i + 1}: "
            + ", ".join(f"{p.kind} {p.rate:,.0f}" if p else f"{self.label}={k} –" for k, p in passes.items())
            + f" (others' cores ≤ {max(p.details['span_cores']['others'] for p in passes.values() if p):.2f})"
            for i, passes in enumerate(self.passes)
        )
        return (
            f"Ratio = {what} of the same round; target ≥ 1.6 (0.8·2) where cores allow. Per round ({unit}): {rounds}. "
            f"Ratios: {', '.join(f'{r:.2f}' for r, _ in ratios) or '–'}; in the rounds where other processes of the "
            f"machine used less than {QUIET_CORES:g} core in both passes: "
            f"{min_median(quiet) if quiet else 'none'} ({len(quiet)} of {len(ratios)}). 1-minute load average before "
            f"and after each round: {', '.join(f'{x:.2f}' for x in self.loads)}."
        )


#: Other processes of the machine using less than this many cores during a round leave it "quiet".
QUIET_CORES = 0.3

#: Columns every table of rounds has, after its first one.
COMMON_COLUMNS = [
    ">events",
    ">{unit} min / median",
    ">span (s)",
    ">CPU ms/1k events",
    ">cores in span: these / broker / others",
]
COMMON_NOTE = (
    "Columns: span = wall seconds from the first record any process processed to the last (median); CPU ms/1k "
    "events = the processes' CPU time (all their threads, from the end of each one's first batch for learners, from "
    "the start of its first prediction for replicas, to its last) per 1,000 records; cores in span = the cores used "
    "on average over the span by these processes (their CPU time over the span), by the broker (/proc/PID/stat) "
    "and by every other process of the machine (/proc/stat's busy time less those and this benchmark's own, sampled "
    "every 0.1 s); medians over the passes. The 2 cores are saturated when the three add up to about 2."
)


# -- 1. learners -------------------------------------------------------------------------------


def learner_section(tmp: Path, address: str, work: Workload, topic: str, rounds: int) -> dict:
    """Rounds of a plain run, N = 1 and N = 2 cluster learners; the table of their rates and ratios."""
    done = Rounds((0, 1, 2), "N")
    done.run(rounds, lambda n: learner_pass(tmp, address, work, topic, n), "events/s")
    ratios = done.ratios(1, 2)
    rows = []
    for n in (0, 1, 2):
        these = done.of(n)
        sizes = [p.details["delta_topic"] for p in these] if n else []
        rows.append(
            [
                "plain run (no cluster)" if n == 0 else f"{n} cluster learner{'s' if n > 1 else ''}",
                *done.common_cells(n),
                _median(these, lambda p: p.details["delta_topic"]["deltas"], ".0f") if n else "–",
                fmt(statistics.median(s["value_bytes"] / p.events for s, p in zip(sizes, these)), ",.0f")
                if sizes
                else "–",
                _median(these, lambda p: p.details["sync_ms_median"] or 0.0, ".0f") if n else "–",
                _median(these, lambda p: p.details["sync_share"], ".0%") if n else "–",
                min_median([r for r, _ in ratios]) if n == 2 and ratios else "–",
                done.checks(n),
            ]
        )
    kept = [p for n in (1, 2) for p in done.of(n)]
    notes = [
        f"Protocol: {rounds} rounds of a plain `pegasos-stream run` (the same job without its `cluster` section: "
        f"the reference), N = 1 and N = 2 cluster learners (`sync_every_events {SYNC['sync_every_events']}, "
        f"sync_every_ms {SYNC['sync_every_ms']:g}`), each pass N processes started at once in a fresh consumer group "
        f"with a fresh delta topic, on one {PARTITIONS}-partition topic of {len(work.values):,} events ({work.name}) "
        f"produced once before; `stop_when_idle {LEARNER_IDLE_S:g}`, predictions to a file. Events/s = events "
        "learned ÷ wall time from the first record any learner processed to the last one any learner processed "
        "(`RunStats` times, noted by a launcher around the CLI's `main`): group joins and the idle wait are left out, "
        "the syncs in between are in.",
        "Checks in every cluster pass kept: the learners' events add up to the events produced, every learner's final "
        "cluster `t` is that number, all hold one `model_sha256`, no delta refused: "
        + ("all passed." if not any(p.problems for p in kept) else "FAILED (checks column)."),
        _setaside_note(done, "N = 2"),
        done.ratio_notes(1, 2, "N = 2 events/s ÷ N = 1 events/s", "events/s"),
        COMMON_NOTE,
        "Sync: the time a learner spends in `ClusterSync.write` (encode and send its delta with acks=all, read the "
        "delta log to its end, fold every delta: replay its steps with `merge: additive`, learn its examples again "
        f"with `merge: sequential`; here {merge_mode()}; copy the merged model), per sync (median) and as a share "
        "of its span from first to last record (mean over learners); syncs after the last record are not counted. "
        "Delta bytes: the values of the delta topic's records (chunks and end records), read back after the pass, "
        "per event learned; every learner reads all of them.",
        *_said([p for n in (0, 1, 2) for p in done.of(n)] + done.setaside, "Learners"),
    ]
    columns = [
        "learners",
        *(c.format(unit="events/s") for c in COMMON_COLUMNS),
        ">deltas",
        ">delta bytes/event",
        ">ms/sync",
        ">sync share",
        ">N=2 ÷ N=1 (paired)",
        "checks",
    ]
    return section(
        f"Cluster learners as processes, 1 vs 2 (tansu on 127.0.0.1, {len(work.values):,} events)", columns, rows, notes
    ) | {
        "raw": {
            "rounds": [{p.kind: p.to_json() for p in passes.values() if p} for passes in done.passes],
            "set_aside": [p.to_json() for p in done.setaside],
        }
    }


# -- 2. replicas -------------------------------------------------------------------------------


def train_published(tmp: Path, address: str, work: Workload, topic: str) -> tuple[str, dict]:
    """One cluster learner learns ``topic`` and publishes the cluster's model: the model topic, its summary."""
    group, deltas, models = _name("train"), _name("deltas"), _name("models")
    start = learner_job(
        tmp / f"train-{group}",
        work,
        address,
        topic,
        group,
        cluster=cluster_section(deltas),
        publish={"topic": models},
    )
    summary = run_all([start]).summaries[0]
    delete_topics(address, [deltas])
    return models, summary


def replica_section(tmp: Path, address: str, work: Workload, topic: str, rounds: int) -> dict:
    """A model trained and published, then rounds of R = 1 and R = 2 replicas; the table."""
    models, trained = train_published(tmp, address, work, topic)
    print(f"  trained and published to {models}: t={trained['cluster']['t']}", file=sys.stderr)
    done = Rounds((1, 2), "R")
    done.run(rounds, lambda r: replica_pass(tmp, address, models, topic, r, len(work.values)), "predictions/s")
    ratios = done.ratios(1, 2)
    rows = [
        [
            f"{r} replica{'s' if r > 1 else ''}",
            *done.common_cells(r),
            min_median([x for x, _ in ratios]) if r == 2 and ratios else "–",
            done.checks(r),
        ]
        for r in (1, 2)
    ]
    notes = [
        f"Protocol: one cluster learner learned the {len(work.values):,} events ({work.name}) and published the "
        f"cluster's model (t = {trained['cluster']['t']:,}) to a model topic; then {rounds} rounds of R = 1 and R = 2 "
        f"`serve --model-topic` processes started at once, reading the events topic ({PARTITIONS} partitions) in a "
        f"fresh consumer group of their own, predictions to files, `--stop-when-idle {REPLICA_IDLE_S:g}`. "
        "Predictions/s = events predicted ÷ wall time from the start of the first batch any replica predicted to the "
        "end of the last (`Serving.predict` times, noted by the launcher): group joins, model loading and the idle "
        "wait are left out. Checked: the replicas' `served` and their output lines add up to the events.",
        _setaside_note(done, "R = 2"),
        done.ratio_notes(1, 2, "R = 2 predictions/s ÷ R = 1 predictions/s", "predictions/s"),
        COMMON_NOTE,
        *_said(done.of(1) + done.of(2) + done.setaside, "Replicas"),
    ]
    columns = ["replicas", *(c.format(unit="predictions/s") for c in COMMON_COLUMNS), ">R=2 ÷ R=1 (paired)", "checks"]
    return section(
        f"Serve replicas following the model topic, 1 vs 2 ({len(work.values):,} events)", columns, rows, notes
    ) | {
        "raw": {
            "rounds": [{p.kind: p.to_json() for p in passes.values() if p} for passes in done.passes],
            "set_aside": [p.to_json() for p in done.setaside],
        }
    }


# -- 3. model age ------------------------------------------------------------------------------


class SteadyProducer(threading.Thread):
    """Sends ``values`` in turn (cycling) at ``rate`` events/s for ``seconds``, event k to partition k mod
    PARTITIONS; ``sent`` counts them."""

    def __init__(self, address: str, topic: str, values: Sequence[bytes], rate: float, seconds: float) -> None:
        super().__init__(daemon=True)
        self.address, self.topic, self.values, self.rate, self.seconds = address, topic, values, rate, seconds
        self.sent = 0
        self.started = time.perf_counter()

    def run(self) -> None:
        producer = KafkaProducer(bootstrap_servers=self.address, linger_ms=5)
        try:
            self.started = time.perf_counter()
            start = time.monotonic()
            while (now := time.monotonic() - start) < self.seconds:
                while self.sent < int(now * self.rate) + 1:
                    k = self.sent
                    producer.send(self.topic, self.values[k % len(self.values)], partition=k % PARTITIONS)
                    self.sent += 1
                time.sleep(0.02)
            producer.flush(timeout=30)
        finally:
            producer.close(timeout=10)


def age_section(tmp: Path, address: str, work: Workload, seconds: float) -> dict:
    """2 learners (one publishing every second) and 2 replicas on a live stream; the model ages of the predictions."""
    topic, group, deltas, models, serve_group = (_name(kind) for kind in ("live", "group", "deltas", "models", "serve"))
    create_topic(address, topic, PARTITIONS)
    base = tmp / f"age-{group}"
    cluster = cluster_section(deltas)
    publish = {"topic": models, "every_seconds": 1}
    starts = [
        learner_job(base / "l0", work, address, topic, group, cluster=cluster, publish=publish),
        learner_job(base / "l1", work, address, topic, group, cluster=cluster),
        *(replica(base / f"r{i}", address, models, topic, serve_group, 0.2) for i in range(2)),
    ]
    producer = SteadyProducer(address, topic, work.values, LIVE_RATE, seconds)
    producer.start()
    try:
        ran = run_all(starts)
    finally:
        producer.join(timeout=seconds + 60)
    summaries, marks, remarks, started = ran.summaries, ran.marks, ran.remarks, ran.processes
    predictions, times = [], []  # every prediction of both replicas, and when its batch started
    for process, mark in zip(started[2:], marks[2:]):
        lines = (process.directory / "predictions.jsonl").read_text(encoding="utf-8").splitlines()
        predictions += [json.loads(line) for line in lines]
        times += [start for start, count in mark["batches"] for _ in range(count)][: len(lines)]
    caught_up = max(mark["predict_first"] or 0.0 for mark in marks[2:]) + CATCH_UP_S
    warm = np.array(times) >= caught_up
    published = manifests(address, models)
    delete_topics(address, [deltas, topic])
    learners, replicas = summaries[:2], summaries[2:]
    ages = np.array([p["model_age_s"] for p in predictions], dtype=float)  # (None: nan, for an untrained model)
    seen = sorted({p["model_version"] for p in predictions})
    periods = np.diff([m["written_at"] for m in published])
    clusters = [s["cluster"] for s in learners]
    sync_ms = [[1000 * (end - start) for start, end in m["syncs"]] for m in marks[:2]]
    checks_ok = (
        sum(s["events"] for s in learners) == producer.sent
        and {c["t"] for c in clusters} == {producer.sent}
        and len({c["model_sha256"] for c in clusters}) == 1
        and not any(c["deltas_refused"] for c in clusters)
        and len(predictions) == producer.sent
    )
    rows = [
        [
            f"{what}: {len(chosen):,} predictions",
            f"{np.quantile(chosen, 0.5):.2f}",
            f"{np.quantile(chosen, 0.99):.2f}",
            f"{chosen.max():.2f}",
            f"{np.median(periods):.2f}" if len(periods) else "–",
            f"{len(published)}",
            f"{len({p['model_version'] for p, keep in zip(predictions, mask) if keep})}",
            "ok" if checks_ok else "failed",
        ]
        for what, mask in (
            ("all", np.ones(len(ages), dtype=bool)),
            (f"from {CATCH_UP_S:g} s after both replicas' first predictions", warm[: len(ages)]),
        )
        if len(chosen := ages[mask])
    ]
    notes = [
        f"Protocol: this process produced {work.name.split(',')[0]} events at {LIVE_RATE} events/s for {seconds:g} s "
        f"({producer.sent:,} events) to a fresh {PARTITIONS}-partition topic while 2 cluster learners learned them "
        f"(`sync_every_events {SYNC['sync_every_events']}, sync_every_ms {SYNC['sync_every_ms']:g}`; learner 1 also "
        "publishes the cluster's model, `publish.every_seconds: 1`) and 2 `serve --model-topic` replicas "
        "(`--reload-s 0.2`) predicted the same topic in a consumer group of their own; all started at once. Model "
        "age = the `model_age_s` of every prediction of both replicas (seconds from the snapshot's `written_at` to the "
        "prediction: the wait for the next publication, sending it, the replica's reload period, reading and "
        "decoding it).",
        f"Publication period: intervals between the `written_at` of consecutive manifests in the model topic, median "
        f"shown (min {fmt(periods.min() if len(periods) else None, '.2f')}, max "
        f"{fmt(periods.max() if len(periods) else None, '.2f')} s; all: {', '.join(f'{x:.1f}' for x in periods)}). "
        "A snapshot can be due only at a sync (every "
        f"{SYNC['sync_every_events']:,} events or {SYNC['sync_every_ms'] / 1000:g} s), and `every_seconds` counts from "
        "the end of the previous publication. Syncs of the publishing learner (publication happens inside the sync): "
        f"mean {statistics.mean(sync_ms[0]):.0f} ms, max {max(sync_ms[0]):.0f} ms; of the other: mean "
        f"{statistics.mean(sync_ms[1]):.0f} ms, max {max(sync_ms[1]):.0f} ms.",
        f"Checks: events sent {producer.sent:,}, learned {sum(s['events'] for s in learners):,} (per learner "
        f"{[s['events'] for s in learners]}), final cluster t {[c['t'] for c in clusters]}, one model on both "
        f"learners {len({c['model_sha256'] for c in clusters}) == 1}, deltas refused "
        f"{[c['deltas_refused'] for c in clusters]}, predictions {len(predictions):,}; the replicas' last versions "
        f"{[s['model_version'] for s in replicas]}; versions named by predictions: {seen[:3]}…{seen[-2:]} (a "
        "version is the number of deltas the cluster had folded).",
        f"Cores used on average over the {ran.cpu['wall_s']:.0f} s from the start of the processes to their end: "
        f"learners and replicas {ran.cpu['processes']:.2f}, broker {ran.cpu['broker']:.2f}, this process (the "
        f"producer) {ran.cpu['this']:.2f}, other processes of the machine {ran.cpu['others']:.2f}.",
        *([f"Processes' stderr said (distinct lines): {' | '.join(sorted(set(remarks))[:8])}"] if remarks else []),
    ]
    return section(
        "Model age at the replicas while 2 learners train on a live stream",
        [
            "predictions of 2 replicas (`--reload-s 0.2`)",
            ">model age p50 (s)",
            ">p99 (s)",
            ">max (s)",
            ">publication period (s)",
            ">versions published",
            ">versions seen",
            "checks",
        ],
        rows,
        notes,
    ) | {"raw": {"ages": ages.tolist(), "manifests": published, "replicas": replicas, "learners": learners}}


# -- the sections ------------------------------------------------------------------------------


def process_sections(data: Path | None, quick: bool, merge: str | None = None) -> list[dict]:
    """The three sections, measured against one tansu broker started here (and stopped, whatever happens); the
    learners' ``cluster.merge`` is ``merge`` (None: the package's default)."""
    global BROKER_PID, MERGE
    MERGE = merge
    mode = merge_mode()
    work = workload(data, QUICK_EVENTS if quick else EVENTS)
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="cluster_processes_") as directory:
        tmp = Path(directory)
        broker = TansuBroker(tansu_binary(), tmp / "tansu.log")
        print(f"starting tansu; {len(work.values):,} events: {work.name}", file=sys.stderr)
        broker.start(timeout=15.0)
        try:
            BROKER_PID = broker.process.pid if broker.process is not None else None
            topic = _name("events")
            create_topic(broker.address, topic, PARTITIONS)
            start = time.perf_counter()
            produce_spread(broker.address, topic, work.values)
            print(f"  produced in {time.perf_counter() - start:.1f} s", file=sys.stderr)
            sections = [
                learner_section(tmp, broker.address, work, topic, QUICK_LEARNER_ROUNDS if quick else LEARNER_ROUNDS),
                replica_section(tmp, broker.address, work, topic, QUICK_REPLICA_ROUNDS if quick else REPLICA_ROUNDS),
                age_section(tmp, broker.address, work, QUICK_LIVE_S if quick else LIVE_S),
            ]
        finally:
            BROKER_PID, MERGE = None, None
            broker.stop()
    machine = (
        f"Machine: {os.cpu_count()} cores; 1-minute load average {load:.2f} before, {os.getloadavg()[0]:.2f} after "
        f"the measurements. Kafka groups with {GROUP_SETTINGS} (a join takes about 3 s; not timed). Cluster "
        f"learners' `cluster.merge`: {mode}."
    )
    for sec in sections:
        sec["notes"].append(machine)
    return sections


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=None, help="spamassassin.jsonl.gz (default: ../shared/data/)")
    parser.add_argument("--quick", action="store_true", help="fewer events and passes (about 2 minutes)")
    parser.add_argument("--json", type=Path, help="also write the sections, with raw results, to this JSON file")
    parser.add_argument("--merge", help="the learners' cluster.merge (default: the package's)")
    args = parser.parse_args()
    started = time.perf_counter()
    sections = process_sections(args.data, args.quick, args.merge)
    document = {"title": "Cluster mode with processes", "command": invocation(), "environment": environment()}
    document["sections"] = sections
    if args.json:
        args.json.write_text(json.dumps(document, indent=2, default=str), encoding="utf-8")
    print(markdown(document))
    print(f"\n({time.perf_counter() - started:.0f} s)", file=sys.stderr)


if __name__ == "__main__":
    main()
