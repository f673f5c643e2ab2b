"""EmailFeatures and message_text on real and hand-made messages, fuzzed with hypothesis."""

from __future__ import annotations

import base64
import gzip
import json
import math
import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from river import base, checks

from pegasos_stream import PegasosClassifier
from pegasos_stream.features import EmailFeatures, message_text

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "pegasos_stream" / "data" / "spam-sample.jsonl.gz"

FUZZ = settings(deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow])


def _load_sample() -> list[dict]:
    with gzip.open(SAMPLE, "rt", encoding="utf-8") as lines:
        return [json.loads(line) for line in lines]


MESSAGES = _load_sample()
TEXTS = [m["text"] for m in MESSAGES]
#: A spread of the sample: the first ones, and every MIME-rich one (multipart, encoded, HTML).
RICH = [t for t in TEXTS if re.search(r"multipart|base64|quoted-printable|text/html", t, re.I)]
SOME = TEXTS[:40] + RICH[:40]


# -- real messages -------------------------------------------------------------------------


def test_sample_has_mime_rich_messages():
    assert len(MESSAGES) == 404
    assert len(RICH) >= 40


def test_deterministic():
    first, second = EmailFeatures(), EmailFeatures()
    for text in SOME:
        a = first.transform_one(text)
        assert a == second.transform_one(text) == first.transform_one(text)
        assert list(a) == list(first.transform_one(text))  # the same order too
        assert a  # every real message has features


def test_unit_norm_and_binary_values():
    normalized, raw = EmailFeatures(), EmailFeatures(normalize=False)
    for text in SOME:
        x, counts = normalized.transform_one(text), raw.transform_one(text)
        assert set(x) == set(counts)
        assert math.isclose(math.sqrt(sum(v * v for v in x.values())), 1.0, rel_tol=1e-12)
        assert set(counts.values()) == {1}  # binary
        assert len(set(x.values())) == 1 and math.isclose(next(iter(x.values())), 1 / math.sqrt(len(x)))


def test_keys_are_the_character_ngrams_of_the_first_max_chars():
    features = EmailFeatures(char_ngram=4, max_chars=300, normalize=False, binary=False)
    for text in SOME[:20]:
        parsed = message_text(text)[:300]
        counts = features.transform_one(text)
        expected = {}
        for i in range(len(parsed) - 3):
            key = "c:" + parsed[i : i + 4]
            expected[key] = expected.get(key, 0) + 1
        assert counts == expected
        assert sum(counts.values()) == max(len(parsed) - 3, 0)


def test_words_option():
    features = EmailFeatures(char_ngram=0, words=True, normalize=False)
    assert features.transform_one("Subject: Cheap pills\n\nBuy cheap pills now, 100% GUARANTEED") == {
        "w:subject": 1,
        "w:cheap": 1,
        "w:pills": 1,
        "w:buy": 1,
        "w:now": 1,
        "w:100": 1,
        "w:guaranteed": 1,
    }
    both = EmailFeatures(char_ngram=3, words=True).transform_one(TEXTS[0])
    assert any(k.startswith("w:") for k in both) and any(k.startswith("c:") for k in both)


def test_dict_input_with_on_and_bytes_input():
    text = TEXTS[3]
    assert EmailFeatures(on="body").transform_one({"body": text, "other": 1}) == EmailFeatures().transform_one(text)
    assert EmailFeatures().transform_one(text.encode("utf-8")) == EmailFeatures().transform_one(text)


@pytest.mark.parametrize("bits", [1, 8, 18, 32])
def test_hashing_into_buckets(bits):
    hashed, plain = EmailFeatures(hash_bits=bits, normalize=False), EmailFeatures(normalize=False)
    for text in SOME[:30]:
        x = hashed.transform_one(text)
        assert x and all(type(k) is int and 0 <= k < 2**bits for k in x)
        assert len(x) <= len(plain.transform_one(text))
    x = EmailFeatures(hash_bits=bits).transform_one(TEXTS[0])
    assert math.isclose(sum(v * v for v in x.values()), 1.0)


def _hashed_in_subprocess(seed: str) -> list[dict]:
    code = (
        "import gzip, json, sys\n"
        "from pegasos_stream.features import EmailFeatures\n"
        f"lines = gzip.open({str(SAMPLE)!r}, 'rt', encoding='utf-8').read().splitlines()[:8]\n"
        "f = EmailFeatures(hash_bits=20, words=True)\n"
        "print(json.dumps([f.transform_one(json.loads(l)['text']) for l in lines]))\n"
    )
    env = {**os.environ, "PYTHONHASHSEED": seed}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return [{int(k): v for k, v in x.items()} for x in json.loads(done.stdout)]


