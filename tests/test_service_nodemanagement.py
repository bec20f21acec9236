"""The node management service and the core worker ``nodemgmt`` that serves it.

Most tests run a node runtime with the core's workers and a small test plugin (``chatty``,
which logs what the test tells it to), set the node's credentials and address, and call
the real gRPC server over mutual TLS on a loopback address of the test's own
(``127.X.Y.Z``, random) at the standard port 7839. A few drive the service directly, for
what a real server cannot be brought to on demand (a supervisor not started yet, a reader
that falls behind). Every wait is on a condition, under a timeout.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import random
import socket
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, NoReturn, cast

import anyio
import grpc
import pytest

from roleserve_core import FinalError, NodeContext, RunContext, State, Worker, hookimpl
from roleserve_core.errors import RunnableNotFoundError
from roleserve_core.identity import (
    Credentials,
    NodeCredentials,
    Scope,
    UserCredentials,
    generate_key,
    issue_user_certificate,
)
from roleserve_core.limits import MAX_DN_LENGTH, MAX_VALUE_NAME_LENGTH
from roleserve_core.logtree import LogTree
from roleserve_core.node import NodeIntrospection
from roleserve_core.ports import NODE_MANAGEMENT_PORT, endpoint
from roleserve_core.proto import nodemanagement_pb2 as pb
from roleserve_core.proto import nodemanagement_pb2_grpc as pb_grpc
from roleserve_core.registry import ValueKey, ValueRegistry
from roleserve_core.rpc import secure_channel, user_revocation
from roleserve_core.service_nodemanagement import BATCH_ENTRIES, NodeManagementService
from roleserve_core.testing import (
    NodeHarness,
    StartNode,
    ThrowawayCA,
    start_plugin_node,
    wait_for_value,
)
from roleserve_core.values import (
    NETWORK,
    NODE_CREDENTIALS,
    REVOKED_CREDENTIALS,
    NetworkStatus,
    RevokedCredentials,
)
from roleserve_core.workers.nodemgmt import Listen, plan_listen, restart_needed

pytestmark = pytest.mark.anyio


CALL_TIMEOUT = 10.0
"""Generous; calls answer at once."""

NODEMGMT = "root.role.nodemgmt"
CHATTY = "root.role.chatty"
CHILD = "root.role.chatty.child"
BROKEN = "root.role.broken"
STUCK = "root.role.stuck"


# -- a test plugin ------------------------------------------------------------------------


SAY: ValueKey[str] = ValueKey("chatty_say", str, "What chatty logs next ('burst N': N lines).")
SAID: ValueKey[int] = ValueKey("chatty_said", int, "How many SAY values chatty has logged.")


def chatty_plugin() -> SimpleNamespace:
    """Workers ``chatty`` (logs what ``SAY`` says, has a child), ``broken`` (fails) and
    ``stuck`` (fails for good: a final error)."""

    def values() -> list[ValueKey[Any]]:
        return [SAY, SAID]

    def workers(node: NodeContext) -> list[Worker]:
        async def chatty(ctx: RunContext) -> None:
            ctx.log.info("chatty started")
            try:
                raise ValueError("example")
            except ValueError:
                ctx.log.warning("with an exception", exc_info=True)
            ctx.run("child", child)
            ctx.signal_healthy()
            said = 0
            with node.values.watch(SAY) as says:
                async for text in says:
                    count = text.removeprefix("burst ")
                    for line in range(int(count)) if count.isdigit() else ():
                        ctx.log.info("line %d", line)
                    if not count.isdigit():
                        ctx.log.info("%s", text)
                    said += 1
                    node.values.set(SAID, said)

        async def child(ctx: RunContext) -> None:
            ctx.log.info("child started")
            ctx.signal_healthy()
            await anyio.sleep_forever()

        async def broken(ctx: RunContext) -> None:
            raise RuntimeError("disk full")

        async def stuck(ctx: RunContext) -> None:
            raise FinalError("no frobnicator found; install one")

        return [Worker("chatty", chatty), Worker("broken", broken), Worker("stuck", stuck)]

    return SimpleNamespace(roleserve_values=hookimpl(values), roleserve_workers=hookimpl(workers))


def random_loopback() -> ipaddress.IPv4Address:
    """127.X.Y.Z of this test's own: parallel and repeated runs never meet on port 7839."""
    octets = (random.randrange(1, 255), random.randrange(256), random.randrange(1, 255))
    return ipaddress.IPv4Address("127.{}.{}.{}".format(*octets))


