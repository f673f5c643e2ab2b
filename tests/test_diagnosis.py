"""No silent success: a run that rejects each of its first records stops (status 2) and says what the input looks
like; an input's name says its mail format; mail a run would learn nothing from is refused before it starts.

The inputs are written here from the bundled sample: an mbox, one raw message, JSON lines with other labels or
other field names, svmlight lines, a Maildir.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest
import yaml

from pegasos_stream import cli
from pegasos_stream.cli.assemble import build_runner, build_source
from pegasos_stream.cli.config import load_config
from pegasos_stream.persist.checkpoint import Checkpoints, checkpoints
from pegasos_stream.run.diagnosis import AllRejected

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "pegasos_stream" / "data" / "spam-sample.jsonl.gz"
#: What each hint ends with.
READ_ON = " (to read on regardless: --set run.stop_after_leading_rejections=0)"


@pytest.fixture(scope="module")
def sample() -> list[dict]:
    """The first 150 messages of the bundled sample: {"id", "text", "label"} with labels spam and ham."""
    return [json.loads(line) for line in gzip.decompress(SAMPLE.read_bytes()).splitlines()[:150]]


def _message(text: str) -> bytes:
    """A message's bytes, without the envelope line a corpus file may start with."""
    data = text.encode("utf-8", "surrogateescape")
    return data.split(b"\n", 1)[1] if data.startswith(b"From ") else data


def _mbox(path: Path, rows: list[dict]) -> Path:
    envelope = b"From sender@example.com Mon Jan  1 00:00:00 2024\n"
    path.write_bytes(
        b"".join(envelope + re.sub(rb"(?m)^(>*From )", rb">\1", _message(r["text"])) + b"\n" for r in rows)
    )
    return path


def _json_lines(path: Path, objects: list[dict]) -> Path:
    path.write_text("".join(json.dumps(item) + "\n" for item in objects), encoding="utf-8")
    return path


def _cli(capsys, *args: str) -> tuple[int, list[str], str]:
    """``pegasos-stream ARGS`` in this process: (status, the lines on stderr, stdout)."""
    status = cli.main(list(args))
    captured = capsys.readouterr()
    return status, captured.err.splitlines(), captured.out


def _eval_spam(capsys, *args: str) -> tuple[int, list[str], str]:
    return _cli(capsys, "eval", "--config", "spam", "--json", *args)


def _refusal(status: int, lines: list[str]) -> str:
    """The hint of a run stopped for rejecting everything: status 2, and the last line on stderr."""
    assert status == 2, lines[-3:]
    assert lines[-1].startswith("error: ") and lines[-1].endswith(READ_ON), lines[-1]
    return lines[-1][len("error: ") : -len(READ_ON)]


# -- the format the input's name says --------------------------------------------------------


def test_an_mbox_or_eml_name_says_its_format_and_its_messages_are_learned(sample, tmp_path, capsys):
    """The shipped spam job reads JSON lines; given an .mbox or .eml, it reads their messages."""
    mbox = _mbox(tmp_path / "mail.mbox", sample[:40])
    status, lines, out = _eval_spam(capsys, "--input", str(mbox), "--set", "source.label=spam")
    assert status == 0, lines[-3:]
    assert (json.loads(out)["learned"], json.loads(out)["rejected"]) == (40, 0)
    eml = tmp_path / "one.eml"
    eml.write_bytes(_message(sample[0]["text"]))
    status, lines, out = _eval_spam(capsys, "--input", str(eml), "--set", "source.label=spam")
    assert status == 0, lines[-3:]
    assert (json.loads(out)["learned"], json.loads(out)["rejected"]) == (1, 0)


def test_eval_of_mail_without_a_label_is_refused_and_run_says_it_only_predicts(sample, tmp_path, capsys):
    mbox = _mbox(tmp_path / "mail.mbox", sample[:5])
    status, lines, _ = _eval_spam(capsys, "--input", str(mbox))
    assert (status, lines) == (
        2,
        [
            f"error: source.label: the messages of {mbox} carry no label, and eval learns from labels: set the label"
            " of every message of this input, e.g. --set source.label=spam"
        ],
    )
    status, lines, _ = _cli(capsys, "run", "--config", "spam", "--input", str(mbox), "--output", str(tmp_path / "p"))
    assert status == 0
    assert lines[0] == f"the messages of {mbox} carry no label (source.label): they are predicted, not learned"


