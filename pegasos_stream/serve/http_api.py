"""Predictions over HTTP: a small WSGI application on werkzeug's requests, responses and routing, served by
waitress, a production WSGI server (both in the ``serve`` extra; this is the one module that imports them).

``POST /predict`` takes one JSON event object, read as a line of a stream is, and answers its prediction;
or a JSON array of event objects, and answers the array of their predictions, all by one model. A request
that cannot be predicted is answered 400 with ``{"error": ...}`` naming what is wrong (for an array, also
``"errors"``: each bad event's index and reason, and nothing is predicted), and 503 while there is no model
yet. ``GET /health`` answers `Serving.health` (503 while there is no model).

For mail systems: ``POST /predict`` also takes one raw message (``Content-Type: message/rfc822``, its bytes as
they are, 8-bit too) and answers its prediction. ``POST /checkv2`` takes a raw message as rspamd's does and
answers rspamd's shape: ``action`` ("add header" from the required score, else "no action"), ``score`` and
``required_score`` (the log-odds of spam, as `serve.spamd` scores), ``symbols`` and ``is_skipped``; the request
headers rspamd reads (``From``, ``Rcpt``, ``IP``, ``User``, ``Deliver-To``) are echoed back in ``request``. ``POST
/learnspam`` and ``/learnham`` keep the message for learning (`serve.feedback`; 503 without ``--feedback`` or
``--feedback-topic``, or when it could not be kept).
"""

from __future__ import annotations

import hmac
import json
import logging
import os
import time
import weakref
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from waitress.adjustments import Adjustments
from waitress.server import MultiSocketServer, TcpWSGIServer, UnixWSGIServer
from waitress.task import ThreadedTaskDispatcher
from werkzeug.exceptions import HTTPException, MethodNotAllowed
from werkzeug.routing import Map, Rule
from werkzeug.wrappers import Request, Response

from ..io.records import Record
from ..io.sinks import json_line
from ..run.predictions import EXPLAINED
from ..run.rejections import rejection_reason
from .feedback import NO_FEEDBACK
from .serving import NoModel, Serving
from .spamd import SPAM_HEADER_NAMES, SYMBOL, SpamdService, Verdict, spam_headers
from .spamd_server import clear_stale_socket

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIEnvironment

__all__ = ["MAX_REQUEST_BYTES", "HttpServer", "PredictionApp"]

#: The largest request body taken; a larger one is answered 413.
MAX_REQUEST_BYTES = 64 << 20
#: The most events of one request (an array), and the largest array body: the work of a request is bounded.
MAX_EVENTS, MAX_ARRAY_BYTES = 1000, 16 << 20
#: Connections waitress holds at once, and the seconds an idle one is kept: idle or half-open clients are let go
#: long before they could fill the connections and keep health checks out.
CONNECTION_LIMIT, IDLE_TIMEOUT_S = 500, 10
#: The seconds a request has to send its headers, then its body: BODY_S plus a second per BODY_RATE bytes of it.
HEADER_S, BODY_S, BODY_RATE = 5.0, 10.0, 256 << 10
#: The connections kept free for new clients: beyond CONNECTION_LIMIT − HEADROOM, the requests that have been
#: arriving the longest are let go.
HEADROOM = 32
#: The seconds between two looks at the connections (waitress's cleanup interval).
CLEANUP_INTERVAL_S = 1
#: The position of a request's event, and of the events of an array (``request[0]``...), in messages.
REQUEST = "request"


_log = logging.getLogger(__name__)

#: The request headers of rspamd's protocol echoed back by ``/checkv2``.
RSPAMD_HEADERS = ("From", "Rcpt", "IP", "User", "Deliver-To")


