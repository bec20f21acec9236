"""Runnable ``reconcile`` (``root.role.clusternet.reconcile``): the whole interface,
read back, against what is wanted; and the status value.

Reads ``Mesh.wanted``, ``Mesh.address``, ``Mesh.announced``; writes the interface and
``clusternet_status``.

::

    every reconcile_interval, or at once when kicked (a batch of pull, failed or not):
      read (UAPI get=1) ─▶ private key, listen port, peers vs wanted ─▶ plan ─▶ configure
                        ─▶ address, and the route if it is gone (netlink: once every
                           reconcile_interval, kicks or not, and at once when pull failed
                           to set the address; not on every kick: ``Mesh.link_due``)
                        ─▶ read again ─▶ clusternet_status

So a peer removed by hand (``wg set IF peer KEY remove``), a peer added by hand, allowed
IPs changed by hand, a key or port changed by hand, all come back within one interval,
with one WARNING naming what differed; so do the address and the cluster network's route
(which the kernel drops with the interface's last IPv4 address: ``UapiInterface``).
Monogon never re-syncs its peers. A pass that fails fails the runnable: the supervisor
restarts it after its backoff, and the restart is the retry.
"""

from __future__ import annotations

from dataclasses import replace

import anyio

from roleserve_clusternet.device import DeviceState, short_key
from roleserve_clusternet.mesh import Mesh
from roleserve_clusternet.peers import plan
from roleserve_clusternet.values import CLUSTERNET_STATUS, ClusternetStatus, PeerStatus, key_text
from roleserve_core import PluginValues, RunContext

__all__ = ["reconcile", "status_of"]


async def reconcile(ctx: RunContext, values: PluginValues, mesh: Mesh) -> None:
    """See the module docstring."""
    healthy = False
    interval = mesh.settings.reconcile_interval
    link_check = anyio.current_time()  # a (re)started reconcile checks it all at once
    with mesh.kicks.watch() as kicks, mesh.wanted.watch() as wanted_values:
        await kicks.get()  # the current count: only later kicks count
        ctx.set_note("waiting for the peers (pull)")
        await wanted_values.get()
        ctx.set_note("")
        while True:
            if anyio.current_time() >= link_check:  # kicks or not: a cluster that churns
                mesh.link_due = True  # kicks more often than the interval
            if mesh.link_due:
                link_check = anyio.current_time() + interval
            await reconcile_once(ctx, values, mesh)
            if not healthy:
                healthy = True
                ctx.signal_healthy()
            with anyio.move_on_after(min(interval, link_check - anyio.current_time())):
                await kicks.get()


async def reconcile_once(ctx: RunContext, values: PluginValues, mesh: Mesh) -> None:
    """One pass; see the module docstring."""
    wanted = mesh.wanted.get_nowait()
    settings = mesh.settings
    async with mesh.lock:
        state = await mesh.device.read()
        change = plan({key: peer.config() for key, peer in state.peers.items()}, wanted.peers)
        differs = []
        if state.private_key != mesh.key.private:
            change = replace(change, private_key=mesh.key.private)
            differs.append("private key")
        if state.listen_port != settings.listen_port:
            change = type(change)(
                change.private_key, settings.listen_port, change.peers, change.remove
            )
            differs.append(f"listen port {state.listen_port}")
        if change:
            for peer in change.peers:
                name = wanted.nodes.get(peer.public_key, short_key(peer.public_key))
                differs.append(
                    f"peer {name} {'differed' if peer.public_key in state.peers else 'missing'}"
                )
            differs += [f"unknown peer {short_key(key)}" for key in change.remove]
            await mesh.device.configure(change)
            ctx.log.warning(
                "%s differed from the wanted state (%s); set again",
                mesh.device.name,
                ", ".join(differs),
            )
            state = await mesh.device.read()
        if mesh.link_due:
            mesh.link_due = False  # before the call: a kick(link=True) during it counts
            await mesh.device.set_address(
                mesh.address.get_nowait() if mesh.address.is_set() else None
            )
    values.set(CLUSTERNET_STATUS, status_of(mesh, state))


def status_of(mesh: Mesh, state: DeviceState) -> ClusternetStatus:
    """The status value for ``state`` as read back."""
    nodes = mesh.wanted.get_nowait().nodes if mesh.wanted.is_set() else {}
    peers = [
        PeerStatus(
            node_id=nodes.get(key, ""),
            public_key=key_text(key),
            endpoint=peer.endpoint,
            allowed_ips=tuple(str(network) for network in peer.allowed_ips),
            last_handshake=peer.last_handshake,
            rx_bytes=peer.rx_bytes,
            tx_bytes=peer.tx_bytes,
        )
        for key, peer in state.peers.items()
    ]
    return ClusternetStatus(
        interface=mesh.device.name,
        public_key=mesh.key.public_base64,
        listen_port=state.listen_port,
        prefixes=mesh.announced.get_nowait(),
        peers=tuple(sorted(peers, key=lambda p: (p.node_id, p.public_key))),
    )
