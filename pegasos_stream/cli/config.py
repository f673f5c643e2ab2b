"""YAML configuration: defaults, ``--set`` overrides, and validation of every key at start-up.

A configuration is a nested dict. Every key is checked against ``SCHEMA`` (or, for ``model`` and
``features``, against the constructor of the class they build): an unknown key, a wrong type or a
bad value stops with a `ConfigError` naming the file, the key path and the expected form. A key given
twice in one mapping is refused with its line (YAML would keep the last one silently).

The ``kafka`` section holds the connection settings (`KAFKA_CONNECTION`) that the Kafka source, the Kafka
output and the Kafka dead-letter topic share; each of those sections takes every setting of ``kafka`` it does
not set itself. Secrets (`SECRETS`, the passwords) are never shown in a message, and are left out of
`config_hash` and of what `without_secrets` gives to be stored.

What a configuration may cost is bounded before anything is built: the file is read up to
``MAX_FILE_BYTES``; YAML aliases are refused (an alias repeats a value at no cost in the text, so a
few lines can stand for gigabytes) and so is nesting deeper than ``MAX_DEPTH``; the free-form client
settings (``source.consumer``, ``output.producer``) are flat and bounded (`Settings`).
"""

from __future__ import annotations

import copy
import inspect
import json
import math
import re
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import yaml

from .. import learners
from ..features import DictHasher, EmailFeatures
from ..learners.validation import binary_sign
from ..parse.parsing import MAIL_FORMATS
from ..persist.checkpoint import sha256

__all__ = [
    "INPUT_KEYS",
    "KAFKA_CONNECTION",
    "KEY_SETTINGS",
    "LEARNERS",
    "PACKAGE_PREFIX",
    "SECRETS",
    "ConfigError",
    "check_kafka_checkpoints",
    "config_file",
    "config_hash",
    "input_format",
    "kafka_client_settings",
    "load_config",
    "override_config",
    "parse_override",
    "set_flag",
    "shipped_configs",
    "without_paths",
    "without_secrets",
    "written_for",
]

#: The learner class of each ``model.kind``, by its name in ``pegasos_stream.learners``.
LEARNERS = {
    "linear": "PegasosClassifier",
    "grid": "PegasosGrid",
    "committee": "PegasosCommittee",
    "mixture": "PegasosMixture",
    "adagrad": "AdaGradLogistic",
    "multiclass": "PegasosMulticlass",
    "kernel": "KernelPegasosClassifier",
    "personal": "PersonalPegasos",
}
#: The kind of learner whose ``model.shared`` is the section of its shared learner.
PERSONAL = "personal"


def learner_class(kind: str) -> type:
    """The class of ``model.kind`` (the learners package loads its module on first use: a run imports its own
    learner only)."""
    return getattr(learners, LEARNERS[kind])


class ConfigError(ValueError):
    """A configuration that cannot run; the message names the file and the key path."""


#: A configuration file larger than this is refused unread: a job's settings take a few kilobytes.
MAX_FILE_BYTES = 1 << 20

#: How deep mappings and lists may nest in a configuration (the schema itself is three levels deep).
MAX_DEPTH = 16


