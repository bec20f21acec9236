"""kube-apiserver on a controller: the cluster's API, on the node's address, port 6443.

It keeps its objects in the local etcd member (as that member's client), serves with this
controller's certificate, and is ready when ``GET /readyz`` answers 200 over TLS verified
against the cluster's Kubernetes CA (``plans.apiserver_health``). Its readiness goes into
``kubernetes_status`` through ``on_ready``, asked again every few seconds while it runs.
The plan is ``plans.apiserver_plan``.

Its clients on the controller (the controller-manager, the scheduler, the node clean-up)
start only once it is ready (``after_apiserver``): started beside it, the controller-manager
exited at once (connection refused, then "forbidden" until RBAC's bootstrap roles exist)
and crash-looped twice before it ran.
"""

from __future__ import annotations

import os
from pathlib import Path

from roleserve_core import RunContext, Runnable
from roleserve_kubernetes.binaries import APISERVER
from roleserve_kubernetes.component import ReadyCallback, component_runnable
from roleserve_kubernetes.plans import ControllerInputs, apiserver_health, apiserver_plan
from roleserve_kubernetes.probe import wait_answering

__all__ = [
    "WAITING_FOR_APISERVER",
    "after_apiserver",
    "apiserver_runnable",
    "component_after_apiserver",
]

WAITING_FOR_APISERVER = "waiting for the local kube-apiserver to be ready (/readyz)"
"""The note of a runnable ``after_apiserver`` holds back."""


def apiserver_runnable(
    inputs: ControllerInputs, binary: Path | None, state_dir: Path, on_ready: ReadyCallback
) -> Runnable:
    """The runnable ``apiserver`` of the controller worker."""
    return component_runnable(
        APISERVER, lambda: apiserver_plan(inputs), binary, state_dir, on_ready
    )


def after_apiserver(inputs: ControllerInputs, runnable: Runnable) -> Runnable:
    """``runnable``, started once the controller's own kube-apiserver answers ``/readyz``
    with 200 (not HEALTHY until then: NEW, with ``WAITING_FOR_APISERVER`` as its note).

    Asked at each (re)start, so a component that exits because the apiserver went away
    waits for it again instead of failing over and over.
    """
    health = apiserver_health(inputs)

    async def run(ctx: RunContext) -> None:
        ctx.set_note(WAITING_FOR_APISERVER)
        await wait_answering(health)
        ctx.set_note("")
        await runnable(ctx)

    return run


def component_after_apiserver(
    inputs: ControllerInputs, runnable: Runnable, binary: Path | None
) -> Runnable:
    """``after_apiserver(inputs, runnable)`` for the runnable of a component that runs
    ``binary``, unless the binary is absent or cannot be executed: then its runnable says
    so at once (NEW with the "not found" note, or DEAD naming the setting to fix) instead
    of only once the apiserver is up."""
    if binary is None or not os.access(binary, os.X_OK):
        return runnable
    return after_apiserver(inputs, runnable)
