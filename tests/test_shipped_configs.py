"""Every command of ``pegasos-stream`` on every shipped configuration, end to end, on a few hundred events: run
(with checkpoints), inspect, predict, serve as a co-process, eval (with its learning curve) and configs each exit 0
with what they promise. A configuration that reads or writes Kafka reads and writes files here (``--input``,
``--output``, a dead-letter file), so that no broker is needed."""

from __future__ import annotations

import gzip
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from pegasos_stream import cli
from pegasos_stream.cli.config import load_config, shipped_configs
from pegasos_stream.persist.checkpoint import model_digest, read_checkpoint

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "pegasos_stream" / "data" / "spam-sample.jsonl.gz"
COMMAND = [sys.executable, "-m", "pegasos_stream.cli"]

#: The events each run learns, and those predicted and served afterwards.
EVENTS = 300
SCORED = 40


def _write_events(config: dict, directory: Path) -> Path:
    """``EVENTS`` labelled events of the kind ``config`` reads: svmlight lines, messages as JSON text events, or
    JSON feature events."""
    rng = random.Random(7)
    if config["source"]["format"] == "svmlight":
        path = directory / "events.svm"
        lines = [
            f"{1 if a + b > 0 else -1} 1:{a:.4f} 2:{b:.4f} {3 + i % 7}:1"
            for i, (a, b) in enumerate((rng.gauss(0, 1), rng.gauss(0, 1)) for _ in range(EVENTS))
        ]
    elif config["features"]["type"] == "email":
        path = directory / "mail.jsonl"
        lines = [line.decode() for line in gzip.decompress(SAMPLE.read_bytes()).splitlines()[:EVENTS]]
    else:
        path = directory / "events.jsonl"
        points = [(rng.gauss(0, 1), rng.gauss(0, 1)) for _ in range(EVENTS)]
        lines = [
            json.dumps({"id": i, "x": {"a": a, "b": b}, "label": a * a + b * b < 1.2})
            for i, (a, b) in enumerate(points)
        ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _scored(answers: list[dict]) -> list[tuple]:
    return [(answer["predicted"], answer["score"], answer["proba"]) for answer in answers]


@pytest.mark.parametrize("name", sorted(shipped_configs()))
def test_every_command_runs_the_shipped_configuration(name, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    events = _write_events(load_config(shipped_configs()[name]), tmp_path)
    dead_letters = json.dumps({"type": "file", "path": str(tmp_path / "rejected.jsonl")})
    flags = ["--config", name, "--input", str(events), "--set", f"errors.dead_letter={dead_letters}"]
    checkpoint_dir, predictions = tmp_path / "ck", tmp_path / "predictions.jsonl"

    assert cli.main(["run", *flags, "--output", str(predictions), "--set", f"checkpoint.dir={checkpoint_dir}"]) == 0
    summary = json.loads(capsys.readouterr().err.splitlines()[-1])
    assert summary["events"] == summary["learned"] == summary["t"] == EVENTS and summary["rejected"] == 0
    written = [json.loads(line) for line in predictions.read_text(encoding="utf-8").splitlines()]
    assert len(written) == EVENTS and all(set(line) == {"id", "predicted", "score", "proba"} for line in written)

    assert cli.main(["inspect", str(checkpoint_dir), "--json"]) == 0
    inspected = json.loads(capsys.readouterr().out)
    model = read_checkpoint(inspected["path"])[0]["model"]
    assert inspected["model_sha256"] == model_digest(model) and inspected["t"] == inspected["events"] == EVENTS
    assert cli.main(["inspect", str(checkpoint_dir)]) == 0
    assert f"model_sha256: {inspected['model_sha256']}" in capsys.readouterr().out

    head = tmp_path / f"head{events.suffix}"
    head.write_bytes(b"".join(events.read_bytes().splitlines(keepends=True)[:SCORED]))
    assert cli.main(["predict", "--model", str(checkpoint_dir), str(head)]) == 0
    predicted = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(predicted) == SCORED

    served = subprocess.run(
        [*COMMAND, "serve", "--model", str(checkpoint_dir), "--input", "-", "--output", "-"],
        input=head.read_bytes(),
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert served.returncode == 0, served.stderr.decode()
    answers = [json.loads(line) for line in served.stdout.splitlines()]
    assert _scored(answers) == _scored(predicted) and all("model_version" in answer for answer in answers)

    curve = tmp_path / "curve.png"
    assert cli.main(["eval", *flags, "--json", "--plot", str(curve)]) == 0
    evaluated = json.loads(capsys.readouterr().out)
    assert evaluated["n"] == evaluated["events"] == EVENTS and evaluated["rejected"] == 0
    assert 0.5 < evaluated["roc_auc"] <= 1.0
    assert curve.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    assert cli.main(["configs", name]) == 0
    assert capsys.readouterr().out == shipped_configs()[name].read_text(encoding="utf-8")
