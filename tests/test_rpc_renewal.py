"""A node's server presents its renewed certificate to new connections without a restart
(``bind(..., current=...)``: gRPC's dynamic server credentials, asked at each handshake)."""

from __future__ import annotations

import grpc
import pytest

from roleserve_core.identity import NodeCredentials
from roleserve_core.rpc import bind, create_server
from roleserve_core.testing import ThrowawayCA, presented_certificate

pytestmark = pytest.mark.anyio


async def test_a_server_presents_the_latest_credentials_to_new_connections() -> None:
    ca = ThrowawayCA()
    started, client = ca.node(), ca.node()
    latest: list[NodeCredentials] = [started]
    server: grpc.aio.Server = create_server(started)
    port = bind(server, "127.0.0.1:0", started, lambda: latest[-1])
    await server.start()
    try:
        assert await presented_certificate("127.0.0.1", port, client) == started.certificate
        latest.append(ca.node(started.key))  # renewed: same key, new certificate
        assert await presented_certificate("127.0.0.1", port, client) == latest[-1].certificate
    finally:
        await server.stop(None)


async def test_a_server_without_a_source_keeps_its_certificate() -> None:
    ca = ThrowawayCA()
    started = ca.node()
    server: grpc.aio.Server = create_server(started)
    port = bind(server, "127.0.0.1:0", started)
    await server.start()
    try:
        assert await presented_certificate("127.0.0.1", port, ca.node()) == started.certificate
    finally:
        await server.stop(None)
