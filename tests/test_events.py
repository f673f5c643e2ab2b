"""Records to events: JSON and svmlight parsing, and a BadRecord naming the position for every malformed kind."""

from __future__ import annotations

import gzip
import io
import itertools
import json
import os
import tempfile
import threading
import tracemalloc
from itertools import accumulate
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from river import stream

from pegasos_stream.io import sources
from pegasos_stream.io.inputs import FileHead
from pegasos_stream.io.records import Cursors, Record
from pegasos_stream.io.sources import FileSource, Source, StdinSource
from pegasos_stream.learners.validation import binary_sign
from pegasos_stream.parse.parsing import BadRecord, Event, EventParser


def _parse(value: bytes | str, position: str = "mail.jsonl:3", **parser_args) -> Event:
    if isinstance(value, str):
        value = value.encode("utf-8")
    return EventParser(**parser_args).parse(Record(value, position))


# -- JSON ----------------------------------------------------------------------------------


def test_json_event_with_features():
    event = _parse('{"id": "a1", "x": {"f": 1, "g": -2.5, "h": 0}, "label": true}')
    assert event == Event(id="a1", position="mail.jsonl:3", x={"f": 1, "g": -2.5, "h": 0}, label=True)
    assert event.has_input and event.text is None


def test_json_event_with_text():
    event = _parse('{"id": 7, "text": "Subject: hi\\n\\nhello", "label": false}')
    assert (event.id, event.text, event.label, event.x) == (7, "Subject: hi\n\nhello", False, None)
    assert event.has_input


def test_json_label_only_event():
    event = _parse('{"id": "a1", "label": 1}')
    assert (event.id, event.label, event.has_input) == ("a1", 1, False)


def test_json_unlabeled_event_and_missing_id():
    event = _parse('{"x": {"f": 1.5}}')
    assert event.label is None and event.x == {"f": 1.5}
    assert event.id == "mail.jsonl:3"  # without an id, the position identifies the event
    assert _parse('{"x": {"f": 1}, "label": null}').label is None


def test_json_x_takes_precedence_over_text():
    event = _parse('{"x": {"f": 1}, "text": "hello"}')
    assert event.x == {"f": 1} and event.text is None


def test_configurable_field_names():
    fields = {"id": "msg_id", "x": "features", "text": "body", "label": "class"}
    event = _parse('{"msg_id": "m", "features": {"a": 2}, "class": false, "x": "ignored"}', fields=fields)
    assert (event.id, event.x, event.label) == ("m", {"a": 2}, False)
    event = _parse('{"msg_id": "n", "body": "hello", "class": true}', fields=fields)
    assert (event.id, event.text, event.label) == ("n", "hello", True)
    # the default names mean nothing any more
    with pytest.raises(BadRecord, match="no 'features', 'body' or 'class' field"):
        _parse('{"id": "o", "x": {"a": 1}, "label": true}', fields=fields)
    # a partial mapping keeps the other defaults
    assert _parse('{"id": 1, "vec": {"a": 1}, "label": true}', fields={"x": "vec"}).x == {"a": 1}


def test_label_mapping():
    labels = {"positive": "spam", "negative": "ham"}
    assert _parse('{"text": "t", "label": "spam"}', labels=labels).label is True
    assert _parse('{"text": "t", "label": "ham"}', labels=labels).label is False
    assert _parse('{"id": 1, "label": "ham"}', labels=labels).label is False
    assert _parse('{"text": "t"}', labels=labels).label is None
    numeric = {"positive": 4, "negative": 2}
    assert _parse('{"text": "t", "label": 4}', labels=numeric).label is True
    assert _parse('{"text": "t", "label": 2.0}', labels=numeric).label is False


def test_labels_without_mapping_are_kept_as_they_are():
    for raw, label in (("true", True), ("false", False), ("1", 1), ("-1", -1), ("0", 0), ('"cat"', "cat")):
        assert _parse(f'{{"x": {{}}, "label": {raw}}}').label == label


