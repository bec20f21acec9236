"""The controlplane worker in a node runtime: it bootstraps a cluster, joins one when given
the consensus_member role, and leaves when the role goes."""

from __future__ import annotations

import contextlib
import ipaddress
import random
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import grpc
import pytest

from roleserve_controlplane import hooks
from roleserve_controlplane.consensus import FAULT_VARIABLE, EtcdBinary, EtcdClient, Member
from roleserve_controlplane.curator import BootstrapMaterial
from roleserve_controlplane.proto import state_pb2
from roleserve_controlplane.testing import (
    enrol_node,
    update_roles,
    wait_healthy_through_backoff,
)
from roleserve_controlplane.worker_controlplane import BOOTSTRAP_FILE
from roleserve_core import (
    BOOTSTRAP,
    BOOTSTRAPPED,
    LOCAL_CONTROL_PLANE,
    NETWORK,
    NODE_CREDENTIALS,
    Bootstrapped,
    BootstrapRequest,
    LocalControlPlane,
    NetworkStatus,
    NodeRoles,
    State,
    common_pb2,
    curator_pb2,
    curator_pb2_grpc,
    management_pb2,
    management_pb2_grpc,
    roles_from_proto,
)
from roleserve_core.identity import (
    Credentials,
    NodeCredentials,
    certificate_from_pem,
    certificate_to_pem,
    generate_key,
)
from roleserve_core.rpc import secure_channel
from roleserve_core.testing import (
    FakeClock,
    NodeHarness,
    StartNode,
    SupervisorRunner,
    poll_until,
    start_plugin_node,
    wait_for_value,
)

pytestmark = pytest.mark.anyio

WORKER = "root.role.controlplane"


def subnet() -> Callable[[int], ipaddress.IPv4Address]:
    """Loopback addresses of a random /24, one per node: nodes have their own IPs."""
    base = f"127.{random.randint(1, 254)}.{random.randint(0, 254)}"
    return lambda index: ipaddress.IPv4Address(f"{base}.{index + 1}")


async def start(
    node: StartNode,
    binary: EtcdBinary,
    directory: Path,
    address: ipaddress.IPv4Address,
    **more: object,
) -> NodeHarness:
    """A node runtime with the controlplane plugin, on fast etcd timers."""
    settings = {"etcd": str(binary.path), "heartbeat_ms": 25, "election_ms": 250, "lease_ttl": 2}
    settings.update(more)
    config = {"controlplane": settings}
    harness = await start_plugin_node(node, directory, {"controlplane": hooks}, config=config)
    harness.set(NETWORK, NetworkStatus(address))
    return harness


def value_of(harness: NodeHarness, key: Any) -> Any:
    return harness.runtime.registry.read(key, "test").get_nowait()


async def control_plane(harness: NodeHarness, running: bool) -> LocalControlPlane:
    watch = harness.runtime.registry.read(LOCAL_CONTROL_PLANE, "test")
    return await wait_for_value(watch, lambda lcp: lcp.running == running, timeout=60)


async def until_it_leads(endpoint: str, boot: Bootstrapped) -> None:
    """Wait until the curator at ``endpoint`` says it leads. A curator follows first, and
    restarts its server when elected, which ends the stream: ask again then."""
    async with secure_channel(endpoint, boot.owner, node_id=boot.node.node_id) as channel:
        local = curator_pb2_grpc.CuratorLocalStub(channel)
        with anyio.fail_after(30):
            while True:
                request = curator_pb2.GetCurrentLeaderRequest()
                stream = local.GetCurrentLeader(request, wait_for_ready=True)
                with contextlib.suppress(grpc.aio.AioRpcError):
                    async for answer in stream:
                        if answer.leader_node_id == answer.this_node_id:
                            stream.cancel()
                            return


