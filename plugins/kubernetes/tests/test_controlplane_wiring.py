"""The kubernetes plugin beside the controlplane plugin on one real node: the curator the
controlplane worker starts serves ``KubernetesCertificates`` (through the hook
``roleserve_curator_services``), a plugin whose hook fails leaves the curator leading, and
``local_control_plane`` is all a controller needs to reach etcd for the PKI: the
controller worker loads the same PKI."""

from __future__ import annotations

import ipaddress
import random
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from roleserve_controlplane import hooks as controlplane_hooks
from roleserve_controlplane.consensus import EtcdBinary
from roleserve_controlplane.testing import ETCD_SOURCES, etcd_binary
from roleserve_core import (
    BOOTSTRAP,
    BOOTSTRAPPED,
    KUBERNETES_STATUS,
    LOCAL_CONTROL_PLANE,
    NETWORK,
    NODE_ID,
    ROLES,
    Bootstrapped,
    BootstrapRequest,
    CuratorConnection,
    KubernetesStatus,
    LocalControlPlane,
    NetworkStatus,
    State,
    hookimpl,
)
from roleserve_core.identity import generate_key
from roleserve_core.rpc import secure_channel
from roleserve_core.testing import NodeHarness, PluginHarness, poll_until, wait_for_value
from roleserve_kubernetes import hooks as kubernetes_hooks
from roleserve_kubernetes.certificates import kubelet_certificates
from roleserve_kubernetes.pki import controller_pki, etcd_client

pytestmark = pytest.mark.anyio


class BrokenPlugin:
    """Returns something that is no extension: left out, the curator leads without it."""

    @hookimpl(optionalhook=True)
    def roleserve_curator_services(self, node: Any) -> list[Any]:
        return ["not an extension"]


@pytest.fixture(params=ETCD_SOURCES)
def binary(request: pytest.FixtureRequest) -> EtcdBinary:
    return etcd_binary(request.param)


async def test_the_curator_serves_kubelet_certificates_and_the_controller_reaches_etcd(
    node: Callable[..., Awaitable[NodeHarness]], binary: EtcdBinary, tmp_path: Path
) -> None:
    plugins = PluginHarness()
    plugins.register(controlplane_hooks, "controlplane")
    plugins.register(kubernetes_hooks, "kubernetes")
    plugins.register(BrokenPlugin(), "broken")
    settings = {"etcd": str(binary.path), "heartbeat_ms": 25, "election_ms": 250, "lease_ttl": 2}
    harness = await node(plugins.runtime(tmp_path, config={"controlplane": settings}))
    address = ipaddress.IPv4Address(f"127.{random.randint(1, 254)}.{random.randint(0, 254)}.1")
    harness.set(NETWORK, NetworkStatus(address))
    harness.set(BOOTSTRAP, BootstrapRequest(generate_key()))
    lcp: LocalControlPlane = await wait_for_value(
        harness.runtime.registry.read(LOCAL_CONTROL_PLANE, "test"),
        lambda value: value.running,
        timeout=60,
    )
    boot: Bootstrapped = harness.runtime.registry.read(BOOTSTRAPPED, "test").get_nowait()
    assert lcp.curator_endpoint is not None
    async with etcd_client(lcp) as etcd:
        pki = await controller_pki(etcd, boot.node.node_id, [address])
    channel = secure_channel(lcp.curator_endpoint, boot.node, node_id=boot.node.node_id)
    async with channel:
        connection = CuratorConnection(
            boot.node.node_id, boot.node.node_id, lcp.curator_endpoint, channel
        )
        client, serving = await _when_leading(lambda: kubelet_certificates(connection))
    for pair in (client, serving):
        pair.certificate.verify_directly_issued_by(pki["ca"].certificate)
    failures = harness.runtime.plugins.info("broken").hook_failures
    assert failures == {"roleserve_curator_services": 1}
    # Given the roles the bootstrap gave (rolefetch's part in a node), the controller worker
    # loads the same PKI from etcd (no kube binaries here: each component absent).
    harness.set(NODE_ID, boot.node.node_id)
    harness.set(ROLES, boot.roles)
    status: KubernetesStatus = await wait_for_value(
        harness.runtime.registry.read(KUBERNETES_STATUS, "test"),
        lambda value: value.ca_pem is not None,
        timeout=30,
    )
    assert status.ca_pem == pki["ca"].certificate_pem
    assert set(status.absent) == {"kube-apiserver", "kube-controller-manager", "kube-scheduler"}
    assert (status.apiserver, status.apiserver_ready) == (None, False)
    # What does not run is not HEALTHY: the apiserver's runnable says why it does not.
    apiserver = await harness.wait_status(
        "root.role.kubernetes_controller.apiserver", lambda s: s.note != ""
    )
    assert (apiserver.state, apiserver.failures) == (State.NEW, 0)
    assert apiserver.note == (
        "kube-apiserver not found: set [plugins.kubernetes] kube_apiserver or install it"
    )


async def _when_leading(call: Callable[[], Awaitable[Any]]) -> Any:
    """``call()`` once the curator leads: it follows first, answering UNAVAILABLE."""
    return await poll_until("the leader's KubernetesCertificates", call, lambda _: True)
