"""Node certificates have the cluster's lifetime, and a node renews its own, on real etcd
over mTLS: same key and node ID, a new lifetime from now; never a decommissioned node."""

from __future__ import annotations

import datetime
import ipaddress
import time
from collections.abc import AsyncIterator

import anyio
import grpc
import pytest

from roleserve_controlplane.consensus import ConsensusCA
from roleserve_controlplane.curator import ClusterAuthority, node_certificate_lifetime
from roleserve_controlplane.proto import state_pb2
from roleserve_controlplane.settings import CertificateLifetimeError
from roleserve_controlplane.testing.curator import CuratorCluster, CuratorNode
from roleserve_controlplane.testing.curator_api import CuratorApi, refused
from roleserve_controlplane.testing.etcd import EtcdCluster
from roleserve_controlplane.worker_controlplane import (
    ControlPlaneSettings,
    Startup,
    fold,
)
from roleserve_core import (
    BootstrapRequest,
    ConsensusMember,
    NetworkStatus,
    NodeRoles,
    common_pb2,
    curator_pb2,
)
from roleserve_core.identity import NodeCredentials, certificate_from_pem, certificate_to_pem
from roleserve_core.testing import ThrowawayCA, presented_certificate, renewal_due

pytestmark = pytest.mark.anyio

LIFETIME = datetime.timedelta(hours=6)
SLACK = datetime.timedelta(minutes=1)
"""Between issuing a certificate and checking it (``CLOCK_SKEW`` backdates its start)."""


@pytest.fixture
async def short_lived(cluster: EtcdCluster) -> AsyncIterator[CuratorCluster]:
    """A bootstrapped cluster whose configuration gives node certificates ``LIFETIME``."""
    async with CuratorCluster(cluster, node_certificate_lifetime=LIFETIME) as curators:
        await curators.bootstrap()
        yield curators


def _expires_in_lifetime(certificate: bytes | object, lifetime: datetime.timedelta) -> None:
    assert isinstance(certificate, bytes)
    parsed = certificate_from_pem(certificate)
    end = datetime.datetime.now(datetime.UTC) + lifetime
    assert end - SLACK <= parsed.not_valid_after_utc <= end


async def _renew(api: CuratorApi, node: CuratorNode) -> curator_pb2.RenewCertificateResponse:
    assert node.credentials is not None
    async with api.curator(node.credentials) as curator:
        response: curator_pb2.RenewCertificateResponse = await curator.RenewCertificate(
            curator_pb2.RenewCertificateRequest()
        )
    return response


async def test_enrolment_and_renewal_give_the_configured_lifetime_for_the_same_node(
    short_lived: CuratorCluster,
) -> None:
    api = CuratorApi(short_lived)
    node = await short_lived.enrol(1)
    assert node.credentials is not None
    _expires_in_lifetime(node.credentials.certificate_pem, LIFETIME)
    _expires_in_lifetime(short_lived.nodes[0].credentials.certificate_pem, LIFETIME)  # type: ignore[union-attr]

    renewed = await _renew(api, node)

    _expires_in_lifetime(renewed.node_certificate, LIFETIME)
    certificate = certificate_from_pem(renewed.node_certificate)
    assert certificate != node.credentials.certificate
    credentials = NodeCredentials(
        node.credentials.key, certificate, node.credentials.ca_certificate
    )
    assert credentials.node_id == node.node_id
    node.credentials = credentials
    await _renew(api, node)  # the renewed certificate opens the curator


def test_a_configuration_without_a_lifetime_means_thirty_days() -> None:
    """Clusters bootstrapped before the field existed."""
    unset = state_pb2.ClusterConfiguration()
    assert node_certificate_lifetime(unset) == datetime.timedelta(days=30)


async def test_the_default_bootstrap_gives_thirty_days(curators: CuratorCluster) -> None:
    node = await curators.enrol(1)
    renewed = await _renew(CuratorApi(curators), node)
    _expires_in_lifetime(renewed.node_certificate, datetime.timedelta(days=30))


async def test_a_decommissioned_node_cannot_renew(curators: CuratorCluster) -> None:
    api = CuratorApi(curators)
    node = await curators.enrol(1)
    await api.decommission(node.node_id)
    await api.settled(
        lambda nodes: nodes[node.node_id].state == common_pb2.NODE_STATE_DECOMMISSIONED
    )
    with refused(grpc.StatusCode.PERMISSION_DENIED, f"node {node.node_id} is decommissioned"):
        await _renew(api, node)


