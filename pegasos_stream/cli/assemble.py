"""From a validated configuration to the runner's parts: learner, features, source, sinks."""

from __future__ import annotations

import inspect
import os
import stat
from collections.abc import Callable
from typing import TYPE_CHECKING, BinaryIO

from ..features import DictHasher, EmailFeatures
from ..io.mail import MaildirSource, MessageFileSource, MessageStdinSource
from ..io.sinks import JsonLinesSink, NullSink, Sink
from ..io.sources import FileSource, Source, StdinSource
from ..parse.parsing import MAIL_FORMATS, EventParser
from ..persist.checkpoint import Checkpoints
from ..run.evaluation import BinaryReport, MulticlassReport
from ..run.pending import PendingLabels
from ..run.predictions import Predictor, binary_classes
from ..run.runner import Runner
from .checks import StartupError, checkpoint_key
from .config import ConfigError, config_hash, kafka_client_settings, learner_class, learning_hash, without_secrets

if TYPE_CHECKING:
    from ..distribute.cluster import ClusterState, ClusterSync
    from ..distribute.publishing import ModelPublisher
    from ..kafka.group import GroupSource
    from ..run.metrics import RunMetrics

__all__ = [
    "build_checkpoints",
    "build_cluster",
    "build_features",
    "build_metrics",
    "build_model",
    "build_parser",
    "build_predictor",
    "build_publisher",
    "build_runner",
    "build_sinks",
    "build_source",
]

#: Scores kept for the ROC AUC of a long-running job's statistics.
RECENT_SCORES = 10_000
#: The most columns a learner keeps weight arrays for unless told (32 MiB each): hashed columns
#: (2**features.hash_bits), or svmlight columns (``model.max_features``).
ARRAY_COLUMNS = 1 << 22


def build_model(config: dict):
    """The configured learner. One that can keep its weights in arrays (``n_features``) does so by itself, unless
    ``model.n_features`` says otherwise: for hashed features of at most ``ARRAY_COLUMNS`` columns; and, when it can
    widen them (``max_features``), for svmlight columns, widened as they come up to ``model.max_features`` or
    ``ARRAY_COLUMNS`` (a line naming a larger column, or a name that is no column, is refused; ``max_features:
    null`` keeps the names as strings, in dicts). The same floats as in dicts, 8 bytes a weight,
    learned in place."""
    kind = learner_class(config["model"]["kind"])
    params = {key: value for key, value in config["model"].items() if key != "kind"}
    bits = config["features"].get("hash_bits")
    settings = inspect.signature(kind).parameters
    if "n_features" in settings and params.get("n_features") is None:
        if bits is not None and 2**bits <= ARRAY_COLUMNS:
            params["n_features"] = 2**bits
        elif bits is None and config["source"]["format"] == "svmlight" and "max_features" in settings:
            params.setdefault("max_features", ARRAY_COLUMNS)  # (null, given: the names as strings, in dicts)
    return kind(**params)


def build_features(config: dict) -> EmailFeatures | DictHasher | None:
    """The configured feature extraction: EmailFeatures for text, a DictHasher for dict events with
    ``hash_bits`` set, None for dict events used as they are."""
    params = {key: value for key, value in config["features"].items() if key != "type"}
    if config["features"]["type"] == "email":
        return EmailFeatures(**params)
    return DictHasher(params["hash_bits"]) if params.get("hash_bits") is not None else None


def _pipe(path: str) -> BinaryIO | None:
    """The file at ``path`` opened for reading when it is not a regular file (a named pipe, a process substitution
    such as ``<(zcat ...)``), which cannot seek; None for a regular file (or one that does not open: the source
    then says why)."""
    try:
        if stat.S_ISREG(os.stat(path).st_mode):
            return None
        return open(path, "rb")  # (the source holds it open)
    except OSError:
        return None


def _pipe_source(source: dict, pipe: BinaryIO, position: dict) -> Source:
    """A source over a pipe, read as standard input is, under the pipe's name: what is read of a pipe cannot be
    read again, so a resumed run skips the records its position counts, as on standard input."""
    reader: Source
    if source["format"] in MAIL_FORMATS:
        skip = position.get("message", position.get("messages", 0))
        reader = MessageStdinSource(
            source["format"], source["poll_seconds"], pipe, skip, source["max_bytes"], source["label"]
        )
    else:
        reader = StdinSource(source["poll_seconds"], pipe, position.get("line", 0), source["max_bytes"])
    reader.name = source["path"]
    return reader


