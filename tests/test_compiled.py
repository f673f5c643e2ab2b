"""The compiled replay path gives what one record at a time gives, bit for bit.

``PegasosClassifier.learn_csr``/``learn_rows`` against a ``learn_one`` loop (every variant, rare
branches included), the C svmlight parser against the Python one, and the runner's batches against
its record-by-record loop.
"""

from __future__ import annotations

import json
import math
import pickle
import random
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from pegasos_stream import PegasosClassifier, _compiled, cli
from pegasos_stream.features import DictHasher, feature_hash
from pegasos_stream.io import sources
from pegasos_stream.io.records import Lines, Record
from pegasos_stream.learners import weights
from pegasos_stream.learners.batch import LearnBatch
from pegasos_stream.learners.calibration import squash
from pegasos_stream.learners.rows import Rows
from pegasos_stream.parse import fastparse
from pegasos_stream.parse.fastparse import NameTable, parse_json_events, parse_json_texts, parse_svmlight
from pegasos_stream.parse.parsing import BadRecord, EventParser
from pegasos_stream.persist.checkpoint import checkpoints, model_digest, read_checkpoint

try:  # tests/ as a package
    from .streams import PEGASOS_PARAMS, int_stream
except ImportError:  # tests/ as a plain directory: pytest puts it on sys.path
    from streams import PEGASOS_PARAMS, int_stream

if _compiled.LOOPS is None or _compiled.PARSE is None:
    pytest.skip(
        "the compiled modules are not in use (not built, or PEGASOS_STREAM_PURE_PYTHON is set)", allow_module_level=True
    )


