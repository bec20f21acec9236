"""The worker ``kubernetes_kubelet``: the kubelet on nodes with the ``kubernetes_worker``
role.

Reads ``node_id``, ``network``, ``pod_network``, ``kubernetes_status`` and
``cluster_nodes``; writes nothing but the kubelet's files and its cgroup root.

::

    node_id, network ──────┐
    pod_network ───────────┤
    kubernetes_status ─────┼─ fold ──▶ str: what it waits for (note; not healthy)
    cluster_nodes ─────────┘      └──▶ KubeletStartup(node, address, prefix, apiserver)
                                          │ apiserver: this node's own (kubernetes_status)
                                          │ on a controller, else the first controller's
                                          │ of the cluster (https://<its address>:6443)
        certificates(startup) ◀───────────┤ client + serving pair and the Kubernetes CA,
                                          │ issued by the leading curator
                                          │ (certificates.kubelet_credentials; tests
                                          │ inject their own)
                                          ▼
        cgroup root made (cgroups), its root directory mounted on a short path
        (kubeletroot); child kubelet (kubelet.kubelet_runnable), and on a
        loopback address child node_address (nodeaddress: the Node's InternalIP, which
        the kubelet refuses to set); HEALTHY; restart when the startup changes
    the role goes or the node stops: the kubelet stops, and once the pods' processes have
    left it (containerd's clean-up), the cgroup root is removed, and the mounts the
    kubelet made under its root directory undone, with the root's own

Without a kubelet binary it waits for nothing: its child says "kubelet not found:
container runtime only" at once, and the node's containerd and pod network run on.

Which apiserver: a worker-only node has none of its own, so it takes the cluster's
controllers from ``cluster_nodes`` (UP, holding ``kubernetes_controller``, with an
address), the first by node ID, and the CA from the curator with its certificates. A
kubelet names one server (its kubeconfig's); another controller is taken when that one
loses the role or leaves, not when its apiserver merely stops answering.

Interim: the worker role's own runnable (containerd, CRI, CNI) is another branch's; once
it is merged, the kubelet belongs next to containerd under it, and this worker's start-up
moves there (``kubelet_runnable`` is made for that).
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import anyio

from roleserve_core import (
    CLUSTER_NODES,
    CURATOR_CONNECTION,
    NETWORK,
    NODE_ID,
    ClusterNodes,
    Combined,
    NetworkStatus,
    NodeContext,
    RunContext,
    common_pb2,
    node_address,
    runtime_root,
)
from roleserve_kubernetes.binaries import KUBE_PROXY, KUBELET, KubeBinaries
from roleserve_kubernetes.certificates import KubeletCredentials, kubelet_credentials
from roleserve_kubernetes.cgroups import (
    cgroup_hierarchies,
    cgroup_root,
    create_cgroup_root,
    remove_cgroup_root,
)
from roleserve_kubernetes.kubelet import kubelet_runnable
from roleserve_kubernetes.kubeletroot import bind_root, root_mount_point
from roleserve_kubernetes.kubeproxy import kube_proxy_runnable
from roleserve_kubernetes.layout import WorkerLayout, check_kubelet_root
from roleserve_kubernetes.leftovers import mounts_under, unmount
from roleserve_kubernetes.nodeaddress import node_address_runnable
from roleserve_kubernetes.pki import KeyPair
from roleserve_kubernetes.plans import KubeletInputs, ProxyInputs, apiserver_url, kubelet_root
from roleserve_kubernetes.startup import start_when_ready
from roleserve_kubernetes.values import KUBERNETES_STATUS, POD_NETWORK, KubernetesStatus, PodNetwork

__all__ = [
    "KubeletCertificates",
    "KubeletStartup",
    "certificates_from_curator",
    "containerd_socket",
    "controller_addresses",
    "fold",
    "run",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
KUBELET_STOP_WAIT = 30.0
"""Seconds the clean-up waits for the kubelet to exit (its stop grace is 5 s)."""


@dataclass(frozen=True, slots=True)
class KubeletStartup:
    """What the kubelet starts from: it restarts when this changes."""

    node_id: str
    address: IPAddress
    pod_prefix: IPNetwork
    apiserver: str
    ca_pem: bytes | None = None
    """The Kubernetes CA as this node's controller has it; None for another node's
    apiserver (the CA then comes from the curator, with the certificates)."""


KubeletCertificates = Callable[
    [KubeletStartup], Awaitable[KubeletCredentials | tuple[KeyPair, KeyPair]]
]
"""The node's kubelet client and serving pairs, issued by the curator from the Kubernetes
CA, with that CA (``certificates.kubelet_credentials``); a bare pair of pairs (as before
the CA came with them) needs ``KubeletStartup.ca_pem``."""


def fold(
    node_id: str | None,
    network: NetworkStatus | None,
    pods: PodNetwork | None,
    status: KubernetesStatus | None,
    nodes: ClusterNodes | None = None,
) -> KubeletStartup | str:
    """The startup, or what the kubelet still waits for (its note)."""
    if node_id is None:
        return "waiting for the node's ID"
    if network is None or network.external_address is None:
        return "waiting for the node's address"
    if pods is None or not pods.prefixes:
        return "waiting for the node's pod prefix (pod_network)"
    address, prefix = network.external_address, pods.prefixes[0]
    if status is not None and status.apiserver is not None and status.ca_pem is not None:
        return KubeletStartup(node_id, address, prefix, status.apiserver, status.ca_pem)
    if nodes is None or not nodes.backlogged:
        return "waiting for a kube-apiserver: none on this node; the cluster's nodes unknown"
    own = nodes.get(node_id)
    if own is not None and own.roles.HasField("kubernetes_controller"):
        return "waiting for a kube-apiserver: this node's own (kubernetes_status)"
    controllers = controller_addresses(nodes)
    if not controllers:
        return "waiting for a kube-apiserver: no node of the cluster holds kubernetes_controller"
    return KubeletStartup(node_id, address, prefix, apiserver_url(controllers[0]))


def controller_addresses(nodes: ClusterNodes) -> list[IPAddress]:
    """The addresses of the cluster's controllers (UP, holding ``kubernetes_controller``,
    with an address), by node ID: where the kube-apiservers of the cluster are."""
    found = []
    for _, record in sorted(nodes.items()):
        address = node_address(record)
        controller = record.roles.HasField("kubernetes_controller")
        if controller and record.state == common_pb2.NODE_STATE_UP and address is not None:
            found.append(address)
    return found


def containerd_socket(node: NodeContext) -> Path:
    """containerd's CRI socket, in the plugin's runtime directory: where the worker
    ``kubernetes_worker``'s containerd listens (``layout.WorkerLayout.socket``)."""
    return WorkerLayout.of(node).socket