# -- fixtures and helpers -----------------------------------------------------------------


@dataclass
class Served:
    """A node whose nodemgmt serves, and what a test needs to call it."""

    node: NodeHarness
    ca: ThrowawayCA
    credentials: NodeCredentials
    address: ipaddress.IPv4Address
    said: int = 0

    @property
    def endpoint(self) -> str:
        return endpoint(self.address, NODE_MANAGEMENT_PORT)

    @contextlib.asynccontextmanager
    async def client(
        self, credentials: Credentials | None = None
    ) -> AsyncIterator[pb_grpc.NodeManagementAsyncStub]:
        """A stub on a channel that accepts only this node, as the owner by default."""
        who = credentials or self.ca.user()
        async with secure_channel(self.endpoint, who, node_id=self.credentials.node_id) as channel:
            yield pb_grpc.NodeManagementStub(channel)

    async def say(self, text: str) -> None:
        """Make chatty log ``text`` (or a burst of lines), and wait until it has."""
        self.node.set(SAY, text, by="chatty")
        self.said += 1
        said = self.node.runtime.registry.read(SAID, "test")
        await wait_for_value(said, lambda count: count >= self.said)


@pytest.fixture
def ca() -> ThrowawayCA:
    return ThrowawayCA()


@pytest.fixture
async def started(node: StartNode, tmp_path: Path) -> NodeHarness:
    """A node with the core's workers and chatty, before it has credentials or an address."""
    harness = await start_plugin_node(
        node, tmp_path, {"chatty": chatty_plugin()}, core_workers=True
    )
    await harness.wait_state(CHILD)
    return harness


@pytest.fixture
async def served(started: NodeHarness, ca: ThrowawayCA) -> Served:
    credentials, address = ca.node(), random_loopback()
    started.set(NODE_CREDENTIALS, credentials)
    started.set(NETWORK, NetworkStatus(address))
    await started.wait_state(NODEMGMT)
    return Served(started, ca, credentials, address)


async def read_logs(
    stub: pb_grpc.NodeManagementAsyncStub, **request: Any
) -> list[list[pb.LogEntry]]:
    """Every message of a GetLogs call that ends by itself, as lists of entries."""
    call = stub.GetLogs(pb.GetLogsRequest(**request), timeout=CALL_TIMEOUT)
    return [list(response.entries) async for response in call]


def messages(batches: list[list[pb.LogEntry]]) -> list[str]:
    return [entry.message for batch in batches for entry in batch]


async def refused(awaitable: Awaitable[Any]) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await awaitable
    return caught.value.code(), caught.value.details() or ""


