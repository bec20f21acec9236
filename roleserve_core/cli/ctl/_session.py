"""One ``roleserve ctl`` run's connection to the cluster, and the calls made through it.

::

    access directory (--credentials, $ROLESERVE_CREDENTIALS, ~/.config/roleserve/owner)
      │ user credentials + curator endpoints (or --endpoint ...)
      ▼
    the leader remembered there (``_last_leader``), if it says it still leads; else
    find_leader ──▶ the curators name the leader
      │
    a channel to the leader, verified as exactly that node, once it says on it within 2 s
      that it leads (a hung leader is said, and the curators are asked again until they
      name one that answers); Management calls go on the same channel
      (no leader because the consensus has no quorum: NoQuorumError at once; a command
      that needs one node only (tree, logs) may go on without a leader, reaching the
      consensus members that answer: ``without_leader``)
      │
      ├─ session.call / session.stream: every RPC, with --timeout as its deadline, and
      │  failures turned into one-line CtlErrors that say what was being done
      ├─ session.resolve(NODE): GetNodes, then the one node the prefix (or a local
      │  cluster's n<i>: ``_local``) names
      └─ session.node_client(NODE): NodeManagement channel to that node's own address
         (Node.status.external_address, port 7839), verified as exactly that node

Channels live as long as the session: a command opens what it needs, and leaving the
session closes everything, whichever way the command ends.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import anyio
import grpc

from roleserve_core._public import publish
from roleserve_core.access import ClusterAccess
from roleserve_core.cli.ctl import _last_leader, _local
from roleserve_core.cli.ctl._errors import CtlError, rpc_failure
from roleserve_core.cli.ctl._resolve import match_node
from roleserve_core.connection import LeaderInfo, NoLeaderError, NoQuorumError, find_leader
from roleserve_core.ports import CURATOR_PORT, NODE_MANAGEMENT_PORT, endpoint
from roleserve_core.proto import (
    curator_pb2,
    curator_pb2_grpc,
    management_pb2,
    management_pb2_grpc,
    nodemanagement_pb2_grpc,
)
from roleserve_core.rpc import secure_channel

if TYPE_CHECKING:
    from roleserve_core.proto.management_pb2_grpc import ManagementAsyncStub
    from roleserve_core.proto.nodemanagement_pb2_grpc import NodeManagementAsyncStub

__all__ = ["NodeClient", "Session", "open_session", "remember_curators"]

LEADER_ANSWER_TIMEOUT = 2.0
"""Seconds the leader's curator has to complete a connection before it counts as hung."""
ASK_AGAIN = 0.5
"""Seconds between asking the curators again while the leader they name does not answer."""

Request = TypeVar("Request")
Response = TypeVar("Response")


@dataclass(frozen=True)
class NodeClient:
    """The NodeManagement service of one node, and where it answers."""

    node: management_pb2.Node
    target: str
    """``host:port`` of its node management server."""
    stub: NodeManagementAsyncStub

    def about(self, action: str) -> str:
        """``action`` with the node and address, for errors: a node that cannot be reached
        is diagnosed by where the call went."""
        return f"{action} of node {self.node.id} at {self.target}"


