"""Consumer groups against a real broker (tansu, see conftest): members joining and leaving while
they read, and where a member without a checkpoint starts."""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
import yaml

from pegasos_stream import cli
from pegasos_stream.stream.kafka import KafkaSource
from pegasos_stream.testing.kafka_broker import GROUP_SETTINGS, kafka_source_config

PARTITIONS = 4


class Member:
    """A KafkaSource read a few records at a time, as a slow runner would, committing now and then."""

    def __init__(self, address: str, topic: str, group: str) -> None:
        self.source = KafkaSource(address, [topic], group, consumer=GROUP_SETTINGS, poll_seconds=0.05)
        self.claimed: list[tuple[str, int, int]] = []
        self.reads = 0

    def step(self) -> None:
        """Read and claim one small batch; commit every 20 reads."""
        batch = self.source.read(5)
        self.claimed += [record.cursor for record in self.source.claim(batch)]  # type: ignore[misc]
        self.reads += 1
        if self.reads % 20 == 0:
            self.source.commit()


def _drive(members: list[Member], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for member in members:
            member.step()
        time.sleep(0.005)


def _settle(members: list[Member], everyone: list[Member], claims: int, timeout: float) -> None:
    """Read until every member has partitions and ``everyone`` claimed ``claims`` records (or timeout)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _drive(members, 0.2)
        if all(member.source.ready for member in members) and sum(len(m.claimed) for m in everyone) >= claims:
            return


@pytest.mark.xfail(
    reason="kafka-python refuses commits while the group rebalances (the one on revocation included), so the next "
    "owner reads again what was claimed since the last commit; and the group does not always settle in time to read "
    "every partition to its end",
    strict=False,
)
def test_every_offset_is_claimed_once_while_members_join_and_leave(kafka_broker, kafka_topic, produce):
    topic = kafka_topic(PARTITIONS)
    group = f"group-{uuid.uuid4().hex[:8]}"
    produced = Counter[int]()
    members = [Member(kafka_broker, topic, group)]
    everyone = list(members)
    for _ in range(4):  # each round: records to read, one member leaves (when two read), one joins
        for partition in range(PARTITIONS):
            produce(kafka_broker, topic, [b"%d" % i for i in range(400)], partition=partition)
            produced[partition] += 400
        if len(members) == 2:
            members.pop(0).source.close()
        members.append(Member(kafka_broker, topic, group))
        everyone.append(members[-1])
        _settle(members, everyone, produced.total(), 12)  # the rebalance comes while they read

    _settle(members, everyone, produced.total(), 15)
    _drive(members, 1.0)  # anything claimed twice comes now
    for member in members:
        member.source.close()
    expected = Counter({(topic, p, o): 1 for p, count in produced.items() for o in range(count)})
    claims = Counter(cursor for member in everyone for cursor in member.claimed)
    missing = sorted(expected - claims)
    twice = sorted(cursor for cursor, count in claims.items() if count > 1)
    assert not missing, f"{len(missing)} offsets claimed by nobody, e.g. {missing[:5]}"
    assert not twice, f"{len(twice)} offsets claimed twice, e.g. {twice[:5]}"
    assert claims == expected


def test_resume_without_a_checkpoint_starts_at_the_group_offsets_else_at_start(
    tmp_path, kafka_broker, kafka_topic, produce, capsys
):
    topic = kafka_topic(2)
    group = f"group-{uuid.uuid4().hex[:8]}"
    config = {
        "model": {"kind": "linear", "lambda_": 0.01},
        "features": {"type": "dict"},
        "source": kafka_source_config(kafka_broker, topic, group),
        "checkpoint": {"dir": str(tmp_path / "checkpoints")},
    }
    path = tmp_path / "kafka.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")

    def events(ids: range) -> list[bytes]:
        return [json.dumps({"id": i, "x": {"a": i % 5 - 2.0}, "label": i % 5 > 2}).encode() for i in ids]

    def run(output: Path, *options: str) -> list[int]:
        argv = ["run", "--config", str(path), "--output", str(output), "--stop-when-idle", "3", *options]
        assert cli.main(argv) == 0
        capsys.readouterr()
        return [json.loads(line)["id"] for line in output.read_text(encoding="utf-8").splitlines()]

    produce(kafka_broker, topic, events(range(30)), partition=0)
    assert run(tmp_path / "first.jsonl", "--set", "checkpoint.dir=") == list(range(30))  # the group commits 30

    produce(kafka_broker, topic, events(range(30, 40)), partition=0)
    produce(kafka_broker, topic, events(range(100, 105)), partition=1)  # no committed offset: from the start
    assert not (tmp_path / "checkpoints").exists() or not any((tmp_path / "checkpoints").iterdir())
    resumed = run(tmp_path / "second.jsonl", "--resume")
    assert sorted(resumed) == list(range(30, 40)) + list(range(100, 105))
