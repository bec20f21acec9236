"""Node certificates renew themselves on a running cluster: two real node processes whose
cluster configuration gives node certificates a lifetime of 45 s (renewed after about
30 s), watched from outside until every node has renewed twice; every node stays UP and
HEALTHY throughout, in the same process."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from cryptography import x509

from roleserve_core.identity import CERTIFICATE_FILE, certificate_from_pem
from roleserve_core.localcluster import LocalCluster, LocalNode
from roleserve_core.proto import common_pb2, management_pb2
from roleserve_core.testing import poll_until

pytestmark = pytest.mark.anyio

LIFETIME = 45
"""Seconds: ``[plugins.controlplane] node_certificate_lifetime`` of the bootstrapping node."""
RENEWALS = 2
TIMEOUT = 100.0
"""Seconds for two renewals of every node (about 60 s), within the test's timeout."""


@pytest.fixture(scope="module")
def short_lived(
    components: None,
    node_config: str,
    module_first_address: ipaddress.IPv4Address,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[LocalCluster]:
    """Two node processes, UP and HEALTHY, whose certificates last ``LIFETIME`` seconds."""
    config = f"{node_config}node_certificate_lifetime = {LIFETIME}\n"
    directory: Path = tmp_path_factory.mktemp("renewal")
    local = LocalCluster(directory, 2, first_address=module_first_address, config=config)
    try:
        anyio.run(local.up)
        yield local
    finally:
        anyio.run(local.down)


def certificate(node: LocalNode) -> x509.Certificate:
    """The node certificate the node saved."""
    return certificate_from_pem((node.datadir.credentials / CERTIFICATE_FILE).read_bytes())


async def test_nodes_renew_their_certificates_and_stay_healthy(short_lived: LocalCluster) -> None:
    cluster = short_lived
    pids = [node.pid for node in cluster.nodes]
    seen: dict[int, list[x509.Certificate]] = {i: [] for i in range(len(cluster.nodes))}
    health: list[dict[str, tuple[int, int]]] = []

    async def look() -> bool:
        async with cluster.management() as management:
            found = await cluster.nodes_by_id(management)
        health.append({identity: (node.state, node.health) for identity, node in found.items()})
        for index, node in enumerate(cluster.nodes):
            saved = certificate(node)
            if not seen[index] or seen[index][-1] != saved:
                seen[index].append(saved)
        return all(len(certificates) > RENEWALS for certificates in seen.values())

    await poll_until("every node renewed its certificate twice", look, timeout=TIMEOUT)

    healthy = (common_pb2.NODE_STATE_UP, management_pb2.Node.HEALTHY)
    assert health, "no look succeeded"
    assert all(set(look.values()) == {healthy} and len(look) == 2 for look in health), health
    assert [node.pid for node in cluster.nodes] == pids  # renewed without a restart
    for node in cluster.nodes:
        log = node.log_file.read_text()
        assert "renewed the node certificate" in log
        assert "Traceback" not in log
    for certificates in seen.values():
        first, last = certificates[0], certificates[-1]
        assert last.subject == first.subject  # the same node ID
        assert last.not_valid_after_utc > first.not_valid_after_utc
        lifetime = last.not_valid_after_utc - last.not_valid_before_utc
        assert lifetime.total_seconds() == pytest.approx(LIFETIME * 1.1, abs=2)
