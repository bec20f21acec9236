"""A decommissioned node is locked out of the leading curator, on real etcd over mTLS.

Its certificate stays valid (there is no revocation), so the leader's gate refuses it from
the node cache on each call of every node-authenticated method, and ends the streams it
has open when the decommission reaches the cache.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import anyio
import grpc
import pytest

from roleserve_controlplane.testing.curator import CuratorNode
from roleserve_controlplane.testing.curator_api import CuratorApi, NodeWatch, refused, status
from roleserve_core import common_pb2, curator_pb2
from roleserve_core.identity import NodeCredentials
from roleserve_core.rpc import node_refusal
from roleserve_core.testing import DEFAULT_TIMEOUT

pytestmark = pytest.mark.anyio

DECOMMISSIONED = common_pb2.NODE_STATE_DECOMMISSIONED
EVERY_NODE = curator_pb2.WatchRequest(nodes_in_cluster=curator_pb2.WatchRequest.NodesInCluster())

Call = Callable[[CuratorApi, CuratorNode], Awaitable[object]]


@pytest.fixture
def api(curators) -> CuratorApi:
    return CuratorApi(curators)


def _credentials(node: CuratorNode) -> NodeCredentials:
    assert node.credentials is not None
    return node.credentials


async def _watch(api: CuratorApi, node: CuratorNode) -> object:
    async with api.watching(EVERY_NODE, node.credentials) as watch:
        return await watch.next()


async def _update_status(api: CuratorApi, node: CuratorNode) -> object:
    request = curator_pb2.UpdateNodeStatusRequest(
        node_id=node.node_id, status=status(node.address, version="after")
    )
    async with api.curator(_credentials(node)) as curator:
        return await curator.UpdateNodeStatus(request)


async def _heartbeat(api: CuratorApi, node: CuratorNode) -> object:
    async with api.curator(_credentials(node)) as curator:
        with anyio.fail_after(DEFAULT_TIMEOUT):
            return [r async for r in curator.Heartbeat(iter([curator_pb2.HeartbeatRequest()]))]


async def _update_clusternet(api: CuratorApi, node: CuratorNode) -> object:
    networking = common_pb2.NodeClusterNetworking(
        wireguard_pubkey="A" * 43 + "=", prefixes=[f"{node.address}/32"]
    )
    request = curator_pb2.UpdateNodeClusterNetworkingRequest(clusternet=networking)
    async with api.curator(_credentials(node)) as curator:
        return await curator.UpdateNodeClusterNetworking(request)


async def _renew_certificate(api: CuratorApi, node: CuratorNode) -> object:
    async with api.curator(_credentials(node)) as curator:
        return await curator.RenewCertificate(curator_pb2.RenewCertificateRequest())


CALLS: dict[str, Call] = {
    "Watch": _watch,
    "UpdateNodeStatus": _update_status,
    "Heartbeat": _heartbeat,
    "UpdateNodeClusterNetworking": _update_clusternet,
    "RenewCertificate": _renew_certificate,
}


async def _decommissioned(api: CuratorApi, node: CuratorNode) -> None:
    """Decommission ``node`` and wait until the leader's cache shows it."""
    await api.decommission(node.node_id)
    await api.settled(lambda nodes: nodes[node.node_id].state == DECOMMISSIONED)


def _assert_refused_for_good(error: grpc.aio.AioRpcError, node: CuratorNode) -> None:
    """The refusal names the node and is marked as final for the node (``node_refusal``)."""
    assert error.code() is grpc.StatusCode.PERMISSION_DENIED
    reason = node_refusal(error)
    assert reason is not None, f"not marked as the node's refusal: {error.details()}"
    assert reason.startswith(f"node {node.node_id} is decommissioned: ")
    assert "\n" not in reason


@pytest.mark.parametrize("method", list(CALLS))
async def test_a_decommissioned_nodes_certificate_is_refused(
    api: CuratorApi, curators, method: str
) -> None:
    node, other = await curators.enrol(1), await curators.enrol(2)
    await CALLS[method](api, node)  # served while UP
    await _decommissioned(api, node)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await CALLS[method](api, node)
    _assert_refused_for_good(caught.value, node)
    if method != "UpdateNodeClusterNetworking":  # which needs a status reported first
        await CALLS[method](api, other)  # another node is still served


async def test_a_decommissioned_nodes_status_update_changes_nothing(
    api: CuratorApi, curators
) -> None:
    node = await curators.enrol(1)
    await _decommissioned(api, node)
    with refused(grpc.StatusCode.PERMISSION_DENIED, "is decommissioned"):
        await _update_status(api, node)
    shown = await api.settled(lambda nodes: nodes[node.node_id].state == DECOMMISSIONED)
    assert shown[node.node_id].status.version != "after"


async def _read_to_the_end(watch: NodeWatch) -> None:
    """Read events until the stream fails (the decommission itself may come first)."""
    while True:
        await watch.next()


async def test_an_open_watch_of_a_node_ends_when_it_is_decommissioned(
    api: CuratorApi, curators
) -> None:
    node = await curators.enrol(1)
    async with api.watching(EVERY_NODE, node.credentials) as watch:
        await watch.snapshot()
        await api.decommission(node.node_id)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await _read_to_the_end(watch)
    _assert_refused_for_good(caught.value, node)


async def test_an_open_heartbeat_of_a_node_ends_when_it_is_decommissioned(
    api: CuratorApi, curators
) -> None:
    node = await curators.enrol(1)
    send, receive = anyio.create_memory_object_stream[curator_pb2.HeartbeatRequest](1)

    async def beats() -> AsyncIterator[curator_pb2.HeartbeatRequest]:
        async with receive:
            async for beat in receive:
                yield beat

    async with api.curator(_credentials(node)) as curator, send:
        call = curator.Heartbeat(beats())
        await send.send(curator_pb2.HeartbeatRequest(instance="one"))
        with anyio.fail_after(DEFAULT_TIMEOUT):
            assert isinstance(await call.read(), curator_pb2.HeartbeatResponse)
            await api.decommission(node.node_id)  # no beat follows: the stream must end
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await call.read()
    _assert_refused_for_good(caught.value, node)