# -- svmlight ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "line, label, x",
    [
        ("+1 1:0.5 3:2", True, {"1": 0.5, "3": 2.0}),
        ("1 1:0.5 3:2", True, {"1": 0.5, "3": 2.0}),
        ("1.0 a:1", True, {"a": 1.0}),
        ("-1 2:1", False, {"2": 1.0}),
        ("0 7:1.5", False, {"7": 1.5}),
        ("-1", False, {}),
        ("+1 qid:3 2:1 5:-0.25", True, {"2": 1.0, "5": -0.25}),
        ("-1 4:1e-3 # a comment: with 9:9 in it", False, {"4": 0.001}),
        ("1 4:2#no space", True, {"4": 2.0}),
        ("1\t4:2  5:3\r", True, {"4": 2.0, "5": 3.0}),
        ("1 x:-134.26 y:.25", True, {"x": -134.26, "y": 0.25}),
    ],
)
def test_svmlight_lines(line, label, x):
    event = _parse(line, position="train.svm:9", format="svmlight")
    assert event.label is label
    assert event.x == x
    assert all(isinstance(key, str) for key in event.x)  # names stay strings
    assert all(type(value) is float for value in event.x.values())
    assert event.id == event.position == "train.svm:9"


def test_svmlight_matches_rivers_reader():
    lines = [
        "+1 x:-134.26 y:0.2563",
        "1 x:-12 z:0.3",
        "-1 y:.25",
        "-1 10:1 20:0.5 300:-2",
        "1 10:1e-3 7:4#trailing comment",
        "0 5:1",
    ]
    rivers = list(stream.iter_libsvm(io.StringIO("\n".join(lines) + "\n")))
    assert len(rivers) == len(lines)
    for line, (x, y) in zip(lines, rivers):
        event = _parse(line, format="svmlight")
        assert event.x == x
        assert list(event.x) == list(x)  # same order of features too
        assert event.label is (y > 0)


def test_svmlight_with_label_mapping():
    labels = {"positive": 2, "negative": 1}
    assert _parse("2 a:1", format="svmlight", labels=labels).label is True
    assert _parse("1 a:1", format="svmlight", labels=labels).label is False
    with pytest.raises(BadRecord, match="unknown label"):
        _parse("-1 a:1", format="svmlight", labels=labels)


@pytest.mark.parametrize(
    "line, label", [("4 a:1", 4), ("4.0 a:1", 4), ("+1 a:1", 1), ("-1 a:1", -1), ("0 a:1", 0), ("2.5 a:1", 2.5)]
)
def test_svmlight_labels_are_classes_for_a_multiclass_learner(line, label):
    """The number is the class, an int when integral (as river's reader gives it with target_type=int)."""
    event = _parse(line, format="svmlight", classes=True)
    assert event.label == label and type(event.label) is type(label)
    assert event.x == {"a": 1.0}


def test_a_svmlight_label_that_is_no_class_is_a_bad_record():
    for value in ("nan", "inf", "-inf"):
        with pytest.raises(BadRecord, match=rf"^train.svm:2: svmlight label {float(value)!r} is not a class$"):
            _parse(f"{value} a:1", "train.svm:2", format="svmlight", classes=True)
    with pytest.raises(BadRecord, match=r"^train.svm:2: unknown svmlight label 4.0: expected \+1, -1 or 0$"):
        _parse("4 a:1", "train.svm:2", format="svmlight")  # a binary learner's svmlight labels


# -- malformed records ---------------------------------------------------------------------

