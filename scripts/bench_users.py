#!/usr/bin/env python3
"""Personal filters partitioned by user: the shared learner forwarding a stream, one and two instances of
``pegasos-stream users`` on it (events/s, paired and interleaved), and a simulation of N = 1 to 16 instances
(the busiest instance's share of the events, and the state bytes a rebalance moves).

The stream is SpamAssassin dealt to ``--users`` users in a seeded order (no other corpus). A tansu broker
(``pegasos_stream.testing.kafka_broker``) on 127.0.0.1 holds the users topic (``--partitions``). The shared
learner is ``run --config personal --set output.forward=true`` from a file to that topic. Each pass starts
its instances in a fresh consumer group on the filled topic and stops them ``--idle-stop`` seconds after the last
event; its events/s is the events over the time from the first event an instance took to the last one (their
summary lines; start-up and the idle stop are not in it, its wall time with them is shown beside it). The
instances come from an environment with the users extra: this one, or ``.venv-users`` (see .ci/run).

The simulation places each user's partition as the shared learner's Kafka sink does (kafka-python's murmur2 of
the key), gives the partitions to N instances as Quix Streams does (the range assignor), and takes each user's
state as the bytes of its offset after the stream (`PersonalOffset.to_bytes`, from one `PersonalPegasos` on the
same stream). Events/s for N is the one-instance rate measured above over the busiest instance's share (1 for
N = 1), bounded by what the shared learner forwards; the bytes moved from N − 1 to N instances are the state of
the partitions that change owner, which their new owner restores from the changelog. `UserInstance.process` is
also timed alone, in this process, on the records the shared learner forwards: an instance's work without the
engine.

    python scripts/bench_users.py [--limit N] [--users U] [--partitions P] [--rounds R]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

import numpy as np
from _harness import REPO, add_data_argument, add_out_argument, load_messages, min_median, section, write_results
from _stress import SEED
from kafka.partitioner.default import murmur2

from pegasos_stream.cli.assemble import build_features, build_model
from pegasos_stream.cli.config import config_file, load_config
from pegasos_stream.testing.environments import USERS_ENVIRONMENT, users_command
from pegasos_stream.testing.kafka_broker import TansuBroker, create_topic, tansu_binary
from pegasos_stream.users.instance import UserInstance, parse_user_event

BIN = str(Path(sys.executable).parent / "pegasos-stream")


def users_bin() -> str:
    """The ``pegasos-stream`` of an environment with the users extra (`users_command`)."""
    command = users_command(REPO)
    if command is None:
        sys.exit(f"error: no environment with the users extra: pip install -e '.[users]' in {USERS_ENVIRONMENT}")
    return command


def stream(data: Path, limit: int, users: int) -> list[dict]:
    """SpamAssassin's first ``limit`` messages, dealt to ``users`` users in a seeded order."""
    messages = load_messages(data)[:limit]
    dealt = np.random.default_rng(SEED).integers(0, users, size=len(messages)).tolist()
    return [
        {"id": m.id, "text": m.text, "label": "spam" if m.is_spam else "ham", "user": f"user{u:03d}"}
        for m, u in zip(messages, dealt, strict=True)
    ]


def forward(broker: str, events_file: Path, topic: str) -> tuple[float, float]:
    """The shared learner forwarding the stream to ``topic``: (wall seconds, its own events/s)."""
    flags = ["--config", "personal", "--input", str(events_file), "--set", "output.type=kafka"]
    flags += ["--set", f"output.topic={topic}", "--set", "output.forward=true"]
    flags += ["--set", f"kafka.bootstrap_servers={json.dumps(broker)}"]
    started = time.perf_counter()
    done = subprocess.run([BIN, "run", *flags], capture_output=True, text=True, check=True)
    return time.perf_counter() - started, json.loads(done.stderr.strip().splitlines()[-1])["examples_per_s"]


