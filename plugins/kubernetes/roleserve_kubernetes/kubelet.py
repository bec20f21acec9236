"""The kubelet on a worker: runs the node's pods through containerd's CRI socket.

It reaches the apiserver with the node's kubelet client certificate
(``system:node:<node id>``, from the curator), serves its API (10250, on the node's
address) with the node's kubelet serving certificate, and is ready when ``GET /healthz``
answers 200 on plain HTTP on the node's local host (10248). The plan is
``plans.kubelet_plan``.

Without a kubelet binary the node is a container runtime only: containerd and the pod
network still run, and the runnable's note says so.

For the worker role's runnable (a sibling of containerd): ``kubelet_runnable(inputs,
binary, state_dir)``, with ``inputs`` a function returning the ``KubeletInputs`` (the
apiserver, the CA, the two certificates, containerd's socket, the pod prefix), called only
when the binary is there.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from roleserve_core import Runnable
from roleserve_kubernetes.binaries import KUBELET
from roleserve_kubernetes.component import component_runnable
from roleserve_kubernetes.plans import KubeletInputs, kubelet_plan

__all__ = ["kubelet_runnable"]


def kubelet_runnable(
    inputs: Callable[[], KubeletInputs], binary: Path | None, state_dir: Path
) -> Runnable:
    """The runnable ``kubelet``: ``binary`` run with ``inputs``' plan, or a note if None."""
    return component_runnable(KUBELET, lambda: kubelet_plan(inputs()), binary, state_dir)
