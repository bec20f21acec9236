"""The kubernetes plugin beside the controlplane plugin on one real node: the curator the
controlplane worker starts serves ``KubernetesCertificates`` (through the hook
``roleserve_curator_services``), a plugin whose hook fails leaves the curator leading, and
``local_control_plane`` is all a controller needs to reach etcd for the PKI: the
controller worker loads the same PKI. With the pinned build's kube binaries, the real
control plane runs from the plugin on two controllers, and outlives one of them."""

from __future__ import annotations

import argparse
import functools
import ipaddress
import json
import os
import random
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import kubernetes.client
import kubernetes.config
import pytest

from roleserve_controlplane import EtcdBinary
from roleserve_controlplane import hooks as controlplane_hooks
from roleserve_controlplane.testing import ETCD_SOURCES, enrol_node, etcd_binary, update_roles
from roleserve_core import (
    BOOTSTRAP,
    BOOTSTRAPPED,
    CLUSTER_NODES,
    LOCAL_CONTROL_PLANE,
    NETWORK,
    NODE_CREDENTIALS,
    NODE_ID,
    ROLES,
    Bootstrapped,
    BootstrapRequest,
    ClusterAccess,
    ClusterNodes,
    CuratorConnection,
    LocalControlPlane,
    NetworkStatus,
    State,
    common_pb2,
    hookimpl,
    open_ctl_session,
)
from roleserve_core.identity import generate_key
from roleserve_core.rpc import secure_channel
from roleserve_core.testing import (
    NodeHarness,
    node_record,
    poll_until,
    require_real,
    start_plugin_node,
    wait_for_value,
)
from roleserve_kubernetes import KUBERNETES_STATUS, KubernetesStatus, kubebuild
from roleserve_kubernetes import hooks as kubernetes_hooks
from roleserve_kubernetes.certificates import kubelet_certificates
from roleserve_kubernetes.ctl import kubeconfig
from roleserve_kubernetes.pki import controller_pki, etcd_client
from roleserve_kubernetes.plans import Health
from roleserve_kubernetes.probe import probe_failure
from roleserve_kubernetes.worker_controller import WAITING_FOR_ROLE

pytestmark = pytest.mark.anyio

DN = "root.role.kubernetes_controller"


class BrokenPlugin:
    """Returns something that is no extension: left out, the curator leads without it."""

    @hookimpl(optionalhook=True)
    def roleserve_curator_services(self, node: Any) -> list[Any]:
        return ["not an extension"]


@pytest.fixture(params=ETCD_SOURCES)
def binary(request: pytest.FixtureRequest) -> EtcdBinary:
    return etcd_binary(request.param)


@dataclass
class Controller:
    """A node that bootstrapped a cluster: the controlplane plugin runs etcd and the
    curator, and the kubernetes plugin its controller worker (given the roles below)."""

    harness: NodeHarness
    boot: Bootstrapped
    control_plane: LocalControlPlane
    address: ipaddress.IPv4Address


async def node_with_plugins(
    node: Callable[..., Awaitable[NodeHarness]],
    binary: EtcdBinary,
    directory: Path,
    kubernetes: dict[str, Any],
    address: ipaddress.IPv4Address,
    *more: tuple[Any, str],
) -> NodeHarness:
    """A node with both plugins (and ``more`` ones, as ``(plugin, name)``) at ``address``."""
    plugins = {
        "controlplane": controlplane_hooks,
        "kubernetes": kubernetes_hooks,
        **{name: plugin for plugin, name in more},
    }
    settings = {"etcd": str(binary.path), "heartbeat_ms": 25, "election_ms": 250, "lease_ttl": 2}
    config = {"controlplane": settings, "kubernetes": kubernetes}
    harness = await start_plugin_node(node, directory, plugins, config=config)
    harness.set(NETWORK, NetworkStatus(address))
    return harness


async def bootstrapped_controller(
    node: Callable[..., Awaitable[NodeHarness]],
    binary: EtcdBinary,
    directory: Path,
    kubernetes: dict[str, Any],
    *more: tuple[Any, str],
) -> Controller:
    """A node with both plugins that bootstrapped a cluster, at ``<random /24>.1``; its
    roles and node ID are not set yet (rolefetch's part, the test's)."""
    address = ipaddress.IPv4Address(f"127.{random.randint(1, 254)}.{random.randint(0, 254)}.1")
    harness = await node_with_plugins(node, binary, directory, kubernetes, address, *more)
    harness.set(BOOTSTRAP, BootstrapRequest(generate_key()))
    lcp = await running_control_plane(harness)
    boot: Bootstrapped = harness.runtime.registry.read(BOOTSTRAPPED, "test").get_nowait()
    return Controller(harness, boot, lcp, address)


