"""``serve --http``'s guard against clients that hold connections by sending slowly (`GuardedServer`), its looks
at the connections driven by a clock of the test's own."""

from __future__ import annotations

import logging

import pytest
from waitress.adjustments import Adjustments
from waitress.parser import HTTPRequestParser

from pegasos_stream.serve.http_api import BODY_RATE, BODY_S, HEADER_S, HEADROOM, GuardedServer

#: A request whose headers never end: one header byte at a time.
SLOW_HEADERS = b"POST /predict HTTP/1.1\r\nHost: x\r\nX-Slow: a"
#: Headers of a request of a 1 MiB body, and its first bytes.
SLOW_BODY = b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Length: 1048576\r\n\r\n{"
START = 1_000_000.0


class Channel:
    """What the guard reads of a waitress channel: the request arriving (a waitress parser fed ``sent``; None
    between requests), the requests being answered, when it last received and whether it is to close."""

    def __init__(self, sent: bytes | None, settings: Adjustments) -> None:
        self.request = None if sent is None else HTTPRequestParser(settings)
        if self.request is not None:
            self.request.received(sent)
        self.requests: list = []
        self.last_activity = START
        self.will_close = False


@pytest.fixture
def guarded():
    """A GuardedServer (bound to a free loopback port, never listening) of a connection limit given, with the
    channels given, and a function that looks at them at a time given (each having just received a byte, so
    that none is idle) and says which are to close, with the channels it is given opened first."""
    servers: list[GuardedServer] = []

    def make(channels: list[Channel], limit: int = 500):
        settings = Adjustments(host="127.0.0.1", port=0, connection_limit=limit, channel_timeout=10)
        server = GuardedServer(lambda environ, start: [], {}, _start=False, adj=settings)
        servers.append(server)
        server.active_channels = dict(enumerate(channels))

        def look(at: float, *opened: Channel) -> list[bool]:
            server.active_channels.update((len(server.active_channels), channel) for channel in opened)
            for channel in server.active_channels.values():
                channel.last_activity = at
            server.maintenance(at)
            return [channel.will_close for channel in server.active_channels.values()]

        return look

    yield make
    for server in servers:
        server.close()


def test_headers_not_sent_in_time_are_let_go_and_other_connections_never(guarded, caplog):
    settings = Adjustments()
    slow = Channel(SLOW_HEADERS, settings)
    between = Channel(None, settings)  # a kept-alive connection between two requests
    complete = Channel(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n", settings)
    assert complete.request is not None and complete.request.completed
    look = guarded([slow, between, complete])
    assert look(START) == [False, False, False]  # the slow request first seen
    assert look(START + HEADER_S) == [False, False, False]
    with caplog.at_level(logging.WARNING):
        assert look(START + HEADER_S + 1.0) == [True, False, False]
    assert "let go 1 connections sending their requests too slowly" in caplog.text
    assert look(START + 1000.0) == [True, False, False]


def test_a_body_has_ten_seconds_and_a_second_per_256_kib(guarded):
    slow = Channel(SLOW_BODY, Adjustments())
    assert slow.request is not None and slow.request.headers_finished and not slow.request.completed
    look = guarded([slow])
    allowed = HEADER_S + BODY_S + 1048576 / BODY_RATE
    assert allowed == 19.0
    assert look(START) == [False]
    assert look(START + allowed) == [False]
    assert look(START + allowed + 0.5) == [True]


def test_near_the_connection_limit_the_requests_arriving_longest_are_let_go_first(guarded):
    settings = Adjustments()
    slow = [Channel(SLOW_HEADERS, settings) for _ in range(6)]
    look = guarded([Channel(None, settings)], limit=HEADROOM + 5)  # room for 5 connections, one between requests
    assert look(START, slow[0]) == [False] * 2
    assert look(START + 1.0, *slow[1:4]) == [False] * 5
    # 7 connections for room for 5: of the requests arriving, the two oldest go (the first, then one of the next)
    closing = look(START + 2.0, *slow[4:])
    assert closing[:2] == [False, True] and sum(closing) == 2 and not any(closing[-2:])
