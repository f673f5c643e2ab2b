"""SpamAssassin's spamd protocol (SPAMC/1.5), so that ``spamc`` and every mail server set up for it can use a model.

A request is a command line (``CHECK SPAMC/1.5``), header lines, a blank line and, for the commands that
carry one, a message of ``Content-length`` bytes (zlib-compressed with ``Compress: zlib``); the answer is
``SPAMD/1.5 <code> <name>``, header lines and what the command returns (spamd's ``PROTOCOL`` file):

* ``PING``: ``PONG``; ``SKIP``: nothing.
* ``CHECK``: ``Spam: True ; 3.2 / 1.5``, the verdict, the score and the required score.
* ``SYMBOLS``: the same, and the names of the symbols hit; ``REPORT``: the same, and a report in words;
  ``REPORT_IFSPAM``: the report only for spam.
* ``PROCESS``: the message with ``X-Spam-Flag`` (spam only), ``X-Spam-Score`` and ``X-Spam-Status`` added at
  the end of its header block; ``HEADERS``: that header block alone.
* ``TELL`` with ``Message-class: spam|ham`` and ``Set: local``: the message is kept for learning
  (`serve.feedback`: a Maildir spool or a Kafka topic), answered ``DidSet: local``; ``EX_TEMPFAIL`` when it could
  not be kept.

**The score** is the log-odds of spam, ln(p / (1 − p)), of the model's calibrated probability p, rounded to 0.1 as
spamd rounds (`score_of`); a message is spam when the score reaches ``required_score`` (`REQUIRED_SCORE`, 1.5: p ≥
0.82). The default keeps the ham flagged below SpamAssassin's own: over the first 3,514 messages of the SpamAssassin
stream, scored before each was learned by ``configs/spam.yaml``, 0.60% of ham and 95.1% of spam (SpamAssassin 4.0.1
at its 5.0 with Bayes taught every label: 1.16% and 86.8%); on Ling-Spam, 0.04% and 92.5%.

**Mail never waits on the filter.** A message longer than ``max_bytes`` is read whole and scored on its first
``max_bytes`` (the features read fewer); a request that cannot be read (a malformed line, a bad length, a
client too slow) is answered with spamd's error code for it, ``EX_PROTOCOL`` or ``EX_DATAERR``, and no model
yet with ``EX_TEMPFAIL``, on which ``spamc`` passes the message through unchanged.
"""

from __future__ import annotations

import math
import os
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from .. import __version__
from ..parse.parsing import Event
from ..run.predictions import EXPLAINED
from .feedback import NO_FEEDBACK, TAUGHT_LABELS, Feedback
from .serving import NoModel, Serving

__all__ = [
    "EX_DATAERR",
    "EX_OK",
    "EX_PROTOCOL",
    "EX_TEMPFAIL",
    "EX_UNAVAILABLE",
    "MAX_MESSAGE_BYTES",
    "REQUIRED_SCORE",
    "SCORING_ERRORS",
    "SPAM_HEADERS",
    "SPAM_HEADER_NAMES",
    "ProtocolError",
    "SpamdRequest",
    "SpamdService",
    "Verdict",
    "read_request",
    "score_of",
]

