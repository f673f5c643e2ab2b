"""Kafka with confluent-kafka (librdkafka): the consumer-group source of `python_client`, on a faster client.

An optional extra (``pip install 'pegasos-stream[confluent]'``; ``source.client: confluent``). The source
keeps every promise of ``python_client.KafkaSource``, decided alike by ``group.GroupSource``: auto-commit
is off and offsets are committed only by ``commit()``, each partition resumes at its stored offset
(set in the assignment itself), a revocation commits what was processed before the consumer rejoins
the group, and every call that talks to the broker has a bounded wait. Messages are consumed in
batches (``Consumer.consume``), and a run of offsets that follow each other is kept as a ``range``.

Settings are given in kafka-python's names, as for ``KafkaSource``: a connection setting of the
``kafka`` section becomes its librdkafka property (``ssl_cafile`` is ``ssl.ca.location``), any other
setting the librdkafka property of the same name with dots for the underscores
(``session_timeout_ms`` is ``session.timeout.ms``); ``bootstrap_timeout_ms`` is the source's own.
librdkafka's log lines go to this module's logger at debug level: its errors reach the source, which
says when the broker is unreachable and when it is back, and logs any other error once.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from itertools import compress, count, islice
from operator import ne
from typing import cast

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_INVALID,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from ..io.sources import SourceError
from .group import BrokerUnreachable, GroupSource
from .offsets import Fetched, Partition

__all__ = ["ConfluentKafkaSource", "librdkafka_settings", "message_runs"]

#: The connection settings (of the ``kafka`` section) whose librdkafka property is not their name with
#: dots for the underscores.
_PROPERTIES = {
    "sasl_plain_username": "sasl.username",
    "sasl_plain_password": "sasl.password",
    "ssl_cafile": "ssl.ca.location",
    "ssl_certfile": "ssl.certificate.location",
    "ssl_keyfile": "ssl.key.location",
    "ssl_password": "ssl.key.password",
    "ssl_crlfile": "ssl.crl.location",
    "ssl_ciphers": "ssl.cipher.suites",
    "ssl_check_hostname": "ssl.endpoint.identification.algorithm",
}

#: Settings of kafka-python that librdkafka has no equivalent of, and why.
_UNSUPPORTED = {
    "sasl_kerberos_domain_name": "librdkafka names the broker's Kerberos principal by its host name",
    "sasl_mechanism=AWS_MSK_IAM": "librdkafka authenticates to Amazon MSK with OAUTHBEARER, which a file cannot set up",
}

#: How often librdkafka reports its broker connections (milliseconds), for the broker watch.
STATISTICS_MS = 1000

#: librdkafka's errors that mean a broker connection failed: the broker watch reports them.
_CONNECTION_ERRORS = (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._RESOLVE)

log = logging.getLogger(__name__)


def librdkafka_settings(settings: Mapping[str, object]) -> dict[str, object]:
    """librdkafka's properties for ``settings`` in kafka-python's names (unset ones, None, left out); a
    ValueError for a setting librdkafka cannot take."""
    properties: dict[str, object] = {}
    for key, value in settings.items():
        if value is None:
            continue
        refused = _UNSUPPORTED.get(key) or _UNSUPPORTED.get(f"{key}={value}")
        if refused:
            raise ValueError(f"{key}: not available with confluent-kafka ({refused})")
        if key == "ssl_check_hostname":
            value = "https" if value else "none"
        elif isinstance(value, bool):
            value = "true" if value else "false"
        elif isinstance(value, list):
            value = ",".join(map(str, value))
        properties[_PROPERTIES.get(key, key.replace("_", "."))] = value
    return properties


class ConfluentKafkaSource(GroupSource):
    """Records from Kafka topics, read in a consumer group by confluent-kafka (see ``GroupSource``).

    ``consumer`` holds further settings, in kafka-python's names or librdkafka's (see the module).
    The rebalance callbacks run inside ``read()``'s poll, in its thread, and a revocation commits
    there before the consumer rejoins. Other commits run on a thread of their own, so that a broker
    that does not answer holds ``commit()`` no longer than ``commit_timeout``.
    """

    _errors = (KafkaException, FutureTimeout)
    _timeouts = (FutureTimeout,)

    def _start(self, servers: str | Sequence[str], group_id: str, start: str, settings: dict[str, object]) -> None:
        bootstrap_timeout_ms = float(settings.pop("bootstrap_timeout_ms"))  # type: ignore[arg-type]
        properties = {
            **librdkafka_settings(settings),
            "bootstrap.servers": self._servers,
            "group.id": group_id,
            "auto.offset.reset": start,
            "enable.auto.commit": False,
            "statistics.interval.ms": STATISTICS_MS,
            "error_cb": self._on_error,
            "stats_cb": self._on_stats,
            "logger": _DebugLog(),
        }
        try:
            self._consumer = Consumer(properties)
        except KafkaException as error:
            raise ValueError(f"consumer settings: {error.args[0].str()}") from None
        self._connection: bool | None = None  # from librdkafka's statistics
        self._error_logged = ""
        strategy = properties.get("partition.assignment.strategy")
        self._incremental = "cooperative" in str(strategy) or properties.get("group.protocol") == "consumer"
        self._single_topic = len(self.topics) == 1 and not self.topics[0].startswith("^")  # (^: a pattern)
        self._committer = ThreadPoolExecutor(1, thread_name_prefix="kafka-commit")
        self._rebalancing = False  # in a revocation callback
        self._starts: dict[Partition, int] = {}  # where each partition assigned started
        try:
            self._consumer.list_topics(timeout=bootstrap_timeout_ms / 1000)
        except KafkaException:
            self._consumer.close()
            raise BrokerUnreachable(servers, bootstrap_timeout_ms) from None
        self._consumer.subscribe(
            self.topics, on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
        )

    def _fetch(self, timeout_ms: int, limit: int, generations: Mapping[Partition, int]) -> list[Fetched]:
        """Waits for one message at most ``timeout_ms``, then takes what has arrived, up to ``limit``
        (``consume`` would wait out its timeout for a batch not full)."""
        if timeout_ms:
            messages = self._consumer.consume(1, timeout_ms / 1000)
            if messages and limit > 1:
                messages += self._consumer.consume(limit - 1, 0)
        else:
            messages = self._consumer.consume(max(limit, 1), 0)
        if any(map(Message.error, messages)):
            messages = self._without_errors(messages)
        return message_runs(messages, generations, self._single_topic) if messages else []

    def _drain(self, n: int, count: int) -> None:
        """Nothing: ``_fetch`` took what had arrived, up to ``n`` (librdkafka's queue, of
        ``queued.max.messages.kbytes``, bounds the bytes)."""

    def _without_errors(self, messages: list[Message]) -> list[Message]:
        """``messages`` less those that carry an error (logged; a fatal one stops the source)."""
        for message in messages:
            error = message.error()
            if error is not None and error.code() != KafkaError._PARTITION_EOF:
                self._on_error(error)
        if self._failure is not None:
            raise self._failure
        return [message for message in messages if message.error() is None]

    def _seek_to(self, offsets: Mapping[Partition, int]) -> None:
        for (topic, partition), offset in offsets.items():
            self._consumer.seek(TopicPartition(topic, partition, offset))

    def _seek_to_beginning(self, partitions: set[Partition]) -> None:
        self._seek_to(dict.fromkeys(partitions, OFFSET_BEGINNING))

    def _commit_request(self, offsets: Mapping[Partition, int], timeout: float) -> None:
        """Commit on the committing thread, or in a rebalance callback on this one (where a commit from
        another thread would wait for the callback to return); librdkafka sends the commits in order."""
        request = [TopicPartition(topic, partition, offset) for (topic, partition), offset in offsets.items()]
        if self._rebalancing:
            answer = self._consumer.commit(offsets=request, asynchronous=False)
        else:
            answer = self._committer.submit(self._consumer.commit, offsets=request, asynchronous=False).result(timeout)
        failed = [tp.error for tp in answer or () if tp.error is not None]
        if failed:
            raise KafkaException(failed[0])

    def _assignment(self) -> set[Partition]:
        return {Partition(tp.topic, tp.partition) for tp in self._consumer.assignment()}

    def _end(self, partition: Partition) -> int | None:
        marks = self._consumer.get_watermark_offsets(TopicPartition(*partition), cached=True)
        return marks[1] if marks and marks[1] >= 0 else None

    def _beginning(self, partition: Partition) -> int:
        return self._consumer.get_watermark_offsets(TopicPartition(*partition), timeout=self._poll_ms / 1000)[0]

    def _fetch_position(self, partition: Partition) -> int | None:
        """After the last message consumed from ``partition``, else where it started."""
        [tp] = self._consumer.position([TopicPartition(*partition)])
        return tp.offset if tp.offset >= 0 else self._starts.get(partition)

    def _connected(self) -> bool | None:
        return self._connection

    def _close_client(self) -> None:
        self._committer.shutdown()  # a commit still waiting for its answer uses the consumer
        self._consumer.close()

    # -- librdkafka's callbacks, served by consume() --------------------------------------------

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Note partitions assigned and assign them at the offsets waiting for them, else at the group's
        committed offsets (which a stored offset gives way to when they are later, see
        ``GroupSource._give_way``), else where ``start`` says: where each starts is then known."""
        assigned = {Partition(tp.topic, tp.partition) for tp in partitions}
        self._announce(assigned)
        stored = self._offsets.pending_seeks(assigned)
        try:
            answer = consumer.committed(partitions, timeout=self._commit_timeout)
        except KafkaException as error:
            if stored:
                self._unknown_committed(stored, error)
                return
            answer = []
        committed = {Partition(tp.topic, tp.partition): tp.offset for tp in answer if tp.offset >= 0}
        if stored:
            self._give_way(stored, {p: committed.get(p) for p in stored})
        seeks = self._offsets.assign(assigned)
        for tp in partitions:
            partition = Partition(tp.topic, tp.partition)
            tp.offset = seeks.offsets.get(partition, committed.get(partition, OFFSET_INVALID))
            if partition in seeks.to_beginning:
                tp.offset = OFFSET_BEGINNING
            if tp.offset >= 0:
                self._starts[partition] = tp.offset
        if self._incremental:
            consumer.incremental_assign(partitions)
        else:
            consumer.assign(partitions)

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition], lost: bool = False) -> None:
        revoked = {Partition(tp.topic, tp.partition) for tp in partitions}
        self._rebalancing = True
        try:
            self._revoked(revoked, lost)
        finally:
            self._rebalancing = False
        for partition in revoked:
            self._starts.pop(partition, None)

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._on_revoke(consumer, partitions, lost=True)

    def _on_error(self, error: KafkaError) -> None:
        """A fatal error stops the source at its next poll; a failed connection is the broker watch's
        to report; any other error is logged, once until another comes."""
        if error.fatal():
            self._failure = SourceError(f"the Kafka client failed: {error.str()}")
        elif error.code() not in _CONNECTION_ERRORS and error.str() != self._error_logged:
            self._error_logged = error.str()
            log.warning("Kafka client error: %s", error.str())

    def _on_stats(self, statistics: str) -> None:
        """Note whether a broker connection is up, from librdkafka's statistics."""
        brokers = json.loads(statistics).get("brokers", {})
        self._connection = any(broker.get("state") == "UP" for broker in brokers.values())


