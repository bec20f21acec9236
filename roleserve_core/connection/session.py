"""Running a worker's calls on the current curator connection, and again on the next.

Every worker that talks to the curator does the same dance: wait for ``curator_connection``,
open its calls on that connection's channel, and start over on a new connection when the
leader changes. ``on_each_connection`` does it once for all::

    wait for curator_connection ─▶ session(connection) ──┬─ returns: done
                                                         ├─ a new connection is set:
                                                         │    ctx.restart() (no backoff)
                                                         ├─ refused for good (the node is
                                                         │    decommissioned): reported, the
                                                         │    node stops; and as below
                                                         ├─ refused by a curator just
                                                         │    elected (leader_starting), or
                                                         │    cancelled (the first time on
                                                         │    this connection):
                                                         │    restart once the channel
                                                         │    reconnected (the leader's
                                                         │    server), or after
                                                         │    LEADER_STARTING_RETRY; and as
                                                         │    below
                                                         └─ fails with a gRPC error, or
                                                            LeaderUnresponsiveError:
                                                              wait up to LEADER_CHANGE_WINDOW
                                                              for a new connection (restart),
                                                              or, if the channel had lost its
                                                              server or the call was refused a
                                                              connection, for it to answer
                                                              again (restart); else fail (the
                                                              supervisor's backoff applies)

The window matters when the leader dies: every call on its channel fails at once, and the
new leader is known a lease TTL later. Failing at once would grow each worker's backoff
while nothing can be done; waiting for the new connection restarts them the moment it
exists. A failure that is not a leader change still fails, only a few seconds later.

The same leader can also drop the channel without a new connection to follow: a curator
that just won the election restarts its server on the same port, and a node that learned of
it from another curator's stream may have connected in between and been refused. Nothing
else would tell that node; so a session whose call failed while the channel lost its server
also restarts as soon as the channel is ready again. So does one whose call was refused a
connection, even if the channel is ready by the time the session looks: the server it
reached after the refusal is the new one (seen at 100 nodes: a session refused during the
just-elected leader's server swap found its channel ready again and waited out the whole
window, the one node of 99 not HEALTHY within the lease TTL).

A curator that won the election answers "just elected, retry" (UNAVAILABLE marked with
``LEADER_STARTING_METADATA``) over a working connection while it loads the leader's state;
then it replaces its follower's server with the leader's. The connection is the right one
and no other will come: waiting out the window there cost a node its whole
LEADER_CHANGE_WINDOW (17.7 s to HEALTHY after a leader's SIGKILL, against a 10 s lease).
Such a session starts over as soon as the channel lost its server and reached it again,
or after LEADER_STARTING_RETRY if it saw no change. So does a session whose call the server
cancelled (CANCELLED), the first time on a connection: the follower's server, stopping for
the leader's, ends the calls it serves; the node's channel is ready again a moment later,
with no new connection to come (seen at 100 nodes: a heartbeat so cancelled waited out the
whole window, the one node of 99 HEALTHY only 25 s after its leader's SIGSTOP). A second
CANCELLED on the same connection waits out the window: a server that cancels every call
fails the session, with the supervisor's backoff, instead of restarting it every second.

``LeaderUnresponsiveError`` is what a session raises after it told the connector that the
leader stopped answering (``CuratorConnection.report_unresponsive``): the connector then
looks for the leader, and the session waits for the connection it sets, like after a
gRPC error.
"""

from __future__ import annotations

import weakref
from collections.abc import Awaitable, Callable

import anyio
import grpc

from roleserve_core.errors import ExpectedError
from roleserve_core.event import Watcher
from roleserve_core.registry import PluginValues
from roleserve_core.rpc import connection_refused, leader_starting, node_refusal, until_ready
from roleserve_core.supervisor import RunContext
from roleserve_core.values import CURATOR_CONNECTION, CuratorConnection

__all__ = [
    "LEADER_CHANGE_WINDOW",
    "LEADER_STARTING_RETRY",
    "LeaderUnresponsiveError",
    "Session",
    "on_each_connection",
]

LEADER_CHANGE_WINDOW = 15.0
"""Seconds a failed session waits for a new connection before it counts as a failure:
longer than an election takes after a leader dies (its lease, 10 s by default, runs out
first)."""

LEADER_STARTING_RETRY = 1.0
"""Seconds after which a session refused by a just-elected curator starts over on the same
connection (on the node's clock) if the channel showed no change of server before: the
change restarts it at once; this covers one that came and went between two looks. Not
shorter: every worker of every node retries, each retry an etcd read of the election on a
curator that is loading its state."""

