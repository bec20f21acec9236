"""Runnable ``pod_network`` (``root.role.kubernetes_worker.pod_network``): this node's pod
prefix, as the value ``pod_network`` and as the CNI configuration.

Reads ``node_id`` and ``cluster_nodes`` (this node's own record, for its
``cluster_prefix``); writes ``pod_network`` and ``<data_dir>/cni/net.d``.

::

    own record's cluster_prefix (e.g. 10.192.3.0/24, allocated by the curator)
        ──pod_prefix──▶ its upper half (10.192.3.128/25)
        ──▶ pod_network = PodNetwork((10.192.3.128/25,))      (clusternet announces it)
        ──▶ cni_conflist(prefix, bridge_name(node ID)) written (containerd reloads it)
    role removed (runnable cancelled): pod_network = PodNetwork(()) — no pods, nothing to
        announce

Why a half, not the whole prefix: clusternet gives the mesh interface the prefix's first
host address (10.192.3.1/32) and announces the whole prefix's first address. Pods in the
lower half would take that address (host-local starts at .2, but the bridge's gateway
would be .1, the mesh's own). The upper half is the pods' alone: the bridge holds its
first address (.129) as the pods' gateway, pods get .130 to .254, and the node's mesh
address stays out of every pod range. A prefix too small to split (longer than /29, or
/125 for IPv6) leaves ``pod_network`` unset, with the reason as the runnable's note.
"""

from __future__ import annotations

import ipaddress

import anyio.to_thread

from roleserve_core import CLUSTER_NODES, NODE_ID, ClusterNodes, PluginValues, RunContext
from roleserve_kubernetes.cni import IPNetwork, bridge_name, cni_conflist, write_cni_config
from roleserve_kubernetes.errors import PodNetworkError
from roleserve_kubernetes.layout import WorkerLayout
from roleserve_kubernetes.values import POD_NETWORK, PodNetwork

__all__ = ["WAITING_FOR_PREFIX", "pod_network", "pod_prefix"]

WAITING_FOR_PREFIX = "waiting for this node's cluster_prefix (allocated by the curator)"

SPLIT_BITS = 3
"""A prefix of at least 2**3 addresses: its upper half (4) holds the network address, the
bridge's gateway, one pod and the broadcast address."""


def pod_prefix(cluster_prefix: str) -> IPNetwork:
    """The pods' part of the node's prefix: its upper half (see the module docstring).

    :raises PodNetworkError: a prefix that does not parse or is too small to split.
    """
    try:
        network = ipaddress.ip_network(cluster_prefix)
    except ValueError:
        raise PodNetworkError(
            f"this node's cluster_prefix {cluster_prefix!r} is not a network; "
            "the curator's record of the node is corrupt"
        ) from None
    if network.prefixlen > network.max_prefixlen - SPLIT_BITS:
        raise PodNetworkError(
            f"this node's cluster_prefix {network} is too small for pods (its upper half "
            "must hold a gateway and a pod); give the cluster network /29 or larger per node"
        )
    _lower, upper = network.subnets(prefixlen_diff=1)
    return upper


async def pod_network(ctx: RunContext, values: PluginValues, layout: WorkerLayout) -> None:
    """Keeps ``pod_network`` and the CNI configuration to this node's prefix."""
    with values.watch(NODE_ID) as ids:
        node_id = await ids.get()
    bridge = bridge_name(node_id)
    ctx.set_note(WAITING_FOR_PREFIX)
    healthy = False
    current: IPNetwork | None = None
    reported: set[str] = set()
    try:
        with values.watch(CLUSTER_NODES) as views:
            async for view in views:
                prefix = _own_prefix(ctx, view, node_id, reported)
                if prefix is not None and prefix != current:
                    text = cni_conflist(prefix, bridge, layout.ipam_dir)
                    await anyio.to_thread.run_sync(write_cni_config, layout.cni_config, text)
                    values.set(POD_NETWORK, PodNetwork((prefix,)))
                    ctx.log.info("pod network %s on bridge %s", prefix, bridge)
                    ctx.set_note(f"pods in {prefix}, bridge {bridge}")
                    current = prefix
                if current is not None and not healthy:
                    healthy = True
                    ctx.signal_healthy()
    finally:
        values.set(POD_NETWORK, PodNetwork(()))


def _own_prefix(
    ctx: RunContext, view: ClusterNodes, node_id: str, reported: set[str]
) -> IPNetwork | None:
    """The pod prefix of this node's record in ``view``; None (and a note) without one.
    A bad prefix is logged once (``reported``), not at every view."""
    if not view.backlogged:
        return None
    record = view.get(node_id)
    if record is None or not record.cluster_prefix:
        return None
    try:
        return pod_prefix(record.cluster_prefix)
    except PodNetworkError as exc:
        ctx.set_note(str(exc))
        if str(exc) not in reported:
            reported.add(str(exc))
            ctx.log.error("%s", exc)
        return None
