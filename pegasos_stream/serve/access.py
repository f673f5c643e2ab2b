"""The access log of a service: one line per request it answered, and the figures of it that metrics take.

A line says the protocol, the client, the request (``POST /predict``, spamd's ``CHECK``, a milter's end of
message), the outcome (HTTP's status, spamd's exit code, what the milter did), the bytes of the request's body and
the time it took to answer, on the logger
``pegasos_stream.access`` at INFO (standard error, as every line of ``serve``)::

    http 127.0.0.1 "POST /checkv2" 200 6210 B 3.1 ms
"""

from __future__ import annotations

import logging
from typing import Protocol

__all__ = ["AccessLog", "RequestObserver"]

_log = logging.getLogger("pegasos_stream.access")


class RequestObserver(Protocol):
    """What takes the figures of each request answered (`serve.metrics.ServeMetrics`)."""

    def observe(self, protocol: str, outcome: str, seconds: float) -> None: ...


class AccessLog:
    """Logs each request answered, and tells ``observer`` of it (None: no one)."""

    def __init__(self, observer: RequestObserver | None = None) -> None:
        self.observer = observer

    def record(self, protocol: str, client: str, request: str, outcome: str, size: int, seconds: float) -> None:
        """A request of ``protocol`` from ``client`` was answered ``outcome`` in ``seconds``."""
        _log.info('%s %s "%s" %s %d B %.1f ms', protocol, client, request, outcome, size, 1000.0 * seconds)
        if self.observer is not None:
            self.observer.observe(protocol, outcome, seconds)