def _csr(xs: list[dict]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    indptr = np.cumsum([0] + [len(x) for x in xs])
    indices = np.array([k for x in xs for k in x], dtype=np.int64)
    data = np.array([float(v) for x in xs for v in x.values()])
    return indptr, indices, data


def _one_at_a_time(params: dict, xs, ys, ws) -> tuple[PegasosClassifier, list[float]]:
    model = PegasosClassifier(**params)
    decisions = []
    for x, y, w in zip(xs, ys, ws):
        decisions.append(model.decision_function_one(x))
        model.learn_one(x, y, w)
    return model, decisions


@settings(max_examples=120, deadline=None)
@given(params=PEGASOS_PARAMS, seed=st.integers(0, 10**6), n=st.integers(0, 120), chunk=st.integers(1, 60))
def test_learn_csr_is_bit_identical_to_learn_one(params, seed, n, chunk):
    xs, ys, ws = int_stream(seed, n, 12)
    reference, expected = _one_at_a_time(params, xs, ys, ws)
    model = PegasosClassifier(**params)
    indptr, indices, data = _csr(xs)
    decisions = [
        model.learn_csr(indptr[s : s + chunk + 1], indices, data, ys[s : s + chunk], sample_weight=ws[s : s + chunk])
        for s in range(0, n, chunk)
    ]
    assert np.concatenate(decisions or [np.empty(0)]).tolist() == expected
    assert pickle.dumps(model) == pickle.dumps(reference)  # every float, count and dict order
    assert model_digest(model) == model_digest(reference)


@settings(max_examples=30, deadline=None)
@given(params=PEGASOS_PARAMS, seed=st.integers(0, 10**6), n=st.integers(1, 80))
def test_without_calibration_the_same_weights_are_learned_and_probabilities_are_the_squashed_margin(params, seed, n):
    xs, ys, ws = int_stream(seed, n, 12)
    calibrated = PegasosClassifier(**{**params, "calibrate": True})
    calibrated.learn_csr(*_csr(xs), ys, sample_weight=ws)
    model = PegasosClassifier(**{**params, "calibrate": False})
    model.learn_csr(*_csr(xs), ys, sample_weight=ws)
    assert (model.weights, model.intercept, model.t) == (calibrated.weights, calibrated.intercept, calibrated.t)
    assert pickle.dumps(model._platt) == pickle.dumps(PegasosClassifier()._platt)  # never fitted
    for x in xs[:5]:
        margin = model.decision_function_one(x)
        assert model.predict_proba_one(x)[True] == squash(margin)  # the logistic, its tails kept off 0 and 1
        if abs(margin) <= 8.0:
            assert squash(margin) == pytest.approx(1.0 / (1.0 + math.exp(-margin)), rel=1e-12)


def test_learn_csr_names_columns_and_takes_any_label_form():
    xs, ys, _ = int_stream(3, 200, 8)
    names = [f"w{j}" for j in range(8)]
    reference, expected = _one_at_a_time({}, [{names[k]: v for k, v in x.items()} for x in xs], ys, [1.0] * 200)
    model = PegasosClassifier()
    labels = np.where(ys, 1, -1)  # ±1 ints, as svmlight gives them
    decisions = model.learn_csr(*_csr(xs), labels, columns=names)
    assert decisions.tolist() == expected
    assert pickle.dumps(model) == pickle.dumps(reference)


def test_a_refused_row_stops_learn_csr_after_the_rows_before_it():
    xs = [{0: 1.0}, {1: -2.0}, {0: 1e139, 1: 1e139}, {1: 1.0}]
    ys = [True, False, False, True]
    model = PegasosClassifier(lambda_=1e-4)
    with pytest.raises(ValueError, match=r"^row 2: the update would take the norm"):
        model.learn_csr(*_csr(xs), ys)
    reference, _ = _one_at_a_time({"lambda_": 1e-4}, xs[:2], ys[:2], [1.0, 1.0])
    assert pickle.dumps(model) == pickle.dumps(reference)

    with pytest.raises(ValueError, match=r"^row 0: feature 1 has value nan"):
        PegasosClassifier().learn_csr(*_csr([{0: 1.0, 1: math.nan}]), [True])


def test_learn_rows_without_probabilities_learns_the_same_model_and_decisions():
    """``probas`` may be empty: the same model and decisions, the rare rows learn_one takes included."""
    xs = [{"a": 1.0}, {"a": 1e139, "b": 1e139}, {"b": 1.0}, {"a": -0.5, "b": 2.0}]
    rows, signs = Rows.from_dicts(xs), np.array([1.0, -1.0, -1.0, 1.0])
    models, decisions = [PegasosClassifier(lambda_=1e-4), PegasosClassifier(lambda_=1e-4)], [np.empty(4), np.empty(4)]
    probas = np.empty(4)
    for model, found, wanted in zip(models, decisions, (probas, np.empty(0)), strict=True):
        start = 0
        while start < 4:
            stop, _ = model.learn_rows(LearnBatch(rows, signs, np.ones(4), found, wanted, start))
            start = stop + 1
    assert pickle.dumps(models[0]) == pickle.dumps(models[1])
    assert np.array_equal(decisions[0], decisions[1], equal_nan=True)


def test_learn_rows_stops_at_a_refused_row_and_resumes_after_it():
    xs = [{"a": 1.0}, {"a": 1e139, "b": 1e139}, {"b": 1.0}]
    rows, signs = Rows.from_dicts(xs), np.array([1.0, -1.0, -1.0])
    model = PegasosClassifier(lambda_=1e-4)
    decisions, probas = np.empty(3), np.empty(3)
    stop, error = model.learn_rows(LearnBatch(rows, signs, np.ones(3), decisions, probas))
    assert stop == 1 and "norm of the weights" in str(error)
    assert model.learn_rows(LearnBatch(rows, signs, np.ones(3), decisions, probas, start=2)) == (3, None)
    reference = PegasosClassifier(lambda_=1e-4)
    for index, (x, y) in enumerate([(xs[0], True), (xs[2], False)]):
        decision = reference.decision_function_one(x)
        assert (decisions[2 * index], probas[2 * index]) == (decision, reference.probability(decision))
        reference.learn_one(x, y)
    assert pickle.dumps(model) == pickle.dumps(reference)


def test_learn_csr_never_changes_a_weight_float_held_elsewhere():
    """The compiled loop stores each learned weight as a new float: a float taken from the dict keeps
    its value."""
    xs, ys, _ = int_stream(5, 60, 4)
    model, reference = PegasosClassifier(lambda_=1e-4), PegasosClassifier(lambda_=1e-4)
    model.learn_csr(*_csr(xs[:30]), ys[:30])
    taken = dict(model._u.v)  # a second reference to every weight's float
    before = {key: value.hex() for key, value in taken.items()}  # new str objects: the bits of each
    model.learn_csr(*_csr(xs[30:]), ys[30:])
    assert {key: value.hex() for key, value in taken.items()} == before
    assert any(model._u.v[key].hex() != bits for key, bits in before.items())
    for x, y in zip(xs, ys):
        reference.learn_one(x, y)
    assert pickle.dumps(model) == pickle.dumps(reference)


# -- the svmlight parser ---------------------------------------------------------------------

TOKENS = st.sampled_from(
    ["1:0.5", "2:1", "3:-2e-3", "10:.5", "007:1", "a:1", "x_1:2.5", "3:1", "qid:4", "4:1_0", "5:inf", "6:nan",
     "7:1e400", ":1", "8:", "9:1:2", "é:1", "0:0", "12345678:1", "5:+1.", "6:0x1p3", "\t", "\x0c", "\x1f",
     "1234567890123456789012:1", "11a:1"]
)  # fmt: skip
LABELS = st.sampled_from(["+1", "-1", "1", "0", "1.0", "-0", "2", "abc", "1e0", "+1_0", ""])


@settings(max_examples=400, deadline=None)
@given(
    label=LABELS,
    tokens=st.lists(TOKENS, max_size=6),
    comment=st.sampled_from(["", " # c", "#x:1", " # ü"]),
    columns=st.sampled_from([None, 12, 10**8]),
)
def test_the_c_svmlight_parser_agrees_with_the_python_one(label, tokens, comment, columns):
    """Names as strings, or as the int columns below ``columns`` of a learner's weight arrays."""
    line = (" ".join([label, *tokens]) + comment).encode("utf-8")
    status, rows, signs = parse_svmlight([line], 1000, None, columns)
    try:
        event = EventParser("svmlight", columns=columns).parse(Record(line, "f:1"))
    except BadRecord:
        event = "bad"
    if status[0] == 0:
        assert event != "bad" and event is not None
        assert rows.row(0) == event.x and list(rows.row(0)) == list(event.x)
        assert signs[0] == (1.0 if event.label else -1.0)
    elif status[0] == 1:
        assert event is None
    names = [t.split(":")[0] for t in tokens]
    if columns is None:
        plain = all(t in ("1:0.5", "2:1", "3:-2e-3", "10:.5", "007:1", "a:1", "x_1:2.5", "0:0") for t in tokens)
        distinct = len(set(names)) == len(names)
    else:  # plain decimal names below columns, in increasing order
        plain = all(t in ("1:0.5", "2:1", "3:-2e-3", "10:.5", "0:0", "12345678:1") for t in tokens)
        plain = plain and all(int(name) < columns for name in names)
        distinct = plain and [int(name) for name in names] == sorted({int(name) for name in names})
    if label in ("+1", "-1", "1", "0", "1.0", "-0", "1e0") and plain and distinct and comment.isascii():
        assert status[0] == 0  # the common case takes the compiled path


NUMBER_TEXTS = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.floats(allow_nan=False, allow_infinity=False).map(lambda v: f"{v:.17g}"),
    st.decimals(allow_nan=False, allow_infinity=False, places=12).map(str),
    st.decimals(allow_nan=False, allow_infinity=False).map(str),
    st.from_regex(r"[+-]?0{0,3}[0-9]{0,25}(\.[0-9]{0,25})?([eE][+-]?[0-9]{1,3})?", fullmatch=True),
)


