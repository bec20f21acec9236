"""How many nodes ``cluster up`` gives ``kubernetes_worker`` (``--kubernetes-workers``), and
what it says of the roles it adds. No processes: the roles go to a recording stand-in for
the leader's Management service, which answers from the records the test gives it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, cast

import anyio
import anyio.lowlevel
import pytest

from roleserve_core.cli import main
from roleserve_core.identity import generate_key, node_id, private_key_to_pem
from roleserve_core.localcluster import (
    LocalCluster,
    LocalClusterError,
    default_roles,
    workers_for_up,
)
from roleserve_core.localcluster.cluster import Arrival, _alongside
from roleserve_core.localcluster.layout import DEFAULT_KUBERNETES_WORKERS, MAX_SIZE
from roleserve_core.proto import common_pb2, management_pb2

CONTROL = ["consensus_member", "kubernetes_controller", "kubernetes_worker"]


def workers(size: int, **options: Any) -> list[int]:
    """The indexes of the nodes whose default roles hold ``kubernetes_worker``."""
    return [
        index
        for index in range(1, size + 1)
        if "kubernetes_worker" in default_roles(index, size, **options)
    ]


@pytest.mark.parametrize("size", [1, 3, 10])
def test_up_to_ten_nodes_every_node_is_a_worker_by_default(size: int) -> None:
    assert workers_for_up(None, size) == size
    assert workers(size) == list(range(1, size + 1))


@pytest.mark.parametrize("size", [11, 50, MAX_SIZE])
def test_above_ten_nodes_the_first_ten_are_workers_by_default(size: int) -> None:
    """Each kubelet with its containerd costs ~0.9% of a core idle: 100 of them on two
    cores left no curator answering in time (issue 30)."""
    assert DEFAULT_KUBERNETES_WORKERS == 10
    assert workers_for_up(None, size) == 10
    assert workers(size) == list(range(1, 11))
    assert default_roles(1, size) == CONTROL  # the consensus members are among them
    assert default_roles(11, size) == []


def test_a_count_or_all_is_taken_as_asked() -> None:
    assert workers_for_up("all", MAX_SIZE) == MAX_SIZE
    assert workers_for_up(0, 3) == 0
    assert workers_for_up(3, 3) == 3
    assert workers(3, workers=1) == [1]
    assert workers(5, workers=0) == []
    assert default_roles(2, 3, workers=1) == ["consensus_member", "kubernetes_controller"]


@pytest.mark.parametrize(("asked", "size", "nodes"), [(4, 3, "3 nodes"), (2, 1, "1 node")])
def test_more_workers_than_nodes_is_refused_naming_the_flag_and_the_size(
    asked: int, size: int, nodes: str, tmp_path: Path
) -> None:
    with pytest.raises(LocalClusterError) as refused:
        LocalCluster(tmp_path, size, kubernetes_workers=asked)
    assert str(refused.value) == (
        f"--kubernetes-workers {asked} is more than the cluster's {nodes}: give {size} or "
        "fewer, or all"
    )


def test_more_workers_than_nodes_is_one_line_and_starts_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = tmp_path / "c"
    code = main(
        ["cluster", "up", "--nodes", "2", "--kubernetes-workers", "3", "--dir", str(directory)]
    )
    assert code == 1
    assert capsys.readouterr().err == (
        "roleserve cluster: error: --kubernetes-workers 3 is more than the cluster's 2 "
        "nodes: give 2 or fewer, or all\n"
    )
    assert not list(directory.glob("n*"))


@pytest.mark.parametrize("text", ["-1", "some", "2.5", "ALL", ""])
def test_a_workers_count_that_is_no_count_is_refused_by_the_parser(
    text: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = tmp_path / "c"
    with pytest.raises(SystemExit) as exit:
        main(["cluster", "up", "--kubernetes-workers", text, "--dir", str(directory)])
    assert exit.value.code == 2
    assert (
        capsys.readouterr()
        .err.splitlines()[-1]
        .endswith(
            f"argument --kubernetes-workers: {text!r} is not a number of nodes (0 or more) nor all"
        )
    )
    assert not directory.exists()


# -- the roles up adds, and what it says ---------------------------------------------------


class Leader:
    """The leader's Management service as ``up`` uses it for roles: answers ``GetNodes``
    from ``records`` and records each ``UpdateNodeRoles``."""

    def __init__(self, records: dict[str, management_pb2.Node]) -> None:
        self.records = records
        self.assigned: dict[str, list[str]] = {}

    async def stream(self, method: str, request: object) -> list[management_pb2.Node]:
        assert method == "GetNodes"
        return list(self.records.values())

    async def UpdateNodeRoles(  # noqa: N802 (the gRPC method's name)
        self, request: management_pb2.UpdateNodeRolesRequest
    ) -> None:
        assert all(change.assign for change in request.changes)
        self.assigned[request.node_id] = [change.role for change in request.changes]


def enrolled(cluster: LocalCluster, held: dict[int, list[str]]) -> Leader:
    """Each node of ``cluster`` with a key and UP; the roles ``held`` by index (the
    consensus members hold ``consensus_member`` already, so no etcd join is waited for)."""
    records = {}
    for local in cluster.nodes:
        key = generate_key()
        local.datadir.key.parent.mkdir(parents=True, exist_ok=True)
        local.datadir.key.write_bytes(private_key_to_pem(key))
        record = management_pb2.Node(id=node_id(key.public_key()), state=common_pb2.NODE_STATE_UP)
        for role in held.get(local.index, []):
            if role.startswith("custom:"):
                record.roles.custom[role.removeprefix("custom:")].SetInParent()
            else:
                getattr(record.roles, role).SetInParent()
        records[record.id] = record
    return Leader(records)


MEMBERS = {1: ["consensus_member"], 2: ["consensus_member"], 3: ["consensus_member"]}


def assign(cluster: LocalCluster, leader: Leader) -> dict[int, list[str]]:
    """Run ``up``'s role step; the roles it assigned, by node index."""
    anyio.run(cluster._assign_every_role, cast(Any, leader), list(cluster.nodes))
    indexes = {cluster.node_id(node): node.index for node in cluster.nodes}
    return {indexes[identity]: roles for identity, roles in leader.assigned.items()}