class KubeletWorker:
    """The worker's state across its restarts: what it was given."""

    def __init__(
        self,
        node: NodeContext,
        binaries: KubeBinaries,
        certificates: KubeletCertificates,
        hierarchies: Callable[[], list[Path]] = cgroup_hierarchies,
    ) -> None:
        self.node = node
        self.binaries = binaries
        self.certificates = certificates
        self.hierarchies = hierarchies
        self.restarting = False
        """Whether the worker restarts itself on new inputs (its pods and cgroups stay)."""

    async def run(self, ctx: RunContext) -> None:
        """Runs the kubelet on nodes with the kubernetes_worker role."""
        binary = self.binaries.find(KUBELET)
        if binary is None:
            ctx.run("kubelet", kubelet_runnable(_never, None, self.node.data_dir))
            ctx.signal_healthy()
            await anyio.sleep_forever()
        else:
            check_kubelet_root(self._root_name)
            self.restarting = False
            try:
                await self._run(ctx, binary)
            except anyio.get_cancelled_exc_class():
                # Stopped: the role went, the node stops, or new inputs (self.restarting).
                # A failure (the curator not answering) is no reason: the pods of the
                # kubelet before it run on until the next one takes them over.
                if not self.restarting:
                    with anyio.CancelScope(shield=True):
                        await self._clean_up(ctx)
                raise

    async def _clean_up(self, ctx: RunContext) -> None:
        """What the kubelet leaves, removed: the role has gone or the node stops, and
        containerd's clean-up stops the pods. Not when the worker restarts on new inputs
        or fails: the pods run on, and the next kubelet takes them over.

        Its cgroup root (``cgroups``), and the mounts under its root directory: the
        kubelet makes that directory a shared bind mount of itself, and mounts the pods'
        volumes (service account tokens on tmpfs) below it; none goes with the kubelet.
        """
        await self._wait_kubelet_stopped(ctx)
        ids = self.node.values.read(NODE_ID)
        if ids.statistics().is_set:
            root = cgroup_root(ids.get_nowait())
            await remove_cgroup_root(ctx.log, root, self.hierarchies())
        points = mounts_under([self._root_name, kubelet_root(self._directory)])
        for point in points:
            try:
                unmount(point)
            except OSError as exc:
                ctx.log.error("%s", exc)
        if points:
            ctx.log.info("unmounted the kubelet's %d mount(s)", len(points))

    async def _wait_kubelet_stopped(self, ctx: RunContext) -> None:
        """Until the kubelet has exited (the runner removes its record then): the child
        stops beside this worker's clean-up, and a kubelet still running would make its
        cgroups and mounts again. Gives up after ``KUBELET_STOP_WAIT``."""
        record = self.node.data_dir / "kubelet.process.json"
        with anyio.move_on_after(KUBELET_STOP_WAIT) as scope:
            while record.exists():  # noqa: ASYNC110 - the runner tells no one but the child
                await anyio.sleep(0.1)
        if scope.cancelled_caught:
            ctx.log.warning("the kubelet did not stop within %ss", KUBELET_STOP_WAIT)

    @property
    def _directory(self) -> Path:
        """The kubelet's files, in the plugin's data directory."""
        return self.node.data_dir / "kubelet"

    @property
    def _root_name(self) -> Path:
        """The kubelet's ``--root-dir``: its root directory on disk, mounted onto a short
        path in the runtime directory (``kubeletroot``), so its sockets fit."""
        return root_mount_point(self.node.runtime_dir)

    async def _run(self, ctx: RunContext, binary: Path) -> None:
        values = self.node.values
        async with Combined(
            values.read(NODE_ID),
            values.read(NETWORK),
            values.read(POD_NETWORK),
            values.read(KUBERNETES_STATUS),
            values.read(CLUSTER_NODES),
        ) as inputs:
            await start_when_ready(
                ctx, inputs, fold, lambda startup: self._start(ctx, startup, binary)
            )
            ctx.log.info("the kubelet's inputs changed: restarting")
            self.restarting = True
            ctx.restart()
            await anyio.sleep_forever()

    async def _start(self, ctx: RunContext, startup: KubeletStartup, binary: Path) -> None:
        ctx.set_note("asking the curator for the kubelet's certificates")
        issued = await self.certificates(startup)
        proxy = None
        if isinstance(issued, KubeletCredentials):
            client, serving, ca_pem = issued.client, issued.serving, issued.ca_certificate_pem
            proxy = issued.proxy
        else:
            (client, serving), ca_pem = issued, startup.ca_pem or b""
        root = cgroup_root(startup.node_id)
        await anyio.to_thread.run_sync(create_cgroup_root, root, self.hierarchies())
        on_disk = kubelet_root(self._directory)
        if await anyio.to_thread.run_sync(bind_root, on_disk, self._root_name):
            ctx.log.info(
                "the kubelet's root directory %s is mounted on %s", on_disk, self._root_name
            )
        inputs = KubeletInputs(
            directory=self._directory,
            node_id=startup.node_id,
            address=startup.address,
            apiserver=startup.apiserver,
            ca_pem=ca_pem,
            client=client,
            serving=serving,
            containerd_socket=containerd_socket(self.node),
            pod_prefix=startup.pod_prefix,
            root_dir=self._root_name,
        )
        ctx.run("kubelet", kubelet_runnable(lambda: inputs, binary, self.node.data_dir))
        if startup.address.is_loopback:  # the kubelet refuses it as its node IP
            ctx.run("node_address", node_address_runnable(inputs))
        if proxy is None:
            ctx.log.warning(
                "the curator issued no kube-proxy certificate (its kubernetes plugin is older"
                " than this node's): no Service is reachable from this node"
            )
        else:
            self._run_proxy(ctx, ProxyInputs(
                directory=self.node.data_dir / "kube-proxy",
                node_id=startup.node_id,
                address=startup.address,
                apiserver=startup.apiserver,
                ca_pem=ca_pem,
                client=proxy,
                search_path=os.environ.get("PATH", ""),
            ))  # fmt: skip
        ctx.set_note("")
        ctx.signal_healthy()

    def _run_proxy(self, ctx: RunContext, inputs: ProxyInputs) -> None:
        """The child ``kube_proxy`` (``kubeproxy``): Services, one proxy per network
        namespace."""
        binary = self.binaries.find(KUBE_PROXY)
        lock_dir = runtime_root()
        ctx.run(
            "kube_proxy",
            kube_proxy_runnable(lambda: inputs, binary, self.node.data_dir, lock_dir),
        )


