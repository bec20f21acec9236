"""kube-apiserver on a controller: the cluster's API, on the node's address, port 6443.

It keeps its objects in the local etcd member (as that member's client), serves with this
controller's certificate, and is ready when ``GET /readyz`` answers 200 over TLS verified
against the cluster's Kubernetes CA. Its readiness goes into ``kubernetes_status`` through
``on_ready``. The plan is ``plans.apiserver_plan``.
"""

from __future__ import annotations

from pathlib import Path

from roleserve_core import Runnable
from roleserve_kubernetes.binaries import APISERVER
from roleserve_kubernetes.component import ReadyCallback, component_runnable
from roleserve_kubernetes.plans import ControllerInputs, apiserver_plan

__all__ = ["apiserver_runnable"]


def apiserver_runnable(
    inputs: ControllerInputs, binary: Path | None, state_dir: Path, on_ready: ReadyCallback
) -> Runnable:
    """The runnable ``apiserver`` of the controller worker."""
    return component_runnable(
        APISERVER, lambda: apiserver_plan(inputs), binary, state_dir, on_ready
    )