#: spamd's exit codes (sysexits.h) that this server answers with.
EX_OK, EX_USAGE, EX_DATAERR, EX_UNAVAILABLE, EX_SOFTWARE, EX_TEMPFAIL, EX_PROTOCOL = 0, 64, 65, 69, 70, 75, 76
_CODE_NAMES = {
    EX_OK: "EX_OK",
    EX_USAGE: "EX_USAGE",
    EX_DATAERR: "EX_DATAERR",
    EX_UNAVAILABLE: "EX_UNAVAILABLE",
    EX_SOFTWARE: "EX_SOFTWARE",
    EX_TEMPFAIL: "EX_TEMPFAIL",
    EX_PROTOCOL: "EX_PROTOCOL",
}
#: The protocol version answered.
PROTOCOL = "SPAMD/1.5"
#: The default required score (log-odds of spam): see the module's docstring.
REQUIRED_SCORE = 1.5
#: The most bytes of a request's line or of one of its header lines, and the most header lines.
MAX_LINE, MAX_HEADERS = 8192, 64
#: The most bytes of a message read from a request (the rest of a longer one is read and left out).
MAX_MESSAGE_BYTES = 1 << 20
#: A message's bytes at most, whatever it claims: longer requests are refused, not read.
MAX_CONTENT_LENGTH = 256 << 20
#: The commands that carry a message.
_WITH_MESSAGE = {"CHECK", "SYMBOLS", "REPORT", "REPORT_IFSPAM", "PROCESS", "HEADERS", "TELL"}
_COMMANDS = _WITH_MESSAGE | {"PING", "SKIP"}
#: The symbol hit by every scored message: the model's score.
SYMBOL = "PEGASOS_STREAM"
#: The rule name of a report's lines that name a feature weighing in the score, and its part of the decision.
FEATURE_RULE = "PEGASOS_FEATURE"
#: The headers a scored message gets (`spam_headers`), and the same lower-cased: any it came with are left out.
SPAM_HEADER_NAMES = ("X-Spam-Flag", "X-Spam-Score", "X-Spam-Status")
SPAM_HEADERS = frozenset(name.lower() for name in SPAM_HEADER_NAMES)
#: What scoring a message the model cannot score raises.
SCORING_ERRORS = (ValueError, TypeError, OverflowError)


class ByteReader(Protocol):
    """What a request is read from: a buffered binary stream."""

    def readline(self, size: int = -1, /) -> bytes: ...

    def read(self, size: int = -1, /) -> bytes: ...


class ProtocolError(Exception):
    """A request that cannot be answered: the code and the reason spamd would give."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code


@dataclass(frozen=True)
class SpamdRequest:
    """A request: its command, protocol version, headers (names lower-cased) and message (the first
    ``max_bytes`` of it; ``truncated`` when it was longer)."""

    command: str
    version: str
    headers: dict[str, str]
    message: bytes = b""
    truncated: bool = False

    @property
    def user(self) -> str | None:
        return self.headers.get("user")


@dataclass(frozen=True)
class Verdict:
    """What the model says of a message: the score (`score_of` its probability), the required score, the
    probability, the version of the model and the names of its classes (negative, positive); when asked for, the
    features that weigh most in the score, with their parts of the decision (`Predictor.explain`)."""

    score: float
    required: float
    proba: float
    model_version: int
    classes: tuple[object, object] = (False, True)
    explanation: tuple[tuple[str, float], ...] = ()

    @property
    def spam(self) -> bool:
        return self.score >= self.required

    @property
    def predicted(self) -> object:
        """The class the verdict names, as the model's configuration names its labels."""
        return self.classes[self.spam]


def read_request(stream: ByteReader, max_bytes: int = MAX_MESSAGE_BYTES) -> SpamdRequest:
    """The request read from ``stream``; a ProtocolError for one that is not spamd's protocol."""
    command, _, version = _line(stream).partition(" ")
    if command not in _COMMANDS or not version.startswith("SPAMC/"):
        raise ProtocolError(EX_PROTOCOL, f"bad request line: {command[:40]!r} {version[:20]!r}")
    headers: dict[str, str] = {}
    while line := _line(stream):
        name, colon, value = line.partition(":")
        if not colon or len(headers) >= MAX_HEADERS:
            raise ProtocolError(EX_PROTOCOL, f"bad header line: {line[:60]!r}")
        headers[name.strip().lower()] = value.strip()
    if command not in _WITH_MESSAGE:
        return SpamdRequest(command, version, headers)
    message, truncated = _message(stream, headers, max_bytes)
    return SpamdRequest(command, version, headers, message, truncated)


def _line(stream: ByteReader) -> str:
    """One CRLF-ended line (a bare LF is taken too), without its end."""
    line = stream.readline(MAX_LINE + 1)
    if not line.endswith(b"\n"):
        raise ProtocolError(EX_PROTOCOL, "a line too long or cut short")
    return line.rstrip(b"\r\n").decode("latin-1")


