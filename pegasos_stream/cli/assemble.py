"""From a validated configuration to the runner's parts: learner, features, source, sinks."""

from __future__ import annotations

import inspect
import os
import stat
from collections.abc import Callable, Mapping
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, BinaryIO

from ..features import DictHasher, EmailFeatures
from ..io.mail import MaildirSource, MessageFileSource, MessageStdinSource
from ..io.sinks import JsonLinesSink, NullSink, Sink
from ..io.sources import FileSource, Source, StdinSource
from ..learners.personal import PersonalPegasos
from ..parse.parsing import MAIL_FORMATS, EventParser
from ..persist.checkpoint import Checkpoints
from ..run.evaluation import BinaryReport, MulticlassReport
from ..run.pending import PendingLabels
from ..run.predictions import Predictor, binary_classes
from ..run.runner import Runner
from .checks import StartupError, checkpoint_key
from .config import PERSONAL, ConfigError, config_hash, learner_class, learning_hash, without_secrets
from .settings import (
    DeadLetterSettings,
    JobConfig,
    JobSettings,
    OutputSettings,
    PublishSettings,
    SourceSettings,
    settings_of,
)

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


def build_model(config: JobConfig):
    """The configured learner. One that can keep its weights in arrays (``n_features``) does so by itself, unless
    ``model.n_features`` says otherwise: for hashed features of at most ``ARRAY_COLUMNS`` columns; and, when it can
    widen them (``max_features``), for svmlight columns, widened as they come up to ``model.max_features`` or
    ``ARRAY_COLUMNS`` (a line naming a larger column, or a name that is no column, is refused; ``max_features:
    null`` keeps the names as strings, in dicts). The same floats as in dicts, 8 bytes a weight,
    learned in place."""
    settings = settings_of(config)
    return _learner(settings.model, settings)


def _learner(section: Mapping[str, Any], settings: JobSettings) -> Any:
    """The learner of a model ``section`` (`build_model`); a personal one's shared learner from ``shared``."""
    kind = learner_class(section["kind"])
    params = {key: value for key, value in section.items() if key != "kind"}
    if section["kind"] == PERSONAL:
        params["shared"] = _learner(section["shared"], settings)
    bits = settings.features.get("hash_bits")
    parameters = inspect.signature(kind).parameters
    if "n_features" in parameters and params.get("n_features") is None:
        if bits is not None and 2**bits <= ARRAY_COLUMNS:
            params["n_features"] = 2**bits
        elif bits is None and settings.source.format == "svmlight" and "max_features" in parameters:
            params.setdefault("max_features", ARRAY_COLUMNS)  # (null, given: the names as strings, in dicts)
    return kind(**params)


def build_features(config: JobConfig) -> EmailFeatures | DictHasher | None:
    """The configured feature extraction: EmailFeatures for text, a DictHasher for dict events with
    ``hash_bits`` set, None for dict events used as they are."""
    features = settings_of(config).features
    params = {key: value for key, value in features.items() if key != "type"}
    if features["type"] == "email":
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


def _pipe_source(source: SourceSettings, path: str, pipe: BinaryIO, position: dict) -> Source:
    """A source over a pipe, read as standard input is, under the pipe's name (``path``): what is read of a pipe
    cannot be read again, so a resumed run skips the records its position counts, as on standard input."""
    reader: Source
    if source.format in MAIL_FORMATS:
        skip = position.get("message", position.get("messages", 0))
        reader = MessageStdinSource(source.format, source.poll_seconds, pipe, skip, source.max_bytes, source.label)
    else:
        reader = StdinSource(source.poll_seconds, pipe, position.get("line", 0), source.max_bytes)
    reader.name = path
    return reader


def build_source(config: JobConfig, position: dict | None = None) -> Source:
    """The configured source, resumed at ``position`` (a checkpoint's) when given; the position
    ``{"from_beginning": True}`` reads Kafka from the start whatever its group committed."""
    source = settings_of(config).source
    position = position or {}
    if source.type == "stdin":
        return _stdin_source(source, position)
    if source.type == "kafka":
        return _kafka_source(source, position)
    assert source.path is not None  # (validation requires the path of a file or maildir source)
    if source.type == "maildir":
        last, users = position.get("last"), source.users == "directories"
        return MaildirSource(source.path, source.folders, source.label, source.max_bytes, last, users)
    return _file_source(source, source.path, position)


def _stdin_source(source: SourceSettings, position: dict) -> Source:
    """Standard input, less the records ``position`` counts (what was read of it cannot be read again)."""
    if source.format in MAIL_FORMATS:
        return MessageStdinSource(
            source.format,
            source.poll_seconds,
            skip=position.get("messages", 0),
            max_bytes=source.max_bytes,
            label=source.label,
        )
    return StdinSource(poll_seconds=source.poll_seconds, skip=position.get("line", 0), max_bytes=source.max_bytes)