async def leader_metrics_and_etcd_metrics(
    harness: NodeHarness, endpoint: str, boot: Bootstrapped, address: ipaddress.IPv4Address
) -> None:
    """The leading curator offers the node's metrics its snapshot (nodes by state, open
    Watch streams), its etcd requests are timed by operation, and etcd serves its metrics
    on the node's local exporter host."""
    timed = harness.runtime.introspection.stats.etcd.by_key
    assert {"get prefix", "transaction"} <= set(timed), sorted(timed)  # the cache, the election
    assert all(histogram.count > 0 for histogram in timed.values())
    offer = harness.runtime.introspection.stats.leader
    assert offer is not None
    snapshot = offer()
    assert [state for state, _health in snapshot.nodes] == ["UP"]  # as ctl nodes says it
    assert sum(snapshot.nodes.values()) == 1
    assert snapshot.watch_streams == 0
    async with secure_channel(endpoint, boot.owner, node_id=boot.node.node_id) as channel:
        request = curator_pb2.WatchRequest(
            nodes_in_cluster=curator_pb2.WatchRequest.NodesInCluster()
        )
        stream = curator_pb2_grpc.CuratorStub(channel).Watch(request)
        await anext(aiter(stream))
        assert offer().watch_streams == 1
        stream.cancel()
    url = f"http://{address}:7842/metrics"  # a loopback node: its own address
    with urllib.request.urlopen(url, timeout=10) as response:  # noqa: ASYNC210 - a quick local GET
        assert b"etcd_server_has_leader 1" in response.read()


async def test_bootstrap_then_a_node_joins_and_leaves_with_its_role(
    node: StartNode, binary: EtcdBinary, tmp_path: Path
) -> None:
    address = subnet()
    first = await start(node, binary, tmp_path / "first", address(0))
    first.set(BOOTSTRAP, BootstrapRequest(generate_key()))
    await first.wait_state(WORKER, State.HEALTHY, timeout=60)
    lcp = await control_plane(first, running=True)
    assert lcp == LocalControlPlane(f"{address(0)}:7835", f"{address(0)}:7836")
    boot: Bootstrapped = value_of(first, BOOTSTRAPPED)
    # A client of the local member (the Kubernetes PKI's) connects with these.
    assert lcp.etcd_credentials is not None
    async with EtcdClient([lcp.etcd_endpoint or ""], lcp.etcd_credentials) as etcd:
        assert (await etcd.status()).leader
    for child in ("etcd", "curator"):
        assert first.status(f"{WORKER}.{child}").state is State.HEALTHY
    endpoint = lcp.curator_endpoint or ""
    await until_it_leads(endpoint, boot)
    async with secure_channel(endpoint, boot.owner, node_id=boot.node.node_id) as channel:
        stub = management_pb2_grpc.ManagementStub(channel)
        nodes = [n async for n in stub.GetNodes(management_pb2.GetNodesRequest())]
    assert [(n.id, n.state, n.leader) for n in nodes] == [
        (boot.node.node_id, common_pb2.NODE_STATE_UP, True)
    ]
    assert roles_from_proto(nodes[0].roles).names() == ["consensus_member", "kubernetes_controller"]
    await leader_metrics_and_etcd_metrics(first, endpoint, boot, address(0))

    # A second node, enrolled, without the role: no control plane.
    second = await start(node, binary, tmp_path / "second", address(1))
    key = generate_key()
    credentials: NodeCredentials = await enrol_node(
        endpoint, boot.node.node_id, boot.owner, key, address(1)
    )
    second.set(NODE_CREDENTIALS, credentials)
    second.set_roles(NodeRoles())
    plain = await second.wait_status(WORKER, lambda s: s.note == "no consensus_member role")
    assert plain.state is State.HEALTHY
    assert value_of(second, LOCAL_CONTROL_PLANE) == LocalControlPlane.NONE

    # Given the role, its worker restarts once and joins: etcd learner, promoted, curator.
    roles = await update_roles(boot, endpoint, credentials.node_id, "consensus_member", True)
    second.set_roles(roles)
    joined = await control_plane(second, running=True)
    assert joined.etcd_endpoint == f"{address(1)}:7836"
    assert second.status(WORKER).restarts == 1
    # A change inside the role (another custom role beside it) does not restart it.
    second.set_roles(NodeRoles(consensus_member=roles.consensus_member, custom={"x": {}}))

    # The role gone, it restarts once more and has no control plane; its member's data
    # stays where it is: the worker never deletes it (issue 28).
    member = tmp_path / "second" / "plugins" / "controlplane" / "etcd"
    roles = await update_roles(boot, endpoint, credentials.node_id, "consensus_member", False)
    second.set_roles(roles)
    await control_plane(second, running=False)
    left = await second.wait_status(WORKER, lambda s: s.note == "no consensus_member role")
    assert left.restarts == 2
    wal = wal_files(member / "data")
    assert wal
    assert (member / "membership.json").exists()

    # Given the role again, the member finds the cluster removed it and waits for it as a
    # learner: its former data is moved aside, whole, and it joins anew, as a voter.
    roles = await update_roles(boot, endpoint, credentials.node_id, "consensus_member", True)
    second.set_roles(roles)
    await control_plane(second, running=True)
    [aside] = member.glob("data.removed-*")
    assert wal_files(aside) == wal
    async with EtcdClient([lcp.etcd_endpoint or ""], lcp.etcd_credentials) as etcd:
        await poll_until("the node a voter again", etcd.members, is_voter(credentials.node_id))