class AbortedError(Exception):
    """What ``FakeContext.abort`` raises, as grpc's context raises ``AbortError``."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(code, details)
        self.code = code
        self.details = details


class FakeContext:
    """The part of a servicer context the service uses, for calls without a server."""

    async def abort(self, code: grpc.StatusCode, details: str = "") -> NoReturn:
        raise AbortedError(code, details)


def direct_service(**options: Any) -> tuple[NodeManagementService, LogTree]:
    """A service over an introspection whose supervisor never started."""
    logtree = LogTree()
    return NodeManagementService(NodeIntrospection(ValueRegistry(), logtree), **options), logtree


# -- the worker ---------------------------------------------------------------------------


async def test_nodemgmt_waits_for_credentials_and_address_then_serves(
    started: NodeHarness, ca: ThrowawayCA
) -> None:
    assert started.runtime.plugins.info("nodemgmt").workers == ["nodemgmt"]
    status = await started.wait_status(
        NODEMGMT, lambda s: s.note == "waiting for node credentials and address"
    )
    assert status.state is State.NEW
    started.set(NETWORK, NetworkStatus(None))  # known to have no address yet
    credentials = ca.node()
    started.set(NODE_CREDENTIALS, credentials)
    status = await started.wait_status(NODEMGMT, lambda s: s.note != status.note)
    assert (status.state, status.note) == (State.NEW, "waiting for the node's address")

    address = random_loopback()
    started.set(NETWORK, NetworkStatus(address))
    status = await started.wait_state(NODEMGMT)
    assert status.note == f"serving at {address}:7839"
    async with Served(started, ca, credentials, address).client() as stub:
        response = await stub.GetValues(pb.GetValuesRequest(), timeout=CALL_TIMEOUT)
    assert "node_credentials" in [value.name for value in response.values]


async def test_nodemgmt_serves_again_on_a_new_address(served: Served) -> None:
    moved = random_loopback()
    served.node.set(NETWORK, NetworkStatus(moved))
    status = await served.node.wait_status(
        NODEMGMT, lambda s: s.state is State.HEALTHY and s.note == f"serving at {moved}:7839"
    )
    assert status.restarts == 1
    served.address = moved
    async with served.client() as stub:
        await stub.GetValues(pb.GetValuesRequest(), timeout=CALL_TIMEOUT)


async def test_a_followed_log_ends_with_ok_when_the_server_stops(served: Served) -> None:
    """The server stops (here: nodemgmt restarts for a new address; a node that stops
    cleanly does the same): a follower's stream ends with OK, after what it was sent, not
    cancelled UNAVAILABLE as if the node had failed (``ctl logs -f`` exits 0 on it)."""
    async with served.client() as stub:
        call = stub.GetLogs(pb.GetLogsRequest(dn=CHATTY, backlog=1, follow=True))
        with anyio.fail_after(CALL_TIMEOUT):
            await call.read()  # the backlog: the call follows now
            served.node.set(NETWORK, NetworkStatus(random_loopback()))
            while await call.read() is not grpc.aio.EOF:
                pass
            assert await call.code() is grpc.StatusCode.OK


async def test_nodemgmt_does_not_share_its_port(
    started: NodeHarness, ca: ThrowawayCA, caplog: pytest.LogCaptureFixture
) -> None:
    """Another process on the node's address and port (one that allows sharing, even) makes
    it fail, with the address in its error, instead of splitting the connections."""
    address = random_loopback()
    with socket.socket() as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        holder.bind((str(address), NODE_MANAGEMENT_PORT))
        holder.listen()
        started.set(NODE_CREDENTIALS, ca.node())
        started.set(NETWORK, NetworkStatus(address))
        status = await started.wait_status(NODEMGMT, lambda s: s.failures == 1)
    assert status.last_error is not None
    # A refusal of the environment, in one line naming the holder (this test's process),
    # retried: not an OSError with gRPC's hint to debug it and a traceback in the log.
    assert status.last_error.type == "roleserve_core.errors.AddressInUseError"
    assert status.last_error.message.startswith(
        f"cannot listen on {address}:7839: held by pid {os.getpid()} ("
    )
    assert status.last_error.message.endswith(
        "; stop that process, or configure another port, and this starts again by itself"
    )
    said = [record for record in caplog.records if "cannot listen on" in record.getMessage()]
    assert said, caplog.text
    assert all(record.exc_info is None for record in said)  # no traceback
    assert said[0].getMessage().startswith("waiting for the operator: cannot listen on")


def test_plan_says_what_it_waits_for_until_it_can_listen(ca: ThrowawayCA) -> None:
    credentials, address = ca.node(), random_loopback()
    assert plan_listen(None, None) == "waiting for node credentials and address"
    assert plan_listen(None, NetworkStatus(None)) == "waiting for node credentials and address"
    assert plan_listen(None, NetworkStatus(address)) == "waiting for node credentials"
    assert plan_listen(credentials, NetworkStatus(None)) == "waiting for the node's address"
    listen = plan_listen(credentials, NetworkStatus(address))
    assert isinstance(listen, Listen)
    assert (listen.address, listen.credentials) == (address, credentials)
    assert listen.endpoint == f"{address}:7839"
    v6 = plan_listen(credentials, NetworkStatus(ipaddress.IPv6Address("fd00::1")))
    assert isinstance(v6, Listen)
    assert v6.endpoint == "[fd00::1]:7839"


def test_only_a_new_address_or_certificate_restarts_the_server(ca: ThrowawayCA) -> None:
    credentials, address = ca.node(), random_loopback()
    serving = Listen(address, credentials)
    same_key = NodeCredentials(credentials.key, credentials.certificate, ca.certificate)
    assert not restart_needed(serving, Listen(ipaddress.IPv4Address(str(address)), same_key))
    assert restart_needed(serving, Listen(random_loopback(), credentials))
    assert restart_needed(serving, Listen(address, ca.node()))
    assert restart_needed(serving, "waiting for the node's address")


# -- the supervision tree -----------------------------------------------------------------


async def test_owner_gets_the_tree_parents_first(served: Served) -> None:
    async with served.client() as stub:
        whole = await stub.GetSupervisionTree(pb.GetSupervisionTreeRequest(), timeout=CALL_TIMEOUT)
        subtree = await stub.GetSupervisionTree(
            pb.GetSupervisionTreeRequest(dn=CHATTY), timeout=CALL_TIMEOUT
        )
    dns = [runnable.dn for runnable in whole.runnables]
    assert dns[0] == "root"
    for position, dn in enumerate(dns[1:], start=1):
        assert dn.rpartition(".")[0] in dns[:position], dn
    runnables = {runnable.dn: runnable for runnable in whole.runnables}
    mgmt = runnables[NODEMGMT]
    assert (mgmt.state, mgmt.note) == ("HEALTHY", f"serving at {served.endpoint}")
    assert abs(mgmt.since.ToNanoseconds() / 1e9 - time.time()) < 60
    assert not mgmt.HasField("restart_in")
    assert [runnable.dn for runnable in subtree.runnables] == [CHATTY, CHILD]


async def test_tree_reports_failures_and_backoff(served: Served) -> None:
    # broken fails at once; on the test kit's fake clock its backoff never elapses.
    await served.node.wait_status(BROKEN, lambda s: s.restart_in is not None)
    async with served.client() as stub:
        response = await stub.GetSupervisionTree(
            pb.GetSupervisionTreeRequest(dn=BROKEN), timeout=CALL_TIMEOUT
        )
    [broken] = response.runnables
    assert (broken.state, broken.failures, broken.restarts) == ("NEW", 1, 1)
    assert broken.last_error == "RuntimeError: disk full"
    assert 'raise RuntimeError("disk full")' in broken.last_error_traceback
    assert 0 < broken.restart_in.ToNanoseconds() <= 1_000_000_000
    assert not broken.crash_looping


async def test_tree_shows_a_final_failure_and_restart_runs_it_again(served: Served) -> None:
    await served.node.wait_status(STUCK, lambda s: s.final)
    request = pb.GetSupervisionTreeRequest(dn=STUCK)
    async with served.client() as stub:
        [stuck] = (await stub.GetSupervisionTree(request, timeout=CALL_TIMEOUT)).runnables
        assert (stuck.state, stuck.final, stuck.note) == (
            "DEAD",
            True,
            "no frobnicator found; install one",
        )
        assert not stuck.HasField("restart_in")
        await stub.RestartRunnable(pb.RestartRunnableRequest(dn=STUCK), timeout=CALL_TIMEOUT)
    again = await served.node.wait_status(STUCK, lambda s: s.final and s.failures == 2)
    assert again.restarts == 1


# -- values -------------------------------------------------------------------------------


async def test_one_value_by_name_comes_in_full(served: Served) -> None:
    async with served.client() as stub:
        response = await stub.GetValues(pb.GetValuesRequest(name="network"), timeout=CALL_TIMEOUT)
        [network] = response.values
        assert network.name == "network"
        assert network.details == f"NetworkStatus(external_address=IPv4Address('{served.address}'))"
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.GetValues(pb.GetValuesRequest(name="netwrk"), timeout=CALL_TIMEOUT)
    assert refused.value.code() == grpc.StatusCode.NOT_FOUND
    assert "no value 'netwrk' on this node; its values are " in str(refused.value.details())
    assert "network" in str(refused.value.details())


async def test_owner_gets_every_value(served: Served) -> None:
    async with served.client() as stub:
        response = await stub.GetValues(pb.GetValuesRequest(), timeout=CALL_TIMEOUT)
    values = {value.name: value for value in response.values}
    assert list(values) == sorted(values)
    credentials = values["node_credentials"]
    assert (credentials.owner, credentials.type, credentials.is_set) == (
        "core",
        "NodeCredentials",
        True,
    )
    assert credentials.sets == 1
    assert "core" in credentials.readers
    assert credentials.doc == NODE_CREDENTIALS.doc
    assert abs(credentials.last_changed.ToNanoseconds() / 1e9 - time.time()) < 60
    assert str(served.address) in values["network"].current
    roles = values["roles"]
    assert (roles.is_set, roles.current, roles.HasField("last_changed")) == (False, "", False)
    assert values["chatty_say"].owner == "chatty"


# -- logs ---------------------------------------------------------------------------------


async def test_logs_of_a_dn_and_of_its_subtree(served: Served) -> None:
    async with served.client() as stub:
        own = await read_logs(stub, dn=CHATTY, backlog=-1)
        subtree = await read_logs(stub, dn=CHATTY, subtree=True, backlog=-1)
        everything = await read_logs(stub, subtree=True, backlog=-1)
    [[started, warning]] = own
    assert (started.dn, started.level, started.message) == (CHATTY, logging.INFO, "chatty started")
    assert abs(started.time.ToNanoseconds() / 1e9 - time.time()) < 60
    assert (warning.level, warning.message) == (logging.WARNING, "with an exception")
    assert warning.exception.endswith("ValueError: example")
    assert started.exception == ""
    [entries] = subtree
    assert [(e.dn, e.message) for e in entries] == [
        (CHATTY, "chatty started"),
        (CHATTY, "with an exception"),
        (CHILD, "child started"),
    ]
    assert [e.seq for e in entries] == sorted(e.seq for e in entries)
    dns = {entry.dn for batch in everything for entry in batch}
    assert {CHATTY, CHILD} <= dns
    assert all(dn == "root" or dn.startswith("root.") for dn in dns)


async def test_backlog_sends_the_newest_records(served: Served) -> None:
    for text in ("a", "b", "c"):
        await served.say(text)
    async with served.client() as stub:
        assert messages(await read_logs(stub, dn=CHATTY, backlog=2)) == ["b", "c"]
        assert await read_logs(stub, dn=CHATTY, backlog=0) == []
        assert messages(await read_logs(stub, dn=CHATTY, backlog=-1)) == [
            "chatty started",
            "with an exception",
            "a",
            "b",
            "c",
        ]
        code, details = await refused(read_logs(stub, dn=CHATTY, backlog=-2))
    assert code is grpc.StatusCode.INVALID_ARGUMENT
    assert "backlog -2" in details


async def test_a_long_backlog_comes_in_batches(served: Served) -> None:
    await served.say("burst 600")
    async with served.client() as stub:
        batches = await read_logs(stub, dn=CHATTY, backlog=600)
    assert [len(batch) for batch in batches] == [BATCH_ENTRIES, BATCH_ENTRIES, 88]
    assert messages(batches) == [f"line {n}" for n in range(600)]


async def test_follow_sends_records_logged_after_the_call_started(served: Served) -> None:
    async with served.client() as stub:
        call = stub.GetLogs(pb.GetLogsRequest(dn=CHATTY, backlog=1, follow=True))
        try:
            with anyio.fail_after(CALL_TIMEOUT):
                backlog = await call.read()
                # The backlog came, so the call follows: what is logged now is new.
                await served.say("later")
                live = await call.read()
        finally:
            call.cancel()
    assert isinstance(backlog, pb.GetLogsResponse)
    assert isinstance(live, pb.GetLogsResponse)
    assert [e.message for e in backlog.entries] == ["with an exception"]
    assert [(e.dn, e.message) for e in live.entries] == [(CHATTY, "later")]
    assert live.entries[0].seq > backlog.entries[0].seq


async def test_follow_marks_where_a_slow_reader_lost_records() -> None:
    service, logtree = direct_service(follow_buffer=2)
    log = logtree.logger("x")
    log.info("stored")
    request = pb.GetLogsRequest(dn="x", backlog=-1, follow=True)
    stream = cast(
        AsyncGenerator[pb.GetLogsResponse, None], service.GetLogs(request, cast(Any, None))
    )
    try:
        with anyio.fail_after(CALL_TIMEOUT):
            first = await anext(stream)  # the backlog; the call follows from here on
            for n in range(5):
                log.info("live %d", n)  # the reader keeps the newest 2 of them
            second = await anext(stream)
            third = await anext(stream)
    finally:
        await stream.aclose()
    assert [e.message for e in first.entries] == ["stored"]
    [marker, entry] = second.entries
    assert (marker.dn, marker.seq, marker.level) == ("", 0, logging.WARNING)
    assert marker.message == "3 log records of x lost here: this reader fell behind"
    assert entry.message == "live 3"
    assert [e.message for e in third.entries] == ["live 4"]


async def test_a_runnable_that_has_not_logged_yet_can_be_followed() -> None:
    """docs/node-management.md's promise: not NOT_FOUND (as for a DN that is no runnable),
    but a call that waits, and gets the runnable's first record when it logs."""
    logtree = LogTree()
    introspection = NodeIntrospection(ValueRegistry(), logtree)
    quiet = "root.role.quiet"

    def status_of(dn: str) -> object:
        if dn != quiet:
            raise RunnableNotFoundError(dn)
        return object()

    introspection.supervisor.set(cast(Any, SimpleNamespace(status_of=status_of)))
    service = NodeManagementService(introspection)
    assert quiet not in logtree.dns()
    request = pb.GetLogsRequest(dn=quiet, backlog=-1, follow=True)
    stream = cast(
        AsyncGenerator[pb.GetLogsResponse, None], service.GetLogs(request, cast(Any, None))
    )
    try:
        with anyio.fail_after(CALL_TIMEOUT):
            async with anyio.create_task_group() as tasks:
                first: list[pb.GetLogsResponse] = []

                async def read() -> None:
                    first.append(await anext(stream))

                tasks.start_soon(read)
                await anyio.wait_all_tasks_blocked()  # the call follows, the backlog empty
                logtree.logger(quiet).info("first words")
    finally:
        await stream.aclose()
    assert [(e.dn, e.message) for e in first[0].entries] == [(quiet, "first words")]


