"""An HTTPS server of the standard library, accepted on the event loop, each connection
answered in a thread of its own.

Why not aiohttp: the metrics worker runs on every node, and aiohttp's server costs a node
~10 MiB of its RSS (issue 30: a node weighs what it runs), while ``http.server`` and
``http.client`` are loaded anyway by ``prometheus_client`` (its own exposition server is
built on them). A scrape is a few requests a minute, each of which renders text or waits
for a local exporter: a thread per connection suits it, and keeps both off the event loop.

::

    listening socket (non-blocking) ── readable, on the event loop ─▶ accept
      └─ a thread per connection: TLS handshake (the context's rules: a client certificate
         required and verified), then HTTP/1.1 requests, kept alive, each answered by
         ``answer(request)``; the connection closes when idle for ``IDLE`` seconds
    exit: the listening socket closed, every open connection shut down

The handshake happens in the connection's thread, not in accept, so that a slow or silent
client holds only its own thread. ``answer`` runs in the connection's thread; it calls into
the event loop itself where it needs the node's state (``anyio.from_thread``).
"""

from __future__ import annotations

import contextlib
import http.server
import socket
import ssl
import threading
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import anyio

__all__ = [
    "HANDSHAKE_TIMEOUT",
    "IDLE",
    "MAX_CONNECTIONS",
    "Answer",
    "Answerer",
    "HttpsServer",
    "Request",
]

HANDSHAKE_TIMEOUT = 10.0
"""Seconds a client may take to complete the TLS handshake."""
IDLE = 75.0
"""Seconds a kept-alive connection may stay idle (aiohttp's default, which this replaces)."""
MAX_CONNECTIONS = 64
"""Connections at once, handshakes included (each holds a thread): more are closed at
once, so that clients which connect and say nothing cannot hold the node's threads. A
Prometheus server keeps one per target."""


@dataclass(frozen=True)
class Request:
    """What an answer depends on: the method, the path (no query), the client's DER
    certificate (None without one), and the headers (their names in lower case)."""

    method: str
    path: str
    certificate: bytes | None
    headers: Mapping[str, str]


@dataclass(frozen=True)
class Answer:
    """A whole response: its body is sent with its length (no body for HEAD)."""

    status: int
    body: bytes = b""
    content_type: str = "text/plain; charset=utf-8"
    headers: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def text(cls, status: int, line: str, **headers: str) -> Answer:
        """``line`` and a newline, as plain text."""
        return cls(status, (line + "\n").encode(), headers=headers)


Answerer = Callable[[Request], Answer]
"""What answers each request (in the connection's thread)."""


class _Handler(http.server.BaseHTTPRequestHandler):
    """One connection's requests, each given to the server's ``answer``."""

    protocol_version = "HTTP/1.1"
    timeout = IDLE
    server: HttpsServer

    def __getattr__(self, name: str) -> Any:
        """Every method (``do_GET``, ``do_DELETE``, ...) goes to ``answer``, which says
        which it allows (405 for the others), rather than ``http.server``'s 501."""
        if name.startswith("do_"):
            return self._respond
        raise AttributeError(name)

    def _respond(self) -> None:
        if self.command not in ("GET", "HEAD"):
            self.close_connection = True  # its body, if any, is not read
        connection = self.connection
        der = (
            connection.getpeercert(binary_form=True)
            if isinstance(connection, ssl.SSLSocket)
            else None
        )
        headers = {name.lower(): value for name, value in self.headers.items()}
        request = Request(self.command, urlsplit(self.path).path, der, headers)
        try:
            answer = self.server.answer(request)
        except Exception:  # the node is stopping (its event loop gone), or a bug
            answer = Answer.text(500, "internal error")
            self.close_connection = True
        self.send_response(answer.status)
        self.send_header("Content-Type", answer.content_type)
        self.send_header("Content-Length", str(len(answer.body)))
        for name, value in answer.headers.items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(answer.body)

    def log_message(self, format: str, *args: Any) -> None:
        """No access log (the aiohttp server had none either)."""


class HttpsServer(http.server.ThreadingHTTPServer):
    """``ThreadingHTTPServer`` with TLS done in each connection's thread, bound (not yet
    accepting) when made; ``serving()`` accepts.

    :raises OSError: if it cannot listen at ``address`` (in use, for one).
    """

    daemon_threads = True
    block_on_close = False

    def __init__(
        self,
        address: tuple[str, int],
        context: ssl.SSLContext,
        answer: Answerer,
        *,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        self.context = context
        self.answer = answer
        self.max_connections = max_connections
        self.connections = 0
        """Accepted and not yet closed, handshakes included."""
        self.open: set[socket.socket] = set()
        """Those past their handshake: what ``close_all`` shuts down."""
        self.lock = threading.Lock()
        super().__init__(address, _Handler)

    def verify_request(self, request: Any, client_address: Any) -> bool:
        """Whether there is room for one more connection (else it is closed at once)."""
        with self.lock:
            if self.connections >= self.max_connections:
                return False
            self.connections += 1
            return True

    def finish_request(self, request: Any, client_address: Any) -> None:
        try:
            request.settimeout(HANDSHAKE_TIMEOUT)
            try:
                connection = self.context.wrap_socket(request, server_side=True)
            except OSError:
                return  # no certificate, another CA's, or a client gone: the handshake failed
            self._serve(connection, client_address)
        finally:
            with self.lock:
                self.connections -= 1

    def _serve(self, connection: ssl.SSLSocket, client_address: Any) -> None:
        with self.lock:
            self.open.add(connection)
        try:
            connection.settimeout(IDLE)
            _Handler(connection, client_address, self)
        except OSError:
            pass  # the client went away, or the server shut the connection down
        finally:
            with self.lock:
                self.open.discard(connection)
            connection.close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Nothing on stderr: a connection's failure is the client's."""

    def close_all(self) -> None:
        """Close the listening socket and shut every open connection down."""
        self.server_close()
        with self.lock:
            connections = list(self.open)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[None]:
        """Accept connections until exit; then close (see the module docstring)."""
        self.socket.setblocking(False)
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(self._accept)
                try:
                    yield
                finally:
                    group.cancel_scope.cancel()
        finally:
            self.close_all()

    async def _accept(self) -> None:
        """Accept connections as they come: no wake-up while none does."""
        while True:
            await anyio.wait_readable(self.socket)
            self.handle_request()  # accepts (or nothing: the client is gone), starts a thread