async def running_control_plane(harness: NodeHarness) -> LocalControlPlane:
    """The node's ``local_control_plane`` once etcd and the curator run."""
    values = harness.runtime.registry.read(LOCAL_CONTROL_PLANE, "test")
    running: LocalControlPlane = await wait_for_value(values, lambda lcp: lcp.running, timeout=60)
    return running


async def test_the_curator_serves_kubelet_certificates_and_the_controller_reaches_etcd(
    node: Callable[..., Awaitable[NodeHarness]], binary: EtcdBinary, tmp_path: Path
) -> None:
    # No kube binaries: neither the pinned build's (a directory that does not exist) nor
    # any on this machine's PATH.
    absent = {"kube_binaries_dir": str(tmp_path / "no-built-binaries")}
    controller = await bootstrapped_controller(
        node, binary, tmp_path, absent, (BrokenPlugin(), "broken")
    )
    harness, boot, lcp = controller.harness, controller.boot, controller.control_plane
    assert lcp.curator_endpoint is not None
    async with etcd_client(lcp) as etcd:
        pki = await controller_pki(etcd, boot.node.node_id, [controller.address])
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
    apiserver = await harness.wait_status(f"{DN}.apiserver", lambda s: s.note != "")
    assert (apiserver.state, apiserver.failures) == (State.NEW, 0)
    assert apiserver.note == (
        "kube-apiserver not found: set [plugins.kubernetes] kube_apiserver or install it"
    )
    # Nor is the worker: without an apiserver, it runs no control plane.
    assert (harness.status(DN).state, harness.status(DN).note) == (State.NEW, apiserver.note)


# -- the real control plane ---------------------------------------------------------

KUBE_TOOLS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")


def kube_binaries() -> Path:
    """The pinned build's directory, with every controller binary and kubectl in it."""
    built = kubebuild.pinned_bin_dir()
    missing = [name for name in KUBE_TOOLS if not (built / name).is_file()]
    require_real(
        "the pinned kube binaries",
        not missing,
        f"missing {missing} in {built}: ./dev kube-binaries",
    )
    return built