def _file_source(source: SourceSettings, path: str, position: dict) -> Source:
    """The file ``path`` from ``position``: its messages, or its lines; a pipe as standard input (`_pipe_source`)."""
    if (pipe := _pipe(path)) is not None:
        return _pipe_source(source, path, pipe, position)
    if source.format in MAIL_FORMATS:
        return MessageFileSource(
            path, source.format, position.get("offset", 0), position.get("message", 0), source.max_bytes, source.label
        )
    return FileSource(path, position.get("offset", 0), position.get("line", 0), source.max_bytes)


def _kafka_source(source: SourceSettings, position: dict) -> GroupSource:
    """The Kafka source of the ``source`` section, resumed at the offsets of ``position`` (or from the beginning);
    a StartupError when the brokers cannot be reached or the client refuses a setting."""
    from ..kafka.group import BrokerUnreachable

    try:
        kafka = _kafka_source_class(source.client)(
            bootstrap_servers=source.bootstrap_servers,
            topics=source.topics,
            group_id=source.group_id,
            start=source.start,
            consumer=source.client_settings(source.consumer),
            poll_seconds=source.poll_seconds,
            on_offset_out_of_range=source.on_offset_out_of_range,
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


def build_checkpoints(config: JobConfig) -> Checkpoints | None:
    """The configured checkpoints (None without ``checkpoint.dir``)."""
    settings = settings_of(config)
    section = settings.checkpoint
    if not section.dir:
        return None
    manifest = {"config": without_secrets(settings.raw), "config_sha256": config_hash(settings.raw)}
    key = checkpoint_key(section.key_file, section.key_env)
    return Checkpoints(section.dir, section.every_events, section.every_seconds, section.keep, manifest, key)


def build_publisher(config: JobConfig, checkpoints: Checkpoints) -> ModelPublisher | None:
    """The publisher of ``checkpoints`` to ``publish.topic``, told of each one written (None without a topic)."""
    section = settings_of(config).publish
    if not section.topic:
        return None
    publisher = _publisher(section, section.topic)
    checkpoints.on_write = publisher.checkpoint_written
    return publisher


def _publisher(section: PublishSettings, topic: str) -> ModelPublisher:
    """The publisher to ``topic`` (``publish.topic``)."""
    from ..distribute.publishing import ModelPublisher
    from ..kafka.python_client import BrokerUnreachable

    try:
        publisher = ModelPublisher(
            section.bootstrap_servers,
            topic,
            section.every_events,
            section.every_seconds,
            section.max_record_bytes,
            section.client_settings(),
            section.producer,
        )
    except BrokerUnreachable as error:
        raise StartupError(f"publish.bootstrap_servers: {error}") from None
    return publisher


def build_cluster(config: JobConfig) -> tuple[ClusterSync, list[Callable[[], object]]]:
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

    settings = settings_of(config)
    section = settings.cluster
    assert section.delta_topic is not None  # (a cluster learner's)
    digest = learning_hash(settings.raw)
    # a snapshot holds the configuration its replicas serve with: the job's, less this learner's own running of it
    served = {name: value for name, value in settings.raw.items() if name not in ("cluster", "publish")}
    manifest = {"config": without_secrets(served), "config_sha256": config_hash(settings.raw)}
    state = _cluster_start(settings, digest) or ClusterState(build_model(settings))
    try:
        channel = DeltaTopic(
            section.bootstrap_servers,
            section.delta_topic,
            state.log_offset,
            section.max_record_bytes,
            section.client_settings(),
            section.producer,
            section.consumer,
        )
    except BrokerUnreachable as error:
        raise StartupError(f"cluster.bootstrap_servers: {error}") from None
    except SourceError as error:
        raise StartupError(f"cluster.delta_topic: {error}") from None
    closers: list[Callable[[], object]] = [channel.close]
    name = f"{section.learner_id or socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    sync = ClusterSync(
        StepRecorder(state.model, every_row=section.merge == "sequential"),
        state,
        channel,
        name,
        digest,
        section.sync_every_events,
        section.sync_every_ms,
    )
    if settings.publish.topic:
        publisher = _publisher(settings.publish, settings.publish.topic)
        snapshots = SnapshotPublisher(publisher, manifest, digest)
        sync.on_fold = snapshots
        closers[:0] = [lambda: snapshots.close(sync.state), publisher.close]
    return sync, closers


def _cluster_start(settings: JobSettings, digest: str) -> ClusterState | None:
    """The cluster state of the newest snapshot in ``publish.topic`` (None without one); a StartupError for a
    snapshot of another configuration or of no cluster."""
    section = settings.publish
    topic = section.topic
    if not topic:
        return None
    from ..distribute.cluster import state_of_snapshot
    from ..distribute.publishing import ModelTopicReader
    from ..kafka.python_client import BrokerUnreachable
    from ..persist.checkpoint import CheckpointError

    try:
        reader = ModelTopicReader(section.bootstrap_servers, topic, section.client_settings())
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


