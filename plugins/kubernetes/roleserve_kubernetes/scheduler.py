"""kube-scheduler on a controller: places pods on nodes, through the local apiserver with
its client certificate from the PKI.

It starts once the local apiserver is ready (``apiserver.component_after_apiserver``)
and elects a leader among the controllers (``--leader-elect``), as the controller-manager
does. Ready when ``GET /healthz`` answers 200 on its secure port (10259) on the node's
local host. The plan is ``plans.scheduler_plan``.
"""

from __future__ import annotations

from pathlib import Path

from roleserve_core import Runnable
from roleserve_kubernetes.apiserver import component_after_apiserver
from roleserve_kubernetes.binaries import SCHEDULER
from roleserve_kubernetes.component import component_runnable
from roleserve_kubernetes.plans import ControllerInputs, scheduler_plan

__all__ = ["scheduler_runnable"]


def scheduler_runnable(inputs: ControllerInputs, binary: Path | None, state_dir: Path) -> Runnable:
    """The runnable ``scheduler`` of the controller worker."""
    runnable = component_runnable(SCHEDULER, lambda: scheduler_plan(inputs), binary, state_dir)
    return component_after_apiserver(inputs, runnable, binary)