def test_hashing_is_stable_across_processes():
    features = EmailFeatures(hash_bits=20, words=True)
    here = [features.transform_one(text) for text in TEXTS[:8]]
    assert _hashed_in_subprocess("1") == here
    assert _hashed_in_subprocess("4242") == here


def test_sample_messages_are_parsed():
    """The sample's messages start with an mbox envelope line ("From sender date"); they must still
    be parsed (selected headers and decoded body), not taken as raw text with every Received line."""
    unparsed = [
        m["id"]
        for m in MESSAGES
        if re.search(r"^Received: ", message_text(m["text"]), re.M) or message_text(m["text"]).startswith("From ")
    ]
    assert unparsed == [], f"{len(unparsed)} of {len(MESSAGES)} sample messages are not parsed, e.g. {unparsed[:3]}"


def test_mbox_envelope_line_does_not_stop_parsing():
    message = "Subject: Cheap pills\nFrom: a@example.com\nReceived: from x by y\n\nBuy now"
    parsed = message_text(message)
    assert parsed == "subject: Cheap pills from: a@example.com Buy now"
    assert message_text("From a@example.com  Mon Jun 24 17:48:32 2002\n" + message) == parsed


# -- message_text on hand-made messages ----------------------------------------------------


def test_subject_sender_and_body_other_headers_dropped():
    raw = (
        "Received: from relay.example.com by mx.example.org\n"
        "Subject: Quarterly report\n"
        "From: Alice <alice@example.com>\n"
        "To: bob@example.org\n"
        "X-Spam-Status: No\n"
        "\n"
        "Hello Bob,\n\nthe report is attached.\n"
    )
    text = message_text(raw)
    assert text == "subject: Quarterly report from: Alice <alice@example.com> Hello Bob, the report is attached. "
    assert "relay.example.com" not in text and "X-Spam" not in text and "bob@example.org" not in text


def test_quoted_printable_body_is_decoded():
    raw = (
        "Subject: menu\n"
        "Content-Type: text/plain; charset=utf-8\n"
        "Content-Transfer-Encoding: quoted-printable\n"
        "\n"
        "Caf=C3=A9 cr=C3=A8me br=C3=BB=\nl=C3=A9e =3D 5=E2=82=AC\n"
    )
    text = message_text(raw)
    assert "Café crème brûlée = 5€" in text
    assert "=C3" not in text


def test_base64_body_is_decoded():
    body = "Offre spéciale : gagnez un million d'euros aujourd'hui !"
    raw = (
        "Subject: offre\n"
        'Content-Type: text/plain; charset="iso-8859-1"\n'
        "Content-Transfer-Encoding: base64\n"
        "\n" + base64.encodebytes(body.encode("iso-8859-1")).decode("ascii")
    )
    text = message_text(raw)
    assert body in text
    assert "subject: offre" in text


def test_html_is_reduced_to_its_text():
    raw = (
        "Subject: deal\n"
        "Content-Type: text/html; charset=us-ascii\n"
        "\n"
        "<html><head><style>p {color: red}</style></head><body>\n"
        '<p>Buy <b>cheap</b> &amp; <a href="http://spam.example">save</a>&nbsp;now</p></body></html>\n'
    )
    text = message_text(raw)
    assert "Buy cheap & save" in text and "now" in text
    assert "<" not in text and ">" not in text and "&amp;" not in text and "href" not in text


def test_multipart_alternative_with_attachment():
    png = base64.encodebytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256))).decode("ascii")
    raw = (
        "Subject: =?utf-8?q?hello?=\n"
        "MIME-Version: 1.0\n"
        'Content-Type: multipart/mixed; boundary="OUTER"\n'
        "\n"
        "preamble, not shown\n"
        "--OUTER\n"
        'Content-Type: multipart/alternative; boundary="INNER"\n'
        "\n"
        "--INNER\n"
        "Content-Type: text/plain; charset=utf-8\n"
        "Content-Transfer-Encoding: quoted-printable\n"
        "\n"
        "Plain na=C3=AFve text\n"
        "--INNER\n"
        "Content-Type: text/html; charset=utf-8\n"
        "Content-Transfer-Encoding: base64\n"
        "\n" + base64.encodebytes("<p>HTML <i>naïve</i> text</p>".encode()).decode("ascii") + "--INNER--\n"
        "--OUTER\n"
        "Content-Type: image/png\n"
        "Content-Transfer-Encoding: base64\n"
        'Content-Disposition: attachment; filename="x.png"\n'
        "\n" + png + "--OUTER--\n"
    )
    text = message_text(raw)
    assert "Plain naïve text" in text
    assert "HTML naïve text" in text
    assert "PNG" not in text and png.split()[0] not in text  # the attachment is skipped
    assert "preamble" not in text


