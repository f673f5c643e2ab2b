"""The byte reader keeps the text the standard library's ``email`` parser keeps, on messages of every shape.

The messages are generated (hypothesis): no headers at all, headers only, no blank line before the body;
LF, CRLF and lone CR line ends; an mbox ``From `` line; RFC 2047 subjects; multipart with missing, broken
or nested boundaries; base64 and quoted-printable; HTML only; 8-bit text in several charsets;
attachments and forwarded messages. The reference reads each with ``email.message_from_bytes`` and keeps
what `message_bytes` promises to keep (the Subject and From headers, the decoded text of the body's
parts, HTML reduced to its text), and the compiled reader is held to the Python one on the same messages.
"""

from __future__ import annotations

import base64
import binascii
import email
import quopri
import re
from email.header import decode_header
from email.message import Message
from email.policy import compat32

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from pegasos_stream import _compiled
from pegasos_stream.features import EmailFeatures
from pegasos_stream.features.mime import _ENTITY, _TAG, _entity, message_bytes, read_message

_text = _compiled.load("pegasos_stream.features._text")
_SPACE = re.compile(rb"\s+")
_CHARSETS = ("utf-8", "iso-8859-1", "koi8-r", "shift_jis", "windows-1252")
_SAMPLE_WORDS = ["meeting", "free", "Viagra", "$100", "click", "naïve", "prix", "日本語", "привет", "€5", "re", "x"]
_ENDINGS = ("\n", "\r\n", "\r")
_HEADERS = (
    "From: Alice <a@example.com>",
    "To: b@example.com",
    "Date: Mon, 2 Jan 2006 10:00:00 +0000",
    "Received: a\n\tb",
)


def normal(text: bytes) -> bytes:
    """White space runs made one space, none at the ends."""
    return _SPACE.sub(b" ", text).strip()


def reference_text(raw: bytes) -> bytes:
    """What the standard library's parser keeps of ``raw``: the Subject and From values (encoded words
    decoded, charsets not applied) and the decoded payload of every leaf that is text (or a multipart
    whose boundary it did not find), HTML reduced to its text as the reader reduces it. Quoted-printable
    is decoded by binascii after every line end is made LF: on a soft line break at a lone CR ("=" CR),
    binascii drops the rest of the text, where the reader joins the lines."""
    message = email.message_from_bytes(raw, policy=compat32)
    texts = []
    for name in ("subject", "from"):
        value = message.get(name)
        if value is None:
            continue
        decoded = b"".join(
            piece if isinstance(piece, bytes) else piece.encode("ascii", "surrogateescape")
            for piece, _ in decode_header(value)
        )
        if decoded.strip():
            texts.append(name.encode() + b": " + decoded)
    for part in message.walk():
        texts.extend(_leaf_text(part))
    return normal(b"\n".join(texts))


def _leaf_text(part: Message) -> list[bytes]:
    if part.is_multipart() or part.get_content_maintype() not in ("text", "multipart"):
        return []
    if part.get("content-transfer-encoding") == "quoted-printable":  # binascii drops all after a "=" + lone CR
        raw = part.get_payload().encode("ascii", "surrogateescape")
        payload = binascii.a2b_qp(re.sub(rb"\r\n?", b"\n", raw))
    else:
        payload = part.get_payload(decode=True)
    if part.get_content_type() == "text/html":
        payload = _ENTITY.sub(_entity, _TAG.sub(b" ", payload))
    return [payload]


# -- the generator --------------------------------------------------------------------------------

_words = st.lists(
    st.sampled_from(_SAMPLE_WORDS) | st.from_regex(r"[A-Za-z0-9.,!?'$%]{1,8}", fullmatch=True), min_size=1
)
_lines = st.lists(_words.map(" ".join), min_size=1, max_size=5)


@st.composite
def subjects(draw) -> str:
    """A Subject value: plain words, or RFC 2047 encoded words (B or Q, some charset) among them."""
    pieces = []
    for word in draw(st.lists(st.sampled_from(_SAMPLE_WORDS), min_size=1, max_size=4)):
        if not word.isascii() or draw(st.booleans()):  # 8-bit text in a header is encoded (RFC 2047)
            charset = draw(st.sampled_from(("utf-8", "iso-8859-1", "koi8-r")))
            data = word.encode(charset, "replace")
            if draw(st.booleans()):
                pieces.append(f"=?{charset}?B?{base64.b64encode(data).decode()}?=")
            else:
                q = "".join(chr(b) if chr(b).isalnum() and b < 128 else f"={b:02X}" for b in data)
                pieces.append(f"=?{charset}?Q?{q}?=")
        else:
            pieces.append(word)
    return " ".join(pieces)


@st.composite
def leaf(draw) -> tuple[list[str], bytes]:
    """The header lines and body of a leaf entity: text (plain or HTML, any transfer encoding and
    charset), an attachment, or nothing."""
    kind = draw(st.sampled_from(("text/plain", "text/html", None, "application/octet-stream", "image/gif")))
    charset = draw(st.sampled_from(_CHARSETS))
    lines = draw(_lines)
    if kind == "text/html":
        lines = ["<html><body>", *(f"<p>{line} &amp; more&nbsp;text</p>" for line in lines), "</body></html>"]
    body = "\n".join(lines).encode(charset, "replace")
    headers = []
    if kind is not None:
        headers.append(
            f"Content-Type: {kind}; charset={charset}" if kind.startswith("text") else f"Content-Type: {kind}"
        )
    if kind is not None and not kind.startswith("text"):
        headers.append('Content-Disposition: attachment; filename="file.bin"')
        body = draw(st.binary(min_size=1, max_size=60))
    encoding = draw(st.sampled_from(("", "8bit", "base64", "quoted-printable")))
    if kind is not None and not kind.startswith("text"):
        encoding = "base64"
    if encoding == "base64":
        body = base64.encodebytes(body)
    elif encoding == "quoted-printable":
        body = quopri.encodestring(body)
    if encoding:
        headers.append(f"Content-Transfer-Encoding: {encoding}")
    return headers, body