def test_a_maildir_without_folder_labels_is_refused_with_the_fix(sample, tmp_path, capsys):
    root = tmp_path / "Maildir"
    for folder, rows in (("cur", sample[:3]), (".Spam/cur", sample[3:6])):
        (root / folder).mkdir(parents=True)
        for number, row in enumerate(rows):
            (root / folder / f"{number}.host:2,S").write_bytes(_message(row["text"]))
    status, lines, _ = _eval_spam(capsys, "--input", str(root))
    assert (status, lines) == (
        2,
        [
            f"error: source.folders: the messages of the maildir {root} take the label of their folder, and"
            " source.folders names none, so nothing would be learned: set it, e.g. --set 'source.folders={Spam:"
            " spam, INBOX: ham}' (its folders: INBOX, Spam), or source.label for every message"
        ],
    )
    status, lines, out = _eval_spam(capsys, "--input", str(root), "--set", "source.folders={Spam: spam, INBOX: ham}")
    assert status == 0, lines[-3:]
    assert json.loads(out)["learned"] == 6


# -- a run that rejects each of its first records --------------------------------------------


def test_an_mbox_read_as_json_lines_stops_saying_it_looks_like_an_mbox(sample, tmp_path, capsys):
    mbox = _mbox(tmp_path / "mail.txt", sample[:40])  # a name that says no format
    status, lines, out = _eval_spam(capsys, "--input", str(mbox))
    assert _refusal(status, lines) == (
        "each of the first 100 records was rejected: the input looks like an mbox, read as json: set source.format:"
        " mbox"
    )
    assert out == ""  # no summary: the run did not succeed


def test_a_raw_message_read_as_json_lines_stops_saying_it_looks_like_one(sample, tmp_path, capsys):
    message = tmp_path / "message.txt"
    message.write_bytes(_message(sample[0]["text"]))
    status, lines, _ = _eval_spam(capsys, "--input", str(message))
    assert _refusal(status, lines).endswith(
        "records was rejected: the input looks like a raw RFC 822 message, read as json: set source.format: raw"
    )


def test_gzip_data_under_a_name_without_gz_is_said_to_be_gzip(tmp_path, capsys):
    disguised = tmp_path / "mail.jsonl"
    disguised.write_bytes(SAMPLE.read_bytes())
    status, lines, _ = _eval_spam(capsys, "--input", str(disguised))
    assert _refusal(status, lines) == (
        "each of the first 100 records was rejected: the input looks like gzip data, read as it is: a file whose name"
        " ends in .gz is decompressed, a pipe is not (decompress into it: zcat FILE | pegasos-stream ... --input -)"
    )


def test_labels_other_than_those_expected_are_named(sample, tmp_path, capsys):
    relabelled = [{**row, "label": "SPAM" if row["label"] == "spam" else "not-spam"} for row in sample]
    status, lines, _ = _eval_spam(capsys, "--input", str(_json_lines(tmp_path / "mail.jsonl", relabelled)))
    assert _refusal(status, lines) == (
        "each of the first 100 records was rejected: its labels are 'SPAM', 'not-spam', where source.labels expects"
        " 'spam' or 'ham'"
    )


def test_json_with_other_field_names_names_the_fields_seen(sample, tmp_path, capsys):
    renamed = [{"key": row["id"], "body": row["text"], "class": row["label"]} for row in sample]
    status, lines, _ = _eval_spam(capsys, "--input", str(_json_lines(tmp_path / "mail.jsonl", renamed)))
    assert _refusal(status, lines) == (
        "each of the first 100 records was rejected: the input holds JSON objects with the fields 'key', 'body',"
        " 'class', where source.fields expects 'id', 'x' or 'text', and 'label'"
    )


def test_json_whose_text_is_under_another_name_is_not_read_as_labels_in_silence(sample, tmp_path, capsys):
    """Objects with an id and a label but their text under another name are labels alone, for no event: the run
    stops and names the fields, where it used to end in success with nothing learned."""
    renamed = [{"id": row["id"], "body": row["text"], "label": row["label"]} for row in sample]
    status, lines, out = _eval_spam(capsys, "--input", str(_json_lines(tmp_path / "mail.jsonl", renamed)))
    assert _refusal(status, lines) == (
        "each of the first 100 records was a label with no event before it: the input holds JSON objects with the"
        " fields 'id', 'body', 'label', none of them where source.fields expects an event's features, 'x' or 'text':"
        " set source.fields.text (or .x) to the field that holds them"
    )
    assert out == ""
    status, lines, out = _eval_spam(capsys, "--input", str(tmp_path / "mail.jsonl"), "--set", "source.fields.text=body")
    assert status == 0, lines[-3:]
    assert json.loads(out)["learned"] == len(sample)


