"""The core's curator workers, statuspush, heartbeat and rolefetch, in a node runtime.

Each test runs a node with the core's workers (and a small plugin that owns
``local_control_plane``, as controlplane does) against fake curators of the test kit: real
gRPC servers with mutual TLS on loopback addresses of the test's own, which record every
call. The test sets the node's values as enrolment and the connector would, then waits for
the calls it expects and compares the whole sequence, as Monogon's TestWorkerStatusPush
does. Nothing waits on a sleep.
"""

from __future__ import annotations

import dataclasses
import functools
import ipaddress
import logging
import stat
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import anyio.abc
import grpc
import pytest

from roleserve_controlplane import ETCD_CLIENT_PORT
from roleserve_core import Worker, custom_role, hookimpl
from roleserve_core.clusternodes import ClusterNodes
from roleserve_core.limits import MAX_PLUGIN_ERROR_LENGTH, MAX_VERSION_LENGTH
from roleserve_core.plugin_loader import BUILTIN_PLUGINS, PluginSelection, PluginSet
from roleserve_core.ports import CURATOR_PORT, endpoint
from roleserve_core.proto import common_pb2, curator_pb2
from roleserve_core.roles import (
    ConsensusMember,
    KubernetesWorker,
    NodeRoles,
    roles_to_proto,
)
from roleserve_core.rpc import secure_channel
from roleserve_core.runtime import CORE_READER
from roleserve_core.supervisor import State
from roleserve_core.testing import (
    FakeClock,
    FakeCluster,
    NodeHarness,
    PluginHarness,
    node_record,
    random_loopback,
    start_plugin_node,
    wait_for_value,
)
from roleserve_core.values import (
    CLUSTER_NODES,
    CURATOR_CONNECTION,
    LOCAL_CONTROL_PLANE,
    NETWORK,
    NODE_CREDENTIALS,
    REVOKED_CREDENTIALS,
    ROLES,
    CuratorConnection,
    LocalControlPlane,
    NetworkStatus,
    RevokedCredentials,
)
from roleserve_core.version import core_version
from roleserve_core.workers._identity import PROCESS_INSTANCE
from roleserve_core.workers._own_record import follow_own_record
from roleserve_core.workers.heartbeat import DEFAULT_INTERVAL, Heartbeat
from roleserve_core.workers.rolefetch import ROLES_FILE, save_roles
from roleserve_core.workers.statuspush import _log_record_difference as log_record_difference
from roleserve_core.workers.statuspush import (
    boot_id,
    needs_report,
    node_status,
    plugin_statuses,
)

pytestmark = pytest.mark.anyio

STATUSPUSH = "root.role.statuspush"
HEARTBEAT = "root.role.heartbeat"
ROLEFETCH = "root.role.rolefetch"
WATCHER = "root.role.rolefetch.watcher"
NODEWATCH = "root.role.nodewatch"
REVOCATIONS = "root.role.revocations"

CONTROL_PLANE_PLUGIN = "fake_controlplane"
"""A test plugin that owns ``local_control_plane``, as the controlplane plugin does."""

WORKER = NodeRoles(kubernetes_worker=KubernetesWorker())
MEMBER = NodeRoles(
    consensus_member=ConsensusMember(ca_certificate=b"ca", peer_certificate=b"peer"),
    kubernetes_worker=KubernetesWorker(),
)


def control_plane_plugin() -> SimpleNamespace:
    def values() -> list[Any]:
        return [LOCAL_CONTROL_PLANE]

    return SimpleNamespace(roleserve_values=hookimpl(values))


@pytest.fixture
def cluster(fake_cluster: FakeCluster) -> FakeCluster:
    """The test kit's, by a shorter name; requested before the node (see ``fake_cluster``)."""
    return fake_cluster


Start = Callable[[], Awaitable[NodeHarness]]


@pytest.fixture
def start(
    cluster: FakeCluster, node: Callable[..., Awaitable[NodeHarness]], tmp_path: Path
) -> Start:
    """Start the node (the core's workers and the control plane stand-in), with its
    credentials set, as enrolment leaves it."""

    async def started() -> NodeHarness:
        plugins = {CONTROL_PLANE_PLUGIN: control_plane_plugin()}
        harness = await start_plugin_node(node, tmp_path, plugins, core_workers=True)
        harness.set(NODE_CREDENTIALS, cluster.credentials)
        return harness

    return started


def roles_file(tmp_path: Path) -> Path:
    """Where rolefetch keeps the roles: the core plugin's directory."""
    return tmp_path / "plugins" / "core" / ROLES_FILE


def roles_value(harness: NodeHarness) -> Any:
    return harness.runtime.registry.read(ROLES, CORE_READER)


NODE_PLUGINS = [
    *(
        common_pb2.PluginStatus(name=builtin.name, version=core_version(), state="loaded")
        for builtin in BUILTIN_PLUGINS
    ),
    common_pb2.PluginStatus(name=CONTROL_PLANE_PLUGIN, state="loaded"),
]
"""The plugins of the node ``start`` starts, as its status reports them."""


