"""Worker ``rolefetch``: this node's roles, from the curator, saved for restarts.

Reads ``curator_connection`` and ``cluster_nodes``; writes ``roles``; keeps ``roles.pb`` in
the core's plugin directory (``D/plugins/core/roles.pb``).

::

    start:    roles.pb ─▶ roles   (so a consensus node restarts its control plane even
                                   when no curator answers: it may be the only one)
              corrupt file: reported and ignored, the curator's answer replaces it
    watcher:  on each curator connection: this node's record in cluster_nodes
                  ─▶ roles, when they change
                  └▶ roles.pb (0600)

The watcher is a child of its own (as in Monogon), so that a restart of it (a new leader)
does not read the saved roles again, and the roles do not flap.

Unlike Monogon's, it holds no Watch of its own: the node's record comes from the one Watch
of every node that ``nodewatch`` keeps (``_own_record``), so a node holds one stream on
the leader, not three. A role change reaches it through that stream as fast (one more hop
through a value; ``benchmarks/role_change.py``). It still starts over on each new
connection, as before: its record is then the new leader's once ``nodewatch`` has read the
new leader's backlog, and, until then, the last leader's, which it has already set.
"""

from __future__ import annotations

from pathlib import Path

import anyio
from google.protobuf.message import DecodeError

from roleserve_core.clusternodes import CLUSTER_NODES
from roleserve_core.connection.session import on_each_connection
from roleserve_core.errors import DataDirectoryError
from roleserve_core.files import write_atomically
from roleserve_core.node import NodeContext, Worker
from roleserve_core.proto import common_pb2
from roleserve_core.roles import NodeRoles, roles_from_proto, roles_to_proto
from roleserve_core.supervisor import RunContext
from roleserve_core.values import CURATOR_CONNECTION, ROLES, CuratorConnection
from roleserve_core.workers._own_record import follow_own_record

__all__ = ["ROLES_FILE", "load_saved_roles", "rolefetch_worker", "save_roles"]

ROLES_FILE = "roles.pb"


class SavedRolesError(DataDirectoryError, ValueError):
    """The saved roles cannot be read."""


def save_roles(path: Path, roles: NodeRoles) -> None:
    """Save ``roles`` at ``path`` (0600), creating its directory."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    write_atomically(path, roles_to_proto(roles).SerializeToString(), 0o600)


def load_saved_roles(path: Path) -> NodeRoles | None:
    """The roles saved at ``path``; None if there are none.

    :raises SavedRolesError: if the file cannot be read or parsed.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise SavedRolesError(f"{path} cannot be read: {exc.strerror}") from None
    try:
        return roles_from_proto(common_pb2.NodeRoles.FromString(data))
    except (DecodeError, ValueError) as exc:
        raise SavedRolesError(f"{path} is corrupt: {exc}") from None


def rolefetch_worker(node: NodeContext) -> Worker:
    """The worker, for the core's ``roleserve_workers``."""
    reads = (CURATOR_CONNECTION, CLUSTER_NODES)
    return Worker("rolefetch", RoleFetch(node).run, reads=reads)


class RoleFetch:
    """The worker's state: where the roles are saved, and what was set last."""

    def __init__(self, node: NodeContext) -> None:
        self.node = node
        self.path = node.data_dir / ROLES_FILE
        self.decommissioned = False
        """Whether the operator was told (once a process) that the node is decommissioned."""

    async def run(self, ctx: RunContext) -> None:
        """Sets the node's roles from the curator, and from disk until the curator answers."""
        try:
            saved = load_saved_roles(self.path)
        except SavedRolesError as exc:
            ctx.log.error("%s; ignoring it until the curator sends the roles", exc)
            saved = None
        if saved is not None:
            ctx.log.info("starting from the saved roles: %s", _names(saved))
            self.node.values.set(ROLES, saved)
        ctx.run("watcher", self.watch)
        ctx.signal_healthy()
        await anyio.sleep_forever()

    async def watch(self, ctx: RunContext) -> None:
        """Child ``watcher``: the node's roles from its record, on every connection."""

        async def session(connection: CuratorConnection) -> None:
            await self._follow(ctx, connection.node_id)

        await on_each_connection(ctx, self.node.values, session)

    async def _follow(self, ctx: RunContext, node_id: str) -> None:
        """Healthy once a whole view of the cluster's nodes came (this node's record in it,
        or none yet: a node not committed yet has none)."""
        healthy = False
        async for found in follow_own_record(self.node.values, node_id):
            if found is not None:
                self._received(ctx, roles_from_proto(found.roles))
                if found.state == common_pb2.NODE_STATE_DECOMMISSIONED:
                    self._decommissioned(ctx)
            if not healthy:
                healthy = True
                ctx.signal_healthy()

    def _received(self, ctx: RunContext, roles: NodeRoles) -> None:
        current = self.node.values.read(ROLES)
        if current.statistics().is_set and current.get_nowait() == roles:
            return
        ctx.log.info("roles: %s", _names(roles))
        self.node.values.set(ROLES, roles)
        try:
            save_roles(self.path, roles)
        except OSError as exc:
            ctx.log.error("cannot save the roles to %s: %s", self.path, exc.strerror)

    def _decommissioned(self, ctx: RunContext) -> None:
        """Say so: it has no roles, so no role workers. The leader ends this stream at once
        with its refusal of the node (``rpc.node_refusal``), which stops the node; this
        record may come first, or not at all."""
        ctx.set_note("this node is decommissioned")
        if not self.decommissioned:
            self.decommissioned = True
            ctx.log.warning(
                "this node is decommissioned: it holds no roles any more. Stop it and "
                "remove its data directory; to use the machine again, register it anew"
            )


def _names(roles: NodeRoles) -> str:
    return ", ".join(roles.names()) or "none"