def test_a_lifetime_that_is_not_positive_is_refused_in_one_line() -> None:
    with pytest.raises(
        CertificateLifetimeError, match=r"^\[plugins.controlplane\] node_certificate_lifetime "
    ):
        ControlPlaneSettings(node_certificate_lifetime=0).certificate_lifetime  # noqa: B018
    assert ControlPlaneSettings(node_certificate_lifetime=60).certificate_lifetime == (
        datetime.timedelta(minutes=1)
    )


def test_a_bootstrapped_member_restarts_as_the_member_of_its_role() -> None:
    """The restart for a renewed certificate, in the process that bootstrapped: the
    bootstrap material is gone, so the member its role describes runs, not a bootstrap."""
    credentials = ThrowawayCA().node()
    address = ipaddress.IPv4Address("192.0.2.1")
    consensus = ConsensusCA.create()
    peer = consensus.member_certificate(
        credentials.key.public_key(), credentials.node_id, [address]
    )
    roles = NodeRoles(
        consensus_member=ConsensusMember(
            ca_certificate=certificate_to_pem(consensus.certificate),
            peer_certificate=certificate_to_pem(peer),
        )
    )
    bootstrap = BootstrapRequest(credentials.key)
    network = NetworkStatus(address)

    startup = fold(roles, bootstrap, credentials, network)
    assert isinstance(startup, Startup)
    assert (startup.bootstrap, startup.credentials) == (None, credentials)
    for unfinished in [(roles, None), (None, credentials)]:
        started = fold(unfinished[0], bootstrap, unfinished[1], network)
        assert isinstance(started, Startup)
        assert started.bootstrap is bootstrap


async def test_the_curator_presents_its_nodes_renewed_certificate_without_a_restart(
    curators: CuratorCluster,
) -> None:
    api = CuratorApi(curators)
    leader = curators.nodes[0]
    assert leader.credentials is not None
    assert leader.curator is not None
    host, port = str(leader.address), 7835
    owner = curators.owner
    assert owner is not None
    before = await presented_certificate(host, port, owner)
    assert before == leader.credentials.certificate

    renewed = await _renew(api, leader)
    certificate = certificate_from_pem(renewed.node_certificate)
    leader.credentials = NodeCredentials(
        leader.credentials.key, certificate, leader.credentials.ca_certificate
    )

    assert await presented_certificate(host, port, owner) == certificate
    assert leader.curator.role.get_nowait() == "leading"  # the same curator, still leading


@pytest.mark.parametrize("seconds", [60, 600, 30 * 24 * 3600])
def test_a_node_certificate_is_renewed_after_two_thirds_of_its_lifetime_from_now(
    seconds: int,
) -> None:
    """Even for a lifetime shorter than the clock skew its start allows (test clusters)."""
    authority = ClusterAuthority.create()
    credentials = ThrowawayCA().node()
    lifetime = datetime.timedelta(seconds=seconds)
    certificate = authority.node_certificate(credentials.key.public_key(), lifetime)
    renewed = NodeCredentials(credentials.key, certificate, authority.ca_certificate)
    due_in = renewal_due(renewed) - time.time()
    assert seconds * 0.6 <= due_in <= seconds * 2 / 3


async def test_fifty_concurrent_renewals_of_one_node_all_succeed(curators: CuratorCluster) -> None:
    """Each renewal rewrites the node's record. 50 at once used to race each other in the
    update's optimistic loop: 8 of them gave up after 20 lost races without a pause, and
    the client got UNKNOWN (the server logged nothing). The leader now queues its own
    updates of one record, so none loses."""
    node = await curators.enrol(1)
    assert node.credentials is not None
    failures: list[str] = []
    api = CuratorApi(curators)
    async with api.curator(node.credentials) as curator:

        async def renew() -> None:
            try:
                await curator.RenewCertificate(curator_pb2.RenewCertificateRequest(), timeout=60)
            except grpc.aio.AioRpcError as exc:
                failures.append(f"{exc.code().name}: {exc.details()}")

        async with anyio.create_task_group() as calls:
            for _ in range(50):
                calls.start_soon(renew)
    assert failures == []
