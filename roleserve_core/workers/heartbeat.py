"""Worker ``heartbeat``: keep the curator told that this node is alive.

Reads ``curator_connection``; writes nothing.

::

    Heartbeat stream on the current connection:
        send ─▶ reply (the interval to keep) ─▶ healthy after the first reply
        sleep until one interval after the send ─▶ send ...
        no reply within REPLY_TIMEOUT (FIRST_REPLY_TIMEOUT for a connection's first) ─▶
            connection.report_unresponsive(): the connector looks for the leader anew ─▶
            LeaderUnresponsiveError: wait for the new connection (``on_each_connection``)

The curator says the interval in every reply (5 s by default) and declares a node timed
out after three missed intervals. Unlike Monogon's worker, which sends every 10 s against
a 10 s timeout and never signals healthy, this one keeps the curator's interval and is
healthy while replies come, so its backoff resets and its state says whether it works.

The replies are the node's liveness signal for the leader: a leader that hangs (a stopped
process) keeps the TCP connection open and the stream unended, and other curators elect a
new leader once its lease runs out, while this node would beat into the void. A reply is a
read of the curator's memory, so a few seconds without one means the leader is gone, not
busy; REPLY_TIMEOUT is far below the curator's own timeout (three intervals) so that the
node reaches the new leader before the new leader counts it as timed out.

The first reply on a connection is given longer (FIRST_REPLY_TIMEOUT): it waits for the
call to start, a TLS handshake with a leader that every node reached at the same moment.
At 100 local nodes on two cores, a new leader answered first beats in 2 to 4 s; each node
then reported it hung, reconnected and restarted its workers, twice, and the herd of
reconnections is what kept the leader slow (every survivor HEALTHY 9 s after the new
leader served, against 1 s after a SIGSTOP). Nothing is lost by waiting: a node reaches a
hung leader on a fresh connection only when a follower named it, and that follower's
stream names the new leader the moment it is elected, which replaces the connection.

The curator keeps one process's stream per node: a second process with this node's
identity is refused, says so once, and tries again (``_identity``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import NoReturn

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream

from roleserve_core.connection.session import LeaderUnresponsiveError, on_each_connection
from roleserve_core.errors import ExpectedError
from roleserve_core.event import Value
from roleserve_core.node import NodeContext, Worker
from roleserve_core.proto import curator_pb2, curator_pb2_grpc
from roleserve_core.rpc import unary
from roleserve_core.supervisor import RunContext
from roleserve_core.values import CURATOR_CONNECTION, CuratorConnection
from roleserve_core.workers._identity import (
    CONFLICT_RETRY,
    PROCESS_INSTANCE,
    retry_while_refused,
    signal_healthy_once,
)

__all__ = [
    "DEFAULT_INTERVAL",
    "FIRST_REPLY_TIMEOUT",
    "REPLY_TIMEOUT",
    "Heartbeat",
    "heartbeat_worker",
]

DEFAULT_INTERVAL = 5.0
"""Seconds between heartbeats when the curator's reply names no interval."""
REPLY_TIMEOUT = 2.0
"""Seconds a heartbeat's reply may take before the leader counts as gone (see above)."""
FIRST_REPLY_TIMEOUT = 10.0
"""Seconds the first reply on a connection may take: the call's start is in it (above)."""


class StreamClosedError(ExpectedError):
    """The curator ended the heartbeat stream (expected: a leader change ends it)."""


def heartbeat_worker(node: NodeContext) -> Worker:
    """The worker, for the core's ``roleserve_workers``."""
    return Worker("heartbeat", Heartbeat(node).run, reads=(CURATOR_CONNECTION,))