MALFORMED = [
    # (name, record bytes, parser arguments, a fragment of the reason)
    ("malformed-json", b'{"x": {"a": 1}', {}, "malformed JSON"),
    ("trailing-garbage", b'{"x": {"a": 1}} }', {}, "malformed JSON"),
    ("invalid-utf8", b'{"text": "caf\xe9"}', {}, "invalid UTF-8"),
    ("invalid-utf8-start", b"\xff\xfe{}", {}, "invalid UTF-8"),
    ("array", b"[1, 2]", {}, "expected a JSON object, got list"),
    ("string", b'"hello"', {}, "expected a JSON object, got str"),
    ("number", b"3", {}, "expected a JSON object, got int"),
    ("null", b"null", {}, "expected a JSON object"),
    ("x-list", b'{"x": [1, 2], "label": true}', {}, "field 'x' must be an object"),
    ("x-string", b'{"x": "a:1", "label": true}', {}, "field 'x' must be an object"),
    ("x-null", b'{"x": null}', {}, "field 'x' must be an object"),
    ("value-string", b'{"x": {"a": "1"}, "label": true}', {}, "feature 'a' has value '1': expected a number"),
    ("value-null", b'{"x": {"a": null}}', {}, "feature 'a' has value None"),
    ("value-list", b'{"x": {"a": [1]}}', {}, "expected a number"),
    ("value-nan", b'{"x": {"a": 1, "b": NaN}}', {}, "feature 'b' has value nan: expected a finite number"),
    ("value-inf", b'{"x": {"a": Infinity}}', {}, "expected a finite number"),
    ("value-minus-inf", b'{"x": {"a": -Infinity}}', {}, "expected a finite number"),
    ("value-overflowing-float", b'{"x": {"a": 1e999}}', {}, "expected a finite number"),
    ("value-bool", b'{"x": {"a": true}, "label": true}', {}, "feature 'a' has value True: expected a number"),
    ("text-not-string", b'{"text": 42}', {}, "field 'text' must be a string"),
    ("id-object", b'{"id": {"k": 1}, "x": {}}', {}, "field 'id' must be a string or a number"),
    ("missing-everything", b'{"id": 5}', {}, "nothing to predict or learn"),
    ("empty-object", b"{}", {}, "nothing to predict or learn"),
    ("label-nan", b'{"x": {}, "label": NaN}', {}, "label nan is not a class"),
    (
        "unknown-label",
        b'{"text": "t", "label": "eggs"}',
        {"labels": {"positive": "spam", "negative": "ham"}},
        "unknown label 'eggs': expected 'spam' or 'ham'",
    ),
    (
        "unknown-label-only",
        b'{"id": 1, "label": "Spam"}',
        {"labels": {"positive": "spam", "negative": "ham"}},
        "unknown label 'Spam'",
    ),
    ("oversized", b'{"text": "' + b"a" * 100 + b'"}', {"max_bytes": 64}, "record of 112 bytes exceeds 64"),
    ("svm-label-text", b"spam 1:1", {"format": "svmlight"}, "svmlight label 'spam' is not a number"),
    ("svm-label-2", b"2 1:1", {"format": "svmlight"}, "unknown svmlight label 2.0"),
    ("svm-label-nan", b"nan 1:1", {"format": "svmlight"}, "unknown svmlight label"),
    ("svm-no-colon", b"1 7 8:1", {"format": "svmlight"}, "svmlight pair '7' is not name:value"),
    ("svm-no-name", b"1 :3", {"format": "svmlight"}, "svmlight pair ':3' is not name:value"),
    ("svm-value-text", b"1 a:b", {"format": "svmlight"}, "feature 'a' has value 'b': expected a number"),
    ("svm-value-nan", b"1 a:nan", {"format": "svmlight"}, "expected a finite number"),
    ("svm-value-inf", b"-1 a:-inf", {"format": "svmlight"}, "expected a finite number"),
    ("svm-invalid-utf8", b"1 caf\xe9:1", {"format": "svmlight"}, "invalid UTF-8"),
    ("svm-oversized", b"1 " + b"a:1 " * 30, {"format": "svmlight", "max_bytes": 64}, "exceeds 64"),
]


@pytest.mark.parametrize("value, parser_args, reason", [m[1:] for m in MALFORMED], ids=[m[0] for m in MALFORMED])
def test_malformed_record_is_a_bad_record_naming_its_position(value, parser_args, reason):
    position = "in/mail.jsonl:17"
    with pytest.raises(BadRecord) as caught:
        EventParser(**parser_args).parse(Record(value, position, (123, 17)))
    error = caught.value
    assert isinstance(error, ValueError)  # what the runner catches
    assert str(error).startswith(position + ": "), str(error)
    assert error.position == position
    assert reason in str(error), str(error)
    assert str(error) == f"{position}: {error.reason}"


def test_svmlight_comment_line_is_no_event():
    """A comment-only svmlight line (a file header, say) is not an event and not an error."""
    parser = EventParser(format="svmlight")
    assert parser.parse(Record(b"   # only a comment", "log.svm:1")) is None
    assert parser.parse(Record(b"# columns: label f1 f2", "log.svm:2")) is None


