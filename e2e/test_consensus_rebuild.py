"""A consensus member whose etcd data is corrupt, on a cluster of three real node processes
(issue 11 item 7): the node says so in one line, ``ctl consensus rebuild`` refuses what
would cost the quorum, and brings the member back as a voter from the other two.

Its own module, so its own cluster (``conftest.cluster``): the test leaves it HEALTHY, but
with one member rebuilt.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from roleserve_controlplane.testing import damage_wal
from roleserve_core.localcluster import LocalCluster, LocalNode
from roleserve_core.proto import common_pb2, management_pb2
from roleserve_core.testing import poll_until, run_ctl

pytestmark = pytest.mark.anyio

TIMEOUT = 60.0


async def nodes(cluster: LocalCluster) -> dict[str, management_pb2.Node]:
    async with cluster.management() as management:
        return await cluster.nodes_by_id(management)


def member_directory(node: LocalNode) -> Path:
    return node.directory / "plugins" / "controlplane" / "etcd"


async def consensus(cluster: LocalCluster) -> list[dict[str, Any]]:
    result = run_ctl(cluster.owner_directory, "consensus", "--json")
    assert result.returncode == 0, result.stderr
    members: list[dict[str, Any]] = json.loads(result.stdout)
    return members


async def test_a_corrupt_member_is_one_line_and_ctl_rebuilds_it(cluster: LocalCluster) -> None:
    found = await nodes(cluster)
    leader = next(local for local in cluster.nodes if found[cluster.node_id(local) or ""].leader)
    victim, bystander = [local for local in cluster.nodes if local is not leader]
    victim_id, bystander_id = cluster.node_id(victim), cluster.node_id(bystander)
    assert victim_id
    assert bystander_id
    data_dir = member_directory(victim) / "data"

    await victim.stop()
    damage_wal(data_dir, 256)

    # With the victim down, rebuilding another voter would leave 1 of 2: refused.
    refused = run_ctl(cluster.owner_directory, "consensus", "rebuild", bystander_id)
    assert refused.returncode == 1
    assert refused.stdout == ""
    assert refused.stderr.count("\n") == 1, refused.stderr
    assert refused.stderr.startswith(
        f"roleserve ctl: error: rebuilding the etcd member of {bystander_id}: not rebuilding "
        f"node {bystander_id}: cannot remove {bystander_id} ("
    )
    assert refused.stderr.endswith(
        "1 of the 2 voting members left are reachable, and a quorum needs 2 (FAILED_PRECONDITION)\n"
    )

    # Started, the victim says what is wrong in one line (which `cluster up` would show).
    victim.start()

    async def refusal() -> str | None:
        return victim.refusal()

    said = await poll_until("the victim's one line", refusal, timeout=TIMEOUT)
    assert said is not None
    assert said.startswith(
        f"root.role.controlplane.etcd: etcd's data in {data_dir} is corrupt ("
    ), said
    assert said.endswith(
        f"rebuild it with `roleserve ctl consensus rebuild {victim_id}`: the member then "
        "moves it aside and rejoins as a learner"
    ), said
    assert victim.pid is not None  # it waits, restarting after the backoff

    rebuilt = run_ctl(cluster.owner_directory, "consensus", "rebuild", victim_id[:16])
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert rebuilt.stdout.startswith(f"rebuilding {victim_id}: removed member ")

    def three_voters(members: list[dict[str, Any]]) -> bool:
        return sorted(member["status"] for member in members) == ["FULL"] * 3

    members = await poll_until(
        "three voters", lambda: consensus(cluster), three_voters, timeout=TIMEOUT
    )
    assert {member["node_id"] for member in members} == {
        cluster.node_id(local) for local in cluster.nodes
    }

    def healthy(found: dict[str, management_pb2.Node]) -> bool:
        return all(
            (node := found.get(cluster.node_id(local) or "")) is not None
            and node.state == common_pb2.NODE_STATE_UP
            and node.health == management_pb2.Node.HEALTHY
            for local in cluster.nodes
        )

    await poll_until("every node HEALTHY", lambda: nodes(cluster), healthy, timeout=TIMEOUT)
    [aside] = member_directory(victim).glob("data.removed-*")
    assert (aside / "member" / "wal").is_dir()  # moved aside, not deleted
    log = victim.log_file.read_text()
    assert "Traceback" not in log
    assert "is corrupt (" in log
