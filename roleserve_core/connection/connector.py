"""The runnable behind ``curator_connection``: one channel to the leader, swapped when the
leader changes (``root.connection``).

::

    node_credentials ─▶ follow_leader(known curators) ──leader──▶ secure_channel(leader,
                                                                    node_id=leader's ID)
                                                                  └▶ curator_connection
    child "curators": cluster_nodes (kept by the core worker nodewatch, which this child
                      keeps alive by reading it) ─▶ nodes running a curator
                      ─▶ KnownCurators (saved): the candidates of the next search

Every worker shares the one channel in ``curator_connection``. A new leader gets a new
channel and a new value; the previous channel is closed ``OLD_CHANNEL_GRACE`` seconds
later, so a worker that read the old value just before the change sees its call fail (and
starts over on the new value) rather than a closed channel.

A leader that hangs (a stopped process, a paused VM) accepts TCP and never answers, so
neither its GetCurrentLeader stream nor the channel would ever end by themselves. Two
things notice it::

    keepalive pings on every channel (``leader.NODE_KEEPALIVE_OPTIONS``, every 30 s): the
        stream and the calls to it fail within ~35 s, and follow_leader asks the next
        candidate
    a worker's report (``CuratorConnection.report_unresponsive``; the heartbeat's reply
        did not come within ``heartbeat.REPLY_TIMEOUT``), about the current connection:
        ─▶ stop following (abandons the stream, wherever it was) ─▶ follow_leader anew,
           the reported leader's endpoint asked last ─▶ the first leader named gets a new
           connection, even the same leader (a follower names the hung one until its
           lease runs out; then the new leader, as a change of that follower's stream)

A worker's call refused for good (``rpc.node_refusal``: the leader's gate refuses this
node, which is decommissioned) is reported too (``CuratorConnection.report_refused``), and
stops the node: at a restart, that is the first call of the first worker (nodewatch's
Watch, which rolefetch reads), moments after the leader is found; a running node learns it
when the decommission ends its streams.

New credentials (the core's ``renewal`` worker renewed the node certificate) are followed
like a report: the child ``credentials`` stops following, and the leader found anew gets a
new channel that presents the new certificate (the old one is closed after the grace, as
on a leader change). TLS checks a certificate at the handshake only, so calls open on the
old channel are not cut short.

A report about a replaced connection is ignored. The reported endpoint stays last among
the candidates until the next report: asked last, never left out (it may be the only one).

The leader is followed through another curator when one answers: when the leader named
itself (its own stream) and there are other candidates (or the curators child learns some
later), the connector follows anew with the leader asked last, and keeps its connection
when a follower names the same leader. A follower's stream tells of the new
leader as soon as it is elected, with no detection needed: the heartbeat's report is then
the fallback, for when the leader's own stream is all there is (no other curator answers).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import anyio

from roleserve_core.connection.curators import KnownCurators, curator_endpoint
from roleserve_core.connection.leader import (
    NODE_KEEPALIVE_OPTIONS,
    Candidates,
    LeaderInfo,
    follow_leader,
)
from roleserve_core.identity import NodeCredentials
from roleserve_core.registry import PluginValues
from roleserve_core.rpc import CancellationSafeChannel, secure_channel
from roleserve_core.supervisor import RunContext
from roleserve_core.values import (
    CLUSTER_NODES,
    CURATOR_CONNECTION,
    NODE_CREDENTIALS,
    CuratorConnection,
)

__all__ = ["ANSWER_TIMEOUT", "OLD_CHANNEL_GRACE", "CuratorConnector"]

OLD_CHANNEL_GRACE = 10.0
"""Seconds a replaced channel stays open."""
ANSWER_TIMEOUT = 2.0
"""Seconds each curator has to name the leader (``follow_leader``'s ``answer_timeout``):
shorter than ``roleserve ctl``'s, because the node asks the hung leader too (last), and
does so whenever the curator it followed ends its stream (a follower that got elected
does), before asking again the others, which then name the new leader."""


class CuratorConnector:
    """The node's connection to the leading curator (see the module docstring)."""

    def __init__(
        self,
        known: KnownCurators,
        values: PluginValues,
        stop: Callable[[str], None] = lambda reason: None,
    ) -> None:
        """:param stop: called with the reason when the cluster refuses this node for good
        (``CuratorConnection.report_refused``); the node process stops then (exit 1)."""
        self.known = known
        self.values = values
        self.stop = stop
        self._credentials: NodeCredentials | None = None
        """The credentials new channels present: the latest ``node_credentials``."""
        self._current: CuratorConnection | None = None
        self._following: anyio.CancelScope | None = None
        self._on_leaders_own_stream = False
        self._moving_off = False  # following anew only to leave the leader's own stream

    async def __call__(self, ctx: RunContext) -> None:
        ctx.set_note("waiting for the node's credentials")
        with self.values.watch(NODE_CREDENTIALS) as watcher:
            self._credentials = await watcher.get()
        ctx.run("curators", self._learn_curators)
        ctx.run("credentials", self._follow_credentials)
        ctx.set_note(f"looking for the leader at {', '.join(self.known.candidates())}")
        channel: CancellationSafeChannel | None = None
        last: str | None = None  # the endpoint to ask last
        async with anyio.create_task_group() as closing:
            try:
                while True:
                    with anyio.CancelScope() as self._following:
                        candidates = _asking_last(self.known.candidates, last)
                        credentials = self._credentials
                        following = follow_leader(
                            candidates, credentials, answer_timeout=ANSWER_TIMEOUT
                        )
                        async with contextlib.aclosing(following):
                            async for leader in following:
                                keep = self._moving_off and _is_current(self._current, leader)
                                self._moving_off = False
                                if not keep:
                                    old, channel = channel, self._connect(ctx, credentials, leader)
                                    if old is None:
                                        ctx.set_note("")
                                        ctx.signal_healthy()
                                    else:
                                        closing.start_soon(_close_later, old)
                                # Its own stream, while another curator might answer.
                                self._on_leaders_own_stream = (
                                    leader.answered_by_leader and leader.endpoint != last
                                )
                                if self._on_leaders_own_stream and len(candidates()) > 1:
                                    self._moving_off = True
                                    break
                    # A report, or leaving the leader's own stream (see the module docstring).
                    self._on_leaders_own_stream = False
                    last = self._current.leader_endpoint if self._current else None
            finally:
                self._following = None
                if channel is not None:
                    with anyio.CancelScope(shield=True):
                        await channel.close(None)
                closing.cancel_scope.cancel()

    def _connect(
        self, ctx: RunContext, credentials: NodeCredentials, leader: LeaderInfo
    ) -> CancellationSafeChannel:
        channel = secure_channel(
            leader.endpoint, credentials, node_id=leader.node_id, options=NODE_KEEPALIVE_OPTIONS
        )
        connection = CuratorConnection(
            credentials.node_id,
            leader.node_id,
            leader.endpoint,
            channel,
            on_unresponsive=lambda reason: self._unresponsive(ctx, connection, reason),
            on_refused=self.stop,
        )
        ctx.log.info("the leading curator is %s at %s", leader.node_id, leader.endpoint)
        self._current = connection
        self.values.set(CURATOR_CONNECTION, connection)
        return channel

    def _unresponsive(self, ctx: RunContext, connection: CuratorConnection, reason: str) -> None:
        """A worker's report (see ``CuratorConnection.report_unresponsive``)."""
        if connection is not self._current or self._following is None:
            return  # about a replaced connection, or while already looking anew
        self._moving_off = False  # a new connection, even to the same leader
        ctx.log.warning(
            "the leading curator %s at %s does not answer (%s); asking the other curators",
            connection.leader_node_id,
            connection.leader_endpoint,
            reason,
        )
        self._following.cancel()

    async def _follow_credentials(self, ctx: RunContext) -> None:
        """Child ``credentials``: new node credentials get a new connection (see above)."""
        with self.values.watch(NODE_CREDENTIALS) as watcher:
            ctx.signal_healthy()
            while True:
                latest = await watcher.get()
                current = self._credentials
                if current is not None and latest.certificate == current.certificate:
                    continue
                self._credentials = latest
                if self._following is not None:
                    ctx.log.info("new node credentials: connecting to the leader with them")
                    self._moving_off = False  # a new connection, even to the same leader
                    self._following.cancel()

    async def _learn_curators(self, ctx: RunContext) -> None:
        """Child ``curators``: keep the known curators current from the cluster's nodes."""
        with (
            self.values.reading("connection", [CLUSTER_NODES]),
            self.values.watch(CLUSTER_NODES) as views,
        ):
            view = await views.get(filter=lambda view: view.backlogged)
            ctx.signal_healthy()
            while True:
                curators = [found for node in view.values() if (found := curator_endpoint(node))]
                if self.known.learn(curators):
                    ctx.log.info("curators: %s", ", ".join(sorted(curators)))
                    if self._on_leaders_own_stream and self._following is not None:
                        self._moving_off = True  # another curator may answer now
                        self._following.cancel()
                view = await views.get(filter=lambda view: view.backlogged)


def _is_current(current: CuratorConnection | None, leader: LeaderInfo) -> bool:
    return current is not None and (current.leader_node_id, current.leader_endpoint) == (
        leader.node_id,
        leader.endpoint,
    )


def _asking_last(candidates: Candidates, last: str | None) -> Candidates:
    """``candidates`` with ``last`` moved to the end, if among them."""

    def ordered() -> list[str]:
        found = list(candidates())
        return [c for c in found if c != last] + [c for c in found if c == last]

    return ordered


async def _close_later(channel: CancellationSafeChannel) -> None:
    try:
        await anyio.sleep(OLD_CHANNEL_GRACE)
    finally:
        with anyio.CancelScope(shield=True):
            await channel.close(None)
