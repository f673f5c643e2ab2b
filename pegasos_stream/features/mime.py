"""A light reader of RFC 822 messages over bytes: the selected headers and the decoded text parts.

It does what a spam filter needs of MIME and no more, with every step defined on bytes so that a
compiled reader can match it exactly.

**Where the headers end.** Lines end at CRLF, CR or LF. The header block ends at the first line that
is neither a header field (a name of printable bytes other than ":" and a colon, at the start of the
line) nor a continuation line (one that starts with a space or a tab): an empty line ends it and is
dropped; any other line starts the body. A text whose first line is no header field, or whose header
block names none of the usual headers (From, To, Subject, Date, Received, Message-ID, Return-Path,
MIME-Version), is all body: it is returned as it is. Headers are unfolded and RFC 2047 encoded words
decoded (their charset is not applied: the bytes are kept; white space between two encoded words is
dropped). An mbox envelope line (``From sender date``) before the headers is skipped, and so is a
``From `` line among them.

**The body.** A multipart entity is split on its boundary lines ("--" + boundary, then "--" to close,
then only spaces or tabs), its preamble and epilogue left out, each part read the same way, eight
levels deep at most; a multipart entity with no boundary, or none of whose lines is a boundary line,
or nested deeper, is read as text. A message/* entity (message/delivery-status excepted) is read as
the message it holds. Text parts, and a part whose type names no single "/", are decoded from base64
or quoted-printable; HTML is reduced to its text (tags removed, numeric and six named entities
decoded). Every run of white space becomes one space.

This is what the standard library's ``email`` parser keeps (``tests/test_mime_rule.py`` holds the
two equal on generated messages of every shape), except where the two must differ:

- a text that starts with "Word:" but names none of the usual headers (an SMS, a note) is kept whole
  here, where ``email`` takes its first lines for headers;
- a ``From `` line that ends the header block is skipped here; ``email`` makes it the body's first line;
- junk in base64 or quoted-printable decodes as `_base64` and `_quoted_printable` say, ``email``
  as binascii does (which drops the rest of a quoted-printable text at a "=" before a lone CR, where
  this reader joins the lines); HTML is reduced here and kept as it is by ``email``;
- the parts of a multipart/digest are read as text (``email`` takes them for messages), and parts
  nested deeper than eight levels as the text of their entity.
"""

from __future__ import annotations

import binascii
import re
from collections.abc import Iterator

__all__ = ["message_bytes", "read_message"]

#: Headers of which at least one tells a real message from a text that merely starts with "Word:".
_MESSAGE_HEADERS = (b"from", b"to", b"subject", b"date", b"received", b"message-id", b"return-path", b"mime-version")
_FIELD = re.compile(rb"[!-9;-~]+:")  # an RFC 5322 field name and its colon, at the start of a line
_NAME = re.compile(rb"[!-9;-~]*")  # what may stand before a header line's first colon
_LINE_END = re.compile(rb"\r\n|\r|\n")
_ENCODED_WORD = re.compile(rb"=\?[^?\s]{1,40}\?([bBqQ])\?([^?\s]{0,1000})\?=")
_TAG = re.compile(rb"<[^>]{0,2000}>")
_ENTITY = re.compile(rb"&(#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[a-zA-Z]{2,6});")
_NAMED = {b"nbsp": b" ", b"amp": b"&", b"lt": b"<", b"gt": b">", b"quot": b'"', b"apos": b"'"}
_SPACE = re.compile(rb"\s+")  # bytes: space, \t, \n, \r, \v, \f
_QP_ESCAPE = re.compile(rb"=(?:\r\n|\r|\n|([0-9A-Fa-f]{2}))")
_NOT_BASE64 = re.compile(rb"[^A-Za-z0-9+/]+")
_WHITESPACE = b" \t\n\r\x0b\x0c"
MAX_DEPTH = 8


def message_bytes(raw: bytes, headers: tuple[bytes, ...] = (b"subject", b"from")) -> bytes:
    """``headers`` ("name: value", in that order, those present and not empty) and the decoded text
    of the body parts of the message ``raw``, joined by newlines, whitespace runs made one space."""
    return read_message(raw, headers)[0]


def read_message(raw: bytes, headers: tuple[bytes, ...] = (b"subject", b"from")) -> tuple[bytes, int]:
    """``message_bytes(raw, headers)`` and where the text of the body starts in it (0 for a text that
    is all body)."""
    data = raw[_after_first_line(raw) :] if raw.startswith(b"From ") else raw
    if not _FIELD.match(data):
        return raw, 0
    fields, body = _split(data)
    if not any(name in fields for name in _MESSAGE_HEADERS):
        return raw, 0
    texts = [name + b": " + _decode_words(fields[name]) for name in headers if fields.get(name)]
    head = len(_SPACE.sub(b" ", b"\n".join(texts)))
    _collect(fields, body, 0, texts)
    return _SPACE.sub(b" ", b"\n".join(texts)), head


def _after_first_line(data: bytes) -> int:
    """Where the second line of ``data`` starts (its length when it has one line)."""
    end = _LINE_END.search(data)
    return len(data) if end is None else end.end()


def _lines(data: bytes) -> Iterator[tuple[int, int, int]]:
    """(start, end, next) of each line of ``data``: it is data[start:end], and the next starts at next,
    after its line end (CRLF, CR or LF)."""
    start = 0
    while start < len(data):
        end = _LINE_END.search(data, start)
        if end is None:
            yield start, len(data), len(data)
            return
        yield start, end.start(), end.end()
        start = end.end()


