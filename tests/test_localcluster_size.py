"""How many nodes ``cluster up`` runs, and how it hands a new node its ticket (no
processes are started here: ``subprocess.Popen`` is recorded instead)."""

from __future__ import annotations

import ipaddress
import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest

from roleserve_core.cli import main
from roleserve_core.environment import REGISTER_TICKET_ENV
from roleserve_core.localcluster import (
    DEFAULT_SIZE,
    LocalCluster,
    LocalClusterError,
    held_nodes,
    netns,
    size_for_up,
)
from roleserve_core.localcluster import cluster as cluster_module
from roleserve_core.localcluster.layout import MAX_SIZE


def nodes(directory: Path, *names: str) -> Path:
    for name in names:
        (directory / name).mkdir(parents=True)
    return directory


def test_a_new_cluster_has_the_default_size_or_the_one_asked(tmp_path: Path) -> None:
    assert size_for_up(tmp_path / "new", None) == DEFAULT_SIZE == 3
    assert size_for_up(tmp_path / "new", 1) == 1


def test_an_existing_cluster_keeps_its_size_or_grows(tmp_path: Path) -> None:
    directory = nodes(tmp_path, "n1", "n2", "n3", "n4", "n5", "owner")
    assert size_for_up(directory, None) == 5  # not the default 3: every node comes back
    assert size_for_up(directory, 5) == 5
    assert size_for_up(directory, 7) == 7


def test_an_existing_cluster_is_not_shrunk(tmp_path: Path) -> None:
    directory = nodes(tmp_path, "n1", "n2", "n3")
    with pytest.raises(LocalClusterError) as refused:
        size_for_up(directory, 2)
    assert str(refused.value) == (
        f"the cluster in {directory} has 3 nodes, and `cluster up` does not shrink it: run "
        "it without --nodes (or with --nodes 3 or more); a node leaves through "
        "`ctl decommission`"
    )


def test_a_missing_node_directory_is_still_counted(tmp_path: Path) -> None:
    """n2 removed by hand: node 3 keeps its place, and up enrols a new node 2."""
    directory = nodes(tmp_path, "n1", "n3", "n10x")
    (directory / "n7").write_text("not a node\n")
    assert held_nodes(directory) == 3
    assert len(LocalCluster.existing(directory).nodes) == 3


def test_a_registering_node_gets_its_ticket_in_its_environment_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[dict[str, Any]] = []

    class Recorded:
        pid = 4_000_000  # beyond pid_max: no process has it

        def __init__(self, command: list[str], **options: Any) -> None:
            started.append({"argv": command, **options})

        def poll(self) -> int | None:
            return None

    monkeypatch.setattr(subprocess, "Popen", Recorded)
    monkeypatch.setenv(REGISTER_TICKET_ENV, "rs1-inherited")
    cluster = LocalCluster(tmp_path, 2)
    first, second = cluster.nodes
    cluster._register(second, "rs1-the-ticket")
    first.start()  # a node that does not register: the inherited ticket is not passed on
    registering, other = started
    assert not any("rs1-" in word for word in registering["argv"] + other["argv"])
    assert "--register" not in registering["argv"]
    assert registering["argv"][-2:] == ["--join-address", str(first.address)]
    assert registering["env"][REGISTER_TICKET_ENV] == "rs1-the-ticket"
    assert REGISTER_TICKET_ENV not in other["env"]


def test_up_takes_up_to_max_size_nodes_and_refuses_more_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The bound is checked by the argument parser, before any node starts: one line."""
    assert MAX_SIZE >= 100
    directory = str(tmp_path / "c")
    for count in ("0", str(MAX_SIZE + 1), "ten"):
        with pytest.raises(SystemExit) as exit:
            main(["cluster", "up", "--nodes", count, "--dir", directory])
        assert exit.value.code == 2
        error = capsys.readouterr().err.splitlines()[-1]
        assert error.endswith(
            f"argument --nodes: {count!r} is not a number of nodes from 1 to {MAX_SIZE}"
        )
    assert not (tmp_path / "c").exists()


def test_max_size_nodes_fit_on_loopback_and_in_a_netns_subnet(tmp_path: Path) -> None:
    """Every node of the largest cluster has an address of its own, and a --netns
    cluster's names stay within the kernel's 15 characters."""
    loopback = LocalCluster(tmp_path / "lo", MAX_SIZE)
    addresses = {node.address for node in loopback.nodes}
    assert len(addresses) == MAX_SIZE
    assert all(address.is_loopback for address in addresses)
    plan = netns.NetnsPlan(ipaddress.IPv4Network("198.19.255.0/24"), MAX_SIZE)
    assert len({plan.address(index) for index in range(1, MAX_SIZE + 1)}) == MAX_SIZE
    longest = max((plan.veth(MAX_SIZE), plan.wireguard_interface(MAX_SIZE)), key=len)
    assert len(longest) <= 15


class Waiting:
    """A wait's check that holds at its ``holds_at``-th call, and its progress: the calls
    so far, or always 0 (``moving=False``)."""

    def __init__(self, holds_at: int, *, moving: bool) -> None:
        self.calls = 0
        self.holds_at = holds_at
        self.moving = moving

    async def check(self) -> bool:
        self.calls += 1
        return self.calls >= self.holds_at

    def progress(self) -> int:
        return self.calls if self.moving else 0


@pytest.mark.parametrize("moving", [True, False], ids=["moving", "stalled"])
def test_a_wait_for_many_nodes_times_out_only_once_none_moved_for_a_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, moving: bool
) -> None:
    """100 nodes in network namespaces, starting together on 2 cores, took more than a
    step's timeout to be UP all (each one in seconds): ``up`` failed while every poll saw
    more of them UP. A wait that moves is not timed out; one that stands still is."""
    monkeypatch.setattr(cluster_module, "STEP_TIMEOUT", 2.0)
    monkeypatch.setattr(cluster_module, "POLL", 0.02)
    cluster = LocalCluster(tmp_path, 3, progress=lambda line: None)
    waiting = Waiting(holds_at=150, moving=moving)  # 150 polls: 3 s at least, > 2 s

    async def wait() -> None:
        await cluster._until("the thing", waiting.check, progress=waiting.progress)

    if moving:
        anyio.run(wait)
        assert waiting.calls == 150
    else:
        with pytest.raises(LocalClusterError, match="timed out waiting until the thing"):
            anyio.run(wait)
        assert waiting.calls < 150
