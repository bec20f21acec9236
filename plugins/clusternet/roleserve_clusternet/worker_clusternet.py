"""Worker ``clusternet`` (``root.role.clusternet``): the WireGuard mesh between nodes.

Reads (itself and through its runnables) ``node_id``, ``cluster_nodes``,
``curator_connection`` and, when the kubernetes plugin is loaded, ``pod_network``; writes
``clusternet_status``, the interface, and the key file in the plugin's data directory.
Runs always (``when=None``): the mesh is every node's, whatever its roles. With
``[plugins.clusternet] off`` set (``roleserve cluster up`` sets it on a loopback cluster,
whose nodes share one network namespace), it runs nothing and reads nothing, and stays
NEW with the note ``off: <reason>``: absent from ``ctl tree`` it would look forgotten,
HEALTHY it would claim a mesh that is not there.

::

    clusternet (this file: setup)
    ├── key: <data_dir>/private.key, made once (privatekey)
    ├── interface: wireguard-go -f IFNAME under the program runner (interface), private key
    │   and listen port over UAPI, MTU, up, route of the cluster network (link)
    ├── push        key + prefixes ─▶ curator (push)
    ├── pull        cluster_nodes ─▶ peers, own address (pull)
    └── reconcile   interface read back vs wanted, every interval ─▶ clusternet_status
                    (reconcile)

Nothing is made before the node has an ID: a node that is in no cluster yet has no mesh
to join. If wireguard-go exits, the worker fails (``ProgramExitedError``, its last lines): its
runnables stop with it, and the supervisor's restart makes the interface again and
configures it from scratch. A child that fails restarts alone. No permission to make the
interface, or a corrupt key file, is final: one line, and the worker stays DEAD until the
operator acts. The runnables share the per-run state in ``Mesh``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import anyio.to_thread

from roleserve_clusternet import link
from roleserve_clusternet.device import DeviceChange, MeshInterface
from roleserve_clusternet.interface import InterfaceSpec, open_interface
from roleserve_clusternet.mesh import Mesh
from roleserve_clusternet.privatekey import WireGuardKey, load_or_create_key
from roleserve_clusternet.pull import pull
from roleserve_clusternet.push import push
from roleserve_clusternet.reconcile import reconcile
from roleserve_clusternet.settings import ClusternetSettings
from roleserve_clusternet.values import CLUSTERNET_STATUS, ClusternetStatus
from roleserve_core import (
    NODE_ID,
    NodeContext,
    PluginValues,
    RunContext,
    Runnable,
)

__all__ = ["RUNNABLES", "WAITING_FOR_ID", "run", "run_mesh"]

WAITING_FOR_ID = "waiting for the node ID (enrolment)"

RUNNABLES = ("push", "pull", "reconcile")
"""The runnables the worker starts, by name, in its order."""

Child = Callable[[RunContext, PluginValues, Mesh], Awaitable[None]]
CHILDREN: dict[str, Child] = {"push": push, "pull": pull, "reconcile": reconcile}


async def run(
    ctx: RunContext,
    node: NodeContext,
    settings: ClusternetSettings,
    *,
    netns: str | None = None,
    device: MeshInterface | None = None,
    children: tuple[str, ...] = RUNNABLES,
) -> None:
    """The worker (see the module docstring), which the hooks name with ``lazy_runnable``
    (``hooks.clusternet_worker``); not run while ``[plugins.clusternet] off`` is set.

    For tests: ``netns``, a network namespace to make the interface in; ``device``, an
    interface to use instead of making one (a ``MemoryInterface``: no wireguard-go, no
    netlink); ``children``, the runnables to start (a test of one leaves out another).
    """
    spec = InterfaceSpec(
        name=settings.interface,
        mtu=settings.mtu,
        route=settings.cluster_network,
        state_dir=node.data_dir,
        wireguard_go=settings.wireguard_go,
        netns=netns,
    )
    await run_mesh(
        ctx, node.values, node.data_dir, settings, spec, device=device, children=children
    )


async def run_mesh(
    ctx: RunContext,
    values: PluginValues,
    data_dir: Path,
    settings: ClusternetSettings,
    spec: InterfaceSpec,
    *,
    children: tuple[str, ...] = RUNNABLES,
    device: MeshInterface | None = None,
) -> None:
    """One run of the worker: key, interface, runnables; see the module docstring.

    :param children: the runnables to start (a test of the interface alone starts fewer).
    :param device: an interface to use instead of making one (tests).
    """
    try:
        with values.watch(NODE_ID) as ids:
            if not values.read(NODE_ID).statistics().is_set:
                ctx.set_note(WAITING_FOR_ID)
            await ids.get()  # a node in no cluster makes no interface and no key
        key = await anyio.to_thread.run_sync(load_or_create_key, data_dir)
        if device is not None:
            await configure_device(device, key, settings)
            start_children(ctx, values, Mesh(device, key, settings), children)
            ctx.signal_healthy()
            await anyio.sleep_forever()
        ctx.set_note(f"starting {spec.name}")
        async with open_interface(ctx.log, spec) as (device, program):
            await configure_device(device, key, settings)
            await link.set_up(spec.name, spec.mtu, spec.route, spec.netns)
            ctx.log.info(
                "%s up: public key %s, UDP %d, route %s",
                spec.name,
                key.public_base64,
                settings.listen_port,
                spec.route,
            )
            start_children(ctx, values, Mesh(device, key, settings), children)
            ctx.set_note(f"wireguard-go pid {program.pid}")
            ctx.signal_healthy()
            await program.wait()
    finally:
        values.set(CLUSTERNET_STATUS, ClusternetStatus.NONE)


async def configure_device(
    device: MeshInterface, key: WireGuardKey, settings: ClusternetSettings
) -> None:
    """The device's own part: private key and listen port."""
    await device.configure(DeviceChange(private_key=key.private, listen_port=settings.listen_port))


def start_children(
    ctx: RunContext, values: PluginValues, mesh: Mesh, names: tuple[str, ...] = RUNNABLES
) -> None:
    """Start the runnables ``names`` on ``mesh``, each in a group of its own."""
    for name in names:
        ctx.run(name, _bind(CHILDREN[name], values, mesh))


def _bind(child: Child, values: PluginValues, mesh: Mesh) -> Runnable:
    async def run(ctx: RunContext) -> None:
        await child(ctx, values, mesh)

    return run