def status(
    address: ipaddress.IPv4Address, *, curator_port: int | None = None
) -> common_pb2.NodeStatus:
    """The status the node should report."""
    reported = common_pb2.NodeStatus(
        external_address=str(address),
        version=core_version(),
        boot_id=boot_id() or b"",
        plugins=NODE_PLUGINS,
    )
    if curator_port is not None:
        reported.running_curator.port = curator_port
    return reported


EVERY_NODE = curator_pb2.WatchRequest(nodes_in_cluster=curator_pb2.WatchRequest.NodesInCluster())
"""The one Watch a node holds: nodewatch's, of every node."""


# -- statuspush: the decision, as plain functions --------------------------------------


def test_node_status_needs_the_address() -> None:
    assert node_status(None, None, "1.0", None) is None
    assert node_status(NetworkStatus(None), LocalControlPlane.NONE, "1.0", b"x" * 16) is None


def test_node_status_reports_address_version_and_boot() -> None:
    reported = node_status(
        NetworkStatus(ipaddress.IPv4Address("10.0.0.5")), None, "1.2.3", b"\x01" * 16
    )
    assert reported == common_pb2.NodeStatus(
        external_address="10.0.0.5", version="1.2.3", boot_id=b"\x01" * 16
    )
    assert not reported.HasField("running_curator")

    without_boot = node_status(
        NetworkStatus(ipaddress.IPv6Address("2001:db8::5")), LocalControlPlane.NONE, "1.0", None
    )
    assert without_boot == common_pb2.NodeStatus(external_address="2001:db8::5", version="1.0")


def test_plugin_statuses_give_each_plugins_state_and_error() -> None:
    """A failed plugin is in the status the curator stores, so it is visible from afar."""
    plugins = PluginSet.load(
        selection=PluginSelection(block=frozenset({"nodemgmt"})), entry_points=[]
    )
    plugins.register(object(), "brittle", version="0.3")
    plugins.fail("brittle", RuntimeError("x" * 2000), during="roleserve_workers")
    statuses = {status.name: status for status in plugin_statuses(plugins)}
    assert list(statuses)[:2] == ["core", "rolefetch"]
    assert statuses["core"] == common_pb2.PluginStatus(
        name="core", version=core_version(), state="loaded"
    )
    assert statuses["nodemgmt"].state == "blocked"
    assert statuses["nodemgmt"].error == "named in ROLESERVE_DISABLE_PLUGINS"
    brittle = statuses["brittle"]
    assert (brittle.version, brittle.state) == ("0.3", "failed")
    assert brittle.error.startswith("roleserve_workers raised RuntimeError: xxx")
    assert len(brittle.error) == MAX_PLUGIN_ERROR_LENGTH
    assert brittle.error.endswith("…")
    assert plugin_statuses(None) == ()


def test_a_long_version_is_cut_not_sent_for_the_curator_to_refuse() -> None:
    """The curator refuses a whole status for one field over its limit, so a 100-character
    local version (its own or a plugin's) would stop the node reporting at all: each is
    cut to ``MAX_VERSION_LENGTH``, ``…`` saying so."""
    long = "1.0.dev100+g" + "0123456789abcdef" * 6  # 108 characters
    assert len(long) > 100
    plugins = PluginSet.load(entry_points=[])
    plugins.register(object(), "verbose", version=long)
    [verbose] = [status for status in plugin_statuses(plugins) if status.name == "verbose"]
    assert verbose.version == long[: MAX_VERSION_LENGTH - 1] + "…"
    reported = node_status(NetworkStatus(ipaddress.IPv4Address("10.0.0.5")), None, long, None)
    assert reported is not None
    assert reported.version == long[: MAX_VERSION_LENGTH - 1] + "…"


@pytest.mark.parametrize(
    ("curator", "port"),
    [("10.0.0.5:7835", 7835), ("[2001:db8::5]:7900", 7900), ("10.0.0.5", CURATOR_PORT)],
)
def test_node_status_reports_the_running_curator(curator: str, port: int) -> None:
    control_plane = LocalControlPlane(curator_endpoint=curator, etcd_endpoint="10.0.0.5:7836")
    reported = node_status(
        NetworkStatus(ipaddress.IPv4Address("10.0.0.5")), control_plane, "1.0", None
    )
    assert reported is not None
    assert reported.HasField("running_curator")
    assert reported.running_curator.port == port


def test_boot_id(tmp_path: Path) -> None:
    path = tmp_path / "boot_id"
    identity = uuid.uuid4()
    path.write_text(f"{identity}\n")
    assert boot_id(path) == identity.bytes

    path.write_text("not a uuid\n")
    assert boot_id(path) is None
    assert boot_id(tmp_path / "missing") is None


def test_the_kernels_boot_id() -> None:
    """As Monogon's TestGetBootID: 16 bytes, not all zero."""
    real = Path("/proc/sys/kernel/random/boot_id")
    if not real.exists():
        pytest.skip("no /proc/sys/kernel/random/boot_id (not Linux)")
    found = boot_id()
    assert found is not None
    assert len(found) == 16
    assert found != bytes(16)


# -- statuspush in a node ----------------------------------------------------------------