@settings(max_examples=500, deadline=None)
@given(text=NUMBER_TEXTS)
def test_svmlight_values_are_the_floats_python_reads(text):
    """Every value the compiled svmlight parser takes is float() of its text, to the last bit (eight digits at a
    time, leading zeros, long mantissas, exponents)."""
    status, rows, _ = parse_svmlight([f"1 3:{text}".encode()], 1000)
    try:
        expected = float(text)
    except ValueError:
        expected = None
    if status[0] == 0:
        assert expected is not None and math.isfinite(expected)
        assert rows.data[0].hex() == expected.hex()
    else:
        assert status[0] == 2 and (expected is None or not math.isfinite(expected) or "_" in text)


@settings(max_examples=150, deadline=None)
@given(
    lines=st.lists(st.tuples(LABELS, st.lists(TOKENS, max_size=6), st.sampled_from(["\n", "\r\n"])), max_size=12),
    columns=st.sampled_from([None, 12]),
    max_bytes=st.sampled_from([6, 1000]),
    split=st.booleans(),
)
def test_svmlight_lines_left_in_their_block_parse_as_the_lines_themselves(lines, columns, max_bytes, split):
    """Lines read from a file a block at a time (spans of the block, parsed in two halves on two threads or not)
    give what the same lines as bytes objects give."""
    block = b"".join((" ".join([label, *tokens]) + end).encode("utf-8") for label, tokens, end in lines)
    spans = sources._split_lines(block, max_bytes + 2)
    in_block = Lines(block, spans.starts, spans.ends)
    with mock.patch.object(fastparse, "SPLIT_LINES", 2 if split else 10**9):
        got = parse_svmlight(in_block, max_bytes, None, columns)
    expected = parse_svmlight(list(in_block), max_bytes, None, columns)
    for a, b in [(got[0], expected[0]), (got[2], expected[2])] + [
        (getattr(got[1], name), getattr(expected[1], name)) for name in ("indptr", "indices", "data")
    ]:
        assert a.tolist() == b.tolist()
    assert list(got[1].keys) == list(expected[1].keys)


def test_a_table_that_hashes_gives_the_hashed_columns_and_leaves_names_that_meet_in_a_row_to_python():
    fields = {"id": "id", "x": "x", "text": "text", "label": "label"}
    names = [f"f{i}" for i in range(40)]
    columns = [feature_hash(name) % 8 for name in names]
    apart = [names[columns.index(c)] for c in sorted(set(columns))]  # one name per column
    together = [n for n in names if feature_hash(n) % 8 == feature_hash(names[0]) % 8][:2]
    lines = [json.dumps({"x": dict.fromkeys(apart, 2.5), "label": True}).encode()]
    lines += [json.dumps({"x": dict.fromkeys(together, 1.0), "label": False}).encode(), b'{"x": {}, "label": 1}']
    table = NameTable(3)
    status, rows, ids, labels = parse_json_events(lines, fields, 1000, table)
    assert status.tolist() == [0, 2, 0] and labels == [True, 1] and ids == [None, None]
    assert rows.keys == range(8) and rows.row(0) == DictHasher(3).transform_one(dict.fromkeys(apart, 2.5))
    assert list(rows.row(0)) == [feature_hash(n) % 8 for n in apart] and rows.row(1) == {}
    assert len(table) == 0  # the columns come from the names' bytes: a table that hashes keeps no name
    with pytest.raises(ValueError, match="hash_bits=33"):
        NameTable(33)


@settings(max_examples=100, deadline=None)
@given(data=st.data(), hash_bits=st.sampled_from([1, 3, 12, 32]))
def test_hashed_json_rows_are_the_hashers_rows_of_the_named_ones(data, hash_bits):
    """A table that hashes gives each plain value the named row through ``DictHasher.transform_one``, the same id
    and label, and leaves to Python the values whose names share a column (and nothing else the named parse
    takes), across calls that keep the table."""
    fields = data.draw(JSON_FIELDS)
    chunks = data.draw(st.lists(st.lists(_json_line(fields), max_size=4), max_size=4))
    hasher, table = DictHasher(hash_bits), NameTable(hash_bits)
    for lines in chunks:
        named_status, named, named_ids, named_labels = parse_json_events(lines, fields, JSON_MAX_BYTES)
        status, rows, ids, labels = parse_json_events(lines, fields, JSON_MAX_BYTES, table)
        expected = [named.row(i) for i in range(len(named))]
        meets = [len(hasher.transform_one(x)) < len(x) for x in expected]
        kept = iter(meets)
        assert status.tolist() == [2 if kind == 2 or next(kept) else 0 for kind in named_status.tolist()]
        plain = [i for i, meet in enumerate(meets) if not meet]
        assert [rows.row(i) for i in range(len(rows))] == [hasher.transform_one(expected[i]) for i in plain]
        assert [list(rows.row(i).items()) for i in range(len(rows))] == [
            list(hasher.transform_one(expected[i]).items()) for i in plain
        ]
        assert ids == [named_ids[i] for i in plain] and labels == [named_labels[i] for i in plain]
        assert rows.keys == range(1 << hash_bits)


def test_a_span_is_parsed_to_its_end_whatever_digits_follow_it():
    block = b"1 3:12345"
    parsed = _compiled.PARSE.parse_svmlight((block, np.array([0]), np.array([7])), {}, [], 100, [], 10)
    assert np.frombuffer(parsed[3], dtype=np.float64).tolist() == [123.0]
    with pytest.raises(ValueError, match=r"span 0: \[0, 10\) is not within the 9 bytes"):
        _compiled.PARSE.parse_svmlight((block, np.array([0]), np.array([10])), {}, [], 100, [], 10)


def test_long_lines_go_to_the_python_parser():
    status, rows, _ = parse_svmlight([b"+1 1:1 2:1", b"-1 " + b"3:1 " * 100], max_bytes=50)
    assert status.tolist() == [0, 2] and len(rows) == 1