# -- restarts -----------------------------------------------------------------------------


async def test_owner_restarts_a_runnable_and_it_is_logged(served: Served) -> None:
    async with served.client() as stub:
        await stub.RestartRunnable(pb.RestartRunnableRequest(dn=CHATTY), timeout=CALL_TIMEOUT)
        status = await served.node.wait_status(
            CHATTY, lambda s: s.restarts == 1 and s.state is State.HEALTHY
        )
        logged = messages(await read_logs(stub, dn=NODEMGMT, backlog=-1))
    assert status.failures == 0
    assert f"restart of {CHATTY} requested by user 'owner'" in logged


async def test_restarting_nodemgmt_itself_answers_first_then_serves_again(
    served: Served,
) -> None:
    async with served.client() as stub:
        await stub.RestartRunnable(pb.RestartRunnableRequest(dn=NODEMGMT), timeout=CALL_TIMEOUT)
    status = await served.node.wait_status(
        NODEMGMT, lambda s: s.restarts == 1 and s.state is State.HEALTHY
    )
    assert status.failures == 0
    async with served.client() as stub:
        await stub.GetValues(pb.GetValuesRequest(), timeout=CALL_TIMEOUT)


# -- refusals -----------------------------------------------------------------------------


async def test_root_and_no_dn_cannot_be_restarted(served: Served) -> None:
    async with served.client() as stub:
        for dn in ("root", ""):
            code, details = await refused(
                stub.RestartRunnable(pb.RestartRunnableRequest(dn=dn), timeout=CALL_TIMEOUT)
            )
            assert code is grpc.StatusCode.INVALID_ARGUMENT, dn
            assert details
    assert served.node.status("root").restarts == 0


