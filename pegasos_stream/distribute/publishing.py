"""Model publishing: snapshots of a trained model on a compacted Kafka topic, gathered again by followers.

A snapshot is the bytes of a checkpoint file of ``run`` (`persist.checkpoint`), published under a version,
its checkpoint's sequence number (versions increase, across a resumed run too). It goes out as chunk records
of at most ``max_record_bytes`` bytes each, keyed ``v{version:020d}/chunk/{i:06d}``, then, once every chunk is
acknowledged, as a manifest record keyed ``v{version:020d}/manifest``: JSON with the ``version``,
``n_chunks``, the total ``bytes``, ``model_sha256`` (of the whole snapshot), ``written_at``, the learner's
``t`` and the ``events`` it covers. Once a manifest is acknowledged, the keys of older versions get
tombstones, so that compaction keeps the topic to one snapshot. Everything goes to one partition: a follower
that reads a manifest has read the chunks sent before it, or they are gone.

`SnapshotAssembler` (no broker: tested on its own) gathers the records a follower reads and gives a
manifest's snapshot when its chunks are all there and their digest matches, else a `SnapshotRefused` saying
why. `ModelPublisher` sends snapshots (kafka-python's producer, ``acks=all``); `ModelTopicReader` reads the
topic from its beginning, without a consumer group.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient
from kafka.errors import KafkaError, TopicAlreadyExistsError

from ..kafka.python_client import CONSUMER_DEFAULTS, PRODUCER_DEFAULTS, describe_kafka_error, started_client

__all__ = [
    "PARTITION",
    "ModelPublisher",
    "ModelTopicReader",
    "Snapshot",
    "SnapshotAssembler",
    "SnapshotRefused",
    "chunk_key",
    "manifest_key",
    "snapshot_records",
]

#: The partition of the model topic that everything is published to.
PARTITION = 0
#: The largest request the producer sends by default; a record larger than it raises the limit.
_REQUEST_BYTES = 1 << 20
#: What a record adds to its value, at most: key, headers, batch overhead.
_RECORD_OVERHEAD = 1 << 16
#: What the follower fetches at most per partition and request: a chunk of the largest record accepted.
FETCH_BYTES = 64 << 20

_KEY = re.compile(rb"v(\d{20})/(?:chunk/(\d{6})|manifest)")

log = logging.getLogger(__name__)


def chunk_key(version: int, index: int) -> bytes:
    return f"v{version:020d}/chunk/{index:06d}".encode()


def manifest_key(version: int) -> bytes:
    return f"v{version:020d}/manifest".encode()


Record = tuple[bytes, bytes]


def snapshot_records(version: int, data: bytes, max_record_bytes: int, about: Mapping) -> tuple[list[Record], Record]:
    """The chunk records (key, value) of snapshot ``version`` of the bytes ``data``, each value at most
    ``max_record_bytes`` long, and its manifest record, which also holds ``about``."""
    chunks = [
        (chunk_key(version, index), data[start : start + max_record_bytes])
        for index, start in enumerate(range(0, len(data), max_record_bytes))
    ]
    digest = hashlib.sha256(data).hexdigest()
    manifest = {**about, "version": version, "n_chunks": len(chunks), "bytes": len(data), "model_sha256": digest}
    return chunks, (manifest_key(version), json.dumps(manifest, sort_keys=True).encode())


@dataclass(frozen=True)
class Snapshot:
    """A complete snapshot whose digest matched its manifest's."""

    version: int
    data: bytes
    manifest: dict


class SnapshotRefused(ValueError):
    """A manifest whose snapshot cannot be served: chunks missing, or a digest that does not match."""

    def __init__(self, version: int, reason: str) -> None:
        super().__init__(f"model version {version}: {reason}")
        self.version = version


class SnapshotAssembler:
    """Gathers the records of a model topic, in the order they were read, into snapshots.

    A chunk is kept until the manifest of its version comes (a tombstone drops it); then that version's
    chunks and those of older versions are let go. ``keys`` are the keys of the records that are still
    live (not tombstoned), ``newest`` the highest version a manifest named.
    """

    def __init__(self) -> None:
        self._chunks: dict[int, dict[int, bytes]] = {}
        self.keys: set[bytes] = set()
        self.newest = 0

    def add(self, key: bytes | None, value: bytes | None) -> Snapshot | None:
        """Take one record; the snapshot of a manifest (None for a chunk, a tombstone or a foreign key), or a
        SnapshotRefused when its chunks are not all there or do not match its digest."""
        match = _KEY.fullmatch(key or b"")
        if key is None or match is None:
            return None
        if value is None:
            self.keys.discard(key)
        else:
            self.keys.add(key)
        version = int(match.group(1))
        if match.group(2) is not None:
            if value is not None:
                self._chunks.setdefault(version, {})[int(match.group(2))] = value
            else:
                self._chunks.get(version, {}).pop(int(match.group(2)), None)
            return None
        if value is None:
            return None
        chunks = self._chunks.pop(version, {})
        for older in [kept for kept in self._chunks if kept < version]:
            del self._chunks[older]
        self.newest = max(self.newest, version)
        return _assemble(version, value, chunks)


