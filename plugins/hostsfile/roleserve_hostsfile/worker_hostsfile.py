"""Worker ``hostsfile``: every node's ID resolves to its address through the hosts file.

Reads ``node_id``, ``cluster_nodes`` and ``network``; writes no value, but files: the
managed block of the hosts file (``[plugins.hostsfile] path``, default ``/etc/hosts``),
and, when switched on, the hostname and a machine ID file. Runs always (``when=None``):
name resolution is every node's, whatever its roles.

::

    node_id ─▶ hostname = node ID (if ``hostname``), machine ID file (if ``machine_id``)
    cluster_nodes (whole views only) ─┐
    network (own address) ────────────┴─▶ fold_addresses ─▶ render_block
                                              ─▶ update_hosts_file (in a thread) ─▶ healthy

It writes nothing before the first whole view (``backlogged``), so a partial map never
replaces a good block; it writes nothing when the file would not change; it reads the file
again before each write, so an edit outside the block made in between is kept. A view that
leaves the block as the last update made it, on a file that has not changed since (its
inode, size and modification time), is not read again: while a cluster forms, each node
sees hundreds of views, most of them changes of a node's state, which the block does not
show. Which nodes the block lists (vanished ones kept, decommissioned ones removed) is
``block``'s to say.

Where the original (Monogon) serves these names over DNS, we write a hosts file: every
resolver on the machine reads it (``files`` comes first in nsswitch.conf), with no server
to run or to reach. The addresses it keeps are in memory only: a restarted worker starts
from the cluster's next whole view, so a node that vanished before the restart is gone.
Any failure (a file that cannot be written, a hostname refused) is the worker's error:
DEAD with one line naming the file and the reason, then a restart after the backoff.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from pathlib import Path

import anyio
import anyio.to_thread

from roleserve_core import (
    CLUSTER_NODES,
    NETWORK,
    NODE_ID,
    ClusterNodes,
    Combined,
    NetworkStatus,
    NodeContext,
    PluginValues,
    RunContext,
)
from roleserve_hostsfile.block import Addresses, Skipped, fold_addresses, render_block
from roleserve_hostsfile.errors import HostnameError
from roleserve_hostsfile.files import update_hosts_file, write_if_changed
from roleserve_hostsfile.settings import HostsfileSettings

__all__ = ["MACHINE_ID_FILE", "WAITING_FOR_ID", "WAITING_FOR_NODES", "run"]

WAITING_FOR_ID = "waiting for the node ID"
WAITING_FOR_NODES = "waiting for the cluster's nodes (cluster_nodes)"
MACHINE_ID_FILE = "machine ID file"
"""How errors name the ``machine_id`` file."""


async def run(ctx: RunContext, node: NodeContext, settings: HostsfileSettings) -> None:
    """The worker (see the module docstring), which the hooks name with ``lazy_runnable``."""
    await HostsFileKeeper(ctx, node.values, settings).run()


class HostsFileKeeper:
    """One run of the worker: its addresses and what it already logged start empty."""

    def __init__(self, ctx: RunContext, values: PluginValues, settings: HostsfileSettings) -> None:
        self.ctx = ctx
        self.values = values
        self.settings = settings
        self.addresses: Addresses = {}
        self.reported: set[Skipped] = set()
        """Every skipped node already logged: one line per distinct bad value, not per view."""
        self.left: tuple[bytes, tuple[int, int, int]] | None = None
        """The block the last update left in the file, and the file's stamp then."""

    async def run(self) -> None:
        node_id = await self._node_id()
        await anyio.to_thread.run_sync(self._set_identity, node_id)
        self.ctx.set_note(WAITING_FOR_NODES)
        inputs = (self.values.read(CLUSTER_NODES), self.values.read(NETWORK))
        healthy = False
        async with Combined(*inputs) as changes:
            while True:
                view, network = await changes.get()
                if view is None or not view.backlogged:
                    continue  # never a partial map: wait for a whole one
                await self._update(node_id, view, network)
                if not healthy:
                    self.ctx.set_note("")
                    self.ctx.signal_healthy()
                    healthy = True

    async def _node_id(self) -> str:
        with self.values.watch(NODE_ID) as ids:
            if not self.values.read(NODE_ID).statistics().is_set:
                self.ctx.set_note(WAITING_FOR_ID)
            return await ids.get()

    async def _update(
        self, node_id: str, view: ClusterNodes, network: NetworkStatus | None
    ) -> None:
        own = network.external_address if network is not None else None
        fold = fold_addresses(self.addresses, view, node_id, own)
        self._report(fold.skipped)
        self.addresses = fold.addresses
        path = self.settings.path
        block = render_block(fold.addresses)
        if self.left is not None and self.left == (block, _stamp(path)):
            return
        written = await anyio.to_thread.run_sync(update_hosts_file, path, block)
        self.left = (block, _stamp(path))
        if written:
            self.ctx.log.info("wrote %s: %s", path, _listing(fold.addresses))

    def _report(self, skipped: tuple[Skipped, ...]) -> None:
        for entry in skipped:
            if entry not in self.reported:
                self.reported.add(entry)
                self.ctx.log.warning("hosts file: skipped node %s", entry)

    def _set_identity(self, node_id: str) -> None:
        """The hostname and the machine ID file, if switched on (in a worker thread)."""
        if self.settings.hostname and socket.gethostname() != node_id:
            try:
                socket.sethostname(node_id)
            except OSError as exc:
                raise HostnameError(
                    f"cannot set the hostname to {node_id}: {exc.strerror or exc}"
                ) from exc
            self.ctx.log.info("hostname set to %s", node_id)
        machine_id = self.settings.machine_id
        if machine_id is not None:
            data = f"{node_id}\n".encode()
            if write_if_changed(machine_id, data, MACHINE_ID_FILE, mode=0o644):
                self.ctx.log.info("wrote the node ID to %s", machine_id)


def _listing(addresses: Mapping[str, object]) -> str:
    count = len(addresses)
    return f"{count} node{'s' if count != 1 else ''} in its block"


def _stamp(path: Path) -> tuple[int, int, int]:
    """What tells a file changed without reading it: inode (a file replaced, as by another
    tool's rewrite), size and modification time; nothing matches a file that is gone."""
    try:
        found = os.stat(path)
    except OSError:
        return (-1, -1, -1)
    return (found.st_ino, found.st_size, found.st_mtime_ns)