class PredictionApp:
    """The WSGI application of ``serving``: ``POST /predict``, ``/checkv2``, ``/learnspam``, ``/learnham`` and
    ``GET /health``; ``mail`` scores raw messages and keeps the taught ones (its serving is ``serving``)."""

    def __init__(self, serving: Serving, mail: SpamdService | None = None, token: bytes | None = None) -> None:
        self.serving = serving
        self.mail = mail or SpamdService(serving)
        self._token = token
        self._urls = Map(
            [
                Rule("/predict", endpoint="predict", methods=["POST"]),
                Rule("/checkv2", endpoint="checkv2", methods=["POST", "GET"]),  # (GET: as rspamd's proxy sends it)
                Rule("/learnspam", endpoint="learnspam", methods=["POST"]),
                Rule("/learnham", endpoint="learnham", methods=["POST"]),
                Rule("/health", endpoint="health", methods=["GET"]),
            ]
        )

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        started = time.perf_counter()
        request = Request(environ)
        request.max_content_length = MAX_REQUEST_BYTES
        try:
            endpoint, _ = self._urls.bind_to_environ(environ).match()
            response = self._answer(endpoint, request) if self._allowed(endpoint, request) else _unauthorized()
        except HTTPException as error:
            response = _json(error.code or 500, {"error": error.description})
            if isinstance(error, MethodNotAllowed) and error.valid_methods:
                response.headers["Allow"] = ", ".join(error.valid_methods)
        client = request.remote_addr or "-"
        asked = f"{request.method} {request.path[:200]}"
        size, seconds = request.content_length or 0, time.perf_counter() - started
        self.serving.access.record("http", client, asked, str(response.status_code), size, seconds)
        return response(environ, start_response)

    def _allowed(self, endpoint: str, request: Request) -> bool:
        """Whether ``request`` may have its answer: any health check; any request without a token set; else one
        whose ``Authorization`` header is ``Bearer`` and the token."""
        if self._token is None or endpoint == "health":
            return True
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode("latin-1"), self._token)

    def _answer(self, endpoint: str, request: Request) -> Response:
        if endpoint == "health":
            return self._health()
        if endpoint == "checkv2":
            return self._checkv2(request)
        if endpoint in ("learnspam", "learnham"):
            return self._learn(request, endpoint.removeprefix("learn"))
        if request.mimetype == "message/rfc822":
            return self._predict_message(request)
        return self._predict(request)

    def _verdict(self, request: Request, explain: int = 0) -> Verdict | Response:
        """The verdict on the raw message of ``request`` (with the ``explain`` features weighing most in it), or the
        response refusing it."""
        message = request.get_data(cache=False)
        if not message.strip():
            self.serving.count(0, 1)
            return _json(400, {"error": f"{REQUEST}: empty body: expected a message"})
        try:
            user = request.headers.get("User") or request.headers.get("Deliver-To")
            verdict = self.mail.verdict(message, user, explain)
        except NoModel as error:
            return _json(503, {"error": str(error)})
        except (ValueError, TypeError, OverflowError) as error:
            self.serving.count(0, 1)
            return _json(400, {"error": f"{REQUEST}: {error}"})
        self.serving.count(1, 0)
        return verdict

    def _predict_message(self, request: Request) -> Response:
        """A raw message's prediction, as ``/predict`` answers an event's (its id: "request")."""
        verdict = self._verdict(request)
        if isinstance(verdict, Response):
            return verdict
        return _json(
            200,
            {
                "id": REQUEST,
                "predicted": verdict.predicted,
                "score": verdict.score,
                "proba": verdict.proba,
                "model_version": verdict.model_version,
            },
        )

    def _checkv2(self, request: Request) -> Response:
        """rspamd's ``/checkv2``: the verdict in rspamd's shape."""
        verdict = self._verdict(request, EXPLAINED)
        if isinstance(verdict, Response):
            return verdict
        about = f"log-odds of spam, p = {verdict.proba:.4f} (model {verdict.model_version})"
        weighing = [f"{name} ({part:+.3f})" for name, part in verdict.explanation]  # (rspamd's symbol options)
        return _json(
            200,
            {
                "is_skipped": False,
                "action": "add header" if verdict.spam else "no action",
                "score": verdict.score,
                "required_score": verdict.required,
                "symbols": {
                    SYMBOL: {"name": SYMBOL, "score": verdict.score, "description": about, "options": weighing}
                },
                "request": {name: request.headers[name] for name in RSPAMD_HEADERS if name in request.headers},
                "milter": {  # what rspamd's proxy, as a milter, does to the message: spamd's headers, a sender's gone
                    "remove_headers": dict.fromkeys(SPAM_HEADER_NAMES, 0),
                    "add_headers": dict(spam_headers(verdict)),
                },
            },
        )

    def _learn(self, request: Request, label: str) -> Response:
        """Keep the request's raw message for learning as ``label`` ("spam" or "ham")."""
        message = request.get_data(cache=False)
        if not message.strip():
            return _json(400, {"error": f"{REQUEST}: empty body: expected a message"})
        if self.mail.feedback is None:
            return _json(503, {"error": NO_FEEDBACK})
        user = request.headers.get("User") or request.headers.get("Deliver-To")
        try:
            self.mail.feedback.add(message, label, user)
        except ValueError as error:
            return _json(400, {"error": f"{REQUEST}: {error}"})
        except OSError as error:
            return _json(503, {"error": f"{REQUEST}: the message could not be kept: {error}"})
        return _json(200, {"success": True, "label": label})

    def _health(self) -> Response:
        health = self.serving.health()
        return _json(503 if health["status"] == "waiting" else 200, health)

    def _predict(self, request: Request) -> Response:
        try:
            records, many = request_records(request.get_data(cache=False))
        except ValueError as error:
            self.serving.count(0, 1)
            return _json(400, {"error": str(error)})
        try:
            outcomes = self.serving.predict(records)
        except NoModel as error:
            return _json(503, {"error": str(error)})
        errors = [
            {"index": index, "error": _reason(record, outcome)}
            for index, (record, outcome) in enumerate(zip(records, outcomes))
            if not isinstance(outcome, dict)
        ]
        if errors:
            self.serving.count(0, len(errors))
            return _json(400, {"error": errors[0]["error"], **({"errors": errors} if many else {})})
        self.serving.count(len(outcomes), 0)
        return _json(200, outcomes if many else outcomes[0])