# -- the JSON parser -------------------------------------------------------------------------

JSON_FIELDS = st.sampled_from(
    [
        {"id": "id", "x": "x", "text": "text", "label": "label"},
        {"id": "key", "x": "features", "text": "body", "label": "y"},
    ]
)
# names and values as they stand in the JSON text, the plain ones first
PLAIN_NAMES = st.one_of(
    st.sampled_from(["f0", "f1", "f12", "", "x_1", "a b", "abcdefgh", "abcdefghi", "feature_0001", "feature_0002"]),
    st.text(st.characters(min_codepoint=32, max_codepoint=126, blacklist_characters='"\\'), max_size=12),
)
ODD_NAMES = st.sampled_from(["f\\u0031", "f\\n", '\\"q\\"', "é", "f\t1", "f\x7f"])
PLAIN_VALUES = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.floats(-10, 10, allow_nan=False).map(json.dumps),
    st.integers(-(10**15) + 1, 10**15 - 1).map(str),
    st.sampled_from(
        ["-0", "-0.0", "0", "1e-5", "1E+3", "2.5e2", "-1.5E-7", "0.1", "123456789012345", "9007199254740993.0"]
    ),
)
ODD_VALUES = st.sampled_from(
    ["1234567890123456", "-9007199254740993", "-98765432109876543210", "01", "-01", "NaN", "Infinity", "-Infinity",
     "1e999", "-1e999", "1.", ".5", "+1", "1e", "--1", "0x10", "true", "null", '"1"', "[1]", "{}", "1 2"]
)  # fmt: skip
PLAIN_LABELS = st.sampled_from(
    ["true", "false", "1", "0", "-1", '"spam"', '"ham"', "1.0", "-0", "-0.0", "2.5e0", "-123456789012345678"]
)
ODD_LABELS = st.sampled_from(["null", "NaN", "1e999", "[1]", "{}", '"sp\\u0061m"', '"é"', "1234567890123456789", "tru"])
PLAIN_IDS = st.one_of(
    st.none(),
    st.text(st.characters(min_codepoint=32, max_codepoint=126, blacklist_characters='"\\'), max_size=6).map(json.dumps),
    st.integers(-(10**18) + 1, 10**18 - 1).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
)
ODD_IDS = st.sampled_from(["null", "true", "[1]", '{"a": 1}', '"\\u00e9"', '"é"', "12345678901234567890", "1e999"])
SPACE = st.sampled_from(["", "", " ", "\n", "\t ", "\r\n"])
JSON_MAX_BYTES = 600


@st.composite
def _json_line(draw, fields: dict) -> bytes:
    """A JSON event as text, with random spacing and member order: plain, or with one odd part."""
    odd = draw(st.sampled_from([None] * 6 + ["name", "value", "label", "id", "member", "text"]))

    def obj(members: list) -> str:
        parts = [f'{draw(SPACE)}"{name}"{draw(SPACE)}:{draw(SPACE)}{value}{draw(SPACE)}' for name, value in members]
        return "{" + (",".join(parts) or draw(SPACE)) + "}"

    names = draw(st.lists(PLAIN_NAMES, max_size=8, unique=True))
    if odd == "name":  # a name with an escape or outside ASCII, or a repeated one
        again = [st.just(names[0])] if names else []
        names.insert(draw(st.integers(0, len(names))), draw(st.one_of(ODD_NAMES, *again)))
    pairs = [(name, draw(PLAIN_VALUES)) for name in names]
    if odd == "value" and pairs:
        at = draw(st.integers(0, len(pairs) - 1))
        pairs[at] = (pairs[at][0], draw(ODD_VALUES))
    members = [(fields["x"], obj(pairs)), (fields["label"], draw(ODD_LABELS if odd == "label" else PLAIN_LABELS))]
    event_id = draw(ODD_IDS if odd == "id" else PLAIN_IDS)
    if event_id is not None:
        members.append((fields["id"], event_id))
    if odd == "member":
        members.append(draw(st.sampled_from([("other", "1"), (fields["text"], '"hi"'), (fields["x"], "{}"),
                                             (fields["label"], "true"), (fields["id"], '"d"')])))  # fmt: skip
    text = draw(SPACE) + obj(draw(st.permutations(members))) + draw(SPACE)
    if odd == "text":
        text = draw(st.sampled_from([text[: draw(st.integers(0, len(text) - 1))], f"[{text}]", text + "x", "null",
                                     text + " " * JSON_MAX_BYTES]))  # fmt: skip
    return text.encode("utf-8")


def _in_c_grammar(line: bytes, fields: dict, max_bytes: int) -> bool:
    """Whether the C parser must take ``line``: a labelled feature event of plain ASCII (no escape), with
    distinct names, no other member, integers of at most 15 digits (features) or 18 (id, label) and
    finite floats."""
    if len(line) > max_bytes or not line.isascii() or b"\\" in line or b"\x7f" in line:
        return False

    def distinct(pairs: list) -> dict:
        if len({name for name, _ in pairs}) < len(pairs):
            raise ValueError("a repeated name")
        return dict(pairs)

    def number(value: object, digits: int) -> bool:
        kind, text = value if isinstance(value, tuple) else (None, "")
        if kind == "float":
            return len(text) <= 64 and math.isfinite(float(text))  # plain_number's bound on length
        return kind == "int" and len(text.lstrip("-")) <= digits

    try:
        obj = json.loads(
            line, object_pairs_hook=distinct, parse_int=lambda s: ("int", s), parse_float=lambda s: ("float", s),
            parse_constant=lambda s: 1 / 0,
        )  # fmt: skip
    except (ValueError, ZeroDivisionError):
        return False
    if not (isinstance(obj, dict) and obj.keys() <= {fields["id"], fields["x"], fields["label"]}):
        return False
    x, label, event_id = obj.get(fields["x"]), obj.get(fields["label"]), obj.get(fields["id"], "")
    return (
        isinstance(x, dict)
        and all(number(v, 15) for v in x.values())
        and (isinstance(label, (str, bool)) or number(label, 18))
        and (isinstance(event_id, str) or number(event_id, 18))
    )