def test_an_eval_whose_events_carry_no_label_where_it_reads_one_does_not_succeed(sample, tmp_path, capsys):
    """Labels under another field: every event is scored and waits for a label that never comes. eval learned
    nothing, and says so with status 2 (no summary), where it used to end in success with n 0."""
    renamed = [{"id": row["id"], "text": row["text"], "class": row["label"]} for row in sample[:30]]
    path = _json_lines(tmp_path / "mail.jsonl", renamed)
    status, lines, out = _eval_spam(capsys, "--input", str(path))
    assert (status, out) == (2, "")
    assert lines[-1] == (
        "error: eval learned nothing: none of the 30 events it scored carried a label in the field 'label'"
        " (source.fields.label), nor did a label come later for one; eval learns from labels (run scores unlabelled"
        " events)"
    )
    status, lines, out = _eval_spam(capsys, "--input", str(path), "--set", "source.fields.label=class")
    assert status == 0, lines[-3:]
    assert json.loads(out)["learned"] == 30


def test_an_eval_of_an_empty_input_does_not_succeed(tmp_path, capsys):
    """An input without a record (an empty file or pipe): eval names it and ends with status 2, where it used to
    end in success with n 0. A run over it succeeds: its source may simply have nothing new."""
    empty = tmp_path / "mail.jsonl"
    empty.write_bytes(b"")
    status, lines, out = _eval_spam(capsys, "--input", str(empty))
    assert (status, out) == (2, "")
    assert lines == [f"error: eval read no record from {empty}: there is nothing to evaluate"]
    status, lines, _ = _cli(capsys, "run", "--config", "spam", "--input", str(empty), "--output", str(tmp_path / "o"))
    assert status == 0, lines[-3:]
    assert json.loads(lines[-1])["events"] == 0


@pytest.mark.parametrize("command", ["eval", "run"])
def test_a_run_that_read_on_through_rejections_and_rejected_everything_does_not_succeed(tmp_path, capsys, command):
    """With the watch over the first records off, a run whose every record was rejected still ends with status 2
    and says so, after naming each record; one record learned makes it a success."""
    bad = ["not JSON", json.dumps({"id": "a", "text": "hi", "label": "maybe"}), json.dumps({"text": 5})]
    path = tmp_path / "mail.jsonl"
    path.write_text("".join(line + "\n" for line in bad), encoding="utf-8")
    args = [command, "--config", "spam", "--input", str(path), "--set", "run.stop_after_leading_rejections=0"]
    args += ["--output", str(tmp_path / "out")] if command == "run" else []
    status, lines, out = _cli(capsys, *args)
    assert (status, out) == (2, "")
    assert [line.split(":")[1] for line in lines[:-1]] == ["1", "2", "3"]
    assert lines[-1] == "error: each of the 3 records read was rejected: nothing was learned"
    path.write_text(path.read_text() + json.dumps({"text": "hi", "label": "ham"}) + "\n", encoding="utf-8")
    status, lines, _ = _cli(capsys, *args)
    assert status == 0, lines[-3:]


def test_an_eval_of_labels_alone_read_on_past_the_watch_does_not_succeed(tmp_path, capsys):
    """Labels for ids no event had, with the watch off: nothing is learned, and eval says what its records came to
    (status 2), where it used to end in success with n 0."""
    labels = [{"id": f"gone-{i}", "label": "spam"} for i in range(3)] + [{"id": "bad", "text": 5, "label": "ham"}]
    path = _json_lines(tmp_path / "labels.jsonl", labels)
    status, lines, out = _eval_spam(capsys, "--input", str(path), "--set", "run.stop_after_leading_rejections=0")
    assert (status, out) == (2, "")
    assert lines[-1] == (
        "error: eval learned nothing from its 4 records: 1 rejected, 3 labels for an id that no event before them had,"
        " and 0 events whose label did not come in time (delayed_labels)"
    )


def test_late_labels_of_events_seen_before_them_disarm_the_watch(tmp_path, capsys):
    """A label for an event the run predicted is a label learned: the watch ends, however many labels follow for
    ids it never saw."""
    events = [{"id": "e", "x": {"a": 1.0}}, {"id": "e", "label": True}]
    events += [{"id": f"gone-{i}", "label": i % 2 == 0} for i in range(150)]
    job = _dict_job(tmp_path, _json_lines(tmp_path / "events.jsonl", events))
    status, lines, out = _cli(capsys, "eval", "--config", str(job), "--json")
    assert status == 0, lines[-3:]
    assert (json.loads(out)["learned"], json.loads(out)["unmatched_labels"]) == (1, 150)