def test_out_of_range_integer_feature_is_a_bad_record():
    """A JSON integer beyond the float range (10**400) is not a finite number either; it must be
    a BadRecord, not the OverflowError ``math.isfinite`` raises (which the runner does not catch)."""
    value = b'{"x": {"a": 1' + b"0" * 400 + b'}, "label": true}'
    with pytest.raises(BadRecord) as caught:
        EventParser().parse(Record(value, "big.jsonl:1"))
    assert str(caught.value).startswith("big.jsonl:1: ")
    assert "feature 'a'" in str(caught.value)


@pytest.mark.parametrize(
    "value, exception",
    [
        (b'{"x": {"a": 1' + b"0" * 5000 + b'}, "label": true}', "ValueError"),  # too many digits for an int
        (b'{"x": ' + b"[" * 3000 + b"]" * 3000 + b', "label": true}', "RecursionError"),
    ],
    ids=["5000-digits", "3000-deep"],
)
def test_whatever_a_record_makes_the_parser_raise_is_a_bad_record(value, exception):
    with pytest.raises(BadRecord) as caught:
        EventParser().parse(Record(value, "poison.jsonl:450"))
    assert caught.value.position == "poison.jsonl:450"
    assert exception in caught.value.reason, caught.value.reason


def test_a_memory_error_while_parsing_a_record_is_a_bad_record(monkeypatch):
    def exhausted(text: str) -> object:
        raise MemoryError

    monkeypatch.setattr(json, "loads", exhausted)
    with pytest.raises(BadRecord, match=r"^big.jsonl:3: .*MemoryError"):
        EventParser().parse(Record(b'{"x": {}}', "big.jsonl:3"))


@pytest.mark.parametrize("value", [b"NaN", b"Infinity", b"-Infinity", b"1e999"])
def test_a_non_finite_id_is_the_records_position(value):
    """NaN and the infinities have no JSON form (a prediction naming them would not be JSON)."""
    event = _parse(b'{"id": ' + value + b', "x": {"a": 1}, "label": true}', position="ids.jsonl:9")
    assert event.id == "ids.jsonl:9"


def test_record_at_the_size_limit_is_accepted():
    value = b'{"text": "' + b"a" * 52 + b'"}'
    assert len(value) == 64
    assert EventParser(max_bytes=64).parse(Record(value, "p:1")).text == "a" * 52


# -- file source ---------------------------------------------------------------------------


def _identity(path: Path) -> dict:
    """The identity of the file at ``path`` that a position taken now records."""
    with open(path, "rb") as file:
        return FileHead(path).identity(file)


def _events_file(tmp_path, lines: list[bytes], suffix: str):
    """``lines`` as the file tmp_path/events<suffix>, one per line, gzip-compressed for ".gz"."""
    data = b"\n".join(lines) + b"\n"
    path = tmp_path / ("events" + suffix)
    path.write_bytes(gzip.compress(data) if suffix.endswith(".gz") else data)
    return path


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz"])
def test_file_source_positions_and_resume(tmp_path, suffix):
    lines = [b'{"id": 1, "x": {}}', b"", b'{"id": 2, "x": {}}\r', b"   ", b'{"id": 3, "x": {}}']
    path = _events_file(tmp_path, lines, suffix)
    source = FileSource(path)
    records = list(source)
    source.close()
    assert [r.position for r in records] == [f"{path}:1", f"{path}:3", f"{path}:5"]  # blank lines counted, skipped
    assert [r.value for r in records] == [lines[0], lines[2][:-1], lines[4]]  # CR stripped
    assert [json.loads(r.value)["id"] for r in records] == [1, 2, 3]
    offset, line = records[0].cursor
    assert line == 1 and offset == len(lines[0]) + 1
    resumed = FileSource(path, offset=offset, line=line)
    again = list(resumed)
    resumed.close()
    assert [r.position for r in again] == [f"{path}:3", f"{path}:5"]
    assert [r.value for r in again] == [r.value for r in records[1:]]


