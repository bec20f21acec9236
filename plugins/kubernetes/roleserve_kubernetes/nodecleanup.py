"""The runnable ``node_cleanup`` of the controller worker: a decommissioned node's Node
object goes from Kubernetes, as in Monogon, where the Node of a node that left the cluster
does not linger NotReady for ever.

::

    after_apiserver: the local kube-apiserver answers /readyz
    cluster_nodes (whole views only) ──┐
    or RECHECK seconds without one ────┴─▶ KubeAPI.node_names() (one list)
                                              │ decommissioned(names, view): the Nodes named
                                              │ after a node the view says DECOMMISSIONED
                                              ▼
                                          KubeAPI.delete_node(each): 404 is someone else's
                                          delete (another controller's), not a failure
    HEALTHY after the first pass; a failed call is a KubeAPIError: retried after the backoff

Who: every controller, through its own apiserver, with the PKI's ``admin`` client
certificate (``system:masters``; the controller holds the whole PKI, its CA key included,
so the certificate gives it nothing it lacks). Deleting is idempotent, so three controllers
doing it need no election: the first delete wins, the others meet 404. The recheck catches a
Node that a kubelet still running on the decommissioned node registered after the delete.

Why only DECOMMISSIONED, and not every Node missing from ``cluster_nodes``: decommissioning
is final (the node can never join again), while a view may lag behind a node that enrols
and registers its Node at once; deleting that Node would take a live node out of
Kubernetes. A Node not named after a roleserve node (made by hand) is never touched.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import anyio

from roleserve_core import (
    CLUSTER_NODES,
    ClusterNodes,
    PluginValues,
    RunContext,
    Runnable,
    common_pb2,
    write_atomically,
)
from roleserve_kubernetes.apiserver import after_apiserver
from roleserve_kubernetes.kubeapi import KubeAPI
from roleserve_kubernetes.plans import KEY_MODE, PUBLIC_MODE, ControllerInputs, apiserver_url

__all__ = ["RECHECK", "WAITING_FOR_NODES", "decommissioned", "node_cleanup_runnable"]

RECHECK = 60.0
"""Seconds between two passes when ``cluster_nodes`` does not change."""

WAITING_FOR_NODES = "waiting for the cluster's nodes (cluster_nodes)"


def decommissioned(names: Iterable[str], view: ClusterNodes) -> list[str]:
    """The names among ``names`` (Node objects) of nodes ``view`` says are
    DECOMMISSIONED, sorted."""
    return sorted(
        name
        for name in names
        if (record := view.get(name)) is not None
        and record.state == common_pb2.NODE_STATE_DECOMMISSIONED
    )


def node_cleanup_runnable(inputs: ControllerInputs, values: PluginValues) -> Runnable:
    """The runnable ``node_cleanup``: see the module docstring. ``values`` are the
    plugin's (its worker must read ``CLUSTER_NODES``)."""

    async def run(ctx: RunContext) -> None:
        certificate, key = await anyio.to_thread.run_sync(_write_credentials, inputs)
        ca_pem = inputs.pki["ca"].certificate_pem
        assert ca_pem is not None  # the CA's entry always has its certificate
        async with KubeAPI(apiserver_url(inputs.address), ca_pem, certificate, key) as api:
            with values.watch(CLUSTER_NODES) as views:
                ctx.set_note(WAITING_FOR_NODES)
                view = await views.get(filter=lambda view: view.backlogged)
                await _clean(ctx, api, view)
                ctx.set_note("")
                ctx.signal_healthy()  # it did its job once
                while True:
                    with anyio.move_on_after(RECHECK):
                        view = await views.get(filter=lambda view: view.backlogged)
                    await _clean(ctx, api, view)

    return after_apiserver(inputs, run)


async def _clean(ctx: RunContext, api: KubeAPI, view: ClusterNodes) -> None:
    """One pass: delete the Node of every decommissioned node that has one."""
    for name in decommissioned(await api.node_names(), view):
        if await api.delete_node(name):
            ctx.log.info("deleted the Node %s: the node is decommissioned", name)


def _write_credentials(inputs: ControllerInputs) -> tuple[Path, Path]:
    """The ``admin`` client certificate and key as files (``ssl`` loads them only from
    files), in the controller's directory: (certificate, key)."""
    directory = inputs.directory / "node-cleanup"
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    pair = inputs.pki["admin"]
    assert pair.certificate_pem is not None  # a client certificate's entry
    certificate, key = directory / "admin.pem", directory / "admin-key.pem"
    write_atomically(certificate, pair.certificate_pem, PUBLIC_MODE)
    write_atomically(key, pair.key_pem, KEY_MODE)
    return certificate, key
