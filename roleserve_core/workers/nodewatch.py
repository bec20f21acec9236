"""Worker ``nodewatch``: keeps ``cluster_nodes`` from ONE Watch of every node.

Reads ``curator_connection``; writes ``cluster_nodes``; runs its Watch only while some
runnable actively reads ``cluster_nodes`` (``ValueRegistry.reading``: a running worker that
declares the key in ``reads``, or the node's own curator connection, which learns the
curators from it). On a node, the core's ``rolefetch`` and ``statuspush`` read it too: they
take the node's own record from it (``_own_record``), so this Watch is the only one a
node holds on the leader, whatever its plugins (one stream per node: 10,000 at 10,000
nodes, where a Watch of the node itself for each of the two made three per node). A test
harness without them, whose plugins never read it, holds no stream for it.

::

    wait until someone reads ─▶ Watch(NodesInCluster) on the current connection
                                  │ backlog ─▶ set cluster_nodes (whole, backlogged)
                                  │ each later event ─▶ set cluster_nodes
    nobody reads any more ─▶ set the same nodes, marked stale ─▶ restart: wait again
    a new connection (leader change) ─▶ restart: fresh Watch; the old view stays until
                                        the fresh backlog replaces it whole

A reader therefore never sees an empty or partial map in between: one consistent change
per batch, also across a leader change.
"""

from __future__ import annotations

import anyio

from roleserve_core.clusternodes import NodeWatchFold
from roleserve_core.connection.session import on_each_connection
from roleserve_core.event import Watcher
from roleserve_core.node import NodeContext, Worker
from roleserve_core.proto import curator_pb2, curator_pb2_grpc
from roleserve_core.registry import PluginValues
from roleserve_core.supervisor import RunContext
from roleserve_core.values import CLUSTER_NODES, CURATOR_CONNECTION, CuratorConnection

__all__ = ["IDLE_NOTE", "nodewatch_worker"]

IDLE_NOTE = "idle: no running worker reads cluster_nodes"


def nodewatch_worker(node: NodeContext) -> Worker:
    """The worker; see the module docstring."""

    async def nodewatch(ctx: RunContext) -> None:
        """Keeps cluster_nodes from one Watch of every node, while anyone reads it."""
        with node.values.active_readers(CLUSTER_NODES).watch() as readers:
            if not (await readers.get()):
                ctx.set_note(IDLE_NOTE)
                await readers.get(filter=bool)
                ctx.set_note("")
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(_stop_when_unread, ctx, node.values, readers)
                await on_each_connection(ctx, node.values, _WatchSession(ctx, node.values))

    return Worker("nodewatch", nodewatch, reads=(CURATOR_CONNECTION,))


async def _stop_when_unread(
    ctx: RunContext, values: PluginValues, readers: Watcher[frozenset[str]]
) -> None:
    """Once nobody reads: leave the last view marked stale, and go back to waiting."""
    await readers.get(filter=lambda active: not active)
    view = values.read(CLUSTER_NODES)
    if view.statistics().is_set and view.get_nowait().backlogged:
        values.set(CLUSTER_NODES, view.get_nowait().stale())
    ctx.log.info("nobody reads cluster_nodes any more; closing the Watch")
    ctx.restart()


class _WatchSession:
    """One Watch of every node on one connection, published into ``cluster_nodes``."""

    def __init__(self, ctx: RunContext, values: PluginValues) -> None:
        self.ctx = ctx
        self.values = values

    async def __call__(self, connection: CuratorConnection) -> None:
        curator = curator_pb2_grpc.CuratorStub(connection.channel)
        every_node = curator_pb2.WatchRequest.NodesInCluster()
        fold = NodeWatchFold()
        async for event in curator.Watch(curator_pb2.WatchRequest(nodes_in_cluster=every_node)):
            was_backlogged = fold.backlogged
            if not fold.apply(event):
                continue
            self.values.set(CLUSTER_NODES, fold.view())
            if not was_backlogged:
                self.ctx.log.info(
                    "%d nodes, from %s; following their changes",
                    len(fold.nodes),
                    connection.leader_node_id,
                )
                self.ctx.signal_healthy()
