"""``pegasos-stream predict``: a trained model scores messages and events, and stays as it was."""

from __future__ import annotations

import gzip
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pegasos_stream import cli, save
from pegasos_stream.cli.assemble import build_features
from pegasos_stream.cli.predict import input_format, load_model
from pegasos_stream.persist.checkpoint import latest_valid, model_digest, read_checkpoint
from pegasos_stream.run.predictions import Predictor, binary_classes

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "pegasos_stream" / "data" / "spam-sample.jsonl.gz"
COMMAND = [sys.executable, "-m", "pegasos_stream.cli"]


def _sample(first: int, count: int) -> list[dict]:
    lines = gzip.decompress(SAMPLE.read_bytes()).splitlines()
    return [json.loads(line) for line in lines[first : first + count]]


def _predict(*args: str, stdin: bytes = b"", cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*COMMAND, "predict", *args], input=stdin, capture_output=True, timeout=120, cwd=cwd, check=False
    )


def _lines(output: bytes) -> list[dict]:
    return [json.loads(line) for line in output.decode().splitlines()]


@pytest.fixture(scope="module")
def spam_checkpoint(tmp_path_factory) -> Path:
    """A checkpoint of the shipped spam job after the first 150 messages of the sample."""
    directory = tmp_path_factory.mktemp("spam") / "checkpoints"
    args = ["--config", str(ROOT / "configs" / "spam.yaml"), "--max-events", "150"]
    assert cli.main(["run", *args, "--set", "output.type=none", "--set", f"checkpoint.dir={directory}"]) == 0
    found = latest_valid(directory)
    assert found is not None
    return found[0]


def test_predict_scores_messages_and_events_with_the_model_left_unchanged(spam_checkpoint, tmp_path):
    before = hashlib.sha256(spam_checkpoint.read_bytes()).hexdigest()
    messages = _sample(200, 5)
    for message in messages[:3]:
        (tmp_path / f"{message['id'].replace('/', '-')}.eml").write_bytes(message["text"].encode("utf-8"))
    names = sorted(path.name for path in tmp_path.glob("*.eml"))
    events = [
        json.dumps(messages[3]).encode(),  # with its true label: not written out
        json.dumps({"id": "unlabelled", "text": messages[4]["text"]}).encode(),
        b'{"id": "late", "label": "spam"}',  # a label alone: nothing to score
        b"not JSON",
    ]
    (tmp_path / "events.jsonl").write_bytes(b"\n".join(events) + b"\n")
    stdin = b"Subject: cheap meds\n\nBuy now, cheap meds online! \xe9\xff\n"  # not UTF-8: read as bytes

    done = _predict("--model", str(spam_checkpoint), *names, "events.jsonl", "-", stdin=stdin, cwd=tmp_path)

    assert done.returncode == 1, done.stderr  # one record rejected
    assert done.stderr.decode().splitlines() == [
        "rejected events.jsonl:4: malformed JSON: Expecting value: line 1 column 1 (char 0)"
    ]
    predictions = _lines(done.stdout)
    assert [p["id"] for p in predictions] == [*names, messages[3]["id"], "unlabelled", "<stdin>"]
    model, config = load_model(spam_checkpoint)
    features = build_features(config)
    inputs = [(tmp_path / name).read_bytes() for name in names]
    inputs += [messages[3]["text"], messages[4]["text"], stdin]
    for prediction, raw in zip(predictions, inputs):
        assert set(prediction) == {"id", "predicted", "score", "proba"}
        score = model.decision_function_one(features.transform_one(raw))
        assert prediction["score"] == score
        assert prediction["proba"] == model.probability(score)
        assert prediction["predicted"] == ("spam" if prediction["proba"] > 0.5 else "ham")
    assert hashlib.sha256(spam_checkpoint.read_bytes()).hexdigest() == before


def test_the_predictor_does_not_change_the_model(spam_checkpoint):
    """Scoring leaves the learner's state as it was (its digest), the checkpoint's model scores the same."""
    state, manifest = read_checkpoint(spam_checkpoint)
    model, config = state["model"], manifest["config"]
    digest = model_digest(model)
    features = build_features(config)
    predictor = Predictor(model, features, binary_classes(config["source"]["labels"]))
    texts = [message["text"] for message in _sample(250, 20)]
    scores = [predictor.predict(features.transform_one(text))[0] for text in texts]
    assert model_digest(model) == digest
    fresh = read_checkpoint(spam_checkpoint)[0]["model"]
    assert scores == [fresh.decision_function_one(features.transform_one(text)) for text in texts]
    assert {predictor.predict(features.transform_one(text))[2] for text in texts} == {"spam", "ham"}


def test_predict_reads_events_from_standard_input_with_format_events(spam_checkpoint):
    messages = _sample(300, 3)
    stdin = b"".join(json.dumps(message).encode() + b"\n" for message in messages)
    done = _predict("--model", str(spam_checkpoint.parent), "--format", "events", "-", stdin=stdin)
    assert done.returncode == 0, done.stderr
    assert [p["id"] for p in _lines(done.stdout)] == [message["id"] for message in messages]