def _never() -> KubeletInputs:
    raise AssertionError("no kubelet binary: its plan is never made")


def certificates_from_curator(node: NodeContext) -> KubeletCertificates:
    """The kubelet's pairs as the leading curator issues them (``IssueCertificate``), over
    the node's connection to it: its node certificate is the kubelet's proof of identity."""

    async def issue(startup: KubeletStartup) -> KubeletCredentials:
        with node.values.watch(CURATOR_CONNECTION) as connections:
            connection = await connections.get()
        return await kubelet_credentials(connection, [startup.address])

    return issue


async def run(
    ctx: RunContext,
    node: NodeContext,
    certificates: KubeletCertificates | None = None,
    hierarchies: Callable[[], list[Path]] = cgroup_hierarchies,
) -> None:
    """The worker ``kubernetes_kubelet`` (see the module docstring), gated on the
    ``kubernetes_worker`` role; the hooks name it with ``lazy_runnable``.

    :param certificates: where the kubelet's certificates come from (tests pass their own).
    :param hierarchies: the cgroup hierarchies its cgroup root is made in (tests of a
        stand-in kubelet pass directories of their own).
    """
    kubelet = KubeletWorker(
        node,
        KubeBinaries.of(node.config),
        certificates or certificates_from_curator(node),
        hierarchies,
    )
    await kubelet.run(ctx)
