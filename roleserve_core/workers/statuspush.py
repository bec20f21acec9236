"""Worker ``statuspush``: tell the curator this node's address, version, curator and plugins.

Reads ``curator_connection``, ``network``, ``handled_custom_roles``, ``cluster_nodes``
and, when the controlplane plugin is loaded, ``local_control_plane``; writes nothing.

::

    network ──────────────┐
    local_control_plane ──┤
    PluginSet (states) ───┴─▶ node_status() ─┐
    cluster_nodes ──▶ the curator's record ───┴─ needs_report()? ─▶ UpdateNodeStatus
        of this node                                                (replaces the whole status)

It reports when the status differs from the last one sent, and also when the curator's
record of this node differs from it: another process with this node's identity may have
written it (the curator refuses such a process once this one's heartbeat stream holds the
node; see ``_identity``), or a restored etcd holds an older one, and the node must not
stay misreported until it restarts. The record comes from ``cluster_nodes``
(``_own_record``): the one Watch of every node that ``nodewatch`` keeps carries it, so
this worker holds no stream of its own on the leader, only its calls.

On each new connection (a new leader) the worker starts over, but what it sent last is
kept: the status goes to the new leader only if it changed, or if the new leader's record
differs (the comparison above, once its snapshot arrives; a record without a status counts
as differing). Monogon's worker sends the full status again after every restart: after a
failover at 100 local nodes, that was 99 writes to etcd, each a Watch event for 99
streams, while every node reconnected at once to a leader that had just started. Nothing
is sent while the address is unknown.
``node_status`` is a plain function of the inputs, so the decision is tested without a
curator.

The plugins' states (``plugin_statuses``) are read once per session: they are settled
before any worker runs (a plugin fails while it loads or while the node is assembled, or
the node refuses to start), so a failed plugin is visible from afar (``ctl nodes``, ``ctl
plugins NODE``) and not only in this node's log. What a plugin's worker does at run time is
the supervision tree's (``ctl tree``), not part of the status.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import anyio
import grpc

from roleserve_core.clusternodes import CLUSTER_NODES
from roleserve_core.connection.session import on_each_connection
from roleserve_core.event import Combined, Value
from roleserve_core.limits import (
    MAX_PLUGIN_ERROR_LENGTH,
    MAX_PLUGIN_NAME_LENGTH,
    MAX_PLUGIN_STATE_LENGTH,
    MAX_PLUGINS,
    MAX_VERSION_LENGTH,
)
from roleserve_core.node import NodeContext, NodePlugins, Worker
from roleserve_core.ports import CURATOR_PORT, split_endpoint
from roleserve_core.proto import common_pb2, curator_pb2, curator_pb2_grpc
from roleserve_core.registry import PluginValues
from roleserve_core.supervisor import RunContext
from roleserve_core.text import cut
from roleserve_core.values import (
    CURATOR_CONNECTION,
    HANDLED_CUSTOM_ROLES,
    LOCAL_CONTROL_PLANE,
    NETWORK,
    CuratorConnection,
    LocalControlPlane,
    NetworkStatus,
)
from roleserve_core.version import core_version
from roleserve_core.workers._identity import (
    CONFLICT_RETRY,
    PROCESS_INSTANCE,
    retry_while_refused,
    signal_healthy_once,
)
from roleserve_core.workers._own_record import follow_own_record

__all__ = ["boot_id", "needs_report", "node_status", "plugin_statuses", "statuspush_worker"]

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
    plugins: tuple[common_pb2.PluginStatus, ...] = (),
) -> common_pb2.NodeStatus | None:
    """The status to report, or None while the node's address is unknown."""
    if network is None or network.external_address is None:
        return None
    status = common_pb2.NodeStatus(
        external_address=str(network.external_address),
        version=cut(version, MAX_VERSION_LENGTH),
        boot_id=boot or b"",
        handled_custom_roles=custom_roles,
        plugins=plugins,
    )
    if control_plane is not None and control_plane.curator_endpoint is not None:
        port = split_endpoint(control_plane.curator_endpoint, CURATOR_PORT)[1]
        status.running_curator.port = port
    return status