def request_records(body: bytes) -> tuple[list[Record], bool]:
    """The records of a request's body, and whether it holds an array: one JSON event object is one record,
    its bytes as they came (read exactly as a line of a stream); each item of an array is one, written
    back as JSON. A ValueError for a body that is empty or an array that is no JSON."""
    if not body.strip():
        raise ValueError(f"{REQUEST}: empty body: expected a JSON event object, or an array of them")
    if not body.lstrip().startswith(b"["):
        return [Record(body, REQUEST)], False
    if len(body) > MAX_ARRAY_BYTES:
        raise ValueError(f"{REQUEST}: an array of {len(body):,} bytes: at most {MAX_ARRAY_BYTES:,} a request")
    try:
        items = json.loads(body)
    except (ValueError, RecursionError) as error:  # (UnicodeDecodeError is a ValueError)
        raise ValueError(f"{REQUEST}: malformed JSON: {error}") from None
    if len(items) > MAX_EVENTS:
        raise ValueError(f"{REQUEST}: {len(items):,} events: at most {MAX_EVENTS:,} a request")
    return [Record(json.dumps(item).encode(), f"{REQUEST}[{i}]") for i, item in enumerate(items)], True


def _reason(record: Record, outcome: Exception | None) -> str:
    """Why a request's event gives no prediction."""
    if outcome is None:
        return f"{record.position}: nothing to predict (an event with a label alone)"
    return rejection_reason(record, outcome)


def _unauthorized() -> Response:
    """401: a request without the token."""
    response = _json(401, {"error": "this service needs the header Authorization: Bearer TOKEN (serve --http-token-*)"})
    response.headers["WWW-Authenticate"] = "Bearer"
    return response


def _json(status: int, body: object) -> Response:
    return Response(json_line(body) + "\n", status=status, mimetype="application/json")


#: When each request still arriving was first seen (by its waitress parser, which is the request's alone).
_ARRIVING: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()