@pytest.mark.timeout(600)
async def test_two_real_controllers_make_one_control_plane_that_outlives_one_of_them(
    node: Callable[..., Awaitable[NodeHarness]], tmp_path: Path
) -> None:
    """The built kube-apiserver, controller-manager and scheduler on real etcd, from the
    plugin, on two controllers: each component HEALTHY, the controller-manager and the
    scheduler started once their apiserver was ready (never failed: no crash loop), each
    status ready by /readyz; ``ctl kubeconfig`` names both, for kubectl and the official
    Python client; a decommissioned node's Node goes; the role taken from one controller
    stops its components and resets its status, and the other one serves on."""
    built = kube_binaries()
    binary = etcd_binary(ETCD_SOURCES[0])
    first = await bootstrapped_controller(node, binary, tmp_path / "first", {})
    boot, endpoint = first.boot, first.control_plane.curator_endpoint or ""
    leader = boot.node.node_id
    address = first.address + 1
    second = await node_with_plugins(node, binary, tmp_path / "second", {}, address)
    # Once it leads (a role the bootstrap gave it: nothing changes), it enrols a second.
    await _when_leading(lambda: update_roles(boot, endpoint, leader, "kubernetes_controller", True))
    credentials = await enrol_node(endpoint, leader, boot.owner, generate_key(), address)
    second.set(NODE_CREDENTIALS, credentials)
    await update_roles(boot, endpoint, credentials.node_id, "consensus_member", True)
    roles = await update_roles(boot, endpoint, credentials.node_id, "kubernetes_controller", True)
    nodes = {first.harness: (leader, boot.roles), second: (credentials.node_id, roles)}
    records = {node_id: node_record(node_id) for node_id, _ in nodes.values()}
    for harness, (node_id, node_roles) in nodes.items():
        harness.set(CLUSTER_NODES, ClusterNodes(records, backlogged=True))
        harness.set(NODE_ID, node_id)
        harness.set(ROLES, node_roles)
    statuses = [harness.runtime.registry.read(KUBERNETES_STATUS, "test") for harness in nodes]
    for status, host in zip(statuses, (first.address, address), strict=True):
        ready = await wait_for_value(status, lambda value: value.apiserver_ready, timeout=240)
        assert ready.apiserver == f"https://{host}:6443"
        assert ready.running == ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
    for harness in nodes:
        for name in ("apiserver", "controller_manager", "scheduler", "node_cleanup"):
            healthy = await harness.wait_state(f"{DN}.{name}", State.HEALTHY, timeout=180)
            assert healthy.failures == 0, (name, healthy)  # started when it could work

    # ctl kubeconfig: a context per ready apiserver, for kubectl and the Python client.
    out = tmp_path / "admin.kubeconfig"
    access = ClusterAccess.of(boot.owner, [endpoint])
    async with open_ctl_session(access, 10.0) as session:
        await kubeconfig(session, argparse.Namespace(out=out, force=False, server=None))
    written = json.loads(out.read_text())
    by_id = sorted([(leader, first.address), (credentials.node_id, address)])
    contexts = [f"roleserve-{host}" for _, host in by_id]
    assert [entry["name"] for entry in written["contexts"]] == contexts
    assert written["current-context"] == contexts[0]
    for context in contexts:
        kubectl = [str(built / "kubectl"), "--kubeconfig", str(out), "--context", context]
        ready_answer = await anyio.run_process([*kubectl, "get", "--raw", "/readyz"])
        assert ready_answer.stdout == b"ok"
        api = await anyio.to_thread.run_sync(python_client, out, context)
        namespace = await anyio.to_thread.run_sync(api.read_namespace, "kube-system")
        assert namespace.metadata.name == "kube-system"
    api = await anyio.to_thread.run_sync(python_client, out, f"roleserve-{first.address}")

    # Each apiserver under its node's ID as its host name (root: ``uts``), so each renews
    # an identity Lease of its own; one shared Lease failed every other renewal.
    hosts = {leader, credentials.node_id} if os.geteuid() == 0 else {socket.gethostname()}
    held = await poll_until(
        "an identity Lease per apiserver host name",
        functools.partial(identity_leases, api),
        lambda leases: set(leases.values()) == hosts,
        timeout=60,
    )
    assert len(held) == len(hosts), held

    # A decommissioned node's Node goes; a live node's and one made by hand stay.
    gone, live = "node-" + "cd" * 16, "node-" + "ef" * 16
    for name in (gone, live, "by-hand"):
        body = kubernetes.client.V1Node(metadata=kubernetes.client.V1ObjectMeta(name=name))
        await anyio.to_thread.run_sync(api.create_node, body)
    records[live] = node_record(live)
    records[gone] = node_record(gone, state=common_pb2.NODE_STATE_DECOMMISSIONED)
    for harness in nodes:  # both controllers delete it: one of them meets 404
        harness.set(CLUSTER_NODES, ClusterNodes(records, backlogged=True))

    async def node_names() -> set[str]:
        listed = await anyio.to_thread.run_sync(api.list_node)
        return {item.metadata.name for item in listed.items}

    left = await poll_until(
        "the Node of the decommissioned node gone",
        node_names,
        lambda names: gone not in names,
        timeout=60,
    )
    assert left == {live, "by-hand"}

    # The role taken from the second controller: its components stop, its status says
    # nothing runs there, and the first one's control plane serves on.
    roles = await update_roles(boot, endpoint, credentials.node_id, "kubernetes_controller", False)
    second.set(ROLES, roles)
    assert await wait_for_value(statuses[1], lambda value: not value.controller_running) == (
        KubernetesStatus.NONE
    )
    await second.wait_status(DN, lambda s: s.note == WAITING_FOR_ROLE)
    for name in ("apiserver", "controller_manager", "scheduler", "node_cleanup"):
        with pytest.raises(LookupError):
            second.status(f"{DN}.{name}")
    for port, path in ((6443, "/readyz"), (10257, "/healthz"), (10259, "/healthz")):
        failure = await poll_until(
            f"nothing on {address}:{port}",
            functools.partial(probe_failure, Health(str(address), port, path)),
            lambda failure: failure == "connection refused",
        )
        assert failure == "connection refused"
    assert statuses[0].get_nowait().apiserver_ready
    body = kubernetes.client.V1Node(metadata=kubernetes.client.V1ObjectMeta(name="after"))
    await anyio.to_thread.run_sync(api.create_node, body)
    assert "after" in await node_names()


def python_client(kubeconfig_file: Path, context: str) -> Any:
    """The official client's CoreV1Api, configured by ``kubeconfig_file`` alone."""
    load = kubernetes.config.new_client_from_config  # untyped: the package has no hints
    client = load(config_file=str(kubeconfig_file), context=context)  # type: ignore[no-untyped-call]
    return kubernetes.client.CoreV1Api(client)


async def identity_leases(api: Any) -> dict[str, str]:
    """The apiservers' identity Leases in ``kube-system``: name → host name."""
    leases = kubernetes.client.CoordinationV1Api(api.api_client)
    listed: Any = await anyio.to_thread.run_sync(
        functools.partial(
            leases.list_namespaced_lease,
            "kube-system",
            label_selector="apiserver.kubernetes.io/identity=kube-apiserver",
        )
    )
    return {
        item.metadata.name: item.metadata.labels["kubernetes.io/hostname"] for item in listed.items
    }


async def _when_leading(call: Callable[[], Awaitable[Any]]) -> Any:
    """``call()`` once the curator leads: it follows first, answering UNAVAILABLE."""
    return await poll_until("the leader's KubernetesCertificates", call, lambda _: True)