class _RefusedYAML(yaml.YAMLError):
    """YAML that parses but is not accepted in a configuration: an alias, nesting too deep, a key given twice."""


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, reading 1e-4 as a number (YAML 1.2) rather than as a string, and
    refusing aliases and nesting deeper than ``MAX_DEPTH`` as it meets them, and a key a mapping gives twice."""

    _depth = 0

    def compose_node(self, parent: yaml.Node | None, index: object) -> yaml.Node | None:
        event = self.peek_event()
        line = event.start_mark.line + 1
        if isinstance(event, yaml.AliasEvent):
            raise _RefusedYAML(
                f"line {line}: YAML aliases (*{event.anchor}) are not accepted: write the value out in full"
            )
        if self._depth >= MAX_DEPTH:
            raise _RefusedYAML(f"line {line}: nested deeper than {MAX_DEPTH} levels")
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        """The mapping of ``node``, refusing a key it gives twice (YAML would keep the last one silently)."""
        lines: dict[object, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            line = key_node.start_mark.line + 1
            if isinstance(key, Hashable) and key in lines:
                raise _RefusedYAML(f"line {line}: key {_shown(key)} given twice (first on line {lines[key]})")
            lines[key] = line
        return super().construct_mapping(node, deep)


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def _yaml(text: str | bytes, where: str) -> Any:
    """``text`` parsed; a ConfigError naming ``where`` when it is not YAML a configuration accepts."""
    try:
        return yaml.load(text, Loader=_Loader)
    except _RefusedYAML as error:
        raise ConfigError(f"{where}: {error}") from None
    except yaml.MarkedYAMLError as error:
        raise ConfigError(f"{where}: not valid YAML: {_yaml_problem(error)}") from None
    except (yaml.YAMLError, ValueError) as error:  # ValueError: e.g. an integer too long to convert
        raise ConfigError(f"{where}: not valid YAML: {error}") from None


def _mark(mark: yaml.Mark) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}"


def _yaml_problem(error: yaml.MarkedYAMLError) -> str:
    """What is wrong and where, on one line and without quoting the text (which may hold a password)."""
    problem = error.problem or "not valid YAML"
    at = f"{_mark(error.problem_mark)}: " if error.problem_mark else ""
    context = f" ({error.context} from {_mark(error.context_mark)})" if error.context and error.context_mark else ""
    return at + problem + context


def _shown(value: object) -> str:
    """``repr(value)``, cut short: a message never echoes a huge value back."""
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:60]}... ({len(text)} characters)"


@dataclass(frozen=True)
class Option:
    """One leaf of the schema: accepted types, default, allowed values and the form to show."""

    types: tuple[type, ...]
    default: Any
    form: str
    choices: tuple = ()
    minimum: float | None = None
    maximum: float | None = None
    items: tuple[type, ...] = ()  # the types of a list's items (when set)
    secret: bool = False  # a password: a message never shows its value


def _text(default: str | None, form: str = "a string") -> Option:
    return Option((str,), default, form)


def _choice(default: str, *choices: str) -> Option:
    return Option((str,), default, " | ".join(choices), choices)


def _number(default: float | None, minimum: float = 0.0) -> Option:
    return Option((int, float), default, f"a number >= {minimum:g}", minimum=minimum)


def _integer(default: int | None, minimum: int = 1) -> Option:
    return Option((int,), default, f"an integer >= {minimum}", minimum=minimum)


#: Bounds of a free-form settings mapping: its number of keys, and of a list's items; a string's length.
MAX_SETTINGS = 64
MAX_SETTING_CHARS = 4096

_SETTING_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
_SETTING_FORM = (
    f"a string of at most {MAX_SETTING_CHARS} characters, a finite number (an integer within 64 bits),"
    f" true | false, null, or a list of at most {MAX_SETTINGS} of them"
)


@dataclass(frozen=True)
class Settings:
    """A free-form mapping handed to a client library as keyword arguments (kafka-python's consumer
    and producer settings): at most ``MAX_SETTINGS`` names, each a scalar or a short list of them."""

    default: dict = field(default_factory=dict)


def _is_setting_scalar(value: object) -> bool:
    if value is None or isinstance(value, bool):
        return True
    if isinstance(value, str):
        return len(value) <= MAX_SETTING_CHARS
    if isinstance(value, int):
        return -(2**63) <= value < 2**63
    return isinstance(value, float) and math.isfinite(value)


def _check_settings(value: Any, path: str, where: str) -> None:
    if not isinstance(value, dict):
        raise ConfigError(
            f"{where}: {path}: expected a mapping of at most {MAX_SETTINGS} settings (name: value), got {_shown(value)}"
        )
    if len(value) > MAX_SETTINGS:
        raise ConfigError(f"{where}: {path}: expected at most {MAX_SETTINGS} settings, got {len(value)}")
    for key, item in value.items():
        if not (isinstance(key, str) and _SETTING_NAME.fullmatch(key)):
            raise ConfigError(
                f"{where}: {path}: {_shown(key)}: expected a setting name (a letter or _, then letters,"
                " digits or _; at most 64 characters)"
            )
        items = item if isinstance(item, list) else [item]
        if len(items) > MAX_SETTINGS or not all(map(_is_setting_scalar, items)):
            got = _SECRET_SHOWN if key in SECRETS else _shown(item)
            raise ConfigError(f"{where}: {path}.{key}: expected {_SETTING_FORM}, got {got}")


#: The settings that are passwords; a message, a checkpoint and `config_hash` never hold their values.
SECRETS = ("sasl_plain_password", "ssl_password")

#: What a message says in place of a secret's value.
_SECRET_SHOWN = "a value not shown here (a password)"


def _secret(form: str) -> Option:
    return Option((str,), None, form, secret=True)


#: kafka-python's connection and security settings (KafkaConsumer and KafkaProducer take them alike) that a
#: file can give: not ``ssl_context``, ``sasl_kerberos_name`` and ``sasl_oauth_token_provider``, which are
#: Python objects (and so not the OAUTHBEARER mechanism, which needs the last). None: kafka-python's default.
KAFKA_CONNECTION: dict[str, Option] = {
    "bootstrap_servers": Option((str, list), "127.0.0.1:9092", "host:port or a list of them", items=(str,)),
    "security_protocol": Option(
        (str,), None, "PLAINTEXT | SSL | SASL_PLAINTEXT | SASL_SSL", ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
    ),
    "sasl_mechanism": Option(
        (str,),
        None,
        "PLAIN | SCRAM-SHA-256 | SCRAM-SHA-512 | GSSAPI | AWS_MSK_IAM",
        ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI", "AWS_MSK_IAM"),
    ),
    "sasl_plain_username": _text(None),
    "sasl_plain_password": _secret("a string (quote a password YAML would read as a number, true or null)"),
    "sasl_kerberos_service_name": _text(None),
    "sasl_kerberos_domain_name": _text(None),
    "ssl_cafile": _text(None, "a file path"),
    "ssl_certfile": _text(None, "a file path"),
    "ssl_keyfile": _text(None, "a file path"),
    "ssl_password": _secret("a string (quote a password YAML would read as a number, true or null)"),
    "ssl_crlfile": _text(None, "a file path"),
    "ssl_check_hostname": Option((bool,), None, "true | false"),
    "ssl_ciphers": _text(None, "an OpenSSL cipher list"),
}

#: The sections of the Kafka clients, which take the settings of ``kafka`` they do not set themselves.
KAFKA_CLIENTS = (("source",), ("output",), ("errors", "dead_letter"), ("publish",), ("cluster",))

#: The connection settings that are file paths.
_KAFKA_FILES = ("ssl_cafile", "ssl_certfile", "ssl_keyfile", "ssl_crlfile")


SCHEMA: dict = {
    "model": {"kind": _choice("linear", *LEARNERS)},  # and the learner's constructor parameters
    "features": {"type": _choice("dict", "dict", "email")},  # and EmailFeatures' parameters
    "source": {
        "type": _choice("stdin", "stdin", "file", "kafka", "maildir"),
        "path": _text(None, "a file path"),
        "format": _choice("json", "json", "svmlight", *MAIL_FORMATS),
        "fields": {
            "id": _text("id"),
            "x": _text("x"),
            "text": _text("text"),
            "label": _text("label"),
            "user": _text("user"),  # whose mail an event is, for model.kind: personal
        },
        "labels": {
            "positive": Option((str, int, float, bool), None, "a label value"),
            "negative": Option((str, int, float, bool), None, "a label value"),
        },
        "label": Option((str, int, float, bool), None, "a label value"),  # of every message of a mail source
        "folders": Option((dict,), None, "a mapping of folder name: label"),  # of a maildir's messages
        "users": _choice("none", "none", "directories"),  # directories: a maildir of users' Maildirs, one each
        "max_bytes": _integer(1_000_000),
        **KAFKA_CONNECTION,
        "client": _choice("kafka-python", "kafka-python", "confluent"),  # confluent: the confluent extra
        "topics": Option((list,), [], "a list of topic names"),
        "group_id": _text("pegasos-stream"),
        "start": _choice("earliest", "earliest", "latest"),
        "on_offset_out_of_range": _choice("stop", "stop", "earliest"),
        "consumer": Settings(),
        "poll_seconds": _number(0.5),
        # run without checkpoints on a Kafka source, committing offsets that no saved model covers
        "commit_without_checkpoint": Option((bool,), False, "true | false"),
    },
    "output": {
        "type": _choice("stdout", "stdout", "file", "kafka", "none"),
        "path": _text(None, "a file path"),
        **KAFKA_CONNECTION,
        "topic": _text(None, "a topic name"),
        "producer": Settings(),
        "forward": Option((bool,), False, "true | false"),
    },
    "evaluation": {
        "stats_every_seconds": _number(10.0),
        "exact_auc": Option((bool,), False, "true | false"),
    },
    "errors": {
        "on_error": _choice("skip", "skip", "stop"),
        "dead_letter": {
            "type": _choice("none", "none", "file", "kafka"),
            "path": _text(None, "a file path"),
            **KAFKA_CONNECTION,
            "topic": _text(None, "a topic name"),
        },
    },
    "delayed_labels": {
        "max_pending": _integer(100_000),
        "max_age_seconds": _number(7 * 24 * 3600.0),
    },
    "run": {
        "max_events": _integer(None, 0),
        "stop_when_idle": _number(None),
        "batch_size": _integer(65536, 0),  # most records per compiled batch (0: one at a time)
        # about the most bytes of records per batch: more than a file's block, so a batch of lines takes it whole
        "batch_bytes": _integer(2 << 20, 1),
        # the run stops (status 2, saying what the records look like) when each of its first this many is rejected
        "stop_after_leading_rejections": _integer(100, 0),
    },
    "checkpoint": {
        "dir": _text(None, "a directory path"),
        "every_events": _integer(None),
        "every_seconds": _number(None),
        "keep": _integer(3),
        # the key that signs each checkpoint and without which none is resumed (HMAC-SHA256): a file's bytes, or an
        # environment variable's; not part of the job (config_hash)
        "key_file": _text(None, "a file path"),
        "key_env": _text(None, "the name of an environment variable"),
    },
    "publish": {  # checkpoints published to a model topic (distribute.publishing); not part of the job (config_hash)
        "topic": _text(None, "a topic name"),
        "every_events": _integer(None),
        "every_seconds": _number(None),
        "max_record_bytes": _integer(900_000, 1024),
        **KAFKA_CONNECTION,
        "producer": Settings(),
    },
    "cluster": {  # several learners in one consumer group (distribute.cluster); not part of the job (config_hash)
        "delta_topic": _text(None, "a topic name"),
        "merge": _choice("sequential", "sequential", "additive"),
        "sync_every_events": _integer(1000),
        "sync_every_ms": _number(1000.0),
        "learner_id": _text(None, "a name"),
        "max_record_bytes": _integer(900_000, 1024),
        **KAFKA_CONNECTION,
        "producer": Settings(),
        "consumer": Settings(),
    },
    "metrics": {  # served over HTTP when a port is set (the metrics extra); not part of the job (config_hash)
        "port": Option((int,), None, "a port number (1 to 65535)", minimum=1, maximum=65535),
        "host": _text("127.0.0.1", "a host name or address to listen on"),
    },
    "kafka": KAFKA_CONNECTION,
}

#: Keys whose schema is the constructor of the class they configure.
_OPEN_SECTIONS = {"model", "features"}


def _defaults(schema: dict) -> dict:
    return {
        key: _defaults(spec) if isinstance(spec, dict) else copy.deepcopy(spec.default) for key, spec in schema.items()
    }


#: Every key's default, as `validate` fills them in.
_DEFAULTS = _defaults(SCHEMA)
#: Stands for "no default" (None is a default of its own).
_NO_DEFAULT = object()


def _merge(base: dict, update: dict) -> dict:
    merged = dict(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _check(value: Any, spec: Option | Settings | dict, path: str, where: str) -> None:
    """``value`` (at ``path``) must fit ``spec``: a section's schema, a learner's settings or one option."""
    if isinstance(spec, Settings):
        _check_settings(value, path, where)
    elif isinstance(spec, dict):
        _check_mapping(value, spec, path, where)
    else:
        _check_option(value, spec, path, where)


def _check_mapping(value: Any, spec: dict, path: str, where: str) -> None:
    """``value`` (at ``path``) must be a mapping of keys of the schema ``spec``, each value fitting its key's."""
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: {path}: expected a mapping, got {_shown(value)}")
    for key, item in value.items():
        key_path = f"{path}.{key}" if path else str(key)
        if key not in spec:
            known = ", ".join(sorted(spec))
            raise ConfigError(f"{where}: {key_path}: unknown key (expected one of: {known})")
        _check(item, spec[key], key_path, where)


