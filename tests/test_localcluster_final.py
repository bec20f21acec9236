"""A local cluster whose first node fails for good (no etcd) stops at once and shows the
node's one line first, then where its log is (real node processes)."""

from __future__ import annotations

import ipaddress
import random
from pathlib import Path

import anyio
import pytest

from roleserve_core.localcluster import LocalCluster, LocalClusterError

pytestmark = pytest.mark.anyio


@pytest.mark.timeout(60)
async def test_up_without_etcd_stops_at_once_with_the_nodes_line_first(tmp_path: Path) -> None:
    first = ipaddress.IPv4Address(f"127.{random.randint(1, 254)}.{random.randint(0, 254)}.11")
    config = '[plugins.controlplane]\netcd = "/nonexistent/etcd"\n'
    cluster = LocalCluster(tmp_path, 1, first_address=first, config=config)
    with anyio.fail_after(45), pytest.raises(LocalClusterError) as failed:
        await cluster.up()
    node = cluster.nodes[0]
    assert str(failed.value) == (
        "node 1 exited (exit status 1): root.role.controlplane: the configured etcd "
        "/nonexistent/etcd is not an executable file; install etcd there, or change etcd = "
        '"/path/to/etcd" in the [plugins.controlplane] section of roleserve.toml (its log: '
        f"{node.log_file})"
    )
    assert node.pid is None
