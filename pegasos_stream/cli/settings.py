"""A validated configuration as typed, frozen settings: one dataclass per section, its fields named as the keys.

`config.validate` checks a configuration and fills in its defaults as a nested dict, which stays what is hashed,
stored in checkpoints and overridden; `JobSettings.from_config` reads that dict once into these dataclasses, and
the code that builds and runs a job reads their attributes. The open sections (``model``, ``features``: the
keyword arguments of the learner and of the feature extraction) and the free-form client settings
(``source.consumer``, ``output.producer``...) are read-only mappings; lists are tuples. Passwords are left out of
the dataclasses' ``repr``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, TypeVar

from .config import kafka_client_settings

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = [
    "CheckpointSettings",
    "ClusterSettings",
    "DeadLetterSettings",
    "DelayedLabelSettings",
    "ErrorSettings",
    "EvaluationSettings",
    "FieldNames",
    "JobConfig",
    "JobSettings",
    "KafkaConnection",
    "LabelValues",
    "MetricsSettings",
    "OutputSettings",
    "PublishSettings",
    "RunSettings",
    "SourceSettings",
    "settings_of",
]

#: A label value of a configuration (``source.label``, ``source.labels.positive``...).
Label = str | int | float | bool | None


@dataclass(frozen=True, slots=True)
class KafkaConnection:
    """The connection and security settings of a Kafka client (``config.KAFKA_CONNECTION``): the ``kafka``
    section, and what each Kafka client section takes of it. None: kafka-python's default."""

    bootstrap_servers: str | tuple[str, ...]
    security_protocol: str | None
    sasl_mechanism: str | None
    sasl_plain_username: str | None
    sasl_plain_password: str | None = field(repr=False)
    sasl_kerberos_service_name: str | None
    sasl_kerberos_domain_name: str | None
    ssl_cafile: str | None
    ssl_certfile: str | None
    ssl_keyfile: str | None
    ssl_password: str | None = field(repr=False)
    ssl_crlfile: str | None
    ssl_check_hostname: bool | None
    ssl_ciphers: str | None

    def client_settings(self, own: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The keyword arguments of a Kafka client (`config.kafka_client_settings`): the connection settings that
        are set, less ``bootstrap_servers``, under the section's own free-form client settings ``own``."""
        connection = {name.name: getattr(self, name.name) for name in fields(KafkaConnection)}
        return kafka_client_settings(connection, own)


@dataclass(frozen=True, slots=True)
class FieldNames:
    """``source.fields``: the names of an event's fields."""

    id: str
    x: str
    text: str
    label: str
    user: str


@dataclass(frozen=True, slots=True)
class LabelValues:
    """``source.labels``: the label values of a binary learner's positive and negative class (both None: its
    classes are true and false)."""

    positive: Label
    negative: Label

    @property
    def mapping(self) -> dict[str, Label] | None:
        """The labels as the parser and the predictor take them; None when they are not mapped."""
        return None if self.positive is None else {"positive": self.positive, "negative": self.negative}


@dataclass(frozen=True, slots=True)
class SourceSettings(KafkaConnection):
    """``source``: where records come from, how they are laid out and labelled; a Kafka source's consumer group."""

    type: str
    path: str | None
    format: str
    fields: FieldNames
    labels: LabelValues
    label: Label
    folders: Mapping[str, Label] | None
    users: str
    max_bytes: int
    client: str
    topics: tuple[str, ...]
    group_id: str
    start: str
    on_offset_out_of_range: str
    consumer: Mapping[str, Any] = field(repr=False)
    poll_seconds: float
    commit_without_checkpoint: bool


@dataclass(frozen=True, slots=True)
class OutputSettings(KafkaConnection):
    """``output``: where predictions go (with ``forward``, the events forwarded to the users' instances in their
    place)."""

    type: str
    path: str | None
    topic: str | None
    producer: Mapping[str, Any] = field(repr=False)
    forward: bool


@dataclass(frozen=True, slots=True)
class EvaluationSettings:
    """``evaluation``: how often the statistics are said, and whether the ROC AUC is exact."""

    stats_every_seconds: float
    exact_auc: bool


@dataclass(frozen=True, slots=True)
class DeadLetterSettings(KafkaConnection):
    """``errors.dead_letter``: where rejected records go."""

    type: str
    path: str | None
    topic: str | None


@dataclass(frozen=True, slots=True)
class ErrorSettings:
    """``errors``: what a rejected record does to the run, and where it goes."""

    on_error: str
    dead_letter: DeadLetterSettings


@dataclass(frozen=True, slots=True)
class DelayedLabelSettings:
    """``delayed_labels``: how many predictions wait for their label, and how long."""

    max_pending: int
    max_age_seconds: float


@dataclass(frozen=True, slots=True)
class RunSettings:
    """``run``: how long a run goes on and how it batches records."""

    max_events: int | None
    stop_when_idle: float | None
    batch_size: int
    batch_bytes: int
    stop_after_leading_rejections: int


@dataclass(frozen=True, slots=True)
class CheckpointSettings:
    """``checkpoint``: where and how often checkpoints are written, how many are kept, the key that signs them."""

    dir: str | None
    every_events: int | None
    every_seconds: float | None
    keep: int
    key_file: str | None
    key_env: str | None


@dataclass(frozen=True, slots=True)
class PublishSettings(KafkaConnection):
    """``publish``: the model topic checkpoints are published to, and how often."""

    topic: str | None
    every_events: int | None
    every_seconds: float | None
    max_record_bytes: int
    producer: Mapping[str, Any] = field(repr=False)


@dataclass(frozen=True, slots=True)
class ClusterSettings(KafkaConnection):
    """``cluster``: a cluster learner's delta topic, how it merges and how often it syncs."""

    delta_topic: str | None
    merge: str
    sync_every_events: int
    sync_every_ms: float
    learner_id: str | None
    max_record_bytes: int
    producer: Mapping[str, Any] = field(repr=False)
    consumer: Mapping[str, Any] = field(repr=False)


@dataclass(frozen=True, slots=True)
class MetricsSettings:
    """``metrics``: where the run's figures are served (no ``port``: nowhere)."""

    port: int | None
    host: str


@dataclass(frozen=True, slots=True)
class JobSettings:
    """A validated configuration, a section an attribute; ``model`` and ``features`` are the keyword arguments of the
    learner and of the feature extraction (with ``kind`` and ``type``), ``raw`` the validated dict they were read
    from (a copy of it: what is hashed and stored in checkpoints; not to be changed)."""

    model: Mapping[str, Any]
    features: Mapping[str, Any]
    source: SourceSettings
    output: OutputSettings
    evaluation: EvaluationSettings
    errors: ErrorSettings
    delayed_labels: DelayedLabelSettings
    run: RunSettings
    checkpoint: CheckpointSettings
    publish: PublishSettings
    cluster: ClusterSettings
    metrics: MetricsSettings
    kafka: KafkaConnection
    raw: dict[str, Any] = field(repr=False)

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> JobSettings:
        """The settings of ``config``, a configuration `config.validate` gave (every key there, defaults filled in)."""
        raw = copy.deepcopy(dict(config))
        source, errors = raw["source"], raw["errors"]
        return cls(
            model=MappingProxyType(raw["model"]),
            features=MappingProxyType(raw["features"]),
            source=_section(
                SourceSettings,
                source,
                fields=_section(FieldNames, source["fields"]),
                labels=_section(LabelValues, source["labels"]),
            ),
            output=_section(OutputSettings, raw["output"]),
            evaluation=_section(EvaluationSettings, raw["evaluation"]),
            errors=_section(ErrorSettings, errors, dead_letter=_section(DeadLetterSettings, errors["dead_letter"])),
            delayed_labels=_section(DelayedLabelSettings, raw["delayed_labels"]),
            run=_section(RunSettings, raw["run"]),
            checkpoint=_section(CheckpointSettings, raw["checkpoint"]),
            publish=_section(PublishSettings, raw["publish"]),
            cluster=_section(ClusterSettings, raw["cluster"]),
            metrics=_section(MetricsSettings, raw["metrics"]),
            kafka=_section(KafkaConnection, raw["kafka"]),
            raw=raw,
        )


#: A job's configuration as the builders take it: its settings, or the validated dict they are read from.
JobConfig = JobSettings | Mapping[str, Any]


def settings_of(config: JobConfig) -> JobSettings:
    """``config`` as settings: itself, or read from the validated configuration (`JobSettings.from_config`)."""
    return config if isinstance(config, JobSettings) else JobSettings.from_config(config)


_Section = TypeVar("_Section", bound="DataclassInstance")


def _section(cls: type[_Section], values: Mapping[str, Any], **built: Any) -> _Section:
    """A ``cls`` holding the value of each of its fields' keys in the validated section ``values`` (a mapping
    read-only, a list a tuple), but for the fields ``built`` gives (the nested sections, built already)."""
    read = {name.name: _read_only(values[name.name]) for name in fields(cls) if name.name not in built}
    return cls(**read, **built)


def _read_only(value: Any) -> Any:
    """``value`` as a setting holds it: a dict as a read-only view of it, a list as a tuple."""
    if isinstance(value, dict):
        return MappingProxyType(value)
    if isinstance(value, list):
        return tuple(value)
    return value