def _same(a: object, b: object) -> bool:
    """Equal, of the same type, and for floats the same bits."""
    return type(a) is type(b) and (a.hex() == b.hex() if isinstance(a, float) else a == b)


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_the_c_json_parser_agrees_with_the_python_one(data):
    fields = data.draw(JSON_FIELDS)
    lines = data.draw(st.lists(_json_line(fields), max_size=6))
    status, rows, ids, labels = parse_json_events(lines, fields, JSON_MAX_BYTES)
    assert status.tolist() == [0 if _in_c_grammar(line, fields, JSON_MAX_BYTES) else 2 for line in lines]
    assert len(rows) == len(ids) == len(labels) == int((status == 0).sum())
    parser = EventParser("json", fields=fields, max_bytes=JSON_MAX_BYTES)
    for row, line in enumerate(line for line, kind in zip(lines, status.tolist()) if kind == 0):
        event = parser.parse(Record(line, "p:1"))  # the compiled path takes only what Python accepts
        x = rows.row(row)
        assert int(rows.indptr[row + 1] - rows.indptr[row]) == len(event.x)
        assert list(x) == list(event.x)  # the same names, in the same order
        assert [float(v).hex() for v in x.values()] == [float(v).hex() for v in event.x.values()]
        assert _same("p:1" if ids[row] is None else ids[row], event.id)
        assert _same(labels[row], event.label) and event.text is None
    # without ids, the same statuses, rows and labels
    status_without, rows_without, no_ids, labels_without = parse_json_events(lines, fields, JSON_MAX_BYTES, ids=False)
    assert no_ids is None and status_without.tolist() == status.tolist() and labels_without == labels
    assert rows_without.keys == rows.keys and rows_without.indices.tolist() == rows.indices.tolist()
    assert rows_without.indptr.tolist() == rows.indptr.tolist() and rows_without.data.tobytes() == rows.data.tobytes()


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_name_tables_kept_across_calls_change_nothing_but_identity(data):
    """A run passes one name table (JSON) or list (svmlight) to every call: each call's rows and
    columns are those of a fresh table, and a name is one str object in every call."""
    fields = data.draw(JSON_FIELDS)
    chunks = data.draw(st.lists(st.lists(_json_line(fields), max_size=4), max_size=4))
    table, seen = NameTable(), {}
    for lines in chunks:
        kept = parse_json_events(lines, fields, JSON_MAX_BYTES, table)
        fresh = parse_json_events(lines, fields, JSON_MAX_BYTES)
        assert kept[0].tolist() == fresh[0].tolist() and kept[2] == fresh[2] and kept[3] == fresh[3]
        rows, fresh_rows = kept[1], fresh[1]
        assert rows.keys == fresh_rows.keys
        assert rows.indptr.tolist() == fresh_rows.indptr.tolist()
        assert rows.indices.tolist() == fresh_rows.indices.tolist()
        assert rows.data.tobytes() == fresh_rows.data.tobytes()
        for key in rows.keys:
            assert seen.setdefault(key, key) is key
    assert len(table) == len(seen)
    numbered = data.draw(st.lists(st.lists(st.integers(0, 40), min_size=1, max_size=5, unique=True), max_size=6))
    lines = [("1 " + " ".join(f"{j}:1.5" for j in row)).encode() for row in numbered]
    names, seen = [], {}
    for part in (lines[:3], lines[3:]):
        rows = parse_svmlight(part, 1000, names)[1]
        assert rows.keys == parse_svmlight(part, 1000)[1].keys
        for key in rows.keys:
            assert seen.setdefault(key, key) is key


@settings(max_examples=100, deadline=None)
@given(
    fields=JSON_FIELDS,
    events=st.lists(
        st.fixed_dictionaries(
            {
                "x": st.dictionaries(
                    st.text(
                        st.characters(min_codepoint=32, max_codepoint=126, blacklist_characters='"\\'), max_size=10
                    ),
                    st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.integers(-(10**15) + 1, 10**15 - 1)),
                    max_size=12,
                ),
                "label": st.sampled_from([True, False, 1, 0, -1, "spam", "ham", 1.0]),
            },
            optional={"id": st.one_of(st.from_regex(r"[a-z0-9]{0,8}", fullmatch=True), st.integers(0, 10**9))},
        ),
        max_size=10,
    ),
    indent=st.sampled_from([None, 1, "\t"]),
)
def test_plain_json_events_take_the_compiled_path(fields, events, indent):
    objects = [{fields[k]: v for k, v in event.items()} for event in events]
    lines = [json.dumps(obj, indent=indent).encode() for obj in objects]
    status, rows, ids, labels = parse_json_events(lines, fields, 10_000)
    assert status.tolist() == [0] * len(lines)
    for row, event in enumerate(events):
        assert list(rows.row(row).items()) == [(k, float(v)) for k, v in event["x"].items()]
        assert _same(ids[row], event.get("id")) and _same(labels[row], event["label"])


# -- the JSON text parser --------------------------------------------------------------------

