"""A cluster's only consensus member whose saved roles are corrupt (issue 28): one real node
process, real etcd.

Its roles come from the curator, the curator runs on etcd, and etcd once waited for the
role: the node waited for ever. Now its member starts from its own records
(``consensus.saved``), on its own data, and the curator then sends the roles.
"""

from __future__ import annotations

import ipaddress
from collections.abc import AsyncIterator

import pytest

from roleserve_core.localcluster import LocalCluster
from roleserve_core.proto import common_pb2, management_pb2
from roleserve_core.testing import poll_until

pytestmark = pytest.mark.anyio

TIMEOUT = 90.0
"""Seconds for the node to come back (a node's start with etcd takes ~10 s; CI is slower)."""


@pytest.fixture
async def lone(
    components: None,
    tmp_path_factory: pytest.TempPathFactory,
    first_address: ipaddress.IPv4Address,
    node_config: str,
) -> AsyncIterator[LocalCluster]:
    """A cluster of one node, UP."""
    cluster = LocalCluster(
        tmp_path_factory.mktemp("lone"), 1, first_address=first_address, config=node_config
    )
    try:
        await cluster.up()
        yield cluster
    finally:
        await cluster.down()


async def its_node(cluster: LocalCluster) -> management_pb2.Node:
    """The one node, as the cluster's Management service lists it."""
    async with cluster.management(patience=5.0) as management:
        [node] = (await cluster.nodes_by_id(management)).values()
        return node


@pytest.mark.timeout(240)
async def test_the_only_member_whose_saved_roles_are_corrupt_comes_back_on_its_data(
    lone: LocalCluster,
) -> None:
    [node] = lone.nodes
    member = node.directory / "plugins" / "controlplane" / "etcd"
    assert await node.stop() == 0
    record = (member / "membership.json").read_bytes()
    data = (member / "data").stat().st_ino
    saved = node.directory / "plugins" / "core" / "roles.pb"
    saved.write_bytes(saved.read_bytes()[: saved.stat().st_size // 2])

    node.start()
    back = await poll_until(
        "the node UP and HEALTHY",
        lambda: its_node(lone),
        lambda n: n.state == common_pb2.NODE_STATE_UP and n.health == management_pb2.Node.HEALTHY,
        timeout=TIMEOUT,
    )
    assert back.roles.HasField("consensus_member")
    log = node.log_file.read_text()
    assert f"{saved} is corrupt" in log
    assert "starting its etcd member from its own records" in log
    assert (member / "membership.json").read_bytes() == record  # restarted, not bootstrapped
    assert (member / "data").stat().st_ino == data
    assert sorted(path.name for path in member.glob("data*")) == ["data"]