def _split(data: bytes) -> tuple[dict[bytes, bytes], bytes]:
    """The header fields of ``data`` ({lowercase name: unfolded value}, the first of each name) and
    its body (see the module's docstring for where the header block ends)."""
    fields: dict[bytes, bytes] = {}
    current: bytes | None = None  # the field that continuation lines extend
    for start, end, after in _lines(data):
        line = data[start:end]
        if not line:
            return fields, data[after:]
        if line[:1] in (b" ", b"\t"):
            if current is not None:
                fields[current] += b" " + line.strip(_WHITESPACE)
            continue
        current = None
        if line.startswith(b"From "):  # a misplaced envelope line, skipped
            continue
        name, colon, value = line.partition(b":")
        if not colon or not _NAME.fullmatch(name):
            return fields, data[start:]
        name = name.lower()
        if name and name not in fields:
            fields[name] = value.strip(_WHITESPACE)
            current = name
    return fields, b""


def _collect(fields: dict[bytes, bytes], body: bytes, depth: int, texts: list[bytes]) -> None:
    """Append the decoded text parts of the entity with these header ``fields`` and ``body``."""
    content_type = fields.get(b"content-type", b"")
    kind = content_type.partition(b";")[0].strip(_WHITESPACE).lower()
    if kind.count(b"/") != 1:  # no type, or one that names no single "/": plain text
        kind = b"text/plain"
    if depth < MAX_DEPTH:
        if kind.startswith(b"multipart/"):
            boundary = _boundary(content_type)
            parts = _parts(body, b"--" + boundary) if boundary else None
            if parts is not None:
                for part in parts:
                    _collect(*_split(part), depth + 1, texts)
                return
        elif kind.startswith(b"message/") and kind != b"message/delivery-status":
            _collect(*_split(body), depth + 1, texts)
            return
    if not kind.startswith((b"text/", b"multipart/", b"message/")) or kind == b"message/delivery-status":
        return
    encoding = fields.get(b"content-transfer-encoding", b"").strip(_WHITESPACE).lower()
    if encoding == b"base64":
        body = _base64(body)
    elif encoding == b"quoted-printable":
        body = _quoted_printable(body)
    if kind == b"text/html":
        body = _ENTITY.sub(_entity, _TAG.sub(b" ", body))
    texts.append(body)


def _boundary(content_type: bytes) -> bytes:
    """The ``boundary`` parameter of a Content-Type value (quotes removed); b"" when there is none."""
    for parameter in content_type.split(b";")[1:]:
        key, equals, value = parameter.partition(b"=")
        if equals and key.strip(_WHITESPACE).lower() == b"boundary":
            value = value.strip(_WHITESPACE)
            if len(value) >= 2 and value.startswith(b'"') and value.endswith(b'"'):
                value = value[1:-1]
            return value
    return b""


def _parts(body: bytes, delimiter: bytes) -> list[bytes] | None:
    """The parts of a multipart body: what lies between its boundary lines (``delimiter``, then "--"
    on the closing one, then only spaces or tabs), the line end before each boundary line left out,
    up to the closing one; None when no line is a boundary line."""
    parts: list[bytes] = []
    part: int | None = None  # where the part being read starts; None before the first boundary line
    last_end = 0  # where the line before this one ends, its line end excluded
    for start, end, after in _lines(body):
        line = body[start:end]
        closing = line[len(delimiter) : len(delimiter) + 2] == b"--"
        if line.startswith(delimiter) and not line[len(delimiter) + 2 * closing :].strip(b" \t"):
            if part is not None:
                parts.append(body[part : max(part, last_end)])
            if closing:
                return parts
            part = after
        last_end = end
    if part is None:
        return None
    parts.append(body[part:])
    return parts


def _decode_words(value: bytes) -> bytes:
    """A header value with its RFC 2047 encoded words (``=?charset?B|Q?text?=``) decoded to bytes, the
    white space between two encoded words dropped."""
    pieces: list[bytes] = []
    last = 0  # where the text after the last encoded word starts
    for index, word in enumerate(_ENCODED_WORD.finditer(value)):
        between = value[last : word.start()]
        if index == 0 or between.strip(_WHITESPACE):
            pieces.append(between)
        if word.group(1) in b"bB":
            pieces.append(_base64(word.group(2)))
        else:
            pieces.append(_quoted_printable(word.group(2).replace(b"_", b" ")))
        last = word.end()
    pieces.append(value[last:])
    return b"".join(pieces)


def _base64(data: bytes) -> bytes:
    """Base64 decoded, ignoring every byte outside the alphabet ("=" included); a last group of 2 or
    3 characters gives 1 or 2 bytes, a last single character nothing."""
    letters = _NOT_BASE64.sub(b"", data)
    letters = letters[: len(letters) - (len(letters) % 4 == 1)]
    padding = -len(letters) % 4
    return binascii.a2b_base64(letters + b"=" * padding)


def _quoted_printable(data: bytes) -> bytes:
    """Quoted-printable decoded: "=XX" (two hex digits) is that byte, "=" at the end of a line joins
    it to the next, any other byte stays as it is."""

    def decoded(escape: re.Match[bytes]) -> bytes:
        digits = escape.group(1)
        return b"" if digits is None else bytes([int(digits, 16)])

    return _QP_ESCAPE.sub(decoded, data)


def _entity(match: re.Match[bytes]) -> bytes:
    """The bytes of an HTML character reference: a numeric one as UTF-8 (a space when it names no
    character), one of six named ones, any other left as it is."""
    name = match.group(1)
    if name[:1] != b"#":
        return _NAMED.get(name.lower(), match.group(0))
    code = int(name[2:], 16) if name[1:2] in b"xX" else int(name[1:])
    if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
        return b" "
    return chr(code).encode("utf-8")