PLAIN_TEXTS = st.one_of(
    st.text(max_size=40),  # any code point but a surrogate, control characters included
    st.sampled_from(["", "Subject: hi\r\n\r\nbody\n", "caf\u00e9 \u20ac 1\U0001f600", "\x00\x1f\x7f", '"\\/']),
)
OTHER_MEMBERS = st.lists(
    st.tuples(
        st.sampled_from(["time", "corpus", "n", "flag", "note"]),
        st.one_of(
            st.text(max_size=12).map(json.dumps),
            st.text(max_size=12).map(lambda t: json.dumps(t, ensure_ascii=False)),
            st.integers(-(10**15) + 1, 10**15 - 1).map(str),
            st.floats(allow_nan=False, allow_infinity=False).map(repr),
            st.sampled_from(["true", "false", "null"]),
        ),
    ),
    max_size=3,
    unique_by=lambda member: member[0],
)
ODD_TEXT_LINES = [
    b'{"text": "caf\xc3", "label": 1}',  # invalid UTF-8 in the text
    b'{"text": "a\xed\xa0\x80b", "label": 1}',  # a surrogate encoded in UTF-8
    b'{"text": "\xc0\xafx", "label": 1}',  # an overlong form
    b'{"text": "a\tb", "label": 1}',  # a raw control character
    b'{"text": "a\\qb", "label": 1}',  # a bad escape
    b'{"text": "a\\u12g4", "label": 1}',  # a bad \\u escape
    b'{"text": "\\ud83d\\u0041", "label": 1}',  # a high surrogate and no low one
    b'{"text": "\\udc00", "label": 1}',  # a lone surrogate
    b'{"text": "t", "label": null}',  # unlabelled
    b'{"text": "t", "label": 1, "x": {}}',  # a feature event
    b'{"text": "t", "label": 1, "text": "u"}',  # a repeated text
    b'{"text": "t", "label": 1, "meta": {"a": 1}}',  # a nested member
    b'{"text": "t", "label": 1, "n": 1e999}',  # a number json reads as inf
    b'{"text": "t", "label": 1, "n": NaN}',
    b'{"text": "t", "label": 1} x',
    b'{"text": "t", "label": 1',
    b'\xef\xbb\xbf{"text": "t", "label": 1}',  # a byte order mark
]


@st.composite
def _text_line(draw, fields: dict) -> tuple[bytes, bool]:
    """A JSON text event, with random spacing and member order, and whether it is plain (the C parser must take
    it) or has one odd part."""
    text = draw(PLAIN_TEXTS)
    members = [
        (fields["text"], json.dumps(text, ensure_ascii=draw(st.booleans()))),
        (fields["label"], draw(PLAIN_LABELS)),
        *draw(OTHER_MEMBERS),
    ]
    if (event_id := draw(PLAIN_IDS)) is not None:
        members.append((fields["id"], event_id))
    members = draw(st.permutations(members))
    parts = [f'{draw(SPACE)}"{name}"{draw(SPACE)}:{draw(SPACE)}{value}{draw(SPACE)}' for name, value in members]
    line = (draw(SPACE) + "{" + ",".join(parts) + "}" + draw(SPACE)).encode("utf-8")
    if draw(st.integers(0, 4)) == 0:
        return draw(st.sampled_from(ODD_TEXT_LINES)).replace(b'"text"', f'"{fields["text"]}"'.encode()), False
    return line, len(line) <= JSON_MAX_BYTES


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_the_c_json_text_parser_agrees_with_the_python_one(data):
    fields = data.draw(JSON_FIELDS)
    drawn = data.draw(st.lists(_text_line(fields), max_size=6))
    lines = [line for line, _ in drawn]
    status, texts, ids, labels = parse_json_texts(lines, fields, JSON_MAX_BYTES)
    assert len(texts) == len(ids) == len(labels) == int((status == 0).sum())
    parser = EventParser("json", fields=fields, max_bytes=JSON_MAX_BYTES)
    taken = iter(range(len(texts)))
    for (line, plain), kind in zip(drawn, status.tolist()):
        if plain:
            assert kind == 0, line
        if kind != 0:
            continue
        row = next(taken)
        event = parser.parse(Record(line, "p:1"))  # the compiled path takes only what Python accepts
        assert event is not None and event.text is not None and event.x is None
        assert texts[row] == event.text.encode("utf-8", "surrogatepass")
        assert _same("p:1" if ids[row] is None else ids[row], event.id)
        assert _same(labels[row], json.loads(line)[fields["label"]])


def test_the_c_json_text_parser_leaves_every_odd_line_to_python():
    fields = {"id": "id", "x": "x", "text": "text", "label": "label"}
    status, texts, _, _ = parse_json_texts(ODD_TEXT_LINES, fields, 1000)
    assert status.tolist() == [2] * len(ODD_TEXT_LINES) and texts == []
    plain = [
        b'{"id": "a/1", "time": "2002", "label": "spam", "corpus": "x", "text": "\\u00e9\\n\xc3\xa9\\ud83d\\ude00"}'
    ]
    status, texts, ids, labels = parse_json_texts(plain, fields, 1000)
    assert status.tolist() == [0] and texts == ["\u00e9\n\u00e9\U0001f600".encode()] and ids == ["a/1"]
    assert labels == ["spam"]
    assert parse_json_texts(plain, fields, len(plain[0]) - 1)[0].tolist() == [2]  # too long: Python's error
    # ids whose digits need Python's own conversion: read without the GIL, which the parser takes back for it
    exact = ["0.1000000000000000055511151231257827021181583404541015625", "5e-324", "1.7976931348623157e308"]
    lines = [b'{"id": %s, "label": "ham", "text": "x"}' % number.encode() for number in exact]
    status, texts, ids, labels = parse_json_texts(lines, fields, 1000)
    assert status.tolist() == [0, 0, 0] and texts == [b"x"] * 3 and labels == ["ham"] * 3
    assert ids == [json.loads(number) for number in exact]