def build_source(config: dict, position: dict | None = None) -> Source:
    """The configured source, resumed at ``position`` (a checkpoint's) when given; the position
    ``{"from_beginning": True}`` reads Kafka from the start whatever its group committed."""
    source = config["source"]
    position = position or {}
    if source["type"] == "maildir":
        return MaildirSource(
            source["path"], source["folders"], source["label"], source["max_bytes"], position.get("last")
        )
    if source["type"] == "file" and (pipe := _pipe(source["path"])) is not None:
        return _pipe_source(source, pipe, position)
    if source["format"] in MAIL_FORMATS and source["type"] == "file":
        return MessageFileSource(
            source["path"],
            source["format"],
            position.get("offset", 0),
            position.get("message", 0),
            source["max_bytes"],
            source["label"],
        )
    if source["format"] in MAIL_FORMATS and source["type"] == "stdin":
        return MessageStdinSource(
            source["format"],
            source["poll_seconds"],
            skip=position.get("messages", 0),
            max_bytes=source["max_bytes"],
            label=source["label"],
        )
    if source["type"] == "file":
        return FileSource(source["path"], position.get("offset", 0), position.get("line", 0), source["max_bytes"])
    if source["type"] == "stdin":
        return StdinSource(
            poll_seconds=source["poll_seconds"], skip=position.get("line", 0), max_bytes=source["max_bytes"]
        )
    return _kafka_source(source, position)


def _kafka_source(source: dict, position: dict) -> GroupSource:
    """The Kafka source of the ``source`` section, resumed at the offsets of ``position`` (or from the beginning);
    a StartupError when the brokers cannot be reached or the client refuses a setting."""
    from ..kafka.group import BrokerUnreachable

    try:
        kafka = _kafka_source_class(source["client"])(
            bootstrap_servers=source["bootstrap_servers"],
            topics=source["topics"],
            group_id=source["group_id"],
            start=source["start"],
            consumer=kafka_client_settings(source, source["consumer"]),
            poll_seconds=source["poll_seconds"],
            on_offset_out_of_range=source["on_offset_out_of_range"],
        )
    except BrokerUnreachable as error:
        raise StartupError(
            f"source.bootstrap_servers: {error} (the wait is source.consumer.bootstrap_timeout_ms)"
        ) from None
    except ValueError as error:  # a setting the client cannot take
        raise StartupError(f"source: {error}") from None
    if position.get("offsets"):
        kafka.seek({(topic, partition): offset for topic, partition, offset in position["offsets"]})
    if position.get("from_beginning"):
        kafka.rewind()
    return kafka


def _kafka_source_class(client: str) -> type[GroupSource]:
    """The Kafka source of ``client`` (``source.client``); a StartupError when its package is not installed."""
    if client == "kafka-python":
        from ..kafka.python_client import KafkaSource

        return KafkaSource
    try:
        from ..kafka.confluent_client import ConfluentKafkaSource
    except ModuleNotFoundError as error:
        if error.name != "confluent_kafka":
            raise
        raise StartupError(
            "source.client is confluent, but confluent-kafka is not installed: pip install 'pegasos-stream[confluent]'"
        ) from None
    return ConfluentKafkaSource


def build_checkpoints(config: dict) -> Checkpoints | None:
    """The configured checkpoints (None without ``checkpoint.dir``)."""
    section = config["checkpoint"]
    if not section["dir"]:
        return None
    manifest = {"config": without_secrets(config), "config_sha256": config_hash(config)}
    key = checkpoint_key(section["key_file"], section["key_env"])
    return Checkpoints(
        section["dir"], section["every_events"], section["every_seconds"], section["keep"], manifest, key
    )


def build_publisher(config: dict, checkpoints: Checkpoints) -> ModelPublisher | None:
    """The publisher of ``checkpoints`` to ``publish.topic``, told of each one written (None without a topic)."""
    if not config["publish"]["topic"]:
        return None
    publisher = _publisher(config)
    checkpoints.on_write = publisher.checkpoint_written
    return publisher


