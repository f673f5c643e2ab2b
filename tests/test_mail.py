"""Mail in the formats it comes in: mbox files and standard input, one whole message on standard input or
in a file, Maildir trees, and the configuration that reads them.

The end-to-end tests run the command line in a subprocess on files written here: a mail source must
give the learner exactly the messages a JSON lines file of the same texts gives it (the same
predictions, bit for bit), and a run stopped and resumed from its checkpoint must end with the
model of one uninterrupted run.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

from pegasos_stream.cli.config import ConfigError, load_config
from pegasos_stream.io.inputs import FileHead
from pegasos_stream.io.mail import (
    NO_USER,
    MaildirSource,
    MboxSplitter,
    MessageFileSource,
    MessageStdinSource,
    maildir_folders,
)
from pegasos_stream.io.records import Record
from pegasos_stream.parse.parsing import BadRecord, EventParser
from pegasos_stream.persist.checkpoint import describe, latest_valid

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "pegasos_stream" / "data" / "spam-sample.jsonl.gz"
SPAM_CONFIG = ROOT / "configs" / "spam.yaml"
BIN = shutil.which("pegasos-stream", path=str(Path(sys.executable).parent)) or shutil.which("pegasos-stream")

FIRST = b"From: alice@example.com\nSubject: one\n\nFromage is no envelope line.\nFrom\nbye\n"
SECOND = b"From: bob@example.com\nSubject: two\n\nFrom the desk of Bob:\n>From a quoted reply\n>>From deeper\n\n"
THIRD = b"From: carol@example.com\nSubject: three\n\nno final line end"


def _envelope(number: int) -> bytes:
    return b"From sender%d@example.com Mon Jan  1 00:00:%02d 2024\n" % (number, number % 60)


def _mbox(messages: list[bytes]) -> bytes:
    """``messages`` as an mboxrd file: an envelope line before each, one more ">" on each body line
    ">...>From ", and a blank line between two (each message but the last must end with a line end)."""
    return b"\n".join(
        _envelope(number) + re.sub(rb"(?m)^(>*From )", rb">\1", message) for number, message in enumerate(messages, 1)
    )


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
    return path


def _identity(path: Path) -> dict:
    """The identity of the file at ``path`` that a position taken now records."""
    with open(path, "rb") as file:
        return FileHead(path).identity(file)


def _read_all(source) -> list[Record]:
    try:
        return [record for record in source if record is not None]
    finally:
        source.close()


# -- mbox: cutting messages ----------------------------------------------------------------


@pytest.mark.parametrize("name", ["mail.mbox", "mail.mbox.gz"])
@pytest.mark.parametrize("batch", [1, 10])
def test_an_mbox_file_is_cut_into_its_messages(tmp_path, name, batch):
    data = _mbox([FIRST, SECOND, THIRD])
    assert b"\n>From the desk" in data and b"\n>>From a quoted" in data and b"\n>>>From deeper" in data
    path = _write(tmp_path / name, data)
    source = MessageFileSource(path, "mbox", max_bytes=10_000, label="spam")
    records = []
    while (records_read := source.read(batch)) is not None:
        records += list(source.claim(records_read))
    source.close()
    # the envelope lines and the blank separator lines are no part of the messages; ">From " lines lose a ">"
    assert [r.value for r in records] == [FIRST, SECOND, THIRD]
    assert [r.position for r in records] == [f"{path}:1", f"{path}:2", f"{path}:3"]
    starts = [match.start() + 1 for match in re.finditer(rb"\nFrom ", data)]
    assert [r.cursor for r in records] == [(starts[0], 1), (starts[1], 2), (len(data), 3)]
    assert source.position() == {"offset": len(data), "message": 3, "input": _identity(path)}
    events = [EventParser("mbox", labels={"positive": "spam", "negative": "ham"}).parse(r) for r in records]
    assert [(e.id, e.text, e.label) for e in events] == [
        (f"{path}:{i}", r.value, True) for i, r in enumerate(records, 1)
    ]


@pytest.mark.parametrize(
    "data, messages",
    [
        (_mbox([FIRST, SECOND, THIRD]), [FIRST, SECOND, THIRD]),
        # mboxo without blank lines between messages, a last line end, CRLF line ends
        (_envelope(1) + FIRST + _envelope(2) + THIRD + b"\n", [FIRST, THIRD + b"\n"]),
        (
            b"From a\r\nSubject: x\r\n\r\nbody\r\n\r\nFrom b\r\nSubject: y\r\n\r\n",
            [b"Subject: x\r\n\r\nbody\r\n", b"Subject: y\r\n"],
        ),
        # an envelope line and nothing else: an empty message; blank lines before the first one are skipped
        (b"\n\n" + _envelope(1) + _envelope(2) + THIRD, [b"", THIRD]),
    ],
    ids=["mboxrd", "mboxo", "crlf", "empty"],
)
def test_an_mbox_fed_in_pieces_of_any_size_gives_the_same_messages(data, messages):
    for size in [*range(1, 9), 64, len(data)]:
        splitter = MboxSplitter()
        found = []
        for start in range(0, len(data), size):
            found += splitter.feed(data[start : start + size])
        found += splitter.end()
        assert [m.value for m in found] == messages, size
        assert [m.number for m in found] == list(range(1, len(messages) + 1))
        assert found[-1].end == len(data)
        assert all(data[m.end : m.end + 5] == b"From " for m in found[:-1])


def test_text_before_the_first_envelope_line_and_an_empty_message_are_rejected(tmp_path):
    path = _write(tmp_path / "mail.mbox", b"Subject: not an mbox\n\nhello\n" + _envelope(1) + _envelope(2) + FIRST)
    records = _read_all(MessageFileSource(path, "mbox"))
    parser = EventParser("mbox")
    with pytest.raises(BadRecord, match=rf"^{path}:0: text before the first 'From ' line: not an mbox$"):
        parser.parse(records[0])
    with pytest.raises(BadRecord, match=rf"^{path}:1: empty message$"):
        parser.parse(records[1])
    event = parser.parse(records[2])
    assert (event.id, event.text, event.label) == (f"{path}:2", FIRST, None)  # no source label: predicted only


def test_an_mbox_message_longer_than_max_bytes_is_cut_and_refused(tmp_path):
    long = b"Subject: long\n\n" + b"a" * 5000 + b"\n"
    path = _write(tmp_path / "mail.mbox", _mbox([FIRST, long, THIRD]))
    records = _read_all(MessageFileSource(path, "mbox", max_bytes=1000))
    assert [len(r.value) for r in records] == [len(FIRST), 1001, len(THIRD)]
    parser = EventParser("mbox", max_bytes=1000)
    with pytest.raises(BadRecord, match=rf"^{path}:2: record of more than 1000 bytes exceeds 1000$"):
        parser.parse(records[1])
    assert parser.parse(records[2]).text == THIRD


def test_an_mbox_file_resumes_at_the_start_of_the_next_message(tmp_path):
    data = _mbox([FIRST, SECOND, THIRD])
    path = _write(tmp_path / "mail.mbox.gz", data)
    source = MessageFileSource(path, "mbox")
    batch = source.claim(source.read(3))
    source.unclaim(batch, 1)  # only the first message was processed
    position = source.position()
    assert position == {"offset": batch.cursors[0][0], "message": 1, "input": _identity(path)}
    assert data[position["offset"] :].startswith(_envelope(2))
    assert [(r.value, r.position) for r in source.read(3)] == [(SECOND, f"{path}:2"), (THIRD, f"{path}:3")]
    source.close()
    resumed = _read_all(MessageFileSource(path, "mbox", position["offset"], position["message"]))
    assert [(r.value, r.position) for r in resumed] == [(SECOND, f"{path}:2"), (THIRD, f"{path}:3")]


@pytest.mark.parametrize("name", ["message.eml", "message.eml.gz"])
def test_a_raw_file_is_one_message_however_many_from_lines_it_holds(tmp_path, name):
    data = _mbox([FIRST, SECOND])
    path = _write(tmp_path / name, data)
    source = MessageFileSource(path, "raw", max_bytes=10_000, label="ham")
    [record] = _read_all(source)
    assert (record.value, record.position, record.label) == (data, f"{path}:1", "ham")
    assert source.position() == {"offset": len(data), "message": 1, "input": _identity(path)}
    assert _read_all(MessageFileSource(path, "raw", len(data), 1)) == []  # resumed after it: nothing left


def test_mbox_on_standard_input_hands_out_each_message_once_the_next_begins(tmp_path):
    data = _mbox([FIRST, SECOND, THIRD])
    read_end, write_end = os.pipe()
    wrote_second = threading.Event()
    go_on = threading.Event()

    def feed() -> None:
        with os.fdopen(write_end, "wb") as out:
            split = data.index(_envelope(3))
            out.write(data[:split])
            out.flush()
            wrote_second.set()
            go_on.wait(10)
            out.write(data[split:])

    writer = threading.Thread(target=feed)
    writer.start()
    with os.fdopen(read_end, "rb") as stream:
        source = MessageStdinSource("mbox", poll_seconds=5, stream=stream, label="ham")
        wrote_second.wait(10)
        first = source.claim(source.read(10))  # the second message is not complete before the third starts
        assert [(r.value, r.position, r.label) for r in first] == [(FIRST, "<stdin>:1", "ham")]
        go_on.set()
        second = source.claim(source.read(10))  # complete once the third starts
        assert [(r.value, r.position) for r in second] == [(SECOND, "<stdin>:2")]
        third = source.claim(source.read(10))  # complete at the end of the input
        assert [(r.value, r.position) for r in third] == [(THIRD, "<stdin>:3")]
        source.unclaim(third, 0)
        assert source.position() == {"messages": 2}
        assert [r.value for r in source.read(10)] == [THIRD]
        assert source.read(10) is None
        source.close()
    writer.join()
    # a resumed run skips the messages its checkpoint covers
    with (tmp_path / "mail.mbox").open("wb") as out:
        out.write(data)
    with (tmp_path / "mail.mbox").open("rb") as stream:
        skipped = _read_all(MessageStdinSource("mbox", poll_seconds=1, stream=stream, skip=2))
    assert [(r.value, r.position) for r in skipped] == [(THIRD, "<stdin>:3")]


# -- the command line: the bundled sample as an mbox and as a Maildir ----------------------


def _sample() -> list[dict]:
    with gzip.open(SAMPLE, "rt", encoding="utf-8") as lines:
        return [json.loads(line) for line in lines]


def _message_bytes(text: str) -> bytes:
    """A sample message as a file holds it: without its envelope line, ending with a line end."""
    data = text.encode("utf-8", "surrogatepass")
    data = data.split(b"\n", 1)[1] if data.startswith(b"From ") else data
    return data if data.endswith(b"\n") else data + b"\n"


def _json_lines(path: Path, messages: list[bytes], labels: list[str]) -> Path:
    """The same messages as JSON text events, for the reference run."""
    lines = [
        json.dumps({"id": i, "text": message.decode("utf-8", "surrogatepass"), "label": label})
        for i, (message, label) in enumerate(zip(messages, labels))
    ]
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def _job(directory: Path, source: dict, checkpoint: bool = False) -> Path:
    """A spam-filter job writing its predictions to directory/out.jsonl (checkpoints in directory/ck)."""
    directory.mkdir(parents=True, exist_ok=True)
    config = {
        "model": {"kind": "linear", "lambda_": 1e-4},
        "features": {"type": "email", "reader": "bytes", "hash_bits": 18},
        "source": {"labels": {"positive": "spam", "negative": "ham"}, **source},
        "output": {"type": "file", "path": str(directory / "out.jsonl")},
        "evaluation": {"stats_every_seconds": 60},
    }
    if checkpoint:
        config["checkpoint"] = {"dir": str(directory / "ck"), "every_events": 40}
    path = directory / "job.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def _run(job: Path, *args: str, **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run([BIN, "run", "--config", str(job), *args], capture_output=True, timeout=120, **kwargs)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    return done


def _predictions(job: Path) -> list[dict]:
    return [json.loads(line) for line in (job.parent / "out.jsonl").read_text(encoding="utf-8").splitlines()]


def _scores(predictions: list[dict]) -> list[tuple]:
    return [(p["score"], p["proba"], p["predicted"]) for p in predictions]


def _summary(done: subprocess.CompletedProcess) -> dict:
    summary = json.loads(done.stderr.decode().strip().splitlines()[-1])
    del summary["examples_per_s"]
    return summary


def _final(directory: Path) -> dict:
    """What the newest checkpoint holds: the model's digest and size, the counts, the source position."""
    found = latest_valid(directory)
    assert found is not None
    summary = describe(directory)
    kept = ("learner", "t", "weights", "events", "source", "model_sha256")
    return {**{key: summary[key] for key in kept}, "counts": found[1]["runner"]["counts"]}