def _check_option(value: Any, spec: Option, path: str, where: str) -> None:
    """``value`` (at ``path``) must be of the option's types and within its choices and bounds (or None, where
    that is the default)."""
    if value is None and spec.default is None:
        return
    if not (_of_types(value, spec) and _within(value, spec)):
        raise ConfigError(
            f"{where}: {path}: expected {spec.form}, got {_SECRET_SHOWN if spec.secret else _shown(value)}"
        )


def _of_types(value: Any, spec: Option) -> bool:
    """Whether ``value`` is of one of the option's types (a bool only where bool is one)."""
    return not (isinstance(value, bool) and bool not in spec.types) and isinstance(value, spec.types)


def _within(value: Any, spec: Option) -> bool:
    """Whether ``value``, of the option's types, is one of its choices, within its bounds and, a list, of items of
    its item types."""
    if spec.choices and value not in spec.choices:
        return False
    number = cast(float, value)  # only numeric options have bounds
    if spec.minimum is not None and not (math.isfinite(number) and number >= spec.minimum):
        return False
    if spec.maximum is not None and number > spec.maximum:
        return False
    return not (isinstance(value, list) and spec.items and not all(isinstance(item, spec.items) for item in value))


def _check_constructor(section: dict, cls: type, skip: set[str], path: str, where: str) -> Any:
    """Keys of ``section`` (less ``skip``) must be constructor parameters of ``cls``; the one they build."""
    params = {key: value for key, value in section.items() if key not in skip}
    signature = inspect.signature(cls).parameters
    for key, value in params.items():
        if key not in signature:
            raise ConfigError(
                f"{where}: {path}.{key}: unknown key (expected one of: {', '.join(sorted(set(signature) | skip))})"
            )
        if signature[key].annotation in ("bool", bool) and not isinstance(value, bool):
            raise ConfigError(f"{where}: {path}.{key}: expected true | false, got {_shown(value)}")
    try:
        return cls(**params)
    except (TypeError, ValueError) as error:
        # The learners' messages start with "name=value"; name the key when they do.
        key = str(error).split("=", 1)[0]
        key_path = f"{path}.{key}" if key in params else path
        raise ConfigError(f"{where}: {key_path}: {error}") from None