async def test_an_unknown_dn_is_not_found(served: Served) -> None:
    unknown = "root.role.nothing"
    async with served.client() as stub:
        calls: list[Awaitable[Any]] = [
            stub.GetSupervisionTree(pb.GetSupervisionTreeRequest(dn=unknown), timeout=CALL_TIMEOUT),
            stub.RestartRunnable(pb.RestartRunnableRequest(dn=unknown), timeout=CALL_TIMEOUT),
            read_logs(stub, dn=unknown, backlog=-1),
            read_logs(stub, dn=unknown, subtree=True, backlog=0),
            # At once, not at the deadline: a followed call stayed open and silent.
            read_logs(stub, dn=unknown, backlog=-1, follow=True),
            read_logs(stub, dn=unknown, subtree=True, backlog=0, follow=True),
        ]
        for call in calls:
            code, details = await refused(call)
            assert code is grpc.StatusCode.NOT_FOUND
            assert unknown in details


@pytest.mark.parametrize(
    "method", ["GetLogs", "GetSupervisionTree", "GetValues", "RestartRunnable"]
)
async def test_a_node_certificate_is_refused(served: Served, method: str) -> None:
    other = served.ca.node()
    async with served.client(other) as stub:
        calls: dict[str, Callable[[], Awaitable[Any]]] = {
            "GetLogs": lambda: read_logs(stub, dn=CHATTY, backlog=-1),
            "GetSupervisionTree": lambda: stub.GetSupervisionTree(
                pb.GetSupervisionTreeRequest(), timeout=CALL_TIMEOUT
            ),
            "GetValues": lambda: stub.GetValues(pb.GetValuesRequest(), timeout=CALL_TIMEOUT),
            "RestartRunnable": lambda: stub.RestartRunnable(
                pb.RestartRunnableRequest(dn=CHATTY), timeout=CALL_TIMEOUT
            ),
        }
        code, details = await refused(calls[method]())
    needed = "OPERATE_NODE" if method == "RestartRunnable" else "READ_NODE"
    assert code is grpc.StatusCode.PERMISSION_DENIED
    assert details == (
        f"node {other.node_id} lacks {needed}, "
        f"needed by /roleserve.nodemanagement.NodeManagement/{method}"
    )
    assert served.node.status(CHATTY).restarts == 0


