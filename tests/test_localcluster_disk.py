"""A local cluster whose first node has too little disk space for etcd: `cluster up` shows
the node's one line at once, instead of waiting 120 s for the owner's credentials (real node
processes, node 1's directory on a small tmpfs)."""

from __future__ import annotations

import ipaddress
import random
from pathlib import Path

import anyio
import pytest

from roleserve_core.localcluster import LocalCluster, LocalClusterError
from roleserve_core.testing import mounted_tmpfs

pytestmark = pytest.mark.anyio

MiB = 1024 * 1024


@pytest.mark.timeout(90)
async def test_up_with_a_full_disk_fails_at_once_with_the_nodes_line(tmp_path: Path) -> None:
    first = ipaddress.IPv4Address(f"127.{random.randint(1, 254)}.{random.randint(0, 254)}.11")
    cluster = LocalCluster(tmp_path, 1, first_address=first)
    node = cluster.nodes[0]
    with mounted_tmpfs(node.directory, 100 * MiB):
        try:
            with anyio.fail_after(45), pytest.raises(LocalClusterError) as failed:
                await cluster.up()
            assert node.pid is not None  # it waits for space, to start by itself once freed
        finally:
            await cluster.down()
    message = str(failed.value)
    assert message.startswith(
        "node 1 cannot start: root.role.controlplane: not enough free space for etcd in "
        f"{node.directory}/plugins/controlplane/etcd: "
    )
    assert "MiB) free, 144777216 bytes (138.1 MiB) needed (etcd allocates" in message
    assert message.endswith(
        f"starts by itself (its log: {node.log_file}); once that is done, run `cluster up` again"
    )
    assert "\n" not in message


@pytest.mark.timeout(150)
async def test_a_node_whose_disk_is_full_or_nearly_is_named_at_once(tmp_path: Path) -> None:
    """A node of a cluster stopped, then its disk filled: it could write neither its state
    nor its log (so not the line saying it waits for space either), and ``up`` waited 120 s
    for it, then timed out without a word of the disk. It is named at once, in one line.

    Then with 3 MiB left: the node (its owner's credentials written at its first start)
    logs that it waits for space for etcd, and ``up`` waited 120 s for a leader, then said
    every node runs and asked whether the cluster runs. That wait watches the node too."""
    first = ipaddress.IPv4Address(f"127.{random.randint(1, 254)}.{random.randint(0, 254)}.11")
    cluster = LocalCluster(tmp_path, 1, first_address=first)
    node = cluster.nodes[0]
    with mounted_tmpfs(node.directory, 256 * MiB) as disk:
        try:
            await cluster.up()
        finally:
            await cluster.down()
        disk.fill()
        again = LocalCluster(tmp_path, 1)
        try:
            with anyio.fail_after(10), pytest.raises(LocalClusterError) as failed:
                await again.up()
        finally:
            await again.down()
            disk.release()
        disk.fill(leave=3 * MiB)
        nearly = LocalCluster(tmp_path, 1)
        try:
            with anyio.fail_after(45), pytest.raises(LocalClusterError) as waiting:
                await nearly.up()
        finally:
            await nearly.down()
            disk.release()
    message = str(failed.value)
    assert message.startswith(f"node 1 cannot start: the disk of {node.directory} is full (")
    assert message.endswith(
        " bytes free), so the node can write neither its state nor its log; free space "
        "there, then run `cluster up` again"
    )
    assert "\n" not in message
    message = str(waiting.value)
    assert message.startswith(
        "node 1 cannot start: root.role.controlplane: not enough free space for etcd in "
        f"{node.directory}/plugins/controlplane/etcd: "
    )
    assert "MiB) needed (etcd allocates" in message
    assert message.endswith(
        f"(its log: {node.log_file}); once that is done, run `cluster up` again"
    )
    assert "\n" not in message
