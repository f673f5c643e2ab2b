"""The compiled "bytes" reader and n-gram hashing (`pegasos_stream.features._text`) against their
Python reference (`features.mime.message_bytes`, `EmailFeatures.python_transform_one`), exactly."""

from __future__ import annotations

import gzip
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pegasos_stream import _compiled
from pegasos_stream.features import EmailFeatures, email
from pegasos_stream.features.email import rows_of
from pegasos_stream.features.mime import message_bytes, read_message

_text = _compiled.load("pegasos_stream.features._text")
if _text is None:
    pytest.skip(
        "the compiled reader is not in use (not built, or PEGASOS_STREAM_PURE_PYTHON is set)", allow_module_level=True
    )

SPAMASSASSIN = Path(__file__).resolve().parents[2] / "shared" / "data" / "spamassassin.jsonl.gz"

_PIECES = st.sampled_from(
    [
        b"From alice Mon Jan  1 00:00:00 2002",
        b"Subject: =?utf-8?B?w6k=?= =?x?Q?a_b=3F?= =?bad?B?***?= =?q?Q?=4=?=",
        b"From: =?iso-8859-1?q?J=F6rg?= <j@x>",
        b"Received: from x",
        b"subject: second",
        b"Content-Type: multipart/mixed; boundary=zz",
        b'Content-Type: multipart/alternative; charset=x; BOUNDARY="zz"',
        b"Content-Type: Multipart/Related; boundary=",
        b"Content-Type: text/html; charset=utf-8",
        b"Content-Type: TEXT/plain",
        b"Content-Type: image/gif",
        b"Content-Transfer-Encoding: base64",
        b"Content-Transfer-Encoding:  Quoted-Printable ",
        b"--zz",
        b"--zz--",
        b"--zzz",
        b" folded continuation",
        b"\tmore",
        b"",
        b"\r",
        b"<p>a<br/>b</p><a href='x'>&amp;&AMP;&nbsp;&#9;&#x41;&#xd800;&#99999999;&#1114111;&foo;&;</a>",
        b"=41=4a=zz=\r",
        b"=",
        b"QUJDRA==",
        b"Q",
        b"<" + b"x" * 2001 + b">",
        b"<" + b"x" * 2000 + b">",
        b"no colon here",
        b"X-Junk : spaced name",
        b":empty name",
    ]
)
_MESSAGES = st.lists(st.one_of(_PIECES, st.binary(max_size=12)), max_size=40).map(b"\n".join)


@settings(max_examples=400, deadline=None)
@given(_MESSAGES, st.integers(1, 400))
def test_the_compiled_reader_reads_what_message_bytes_reads(message, max_bytes):
    expected = message_bytes(message)
    assert _text.message(message, 10**6)[0] == expected
    assert _text.message(message, max_bytes)[0] == expected[:max_bytes]


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_the_compiled_reader_reads_any_bytes_as_message_bytes_does(data):
    for raw in (data, b"Subject: s\n" + data, b"Subject: s\nContent-Type: text/html\n\n" + data):
        assert _text.message(raw, 10**6) == read_message(raw)


_HTML = b"Subject: s\nContent-Type: text/html\n\n"
_EDGES = [
    _HTML + b"<" + b"x" * 2000 + b">after",  # a tag of 2,000 bytes: removed
    _HTML + b"<" + b"x" * 2001 + b">after",  # of 2,001: kept
    _HTML + b"&#1234567;&#12345678;&#x10FFFF;&#x1234567;&abcdef;&abcdefg;&a;&#;&#x;",
    b"Subject: =?" + b"c" * 40 + b"?Q?ok?= =?" + b"c" * 41 + b"?Q?no?=",
    b"Subject: =?c?B?" + b"Q" * 1000 + b"?= =?c?B?" + b"Q" * 1001 + b"?=",
    b"Subject: s\nContent-Type: text/plain\nContent-Transfer-Encoding: quoted-printable\n\nsoft=\r\nbreak=\nend=\r",
    b'Subject: s\nContent-Type: multipart/mixed; boundary="a b"\n\n--a b\n\none\n--a b\n\ntwo\n--a b--\nepilogue',
    b"From nobody",
    b"From nobody\nSubject: enveloped\n\nbody",
    b"Subject: s\r\n\r\nCRLF body\r\n",
    b"Subject: s\nContent-Type: multipart/mixed; boundary=b\n\n--b",
    b"Subject: s\rFrom x\rTo: t\rno blank line\r=3D body",  # lone CR line ends, a From line among the headers
    b"Subject: s\nContent-Type: multipart/mixed; boundary=b\n\n--bb\nnot a part\n--b-- \t\nepilogue",
    b"Subject: s\nContent-Type: multipart/mixed; boundary=b\n\nno boundary line: read as text",
    b"Subject: s\nContent-Type: message/rfc822\n\nSubject: inner\nContent-Type: text/html\n\n<b>forwarded</b>",
    b"Subject: s\nContent-Type: message/delivery-status\n\nStatus: 5.0.0",
    b"Subject: s\nContent-Type: text\nContent-Transfer-Encoding: base64\n\naW52YWxpZCB0eXBl",
    b"Subject: =?utf-8?Q?a?= \t =?utf-8?B?Yg==?= c =?utf-8?Q?d?=",
]


