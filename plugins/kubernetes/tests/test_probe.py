"""The readiness probe against a small server of the test's own, on 127.0.0.1, serving a
certificate of the PKI contract's kind."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from roleserve_kubernetes.pki import KeyPair
from roleserve_kubernetes.plans import Health
from roleserve_kubernetes.probe import (
    READY_RECHECK,
    KeptProbe,
    follow_readiness,
    probe,
    probe_failure,
)
from roleserve_kubernetes.testing import throwaway_pki

pytestmark = pytest.mark.anyio

HOST = "127.0.0.1"


async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """200 ``ok`` for /readyz, 500 for anything else."""
    request = await reader.readline()
    while (await reader.readline()) not in (b"\r\n", b""):
        pass
    ready = request.split()[1] == b"/readyz"
    status = b"200 OK" if ready else b"500 Internal Server Error"
    writer.write(b"HTTP/1.1 " + status + b"\r\nContent-Length: 2\r\n\r\nok")
    await writer.drain()
    writer.close()


async def answer_kept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """200 ``ok`` with its length to every request of one connection, until the client
    closes it; 500 for anything but /readyz, with ``Connection: close``."""
    while request := await reader.readline():
        while (await reader.readline()) not in (b"\r\n", b""):
            pass
        if request.split()[1] != b"/readyz":
            writer.write(b"HTTP/1.1 500 Internal Server Error\r\nConnection: close\r\n\r\n")
            break
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
    writer.close()


@asynccontextmanager
async def server(
    tmp_path: Path,
    serving: KeyPair | None,
    handler: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]] = answer,
) -> AsyncIterator[int]:
    """A server on 127.0.0.1 (HTTPS with ``serving``, or plain HTTP); yields its port."""
    context = None
    if serving is not None:
        assert serving.certificate_pem is not None
        certificate, key = tmp_path / "serving.pem", tmp_path / "serving-key.pem"
        certificate.write_bytes(serving.certificate_pem)
        key.write_bytes(serving.key_pem)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(certificate, key)
    open_writers: set[asyncio.StreamWriter] = set()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        open_writers.add(writer)
        await handler(reader, writer)

    listener = await asyncio.start_server(handle, HOST, 0, ssl=context)
    async with listener:
        yield listener.sockets[0].getsockname()[1]
        for writer in open_writers:  # as a component that exits: its connections end too
            writer.close()


@pytest.fixture(scope="module")
def pki() -> dict[str, KeyPair]:
    return throwaway_pki([ipaddress.ip_address(HOST)])


def ca(pki: dict[str, KeyPair]) -> bytes:
    assert pki["ca"].certificate_pem is not None
    return pki["ca"].certificate_pem


async def test_ready_only_with_200_from_a_verified_server(
    pki: dict[str, KeyPair], tmp_path: Path
) -> None:
    other = throwaway_pki([ipaddress.ip_address(HOST)])
    elsewhere = throwaway_pki([ipaddress.ip_address("10.9.9.9")])
    async with server(tmp_path, pki["apiserver"]) as port:
        assert await probe(Health(HOST, port, "/readyz", ca_pem=ca(pki)))
        assert not await probe(Health(HOST, port, "/livez", ca_pem=ca(pki)))  # 500
        # Why not, in a few words (ctl kubeconfig's refusal).
        assert await probe_failure(Health(HOST, port, "/livez")) == "/livez answered 500"
        failure = await probe_failure(Health(HOST, port, "/readyz", ca_pem=ca(other)))
        assert failure == "TLS: unable to get local issuer certificate"
        assert not await probe(Health(HOST, port, "/readyz", ca_pem=ca(other)))  # another CA
        assert await probe(Health(HOST, port, "/readyz"))  # no CA: any certificate
        assert not await probe(Health(HOST, port, "/readyz", tls=False))  # HTTP to HTTPS
    async with server(tmp_path, elsewhere["apiserver"]) as port:
        # Signed by the right CA, but for another address.
        assert not await probe(Health(HOST, port, "/readyz", ca_pem=ca(elsewhere)))


async def test_plain_http_and_nothing_listening(tmp_path: Path) -> None:
    async with server(tmp_path, None) as port:
        assert await probe(Health(HOST, port, "/readyz", tls=False))
    with socket.socket() as unused:
        unused.bind((HOST, 0))
        port = unused.getsockname()[1]
        assert not await probe(Health(HOST, port, "/readyz", tls=False))


async def test_a_kept_probe_asks_again_on_one_connection(
    pki: dict[str, KeyPair], tmp_path: Path
) -> None:
    async with server(tmp_path, pki["apiserver"], answer_kept) as port:
        kept = KeptProbe(Health(HOST, port, "/readyz", ca_pem=ca(pki)))
        try:
            assert [await kept.failure() for _ in range(3)] == [None, None, None]
            assert kept.connections == 1
        finally:
            await kept.aclose()
        failing = KeptProbe(Health(HOST, port, "/livez", ca_pem=ca(pki)))
        assert await failing.failure() == "/livez answered 500"
        assert await failing.failure() == "/livez answered 500"  # closed: a new connection
        assert failing.connections == 2
        await failing.aclose()


async def test_a_kept_probe_replaces_a_closed_connection_and_counts_only_a_fresh_failure(
    tmp_path: Path,
) -> None:
    async with server(tmp_path, None) as port:  # closes after each answer
        kept = KeptProbe(Health(HOST, port, "/readyz", tls=False))
        assert [await kept.failure() for _ in range(3)] == [None, None, None]
        assert kept.connections == 3  # each one closed by the server after its answer
        await kept.aclose()
    async with server(tmp_path, None, answer_kept) as port:
        kept = KeptProbe(Health(HOST, port, "/readyz", tls=False))
        assert await kept.failure() is None
    # The server is gone: the kept connection is dead, and a new one is refused.
    assert await kept.failure() == "connection refused"
    await kept.aclose()


class StopFollowingError(Exception):
    """Ends ``follow_readiness`` (which never returns) after a few pauses."""


async def test_a_ready_component_is_asked_again_every_five_seconds(
    tmp_path: Path,
) -> None:
    """The recheck of an idle component is its steady cost on every node: one probe per
    ``READY_RECHECK`` (5 s; it was 2)."""
    pauses: list[float] = []

    async def recorded(seconds: float) -> None:
        if len(pauses) == 4:
            raise StopFollowingError
        pauses.append(seconds)

    changes: list[bool] = []
    async with server(tmp_path, None, answer_kept) as port:
        with pytest.raises(StopFollowingError):
            await follow_readiness(
                Health(HOST, port, "/readyz", tls=False), changes.append, sleep=recorded
            )
    assert pauses == [5.0] * 4
    assert READY_RECHECK == 5.0
    assert changes == []  # ready throughout: no change told