def _check_model(section: dict, path: str, where: str) -> Any:
    """The learner a model section builds (a personal one's shared learner from its ``shared`` section), checked."""
    _check(section.get("kind"), SCHEMA["model"]["kind"], f"{path}.kind", where)
    if section["kind"] != PERSONAL:
        return _check_constructor(section, learner_class(section["kind"]), {"kind"}, path, where)
    shared = section.get("shared")
    if not isinstance(shared, dict) or shared.get("kind") == PERSONAL:
        raise ConfigError(f"{where}: {path}.shared: expected the model section of the shared learner (its kind...)")
    model = _check_model(shared, f"{path}.shared", where)
    return _check_constructor({**section, "shared": model}, learner_class(PERSONAL), {"kind"}, path, where)


def validate(config: dict, where: str = "<config>") -> dict:
    """``config`` over the defaults, checked; a ConfigError naming ``where`` and the key path."""
    if not isinstance(config, dict):
        raise ConfigError(f"{where}: expected a mapping of sections, got {_shown(config)}")
    for section in config:
        if section not in SCHEMA:
            raise ConfigError(f"{where}: {section}: unknown section (expected one of: {', '.join(SCHEMA)})")
    closed = {key: value for key, value in config.items() if key not in _OPEN_SECTIONS}
    _check(closed, {key: spec for key, spec in SCHEMA.items() if key not in _OPEN_SECTIONS}, "", where)
    merged = _merge(_defaults(SCHEMA), config)
    for section in _OPEN_SECTIONS:
        if not isinstance(merged[section], dict):
            raise ConfigError(f"{where}: {section}: expected a mapping, got {_shown(merged[section])}")
    model = _check_model(merged["model"], "model", where)
    _check(merged["features"].get("type"), SCHEMA["features"]["type"], "features.type", where)
    if merged["features"]["type"] == "email":
        _check_constructor(merged["features"], EmailFeatures, {"type"}, "features", where)
    else:
        for key in set(merged["features"]) - {"type", "hash_bits"}:
            raise ConfigError(
                f"{where}: features.{key}: unknown key (features.type 'dict' takes no other keys than hash_bits:"
                " the event's x is used as it is, or hashed into 2**hash_bits columns)"
            )
        if merged["features"].get("hash_bits") is not None:
            _check_constructor(merged["features"], DictHasher, {"type"}, "features", where)
    _check_requirements(merged, where)
    _check_forward(merged, model._multiclass, where)
    _check_cluster(merged, where)
    _check_mail(config.get("source", {}), merged, model._multiclass, where)
    _share_kafka(config, merged, where)
    return merged


def _check_forward(config: dict, multiclass: bool, where: str) -> None:
    """``output.forward`` (events forwarded to the users' instances, `Runner`'s ``forward``) needs a binary learner
    and events read from JSON records, whose text or features go into JSON as they are."""
    if not config["output"]["forward"]:
        return
    if multiclass:
        raise ConfigError(f"{where}: output.forward: forwarded events carry a binary learner's scores")
    if config["source"]["format"] != "json":
        raise ConfigError(
            f"{where}: output.forward: forwards JSON events, not source.format {config['source']['format']!r} (a mail"
            " message goes to the shared learner as the text of a JSON event)"
        )


def _section(config: dict, path: tuple[str, ...]) -> dict:
    """The section of ``config`` at ``path`` (an empty mapping when it is not there)."""
    node: Any = config
    for key in path:
        node = node.get(key) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else {}


def _share_kafka(given: dict, config: dict, where: str) -> None:
    """Each Kafka client section of ``config`` takes every connection setting of the ``kafka`` section that it
    does not set itself in ``given`` (the configuration as written); then the settings of each Kafka client
    must fit together."""
    for path in KAFKA_CLIENTS:
        own, section = _section(given, path), _section(config, path)
        for key in KAFKA_CONNECTION:
            if key not in own:
                section[key] = copy.deepcopy(config["kafka"][key])
        if (
            section.get("type") == "kafka"
            or (path == ("publish",) and section["topic"])
            or (path == ("cluster",) and section["delta_topic"])
        ):
            _check_security(section, config["kafka"], ".".join(path), own, where)


#: The security protocols that authenticate with SASL, and those that encrypt with TLS.
_SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")
_SSL_PROTOCOLS = ("SSL", "SASL_SSL")

#: The TLS settings.
_SSL_KEYS = tuple(key for key in KAFKA_CONNECTION if key.startswith("ssl_"))