def _sink(kind: str, section: OutputSettings | DeadLetterSettings, key: str) -> Sink:
    """The sink configured by ``section`` (the configuration's ``key``)."""
    if kind == "stdout":
        return JsonLinesSink()
    if kind == "file":
        return JsonLinesSink(section.path)
    if kind == "kafka":
        from ..kafka.python_client import BrokerUnreachable, KafkaSink

        assert section.topic is not None  # (validation requires the topic of a Kafka sink)
        producer = section.producer if isinstance(section, OutputSettings) else None
        try:
            return KafkaSink(section.bootstrap_servers, section.topic, section.client_settings(producer))
        except BrokerUnreachable as error:
            settings = f" (the wait is {key}.producer.bootstrap_timeout_ms)" if producer is not None else ""
            raise StartupError(f"{key}.bootstrap_servers: {error}{settings}") from None
    return NullSink()


def build_parser(config: JobConfig, model: object) -> EventParser:
    """The configured parser of records into events for ``model``: for a multiclass learner, svmlight labels are
    classes; for a learner with weight arrays (``n_features``), svmlight names are their int columns (unless the
    features are hashed)."""
    settings = settings_of(config)
    source = settings.source
    learner = model.shared if isinstance(model, PersonalPegasos) else model  # (whose weights are arrays)
    arrays = getattr(learner, "max_features", None) or getattr(learner, "n_features", None)
    columns = arrays if settings.features.get("hash_bits") is None else None
    return EventParser(
        source.format,
        asdict(source.fields),
        source.labels.mapping,
        source.max_bytes,
        getattr(model, "_multiclass", False),
        columns if isinstance(columns, int) else None,
        users=isinstance(model, PersonalPegasos) and not settings.output.forward,  # (forwarded, a user is read then)
        taught=source.type == "kafka" and source.format == "raw",  # (a feedback topic's taught messages)
    )


def build_sinks(config: JobConfig) -> tuple[Sink, Sink | None]:
    """The configured output of predictions, and of rejected records (None: none)."""
    settings = settings_of(config)
    dead = settings.errors.dead_letter
    output = _sink(settings.output.type, settings.output, "output")
    return output, None if dead.type == "none" else _sink(dead.type, dead, "errors.dead_letter")


def build_predictor(config: JobConfig, model) -> Predictor:
    """What predicts events with ``model`` under ``config``: its features, and its classes named as the
    configuration names the labels."""
    settings = settings_of(config)
    return Predictor(model, build_features(settings), binary_classes(settings.source.labels.mapping), model._multiclass)


def build_runner(config: JobConfig, model=None, exact_auc: bool | None = None) -> Runner:
    """A runner for ``config``; ``model`` (e.g. a resumed one) replaces the configured learner."""
    settings = settings_of(config)
    model = model if model is not None else build_model(settings)
    exact = settings.evaluation.exact_auc if exact_auc is None else exact_auc
    report = MulticlassReport() if model._multiclass else BinaryReport(window=None if exact else RECENT_SCORES)
    sink, dead_letters = build_sinks(settings)
    pending, run = settings.delayed_labels, settings.run
    return Runner(
        model=model,
        features=build_features(settings),
        parser=build_parser(settings, model),
        sink=sink,
        pending=PendingLabels(pending.max_pending, pending.max_age_seconds),
        report=report,
        on_error=settings.errors.on_error,
        dead_letters=dead_letters,
        stats_every_seconds=settings.evaluation.stats_every_seconds,
        batch_size=run.batch_size,
        batch_bytes=run.batch_bytes,
        stop_after_leading_rejections=run.stop_after_leading_rejections,
        forward=settings.output.forward,
    )


def build_metrics(
    config: JobConfig, runner: Runner, source: Source, checkpoints: Checkpoints | None
) -> RunMetrics | None:
    """The metrics of ``runner``'s run, served on ``metrics.host:metrics.port`` from now on and told of
    the run (``runner.monitor``); None without ``metrics.port``. A ConfigError when ``prometheus_client``
    is not installed or the address cannot be listened on."""
    section = settings_of(config).metrics
    if section.port is None:
        return None
    try:
        from ..run.metrics import RunMetrics
    except ModuleNotFoundError as error:
        raise metrics_extra_missing(error) from None
    metrics = RunMetrics(runner, source, checkpoints, RECENT_SCORES)
    start_metrics(metrics.start, section.host, section.port)
    runner.monitor = metrics
    return metrics


def metrics_extra_missing(error: ModuleNotFoundError) -> ConfigError:
    """The ConfigError of ``metrics.port`` set without the ``metrics`` extra (``error`` raised again when the
    module missing is another)."""
    if error.name != "prometheus_client":
        raise error
    return ConfigError(
        "metrics.port is set, but prometheus_client is not installed: pip install 'pegasos-stream[metrics]'"
    )


def start_metrics(start: Callable[[str, int], None], host: str, port: int) -> None:
    """``start(host, port)``, the metrics served there; a ConfigError when the address cannot be listened on."""
    try:
        start(host, port)
    except OSError as error:
        raise ConfigError(f"metrics.port: cannot listen on {host}:{port}: {error.strerror or error}") from None