@pytest.mark.parametrize("last", [False, True])
def test_hashed_json_names_of_every_length_get_zlibs_crc32(last):
    """A name's hashed column is ``zlib.crc32`` of its bytes modulo 2^hash_bits at every length: up to eight bytes
    at once (and read within the value's bytes when the name ends it, ``last``), longer names eight at a time."""
    fields = {"id": "id", "x": "x", "text": "text", "label": "label"}
    rng = random.Random(7)
    alphabet = [chr(c) for c in range(0x20, 0x7F) if chr(c) not in '"\\']
    names = ["".join(rng.choice(alphabet) for _ in range(n)) for n in range(41) for _ in range(5)]
    order = ('{{"label": 1, "x": {{{}: 2}}}}' if last else '{{"x": {{{}: 2}}, "label": 1}}').format
    lines = [order(json.dumps(name)).encode() for name in names]
    status, rows, _, _ = parse_json_events(lines, fields, 1000, NameTable(32))
    assert status.tolist() == [0] * len(names)
    assert rows.indices.tolist() == [feature_hash(name) for name in names]


@pytest.mark.parametrize("length", range(1, 20))
def test_a_string_with_a_byte_outside_the_plain_grammar_at_any_place_is_left_to_python(length):
    """The string scan looks at eight bytes at once: a backslash, a control character, DEL or a non-ASCII byte
    at any place of a name (first, inside a word of eight, last) sends the value to the Python parser."""
    fields = {"id": "id", "x": "x", "text": "text", "label": "label"}
    for odd in (b"\\n", b"\x01", b"\x1f", b"\x7f", b"\xc3\xa9"):
        for place in range(length):
            name = b"n" * place + odd + b"n" * (length - place - 1)
            lines = [b'{"x": {"' + name + b'": 1}, "label": 1}', b'{"id": "' + name + b'", "x": {}, "label": 1}']
            status, *_ = parse_json_events(lines, fields, 1000, NameTable(8))
            assert status.tolist() == [2, 2], (name, status)
    status, rows, ids, _ = parse_json_events(
        [b'{"id": "' + b"i" * length + b'", "x": {"' + b"~" * length + b'": 1}, "label": 1}'], fields, 1000
    )
    assert status.tolist() == [0] and rows.keys == ["~" * length] and ids == ["i" * length]


def test_the_c_json_parser_on_edge_cases():
    lines = [
        b'{"x": {"a": -0, "b": 1e-5, "c": 123456789012345}, "label": 1}',
        b'{"x": {"a": 1, "b": 1e999}, "label": 1}',  # a feature Python refuses, after one it accepts
        b'{"x": {"a": 1, "a": 2}, "label": 1}',  # a repeated name
        b'{"x": {"a": 1}, "label": null}',  # unlabelled: Python's
        b'{"x": {"a": 1}, "label": 1, "text": "t"}',  # text beside the features: Python's
        b' {"label" :"ham","id":7,\n"x":{ }} ',
    ]
    status, rows, ids, labels = parse_json_events(lines, {"id": "id", "x": "x", "text": "text", "label": "label"}, 1000)
    assert status.tolist() == [0, 2, 2, 2, 2, 0]
    assert rows.indptr.tolist() == [0, 3, 3] and rows.keys == ["a", "b", "c"]
    assert [v.hex() for v in rows.data.tolist()] == [(0.0).hex(), (1e-5).hex(), (123456789012345.0).hex()]
    assert ids == [None, 7] and labels == [1, "ham"]
    with pytest.raises(TypeError):
        parse_json_events(["{}"], {"id": "id", "x": "x", "text": "text", "label": "label"}, 1000)
    # fields that coincide leave every value to Python
    status, *_ = parse_json_events(lines[:1], {"id": "x", "x": "x", "text": "text", "label": "label"}, 1000)
    assert status.tolist() == [2]


def test_many_names_grow_the_c_name_table():
    names = [f"n{i}" for i in range(3000)] + [f"a_long_feature_name_{i}" for i in range(3000)]
    lines = [json.dumps({"x": {n: i for i, n in enumerate(names[s::7])}, "label": True}).encode() for s in range(7)]
    lines += [json.dumps({"x": dict.fromkeys(names[::-3], 1.5), "label": False}).encode()]
    status, rows, _, _ = parse_json_events(lines, {"id": "id", "x": "x", "text": "text", "label": "label"}, 10**6)
    assert status.tolist() == [0] * 8 and sorted(rows.keys) == sorted(names)
    assert [list(rows.row(i).items()) for i in range(8)] == [
        [(k, float(v)) for k, v in json.loads(line)["x"].items()] for line in lines
    ]


# -- the runner ------------------------------------------------------------------------------


def _eval(tmp_path: Path, log: Path, fmt: str, batch_size: int, tag: str, **model: object) -> tuple[list, list, list]:
    """Run a job over ``log`` (``model``: more settings of the learner): (each checkpoint's events, model digest
    and runner state; the predictions; the positions of the rejected records)."""
    out, dead, directory = tmp_path / f"pred-{tag}.jsonl", tmp_path / f"dead-{tag}.jsonl", tmp_path / f"ck-{tag}"
    config = {
        "model": {"kind": "linear", "lambda_": 0.05, "fit_intercept": True, "average": 25, **model},
        "features": {"type": "dict"},
        "source": {"type": "file", "path": str(log), "format": fmt, "max_bytes": 400},
        "output": {"type": "file", "path": str(out)},
        "errors": {"on_error": "skip", "dead_letter": {"type": "file", "path": str(dead)}},
        "run": {"batch_size": batch_size},
        "checkpoint": {"dir": str(directory), "every_events": 37, "keep": 100},
    }
    path = tmp_path / f"job-{tag}.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    assert cli.main(["run", "--config", str(path)]) == 0
    states = []
    for checkpoint in sorted(checkpoints(directory)):
        state, manifest = read_checkpoint(checkpoint)
        runner = state["runner"]
        pending = runner["pending"]  # without the ages, a wall-clock reading
        runner["pending"] = {
            name: column.tolist() if isinstance(column, np.ndarray) else column
            for name, column in pending.items()
            if name != "ages"
        }
        states.append((manifest["events"], manifest["source"], model_digest(state["model"]), runner))
    predictions = [json.loads(line) for line in out.read_text().splitlines()]
    rejected = [json.loads(line)["position"] for line in dead.read_text().splitlines()] if dead.exists() else []
    return states, predictions, rejected