def test_above_ten_nodes_one_line_says_which_nodes_get_no_worker_and_how(
    tmp_path: Path,
) -> None:
    said: list[str] = []
    cluster = LocalCluster(tmp_path, 13, progress=said.append)
    assigned = assign(cluster, enrolled(cluster, MEMBERS))
    assert sorted(assigned) == list(range(1, 11))
    assert assigned[4] == ["kubernetes_worker"]
    capped = [line for line in said if "get no" in line]
    assert capped == [
        "nodes 11–13 get no kubernetes_worker (10 by default above 10 nodes; "
        "--kubernetes-workers all gives it to every node)"
    ]


def test_a_later_up_takes_no_worker_away_and_names_only_the_nodes_without(
    tmp_path: Path,
) -> None:
    """Brought back without the flag, a cluster made with ``--kubernetes-workers all`` (or
    whose operator gave node 12 a kubelet) keeps its workers; the line names the others."""
    said: list[str] = []
    cluster = LocalCluster(tmp_path, 13, progress=said.append)
    held = {**MEMBERS, 12: ["kubernetes_worker"]}
    assigned = assign(cluster, enrolled(cluster, held))
    assert 12 not in assigned
    assert [line for line in said if "get no" in line] == [
        "nodes 11, 13 get no kubernetes_worker (10 by default above 10 nodes; "
        "--kubernetes-workers all gives it to every node)"
    ]


def test_asked_workers_get_the_role_with_no_line_about_the_others(tmp_path: Path) -> None:
    said: list[str] = []
    cluster = LocalCluster(tmp_path, 13, progress=said.append, kubernetes_workers=2)
    assigned = assign(cluster, enrolled(cluster, MEMBERS))
    assert assigned == {
        1: ["kubernetes_controller", "kubernetes_worker"],
        2: ["kubernetes_controller", "kubernetes_worker"],
        3: ["kubernetes_controller"],
    }
    assert not any("get no" in line for line in said)


def test_asked_fewer_workers_than_hold_the_role_keeps_them_and_says_how_to_unset(
    tmp_path: Path,
) -> None:
    """``up --kubernetes-workers 1`` on a cluster whose nodes are all workers takes no role
    away (as ``up`` never does), and says so rather than leave the operator wondering."""
    said: list[str] = []
    cluster = LocalCluster(tmp_path, 4, progress=said.append, kubernetes_workers=1)
    every = {index: ["consensus_member", "kubernetes_worker"] for index in (1, 2, 3)}
    assigned = assign(cluster, enrolled(cluster, {**every, 4: ["kubernetes_worker"]}))
    assert assigned == {index: ["kubernetes_controller"] for index in (1, 2, 3)}
    assert [line for line in said if "keep " in line] == [
        "nodes 2–4 keep kubernetes_worker: cluster up takes no role away (`ctl roles unset "
        "NODE kubernetes_worker` does)"
    ]


