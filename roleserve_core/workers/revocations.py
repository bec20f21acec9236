"""Worker ``revocations``: keeps ``revoked_credentials`` from the leader's
``WatchRevokedCredentials``, so that this node's management server refuses revoked users.

Reads ``curator_connection``; writes ``revoked_credentials``.

::

    each connection (leader) ─▶ WatchRevokedCredentials ─▶ the whole set at once, then again
                                 │                          at each revocation
                                 └─▶ set revoked_credentials ─▶ nodemgmt's interceptor
                                     refuses those serials on each call

Why a stream of the whole set, and not a poll or a field of ``Watch``: revocations are rare
and the set is small, so resending it whole keeps the node's view simple (no deltas to
lose across a leader change), and a stream delivers a revocation at once rather than at
the next poll. ``Watch`` carries node records; mixing another kind of record into it
would make every reader of node events skip them.

The worker is HEALTHY from the leader's first answer on, whether that set is new to the node
or the one it already had (a restart on a new connection gets the same set again): it
signals so once per run, and each later revocation only changes the value.

A node that cannot reach the leader keeps the set it last had (a node without a leader is
when its logs are needed most, so nodemgmt does not wait for this worker either): a
revocation reaches it once it is connected again.
"""

from __future__ import annotations

from roleserve_core.connection.session import on_each_connection
from roleserve_core.node import NodeContext, Worker
from roleserve_core.proto import curator_pb2, curator_pb2_grpc
from roleserve_core.registry import PluginValues
from roleserve_core.supervisor import RunContext
from roleserve_core.values import (
    CURATOR_CONNECTION,
    REVOKED_CREDENTIALS,
    CuratorConnection,
    RevokedCredentials,
)

__all__ = ["revocations_worker"]


def revocations_worker(node: NodeContext) -> Worker:
    """The worker; see the module docstring."""

    async def revocations(ctx: RunContext) -> None:
        """Keeps revoked_credentials from the leader, for the node management server."""
        await on_each_connection(ctx, node.values, _Follow(ctx, node.values))

    return Worker("revocations", revocations, reads=(CURATOR_CONNECTION,))


class _Follow:
    """One WatchRevokedCredentials on one connection, published into the value."""

    def __init__(self, ctx: RunContext, values: PluginValues) -> None:
        self.ctx = ctx
        self.values = values
        self.answered = False
        """Whether the leader answered in this run (the runnable signalled healthy)."""

    async def __call__(self, connection: CuratorConnection) -> None:
        curator = curator_pb2_grpc.CuratorStub(connection.channel)
        request = curator_pb2.WatchRevokedCredentialsRequest()
        async for answer in curator.WatchRevokedCredentials(request):
            serials = frozenset(int(serial, 16) for serial in answer.serials)
            self._publish(serials, connection)
            if not self.answered:
                self.answered = True
                self.ctx.signal_healthy()

    def _publish(self, serials: frozenset[int], connection: CuratorConnection) -> None:
        """Set the value to ``serials`` unless it holds them already."""
        previous = self.values.read(REVOKED_CREDENTIALS)
        if previous.statistics().is_set and previous.get_nowait().serials == serials:
            return
        self.values.set(REVOKED_CREDENTIALS, RevokedCredentials(serials))
        self.ctx.log.info(
            "%d revoked user certificates, from %s", len(serials), connection.leader_node_id
        )
