"""Worker ``statuspush``: tell the curator this node's address, version and curator.

Reads ``curator_connection``, ``network``, ``handled_custom_roles`` and, when the
controlplane plugin is loaded, ``local_control_plane``; writes nothing.

::

    network ──────────────┐
    local_control_plane ──┴─▶ node_status() ─ differs from the last one sent? ─▶
                                              UpdateNodeStatus (replaces the whole status)

On each new connection (a new leader) the worker starts over and sends the full status
again, as Monogon's does after its restart. Nothing is sent while the address is unknown.
``node_status`` is a plain function of the inputs, so the decision is tested without a
curator.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from roleserve_core.connection.session import on_each_connection
from roleserve_core.event import Combined
from roleserve_core.keys import (
    CURATOR_CONNECTION,
    HANDLED_CUSTOM_ROLES,
    LOCAL_CONTROL_PLANE,
    NETWORK,
    CuratorConnection,
    LocalControlPlane,
    NetworkStatus,
)
from roleserve_core.node import NodeContext, Worker
from roleserve_core.ports import CURATOR_PORT, split_endpoint
from roleserve_core.proto import common_pb2, curator_pb2, curator_pb2_grpc
from roleserve_core.supervisor import RunContext
from roleserve_core.version import core_version

__all__ = ["boot_id", "node_status", "statuspush_worker"]

BOOT_ID_PATH = Path("/proc/sys/kernel/random/boot_id")


def boot_id(path: Path = BOOT_ID_PATH) -> bytes | None:
    """The kernel's boot ID (16 bytes), or None if it cannot be read."""
    try:
        return uuid.UUID(path.read_text().strip()).bytes
    except (OSError, ValueError):
        return None


def node_status(
    network: NetworkStatus | None,
    control_plane: LocalControlPlane | None,
    version: str,
    boot: bytes | None,
    custom_roles: tuple[str, ...] = (),
) -> common_pb2.NodeStatus | None:
    """The status to report, or None while the node's address is unknown."""
    if network is None or network.external_address is None:
        return None
    status = common_pb2.NodeStatus(
        external_address=str(network.external_address),
        version=version,
        boot_id=boot or b"",
        handled_custom_roles=custom_roles,
    )
    if control_plane is not None and control_plane.curator_endpoint is not None:
        port = split_endpoint(control_plane.curator_endpoint, CURATOR_PORT)[1]
        status.running_curator.port = port
    return status


def statuspush_worker(node: NodeContext) -> Worker:
    """The worker, for the core's ``roleserve_workers``."""
    reads = (CURATOR_CONNECTION, NETWORK, HANDLED_CUSTOM_ROLES)
    return Worker("statuspush", StatusPush(node).run, reads=reads)


class StatusPush:
    """The worker: one session per curator connection."""

    def __init__(self, node: NodeContext) -> None:
        self.node = node
        self.boot = boot_id()

    async def run(self, ctx: RunContext) -> None:
        """Reports the node's address, version and running curator to the curator."""

        async def session(connection: CuratorConnection) -> None:
            await self._push(ctx, connection)

        await on_each_connection(ctx, self.node.values, session)

    async def _push(self, ctx: RunContext, connection: CuratorConnection) -> None:
        values = self.node.values
        sources: list[Any] = [values.read(NETWORK)]
        if LOCAL_CONTROL_PLANE in values:
            sources.append(values.read(LOCAL_CONTROL_PLANE))
        handled = values.read(HANDLED_CUSTOM_ROLES)  # set once, before any worker runs
        custom_roles = handled.get_nowait() if handled.statistics().is_set else ()
        stub = curator_pb2_grpc.CuratorStub(connection.channel)
        sent: common_pb2.NodeStatus | None = None
        ctx.signal_healthy()
        async with Combined(*sources) as inputs:
            while True:
                network, *rest = await inputs.get()
                control_plane = rest[0] if rest else None
                status = node_status(
                    network, control_plane, core_version(), self.boot, custom_roles
                )
                if status is None:
                    ctx.set_note("waiting for the node's address")
                    continue
                if status == sent:
                    continue
                request = curator_pb2.UpdateNodeStatusRequest(
                    node_id=connection.node_id, status=status
                )
                await stub.UpdateNodeStatus(request)
                sent = status
                ctx.set_note("")
                ctx.log.info(
                    "reported address %s%s",
                    status.external_address,
                    ", running a curator" if status.HasField("running_curator") else "",
                )
