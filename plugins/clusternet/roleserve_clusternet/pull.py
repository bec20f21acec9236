"""Runnable ``pull`` (``root.role.clusternet.pull``): the other nodes as peers.

Reads ``node_id`` and ``cluster_nodes`` (whole views only); writes the interface's peers
and address, and ``Mesh.wanted``/``Mesh.address`` for reconcile.

::

    cluster_nodes ─▶ wanted_peers (skipped nodes: one WARNING per distinct reason)
                  ─▶ plan(applied, wanted) ─▶ configure (one UAPI request per view: a batch)
                                               ├─ ok: applied = wanted, reconcile
                                               │   kicked (reads it back into the status)
                                               └─ failed: applied kept (the next view
                                                  retries the difference), reconcile kicked
    own record's cluster_prefix ─▶ own_address ─▶ set_address

Where Monogon's pull only logs a failed batch and never applies it again (and never
re-syncs the peers), this one compares with what it last applied, so whatever failed is in
the next change, and reconcile retries it at once against what the interface really holds.
"""

from __future__ import annotations

from collections.abc import Mapping

from roleserve_clusternet.device import DeviceChange, IPInterface, PeerConfig, short_key
from roleserve_clusternet.errors import ClusternetError
from roleserve_clusternet.mesh import Mesh
from roleserve_clusternet.peers import Skipped, own_address, plan, wanted_peers
from roleserve_core import CLUSTER_NODES, NODE_ID, ClusterNodes, PluginValues, RunContext

__all__ = ["WAITING_FOR_NODES", "pull"]

WAITING_FOR_NODES = "waiting for the cluster's nodes (cluster_nodes)"


async def pull(ctx: RunContext, values: PluginValues, mesh: Mesh) -> None:
    """See the module docstring."""
    await Puller(ctx, values, mesh).run()


class Puller:
    """One run of ``pull``: what it applied and what it reported start empty."""

    def __init__(self, ctx: RunContext, values: PluginValues, mesh: Mesh) -> None:
        self.ctx = ctx
        self.values = values
        self.mesh = mesh
        self.applied: Mapping[bytes, PeerConfig] = {}
        self.address: IPInterface | None = None
        self.address_applied = False
        self.reported: set[Skipped] = set()
        """Every skipped node already logged: one line per distinct bad value, not per view."""
        self.nodes: dict[bytes, str] = {}
        """Every key → node ID seen, to name a removed peer."""

    async def run(self) -> None:
        with self.values.watch(NODE_ID) as ids:
            own_id = await ids.get()
        self.ctx.set_note(WAITING_FOR_NODES)
        healthy = False
        with self.values.watch(CLUSTER_NODES) as views:
            async for view in views:
                if not view.backlogged:
                    continue
                await self.update(view, own_id)
                if not healthy:
                    healthy = True
                    self.ctx.set_note("")
                    self.ctx.signal_healthy()

    async def update(self, view: ClusterNodes, own_id: str) -> None:
        settings = self.mesh.settings
        wanted = wanted_peers(
            view,
            own_id,
            self.mesh.key.public,
            port=settings.listen_port,
            keepalive=settings.keepalive,
        )
        address = self._own_address(view, own_id)
        self._report(wanted.skipped)
        self.nodes.update(wanted.nodes)
        self.mesh.wanted.set(wanted)
        self.mesh.address.set(address)
        async with self.mesh.lock:
            change = plan(self.applied, wanted.peers)
            if change:
                try:
                    await self.mesh.device.configure(change)
                except ClusternetError as exc:
                    self.ctx.log.warning("peers not updated, retrying: %s", exc)
                    self.mesh.kick()
                else:
                    self.applied = wanted.peers
                    self.ctx.log.info("peers: %s", _describe(change, self.nodes))
                    self.mesh.kick()  # reconcile reads it back: clusternet_status shows it
            if address != self.address or not self.address_applied:
                try:
                    await self.mesh.device.set_address(address)
                except ClusternetError as exc:
                    self.ctx.log.warning("address not set, retrying: %s", exc)
                    self.address_applied = False
                    self.mesh.kick(link=True)
                else:
                    self.address_applied = True
                self.address = address

    def _own_address(self, view: ClusterNodes, own_id: str) -> IPInterface | None:
        record = view.get(own_id)
        try:
            return own_address(record)
        except ValueError:
            assert record is not None
            self._report(
                (
                    Skipped(
                        own_id, f"a cluster prefix that does not parse: {record.cluster_prefix!r}"
                    ),
                )
            )
            return None

    def _report(self, skipped: tuple[Skipped, ...]) -> None:
        for entry in skipped:
            if entry not in self.reported:
                self.reported.add(entry)
                self.ctx.log.warning("skipped node %s", entry)


def _describe(change: DeviceChange, nodes: Mapping[bytes, str]) -> str:
    """``set node-a, removed node-b`` (a key's first characters for a peer no node claims)."""
    parts = [f"set {nodes.get(p.public_key, short_key(p.public_key))}" for p in change.peers]
    parts += [f"removed {nodes.get(key, short_key(key))}" for key in change.remove]
    return ", ".join(parts)
