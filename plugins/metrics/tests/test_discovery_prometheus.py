"""A real Prometheus, with the configuration ``roleserve ctl prometheus-config`` writes, finds
its targets through ``/discovery`` and scrapes them over mutual TLS.

Two fake nodes on loopback addresses of their own, each an aiohttp HTTPS server on port 7840
with a node certificate of a throwaway CA, requiring client certificates of that CA: a
consensus member serving ``/discovery`` and exporters, and a worker serving exporters.
Prometheus (Debian's, 2.42) gets the file ``prometheus_yaml`` renders (plus a short scrape
interval) and the metrics credentials; the test waits until every target is up and checks
what each job scrapes and the labels it carries. This proves the whole chain: the http_sd
JSON, ``server_name`` against node certificates, the client certificate, the etcd job's
relabelling on the role label, and labels usable as they are.
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from roleserve_core import ClusterNodes, ConsensusMember, KubernetesWorker, NodeRoles
from roleserve_core.identity import (
    ANY_NODE_NAME,
    NodeCredentials,
    Scope,
    UserCredentials,
    generate_key,
    issue_user_certificate,
)
from roleserve_core.testing import ThrowawayCA, node_record, random_loopback
from roleserve_metrics import METRICS_PORT
from roleserve_metrics.ctl import prometheus_yaml
from roleserve_metrics.discovery import DiscoveryView, discovery_routes
from roleserve_metrics.testing import all_up, free_port, run_prometheus, targets_when

pytestmark = pytest.mark.anyio


def server_context(node: NodeCredentials, tmp_path: Path) -> ssl.SSLContext:
    """TLS as the metrics server has it: the node certificate, client certificates of the
    cluster CA required."""
    directory = tmp_path / node.node_id
    directory.mkdir()
    (directory / "cert.pem").write_bytes(node.certificate_pem)
    (directory / "key.pem").write_bytes(node.key_pem)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(directory / "cert.pem", directory / "key.pem")
    context.verify_mode = ssl.CERT_REQUIRED
    assert node.ca_pem is not None
    context.load_verify_locations(cadata=node.ca_pem.decode())
    return context


async def exporter(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    return web.Response(text=f'roleserve_fake_exporter{{exporter="{name}"}} 1\n')


@contextlib.asynccontextmanager
async def fake_node(
    address: str, context: ssl.SSLContext, view: DiscoveryView | None
) -> AsyncIterator[None]:
    app = web.Application()
    app.router.add_get("/metrics/{name}", exporter)
    if view is not None:
        app.add_routes(discovery_routes(view))
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        await web.TCPSite(runner, address, METRICS_PORT, ssl_context=context).start()
        yield
    finally:
        await runner.cleanup()


async def test_prometheus_discovers_and_scrapes_over_mutual_tls(tmp_path: Path) -> None:
    ca = ThrowawayCA()
    member, worker = ca.node(), ca.node()
    member_address, worker_address = str(random_loopback()), str(random_loopback())
    key = generate_key()
    certificate = issue_user_certificate(
        ca.key, ca.certificate, key.public_key(), "prometheus-test", scope=Scope.METRICS
    )
    credentials_dir = tmp_path / "prometheus"
    UserCredentials(key, certificate, ca.certificate).save(credentials_dir)
    config = credentials_dir / "prometheus.yml"
    text = prometheus_yaml(
        [member_address], credentials_dir, server_name=ANY_NODE_NAME, scrape_interval="1s"
    )
    config.write_text(text)

    view = DiscoveryView()
    member_roles = NodeRoles(consensus_member=ConsensusMember(), custom={"db.primary": {}})
    member_record = node_record(member.node_id, member_address, roles=member_roles)
    member_record.labels.pairs.add(key="topology.zone", value="z1")
    worker_record = node_record(
        worker.node_id, worker_address, roles=NodeRoles(kubernetes_worker=KubernetesWorker())
    )
    records = {record.id: record for record in (member_record, worker_record)}
    view.update(ClusterNodes(records, backlogged=True))

    api_port = free_port(member_address)
    async with (
        fake_node(member_address, server_context(member, tmp_path), view),
        fake_node(worker_address, server_context(worker, tmp_path), None),
    ):
        with run_prometheus(config, member_address, api_port, tmp_path) as api:
            active = await targets_when(api, lambda found: len(found) == 6 and all_up(found))

    scraped = sorted((t["labels"]["job"], t["labels"]["roleserve_node"]) for t in active)
    assert scraped == sorted(
        [
            ("roleserve-core", member.node_id),
            ("roleserve-core", worker.node_id),
            ("roleserve-node", member.node_id),
            ("roleserve-node", worker.node_id),
            ("roleserve-etcd", member.node_id),  # the etcd job keeps consensus members only
            ("roleserve-containerd", worker.node_id),  # and this one Kubernetes workers
        ]
    )
    [etcd] = [t for t in active if t["labels"]["job"] == "roleserve-etcd"]
    assert etcd["scrapeUrl"] == f"https://{member_address}:{METRICS_PORT}/metrics/etcd"
    assert etcd["labels"] == {
        "instance": f"{member_address}:{METRICS_PORT}",
        "job": "roleserve-etcd",
        "roleserve_label_topology_zone": "z1",
        "roleserve_node": member.node_id,
        "roleserve_role_consensus_member": "true",
        "roleserve_role_custom_db_primary": "true",
    }
