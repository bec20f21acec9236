"""RPC: unary latency and bidi ping-pong over mutual TLS through the authorization
interceptor, against plain insecure grpc.aio, in the same run.

Run: ``./dev sync && .venv/bin/python benchmarks/rpc.py``. Both servers run the same
servicer in this process, on loopback; the client calls them one call at a time:

(r1) sequential unary calls (``Curator.UpdateNodeStatus``, which needs a node certificate
     and the UPDATE_NODE_SELF permission); baseline: the same call, insecure, no interceptor.
(r2) bidi ping-pong on one ``Curator.Heartbeat`` stream: send one request, wait for its
     response; baseline: the same, insecure, no interceptor.
(r3) (r1) through a server with a node gate (``create_server(gate=...)``, as the leading
     curator refuses decommissioned nodes; this one refuses nobody, from a dict, as the
     curator's does from its node cache); baseline: (r1) without the gate.
(r4) (r2) likewise: each response of a gated stream is raced against the gate.
(r5) sequential unary calls of a user (``Management.GetClusterInfo``, owner credentials)
     through a server that checks revocations (``create_server(revocations=...)``, 1000
     revoked serials, none the caller's, as the leader's ``RevokedSerials``); baseline: the
     same calls through the same kind of server without revocations.
(r6) (r1) through a server that counts its calls (``create_server(stats=...)``, as the
     node's servers do for the metrics plugin); baseline: (r1) without counting.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import grpc
from _report import print_comparison, summarise
from typing_extensions import override

from roleserve_core.identity import (
    NodeCredentials,
    UserCredentials,
    create_ca,
    generate_key,
    issue_node_certificate,
    issue_user_certificate,
)
from roleserve_core.proto import curator_pb2, curator_pb2_grpc, management_pb2, management_pb2_grpc
from roleserve_core.rpc import bind, create_server, secure_channel
from roleserve_core.stats import RpcStats


class Curator(curator_pb2_grpc.CuratorServicer):
    """Answers at once: the benchmark measures the transport and the interceptor."""

    @override
    async def UpdateNodeStatus(
        self, request: curator_pb2.UpdateNodeStatusRequest, context: Any
    ) -> curator_pb2.UpdateNodeStatusResponse:
        return curator_pb2.UpdateNodeStatusResponse()

    @override
    async def Heartbeat(
        self, request_iterator: AsyncIterator[curator_pb2.HeartbeatRequest], context: Any
    ) -> AsyncIterator[curator_pb2.HeartbeatResponse]:
        async for _ in request_iterator:
            yield curator_pb2.HeartbeatResponse()


class Management(management_pb2_grpc.ManagementServicer):
    """Answers at once, as ``Curator`` does."""

    @override
    async def GetClusterInfo(
        self, request: management_pb2.GetClusterInfoRequest, context: Any
    ) -> management_pb2.GetClusterInfoResponse:
        return management_pb2.GetClusterInfoResponse()


class RevokedOthers:
    """Revocations naming 1000 serials, none the caller's: a set lookup per call."""

    def __init__(self) -> None:
        self.serials = frozenset(range(1, 1001))

    def revoked(self, serial: int) -> bool:
        return serial in self.serials

    async def wait_revoked(self, serial: int) -> None:
        await anyio.Event().wait()  # never: nobody is revoked while the benchmark runs


class OpenGate:
    """A node gate that refuses nobody: a dict lookup per call, an event per stream."""

    def __init__(self) -> None:
        self.refused: dict[str, str] = {}
        self.never = anyio.Event()

    async def refusal(self, node_id: str) -> str | None:
        return self.refused.get(node_id)

    async def wait_refusal(self, node_id: str) -> str:
        await self.never.wait()
        return self.refused[node_id]


def cluster_credentials() -> tuple[NodeCredentials, NodeCredentials, UserCredentials]:
    """A server's and a client's node credentials of one throwaway cluster, and its
    owner's."""
    ca_key = generate_key()
    ca = create_ca(ca_key)
    pair = []
    for _ in range(2):
        key = generate_key()
        pair.append(NodeCredentials(key, issue_node_certificate(ca_key, ca, key.public_key()), ca))
    key = generate_key()
    owner = UserCredentials(key, issue_user_certificate(ca_key, ca, key.public_key(), "owner"), ca)
    return pair[0], pair[1], owner


async def user_latencies(channel: grpc.aio.Channel, calls: int) -> list[float]:
    stub = management_pb2_grpc.ManagementStub(channel)
    request = management_pb2.GetClusterInfoRequest()
    for _ in range(100):  # warm up: connection, caches
        await stub.GetClusterInfo(request)
    samples = []
    for _ in range(calls):
        start = time.perf_counter()
        await stub.GetClusterInfo(request)
        samples.append(time.perf_counter() - start)
    return samples