def test_a_file_batch_names_each_record_as_one_at_a_time_does(tmp_path):
    lines = [b'{"id": 1}', b"", b'{"id": 2}', b'{"id": 3}']
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    first, second = FileSource(path), FileSource(path)
    one_at_a_time = list(first)
    batch = second.read(10)
    first.close()
    second.close()
    assert [batch[i] for i in range(len(batch))] == one_at_a_time
    assert list(batch.cursors) == [(10, 1), (21, 3), (31, 4)]


def test_cursors_are_made_on_demand_within_their_length():
    made = []
    cursors = Cursors(3, lambda i: made.append(i) or ("c", i))
    assert made == [] and len(cursors) == 3
    assert list(cursors) == [("c", 0), ("c", 1), ("c", 2)] and made == [0, 1, 2]
    for outside in (-1, 3):
        with pytest.raises(IndexError):
            cursors[outside]


def _long_line_file(path: Path, long_size: int, max_bytes: int) -> tuple[Path, list[bytes]]:
    """A file of short lines around one of ``long_size`` bytes and one just over ``max_bytes``."""
    lines = [b'{"id": 1}', b"a" * long_size, b'{"id": 2}\r', b"b" * (max_bytes + 1), b'{"id": 3}']
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path, lines


def _read_all_traced(source: Source) -> tuple[list[Record], int]:
    """Every record of ``source`` (closed after; its position stays readable), and the peak of
    memory allocated while reading."""
    tracemalloc.start()
    try:
        records = [record for record in source if record is not None]
        return records, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        source.close()


@pytest.mark.parametrize("batch", [1, 10])
def test_a_file_line_longer_than_max_bytes_is_cut_as_it_is_read(tmp_path, batch):
    """A line longer than ``max_bytes`` is handed out as its first ``max_bytes + 1`` bytes, which the
    parser refuses naming its position, without ever holding the whole line."""
    max_bytes = 1000
    path, lines = _long_line_file(tmp_path / "events.jsonl", 30 << 20, max_bytes)
    source = FileSource(path, max_bytes=max_bytes)
    records, peak = _read_all_traced(source)
    assert peak < 8 << 20, peak  # a fraction of the 30 MB line
    assert [r.value for r in records] == [lines[0], b"a" * (max_bytes + 1), b'{"id": 2}', lines[3], lines[4]]
    ends = list(accumulate(len(line) + 1 for line in lines))
    assert [r.cursor for r in records] == [(end, number) for number, end in enumerate(ends, 1)]
    assert source.position() == {"offset": path.stat().st_size, "line": 5, "input": _identity(path)}
    parser = EventParser(max_bytes=max_bytes)
    with pytest.raises(BadRecord, match=rf"^{path}:2: record of more than 1000 bytes exceeds 1000$"):
        parser.parse(records[1])
    resumed = FileSource(path, *records[1].cursor, max_bytes=max_bytes)
    assert [r.value for r in resumed.read(batch)] == [b'{"id": 2}', lines[3], lines[4]][:batch]
    resumed.close()


def _file_records(content: bytes, max_bytes: int | None) -> list[tuple[bytes, tuple[int, int]]]:
    """(value, cursor) of each record of a file, as FileSource reads them, from the whole content at once: its
    lines without their "\\n" and the "\\r" before it, one longer than ``max_bytes + 1`` bytes cut to those,
    blank ones left out; a cursor is (the offset after the line, its number)."""
    pieces = content.split(b"\n")
    if not pieces[-1]:
        pieces.pop()
    records, offset = [], 0
    for number, piece in enumerate(pieces, 1):
        offset = min(offset + len(piece) + 1, len(content))
        value = piece[: max_bytes + 1] if max_bytes is not None and len(piece) > max_bytes + 1 else piece.rstrip(b"\r")
        if value.strip():
            records.append((value, (offset, number)))
    return records