@st.composite
def entity(draw, depth: int = 0) -> tuple[list[str], bytes]:
    """The header lines and body of an entity: a leaf, a multipart of entities (its boundary missing,
    unused, unclosed or well formed), or a message/rfc822 holding a message."""
    shape = draw(st.sampled_from(("leaf", "leaf", "multipart", "message") if depth < 3 else ("leaf",)))
    if shape == "leaf":
        return draw(leaf())
    if shape == "message":
        headers, body = draw(entity(depth + 1))
        inner = "\n".join([f"Subject: inner {depth}", *headers]).encode() + b"\n\n" + body
        return ["Content-Type: message/rfc822"], inner
    boundary = draw(st.sampled_from(("==b{}==", "b{}", "----=_Part_{}_1.2"))).format(depth)
    parts = draw(st.lists(entity(depth + 1), min_size=1, max_size=3))
    flaw = draw(st.sampled_from(("none", "none", "no-parameter", "unused", "unclosed")))
    subtype = draw(st.sampled_from(("mixed", "alternative", "related")))
    quoted = draw(st.booleans())
    parameter = "" if flaw == "no-parameter" else f'; boundary="{boundary}"' if quoted else f"; boundary={boundary}"
    delimiter = b"--" + (b"other" if flaw == "unused" else boundary.encode())
    chunks = [b"This is a multi-part message in MIME format."]
    for headers, body in parts:
        chunks += [delimiter, "\n".join(headers).encode() + b"\n\n" + body]
    if flaw != "unclosed":
        chunks += [delimiter + b"--", b"an epilogue"]
    return [f"Content-Type: multipart/{subtype}{parameter}"], b"\n".join(chunks)


@st.composite
def messages(draw) -> bytes:
    """A whole message of any shape, its line ends all LF, CRLF or lone CR."""
    shape = draw(st.sampled_from(("full", "full", "full", "no-headers", "headers-only", "no-blank-line")))
    if shape == "no-headers":
        text = "\n".join(draw(_lines)).encode(draw(st.sampled_from(_CHARSETS)), "replace")
    else:
        headers = [f"Subject: {draw(subjects())}"] if draw(st.booleans()) or shape == "no-blank-line" else []
        headers += draw(st.lists(st.sampled_from(_HEADERS), min_size=not headers))
        if draw(st.booleans()):
            headers.append("X-Mailer: x")
        if draw(st.booleans()):
            headers.insert(1, "Subject: folded\n first\n\tsecond")
        if shape == "headers-only":
            text = "\n".join(headers).encode() + b"\n"
        elif shape == "no-blank-line":
            body = "\n".join(draw(_lines))
            assume(not body.startswith("From "))  # a From line among the headers is skipped (the docstring)
            text = "\n".join(headers).encode() + b"\n" + body.encode()
        else:
            entity_headers, body = draw(entity())
            text = "\n".join(headers + ["MIME-Version: 1.0", *entity_headers]).encode() + b"\n\n" + body
        if draw(st.booleans()):
            text = b"From alice@example.com Mon Jan  2 10:00:00 2006\n" + text
    return re.sub(rb"\r\n|\r|\n", draw(st.sampled_from(_ENDINGS)).encode(), text)


# -- the tests ------------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(messages())
def test_the_reader_keeps_the_text_the_email_package_keeps(raw):
    assert normal(message_bytes(raw)) == reference_text(raw)


@pytest.mark.skipif(_text is None, reason="the compiled reader is not in use")
@settings(max_examples=300, deadline=None)
@given(messages(), st.integers(1, 4000))
def test_the_compiled_reader_keeps_what_the_python_reader_keeps(raw, max_bytes):
    text, body = read_message(raw)
    assert _text.message(raw, max_bytes) == (text[:max_bytes], min(body, max_bytes))


@pytest.mark.parametrize("compiled", [False, True] if _text is not None else [False])
def test_texts_that_keep_no_body_text_are_counted(compiled):
    texts = [
        b"Subject: only headers\nFrom: a@b\n\n",  # headers only
        b"Subject: s\nContent-Type: image/gif\nContent-Transfer-Encoding: base64\n\nR0lGOD==",  # an attachment
        b"Subject: " + b"x" * 40 + b"\n\nbody past the first 30 bytes",  # no body text in the bytes kept
        b" \n\t",  # white space only
        b"Subject: re : meeting\nthanks , i ' ll be there",  # no blank line: the body is read
        b"a text that is all body",
    ]
    features = EmailFeatures(reader="bytes", hash_bits=12, max_chars=30)
    if compiled:
        features.transform_texts(texts)
    else:
        for text in texts:
            features.python_transform_one(text)
    assert features.empty_bodies == 4
