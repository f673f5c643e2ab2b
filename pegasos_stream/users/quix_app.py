"""The users topic on Quix Streams: each instance of a consumer group owns some of its partitions, and with them
the personal offsets of their users, in Quix's keyed state (RocksDB, a changelog topic on the broker for each).

Quix Streams gives the partitioning by key, the state's recovery after a crash or a rebalance (from the changelog)
and the consistency of state and committed offsets: at a checkpoint it produces the changelog, flushes, commits the
input's offsets, then writes the state to disk, and a recovery skips every changelog record of an input offset past
the committed one. The offsets then hold each label exactly once across a SIGKILL, with the ``at-least-once``
guarantee (outputs after the last commit are written again, the same ones: the scores are a function of the
state) or with ``exactly-once`` (Kafka transactions, where the broker aborts the transactions of a dead producer).
This is the one module that imports quixstreams (the optional ``users`` extra), when an instance starts.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..parse.parsing import BadRecord
from .instance import InstanceStopped, UserInstance, parse_user_event

__all__ = ["InstanceSettings", "InstanceStats", "run_instance"]

_log = logging.getLogger(__name__)

#: Kafka's default retention (7 days, and no size bound), for a broker that does not report a topic's own.
_KAFKA_RETENTION = {"retention.ms": "604800000", "retention.bytes": "-1"}
#: Kafka's default ``max.message.bytes`` of a topic (the broker's ``message.max.bytes``).
_KAFKA_MAX_MESSAGE_BYTES = 1_048_588
#: The key of a user's offset in the user's state (the store's keys and values are bytes, as they are).
_STATE_KEY = b"offset"


@dataclass(frozen=True, slots=True)
class InstanceSettings:
    """Where an instance reads, writes and keeps its state."""

    bootstrap_servers: str
    input_topic: str
    output_topic: str
    group: str
    state_dir: str
    guarantee: str = "exactly-once"
    commit_interval: float = 5.0
    #: Stop after this many seconds without a record (0: run until SIGTERM or SIGINT).
    idle_stop: float = 0.0
    #: librdkafka settings of the consumer (session timeout, ...) and of the producer (transaction timeout, ...).
    consumer: Mapping[str, Any] = field(default_factory=dict)
    producer: Mapping[str, Any] = field(default_factory=dict)
    #: librdkafka's connection and security properties (``security.protocol``, ``sasl.username``, ...) of every
    #: client of the instance: consumer, producer and topic admin.
    connection: Mapping[str, Any] = field(default_factory=dict)
    #: The largest record the instance produces (a user's largest offset in the changelog): the producer's
    #: ``message.max.bytes`` unless ``producer`` sets it, and the ``max.message.bytes`` of the changelog topics it
    #: creates.
    max_record_bytes: int = 1_000_000


@dataclass(slots=True)
class InstanceStats:
    """What an instance did with the records it took."""

    records: int = 0
    learned: int = 0
    scored: int = 0
    rejected: int = 0
    #: When the first record and the last one were taken (Unix time; None before one).
    first_at: float | None = None
    last_at: float | None = None


def _topic_manager(settings: InstanceSettings) -> Any:
    """Quix's topic manager, which derives a changelog topic's retention from its input topic's, taking Kafka's
    default retention for a broker that reports no topic configuration (DescribeConfigs answered empty), and
    creates changelog topics that take a user's largest offset in one record (``max.message.bytes``; a changelog
    topic created before keeps its own)."""
    from quixstreams.models.topics import Topic, TopicAdmin, TopicConfig, TopicManager

    largest = str(max(settings.max_record_bytes, _KAFKA_MAX_MESSAGE_BYTES))

    class ReportedRetention(TopicManager):
        def _fetch_topic(self, topic: Topic) -> Topic:
            fetched = super()._fetch_topic(topic)
            for key, value in _KAFKA_RETENTION.items():
                fetched.broker_config.extra_config.setdefault(key, value)
            return fetched

        def changelog_topic(self, stream_id: str | None, store_name: str, config: TopicConfig) -> Topic:
            config.extra_config["max.message.bytes"] = largest
            return super().changelog_topic(stream_id, store_name, config)

    return ReportedRetention(TopicAdmin(_broker(settings)), settings.group)


def _broker(settings: InstanceSettings) -> Any:
    """Quix's connection of every client: the bootstrap servers and the connection properties."""
    from quixstreams.kafka.configuration import ConnectionConfig

    return ConnectionConfig.from_librdkafka_dict(
        {"bootstrap.servers": settings.bootstrap_servers, **settings.connection}
    )


def _identity(value: Any) -> Any:
    """A state value as it is stored: an offset's bytes."""
    return value


def run_instance(instance: UserInstance, settings: InstanceSettings) -> InstanceStats:
    """Run one instance until it is stopped (SIGTERM, SIGINT or ``idle_stop``); what it did."""
    from quixstreams import Application, message_context
    from quixstreams.state.rocksdb import RocksDBOptions

    app = Application(
        broker_address=_broker(settings),
        consumer_group=settings.group,
        auto_offset_reset="earliest",
        state_dir=settings.state_dir,
        processing_guarantee=settings.guarantee,
        commit_interval=settings.commit_interval,
        consumer_extra_config=dict(settings.consumer),
        producer_extra_config={"message.max.bytes": str(settings.max_record_bytes), **settings.producer},
        rocksdb_options=RocksDBOptions(dumps=_identity, loads=_identity),
        topic_manager=_topic_manager(settings),
        loglevel=None,
    )
    source = app.topic(settings.input_topic, key_deserializer="bytes", value_deserializer="bytes")
    sink = app.topic(settings.output_topic, key_serializer="bytes", value_serializer="json")
    stats = InstanceStats()

    def process(value: bytes, key: bytes, _timestamp: int, _headers: Any, state: Any) -> dict:
        context = message_context()
        where = f"{context.topic}[{context.partition}]@{context.offset}"
        stats.records += 1
        stats.last_at = time.time()
        stats.first_at = stats.first_at or stats.last_at
        try:
            output, offset = instance.process(parse_user_event(value, key, where), state.get(_STATE_KEY))
        except (BadRecord, ValueError, TypeError) as error:  # (a BadRecord's message starts with where it is)
            stats.rejected += 1
            reason = str(error) if isinstance(error, BadRecord) else f"{where}: {error}"
            _log.warning("rejected %s", reason)
            return {"error": reason, "position": where}
        if offset is not None:
            state.set(_STATE_KEY, offset)
            stats.learned += 1
        else:
            stats.scored += 1
        return output

    app.dataframe(source).apply(process, stateful=True, metadata=True).to_topic(sink)
    try:
        app.run(timeout=settings.idle_stop)
    except Exception as error:  # (Quix stops on any error of the broker, the producer or RocksDB, and says so)
        raise InstanceStopped(f"{type(error).__name__}: {error}") from error
    return stats