def _message(stream: ByteReader, headers: dict[str, str], max_bytes: int) -> tuple[bytes, bool]:
    """The first ``max_bytes`` of the message (uncompressed), and whether it was longer."""
    length = headers.get("content-length", "")
    if not length.isdigit() or int(length) > MAX_CONTENT_LENGTH:
        raise ProtocolError(EX_PROTOCOL, f"Content-length: {length[:20]!r}: expected a number of bytes")
    body = _read_exactly(stream, int(length), max_bytes if "compress" not in headers else MAX_CONTENT_LENGTH)
    if "compress" in headers:
        if headers["compress"].lower() != "zlib":
            raise ProtocolError(EX_PROTOCOL, f"Compress: {headers['compress'][:20]!r}: only zlib is known")
        inflate = zlib.decompressobj()
        try:
            message = inflate.decompress(body, max_bytes)
        except zlib.error as error:
            raise ProtocolError(EX_DATAERR, f"the zlib message cannot be inflated: {error}") from None
        return message, bool(inflate.unconsumed_tail)
    return body, int(length) > max_bytes


def _read_exactly(stream: ByteReader, length: int, keep: int) -> bytes:
    """``length`` bytes of ``stream``, the first ``keep`` of them kept (the rest read and left out)."""
    kept, left = bytearray(), length
    while left:
        chunk = stream.read(min(left, 1 << 16))
        if not chunk:
            raise ProtocolError(EX_PROTOCOL, f"the message ended {left} bytes short of its Content-length")
        left -= len(chunk)
        kept += chunk[: max(0, keep - len(kept))]
    return bytes(kept)


class SpamdService:
    """Answers spamd requests with the models of ``serving``: messages scored against ``required`` (log-odds of
    spam), and taught into ``feedback`` (None: ``TELL`` is answered ``EX_UNAVAILABLE``)."""

    def __init__(self, serving: Serving, required: float = REQUIRED_SCORE, feedback: Feedback | None = None) -> None:
        self.serving = serving
        self.required = required
        self.feedback = feedback

    def verdict(self, message: bytes, user: str | None = None, explain: int = 0) -> Verdict:
        """The model's verdict on ``message`` (for ``user``, with personal models; with the ``explain`` features that
        weigh most in it); a NoModel while there is none, a ValueError for a message the model cannot score."""
        served = self.serving.provider.current
        if served is None:
            raise NoModel(f"no model yet: waiting for {self.serving.provider.origin}")
        predictor = served.predictor
        event = Event(id="spamd", position="spamd", text=message, user=user)
        x = predictor.features_of(event)
        with served.lock:
            _, proba, _, _ = predictor.predict(x, user)
            explanation = tuple(predictor.explain(event, x, explain)) if explain else ()
        return Verdict(score_of(proba), self.required, proba, served.version, predictor.classes, explanation)

    def answer(self, request: SpamdRequest) -> bytes:
        """The whole answer to ``request``."""
        if request.command == "PING":
            return f"{PROTOCOL} 0 PONG\r\n".encode()
        if request.command == "SKIP":
            return b""
        if request.command == "TELL":
            return self._tell(request)
        try:
            explain = EXPLAINED if request.command in ("REPORT", "REPORT_IFSPAM") else 0
            verdict = self.scored(request.message, request.user, explain)
        except NoModel as error:
            return error_answer(EX_TEMPFAIL, str(error))
        except SCORING_ERRORS as error:
            return error_answer(EX_DATAERR, str(error))
        return _scored(request, verdict)

    def scored(self, message: bytes, user: str | None = None, explain: int = 0) -> Verdict:
        """`verdict`, counted as a prediction served (or as an error: a message the model cannot score raises one of
        `SCORING_ERRORS`); a NoModel, uncounted, while there is no model."""
        try:
            verdict = self.verdict(message, user, explain)
        except SCORING_ERRORS:
            self.serving.count(0, 1)
            raise
        self.serving.count(1, 0)
        return verdict

    def _tell(self, request: SpamdRequest) -> bytes:
        """Keep the message for learning with its class (only ``Set: local`` is known: there is no remote)."""
        label = request.headers.get("message-class", "").lower()
        wanted = {part.strip().lower() for part in request.headers.get("set", "").split(",") if part.strip()}
        if self.feedback is None:
            return error_answer(EX_UNAVAILABLE, NO_FEEDBACK)
        if label not in TAUGHT_LABELS or "local" not in wanted or "remove" in request.headers:
            return error_answer(EX_USAGE, "TELL: expected Message-class: spam or ham, and Set: local")
        try:
            self.feedback.add(request.message, label, request.user)
        except ValueError as error:
            return error_answer(EX_USAGE, f"TELL: {error}")
        except OSError as error:
            return error_answer(EX_TEMPFAIL, f"TELL: the message could not be kept: {error}")
        return _answer(EX_OK, {"DidSet": "local"}, b"")


