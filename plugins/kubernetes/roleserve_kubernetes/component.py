"""One runnable for any kube component: write its plan's files, start its binary, be
healthy once it answers ready. ``apiserver``, ``controllermanager``, ``scheduler`` and
``kubelet`` each make theirs with ``component_runnable``.

::

    binary None ──▶ note "<binary> not found: ...", stays NEW (not running, so never
                    HEALTHY), waits: no crash loop
    binary found
      ├─ write_plan(plan)                      files atomically, in the node's data dir
      ├─ start_program(program_spec(plan))     roleserve_core.process: dies with the node
      ├─ wait_ready(program, plan.health)      its own pid listens, GET → 200
      ├─ on_ready(True), HEALTHY, note "<name> ready, pid N"
      ├─ follow_readiness                      asked again every few seconds; each change
      │                                         goes to on_ready (kubernetes_status) and
      │                                         the note; not ready for 30 s in a row:
      │                                         ComponentNotReadyError, restarted (a hung
      │                                         program is never left HEALTHY)
      └─ program exits ──▶ on_ready(False), DEAD with its last error lines; the
                           supervisor starts it again after the backoff

A binary that is there but cannot run (not executable, exits at once) is a DEAD runnable
with the reason from its stderr, restarted after the backoff like any failure; the node's
other runnables go on. Only a binary that is not there at all is a state rather than a
failure: it cannot appear by restarting.

Why NEW for an absent binary, and not HEALTHY or DEAD: HEALTHY says the component runs,
and an operator (or ``ctl kubeconfig``) who believed it met "connection refused"; DEAD
would be a failure that restarting cures or, final, one that stops a node not yet
enrolled. NEW is the supervisor's "not running (yet)", as a gated worker waiting for its
roles is; the note says what to do. Installing the binary and ``roleserve ctl restart NODE
root.role.kubernetes_controller`` (or a restart of the node) starts it.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path

import anyio

from roleserve_core import ProgramSpec, RunContext, Runnable, start_program
from roleserve_kubernetes.binaries import Component
from roleserve_kubernetes.plans import LaunchPlan, program_spec, write_plan
from roleserve_kubernetes.probe import follow_readiness, wait_ready

__all__ = ["ReadyCallback", "component_runnable"]

ReadyCallback = Callable[[bool], None]
"""Told True once the component answers ready, each change after that (asked again every
``probe.READY_RECHECK`` seconds), False when it stops (never blocks)."""


def _ignore(ready: bool) -> None:
    """The default ``on_ready``: nobody needs to know."""


def component_runnable(
    component: Component,
    plan: Callable[[], LaunchPlan],
    binary: Path | None,
    state_dir: Path,
    on_ready: ReadyCallback = _ignore,
) -> Runnable:
    """A runnable running ``plan`` with ``binary``, or saying that there is no binary.

    :param component: which kube binary it runs (its note when absent).
    :param plan: makes the plan, at each (re)start; not called when there is no binary.
    :param binary: the component's binary as found (``KubeBinaries.find``); None: absent.
    :param state_dir: where the runner records the program (the plugin's data directory).
    :param on_ready: told when the component becomes ready, each time its readiness
        changes after that, and when it stops.
    """

    async def run(ctx: RunContext) -> None:
        if binary is None:
            await _absent(ctx, component)
        else:
            planned = plan()
            await _run_program(ctx, planned, program_spec(planned, binary, state_dir), on_ready)

    return run


async def _absent(ctx: RunContext, component: Component) -> None:
    """Say why the component does not run, and stay not healthy (the module docstring)."""
    ctx.set_note(component.absent_note)
    await anyio.sleep_forever()


async def _run_program(
    ctx: RunContext, plan: LaunchPlan, spec: ProgramSpec, on_ready: ReadyCallback
) -> None:
    await anyio.to_thread.run_sync(write_plan, plan)
    async with start_program(ctx.log, spec) as program:
        ctx.set_note(f"waiting for {plan.name} to be ready (pid {program.pid})")
        await wait_ready(program, plan.health)
        ready_note = f"{plan.name} ready, pid {program.pid}"
        ctx.set_note(ready_note)
        on_ready(True)

        def note(failure: str) -> None:
            ctx.set_note(f"{plan.name} not ready: {failure}" if failure else ready_note)

        try:
            ctx.signal_healthy()
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(partial(follow_readiness, plan.health, on_ready, note=note))
                await program.wait()  # raises ProgramExitedError when it exits
        finally:
            on_ready(False)