async def test_statuspush_reports_what_changes_and_nothing_else(
    cluster: FakeCluster, start: Start
) -> None:
    """Monogon's TestWorkerStatusPush, step by step, then new leaders (where this worker
    differs: an unchanged status is not sent again to a leader whose record says it)."""
    harness = await start()
    leader = await cluster.curator()
    harness.set(CURATOR_CONNECTION, cluster.connect(leader))
    node_id = cluster.credentials.node_id

    def update(reported: common_pb2.NodeStatus) -> curator_pb2.UpdateNodeStatusRequest:
        return curator_pb2.UpdateNodeStatusRequest(
            node_id=node_id, status=reported, instance=PROCESS_INSTANCE
        )

    # 1. A connection alone: nothing to report, and it says what it waits for.
    await harness.wait_status(STATUSPUSH, lambda s: s.note == "waiting for the node's address")
    assert leader.requests("UpdateNodeStatus") == []

    # 2. The first address: one report of address, version and boot ID.
    first, second = random_loopback(), random_loopback()
    harness.set(NETWORK, NetworkStatus(first))
    await leader.wait_calls("UpdateNodeStatus", 1)
    assert leader.requests("UpdateNodeStatus") == [update(status(first))]

    # 3. The same address again: nothing (it is looked at before the next change comes).
    harness.set(NETWORK, NetworkStatus(first))
    await anyio.wait_all_tasks_blocked()
    #    A new address: a second report.
    harness.set(NETWORK, NetworkStatus(second))
    await leader.wait_calls("UpdateNodeStatus", 2)

    # 4. A local control plane appears, then goes: two more reports.
    running = LocalControlPlane(
        curator_endpoint=endpoint(second, CURATOR_PORT),
        etcd_endpoint=endpoint(second, ETCD_CLIENT_PORT),
    )
    harness.set(LOCAL_CONTROL_PLANE, running, by=CONTROL_PLANE_PLUGIN)
    await leader.wait_calls("UpdateNodeStatus", 3)
    harness.set(LOCAL_CONTROL_PLANE, LocalControlPlane.NONE, by=CONTROL_PLANE_PLUGIN)
    calls = await leader.wait_calls("UpdateNodeStatus", 4)

    assert [call.request for call in calls] == [
        update(status(first)),
        update(status(second)),
        update(status(second, curator_port=CURATOR_PORT)),
        update(status(second)),
    ]
    assert {call.caller for call in calls} == {node_id}  # over the node's own credentials

    # 5. A new connection (a new leader) whose record says nothing else: the status is not
    #    sent again (after a failover, every node's write would be a Watch event for every
    #    node); the next change goes to the new leader only.
    successor = await cluster.curator()
    harness.set(CURATOR_CONNECTION, cluster.connect(successor))
    harness.set(NETWORK, NetworkStatus(first))
    await successor.wait_calls("UpdateNodeStatus", 1)
    assert successor.requests("UpdateNodeStatus") == [update(status(first))]
    assert len(leader.requests("UpdateNodeStatus")) == 4

    # 6. A new leader whose record of this node has no status (its store lost it): told.
    third = await cluster.curator()
    third.set_node(curator_pb2.Node(id=node_id, state=common_pb2.NODE_STATE_UP))
    harness.set(CURATOR_CONNECTION, cluster.connect(third))
    await third.wait_calls("UpdateNodeStatus", 1)
    assert third.requests("UpdateNodeStatus") == [update(status(first))]
    assert harness.status(STATUSPUSH).failures == 0


async def test_statuspush_reports_a_running_curator_known_at_the_start(
    cluster: FakeCluster, start: Start
) -> None:
    harness = await start()
    address = random_loopback()
    harness.set(NETWORK, NetworkStatus(address))
    running = LocalControlPlane(f"{address}:7900", f"{address}:7836")
    harness.set(LOCAL_CONTROL_PLANE, running, by=CONTROL_PLANE_PLUGIN)
    leader = await cluster.curator()
    harness.set(CURATOR_CONNECTION, cluster.connect(leader))
    await leader.wait_calls("UpdateNodeStatus", 1)
    [request] = leader.requests("UpdateNodeStatus")
    assert request.status == status(address, curator_port=7900)


async def test_statuspush_reports_the_custom_roles_its_plugins_gate_on(
    cluster: FakeCluster, node: Callable[..., Awaitable[NodeHarness]], tmp_path: Path
) -> None:
    """Named with ``custom_role()``; an opaque predicate names no role, so none counts."""

    async def idle(ctx: Any) -> None:
        await anyio.sleep_forever()

    def workers(node: Any) -> list[Worker]:
        return [
            Worker("zeta", idle, when=custom_role("zeta")),
            Worker("backup", idle, when=custom_role("backup")),
            Worker("backup_too", idle, when=custom_role("backup")),
            Worker("opaque", idle, when=lambda roles: "opaque" in roles.custom),
        ]

    plugins = PluginHarness(core_workers=True)
    plugins.register(SimpleNamespace(roleserve_workers=hookimpl(workers)), "gated")
    harness = await node(plugins.runtime(tmp_path))
    harness.set(NODE_CREDENTIALS, cluster.credentials)
    address = random_loopback()
    harness.set(NETWORK, NetworkStatus(address))
    leader = await cluster.curator()
    harness.set(CURATOR_CONNECTION, cluster.connect(leader))
    await leader.wait_calls("UpdateNodeStatus", 1)
    [request] = leader.requests("UpdateNodeStatus")
    expected = status(address)
    expected.handled_custom_roles[:] = ["backup", "zeta"]
    expected.plugins[-1].name = "gated"
    assert request.status == expected