@pytest.fixture(scope="module")
def sample_messages() -> tuple[list[bytes], list[str]]:
    rows = _sample()
    return [_message_bytes(row["text"]) for row in rows], [row["label"] for row in rows]


def test_an_mbox_gives_the_learner_the_messages_of_its_json_lines_and_resumes_exactly(sample_messages, tmp_path):
    """The sample as an mbox (every message labelled spam by source.label): the predictions of the
    JSON lines of the same texts, bit for bit; stopped mid-file and resumed, the model, counts and
    predictions of the uninterrupted run."""
    messages, _ = sample_messages
    assert sum(bool(re.search(rb"(?m)^>*From ", m)) for m in messages) >= 4  # body lines an mbox escapes
    mbox = _write(tmp_path / "sample.mbox", _mbox(messages))
    mbox_source = {"type": "file", "path": str(mbox), "format": "mbox", "label": "spam"}
    reference = _job(
        tmp_path / "json",
        {"type": "file", "path": str(_json_lines(tmp_path / "s.jsonl", messages, ["spam"] * len(messages)))},
    )
    _run(reference)
    whole = _job(tmp_path / "whole", mbox_source, checkpoint=True)
    done = _run(whole)
    assert _summary(done)["learned"] == len(messages) and _summary(done)["rejected"] == 0
    assert _scores(_predictions(whole)) == _scores(_predictions(reference))
    assert [p["id"] for p in _predictions(whole)] == [f"{mbox}:{i}" for i in range(1, len(messages) + 1)]

    stopped = _job(tmp_path / "stopped", mbox_source, checkpoint=True)
    _run(stopped, "--max-events", "150")
    position = _final(tmp_path / "stopped" / "ck")["source"]
    assert position["message"] == 150
    assert mbox.read_bytes()[position["offset"] :].startswith(_envelope(151))  # the start of the next message
    resumed = _run(stopped, "--resume")
    assert "resuming from " in resumed.stderr.decode()
    assert _summary(resumed) == _summary(done)
    assert _final(tmp_path / "stopped" / "ck") == _final(tmp_path / "whole" / "ck")
    assert _predictions(stopped) == _predictions(whole)


