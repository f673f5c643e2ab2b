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

from .._compiled import TEXT as _text  # the compiled "bytes" reader and hashing (_text.c), or None
from .hashing import check_hash_bits, feature_hash
from .mime import read_message

if TYPE_CHECKING:
    from email.message import Message


__all__ = ["EmailFeatures", "TextRows", "message_text"]

_WORD = re.compile(r"[^\W_]{2,30}")
_ASCII_WORD = re.compile(rb"[A-Za-z0-9]{2,30}")
#: A shape token's text: a run of bytes (characters) other than white space, at most 40 long.
_SHAPE_TOKEN = re.compile(rb"[^ \t\n\r\x0b\x0c]{1,40}")
_SHAPE_TOKEN_TEXT = re.compile(r"[^ \t\n\r\x0b\x0c]{1,40}")
#: A byte's class in a shape: A upper case, a lower case, 9 digit, x 8-bit, any other byte itself.
_SHAPE_CLASSES = bytes(
    ord("A")
    if 65 <= b <= 90
    else ord("a")
    if 97 <= b <= 122
    else ord("9")
    if 48 <= b <= 57
    else ord("x")
    if b >= 128
    else b
    for b in range(256)
)
_LONG_RUN = re.compile(rb"(.)\1{3,}", re.DOTALL)
_URL_STARTS = (b"http://", b"https://", b"www.")
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
    return read_message_text(raw, headers)[0]