#: The SASL mechanisms that need ``sasl_plain_username`` and ``sasl_plain_password``.
_PASSWORD_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def _check_security(section: dict, kafka: dict, name: str, given: dict, where: str) -> None:
    """The connection settings of the Kafka client section ``name`` must fit together: a SASL protocol needs a
    mechanism, and the mechanisms that take them a user name and password; a mechanism or a TLS setting with a
    protocol that does not use it is refused, unless it is ``kafka``'s and the protocol the section's own (a
    client section with a protocol of its own leaves aside the settings of ``kafka`` it does not use). A
    setting is the section's own when it is written there (``given``) with another value than ``kafka``'s; a
    message names the key where a setting comes from."""

    def own(key: str) -> bool:
        return key in given and section[key] != kafka[key]

    def origin(key: str) -> str:
        return f"{name if own(key) else 'kafka'}.{key}"

    protocol, mechanism = section["security_protocol"], section["sasl_mechanism"]
    if protocol in _SASL_PROTOCOLS:
        if mechanism is None:
            raise ConfigError(
                f"{where}: {origin('sasl_mechanism')}: required when {origin('security_protocol')} is {protocol}"
            )
        for key in ("sasl_plain_username", "sasl_plain_password"):
            if mechanism in _PASSWORD_MECHANISMS and section[key] is None:
                raise ConfigError(f"{where}: {origin(key)}: required when {origin('sasl_mechanism')} is {mechanism}")
    for key in ("sasl_mechanism", *_SSL_KEYS):
        protocols = _SASL_PROTOCOLS if key == "sasl_mechanism" else _SSL_PROTOCOLS
        if protocol in protocols or section[key] is None or (own("security_protocol") and not own(key)):
            continue
        protocol_path = f"{name}.security_protocol" if own(key) else origin("security_protocol")
        raise ConfigError(
            f"{where}: {protocol_path}: expected {' | '.join(protocols)} with {origin(key)} set,"
            f" got {protocol or 'PLAINTEXT (the default)'}"
        )


def kafka_client_settings(section: Mapping[str, Any], own: Mapping[str, Any] | None = None) -> dict:
    """The keyword arguments of a Kafka client for a validated client ``section``: its connection settings
    that are set (less ``bootstrap_servers``, which the clients take apart), under its own free-form client
    settings ``own`` (``source.consumer``, ``output.producer``), which win."""
    connection = {
        key: section[key] for key in KAFKA_CONNECTION if key != "bootstrap_servers" and section[key] is not None
    }
    return {**connection, **(own or {})}


def check_kafka_checkpoints(config: dict, where: str) -> None:
    """``run`` on a Kafka source needs checkpoints, unless ``source.commit_without_checkpoint`` accepts
    what a restart then does: the run commits the offsets it read, but its model lives only in memory."""
    if (
        config["source"]["type"] != "kafka"
        or config["cluster"]["delta_topic"]
        or config["checkpoint"]["dir"]
        or config["source"]["commit_without_checkpoint"]
    ):
        return
    raise ConfigError(
        f"{where}: checkpoint.dir: required for a Kafka source: without checkpoints a run commits the offsets it"
        " read but keeps its model only in memory, so a restart would start a new model after those records (what"
        " was learned and the pending labels lost); set checkpoint.dir, or source.commit_without_checkpoint: true"
        " to run so anyway"
    )


def _check_cluster(config: dict, where: str) -> None:
    """A cluster learner (``cluster.delta_topic``) reads Kafka, keeps no checkpoints of its own (the delta log
    and the snapshots published are the cluster's), and learns with Pegasos in weight arrays: the one learner
    whose steps are recorded and replayed (see ``distribute.cluster``)."""
    if not config["cluster"]["delta_topic"]:
        return
    problem = None
    if config["source"]["type"] != "kafka":
        problem = "source.type must be kafka: the learners of a cluster share the partitions of a consumer group"
    elif config["checkpoint"]["dir"]:
        problem = (
            "checkpoint.dir must not be set: a cluster's checkpoint is its delta log and the snapshots published to"
            " publish.topic, from which a learner starts"
        )
    elif config["model"]["kind"] != "linear":
        problem = (
            f"model.kind must be linear, not {config['model']['kind']}: cluster learners share Pegasos steps, which"
            " only PegasosClassifier records and replays"
        )
    elif isinstance(config["model"].get("lambda_", "auto"), str):
        problem = 'model.lambda_ must be a number, not "auto": cluster learners share the steps of one Pegasos'
    elif config["model"].get("n_features") is None and config["features"].get("hash_bits") is None:
        problem = "needs weights in arrays: set features.hash_bits (or model.n_features) for integer feature columns"
    if problem is not None:
        raise ConfigError(f"{where}: cluster.delta_topic is set, so {problem}")


def _check_requirements(config: dict, where: str) -> None:
    """Keys that become required by the choice of another."""
    _check_required_keys(config, where)
    _check_publish(config["publish"], config["checkpoint"]["dir"] or config["cluster"]["delta_topic"], where)
    if config["metrics"]["port"] is None and config["metrics"]["host"] != SCHEMA["metrics"]["host"].default:
        raise ConfigError(f"{where}: metrics.port: required when metrics.host is set")
    labels = config["source"]["labels"]
    if (labels["positive"] is None) != (labels["negative"] is None):
        raise ConfigError(f"{where}: source.labels: give both positive and negative, or neither")
    _check_weight_columns(config, where)


def _check_required_keys(config: dict, where: str) -> None:
    """The keys a source, output or dead-letter type needs: a path for a file, a topic for Kafka."""
    needs = {
        ("source", "file"): ("path",),
        ("source", "maildir"): ("path",),
        ("source", "kafka"): ("topics",),
        ("output", "file"): ("path",),
        ("output", "kafka"): ("topic",),
    }
    for (section, kind), keys in needs.items():
        if config[section]["type"] == kind:
            for key in keys:
                if not config[section].get(key):
                    raise ConfigError(f"{where}: {section}.{key}: required when {section}.type is {kind}")
    dead = config["errors"]["dead_letter"]
    if dead["type"] == "file" and not dead.get("path"):
        raise ConfigError(f"{where}: errors.dead_letter.path: required when errors.dead_letter.type is file")
    if dead["type"] == "kafka" and not dead.get("topic"):
        raise ConfigError(f"{where}: errors.dead_letter.topic: required when errors.dead_letter.type is kafka")


def _check_weight_columns(config: dict, where: str) -> None:
    """Weights in arrays (``model.n_features`` or ``model.max_features``) need int features: svmlight's columns,
    or features hashed into at most as many columns."""
    model, bits = config["model"], config["features"].get("hash_bits")
    key = "max_features" if model.get("max_features") is not None else "n_features"
    columns = model.get(key)
    names_are_columns = bits is None and config["source"]["format"] == "svmlight"
    if columns is not None and not names_are_columns and (bits is None or columns < 2**bits):
        raise ConfigError(
            f"{where}: model.{key}: {columns} weight columns need int features: svmlight names (their columns),"
            f" or features hashed into at most as many (features.hash_bits: {bits}; 2**hash_bits must not exceed"
            " n_features)"
        )