def instances_pass(broker: str, topic: str, count: int, events: int, idle_stop: float, tmp: Path) -> dict:
    """``count`` instances on ``topic`` in a fresh group until they stop; events/s from the first event one of them
    took to the last (their summary lines)."""
    tag = uuid.uuid4().hex[:8]
    flags = ["--config", "personal", "--set", f"kafka.bootstrap_servers={json.dumps(broker)}", "--input-topic", topic]
    flags += ["--output-topic", f"scores-{tag}", "--group", f"users-{tag}", "--idle-stop", str(idle_stop)]
    started = time.perf_counter()
    processes = [
        subprocess.Popen(
            [users_bin(), "users", *flags, "--state-dir", str(tmp / f"{tag}-{i}")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(count)
    ]
    summaries = [json.loads(process.communicate()[1].strip().splitlines()[-1]) for process in processes]
    wall = time.perf_counter() - started
    records = sum(summary["records"] for summary in summaries)
    if records < events:
        raise RuntimeError(f"{count} instance(s) took {records} records of {events}")
    taking = [summary for summary in summaries if summary["records"]]
    span = max(s["last_at"] for s in taking) - min(s["first_at"] for s in taking)
    return {"events_per_s": records / span, "wall_s": wall, "records": [s["records"] for s in summaries]}


def in_process(events: list[dict]) -> tuple[dict[str, int], float]:
    """Each user's offset's bytes after the stream, from one PersonalPegasos; and the events/s of `UserInstance.process`
    alone on the records the shared learner forwards (its f(x) before it learned x), each user's state in a dict."""
    config = load_config(config_file("personal"))
    model, features = build_model(config), build_features(config)
    records = []
    for event in events:
        x, positive = features.transform_one(event["text"]), event["label"] == "spam"
        records.append({**event, "label": positive, "shared_score": model.shared.decision_function_one(x)})
        model.learn_one(x, positive, user=event["user"])
    sizes = {user: len(model.offset(user).to_bytes()) for user in {event["user"] for event in events}}
    instance = UserInstance(build_model(config), features, ("ham", "spam"))
    values = [(json.dumps(record).encode(), record["user"]) for record in records]
    state: dict[str, bytes] = {}
    started = time.perf_counter()
    for i, (value, user) in enumerate(values):
        _, data = instance.process(parse_user_event(value, user.encode(), f"users[0]@{i}"), state.get(user))
        if data is not None:
            state[user] = data
    return sizes, len(values) / (time.perf_counter() - started)


def range_owner(partitions: int, instances: int) -> list[int]:
    """The instance of each partition under the range assignor (one topic)."""
    per, extra = divmod(partitions, instances)
    owners: list[int] = []
    for instance in range(instances):
        owners += [instance] * (per + (instance < extra))
    return owners


def simulation(events: list[dict], sizes: dict[str, int], partitions: int, one: float, shared: float) -> list[list]:
    """Rows of the N = 1..16 simulation (see the module)."""
    partition_of = {user: (murmur2(user.encode()) & 0x7FFFFFFF) % partitions for user in sizes}  # (kafka-python)
    load = Counter(partition_of[event["user"]] for event in events)
    state = Counter()
    for user, size in sizes.items():
        state[partition_of[user]] += size
    rows, before = [], None
    for n in range(1, 17):
        owners = range_owner(partitions, n)
        busiest = max(sum(load[p] for p in range(partitions) if owners[p] == i) for i in range(n)) / len(events)
        moved = None if before is None else sum(state[p] for p in range(partitions) if owners[p] != before[p])
        rate = one / busiest
        rows.append(
            [n, f"{busiest:.3f}", f"{rate:,.0f}", f"{min(rate, shared):,.0f}", "–" if moved is None else f"{moved:,}"]
        )
        before = owners
    return rows


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_data_argument(parser)
    add_out_argument(parser, "users.json")
    parser.add_argument("--limit", type=int, default=3000, help="the first N messages of SpamAssassin")
    parser.add_argument("--users", type=int, default=64, help="the users the messages are dealt to")
    parser.add_argument("--partitions", type=int, default=16, help="the partitions of the users topic")
    parser.add_argument("--rounds", type=int, default=3, help="paired rounds of one and two instances")
    parser.add_argument("--idle-stop", type=float, default=4.0, help="seconds an instance waits after the last event")
    return parser.parse_args()


def main() -> None:
    args = parse_arguments()
    events = stream(args.data, args.limit, args.users)
    tmp = Path(tempfile.mkdtemp(prefix="bench-users-"))
    broker = TansuBroker(tansu_binary(), tmp / "tansu.log")
    broker.start(timeout=15.0)
    try:
        events_file = tmp / "events.jsonl"
        events_file.write_text("".join(json.dumps(event) + "\n" for event in events), encoding="utf-8")
        topic = "users-topic"
        create_topic(broker.address, topic, args.partitions)
        forward_wall, shared_rate = forward(broker.address, events_file, topic)
        print(f"forwarded {len(events)} events in {forward_wall:.1f} s", file=sys.stderr, flush=True)
        passes: dict[int, list[dict]] = {1: [], 2: []}
        for round_ in range(args.rounds):
            for count in (1, 2):
                passes[count].append(instances_pass(broker.address, topic, count, len(events), args.idle_stop, tmp))
                print(f"round {round_ + 1}, {count} instance(s): {passes[count][-1]}", file=sys.stderr, flush=True)
    finally:
        broker.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    sizes, alone = in_process(events)
    ratios = [two["events_per_s"] / one["events_per_s"] for one, two in zip(passes[1], passes[2], strict=True)]
    rows = [
        [
            f"{count} instance(s)",
            f"{max(p['events_per_s'] for p in passes[count]):,.0f}",
            f"{statistics.median(p['events_per_s'] for p in passes[count]):,.0f}",
            f"{statistics.median(p['wall_s'] for p in passes[count]):.1f}",
        ]
        for count in (1, 2)
    ]
    notes = [
        f"{len(events):,} SpamAssassin messages dealt to {args.users} users, a users topic of {args.partitions}"
        f" partitions; {args.rounds} paired rounds (1, 2, 1, 2, …). Two instances ÷ one, per round: "
        f"{min_median(ratios)}.",
        f"The shared learner forwarding them (`run --config personal --set output.forward=true`, one process): "
        f"{shared_rate:,.0f} events/s by its own count, {len(events) / forward_wall:,.0f} with its start-up.",
        f"`UserInstance.process` alone on the same records, in one process without Kafka: {alone:,.0f} events/s.",
    ]
    measured = section("One and two instances (events/s from the first event taken to the last)",
                       ["instances", ">fastest events/s", ">median events/s", ">median wall s (start-up, idle stop)"],
                       rows, notes)  # fmt: skip
    one = statistics.median(p["events_per_s"] for p in passes[1])
    simulated = section(
        "Simulation of N instances",
        ["N", ">busiest instance's share", ">instances' events/s", ">with one shared learner", ">state bytes moved"],
        simulation(events, sizes, args.partitions, one, shared_rate),
        [
            f"{args.partitions} partitions, range assignor; one instance's median rate above ({one:,.0f} events/s) "
            f"over the busiest instance's share; the shared learner forwards {shared_rate:,.0f} events/s. "
            f"State: {sum(sizes.values()):,} bytes for {len(sizes)} users ({statistics.mean(sizes.values()):,.0f} "
            "on average); moved: the state of the partitions that change owner from N − 1 instances to N.",
        ],
    )
    write_results(args, "Personal filters partitioned by user (Quix Streams)", [measured, simulated])


if __name__ == "__main__":
    main()