def wal_files(data: Path) -> list[str]:
    """The names of the WAL files of etcd's data in ``data``."""
    return sorted(path.name for path in (data / "member" / "wal").glob("*.wal"))


def is_voter(name: str) -> Callable[[list[Member]], bool]:
    """Whether etcd's member list has ``name`` as a voter."""
    return lambda members: any(m.name == name and not m.is_learner for m in members)


async def test_an_unknown_role_changes_nothing_on_disk(node: StartNode, tmp_path: Path) -> None:
    """Roles not known (no saved roles, corrupt ones, no curator answering) are no reason to
    touch a member's data: the worker once deleted it whenever it started without the role
    (issue 28: a member whose roles.pb was truncated lost its etcd log)."""
    member = tmp_path / "plugins" / "controlplane" / "etcd"
    (member / "data" / "member" / "wal").mkdir(parents=True)
    files = {
        member / "membership.json": b'{"name": "n"}',
        member / "data" / "member" / "wal" / "0000000000000000-0000000000000000.wal": b"log",
    }
    for path, content in files.items():
        path.write_bytes(content)
    binary = EtcdBinary(Path("/nonexistent/etcd"), "3.5.0", "configured")
    harness = await start(node, binary, tmp_path, subnet()(0))
    await harness.wait_state(WORKER, State.HEALTHY)
    assert {path: path.read_bytes() for path in files if path.exists()} == files
    assert sorted(p.name for p in member.iterdir()) == ["data", "membership.json"]
    assert value_of(harness, LOCAL_CONTROL_PLANE) == LocalControlPlane.NONE
    assert harness.status(WORKER).note == "waiting for the node's roles"


@dataclass(frozen=True)
class TwoNodes:
    """A first node that bootstrapped and leads, and a second enrolled beside it."""

    address: Callable[[int], ipaddress.IPv4Address]
    boot: Bootstrapped
    endpoint: str
    """The first node's curator."""
    second: NodeHarness
    """Started, its credentials set, its roles not yet."""
    credentials: NodeCredentials


async def a_second_node_enrolled(node: StartNode, binary: EtcdBinary, tmp_path: Path) -> TwoNodes:
    """The start of the tests of a second node's member: the first bootstraps and leads,
    the second is enrolled with the first's curator."""
    address = subnet()
    first = await start(node, binary, tmp_path / "first", address(0))
    first.set(BOOTSTRAP, BootstrapRequest(generate_key()))
    lcp = await control_plane(first, running=True)
    boot: Bootstrapped = value_of(first, BOOTSTRAPPED)
    endpoint = lcp.curator_endpoint or ""
    await until_it_leads(endpoint, boot)
    second = await start(node, binary, tmp_path / "second", address(1))
    credentials = await enrol_node(
        endpoint, boot.node.node_id, boot.owner, generate_key(), address(1)
    )
    second.set(NODE_CREDENTIALS, credentials)
    return TwoNodes(address, boot, endpoint, second, credentials)


async def test_a_removed_member_is_refused_from_its_records_and_kept(
    node: StartNode, binary: EtcdBinary, tmp_path: Path, supervisor_runner: SupervisorRunner
) -> None:
    """While the roles are unknown, a member starts from its own records (issue 28: the
    cluster's only member waited for ever), with the checks of every restart: one the cluster
    removed is refused, and nothing is deleted. The worker follows the
    values while etcd is refused: the roles, once known without the role, restart it
    without a control plane."""
    two = await a_second_node_enrolled(node, binary, tmp_path)
    address, boot, endpoint, second, credentials = (
        two.address,
        two.boot,
        two.endpoint,
        two.second,
        two.credentials,
    )
    roles = await update_roles(boot, endpoint, credentials.node_id, "consensus_member", True)
    second.set_roles(roles)
    await control_plane(second, running=True)
    # The role taken away (the leader removes the member), the node down before it learns.
    await update_roles(boot, endpoint, credentials.node_id, "consensus_member", False)
    await supervisor_runner.stop(second.supervisor)
    member = tmp_path / "second" / "plugins" / "controlplane" / "etcd"
    before = sorted(path.name for path in member.iterdir())
    wal = wal_files(member / "data")

    again = await start(node, binary, tmp_path / "second", address(1))
    again.set(NODE_CREDENTIALS, credentials)
    refused = await again.wait_status(f"{WORKER}.etcd", lambda s: s.last_error is not None)
    assert refused.last_error is not None
    assert refused.last_error.type.endswith("NotAMemberError")
    assert "is not in the member list of its cluster" in refused.last_error.message
    assert sorted(path.name for path in member.iterdir()) == before
    assert wal_files(member / "data") == wal

    again.set_roles(NodeRoles())
    left = await again.wait_status(WORKER, lambda s: s.note == "no consensus_member role")
    assert left.restarts == 1
    assert value_of(again, LOCAL_CONTROL_PLANE) == LocalControlPlane.NONE
    assert sorted(path.name for path in member.iterdir()) == before