async def test_before_the_supervisor_runs_the_tree_is_unavailable() -> None:
    service, _ = direct_service()
    context = cast(Any, FakeContext())
    with pytest.raises(AbortedError) as tree:
        await service.GetSupervisionTree(pb.GetSupervisionTreeRequest(), context)
    with pytest.raises(AbortedError) as restart:
        await service.RestartRunnable(pb.RestartRunnableRequest(dn=CHATTY), context)
    with pytest.raises(AbortedError) as logs:
        await anext(service.GetLogs(pb.GetLogsRequest(dn=CHATTY, backlog=-1), context))
    assert tree.value.code is grpc.StatusCode.UNAVAILABLE
    assert restart.value.code is grpc.StatusCode.UNAVAILABLE
    assert logs.value.code is grpc.StatusCode.NOT_FOUND


async def test_names_beyond_the_request_limits_are_refused_as_invalid() -> None:
    """A DN or value name longer than ``roleserve_core.limits`` allows is refused, naming the
    field and the limit, before it is looked up (or quoted in a NOT_FOUND)."""
    service, _ = direct_service()
    context = cast(Any, FakeContext())
    long_dn = "root." + "x" * MAX_DN_LENGTH
    calls = [
        service.GetSupervisionTree(pb.GetSupervisionTreeRequest(dn=long_dn), context),
        service.RestartRunnable(pb.RestartRunnableRequest(dn=long_dn), context),
        anext(service.GetLogs(pb.GetLogsRequest(dn=long_dn), context)),
        service.GetValues(pb.GetValuesRequest(name="v" * (MAX_VALUE_NAME_LENGTH + 1)), context),
    ]
    for refused_call in calls:
        with pytest.raises(AbortedError) as caught:
            await refused_call
        assert caught.value.code is grpc.StatusCode.INVALID_ARGUMENT
        assert "characters long; at most" in caught.value.details


