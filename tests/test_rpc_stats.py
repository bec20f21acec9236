"""``create_server(stats=...)`` counts every call it handles, refused ones included, by
method and code, with its duration: a real grpc.aio server on loopback."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from roleserve_core.identity import Scope, UserCredentials, generate_key, issue_user_certificate
from roleserve_core.rpc import bind, create_server, secure_channel
from roleserve_core.stats import RpcStats
from roleserve_core.testing import ThrowawayCA

pytestmark = pytest.mark.anyio

INFO = "/roleserve.management.Management/GetClusterInfo"
NODES = "/roleserve.management.Management/GetNodes"
TREE = "/roleserve.nodemanagement.NodeManagement/GetSupervisionTree"


async def answer(request: Any, context: Any) -> bytes:
    return b""


async def not_found(request: Any, context: Any) -> bytes:
    await context.abort(grpc.StatusCode.NOT_FOUND, "nothing here")
    raise AssertionError("abort returns never")


async def stream(request: Any, context: Any) -> AsyncIterator[bytes]:
    yield b""
    raise RuntimeError("a bug")


async def test_calls_are_counted_by_method_and_code() -> None:
    ca = ThrowawayCA()
    credentials = ca.node()
    stats = RpcStats()
    server = create_server(credentials, stats=stats)
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                "roleserve.management.Management",
                {
                    "GetClusterInfo": grpc.unary_unary_rpc_method_handler(answer),
                    "GetNodes": grpc.unary_stream_rpc_method_handler(stream),
                },
            ),
            grpc.method_handlers_generic_handler(
                "roleserve.nodemanagement.NodeManagement",
                {"GetSupervisionTree": grpc.unary_unary_rpc_method_handler(not_found)},
            ),
        )
    )
    port = bind(server, "127.0.0.1:0", credentials)
    await server.start()
    key = generate_key()
    scraper = UserCredentials(
        key,
        issue_user_certificate(
            ca.key, ca.certificate, key.public_key(), "scraper", scope=Scope.METRICS
        ),
        ca.certificate,
    )
    try:
        async with secure_channel(f"127.0.0.1:{port}", ca.user()) as owner:
            channel: Any = owner
            await channel.unary_unary(INFO)(b"")
            await channel.unary_unary(INFO)(b"")
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await channel.unary_unary(TREE)(b"")
            assert raised.value.code() == grpc.StatusCode.NOT_FOUND
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                async for _ in channel.unary_stream(NODES)(b""):
                    pass
            assert raised.value.code() == grpc.StatusCode.UNKNOWN
        async with secure_channel(f"127.0.0.1:{port}", scraper) as refused:
            channel = refused
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await channel.unary_unary(INFO)(b"")
            assert raised.value.code() == grpc.StatusCode.PERMISSION_DENIED
    finally:
        await server.stop(None)

    assert stats.handled == {
        (INFO, "OK"): 2,
        (INFO, "PERMISSION_DENIED"): 1,
        (TREE, "NOT_FOUND"): 1,
        (NODES, "UNKNOWN"): 1,
    }
    assert {method: histogram.count for method, histogram in stats.latency.by_key.items()} == {
        INFO: 3,
        TREE: 1,
        NODES: 1,
    }