def _svmlight_log(n: int) -> list[bytes]:
    rng = random.Random(5)
    lines = []
    for i in range(n):
        pairs = " ".join(f"{j}:{rng.gauss(0, 1):.4g}" for j in sorted(rng.sample(range(1, 30), 4)))
        lines.append(f"{rng.choice(['+1', '-1', '0'])} {pairs}".encode())
        if i % 23 == 5:
            lines.append(rng.choice([b"# a comment", b"+1 1:nan", b"3 1:1", b"+1 1:1_0 2:1", b"-1 4:1 4:2",
                                     b"+1 2:\xff", b"", b"+1 " + b"9:1 " * 200,
                                     b"-1 1:1e200 2:1e200 # huge"]))  # fmt: skip
    return lines


def _json_log(n: int) -> list[bytes]:
    rng = random.Random(6)
    lines = []
    for i in range(n):
        event = {"id": f"e{i}", "x": {f"f{j}": rng.gauss(0, 1) for j in rng.sample(range(30), 4)}}
        if i % 17 != 3:  # some wait for a delayed label
            event["label"] = rng.random() < 0.5
        lines.append(json.dumps(event).encode())
        if i % 17 == 9:
            lines.append(json.dumps({"id": f"e{i - 6}", "label": True}).encode())
        if i % 29 == 11:
            odd = [b"{bad json", b'{"id": 1, "x": {"a": "b"}, "label": true}', b'{"x": {}, "label": 7}']
            lines.append(rng.choice(odd))
    return lines


@pytest.mark.parametrize("fmt", ["svmlight", "json"])
def test_the_runner_batches_give_what_one_record_at_a_time_gives(tmp_path, fmt):
    lines = _svmlight_log(400) if fmt == "svmlight" else _json_log(400)
    log = tmp_path / "log"
    log.write_bytes(b"\n".join(lines) + b"\n")
    one = _eval(tmp_path, log, fmt, 0, "one")
    assert len(one[0]) > 10 and len(one[2]) > 3
    for size in (1 << 14, 50):
        batched = _eval(tmp_path, log, fmt, size, f"b{size}")
        assert batched[0] == one[0]  # every checkpoint: events, source position, model, counts, metrics
        assert batched[1] == one[1]  # every prediction, in order
        assert batched[2] == one[2]  # the same records rejected


def test_svmlight_names_as_columns_of_weight_arrays_batch_as_one_at_a_time(tmp_path):
    """With n_features, svmlight names are the int columns of the weight arrays: the same predictions as the
    names as strings over dicts; a name that is no column refuses its line, in batches as one at a time."""
    lines = _svmlight_log(400)
    log = tmp_path / "log"
    log.write_bytes(b"\n".join(lines) + b"\n")
    dicts = _eval(tmp_path, log, "svmlight", 1 << 14, "dicts", max_features=None)  # (null: the names in dicts)
    arrays = _eval(tmp_path, log, "svmlight", 1 << 14, "arrays", n_features=64)
    assert arrays[1] == dicts[1] and arrays[2] == dicts[2]

    lines[40:40] = [b"+1 abc:1 3:0.5", b"-1 070:1", b"+1 64:1", b"-1 +5:1", b"+1 3:1 qid:7"]
    log.write_bytes(b"\n".join(lines) + b"\n")
    one = _eval(tmp_path, log, "svmlight", 0, "one", n_features=64)
    for size in (1 << 14, 50):
        assert _eval(tmp_path, log, "svmlight", size, f"b{size}", n_features=64) == one
        with mock.patch.object(fastparse, "SPLIT_LINES", 2):  # each batch learned in the two parts parsed
            assert _eval(tmp_path, log, "svmlight", size, f"p{size}", n_features=64) == one
    assert len(one[2]) == len(dicts[2]) + 4  # the four names that are no column; qid is no feature
    reasons = (tmp_path / "dead-one.jsonl").read_text()
    for name in ("'abc'", "'070'", "'64'", "'+5'"):
        assert f"svmlight feature {name} is no column from 0 to 63" in reasons


FEATURE_VALUES = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False, width=64),
    st.floats(min_value=-1e3, max_value=1e3),
    st.integers(-(10**20), 10**20),
    st.booleans(),
)


@settings(max_examples=300, deadline=None)
@given(
    stored=st.dictionaries(st.integers(0, 30), st.floats(-1e3, 1e3)),
    x=st.dictionaries(st.integers(0, 40), FEATURE_VALUES, max_size=20),
    c=st.floats(-1e3, 1e3),
)
def test_one_example_passes_in_c_give_the_python_expressions_bits(stored, x, c):
    """learn_one's dot product and update, in C, against the Python expressions they replace."""
    from itertools import repeat
    from operator import add, mul

    def python_dot(v: dict) -> float:
        return sum(map(mul, map(v.get, x, repeat(0.0)), x.values()))

    try:
        expected = python_dot(stored)
    except OverflowError:
        with pytest.raises(OverflowError):
            weights.sparse_dot(stored, x)
        return
    result = weights.sparse_dot(stored, x)
    assert type(result) is type(expected) and float(result).hex() == float(expected).hex()

    v, python_v = dict(stored), dict(stored)
    change = weights._axpy_sq_norm(v, x, c)
    old = list(map(python_v.get, x, repeat(0.0)))
    new = list(map(add, old, map(mul, repeat(c), x.values())))
    python_v.update(zip(x, new))
    python_change = sum(map(mul, new, new)) - sum(map(mul, old, old))
    assert type(change) is type(python_change) and float(change).hex() == float(python_change).hex()
    assert list(v) == list(python_v)
    assert [value.hex() for value in v.values()] == [float(value).hex() for value in python_v.values()]