def _check_publish(publish: dict, checkpoints: str | None, where: str) -> None:
    """A model topic is published to from checkpoints (``checkpoints``: their directory, or a cluster's delta topic,
    whose learners publish the cluster's model); its schedule and record size need a topic."""
    if publish["topic"] is None:
        for key in ("every_events", "every_seconds"):
            if publish[key] is not None:
                raise ConfigError(f"{where}: publish.topic: required when publish.{key} is set")
        if publish["max_record_bytes"] != SCHEMA["publish"]["max_record_bytes"].default:
            raise ConfigError(f"{where}: publish.topic: required when publish.max_record_bytes is set")
    elif not checkpoints:
        raise ConfigError(
            f"{where}: checkpoint.dir: required when publish.topic is set: a published model is a checkpoint,"
            " published once it is written"
        )


#: The most folders ``source.folders`` may name.
MAX_FOLDERS = 1024

#: The endings of file names that say the file's format (each also followed by ``.gz``): an mbox, one raw message.
FORMAT_SUFFIXES = {".mbox": "mbox", ".eml": "raw"}


def input_format(path: str) -> str | None:
    """The format the name of the file ``path`` says (`FORMAT_SUFFIXES`, in any case), if it says one."""
    name = path.lower().removesuffix(".gz")
    return next((format for suffix, format in FORMAT_SUFFIXES.items() if name.endswith(suffix)), None)


def _check_mail(given: dict, config: dict, multiclass: bool, where: str) -> None:
    """The mail sources: a format that fits the source type, email features, and labels (``source.label``,
    ``source.folders``) only where messages take them, each one the learner can learn. A maildir's
    format, one message per file, is set to raw (``given``, the source section as written, may say
    raw or nothing); a file's, when ``given`` says none, to the one its name says (`input_format`)."""
    source = config["source"]
    kind, format = source["type"], _settle_format(given, source, where)
    mail = format in MAIL_FORMATS
    if format == "mbox" and kind == "kafka":
        raise ConfigError(
            f"{where}: source.format: mbox is read from a file or standard input; a Kafka record is one event:"
            " expected json | svmlight | raw (one message a record)"
        )
    if mail and config["features"]["type"] != "email":
        raise ConfigError(
            f"{where}: features.type: messages (source.format {format}) are text: expected email,"
            f" got {_shown(config['features']['type'])}"
        )
    labels: dict[str, object] = {}
    if source["label"] is not None:
        if not mail:
            raise ConfigError(
                f"{where}: source.label: only for mail (source.format mbox or raw, or source.type maildir);"
                f" the records of source.format {format} carry their own labels"
            )
        labels["source.label"] = source["label"]
    labels.update(_folder_labels(source["folders"], kind, where))
    if source["users"] != "none":
        _check_users(source["users"], kind, config["model"]["kind"], where)
    for path, label in labels.items():
        _check_label(label, path, source["labels"], multiclass, where)


def _check_users(users: str, kind: str, model: str, where: str) -> None:
    """``source.users`` names each message's user by its directory: a maildir's, for personal models."""
    if model != PERSONAL:
        raise ConfigError(
            f"{where}: source.users: {users}: users are for personal models (model.kind {PERSONAL}, e.g."
            f" --config {PERSONAL}), not model.kind {model}"
        )
    if kind != "maildir":
        raise ConfigError(
            f"{where}: source.users: {users} names each message's user by the directory it is in: only for a"
            f" maildir (source.type maildir, or --input DIR), not source.type {kind}"
        )


def _settle_format(given: dict, source: dict, where: str) -> str:
    """The source's format, set in ``source``: raw for a maildir (``given``, the source section as written, may
    say raw or nothing), and for a file that ``given`` gives none, the one its name says (`input_format`)."""
    if source["type"] == "file" and "format" not in given:
        source["format"] = input_format(source["path"]) or source["format"]
    if source["type"] == "maildir":
        if given.get("format", "raw") != "raw":
            raise ConfigError(
                f"{where}: source.format: a maildir holds one message per file: expected raw (or no source.format),"
                f" got {_shown(given['format'])}"
            )
        source["format"] = "raw"
    return source["format"]


def _folder_labels(folders: dict | None, kind: str, where: str) -> dict[str, object]:
    """The label of each folder of ``source.folders`` (a maildir's only) that gives one, by its key path; a
    ConfigError for too many folders, a name that is no string, or a label that is no label value."""
    labels: dict[str, object] = {}
    if folders is None:
        return labels
    if kind != "maildir":
        raise ConfigError(f"{where}: source.folders: only for source.type maildir, not {kind}")
    if len(folders) > MAX_FOLDERS:
        raise ConfigError(f"{where}: source.folders: expected at most {MAX_FOLDERS} folders, got {len(folders)}")
    for folder, label in folders.items():
        if not (isinstance(folder, str) and folder):
            raise ConfigError(
                f"{where}: source.folders: {_shown(folder)}: expected a folder name (a string; quote a number)"
            )
        if label is not None and not isinstance(label, (str, int, float)):
            raise ConfigError(
                f"{where}: source.folders.{folder}: expected a label value (or null: none), got {_shown(label)}"
            )
        if label is not None:
            labels[f"source.folders.{folder}"] = label
    return labels


def _check_label(label: object, path: str, mapping: dict, multiclass: bool, where: str) -> None:
    """``label`` (at ``path``) must be a label the messages' learner takes: one of ``source.labels``
    when they are mapped, else a binary class for a binary learner."""
    if isinstance(label, float) and not math.isfinite(label):
        raise ConfigError(f"{where}: {path}: expected a label value, got {_shown(label)}")
    if mapping["positive"] is not None:
        if label not in (mapping["positive"], mapping["negative"]):
            raise ConfigError(
                f"{where}: {path}: {_shown(label)} is neither source.labels.positive {_shown(mapping['positive'])}"
                f" nor source.labels.negative {_shown(mapping['negative'])}"
            )
    elif not multiclass:
        try:
            binary_sign(label)
        except ValueError:
            raise ConfigError(
                f"{where}: {path}: {_shown(label)} is not a binary label (true | false, 1 | 0 | -1); map it with"
                " source.labels: {positive: ..., negative: ...}"
            ) from None


