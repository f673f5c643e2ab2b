"""The typed settings (`cli.settings`): a validated configuration read into frozen dataclasses, one a section, that
hold what the validated dict holds, and that dict itself for hashing and checkpoints."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import pytest

from pegasos_stream.cli.config import (
    KAFKA_CLIENTS,
    KAFKA_CONNECTION,
    SCHEMA,
    config_hash,
    kafka_client_settings,
    learning_hash,
    load_config,
    shipped_configs,
)
from pegasos_stream.cli.settings import JobSettings, KafkaConnection, settings_of

#: A configuration with secrets, free-form client settings, lists and a nested section not at their defaults.
SECURED = [
    "kafka.bootstrap_servers=[a:9092, b:9092]",
    "kafka.security_protocol=SASL_SSL",
    "kafka.sasl_mechanism=PLAIN",
    "kafka.sasl_plain_username=alice",
    "kafka.sasl_plain_password=hunter2-secret",
    "source.type=kafka",
    "source.topics=[mail, more]",
    "source.consumer={max_poll_records: 100}",
    "output.producer={acks: all}",
    "errors.dead_letter.type=kafka",
    "errors.dead_letter.topic=dead",
    "checkpoint.dir=ck",
    "source.labels={positive: spam, negative: ham}",
]


def _plain(value: Any) -> Any:
    """``value`` as the validated dict holds it: a dataclass as a dict of its fields, a mapping as a dict, a tuple as
    a list."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {field.name: _plain(getattr(value, field.name)) for field in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, tuple):
        return [_plain(item) for item in value]
    return value


def _sections(settings: JobSettings) -> dict[str, Any]:
    """The settings as the validated dict holds them, less ``raw``."""
    return {name: value for name, value in _plain(settings).items() if name != "raw"}


@pytest.mark.parametrize("name", sorted(shipped_configs()))
def test_every_shipped_configuration_reads_into_settings_equal_to_its_validated_dict(name):
    config = load_config(shipped_configs()[name])
    settings = JobSettings.from_config(config)
    assert _sections(settings) == config
    assert settings.raw == config
    assert config_hash(settings.raw) == config_hash(config)
    assert learning_hash(settings.raw) == learning_hash(config)


def test_the_defaults_appear_in_the_settings():
    settings = settings_of(load_config(None))
    assert _sections(settings) == load_config(None)
    assert settings.source.type == "stdin"
    assert settings.source.fields.label == "label"
    assert settings.source.labels.positive is None and settings.source.labels.mapping is None
    assert settings.source.topics == ()
    assert settings.run.batch_size == 65536
    assert settings.run.max_events is None
    assert settings.checkpoint.keep == 3
    assert settings.errors.dead_letter.type == "none"
    assert settings.cluster.merge == "sequential"
    assert settings.metrics.host == "127.0.0.1"
    assert settings.kafka.bootstrap_servers == "127.0.0.1:9092"
    assert settings.model["kind"] == "linear"
    assert settings.features["type"] == "dict"


def test_the_settings_hold_the_values_set_and_the_validated_dict_as_raw():
    config = load_config(None, SECURED)
    settings = JobSettings.from_config(config)
    assert _sections(settings) == config
    assert settings.raw == config and settings.raw is not config  # a copy: a change to ``config`` leaves it
    assert config_hash(settings.raw) == config_hash(config)
    assert settings.source.topics == ("mail", "more")
    assert settings.source.bootstrap_servers == ("a:9092", "b:9092")
    assert settings.source.labels.mapping == {"positive": "spam", "negative": "ham"}
    assert settings.errors.dead_letter.topic == "dead"


def test_the_settings_are_frozen():
    settings = settings_of(load_config(None, SECURED))
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.run = settings.run  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.source.type = "file"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.errors.dead_letter.path = "dead.jsonl"  # type: ignore[misc]
    with pytest.raises(TypeError):
        settings.model["kind"] = "grid"  # type: ignore[index]
    with pytest.raises(TypeError):
        settings.source.consumer["max_poll_records"] = 1  # type: ignore[index]


def test_every_key_of_the_schema_is_a_field_of_its_section():
    settings = settings_of(load_config(None))
    for name, spec in SCHEMA.items():
        if name in ("model", "features"):
            continue
        section = getattr(settings, name)
        assert {field.name for field in dataclasses.fields(section)} == set(spec), name
    assert {field.name for field in dataclasses.fields(KafkaConnection)} == set(KAFKA_CONNECTION)
    assert {field.name for field in dataclasses.fields(settings.errors.dead_letter)} == set(
        SCHEMA["errors"]["dead_letter"]
    )


def test_each_kafka_client_gets_the_client_settings_of_its_section():
    config = load_config(None, SECURED)
    settings = settings_of(config)
    for path in (("kafka",), *KAFKA_CLIENTS):
        section, values = settings, config
        for key in path:
            section, values = getattr(section, key), values[key]
        assert section.client_settings() == kafka_client_settings(values), path
    assert settings.source.client_settings(settings.source.consumer) == kafka_client_settings(
        config["source"], config["source"]["consumer"]
    )
    assert settings.output.client_settings(settings.output.producer)["acks"] == "all"


def test_a_password_is_not_shown_by_the_settings():
    settings = settings_of(load_config(None, SECURED))
    assert settings.source.sasl_plain_password == "hunter2-secret"
    assert "hunter2" not in repr(settings)
    assert "alice" in repr(settings.kafka)


def test_settings_of_settings_are_themselves():
    settings = settings_of(load_config(None))
    assert settings_of(settings) is settings
    assert settings_of(settings.raw) == settings
