"""One node identity, one process: what the core's workers do when the curator refuses
this process because another one holds the node.

A copied data directory started elsewhere is a second process with the node's key. The
curator keeps the first process's heartbeat stream and refuses the second's heartbeats and
status reports (``ALREADY_EXISTS``, naming the peer that holds the node). The refused
process says so once, in one error line and a note on the worker, and tries again every
``CONFLICT_RETRY`` seconds: once the other process stops, this one takes over.

Each process sends ``PROCESS_INSTANCE`` with its heartbeats and status reports, so the
curator tells a process that reconnects (from a new port) from a second process.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable

import grpc

from roleserve_core.supervisor import RunContext

__all__ = ["CONFLICT_RETRY", "PROCESS_INSTANCE", "retry_while_refused", "signal_healthy_once"]

PROCESS_INSTANCE = uuid.uuid4().hex
"""A random ID of this node process, the same on every stream and call it makes."""

CONFLICT_RETRY = 5.0
"""Seconds between attempts while another process holds the node: the curator's default
heartbeat interval, so the conflict stays visible in ``ctl nodes`` while it lasts."""


async def retry_while_refused(
    ctx: RunContext, attempt: Callable[[], Awaitable[None]], retry: float = CONFLICT_RETRY
) -> None:
    """Run ``attempt`` until it returns; while the curator refuses it because another
    process holds this node's identity, say so once and try again every ``retry`` s.

    :raises grpc.aio.AioRpcError: any other failure of ``attempt``.
    """
    said = ""
    while True:
        try:
            await attempt()
            return
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.ALREADY_EXISTS:
                raise
            message = (
                f"the curator refused this process: {exc.details()}; stop one of the two "
                "processes, or give this one a data directory of its own"
            )
        ctx.set_note(message)
        if message != said:
            ctx.log.error("%s", message)
            said = message
        await ctx.clock.sleep(retry)


def signal_healthy_once(ctx: RunContext) -> Callable[[], None]:
    """``ctx.signal_healthy`` that may be called again (a retried session), and clears the
    note a refusal left."""
    signalled = False

    def healthy() -> None:
        nonlocal signalled
        ctx.set_note("")
        if not signalled:
            signalled = True
            ctx.signal_healthy()

    return healthy