async def test_statuspush_reports_a_plugin_that_failed(
    cluster: FakeCluster, node: Callable[..., Awaitable[NodeHarness]], tmp_path: Path
) -> None:
    """The node runs without it, and says so to the curator, not only in its own log."""

    def workers(node: Any) -> list[Worker]:
        raise RuntimeError("no spool directory")

    plugins = PluginHarness(core_workers=True, strict=False)
    plugins.register(SimpleNamespace(roleserve_workers=hookimpl(workers)), "brittle")
    harness = await node(plugins.runtime(tmp_path))
    harness.set(NODE_CREDENTIALS, cluster.credentials)
    harness.set(NETWORK, NetworkStatus(random_loopback()))
    leader = await cluster.curator()
    harness.set(CURATOR_CONNECTION, cluster.connect(leader))
    await leader.wait_calls("UpdateNodeStatus", 1)
    [request] = leader.requests("UpdateNodeStatus")
    assert request.status.plugins[-1] == common_pb2.PluginStatus(
        name="brittle",
        state="failed",
        error="roleserve_workers raised RuntimeError: no spool directory",
    )


def stamped(reported: common_pb2.NodeStatus) -> common_pb2.NodeStatus:
    """``reported`` as the curator keeps it: with a time stamp."""
    kept = common_pb2.NodeStatus()
    kept.CopyFrom(reported)
    kept.timestamp.seconds = 1
    return kept


def test_needs_report_when_the_status_or_the_curators_record_differs() -> None:
    mine, other = status(random_loopback()), status(random_loopback())
    assert needs_report(mine, None, None)
    assert needs_report(mine, other, stamped(mine))  # changed here
    assert not needs_report(mine, mine, None)  # no record seen
    assert not needs_report(mine, mine, stamped(mine))  # the record says what was sent
    assert needs_report(mine, mine, stamped(other))  # someone else wrote it


def test_a_record_from_before_a_restart_is_a_note_and_another_address_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The record a restarted node reads first is often its own from before (with the
    curator it ran then): one INFO line, not a warning that someone else wrote it."""
    ctx: Any = SimpleNamespace(log=logging.getLogger("roleserve.test.statuspush"))
    address = random_loopback()
    caplog.set_level(logging.INFO)
    log_record_difference(ctx, status(address, curator_port=7835), status(address))
    log_record_difference(ctx, status(random_loopback()), status(address))
    assert [(r.levelno, r.getMessage().split(" (")[0]) for r in caplog.records] == [
        (
            logging.INFO,
            "the curator's record of this node differs from its last report in "
            "running_curator; reporting again",
        ),
        (
            logging.WARNING,
            "the curator's record of this node differs from its last report in external_address",
        ),
    ]


async def test_statuspush_reports_again_when_the_curators_record_differs(
    cluster: FakeCluster, start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    """As when a copied data directory's process overwrote the record before the curator
    refused it: the node reports again, without restarting."""
    leader = await cluster.curator()
    node_id = cluster.credentials.node_id
    leader.set_node(curator_pb2.Node(id=node_id, state=common_pb2.NODE_STATE_UP))
    harness = await start()
    first, second, impostor = random_loopback(), random_loopback(), random_loopback()
    harness.set(NETWORK, NetworkStatus(first))
    harness.set(CURATOR_CONNECTION, cluster.connect(leader))
    await leader.wait_calls("UpdateNodeStatus", 1)

    overwritten = curator_pb2.Node(id=node_id, state=common_pb2.NODE_STATE_UP)
    overwritten.status.CopyFrom(stamped(status(impostor)))
    leader.set_node(overwritten)
    await leader.wait_calls("UpdateNodeStatus", 2)
    harness.set(NETWORK, NetworkStatus(second))  # a change, to see that nothing came between
    await leader.wait_calls("UpdateNodeStatus", 3)

    reported = [request.status for request in leader.requests("UpdateNodeStatus")]
    assert reported == [status(first), status(first), status(second)]
    assert (
        "the curator's record of this node differs from its last report in external_address "
        f"(address {impostor} there, {first} here); reporting again"
    ) in caplog.text
    assert harness.status(STATUSPUSH).failures == 0


async def test_a_refused_second_process_says_so_once_and_takes_over_when_free(
    cluster: FakeCluster, start: Start, caplog: pytest.LogCaptureFixture, fake_clock: FakeClock
) -> None:
    leader = await cluster.curator()
    node_id = cluster.credentials.node_id
    conflict = (
        f"node {node_id} is already connected from 10.0.0.7:40000; two processes share its "
        "identity (a copied data directory?)"
    )
    leader.refuse("Heartbeat", grpc.StatusCode.ALREADY_EXISTS, conflict)
    harness = await start()
    heartbeat_of(harness).conflict_retry = 0.01
    harness.set(CURATOR_CONNECTION, cluster.connect(leader))

    said = f"the curator refused this process: {conflict}; stop one of the two processes"
    refused = await harness.wait_status(HEARTBEAT, lambda s: s.note.startswith(said))
    assert refused.state is State.NEW

    leader.allow("Heartbeat")  # the other process stopped
    await fake_clock.wake_sleeper(0.01)  # its retry, on the node's clock
    accepted = await harness.wait_state(HEARTBEAT)
    assert accepted.note == ""
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == [refused.note]
    assert harness.status(HEARTBEAT).failures == 0


async def test_a_refused_status_report_is_said_once_and_sent_when_accepted(
    cluster: FakeCluster, start: Start, caplog: pytest.LogCaptureFixture, fake_clock: FakeClock
) -> None:
    leader = await cluster.curator()
    conflict = "node X is already connected from 10.0.0.7:40000; two processes share it"
    leader.refuse("UpdateNodeStatus", grpc.StatusCode.ALREADY_EXISTS, conflict)
    harness = await start()
    pusher = harness.runtime.workers["statuspush"][1].run.__self__  # type: ignore[attr-defined]
    pusher.conflict_retry = 0.01
    address = random_loopback()
    harness.set(NETWORK, NetworkStatus(address))
    harness.set(CURATOR_CONNECTION, cluster.connect(leader))

    said = f"the curator refused this process: {conflict}"
    refused = await harness.wait_status(STATUSPUSH, lambda s: s.note.startswith(said))
    leader.allow("UpdateNodeStatus")
    await fake_clock.wake_sleeper(0.01)  # its retry, on the node's clock
    await harness.wait_status(STATUSPUSH, lambda s: s.note == "")
    requests = await leader.wait_calls("UpdateNodeStatus", 2)
    assert {call.request.SerializeToString() for call in requests} == {
        leader.requests("UpdateNodeStatus")[0].SerializeToString()
    }
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [refused.note]
    assert harness.status(STATUSPUSH).failures == 0


# -- heartbeat ----------------------------------------------------------------------------


def heartbeat_of(harness: NodeHarness) -> Heartbeat:
    """The core's heartbeat worker object, to read when it last heard back."""
    _, worker = harness.runtime.workers["heartbeat"]
    beating = getattr(worker.run, "__self__", None)
    assert isinstance(beating, Heartbeat)
    return beating


