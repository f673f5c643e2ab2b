"""The ``users`` command: one instance of the users' personal offsets, on Quix Streams (`pegasos_stream.users`)."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import threading
from collections.abc import Iterator, Mapping
from dataclasses import asdict

from ..learners.personal import PersonalPegasos
from ..learners.personal_offset import largest_bytes
from ..learners.protocols import BinaryLearner
from ..run.predictions import binary_classes
from ..users.instance import InstanceStopped, SharedModel, UserInstance
from . import options
from .assemble import build_features, build_model
from .checks import StartupError
from .config import ConfigError, config_file, load_config
from .serve import TopicProvider, model_topic_reader, served_configuration
from .settings import JobSettings, KafkaConnection, settings_of

__all__ = ["add_users_command", "command_users"]


def _personal(settings: JobSettings, config: dict) -> PersonalPegasos:
    """The personal learner of ``config``, whose settings the offsets take; a ConfigError for any other."""
    model = build_model(config)
    if not isinstance(model, PersonalPegasos):
        kind = settings.raw["model"]["kind"]
        raise ConfigError(f"users: model.kind: expected personal (offsets per user), got {kind}")
    return model


def connection_properties(connection: KafkaConnection) -> dict[str, object]:
    """librdkafka's connection and security properties of the ``kafka`` section (its kafka-python names mapped as
    for ``source.client: confluent``); a ConfigError for a setting librdkafka cannot take."""
    from ..kafka.confluent_client import librdkafka_settings

    try:
        return librdkafka_settings(connection.client_settings())
    except ValueError as error:
        raise ConfigError(f"users: kafka.{error}") from None


@contextlib.contextmanager
def _followed(args: argparse.Namespace) -> Iterator[TopicProvider | None]:
    """The newest model of ``--model-topic``, looked for again every ``--reload-s`` seconds (None without it)."""
    if not args.model_topic:
        yield None
        return
    reader = model_topic_reader(args)
    provider = TopicProvider(reader, served_configuration(args), None, options.key_of(args))
    stop = threading.Event()

    def follow() -> None:
        while not stop.wait(args.reload_s):
            provider.refresh()

    thread = threading.Thread(target=follow, name="model-topic", daemon=True)
    thread.start()
    try:
        yield provider
    finally:
        stop.set()
        thread.join()
        reader.close()


def _client_settings(texts: list[str], client: str) -> dict[str, str]:
    """``--consumer`` or ``--producer`` ``KEY=VALUE``: settings of librdkafka's ``client``."""
    settings = {}
    for text in texts:
        key, equals, value = text.partition("=")
        if not equals or not key:
            raise ConfigError(f"--{client} {text}: expected KEY=VALUE, a setting of librdkafka's {client}")
        settings[key] = value
    return settings


#: What an instance that stopped on an error leaves, and what to do.
STOPPED = (
    "nothing after its last commit was committed: started again, it recovers its users' offsets from the changelog"
    " and takes the records after its last commit"
)
#: What a changelog record holds besides the offset's bytes (its key, Quix's headers, the record's own), at most.
RECORD_OVERHEAD = 4096


def _largest_record(personal: PersonalPegasos, producer: Mapping[str, str]) -> int:
    """The largest changelog record of a user's offset (``max_weights`` weights); a StartupError when ``--producer
    message.max.bytes`` is set below it."""
    largest = largest_bytes(personal.max_weights, personal.step != "pegasos") + RECORD_OVERHEAD
    text = producer.get("message.max.bytes")
    if text is None:
        return largest
    try:
        limit = int(text)
    except ValueError:
        raise ConfigError(f"--producer message.max.bytes={text}: expected a number of bytes") from None
    if limit < largest:
        raise StartupError(
            f"--producer message.max.bytes={limit}: a user's offset (model.max_weights={personal.max_weights}) takes"
            f" up to {largest:,} bytes in one record of the state's changelog: leave message.max.bytes out, or set it"
            " at least that"
        )
    return limit