def score_of(proba: float) -> float:
    """The score of a message whose probability of spam is ``proba``: ln(p / (1 − p)) rounded to 0.1 (as spamd
    rounds), finite (a probability of 0 or 1 gives ±709, the largest a double's exp takes)."""
    if proba <= 0.0 or proba >= 1.0:
        return math.copysign(709.0, proba - 0.5)
    return round(math.log(proba / (1.0 - proba)), 1)


def _scored(request: SpamdRequest, verdict: Verdict) -> bytes:
    """The answer to a scoring command. A client of the protocol before 1.3 takes one header (Exim's ``spam =``
    condition speaks 1.2 and parses the answer as spamd gives it to such a client): the scoring commands' answers
    then have ``Spam`` alone, PROCESS's and HEADERS' ``Content-length`` alone."""
    spam = {"Spam": f"{'True' if verdict.spam else 'False'} ; {verdict.score:.1f} / {verdict.required:.1f}"}
    command, one_header = request.command, _version(request.version) < (1, 3)
    if command == "CHECK":
        return _answer(EX_OK, spam, b"", length=not one_header)
    if command == "SYMBOLS":
        return _answer(EX_OK, spam, SYMBOL.encode(), length=not one_header)
    if command in ("REPORT", "REPORT_IFSPAM"):
        report = _report(verdict, request.truncated) if command == "REPORT" or verdict.spam else b""
        return _answer(EX_OK, spam, report, length=not one_header)
    marked = with_spam_headers(request.message, verdict)
    if command == "HEADERS":  # up to and with the blank line that ends the header block
        marked = marked[: len(marked) - len(_split(marked)[1])]
    return _answer(EX_OK, {} if one_header else spam, marked)


def _version(version: str) -> tuple[int, ...]:
    """The protocol version of ``SPAMC/1.5`` as (1, 5); one that is no number is taken as this server's."""
    try:
        return tuple(int(part) for part in version.removeprefix("SPAMC/").split(".")[:2])
    except ValueError:
        return (1, 5)