def _publisher(config: dict) -> ModelPublisher:
    """The publisher to ``publish.topic``."""
    section = config["publish"]
    from ..distribute.publishing import ModelPublisher
    from ..kafka.python_client import BrokerUnreachable

    try:
        publisher = ModelPublisher(
            section["bootstrap_servers"],
            section["topic"],
            section["every_events"],
            section["every_seconds"],
            section["max_record_bytes"],
            kafka_client_settings(section),
            section["producer"],
        )
    except BrokerUnreachable as error:
        raise StartupError(f"publish.bootstrap_servers: {error}") from None
    return publisher


def build_cluster(config: dict) -> tuple[ClusterSync, list[Callable[[], object]]]:
    """A cluster learner's part (``cluster.delta_topic``): its `ClusterSync`, which the runner writes as its
    checkpoints and whose recorder it learns with, and what closes it, in order. It starts from the newest snapshot
    of ``publish.topic`` when there is one, else from a new model, folds the delta log from there, and publishes
    snapshots of the cluster's model to ``publish.topic`` when it is set. ``attach`` it to the source."""
    import socket
    import uuid

    from ..distribute.cluster import ClusterState, ClusterSync, SnapshotPublisher
    from ..io.sources import SourceError
    from ..kafka.delta_topic import DeltaTopic
    from ..kafka.python_client import BrokerUnreachable
    from ..learners.steps import StepRecorder

    section = config["cluster"]
    digest = learning_hash(config)
    # a snapshot holds the configuration its replicas serve with: the job's, less this learner's own running of it
    served = {name: section for name, section in config.items() if name not in ("cluster", "publish")}
    manifest = {"config": without_secrets(served), "config_sha256": config_hash(config)}
    state = _cluster_start(config, digest) or ClusterState(build_model(config))
    try:
        channel = DeltaTopic(
            section["bootstrap_servers"],
            section["delta_topic"],
            state.log_offset,
            section["max_record_bytes"],
            kafka_client_settings(section),
            section["producer"],
            section["consumer"],
        )
    except BrokerUnreachable as error:
        raise StartupError(f"cluster.bootstrap_servers: {error}") from None
    except SourceError as error:
        raise StartupError(f"cluster.delta_topic: {error}") from None
    closers: list[Callable[[], object]] = [channel.close]
    name = f"{section['learner_id'] or socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    sync = ClusterSync(
        StepRecorder(state.model, every_row=section["merge"] == "sequential"),
        state,
        channel,
        name,
        digest,
        section["sync_every_events"],
        section["sync_every_ms"],
    )
    if config["publish"]["topic"]:
        publisher = _publisher(config)
        snapshots = SnapshotPublisher(publisher, manifest, digest)
        sync.on_fold = snapshots
        closers[:0] = [lambda: snapshots.close(sync.state), publisher.close]
    return sync, closers


def _cluster_start(config: dict, digest: str) -> ClusterState | None:
    """The cluster state of the newest snapshot in ``publish.topic`` (None without one); a StartupError for a
    snapshot of another configuration or of no cluster."""
    topic = config["publish"]["topic"]
    if not topic:
        return None
    from ..distribute.cluster import state_of_snapshot
    from ..distribute.publishing import ModelTopicReader
    from ..kafka.python_client import BrokerUnreachable
    from ..persist.checkpoint import CheckpointError

    section = config["publish"]
    try:
        reader = ModelTopicReader(section["bootstrap_servers"], topic, kafka_client_settings(section))
    except BrokerUnreachable as error:
        raise StartupError(f"publish.bootstrap_servers: {error}") from None
    try:
        newest, _ = reader.read()
    finally:
        reader.close()
    if newest is None:
        return None
    where = f"{topic} (model version {newest.version})"
    try:
        state, stored = state_of_snapshot(newest.data, where)
    except (CheckpointError, ValueError) as error:
        raise StartupError(f"publish.topic: {error}") from None
    if stored["cluster"].get("learning_sha256") != digest:
        raise StartupError(
            f"publish.topic: {where} was learned with another configuration: a cluster's learners share their model,"
            " features and source format, fields and labels"
        )
    return state