async def test_heartbeat_is_healthy_once_answered_and_keeps_the_curators_interval(
    cluster: FakeCluster, start: Start, fake_clock: FakeClock
) -> None:
    interval = 2.0
    leader = await cluster.curator(heartbeat_interval=interval)
    leader.hold_heartbeats()
    harness = await start()
    beating = heartbeat_of(harness)
    harness.set(CURATOR_CONNECTION, cluster.connect(leader))

    # Sent, not answered: not healthy yet.
    [first] = await leader.wait_calls("Heartbeat", 1)
    assert first.caller == cluster.credentials.node_id
    assert harness.status(HEARTBEAT).state is State.NEW
    assert not beating.last_reply.statistics().is_set

    leader.answer_heartbeats()
    await harness.wait_state(HEARTBEAT)

    # At the curator's interval, not the default, on the node's clock: each beat waits out
    # exactly that interval, and none goes out before it has passed.
    assert interval != DEFAULT_INTERVAL
    for sent in range(1, 5):
        await fake_clock.wait_deadline(fake_clock.now() + interval)
        assert len(leader.requests("Heartbeat")) == sent
        fake_clock.advance(interval)
        await leader.wait_calls("Heartbeat", sent + 1)

    # Every reply counts once: with the next beat held, the worker heard exactly the
    # replies the curator sent, and it waits for the held one rather than beating on.
    await fake_clock.wait_deadline(fake_clock.now() + interval)
    leader.hold_heartbeats()
    answered = len(leader.requests("Heartbeat"))
    fake_clock.advance(interval)
    await leader.wait_calls("Heartbeat", answered + 1)
    assert leader.heartbeat_replies.get_nowait() == answered
    assert beating.last_reply.statistics().sets == answered
    assert harness.status(HEARTBEAT).state is State.HEALTHY


async def test_heartbeat_reports_a_leader_that_does_not_reply_and_waits_for_the_next(
    cluster: FakeCluster, start: Start, fake_clock: FakeClock
) -> None:
    leader = await cluster.curator(heartbeat_interval=0.05)
    successor = await cluster.curator(heartbeat_interval=0.05)
    harness = await start()
    beating = heartbeat_of(harness)
    beating.reply_timeout = 0.2
    reports: list[str] = []
    first = dataclasses.replace(cluster.connect(leader), on_unresponsive=reports.append)
    harness.set(CURATOR_CONNECTION, first)
    await harness.wait_state(HEARTBEAT)

    leader.hold_heartbeats()
    await fake_clock.wake_sleeper(0.05)  # the next beat, which is not answered
    said = "no heartbeat reply within 0.2 s"
    waiting = await harness.wait_status(HEARTBEAT, lambda s: s.note.startswith(said))
    assert reports == [said]
    assert waiting.note == (
        f"{said}: the leader {leader.node_id} counts as gone; waiting up to 15 s for a new leader"
    )
    assert waiting.failures == 0

    # The connector's next connection: beating there at once, nothing counted as failed.
    harness.set(CURATOR_CONNECTION, cluster.connect(successor))
    await successor.wait_calls("Heartbeat", 1)
    await fake_clock.wake_sleeper(0.05)
    await successor.wait_calls("Heartbeat", 2)
    assert harness.status(HEARTBEAT).failures == 0
    assert reports == [said]


