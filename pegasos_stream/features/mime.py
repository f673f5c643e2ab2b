"""A light reader of RFC 822 messages over bytes: the selected headers and the decoded text parts.

It does what a spam filter needs of MIME and no more, with every step defined on bytes so that a
compiled reader can match it exactly: headers unfolded, RFC 2047 encoded words decoded (their
charset is not applied: the bytes are kept), multipart bodies split on their boundary lines (eight
levels deep at most), text parts decoded from base64 or quoted-printable, HTML reduced to its text
(tags removed, numeric and six named entities decoded), every run of whitespace made one space.
A text that is not a message (no header line first, or none of the usual headers) is returned as
it is.
"""

from __future__ import annotations

import binascii
import re

__all__ = ["message_bytes"]

#: Headers of which at least one tells a real message from a text that merely starts with "Word:".
_MESSAGE_HEADERS = (b"from", b"to", b"subject", b"date", b"received", b"message-id", b"return-path", b"mime-version")
_FIELD = re.compile(rb"[!-9;-~]+:")  # an RFC 5322 field name and its colon, at the start of a line
_ENCODED_WORD = re.compile(rb"=\?[^?\s]{1,40}\?([bBqQ])\?([^?\s]{0,1000})\?=")
_TAG = re.compile(rb"<[^>]{0,2000}>")
_ENTITY = re.compile(rb"&(#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[a-zA-Z]{2,6});")
_NAMED = {b"nbsp": b" ", b"amp": b"&", b"lt": b"<", b"gt": b">", b"quot": b'"', b"apos": b"'"}
_SPACE = re.compile(rb"\s+")  # bytes: space, \t, \n, \r, \v, \f
_QP_ESCAPE = re.compile(rb"=(?:\r?\n|([0-9A-Fa-f]{2}))")
_NOT_BASE64 = re.compile(rb"[^A-Za-z0-9+/]+")
_WHITESPACE = b" \t\n\r\x0b\x0c"
MAX_DEPTH = 8


def message_bytes(raw: bytes, headers: tuple[bytes, ...] = (b"subject", b"from")) -> bytes:
    """``headers`` ("name: value", in that order, those present and not empty) and the decoded text
    of the body parts of the message ``raw``, joined by newlines, whitespace runs made one space.

    An mbox envelope line (``From sender date``) before the headers is skipped.
    """
    data = raw[raw.find(b"\n") + 1 :] if raw.startswith(b"From ") else raw
    if not _FIELD.match(data):
        return raw
    fields, body = _split(data)
    if not any(name in fields for name in _MESSAGE_HEADERS):
        return raw
    texts = [name + b": " + _decode_words(fields[name]) for name in headers if fields.get(name)]
    _collect(fields, body, 0, texts)
    return _SPACE.sub(b" ", b"\n".join(texts))


def _split(data: bytes) -> tuple[dict[bytes, bytes], bytes]:
    """The header fields of ``data`` ({lowercase name: unfolded value}, the first of each name) and
    its body: what follows the first empty line (one holding only a carriage return counts)."""
    fields: dict[bytes, bytes] = {}
    current: bytes | None = None  # the field that continuation lines extend
    start = 0
    while start < len(data):
        end = data.find(b"\n", start)
        end = len(data) if end < 0 else end
        line = data[start:end]
        start = end + 1
        if line.endswith(b"\r"):
            line = line[:-1]
        if not line:
            return fields, data[start:]
        if line[:1] in (b" ", b"\t"):
            if current is not None:
                fields[current] += b" " + line.strip(_WHITESPACE)
            continue
        name, colon, value = line.partition(b":")
        current = None
        if colon and _FIELD.fullmatch(name + b":"):
            name = name.lower()
            if name not in fields:
                fields[name] = value.strip(_WHITESPACE)
                current = name
    return fields, b""


def _collect(fields: dict[bytes, bytes], body: bytes, depth: int, texts: list[bytes]) -> None:
    """Append the decoded text parts of the entity with these header ``fields`` and ``body``."""
    content_type = fields.get(b"content-type", b"")
    kind = content_type.partition(b";")[0].strip(_WHITESPACE).lower()
    if kind.startswith(b"multipart/"):
        boundary = _boundary(content_type)
        if boundary and depth < MAX_DEPTH:
            for part in _parts(body, b"--" + boundary):
                _collect(*_split(part), depth + 1, texts)
        return
    if kind and not kind.startswith(b"text/"):
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


def _parts(body: bytes, delimiter: bytes) -> list[bytes]:
    """The parts of a multipart body: the lines between lines that start with ``delimiter``, up to
    the one that starts with ``delimiter`` + "--" (the preamble and the epilogue left out)."""
    parts: list[bytes] = []
    lines: list[bytes] | None = None  # the lines of the part being read; None before the first
    for line in body.split(b"\n"):
        if line.startswith(delimiter):
            if lines is not None:
                parts.append(b"\n".join(lines))
            if line[len(delimiter) : len(delimiter) + 2] == b"--":
                return parts
            lines = []
        elif lines is not None:
            lines.append(line)
    if lines is not None:
        parts.append(b"\n".join(lines))
    return parts


def _decode_words(value: bytes) -> bytes:
    """A header value with its RFC 2047 encoded words (``=?charset?B|Q?text?=``) decoded to bytes."""

    def decoded(word: re.Match[bytes]) -> bytes:
        if word.group(1) in b"bB":
            return _base64(word.group(2))
        return _quoted_printable(word.group(2).replace(b"_", b" "))

    return _ENCODED_WORD.sub(decoded, value)


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
