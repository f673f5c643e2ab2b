"""Send messages of the bundled sample to a Kafka topic, creating the topic when it is missing: the input of
``pegasos-stream run --config kafka``.

The sample (``pegasos_stream/data/spam-sample.jsonl.gz``, 404 SpamAssassin messages in delivery order) is
JSON lines ``{"id", "time", "label": "spam" | "ham", "corpus", "text"}``; each line is sent as it is, one
message, in order.

Usage: ``python scripts/kafka_sample.py [--bootstrap-servers 127.0.0.1:9092] [--topic mail] [--count 100]
[--skip 0]`` (``--skip 100`` sends the messages after the first hundred).
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import KafkaError, TopicAlreadyExistsError

import pegasos_stream

SAMPLE = Path(pegasos_stream.__file__).parent / "data" / "spam-sample.jsonl.gz"


def sample_lines(skip: int, count: int) -> list[bytes]:
    """Lines ``skip`` to ``skip + count`` of the sample (fewer at its end), without their line ends."""
    with gzip.open(SAMPLE, "rb") as lines:
        return [line.rstrip(b"\n") for number, line in enumerate(lines) if skip <= number < skip + count]


def create_topic(servers: str, topic: str) -> bool:
    """Create ``topic`` with one partition (messages in one order); False when it exists already."""
    admin = KafkaAdminClient(bootstrap_servers=servers, request_timeout_ms=10_000)
    try:
        admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)], timeout_ms=10_000)
    except TopicAlreadyExistsError:
        return False
    finally:
        admin.close()
    return True


def send(servers: str, topic: str, values: list[bytes]) -> None:
    """Send ``values`` in order and wait until the broker has stored every one."""
    producer = KafkaProducer(bootstrap_servers=servers, max_block_ms=10_000)
    try:
        futures = [producer.send(topic, value) for value in values]
        producer.flush(timeout=30)
        for future in futures:
            future.get(timeout=10)
    finally:
        producer.close(timeout=5)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap-servers", default="127.0.0.1:9092", help="host:port (default 127.0.0.1:9092)")
    parser.add_argument("--topic", default="mail", help="the topic (default mail)")
    parser.add_argument("--count", type=int, default=100, help="how many messages to send (default 100)")
    parser.add_argument("--skip", type=int, default=0, help="start after this many messages of the sample")
    args = parser.parse_args(argv)
    values = sample_lines(args.skip, args.count)
    try:
        created = create_topic(args.bootstrap_servers, args.topic)
        send(args.bootstrap_servers, args.topic, values)
    except KafkaError as error:
        print(f"error: {args.bootstrap_servers}: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    spam = sum(json.loads(value)["label"] == "spam" for value in values)
    print(
        f"{'created topic ' + args.topic + ', ' if created else ''}sent {len(values)} messages"
        f" ({spam} spam, {len(values) - spam} ham) of the sample to {args.topic} on {args.bootstrap_servers}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
