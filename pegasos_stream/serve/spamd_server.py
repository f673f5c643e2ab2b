"""A spamd server: `serve.spamd`'s protocol on a TCP address or a Unix socket, one thread per connection.

At most ``max_connections`` are answered at once; one more is answered ``EX_TEMPFAIL`` at once (``spamc`` then
passes its message through unscored) and closed, so that a burst or idle clients never queue mail without
bound. Each connection has ``timeout`` seconds to send its request, after which it is answered ``EX_TEMPFAIL``
too. A Unix socket is created with the permissions ``socket_mode`` gives it (owner and group by default).
"""

from __future__ import annotations

import contextlib
import os
import socket
import socketserver
import stat
import threading
from pathlib import Path
from typing import Any, cast

from .spamd import EX_TEMPFAIL, MAX_MESSAGE_BYTES, SpamdService, error_answer, handle_connection

__all__ = ["SpamdServer", "clear_stale_socket"]

#: A connection, as socketserver hands it over.
Request = socket.socket | tuple[bytes, socket.socket]
#: Connections answered at once, unless told.
MAX_CONNECTIONS = 32
#: Connections the kernel holds while they wait to be accepted (socketserver's 5 drops a burst's connections,
#: which clients then retry a second later).
LISTEN_BACKLOG = 128
#: Seconds a client has to send its request, unless told.
TIMEOUT_S = 30.0


class _Handler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        server = cast("_Bounded", self.server)
        self.connection.settimeout(server.timeout_s)
        address = self.client_address
        client = address[0] if isinstance(address, tuple) and address else "local"  # (a Unix socket's has no address)
        handle_connection(self.rfile, self.wfile.write, server.service, server.max_bytes, str(client))


class _Bounded(socketserver.ThreadingMixIn):
    """A threading server answering at most ``limit`` connections at once."""

    daemon_threads = True
    block_on_close = False
    request_queue_size = LISTEN_BACKLOG
    service: SpamdService
    timeout_s: float
    max_bytes: int
    limit: threading.BoundedSemaphore

    def process_request(self, request: Request, client_address: Any) -> None:
        if not self.limit.acquire(blocking=False):
            if isinstance(request, socket.socket):
                with contextlib.suppress(OSError):
                    request.sendall(error_answer(EX_TEMPFAIL, "too many connections"))
            self.shutdown_request(request)  # type: ignore[attr-defined]
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Request, client_address: Any) -> None:
        """ThreadingMixIn's, with the connection's place given back before it is closed: a client that saw it
        close finds the place free."""
        try:
            self.finish_request(request, client_address)  # type: ignore[attr-defined]
        except Exception:
            self.handle_error(request, client_address)  # type: ignore[attr-defined]
        finally:
            self.limit.release()
            self.shutdown_request(request)  # type: ignore[attr-defined]


class _TcpServer(_Bounded, socketserver.TCPServer):
    allow_reuse_address = True


class _Tcp6Server(_TcpServer):
    address_family = socket.AF_INET6


class _UnixServer(_Bounded, socketserver.UnixStreamServer):
    pass


class SpamdServer:
    """``service`` on ``address``: (host, port), port 0 for any free port, or the path of a Unix socket; an
    OSError when it cannot be listened on (a Unix socket's path that exists and is no socket is not replaced)."""

    def __init__(
        self,
        service: SpamdService,
        address: tuple[str, int] | str,
        max_connections: int = MAX_CONNECTIONS,
        timeout_s: float = TIMEOUT_S,
        max_bytes: int = MAX_MESSAGE_BYTES,
        socket_mode: int = 0o660,
    ) -> None:
        server: _TcpServer | _UnixServer
        if isinstance(address, str):
            clear_stale_socket(Path(address))
            server = _UnixServer(address, _Handler)
            os.chmod(address, socket_mode)
        else:
            server = (_Tcp6Server if ":" in address[0] else _TcpServer)(address, _Handler)
        server.service, server.timeout_s, server.max_bytes = service, timeout_s, max_bytes
        server.limit = threading.BoundedSemaphore(max_connections)
        self._server = server

    @property
    def address(self) -> str:
        """Where it listens: HOST:PORT, or the socket's path."""
        found = self._server.server_address
        if isinstance(found, str):
            return found
        host, port = str(found[0]), int(found[1])  # type: ignore[index]
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    def serve_forever(self) -> None:
        """Answer connections until ``shutdown`` (from another thread) or a KeyboardInterrupt."""
        self._server.serve_forever(poll_interval=0.2)

    def shutdown(self) -> None:
        self._server.shutdown()

    def close(self) -> None:
        self._server.server_close()
        if isinstance(self._server.server_address, str):
            Path(self._server.server_address).unlink(missing_ok=True)


def clear_stale_socket(path: Path) -> None:
    """Remove a socket left at ``path`` by a server that is gone; anything else there is left (bind then fails)."""
    try:
        if stat.S_ISSOCK(path.lstat().st_mode):
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                probe.connect(str(path))
            except OSError:
                path.unlink()
            finally:
                probe.close()
    except FileNotFoundError:
        pass
