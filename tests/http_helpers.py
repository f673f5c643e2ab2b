"""What the tests of services share: a free port to listen on, and an HTTP client for ``serve --http`` ((status,
JSON body) of a request, whatever its status)."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from typing import Any

#: Seconds a request may take: far past the real thing, for a loaded machine.
WAIT = 30


def http_json(url: str, body: bytes | None = None, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    """(status, JSON body) of a GET, or of a POST of ``body`` with ``headers``."""
    request = urllib.request.Request(url, data=body, method="GET" if body is None else "POST", headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=WAIT) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
