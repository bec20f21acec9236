"""Running a worker's calls on the current curator connection, and again on the next.

Every worker that talks to the curator does the same dance: wait for ``curator_connection``,
open its calls on that connection's channel, and start over on a new connection when the
leader changes. ``on_each_connection`` does it once for all::

    wait for curator_connection ─▶ session(connection) ──┬─ returns: done
                                                         ├─ a new connection is set:
                                                         │    ctx.restart() (no backoff)
                                                         └─ fails with a gRPC error, or
                                                            LeaderUnresponsiveError:
                                                              wait up to LEADER_CHANGE_WINDOW
                                                              for a new connection (restart),
                                                              else fail (the supervisor's
                                                              backoff applies)

The window matters when the leader dies: every call on its channel fails at once, and the
new leader is known a lease TTL later. Failing at once would grow each worker's backoff
while nothing can be done; waiting for the new connection restarts them the moment it
exists. A failure that is not a leader change still fails, only a few seconds later.

``LeaderUnresponsiveError`` is what a session raises after it told the connector that the
leader stopped answering (``CuratorConnection.report_unresponsive``): the connector then
looks for the leader, and the session waits for the connection it sets, like after a
gRPC error.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
import grpc

from roleserve_core.errors import ExpectedError
from roleserve_core.event import Watcher
from roleserve_core.keys import CURATOR_CONNECTION, CuratorConnection
from roleserve_core.supervisor import RunContext
from roleserve_core.values import PluginValues

__all__ = ["LEADER_CHANGE_WINDOW", "LeaderUnresponsiveError", "Session", "on_each_connection"]

LEADER_CHANGE_WINDOW = 15.0
"""Seconds a failed session waits for a new connection before it counts as a failure:
longer than an election takes after a leader dies (its lease, 10 s by default, runs out
first)."""

Session = Callable[[CuratorConnection], Awaitable[None]]


class LeaderUnresponsiveError(ExpectedError):
    """The leader did not answer in time; the session reported it to the connector
    (``CuratorConnection.report_unresponsive``) before raising this."""


async def on_each_connection(
    ctx: RunContext,
    values: PluginValues,
    session: Session,
    *,
    window: float = LEADER_CHANGE_WINDOW,
) -> None:
    """Run ``session`` on the current curator connection; see the module docstring.

    :raises grpc.aio.AioRpcError: the session's failure, if no new connection came within
        ``window`` seconds.
    :raises LeaderUnresponsiveError: likewise.
    """
    with values.watch(CURATOR_CONNECTION) as watcher:
        if not values.read(CURATOR_CONNECTION).statistics().is_set:
            ctx.set_note("waiting for the connection to the curator")
        connection = await watcher.get()
        ctx.set_note("")
        failure: grpc.aio.AioRpcError | LeaderUnresponsiveError | None = None
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(_restart_on_new_connection, ctx, watcher)
            try:
                await session(connection)
            except (grpc.aio.AioRpcError, LeaderUnresponsiveError) as exc:
                failure = exc
                said = (
                    f"{exc.code().name}: {exc.details()}"
                    if isinstance(exc, grpc.aio.AioRpcError)
                    else str(exc)
                )
                ctx.set_note(f"{said}; waiting up to {window:g} s for a new leader")
                await anyio.sleep(window)  # a new connection restarts us before this ends
            tasks.cancel_scope.cancel()
        if failure is not None:
            raise failure


async def _restart_on_new_connection(ctx: RunContext, watcher: Watcher[CuratorConnection]) -> None:
    connection = await watcher.get()
    ctx.log.info("the curator leader is now %s; starting over", connection.leader_node_id)
    ctx.restart()