def command_users(args: argparse.Namespace) -> int:
    """Run one instance until a signal or ``--idle-stop``; 0, or 1 when it took records and rejected every one."""
    sets = options.overrides(args)
    config = load_config(config_file(args.config), [text for text, _ in sets], [flag for _, flag in sets])
    settings = settings_of(config)
    personal = _personal(settings, config)
    producer = _client_settings(args.producer, "producer")
    largest = _largest_record(personal, producer)
    try:
        from ..users.quix_app import InstanceSettings, run_instance
    except ImportError as error:
        raise StartupError(f"users needs Quix Streams: pip install 'pegasos-stream[users]' ({error})") from None
    servers = settings.kafka.bootstrap_servers
    instance_settings = InstanceSettings(
        bootstrap_servers=servers if isinstance(servers, str) else ",".join(servers),
        input_topic=args.input_topic,
        output_topic=args.output_topic,
        group=args.group or f"{settings.source.group_id}.users",
        state_dir=args.state_dir,
        guarantee=args.guarantee,
        commit_interval=args.commit_interval,
        idle_stop=args.idle_stop,
        consumer=_client_settings(args.consumer, "consumer"),
        producer=producer,
        connection=connection_properties(settings.kafka),
        max_record_bytes=largest,
    )
    with _followed(args) as provider:

        def shared() -> SharedModel | None:
            served = None if provider is None else provider.current
            if served is None:
                return None
            model = served.predictor.model
            model = model.shared if isinstance(model, PersonalPegasos) else model
            return SharedModel(model, served.version) if isinstance(model, BinaryLearner) else None

        classes = binary_classes(settings.source.labels.mapping)
        instance = UserInstance(personal, build_features(config), classes, shared, args.digests)
        try:
            stats = run_instance(instance, instance_settings)
        except InstanceStopped as error:
            print(f"error: the instance stopped: {error}; {STOPPED}", file=sys.stderr)
            return 1
    print(json.dumps(asdict(stats)), file=sys.stderr)  # (the summary line, as run's)
    return 1 if stats.records and stats.rejected == stats.records else 0


def add_users_command(commands: argparse._SubParsersAction) -> None:
    """The ``users`` command's parser."""
    users = commands.add_parser(
        "users",
        help="one instance of the users' personal offsets, partitioned by user on Quix Streams",
        description="Score and learn the events of the users topic that this instance's partitions hold, each "
        "user's personal offset in Quix Streams' keyed state (RocksDB under --state-dir, a changelog topic on the "
        "broker): the events run forwards (output.forward) with the shared learner's score, and mail to score "
        "(id, user, text) with the newest model of --model-topic. One JSON object per event to --output-topic. "
        "Start as many as the topic has partitions; a crashed one's users move to the others, their offsets "
        "recovered from the changelog.",
    )
    users.add_argument("--config", required=True, metavar="FILE|NAME", help="a configuration of model.kind personal")
    users.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a configuration key")
    users.add_argument("--input-topic", required=True, metavar="TOPIC", help="the users topic, keyed by user")
    users.add_argument("--output-topic", required=True, metavar="TOPIC", help="where the scores go")
    users.add_argument("--state-dir", required=True, metavar="DIR", help="where this instance keeps its state")
    users.add_argument("--group", help="the consumer group of the instances (default: source.group_id + .users)")
    users.add_argument("--model-topic", metavar="TOPIC", help="the shared model's topic (publish.topic of run)")
    users.add_argument(
        "--reload-s", type=float, default=5.0, metavar="SECONDS", help="look for a newer model this often"
    )
    users.add_argument(
        "--guarantee",
        choices=("at-least-once", "exactly-once"),
        default="exactly-once",
        help="Quix Streams' processing guarantee (the offsets hold each label once with either; see the README)",
    )
    users.add_argument(
        "--commit-interval", type=float, default=5.0, metavar="SECONDS", help="how often state and offsets commit"
    )
    users.add_argument(
        "--idle-stop", type=float, default=0.0, metavar="SECONDS", help="stop after this long without an event"
    )
    users.add_argument("--digests", action="store_true", help="add each learned offset's digest to its output")
    for client in ("consumer", "producer"):
        users.add_argument(
            f"--{client}", action="append", default=[], metavar="KEY=VALUE", help=f"a setting of librdkafka's {client}"
        )
    options.add_key_options(users)
    users.set_defaults(input=None, output=None, max_events=None, stop_when_idle=None)  # (no such flags here)