def plugin_statuses(plugins: NodePlugins | None) -> tuple[common_pb2.PluginStatus, ...]:
    """Every plugin's name, version, state and error (or why it is blocked), in load
    order, within what the curator accepts (``MAX_PLUGINS``, each text cut to its limit
    in ``roleserve_core.limits``): the curator refuses a whole status with one field too
    long, so one plugin's long local version would stop the node reporting at all. None
    outside a ``NodeRuntime``."""
    if plugins is None:
        return ()
    return tuple(
        common_pb2.PluginStatus(
            name=cut(info.name, MAX_PLUGIN_NAME_LENGTH),
            version=cut(info.version or "", MAX_VERSION_LENGTH),
            state=cut(str(info.state), MAX_PLUGIN_STATE_LENGTH),
            error=cut(info.error or info.reason or "", MAX_PLUGIN_ERROR_LENGTH),
        )
        for info in plugins.infos()[:MAX_PLUGINS]
    )


def statuspush_worker(node: NodeContext) -> Worker:
    """The worker, for the core's ``roleserve_workers``."""
    reads = (CURATOR_CONNECTION, NETWORK, HANDLED_CUSTOM_ROLES, CLUSTER_NODES)
    return Worker("statuspush", StatusPush(node).run, reads=reads)


class StatusPush:
    """The worker: one session per curator connection."""

    def __init__(self, node: NodeContext) -> None:
        self.node = node
        self.boot = boot_id()
        self.sent: common_pb2.NodeStatus | None = None
        """The status last sent, to whichever leader (kept across connections)."""
        self.conflict_retry = CONFLICT_RETRY
        """Seconds between attempts while another process holds this node."""

    async def run(self, ctx: RunContext) -> None:
        """Reports the node's address, version and running curator to the curator."""
        healthy = signal_healthy_once(ctx)

        async def session(connection: CuratorConnection) -> None:
            await retry_while_refused(
                ctx, lambda: self._push(ctx, connection, healthy), self.conflict_retry
            )

        await on_each_connection(ctx, self.node.values, session)

    async def _push(
        self, ctx: RunContext, connection: CuratorConnection, healthy: Callable[[], None]
    ) -> None:
        """Report on ``connection``, comparing with the node's record as the leader keeps
        it, until a call fails."""
        stub = curator_pb2_grpc.CuratorStub(connection.channel)
        recorded: Value[common_pb2.NodeStatus] = Value()
        failure: grpc.aio.AioRpcError | None = None
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(_follow_record, self.node.values, connection.node_id, recorded)
            healthy()
            try:
                await self._report(ctx, stub, connection.node_id, recorded)
            except grpc.aio.AioRpcError as exc:  # raised here, it would come grouped
                failure = exc
            tasks.cancel_scope.cancel()
        if failure is not None:
            raise failure

    async def _report(
        self,
        ctx: RunContext,
        stub: curator_pb2_grpc.CuratorAsyncStub,
        node_id: str,
        recorded: Value[common_pb2.NodeStatus],
    ) -> NoReturn:
        """Report each status that needs it (``needs_report``); ends only by a failed call."""
        values = self.node.values
        sources: list[Any] = [recorded, values.read(NETWORK)]
        if LOCAL_CONTROL_PLANE in values:
            sources.append(values.read(LOCAL_CONTROL_PLANE))
        handled = values.read(HANDLED_CUSTOM_ROLES)  # set once, before any worker runs
        custom_roles = handled.get_nowait() if handled.statistics().is_set else ()
        introspection = self.node.introspection
        plugins = plugin_statuses(introspection.plugins if introspection else None)
        failure: grpc.aio.AioRpcError | None = None
        sent_here = False
        async with Combined(*sources) as inputs:
            while failure is None:
                record, network, *rest = await inputs.get()
                if sent_here and record == _NO_STATUS:
                    record = None  # from before this session's report: it had none yet
                control_plane = rest[0] if rest else None
                status = node_status(
                    network, control_plane, core_version(), self.boot, custom_roles, plugins
                )
                if status is None:
                    ctx.set_note("waiting for the node's address")
                    continue
                if not needs_report(status, self.sent, record):
                    continue
                try:
                    await self._send(ctx, stub, node_id, status, self.sent, record)
                    self.sent = status
                    sent_here = True
                except grpc.aio.AioRpcError as exc:  # raised in here, it would come grouped
                    failure = exc
        raise failure

    async def _send(
        self,
        ctx: RunContext,
        stub: curator_pb2_grpc.CuratorAsyncStub,
        node_id: str,
        status: common_pb2.NodeStatus,
        sent: common_pb2.NodeStatus | None,
        record: common_pb2.NodeStatus | None,
    ) -> None:
        if status == sent and record is not None:
            _log_record_difference(ctx, record, status)
        request = curator_pb2.UpdateNodeStatusRequest(
            node_id=node_id, status=status, instance=PROCESS_INSTANCE
        )
        await stub.UpdateNodeStatus(request)
        ctx.set_note("")
        ctx.log.info(
            "reported address %s%s",
            status.external_address,
            ", running a curator" if status.HasField("running_curator") else "",
        )