@settings(max_examples=200, deadline=None)
@given(
    content=st.lists(st.sampled_from([b"ab", b"c", b" ", b"\r", b"\n", b"\r\n", b"\n\n"]), max_size=40).map(b"".join),
    max_bytes=st.one_of(st.none(), st.integers(0, 6)),
    reads=st.lists(st.integers(1, 5), min_size=1, max_size=4),
    resume=st.integers(0, 20),
    block=st.sampled_from([2, 3, 5, 8, 1 << 20]),
    carry=st.sampled_from([0, 1, 3, 1 << 16]),
    compiled=st.booleans(),
)
def test_a_file_is_read_in_records_as_its_lines_however_many_are_asked_for(
    content, max_bytes, reads, resume, block, carry, compiled
):
    """However many records each read asks for, wherever the blocks the file is read by end and however much of a
    line they carry to the next, the records and cursors are the lines of the whole file, the blocks read and split
    into lines compiled or in Python; a source opened at a record's cursor reads on from the next."""
    expected = _file_records(content, max_bytes)
    with (
        tempfile.TemporaryDirectory() as directory,
        mock.patch.object(sources, "READ_BUFFER", block),
        mock.patch.object(sources, "MAX_CARRY", carry),
        mock.patch.object(sources, "_blocks", sources._blocks if compiled else None),
    ):
        path = Path(directory) / "events.jsonl"
        path.write_bytes(content)
        source = FileSource(path, max_bytes=max_bytes)
        got = []
        for n in itertools.cycle(reads):
            batch = source.read(n)
            if batch is None:
                break
            got += [(record.value, record.cursor) for record in source.claim(batch)]
        source.close()
        assert got == expected
        if expected:
            k = resume % len(expected)
            resumed = FileSource(path, *expected[k][1], max_bytes=max_bytes)
            rest = [(record.value, record.cursor) for record in resumed if record is not None]
            resumed.close()
            assert rest == expected[k + 1 :]


class _FailingOnce(io.BytesIO):
    """A file whose second read (``read`` or ``readinto``) fails."""

    reads = 0

    def _count(self) -> None:
        self.reads += 1
        if self.reads == 2:
            raise OSError("the disk went away")

    def read(self, size: int | None = -1) -> bytes:
        self._count()
        return super().read(size)

    def readinto(self, buffer) -> int:  # type: ignore[override]
        self._count()
        return super().readinto(buffer)


def test_a_block_read_ahead_that_failed_fails_the_read_that_asks_for_it(monkeypatch):
    monkeypatch.setattr(sources, "READ_BUFFER", 4)
    blocks = sources._Blocks(_FailingOnce(b"abcdefgh"))
    assert blocks.read() == b"abcd"  # (the next block is read meanwhile, on more than one core)
    with pytest.raises(OSError, match="the disk went away"):
        blocks.read()
    assert blocks.read() == b"efgh"  # a read that failed moved nothing
    assert blocks.read() == b""
    blocks.settle()
    blocks.settle()  # nothing being read: nothing to wait for


def test_a_file_line_of_max_bytes_and_its_crlf_is_whole(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"a" * 10 + b"\r\n" + b"b" * 11 + b"\r\n" + b"c" * 12 + b"\n")
    source = FileSource(path, max_bytes=10)
    assert list(source.read(5).values) == [b"a" * 10, b"b" * 11, b"c" * 11]
    source.close()


@pytest.mark.parametrize("block", [4, 1 << 20])
@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz"])
def test_an_unclaimed_file_batch_is_read_again(tmp_path, monkeypatch, suffix, block):
    """A batch stops at the end of the block it was read from (whole blocks: lines 2 to 5; blocks of 4 bytes: one
    record); unclaimed, it is read again, and the next read starts after the records processed."""
    lines = [b'{"id": 1}', b"", b'{"id": 2}', b'{"id": 3}', b'{"id": 4}']
    path = _events_file(tmp_path, lines, suffix)
    monkeypatch.setattr(sources, "READ_BUFFER", block)
    source = FileSource(path)
    source.claim(source.read(1))
    batch = source.claim(source.read(4))  # lines 2 to 5 (or fewer), the blank one left out
    assert [r.value for r in batch] == lines[2 : 2 + len(batch)] and len(batch) == (3 if block > 100 else 1)
    source.unclaim(batch, 0)  # none of it was processed: back to before the blank line 2
    assert source.position() == {"offset": 10, "line": 1, "input": _identity(path)}
    again = source.claim(source.read(4))
    assert [(r.value, r.cursor) for r in again] == [(r.value, r.cursor) for r in batch]
    source.unclaim(again, 1)  # only record 2 (line 3) was processed
    assert source.position() == {"offset": 21, "line": 3, "input": _identity(path)}
    rest = []
    while (more := source.read(10)) is not None:
        rest += [r.position for r in more]
    assert rest == [f"{path}:4", f"{path}:5"]
    source.close()