CHANGE_POLL_INTERVAL = 0.1
"""Seconds between looks at a connected channel for the loss of its server (gRPC cannot
cancel its own wait for a change: see ``rpc.until_ready``)."""

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
                _report_if_refused(connection, exc)
                said = (
                    f"{exc.code().name}: {exc.details()}"
                    if isinstance(exc, grpc.aio.AioRpcError)
                    else str(exc)
                )
                if _leader_starting(exc) or _first_cancel(ctx, connection, exc):
                    ctx.set_note(f"{said}; retrying once it serves")
                    tasks.start_soon(_restart_once_reconnected, ctx, connection.channel)
                    tasks.start_soon(_restart_after, ctx, LEADER_STARTING_RETRY)
                else:
                    ctx.set_note(f"{said}; waiting up to {window:g} s for a new leader")
                    if connection_refused(exc) or _lost_its_server(connection.channel):
                        tasks.start_soon(_restart_once_ready, ctx, connection.channel)
                await anyio.sleep(window)  # a new connection restarts us before this ends
            tasks.cancel_scope.cancel()
        if failure is not None:
            raise failure


def _report_if_refused(
    connection: CuratorConnection, error: grpc.aio.AioRpcError | LeaderUnresponsiveError
) -> None:
    """Report a refusal of this node for good to the connector, which stops the node."""
    reason = node_refusal(error) if isinstance(error, grpc.aio.AioRpcError) else None
    if reason is not None:
        connection.report_refused(reason)


async def _restart_on_new_connection(ctx: RunContext, watcher: Watcher[CuratorConnection]) -> None:
    connection = await watcher.get()
    ctx.log.info("the curator leader is now %s; starting over", connection.leader_node_id)
    ctx.restart()


def _leader_starting(error: grpc.aio.AioRpcError | LeaderUnresponsiveError) -> bool:
    return isinstance(error, grpc.aio.AioRpcError) and leader_starting(error)


_CANCELS_RETRIED: weakref.WeakKeyDictionary[CuratorConnection, set[str]] = (
    weakref.WeakKeyDictionary()
)
"""The runnables (by name) that started over soon after a call CANCELLED, per connection."""


def _first_cancel(
    ctx: RunContext,
    connection: CuratorConnection,
    error: grpc.aio.AioRpcError | LeaderUnresponsiveError,
) -> bool:
    """Whether the call ended CANCELLED (a server that stops cancels the calls it serves;
    a channel closed under the call does too, and a new connection restarts the session
    then anyway) for the first time on this connection for this runnable. Only the first
    time: a server that cancels every call would otherwise restart it every second for
    good, never counted as a failure; the next ones wait out the window, as before."""
    if not isinstance(error, grpc.aio.AioRpcError) or error.code() is not grpc.StatusCode.CANCELLED:
        return False
    retried = _CANCELS_RETRIED.setdefault(connection, set())
    if ctx.dn in retried:
        return False
    retried.add(ctx.dn)
    return True


async def _restart_once_reconnected(ctx: RunContext, channel: grpc.aio.Channel) -> None:
    """Restart ``ctx``'s runnable once ``channel`` lost its server and reached it again:
    the just-elected curator replaced its follower's server with the leader's."""
    while not _lost_its_server(channel):  # noqa: ASYNC110 -- polled, as until_ready says
        await anyio.sleep(CHANGE_POLL_INTERVAL)
    await until_ready(channel)
    ctx.log.info("the curator serves as the leader now; starting over")
    ctx.restart()


async def _restart_after(ctx: RunContext, seconds: float) -> None:
    """Restart ``ctx``'s runnable after ``seconds`` on its clock: the just-elected curator
    may have replaced its server before ``_restart_once_reconnected`` looked."""
    await ctx.clock.sleep(seconds)
    ctx.log.info("the curator was just elected; starting over")
    ctx.restart()


def _lost_its_server(channel: grpc.aio.Channel) -> bool:
    """Whether the channel has no connection to its server (the call failed for that,
    not with a status the server sent over a working connection)."""
    return channel.get_state() is not grpc.ChannelConnectivity.READY


async def _restart_once_ready(ctx: RunContext, channel: grpc.aio.Channel) -> None:
    """Restart ``ctx``'s runnable once ``channel`` is connected again."""
    await until_ready(channel)
    ctx.log.info("the curator answers again; starting over")
    ctx.restart()
