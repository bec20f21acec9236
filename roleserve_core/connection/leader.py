"""Finding the leading curator, and following it as it changes.

Any curator answers ``CuratorLocal.GetCurrentLeader``: the leader about itself, a follower
about whoever leads. So a client needs only some curator endpoints (seeds, or every node
that runs a curator). ``follow_leader`` asks them in turn and keeps following one stream;
``find_leader``, a one-off look, asks them all at once and takes the first answer::

    pass over the candidates:
        GetCurrentLeader on candidate ─▶ first answer within `answer_timeout`?
            yes: yield the leader; keep reading the stream, yield each change
                 (stream ends: the answering curator stopped, or stopped leading)
            no / error / "no leader yet": next candidate
    a pass without any answer: wait the backoff (0.25 s doubling to 5 s), pass again

A pass in which every candidate refused the connection (nothing listens there) is reported
to ``on_refused``: ``find_leader`` can then fail at once when the caller says refusals are
final (``roleserve ctl``, where a person waits), instead of passing again until the timeout.
So is a pass in which those that did not refuse presented a certificate our CA did not sign
(``ForeignClusterError``: credentials of one cluster, the address of another).
A node keeps asking: its curators may be starting. Likewise a pass without a leader in which
a curator said its consensus has no quorum (``no_quorum``: which members answer) goes to
``on_no_quorum``: no leader can come until enough members run again, and waiting out the
timeout would only hide why (``NoQuorumError``).

The channel to each candidate verifies only that it is *a* node of the cluster (its node
certificate names ``ANY_NODE_NAME``); the caller then opens its channel to the leader
verifying exactly the leader's node ID. Monogon's resolver does the same with its leader
updater, with one difference: it uses a candidate's own address when the leader reports
none; so does this one.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import anyio
import grpc

from roleserve_core.errors import ExpectedError
from roleserve_core.identity import TlsCredentials
from roleserve_core.ports import CURATOR_PORT, endpoint, split_endpoint
from roleserve_core.proto import curator_pb2, curator_pb2_grpc
from roleserve_core.rpc import connection_refused, secure_channel

if TYPE_CHECKING:
    from roleserve_core.supervisor import Retry

__all__ = [
    "ForeignClusterError",
    "LeaderInfo",
    "LeaderRefusedError",
    "NoLeaderError",
    "NoQuorumError",
    "find_leader",
    "follow_leader",
]

log = logging.getLogger("roleserve.connection")

NODE_KEEPALIVE_OPTIONS: tuple[tuple[str, int], ...] = (("grpc.keepalive_time_ms", 30_000),)
"""A node's channels to the curators ping every 30 s, not every 10 (``rpc.KEEPALIVE_OPTIONS``):
the leader's hang is noticed by the heartbeat's missing reply (2 s after a beat sent every
5 s) long before a ping would, and a hung follower, whose GetCurrentLeader stream the
connector follows, within 35 s instead of 15, while a leader change still reaches the node
through the heartbeat. Each ping wakes gRPC's threads at both ends: on an idle node they
were half its network events (6 heartbeats and 6 pings in 30 s)."""

FIRST_BACKOFF = 0.25
MAX_BACKOFF = 5.0
"""Seconds between passes that named no leader: FIRST_BACKOFF, doubling up to MAX_BACKOFF."""
ANSWER_TIMEOUT = 5.0
"""Seconds a candidate has to give its first answer."""


class NoLeaderError(ExpectedError):
    """No curator could name a leader in time (expected while the curators elect one)."""


class LeaderRefusedError(NoLeaderError):
    """Every curator endpoint refused the connection: nothing listens at any of them."""


class ForeignClusterError(LeaderRefusedError):
    """The curators that answered are of another cluster: their certificates are not signed
    by the CA of the credentials (the others refused the connection). The caller, which
    knows where the credentials came from, says so in its terms (``ctl``: the directory).

    :param endpoints: the curators of the other cluster.
    """

    def __init__(self, endpoints: Sequence[str]) -> None:
        self.endpoints = tuple(endpoints)
        super().__init__(
            f"the curator at {', '.join(self.endpoints)} is not of the cluster of these "
            "credentials (its CA differs); are these the right credentials for this address?"
        )


START_THEM = "start them (`roleserve node run` on each)"
"""How to bring consensus members back, unless the caller knows better (a local cluster)."""


class NoQuorumError(NoLeaderError):
    """A curator said its consensus has no quorum: fewer than a majority of the voting
    members answer, so no leader can be elected until enough of them run again.

    :param quorum: the members, as that curator saw them.
    :param how: what to do, at the end of the message.
    """

    def __init__(self, quorum: curator_pb2.NoQuorum, how: str = START_THEM) -> None:
        self.quorum = quorum
        answering = [m.node_id for m in quorum.members if m.answers]
        silent = [f"{m.node_id} {m.address}" for m in quorum.members if not m.answers]
        super().__init__(
            f"no quorum: {len(answering)} of {len(quorum.members)} consensus members answer "
            f"({', '.join(answering) or 'none'}); not answering: {', '.join(silent)}; {how}, "
            "and a leader is elected once a majority answers"
        )


@dataclass(frozen=True, slots=True)
class LeaderInfo:
    """The leading curator."""

    node_id: str
    endpoint: str
    """``host:port`` of its curator."""
    answered_by: str
    """The candidate endpoint that named it."""
    answered_by_leader: bool = False
    """Whether the leader itself answered (not a follower about it)."""


Candidates = Callable[[], Sequence[str]]
"""Returns the endpoints to ask, each pass anew (the set may grow while following)."""


async def follow_leader(
    candidates: Candidates,
    credentials: TlsCredentials,
    *,
    answer_timeout: float = ANSWER_TIMEOUT,
    on_refused: Callable[[Sequence[str]], None] | None = None,
    on_no_quorum: Callable[[curator_pb2.NoQuorum], None] | None = None,
) -> AsyncGenerator[LeaderInfo, None]:
    """Yield the leader, then every change of leader, forever.

    The same leader is not repeated, except after the leader's own stream ended: its server
    restarted (it stopped leading and was elected again), and channels to it must start
    over. Runs until the caller stops iterating.

    :param on_refused: called with the candidates after a pass in which every one refused
        the connection; what it raises ends the iteration.
    :param on_no_quorum: called after a pass without a leader in which a curator said its
        consensus has no quorum, with what it said; what it raises ends the iteration.
    """
    last: LeaderInfo | None = None
    pauses: Retry | None = None  # made by the first pass without an answer (_pauses)
    while True:
        answered = False
        asking = list(candidates())
        found = _Pass()
        for candidate in asking:
            asking_one = _ask(candidate, credentials, answer_timeout, found)
            async with contextlib.aclosing(asking_one) as asked:
                async for leader in asked:
                    answered = True
                    changed = last is None or (leader.node_id, leader.endpoint) != (
                        last.node_id,
                        last.endpoint,
                    )
                    # Who answered last, even when not repeated: the leader naming itself
                    # after a follower named it still has its own stream, whose end counts.
                    last = leader
                    if changed:
                        yield leader
            if last is not None and last.answered_by_leader and last.answered_by == candidate:
                last = None  # the leader's own stream ended: see the docstring
        if answered:
            pauses = None  # the next pause is the first delay again
            continue
        _report_pass(asking, found, on_refused, on_no_quorum)
        pauses = pauses or _pauses()
        await pauses.wait()


def _pauses() -> Retry:
    """The pauses between passes (read at each look: a test shortens them).

    Made only once a pass found no leader, and the supervisor (where ``Retry`` lives)
    imported only then: ``roleserve ctl`` usually finds the leader at the first pass, and
    loading the supervision tree would cost each of its commands more than the search.
    """
    from roleserve_core.supervisor import BackoffPolicy, Retry

    return Retry(
        BackoffPolicy(initial=FIRST_BACKOFF, multiplier=2.0, maximum=MAX_BACKOFF, jitter=0.0)
    )


@dataclass
class _Pass:
    """What the candidates of one pass that named no leader said instead."""

    refused: set[str] = field(default_factory=set)
    """Candidates that refused the connection: nothing listens there."""
    foreign: set[str] = field(default_factory=set)
    """Candidates whose certificate our CA did not sign: a curator of another cluster."""
    quorum: list[curator_pb2.NoQuorum] = field(default_factory=list)
    """What curators that said their consensus has no quorum said of it."""


def _report_pass(
    asking: Sequence[str],
    found: _Pass,
    on_refused: Callable[[Sequence[str]], None] | None,
    on_no_quorum: Callable[[curator_pb2.NoQuorum], None] | None,
) -> None:
    """After a pass that named no leader: every candidate refused or is of another cluster,
    or one said there is no quorum (see the module docstring)."""
    if on_refused is not None and asking and found.refused | found.foreign == set(asking):
        if found.foreign:
            raise ForeignClusterError(sorted(found.foreign))
        on_refused(asking)
    if on_no_quorum is not None and found.quorum:
        on_no_quorum(found.quorum[-1])


async def find_leader(
    endpoints: Sequence[str],
    credentials: TlsCredentials,
    *,
    timeout: float = 30.0,  # noqa: ASYNC109 -- named in the error it raises
    refused_is_final: bool = False,
    no_quorum_is_final: bool = False,
) -> LeaderInfo:
    """The leader, asking every one of ``endpoints`` at once: the first to name it wins.

    At once rather than in turn: a curator that accepts connections and never answers (a
    hung node) would otherwise hold up every look for the answer timeout, although the
    others name the leader at once.

    :param refused_is_final: fail as soon as every endpoint refused the connection,
        instead of asking again until ``timeout`` (see the module docstring).
    :param no_quorum_is_final: fail as soon as a pass found no leader and a curator said
        there is no quorum.
    :raises LeaderRefusedError: with ``refused_is_final``, when every endpoint refused.
    :raises ForeignClusterError: with ``refused_is_final``, when every endpoint refused or
        is a curator of another cluster, and at least one is.
    :raises NoQuorumError: with ``no_quorum_is_final``, when a curator said so.
    :raises NoLeaderError: if none named a leader within ``timeout`` seconds.
    """
    on_refused = _raise_refused if refused_is_final else None
    on_no_quorum = _raise_no_quorum if no_quorum_is_final else None
    with anyio.move_on_after(timeout):
        pauses: Retry | None = None  # made by the first pass without a leader (_pauses)
        while True:
            found = _Pass()
            leader = await _first_named(endpoints, credentials, found)
            if leader is not None:
                return leader
            _report_pass(endpoints, found, on_refused, on_no_quorum)
            pauses = pauses or _pauses()
            await pauses.wait()
    raise NoLeaderError(
        f"no curator at {', '.join(endpoints)} named a leader within {timeout:g} s; "
        "is the cluster running, and are these its addresses?"
    )


async def _first_named(
    endpoints: Sequence[str],
    credentials: TlsCredentials,
    found: _Pass,
) -> LeaderInfo | None:
    """The leader the first of ``endpoints`` to answer names, asking all at once; None if
    none did (``found`` says why, as in ``_ask``)."""
    named: list[LeaderInfo] = []
    async with anyio.create_task_group() as asking:

        async def ask(candidate: str) -> None:
            answers = _ask(candidate, credentials, ANSWER_TIMEOUT, found)
            async with contextlib.aclosing(answers):
                async for leader in answers:
                    named.append(leader)
                    asking.cancel_scope.cancel()
                    return

        for candidate in endpoints:
            asking.start_soon(ask, candidate)
    return named[0] if named else None


def _raise_refused(endpoints: Sequence[str]) -> None:
    raise LeaderRefusedError(
        f"connection refused at {', '.join(endpoints)}: no curator listens there; is the "
        "cluster running, and are these its addresses?"
    )


def _raise_no_quorum(quorum: curator_pb2.NoQuorum) -> None:
    raise NoQuorumError(quorum)


async def _ask(
    candidate: str,
    credentials: TlsCredentials,
    answer_timeout: float,
    found: _Pass,
) -> AsyncGenerator[LeaderInfo, None]:
    """The leaders one candidate names, until its stream ends or fails; what it said
    instead goes into ``found``: that it refused the connection, that its certificate is of
    another cluster, or what it said of its consensus if it has no quorum."""
    async with secure_channel(candidate, credentials, options=NODE_KEEPALIVE_OPTIONS) as channel:
        stub = curator_pb2_grpc.CuratorLocalStub(channel)
        stream = stub.GetCurrentLeader(curator_pb2.GetCurrentLeaderRequest())
        try:
            answers = aiter(stream)
            with anyio.fail_after(answer_timeout):
                first = await anext(answers)
            leader = _leader(candidate, first)
            if leader is None:
                if first.HasField("no_quorum"):
                    found.quorum.append(first.no_quorum)
                # "No leader yet" first: the next candidate (see the module docstring), not a
                # wait on this one, which may last while another candidate knows the leader.
                log.debug("curator %s: no leader yet", candidate)
                return
            yield leader
            async for answer in answers:
                leader = _leader(candidate, answer)
                if leader is not None:
                    yield leader
        except (grpc.aio.AioRpcError, TimeoutError, StopAsyncIteration) as exc:
            log.debug("curator %s: %s", candidate, _describe(exc))
            if connection_refused(exc):
                found.refused.add(candidate)
            elif _is_foreign(exc):
                found.foreign.add(candidate)
        finally:
            stream.cancel()


def _leader(candidate: str, answer: curator_pb2.GetCurrentLeaderResponse) -> LeaderInfo | None:
    if not answer.leader_node_id:
        return None  # an election in progress
    host = answer.leader_host or split_endpoint(candidate, CURATOR_PORT)[0]
    port = answer.leader_port or CURATOR_PORT
    itself = answer.this_node_id == answer.leader_node_id
    return LeaderInfo(answer.leader_node_id, endpoint(host, port), candidate, itself)


def _is_foreign(exc: BaseException) -> bool:
    """Whether ``exc`` says the candidate's certificate failed verification against our CA
    (gRPC reports a failed handshake as UNAVAILABLE, naming the cause only in its details):
    it is a curator of another cluster, and asking again cannot change that."""
    return (
        isinstance(exc, grpc.aio.AioRpcError)
        and exc.code() == grpc.StatusCode.UNAVAILABLE
        and "CERTIFICATE_VERIFY_FAILED" in (exc.details() or "")
    )


def _describe(exc: BaseException) -> str:
    if isinstance(exc, grpc.aio.AioRpcError):
        return f"{exc.code().name}: {exc.details()}"
    if isinstance(exc, TimeoutError):
        return "no answer in time"
    return "stream ended"