def _log_record_difference(
    ctx: RunContext, record: common_pb2.NodeStatus, sent: common_pb2.NodeStatus
) -> None:
    """Say how the curator's record differs from the report it should hold.

    A WARNING when the address differs: someone else wrote the record (a second process
    with this identity). Otherwise one INFO line: the record is most often this node's own
    from before a restart (a curator it ran then), read just after the new report went out.
    """
    fields = [
        field.name
        for field in common_pb2.NodeStatus.DESCRIPTOR.fields
        if field.name != "timestamp" and getattr(record, field.name) != getattr(sent, field.name)
    ]
    if "external_address" in fields:
        there = record.external_address or "none"
        ctx.log.warning(
            "the curator's record of this node differs from its last report in %s (address "
            "%s there, %s here); reporting again",
            ", ".join(fields),
            there,
            sent.external_address,
        )
    else:
        ctx.log.info(
            "the curator's record of this node differs from its last report in %s; reporting again",
            ", ".join(fields),
        )


def needs_report(
    status: common_pb2.NodeStatus,
    sent: common_pb2.NodeStatus | None,
    recorded: common_pb2.NodeStatus | None,
) -> bool:
    """Whether to send ``status``: it is not what was sent last, or the curator's record
    (``recorded``, its time stamp aside) no longer says what was sent.

    A record that differs from what was sent means someone else wrote it (another process
    with this identity, before the curator refused it) or it was lost; either way the node
    knows better. A record from before the last report may still arrive and cost one
    report more, never a loop: the record that follows says what was sent.
    """
    if status != sent:
        return True
    if recorded is None:
        return False
    unstamped = common_pb2.NodeStatus()
    unstamped.CopyFrom(recorded)
    unstamped.ClearField("timestamp")
    return unstamped != sent


_NO_STATUS = common_pb2.NodeStatus()
"""A record without a status, as ``_follow_record`` gives it."""


async def _follow_record(
    values: PluginValues, node_id: str, recorded: Value[common_pb2.NodeStatus]
) -> None:
    """Keep ``recorded`` at the curator's record of this node's status, as
    ``cluster_nodes`` shows it; a record without a status, as an empty status (one that
    differs from any sent: a leader whose store lost it is told again)."""
    async for node in follow_own_record(values, node_id):
        if node is not None:
            recorded.set(node.status if node.HasField("status") else common_pb2.NodeStatus())
