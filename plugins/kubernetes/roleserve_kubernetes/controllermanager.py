"""kube-controller-manager on a controller: Kubernetes' control loops, through the local
apiserver with its client certificate from the PKI.

It signs certificate requests with the Kubernetes CA and service-account tokens with the
service-account key, and allocates no node prefixes (the curator does). It starts once the
local apiserver is ready (``apiserver.component_after_apiserver``) and elects a leader
among the controllers (``--leader-elect``, a Lease in ``kube-system``): every controller
runs one, one of them acts. Ready when ``GET /healthz`` answers 200 on its secure port
(10257) on the node's local host. The plan is ``plans.controller_manager_plan``.
"""

from __future__ import annotations

from pathlib import Path

from roleserve_core import Runnable
from roleserve_kubernetes.apiserver import component_after_apiserver
from roleserve_kubernetes.binaries import CONTROLLER_MANAGER
from roleserve_kubernetes.component import component_runnable
from roleserve_kubernetes.plans import ControllerInputs, controller_manager_plan

__all__ = ["controller_manager_runnable"]


def controller_manager_runnable(
    inputs: ControllerInputs, binary: Path | None, state_dir: Path
) -> Runnable:
    """The runnable ``controller_manager`` of the controller worker."""
    runnable = component_runnable(
        CONTROLLER_MANAGER, lambda: controller_manager_plan(inputs), binary, state_dir
    )
    return component_after_apiserver(inputs, runnable, binary)