async def unary_latencies(channel: grpc.aio.Channel, calls: int) -> list[float]:
    stub = curator_pb2_grpc.CuratorStub(channel)
    request = curator_pb2.UpdateNodeStatusRequest(node_id="node-x")
    for _ in range(100):  # warm up: connection, caches
        await stub.UpdateNodeStatus(request)
    samples = []
    for _ in range(calls):
        start = time.perf_counter()
        await stub.UpdateNodeStatus(request)
        samples.append(time.perf_counter() - start)
    return samples


async def ping_pong_latencies(channel: grpc.aio.Channel, rounds: int) -> list[float]:
    stub = curator_pb2_grpc.CuratorStub(channel)
    send, receive = anyio.create_memory_object_stream[curator_pb2.HeartbeatRequest](1)

    async def requests() -> AsyncIterator[curator_pb2.HeartbeatRequest]:
        async with receive:
            async for request in receive:
                yield request

    stream = stub.Heartbeat(requests())
    responses = stream.__aiter__()
    samples = []
    async with send:
        for round_number in range(rounds + 100):
            start = time.perf_counter()
            await send.send(curator_pb2.HeartbeatRequest())
            await responses.__anext__()
            if round_number >= 100:  # the first hundred warm up
                samples.append(time.perf_counter() - start)
    stream.cancel()
    return samples


async def main(calls: int) -> None:
    """Run both benchmarks and print the figures."""
    server_credentials, client_credentials, owner = cluster_credentials()
    secure = create_server(server_credentials)
    gated = create_server(server_credentials, gate=OpenGate())
    checking = create_server(server_credentials, revocations=RevokedOthers())
    counting = create_server(server_credentials, stats=RpcStats())
    insecure = grpc.aio.server()
    servers = (secure, gated, checking, counting, insecure)
    for server in servers:
        curator_pb2_grpc.add_CuratorServicer_to_server(Curator(), server)  # type: ignore[abstract]
        management_pb2_grpc.add_ManagementServicer_to_server(Management(), server)  # type: ignore[abstract]
    secure_port = bind(secure, "127.0.0.1:0", server_credentials)
    gated_port = bind(gated, "127.0.0.1:0", server_credentials)
    checking_port = bind(checking, "127.0.0.1:0", server_credentials)
    counting_port = bind(counting, "127.0.0.1:0", server_credentials)
    insecure_port = insecure.add_insecure_port("127.0.0.1:0")
    for server in servers:
        await server.start()
    server_id = server_credentials.node_id
    try:
        async with (
            secure_channel(
                f"127.0.0.1:{secure_port}", client_credentials, node_id=server_id
            ) as mtls,
            secure_channel(
                f"127.0.0.1:{gated_port}", client_credentials, node_id=server_id
            ) as gate,
            grpc.aio.insecure_channel(f"127.0.0.1:{insecure_port}") as plain,
            secure_channel(f"127.0.0.1:{secure_port}", owner, node_id=server_id) as user,
            secure_channel(f"127.0.0.1:{checking_port}", owner, node_id=server_id) as checked_user,
            secure_channel(
                f"127.0.0.1:{counting_port}", client_credentials, node_id=server_id
            ) as counted,
        ):
            print_comparison(
                f"(r1) sequential unary calls over mTLS + authorization ({calls} calls)",
                summarise(await unary_latencies(mtls, calls)),
                summarise(await unary_latencies(plain, calls)),
                "insecure grpc.aio, no interceptor",
            )
            print_comparison(
                f"(r2) bidi ping-pong over mTLS + authorization ({calls} round trips)",
                summarise(await ping_pong_latencies(mtls, calls)),
                summarise(await ping_pong_latencies(plain, calls)),
                "insecure grpc.aio, no interceptor",
            )
            print_comparison(
                f"(r3) sequential unary calls through a node gate ({calls} calls)",
                summarise(await unary_latencies(gate, calls)),
                summarise(await unary_latencies(mtls, calls)),
                "the same server without a gate",
            )
            print_comparison(
                f"(r4) bidi ping-pong through a node gate ({calls} round trips)",
                summarise(await ping_pong_latencies(gate, calls)),
                summarise(await ping_pong_latencies(mtls, calls)),
                "the same server without a gate",
            )
            print_comparison(
                f"(r5) a user's unary calls through revocation checks ({calls} calls)",
                summarise(await user_latencies(checked_user, calls)),
                summarise(await user_latencies(user, calls)),
                "the same server without revocations",
            )
            print_comparison(
                f"(r6) sequential unary calls through a counting server ({calls} calls)",
                summarise(await unary_latencies(counted, calls)),
                summarise(await unary_latencies(mtls, calls)),
                "the same server without counting",
            )
    finally:
        for server in servers:
            await server.stop(None)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000, help="calls / round trips each")
    options = parser.parse_args()
    anyio.run(main, options.calls, backend="asyncio")
