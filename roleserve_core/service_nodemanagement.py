"""The node management service: what a node tells its owner about itself.

Every node serves ``NodeManagement`` (``proto/nodemanagement.proto``) on its own address,
port 7839 (the worker ``nodemgmt`` runs the server). Reading needs the permission
READ_NODE (owner, operator, viewer credentials), restarting OPERATE_NODE (owner, operator);
no node holds either. The server's ``AuthorizationInterceptor`` refuses everyone else
before a handler runs, and revoked user certificates too (the value
``revoked_credentials``, which the ``revocations`` worker keeps from the leader)::

    roleserve ctl tree/values/logs/restart ──mTLS, user certificate──▶ node:7839
                                                                          │
              AuthorizationInterceptor (READ_NODE / OPERATE_NODE) ◀───────┘
                                                                          │
    NodeManagementService(introspection) ─────────────────────────────────┘
      GetSupervisionTree ──▶ supervisor.status(dn)  ──▶ [Runnable], parents first
      GetValues          ──▶ registry.entries()     ──▶ [Value]
      GetLogs            ──▶ logtree.entries(dn)    ──▶ batches of ≤ 256 entries
                             logtree.follow(dn)     ──▶ then each new record, until cancelled
                                                        or the server stops (end_follows: OK)
      RestartRunnable    ──▶ supervisor.restart(dn)    (never root; logs who asked)

Refusals are raised as ``RefusedError`` anywhere in a handler and become the call's status
in one place (``_answering``): NOT_FOUND for an unknown DN, UNAVAILABLE before the node's
supervisor runs, INVALID_ARGUMENT for a request that can never succeed or that is beyond a
limit of ``roleserve_core.limits`` (DNs, value names).

Following logs never blocks the code that logs: a ``LogFollower`` keeps at most
``follow_buffer`` unread records and drops the oldest when the client reads too slowly. The
stream then carries a *gap marker* before the first record after the loss: an entry with an
empty ``dn`` (no real record has one), ``seq`` 0, level WARNING and a message saying how
many records were lost. A marker in the stream, rather than only a line in the node's own
log, tells the one reader who lost records, in place, and needs no change to the protocol.
Live records are sent one per message as they come: the follower offers no non-blocking
read to gather a burst with, and its buffer already bounds what a burst costs.

A following call ends only when its reader leaves, or when the server stops (the node
stops, or ``nodemgmt`` restarts): ``end_follows`` then ends each with OK, once it has sent
what it holds, so that the reader tells the node ending its stream from a failure. Left to
the server's stop, each would be cancelled, UNAVAILABLE, as a crash looks.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator, Iterable
from typing import Any, TypeAlias

import grpc
from google.protobuf import duration_pb2, timestamp_pb2
from typing_extensions import override

from roleserve_core.errors import (
    RefusedError,
    RequestLimitError,
    RunnableNotFoundError,
    UnknownValueKeyError,
)
from roleserve_core.limits import MAX_DN_LENGTH, MAX_VALUE_NAME_LENGTH, check_text
from roleserve_core.logtree import LogEntry, LogFollower
from roleserve_core.node import NodeIntrospection
from roleserve_core.proto import nodemanagement_pb2 as pb
from roleserve_core.proto import nodemanagement_pb2_grpc as pb_grpc
from roleserve_core.registry import ValueInfo
from roleserve_core.rpc import NodePeer, UserPeer, current_peer
from roleserve_core.supervisor import RunnableStatus, Supervisor

__all__ = [
    "BATCH_BYTES",
    "BATCH_ENTRIES",
    "ROOT_DN",
    "NodeManagementService",
    "RefusedError",
]

Context: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"

ROOT_DN = "root"
"""The DN an empty ``dn`` stands for."""

BATCH_ENTRIES = 256
"""Most stored log entries per ``GetLogsResponse``: few messages for a long backlog, and
none that a client waits long for."""

BATCH_BYTES = 1 << 20
"""A batch closes once its entries take this many bytes, far below gRPC's 4 MiB message
limit, so that a backlog of long tracebacks still fits."""

DEFAULT_FOLLOW_BUFFER = 10_000
"""Unread records a following call keeps before it drops the oldest (see the module doc)."""


@contextlib.asynccontextmanager
async def _answering(context: Context) -> AsyncIterator[None]:
    """Turn a ``RefusedError`` raised in the block into the call's status, and a
    ``RequestLimitError`` (``roleserve_core.limits``) into INVALID_ARGUMENT.

    Anything else propagates, and grpc answers UNKNOWN: a bug, not a refusal, and it is
    logged by grpc with its traceback.
    """
    try:
        yield
    except RefusedError as refusal:
        await context.abort(refusal.code, str(refusal))
    except RequestLimitError as beyond:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(beyond))


class NodeManagementService(pb_grpc.NodeManagementServicer):
    """``NodeManagement`` over one node's introspection (see the module docstring).

    :param introspection: the node's registry, log tree and supervisor.
    :param log: where requests that change the node (restarts) are logged, with who asked;
        the worker passes its ``ctx.log``.
    :param serving_dn: the DN of the runnable serving this service, if any. Restarting it
        or an ancestor stops the server that answers, so such a restart happens only once
        the answer is sent.
    :param follow_buffer: unread records a following ``GetLogs`` keeps (see the module
        docstring).
    """

    def __init__(
        self,
        introspection: NodeIntrospection,
        *,
        log: logging.Logger | None = None,
        serving_dn: str | None = None,
        follow_buffer: int = DEFAULT_FOLLOW_BUFFER,
    ) -> None:
        self.introspection = introspection
        self.log = log or introspection.logtree.logger("nodemanagement")
        self.serving_dn = serving_dn
        self.follow_buffer = follow_buffer
        self._followers: set[LogFollower] = set()
        """Of the following ``GetLogs`` calls open, for ``end_follows``."""

    def end_follows(self) -> None:
        """End every following ``GetLogs`` with OK once it has sent the records it holds:
        the server is about to stop (see the module docstring)."""
        for follower in list(self._followers):
            follower.close()

    # -- the supervision tree ---------------------------------------------------------

    @override
    async def GetSupervisionTree(
        self, request: pb.GetSupervisionTreeRequest, context: Context
    ) -> pb.GetSupervisionTreeResponse:
        """The runnables of ``dn``'s subtree, parents first, as ``Supervisor.status``."""
        async with _answering(context):
            dn = check_text("dn", request.dn, MAX_DN_LENGTH) or ROOT_DN
            try:
                statuses = self._supervisor().status(dn)
            except RunnableNotFoundError as exc:
                raise RefusedError(grpc.StatusCode.NOT_FOUND, str(exc)) from None
            response = pb.GetSupervisionTreeResponse(runnables=map(runnable_message, statuses))
        return response

    # -- values -------------------------------------------------------------------------

    @override
    async def GetValues(
        self, request: pb.GetValuesRequest, context: Context
    ) -> pb.GetValuesResponse:
        """Every value of the registry, sorted by name; a value never set is listed too,
        since "nobody set it yet" is often the answer an owner is looking for. With a
        name, that one value, its current value in full."""
        registry = self.introspection.registry
        if not request.name:
            return pb.GetValuesResponse(values=map(_value, registry.entries()))
        async with _answering(context):
            check_text("name", request.name, MAX_VALUE_NAME_LENGTH)
            try:
                info = registry.entry(request.name)
            except UnknownValueKeyError as exc:
                raise RefusedError(grpc.StatusCode.NOT_FOUND, str(exc)) from None
            response = pb.GetValuesResponse(values=[_value(info)])
        return response

    # -- logs -------------------------------------------------------------------------

    @override
    async def GetLogs(
        self, request: pb.GetLogsRequest, context: Context
    ) -> AsyncIterator[pb.GetLogsResponse]:
        """Stored records in batches, then (with ``follow``) new ones until cancelled.

        A DN that neither logged nor is a runnable is refused at once, with ``follow`` too:
        it is most likely mistyped, and a followed call would otherwise stay open and
        silent until its deadline. A runnable that has not logged yet is followed.
        """
        async with _answering(context):
            dn = check_text("dn", request.dn, MAX_DN_LENGTH) or ROOT_DN
            if request.backlog < -1:
                raise RefusedError(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"backlog {request.backlog}: give -1 for all stored records, 0 for "
                    "none, or how many of the newest to send",
                )
            if not self._known_log_dn(dn, request.subtree):
                raise RefusedError(
                    grpc.StatusCode.NOT_FOUND,
                    f"no runnable {dn!r} and no log records at {dn!r}"
                    f"{' or under it' if request.subtree else ''}",
                )
        logtree = self.introspection.logtree
        with contextlib.ExitStack() as stack:
            # Follow first, then read what is stored: a record logged in between is in
            # both, and is sent once (skipped by seq), never lost.
            follower = None
            if request.follow:
                follower = stack.enter_context(
                    logtree.follow(dn, subtree=request.subtree, buffer=self.follow_buffer)
                )
                self._followers.add(follower)
                stack.callback(self._followers.discard, follower)
            sent_up_to = -1
            if request.backlog != 0:
                limit = None if request.backlog == -1 else request.backlog
                stored = logtree.entries(dn, subtree=request.subtree, limit=limit)
                if stored:
                    sent_up_to = stored[-1].seq
                for batch in _batches(map(_log_entry, stored)):
                    yield pb.GetLogsResponse(entries=batch)
            if follower is not None:
                async for response in _followed(follower, sent_up_to):
                    yield response

    def _known_log_dn(self, dn: str, subtree: bool) -> bool:
        """Whether ``dn`` has log records (under it, with ``subtree``) or is a runnable."""
        prefix = dn + "."
        for name in self.introspection.logtree.dns():
            if name == dn or (subtree and name.startswith(prefix)):
                return True
        try:
            supervisor = self.introspection.supervisor.get_nowait()
            supervisor.status_of(dn)
        except (LookupError, RunnableNotFoundError):
            return False
        return True

    # -- restarts -----------------------------------------------------------------------

    @override
    async def RestartRunnable(
        self, request: pb.RestartRunnableRequest, context: Context
    ) -> pb.RestartRunnableResponse:
        """Restart ``dn`` and its subtree (no backoff); never ``root``, which holds this
        very service, and each request is logged with who made it."""
        async with _answering(context):
            dn = check_text("dn", request.dn, MAX_DN_LENGTH)
            if not dn:
                raise RefusedError(
                    grpc.StatusCode.INVALID_ARGUMENT, "name the runnable to restart by its DN"
                )
            if dn == ROOT_DN:
                raise RefusedError(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    "root cannot be restarted: that would restart the service answering; "
                    "restart a runnable below it",
                )
            supervisor = self._supervisor()
            try:
                supervisor.status_of(dn)
            except RunnableNotFoundError as exc:
                raise RefusedError(grpc.StatusCode.NOT_FOUND, str(exc)) from None
            who = _caller()
            if self.serving_dn is not None and _in_subtree(self.serving_dn, dn):
                self.log.info("restart of %s requested by %s; restarting once answered", dn, who)

                def restart(_: object) -> None:
                    self._restart(supervisor, dn)

                # grpc calls it with the context, on the event loop, once the call ended.
                # The stubs declare the callback type as a class, not a Protocol, so no
                # function matches it.
                context.add_done_callback(restart)  # type: ignore[arg-type]
            else:
                self.log.info("restart of %s requested by %s", dn, who)
                supervisor.restart(dn)
        return pb.RestartRunnableResponse()

    def _restart(self, supervisor: Supervisor, dn: str) -> None:
        """A deferred restart: the tree may have changed since the request was checked."""
        try:
            supervisor.restart(dn)
        except RunnableNotFoundError as exc:
            self.log.warning("restart of %s not done: %s", dn, exc)

    # -- helpers -------------------------------------------------------------------------

    def _supervisor(self) -> Supervisor:
        try:
            return self.introspection.supervisor.get_nowait()
        except LookupError:
            raise RefusedError(
                grpc.StatusCode.UNAVAILABLE, "the node's supervisor is not running yet; retry"
            ) from None


