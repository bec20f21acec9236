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

from roleserve_controlplane.testing import require_node_etcd
from roleserve_core.localcluster import LocalCluster
from roleserve_core.testing import require_real

E2E_CONFIG = """\
[plugins.kubernetes]
kube_binaries_dir = "/nonexistent/kube-binaries"

[plugins.controlplane]
lease_ttl = 3
"""
"""Each node's roleserve.toml: a short election lease, so a failover takes seconds; and no
kube binaries (a built cache is not looked for), so the modules that do not test
Kubernetes do not run three control planes and kubelets on CI's two cores
(``e2e/test_kubernetes.py`` does). ``[plugins.controlplane]`` comes last: tests append
settings of its own (``node_certificate_lifetime``) to it."""


@pytest.fixture(scope="module")
def components() -> None:
    """What a node of these tests runs: etcd, and the example plugin's gated worker."""
    require_node_etcd()
    require_real(
        "the example plugin roleserve-example-hello",
        importlib.util.find_spec("roleserve_example_hello"),
        "./dev sync installs the workspace",
    )


def random_first_address() -> ipaddress.IPv4Address:
    """127.X.Y.11 of this run's own: room for the nodes after it, apart from other runs."""
    return ipaddress.IPv4Address(f"127.{random.randint(1, 254)}.{random.randint(0, 254)}.11")


@pytest.fixture
def first_address() -> ipaddress.IPv4Address:
    """Node 1's address for a test's own cluster (see ``random_first_address``)."""
    return random_first_address()


@pytest.fixture(scope="module")
def module_first_address() -> ipaddress.IPv4Address:
    """Node 1's address for a cluster the module's tests share."""
    return random_first_address()


@pytest.fixture(scope="session")
def node_config() -> str:
    """``E2E_CONFIG``, for tests that write a node's roleserve.toml themselves."""
    return E2E_CONFIG


@pytest.fixture(scope="module")
def cluster(components: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """Three node processes, UP and HEALTHY, on a random 127.X.Y.0/24."""
    first = random_first_address()
    directory: Path = tmp_path_factory.mktemp("cluster")
    local = LocalCluster(directory, 3, first_address=first, config=E2E_CONFIG)
    try:
        anyio.run(local.up)
        yield local
    finally:
        anyio.run(local.down)