async def test_heartbeat_reports_a_leader_that_never_finishes_the_handshake(
    cluster: FakeCluster, start: Start
) -> None:
    """A hung leader (SIGSTOP) accepts TCP and answers nothing: the reply timeout cancels
    a read of a call gRPC has not started, and gRPC re-raises that cancellation as its own.
    It escaped the timeout's scope and failed the worker ("a cancellation nobody asked
    for", then the supervisor's backoff) instead of reporting the leader gone. It is the
    connection's first reply, given FIRST_REPLY_TIMEOUT (here 0.2 s), not REPLY_TIMEOUT: the
    call's start is in it, a handshake that a new leader reached by every node at once was
    slow to finish (100 local nodes reconnected twice)."""
    harness = await start()
    beating = heartbeat_of(harness)
    beating.reply_timeout = 0.05
    beating.first_reply_timeout = 0.2
    reports: list[str] = []
    async with (
        await anyio.create_tcp_listener(local_host="127.0.0.1") as silent,
        anyio.create_task_group() as holding,
    ):

        async def hold(stream: anyio.abc.SocketStream) -> None:
            async with stream:  # kept open, never read: a stopped process
                await anyio.sleep_forever()

        holding.start_soon(silent.serve, hold)
        port = silent.extra(anyio.abc.SocketAttribute.local_port)
        endpoint = f"127.0.0.1:{port}"
        channel = secure_channel(endpoint, cluster.credentials, node_id="node-hung")
        async with channel:
            hung = CuratorConnection(
                cluster.credentials.node_id,
                "node-hung",
                endpoint,
                channel,
                on_unresponsive=reports.append,
            )
            harness.set(CURATOR_CONNECTION, hung)
            said = "no heartbeat reply within 0.2 s"
            waiting = await harness.wait_status(HEARTBEAT, lambda s: s.note.startswith(said))
            assert reports == [said]
            assert waiting.failures == 0
        holding.cancel_scope.cancel()


async def test_heartbeat_fails_when_the_curator_ends_the_stream(
    cluster: FakeCluster, start: Start, fake_clock: FakeClock
) -> None:
    leader = await cluster.curator(heartbeat_interval=0.05)
    harness = await start()
    harness.set(CURATOR_CONNECTION, cluster.connect(leader))
    await harness.wait_state(HEARTBEAT)

    leader.end_streams("Heartbeat")
    await fake_clock.wake_sleeper(0.05)  # the next beat finds the stream ended
    failed = await harness.wait_status(HEARTBEAT, lambda s: s.failures == 1)
    assert failed.restart_in is not None  # waiting out its backoff (on the fake clock)
    assert failed.last_error is not None
    assert failed.last_error.summary() == (
        "roleserve_core.workers.heartbeat.StreamClosedError: "
        "the curator closed the heartbeat stream"
    )

    # After its backoff it beats again on a new stream.
    beats = len(leader.requests("Heartbeat"))
    await fake_clock.advance_to_next()
    await harness.wait_state(HEARTBEAT)
    await leader.wait_calls("Heartbeat", beats + 1)
    assert harness.status(HEARTBEAT).failures == 1


async def test_heartbeat_waits_for_a_new_leader_when_the_call_fails_between_beats(
    cluster: FakeCluster, start: Start, fake_clock: FakeClock
) -> None:
    """The leader goes away while the worker waits for its next beat: gRPC closes the
    request stream, and the worker reports the call's error (and waits for a new leader,
    as after any failed call), not the closed stream (a crash with a traceback)."""
    leader = await cluster.curator(heartbeat_interval=5.0)
    harness = await start()
    harness.set(CURATOR_CONNECTION, cluster.connect(leader))
    await harness.wait_state(HEARTBEAT)

    await fake_clock.wait_deadline(fake_clock.now() + 5.0)  # between beats
    await leader.stop()
    fake_clock.advance(5.0)
    waiting = await harness.wait_status(HEARTBEAT, lambda s: s.note.startswith("UNAVAILABLE"))
    assert waiting.note.endswith("waiting up to 15 s for a new leader")
    assert waiting.failures == 0


# -- rolefetch ----------------------------------------------------------------------------