@pytest.mark.parametrize(
    ("name", "forced", "expected"),
    [
        ("mail.eml", None, "message"),
        ("1234.M5P6.host:2,S", None, "message"),  # a maildir file
        ("-", None, "message"),
        ("events.jsonl", None, "events"),
        ("events.jsonl.gz", None, "events"),
        ("replay.svm", None, "events"),
        ("mail.eml", "events", "events"),
        ("events.jsonl", "message", "message"),
    ],
)
def test_the_format_of_an_input_follows_its_name_unless_given(name, forced, expected):
    assert input_format(name, forced) == expected


def test_a_missing_corrupt_or_configless_checkpoint_is_one_line(spam_checkpoint, tmp_path):
    message = tmp_path / "m.eml"
    message.write_bytes(b"Subject: hello\n\nhi\n")
    corrupt = tmp_path / "corrupt.pgs"
    corrupt.write_bytes(spam_checkpoint.read_bytes()[:5000])
    plain = tmp_path / "plain.pgs"
    save(read_checkpoint(spam_checkpoint)[0]["model"], plain)
    expected = {
        tmp_path / "missing.pgs": "cannot read: No such file or directory",
        corrupt: "checksum mismatch: the file is truncated or corrupted",
        plain: "holds no configuration",
        tmp_path: "no valid checkpoint in the directory",
    }
    for path, reason in expected.items():
        done = _predict("--model", str(path), str(message))
        assert done.returncode == 2
        assert done.stdout == b""
        [line] = done.stderr.decode().splitlines()
        assert line.startswith(f"error: --model {path}: ") and reason in line, line


def test_a_message_needs_email_features_and_a_missing_input_is_refused_first(tmp_path):
    events = tmp_path / "events.jsonl"
    events.write_text('{"id": 1, "x": {"a": 1.0}, "label": true}\n{"id": 2, "x": {"a": -1.0}, "label": false}\n')
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({"model": {"lambda_": 0.01}, "checkpoint": {"dir": str(tmp_path / "ck")}}))
    assert cli.main(["run", "--config", str(job), "--input", str(events), "--output", str(tmp_path / "out")]) == 0
    model = str(tmp_path / "ck")
    message = tmp_path / "m.eml"
    message.write_bytes(b"Subject: hello\n\nhi\n")

    done = _predict("--model", model, str(message))
    assert done.returncode == 2 and done.stdout == b""
    assert done.stderr.decode().startswith(f"error: {message}: a message needs features.type: email")

    done = _predict("--model", model, str(events), str(tmp_path / "missing.jsonl"))
    assert done.returncode == 2 and done.stdout == b""  # nothing scored before the inputs are checked
    assert done.stderr.decode() == f"error: {tmp_path / 'missing.jsonl'}: cannot read: No such file or directory\n"

    done = _predict("--model", model, str(events))
    assert done.returncode == 0, done.stderr
    assert [(p["id"], p["predicted"]) for p in _lines(done.stdout)] == [(1, True), (2, False)]  # no source.labels


def test_predict_without_a_message_is_one_line_and_status_2(spam_checkpoint, tmp_path):
    """Nothing on standard input, or a file of blank lines: no message to score, not the score of an empty one."""
    done = _predict("--model", str(spam_checkpoint))
    assert (done.returncode, done.stdout) == (2, b"")
    assert done.stderr.decode().splitlines() == ["error: standard input: empty: no message to score"]
    blank = tmp_path / "blank.eml"
    blank.write_bytes(b"\r\n\n")
    done = _predict("--model", str(spam_checkpoint), str(blank))
    assert (done.returncode, done.stdout) == (2, b"")
    assert done.stderr.decode().splitlines() == [f"error: {blank}: empty: no message to score"]


def test_events_with_their_text_under_another_name_are_not_scored_in_silence(spam_checkpoint, tmp_path, capsys):
    """Objects with an id and a label but the text under another field are labels alone: nothing is scored, and the
    command says so with status 2, where it used to exit 0 with no output."""
    renamed = tmp_path / "renamed.jsonl"
    renamed.write_text(
        "".join(json.dumps({"id": m["id"], "body": m["text"], "label": m["label"]}) + "\n" for m in _sample(0, 12)),
        encoding="utf-8",
    )
    assert cli.main(["predict", "--model", str(spam_checkpoint), str(renamed)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines()[-1] == (
        "error: nothing to score: each of the 12 records read is a label alone or a comment, and the model's"
        " configuration reads an event's features from the field 'x' or 'text' (source.fields)"
    )
    labelled = tmp_path / "mixed.jsonl"
    labelled.write_text(renamed.read_text(encoding="utf-8") + json.dumps(_sample(20, 1)[0]) + "\n", encoding="utf-8")
    assert cli.main(["predict", "--model", str(spam_checkpoint), str(labelled)]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1  # one event scored: the labels alone are passed over