async def test_a_missing_etcd_is_final_at_once_and_restarting_after_the_fix_runs_it(
    node: StartNode, binary: EtcdBinary, tmp_path: Path
) -> None:
    missing = EtcdBinary(tmp_path / "nonexistent" / "etcd", "3.5.1", "configured")
    harness = await start(node, missing, tmp_path, subnet()(0))
    harness.set(BOOTSTRAP, BootstrapRequest(generate_key()))
    status = await harness.wait_status(WORKER, lambda s: s.final)
    assert status.state is State.DEAD
    assert status.note.startswith(f"the configured etcd {missing.path} is not an executable file")
    assert status.restart_in is None
    assert not (tmp_path / "etcd").exists()  # no member was started

    missing.path.parent.mkdir()
    missing.path.symlink_to(binary.path)  # the operator installs etcd where it is configured
    harness.supervisor.restart(WORKER)
    await harness.wait_state(WORKER, State.HEALTHY, timeout=60)


async def test_a_bad_cluster_network_is_final_at_bootstrap_before_etcd_starts(
    node: StartNode, binary: EtcdBinary, tmp_path: Path
) -> None:
    harness = await start(
        node, binary, tmp_path, subnet()(0), cluster_network="10.192.0.0/11", node_prefix_length=8
    )
    harness.set(BOOTSTRAP, BootstrapRequest(generate_key()))
    status = await harness.wait_status(WORKER, lambda s: s.final)
    assert status.state is State.DEAD
    assert status.note == (
        "[plugins.controlplane] node prefix length /8 must be longer than the cluster "
        "network's /11 and at most /32"
    )
    assert not (tmp_path / "plugins" / "controlplane" / "etcd").exists()


async def etcd_view(endpoint: str, member: Credentials) -> tuple[int, list[tuple[str, bool]]]:
    """The cluster ID the etcd at ``endpoint`` answers with, and its members (name, learner)."""
    async with EtcdClient([endpoint], member) as client:
        status = await client.status()
        members = await client.members()
    return status.cluster_id, sorted((m.name, m.is_learner) for m in members)


async def until_voters(endpoint: str, member: Credentials, names: list[str]) -> int:
    """Wait until the cluster lists exactly ``names``, all voters (the leader promotes a
    learner once it has caught up); its cluster ID."""
    with anyio.fail_after(60):
        while True:
            cluster_id, members = await etcd_view(endpoint, member)
            if members == sorted((name, False) for name in names):
                return cluster_id
            await anyio.sleep(0.2)  # polling etcd, whose promotion runs on its own timer


