"""The connection to the leading curator (``roleserve_core.connection``): finding and
following the leader, the curators a node knows, sessions on each connection, and the
connector in a node runtime.

``follow_leader`` and ``find_leader`` ask fake curators of the test kit (real gRPC servers
with mutual TLS on loopback addresses of the test's own). A task collects every leader
``follow_leader`` yields into a ``Value``; a test waits for the sequence it expects and
compares it whole, so a repeated or missing leader fails it. ``on_each_connection`` and
``CuratorConnector`` run in a node runtime under a supervisor on the fake clock: a backoff
that must not happen never ends, and the test's wait fails. Nothing waits on a sleep; the
timeouts of the code under test (answer timeout, window, grace) are set short.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import anyio
import grpc
import pytest

from roleserve_core.connection import (
    LeaderInfo,
    LeaderRefusedError,
    NoLeaderError,
    NoQuorumError,
    find_leader,
    follow_leader,
)
from roleserve_core.connection import connector as connector_module
from roleserve_core.connection import leader as leader_module
from roleserve_core.connection.connector import CuratorConnector
from roleserve_core.connection.curators import KnownCurators, curator_endpoint
from roleserve_core.connection.leader import ANSWER_TIMEOUT
from roleserve_core.connection.session import (
    LEADER_CHANGE_WINDOW,
    LEADER_STARTING_RETRY,
    Session,
    on_each_connection,
)
from roleserve_core.datadir import NodeDataDirectory
from roleserve_core.errors import RoleserveError
from roleserve_core.event import Value, ValueWatch
from roleserve_core.identity import Credentials
from roleserve_core.ports import CURATOR_PORT, endpoint
from roleserve_core.proto import common_pb2, curator_pb2, curator_pb2_grpc
from roleserve_core.rpc import (
    LEADER_STARTING_METADATA,
    NODE_REFUSED_METADATA,
    CancellationSafeChannel,
    secure_channel,
    until_ready,
)
from roleserve_core.runtime import CORE_READER
from roleserve_core.supervisor import RunContext, State
from roleserve_core.testing import (
    NO_CHANNEL,
    FakeClock,
    FakeCluster,
    FakeCurator,
    NodeHarness,
    PluginHarness,
    random_loopback,
    wait_for_value,
)
from roleserve_core.values import CURATOR_CONNECTION, NODE_CREDENTIALS, CuratorConnection
from roleserve_core.workers import heartbeat as heartbeat_module

pytestmark = pytest.mark.anyio

CONNECTION = "root.connection"
CURATORS = "root.connection.curators"
SESSION = "root.session"
HEARTBEAT = "root.role.heartbeat"

SHORT_ANSWER_TIMEOUT = 1.0
"""``answer_timeout`` where a candidate is meant not to answer: what that costs."""

SLACK = 0.01
"""Seconds a timer of the event loop may fire early (its clock's resolution, and more)."""


@pytest.fixture
def cluster(fake_cluster: FakeCluster) -> FakeCluster:
    """The test kit's, by a shorter name; requested before the node (see ``fake_cluster``)."""
    return fake_cluster


def nobody() -> str:
    """An endpoint where nothing listens: connecting is refused."""
    return endpoint(random_loopback(), CURATOR_PORT)


async def wait_answers(curator: FakeCurator, count: int) -> None:
    """Until ``curator`` has sent ``count`` GetCurrentLeader answers in all."""
    await wait_for_value(curator.leader_answers, lambda sent: sent >= count)


def asked_by(curator: FakeCurator) -> list[str | None]:
    """Who called GetCurrentLeader on ``curator``, in order."""
    return [call.caller for call in curator.calls.get_nowait() if call.method == "GetCurrentLeader"]


# -- follow_leader and find_leader ----------------------------------------------------------

Leaders = Value[tuple[LeaderInfo, ...]]


@contextlib.asynccontextmanager
async def following(
    candidates: Callable[[], Sequence[str]],
    credentials: Credentials,
    *,
    answer_timeout: float = ANSWER_TIMEOUT,
) -> AsyncIterator[Leaders]:
    """Run ``follow_leader`` in a task; every leader it yields, in order, in a Value."""
    leaders: Leaders = Value()
    leaders.set(())

    async def collect() -> None:
        found = follow_leader(candidates, credentials, answer_timeout=answer_timeout)
        async with contextlib.aclosing(found):
            async for leader in found:
                leaders.set((*leaders.get_nowait(), leader))

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(collect)
        yield leaders
        tasks.cancel_scope.cancel()


async def wait_leaders(leaders: Leaders, count: int, **options: Any) -> tuple[LeaderInfo, ...]:
    """The leaders once there are at least ``count``."""
    return await wait_for_value(leaders, lambda found: len(found) >= count, **options)


def named(leader: FakeCurator, by: FakeCurator, *, at: str | None = None) -> LeaderInfo:
    """What follow_leader yields when ``by`` names ``leader`` (at ``at``, else its own
    endpoint)."""
    return LeaderInfo(leader.node_id, at or leader.endpoint, by.endpoint, leader is by)


async def test_follow_leader_a_follower_names_the_leader_at_the_followers_host(
    cluster: FakeCluster,
) -> None:
    """A leader reported without a host is at the host of the curator that named it."""
    leader = await cluster.curator()
    follower = await cluster.curator()
    follower.follow(leader, host="")
    async with following(lambda: [follower.endpoint], cluster.credentials) as leaders:
        found = await wait_leaders(leaders, 1)
    assert found == (named(leader, follower, at=follower.endpoint),)
    assert found[0].endpoint == endpoint(follower.address, CURATOR_PORT) != leader.endpoint
    assert not found[0].answered_by_leader
    assert asked_by(follower) == [cluster.credentials.node_id]


async def test_follow_leader_yields_each_change_and_never_the_same_leader_twice(
    cluster: FakeCluster,
) -> None:
    first = await cluster.curator()
    second = await cluster.curator()
    follower = await cluster.curator()
    follower.follow(first)
    async with following(lambda: [follower.endpoint], cluster.credentials) as leaders:
        assert await wait_leaders(leaders, 1) == (named(first, follower),)

        # An election ("no leader yet"), won by the same leader: nothing new. Then a change.
        # (Each answer is sent before the next is set: the fake sends only the newest.)
        follower.follow(None)
        await wait_answers(follower, 2)
        follower.follow(first)
        await wait_answers(follower, 3)
        follower.follow(second)
        assert await wait_leaders(leaders, 2) == (named(first, follower), named(second, follower))

        # The follower's stream ends: asked again, it names the same leader, which is not
        # repeated; the next change is.
        follower.end_streams("GetCurrentLeader")
        await wait_answers(follower, 5)
        follower.follow(first)
        assert await wait_leaders(leaders, 3) == (
            named(first, follower),
            named(second, follower),
            named(first, follower),
        )
    assert len(asked_by(follower)) == 2


async def test_follow_leader_yields_the_leader_again_after_its_own_stream_ended(
    cluster: FakeCluster,
) -> None:
    """Its server restarted: channels to it must start over."""
    leader = await cluster.curator()
    leader.lead()
    async with following(lambda: [leader.endpoint], cluster.credentials) as leaders:
        assert await wait_leaders(leaders, 1) == (named(leader, leader),)
        assert leaders.get_nowait()[0].answered_by_leader

        leader.end_streams("GetCurrentLeader")
        assert await wait_leaders(leaders, 2) == (named(leader, leader), named(leader, leader))
    assert len(asked_by(leader)) == 2


async def test_follow_leader_yields_the_leader_again_when_it_answered_last(
    cluster: FakeCluster,
) -> None:
    """Named first by a follower, then by itself: its own stream ending counts as well."""
    leader = await cluster.curator()
    follower = await cluster.curator()
    leader.lead()
    follower.follow(leader)
    candidates = [follower.endpoint, leader.endpoint]
    async with following(lambda: candidates, cluster.credentials) as leaders:
        assert await wait_leaders(leaders, 1) == (named(leader, follower),)

        # The follower goes away: the leader, asked next, names itself (not repeated).
        await follower.stop()
        await wait_answers(leader, 1)
        # Its stream ends after that answer: found again.
        leader.end_streams("GetCurrentLeader")
        found = await wait_leaders(leaders, 2)
    assert found == (named(leader, follower), named(leader, leader))
    assert len(asked_by(leader)) == 2


async def test_follow_leader_skips_candidates_that_refuse_or_do_not_answer(
    cluster: FakeCluster,
) -> None:
    leader = await cluster.curator()
    refusing = await cluster.curator()
    refusing.refuse("GetCurrentLeader", grpc.StatusCode.UNAVAILABLE, "not serving")
    hanging = await cluster.curator()  # never answers
    follower = await cluster.curator()
    follower.follow(leader)
    candidates = [nobody(), refusing.endpoint, hanging.endpoint, follower.endpoint]
    async with following(
        lambda: candidates, cluster.credentials, answer_timeout=SHORT_ANSWER_TIMEOUT
    ) as leaders:
        started = anyio.current_time()
        assert await wait_leaders(leaders, 1) == (named(leader, follower),)
        waited = anyio.current_time() - started
    assert len(asked_by(refusing)) == len(asked_by(hanging)) == 1
    assert waited >= SHORT_ANSWER_TIMEOUT - SLACK  # the hanging one had its time


async def test_follow_leader_skips_a_candidate_without_a_leader_yet(
    cluster: FakeCluster,
) -> None:
    """A first answer of "no leader yet": the next candidate, not a wait on this one."""
    leader = await cluster.curator()
    electing = await cluster.curator()
    electing.follow(None)
    follower = await cluster.curator()
    follower.follow(leader)
    candidates = [electing.endpoint, follower.endpoint]
    async with following(lambda: candidates, cluster.credentials) as leaders:
        found = await wait_leaders(leaders, 1, timeout=ANSWER_TIMEOUT)
    assert found == (named(leader, follower),)
    assert len(asked_by(electing)) == 1


async def test_follow_leader_reads_the_candidates_anew_on_each_pass(
    cluster: FakeCluster,
) -> None:
    first = await cluster.curator()
    second = await cluster.curator()
    early = await cluster.curator()
    late = await cluster.curator()
    early.follow(first)
    late.follow(second)
    passes: list[list[str]] = [[nobody()], [early.endpoint], [late.endpoint]]
    asked: list[list[str]] = []

    def candidates() -> list[str]:
        asked.append(passes[min(len(asked), len(passes) - 1)])
        return asked[-1]

    async with following(candidates, cluster.credentials) as leaders:
        # Pass 1: nobody answers; after the backoff, pass 2 asks the one added meanwhile.
        assert await wait_leaders(leaders, 1) == (named(first, early),)
        # Its stream ends: pass 3, at once, asks only what the candidates are now.
        early.end_streams("GetCurrentLeader")
        assert await wait_leaders(leaders, 2) == (named(first, early), named(second, late))
    assert asked[:3] == passes
    assert len(asked_by(early)) == 1


async def test_follow_leader_asks_again_at_once_after_a_pass_with_an_answer(
    cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The backoff is for passes nobody answered in: here it would outlast the wait."""
    monkeypatch.setattr(leader_module, "FIRST_BACKOFF", 3600.0)
    leader = await cluster.curator()
    follower = await cluster.curator()
    follower.follow(leader)
    async with following(lambda: [follower.endpoint], cluster.credentials) as leaders:
        await wait_leaders(leaders, 1)
        follower.end_streams("GetCurrentLeader")
        await follower.wait_calls("GetCurrentLeader", 2)


async def test_find_leader_returns_the_first_leader_named(cluster: FakeCluster) -> None:
    leader = await cluster.curator()
    leader.lead()
    with anyio.fail_after(ANSWER_TIMEOUT):
        found = await find_leader([nobody(), leader.endpoint], cluster.credentials)
    assert found == named(leader, leader)


async def test_find_leader_does_not_wait_for_a_curator_that_never_answers(
    cluster: FakeCluster,
) -> None:
    """A hung curator (it accepts the call and never answers) listed first costs nothing:
    every endpoint is asked at once, and the follower's answer is taken. Asked in turn, the
    hung one held ``ctl`` up for its whole answer timeout."""
    leader = await cluster.curator()
    hanging = await cluster.curator()  # never answers
    follower = await cluster.curator()
    follower.follow(leader)
    with anyio.fail_after(ANSWER_TIMEOUT / 2):
        found = await find_leader([hanging.endpoint, follower.endpoint], cluster.credentials)
    assert found == named(leader, follower)
    # Not asserted: that the hung one saw the call. Asked at once, it may still be
    # cancelled before its server records it, once the follower answered first.


async def test_find_leader_names_the_endpoints_when_nobody_answers(cluster: FakeCluster) -> None:
    hanging = await cluster.curator()
    refusing = await cluster.curator()
    refusing.refuse("GetCurrentLeader", grpc.StatusCode.UNAVAILABLE, "not serving")
    endpoints = [refusing.endpoint, hanging.endpoint]
    with anyio.fail_after(ANSWER_TIMEOUT), pytest.raises(NoLeaderError) as raised:
        await find_leader(endpoints, cluster.credentials, timeout=0.5)
    assert str(raised.value) == (
        f"no curator at {refusing.endpoint}, {hanging.endpoint} named a leader within 0.5 s; "
        "is the cluster running, and are these its addresses?"
    )
    assert isinstance(raised.value, RoleserveError)
    assert len(asked_by(refusing)) == len(asked_by(hanging)) == 1  # it waits for an answer


async def test_find_leader_fails_at_once_when_every_endpoint_refuses_if_told(
    cluster: FakeCluster,
) -> None:
    endpoints = [nobody(), nobody()]
    with anyio.fail_after(ANSWER_TIMEOUT), pytest.raises(LeaderRefusedError) as raised:
        await find_leader(endpoints, cluster.credentials, timeout=60, refused_is_final=True)
    assert str(raised.value) == (
        f"connection refused at {endpoints[0]}, {endpoints[1]}: no curator listens there; "
        "is the cluster running, and are these its addresses?"
    )


async def test_find_leader_waits_while_one_endpoint_does_more_than_refuse(
    cluster: FakeCluster,
) -> None:
    """A curator's own refusal (it runs, but does not serve yet) may end by waiting."""
    serving_later = await cluster.curator()
    serving_later.refuse("GetCurrentLeader", grpc.StatusCode.UNAVAILABLE, "not serving")
    endpoints = [nobody(), serving_later.endpoint]
    with anyio.fail_after(ANSWER_TIMEOUT), pytest.raises(NoLeaderError) as raised:
        await find_leader(endpoints, cluster.credentials, timeout=0.5, refused_is_final=True)
    assert type(raised.value) is NoLeaderError
    assert len(asked_by(serving_later)) > 1  # asked again after the first pass


async def test_find_leader_keeps_asking_refusing_endpoints_by_default(
    cluster: FakeCluster,
) -> None:
    """A node's curators may be starting: it waits for them."""
    with anyio.fail_after(ANSWER_TIMEOUT), pytest.raises(NoLeaderError) as raised:
        await find_leader([nobody()], cluster.credentials, timeout=0.5)
    assert type(raised.value) is NoLeaderError


def one_of_three(answering: FakeCurator) -> curator_pb2.NoQuorum:
    """A consensus of three in which only ``answering``'s member answers."""
    member = curator_pb2.NoQuorum.Member
    return curator_pb2.NoQuorum(
        members=[
            member(node_id=answering.node_id, address="127.0.0.11", answers=True),
            member(node_id="node-b", address="127.0.0.12", answers=False),
            member(node_id="node-c", address="127.0.0.13", answers=False),
        ]
    )


async def test_find_leader_fails_at_once_naming_the_members_when_there_is_no_quorum_if_told(
    cluster: FakeCluster,
) -> None:
    """The pass ends without a leader and a curator said why: no waiting out the timeout."""
    survivor = await cluster.curator()
    survivor.without_quorum(one_of_three(survivor))
    endpoints = [nobody(), survivor.endpoint, nobody()]
    with anyio.fail_after(ANSWER_TIMEOUT), pytest.raises(NoQuorumError) as raised:
        await find_leader(endpoints, cluster.credentials, timeout=60, no_quorum_is_final=True)
    assert str(raised.value) == (
        f"no quorum: 1 of 3 consensus members answer ({survivor.node_id}); not answering: "
        "node-b 127.0.0.12, node-c 127.0.0.13; start them (`roleserve node run` on each), "
        "and a leader is elected once a majority answers"
    )
    assert isinstance(raised.value, NoLeaderError)
    assert len(asked_by(survivor)) == 1


async def test_find_leader_without_quorum_keeps_asking_by_default(cluster: FakeCluster) -> None:
    """A node (and ``cluster up``, which just started the members) waits for them."""
    survivor = await cluster.curator()
    survivor.without_quorum(one_of_three(survivor))
    with anyio.fail_after(ANSWER_TIMEOUT), pytest.raises(NoLeaderError) as raised:
        await find_leader([survivor.endpoint], cluster.credentials, timeout=0.5)
    assert type(raised.value) is NoLeaderError
    assert len(asked_by(survivor)) > 1


# -- KnownCurators and curator_endpoint ------------------------------------------------------


@pytest.fixture
def datadir(tmp_path: Path) -> NodeDataDirectory:
    directory = NodeDataDirectory(tmp_path / "data")
    directory.create()
    return directory


def test_known_curators_are_learned_ones_first_then_seeds_once_each(
    datadir: NodeDataDirectory,
) -> None:
    known = KnownCurators(datadir)
    assert known.candidates() == []
    known.set_seeds(["10.0.0.1:7835", "10.0.0.2:7835", "10.0.0.1:7835"])
    assert known.seeds == ["10.0.0.1:7835", "10.0.0.2:7835"]
    assert known.candidates() == ["10.0.0.1:7835", "10.0.0.2:7835"]

    assert known.learn(["10.0.0.9:7835", "10.0.0.2:7835", "10.0.0.3:7900", "10.0.0.9:7835"])
    assert known.curators == ["10.0.0.2:7835", "10.0.0.3:7900", "10.0.0.9:7835"]
    assert known.candidates() == [
        "10.0.0.2:7835",
        "10.0.0.3:7900",
        "10.0.0.9:7835",
        "10.0.0.1:7835",
    ]


def test_known_curators_learn_says_whether_they_changed(datadir: NodeDataDirectory) -> None:
    known = KnownCurators(datadir)
    assert known.learn(["10.0.0.2:7835", "10.0.0.1:7835"])
    assert not known.learn(["10.0.0.1:7835", "10.0.0.2:7835", "10.0.0.1:7835"])
    assert known.learn(["10.0.0.1:7835"])
    assert known.curators == ["10.0.0.1:7835"]
    assert not known.learn(["10.0.0.1:7835"])
    assert known.learn([])
    assert known.curators == []


def test_known_curators_are_saved_in_the_data_directory(datadir: NodeDataDirectory) -> None:
    known = KnownCurators(datadir)
    assert not datadir.curators.exists()
    known.set_seeds(["10.0.0.1:7835"])
    known.learn(["10.0.0.2:7835"])

    again = KnownCurators(datadir)
    assert again.seeds == ["10.0.0.1:7835"]
    assert again.curators == ["10.0.0.2:7835"]
    assert again.candidates() == ["10.0.0.2:7835", "10.0.0.1:7835"]

    # New seeds replace the old ones and keep what was learned.
    again.set_seeds(["10.0.0.3:7835"])
    third = KnownCurators(datadir)
    assert (third.seeds, third.curators) == (["10.0.0.3:7835"], ["10.0.0.2:7835"])


def node_with(
    address: str = "", curator_port: int | None = None, *, node_id: str = "node-a"
) -> curator_pb2.Node:
    status = common_pb2.NodeStatus(external_address=address)
    if curator_port is not None:
        status.running_curator.port = curator_port
    return curator_pb2.Node(id=node_id, status=status)


@pytest.mark.parametrize(
    ("node", "found"),
    [
        pytest.param(node_with("10.0.0.5", 7900), "10.0.0.5:7900", id="port"),
        pytest.param(node_with("10.0.0.5", 0), "10.0.0.5:7835", id="default-port"),
        pytest.param(node_with("2001:db8::5", 7835), "[2001:db8::5]:7835", id="ipv6"),
        pytest.param(node_with("10.0.0.5"), None, id="no-curator"),
        pytest.param(node_with("", 7835), None, id="no-address"),
        pytest.param(curator_pb2.Node(id="node-a"), None, id="no-status"),
    ],
)
def test_curator_endpoint(node: curator_pb2.Node, found: str | None) -> None:
    assert curator_endpoint(node) == found


# -- on_each_connection ------------------------------------------------------------------------


class RecordingSession:
    """A session that records each connection it runs on, and then fails with ``failure``
    (on the first run only, unless ``every_time``) or runs until cancelled."""

    def __init__(
        self, failure: grpc.aio.AioRpcError | None = None, *, every_time: bool = False
    ) -> None:
        self.failure = failure
        self.every_time = every_time
        self.connections: Value[tuple[CuratorConnection, ...]] = Value()
        self.connections.set(())
        self.failed_at: float | None = None

    async def __call__(self, connection: CuratorConnection) -> None:
        self.connections.set((*self.connections.get_nowait(), connection))
        if self.failure is not None and (
            self.every_time or len(self.connections.get_nowait()) == 1
        ):
            self.failed_at = anyio.current_time()
            raise self.failure
        await anyio.sleep_forever()

    async def wait(self, count: int) -> tuple[CuratorConnection, ...]:
        """The connections once it ran on ``count`` of them."""
        return await wait_for_value(self.connections, lambda found: len(found) >= count)


def connection(leader: str) -> CuratorConnection:
    """A connection nobody calls through."""
    return CuratorConnection("node-self", leader, f"127.0.0.1:{CURATOR_PORT}", NO_CHANNEL)


def cancelled_by_the_server() -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(
        grpc.StatusCode.CANCELLED, grpc.aio.Metadata(), grpc.aio.Metadata(), "CANCELLED"
    )


def unavailable() -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(
        grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(), "leader gone"
    )


StartSession = Callable[..., Awaitable[NodeHarness]]


@pytest.fixture
def start_session(node: Callable[..., Awaitable[NodeHarness]], tmp_path: Path) -> StartSession:
    """``await start_session(session, window=...)``: a node whose service ``session`` runs
    ``on_each_connection`` with ``session``."""

    async def started(session: Session, *, window: float = LEADER_CHANGE_WINDOW) -> NodeHarness:
        runtime = PluginHarness().runtime(tmp_path)
        values = runtime.registry.scoped(CORE_READER)

        async def run(ctx: RunContext) -> None:
            await on_each_connection(ctx, values, session, window=window)

        runtime.add_service("session", run)
        return await node(runtime)

    return started


async def test_on_each_connection_waits_for_the_connection(start_session: StartSession) -> None:
    session = RecordingSession()
    harness = await start_session(session)
    waiting = await harness.wait_status(
        SESSION, lambda s: s.note == "waiting for the connection to the curator"
    )
    assert waiting.state is State.NEW
    assert session.connections.get_nowait() == ()

    first = connection("leader-1")
    harness.set(CURATOR_CONNECTION, first)
    assert await session.wait(1) == (first,)
    assert harness.status(SESSION).note == ""


async def test_on_each_connection_restarts_on_a_new_connection(
    start_session: StartSession,
) -> None:
    """At once: the supervisor's clock is fake, so a backoff would never end."""
    session = RecordingSession()
    harness = await start_session(session)
    first, second, third = connection("leader-1"), connection("leader-2"), connection("leader-3")
    harness.set(CURATOR_CONNECTION, first)
    await session.wait(1)
    harness.set(CURATOR_CONNECTION, second)
    assert await session.wait(2) == (first, second)
    harness.set(CURATOR_CONNECTION, third)
    assert await session.wait(3) == (first, second, third)

    status = harness.status(SESSION)
    assert (status.restarts, status.failures, status.restart_in) == (2, 0, None)


async def test_on_each_connection_after_a_failure_restarts_on_a_new_connection(
    start_session: StartSession,
) -> None:
    session = RecordingSession(unavailable())
    harness = await start_session(session, window=60.0)
    first, second = connection("leader-1"), connection("leader-2")
    harness.set(CURATOR_CONNECTION, first)
    await harness.wait_status(
        SESSION,
        lambda s: s.note == "UNAVAILABLE: leader gone; waiting up to 60 s for a new leader",
    )
    assert harness.status(SESSION).failures == 0

    harness.set(CURATOR_CONNECTION, second)
    assert await session.wait(2) == (first, second)
    status = harness.status(SESSION)
    assert (status.restarts, status.failures, status.note) == (1, 0, "")


async def test_on_each_connection_fails_after_the_window_without_a_new_connection(
    start_session: StartSession,
) -> None:
    window = 0.3
    session = RecordingSession(unavailable())
    harness = await start_session(session, window=window)
    harness.set(CURATOR_CONNECTION, connection("leader-1"))
    failed = await harness.wait_status(SESSION, lambda s: s.failures == 1)
    assert session.failed_at is not None
    assert anyio.current_time() - session.failed_at >= window - SLACK
    assert failed.last_error is not None
    assert failed.last_error.type.endswith("AioRpcError")
    assert "UNAVAILABLE" in failed.last_error.message
    assert "leader gone" in failed.last_error.message
    assert len(session.connections.get_nowait()) == 1


JUST_ELECTED = "curator node-b was just elected and starts serving as the leader; retry"


@pytest.mark.parametrize(
    ("failure", "said"),
    [
        (
            grpc.aio.AioRpcError(
                grpc.StatusCode.UNAVAILABLE,
                grpc.aio.Metadata(),
                grpc.aio.Metadata(*LEADER_STARTING_METADATA),
                JUST_ELECTED,
            ),
            f"UNAVAILABLE: {JUST_ELECTED}",
        ),
        (cancelled_by_the_server(), "CANCELLED: CANCELLED"),
    ],
    ids=["just-elected", "cancelled"],
)
async def test_on_each_connection_retries_soon_where_the_curator_swaps_its_servers(
    start_session: StartSession,
    fake_clock: FakeClock,
    failure: grpc.aio.AioRpcError,
    said: str,
) -> None:
    """A curator that won the election and does not serve yet refuses, marked
    (``LEADER_STARTING_METADATA``); its follower's server, stopping for the leader's,
    cancels the calls it serves. Either way the session starts over on the same connection
    after ``LEADER_STARTING_RETRY`` on the node's clock at the latest (this channel shows no
    change of server), not after the window (a node waited out 15 s there, HEALTHY 17.7 s
    after its leader's SIGKILL; a heartbeat so cancelled kept one node of 99 from HEALTHY for
    25 s after its leader's SIGSTOP)."""
    session = RecordingSession(failure)
    harness = await start_session(session, window=600.0)
    first = connection("node-b")
    harness.set(CURATOR_CONNECTION, first)
    await harness.wait_status(SESSION, lambda s: s.note == f"{said}; retrying once it serves")
    await fake_clock.wake_sleeper(LEADER_STARTING_RETRY)
    assert await session.wait(2) == (first, first)
    status = harness.status(SESSION)
    assert (status.restarts, status.failures, status.note) == (1, 0, "")


async def test_on_each_connection_waits_out_the_window_when_the_server_cancels_again(
    start_session: StartSession, fake_clock: FakeClock
) -> None:
    """Only the first CANCELLED on a connection starts the session over soon: a server
    that cancels every call fails it after the window, counted (with the supervisor's
    backoff), instead of restarting it every second for good."""
    session = RecordingSession(cancelled_by_the_server(), every_time=True)
    harness = await start_session(session, window=600.0)
    first = connection("node-b")
    harness.set(CURATOR_CONNECTION, first)
    await harness.wait_status(SESSION, lambda s: s.note.endswith("retrying once it serves"))
    await fake_clock.wake_sleeper(LEADER_STARTING_RETRY)
    again = await harness.wait_status(SESSION, lambda s: s.note.endswith("for a new leader"))
    assert again.note == "CANCELLED: CANCELLED; waiting up to 600 s for a new leader"
    assert (again.restarts, again.failures) == (1, 0)
    assert session.connections.get_nowait() == (first, first)


def refused_for_good(reason: str, *, marked: bool = True) -> grpc.aio.AioRpcError:
    """A PERMISSION_DENIED as the leader's node gate sends it (``marked``), or as any other
    refusal of a permission (not marked)."""
    trailing = grpc.aio.Metadata(*NODE_REFUSED_METADATA) if marked else grpc.aio.Metadata()
    return grpc.aio.AioRpcError(
        grpc.StatusCode.PERMISSION_DENIED, grpc.aio.Metadata(), trailing, reason
    )


@pytest.mark.parametrize("marked", [True, False], ids=["gate", "other"])
async def test_on_each_connection_reports_a_refusal_of_the_node_for_good(
    start_session: StartSession, marked: bool
) -> None:
    """Only the gate's refusal (the node is decommissioned) reaches ``report_refused``,
    which stops the node; another PERMISSION_DENIED is an ordinary failure."""
    reason = "node node-self is decommissioned: stop it"
    reports: Value[tuple[str, ...]] = Value()
    reports.set(())
    session = RecordingSession(refused_for_good(reason, marked=marked))
    harness = await start_session(session, window=60.0)
    refused = dataclasses.replace(
        connection("leader-1"),
        on_refused=lambda said: reports.set((*reports.get_nowait(), said)),
    )
    harness.set(CURATOR_CONNECTION, refused)
    await harness.wait_status(SESSION, lambda s: s.note.startswith("PERMISSION_DENIED"))
    assert reports.get_nowait() == ((reason,) if marked else ())


class CallingSession:
    """A session that calls the curator once on each connection it runs on, records the
    outcome (None: answered) and then runs until cancelled."""

    def __init__(self) -> None:
        self.outcomes: Value[tuple[grpc.StatusCode | None, ...]] = Value()
        self.outcomes.set(())

    async def __call__(self, connection: CuratorConnection) -> None:
        stub = curator_pb2_grpc.CuratorStub(connection.channel)
        try:
            await stub.UpdateNodeStatus(curator_pb2.UpdateNodeStatusRequest(node_id="probe"))
        except grpc.aio.AioRpcError as exc:
            self.outcomes.set((*self.outcomes.get_nowait(), exc.code()))
            raise
        self.outcomes.set((*self.outcomes.get_nowait(), None))
        await anyio.sleep_forever()


async def test_on_each_connection_restarts_once_a_lost_leader_answers_again(
    cluster: FakeCluster, start_session: StartSession
) -> None:
    """A curator that wins the election restarts its server on the same port; a node that
    connected in between was refused, and no new connection will come. Its session starts
    over once the channel reaches the server again, not after the window."""
    leader = await cluster.curator()
    leader.lead()
    await leader.stop()
    session = CallingSession()
    harness = await start_session(session, window=600.0)
    channel = secure_channel(leader.endpoint, cluster.credentials, node_id=leader.node_id)
    async with channel:
        harness.set(
            CURATOR_CONNECTION,
            CuratorConnection("node-self", leader.node_id, leader.endpoint, channel),
        )
        refused = await wait_for_value(session.outcomes, lambda found: len(found) >= 1)
        assert refused == (grpc.StatusCode.UNAVAILABLE,)
        await leader.__aenter__()
        answered = await wait_for_value(session.outcomes, lambda found: len(found) >= 2)
        assert answered == (grpc.StatusCode.UNAVAILABLE, None)
        status = harness.status(SESSION)
        assert (status.restarts, status.failures, status.note) == (1, 0, "")


async def test_on_each_connection_restarts_once_a_just_elected_curator_serves(
    cluster: FakeCluster, start_session: StartSession
) -> None:
    """Refused "just elected; retry" (marked) over a working connection, the session starts
    over the moment the curator replaces its follower's server with the leader's, on the
    same port: the node's clock stands still, so neither the retry nor the window ends."""
    curator = await cluster.curator()
    curator.lead()
    said = f"curator {curator.node_id} was just elected and starts serving as the leader; retry"
    curator.refuse(
        "UpdateNodeStatus",
        grpc.StatusCode.UNAVAILABLE,
        said,
        metadata=LEADER_STARTING_METADATA,
    )
    session = CallingSession()
    harness = await start_session(session, window=600.0)
    channel = secure_channel(curator.endpoint, cluster.credentials, node_id=curator.node_id)
    async with channel:
        harness.set(
            CURATOR_CONNECTION,
            CuratorConnection("node-self", curator.node_id, curator.endpoint, channel),
        )
        refused = await wait_for_value(session.outcomes, lambda found: len(found) >= 1)
        assert refused == (grpc.StatusCode.UNAVAILABLE,)
        await harness.wait_status(SESSION, lambda s: s.note.endswith("retrying once it serves"))
        curator.allow("UpdateNodeStatus")
        await curator.stop()
        await curator.__aenter__()
        answered = await wait_for_value(session.outcomes, lambda found: len(found) >= 2)
        assert answered == (grpc.StatusCode.UNAVAILABLE, None)
        status = harness.status(SESSION)
        assert (status.restarts, status.failures, status.note) == (1, 0, "")


async def test_on_each_connection_restarts_at_once_after_a_refused_connection_to_a_ready_channel(
    cluster: FakeCluster, start_session: StartSession
) -> None:
    """A call refused a connection never reached a server: the just-elected leader was
    swapping its servers. By the time the session looks, the channel may be connected again
    to the leader's server; the session starts over then, not after the window (one node of
    99 waited out its 15 s so, seen at 100 nodes)."""
    curator = await cluster.curator()
    curator.lead()
    details = "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:7835: "
    refused = grpc.aio.AioRpcError(
        grpc.StatusCode.UNAVAILABLE,
        grpc.aio.Metadata(),
        grpc.aio.Metadata(),
        details + "Connection refused",
    )
    session = RecordingSession(refused)
    harness = await start_session(session, window=600.0)
    channel = secure_channel(curator.endpoint, cluster.credentials, node_id=curator.node_id)
    async with channel:
        await until_ready(channel)
        first = CuratorConnection("node-self", curator.node_id, curator.endpoint, channel)
        harness.set(CURATOR_CONNECTION, first)
        assert await session.wait(2) == (first, first)
        status = harness.status(SESSION)
        assert (status.restarts, status.failures, status.note) == (1, 0, "")


@pytest.mark.parametrize("content", [b"\xff\xff\xff", b"\x0a\x05ab"], ids=["garbage", "cut"])
def test_a_corrupt_known_curators_file_is_ignored_with_a_warning_and_the_fallback_asked(
    datadir: NodeDataDirectory, caplog: pytest.LogCaptureFixture, content: bytes
) -> None:
    """A cache never stops a node: the file is named in one warning, the fallback is asked,
    and the file is saved anew once curators are learned."""
    datadir.curators.write_bytes(content)
    with caplog.at_level(logging.WARNING, logger="roleserve"):
        known = KnownCurators(datadir, fallback=["10.0.0.7:7835"])
    [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warning.startswith(f"{datadir.curators} is corrupt; ignoring this cache")
    assert "asking 10.0.0.7:7835" in warning
    assert "\n" not in warning
    assert (known.seeds, known.curators) == ([], [])
    assert known.candidates() == ["10.0.0.7:7835"]

    assert known.learn(["10.0.0.2:7835"])
    assert known.candidates() == ["10.0.0.2:7835"]  # the fallback only when nothing is known
    assert KnownCurators(datadir).curators == ["10.0.0.2:7835"]


# -- CuratorConnector in a node runtime --------------------------------------------------------


class RecordingCurators(KnownCurators):
    """``KnownCurators`` that also records every change ``learn`` made."""

    def __init__(self, datadir: NodeDataDirectory) -> None:
        super().__init__(datadir)
        self.changes: Value[tuple[tuple[str, ...], ...]] = Value()
        self.changes.set(())

    def learn(self, curators: Iterable[str]) -> bool:
        changed = super().learn(curators)
        if changed:
            self.changes.set((*self.changes.get_nowait(), tuple(self.curators)))
        return changed

    async def wait_changes(self, count: int) -> tuple[tuple[str, ...], ...]:
        return await wait_for_value(self.changes, lambda found: len(found) >= count)


@pytest.fixture
def known(datadir: NodeDataDirectory) -> RecordingCurators:
    return RecordingCurators(datadir)


StartConnector = Callable[[], Awaitable[NodeHarness]]


@pytest.fixture
def start_connector(
    cluster: FakeCluster,
    known: RecordingCurators,
    node: Callable[..., Awaitable[NodeHarness]],
    tmp_path: Path,
) -> StartConnector:
    """A node running the connector (as ``root.connection``) on ``known``, without its
    credentials yet."""

    async def started() -> NodeHarness:
        # nodewatch keeps cluster_nodes, which the connector learns the curators from
        runtime = PluginHarness(cluster_nodes=True).runtime(tmp_path)
        values = runtime.registry.scoped(CORE_READER)
        runtime.add_service("connection", CuratorConnector(known, values))
        return await node(runtime)

    return started


def connection_of(harness: NodeHarness) -> ValueWatch[CuratorConnection]:
    return harness.runtime.registry.read(CURATOR_CONNECTION, CORE_READER)


async def wait_connection(
    harness: NodeHarness, predicate: Callable[[CuratorConnection], bool] = lambda _: True
) -> CuratorConnection:
    return await wait_for_value(connection_of(harness), predicate)


async def report(connection: CuratorConnection) -> None:
    """A call through the connection's channel (the fake curator records it)."""
    stub = curator_pb2_grpc.CuratorStub(connection.channel)
    with anyio.fail_after(ANSWER_TIMEOUT):
        await stub.UpdateNodeStatus(curator_pb2.UpdateNodeStatusRequest(node_id="probe"))


async def test_connector_with_a_corrupt_curators_file_finds_the_leader_through_the_fallback(
    cluster: FakeCluster,
    datadir: NodeDataDirectory,
    node: Callable[..., Awaitable[NodeHarness]],
    tmp_path: Path,
) -> None:
    """The node starts (the file made it exit before) and connects through its fallback."""
    leader = await cluster.curator()
    leader.lead()
    datadir.curators.write_bytes(b"\xff\xff\xff")
    known = KnownCurators(datadir, fallback=[leader.endpoint])
    runtime = PluginHarness().runtime(tmp_path)
    values = runtime.registry.scoped(CORE_READER)
    runtime.add_service("connection", CuratorConnector(known, values))
    harness = await node(runtime)
    harness.set(NODE_CREDENTIALS, cluster.credentials)
    found = await wait_connection(harness)
    assert (found.leader_node_id, found.leader_endpoint) == (leader.node_id, leader.endpoint)


async def test_connector_connects_to_the_leader_verified_as_its_node_id(
    cluster: FakeCluster, known: RecordingCurators, start_connector: StartConnector
) -> None:
    leader = await cluster.curator()
    follower = await cluster.curator()
    leader.lead()
    follower.follow(leader)
    known.set_seeds([follower.endpoint])
    harness = await start_connector()
    await harness.wait_status(CONNECTION, lambda s: s.note == "waiting for the node's credentials")

    harness.set(NODE_CREDENTIALS, cluster.credentials)
    found = await wait_connection(harness)
    assert (found.node_id, found.leader_node_id, found.leader_endpoint) == (
        cluster.credentials.node_id,
        leader.node_id,
        leader.endpoint,
    )
    assert isinstance(found.channel, CancellationSafeChannel)
    status = await harness.wait_state(CONNECTION)
    assert status.note == ""

    await report(found)
    [call] = await leader.wait_calls("UpdateNodeStatus", 1)
    assert call.caller == cluster.credentials.node_id
    assert follower.requests("UpdateNodeStatus") == []
    assert asked_by(follower) == [cluster.credentials.node_id]


async def test_connector_channel_refuses_a_curator_that_is_not_the_leader(
    cluster: FakeCluster, known: RecordingCurators, start_connector: StartConnector
) -> None:
    """A follower names the leader without a host, so the connector dials the follower's
    own address: the channel verifies the leader's node ID and gets the follower's."""
    leader = await cluster.curator()
    follower = await cluster.curator()
    follower.follow(leader, host="")
    known.set_seeds([follower.endpoint])
    harness = await start_connector()
    harness.set(NODE_CREDENTIALS, cluster.credentials)
    found = await wait_connection(harness)
    assert (found.leader_node_id, found.leader_endpoint) == (leader.node_id, follower.endpoint)

    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await report(found)
    assert refused.value.code() is grpc.StatusCode.UNAVAILABLE
    assert follower.requests("UpdateNodeStatus") == []


class ClosingSaid(CancellationSafeChannel):
    """A channel that calls ``on_close`` when it is closed."""

    def __init__(self, channel: CancellationSafeChannel, on_close: Callable[[], None]) -> None:
        super().__init__(channel.channel)
        self.on_close = on_close

    async def close(self, grace: float | None = None) -> None:
        self.on_close()
        await super().close(grace)


class RecordingChannels:
    """Stands in for the connector's ``secure_channel``: when each channel (by the node ID
    it verifies) was made and closed."""

    def __init__(self) -> None:
        self.made: dict[str, float] = {}
        self.closed: Value[dict[str, float]] = Value()
        self.closed.set({})

    def __call__(
        self,
        target: str,
        credentials: Credentials,
        *,
        node_id: str | None = None,
        options: Sequence[tuple[str, Any]] = (),
    ) -> CancellationSafeChannel:
        assert node_id is not None, "the connector's channel verifies the leader's node ID"
        self.made[node_id] = anyio.current_time()

        def on_close() -> None:
            self.closed.set({**self.closed.get_nowait(), node_id: anyio.current_time()})

        channel = secure_channel(target, credentials, node_id=node_id, options=options)
        return ClosingSaid(channel, on_close)


async def test_connector_swaps_the_channel_when_the_leader_changes(
    cluster: FakeCluster,
    known: RecordingCurators,
    start_connector: StartConnector,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    grace = 1.0
    monkeypatch.setattr(connector_module, "OLD_CHANNEL_GRACE", grace)
    channels = RecordingChannels()
    monkeypatch.setattr(connector_module, "secure_channel", channels)
    first = await cluster.curator()
    second = await cluster.curator()
    follower = await cluster.curator()
    first.lead()
    follower.follow(first)
    known.set_seeds([follower.endpoint])
    harness = await start_connector()
    harness.set(NODE_CREDENTIALS, cluster.credentials)
    old = await wait_connection(harness, lambda found: found.leader_node_id == first.node_id)
    await report(old)
    await first.wait_calls("UpdateNodeStatus", 1)
    await first.wait_calls("Watch", 1)  # the curators child, on the first connection

    second.lead()
    follower.follow(second)
    new = await wait_connection(harness, lambda found: found.leader_node_id == second.node_id)
    assert (new.leader_endpoint, new.channel is old.channel) == (second.endpoint, False)
    assert connection_of(harness).statistics().sets == 2

    # The old channel still works for a while; the new one reaches the new leader, and the
    # curators child watches there now.
    await report(old)
    await first.wait_calls("UpdateNodeStatus", 2)
    await report(new)
    await second.wait_calls("UpdateNodeStatus", 1)
    await second.wait_calls("Watch", 1)
    assert first.node_id not in channels.closed.get_nowait()

    # Then it is closed, the grace after the new channel was made; the new one stays open.
    closed = await wait_for_value(channels.closed, lambda found: first.node_id in found)
    assert closed[first.node_id] - channels.made[second.node_id] >= grace - SLACK
    assert second.node_id not in closed
    with pytest.raises(grpc.aio.UsageError, match="Channel is closed"):
        await report(old)
    assert len(first.requests("UpdateNodeStatus")) == 2
    assert harness.status(CONNECTION).state is State.HEALTHY


async def test_connector_starts_over_when_the_leaders_server_restarts(
    cluster: FakeCluster, known: RecordingCurators, start_connector: StartConnector
) -> None:
    leader = await cluster.curator()
    leader.lead()
    known.set_seeds([leader.endpoint])
    harness = await start_connector()
    harness.set(NODE_CREDENTIALS, cluster.credentials)
    old = await wait_connection(harness)

    await leader.stop()
    await leader.__aenter__()
    new = await wait_connection(harness, lambda found: found is not old)
    assert (new.leader_node_id, new.leader_endpoint) == (leader.node_id, leader.endpoint)
    await report(new)
    await leader.wait_calls("UpdateNodeStatus", 1)
    assert harness.status(CONNECTION).failures == 0


async def test_connector_learns_and_saves_the_curators_of_the_cluster(
    cluster: FakeCluster,
    known: RecordingCurators,
    datadir: NodeDataDirectory,
    start_connector: StartConnector,
) -> None:
    leader = await cluster.curator()
    leader.lead()
    leader.set_node(node_with("10.0.0.5", 7900, node_id="node-a"))
    leader.set_node(node_with("10.0.0.6", node_id="node-b"))  # no curator
    leader.set_node(node_with("10.0.0.7", 0, node_id="node-c"))
    known.set_seeds([leader.endpoint])
    harness = await start_connector()
    harness.set(NODE_CREDENTIALS, cluster.credentials)

    await harness.wait_state(CURATORS)  # healthy once the snapshot is in
    assert known.changes.get_nowait() == (("10.0.0.5:7900", "10.0.0.7:7835"),)
    [watch] = await leader.wait_calls("Watch", 1)
    assert watch.request == curator_pb2.WatchRequest(
        nodes_in_cluster=curator_pb2.WatchRequest.NodesInCluster()
    )
    assert watch.caller == cluster.credentials.node_id
    saved = KnownCurators(datadir)
    assert (saved.seeds, saved.curators) == ([leader.endpoint], ["10.0.0.5:7900", "10.0.0.7:7835"])

    # Each change, one at a time (a fake curator, like a real one, sends what changed
    # since its last event): a node starts running a curator, one goes away, one stops.
    leader.set_node(node_with("10.0.0.6", 7835, node_id="node-b"))
    await known.wait_changes(2)
    leader.remove_node("node-a")
    await known.wait_changes(3)
    leader.set_node(node_with("10.0.0.7", node_id="node-c"))
    changes = await known.wait_changes(4)
    assert changes == (
        ("10.0.0.5:7900", "10.0.0.7:7835"),
        ("10.0.0.5:7900", "10.0.0.6:7835", "10.0.0.7:7835"),
        ("10.0.0.6:7835", "10.0.0.7:7835"),
        ("10.0.0.6:7835",),
    )
    assert KnownCurators(datadir).curators == ["10.0.0.6:7835"]
    assert known.candidates() == ["10.0.0.6:7835", leader.endpoint]


async def test_connector_finds_the_leader_through_learned_curators_once_the_seed_is_gone(
    cluster: FakeCluster, known: RecordingCurators, start_connector: StartConnector
) -> None:
    leader = await cluster.curator()
    successor = await cluster.curator()
    seed = await cluster.curator()
    leader.lead()
    seed.follow(leader)
    leader.set_node(node_with(str(leader.address), CURATOR_PORT, node_id=leader.node_id))
    known.set_seeds([seed.endpoint])
    harness = await start_connector()
    harness.set(NODE_CREDENTIALS, cluster.credentials)
    old = await wait_connection(harness)
    assert await known.wait_changes(1) == ((leader.endpoint,),)

    # The seed goes: the next pass asks the leader, learned from the cluster.
    await seed.stop()
    await leader.wait_calls("GetCurrentLeader", 1)
    # ...which then names its successor.
    successor.lead()
    leader.follow(successor)
    new = await wait_connection(harness, lambda found: found is not old)
    assert (new.leader_node_id, new.leader_endpoint) == (successor.node_id, successor.endpoint)
    assert connection_of(harness).statistics().sets == 2


async def test_connector_leaves_a_leader_that_stops_answering_heartbeats(
    cluster: FakeCluster,
    known: RecordingCurators,
    node: Callable[..., Awaitable[NodeHarness]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    fake_clock: FakeClock,
) -> None:
    """A hung leader whose own stream is all the connector follows (the other curator did
    not answer then): its connections stay open and its streams never end, so only the
    heartbeat's missing reply says it is gone. The connector asks the other curators (the
    hung one last), follows the one that names the new leader, and the heartbeat moves."""
    monkeypatch.setattr(heartbeat_module, "REPLY_TIMEOUT", 0.2)
    hung = await cluster.curator(heartbeat_interval=0.05)
    follower = await cluster.curator()
    successor = await cluster.curator(heartbeat_interval=0.05)
    hung.lead()
    follower.follow(hung)
    follower.refuse("GetCurrentLeader", grpc.StatusCode.UNAVAILABLE, "starting")
    known.set_seeds([hung.endpoint, follower.endpoint])
    harness = await start_core_with_connector(cluster, known, node, tmp_path)
    first = await wait_connection(harness, lambda found: found.leader_node_id == hung.node_id)
    await hung.wait_calls("Heartbeat", 1)
    await fake_clock.wake_sleeper(0.05)
    beats = await hung.wait_calls("Heartbeat", 2)
    assert follower.leader_answers.get_nowait() == 0  # refused: the hung one's own stream
    assert connection_of(harness).get_nowait() is first

    follower.allow("GetCurrentLeader")
    hung.hold_heartbeats()  # stopped: it reads, and answers nothing any more
    await fake_clock.wake_sleeper(0.05)  # the beat it leaves unanswered
    successor.lead()
    follower.follow(successor)
    moved = await wait_connection(harness, lambda found: found.leader_node_id == successor.node_id)
    assert (moved.leader_endpoint, moved.channel is first.channel) == (successor.endpoint, False)
    await successor.wait_calls("Heartbeat", 1)
    await fake_clock.wake_sleeper(0.05)
    await successor.wait_calls("Heartbeat", 2)
    await harness.wait_state(HEARTBEAT)
    assert len(hung.requests("Heartbeat")) == len(beats) + 1  # the one left unanswered
    assert harness.status(CONNECTION).state is State.HEALTHY


async def test_connector_follows_the_leader_through_a_follower_when_one_answers(
    cluster: FakeCluster,
    known: RecordingCurators,
    node: Callable[..., Awaitable[NodeHarness]],
    tmp_path: Path,
    fake_clock: FakeClock,
) -> None:
    """The leader named itself first; the connector keeps that connection but follows a
    follower's stream, which names the next leader as soon as it is elected: no reply has
    to go missing first (the old leader here still answers everything)."""
    leader = await cluster.curator(heartbeat_interval=0.05)
    follower = await cluster.curator()
    successor = await cluster.curator(heartbeat_interval=0.05)
    leader.lead()
    follower.follow(leader)
    known.set_seeds([leader.endpoint, follower.endpoint])  # the leader is asked first
    harness = await start_core_with_connector(cluster, known, node, tmp_path)
    first = await wait_connection(harness, lambda found: found.leader_node_id == leader.node_id)
    await wait_for_value(follower.leader_answers, lambda answers: answers >= 1)
    assert asked_by(follower) == [cluster.credentials.node_id]
    await leader.wait_calls("Heartbeat", 1)
    await fake_clock.wake_sleeper(0.05)
    await leader.wait_calls("Heartbeat", 2)
    assert connection_of(harness).get_nowait() is first  # the same leader: kept

    successor.lead()
    follower.follow(successor)
    moved = await wait_connection(harness, lambda found: found.leader_node_id == successor.node_id)
    assert moved.leader_endpoint == successor.endpoint
    assert connection_of(harness).statistics().sets == 2
    await successor.wait_calls("Heartbeat", 1)


async def start_core_with_connector(
    cluster: FakeCluster,
    known: RecordingCurators,
    node: Callable[..., Awaitable[NodeHarness]],
    tmp_path: Path,
) -> NodeHarness:
    """A node running the core's workers and the connector, its credentials set."""
    runtime = PluginHarness(core_workers=True).runtime(tmp_path)
    runtime.add_service("connection", CuratorConnector(known, runtime.registry.scoped(CORE_READER)))
    harness = await node(runtime)
    harness.set(NODE_CREDENTIALS, cluster.credentials)
    return harness


async def test_connector_leaves_the_leaders_own_stream_once_it_learns_another_curator(
    cluster: FakeCluster, known: RecordingCurators, start_connector: StartConnector
) -> None:
    """Enrolled through the leader, a node knows only that seed: it follows the leader's
    own stream until the cluster's nodes name another curator, then a follower's, keeping
    its connection."""
    leader = await cluster.curator()
    follower = await cluster.curator()
    leader.lead()
    follower.follow(leader)
    known.set_seeds([leader.endpoint])
    harness = await start_connector()
    harness.set(NODE_CREDENTIALS, cluster.credentials)
    first = await wait_connection(harness)
    await harness.wait_state(CURATORS)
    assert follower.leader_answers.get_nowait() == 0

    host, port = follower.endpoint.rsplit(":", 1)
    leader.set_node(node_with(host, int(port), node_id=follower.node_id))
    await wait_for_value(follower.leader_answers, lambda answers: answers >= 1)
    assert connection_of(harness).get_nowait() is first
    assert connection_of(harness).statistics().sets == 1


async def test_connector_makes_a_new_channel_with_renewed_credentials(
    cluster: FakeCluster,
    known: RecordingCurators,
    start_connector: StartConnector,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The renewal worker sets new credentials (same key, new certificate): the leader gets
    a new channel that presents them, and the old one keeps working until it is closed."""
    presented: list[Credentials] = []

    def recording(target: str, credentials: Credentials, **options: Any) -> Any:
        presented.append(credentials)
        return secure_channel(target, credentials, **options)

    monkeypatch.setattr(connector_module, "secure_channel", recording)
    leader = await cluster.curator()
    leader.lead()
    known.set_seeds([leader.endpoint])
    harness = await start_connector()
    harness.set(NODE_CREDENTIALS, cluster.credentials)
    old = await wait_connection(harness)

    renewed = cluster.ca.node(cluster.credentials.key)
    harness.set(NODE_CREDENTIALS, renewed)
    new = await wait_connection(harness, lambda found: found is not old)

    assert (new.leader_node_id, new.node_id) == (leader.node_id, renewed.node_id)
    assert [c.certificate for c in presented] == [
        cluster.credentials.certificate,
        renewed.certificate,
    ]
    await report(new)
    await report(old)
    assert [call.caller for call in await leader.wait_calls("UpdateNodeStatus", 2)] == [
        renewed.node_id
    ] * 2


async def test_the_nodes_channels_to_curators_ping_every_30_seconds(
    cluster: FakeCluster,
    known: RecordingCurators,
    start_connector: StartConnector,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every 30 s, not rpc's 10: the heartbeat notices a hung leader first, and on an idle
    node the pings were half of its network events (``NODE_KEEPALIVE_OPTIONS``). Both the
    leader's channel and the channel of the stream the connector follows."""
    given: dict[str, list[int]] = {"leader": [], "asked": []}

    def recording(kind: str) -> Callable[..., Any]:
        def channel(target: str, credentials: Credentials, **options: Any) -> Any:
            given[kind].append(dict(options.get("options", ()))["grpc.keepalive_time_ms"])
            return secure_channel(target, credentials, **options)

        return channel

    monkeypatch.setattr(connector_module, "secure_channel", recording("leader"))
    monkeypatch.setattr(leader_module, "secure_channel", recording("asked"))
    leader = await cluster.curator()
    leader.lead()
    known.set_seeds([leader.endpoint])
    harness = await start_connector()
    harness.set(NODE_CREDENTIALS, cluster.credentials)
    await wait_connection(harness)
    assert given["leader"] == [30_000]
    assert given["asked"]
    assert set(given["asked"]) == {30_000}