def test_the_progress_line_says_what_is_added_and_what_the_node_keeps(tmp_path: Path) -> None:
    """It once read ``node 1: kubernetes_worker``, as if that were node 1's only role."""
    said: list[str] = []
    cluster = LocalCluster(tmp_path, 4, progress=said.append)
    assign(cluster, enrolled(cluster, {**MEMBERS, 4: ["custom:backup"]}))
    assert (
        "node 1: gets roles kubernetes_controller, kubernetes_worker (keeps consensus_member)"
        in said
    )
    assert "node 4: gets role kubernetes_worker (keeps custom:backup)" in said


class Running:
    """A node process as ``subprocess.Popen`` shows one that runs."""

    pid = 4_000_000  # beyond pid_max: no process has it

    def poll(self) -> int | None:
        return None


def test_a_new_node_gets_roles_only_once_it_reported_its_address(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """UP comes a moment before a node's first status report, and the curator refuses a
    consensus member without an address: ``up`` failed with FAILED_PRECONDITION when the
    roles of the last approved node came first. The roles are assigned alongside the
    approvals (each node's once it is UP), so this holds for each node on its own."""
    monkeypatch.setattr("roleserve_core.localcluster.cluster.POLL", 0)
    cluster = LocalCluster(tmp_path, 2)
    leader = enrolled(cluster, {1: default_roles(1, 2)})
    newcomer = cluster.nodes[1]
    newcomer._process = cast(Any, Running())
    identity = cluster.node_id(newcomer) or ""
    record = leader.records[identity]
    key = newcomer.datadir.key.read_bytes()
    newcomer.datadir.key.unlink()  # its process, just started, has not made it yet
    looks = 0
    addressed: list[bool] = []  # at each role change of the newcomer

    async def get_nodes(method: str, request: object) -> list[management_pb2.Node]:
        nonlocal looks
        looks += 1
        if looks == 4:
            newcomer.datadir.key.write_bytes(key)
        if looks == 10:  # its first status report, some polls later
            record.status.external_address = str(newcomer.address)
        return list(leader.records.values())

    assign = leader.UpdateNodeRoles

    async def update_roles(request: management_pb2.UpdateNodeRolesRequest) -> None:
        addressed.append(bool(leader.records[request.node_id].status.external_address))
        await assign(request)

    monkeypatch.setattr(leader, "stream", get_nodes)
    monkeypatch.setattr(leader, "UpdateNodeRoles", update_roles)

    async def enrol() -> None:
        up = {newcomer.index: Arrival()}

        async def approve() -> None:
            await cluster._approve(cast(Any, leader), [newcomer], up)

        async def assign() -> None:
            await cluster._assign_every_role(cast(Any, leader), list(cluster.nodes), up)

        await _alongside({"approve": approve, "assign": assign})

    anyio.run(enrol)
    assert leader.assigned == {identity: ["kubernetes_worker"]}
    assert addressed == [True]


def test_a_step_ended_by_a_stray_cancellation_is_not_taken_as_done() -> None:
    """grpc.aio raises CancelledError in a call whose channel was closed under it: a task
    that ends so ends as if cancelled, and ``up`` must not go on as if its step was done."""

    async def stray() -> None:
        raise asyncio.CancelledError

    async def done() -> None:
        await anyio.lowlevel.checkpoint()

    with pytest.raises(RuntimeError, match=r"unfinished: the stray step$"):
        anyio.run(_alongside, {"the done step": done, "the stray step": stray})


def test_a_failed_step_cancels_the_steps_waiting_alongside_it_and_is_raised_as_it_is() -> None:
    """The approvals timing out while the roles of nodes not yet arrived wait for them:
    ``up`` fails with the approvals' one line, not an ExceptionGroup, and does not hang."""

    async def approvals() -> None:
        await anyio.lowlevel.checkpoint()
        raise LocalClusterError("timed out waiting until every new node is UP (2 not yet)")

    async def roles() -> None:
        await Arrival().wait()  # node 2's, which never arrives

    async def up() -> None:
        with anyio.fail_after(10):
            await _alongside({"the approvals": approvals, "the roles": roles})

    with pytest.raises(LocalClusterError, match="2 not yet"):
        anyio.run(up)
