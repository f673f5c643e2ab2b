"""Email messages to sparse feature dicts, as online SVM spam filters represent them."""

from __future__ import annotations

import math
import re
import zlib
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, NamedTuple, cast

import numpy as np
from river import base

from .._compiled import load
from .hashing import check_hash_bits, feature_hash
from .mime import message_bytes

if TYPE_CHECKING:
    from email.message import Message

#: The compiled reader and hashing of ``reader="bytes"`` (``_text.c``); None when not in use
#: (`EmailFeatures.transform_texts` then builds its rows in Python).
_text = load("pegasos_stream.features._text")

__all__ = ["EmailFeatures", "TextRows", "message_text"]

_WORD = re.compile(r"[^\W_]{2,30}")
_ASCII_WORD = re.compile(rb"[A-Za-z0-9]{2,30}")
_TAG = re.compile(r"<[^>]{0,2000}>")
_SPACE = re.compile(r"\s+")
_HEADER_LINE = re.compile(r"[!-9;-~]+:")  # RFC 5322 field name followed by a colon
#: Headers of which at least one tells a real message from a text that merely starts with "Word:".
_MESSAGE_HEADERS = ("from", "to", "subject", "date", "received", "message-id", "return-path", "mime-version")


class TextRows(NamedTuple):
    """Feature dicts of a batch as CSR rows: row i holds ``keys[indices[k]]: data[k]`` for k in
    ``indptr[i]:indptr[i+1]``, in the dict's order. The columns are numbered by first appearance
    (``keys``: a list), or are the hashed columns themselves (``keys``: ``range(2**hash_bits)``)."""

    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray
    keys: list | range


def _decoded_payload(part: Message) -> str:
    """The decoded text of one MIME part; never raises on bad encodings or charsets."""
    payload = part.get_payload(decode=True)
    if not isinstance(payload, bytes):
        return str(part.get_payload() or "")
    charset = part.get_content_charset() or "latin-1"
    try:
        return payload.decode(charset, errors="replace")
    except LookupError:  # an unknown charset name
        return payload.decode("latin-1")


def _header(message: Message, name: str) -> str:
    """A header's value with RFC 2047 encoded words decoded (``=?utf-8?q?...?=``)."""
    from email.header import decode_header, make_header

    value = message.get(name, "")
    try:
        return str(make_header(decode_header(value)))
    except (ValueError, LookupError, UnicodeError):
        return str(value)


def message_text(raw: str, headers: tuple[str, ...] = ("subject", "from")) -> str:
    """The selected headers and the decoded text of the body of an RFC 822 message.

    An mbox envelope line (``From sender date``) before the headers is skipped. A text that is not
    a message (an SMS, a bare body, even one that starts with "Word:") is returned as it is. HTML
    parts are reduced to their text; attachments that are not text are skipped. The email package is
    imported here, on first use: a run whose features are not read by it never loads it.
    """
    import email
    import email.policy
    import html

    body = raw[raw.find("\n") + 1 :] if raw.startswith("From ") else raw
    if not _HEADER_LINE.match(body):
        return raw
    try:
        message = email.message_from_string(body, policy=email.policy.compat32)
        if not any(name in message for name in _MESSAGE_HEADERS):
            return raw
        lines = [f"{name}: {_header(message, name)}" for name in headers if message.get(name)]
        for part in message.walk():
            if part.get_content_maintype() != "text":
                continue
            text = _decoded_payload(part)
            if part.get_content_subtype() == "html":
                text = html.unescape(_TAG.sub(" ", text))
            lines.append(text)
    except Exception:  # the email package can fail in many ways on junk; keep the raw text
        return raw
    return _SPACE.sub(" ", "\n".join(lines))


