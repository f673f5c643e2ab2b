"""A cluster's delta log on a Kafka topic (kafka-python): the `DeltaChannel` of `distribute.cluster`.

The topic has one partition, so that every learner reads the deltas in one order. A delta goes out as chunk
records of at most ``max_record_bytes`` each, keyed ``{id}/chunk/{i:06d}`` (``id`` a random name of the delta),
then, once every chunk is acknowledged, an end record keyed ``{id}/end``: JSON with ``n_chunks``, ``bytes`` and
``sha256``. A reader gives a delta at its end record when its chunks are all there and their digest matches
(else why not); chunks whose end never comes (a learner killed while sending) are let go after
``ABANDON_RECORDS`` records. The topic keeps its records for the broker's retention: a learner that starts
reads it from the offset of the cluster snapshot it starts from (or from its beginning).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient
from kafka.errors import KafkaError, TopicAlreadyExistsError

from ..io.sources import SourceError
from .python_client import CONSUMER_DEFAULTS, PRODUCER_DEFAULTS, describe_kafka_error, started_client

__all__ = ["ABANDON_RECORDS", "DeltaTopic"]

#: Chunks whose end record has not come this many records later are let go (their learner died sending them).
ABANDON_RECORDS = 100_000
#: What a record adds to its value, at most: key, headers, batch overhead.
_RECORD_OVERHEAD = 1 << 16
#: What the reader fetches at most per request.
_FETCH_BYTES = 64 << 20

_log = logging.getLogger(__name__)


class DeltaTopic:
    """Sends deltas to, and reads them from, partition 0 of ``topic``, reading from ``offset`` on.

    ``connection`` holds kafka-python's security settings, ``producer`` and ``consumer`` further settings of
    each client. The topic is created (one partition, ``cleanup.policy=delete``) when it does not exist. A
    delta that cannot be sent, or a log that cannot be read to its end within ``timeout`` seconds, raises a
    SourceError: a learner that cannot sync stops, and whoever takes its partitions relearns its steps.
    """

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str],
        topic: str,
        offset: int = 0,
        max_record_bytes: int = 900_000,
        connection: Mapping[str, object] | None = None,
        producer: Mapping[str, object] | None = None,
        consumer: Mapping[str, object] | None = None,
        timeout: float = 30.0,
    ) -> None:
        self.topic = topic
        self.max_record_bytes = max_record_bytes
        self.timeout = timeout
        self.sent_bytes = 0
        self.read_bytes = 0
        self._partition = TopicPartition(topic, 0)
        self._pending: dict[str, tuple[int, dict[int, bytes]]] = {}  # delta id: (offset of its first chunk, chunks)
        self._create_topic(bootstrap_servers, connection or {})
        self._producer = started_client(
            KafkaProducer,
            {
                **PRODUCER_DEFAULTS,
                "max_request_size": max(1 << 20, max_record_bytes + _RECORD_OVERHEAD),
                **(connection or {}),
                **(producer or {}),
                "bootstrap_servers": bootstrap_servers,
                "acks": "all",
            },
        )
        self._consumer = started_client(
            KafkaConsumer,
            {
                **CONSUMER_DEFAULTS,
                "max_partition_fetch_bytes": _FETCH_BYTES,
                "fetch_max_bytes": _FETCH_BYTES,
                **(connection or {}),
                **(consumer or {}),
                "bootstrap_servers": bootstrap_servers,
                "group_id": None,
                "enable_auto_commit": False,
                "auto_offset_reset": "earliest",
            },
        )
        self._consumer.assign([self._partition])
        beginning = self._consumer.beginning_offsets([self._partition])[self._partition]
        if offset < beginning:
            raise SourceError(
                f"the delta topic {topic} begins at offset {beginning}: the deltas from offset {offset} on, which the "
                "cluster's model needs, are gone (publish snapshots of the model more often than the topic's retention)"
            )
        self._consumer.seek(self._partition, offset)

    def _create_topic(self, bootstrap_servers: str | Sequence[str], connection: Mapping[str, object]) -> None:
        admin = started_client(
            KafkaAdminClient, {**PRODUCER_DEFAULTS, **connection, "bootstrap_servers": bootstrap_servers}
        )
        try:
            admin.create_topics({self.topic: {"num_partitions": 1, "configs": {"cleanup.policy": "delete"}}})
            _log.info("created the delta topic %s", self.topic)
        except TopicAlreadyExistsError:
            pass
        finally:
            admin.close()

    def send(self, data: bytes) -> None:
        """Send a delta's chunks, then, once they are acknowledged, its end record."""
        name = uuid.uuid4().hex
        size = self.max_record_bytes
        chunks = [data[start : start + size] for start in range(0, len(data), size)] or [b""]
        end = json.dumps({"n_chunks": len(chunks), "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()})
        try:
            futures = [
                self._producer.send(self.topic, chunk, key=f"{name}/chunk/{i:06d}".encode(), partition=0)
                for i, chunk in enumerate(chunks)
            ]
            for future in futures:
                future.get(timeout=self.timeout)
            self._producer.send(self.topic, end.encode(), key=f"{name}/end".encode(), partition=0).get(
                timeout=self.timeout
            )
        except KafkaError as error:
            raise SourceError(
                f"could not send a delta to {self.topic} ({describe_kafka_error(error)}); stopping: the steps since "
                "the last sync are learned again by whoever takes this learner's partitions"
            ) from None
        self.sent_bytes += len(data)

    def read(self) -> Iterator[tuple[int, bytes | ValueError]]:
        """The deltas from where the last read stopped to the end of the log now (see `DeltaChannel.read`)."""
        try:
            end = self._consumer.end_offsets([self._partition])[self._partition]
        except KafkaError as error:
            raise SourceError(
                f"cannot learn the end of the delta topic {self.topic} ({describe_kafka_error(error)})"
            ) from None
        deadline = time.monotonic() + self.timeout
        while self._consumer.position(self._partition) < end:
            if time.monotonic() > deadline:
                raise SourceError(
                    f"could not read the delta topic {self.topic} to offset {end} within {self.timeout:g} s; stopping"
                )
            for messages in self._consumer.poll(timeout_ms=200).values():
                for message in messages:
                    delta = self._take(message.offset, message.key, message.value)
                    if delta is not None:
                        yield self._resume_offset(message.offset + 1), delta

    def _take(self, offset: int, key: bytes | None, value: bytes | None) -> bytes | ValueError | None:
        """One record: the delta its end record completes, or why it cannot be had (None for a chunk)."""
        name, _, kind = (key or b"").decode("utf-8", "replace").partition("/")
        if value is None or not kind:
            return None
        self.read_bytes += len(value)
        if kind.startswith("chunk/"):
            _, chunks = self._pending.setdefault(name, (offset, {}))
            chunks[int(kind[len("chunk/") :])] = value
            self._abandon(offset)
            return None
        if kind != "end":
            return None
        _, chunks = self._pending.pop(name, (offset, {}))
        try:
            about = json.loads(value)
            count, size, digest = int(about["n_chunks"]), int(about["bytes"]), str(about["sha256"])
        except (ValueError, KeyError, TypeError):
            return ValueError(f"delta {name} (offset {offset}): its end record is no JSON with n_chunks, bytes, sha256")
        missing = [i for i in range(count) if i not in chunks]
        if missing:
            return ValueError(f"delta {name} (offset {offset}): {len(missing)} of its {count} chunks are missing")
        data = b"".join(chunks[i] for i in range(count))
        if len(data) != size or hashlib.sha256(data).hexdigest() != digest:
            return ValueError(f"delta {name} (offset {offset}): its chunks do not match its end record (corrupted)")
        return data

    def _abandon(self, offset: int) -> None:
        for name, (first, _) in list(self._pending.items()):
            if offset - first > ABANDON_RECORDS:
                del self._pending[name]
                _log.warning("delta %s: its end never came; its chunks from offset %d are let go", name, first)

    def _resume_offset(self, after: int) -> int:
        """Where a learner starting over after the delta just read would read from: before any delta begun."""
        return min([after, *(first for first, _ in self._pending.values())])

    def close(self) -> None:
        self._producer.close(timeout=self.timeout)
        self._consumer.close()
