"""The worker ``kubernetes_controller``: Kubernetes' control plane on a controller node.

Reads ``roles``, ``local_control_plane``, ``network`` and (for ``node_cleanup``)
``cluster_nodes``; writes ``kubernetes_status``.

::

    roles ───────────────┐
    local_control_plane ─┼─ fold ──▶ str: what it waits for (note; not healthy)
    network ─────────────┘      └──▶ ControllerStartup(address, etcd endpoint and
                                        │                 the member's client credentials)
        pki(startup) ◀──────────────────┤ the Kubernetes PKI, from the local etcd
                                        │ (pki.controller_pki; tests inject their own)
        etcd files ◀────────────────────┤ the member's credentials as the apiserver's files
        binaries.find ◀─────────────────┤ each component's binary, or None (absent)
        own_hostname ◀──────────────────┤ the apiserver's host name: the node ID, as
                                        │ root (its identity Lease is its own, ``uts``)
                                        ▼
        children: apiserver, controller_manager, scheduler, node_cleanup (each its own
                  group; all but the apiserver start once it answers /readyz)
        kubernetes_status = {apiserver URL, CA, ready (/readyz, asked again every
                             few seconds), running, absent}
        HEALTHY once the apiserver first answers /readyz (until then NEW, its note
        saying why: waiting for it, or kube-apiserver not found)
                                        │ the startup changes (the role goes or comes,
                                        ▼ the control plane stops or moves): restart
        finally: kubernetes_status = KubernetesStatus.NONE

As Monogon's controller, it starts nothing until the node has the ``kubernetes_controller``
role *and* runs etcd and the curator (the apiserver is a client of the local etcd member,
with that member's certificate). Unlike Monogon, it resets ``kubernetes_status`` whenever
it stops, so a node that lost the role does not go on claiming a control plane.

The worker runs always (``when=None``), so that ``roleserve ctl tree`` says what it waits
for on a node without the role. Each component is a child in a group of its own: a broken
scheduler restarts alone and never takes the apiserver down with it. The controller-manager
and the scheduler run with leader election, so the controllers together make one control
plane; ``node_cleanup`` (``nodecleanup``) deletes the Node objects of decommissioned nodes.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import anyio

from roleserve_core import (
    LOCAL_CONTROL_PLANE,
    NETWORK,
    NODE_ID,
    ROLES,
    Combined,
    FinalError,
    LocalControlPlane,
    NetworkStatus,
    NodeContext,
    NodeRoles,
    RunContext,
)
from roleserve_core.identity import Credentials
from roleserve_kubernetes.apiserver import WAITING_FOR_APISERVER, apiserver_runnable
from roleserve_kubernetes.binaries import (
    APISERVER,
    CONTROLLER_MANAGER,
    SCHEDULER,
    Component,
    KubeBinaries,
)
from roleserve_kubernetes.controllermanager import controller_manager_runnable
from roleserve_kubernetes.plans import ControllerInputs, EtcdClientFiles, apiserver_url
from roleserve_kubernetes.scheduler import scheduler_runnable
from roleserve_kubernetes.startup import start_when_ready
from roleserve_kubernetes.uts import own_hostname
from roleserve_kubernetes.values import KUBERNETES_STATUS, KubernetesStatus

if TYPE_CHECKING:
    from roleserve_kubernetes.pki import KeyPair

__all__ = [
    "CONTROLLER_COMPONENTS",
    "ControllerStartup",
    "ControllerWorker",
    "PKISource",
    "etcd_client_files",
    "fold",
    "pki_from_etcd",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

CONTROLLER_COMPONENTS: tuple[Component, ...] = (APISERVER, CONTROLLER_MANAGER, SCHEDULER)

WAITING_FOR_ROLES = "waiting for the node's roles"
WAITING_FOR_ROLE = "waiting for the kubernetes_controller role"
WAITING_FOR_CONTROL_PLANE = (
    "waiting for a local control plane (etcd and the curator; the consensus_member role)"
)
WAITING_FOR_ADDRESS = "waiting for the node's address"


@dataclass(frozen=True, slots=True)
class ControllerStartup:
    """What the controller starts from: it restarts when this changes."""

    address: IPAddress
    """The node's address: the apiserver serves here."""
    etcd_endpoint: str
    """``host:port`` of the local etcd member."""
    etcd_credentials: Credentials | None = field(default=None, compare=False, repr=False)
    """What a client of the local member connects with (``LocalControlPlane``); not
    compared: the endpoint says which member it is."""


PKISource = Callable[[ControllerStartup], Awaitable[Mapping[str, "KeyPair"]]]
"""Loads (or, on the first controller, creates) every ``pki.PKI_NAMES`` entry from the
local etcd; ``apiserver`` must be this controller's own serving pair."""


def fold(
    roles: NodeRoles | None, control_plane: LocalControlPlane | None, network: NetworkStatus | None
) -> ControllerStartup | str:
    """The startup, or what the controller still waits for (its note)."""
    if roles is None:
        return WAITING_FOR_ROLES
    if roles.kubernetes_controller is None:
        return WAITING_FOR_ROLE
    if control_plane is None or not control_plane.running:
        return WAITING_FOR_CONTROL_PLANE
    if network is None or network.external_address is None:
        return WAITING_FOR_ADDRESS
    assert control_plane.etcd_endpoint is not None  # running
    return ControllerStartup(
        network.external_address, control_plane.etcd_endpoint, control_plane.etcd_credentials
    )


