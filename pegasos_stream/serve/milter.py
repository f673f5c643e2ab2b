"""A milter: Sendmail's mail filter protocol, which Postfix speaks too (``smtpd_milters``), on pymilter (``Milter``, the
binding of Sendmail's libmilter; the optional ``milter`` extra, and this is the one module that imports it).

The mail server hands each message over as it receives it, before it answers the client's end of data: its
header fields, then its body in chunks, kept up to ``max_bytes`` (spamd's `MAX_MESSAGE_BYTES`: a longer message is
scored on its first bytes, and the rest is skipped). At its end the message, its header fields (the server's own
``Received:`` among them) and its body with LF line ends, is scored as spamd scores one (`SpamdService.scored`), and:

* a score of at least ``reject`` (`MilterPolicy.reject`; None: never) rejects it at SMTP time, ``550 5.7.1``;
* any other gets the headers spamd's ``PROCESS`` adds (`spam_headers`: ``X-Spam-Flag: YES`` for spam,
  ``X-Spam-Score``, ``X-Spam-Status``) at the end of its header block, those it came with removed;
* without a model yet, or when scoring fails, `MilterPolicy.fail` says what becomes of it: ``accept`` (fail open:
  it goes on unmarked, the default) or ``tempfail`` (``451 4.7.1``: the client tries again later); both are logged.

`MilterServer` listens (libmilter's socket forms: ``inet:PORT@HOST``, ``inet6:PORT@HOST``, ``unix:PATH``) and runs
libmilter's loop in a thread of its own until told to stop.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from dataclasses import dataclass

import Milter
import milter

from .serving import NoModel
from .spamd import MAX_MESSAGE_BYTES, SPAM_HEADERS, SpamdService, Verdict, spam_headers

__all__ = ["FAIL_ACTIONS", "MilterPolicy", "MilterServer", "Outcome", "SpamMilter", "decide"]

#: What ``fail`` may say: let the message go on unmarked, or have the client try again later.
FAIL_ACTIONS = ("accept", "tempfail")
#: The name the filter registers under (Sendmail's ``INPUT_MAIL_FILTER`` names it too).
NAME = "pegasos-stream"

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MilterPolicy:
    """What becomes of a message: rejected from the score ``reject`` (None: never), and, without a model or when
    scoring fails, accepted unmarked or temporarily failed (``fail``, one of `FAIL_ACTIONS`)."""

    reject: float | None = None
    fail: str = "accept"
    max_bytes: int = MAX_MESSAGE_BYTES

    def __post_init__(self) -> None:
        if self.fail not in FAIL_ACTIONS:
            raise ValueError(f"fail: {self.fail!r}: expected one of {', '.join(FAIL_ACTIONS)}")


@dataclass(frozen=True)
class Outcome:
    """What the filter does with a message: ``mark`` (add the headers of ``verdict``), ``reject``, ``accept``
    (unmarked) or ``tempfail``; ``reason`` says why for the last two."""

    action: str
    verdict: Verdict | None = None
    reason: str = ""


def decide(service: SpamdService, message: bytes, policy: MilterPolicy, user: str | None = None) -> Outcome:
    """What becomes of ``message``, scored by ``service`` (for ``user``, with personal models), under ``policy``."""
    try:
        verdict = service.scored(message, user)
    except NoModel as error:
        return Outcome(policy.fail, reason=str(error))
    except Exception as error:  # whatever fails, mail is not held up by the filter: the policy says
        _log.exception("milter: scoring a message failed")
        return Outcome(policy.fail, reason=f"scoring failed: {error}")
    if policy.reject is not None and verdict.score >= policy.reject:
        return Outcome("reject", verdict)
    return Outcome("mark", verdict)


class Collected:
    """A message as the mail server hands it over, its header fields and body kept up to ``max_bytes`` in all,
    with LF line ends (the protocol's body comes with CRLF); which of `SPAM_HEADERS` it came with, and how often."""

    def __init__(self, max_bytes: int = MAX_MESSAGE_BYTES) -> None:
        self.max_bytes = max_bytes
        self.head = bytearray()
        self.body = bytearray()
        self.spam_headers: Counter[str] = Counter()
        self._cr = False  # the last chunk ended with a CR, perhaps of a CRLF cut in two

    @property
    def full(self) -> bool:
        return len(self.head) + len(self.body) >= self.max_bytes

    def add_header(self, name: str, value: bytes) -> None:
        if name.lower() in SPAM_HEADERS:
            self.spam_headers[name] += 1
        self._keep(self.head, name.encode("utf-8", "surrogateescape") + b": " + value.replace(b"\r\n", b"\n") + b"\n")

    def add_body(self, chunk: bytes) -> None:
        if self._cr:
            chunk = b"\r" + chunk
        self._cr = chunk.endswith(b"\r")
        self._keep(self.body, chunk[: len(chunk) - self._cr].replace(b"\r\n", b"\n"))

    def _keep(self, into: bytearray, data: bytes) -> None:
        into += data[: max(0, self.max_bytes - len(self.head) - len(self.body))]

    @property
    def message(self) -> bytes:
        """The message collected: its header block, a blank line and its body."""
        return bytes(self.head) + b"\n" + bytes(self.body) + (b"\r" if self._cr else b"")


class SpamMilter(Milter.Base):
    """The filter of one connection of the mail server (pymilter makes one for each): each message collected
    (`Collected`), scored at its end (`decide`) and marked, rejected, accepted or temporarily failed."""

    def __init__(self, service: SpamdService, policy: MilterPolicy) -> None:
        self.service = service
        self.policy = policy
        self.collected = Collected(policy.max_bytes)
        self.recipients: list[str] = []
        self.client = "-"

    def connect(self, hostname: str, family: int, address: object) -> int:
        """Keep the client's address (the mail server's peer), for the access log."""
        self.client = address[0] if isinstance(address, tuple) and address else hostname
        return Milter.CONTINUE

    def envrcpt(self, recipient: str, *parameters: str) -> int:
        self.recipients.append(recipient.strip("<>").lower())
        return Milter.CONTINUE

    @property
    def user(self) -> str | None:
        """Whose mail the message is, for personal models: its one envelope recipient (None for several)."""
        return self.recipients[0] if len(self.recipients) == 1 else None

    @Milter.decode("bytes")
    def header(self, name: str, value: bytes) -> int:
        self.collected.add_header(name, value)
        return Milter.CONTINUE

    def body(self, chunk: bytes) -> int:
        self.collected.add_body(chunk)
        if self.collected.full and self._protocol & Milter.P_SKIP:  # the rest is not read: say so
            return Milter.SKIP
        return Milter.CONTINUE

    def eom(self) -> int:
        started = time.perf_counter()
        collected, self.collected = self.collected, Collected(self.policy.max_bytes)
        message = collected.message
        outcome = decide(self.service, message, self.policy, self.user)
        self.recipients = []
        reply = self._act(outcome, collected)
        access = self.service.serving.access
        access.record("milter", self.client, "EOM", outcome.action, len(message), time.perf_counter() - started)
        return reply

    def abort(self) -> int:
        self.collected = Collected(self.policy.max_bytes)
        self.recipients = []
        return Milter.CONTINUE

    def _act(self, outcome: Outcome, collected: Collected) -> int:
        """Do ``outcome`` with the message ``collected``; the reply to the mail server."""
        verdict = outcome.verdict
        if outcome.action == "reject" and verdict is not None:
            _log.info("milter: rejecting a message of score %.1f (reject from %.1f)", verdict.score, self.policy.reject)
            text = f"Message rejected as spam (score {verdict.score:.1f}, rejected from {self.policy.reject:.1f})"
            self.setreply("550", "5.7.1", text)
            return Milter.REJECT
        if outcome.action == "tempfail":
            _log.warning("milter: no verdict (%s): the message is temporarily failed", outcome.reason)
            self.setreply("451", "4.7.1", "Spam filter unavailable, try again later")
            return Milter.TEMPFAIL
        if outcome.action == "accept" or verdict is None:
            _log.warning("milter: no verdict (%s): the message goes on unmarked", outcome.reason)
            return Milter.ACCEPT
        for name, count in collected.spam_headers.items():  # a sender's own X-Spam-Flag is not kept
            for index in range(count, 0, -1):
                self.chgheader(name, index, None)
        for name, value in spam_headers(verdict):
            self.addheader(name, value)
        return Milter.CONTINUE


class MilterServer:
    """The milter protocol on ``socket`` (libmilter's form), each connection filtered by a `SpamMilter` of
    ``service`` under ``policy``; an OSError when it cannot listen there. One per process (libmilter's state is)."""

    def __init__(self, service: SpamdService, socket: str, policy: MilterPolicy) -> None:
        self.socket = socket
        Milter.factory = lambda: SpamMilter(service, policy)
        milter.set_exception_policy(Milter.ACCEPT if policy.fail == "accept" else Milter.TEMPFAIL)
        _register(socket)
        try:
            milter.opensocket(True)  # True: a Unix socket left by an earlier run is removed first
        except milter.error as error:
            raise OSError(f"cannot listen on {socket} ({error})") from None

    def serve_until(self, stop: threading.Event) -> None:
        """Answer connections until ``stop`` is set (libmilter's own loop ending sets it too; then its error, an
        OSError, is raised). Stopping waits for libmilter's loop, which looks for it every 5 seconds."""
        failed: list[str] = []

        def run() -> None:
            try:
                milter.main()
            except milter.error as error:
                failed.append(str(error))
            finally:
                stop.set()

        thread = threading.Thread(target=run, name="milter", daemon=True)
        thread.start()
        stop.wait()
        if thread.is_alive():
            milter.stop()
        thread.join()
        if failed:
            raise OSError(f"the milter on {self.socket} stopped: {failed[0]}")


def _register(socket: str) -> None:
    """pymilter's callbacks to its filter objects, as ``Milter.runmilter`` sets them (which also runs the loop, where
    this opens the socket first), for ``socket``."""
    for on, callback in (
        (milter.set_connect_callback, Milter.connect_callback),
        (milter.set_envrcpt_callback, lambda ctx, *recipient: ctx.getpriv().envrcpt_bytes(*recipient)),
        (milter.set_header_callback, lambda ctx, name, value: ctx.getpriv().header_bytes(name, value)),
        (milter.set_body_callback, lambda ctx, chunk: ctx.getpriv().body(chunk)),
        (milter.set_eom_callback, lambda ctx: ctx.getpriv().eom()),
        (milter.set_abort_callback, lambda ctx: ctx.getpriv().abort()),
        (milter.set_close_callback, Milter.close_callback),
    ):
        on(callback)
    milter.setconn(socket)
    milter.register(NAME, negotiate=Milter.negotiate_callback)