def _dict_job(tmp_path: Path, path: Path, **sections: dict) -> Path:
    job = tmp_path / "job.yaml"
    config = {"model": {"lambda_": 0.01}, "source": {"type": "file", "path": str(path)}, **sections}
    job.write_text(yaml.safe_dump(config), encoding="utf-8")
    return job


def test_svmlight_read_as_json_and_svmlight_labels_of_another_kind(tmp_path, capsys):
    lines_in = tmp_path / "data.txt"
    lines_in.write_text("".join(f"{2 + i % 3} 1:0.5 7:{i}\n" for i in range(30)), encoding="utf-8")
    status, lines, _ = _cli(capsys, "eval", "--config", str(_dict_job(tmp_path, lines_in)))
    assert _refusal(status, lines) == (
        "each of the input's 30 records was rejected: the input looks like svmlight lines, read as json: set"
        " source.format: svmlight"
    )
    status, lines, _ = _cli(
        capsys, "eval", "--config", str(_dict_job(tmp_path, lines_in)), "--set", "source.format=svmlight"
    )
    assert _refusal(status, lines) == (
        "each of the input's 30 records was rejected: its labels are 2.0, 3.0, 4.0, not true | false, 1 | 0 | -1:"
        " map them to those with source.labels: {positive: ..., negative: ...}"
    )


def test_the_limit_is_configurable_and_a_record_taken_among_the_first_disarms_it(tmp_path, capsys):
    bad, good = b'{"id": "bad", "x": {"a": "one"}, "label": true}', b'{"id": "good", "x": {"a": 1.0}, "label": true}'
    events = tmp_path / "events.jsonl"
    events.write_bytes(b"\n".join([bad] * 30) + b"\n")
    job = str(_dict_job(tmp_path, events))
    status, lines, _ = _cli(capsys, "eval", "--config", job, "--set", "run.stop_after_leading_rejections=10")
    assert _refusal(status, lines) == (
        f"each of the first 10 records was rejected: the first: {events}:1: feature 'a' has value 'one': expected a"
        " number"
    )
    assert sum(line.startswith("rejected ") for line in lines) == 10
    status, lines, out = _cli(capsys, "eval", "--config", job, "--set", "run.stop_after_leading_rejections=0", "--json")
    assert sum(line.startswith("rejected ") for line in lines) == 30
    assert (status, out, lines[-1]) == (2, "", "error: each of the 30 records read was rejected: nothing was learned")
    events.write_bytes(b"\n".join([bad] * 5 + [good] + [bad] * 200) + b"\n")
    status, _, out = _cli(capsys, "eval", "--config", job, "--json")
    assert (status, json.loads(out)["rejected"]) == (0, 205)


def test_records_all_rejected_are_neither_checkpointed_nor_skipped_by_the_run_that_follows(tmp_path, capsys):
    """The run stops without a checkpoint: once the cause is mended, a resumed run reads those records again."""
    events = tmp_path / "events.txt"
    events.write_text("".join(f"{1 - 2 * (i % 2)} 1:1 2:{i}\n" for i in range(150)), encoding="utf-8")
    job = str(_dict_job(tmp_path, events, checkpoint={"dir": str(tmp_path / "ck"), "every_events": 10}))
    status, lines, _ = _cli(capsys, "run", "--config", job, "--output", str(tmp_path / "out"))
    assert "the input looks like svmlight lines, read as json" in _refusal(status, lines)
    assert checkpoints(tmp_path / "ck") == []
    status, lines, _ = _cli(capsys, "run", "--config", job, "--resume", "--set", "source.format=svmlight")
    assert status == 0, lines[-3:]
    assert json.loads(lines[-1])["learned"] == 150


def test_the_runner_stops_before_a_checkpoint_covers_records_it_rejected_each_of(tmp_path):
    events = tmp_path / "events.jsonl"
    events.write_bytes(b"not JSON\n" * 20)
    config = load_config(None, ["source.type=file", f"source.path={events}", "output.type=none", "model.lambda_=0.1"])
    runner = build_runner(config)
    runner.stop_after_leading_rejections = 8
    source = build_source(config)
    written = Checkpoints(tmp_path / "ck", every_events=1)
    try:
        with pytest.raises(AllRejected, match=r"^each of the first 8 records was rejected: the first: .*:1: malformed"):
            runner.run(source, checkpoints=written)
    finally:
        source.close()
        written.close()
    assert (runner.stats.events, runner.stats.rejected) == (8, 8)
    assert checkpoints(tmp_path / "ck") == []