def _assemble(version: int, text: bytes, chunks: dict[int, bytes]) -> Snapshot:
    """The snapshot of the manifest ``text`` of ``version`` from ``chunks`` (index: bytes)."""
    try:
        manifest = json.loads(text)
        count, size, digest = manifest["n_chunks"], manifest["bytes"], manifest["model_sha256"]
    except (ValueError, TypeError, KeyError):
        raise SnapshotRefused(version, "its manifest is not one (JSON with n_chunks, bytes, model_sha256)") from None
    if manifest.get("version") != version or not isinstance(count, int) or not isinstance(size, int):
        raise SnapshotRefused(version, f"its manifest does not fit its key: {text[:200]!r}")
    missing = [index for index in range(count) if index not in chunks]
    if missing:
        raise SnapshotRefused(version, f"{len(missing)} of its {count} chunks are missing (the first: {missing[0]})")
    data = b"".join(chunks[index] for index in range(count))
    if len(data) != size:
        raise SnapshotRefused(version, f"its chunks hold {len(data)} bytes, its manifest says {size}")
    if hashlib.sha256(data).hexdigest() != digest:
        raise SnapshotRefused(version, "the sha256 of its chunks is not the manifest's model_sha256 (corrupted)")
    return Snapshot(version, data, manifest)


class ModelTopicReader:
    """Reads the model topic ``topic`` from its beginning (every partition, no consumer group), gathering its
    records with a `SnapshotAssembler`; a topic that does not exist yet is looked for again at each ``read``."""

    def __init__(
        self, bootstrap_servers: str | Sequence[str], topic: str, settings: Mapping[str, object] | None = None
    ) -> None:
        self.topic = topic
        self.assembler = SnapshotAssembler()
        self._assigned = False
        self._consumer = started_client(
            KafkaConsumer,
            {
                **CONSUMER_DEFAULTS,
                "max_partition_fetch_bytes": FETCH_BYTES,
                "fetch_max_bytes": FETCH_BYTES,
                "allow_auto_create_topics": False,
                **(settings or {}),
                "bootstrap_servers": bootstrap_servers,
                "group_id": None,
                "enable_auto_commit": False,
                "auto_offset_reset": "earliest",
            },
        )

    def read(
        self, poll_seconds: float = 0.2, limit_seconds: float = 30.0
    ) -> tuple[Snapshot | None, list[SnapshotRefused]]:
        """What arrived since the last call, read until a poll of ``poll_seconds`` brings nothing (or for
        ``limit_seconds``): the newest complete snapshot, and the refusal of each newer manifest."""
        newest: Snapshot | None = None
        refused: dict[int, SnapshotRefused] = {}
        if not self._assign():
            return None, []
        deadline = time.monotonic() + limit_seconds
        while time.monotonic() < deadline:
            batches = self._consumer.poll(timeout_ms=int(poll_seconds * 1000))
            if not batches:
                break
            for messages in batches.values():
                for message in messages:
                    try:
                        snapshot = self.assembler.add(message.key, message.value)
                    except SnapshotRefused as error:
                        refused[error.version] = error
                        continue
                    if snapshot is not None and (newest is None or snapshot.version > newest.version):
                        newest = snapshot
        floor = 0 if newest is None else newest.version
        return newest, [error for version, error in sorted(refused.items()) if version > floor]

    def _assign(self) -> bool:
        """Read every partition of the topic from its beginning, once it exists; whether it does."""
        if not self._assigned:
            partitions = self._consumer.partitions_for_topic(self.topic)
            if not partitions:
                return False
            assigned = [TopicPartition(self.topic, partition) for partition in sorted(partitions)]
            self._consumer.assign(assigned)
            self._consumer.seek_to_beginning(*assigned)
            self._assigned = True
        return True

    def close(self) -> None:
        self._consumer.close()


