"""Configuration files: the shipped ones, validation messages, ``--set`` overrides, paths, hashing."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from pegasos_stream import cli
from pegasos_stream.cli.assemble import build_features
from pegasos_stream.cli.config import (
    ConfigError,
    apply_override,
    config_file,
    config_hash,
    load_config,
    parse_override,
    shipped_configs,
    validate,
)
from pegasos_stream.features import DictHasher

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))
SAMPLE = ROOT / "pegasos_stream" / "data" / "spam-sample.jsonl.gz"


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
        "metrics",
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
        "kind": "committee",
        "lambda_": 1e-5,
        "t0": 30000,
        "learning_rate": 0.7,
        "n_features": 2**20,
        "initial_accumulator": 1e-6,
    }
    assert config["features"] == {
        "type": "email",
        "reader": "bytes",
        "char_ngram": 4,
        "max_chars": 3000,
        "binary": True,
        "normalize": True,
        "hash_bits": 20,
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
    assert config["errors"] == {
        "on_error": "skip",
        "dead_letter": {"type": "none", "path": None, "bootstrap_servers": "127.0.0.1:9092", "topic": None},
    }
    assert config["metrics"] == {"port": None, "host": "127.0.0.1"}  # no metrics served; loopback only when asked


# -- refused configurations: the message names the file, the key path and the expected form ---

REFUSED = [
    # (configuration, key path, a fragment of the expected form)
    ({"bogus": {"a": 1}}, "bogus", "expected one of: model, features, source"),
    ({"source": {"bogus": 1}}, "source.bogus", "expected one of:"),
    ({"source": {"fields": {"bogus": "b"}}}, "source.fields.bogus", "expected one of: id, label, text, x"),
    ({"errors": {"dead_letter": {"bogus": 1}}}, "errors.dead_letter.bogus", "expected one of:"),
    ({"model": {"bogus": 1}}, "model.bogus", "lambda_"),
    ({"features": {"type": "email", "bogus": 1}}, "features.bogus", "char_ngram"),
    ({"features": {"bogus": 1}}, "features.bogus", "takes no other keys"),
    ({"source": {"max_bytes": "x"}}, "source.max_bytes", "an integer >= 1"),
    ({"source": {"max_bytes": True}}, "source.max_bytes", "an integer >= 1"),
    ({"run": {"max_events": -1}}, "run.max_events", "an integer >= 0"),
    ({"source": {"format": "xml"}}, "source.format", "json | svmlight"),
    ({"source": {"type": "socket"}}, "source.type", "stdin | file | kafka"),
    ({"errors": {"on_error": "ignore"}}, "errors.on_error", "skip | stop"),
    ({"source": {"fields": "id"}}, "source.fields", "a mapping"),
    ({"evaluation": {"stats_every_seconds": -1}}, "evaluation.stats_every_seconds", "a number >= 0"),
    ({"model": {"lambda_": -1}}, "model.lambda_", "> 0"),
    ({"model": {"kind": "forest"}}, "model.kind", "linear | grid | committee | adagrad | multiclass | kernel"),
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
        " (shipped: kafka, kernel-rbf, replay-svmlight, spam)\n"
    )
    assert cli.main(["configs", "spma"]) == 2
    assert capsys.readouterr().err == (
        "configuration error: no shipped configuration 'spma' (shipped: kafka, kernel-rbf, replay-svmlight, spam)\n"
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
    for section, key in (("source", "label"), ("source", "folders")):  # keys added with a default
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
    # the run and metrics sections (how long this run goes on, where it serves its figures) are not part of the
    # job the hash identifies
    leaves = [(keys, value) for keys, value in _leaves(config) if keys[0] not in ("run", "metrics")]
    assert len(leaves) > 30
    for section, key, value in (("run", "max_events", 12345), ("run", "stop_when_idle", 5), ("metrics", "port", 9108)):
        other = copy.deepcopy(config)
        other[section][key] = value
        assert config_hash(other) == digest
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


# -- YAML: aliases, nesting and size -------------------------------------------------------


def _alias_bomb(levels: int = 9, width: int = 9) -> str:
    """A few hundred bytes that stand, through aliases, for width**levels strings (9**9: 387 million)."""
    lines = ["source:", "  type: kafka", "  topics: [mail]", "  consumer:"]
    lines.append(f"    l0: &l0 [{', '.join(['lol'] * width)}]")
    for level in range(1, levels):
        lines.append(f"    l{level}: &l{level} [{', '.join([f'*l{level - 1}'] * width)}]")
    return "\n".join(lines) + "\n"


def test_alias_bomb_is_refused_fast(tmp_path):
    path = tmp_path / "bomb.yaml"
    path.write_text(_alias_bomb(), encoding="utf-8")
    start = time.perf_counter()
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert time.perf_counter() - start < 1.0
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


def test_deep_nesting_is_refused(tmp_path):
    path = tmp_path / "deep.yaml"
    path.write_text("source:\n  consumer:\n    x: " + "[" * 5000 + "]" * 5000 + "\n", encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value).startswith(f"{path}: line 3: nested deeper than 16 levels"), caught.value


def test_oversized_file_is_refused_fast(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text("source:\n  consumer:\n    sasl_plain_password: " + "x" * 10_000_000 + "\n", encoding="utf-8")
    start = time.perf_counter()
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert time.perf_counter() - start < 1.0
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


@pytest.mark.parametrize("text", ["0", "33", "-1", "true", "2.5", "'8'"])
def test_hash_bits_out_of_range_refused(text):
    with pytest.raises(ConfigError) as caught:
        load_config(None, [f"features.hash_bits={text}"])
    message = str(caught.value)
    assert message.startswith(f"--set {f'features.hash_bits={text}'!r}: features.hash_bits: "), message
    assert "an integer from 1 to 32" in message, message
