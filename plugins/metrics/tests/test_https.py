"""The metrics server's HTTPS server (``https``): kept-alive connections answered in threads,
HEAD, a cap on connections, and every connection closed when it stops; and its proxy."""

from __future__ import annotations

import http.client
import http.server
import socket
import threading
from collections.abc import AsyncIterator, Callable
from typing import TypeVar

import anyio.to_thread
import pytest

from roleserve_core.testing import ThrowawayCA, poll_until, random_loopback
from roleserve_metrics.exporters import Exporter
from roleserve_metrics.https import Answer, HttpsServer, Request
from roleserve_metrics.server import TlsIdentity, proxy
from roleserve_metrics.testing import client_context, free_port

pytestmark = pytest.mark.anyio

T = TypeVar("T")


class Served:
    """A server answering ``hello`` (and the requests it saw), and how to reach it."""

    def __init__(self, ca: ThrowawayCA, host: str, port: int) -> None:
        self.ca = ca
        self.host = host
        self.port = port
        self.seen: list[Request] = []

    def answer(self, request: Request) -> Answer:
        self.seen.append(request)
        return Answer(200, b"hello\n", headers={"X-Path": request.path})

    def connection(self) -> http.client.HTTPSConnection:
        context = client_context(self.ca.certificate, self.ca.user())
        return http.client.HTTPSConnection(self.host, self.port, context=context, timeout=10)


async def blocking(call: Callable[[], T]) -> T:
    """``call`` in a thread: the server accepts on this event loop."""
    return await anyio.to_thread.run_sync(call)


def ask(connection: http.client.HTTPConnection, method: str, path: str) -> tuple[int, bytes]:
    connection.request(method, path)
    response = connection.getresponse()
    return response.status, response.read()


@pytest.fixture
async def served() -> AsyncIterator[tuple[Served, HttpsServer]]:
    host = str(random_loopback())
    ca = ThrowawayCA()
    served = Served(ca, host, free_port(host))
    server = HttpsServer(
        (host, served.port), TlsIdentity(ca.node()).context, served.answer, max_connections=2
    )
    async with server.serving():
        yield served, server


async def test_kept_alive_get_and_head(served: tuple[Served, HttpsServer]) -> None:
    client, _ = served
    connection = client.connection()
    assert await blocking(lambda: ask(connection, "GET", "/metrics/core?x=1")) == (200, b"hello\n")
    connection.request("HEAD", "/metrics/core")
    response = await blocking(connection.getresponse)
    assert (response.status, response.getheader("Content-Length"), response.read()) == (
        200,
        "6",
        b"",
    )
    assert await blocking(lambda: ask(connection, "DELETE", "/x")) == (200, b"hello\n")
    connection.close()
    assert [(seen.method, seen.path) for seen in client.seen] == [
        ("GET", "/metrics/core"),
        ("HEAD", "/metrics/core"),
        ("DELETE", "/x"),  # every method reaches the answer, which may refuse it
    ]
    assert client.seen[0].certificate is not None  # the client's, for admission
    assert client.seen[0].headers["host"] == f"{client.host}:{client.port}"  # lower case


async def test_connections_over_the_cap_are_closed_at_once(
    served: tuple[Served, HttpsServer],
) -> None:
    client, server = served
    silent = [socket.create_connection((client.host, client.port)) for _ in range(2)]

    async def counted() -> int:
        return server.connections  # changed by the connections' threads

    await poll_until("two connections in their handshake", counted, lambda n: n == 2)
    with socket.create_connection((client.host, client.port)) as third:
        third.settimeout(10)
        assert await blocking(lambda: third.recv(1)) == b""  # closed, not left to wait
    silent[0].close()  # its handshake fails: room again
    await poll_until("one connection left", counted, lambda n: n == 1)
    connection = client.connection()
    assert await blocking(lambda: ask(connection, "GET", "/")) == (200, b"hello\n")
    connection.close()
    silent[1].close()


async def test_stopping_closes_kept_alive_connections() -> None:
    host = str(random_loopback())
    ca = ThrowawayCA()
    client = Served(ca, host, free_port(host))
    server = HttpsServer((host, client.port), TlsIdentity(ca.node()).context, client.answer)
    connection = client.connection()
    async with server.serving():
        assert (await blocking(lambda: ask(connection, "GET", "/")))[0] == 200
    with pytest.raises((ConnectionError, http.client.HTTPException)):
        await blocking(lambda: ask(connection, "GET", "/"))
    with pytest.raises(ConnectionError):
        socket.create_connection((host, client.port), timeout=10)


class _Upstream(http.server.BaseHTTPRequestHandler):
    """An exporter that answers 503 with the Accept header it got, in its own type."""

    def do_GET(self) -> None:
        body = f"{self.path} accept={self.headers.get('Accept')}".encode()
        self.send_response(503)
        self.send_header("Content-Type", "text/x-upstream")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_a_proxied_answer_is_passed_on_as_the_exporter_gave_it() -> None:
    host = str(random_loopback())
    upstream = http.server.ThreadingHTTPServer((host, 0), _Upstream)
    port = upstream.server_port
    thread = threading.Thread(target=upstream.serve_forever, daemon=True)
    thread.start()
    try:
        exporter = Exporter("up", url=f"http://{host}:{port}/metrics?x=1")
        answer = proxy(exporter, "text/plain;version=0.0.4", 5.0)
    finally:
        upstream.shutdown()
        upstream.server_close()
    assert (answer.status, answer.content_type, answer.body) == (
        503,
        "text/x-upstream",
        b"/metrics?x=1 accept=text/plain;version=0.0.4",
    )