@pytest.mark.parametrize("fault", ["enospc", "join:started", "join:serving", "join:recorded"])
async def test_a_join_interrupted_at_any_step_ends_as_a_voter_of_the_one_cluster(
    node: StartNode,
    binary: EtcdBinary,
    tmp_path: Path,
    fake_clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
    fault: str,
) -> None:
    """The reported fault (``enospc``: the join left data/member without a WAL; the next
    start founded a second etcd cluster), and a crash injected at each step of the join."""
    two = await a_second_node_enrolled(node, binary, tmp_path)
    address, boot, endpoint, second, credentials = (
        two.address,
        two.boot,
        two.endpoint,
        two.second,
        two.credentials,
    )
    if fault == "enospc":
        data = tmp_path / "second" / "plugins" / "controlplane" / "etcd" / "data"
        (data / "member" / "snap").mkdir(parents=True)
    else:
        monkeypatch.setenv(FAULT_VARIABLE, fault)
    roles = await update_roles(boot, endpoint, credentials.node_id, "consensus_member", True)
    second.set_roles(roles)
    if fault != "enospc":
        failed = await second.wait_status(f"{WORKER}.etcd", lambda s: s.failures >= 1)
        monkeypatch.delenv(FAULT_VARIABLE)
        assert failed.last_error is not None
        assert failed.last_error.type.endswith("InjectedFaultError")
        await wait_healthy_through_backoff(second.supervisor, f"{WORKER}.etcd", fake_clock, failed)
    else:
        # Re-adding itself after moving the leftover aside, etcd may refuse the membership
        # change for a moment (seen with 3.5.1): the retry's backoff is on the fake clock.
        status = await second.wait_status(
            f"{WORKER}.etcd", lambda s: s.state is State.HEALTHY or s.failures >= 1
        )
        if status.state is not State.HEALTHY:
            await wait_healthy_through_backoff(
                second.supervisor, f"{WORKER}.etcd", fake_clock, status
            )
    await control_plane(second, running=True)
    assert roles.consensus_member is not None
    member = Credentials(
        credentials.key,
        certificate_from_pem(roles.consensus_member.peer_certificate, "peer certificate"),
        certificate_from_pem(roles.consensus_member.ca_certificate, "consensus CA"),
    )
    names = [boot.node.node_id, credentials.node_id]
    cluster_id = await until_voters(f"{address(0)}:7836", member, names)
    assert await etcd_view(f"{address(1)}:7836", member) == (
        cluster_id,
        sorted((name, False) for name in names),
    ), "a second etcd cluster"


@pytest.mark.parametrize("step", ["bootstrap:started", "bootstrap:serving", "bootstrap:recorded"])
async def test_a_bootstrap_interrupted_at_any_step_ends_in_one_bootstrapped_cluster(
    node: StartNode,
    binary: EtcdBinary,
    tmp_path: Path,
    fake_clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
    step: str,
) -> None:
    """After the crash, the bootstrap is finished (its records written, so the curator
    leads instead of crash-looping "never bootstrapped"), in one one-member cluster."""
    address = subnet()(0)
    first = await start(node, binary, tmp_path, address)
    monkeypatch.setenv(FAULT_VARIABLE, step)
    key = generate_key()
    first.set(BOOTSTRAP, BootstrapRequest(key))
    failed = await first.wait_status(f"{WORKER}.etcd", lambda s: s.failures >= 1)
    monkeypatch.delenv(FAULT_VARIABLE)
    assert failed.last_error is not None
    assert failed.last_error.type.endswith("InjectedFaultError")
    await wait_healthy_through_backoff(first.supervisor, f"{WORKER}.etcd", fake_clock, failed)
    lcp = await control_plane(first, running=True)
    boot: Bootstrapped = value_of(first, BOOTSTRAPPED)
    await until_it_leads(lcp.curator_endpoint or "", boot)
    material = BootstrapMaterial.load_or_create(
        tmp_path / "plugins" / "controlplane" / "bootstrap.pb", key, address
    )
    _, members = await etcd_view(f"{address}:7836", material.member)
    assert members == [(boot.node.node_id, False)]


async def test_after_the_bootstrap_the_ca_keys_live_in_etcd_alone(
    node: StartNode, binary: EtcdBinary, tmp_path: Path
) -> None:
    """Once the bootstrap committed, ``bootstrap.pb`` holds no CA key; once the node is
    enrolled (its credentials set), the file is gone."""
    harness = await start(node, binary, tmp_path, subnet()(0))
    harness.set(BOOTSTRAP, BootstrapRequest(generate_key()))
    boot: Bootstrapped = await wait_for_value(
        harness.runtime.registry.read(BOOTSTRAPPED, "test"), lambda _: True, timeout=60
    )
    material_file = tmp_path / "plugins" / "controlplane" / BOOTSTRAP_FILE
    stored = state_pb2.BootstrapMaterial.FromString(material_file.read_bytes())
    assert (stored.secrets.ca_key, stored.secrets.consensus_ca_key) == (b"", b"")
    assert stored.secrets.ca_certificate == certificate_to_pem(boot.node.ca_certificate)
    assert material_file.stat().st_mode & 0o777 == 0o600

    harness.set(NODE_CREDENTIALS, boot.node)  # as the core does once it saved them

    async def present() -> bool:
        return material_file.exists()

    await poll_until(f"{material_file} is deleted", present, lambda there: not there)
