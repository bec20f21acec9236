"""The worker ``kubernetes_kubelet``: the kubelet on nodes with the ``kubernetes_worker``
role.

Reads ``node_id``, ``network``, ``pod_network`` and ``kubernetes_status``; writes nothing.

::

    node_id, network ──────┐
    pod_network ───────────┼─ fold ──▶ str: what it waits for (note; not healthy)
    kubernetes_status ─────┘      └──▶ KubeletStartup(node, address, prefix, apiserver, CA)
                                          │
        certificates(startup) ◀───────────┤ client + serving pair, issued by the leading
                                          │ curator (certificates.kubelet_certificates;
                                          │ tests inject their own)
                                          ▼
        child kubelet (kubelet.kubelet_runnable); HEALTHY; restart when the startup changes

Without a kubelet binary it waits for nothing: its child says "kubelet not found:
container runtime only" at once, and the node's containerd and pod network run on.

Interim: the worker role's own runnable (containerd, CRI, CNI) is another branch's; once
it is merged, the kubelet belongs next to containerd under it, and this worker's start-up
moves there (``kubelet_runnable`` is made for that). Finding an apiserver on another node
is not built yet: a worker node uses its own controller's (``kubernetes_status``).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import anyio

from roleserve_core import (
    CURATOR_CONNECTION,
    KUBERNETES_STATUS,
    NETWORK,
    NODE_ID,
    POD_NETWORK,
    Combined,
    KubernetesStatus,
    NetworkStatus,
    NodeContext,
    NodeRoles,
    PodNetwork,
    RunContext,
    Worker,
)
from roleserve_kubernetes.binaries import KUBELET, KubeBinaries
from roleserve_kubernetes.certificates import kubelet_certificates
from roleserve_kubernetes.kubelet import kubelet_runnable
from roleserve_kubernetes.layout import WorkerLayout, check_kubelet_root
from roleserve_kubernetes.pki import KeyPair
from roleserve_kubernetes.plans import KubeletInputs, kubelet_root
from roleserve_kubernetes.startup import start_when_ready

__all__ = [
    "KubeletCertificates",
    "KubeletStartup",
    "certificates_from_curator",
    "containerd_socket",
    "fold",
    "kubelet_worker",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True, slots=True)
class KubeletStartup:
    """What the kubelet starts from: it restarts when this changes."""

    node_id: str
    address: IPAddress
    pod_prefix: IPNetwork
    apiserver: str
    ca_pem: bytes


KubeletCertificates = Callable[[KubeletStartup], Awaitable[tuple[KeyPair, KeyPair]]]
"""The node's kubelet client and serving pairs, issued by the curator from the Kubernetes
CA (``certificates.kubelet_certificates``)."""


def fold(
    node_id: str | None,
    network: NetworkStatus | None,
    pods: PodNetwork | None,
    status: KubernetesStatus | None,
) -> KubeletStartup | str:
    """The startup, or what the kubelet still waits for (its note)."""
    if node_id is None:
        return "waiting for the node's ID"
    if network is None or network.external_address is None:
        return "waiting for the node's address"
    if pods is None or not pods.prefixes:
        return "waiting for the node's pod prefix (pod_network)"
    if status is None or status.apiserver is None or status.ca_pem is None:
        return "waiting for a kube-apiserver on this node (a remote one is not looked for yet)"
    return KubeletStartup(
        node_id, network.external_address, pods.prefixes[0], status.apiserver, status.ca_pem
    )


def containerd_socket(node: NodeContext) -> Path:
    """containerd's CRI socket, in the plugin's runtime directory: where the worker
    ``kubernetes_worker``'s containerd listens (``layout.WorkerLayout.socket``)."""
    return WorkerLayout.of(node).socket


class KubeletWorker:
    """The worker's state across its restarts: what it was given."""

    def __init__(
        self, node: NodeContext, binaries: KubeBinaries, certificates: KubeletCertificates
    ) -> None:
        self.node = node
        self.binaries = binaries
        self.certificates = certificates

    async def run(self, ctx: RunContext) -> None:
        """Runs the kubelet on nodes with the kubernetes_worker role."""
        binary = self.binaries.find(KUBELET)
        if binary is None:
            ctx.run("kubelet", kubelet_runnable(_never, None, self.node.data_dir))
            ctx.signal_healthy()
            await anyio.sleep_forever()
        else:
            check_kubelet_root(kubelet_root(self._directory))
            await self._run(ctx, binary)

    @property
    def _directory(self) -> Path:
        """The kubelet's files, in the plugin's data directory."""
        return self.node.data_dir / "kubelet"

    async def _run(self, ctx: RunContext, binary: Path) -> None:
        values = self.node.values
        async with Combined(
            values.read(NODE_ID),
            values.read(NETWORK),
            values.read(POD_NETWORK),
            values.read(KUBERNETES_STATUS),
        ) as inputs:
            await start_when_ready(
                ctx, inputs, fold, lambda startup: self._start(ctx, startup, binary)
            )
            ctx.log.info("the kubelet's inputs changed: restarting")
            ctx.restart()
            await anyio.sleep_forever()

    async def _start(self, ctx: RunContext, startup: KubeletStartup, binary: Path) -> None:
        ctx.set_note("asking the curator for the kubelet's certificates")
        client, serving = await self.certificates(startup)
        inputs = KubeletInputs(
            directory=self._directory,
            node_id=startup.node_id,
            address=startup.address,
            apiserver=startup.apiserver,
            ca_pem=startup.ca_pem,
            client=client,
            serving=serving,
            containerd_socket=containerd_socket(self.node),
            pod_prefix=startup.pod_prefix,
        )
        ctx.run("kubelet", kubelet_runnable(lambda: inputs, binary, self.node.data_dir))
        ctx.set_note("")
        ctx.signal_healthy()


def _never() -> KubeletInputs:
    raise AssertionError("no kubelet binary: its plan is never made")


def _is_worker(roles: NodeRoles) -> bool:
    return roles.kubernetes_worker is not None


def certificates_from_curator(node: NodeContext) -> KubeletCertificates:
    """The kubelet's pairs as the leading curator issues them (``IssueCertificate``), over
    the node's connection to it: its node certificate is the kubelet's proof of identity."""

    async def issue(startup: KubeletStartup) -> tuple[KeyPair, KeyPair]:
        with node.values.watch(CURATOR_CONNECTION) as connections:
            connection = await connections.get()
        return await kubelet_certificates(connection, [startup.address])

    return issue


def kubelet_worker(node: NodeContext, certificates: KubeletCertificates | None = None) -> Worker:
    """The worker ``kubernetes_kubelet``, gated on the ``kubernetes_worker`` role.

    :param certificates: where the kubelet's certificates come from (tests pass their own).
    """
    kubelet = KubeletWorker(
        node, KubeBinaries.of(node.config), certificates or certificates_from_curator(node)
    )
    return Worker(
        "kubernetes_kubelet",
        kubelet.run,
        when=_is_worker,
        reads=(NODE_ID, NETWORK, POD_NETWORK, KUBERNETES_STATUS, CURATOR_CONNECTION),
    )