async def test_rolefetch_starts_from_the_saved_roles_before_any_connection(
    start: Start, tmp_path: Path
) -> None:
    save_roles(roles_file(tmp_path), MEMBER)
    harness = await start()
    await wait_for_value(roles_value(harness), lambda roles: roles == MEMBER)
    watcher = await harness.wait_status(
        WATCHER, lambda s: s.note == "waiting for the connection to the curator"
    )
    assert watcher.state is State.NEW
    assert harness.status(ROLEFETCH).state is State.HEALTHY


async def test_rolefetch_reports_and_ignores_corrupt_saved_roles(
    cluster: FakeCluster, start: Start, tmp_path: Path
) -> None:
    path = roles_file(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"\x0a\x05ab")  # consensus_member, 5 bytes announced, 2 there
    harness = await start()
    await harness.wait_state(ROLEFETCH)

    assert not roles_value(harness).statistics().is_set
    [entry] = [
        entry
        for entry in harness.runtime.logtree.entries(ROLEFETCH)
        if entry.level == logging.ERROR
    ]
    assert entry.message.startswith(f"{path} is corrupt: ")
    assert entry.message.endswith("; ignoring it until the curator sends the roles")

    # The curator's roles replace it.
    leader = await cluster.curator()
    leader.set_node(curator_pb2.Node(id=cluster.credentials.node_id, roles=roles_to_proto(WORKER)))
    harness.set(CURATOR_CONNECTION, cluster.connect(leader))
    await wait_for_value(roles_value(harness), lambda roles: roles == WORKER)
    assert path.read_bytes() == roles_to_proto(WORKER).SerializeToString()


async def test_rolefetch_sets_and_saves_the_roles_the_curator_sends(
    cluster: FakeCluster, start: Start, tmp_path: Path
) -> None:
    leader = await cluster.curator()
    harness = await start()
    harness.set(CURATOR_CONNECTION, cluster.connect(leader))
    await harness.wait_state(WATCHER)  # the snapshot came: this node has no record yet
    assert not roles_value(harness).statistics().is_set

    node_id = cluster.credentials.node_id
    assert leader.requests("Watch") == [EVERY_NODE]  # nodewatch's: rolefetch reads its value

    # Another node's record is none of its business.
    leader.set_node(curator_pb2.Node(id="node-other", roles=roles_to_proto(MEMBER)))
    leader.set_node(curator_pb2.Node(id=node_id, roles=roles_to_proto(MEMBER)))
    await wait_for_value(roles_value(harness), lambda roles: roles == MEMBER)
    assert roles_value(harness).statistics().sets == 1

    path = roles_file(tmp_path)
    assert path.read_bytes() == roles_to_proto(MEMBER).SerializeToString()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