# -- scopes and revocation --------------------------------------------------------------------


def scoped(ca: ThrowawayCA, scope: Scope, name: str) -> UserCredentials:
    key = generate_key()
    certificate = issue_user_certificate(
        ca.key, ca.certificate, key.public_key(), name, scope=scope
    )
    return UserCredentials(key, certificate, ca.certificate)


async def test_a_viewer_reads_but_does_not_restart(served: Served) -> None:
    async with served.client(scoped(served.ca, Scope.VIEWER, "vera")) as stub:
        await stub.GetValues(pb.GetValuesRequest(), timeout=CALL_TIMEOUT)
        request = pb.RestartRunnableRequest(dn=CHATTY)
        code, details = await refused(stub.RestartRunnable(request, timeout=CALL_TIMEOUT))
    assert code is grpc.StatusCode.PERMISSION_DENIED
    assert details == (
        "viewer credentials cannot RestartRunnable (needs OPERATE_NODE); "
        "ask the owner for operator credentials"
    )
    assert served.node.status(CHATTY).restarts == 0


async def test_a_revoked_user_certificate_is_refused_from_the_next_call(served: Served) -> None:
    operator = scoped(served.ca, Scope.OPERATOR, "otto")
    serial = operator.certificate.serial_number
    async with served.client(operator) as stub:
        await stub.GetValues(pb.GetValuesRequest(), timeout=CALL_TIMEOUT)
        served.node.set(REVOKED_CREDENTIALS, RevokedCredentials(frozenset({serial})))
        code, details = await refused(stub.GetValues(pb.GetValuesRequest(), timeout=CALL_TIMEOUT))
    assert code is grpc.StatusCode.PERMISSION_DENIED
    assert details == (
        f"credentials 'otto' (serial {serial:x}) were revoked; ask the owner for new credentials"
    )
    async with served.client() as owner:  # another certificate of the cluster: still in
        await owner.GetValues(pb.GetValuesRequest(), timeout=CALL_TIMEOUT)