class ModelPublisher:
    """Publishes the checkpoints of a run to the model topic ``topic`` (``connection``: the security settings of
    kafka-python's clients; ``producer``: further KafkaProducer settings).

    ``checkpoint_written`` (a `Checkpoints.on_write`) publishes a checkpoint when ``every_events`` events or
    ``every_seconds`` seconds have passed since the last one published (every checkpoint when neither is set;
    the first of a run in any case); ``close`` publishes the last one written if it was not. The topic is
    created, compacted (``cleanup.policy=compact``) with one partition, when it does not exist; the keys of the
    versions already in it are tombstoned once this run's first snapshot is out. A publication that fails is
    said with a warning and the run goes on (the next one publishes the newer checkpoint).
    """

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str],
        topic: str,
        every_events: int | None = None,
        every_seconds: float | None = None,
        max_record_bytes: int = 900_000,
        connection: Mapping[str, object] | None = None,
        producer: Mapping[str, object] | None = None,
        timeout: float = 30.0,
    ) -> None:
        self.topic = topic
        self.every_events = every_events
        self.every_seconds = every_seconds
        self.max_record_bytes = max_record_bytes
        self.timeout = timeout
        self.pauses: list[float] = []  # seconds each publication took (chunks, manifest, tombstones)
        self._last: tuple[int, float] | None = None  # (events, monotonic time) of the last publication
        self._pending: tuple[int, bytes, dict] | None = None  # the checkpoint written last, not yet published
        self._create_topic(bootstrap_servers, connection or {})
        reader = ModelTopicReader(bootstrap_servers, topic, connection)
        try:
            reader.read()
        finally:
            reader.close()
        self._stale = reader.assembler.keys  # keys of older versions, tombstoned after the next publication
        self._newest = reader.assembler.newest
        request = max(_REQUEST_BYTES, max_record_bytes + _RECORD_OVERHEAD)
        self._producer = started_client(
            KafkaProducer,
            {
                **PRODUCER_DEFAULTS,
                "max_request_size": request,
                **(connection or {}),
                **(producer or {}),
                "bootstrap_servers": bootstrap_servers,
                "acks": "all",
            },
        )

    def _create_topic(self, bootstrap_servers: str | Sequence[str], connection: Mapping[str, object]) -> None:
        """Create the topic, compacted, with one partition, unless it exists."""
        admin = started_client(
            KafkaAdminClient, {**PRODUCER_DEFAULTS, **connection, "bootstrap_servers": bootstrap_servers}
        )
        try:
            admin.create_topics({self.topic: {"num_partitions": 1, "configs": {"cleanup.policy": "compact"}}})
            log.info("created the model topic %s (cleanup.policy=compact)", self.topic)
        except TopicAlreadyExistsError:
            pass
        finally:
            admin.close()

    def due(self, events: int) -> bool:
        """Whether a snapshot of ``events`` events would be published now (see the class's docstring)."""
        last = self._last
        return (
            last is None
            or (self.every_events is None and self.every_seconds is None)
            or (self.every_events is not None and events - last[0] >= self.every_events)
            or (self.every_seconds is not None and time.monotonic() - last[1] >= self.every_seconds)
        )

    def checkpoint_written(self, version: int, data: bytes, manifest: dict) -> None:
        """The checkpoint ``version`` with the bytes ``data`` and ``manifest`` was written: publish it if due."""
        self._pending = (version, data, {key: manifest.get(key) for key in ("written_at", "t", "events")})
        if self.due(manifest.get("events") or 0):
            self._publish_pending()

    def _publish_pending(self) -> None:
        assert self._pending is not None
        version, data, about = self._pending
        if self.publish(version, data, about):
            self._pending = None
            self._last = (about.get("events") or 0, time.monotonic())

    def publish(self, version: int, data: bytes, about: Mapping) -> bool:
        """Send snapshot ``version``: its chunks, then, once they are all acknowledged, its manifest, then
        tombstones for the keys of older versions; whether it is out."""
        if version <= self._newest:
            log.warning(
                "model version %d is not newer than version %d already in %s: followers keep that one",
                version,
                self._newest,
                self.topic,
            )
        started = time.perf_counter()
        chunks, manifest = snapshot_records(version, data, self.max_record_bytes, about)
        sent = {key for key, _ in chunks} | {manifest[0]}
        try:
            self._wait_for(
                [self._producer.send(self.topic, value, key=key, partition=PARTITION) for key, value in chunks]
            )
            self._wait_for([self._producer.send(self.topic, manifest[1], key=manifest[0], partition=PARTITION)])
        except KafkaError as error:
            self._stale |= sent
            log.warning(
                "could not publish model version %d to %s (%s)", version, self.topic, describe_kafka_error(error)
            )
            return False
        older, self._stale = self._stale - sent, sent
        self._tombstone(older)
        self._newest = max(self._newest, version)
        self.pauses.append(time.perf_counter() - started)
        log.info(
            "published model version %d to %s: %d bytes in %d chunks (%.3f s)",
            version,
            self.topic,
            len(data),
            len(chunks),
            self.pauses[-1],
        )
        return True

    def _wait_for(self, futures: list) -> None:
        for future in futures:
            future.get(timeout=self.timeout)

    def _tombstone(self, keys: set[bytes]) -> None:
        """Send a tombstone for each of ``keys``; one not delivered is said with a warning (compaction keeps the
        record until the next publication's tombstones)."""
        try:
            self._wait_for([self._producer.send(self.topic, None, key=key, partition=PARTITION) for key in keys])
        except KafkaError as error:
            self._stale |= keys
            log.warning("could not tombstone older model versions in %s (%s)", self.topic, describe_kafka_error(error))

    def close(self) -> None:
        """Publish the last checkpoint written if it is not out yet, then close the producer."""
        if self._pending is not None:
            self._publish_pending()
        self._producer.close(timeout=self.timeout)