def message_runs(messages: list[Message], generations: Mapping[Partition, int], one_topic: bool) -> list[Fetched]:
    """``messages`` (without errors) by runs of one partition, in order, each tagged with its partition's
    generation in ``generations`` (0 when absent) and its offsets a range where they follow each other;
    ``one_topic``: they all come from one topic (the partitions tell the runs apart)."""
    values = cast("list[bytes]", list(map(Message.value, messages)))
    if None in values:  # tombstones
        values = [value or b"" for value in values]
    keys: list = list(map(Message.partition, messages))
    if not one_topic:
        keys = list(zip(map(Message.topic, messages), keys))
    if keys.count(keys[0]) == len(keys):  # one partition (found by identity, mostly: fast)
        cuts = [0, len(keys)]
    else:
        cuts = [0, *compress(count(1), map(ne, keys, islice(keys, 1, None))), len(keys)]
    fetched = []
    for begin, end in zip(cuts, islice(cuts, 1, None)):
        first, last = cast(int, messages[begin].offset()), cast(int, messages[end - 1].offset())
        if last - first == end - begin - 1:
            offsets: Sequence[int] = range(first, last + 1)
        else:
            offsets = cast("list[int]", list(map(Message.offset, islice(messages, begin, end))))
        partition = Partition(cast(str, messages[begin].topic()), cast(int, messages[begin].partition()))
        fetched.append(Fetched(partition, values[begin:end], offsets, generations.get(partition, 0)))
    return fetched


class _DebugLog:
    """Where librdkafka's log lines go: this module's logger, at debug level."""

    def log(self, level: int, message: str, *args: object) -> None:
        log.debug(message, *args)