async def test_a_revoked_certificate_hears_so_before_what_its_scope_lacks(served: Served) -> None:
    """Revocation comes before permissions, and its refusal is marked: a revoked viewer
    asking to restart is told it was revoked (not to ask for operator credentials), and a
    client tells that from a missing permission (``ctl whoami``)."""
    viewer = scoped(served.ca, Scope.VIEWER, "vera")
    serial = viewer.certificate.serial_number
    served.node.set(REVOKED_CREDENTIALS, RevokedCredentials(frozenset({serial})))
    async with served.client(viewer) as stub:
        request = pb.RestartRunnableRequest(dn=CHATTY)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.RestartRunnable(request, timeout=CALL_TIMEOUT)
    assert user_revocation(caught.value) == (
        f"credentials 'vera' (serial {serial:x}) were revoked; ask the owner for new credentials"
    )
    async with served.client(scoped(served.ca, Scope.VIEWER, "val")) as stub:
        with pytest.raises(grpc.aio.AioRpcError) as lacking:
            await stub.RestartRunnable(request, timeout=CALL_TIMEOUT)
    assert lacking.value.code() is grpc.StatusCode.PERMISSION_DENIED
    assert user_revocation(lacking.value) is None


async def test_a_followed_log_of_a_user_ends_when_it_is_revoked(served: Served) -> None:
    operator = scoped(served.ca, Scope.OPERATOR, "otto")
    serial = operator.certificate.serial_number
    async with served.client(operator) as stub:
        call = stub.GetLogs(pb.GetLogsRequest(dn=CHATTY, backlog=1, follow=True))
        with anyio.fail_after(CALL_TIMEOUT):
            await call.read()  # the backlog: the call follows now
            served.node.set(REVOKED_CREDENTIALS, RevokedCredentials(frozenset({serial})))
            code, details = await refused(call.read())
    assert code is grpc.StatusCode.PERMISSION_DENIED
    assert details == (
        f"credentials 'otto' (serial {serial:x}) were revoked; ask the owner for new credentials"
    )