async def test_rolefetch_says_when_the_node_is_decommissioned(
    cluster: FakeCluster, start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    leader = await cluster.curator()
    node_id = cluster.credentials.node_id
    leader.set_node(curator_pb2.Node(id=node_id, roles=roles_to_proto(WORKER)))
    harness = await start()
    harness.set(CURATOR_CONNECTION, cluster.connect(leader))
    await wait_for_value(roles_value(harness), lambda roles: roles == WORKER)
    assert harness.status(WATCHER).note == ""

    # As the curator decommissions a node: its roles go too.
    decommissioned = common_pb2.NODE_STATE_DECOMMISSIONED
    leader.set_node(curator_pb2.Node(id=node_id, state=decommissioned))
    await wait_for_value(roles_value(harness), lambda roles: roles == NodeRoles())
    watcher = await harness.wait_status(WATCHER, lambda s: s.note != "")
    assert watcher.note == "this node is decommissioned"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert [w for w in warnings if "decommissioned" in w] == [
        "this node is decommissioned: it holds no roles any more. Stop it and remove its "
        "data directory; to use the machine again, register it anew"
    ]


async def test_rolefetch_sets_unchanged_roles_only_once(
    cluster: FakeCluster, start: Start, tmp_path: Path
) -> None:
    save_roles(roles_file(tmp_path), WORKER)
    node_id = cluster.credentials.node_id
    leader = await cluster.curator()
    leader.set_node(curator_pb2.Node(id=node_id, roles=roles_to_proto(WORKER)))
    harness = await start()
    harness.set(CURATOR_CONNECTION, cluster.connect(leader))
    await harness.wait_state(WATCHER)  # the snapshot, with the roles it started from
    assert roles_value(harness).statistics().sets == 1

    # A change of something else (its status) sends the node again, with the same roles...
    changed = curator_pb2.Node(id=node_id, roles=roles_to_proto(WORKER))
    changed.status.external_address = "10.0.0.5"
    leader.set_node(changed)
    # ...then a change of roles: only that one is set.
    leader.set_node(curator_pb2.Node(id=node_id, roles=roles_to_proto(MEMBER)))
    await wait_for_value(roles_value(harness), lambda roles: roles == MEMBER)
    assert roles_value(harness).statistics().sets == 2


async def test_rolefetch_watches_again_on_a_new_connection(
    cluster: FakeCluster, start: Start
) -> None:
    node_id = cluster.credentials.node_id
    leader = await cluster.curator()
    leader.set_node(curator_pb2.Node(id=node_id, roles=roles_to_proto(WORKER)))
    harness = await start()
    harness.set(CURATOR_CONNECTION, cluster.connect(leader))
    await wait_for_value(roles_value(harness), lambda roles: roles == WORKER)

    successor = await cluster.curator()
    successor.set_node(curator_pb2.Node(id=node_id, roles=roles_to_proto(MEMBER)))
    harness.set(CURATOR_CONNECTION, cluster.connect(successor))
    await wait_for_value(roles_value(harness), lambda roles: roles == MEMBER)
    assert harness.status(WATCHER).failures == 0
    assert harness.status(ROLEFETCH).restarts == 0  # the saved roles are not read again


async def test_the_node_holds_one_watch_stream_which_rolefetch_and_statuspush_share(
    cluster: FakeCluster, start: Start
) -> None:
    """rolefetch and statuspush take the node's record from ``cluster_nodes``: the roles
    and the record come through nodewatch's Watch of every node, the node's only one."""
    node_id = cluster.credentials.node_id
    leader = await cluster.curator()
    leader.set_node(curator_pb2.Node(id=node_id, roles=roles_to_proto(WORKER)))
    harness = await start()
    address = random_loopback()
    harness.set(NETWORK, NetworkStatus(address))
    harness.set(CURATOR_CONNECTION, cluster.connect(leader))
    await wait_for_value(roles_value(harness), lambda roles: roles == WORKER)
    await leader.wait_calls("UpdateNodeStatus", 1)
    leader.set_node(curator_pb2.Node(id=node_id, roles=roles_to_proto(MEMBER)))
    await wait_for_value(roles_value(harness), lambda roles: roles == MEMBER)

    assert leader.requests("Watch") == [EVERY_NODE]
    assert leader.open_watches.get_nowait() == 1
    assert harness.status(NODEWATCH).state is State.HEALTHY
    assert leader.requests("UpdateNodeStatus")[0].status == status(address)


async def test_own_record_is_this_nodes_each_time_the_curator_sends_it_anew(
    node: Callable[..., Awaitable[NodeHarness]], tmp_path: Path
) -> None:
    """What rolefetch and statuspush follow: another node's change is none of theirs, a
    view nobody keeps is skipped, and a fresh backlog (a new leader) shows the record again
    even when it is equal."""
    harness = await node(PluginHarness().runtime(tmp_path))
    values = harness.runtime.registry.scoped(CORE_READER)
    mine, other = node_record("me"), node_record("other")
    seen: list[curator_pb2.Node | None] = []

    async def follow() -> None:
        async for record in follow_own_record(values, "me"):
            seen.append(record)

    views = [
        ClusterNodes({"me": node_record("me", "10.0.0.1")}, backlogged=False),  # nobody keeps
        ClusterNodes({"other": other}, backlogged=True),  # whole, without this node: None
        ClusterNodes({"me": mine, "other": other}, backlogged=True),
        ClusterNodes({"me": mine, "other": node_record("other", "10.0.0.9")}, backlogged=True),
        ClusterNodes({"me": (fresh := node_record("me")), "other": other}, backlogged=True),
    ]
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(follow)
        for view in views:
            harness.set(CLUSTER_NODES, view)
            await anyio.wait_all_tasks_blocked()
        tasks.cancel_scope.cancel()
    assert seen == [None, mine, fresh]
    assert (seen[1] is mine, seen[2] is fresh) == (True, True)


# -- revocations ------------------------------------------------------------------------------


async def test_revocations_keeps_the_leaders_revoked_serials(
    cluster: FakeCluster, start: Start
) -> None:
    leader = await cluster.curator()
    harness = await start()
    revoked = harness.runtime.registry.read(REVOKED_CREDENTIALS, "test")
    harness.set(CURATOR_CONNECTION, cluster.connect(leader))
    await harness.wait_state(REVOCATIONS)
    assert revoked.get_nowait() == RevokedCredentials(frozenset())
    leader.revoked.set(frozenset({0x1F, 0xABC}))
    await wait_for_value(revoked, lambda value: value.serials == {0x1F, 0xABC})
    calls = leader.calls.get_nowait()
    watches = [call.caller for call in calls if call.method == "WatchRevokedCredentials"]
    assert watches == [cluster.credentials.node_id]


async def test_revocations_stays_healthy_through_each_revocation(
    cluster: FakeCluster, start: Start
) -> None:
    """Each new set only changes the value: the worker signalled healthy again at each one,
    which the supervisor refused (it failed at every other revocation, and sat in NEW until
    the next, its first answer after the restart being the set it already had)."""
    leader = await cluster.curator()
    harness = await start()
    revoked = harness.runtime.registry.read(REVOKED_CREDENTIALS, "test")
    harness.set(CURATOR_CONNECTION, cluster.connect(leader))
    await harness.wait_state(REVOCATIONS)
    for count in range(1, 4):
        leader.revoked.set(frozenset(range(1, count + 1)))
        await wait_for_value(revoked, functools.partial(_counts, count))
        status = harness.status(REVOCATIONS)
        assert (status.state, status.failures, status.restarts) == (State.HEALTHY, 0, 0)


def _counts(count: int, revoked: RevokedCredentials) -> bool:
    return len(revoked.serials) == count
