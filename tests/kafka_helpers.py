"""Consumer-group settings of the Kafka tests (tansu, see conftest): 2 s sessions, so that a group join takes
about 1 s (tansu waits about half the session timeout; ``GROUP_SETTINGS`` of ``pegasos_stream.testing``, with 6 s
sessions, takes 3 s), and a member that is killed is given up on after 2 s. The heartbeats of both clients are
sent by threads of their own (kafka-python's and librdkafka's), four per session."""

from __future__ import annotations

from pegasos_stream.testing import kafka_broker as tansu

#: Consumer settings of the tests' sources and jobs (see the module).
GROUP_SETTINGS = {"session_timeout_ms": 2000, "heartbeat_interval_ms": 500}


def kafka_source_config(broker: str, topic: str, group: str, client: str = "kafka-python") -> dict:
    """``pegasos_stream.testing.kafka_broker.kafka_source_config`` with the tests' ``GROUP_SETTINGS``."""
    return {**tansu.kafka_source_config(broker, topic, group, client), "consumer": dict(GROUP_SETTINGS)}