def parse_override(text: str, given_as: str | None = None) -> tuple[list[str], Any]:
    """``dotted.key=value`` as (["dotted", "key"], value parsed as YAML); an error names the
    override as ``given_as`` (by default ``--set 'TEXT'``)."""
    where = given_as or set_flag(text)
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise ConfigError(f"{where}: expected dotted.key=value")
    return key.split("."), _yaml(value, where)


def set_flag(text: str) -> str:
    """How an error names the override ``text``: ``--set 'TEXT'``, or ``--set KEY=...`` for a secret."""
    key = text.partition("=")[0]
    return f"--set {key}=..." if key.split(".")[-1] in SECRETS else f"--set {text!r}"


def apply_override(config: dict, keys: list[str], value: Any, given_as: str | None = None) -> None:
    """Set ``config[k1][k2]... = value``, creating mappings on the way; an error names the override
    as ``given_as`` (by default ``--set dotted.key``)."""
    node = config
    for key in keys[:-1]:
        node = node.setdefault(key, {})
        if not isinstance(node, dict):
            raise ConfigError(f"{given_as or '--set ' + '.'.join(keys)}: {key} is not a mapping")
    node[keys[-1]] = value


#: The directory of the installed package, where its data and its shipped configurations are.
_PACKAGE_DIR = Path(__file__).resolve().parents[1]

#: The prefix of a path that names a file of the installed package: ``package:data/spam-sample.jsonl.gz``.
PACKAGE_PREFIX = "package:"


def shipped_configs() -> dict[str, Path]:
    """The configurations shipped with the package, by name (the file name less ``.yaml``), sorted: those the
    build put into the package (``pegasos_stream/configs``), or, in a source checkout, the ``configs`` folder."""
    folder = _PACKAGE_DIR / "configs"
    if not folder.is_dir():
        folder = _PACKAGE_DIR.parent / "configs"
    return {path.stem: path for path in sorted(folder.glob("*.yaml"))}


def config_file(name: str) -> Path:
    """The configuration file ``--config NAME`` stands for: the file NAME when it exists or has a directory
    part, else the shipped configuration of that name; a ConfigError listing the shipped names otherwise."""
    path = Path(name)
    if path.exists() or len(path.parts) != 1:
        return path
    shipped = shipped_configs()
    if name in shipped:
        return shipped[name]
    raise ConfigError(
        f"--config {name}: no such file, and no shipped configuration of that name (shipped: {', '.join(shipped)})"
    )


def load_config(path: str | Path | None, overrides: Sequence[str] = (), given_as: Sequence[str] | None = None) -> dict:
    """Read, override and validate a configuration file (None: the defaults alone).

    Relative paths in the file are taken relative to the file, but those of a shipped configuration
    (`shipped_configs`) and of ``overrides`` (the command line) relative to the working directory: a
    shipped configuration writes where it is run, as a copy of it there would. A path ``package:NAME``
    (`PACKAGE_PREFIX`), in either, is the file NAME of the installed package (the bundled sample:
    ``package:data/...``). An error names the file when the file is at fault, else the override that is:
    as ``given_as`` names it (the flag it came from, one name per override), by default ``--set 'TEXT'``
    (a secret's value hidden).
    """
    where = str(path) if path else "<defaults>"
    raw: dict = {}
    if path:
        try:
            with open(path, "rb") as handle:
                content = handle.read(MAX_FILE_BYTES + 1)
        except OSError as error:
            raise ConfigError(f"{where}: cannot read: {error.strerror}") from None
        if len(content) > MAX_FILE_BYTES:
            raise ConfigError(f"{where}: larger than {MAX_FILE_BYTES} bytes: not a configuration file")
        raw = _yaml(content, where) or {}
        _resolve_paths(raw, None if _is_shipped(path) else Path(path).resolve().parent)
    return override_config(raw, where, overrides, given_as)


def override_config(
    raw: dict, where: str, overrides: Sequence[str] = (), given_as: Sequence[str] | None = None
) -> dict:
    """``raw`` (a configuration as a file gives it, or as a checkpoint stores it) with ``overrides``
    applied, validated; an error names ``where`` or the override at fault (see `load_config`)."""
    names = list(given_as) if given_as is not None else [set_flag(text) for text in overrides]
    configs = [raw]  # the file alone, then with each override in turn
    for text, name in zip(overrides, names):
        configs.append(copy.deepcopy(configs[-1]))
        apply_override(configs[-1], *parse_override(text, name), name)
        _resolve_paths(configs[-1], None)
    try:
        return validate(configs[-1], where)
    except ConfigError:
        _blame(configs, [where, *names])
        raise


def _blame(configs: list[dict], names: list[str]) -> None:
    """Raise the error of the configuration after the last one of ``configs`` that is valid (the
    file alone, then with each override in turn), naming what made it invalid: the file, when none
    is valid, else the override that follows it."""
    last_valid = -1
    for index, config in enumerate(configs[:-1]):
        try:
            validate(config, names[index])
        except ConfigError:
            continue
        last_valid = index
    validate(configs[last_valid + 1], names[last_valid + 1])


def _is_shipped(path: str | Path) -> bool:
    """Whether ``path`` is the file of a shipped configuration."""
    return Path(path).resolve() in {shipped.resolve() for shipped in shipped_configs().values()}


#: The file paths a configuration may hold; relative ones are relative to the configuration file.
_PATH_KEYS = (
    ("source", "path"),
    ("output", "path"),
    ("errors", "dead_letter", "path"),
    ("checkpoint", "dir"),
    ("checkpoint", "key_file"),
    *((*section, key) for section in (("kafka",), *KAFKA_CLIENTS) for key in _KAFKA_FILES),
)