def test_unknown_or_unusable_charset_falls_back():
    for charset in ("x-no-such-charset", "zlib_codec", "base64_codec"):
        raw = f"Subject: s\nContent-Type: text/plain; charset={charset}\n\nplain caf\xe9 text\n"
        assert "plain caf" in message_text(raw), charset


@pytest.mark.parametrize(
    "text",
    [
        "Hey, are you free for lunch tomorrow?",
        "Ok lar... Joking wif u oni...",
        "",
        "   leading spaces: not a header",
        "<html><b>not parsed</b></html>",
        "multi\nline\n\nbody without headers",
    ],
)
def test_bare_text_is_used_as_it_is(text):
    assert message_text(text) == text
    if len(text) >= 4:
        assert EmailFeatures(normalize=False).transform_one(text) == {
            "c:" + text[i : i + 4]: 1 for i in range(len(text[:3000]) - 3)
        }


def test_bare_text_starting_with_a_colon_word_is_not_lost():
    """An SMS such as "URGENT: ..." looks like a header line; its words must not all vanish."""
    sms = "URGENT: you have won a 1000 prize! Call 09061701461 now"
    assert "you have won" in message_text(sms)
    assert len(EmailFeatures().transform_one(sms)) > 10


# -- never raises ----------------------------------------------------------------------------

VARIANTS = [
    EmailFeatures(),
    EmailFeatures(words=True, binary=False, normalize=False, max_chars=200),
    EmailFeatures(char_ngram=2, hash_bits=12),
    EmailFeatures(parse=False, char_ngram=5),
]


def _check_features(x: dict, features: EmailFeatures) -> None:
    assert isinstance(x, dict)
    for key, value in x.items():
        assert isinstance(key, int if features.hash_bits else str)
        assert isinstance(value, (int, float)) and math.isfinite(value) and value > 0
    if features.normalize and x:
        assert math.isclose(sum(v * v for v in x.values()), 1.0, rel_tol=1e-9)


@settings(FUZZ, max_examples=300)
@given(text=st.text(max_size=2000))
def test_arbitrary_text_never_raises(text):
    assert isinstance(message_text(text), str)
    for features in VARIANTS:
        _check_features(features.transform_one(text), features)


@settings(FUZZ, max_examples=300)
@given(data=st.binary(max_size=2000))
def test_arbitrary_bytes_never_raise(data):
    text = data.decode("latin-1")
    assert isinstance(message_text(text), str)
    for features in VARIANTS:
        _check_features(features.transform_one(text), features)
    _check_features(VARIANTS[0].transform_one(data), VARIANTS[0])  # bytes as they are


@FUZZ
@given(
    headers=st.lists(
        st.tuples(
            st.sampled_from(["Subject", "From", "Content-Type", "Content-Transfer-Encoding", "MIME-Version", "X-Junk"]),
            st.text(max_size=80),
        ),
        max_size=6,
    ),
    body=st.text(max_size=500),
)
def test_arbitrary_headers_never_raise(headers, body):
    raw = "".join(f"{name}: {value}\n" for name, value in headers) + "\n" + body
    assert isinstance(message_text(raw), str)
    _check_features(VARIANTS[0].transform_one(raw), VARIANTS[0])


CHARSETS = [
    "x-unknown",
    "utf-7",
    "utf-16",
    "utf-32",
    "idna",
    "zlib_codec",
    "base64",
    "rot13",
    "hex",
    "punycode",
    "uu_codec",
    "mbcs",
    "",
    '"',
    "utf-8'en'",
    "iso-2022-jp",
    "cp1252",
    "a" * 300,
    "\x00",
]
_BOUNDARY = re.compile(r'boundary="?([^";\s]+)"?', re.I)