async def _followed(follower: LogFollower, sent_up_to: int) -> AsyncIterator[pb.GetLogsResponse]:
    """Each new record as a message of its own, with a gap marker before any loss."""
    reported = 0
    async for entry in follower:
        entries = []
        if follower.dropped > reported:
            entries.append(_gap_marker(follower.dropped - reported, follower.dn))
            reported = follower.dropped
        if entry.seq > sent_up_to:  # else already sent with the stored records
            entries.append(_log_entry(entry))
        if entries:
            yield pb.GetLogsResponse(entries=entries)


def _batches(entries: Iterable[pb.LogEntry]) -> Iterable[list[pb.LogEntry]]:
    """``entries`` in lists of at most ``BATCH_ENTRIES``, each closed at ``BATCH_BYTES``."""
    batch: list[pb.LogEntry] = []
    size = 0
    for entry in entries:
        batch.append(entry)
        size += entry.ByteSize()
        if len(batch) >= BATCH_ENTRIES or size >= BATCH_BYTES:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def _in_subtree(dn: str, top: str) -> bool:
    return dn == top or dn.startswith(top + ".")


def _caller() -> str:
    """Who is calling, for the log: the user or node of the client certificate."""
    try:
        peer = current_peer()
    except LookupError:
        return "an unknown caller (not over gRPC)"
    if isinstance(peer, UserPeer):
        return f"user {peer.identity!r}"
    if isinstance(peer, NodePeer):
        return f"node {peer.node_id}"
    return "an unauthenticated caller"


