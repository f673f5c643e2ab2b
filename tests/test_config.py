"""Configuration files: the shipped ones, validation messages, ``--set`` overrides, paths, hashing."""

from __future__ import annotations

import copy
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pegasos_stream import cli
from pegasos_stream.cli import config as config_module
from pegasos_stream.cli import options
from pegasos_stream.cli.assemble import ARRAY_COLUMNS, build_features, build_model
from pegasos_stream.cli.config import (
    INPUT_KEYS,
    KAFKA_CONNECTION,
    KEY_SETTINGS,
    SECRETS,
    ConfigError,
    apply_override,
    check_kafka_checkpoints,
    config_file,
    config_hash,
    input_format,
    kafka_client_settings,
    load_config,
    parse_override,
    shipped_configs,
    validate,
    without_secrets,
    written_for,
)
from pegasos_stream.features import DictHasher
from pegasos_stream.persist.checkpoint import latest_valid

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))
SAMPLE = ROOT / "pegasos_stream" / "data" / "spam-sample.jsonl.gz"
BIN = shutil.which("pegasos-stream", path=str(Path(sys.executable).parent)) or shutil.which("pegasos-stream")


def _write(path: Path, config: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


# -- the shipped configurations ------------------------------------------------------------


def test_configs_are_shipped():
    assert {path.name for path in CONFIGS} >= {"spam.yaml", "kernel-rbf.yaml", "replay-svmlight.yaml", "kafka.yaml"}


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_shipped_config_loads_and_validates(path):
    config = load_config(path)
    # every section of the schema is present after the defaults are merged in
    assert set(config) == {
        "model",
        "features",
        "source",
        "output",
        "evaluation",
        "errors",
        "delayed_labels",
        "run",
        "checkpoint",
        "publish",
        "cluster",
        "metrics",
        "kafka",
    }
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    # what the file says is what was loaded (paths aside, which become absolute)
    assert config["model"]["kind"] == raw["model"]["kind"]
    assert config["source"]["type"] == raw["source"]["type"]
    assert config["features"]["type"] == raw["features"]["type"]
    # validating the result again changes nothing
    assert validate(copy.deepcopy(config), str(path)) == config


def test_spam_config_points_at_the_bundled_sample():
    config = load_config(ROOT / "configs" / "spam.yaml")
    assert Path(config["source"]["path"]).resolve() == SAMPLE.resolve()
    assert Path(config["source"]["path"]).is_absolute()
    assert config["source"]["labels"] == {"positive": "spam", "negative": "ham"}
    assert config["model"] == {
        "kind": "mixture",
        "lambdas": [1e-5],
        "lambda_t0": 0.3,
        "logistics": [[0.7, 1e-6]],
        "share": 8.0,
        "pegasos_logistics": [[1e-5, 5623]],
        "normalized_hinges": [4.0],
        "n_features": 2**19,
    }
    assert config["features"] == {
        "type": "email",
        "reader": "bytes",
        "char_ngram": 4,
        "words": True,
        "shapes": True,
        "max_chars": 3000,
        "binary": True,
        "normalize": True,
        "hash_bits": 19,
    }


def test_kafka_config_validates_without_a_broker():
    config = load_config(ROOT / "configs" / "kafka.yaml")
    assert config["source"]["topics"] == ["mail"]
    assert config["output"]["topic"] == "mail-predictions"
    assert config["errors"]["dead_letter"]["topic"] == "mail-rejected"
    assert config["source"]["consumer"]["session_timeout_ms"] == 6000
    assert config["delayed_labels"] == {"max_pending": 100000, "max_age_seconds": 604800}


def test_defaults_alone_validate():
    config = load_config(None)
    assert config["model"] == {"kind": "linear"}
    assert config["source"]["type"] == "stdin"
    assert config["source"]["max_bytes"] == 1_000_000
    connection = dict.fromkeys(KAFKA_CONNECTION) | {"bootstrap_servers": "127.0.0.1:9092"}
    assert config["kafka"] == connection
    assert config["errors"] == {
        "on_error": "skip",
        "dead_letter": {"type": "none", "path": None, **connection, "topic": None},
    }
    assert config["metrics"] == {"port": None, "host": "127.0.0.1"}  # no metrics served; loopback only when asked


# -- refused configurations: the message names the file, the key path and the expected form ---

REFUSED = [
    # (configuration, key path, a fragment of the expected form)
    ({"bogus": {"a": 1}}, "bogus", "expected one of: model, features, source"),
    ({"source": {"bogus": 1}}, "source.bogus", "expected one of:"),
    ({"source": {"fields": {"bogus": "b"}}}, "source.fields.bogus", "expected one of: id, label, text, user, x"),
    ({"errors": {"dead_letter": {"bogus": 1}}}, "errors.dead_letter.bogus", "expected one of:"),
    ({"model": {"bogus": 1}}, "model.bogus", "lambda_"),
    ({"features": {"type": "email", "bogus": 1}}, "features.bogus", "char_ngram"),
    ({"features": {"bogus": 1}}, "features.bogus", "takes no other keys"),
    ({"source": {"max_bytes": "x"}}, "source.max_bytes", "an integer >= 1"),
    ({"source": {"max_bytes": True}}, "source.max_bytes", "an integer >= 1"),
    ({"run": {"max_events": -1}}, "run.max_events", "an integer >= 0"),
    ({"source": {"format": "xml"}}, "source.format", "json | svmlight"),
    ({"source": {"type": "socket"}}, "source.type", "stdin | file | kafka"),
    ({"source": {"client": "librdkafka"}}, "source.client", "expected kafka-python | confluent, got 'librdkafka'"),
    ({"errors": {"on_error": "ignore"}}, "errors.on_error", "skip | stop"),
    ({"source": {"fields": "id"}}, "source.fields", "a mapping"),
    ({"evaluation": {"stats_every_seconds": -1}}, "evaluation.stats_every_seconds", "a number >= 0"),
    ({"model": {"lambda_": -1}}, "model.lambda_", "> 0"),
    (
        {"model": {"kind": "forest"}},
        "model.kind",
        "linear | grid | committee | mixture | adagrad | multiclass | kernel",
    ),
    ({"features": {"type": "email", "char_ngram": "x"}}, "features.char_ngram", "an integer >= 0"),
    ({"metrics": {"port": 0}}, "metrics.port", "a port number (1 to 65535), got 0"),
    ({"metrics": {"port": 65536}}, "metrics.port", "a port number (1 to 65535), got 65536"),
    ({"metrics": {"port": "9108"}}, "metrics.port", "a port number (1 to 65535), got '9108'"),
    ({"metrics": {"port": 9108.0}}, "metrics.port", "a port number (1 to 65535)"),
    ({"metrics": {"host": 127}}, "metrics.host", "a host name or address"),
    ({"metrics": {"port": 9108, "path": "/metrics"}}, "metrics.path", "unknown key (expected one of: host, port)"),
]


@pytest.mark.parametrize(
    "config, key_path, form", REFUSED, ids=[f"{path}:{i}" for i, (_, path, _) in enumerate(REFUSED)]
)
def test_refused_config_names_file_key_and_form(tmp_path, config, key_path, form):
    path = _write(tmp_path / "job.yaml", config)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    message = str(caught.value)
    assert message.startswith(str(path) + ": "), message
    assert key_path in message, f"key path {key_path!r} not named in: {message}"
    assert form in message, f"expected form {form!r} not shown in: {message}"


@pytest.mark.parametrize(
    "config, key_path, form",
    [
        # a constructor parameter that is not a bool is silently taken as truthy
        ({"model": {"fit_intercept": "false"}}, "model.fit_intercept", "true"),
        # NaN compares false with the minimum and is let through; max_age then expires everything
        ({"delayed_labels": {"max_age_seconds": float("nan")}}, "delayed_labels.max_age_seconds", "a number >= 0"),
    ],
    ids=["model.fit_intercept-string", "max_age_seconds-nan"],
)
def test_refused_wrong_values_beyond_the_listed_ones(tmp_path, config, key_path, form):
    path = _write(tmp_path / "job.yaml", config)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert key_path in str(caught.value) and form in str(caught.value)


def test_unreadable_or_invalid_yaml_names_the_file(tmp_path):
    missing = tmp_path / "missing.yaml"
    with pytest.raises(ConfigError, match=r"missing\.yaml: cannot read"):
        load_config(missing)
    broken = tmp_path / "broken.yaml"
    broken.write_text("model: [unclosed\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"broken\.yaml: not valid YAML"):
        load_config(broken)
    scalar = tmp_path / "scalar.yaml"
    scalar.write_text("42\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"scalar\.yaml: expected a mapping of sections"):
        load_config(scalar)


def test_a_bad_override_is_reported_against_the_override_and_a_bad_file_against_the_file(tmp_path):
    path = _write(tmp_path / "job.yaml", {"model": {"kind": "linear"}})
    with pytest.raises(ConfigError) as caught:
        load_config(path, ["model.lambda_=0.5", "source.format=xml"])
    assert str(caught.value).startswith(
        "--set 'source.format=xml': source.format: expected json | svmlight | mbox | raw, got 'xml'"
    )
    with pytest.raises(ConfigError) as caught:  # named as the command line gave it
        load_config(path, ["run.max_events=-1"], ["--max-events -1"])
    assert str(caught.value) == "--max-events -1: run.max_events: expected an integer >= 0, got -1"
    averaged = _write(tmp_path / "averaged.yaml", {"model": {"kind": "linear", "average": True}})
    with pytest.raises(ConfigError) as caught:  # the override makes a key of the file invalid
        load_config(averaged, ["model.lambda_=0.5", "model.kind=multiclass"])
    assert str(caught.value).startswith("--set 'model.kind=multiclass': model.average: unknown key")

    broken = _write(tmp_path / "broken.yaml", {"model": {"kind": "linear", "lambda_": -1}})
    with pytest.raises(ConfigError) as caught:
        load_config(broken, ["source.format=svmlight"])
    assert str(caught.value).startswith(f"{broken}: model.lambda_: ")
    assert load_config(broken, ["model.lambda_=0.5"])["model"]["lambda_"] == 0.5  # an override may mend the file
    with pytest.raises(ConfigError) as caught:  # ... and the next one break it again
        load_config(broken, ["model.lambda_=0.5", "source.format=xml"])
    assert str(caught.value).startswith("--set 'source.format=xml': source.format: ")


def test_cli_exits_2_on_configuration_error(capsys):
    assert cli.main(["eval", "--set", "source.format=xml"]) == 2
    err = capsys.readouterr().err
    assert "configuration error:" in err and "source.format" in err and "json | svmlight" in err
    assert cli.main(["run"]) == 2  # run has no default configuration
    assert "run needs --config" in capsys.readouterr().err


# -- required keys -------------------------------------------------------------------------

REQUIRED = [
    ({"source": {"type": "file"}}, "source.path: required when source.type is file"),
    ({"source": {"type": "kafka"}}, "source.topics: required when source.type is kafka"),
    ({"output": {"type": "kafka"}}, "output.topic: required when output.type is kafka"),
    ({"output": {"type": "file"}}, "output.path: required when output.type is file"),
    ({"errors": {"dead_letter": {"type": "file"}}}, "errors.dead_letter.path: required"),
    ({"errors": {"dead_letter": {"type": "kafka"}}}, "errors.dead_letter.topic: required"),
    ({"source": {"labels": {"positive": "spam"}}}, "source.labels: give both positive and negative, or neither"),
    ({"source": {"labels": {"negative": "ham"}}}, "source.labels: give both positive and negative, or neither"),
    ({"metrics": {"host": "0.0.0.0"}}, "metrics.port: required when metrics.host is set"),
]


@pytest.mark.parametrize("config, message", REQUIRED, ids=[m.split(":")[0] for _, m in REQUIRED])
def test_required_keys(tmp_path, config, message):
    path = _write(tmp_path / "job.yaml", config)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value) == f"{path}: {message}" or str(caught.value).startswith(f"{path}: {message}")


def test_required_keys_satisfied(tmp_path):
    config = load_config(
        None,
        [
            "source.type=kafka",
            "source.topics=[mail]",
            "output.type=kafka",
            "output.topic=out",
            "source.labels={positive: spam, negative: ham}",
        ],
    )
    assert config["source"]["topics"] == ["mail"] and config["output"]["topic"] == "out"
    assert load_config(None, ["source.labels.positive=1", "source.labels.negative=0"])["source"]["labels"] == {
        "positive": 1,
        "negative": 0,
    }


# -- overrides -----------------------------------------------------------------------------


def test_parse_override_reads_yaml_values():
    assert parse_override("source.topics=[mail]") == (["source", "topics"], ["mail"])
    assert parse_override("source.topics=[a, b]") == (["source", "topics"], ["a", "b"])
    assert parse_override("model.lambda_=0.001") == (["model", "lambda_"], 1e-3)
    assert parse_override("model.lambda_=1.0e-3") == (["model", "lambda_"], 1e-3)
    assert parse_override("run.max_events=10") == (["run", "max_events"], 10)
    assert parse_override("features.binary=false") == (["features", "binary"], False)
    assert parse_override("source.labels={positive: spam, negative: ham}") == (
        ["source", "labels"],
        {"positive": "spam", "negative": "ham"},
    )
    assert parse_override("output.path=a=b.jsonl") == (["output", "path"], "a=b.jsonl")  # first '=' splits
    assert parse_override("run.max_events=") == (["run", "max_events"], None)
    for bad in ("run.max_events", "=3", ""):
        with pytest.raises(ConfigError, match=r"expected dotted\.key=value"):
            parse_override(bad)


def test_override_with_plain_exponent_is_a_number():
    """``--set model.lambda_=1e-3`` is how anyone writes λ; PyYAML's YAML 1.1 resolver reads
    ``1e-3`` (no dot) as a string, which the learner then refuses."""
    assert parse_override("model.lambda_=1e-3") == (["model", "lambda_"], 1e-3)
    assert load_config(None, ["model.lambda_=1e-3"])["model"]["lambda_"] == 1e-3


def test_apply_override_creates_nested_mappings():
    config: dict = {}
    apply_override(config, ["errors", "dead_letter", "type"], "file")
    apply_override(config, ["errors", "dead_letter", "path"], "dl.jsonl")
    apply_override(config, ["errors", "on_error"], "stop")
    assert config == {"errors": {"dead_letter": {"type": "file", "path": "dl.jsonl"}, "on_error": "stop"}}
    with pytest.raises(ConfigError, match="on_error is not a mapping"):
        apply_override(config, ["errors", "on_error", "deeper"], 1)


def test_overrides_apply_over_the_file(tmp_path):
    path = _write(tmp_path / "job.yaml", {"model": {"kind": "linear", "lambda_": 0.1}, "source": {"topics": ["x"]}})
    config = load_config(path, ["model.lambda_=0.5", "source.topics=[mail]", "delayed_labels.max_pending=7"])
    assert config["model"] == {"kind": "linear", "lambda_": 0.5}
    assert config["source"]["topics"] == ["mail"]
    assert config["delayed_labels"] == {"max_pending": 7, "max_age_seconds": 7 * 24 * 3600.0}
    # a later override wins
    assert load_config(path, ["model.lambda_=0.5", "model.lambda_=0.25"])["model"]["lambda_"] == 0.25


# -- relative paths ------------------------------------------------------------------------


def test_relative_paths_in_a_file_are_relative_to_the_file(tmp_path, monkeypatch):
    conf_dir = tmp_path / "conf"
    path = _write(
        conf_dir / "job.yaml",
        {
            "source": {"type": "file", "path": "data/in.jsonl"},
            "output": {"type": "file", "path": "../out/predictions.jsonl"},
            "errors": {"dead_letter": {"type": "file", "path": "rejected.jsonl"}},
        },
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    for given in (path, os.path.relpath(path, elsewhere)):  # absolute, and relative to the CWD
        config = load_config(given)
        assert Path(config["source"]["path"]) == conf_dir.resolve() / "data" / "in.jsonl"
        assert Path(config["output"]["path"]).resolve() == (tmp_path / "out" / "predictions.jsonl").resolve()
        assert Path(config["errors"]["dead_letter"]["path"]) == conf_dir.resolve() / "rejected.jsonl"
    absolute = tmp_path / "abs.jsonl"
    config = load_config(_write(conf_dir / "abs.yaml", {"source": {"type": "file", "path": str(absolute)}}))
    assert Path(config["source"]["path"]) == absolute


def test_override_paths_are_relative_to_the_working_directory(tmp_path, monkeypatch):
    conf_dir = tmp_path / "conf"
    path = _write(conf_dir / "job.yaml", {"source": {"type": "file", "path": "in.jsonl"}})
    monkeypatch.chdir(tmp_path)
    config = load_config(path, ["source.path=cwd-in.jsonl", "output.type=file", "output.path=sub/out.jsonl"])
    assert config["source"]["path"] == "cwd-in.jsonl"
    assert config["output"]["path"] == "sub/out.jsonl"


def test_cli_input_relative_to_cwd_config_relative_to_file(tmp_path, monkeypatch, capsys):
    """End to end: the file's own path is found next to it; --input is found in the CWD."""
    conf_dir, work = tmp_path / "conf", tmp_path / "work"
    work.mkdir()
    lines = [json.dumps({"id": i, "x": {"a": float(i % 2) - 0.5}, "label": i % 2 == 1}) for i in range(6)]
    (conf_dir / "data").mkdir(parents=True)
    (conf_dir / "data" / "events.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (work / "other.jsonl").write_text("\n".join(lines[:4]) + "\n", encoding="utf-8")
    _write(conf_dir / "job.yaml", {"source": {"type": "file", "path": "data/events.jsonl"}})
    monkeypatch.chdir(work)
    assert cli.main(["eval", "--json", "--config", "../conf/job.yaml"]) == 0
    assert json.loads(capsys.readouterr().out)["events"] == 6
    assert cli.main(["eval", "--json", "--config", "../conf/job.yaml", "--input", "other.jsonl"]) == 0
    assert json.loads(capsys.readouterr().out)["events"] == 4


# -- shipped configurations, by name ---------------------------------------------------------


def test_a_shipped_configuration_is_named_from_any_directory(tmp_path, monkeypatch, capsys):
    assert shipped_configs() == {path.stem: path for path in CONFIGS}  # a checkout: its configs folder
    monkeypatch.chdir(tmp_path)
    assert config_file("spam") == ROOT / "configs" / "spam.yaml"
    assert cli.main(["eval", "--json", "--config", "spam", "--max-events", "20"]) == 0
    assert json.loads(capsys.readouterr().out)["events"] == 20
    assert cli.main(["eval", "--json", "--max-events", "20"]) == 0  # the default job: the same, by name
    assert json.loads(capsys.readouterr().out)["events"] == 20


def test_a_file_is_taken_before_a_name_and_a_path_stays_a_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _write(tmp_path / "spam", {"model": {"kind": "linear"}})
    assert config_file("spam") == Path("spam") and load_config(config_file("spam"))["model"] == {"kind": "linear"}
    assert config_file("sub/kafka") == Path("sub/kafka")  # a path is never a name
    with pytest.raises(ConfigError, match=r"^sub/kafka: cannot read"):
        load_config(config_file("sub/kafka"))


def test_an_unknown_name_is_one_line_listing_the_shipped_names(capsys):
    assert cli.main(["eval", "--config", "spma"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "configuration error: --config spma: no such file, and no shipped configuration of that name"
        " (shipped: kafka, kernel-rbf, personal, replay-svmlight, spam)\n"
    )
    assert cli.main(["configs", "spma"]) == 2
    assert capsys.readouterr().err == (
        "configuration error: no shipped configuration 'spma'"
        " (shipped: kafka, kernel-rbf, personal, replay-svmlight, spam)\n"
    )


def test_configs_lists_the_shipped_ones_with_their_first_comment_line(capsys):
    assert cli.main(["configs"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in listed] == [path.stem for path in CONFIGS]
    for line, path in zip(listed, CONFIGS):
        first = next(text for text in path.read_text(encoding="utf-8").splitlines() if text.startswith("#"))
        assert line.split(None, 1)[1] == first[1:].strip()
    assert listed[-1].split(None, 1)[1] == "Continuous email spam filtering: raw RFC 822 messages in, a spam score out."


def test_a_printed_configuration_starts_a_file_that_runs_anywhere(tmp_path, monkeypatch, capsys):
    assert cli.main(["configs", "spam"]) == 0
    text = capsys.readouterr().out
    assert text == (ROOT / "configs" / "spam.yaml").read_text(encoding="utf-8")
    mine = tmp_path / "mine" / "filter.yaml"
    mine.parent.mkdir()
    mine.write_text(text, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    assert Path(load_config(mine)["source"]["path"]) == SAMPLE.resolve()
    assert cli.main(["eval", "--json", "--config", "mine/filter.yaml", "--max-events", "5"]) == 0
    assert json.loads(capsys.readouterr().out)["learned"] == 5


def test_a_package_path_names_a_file_of_the_package_in_a_file_and_in_an_override(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = _write(tmp_path / "conf" / "job.yaml", {"source": {"type": "file", "path": "package:data/x.jsonl"}})
    assert Path(load_config(path)["source"]["path"]) == SAMPLE.resolve().parent / "x.jsonl"
    sample = load_config(path, ["source.path=package:data/spam-sample.jsonl.gz"])["source"]["path"]
    assert Path(sample) == SAMPLE.resolve()
    assert load_config(path, ["source.path=data/x.jsonl"])["source"]["path"] == "data/x.jsonl"  # the CWD's, as before


# -- config_hash ---------------------------------------------------------------------------


def _leaves(node: dict, prefix=()):
    for key, value in node.items():
        if isinstance(value, dict) and value:
            yield from _leaves(value, prefix + (key,))
        else:
            yield prefix + (key,), value


def _changed(value):
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, str):
        return value + "x"
    if isinstance(value, list):
        return value + ["x"]
    if isinstance(value, dict):
        return {**value, "x": 1}
    return 1  # None


def test_config_hash_is_stable():
    config = load_config(ROOT / "configs" / "kafka.yaml")
    digest = config_hash(config)
    assert len(digest) == 64 and int(digest, 16) >= 0
    assert config_hash(copy.deepcopy(config)) == digest
    reordered = {section: dict(reversed(list(config[section].items()))) for section in reversed(list(config))}
    assert config_hash(reordered) == digest
    assert config_hash(load_config(ROOT / "configs" / "kafka.yaml")) == digest


def test_config_hash_is_the_same_with_either_kafka_client():
    """Either client reads and commits the same offsets into the same checkpoints: a run may change its
    client and resume."""
    config = load_config(ROOT / "configs" / "kafka.yaml")
    assert config["source"]["client"] == "kafka-python"
    confluent = load_config(ROOT / "configs" / "kafka.yaml", ["source.client=confluent"])
    assert config_hash(confluent) == config_hash(config)


def test_config_hash_is_stable_across_processes():
    code = (
        "from pegasos_stream.cli.config import load_config, config_hash;"
        f"print(config_hash(load_config({str(ROOT / 'configs' / 'kafka.yaml')!r})))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "987"}
    other = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert other.stdout.strip() == config_hash(load_config(ROOT / "configs" / "kafka.yaml"))


@pytest.mark.parametrize("name", ["spam.yaml", "kafka.yaml"])
def test_config_hash_ignores_keys_at_their_default(name):
    """A checkpoint written before a key existed (its configuration lacks the key) matches the configuration
    that has it at its default; the same key at another value, or at its default of another type, does not."""
    config = load_config(ROOT / "configs" / name)
    digest = config_hash(config)
    for section, key in (("source", "max_bytes"), ("evaluation", "exact_auc")):  # keys added with a default
        older = copy.deepcopy(config)
        default = older[section].pop(key)
        assert config_hash(older) == digest, f"{section}.{key}"
        other = copy.deepcopy(config)
        other[section][key] = _changed(default)
        assert config_hash(other) != digest, f"{section}.{key}"
    typed = copy.deepcopy(config)
    typed["delayed_labels"]["max_pending"] = float(typed["delayed_labels"]["max_pending"])
    assert config_hash(typed) != digest


@pytest.mark.parametrize("name", ["spam.yaml", "kafka.yaml"])
def test_config_hash_changes_with_any_value(name):
    config = load_config(ROOT / "configs" / name)
    digest = config_hash(config)
    # Not part of the job the hash identifies: the run, metrics, publish and cluster sections (how long this run
    # goes on, where it serves its figures and publishes its model, how often a cluster learner syncs), the kafka
    # section (the validated client sections hold its settings, and the hash counts them there), the input (the
    # file or topics read, with either Kafka client, their format, fields and labels: a run may go on learning
    # from another input), the passwords (a password changed is the same job, and a digest is no place for one) and
    # where the checkpoint key is (signing a job's checkpoints leaves it the same job).
    ignored = [
        keys
        for keys, _ in _leaves(config)
        if keys[0] in ("run", "metrics", "publish", "cluster", "kafka")
        or keys[-1] in SECRETS
        or (keys[0] == "source" and keys[1] in INPUT_KEYS)
        or (keys[0] == "checkpoint" and keys[1] in KEY_SETTINGS)
    ]
    leaves = [(keys, value) for keys, value in _leaves(config) if keys not in ignored]
    assert len(leaves) > 30 and len(ignored) > 10
    for keys in ignored:
        other = copy.deepcopy(config)
        node = other
        for key in keys[:-1]:
            node = node[key]
        node[keys[-1]] = "12345"
        assert config_hash(other) == digest, f"changing {'.'.join(keys)} changed the hash"
    seen = {digest}
    for keys, value in leaves:
        changed = copy.deepcopy(config)
        node = changed
        for key in keys[:-1]:
            node = node[key]
        node[keys[-1]] = _changed(value)
        new = config_hash(changed)
        assert new != digest, f"changing {'.'.join(keys)} left the hash unchanged"
        seen.add(new)
    assert len(seen) == len(leaves) + 1
    # types matter too: 1 and 1.0 and true are different settings
    a = copy.deepcopy(config)
    a["delayed_labels"]["max_pending"] = 1
    b = copy.deepcopy(config)
    b["delayed_labels"]["max_pending"] = 1.0
    assert config_hash(a) != config_hash(b)


def test_a_checkpoint_of_another_input_is_of_the_same_job_and_one_of_another_model_is_not(tmp_path):
    """The input (its path, type, format and labels) leaves the hash; a checkpoint written while it was part of
    the hash is of the job its stored configuration, hashed now, names."""
    spam = ROOT / "configs" / "spam.yaml"
    config = load_config(spam, [f"source.path={tmp_path / 'a.mbox'}", "source.format=mbox", "source.label=spam"])
    other = load_config(spam, ["source.type=stdin", "source.format=raw", "source.label=ham"])
    assert config_hash(other) == config_hash(config) == config_hash(load_config(spam))
    assert config_hash(load_config(spam, ["source.labels.positive=SPAM"])) != config_hash(config)
    older = {"config": without_secrets(config), "config_sha256": "the digest of the configuration and its input"}
    assert written_for(older, other)
    assert not written_for(older, load_config(ROOT / "configs" / "spam.yaml", ["model.lambdas=[0.1]"]))
    assert not written_for({"config_sha256": "another digest"}, other)


@pytest.mark.parametrize(
    "name, expected",
    [
        ("a.mbox", "mbox"),
        ("a.MBOX.gz", "mbox"),
        ("m.eml", "raw"),
        ("m.eml.gz", "raw"),
        ("x.jsonl", None),
        ("mbox", None),
    ],
)
def test_the_name_of_an_input_says_its_format(name, expected):
    assert input_format(name) == expected


def test_a_format_given_wins_over_the_name(tmp_path):
    """A format written beside the path, or given with --set, wins; --input sets the one its name says over the
    file's (whose format was about its own input)."""
    spam = ROOT / "configs" / "spam.yaml"
    assert load_config(spam, [f"source.path={tmp_path / 'a.mbox'}", "source.format=raw"])["source"]["format"] == "raw"
    written = _write(tmp_path / "job.yaml", {"source": {"type": "file", "path": "a.mbox", "format": "json"}})
    assert load_config(written)["source"]["format"] == "json"
    for args, expected in (([], "mbox"), (["--set", "source.format=raw"], "raw")):
        given = options.overrides(options.common_options().parse_args(["--input", str(tmp_path / "a.mbox"), *args]))
        config = load_config(spam, [text for text, _ in given], [flag for _, flag in given])
        assert config["source"]["format"] == expected


# -- YAML: aliases, nesting and size -------------------------------------------------------


def _alias_bomb(levels: int = 9, width: int = 9) -> str:
    """A few hundred bytes that stand, through aliases, for width**levels strings (9**9: 387 million)."""
    lines = ["source:", "  type: kafka", "  topics: [mail]", "  consumer:"]
    lines.append(f"    l0: &l0 [{', '.join(['lol'] * width)}]")
    for level in range(1, levels):
        lines.append(f"    l{level}: &l{level} [{', '.join([f'*l{level - 1}'] * width)}]")
    return "\n".join(lines) + "\n"


def test_alias_bomb_is_refused_fast(tmp_path, monkeypatch):
    """Refused at its first alias, before anything is expanded: the loader composes a few of the file's own
    nodes, not the hundreds of millions the aliases stand for (counted, where a clock would measure)."""
    path = tmp_path / "bomb.yaml"
    path.write_text(_alias_bomb(), encoding="utf-8")
    composed = []
    compose_node = config_module._Loader.compose_node

    def counted(self, parent, index):
        composed.append(1)
        return compose_node(self, parent, index)

    monkeypatch.setattr(config_module._Loader, "compose_node", counted)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert len(composed) < 50, len(composed)
    assert str(caught.value).startswith(f"{path}: line 6: YAML aliases (*l0) are not accepted"), caught.value


@pytest.mark.parametrize(
    "text, line, alias",
    [
        ("output: {type: kafka, topic: &t out}\nerrors: {dead_letter: {type: kafka, topic: *t}}\n", 2, "*t"),
        ("source:\n  consumer: &c {loop: *c}\n", 2, "*c"),  # a mapping that contains itself
        ("source: &s {type: stdin}\noutput:\n  <<: *s\n", 3, "*s"),  # a merge key is an alias too
    ],
    ids=["shared-value", "recursive", "merge-key"],
)
def test_yaml_aliases_are_refused(tmp_path, text, line, alias):
    path = tmp_path / "job.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value) == (
        f"{path}: line {line}: YAML aliases ({alias}) are not accepted: write the value out in full"
    )
    # an anchor alone repeats nothing, and is accepted
    path.write_text("model: &m {kind: linear}\n", encoding="utf-8")
    assert load_config(path)["model"] == {"kind": "linear"}


def test_yaml_aliases_are_refused_in_overrides():
    with pytest.raises(ConfigError, match=r"^--set 'source.topics=\[&t mail, \*t\]': line 1: YAML aliases \(\*t\)"):
        parse_override("source.topics=[&t mail, *t]")
    with pytest.raises(ConfigError, match=r"^--set 'source.topics=\[': not valid YAML"):
        parse_override("source.topics=[")


@pytest.mark.parametrize(
    "text, refusal",
    [
        (
            "model:\n  kind: linear\n  lambda_: 0.1\n  lambda_: 0.01\n",
            "line 4: key 'lambda_' given twice (first on line 3)",
        ),
        ("output: {type: none}\nrun: {}\noutput: {type: file}\n", "line 3: key 'output' given twice (first on line 1)"),
    ],
    ids=["in-a-section", "a-section"],
)
def test_a_key_given_twice_is_refused_with_its_line(tmp_path, text, refusal, capsys):
    path = tmp_path / "job.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value) == f"{path}: {refusal}"
    assert cli.main(["run", "--config", str(path)]) == 2
    assert capsys.readouterr().err.splitlines() == [f"configuration error: {path}: {refusal}"]
    twice = r"^--set 'output=\{type: none, type: file\}': line 1: key 'type' given twice \(first on line 1\)$"
    with pytest.raises(ConfigError, match=twice):
        parse_override("output={type: none, type: file}")


def test_deep_nesting_is_refused(tmp_path):
    path = tmp_path / "deep.yaml"
    path.write_text("source:\n  consumer:\n    x: " + "[" * 5000 + "]" * 5000 + "\n", encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value).startswith(f"{path}: line 3: nested deeper than 16 levels"), caught.value


def test_oversized_file_is_refused_fast(tmp_path, monkeypatch):
    """Refused before it is parsed (the parser, not a clock, is watched)."""
    path = tmp_path / "big.yaml"
    path.write_text("source:\n  consumer:\n    sasl_plain_password: " + "x" * 10_000_000 + "\n", encoding="utf-8")
    parsed = []
    monkeypatch.setattr(config_module, "_yaml", lambda text, where: parsed.append(len(text)))
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert parsed == []
    assert str(caught.value) == f"{path}: larger than 1048576 bytes: not a configuration file"


def test_integer_too_long_to_convert_is_a_config_error(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("run:\n  max_events: " + "9" * 5000 + "\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"job\.yaml: not valid YAML: .*digits"):
        load_config(path)


# -- free-form client settings (source.consumer, output.producer) -----------------------------

SETTINGS_REFUSED = [
    # (configuration, key path, a fragment of the expected form)
    ({"source": {"consumer": "fast"}}, "source.consumer", "expected a mapping of at most 64 settings"),
    ({"source": {"consumer": {"ssl": {"cafile": "ca.pem"}}}}, "source.consumer.ssl", "expected a string of at most"),
    (
        {"source": {"consumer": {"sasl_plain_password": "x" * 10_000_000}}},
        "source.consumer.sasl_plain_password",
        "4096",
    ),
    ({"output": {"producer": {"acks": [{"all": 1}]}}}, "output.producer.acks", "a list of at most 64 of them"),
    ({"output": {"producer": {"retries": list(range(65))}}}, "output.producer.retries", "a list of at most 64"),
    ({"output": {"producer": {f"k{i}": i for i in range(65)}}}, "output.producer", "at most 64 settings, got 65"),
    ({"source": {"consumer": {"bad key": 1}}}, "source.consumer", "'bad key': expected a setting name"),
    ({"source": {"consumer": {7: 1}}}, "source.consumer", "7: expected a setting name"),
    ({"source": {"consumer": {"k" * 65: 1}}}, "source.consumer", "expected a setting name"),
    ({"source": {"consumer": {"linger_ms": float("nan")}}}, "source.consumer.linger_ms", "a finite number"),
    ({"source": {"consumer": {"linger_ms": 2**70}}}, "source.consumer.linger_ms", "a finite number"),
]


@pytest.mark.parametrize(
    "config, key_path, form",
    SETTINGS_REFUSED,
    ids=[f"{path}:{i}" for i, (_, path, _) in enumerate(SETTINGS_REFUSED)],
)
def test_free_form_settings_are_bounded(config, key_path, form):
    with pytest.raises(ConfigError) as caught:
        validate(config, "job.yaml")
    message = str(caught.value)
    assert message.startswith(f"job.yaml: {key_path}: "), message
    assert form in message, f"expected form {form!r} not shown in: {message}"
    assert len(message) < 1000  # a huge value is not echoed back


def test_free_form_settings_accept_flat_scalars_up_to_the_bounds():
    consumer = {
        "session_timeout_ms": 6000,
        "ssl_check_hostname": False,
        "sasl_mechanism": None,
        "retry_backoff_ms": 0.5,
        "api_version": [2, 5, 0],
        "sasl_plain_password": "x" * 4096,
    }
    assert validate({"source": {"consumer": consumer}})["source"]["consumer"] == consumer
    many = {f"k{i}": [i] * 64 for i in range(64)}
    assert validate({"output": {"producer": many}})["output"]["producer"] == many
    with pytest.raises(ConfigError, match="sasl_plain_password"):
        validate({"source": {"consumer": {"sasl_plain_password": "x" * 4097}}})


# -- model.lambda_ -------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["linear", "multiclass", "kernel"])
@pytest.mark.parametrize("text", ["true", "false", "1e-320", "1e-101", "-1", "0", ".nan", ".inf", "-.inf", "'0.1'"])
def test_lambda_refused_at_start_up(tmp_path, kind, text):
    """A bool is no number, and a λ so small that η₁ = 1/λ overflows would have every event refused."""
    path = tmp_path / "job.yaml"
    path.write_text(f"model:\n  kind: {kind}\n  lambda_: {text}\n", encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: model.lambda_: "), message
    assert "expected a finite number >= 1e-100" in message and "a bool is not a number" in message


def test_smallest_lambda_is_accepted():
    assert load_config(None, ["model.lambda_=1e-100"])["model"]["lambda_"] == 1e-100
    with pytest.raises(ConfigError, match=r"model\.lambda_"):
        load_config(None, ["model.lambda_=9.9e-101"])


# -- run.max_events ------------------------------------------------------------------------


def test_max_events_zero_is_accepted_and_processes_nothing(tmp_path, capsys):
    assert load_config(None, ["run.max_events=0"])["run"]["max_events"] == 0
    lines = [json.dumps({"id": i, "x": {"a": float(i % 2) - 0.5}, "label": i % 2 == 1}) for i in range(6)]
    events = tmp_path / "events.jsonl"
    events.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert cli.main(["eval", "--json", "--input", str(events), "--set", "run.max_events=0"]) == 0
    assert json.loads(capsys.readouterr().out)["events"] == 0


# -- features.hash_bits for dict events ----------------------------------------------------


def test_hash_bits_accepted_for_dict_features():
    config = load_config(None, ["features.hash_bits=8"])
    assert config["features"] == {"type": "dict", "hash_bits": 8}
    hasher = build_features(config)
    assert isinstance(hasher, DictHasher) and hasher.hash_bits == 8
    assert build_features(load_config(None, ["features.hash_bits=null"])) is None
    assert build_features(load_config(None)) is None


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["features.hash_bits=8"], 256),  # hashed features: weight arrays of their columns by themselves
        (["features.hash_bits=22", "model.kind=committee"], 1 << 22),
        (["features.hash_bits=9", "model.kind=mixture"], 512),
        (["features.hash_bits=8", "model.kind=adagrad"], 256),
        (["features.hash_bits=23"], None),  # beyond ARRAY_COLUMNS: dicts, which hold only the columns seen
        (["features.hash_bits=8", "model.n_features=1024"], 1024),  # as told
        ([], None),  # no hashing: any feature name, dicts
    ],
)
def test_hashed_features_get_weight_arrays_unless_told_otherwise(overrides, expected):
    model = build_model(load_config(None, overrides))
    assert model.n_features == expected
    assert ARRAY_COLUMNS == 1 << 22


def test_a_learner_without_weight_arrays_is_built_as_configured_with_hashed_features():
    assert not hasattr(build_model(load_config(None, ["features.hash_bits=8", "model.kind=kernel"])), "n_features")


@pytest.mark.parametrize("text", ["0", "33", "-1", "true", "2.5", "'8'"])
def test_hash_bits_out_of_range_refused(text):
    with pytest.raises(ConfigError) as caught:
        load_config(None, [f"features.hash_bits={text}"])
    message = str(caught.value)
    assert message.startswith(f"--set {f'features.hash_bits={text}'!r}: features.hash_bits: "), message
    assert "an integer from 1 to 32" in message, message


# -- the kafka connection, shared by the source, the output and the dead-letter topic ----------

KAFKA_JOB = {
    "source": {"type": "kafka", "topics": ["mail"]},
    "output": {"type": "kafka", "topic": "predictions"},
    "errors": {"dead_letter": {"type": "kafka", "topic": "rejected"}},
}
CLIENTS = (("source",), ("output",), ("errors", "dead_letter"))


def _client(config: dict, path: tuple[str, ...]) -> dict:
    return config[path[0]] if len(path) == 1 else config[path[0]][path[1]]


def test_one_kafka_section_connects_every_kafka_client(tmp_path):
    kafka = {
        "bootstrap_servers": ["k1:9093", "k2:9093"],
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "pegasos",
        "sasl_plain_password": "s3cr3t",
        "ssl_cafile": "certs/ca.pem",
    }
    path = _write(tmp_path / "conf" / "job.yaml", {**KAFKA_JOB, "kafka": kafka})
    config = load_config(path)
    ca = str(tmp_path.resolve() / "conf" / "certs" / "ca.pem")  # relative to the file, as every path
    for client in CLIENTS:
        section = _client(config, client)
        assert {key: section[key] for key in kafka} == {**kafka, "ssl_cafile": ca}, client
        assert section["ssl_certfile"] is None and section["ssl_check_hostname"] is None
    assert config["kafka"]["ssl_cafile"] == ca
    assert kafka_client_settings(config["source"], config["source"]["consumer"]) == {
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "pegasos",
        "sasl_plain_password": "s3cr3t",
        "ssl_cafile": ca,
    }


def test_each_kafka_client_may_override_any_connection_setting(tmp_path):
    job = copy.deepcopy(KAFKA_JOB)
    job["kafka"] = {"bootstrap_servers": "shared:9092", "security_protocol": "SSL", "ssl_check_hostname": False}
    job["output"].update(bootstrap_servers="other:9092", security_protocol="PLAINTEXT", ssl_check_hostname=None)
    job["output"]["producer"] = {"acks": "all", "security_protocol": "SSL"}  # a client's own settings win
    job["errors"]["dead_letter"].update(sasl_mechanism="PLAIN", security_protocol="SASL_PLAINTEXT")
    job["errors"]["dead_letter"].update(sasl_plain_username="dead", sasl_plain_password="letters")
    config = load_config(_write(tmp_path / "job.yaml", job))
    source, output, dead = (_client(config, client) for client in CLIENTS)
    assert (source["bootstrap_servers"], source["security_protocol"], source["ssl_check_hostname"]) == (
        "shared:9092",
        "SSL",
        False,
    )
    assert (output["bootstrap_servers"], output["security_protocol"], output["ssl_check_hostname"]) == (
        "other:9092",
        "PLAINTEXT",
        None,
    )
    assert kafka_client_settings(output, output["producer"]) == {"security_protocol": "SSL", "acks": "all"}
    assert kafka_client_settings(dead) == {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": "dead",
        "sasl_plain_password": "letters",
        "ssl_check_hostname": False,
    }
    assert validate(copy.deepcopy(config), "job.yaml") == config  # validating again changes nothing


def test_per_section_servers_keep_working_and_hash_as_the_shared_section(tmp_path):
    """A configuration that names the servers in each section (as before the kafka section) runs as it did,
    and one that names them once in the kafka section is the same job: its checkpoints resume either way."""
    each = copy.deepcopy(KAFKA_JOB)
    for client in CLIENTS:
        _client(each, client)["bootstrap_servers"] = "broker:9092"
    once = {**copy.deepcopy(KAFKA_JOB), "kafka": {"bootstrap_servers": "broker:9092"}}
    per_section, shared = (
        load_config(_write(tmp_path / "each.yaml", each)),
        load_config(_write(tmp_path / "once.yaml", once)),
    )
    for client in CLIENTS:
        assert _client(per_section, client)["bootstrap_servers"] == "broker:9092"
        assert _client(shared, client)["bootstrap_servers"] == "broker:9092"
    assert per_section["kafka"]["bootstrap_servers"] == "127.0.0.1:9092"  # the default, which no client takes
    assert config_hash(per_section) == config_hash(shared)
    assert config_hash(
        load_config(None, ["kafka.bootstrap_servers=other:9092", "source.type=kafka", "source.topics=[mail]"])
    ) != config_hash(load_config(None, ["source.type=kafka", "source.topics=[mail]"]))


KAFKA_REFUSED = [
    # (configuration, key path, a fragment of the message)
    ({"kafka": {"bogus": 1}}, "kafka.bogus", "unknown key (expected one of: bootstrap_servers, sasl_kerberos"),
    (
        {"kafka": {"bootstrap_servers": 9092}},
        "kafka.bootstrap_servers",
        "expected host:port or a list of them, got 9092",
    ),
    ({"kafka": {"bootstrap_servers": ["a:1", 2]}}, "kafka.bootstrap_servers", "expected host:port or a list of them"),
    ({"kafka": {"security_protocol": "TLS"}}, "kafka.security_protocol", "PLAINTEXT | SSL | SASL_PLAINTEXT | SASL_SSL"),
    ({"kafka": {"ssl_check_hostname": "no"}}, "kafka.ssl_check_hostname", "expected true | false, got 'no'"),
    ({"output": {"sasl_mechanism": "OAUTHBEARER"}}, "output.sasl_mechanism", "PLAIN | SCRAM-SHA-256"),
    ({"errors": {"dead_letter": {"ssl_cafile": 1}}}, "errors.dead_letter.ssl_cafile", "expected a file path"),
    ({"kafka": "127.0.0.1:9092"}, "kafka", "expected a mapping"),
    ({"source": {"commit_without_checkpoint": "yes"}}, "source.commit_without_checkpoint", "expected true | false"),
    # settings that do not fit together, named where they come from
    (
        {"kafka": {"security_protocol": "SASL_SSL"}},
        "kafka.sasl_mechanism",
        "required when kafka.security_protocol is SASL_SSL",
    ),
    (
        {"kafka": {"sasl_mechanism": "PLAIN", "sasl_plain_username": "u", "sasl_plain_password": "p"}},
        "kafka.security_protocol",
        "expected SASL_PLAINTEXT | SASL_SSL with kafka.sasl_mechanism set, got PLAINTEXT (the default)",
    ),
    (
        {"kafka": {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-256", "sasl_plain_username": "u"}},
        "kafka.sasl_plain_password",
        "required when kafka.sasl_mechanism is SCRAM-SHA-256",
    ),
    (
        {
            "kafka": {"security_protocol": "SASL_SSL", "sasl_mechanism": "GSSAPI"},
            "output": {"sasl_mechanism": "PLAIN", "sasl_plain_password": "p"},
        },
        "kafka.sasl_plain_username",
        "required when output.sasl_mechanism is PLAIN",
    ),
    (
        {"kafka": {"ssl_cafile": "/ca.pem"}, "output": {"security_protocol": "SSL"}},
        "kafka.security_protocol",
        "expected SSL | SASL_SSL with kafka.ssl_cafile set, got PLAINTEXT (the default)",
    ),
    (
        {"kafka": {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "GSSAPI"}, "output": {"ssl_cafile": "/c"}},
        "output.security_protocol",
        "expected SSL | SASL_SSL with output.ssl_cafile set, got SASL_PLAINTEXT",
    ),
    (
        {"source": {"security_protocol": "SSL", "ssl_password": "s3cr3t", "sasl_mechanism": "PLAIN"}},
        "source.security_protocol",
        "expected SASL_PLAINTEXT | SASL_SSL with source.sasl_mechanism set, got SSL",
    ),
]


@pytest.mark.parametrize(
    "config, key_path, fragment",
    KAFKA_REFUSED,
    ids=[f"{path}:{i}" for i, (_, path, _) in enumerate(KAFKA_REFUSED)],
)
def test_kafka_settings_refused_in_one_line_naming_the_key(tmp_path, config, key_path, fragment):
    job = copy.deepcopy(KAFKA_JOB)
    for section, value in config.items():
        job[section] = _merge_sections(job.get(section), value)
    path = _write(tmp_path / "job.yaml", job)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: {key_path}: "), message
    assert fragment in message and "\n" not in message, message


def _merge_sections(base: object, update: object) -> object:
    if isinstance(base, dict) and isinstance(update, dict):
        return {**base, **{key: _merge_sections(base.get(key), value) for key, value in update.items()}}
    return update


def test_kafka_settings_of_clients_that_are_not_kafka_are_not_checked_together():
    config = load_config(None, ["kafka.security_protocol=SASL_SSL"])  # no Kafka client: nothing to connect
    assert config["output"]["security_protocol"] == "SASL_SSL"


PASSWORD = "hunter2-123"


@pytest.mark.parametrize(
    "text",
    [
        "kafka:\n  sasl_plain_password: 123456\n",  # YAML reads it as a number: refused, not shown
        f'kafka:\n  sasl_plain_password: "{PASSWORD}\n',  # unterminated: a YAML error quotes no line
        f"source:\n  consumer:\n    ssl_password: [{PASSWORD}, {{a: 1}}]\n",
    ],
    ids=["wrong-type", "yaml-error", "free-form"],
)
def test_a_password_is_never_shown_in_a_message(tmp_path, capsys, text):
    path = tmp_path / "job.yaml"
    path.write_text(text, encoding="utf-8")
    assert cli.main(["eval", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"configuration error: {path}: ") and err.count("\n") == 1, err
    assert PASSWORD not in err and "123456" not in err
    with pytest.raises(ConfigError) as caught:
        load_config(None, [f"kafka.sasl_plain_password=[{PASSWORD}"])
    assert str(caught.value).startswith("--set kafka.sasl_plain_password=...: not valid YAML") and PASSWORD not in str(
        caught.value
    )


def test_a_password_stays_out_of_checkpoints_and_their_hash(tmp_path, capsys):
    events = tmp_path / "events.jsonl"
    events.write_text(json.dumps({"id": 1, "x": {"a": 1.0}, "label": True}) + "\n", encoding="utf-8")
    job = {
        "source": {"type": "file", "path": str(events), "consumer": {"ssl_password": PASSWORD + "-tls"}},
        "output": {"type": "none"},
        "kafka": {"sasl_plain_password": PASSWORD},
        "checkpoint": {"dir": "ck"},
    }
    path = _write(tmp_path / "job.yaml", job)
    config = load_config(path)
    assert config["source"]["sasl_plain_password"] == PASSWORD  # the clients get it
    assert cli.main(["run", "--config", str(path)]) == 0
    capsys.readouterr()
    found = latest_valid(tmp_path / "ck")
    assert found is not None
    path_written, _, manifest = found
    assert PASSWORD.encode() not in path_written.read_bytes()  # the manifest is stored as plain JSON
    assert PASSWORD not in json.dumps(manifest, default=str)
    assert manifest["config"]["kafka"]["sasl_plain_password"] is None
    assert manifest["config"]["source"]["consumer"] == {}
    other = load_config(path, ["kafka.sasl_plain_password=changed"])
    assert config_hash(other) == config_hash(config) == manifest["config_sha256"]  # a new password, same job
    assert cli.main(["run", "--config", str(path), "--resume", "--set", "kafka.sasl_plain_password=changed"]) == 0
    assert "resuming from" in capsys.readouterr().err


# -- run on a Kafka source needs checkpoints, or an explicit opt-in --------------------------


def test_run_on_kafka_without_checkpoints_is_refused_in_one_line(tmp_path):
    """Refused before anything connects: no broker is needed to see it."""
    path = _write(
        tmp_path / "job.yaml",
        {"source": {"type": "kafka", "topics": ["mail"], "bootstrap_servers": "127.0.0.1:1"}},
    )
    done = subprocess.run([BIN, "run", "--config", str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"configuration error: {path}: checkpoint.dir: required for a Kafka source: "), (
        done.stderr
    )
    assert "a restart would start a new model after those records" in done.stderr
    assert "set checkpoint.dir, or source.commit_without_checkpoint: true" in done.stderr
    shipped = subprocess.run(
        [BIN, "run", "--config", "kafka", "--set", "checkpoint.dir="],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert shipped.returncode == 2 and "checkpoint.dir: required for a Kafka source" in shipped.stderr


def test_the_opt_in_and_other_sources_need_no_checkpoints():
    kafka = load_config(None, ["source.type=kafka", "source.topics=[mail]"])
    with pytest.raises(ConfigError, match=r"^job\.yaml: checkpoint\.dir: required for a Kafka source"):
        check_kafka_checkpoints(kafka, "job.yaml")
    check_kafka_checkpoints({**kafka, "source": {**kafka["source"], "commit_without_checkpoint": True}}, "job.yaml")
    check_kafka_checkpoints({**kafka, "checkpoint": {**kafka["checkpoint"], "dir": "ck"}}, "job.yaml")
    check_kafka_checkpoints(load_config(None), "job.yaml")  # standard input
    check_kafka_checkpoints(load_config(ROOT / "configs" / "kafka.yaml"), "kafka.yaml")  # it ships with checkpoints


def test_a_shipped_configuration_writes_in_the_working_directory(tmp_path, monkeypatch):
    """Run by name (or by its own path), a shipped configuration resolves relative paths in the working
    directory, not in the package that holds it; a copy resolves them next to itself."""
    monkeypatch.chdir(tmp_path)
    assert load_config(config_file("kafka"))["checkpoint"]["dir"] == "checkpoints/kafka"
    assert load_config(ROOT / "configs" / "kafka.yaml")["checkpoint"]["dir"] == "checkpoints/kafka"
    assert load_config(config_file("replay-svmlight"))["errors"]["dead_letter"]["path"] == "rejected.jsonl"
    copied = tmp_path / "mine" / "kafka.yaml"
    copied.parent.mkdir()
    copied.write_text((ROOT / "configs" / "kafka.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    assert Path(load_config(copied)["checkpoint"]["dir"]) == copied.parent.resolve() / "checkpoints" / "kafka"


# -- settings that pass their type but overflow the first step --------------------------------

TOO_MANY = 10**29  # an int, which the compiled loop (counts as floats, exact up to 2^53) cannot take
LAMBDA_T0 = "expected a finite number > 0 with lambda_t0/λ at most 2**53 for each λ of lambdas"


@pytest.mark.parametrize(
    "kind, key, value, expected",
    [
        ("linear", "t0", TOO_MANY, "expected an integer from 0 to 2**53"),
        ("linear", "horizon", TOO_MANY, "expected None or an integer from 1 to 2**53"),
        ("linear", "average", TOO_MANY, "expected None, a bool or an integer from 1 to 2**53"),
        ("grid", "t0", TOO_MANY, "expected an integer from 0 to 2**53"),
        ("committee", "horizon", TOO_MANY, "expected None or an integer from 1 to 2**53"),
        ("mixture", "lambda_t0", 1e300, LAMBDA_T0),
        ("mixture", "lambda_t0", math.inf, LAMBDA_T0),
    ],
)
def test_a_setting_that_overflows_the_first_step_is_refused_at_start_up(tmp_path, kind, key, value, expected, capsys):
    (tmp_path / "events.jsonl").write_text('{"x": {"a": 1.0}, "label": true}\n' * 2, encoding="utf-8")
    job = tmp_path / "job.yaml"
    config = {"model": {"kind": kind, key: value}, "features": {"type": "dict"}, "output": {"type": "none"}}
    job.write_text(yaml.safe_dump({**config, "source": {"type": "file", "path": "events.jsonl"}}), encoding="utf-8")
    assert cli.main(["run", "--config", str(job)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"configuration error: {job}: model.{key}: {key}={value!r}: {expected}"
    ]