class EmailFeatures(base.Transformer):
    """Binary or TF features of an email: character n-grams and word tokens.

    The default is the representation of Sculley & Wachman (SIGIR 2007), whose online SVM
    topped the TREC spam track: binary character 4-grams of the first 3,000 characters,
    scaled to unit length. Word tokens of the same text can be added.

    Parameters
    ----------
    on
        The field holding the message when the input is a dict; None when it is the text itself.
    parse
        Parse the message (selected headers and the decoded body) rather than use the raw text.
    char_ngram
        Length of the character n-grams; 0 for none.
    words
        Also emit lowercase word tokens.
    max_chars
        Only the first this many characters are used.
    binary
        1 for every present feature; otherwise the count.
    normalize
        Scale the vector to unit L2 norm.
    hash_bits
        Hash features into 2^hash_bits integer buckets (`feature_hash`, as `DictHasher`: stable
        across runs and processes); None keeps the n-gram strings as keys, which grow without bound.
    reader
        "email": the message is read by the standard library's email package and the n-grams and
        words are of its characters. "bytes": it is read by `message_bytes`, a light MIME reader
        over bytes (a str is taken as its UTF-8 bytes), and the n-grams are of bytes (``max_chars``
        counts bytes, words are ASCII letters and digits); a feature's column is CRC-32 of "c:" +
        its bytes, so ASCII text gets the columns the "email" reader gives it. With ``hash_bits``,
        `transform_texts` does the "bytes" reading and hashing in compiled code.

    Examples
    --------

    >>> from pegasos_stream.features import EmailFeatures
    >>> features = EmailFeatures(char_ngram=0, words=True, normalize=False)
    >>> features.transform_one("Subject: Cheap pills\\n\\nBuy cheap pills now")
    {'w:subject': 1, 'w:cheap': 1, 'w:pills': 1, 'w:buy': 1, 'w:now': 1}

    """

    def __init__(
        self,
        on: str | None = None,
        parse: bool = True,
        char_ngram: int = 4,
        words: bool = False,
        max_chars: int = 3000,
        binary: bool = True,
        normalize: bool = True,
        hash_bits: int | None = None,
        reader: str = "email",
    ):
        for name, value in (("parse", parse), ("words", words), ("binary", binary), ("normalize", normalize)):
            if not isinstance(value, bool):
                raise ValueError(f"{name}={value!r}: expected true or false")
        if isinstance(char_ngram, bool) or not isinstance(char_ngram, int) or char_ngram < 0:
            raise ValueError(f"char_ngram={char_ngram!r}: expected an integer >= 0")
        if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 1:
            raise ValueError(f"max_chars={max_chars!r}: expected an integer >= 1")
        if hash_bits is not None:
            check_hash_bits(hash_bits)
        if not char_ngram and not words:
            raise ValueError("char_ngram=0 and words=false: no features at all")
        if reader not in ("email", "bytes"):
            raise ValueError(f"reader={reader!r}: expected 'email' or 'bytes'")
        self.on = on
        self.parse = parse
        self.char_ngram = char_ngram
        self.words = words
        self.max_chars = max_chars
        self.binary = binary
        self.normalize = normalize
        self.hash_bits = hash_bits
        self.reader = reader

    def _tokens(self, text: str) -> list[str]:
        tokens: list[str] = []
        n = self.char_ngram
        if n:
            tokens.extend("c:" + text[i : i + n] for i in range(len(text) - n + 1))
        if self.words:
            tokens.extend("w:" + word for word in _WORD.findall(text.lower()))
        return tokens

    def _byte_tokens(self, data: bytes) -> list[bytes]:
        """The "bytes" reader's feature names of ``data``: its n-grams and words, as bytes."""
        n = self.char_ngram
        tokens = [b"c:" + data[i : i + n] for i in range(len(data) - n + 1)] if n else []
        if self.words:
            tokens.extend(b"w:" + word for word in _ASCII_WORD.findall(data.lower()))
        return tokens

    def transform_one(self, x) -> dict:
        """The features of one text: compiled when `compiled` (the dict of `python_transform_one`, its keys in the
        same order and its values bit for bit, in a fraction of the time), else `python_transform_one`."""
        if self.compiled:
            rows = self.transform_texts([x[self.on] if self.on is not None else x], hashed_columns=True)
            return dict(zip(rows.indices.tolist(), rows.data.tolist()))
        return self.python_transform_one(x)

    def python_transform_one(self, x) -> dict:
        """``transform_one`` in Python: the reference of the compiled reader."""
        raw = x[self.on] if self.on is not None else x
        names: list[str] | list[bytes]
        if self.reader == "bytes":
            data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else bytes(raw)
            names = self._byte_tokens((message_bytes(data) if self.parse else data)[: self.max_chars])
        else:
            if not isinstance(raw, str):
                raw = bytes(raw).decode("utf-8", errors="replace")
            names = self._tokens((message_text(raw) if self.parse else raw)[: self.max_chars])
        if self.binary:  # each distinct name is hashed once; dict order is first appearance throughout
            present = dict.fromkeys(self._columns(dict.fromkeys(names)), 1)
            if self.normalize and present:  # every value is 1: the norm is √(number of features)
                return dict.fromkeys(present, 1.0 / math.sqrt(len(present)))
            return present
        name_counts: Counter[str | bytes] = Counter(names)
        counts: dict[str | int, int] = {}
        for column, count in zip(self._columns(name_counts), name_counts.values()):
            counts[column] = counts.get(column, 0) + count
        if self.normalize and counts:
            scale = 1.0 / math.sqrt(sum(c * c for c in counts.values()))
            return {key: c * scale for key, c in counts.items()}
        return counts

    @property
    def compiled(self) -> bool:
        """Whether `transform_texts` runs compiled (the "bytes" reader, with ``hash_bits``)."""
        return _text is not None and self.reader == "bytes" and self.hash_bits is not None

    def transform_texts(self, texts: Sequence[str | bytes], hashed_columns: bool = False) -> TextRows:
        """``transform_one`` of each text, as CSR rows (compiled when `compiled`, the rows the
        dicts of ``transform_one`` make otherwise). With ``hashed_columns`` (only with ``hash_bits``),
        the columns are the hashed columns themselves, not numbered per batch."""
        if hashed_columns and self.hash_bits is None:
            raise ValueError("hashed_columns=True: the columns are hashed only with hash_bits")
        columns = range(2**self.hash_bits) if hashed_columns and self.hash_bits is not None else None
        if self.compiled and self.hash_bits is not None:
            data = [text.encode("utf-8", "surrogatepass") if isinstance(text, str) else bytes(text) for text in texts]
            indptr, indices, values, keys = _text.rows(
                data,
                self.parse,
                self.char_ngram,
                self.words,
                self.max_chars,
                self.hash_bits,
                self.binary,
                self.normalize,
                hashed_columns,
            )
            int64 = np.dtype(np.int64)
            return TextRows(
                np.frombuffer(indptr, int64),
                np.frombuffer(indices, int64),
                np.frombuffer(values, np.float64),
                keys if columns is None else columns,
            )
        return rows_of([self.python_transform_one(text) for text in texts], columns)

    def _columns(self, names: Iterable[str | bytes]) -> Iterable[str | int]:
        """The columns of feature names: ``feature_hash(name)`` (CRC-32 of a name's bytes, for the
        "bytes" reader) mod 2^hash_bits when hashing, else the names themselves (as str)."""
        mask = None if self.hash_bits is None else (1 << self.hash_bits) - 1
        if self.reader == "bytes":  # the names are bytes
            grams = cast(Iterable[bytes], names)
            return [gram.decode("latin-1") for gram in grams] if mask is None else [zlib.crc32(g) & mask for g in grams]
        words = cast(Iterable[str], names)
        return words if mask is None else [feature_hash(word) & mask for word in words]


def rows_of(dicts: Sequence[dict], columns: range | None = None) -> TextRows:
    """Feature dicts as CSR rows, the columns numbered by first appearance; or, given ``columns``
    (the range of the hashed columns), each key its own column."""
    vocabulary: dict = {}
    indptr, indices, values = [0], [], []
    for x in dicts:
        for key, value in x.items():
            indices.append(vocabulary.setdefault(key, len(vocabulary)) if columns is None else key)
            values.append(float(value))
        indptr.append(len(indices))
    keys = list(vocabulary) if columns is None else columns
    return TextRows(np.array(indptr, dtype=np.int64), np.array(indices, dtype=np.int64), np.array(values), keys)
