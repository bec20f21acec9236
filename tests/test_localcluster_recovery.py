"""What ``cluster up`` stops when it ends early, and how it says a missing leader
(``localcluster.recovery``). The "nodes" are ``sleep`` processes in sessions of their own,
with PID files as a node's: one started by this process, the others found running."""

from __future__ import annotations

import ipaddress
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from roleserve_core.access import ClusterAccess
from roleserve_core.cli import main
from roleserve_core.localcluster import LocalNode
from roleserve_core.localcluster import cluster as cluster_module
from roleserve_core.localcluster.recovery import (
    growth_message,
    leaderless_message,
    quorum_said,
    stop_started,
)
from roleserve_core.ports import endpoint
from roleserve_core.proto import curator_pb2
from roleserve_core.testing import FakeCluster, ThrowawayCA, random_loopback

pytestmark = pytest.mark.anyio


def local_node(directory: Path, index: int) -> LocalNode:
    address = ipaddress.IPv4Address("127.0.0.10") + index
    return LocalNode(index, address, directory / f"n{index}")


def sleeping(node: LocalNode, *, ours: bool) -> subprocess.Popen[bytes]:
    """A process standing in for ``node``; ``ours``: as if this process started it."""
    node.directory.mkdir(parents=True, exist_ok=True)
    process = subprocess.Popen(["sleep", "600"], start_new_session=True)
    node.pid_file.write_text(f"{process.pid}\n")
    if ours:
        node._process = process
    return process


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        process.kill()
        process.wait()


async def test_only_the_nodes_started_here_are_stopped_and_the_others_named(
    tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    first, second, third = (local_node(tmp_path, index) for index in (1, 2, 3))
    processes.append(sleeping(first, ours=True))
    found = [sleeping(second, ours=False), sleeping(third, ours=False)]
    processes.extend(found)
    said: list[str] = []
    every = await stop_started([first, second, third], said.append)
    assert not every
    assert first.pid is None
    assert [second.pid, third.pid] == [process.pid for process in found]
    assert said == [
        f"stopping node 1 (pid {processes[0].pid})",
        "node 2, node 3 ran before this `cluster up` and keep running (stop them with "
        "`cluster down`)",
    ]


def test_a_missing_leader_names_the_nodes_that_do_not_run_and_their_logs(
    tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    first, second, third = (local_node(tmp_path, index) for index in (1, 2, 3))
    processes.append(sleeping(third, ours=False))
    assert leaderless_message(tmp_path, [first, second, third], "waited 120 s") == (
        f"no leader: node 1, node 2 of {tmp_path} not running; their logs: "
        f"{tmp_path}/n1/node.log, {tmp_path}/n2/node.log"
    )
    for node in (first, second):
        processes.append(sleeping(node, ours=False))
    assert leaderless_message(tmp_path, [first, second, third], "waited 120 s") == (
        f"no leader: every node of {tmp_path} runs, but none answers as leader (waited "
        f"120 s); their logs: {tmp_path}/n*/node.log"
    )


def three_members(*answering: LocalNode, silent: Sequence[LocalNode]) -> curator_pb2.NoQuorum:
    member = curator_pb2.NoQuorum.Member
    return curator_pb2.NoQuorum(
        members=[
            *(member(node_id=f"node-{n.index}", address=str(n.address), answers=True)
              for n in answering),
            *(member(node_id=f"node-{n.index}", address=str(n.address), answers=False)
              for n in silent),
        ]
    )  # fmt: skip


def test_a_missing_leader_names_the_members_that_run_but_do_not_answer(
    tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    """Processes that run but whose members do not answer (stopped, hung) are named from
    what a curator without a quorum said, beside the ones that do not run."""
    first, second, third = nodes = [local_node(tmp_path, index) for index in (1, 2, 3)]
    for node in (second, third):
        processes.append(sleeping(node, ours=False))
    quorum = three_members(third, silent=[first, second])
    assert leaderless_message(tmp_path, nodes, "waited 120 s", quorum) == (
        f"no leader (no quorum: 1 of 3 consensus members answer): node 1 of {tmp_path} not "
        "running; node 2 running but not answering as consensus members; their logs: "
        f"{tmp_path}/n1/node.log, {tmp_path}/n2/node.log"
    )


async def test_quorum_said_is_what_a_curator_without_a_quorum_says(
    fake_cluster: FakeCluster, tmp_path: Path
) -> None:
    survivor = await fake_cluster.curator()
    first, second, third = (local_node(tmp_path, index) for index in (1, 2, 3))
    quorum = three_members(first, silent=[second, third])
    survivor.without_quorum(quorum)
    access = ClusterAccess.of(fake_cluster.ca.user(), [survivor.endpoint])
    assert await quorum_said(access) == quorum
    survivor.lead()
    assert await quorum_said(access) is None


def test_growth_is_said_only_when_an_enrolled_cluster_gets_new_nodes(tmp_path: Path) -> None:
    nodes = [local_node(tmp_path, index) for index in (1, 2, 3, 4)]
    assert growth_message(nodes, nodes[1:]) is None  # a new cluster: nothing to grow
    for node in nodes[:3]:
        node.datadir.credentials.mkdir(parents=True)
    assert growth_message(nodes[:3], []) is None
    assert (
        growth_message(nodes, nodes[3:])
        == "the cluster has 3 nodes; --nodes 4 adds node 4 as a new node"
    )


def test_up_without_a_leader_says_so_in_one_line_and_stops_only_what_it_started(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    processes: list[subprocess.Popen[bytes]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Three enrolled nodes, node 3 running: ``up`` starts nodes 1 and 2, which exit at
    once (their processes are recorded, not run), and no curator answers. One line names
    the nodes that do not run and their logs; node 3, which ``up`` did not start, runs on.
    Before, the last gRPC error reached the command as a traceback, and every node was
    stopped."""
    directory = tmp_path / "cluster"
    for index in (1, 2, 3):
        (directory / f"n{index}" / "node" / "credentials").mkdir(parents=True)
    ca = ThrowawayCA()
    nowhere = endpoint(str(random_loopback()), 9)
    ClusterAccess.of(ca.user(), [nowhere]).save(directory / "owner")
    found = sleeping(local_node(directory, 3), ours=False)
    processes.append(found)
    (directory / "n3" / "node.pid").write_text(f"{found.pid}\n")

    class Exited:
        """A node process that exited at once."""

        pid = 4_000_000  # beyond pid_max: no process has it

        def __init__(self, command: list[str], **options: Any) -> None:
            pass

        def poll(self) -> int | None:
            return 1

        def wait(self) -> int:
            return 1

    monkeypatch.setattr(subprocess, "Popen", Exited)
    monkeypatch.setattr(cluster_module, "STEP_TIMEOUT", 0.5)
    code = main(["cluster", "up", "--detach", "--dir", str(directory)])
    out, err = capsys.readouterr()
    assert code == 1
    [line] = err.splitlines()
    assert line == (
        f"roleserve cluster: error: no leader: node 1, node 2 of {directory} not running; "
        f"their logs: {directory}/n1/node.log, {directory}/n2/node.log"
    )
    assert "node 3 ran before this `cluster up` and keeps running" in out
    assert found.poll() is None  # node 3's process runs on