@pytest.mark.parametrize("message", _EDGES)
def test_the_compiled_reader_on_the_edges_of_each_rule(message):
    assert _text.message(message, 10**6) == read_message(message)


def _assert_same_rows(features: EmailFeatures, texts: list) -> None:
    indptr, indices, data, keys = features.transform_texts(texts)
    want = rows_of([features.python_transform_one(text) for text in texts])  # the reference: the dicts, numbered
    assert indptr.tolist() == want[0].tolist()
    assert indices.tolist() == want[1].tolist()
    assert data.tobytes() == want[2].astype(np.float64).tobytes()  # bit for bit
    assert keys == want[3]


_OPTIONS = st.fixed_dictionaries(
    {
        "parse": st.booleans(),
        "char_ngram": st.integers(0, 6),
        "words": st.booleans(),
        "shapes": st.booleans(),
        "max_chars": st.integers(1, 300),
        "hash_bits": st.integers(1, 32),
        "binary": st.booleans(),
        "normalize": st.booleans(),
    }
).filter(lambda options: options["char_ngram"] or options["words"] or options["shapes"])


@settings(max_examples=300, deadline=None)
@given(_OPTIONS, st.lists(st.one_of(_MESSAGES, st.text(max_size=60)), max_size=6))
def test_compiled_rows_are_the_rows_of_transform_one(options, texts):
    _assert_same_rows(EmailFeatures(reader="bytes", **options), texts)


def _assert_hashed_rows(features: EmailFeatures, texts: list) -> None:
    """The rows over hashed columns are the dicts of ``transform_one`` (keys, order and values bit for bit),
    the rows over local columns, and those of the Python code path."""
    indptr, indices, data, keys = features.transform_texts(texts, hashed_columns=True)
    assert features.hash_bits is not None and keys == range(2**features.hash_bits)
    for i, text in enumerate(texts):
        a, b = int(indptr[i]), int(indptr[i + 1])
        row = {keys[c]: v for c, v in zip(indices[a:b].tolist(), data[a:b].tolist())}
        want = features.python_transform_one(text)
        assert list(row) == list(want)
        assert data[a:b].tobytes() == np.array(list(want.values()), dtype=np.float64).tobytes()
        one = features.transform_one(text)  # compiled, one text at a time
        assert list(one) == list(want)
        assert np.array(list(one.values())).tobytes() == np.array(list(want.values()), dtype=np.float64).tobytes()
    local = features.transform_texts(texts)
    assert indptr.tolist() == local.indptr.tolist() and data.tobytes() == local.data.tobytes()
    assert indices.tolist() == [local.keys[c] for c in local.indices.tolist()]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(email, "_text", None)  # the Python code path
        pure = features.transform_texts(texts, hashed_columns=True)
    assert pure.keys == keys and pure.indptr.tolist() == indptr.tolist() and pure.indices.tolist() == indices.tolist()
    assert pure.data.tobytes() == data.tobytes()


@settings(max_examples=300, deadline=None)
@given(_OPTIONS, st.lists(st.one_of(_MESSAGES, st.text(max_size=60)), max_size=6))
def test_rows_over_hashed_columns_are_the_dicts_of_transform_one(options, texts):
    _assert_hashed_rows(EmailFeatures(reader="bytes", **options), texts)


_SHAPES = "WIN $1,000,000.00!!!! call 0800-123-4567 HtTpS://x.y www.Z.com naïve " + "x" * 45 + " ww. http:/ é"