def pki_from_etcd(node: NodeContext) -> PKISource:
    """The PKI as controllers keep it: ``pki.controller_pki`` over a client of the local
    etcd member, with this controller's own apiserver serving certificate."""

    async def load(startup: ControllerStartup) -> Mapping[str, KeyPair]:
        # Here: the PKI's module and etcd's client load on a controller that starts.
        from roleserve_controlplane import EtcdClient
        from roleserve_kubernetes.pki import controller_pki

        async with EtcdClient([startup.etcd_endpoint], _credentials(startup)) as etcd:
            return await controller_pki(etcd, node.values.get_nowait(NODE_ID), [startup.address])

    return load


def etcd_client_files(node: NodeContext) -> Callable[[ControllerStartup], EtcdClientFiles]:
    """The local member's client credentials, written as the apiserver's etcd files into
    the controller's directory (the apiserver is a client of the local member)."""

    def write(startup: ControllerStartup) -> EtcdClientFiles:
        from roleserve_controlplane import write_tls_files  # its package: etcd's client

        files = write_tls_files(node.data_dir / "controller" / "etcd", _credentials(startup))
        return EtcdClientFiles(files.ca, files.certificate, files.key)

    return write


def _credentials(startup: ControllerStartup) -> Credentials:
    if startup.etcd_credentials is None:  # a controlplane plugin before etcd_credentials
        raise FinalError(
            "local_control_plane carries no etcd client credentials; upgrade "
            "roleserve-controlplane to one that sets them"
        )
    return startup.etcd_credentials


class ControllerWorker:
    """The worker's state across its restarts: what it was given."""

    def __init__(
        self,
        node: NodeContext,
        binaries: KubeBinaries,
        pki: PKISource,
        etcd_files: Callable[[ControllerStartup], EtcdClientFiles],
    ) -> None:
        self.node = node
        self.binaries = binaries
        self.pki = pki
        self.etcd_files = etcd_files
        self._status: KubernetesStatus = KubernetesStatus.NONE
        self._unhealthy: RunContext | None = None
        """The run that started the components and waits for the apiserver to be ready
        before it says it is healthy."""

    async def run(self, ctx: RunContext) -> None:
        """Runs kube-apiserver, kube-controller-manager and kube-scheduler on controllers."""
        values = self.node.values
        self._publish(KubernetesStatus.NONE)
        sources = (values.read(ROLES), values.read(LOCAL_CONTROL_PLANE), values.read(NETWORK))
        try:
            async with Combined(*sources) as inputs:
                now = await start_when_ready(
                    ctx, inputs, fold, lambda startup: self._start(ctx, startup)
                )
                ctx.log.info("restarting: %s", now if isinstance(now, str) else "moved")
                ctx.restart()
                await anyio.sleep_forever()
        finally:
            self._unhealthy = None
            self._publish(KubernetesStatus.NONE)

    async def _start(self, ctx: RunContext, startup: ControllerStartup) -> None:
        # Here, not at the top: the worker runs on every node, and the Kubernetes API
        # client and etcd's load only on a controller that starts.
        from roleserve_kubernetes.nodecleanup import node_cleanup_runnable

        ctx.set_note("loading the Kubernetes PKI from etcd")
        pki = await self.pki(startup)
        inputs = ControllerInputs(
            directory=self.node.data_dir / "controller",
            address=startup.address,
            pki=pki,
            etcd_endpoint=startup.etcd_endpoint,
            etcd=self.etcd_files(startup),
            hostname=own_hostname(self.node.node_id),
        )
        found = {c.executable: self.binaries.find(c) for c in CONTROLLER_COMPONENTS}
        state_dir = self.node.data_dir
        apiserver = found[APISERVER.executable]
        ctx.run("apiserver", apiserver_runnable(inputs, apiserver, state_dir, self._ready))
        cm = found[CONTROLLER_MANAGER.executable]
        ctx.run("controller_manager", controller_manager_runnable(inputs, cm, state_dir))
        ctx.run("scheduler", scheduler_runnable(inputs, found[SCHEDULER.executable], state_dir))
        ctx.run("node_cleanup", node_cleanup_runnable(inputs, self.node.values))
        self._publish(
            KubernetesStatus(
                apiserver=apiserver_url(startup.address) if apiserver is not None else None,
                ca_pem=pki["ca"].certificate_pem,
                running=tuple(name for name, path in found.items() if path is not None),
                absent=tuple(name for name, path in found.items() if path is None),
            )
        )
        ctx.set_note(WAITING_FOR_APISERVER if apiserver is not None else APISERVER.absent_note)
        self._unhealthy = ctx

    def _ready(self, ready: bool) -> None:
        """The apiserver's readiness, into the status while it is this run's."""
        if self._status.controller_running:
            self._publish(dataclasses.replace(self._status, apiserver_ready=ready))
            if ready and self._unhealthy is not None:  # the control plane works: healthy
                ctx, self._unhealthy = self._unhealthy, None
                ctx.set_note("")
                ctx.signal_healthy()

    def _publish(self, status: KubernetesStatus) -> None:
        if status != self._status or status is KubernetesStatus.NONE:
            self.node.values.set(KUBERNETES_STATUS, status)
        self._status = status


async def run(
    ctx: RunContext,
    node: NodeContext,
    pki: PKISource | None = None,
    etcd_files: Callable[[ControllerStartup], EtcdClientFiles] | None = None,
) -> None:
    """The worker ``kubernetes_controller`` (see the module docstring), with the binaries
    of ``node``'s settings; the hooks name it with ``lazy_runnable``.

    :param pki: where the PKI comes from (tests pass one of their own).
    :param etcd_files: where the local etcd member's TLS files are.
    """
    controller = ControllerWorker(
        node,
        KubeBinaries.of(node.config),
        pki or pki_from_etcd(node),
        etcd_files or etcd_client_files(node),
    )
    await controller.run(ctx)
