"""Runnable ``push`` (``root.role.clusternet.push``): tell the curator this node's key and
prefixes.

Reads ``curator_connection``, ``node_id``, ``cluster_nodes`` (this node's own record, for
its ``cluster_prefix``) and, when the kubernetes plugin is loaded, ``pod_network``;
writes nothing but the curator's record of this node (and ``Mesh.announced``).

::

    own record's cluster_prefix ─▶ own_address ─┐
    pod_network (if owned) ─────────────────────┴─▶ announced() ─▶ changed since the last
        accepted? ─▶ UpdateNodeClusterNetworking{public key, prefixes}, retried with backoff
        (0.5 s doubling to 30 s, never giving up; at once with newer inputs) until the
        curator accepts

Nothing is sent before the curator has allocated the node a prefix: the node's address on
the mesh is in it, and its peers route the prefix to it. On each new connection (a new
leader) ``on_each_connection`` starts the runnable over and it sends again. Where
Monogon's push gives up after 15 minutes of backoff and restarts its group, this one keeps
trying: the supervisor's restart would only start the same retries over.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio
import grpc

from roleserve_clusternet.device import IPNetwork
from roleserve_clusternet.mesh import Mesh
from roleserve_clusternet.peers import announced, own_address
from roleserve_clusternet.pods import pod_network_key
from roleserve_core import (
    CLUSTER_NODES,
    NODE_ID,
    BackoffPolicy,
    ClusterNodes,
    Combined,
    CuratorConnection,
    PluginValues,
    Retry,
    RunContext,
    common_pb2,
    curator_pb2,
    curator_pb2_grpc,
    on_each_connection,
)

if TYPE_CHECKING:
    from roleserve_kubernetes import PodNetwork

__all__ = ["BACKOFF_INITIAL", "BACKOFF_MAX", "RETRIES", "WAITING_FOR_PREFIX", "push"]

BACKOFF_INITIAL = 0.5
BACKOFF_MAX = 30.0
RETRIES = BackoffPolicy(initial=BACKOFF_INITIAL, multiplier=2.0, maximum=BACKOFF_MAX, jitter=0.0)
"""The pauses before sending again what the curator refused: BACKOFF_INITIAL, doubling up
to BACKOFF_MAX."""
WAITING_FOR_PREFIX = "waiting for this node's cluster_prefix"


async def push(ctx: RunContext, values: PluginValues, mesh: Mesh) -> None:
    """See the module docstring."""
    with values.watch(NODE_ID) as ids:
        own_id = await ids.get()

    async def session(connection: CuratorConnection) -> None:
        curator: curator_pb2_grpc.CuratorAsyncStub = curator_pb2_grpc.CuratorStub(
            connection.channel
        )
        sent: common_pb2.NodeClusterNetworking | None = None
        healthy = False
        inputs: list[Any] = [values.read(CLUSTER_NODES)]
        if (pods_key := pod_network_key(values)) is not None:
            inputs.append(values.read(pods_key))
        async with Combined(*inputs) as changes:
            latest = await changes.get()
            pauses = Retry(RETRIES)
            while True:
                view, *rest = latest
                pods: PodNetwork | None = rest[0] if rest else None
                wanted = _wanted(ctx, mesh, view, own_id, pods)
                if wanted is not None and wanted != sent:
                    if not await _send(ctx, curator, wanted, pauses.delay):
                        # Again after the delay, or at once with newer inputs: a request
                        # the curator refuses for good must not hide a corrected one.
                        with anyio.move_on_after(pauses.next_delay()):
                            latest = await changes.get()
                        continue
                    sent = wanted
                    pauses.reset()
                    mesh.announced.set(tuple(wanted.prefixes))
                    mesh.kick()  # a reconcile pass publishes the status with them
                    if not healthy:
                        healthy = True
                        ctx.signal_healthy()
                latest = await changes.get()

    await on_each_connection(ctx, values, session)


def _wanted(
    ctx: RunContext, mesh: Mesh, view: ClusterNodes | None, own_id: str, pods: PodNetwork | None
) -> common_pb2.NodeClusterNetworking | None:
    if view is None or not view.backlogged:
        return None
    try:
        address = own_address(view.get(own_id))
    except ValueError:
        address = None  # pull reports it
    if address is None:
        ctx.set_note(WAITING_FOR_PREFIX)
        return None
    ctx.set_note("")
    prefixes: tuple[IPNetwork, ...] = pods.prefixes if pods is not None else ()
    return common_pb2.NodeClusterNetworking(
        wireguard_pubkey=mesh.key.public_base64, prefixes=announced(address, prefixes)
    )


async def _send(
    ctx: RunContext,
    curator: curator_pb2_grpc.CuratorAsyncStub,
    wanted: common_pb2.NodeClusterNetworking,
    delay: float,
) -> bool:
    """One ``UpdateNodeClusterNetworking``; whether the curator accepted it."""
    request = curator_pb2.UpdateNodeClusterNetworkingRequest(clusternet=wanted)
    try:
        await curator.UpdateNodeClusterNetworking(request)
    except grpc.aio.AioRpcError as exc:
        ctx.set_note(f"announcing: {exc.code().name}: {exc.details()}; again in {delay:g} s")
        ctx.log.warning(
            "the curator refused the key and prefixes (%s: %s); again in %g s",
            exc.code().name,
            exc.details(),
            delay,
        )
        return False
    ctx.set_note("")
    ctx.log.info(
        "announced key %s, prefixes %s", wanted.wireguard_pubkey, ", ".join(wanted.prefixes)
    )
    return True