def _corrupt(text: str, draw) -> str:
    """One of: byte flips, truncation, bad charset names, broken MIME boundaries, mixed."""
    kind = draw(st.sampled_from(["flip", "truncate", "charset", "boundary", "encoding", "all"]))
    if kind in ("charset", "all"):
        text = re.sub(
            r"charset=\"?[^\";\s]*\"?", lambda _: "charset=" + draw(st.sampled_from(CHARSETS)), text, flags=re.I
        )
    if kind in ("boundary", "all"):
        match = _BOUNDARY.search(text)
        if match:
            boundary = match.group(1)
            how = draw(st.sampled_from(["drop-close", "rename", "unterminated", "empty"]))
            if how == "drop-close":
                text = text.replace(f"--{boundary}--", "")
            elif how == "rename":
                text = text.replace(f'boundary="{boundary}"', 'boundary="elsewhere"', 1)
            elif how == "unterminated":
                text = text.replace(match.group(0), 'boundary="', 1)
            else:
                text = text.replace(match.group(0), 'boundary=""', 1)
    if kind in ("encoding", "all"):
        text = re.sub(
            r"(Content-Transfer-Encoding:\s*)\S+",
            lambda m: m.group(1) + draw(st.sampled_from(["base64", "quoted-printable", "x-uuencode", "8bit", "bogus"])),
            text,
            flags=re.I,
        )
    data = bytearray(text.encode("utf-8", "surrogateescape"))
    if kind in ("flip", "all") and data:
        for _ in range(draw(st.integers(1, 50))):
            i = draw(st.integers(0, len(data) - 1))
            data[i] = draw(st.integers(0, 255))
    if kind in ("truncate", "all") and data:
        data = data[: draw(st.integers(0, len(data)))]
    return data.decode(draw(st.sampled_from(["latin-1", "utf-8"])), errors="replace")


@pytest.mark.slow
@settings(FUZZ, max_examples=400)
@given(message=st.sampled_from(RICH + TEXTS[:20]), data=st.data())
def test_corrupted_real_messages_never_raise(message, data):
    corrupted = _corrupt(message, data.draw)
    assert isinstance(message_text(corrupted), str)
    for features in VARIANTS[:3]:
        _check_features(features.transform_one(corrupted), features)


# -- a river transformer -------------------------------------------------------------------


def test_is_a_river_transformer_passing_the_generic_checks():
    features = EmailFeatures()
    assert isinstance(features, base.Transformer)
    ran = 0
    for check in checks.yield_checks(features):
        if getattr(check, "keywords", {}).get("dataset") is None:  # the others feed numeric dicts
            check(EmailFeatures(words=True, hash_bits=16))
            ran += 1
    assert ran >= 10
    clone = features.clone({"char_ngram": 3})
    assert clone.char_ngram == 3 and clone.max_chars == features.max_chars
    restored = pickle.loads(pickle.dumps(features))
    assert restored.transform_one(TEXTS[0]) == features.transform_one(TEXTS[0])
    before = features.transform_one(TEXTS[1])
    features.learn_one(TEXTS[2])  # stateless: learning changes nothing
    assert features.transform_one(TEXTS[1]) == before


def test_pipeline_on_raw_texts():
    model = EmailFeatures() | PegasosClassifier()
    correct = 0
    for message in MESSAGES[:300]:
        positive = message["label"] == "spam"
        proba = model.predict_proba_one(message["text"])
        assert set(proba) <= {False, True}
        if proba:
            assert math.isclose(proba[False] + proba[True], 1.0) and 0.0 < proba[True] < 1.0
        correct += model.predict_one(message["text"]) == positive
        assert model.learn_one(message["text"], positive) is None
    learner = model["PegasosClassifier"]
    assert learner.t == 300
    assert learner.weights and all(isinstance(k, str) and k.startswith("c:") for k in learner.weights)
    assert correct / 300 > 0.75
    # the pipeline is the features then the learner, exactly
    x = EmailFeatures().transform_one(MESSAGES[300]["text"])
    assert model.predict_proba_one(MESSAGES[300]["text"]) == learner.predict_proba_one(x)


@pytest.mark.slow
def test_river_dataset_checks_through_a_pipeline():
    """river's dataset-driven checks, on (raw text, label) pairs from the sample."""
    model = EmailFeatures() | PegasosClassifier()
    dataset = [(m["text"], m["label"] == "spam") for m in MESSAGES[:80]]
    ran = 0
    for check in checks.yield_checks(model):
        if getattr(check, "keywords", {}).get("dataset") is None:
            continue
        name = check.__name__
        if any(part in name for part in ("features", "aliasing", "_many_", "bounded_memory")):
            continue  # those edit or tabulate the keys of dict input, which raw text does not have
        check.func(model.clone(), dataset=dataset)
        ran += 1
    assert ran >= 8


def test_shape_tokens_give_case_amounts_runs_and_links():
    features = EmailFeatures(parse=False, char_ngram=0, shapes=True, normalize=False)
    text = "Hello FREE!!!!! $1,000.00 0800123456 https://Spam.example x" + "y" * 44
    # "x" and 39 "y" make a token of 40 bytes, the 5 "y" left another: both are "aaa", one feature
    assert list(features.transform_one(text)) == ["s:Aaaa", "s:AAA!!!", "s:$9,999.99", "s:999", "s:url", "s:aaa"]
    bytes_reader = EmailFeatures(parse=False, char_ngram=0, shapes=True, normalize=False, reader="bytes")
    assert bytes_reader.transform_one(text) == features.transform_one(text)  # ASCII: the same names
