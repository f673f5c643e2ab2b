"""What the confluent-kafka source does of its own: settings in kafka-python's names, batches of
messages cut into runs of one partition, client errors, and the extra it needs. Its promises as a
source are the Kafka tests', which run with each client (``source_class``, ``kafka_client``)."""

from __future__ import annotations

import logging
import sys
import uuid

import pytest
from confluent_kafka import KafkaError, Message
from kafka_helpers import GROUP_SETTINGS

from pegasos_stream.cli.assemble import build_source
from pegasos_stream.cli.checks import StartupError
from pegasos_stream.cli.config import load_config
from pegasos_stream.io.sources import SourceError
from pegasos_stream.kafka.confluent_client import ConfluentKafkaSource, librdkafka_settings, message_runs
from pegasos_stream.kafka.offsets import Fetched, Partition


def test_settings_in_kafka_python_names_become_librdkafka_properties():
    settings = {
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "pegasos",
        "sasl_plain_password": "secret",
        "ssl_cafile": "ca.pem",
        "ssl_check_hostname": False,
        "ssl_crlfile": None,  # unset: left to librdkafka
        "session_timeout_ms": 6000,
        "check_crcs": True,
        "debug": ["cgrp", "fetch"],
    }
    assert librdkafka_settings(settings) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "pegasos",
        "sasl.password": "secret",
        "ssl.ca.location": "ca.pem",
        "ssl.endpoint.identification.algorithm": "none",
        "session.timeout.ms": 6000,
        "check.crcs": "true",
        "debug": "cgrp,fetch",
    }
    assert librdkafka_settings({"ssl_check_hostname": True}) == {"ssl.endpoint.identification.algorithm": "https"}


@pytest.mark.parametrize(
    "settings, refused",
    [
        ({"sasl_kerberos_domain_name": "example.com"}, "sasl_kerberos_domain_name: not available with confluent-kafka"),
        ({"sasl_mechanism": "AWS_MSK_IAM"}, "sasl_mechanism: not available with confluent-kafka"),
        ({"fetch_wait_secs": 1}, r'No such configuration property: "fetch.wait.secs"'),
        ({"enable.auto.commit": True}, r"\['enable.auto.commit'\] are set by ConfluentKafkaSource itself"),
    ],
)
def test_settings_librdkafka_cannot_take_are_refused_before_any_connection(settings, refused):
    with pytest.raises(ValueError, match=refused):
        ConfluentKafkaSource("127.0.0.1:9", ["t"], "g", consumer=settings)


def test_a_client_not_installed_is_one_line_naming_the_extra(monkeypatch):
    config = load_config(None, ["source.type=kafka", "source.topics=[t]", "source.client=confluent"])
    monkeypatch.delitem(sys.modules, "pegasos_stream.kafka.confluent_client")
    monkeypatch.setitem(sys.modules, "confluent_kafka", None)  # import confluent_kafka: ModuleNotFoundError
    with pytest.raises(StartupError, match=r"^source.client is confluent, but confluent-kafka is not installed: "):
        build_source(config)
    with pytest.raises(StartupError, match=r"pip install 'pegasos-stream\[confluent\]'$"):
        build_source(config)


def test_a_client_refusing_a_setting_is_one_line_at_start_up():
    config = load_config(
        None, ["source.type=kafka", "source.topics=[t]", "source.client=confluent", "source.consumer.fetch_wait_secs=1"]
    )
    with pytest.raises(StartupError, match=r'^source: consumer settings: No such configuration property: "fetch.wait'):
        build_source(config)


def _message(topic: str, partition: int, offset: int, value: bytes | None = b"v") -> Message:
    return Message(topic=topic, partition=partition, offset=offset, value=value)


def test_a_batch_of_messages_is_cut_into_runs_of_one_partition():
    messages = [
        _message("a", 0, 5),
        _message("a", 0, 6, None),  # a tombstone
        _message("a", 1, 3),
        _message("a", 1, 7),  # a gap (compaction, a transaction marker)
        _message("b", 1, 9),
        _message("a", 0, 7),
    ]
    runs = message_runs(messages, {Partition("a", 1): 4}, one_topic=False)
    assert runs == [
        Fetched(Partition("a", 0), [b"v", b""], range(5, 7), 0),
        Fetched(Partition("a", 1), [b"v", b"v"], [3, 7], 4),
        Fetched(Partition("b", 1), [b"v"], range(9, 10), 0),
        Fetched(Partition("a", 0), [b"v"], range(7, 8), 0),
    ]
    one = [_message("a", 2, offset) for offset in range(10, 14)]
    assert message_runs(one, {}, one_topic=True) == [Fetched(Partition("a", 2), [b"v"] * 4, range(10, 14), 0)]


def test_client_errors_are_logged_once_and_a_fatal_one_stops_the_source(kafka_broker, kafka_topic, caplog):
    topic = kafka_topic(1)
    source = ConfluentKafkaSource(kafka_broker, [topic], f"group-{uuid.uuid4().hex[:8]}", consumer=GROUP_SETTINGS)
    caplog.set_level(logging.WARNING, logger="pegasos_stream.kafka.confluent_client")
    denied = Message(error=KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "not yours"))
    kept = [_message(topic, 0, 0), _message(topic, 0, 1)]
    eof = Message(error=KafkaError(KafkaError._PARTITION_EOF))
    assert source._without_errors([kept[0], denied, eof, kept[1], denied]) == kept
    assert caplog.text.count("Kafka client error: not yours") == 1
    assert source._without_errors([denied]) == []
    with pytest.raises(SourceError, match=r"^the Kafka client failed: gone for good"):
        source._without_errors([kept[0], Message(error=KafkaError(KafkaError._FATAL, "gone for good", fatal=True))])
    source.close()