# -- conversions to messages ------------------------------------------------------------


def _timestamp(seconds: float) -> timestamp_pb2.Timestamp:
    """A ``Timestamp`` of a wall-clock time (``time.time()`` scale)."""
    stamp = timestamp_pb2.Timestamp()
    stamp.FromNanoseconds(round(seconds * 1e9))
    return stamp


def _duration(seconds: float) -> duration_pb2.Duration:
    """A ``Duration`` of ``seconds``."""
    span = duration_pb2.Duration()
    span.FromNanoseconds(round(seconds * 1e9))
    return span


def _log_entry(entry: LogEntry) -> pb.LogEntry:
    """A stored log record as a ``LogEntry`` message."""
    return pb.LogEntry(
        seq=entry.seq,
        dn=entry.dn,
        time=_timestamp(entry.time),
        level=entry.level,
        message=entry.message,
        exception=entry.exc_text or "",
    )


def _gap_marker(lost: int, dn: str) -> pb.LogEntry:
    """The entry that stands where a following call lost ``lost`` records of ``dn``."""
    return pb.LogEntry(
        seq=0,
        dn="",
        time=_timestamp(time.time()),
        level=logging.WARNING,
        message=(
            f"{lost} log record{'' if lost == 1 else 's'} of {dn} lost here: "
            "this reader fell behind"
        ),
    )


def runnable_message(status: RunnableStatus) -> pb.Runnable:
    """A runnable's status as a ``Runnable`` message."""
    message = pb.Runnable(
        dn=status.dn,
        state=status.state.value,
        restarts=status.restarts,
        failures=status.failures,
        since=_timestamp(status.since),
        crash_looping=status.crash_looping,
        note=status.note,
        final=status.final,
    )
    if status.last_error is not None:
        message.last_error = status.last_error.summary()
        message.last_error_traceback = status.last_error.traceback
    if status.restart_in is not None:
        message.restart_in.CopyFrom(_duration(status.restart_in))
    return message


def _value(info: ValueInfo) -> pb.Value:
    """A registry entry as a ``Value`` message."""
    message = pb.Value(
        name=info.name,
        type=info.type,
        doc=info.doc,
        owner=info.owner,
        readers=info.readers,
        is_set=info.is_set,
        sets=info.sets,
        watchers=info.watchers,
        current=info.current or "",
        details=info.details or "",
    )
    if info.last_changed is not None:
        message.last_changed.CopyFrom(_timestamp(info.last_changed))
    return message