# -- standard input ------------------------------------------------------------------------


def test_stdin_redirected_from_a_regular_file_is_read_like_a_pipe(tmp_path):
    lines = [b'{"id": 1}', b"", b'{"id": 2}\r', b'{"id": 3}']
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"\n".join(lines))  # no final line end
    with path.open("rb") as stream:
        source = StdinSource(poll_seconds=0.01, stream=stream)
        records = [record for record in source if record is not None]
        source.close()
    assert [(r.value, r.position) for r in records] == [
        (b'{"id": 1}', "<stdin>:1"),
        (b'{"id": 2}', "<stdin>:3"),
        (b'{"id": 3}', "<stdin>:4"),
    ]


def test_a_stdin_line_longer_than_max_bytes_is_cut_as_it_arrives():
    """Never held whole (a 200 MB line took longer than 300 s when it was): the peak memory stays a few chunks, so
    each byte is scanned a bounded number of times and the time is linear in the line's length."""
    long_size, max_bytes = 60 << 20, 1000
    read_end, write_end = os.pipe()

    def feed() -> None:
        with os.fdopen(write_end, "wb") as out:
            out.write(b'{"id": 1}\na')
            for _ in range(long_size >> 20):
                out.write(b"\r" * (1 << 20))
            out.write(b'\n{"id": 2}\r\n' + b"b" * (max_bytes + 1) + b"\n" + b"c" * max_bytes + b"\r")

    writer = threading.Thread(target=feed)
    writer.start()
    with os.fdopen(read_end, "rb") as stream:
        records, peak = _read_all_traced(StdinSource(poll_seconds=5, stream=stream, max_bytes=max_bytes))
    writer.join()
    assert peak < 8 << 20, peak
    assert [(r.value, r.position) for r in records] == [
        (b'{"id": 1}', "<stdin>:1"),
        (b"a" + b"\r" * max_bytes, "<stdin>:2"),  # cut, not stripped: the parser refuses it
        (b'{"id": 2}', "<stdin>:3"),
        (b"b" * (max_bytes + 1), "<stdin>:4"),
        (b"c" * max_bytes, "<stdin>:5"),
    ]


def test_an_unclaimed_stdin_batch_is_read_again():
    read_end, write_end = os.pipe()
    os.write(write_end, b'{"id": 1}\n\n{"id": 2}\n{"id": 3}\n')
    os.close(write_end)
    with os.fdopen(read_end, "rb") as stream:
        source = StdinSource(poll_seconds=1, stream=stream)
        batch = source.claim(source.read(10))
        assert [r.position for r in batch] == ["<stdin>:1", "<stdin>:3", "<stdin>:4"]
        source.unclaim(batch, 1)
        assert source.position() == {"line": 2}
        again = source.read(10)
        assert [(r.value, r.position) for r in again] == [(b'{"id": 2}', "<stdin>:3"), (b'{"id": 3}', "<stdin>:4")]
        source.unclaim(again, 0)
        assert source.position() == {"line": 2}
        assert [r.position for r in source.read(10)] == ["<stdin>:3", "<stdin>:4"]
        source.close()


@pytest.mark.parametrize("labels", [None, {"positive": "spam", "negative": "ham"}, {"positive": 1, "negative": 2}])
def test_label_signs_are_the_signs_parser_and_learner_give(labels):
    parser = EventParser(labels=labels)
    signs = parser.label_signs()
    for value in [True, False, 1, 0, -1, 1.0, 0.0, -1.0, 2, 2.0, "spam", "ham", "1", "true", float("nan")]:
        try:
            expected = binary_sign(parser._label(value, "here"))
        except ValueError:  # a BadRecord, or not a binary class
            assert value not in signs, value
        else:
            assert signs[value] == expected, value
