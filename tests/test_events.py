"""Records to events: JSON and svmlight parsing, and a BadRecord naming the position for every malformed kind."""

from __future__ import annotations

import gzip
import io
import json

import pytest
from river import stream

from pegasos_stream.learners.validation import binary_sign
from pegasos_stream.stream.parsing import BadRecord, Event, EventParser
from pegasos_stream.stream.records import Cursors, Record
from pegasos_stream.stream.sources import FileSource


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


def test_record_at_the_size_limit_is_accepted():
    value = b'{"text": "' + b"a" * 52 + b'"}'
    assert len(value) == 64
    assert EventParser(max_bytes=64).parse(Record(value, "p:1")).text == "a" * 52


# -- file source ---------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz"])
def test_file_source_positions_and_resume(tmp_path, suffix):
    lines = [b'{"id": 1, "x": {}}', b"", b'{"id": 2, "x": {}}\r', b"   ", b'{"id": 3, "x": {}}']
    data = b"\n".join(lines) + b"\n"
    path = tmp_path / ("events" + suffix)
    path.write_bytes(gzip.compress(data) if suffix.endswith(".gz") else data)
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