def test_an_mbox_of_new_mail_resumed_after_another_is_learned_whole(sample_messages, tmp_path):
    """A checkpoint at the end of a.mbox (its format from its name, every message spam), then ``--resume --input
    b.mbox`` of ham, a smaller file than a's offset: b is read from its first message, each one learned."""
    messages, _ = sample_messages
    first = _write(tmp_path / "a.mbox", _mbox(messages[:60]))
    second = _write(tmp_path / "b.mbox", _mbox(messages[60:90]))
    assert second.stat().st_size < first.stat().st_size
    job = _job(tmp_path, {"type": "file", "path": str(first), "label": "spam"}, checkpoint=True)
    assert _summary(_run(job))["learned"] == 60
    newest = describe(tmp_path / "ck")
    done = _run(job, "--resume", "--input", str(second), "--set", "source.label=ham")
    assert done.stderr.decode().splitlines()[0] == (
        f"file {second.resolve()} is not the input of {newest['path']} (file {first.resolve()}): reading it from its"
        " beginning"
    )
    summary = _summary(done)
    assert (summary["learned"], summary["rejected"], summary["t"]) == (90, 0, newest["t"] + 30)


@pytest.mark.parametrize("form", ["mbox", "json"])
def test_a_named_pipe_is_read_whole_as_standard_input_is(sample_messages, tmp_path, form):
    """``--input`` naming a pipe (a FIFO, or ``<(zcat ...)``), which cannot seek: every message learned, as from the
    same file, each named by the pipe."""
    messages, _ = sample_messages
    messages = messages[:50]
    if form == "mbox":
        data, source = _mbox(messages), {"type": "file", "format": "mbox", "label": "spam"}
    else:
        data = _json_lines(tmp_path / "s.jsonl", messages, ["spam"] * len(messages)).read_bytes()
        source = {"type": "file"}
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    job = _job(tmp_path / "job", {**source, "path": str(pipe)})
    writer = threading.Thread(target=pipe.write_bytes, args=(data,))
    writer.start()
    done = _run(job)
    writer.join()
    summary = _summary(done)
    assert (summary["learned"], summary["rejected"]) == (50, 0)
    assert all(p["id"].startswith(f"{pipe}:") for p in _predictions(job)) if form == "mbox" else True


