"""Worker ``kubernetes_worker`` (``root.role.kubernetes_worker``): a node's container
runtime and pod network, while the node holds the ``kubernetes_worker`` role.

Reads (through its runnables) ``node_id``, ``cluster_nodes``, ``network`` and its own
``pod_network``; writes ``pod_network``, files under the plugin's data directory and
containerd's sockets in its runtime directory (``layout``).

::

    kubernetes_worker (this file; started and cancelled by the core on the role)
    ├── pod_network   own record's cluster_prefix ─▶ pod_network, CNI config (podnetwork)
    └── containerd    containerd + CRI + sandbox image; on the way out, pods removed and
                      no shim, container, mount or bridge left (containerd); started over
                      when pod_network moves to another prefix

The two are independent runnables, not a group: containerd dying (and restarting after
the backoff) leaves the pod network alone, and a node whose prefix is not allocated yet
still has a running containerd (its CRI reports NetworkReady false until the CNI
configuration is written, and containerd picks that up by itself). Monogon's worker
starts ``containerd`` and the Kubernetes node services the same way, once the role is
there; the kubelet, when its binary exists, is a third child here.
"""

from __future__ import annotations

from functools import partial

import anyio

from roleserve_core import (
    NodeContext,
    RunContext,
)
from roleserve_kubernetes.containerd import containerd
from roleserve_kubernetes.layout import WorkerLayout
from roleserve_kubernetes.podnetwork import pod_network
from roleserve_kubernetes.settings import WorkerSettings

__all__ = ["RUNNABLES", "run"]

RUNNABLES = ("pod_network", "containerd")
"""The worker's runnables, in the order it starts them."""


async def run(
    ctx: RunContext, node: NodeContext, settings: WorkerSettings, *, netns: str | None = None
) -> None:
    """The worker ``kubernetes_worker`` (see the module docstring); the hooks name it with
    ``lazy_runnable``.

    :param netns: for tests and benchmarks: a network namespace (``ip netns``) to run
        containerd in, so the pods' bridge and addresses stay inside it.
    """
    layout = WorkerLayout.of(node)
    ctx.run("pod_network", partial(pod_network, values=node.values, layout=layout))
    ctx.run(
        "containerd",
        partial(containerd, values=node.values, settings=settings, layout=layout, netns=netns),
    )
    ctx.signal_healthy()
    await anyio.sleep_forever()