@dataclass
class Session:
    """The leader, a Management stub to it, and the deadline for every call."""

    access: ClusterAccess
    found: LeaderInfo | None
    """The leader; None in a session without one (``quorum``)."""
    management: ManagementAsyncStub
    timeout: float
    """Seconds each call may take (``--timeout``); a followed stream has no deadline."""
    channels: contextlib.AsyncExitStack
    """Closes the channels the session opened."""
    quorum: curator_pb2.NoQuorum | None = None
    """In a session without a leader: the consensus members, as a curator without a quorum
    named them. Its nodes are the members that answer; ``management`` reaches one of their
    curators, which does not lead, and says so."""
    channel: grpc.aio.Channel | None = None
    """The channel ``management`` calls on: to the leader, where plugins' commands call
    their own services (``roleserve.ctl`` entry points, ``_plugin_commands``)."""
    local_access: Path | None = None
    """The access directory, when it may be a local cluster's (``_local``): ``resolve``
    then takes the names its status table shows (``n<i>``) too."""

    @property
    def leader(self) -> LeaderInfo:
        """The leader.

        :raises CtlError: in a session without one.
        """
        if self.found is None:
            raise CtlError("this needs the cluster's leader, and there is none (no quorum)")
        return self.found

    async def call(
        self,
        what: str,
        method: grpc.aio.UnaryUnaryMultiCallable[Request, Response],
        request: Request,
    ) -> Response:
        """``method(request)`` within the timeout.

        :param what: what the call does, to start the error message with.
        :raises CtlError: with the server's message if the call fails.
        """
        try:
            return await method(request, timeout=self.timeout)
        except grpc.aio.AioRpcError as exc:
            raise rpc_failure(what, exc) from None

    async def stream(
        self,
        what: str,
        method: grpc.aio.UnaryStreamMultiCallable[Request, Response],
        request: Request,
        *,
        follow: bool = False,
    ) -> AsyncGenerator[Response, None]:
        """The responses of ``method(request)``; the whole stream within the timeout unless
        ``follow`` (then it runs until the server ends it or the caller stops).

        :raises CtlError: with the server's message if the call fails.
        """
        call = method(request, timeout=None if follow else self.timeout)
        try:
            async for response in call:
                yield response
        except grpc.aio.AioRpcError as exc:
            raise rpc_failure(what, exc) from None
        finally:
            call.cancel()

    async def nodes(
        self, request: management_pb2.GetNodesRequest | None = None
    ) -> list[management_pb2.Node]:
        """Every node matching ``request`` (all without one), as the leader lists them;
        without a leader, the consensus members that answer (``quorum``), with what a
        curator without a quorum knows of them: ID and address."""
        if self.quorum is not None:
            return [_member_node(member) for member in self.quorum.members if member.answers]
        listing = self.stream(
            "listing the nodes",
            self.management.GetNodes,
            request or management_pb2.GetNodesRequest(),
        )
        async with contextlib.aclosing(listing):
            return [node async for node in listing]

    async def resolve(self, text: str) -> management_pb2.Node:
        """The node ``text`` (an ID or a unique prefix of one) names.

        :raises CtlError: if it names none or several, listing the candidates; without a
            leader, also saying that only the members that answer can be reached.
        """
        if self.local_access is not None:
            text = _local.node_id_named(self.local_access, text.strip()) or text
        try:
            return match_node(await self.nodes(), text)
        except CtlError as exc:
            if self.quorum is None:
                raise
            raise CtlError(
                f"{exc.message} (without a leader, only the consensus members that answer can "
                f"be reached: {NoQuorumError(self.quorum)})",
                exc.exit_code,
            ) from None

    async def node_client(self, text: str) -> NodeClient:
        """NodeManagement of the node ``text`` names, on its own address.

        :raises CtlError: if it names no single node, or the node reported no address.
        """
        node = await self.resolve(text)
        address = node.status.external_address
        if not address:
            raise CtlError(
                f"node {node.id} has not reported its address yet, so its node management "
                "cannot be reached; it reports one when it runs"
            )
        target = endpoint(address, NODE_MANAGEMENT_PORT)
        channel = secure_channel(target, self.access.tls, node_id=node.id)
        await self.channels.enter_async_context(channel)
        return NodeClient(node, target, nodemanagement_pb2_grpc.NodeManagementStub(channel))