def _maildir(root: Path, messages: list[bytes], labels: list[str]) -> list[Path]:
    """The messages as a Maildir, in order of delivery: ham in the INBOX (cur/ with flags, or new/),
    spam in the Maildir++ folder .Spam; the paths of the message files, in that order. Files that are
    not messages: deliveries in tmp/, the Maildir's own files, hidden files."""
    paths = []
    for number, (message, label) in enumerate(zip(messages, labels)):
        folder = root / (".Spam" if label == "spam" else "") / ("new" if number % 3 == 0 else "cur")
        name = f"{1_000_000_000 + number}.M{number}P{number % 7}.host" + ("" if number % 3 == 0 else ":2,S")
        folder.mkdir(parents=True, exist_ok=True)
        paths.append(folder / name)
        paths[-1].write_bytes(message)
    for folder in (root, root / ".Spam"):
        (folder / "tmp").mkdir()
        (folder / "tmp" / "0999999999.M1P1.host").write_bytes(FIRST)
        (folder / "maildirfolder").write_bytes(b"")
    (root / "dovecot-uidlist").write_bytes(b"3 V1 N2\n")
    (root / "cur" / ".hidden").write_bytes(FIRST)
    return paths


def test_a_maildir_is_read_in_delivery_order_with_its_folders_labels(tmp_path):
    messages = [FIRST, SECOND, THIRD, FIRST + b"again\n"]
    paths = _maildir(tmp_path / "Maildir", messages, ["ham", "spam", "ham", "spam"])
    (tmp_path / "Maildir" / ".Junk" / "cur").mkdir(parents=True)
    junk = tmp_path / "Maildir" / ".Junk" / "cur" / "1000000001.M9P9.host:2,"  # sorts after message 1
    junk.write_bytes(THIRD)
    broken = tmp_path / "Maildir" / "cur" / "1000000002.M8P8.host:2,S"  # a link to nothing: cannot be read
    broken.symlink_to(tmp_path / "gone")
    source = MaildirSource(tmp_path / "Maildir", {"Spam": "spam", "INBOX": "ham"}, max_bytes=10_000)
    records = _read_all(source)
    order = [paths[0], paths[1], junk, paths[2], broken, paths[3]]
    assert [r.position for r in records] == [str(path) for path in order]
    assert [r.value for r in records] == [FIRST, SECOND, THIRD, THIRD, b"", FIRST + b"again\n"]
    assert [r.label for r in records] == ["ham", "spam", None, "ham", "ham", "spam"]  # .Junk is not mapped
    assert [r.error for r in records] == [None] * 4 + ["cannot read: No such file or directory", None]
    with pytest.raises(BadRecord, match=rf"^{re.escape(str(broken))}: cannot read: No such file or directory$"):
        EventParser("raw").parse(records[4])
    assert source.position() == {"last": str(paths[3].relative_to(tmp_path / "Maildir"))}
    # a resumed source reads the messages after the last one processed, even once a client has flagged it
    last = str(paths[1].relative_to(tmp_path / "Maildir"))
    paths[2].rename(paths[2].with_name(paths[2].name.split(":")[0] + ":2,RS"))  # cur/ of INBOX, flags changed
    resumed = _read_all(MaildirSource(tmp_path / "Maildir", label="spam", after=last))
    flagged = paths[2].with_name(paths[2].name.split(":")[0] + ":2,RS")
    assert [r.position for r in resumed] == [str(path) for path in [junk, flagged, broken, paths[3]]]
    assert [r.label for r in resumed] == ["spam"] * 4  # no folders: source.label for every message