class Heartbeat:
    """The worker, and when it last heard back (for status and metrics)."""

    def __init__(self, node: NodeContext) -> None:
        self.node = node
        self.last_reply: Value[float] = Value()
        """``anyio.current_time()`` of the latest reply."""
        self.conflict_retry = CONFLICT_RETRY
        """Seconds between attempts while another process holds this node."""
        self.reply_timeout = REPLY_TIMEOUT
        """Seconds each reply but a connection's first may take (``REPLY_TIMEOUT``)."""
        self.first_reply_timeout = FIRST_REPLY_TIMEOUT
        """Seconds a connection's first reply may take (``FIRST_REPLY_TIMEOUT``)."""

    async def run(self, ctx: RunContext) -> None:
        """Sends heartbeats to the leading curator at the interval it asks for."""

        healthy = signal_healthy_once(ctx)

        async def session(connection: CuratorConnection) -> None:
            await retry_while_refused(
                ctx, lambda: self._beat(ctx, connection, healthy), self.conflict_retry
            )

        await on_each_connection(ctx, self.node.values, session)

    async def _beat(
        self, ctx: RunContext, connection: CuratorConnection, healthy: Callable[[], None]
    ) -> None:
        stub = curator_pb2_grpc.CuratorStub(connection.channel)
        send, receive = anyio.create_memory_object_stream[curator_pb2.HeartbeatRequest](1)
        stream = stub.Heartbeat(_requests(receive))
        first = True
        try:
            answers = aiter(stream)
            async with send:
                while True:
                    sent = ctx.clock.now()
                    try:
                        await send.send(curator_pb2.HeartbeatRequest(instance=PROCESS_INSTANCE))
                    except anyio.BrokenResourceError:
                        await _raise_why_it_ended(answers)
                    timeout = self.first_reply_timeout if first else self.reply_timeout
                    with anyio.move_on_after(timeout) as waiting:
                        # Through unary(): grpc re-raises the timeout's cancellation of a
                        # read (of a call not yet started: a hung leader never finishes the
                        # handshake) as its own CancelledError, which escaped the scope and
                        # failed the worker instead of reporting the leader gone.
                        reply = await unary(_next_reply(answers))
                    if waiting.cancelled_caught:
                        said = f"no heartbeat reply within {timeout:g} s"
                        connection.report_unresponsive(said)
                        raise LeaderUnresponsiveError(
                            f"{said}: the leader {connection.leader_node_id} counts as gone"
                        )
                    interval = reply.interval.ToNanoseconds() / 1e9 or DEFAULT_INTERVAL
                    replied = anyio.current_time()
                    self.last_reply.set(replied)
                    if self.node.introspection is not None:
                        self.node.introspection.stats.heartbeat.replied(replied - sent)
                    if first:
                        first = False
                        healthy()
                        ctx.log.info(
                            "beating to %s every %g s", connection.leader_node_id, interval
                        )
                    await ctx.clock.sleep(sent + interval - ctx.clock.now())
        finally:
            stream.cancel()
            # The request generator closes it once it runs; a call that ends before it is
            # admitted never runs it, and the stream would be left to the collector.
            receive.close()


async def _next_reply(
    answers: AsyncIterator[curator_pb2.HeartbeatResponse],
) -> curator_pb2.HeartbeatResponse:
    """The curator's next reply.

    :raises StreamClosedError: if it ended the stream.
    :raises grpc.aio.AioRpcError: if the call failed.
    """
    try:
        return await anext(answers)
    except StopAsyncIteration:
        raise StreamClosedError("the curator closed the heartbeat stream") from None


async def _raise_why_it_ended(answers: AsyncIterator[curator_pb2.HeartbeatResponse]) -> NoReturn:
    """The call ended while the worker waited for its next beat (gRPC then closes the
    request stream, so the beat cannot be sent): raise what ended it, the call's error,
    rather than the closed stream's BrokenResourceError."""
    await _next_reply(answers)
    raise StreamClosedError("the curator closed the heartbeat stream")


async def _requests(
    receive: MemoryObjectReceiveStream[curator_pb2.HeartbeatRequest],
) -> AsyncIterator[curator_pb2.HeartbeatRequest]:
    async with receive:
        async for request in receive:
            yield request