@contextlib.asynccontextmanager
async def open_session(
    access: ClusterAccess,
    call_timeout: float,
    *,
    without_leader: bool = False,
    say: Callable[[str], None] = lambda line: None,
    local_access: Path | None = None,
    remembered_in: Path | None = None,
) -> AsyncIterator[Session]:
    """Find the leader and open the Management channel to it.

    :param call_timeout: seconds to find the leader, and for each call of the session.
    :param say: where to tell the person waiting why it takes longer (a leader found
        that does not answer).
    :param local_access: the access directory, for a local cluster's names
        (``Session.local_access``).
    :param without_leader: when the consensus has no quorum, open a session without a
        leader (``Session.quorum``) instead of failing: for commands that talk to one node.
    :param remembered_in: the access directory whose remembered leader to ask first
        (``_last_leader``); None to search at once.
    :raises LeaderRefusedError: as soon as every endpoint refused the connection: a
        person waits, and nothing will answer there by waiting.
    :raises NoQuorumError: as soon as a curator said its consensus has no quorum: no
        leader comes until its members are started (unless ``without_leader``).
    :raises NoLeaderError: if no curator named a leader in time.
    """
    async with contextlib.AsyncExitStack() as channels:
        quorum = None
        try:
            leader, channel = await _leader_channel(
                access, call_timeout, say, channels, remembered_in
            )
        except NoQuorumError as exc:
            if not without_leader:
                raise
            leader, quorum = None, exc.quorum
            node_id, target = _management_target(leader, quorum)
            channel = secure_channel(target, access.tls, node_id=node_id)
            await channels.enter_async_context(channel)
        management = management_pb2_grpc.ManagementStub(channel)
        yield Session(
            access, leader, management, call_timeout, channels, quorum, channel, local_access
        )


async def _leader_channel(
    access: ClusterAccess,
    timeout: float,  # noqa: ASYNC109 -- named in the error it raises
    say: Callable[[str], None],
    channels: contextlib.AsyncExitStack,
    remembered_in: Path | None,
) -> tuple[LeaderInfo, grpc.aio.Channel]:
    """The leader, and a channel to it that ``channels`` closes: the remembered leader's
    if it still leads (``_last_leader``), else ``_leader_that_answers``'s."""
    last = _last_leader.remembered(remembered_in) if remembered_in is not None else None
    if last is not None:
        node_id, target = last
        channel = await _leading_channel(
            access, node_id, target, min(timeout, LEADER_ANSWER_TIMEOUT)
        )
        if channel is not None:
            await channels.enter_async_context(channel)
            return LeaderInfo(node_id, target, target, answered_by_leader=True), channel
    return await _leader_that_answers(access, timeout, say, channels)


async def _leader_that_answers(
    access: ClusterAccess,
    timeout: float,  # noqa: ASYNC109 -- named in the error it raises
    say: Callable[[str], None],
    channels: contextlib.AsyncExitStack,
) -> tuple[LeaderInfo, grpc.aio.Channel]:
    """The leader the curators name, once it says itself, within ``LEADER_ANSWER_TIMEOUT``,
    that it leads; and the channel it said so on, which ``channels`` closes.

    A hung leader (a stopped process, a paused VM) still accepts TCP, and the other curators
    name it until its lease runs out: a call to it would wait out the whole deadline and
    fail. So a leader that does not answer is said once, and the curators are asked again
    until they name one that does (the new leader, a lease TTL after the hang).

    :raises NoLeaderError: if none answered within ``timeout`` seconds.
    """
    deadline = anyio.current_time() + timeout
    silent: set[str] = set()
    left = timeout
    while True:
        leader = await find_leader(
            access.endpoints,
            access.tls,
            timeout=left,
            refused_is_final=True,
            no_quorum_is_final=True,
        )
        channel = await _leading_channel(
            access, leader.node_id, leader.endpoint, LEADER_ANSWER_TIMEOUT
        )
        if channel is not None:
            await channels.enter_async_context(channel)
            return leader, channel
        if leader.node_id not in silent:
            silent.add(leader.node_id)
            say(
                f"the leader {leader.node_id} at {leader.endpoint} does not answer; waiting "
                "for the other curators to elect another"
            )
        await anyio.sleep(ASK_AGAIN)
        left = deadline - anyio.current_time()
        if left <= 0:
            raise NoLeaderError(
                f"the leader {leader.node_id} at {leader.endpoint} does not answer, and no "
                f"other curator took over within {timeout:g} s; is its node stopped or its "
                "machine paused? The others elect a new leader once its lease runs out "
                "(lease_ttl); a longer --timeout waits for that"
            )


