"""A local cluster whose first node fails for good (no etcd) stops at once and shows the
node's one line, last in the log tail it prints (real node processes)."""

from __future__ import annotations

import ipaddress
import random
from pathlib import Path

import anyio
import pytest

from roleserve_core.localcluster import LocalCluster, LocalClusterError

pytestmark = pytest.mark.anyio


@pytest.mark.timeout(60)
async def test_up_without_etcd_stops_at_once_with_the_nodes_line_last(tmp_path: Path) -> None:
    first = ipaddress.IPv4Address(f"127.{random.randint(1, 254)}.{random.randint(0, 254)}.11")
    config = '[plugins.controlplane]\netcd = "/nonexistent/etcd"\n'
    cluster = LocalCluster(tmp_path, 1, first_address=first, config=config)
    with anyio.fail_after(45), pytest.raises(LocalClusterError) as failed:
        await cluster.up()
    message = str(failed.value)
    assert message.startswith("node 1 exited; the end of ")
    assert message.splitlines()[-1].strip() == (
        "roleserve node: error: root.role.controlplane: the configured etcd /nonexistent/etcd "
        'is not an executable file; install etcd there, or change etcd = "/path/to/etcd" in '
        "the [plugins.controlplane] section of roleserve.toml"
    )
    assert cluster.nodes[0].pid is None
