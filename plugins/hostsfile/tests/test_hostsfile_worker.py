"""The worker end to end, in process: a fake curator, the core's nodewatch, real files."""

from __future__ import annotations

import ipaddress
import logging
import os
import socket
import stat
from pathlib import Path
from typing import Any

import anyio
import pytest

from roleserve_core import (
    CLUSTER_NODES,
    CURATOR_CONNECTION,
    NETWORK,
    NODE_ID,
    LogEntry,
    LogFollower,
    NetworkStatus,
    State,
    common_pb2,
)
from roleserve_core.testing import (
    DEFAULT_TIMEOUT,
    FakeCluster,
    FakeCurator,
    NodeHarness,
    StartNode,
    node_record,
    start_plugin_node,
    wait_for_value,
)
from roleserve_hostsfile import files, hooks, worker_hostsfile
from roleserve_hostsfile.block import BEGIN, END
from roleserve_hostsfile.worker_hostsfile import WAITING_FOR_ID, WAITING_FOR_NODES

pytestmark = pytest.mark.anyio

DN = "root.role.hostsfile"
HOSTS = b"127.0.0.1 localhost\n# the operator's\n"


def block(addresses: dict[str, str]) -> bytes:
    """The block listing ``addresses`` (node ID → address), sorted by node ID."""
    lines = [f"{addresses[node_id]} {node_id}".encode() for node_id in sorted(addresses)]
    return b"\n".join([BEGIN, *lines, END]) + b"\n"


async def start(node: StartNode, tmp_path: Path, **settings: Any) -> NodeHarness:
    """A node running the hostsfile worker and the core's nodewatch."""
    return await start_plugin_node(
        node,
        tmp_path / "node",
        {"hostsfile": hooks},
        config={"hostsfile": settings},
        cluster_nodes=True,
    )


async def enrolled(harness: NodeHarness, cluster: FakeCluster, curator: FakeCurator) -> None:
    """What enrolment and the connector give the node: its ID, a curator connection."""
    harness.set(NODE_ID, cluster.credentials.node_id)
    harness.set(CURATOR_CONNECTION, cluster.connect(curator))


async def wait_logged(log: LogFollower, text: str) -> LogEntry:
    """The next record of the worker that contains ``text``."""
    with anyio.fail_after(DEFAULT_TIMEOUT):
        async for entry in log:
            if text in entry.message:
                return entry
    raise AssertionError("the log follower closed")


async def test_the_block_follows_the_cluster(
    fake_cluster: FakeCluster, node: StartNode, tmp_path: Path
) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_bytes(HOSTS)
    own = fake_cluster.credentials.node_id
    leader = await fake_cluster.curator()
    leader.set_node(node_record(own, "10.0.0.1"))
    leader.set_node(node_record("node-a", "10.0.0.2"))
    leader.set_node(node_record("node-b", "fd00::3"))
    leader.set_node(node_record("node-x", "not an address"))

    harness = await start(node, tmp_path, path=str(hosts))
    await harness.wait_status(DN, lambda s: s.note == WAITING_FOR_ID)
    harness.set(NODE_ID, own)
    await harness.wait_status(DN, lambda s: s.note == WAITING_FOR_NODES)
    assert hosts.read_bytes() == HOSTS  # nothing before the whole cluster is known

    with harness.runtime.logtree.follow(DN) as log:
        harness.set(CURATOR_CONNECTION, fake_cluster.connect(leader))
        await wait_logged(log, f"wrote {hosts}")
        status = await harness.wait_state(DN, State.HEALTHY)
        assert status.note == ""
        assert hosts.read_bytes() == HOSTS + block(
            {"node-a": "10.0.0.2", "node-b": "fd00::3", own: "10.0.0.1"}
        )

        leader.set_node(node_record("node-c", "10.0.0.4"))
        await wait_logged(log, f"wrote {hosts}")
        assert hosts.read_bytes() == HOSTS + block(
            {"node-a": "10.0.0.2", "node-b": "fd00::3", "node-c": "10.0.0.4", own: "10.0.0.1"}
        )

        # its own address: the network status, newer than its curator record
        harness.set(NETWORK, NetworkStatus(ipaddress.ip_address("10.0.0.9")))
        await wait_logged(log, f"wrote {hosts}")
        assert f"10.0.0.9 {own}\n".encode() in hosts.read_bytes()

        # node-a vanishes (kept), node-b is decommissioned (removed)
        leader.remove_node("node-a")
        leader.set_node(
            node_record("node-b", "fd00::3", state=common_pb2.NODE_STATE_DECOMMISSIONED)
        )
        await wait_logged(log, f"wrote {hosts}")
        assert hosts.read_bytes() == HOSTS + block(
            {"node-a": "10.0.0.2", "node-c": "10.0.0.4", own: "10.0.0.9"}
        )

    warnings = [
        entry.message
        for entry in harness.runtime.logtree.entries(DN)
        if entry.level == logging.WARNING
    ]
    assert warnings == [
        "hosts file: skipped node node-x: an address that does not parse ('not an address')"
    ]
    assert harness.status(DN).failures == 0