async def _leading_channel(
    access: ClusterAccess,
    node_id: str,
    target: str,
    timeout: float,  # noqa: ASYNC109 -- how long it may take to answer
) -> grpc.aio.Channel | None:
    """A channel to the curator at ``target``, verified as exactly ``node_id``, if that
    curator says on it within ``timeout`` seconds that it leads; else None (closed).

    A call (``GetCurrentLeader``), not a wait for the connection (``until_ready``, which
    looks every 0.1 s): it ends as soon as the curator answers, checks the connection and
    the leadership at once, and the channel it was made on is the session's, so one TLS
    handshake serves both.
    """
    channel = secure_channel(target, access.tls, node_id=node_id)
    if await _says_it_leads(channel, node_id, timeout):
        return channel
    await channel.close()
    return None


async def _says_it_leads(
    channel: grpc.aio.Channel,
    node_id: str,
    timeout: float,  # noqa: ASYNC109 -- how long it may take to answer
) -> bool:
    call = curator_pb2_grpc.CuratorLocalStub(channel).GetCurrentLeader(
        curator_pb2.GetCurrentLeaderRequest()
    )
    try:
        with anyio.move_on_after(timeout):
            async for answer in call:
                return answer.this_node_id == answer.leader_node_id == node_id
    except grpc.aio.AioRpcError:
        return False
    finally:
        call.cancel()
    return False


def _management_target(
    leader: LeaderInfo | None, quorum: curator_pb2.NoQuorum | None
) -> tuple[str, str]:
    """The node ID and endpoint to open the Management channel to: the leader's; without
    one, the curator of a member that answers (it refuses every call: it does not lead)."""
    if leader is not None:
        return leader.node_id, leader.endpoint
    assert quorum is not None
    member = next(member for member in quorum.members if member.answers)
    return member.node_id, endpoint(member.address, CURATOR_PORT)


def _member_node(member: curator_pb2.NoQuorum.Member) -> management_pb2.Node:
    """A consensus member as a node record: its ID and address, all that is known of it."""
    node = management_pb2.Node(id=member.node_id)
    node.status.external_address = member.address
    return node


async def remember_curators(session: Session, directory: Path) -> None:
    """Remember the leader (``_last_leader``), and add the cluster's current curators to
    the access directory's endpoints.

    The endpoints are only where the search for the leader starts; kept current, they still
    find it when the node that bootstrapped the cluster (often the only one written there)
    is down. Best effort: a directory that cannot be written, or a leader that does not
    answer in time, changes nothing.
    """
    if session.found is not None:
        _last_leader.remember(directory, session.found.node_id, session.found.endpoint)
    request = management_pb2.GetClusterInfoRequest()
    try:
        info = await session.management.GetClusterInfo(request, timeout=session.timeout)
    except grpc.aio.AioRpcError:
        return
    curators = [
        endpoint(address, CURATOR_PORT)
        for node in info.cluster_directory.nodes
        for address in node.addresses[:1]
    ]
    known = session.access.endpoints
    if set(curators) <= set(known):
        return
    with contextlib.suppress(OSError):
        ClusterAccess.of(session.access.tls, [*curators, *known]).save(directory)


# Exported by roleserve_core (ctl_extension) as CtlSession: reported there, not here (see _public;
# ctl is no public package whose end could say so, and ctl_extension is imported only by plugins).
publish("roleserve_core", {"CtlSession": Session}, ["CtlSession"])