def test_a_maildir_of_users_names_each_message_by_its_users_directory(tmp_path):
    """``users``: each directory of the top one is a user's Maildir, its folders named from it; a file of the top
    directory is in no user's and is a record with the reason; hidden directories are no users."""
    ann = _maildir(tmp_path / "ann", [FIRST, SECOND, THIRD], ["ham", "spam", "ham"])  # at 1000000000, ...01, ...02
    bob = tmp_path / "bob" / ".Spam" / "cur" / "1000000000.M5P5.host:2,S"
    bob.parent.mkdir(parents=True)
    bob.write_bytes(THIRD)
    (tmp_path / ".cache" / "cur").mkdir(parents=True)
    (tmp_path / ".cache" / "cur" / "1.M1.host").write_bytes(FIRST)
    stray = tmp_path / "1000000001.M6P6.host"
    stray.write_bytes(FIRST)
    source = MaildirSource(tmp_path, {"Spam": "spam", "INBOX": "ham"}, users=True)
    records = _read_all(source)
    assert [r.position for r in records] == [str(ann[0]), str(bob), str(ann[1]), str(stray), str(ann[2])]
    assert [(r.user, r.label) for r in records] == [
        ("ann", "ham"), ("bob", "spam"), ("ann", "spam"), (None, "ham"), ("ann", "ham")
    ]  # fmt: skip
    assert [r.error for r in records] == [None, None, None, NO_USER, None]
    assert EventParser("raw", users=True).parse(records[1]).user == "bob"
    assert EventParser("raw").parse(records[1]).user is None  # (a learner without users reads none)
    resumed = _read_all(MaildirSource(tmp_path, users=True, after=str(bob.relative_to(tmp_path))))
    assert [(r.position, r.user) for r in resumed] == [(str(ann[1]), "ann"), (str(stray), None), (str(ann[2]), "ann")]
    assert maildir_folders(tmp_path, users=True) == ["INBOX", "Spam"]
    assert maildir_folders(tmp_path) == ["INBOX", "ann", "ann/Spam", "bob/Spam", "cache"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_a_maildir_file_that_cannot_be_opened_is_named_and_rejected(tmp_path):
    (tmp_path / "cur").mkdir()
    locked = tmp_path / "cur" / "1.M1.host"
    locked.write_bytes(FIRST)
    locked.chmod(0)
    records = _read_all(MaildirSource(tmp_path))
    assert [(r.position, r.error) for r in records] == [(str(locked), "cannot read: Permission denied")]


def test_a_maildir_gives_the_learner_the_messages_of_its_json_lines_and_resumes_exactly(sample_messages, tmp_path):
    """The sample as a Maildir (ham in the INBOX, spam in .Spam, labelled by source.folders) read with
    ``--input DIR``: the predictions of the JSON lines of the same texts in delivery order; stopped
    and resumed, the model of the uninterrupted run; an unreadable file is rejected and dead-lettered."""
    messages, labels = sample_messages
    root = tmp_path / "Maildir"
    paths = _maildir(root, messages, labels)
    broken = root / "cur" / "1000000100.M0P0.host:2,S"  # just before message 100 (from 0)
    broken.symlink_to(tmp_path / "gone")
    reference = _job(
        tmp_path / "json", {"type": "file", "path": str(_json_lines(tmp_path / "s.jsonl", messages, labels))}
    )
    _run(reference)
    maildir = {"folders": {"Spam": "spam", "INBOX": "ham"}}
    dead = {"errors": {"dead_letter": {"type": "file", "path": str(tmp_path / "dead.jsonl")}}}
    whole = _job(tmp_path / "whole", maildir, checkpoint=True)
    whole.write_text(yaml.safe_dump({**yaml.safe_load(whole.read_text()), **dead}), encoding="utf-8")
    done = _run(whole, "--input", str(root))
    assert (_summary(done)["learned"], _summary(done)["rejected"]) == (len(messages), 1)
    assert _scores(_predictions(whole)) == _scores(_predictions(reference))
    assert [p["id"] for p in _predictions(whole)] == [str(path) for path in paths]
    [letter] = [json.loads(line) for line in (tmp_path / "dead.jsonl").read_text().splitlines()]
    assert (letter["position"], letter["error"]) == (str(broken), f"{broken}: cannot read: No such file or directory")

    stopped = _job(tmp_path / "stopped", maildir, checkpoint=True)
    _run(stopped, "--input", str(root), "--max-events", "150")
    assert _final(tmp_path / "stopped" / "ck")["source"] == {"last": str(paths[148].relative_to(root))}
    resumed = _run(stopped, "--input", str(root), "--resume")
    assert "resuming from " in resumed.stderr.decode()
    assert _summary(resumed) == _summary(done)
    assert _final(tmp_path / "stopped" / "ck") == _final(tmp_path / "whole" / "ck")
    assert _predictions(stopped) == _predictions(whole)


# -- one whole message on standard input ---------------------------------------------------

MESSAGE = (
    b"Return-Path: <deals@example.com>\nFrom: deals@example.com\nTo: you@example.org\n"
    b'Subject: {"not": "json"}\n\nCheap watches, today only.\n'
)


def test_a_raw_message_on_standard_input_is_one_event(tmp_path):
    """An .eml piped into ``run --input -`` with ``source.format=raw``: one prediction (no line of
    it is taken for a JSON event); with ``source.label`` it is learned too."""
    base = ["--config", str(SPAM_CONFIG), "--set", "source.format=raw", "--input", "-"]
    done = subprocess.run([BIN, "run", *base], input=MESSAGE, capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    [prediction] = [json.loads(line) for line in done.stdout.splitlines()]
    assert prediction["id"] == "<stdin>:1"
    assert (_summary(done)["events"], _summary(done)["rejected"], _summary(done)["learned"]) == (1, 0, 0)
    done = subprocess.run(
        [BIN, "run", *base, "--set", "source.label=spam"], input=MESSAGE, capture_output=True, timeout=120
    )
    assert done.returncode == 0, done.stderr.decode()
    assert (_summary(done)["learned"], _summary(done)["t"], _summary(done)["rejected"]) == (1, 1, 0)


# -- configuration -------------------------------------------------------------------------

EMAIL = {"features": {"type": "email"}}
MAPPED = {"positive": "spam", "negative": "ham"}

REFUSED = [
    ({"source": {"format": "maildir"}}, "source.format", "json | svmlight | mbox | raw"),
    ({"source": {"type": "imap"}}, "source.type", "stdin | file | kafka | maildir"),
    ({**EMAIL, "source": {"format": "mbox", "label": ["spam"]}}, "source.label", "a label value"),
    ({**EMAIL, "source": {"type": "maildir", "path": "m", "folders": ["Spam"]}}, "source.folders", "a mapping"),
    ({**EMAIL, "source": {"type": "maildir"}}, "source.path", "required when source.type is maildir"),
    ({"source": {"format": "mbox"}}, "features.type", "expected email, got 'dict'"),
    ({**EMAIL, "source": {"type": "kafka", "topics": ["t"], "format": "mbox"}}, "source.format", "svmlight | raw"),
    ({**EMAIL, "source": {"type": "maildir", "path": "m", "format": "mbox"}}, "source.format", "expected raw"),
    ({**EMAIL, "source": {"label": "spam", "labels": MAPPED}}, "source.label", "only for mail"),
    (
        {**EMAIL, "source": {"format": "mbox", "folders": {"Spam": "spam"}}},
        "source.folders",
        "only for source.type maildir",
    ),
    ({**EMAIL, "source": {"format": "mbox", "label": "spam"}}, "source.label", "not a binary label"),
    ({**EMAIL, "source": {"format": "raw", "label": "eggs", "labels": MAPPED}}, "source.label", "is neither"),
    ({**EMAIL, "source": {"format": "raw", "label": float("nan")}}, "source.label", "expected a label value"),
    (
        {
            **EMAIL,
            "source": {"type": "maildir", "path": "m", "folders": {"Spam": "spam", "Ham": "eggs"}, "labels": MAPPED},
        },
        "source.folders.Ham",
        "is neither",
    ),
    ({**EMAIL, "source": {"type": "maildir", "path": "m", "folders": {2024: True}}}, "source.folders", "a folder name"),
    ({**EMAIL, "source": {"type": "maildir", "path": "m", "folders": {"Spam": [1]}}}, "source.folders.Spam", "a label"),
]


@pytest.mark.parametrize("config, key_path, form", REFUSED, ids=[f"{p}:{i}" for i, (_, p, _) in enumerate(REFUSED)])
def test_mail_keys_are_checked_naming_file_key_and_form(tmp_path, config, key_path, form):
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: {key_path}: "), message
    assert form in message and "\n" not in message, message


def test_mail_keys_accepted():
    maildir = load_config(
        None,
        [
            "features.type=email",
            "source.type=maildir",
            "source.path=m",
            "source.folders={Spam: 1, Drafts: null}",
            "source.label=false",
        ],
    )
    assert maildir["source"]["format"] == "raw"  # a maildir holds one message per file
    assert maildir["source"]["folders"] == {"Spam": 1, "Drafts": None}
    multiclass = load_config(
        None, ["model.kind=multiclass", "features.type=email", "source.format=mbox", "source.label=newsletter"]
    )
    assert multiclass["source"]["label"] == "newsletter"


def test_a_mail_configuration_error_exits_2_with_one_line(tmp_path):
    done = subprocess.run(
        [
            BIN,
            "run",
            "--config",
            str(SPAM_CONFIG),
            "--set",
            "source.format=raw",
            "--set",
            "source.label=maybe",
            "--input",
            "-",
        ],
        input=MESSAGE,
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr.decode().splitlines() == [
        "configuration error: --set 'source.label=maybe': source.label: 'maybe' is neither"
        " source.labels.positive 'spam' nor source.labels.negative 'ham'"
    ]