def _answer(code: int, headers: dict[str, str], body: bytes, length: bool = True) -> bytes:
    """The answer of ``code``: ``Content-length`` (unless ``length`` is false), ``headers``, then ``body``."""
    lines = [f"{PROTOCOL} {code} {_CODE_NAMES.get(code, 'EX_SOFTWARE')}"]
    lines += [f"Content-length: {len(body)}"] * length
    lines += [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def error_answer(code: int, reason: str) -> bytes:
    """The answer refusing a request: the code, and the reason on the status line."""
    return f"{PROTOCOL} {code} {_CODE_NAMES.get(code, 'EX_SOFTWARE')} {reason[:200]}\r\n".encode()


def spam_headers(verdict: Verdict) -> list[tuple[str, str]]:
    """The headers a scored message gets, as SpamAssassin names them."""
    status = (
        f"{'Yes' if verdict.spam else 'No'}, score={verdict.score:.1f} required={verdict.required:.1f} "
        f"tests={SYMBOL} autolearn=no version=pegasos-stream {__version__} model={verdict.model_version}"
    )
    flag = [("X-Spam-Flag", "YES")] if verdict.spam else []
    return [*flag, ("X-Spam-Score", f"{verdict.score:.1f}"), ("X-Spam-Status", status)]


def with_spam_headers(message: bytes, verdict: Verdict) -> bytes:
    """``message`` with `spam_headers` at the end of its header block (in its own line ends), any such headers
    it came with left out (a sender's forged ``X-Spam-Flag`` is not kept)."""
    head, body = _split(message)
    newline = b"\r\n" if b"\r\n" in head[:2000] else b"\n"
    kept = _without_spam_headers(head.split(newline)) if head else []
    added = [f"{name}: {value}".encode() for name, value in spam_headers(verdict)]
    return newline.join([*kept, *added]) + newline + newline + body


def _without_spam_headers(lines: list[bytes]) -> list[bytes]:
    """Header ``lines`` without the X-Spam-Flag, -Score and -Status fields (and their continuation lines)."""
    kept, dropping = [], False
    for line in lines:
        if line[:1] in (b" ", b"\t"):
            if not dropping:
                kept.append(line)
            continue
        dropping = line.split(b":", 1)[0].strip().decode("latin-1").lower() in SPAM_HEADERS
        if not dropping:
            kept.append(line)
    return kept


def _split(message: bytes) -> tuple[bytes, bytes]:
    """(the header block without its line end and the blank line that ends it, the body); a message without a
    blank line is all body."""
    ends = [(at, size) for at, size in ((message.find(b"\r\n\r\n"), 4), (message.find(b"\n\n"), 2)) if at >= 0]
    if not ends:
        return b"", message
    at, size = min(ends)
    return message[:at], message[at + size :]


def _report(verdict: Verdict, truncated: bool) -> bytes:
    """The report of REPORT, in SpamAssassin's layout."""
    cut = " (scored on its first bytes)" if truncated else ""
    lines = [
        f"Spam detection software, running on {os.uname().nodename}, has "
        f"{'identified this incoming email as possible spam' if verdict.spam else 'not identified this email as spam'}"
        f"{cut}.",
        "",
        f"Content analysis details:   ({verdict.score:.1f} points, {verdict.required:.1f} required)",
        "",
        " pts rule name              description",
        "---- ---------------------- --------------------------------------------------",
        f"{verdict.score:4.1f} {SYMBOL:<22} log-odds of spam, p = {verdict.proba:.4f} (model {verdict.model_version})",
        *(f"{part:4.1f} {FEATURE_RULE:<22} {_shown_feature(name)} ({part:+.3f})" for name, part in verdict.explanation),
        "",
    ]
    return "\n".join(lines).encode()


def _shown_feature(name: str) -> str:
    """A feature's name on one line of a report: its characters that do not print escaped, at most 40 characters."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in name)[:40]


def handle_connection(
    reader: ByteReader,
    write: Callable[[bytes], object],
    service: SpamdService,
    max_bytes: int = MAX_MESSAGE_BYTES,
    client: str = "-",
) -> None:
    """Read one request from ``reader`` and ``write`` its answer (spamd answers one request per connection), and
    log it (`serve.access`: the command, its exit code and the message's bytes) as ``client``'s."""
    started, command, size = time.perf_counter(), "-", 0
    try:
        request = read_request(reader, max_bytes)
        command, size = request.command, len(request.message)
        answer = service.answer(request)
    except ProtocolError as error:
        service.serving.count(0, 1)
        answer = error_answer(error.code, str(error))
    except TimeoutError:
        service.serving.count(0, 1)
        answer = error_answer(EX_TEMPFAIL, "the request did not come in time")
    write(answer)
    code = answer.split(b" ", 2)[1].decode() if answer else "-"  # (SKIP is answered nothing)
    service.serving.access.record("spamd", client, command, code, size, time.perf_counter() - started)