def let_go_slow_senders(channels: list[Any], connection_limit: int, now: float) -> None:
    """Mark the waitress ``channels`` to let go (``will_close``) at time ``now``, against clients that hold
    connections by sending slowly (slowloris), which an idle timeout cannot see: a request that has not sent its
    headers within ``HEADER_S`` seconds, or its body within ``BODY_S`` more plus a second per ``BODY_RATE`` bytes;
    and while more than ``connection_limit − HEADROOM`` connections are open, the requests that have been arriving
    the longest, so that new clients (health checks) keep being accepted. A request whose headers and body have
    arrived is never let go."""
    late: list[tuple[float, int, Any]] = []
    arriving: list[tuple[float, int, Any]] = []
    for channel in channels:
        request = channel.request  # a request still arriving (None between requests)
        if request is None or request.completed or channel.will_close:
            continue
        since = _ARRIVING.setdefault(request, now)
        allowed = HEADER_S + (BODY_S + request.content_length / BODY_RATE if request.headers_finished else 0.0)
        (late if now - since > allowed else arriving).append((since, id(channel), channel))
    excess = len(channels) - len(late) - (connection_limit - HEADROOM)
    let_go = late + sorted(arriving)[: max(excess, 0)]
    for _, _, channel in let_go:
        channel.will_close = True
    if let_go:
        _log.warning("let go %d connections sending their requests too slowly", len(let_go))


class _Guarded:
    """Mixin of a waitress server: `let_go_slow_senders` at each look at its connections (each
    ``CLEANUP_INTERVAL_S``), after its own check for idle ones."""

    active_channels: dict[int, Any]
    adj: Adjustments

    def maintenance(self, now: float) -> None:
        super().maintenance(now)  # type: ignore[misc]
        let_go_slow_senders(list(self.active_channels.values()), self.adj.connection_limit, now)


class GuardedServer(_Guarded, TcpWSGIServer):
    """waitress's TCP server, guarded against slow senders."""


class GuardedUnixServer(_Guarded, UnixWSGIServer):
    """waitress's Unix-socket server, guarded against slow senders; a socket left at its path by a server that is
    gone is replaced, a live one or anything else there is not (`clear_stale_socket`)."""

    def bind_server_socket(self) -> None:
        path = self.adj.unix_socket
        clear_stale_socket(Path(path))
        self.bind(path)
        os.chmod(path, self.adj.unix_socket_perms)


class HttpServer:
    """``app`` served by waitress on ``address``: ``(host, port)`` (port 0: a free port), or the path of a Unix
    socket (created with mode ``socket_mode``); ``threads`` requests at a time, at most ``CONNECTION_LIMIT``
    connections, each let go after ``IDLE_TIMEOUT_S`` idle seconds or when it sends too slowly
    (`let_go_slow_senders`); a body over ``MAX_REQUEST_BYTES`` is answered 413 from its headers. An OSError when
    the address cannot be listened on."""

    def __init__(
        self, app: PredictionApp, address: tuple[str, int] | str, threads: int = 4, socket_mode: int = 0o660
    ) -> None:
        if isinstance(address, str):
            where: dict[str, Any] = {"unix_socket": address, "unix_socket_perms": f"{socket_mode:o}"}
        else:
            where = {"host": address[0], "port": address[1]}
        settings = Adjustments(
            threads=threads,
            ident="pegasos-stream",
            connection_limit=CONNECTION_LIMIT,
            channel_timeout=IDLE_TIMEOUT_S,
            cleanup_interval=CLEANUP_INTERVAL_S,
            max_request_body_size=MAX_REQUEST_BYTES,
            **where,
        )
        dispatcher = ThreadedTaskDispatcher()
        dispatcher.set_thread_count(threads)
        channels: dict = {}  # one map for every address of host (as waitress.create_server serves them)
        self._socket = Path(address) if isinstance(address, str) else None
        if isinstance(address, str):
            self._server = GuardedUnixServer(app, channels, dispatcher=dispatcher, adj=settings)
            self.url = f"unix:{address}"
            return
        servers = [
            GuardedServer(app, channels, dispatcher=dispatcher, adj=settings, sockinfo=listen)
            for listen in settings.listen
        ]
        listening = [(server.effective_host, server.effective_port) for server in servers]
        self._server = servers[0] if len(servers) == 1 else MultiSocketServer(channels, settings, listening, dispatcher)
        host, port = listening[0]
        self.url = f"http://{f'[{host}]' if ':' in host else host}:{port}"

    def run(self) -> None:
        """Serve in this thread until a KeyboardInterrupt or SystemExit is raised in it (a signal's
        handler), then let the requests under way finish (up to 5 s)."""
        self._server.run()

    def close(self) -> None:
        self._server.close()
        if self._socket is not None:
            self._socket.unlink(missing_ok=True)