async def test_no_write_when_the_block_would_not_change(
    fake_cluster: FakeCluster, node: StartNode, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nor a read: a view that leaves the block as it was does not touch the file (while a
    cluster forms, most views are such)."""
    updates: list[bytes] = []

    def update_hosts_file(path: Path, block: bytes) -> bool:
        updates.append(block)
        return files.update_hosts_file(path, block)

    monkeypatch.setattr(worker_hostsfile, "update_hosts_file", update_hosts_file)
    hosts = tmp_path / "hosts"
    own = fake_cluster.credentials.node_id
    hosts.write_bytes(HOSTS + block({own: "10.0.0.1"}))
    before = hosts.stat()
    leader = await fake_cluster.curator()
    leader.set_node(node_record(own, "10.0.0.1"))
    harness = await start(node, tmp_path, path=str(hosts))
    await enrolled(harness, fake_cluster, leader)
    await harness.wait_state(DN, State.HEALTHY)  # after its first update
    after = hosts.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)

    # a change the block does not show (the node's state), then one it does
    standby = common_pb2.NODE_STATE_STANDBY
    with harness.runtime.logtree.follow(DN) as log:
        leader.set_node(node_record(own, "10.0.0.1", state=standby))
        views = harness.runtime.registry.read(CLUSTER_NODES, "test")
        await wait_for_value(views, lambda view: view[own].state == standby)
        leader.set_node(node_record("node-a", "10.0.0.2"))
        entry = await wait_logged(log, "wrote")
    assert entry.message == f"wrote {hosts}: 2 nodes in its block"
    written = [e for e in harness.runtime.logtree.entries(DN) if "wrote" in e.message]
    assert written == [entry]
    assert len(updates) == 2  # the first view's, and the new node's

    # Another tool rewrites the file without the block (as Docker or cloud-init would):
    # the next view puts it back, though the block itself did not change.
    rewritten = tmp_path / "hosts.new"
    rewritten.write_bytes(HOSTS)
    rewritten.replace(hosts)
    with harness.runtime.logtree.follow(DN) as log:
        leader.set_node(node_record(own, "10.0.0.1"))  # its state again: the same block
        await wait_logged(log, "wrote")
    assert hosts.read_bytes() == HOSTS + block({"node-a": "10.0.0.2", own: "10.0.0.1"})


@pytest.mark.parametrize("where", ["a directory", "under a file"])
async def test_a_bad_path_makes_the_worker_dead_naming_it(
    fake_cluster: FakeCluster, node: StartNode, tmp_path: Path, where: str
) -> None:
    (tmp_path / "file").write_bytes(b"")
    path, reason = {
        "a directory": (tmp_path, "Is a directory"),
        "under a file": (tmp_path / "file" / "hosts", "Not a directory"),
    }[where]
    leader = await fake_cluster.curator()
    harness = await start(node, tmp_path, path=str(path))
    await enrolled(harness, fake_cluster, leader)
    status = await harness.wait_status(DN, lambda s: s.failures == 1)
    assert status.last_error is not None
    assert status.last_error.summary() == (
        f"roleserve_hostsfile.errors.FileUpdateError: cannot read the hosts file {path}: {reason}"
    )
    [logged] = [e for e in harness.runtime.logtree.entries(DN) if e.level >= logging.WARNING]
    assert str(path) in logged.message
    assert logged.exc_text is None  # one line, no traceback


async def test_hostname_and_machine_id_when_switched_on(
    fake_cluster: FakeCluster, node: StartNode, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hostnames: list[str] = []
    monkeypatch.setattr(socket, "gethostname", lambda: "localhost")
    monkeypatch.setattr(socket, "sethostname", hostnames.append)
    machine_id = tmp_path / "machine-id"
    settings = {"path": str(tmp_path / "hosts"), "hostname": True, "machine_id": str(machine_id)}
    leader = await fake_cluster.curator()
    harness = await start(node, tmp_path, **settings)
    await enrolled(harness, fake_cluster, leader)
    await harness.wait_state(DN, State.HEALTHY)
    own = fake_cluster.credentials.node_id
    assert hostnames == [own]
    assert machine_id.read_text() == f"{own}\n"
    assert stat.S_IMODE(machine_id.stat().st_mode) == 0o644


async def test_both_are_off_by_default(
    fake_cluster: FakeCluster, node: StartNode, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(name: str) -> None:
        raise AssertionError("sethostname called")

    monkeypatch.setattr(socket, "sethostname", refuse)
    leader = await fake_cluster.curator()
    harness = await start(node, tmp_path, path=str(tmp_path / "hosts"))
    await enrolled(harness, fake_cluster, leader)
    await harness.wait_state(DN, State.HEALTHY)
    # Only the hosts file, beside the node's data directory (which the node creates).
    assert sorted(os.listdir(tmp_path)) == ["hosts", "node"]


async def test_a_refused_hostname_makes_the_worker_dead(
    fake_cluster: FakeCluster, node: StartNode, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(name: str) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(socket, "gethostname", lambda: "localhost")
    monkeypatch.setattr(socket, "sethostname", refuse)
    leader = await fake_cluster.curator()
    harness = await start(node, tmp_path, path=str(tmp_path / "hosts"), hostname=True)
    await enrolled(harness, fake_cluster, leader)
    status = await harness.wait_status(DN, lambda s: s.failures == 1)
    own = fake_cluster.credentials.node_id
    assert status.last_error is not None
    assert status.last_error.message == (
        f"cannot set the hostname to {own}: Operation not permitted"
    )
    assert not (tmp_path / "hosts").exists()