def read_message_text(raw: str, headers: tuple[str, ...] = ("subject", "from")) -> tuple[str, int]:
    """``message_text(raw, headers)`` and where the text of the body starts in it (0 for a text that is
    all body)."""
    import email
    import email.policy
    import html

    body = raw[raw.find("\n") + 1 :] if raw.startswith("From ") else raw
    if not _HEADER_LINE.match(body):
        return raw, 0
    try:
        message = email.message_from_string(body, policy=email.policy.compat32)
        if not any(name in message for name in _MESSAGE_HEADERS):
            return raw, 0
        lines = [f"{name}: {_header(message, name)}" for name in headers if message.get(name)]
        head = len(_SPACE.sub(" ", "\n".join(lines)))
        for part in message.walk():
            if part.get_content_maintype() != "text":
                continue
            text = _decoded_payload(part)
            if part.get_content_subtype() == "html":
                text = html.unescape(_TAG.sub(" ", text))
            lines.append(text)
    except Exception:  # the email package can fail in many ways on junk; keep the raw text
        return raw, 0
    return _SPACE.sub(" ", "\n".join(lines)), head


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
    shapes
        Also emit shape tokens: each run of up to 40 bytes (characters) that are not white space, as its classes
        (A upper case, a lower case, 9 digit, x 8-bit, any other byte itself: punctuation, "$"), a run of one
        class cut to three ("Hello" → "Aaaa", "$1,000.00" → "$9,999.99", "FREE!!!!" → "AAA!!!"), or "url" for
        one that starts with http://, https:// or www. (any case). They see what words miss: case, amounts,
        phone numbers, punctuation runs, links.
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

    Attributes
    ----------
    empty_bodies
        How many of the texts read so far kept no body text in their first ``max_chars`` (a message with
        nothing but headers, or whose parts are all attachments, or an empty text): a tally that shows a
        stream whose bodies the reader does not find, not learned state.

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
        shapes: bool = False,
    ):
        for name, value in (
            ("parse", parse),
            ("words", words),
            ("binary", binary),
            ("normalize", normalize),
            ("shapes", shapes),
        ):
            if not isinstance(value, bool):
                raise ValueError(f"{name}={value!r}: expected true or false")
        if isinstance(char_ngram, bool) or not isinstance(char_ngram, int) or char_ngram < 0:
            raise ValueError(f"char_ngram={char_ngram!r}: expected an integer >= 0")
        if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 1:
            raise ValueError(f"max_chars={max_chars!r}: expected an integer >= 1")
        if hash_bits is not None:
            check_hash_bits(hash_bits)
        if not char_ngram and not words and not shapes:
            raise ValueError("char_ngram=0, words=false and shapes=false: no features at all")
        if reader not in ("email", "bytes"):
            raise ValueError(f"reader={reader!r}: expected 'email' or 'bytes'")
        self.on = on
        self.parse = parse
        self.char_ngram = char_ngram
        self.words = words
        self.shapes = shapes
        self.max_chars = max_chars
        self.binary = binary
        self.normalize = normalize
        self.hash_bits = hash_bits
        self.reader = reader
        self.empty_bodies = 0

    def _tokens(self, text: str) -> list[str]:
        tokens: list[str] = []
        n = self.char_ngram
        if n:
            tokens.extend("c:" + text[i : i + n] for i in range(len(text) - n + 1))
        if self.words:
            tokens.extend("w:" + word for word in _WORD.findall(text.lower()))
        if self.shapes:
            tokens.extend("s:" + text_shape(token) for token in _SHAPE_TOKEN_TEXT.findall(text))
        return tokens

    def _byte_tokens(self, data: bytes) -> list[bytes]:
        """The "bytes" reader's feature names of ``data``: its n-grams, words and shapes, as bytes."""
        n = self.char_ngram
        tokens = [b"c:" + data[i : i + n] for i in range(len(data) - n + 1)] if n else []
        if self.words:
            tokens.extend(b"w:" + word for word in _ASCII_WORD.findall(data.lower()))
        if self.shapes:
            tokens.extend(b"s:" + byte_shape(token) for token in _SHAPE_TOKEN.findall(data))
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
        names, empty_body = self._names(x)
        self.empty_bodies += empty_body
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

    def _names(self, x) -> tuple[list[str] | list[bytes], bool]:
        """The feature names of one text as its reader reads it (the first ``max_chars`` of the message text), in
        order, repeats included; and whether its body came out empty."""
        raw = x[self.on] if self.on is not None else x
        if self.reader == "bytes":
            data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else bytes(raw)
            data, body = read_message(data) if self.parse else (data, 0)
            data = data[: self.max_chars]
            return self._byte_tokens(data), not data[body:].strip()
        if not isinstance(raw, str):
            raw = bytes(raw).decode("utf-8", errors="replace")
        text, start = read_message_text(raw) if self.parse else (raw, 0)
        text = text[: self.max_chars]
        return self._tokens(text), not text[start:].strip()

    def feature_names(self, x) -> dict[str | int, str]:
        """The name of each feature of one text, by the key `transform_one` gives it (a hashed column's first name
        in the text, the way ``binary`` keeps it): ``w:free``, ``c:$$$ `` (an n-gram), ``s:Aa9`` (a shape). Read by
        the Python reader, which the compiled one equals; for explanations, not counted in ``empty_bodies``."""
        distinct: list[str | bytes] = list(dict.fromkeys(self._names(x)[0]))
        keys = self._columns(distinct)
        names = [n.decode("utf-8", "backslashreplace") if isinstance(n, bytes) else n for n in distinct]
        found: dict[str | int, str] = {}
        for key, name in zip(keys, names):
            found.setdefault(key, name)
        return found

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
        if self.compiled:
            rows, empty_bodies = self.read_texts(texts, hashed_columns)
            self.empty_bodies += empty_bodies
            return rows
        columns = range(2**self.hash_bits) if hashed_columns and self.hash_bits is not None else None
        return rows_of([self.python_transform_one(text) for text in texts], columns)

    def read_texts(self, texts: Sequence[str | bytes], hashed_columns: bool = False) -> tuple[TextRows, int]:
        """`transform_texts` by the compiled reader (only when `compiled`), not counted: the rows, and how many of the
        texts kept no body text. It changes nothing, and reads the texts without the GIL (when it numbers no
        column, as with ``hashed_columns``): another thread may run it while this one works."""
        if not self.compiled or self.hash_bits is None:
            raise ValueError("read_texts: the compiled reader reads only with reader='bytes' and hash_bits")
        data = [text.encode("utf-8", "surrogatepass") if isinstance(text, str) else bytes(text) for text in texts]
        indptr, indices, values, keys, empty_bodies = _text.rows(
            data,
            self.parse,
            self.char_ngram,
            self.words,
            self.shapes,
            self.max_chars,
            self.hash_bits,
            self.binary,
            self.normalize,
            hashed_columns,
        )
        int64 = np.dtype(np.int64)
        rows = TextRows(
            np.frombuffer(indptr, int64),
            np.frombuffer(indices, int64),
            np.frombuffer(values, np.float64),
            range(2**self.hash_bits) if hashed_columns else cast("list[int]", keys),  # (keys: None when hashed)
        )
        return rows, empty_bodies

    def _columns(self, names: Iterable[str | bytes]) -> Iterable[str | int]:
        """The columns of feature names: ``feature_hash(name)`` (CRC-32 of a name's bytes, for the
        "bytes" reader) mod 2^hash_bits when hashing, else the names themselves (as str)."""
        mask = None if self.hash_bits is None else (1 << self.hash_bits) - 1
        if self.reader == "bytes":  # the names are bytes
            grams = cast(Iterable[bytes], names)
            return [gram.decode("latin-1") for gram in grams] if mask is None else [zlib.crc32(g) & mask for g in grams]
        words = cast(Iterable[str], names)
        return words if mask is None else [feature_hash(word) & mask for word in words]


def byte_shape(token: bytes) -> bytes:
    """The shape of a token of bytes (see `EmailFeatures`' ``shapes``)."""
    if token[:8].lower().startswith(_URL_STARTS):
        return b"url"
    return _LONG_RUN.sub(rb"\1\1\1", token.translate(_SHAPE_CLASSES))


def text_shape(token: str) -> str:
    """The shape of a token of characters: as `byte_shape`, a character of code 128 or more being "x"."""
    if token[:8].lower().startswith(("http://", "https://", "www.")):
        return "url"
    classes = "".join(
        "A" if "A" <= c <= "Z" else "a" if "a" <= c <= "z" else "9" if "0" <= c <= "9" else "x" if c >= "\x80" else c
        for c in token
    )
    return re.sub(r"(.)\1{3,}", r"\1\1\1", classes, flags=re.DOTALL)


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