def _resolve_paths(raw: dict, base: Path | None) -> None:
    """Each path ``package:NAME`` becomes the package's file NAME; each other relative path is taken relative to
    ``base`` (None: left as it is)."""
    for keys in _PATH_KEYS:
        node: dict | None = raw
        for key in keys[:-1]:
            node = node.get(key) if isinstance(node, dict) else None
        value = node.get(keys[-1]) if isinstance(node, dict) else None
        if node is None or not isinstance(value, str):
            continue
        if value.startswith(PACKAGE_PREFIX):
            node[keys[-1]] = str(_PACKAGE_DIR / value[len(PACKAGE_PREFIX) :])
        elif base is not None:
            node[keys[-1]] = str(base / value)


def without_paths(config: dict) -> dict:
    """A copy of ``config`` that opens no file: each path of `_PATH_KEYS` null (but the ``checkpoint`` section's,
    which ``serve`` and ``predict`` neither write nor read), a file or maildir source standard input (a maildir's
    folders left out), a file output standard output, a file dead-letter sink none. A checkpoint's stored
    configuration is taken so: a checkpoint is data, and only the files a user names are opened."""
    public = copy.deepcopy(config)
    for keys in (keys for keys in _PATH_KEYS if keys[0] != "checkpoint"):
        section = _section(public, keys[:-1])
        if section.get(keys[-1]) is not None:
            section[keys[-1]] = None
    for keys, kinds, instead in (
        (("source",), ("file", "maildir"), "stdin"),
        (("output",), ("file",), "stdout"),
        (("errors", "dead_letter"), ("file",), "none"),
    ):
        section = _section(public, keys)
        if section.get("type") in kinds:
            section["type"] = instead
    if config["source"].get("type") == "maildir":
        public["source"]["folders"] = None  # (a maildir's folders: no folders on standard input)
    return public


#: Sections that say how a run goes, not what the job learns: left out of `config_hash`.
_RUN_SECTIONS = ("run", "metrics", "publish", "cluster")

#: The keys of ``source`` that say which input a run reads and how that input is laid out and labelled, not what
#: the job learns: left out of `config_hash` (a source position says which input it was taken from).
INPUT_KEYS = ("type", "path", "topics", "client", "format", "fields", "label", "folders", "users")

#: The keys of ``checkpoint`` that say where the key that signs checkpoints is: left out of `config_hash` (signing a
#: job's checkpoints, or moving its key, leaves it the same job).
KEY_SETTINGS = ("key_file", "key_env")


def config_hash(config: dict) -> str:
    """SHA-256 of the configuration's canonical JSON form, less the ``run``, ``metrics``, ``publish`` and
    ``cluster`` sections (how long this particular run goes on, where it shows its figures and publishes its
    model, how often a cluster learner syncs, do not change the job), less the ``kafka`` section (its settings
    count where they are used: the validated Kafka client sections hold them), less the input (`INPUT_KEYS`:
    the file, directory or topics read, with either Kafka client, their format, fields and labels: a run may go
    on learning from another input), less the secrets (`SECRETS`: a password changed is the same job, and a
    digest is no place for a password), less where the checkpoint key is (`KEY_SETTINGS`) and less every key at
    its default value (same value, same type): a key a later version adds with a default leaves the hash, and the
    checkpoints written before it, as they were."""
    public = without_secrets(config)
    for key in INPUT_KEYS:
        public.get("source", {}).pop(key, None)
    for key in KEY_SETTINGS:
        public.get("checkpoint", {}).pop(key, None)
    job = _without_defaults(
        {section: value for section, value in public.items() if section not in (*_RUN_SECTIONS, "kafka")},
        _DEFAULTS,
    )
    return _digest(job)


def written_for(manifest: dict, config: dict) -> bool:
    """Whether a checkpoint's ``manifest`` is of the job ``config`` configures: its digest is ``config_hash``'s, or
    (a checkpoint written while the input was part of the digest) its stored configuration hashes to it now."""
    digest = config_hash(config)
    if manifest.get("config_sha256") == digest:
        return True
    stored = manifest.get("config")
    return isinstance(stored, dict) and isinstance(stored.get("source", {}), dict) and config_hash(stored) == digest


def _digest(job: dict) -> str:
    """The SHA-256 of ``job`` as canonical JSON (sorted keys, no spaces), in hex."""
    return sha256(json.dumps(job, sort_keys=True, separators=(",", ":"), default=str).encode("utf-8")).hexdigest()


def learning_hash(config: dict) -> str:
    """SHA-256 of what decides the steps a learner takes on a record: the ``model`` and ``features`` sections, how
    ``source`` turns a record into an example (its format, fields and labels), and how a cluster merges what its
    learners learned (``cluster.merge``). A cluster's learners must agree on it; they may differ in everything
    else (their outputs, their error handling, their schedules). With text features, every format gives the same
    examples, a message's text (a JSON event's, an mbox's or a maildir's messages), so that a model trained on one
    learns on from another, a maildir of feedback say: the format and fields are then left out."""
    source = config["source"]
    kept = ("labels", "label") if config["features"]["type"] == "email" else ("format", "fields", "labels", "label")
    job = {
        "model": config["model"],
        "features": config["features"],
        "source": {key: source.get(key) for key in kept},
        "merge": config["cluster"]["merge"],
    }
    return _digest(job)


def without_secrets(config: dict) -> dict:
    """A copy of ``config`` without its secrets: each of `SECRETS` null in the connection settings, and left
    out of the free-form client settings (what a checkpoint stores of the configuration)."""
    public = copy.deepcopy(config)
    for path in (("kafka",), *KAFKA_CLIENTS):
        section = _section(public, path)
        for key in SECRETS:
            if key in section:
                section[key] = None
        for settings in ("consumer", "producer"):
            if isinstance(section.get(settings), dict):
                section[settings] = {key: value for key, value in section[settings].items() if key not in SECRETS}
    return public


def _without_defaults(node: dict, defaults: dict) -> dict:
    """``node`` less its keys whose value is their default in ``defaults`` (nested sections alike)."""
    kept = {}
    for key, value in node.items():
        default = defaults.get(key, _NO_DEFAULT)
        if isinstance(value, dict) and isinstance(default, dict):
            value = _without_defaults(value, default)
            if not value:
                continue
        elif type(value) is type(default) and value == default:
            continue
        kept[key] = value
    return kept