@pytest.mark.parametrize("binary", [True, False])
@pytest.mark.parametrize("words", [True, False])
@pytest.mark.parametrize("shapes", [True, False])
@pytest.mark.parametrize("hash_bits", [4, 12, 20, 24, 25, 32])
def test_rows_over_hashed_columns_of_the_edges(binary, words, shapes, hash_bits):
    features = EmailFeatures(
        reader="bytes", words=words, shapes=shapes, hash_bits=hash_bits, binary=binary, normalize=not binary
    )
    _assert_hashed_rows(features, [*_EDGES, "Subject: one\n\nbody body body", "", _SHAPES])


@pytest.mark.parametrize("n", range(1, 13))
def test_every_ngram_length_hashes_as_zlib(n):
    """The n-grams hashed by the tables (n <= 8) and by the byte-at-a-time CRC (longer) against zlib.crc32."""
    texts = [bytes(range(256)) * 2, b"Subject: s\n\n" + bytes(range(255, -1, -1)), "caf\u00e9 na\u00efve " * 20]
    features = EmailFeatures(reader="bytes", parse=False, char_ngram=n, hash_bits=32, binary=False)
    _assert_same_rows(features, texts)
    _assert_hashed_rows(features, texts)


def test_hashed_columns_need_hash_bits():
    with pytest.raises(ValueError, match="hash_bits"):
        EmailFeatures(reader="bytes").transform_texts(["text"], hashed_columns=True)


def test_a_batch_of_one_and_an_empty_batch():
    features = EmailFeatures(reader="bytes", hash_bits=20)
    _assert_same_rows(features, ["Subject: one\n\nbody"])
    indptr, indices, data, keys = features.transform_texts([])
    assert indptr.tolist() == [0] and not len(indices) and not len(data) and keys == []
    indptr, indices, data, keys = features.transform_texts([], hashed_columns=True)
    assert indptr.tolist() == [0] and not len(indices) and not len(data) and keys == range(2**20)


def test_texts_read_on_several_threads_at_once_are_the_rows_of_one_thread():
    """The compiled reader runs without the GIL (`EmailFeatures.read_texts`): four threads reading batches at once,
    of texts whose rows outgrow the room first set aside for them (the GIL is taken back to grow it), give the rows
    one thread gives, and change nothing on the features."""
    rng = np.random.default_rng(3)
    words = [bytes(rng.integers(97, 123, size=int(rng.integers(2, 4))).tolist()) for _ in range(3000)]
    texts = [b"Subject: s%d\n\n" % i + b" ".join(rng.choice(words, size=int(rng.integers(1, 900)))) for i in range(64)]
    batches = [texts[i::4] for i in range(4)] * 4
    features = EmailFeatures(reader="bytes", words=True, shapes=True, max_chars=3000, hash_bits=20)
    alone = [features.read_texts(batch, hashed_columns=True) for batch in batches]
    with ThreadPoolExecutor(4) as threads:
        together = list(threads.map(lambda batch: features.read_texts(batch, hashed_columns=True), batches))
    for (rows, _), batch in zip(alone, batches[:4]):  # more entries than the room set aside: about one a byte
        assert len(rows.indices) > sum(min(len(text) + 64, features.max_chars) for text in batch)
    for (rows, empty), (want, want_empty) in zip(together, alone, strict=True):
        assert empty == want_empty and rows.indptr.tolist() == want.indptr.tolist()
        assert rows.indices.tolist() == want.indices.tolist() and rows.data.tobytes() == want.data.tobytes()
    assert features.empty_bodies == 0
    _assert_hashed_rows(features, texts[:8])


def test_read_texts_needs_the_compiled_reader():
    with pytest.raises(ValueError, match="reader='bytes' and hash_bits"):
        EmailFeatures(reader="bytes").read_texts([b"text"])


@pytest.mark.slow
@pytest.mark.skipif(not SPAMASSASSIN.exists(), reason="the shared SpamAssassin data is not here")
def test_every_spamassassin_message_reads_and_hashes_as_the_reference():
    with gzip.open(SPAMASSASSIN, "rt", encoding="utf-8") as lines:
        texts = [json.loads(line)["text"] for line in lines]
    for text in texts:
        raw = text.encode("utf-8", "surrogatepass")
        assert _text.message(raw, 10**9)[0] == message_bytes(raw)
    _assert_same_rows(EmailFeatures(reader="bytes", hash_bits=20), texts[:1500])
    _assert_hashed_rows(EmailFeatures(reader="bytes", hash_bits=20), texts[:300])