def _sink(kind: str, section: dict, key: str) -> Sink:
    """The sink configured by ``section`` (the configuration's ``key``)."""
    if kind == "stdout":
        return JsonLinesSink()
    if kind == "file":
        return JsonLinesSink(section["path"])
    if kind == "kafka":
        from ..kafka.python_client import BrokerUnreachable, KafkaSink

        try:
            return KafkaSink(
                section["bootstrap_servers"], section["topic"], kafka_client_settings(section, section.get("producer"))
            )
        except BrokerUnreachable as error:
            settings = f" (the wait is {key}.producer.bootstrap_timeout_ms)" if "producer" in section else ""
            raise StartupError(f"{key}.bootstrap_servers: {error}{settings}") from None
    return NullSink()


def build_parser(config: dict, model: object) -> EventParser:
    """The configured parser of records into events for ``model``: for a multiclass learner, svmlight labels are
    classes; for a learner with weight arrays (``n_features``), svmlight names are their int columns (unless the
    features are hashed)."""
    source = config["source"]
    arrays = getattr(model, "max_features", None) or getattr(model, "n_features", None)
    columns = arrays if config["features"].get("hash_bits") is None else None
    return EventParser(
        source["format"],
        source["fields"],
        _labels(source["labels"]),
        source["max_bytes"],
        getattr(model, "_multiclass", False),
        columns if isinstance(columns, int) else None,
    )


def build_sinks(config: dict) -> tuple[Sink, Sink | None]:
    """The configured output of predictions, and of rejected records (None: none)."""
    dead = config["errors"]["dead_letter"]
    output = _sink(config["output"]["type"], config["output"], "output")
    return output, None if dead["type"] == "none" else _sink(dead["type"], dead, "errors.dead_letter")


def build_predictor(config: dict, model) -> Predictor:
    """What predicts events with ``model`` under ``config``: its features, and its classes named as the
    configuration names the labels."""
    return Predictor(model, build_features(config), binary_classes(config["source"]["labels"]), model._multiclass)


def build_runner(config: dict, model=None, exact_auc: bool | None = None) -> Runner:
    """A runner for ``config``; ``model`` (e.g. a resumed one) replaces the configured learner."""
    model = model if model is not None else build_model(config)
    exact = config["evaluation"]["exact_auc"] if exact_auc is None else exact_auc
    report = MulticlassReport() if model._multiclass else BinaryReport(window=None if exact else RECENT_SCORES)
    sink, dead_letters = build_sinks(config)
    return Runner(
        model=model,
        features=build_features(config),
        parser=build_parser(config, model),
        sink=sink,
        pending=PendingLabels(config["delayed_labels"]["max_pending"], config["delayed_labels"]["max_age_seconds"]),
        report=report,
        on_error=config["errors"]["on_error"],
        dead_letters=dead_letters,
        stats_every_seconds=config["evaluation"]["stats_every_seconds"],
        batch_size=config["run"]["batch_size"],
        batch_bytes=config["run"]["batch_bytes"],
        stop_after_leading_rejections=config["run"]["stop_after_leading_rejections"],
    )


def _labels(labels: dict) -> dict | None:
    return labels if labels["positive"] is not None else None


def build_metrics(config: dict, runner: Runner, source: Source, checkpoints: Checkpoints | None) -> RunMetrics | None:
    """The metrics of ``runner``'s run, served on ``metrics.host:metrics.port`` from now on and told of
    the run (``runner.monitor``); None without ``metrics.port``. A ConfigError when ``prometheus_client``
    is not installed or the address cannot be listened on."""
    section = config["metrics"]
    if section["port"] is None:
        return None
    try:
        from ..run.metrics import RunMetrics
    except ModuleNotFoundError as error:
        if error.name != "prometheus_client":
            raise
        raise ConfigError(
            "metrics.port is set, but prometheus_client is not installed: pip install 'pegasos-stream[metrics]'"
        ) from None
    metrics = RunMetrics(runner, source, checkpoints, RECENT_SCORES)
    try:
        metrics.start(section["host"], section["port"])
    except OSError as error:
        raise ConfigError(
            f"metrics.port: cannot listen on {section['host']}:{section['port']}: {error.strerror or error}"
        ) from None
    runner.monitor = metrics
    return metrics
