"""Worker ``controlplane``: etcd and the curator on this node, while it bootstraps a
cluster or holds the ``consensus_member`` role.

Values: reads ``roles``, ``bootstrap``, ``node_credentials`` and ``network``; writes
``local_control_plane`` and ``bootstrapped``.

::

    roles, bootstrap, node_credentials, network ──fold──▶ Startup (or none)
        (+ the member's own records)
        none:   local_control_plane = NONE; nothing on disk changes (a former member's
                data stays: only the cluster can say the member was removed, see
                ``_without_control_plane``); wait until a control plane is wanted, then
                restart
        roles unknown, but the member's own records on disk (``consensus.saved``:
                membership record, TLS files, peers): the member they describe, as the
                role would start it (a restart on its data), and its curator; the roles,
                once known, confirm it (no restart) or take it away (restart: none)
        some:   too little disk space for etcd: DiskSpaceError (retried), nothing written
                child group:  etcd      EtcdMember: bootstrap / join / restart, as its
                                        membership record says
                              curator   Curator, once etcd serves (and, when bootstrapping,
                                        the cluster's records are written, which waits
                                        until the member has recorded its bootstrap)
                once the curator follows or leads: local_control_plane set, healthy
                restart only when *whether* a control plane is wanted flips, followed
                from the start on (a start may never end: a member its cluster refuses
                leaves the curator waiting for etcd); not when peers or certificates in
                the role change (etcd keeps its own membership), nor when the node
                certificate is renewed (by the core's worker ``renewal``: the curator's
                server reads the latest node_credentials at each TLS handshake and
                presents the renewed certificate)
        bootstrap.pb: the CA keys dropped from it once the bootstrap committed; the file
                deleted once node_credentials is set (the node is enrolled)

As in Monogon, bootstrap data wins over roles: a node that bootstraps runs a control plane
whatever its roles say; once it is enrolled and knows its member role, a restart in the same
process runs that member (the bootstrap material is gone by then).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from roleserve_controlplane.consensus import (
    SavedMember,
    load_saved_member,
)
from roleserve_controlplane.settings import ControlPlaneSettings
from roleserve_core import (
    BOOTSTRAP,
    LOCAL_CONTROL_PLANE,
    NETWORK,
    NODE_CREDENTIALS,
    ROLES,
    BootstrapRequest,
    Combined,
    LocalControlPlane,
    NetworkStatus,
    NodeContext,
    NodeRoles,
    RunContext,
)
from roleserve_core.identity import Credentials, NodeCredentials, certificate_from_pem

__all__ = [
    "ControlPlaneSettings",
    "Startup",
    "run",
    "wants_control_plane",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

BOOTSTRAP_FILE = "bootstrap.pb"
"""The bootstrap material in the plugin's directory: with the CA keys until the bootstrap
transaction committed, without them until the node is enrolled, then deleted."""


def wants_control_plane(roles: NodeRoles | None, bootstrap: BootstrapRequest | None) -> bool:
    """Whether this node should run etcd and a curator."""
    return bootstrap is not None or (roles is not None and roles.consensus_member is not None)


def _wanted(current: tuple[Any, ...], saved: SavedMember | None) -> bool:
    """Whether a control plane is wanted: by the roles or a bootstrap, or, while the roles
    are unknown, by the member's own records (``saved``, read when the worker started)."""
    roles, bootstrap, *_ = current
    return wants_control_plane(roles, bootstrap) or (roles is None and saved is not None)


@dataclass(frozen=True)
class Startup:
    """Everything needed to start the control plane, folded from the values."""

    address: IPAddress
    bootstrap: BootstrapRequest | None = None
    credentials: NodeCredentials | None = None
    """The node's credentials (None while bootstrapping: the bootstrap makes them)."""
    member: Credentials | None = None
    """Member certificate and consensus CA from the role, or from the member's own records
    (``saved``); None while bootstrapping."""
    peers: Mapping[str, str] = field(default_factory=dict)
    saved: bool = False
    """Whether ``member`` and ``peers`` come from the member's own records, the roles being
    unknown (``consensus.saved``), rather than from the role."""


FROM_RECORDS_NOTE = "the node's roles unknown: its member runs from its own records"
"""The note while the member started from its own records and the roles are still unknown."""


def fold(
    roles: NodeRoles | None,
    bootstrap: BootstrapRequest | None,
    credentials: NodeCredentials | None,
    network: NetworkStatus | None,
    saved: SavedMember | None = None,
) -> Startup | str:
    """The startup, or what is still missing (a note for the status).

    While the roles are unknown (None: not saved, corrupt, no curator answering yet), the
    member of ``saved`` (this node's own, by its name) starts as the role started it last:
    on a node that is its cluster's only consensus member, the roles would otherwise never
    come, the curator that sends them running on etcd. Known roles always decide.
    """
    if network is None or network.external_address is None:
        return "waiting for the node's address"
    address = network.external_address
    if bootstrap is not None and not _bootstrapped_member(roles, credentials):
        return Startup(address, bootstrap=bootstrap)
    if credentials is None:
        return "waiting for the node's credentials"
    if roles is None and saved is not None and saved.name == credentials.node_id:
        return Startup(
            address,
            credentials=credentials,
            member=saved.credentials,
            peers=saved.peers,
            saved=True,
        )
    if roles is None:
        return "waiting for the node's roles"
    if roles.consensus_member is None:
        return "no consensus_member role"
    role = roles.consensus_member
    member = Credentials(
        credentials.key,
        certificate_from_pem(role.peer_certificate, "the role's peer certificate"),
        certificate_from_pem(role.ca_certificate, "the role's consensus CA"),
    )
    peers = {peer.name: peer.url for peer in role.peers}
    return Startup(address, credentials=credentials, member=member, peers=peers)


def _fold(current: tuple[Any, ...], saved: SavedMember | None) -> Startup | str:
    """``fold`` of the worker's combined values."""
    roles, bootstrap, credentials, network = current
    return fold(roles, bootstrap, credentials, network, saved)


def _bootstrapped_member(roles: NodeRoles | None, credentials: NodeCredentials | None) -> bool:
    """Whether a bootstrapping node is done and knows its member role: a restart of the
    worker in the same process (for a renewed certificate) then runs the member its role
    describes. Bootstrapping again would make new material, the file being gone."""
    return credentials is not None and roles is not None and roles.consensus_member is not None


async def run(ctx: RunContext, node: NodeContext) -> None:
    """The worker (see the module docstring), which the hooks name with ``lazy_runnable``:
    this module loads when the worker starts, and etcd's and the curator's code only when
    this node wants a control plane (``controlplane_start``)."""
    await ControlPlane(node, ControlPlaneSettings.of(node.config)).run(ctx)


_TOLD_DATA_KEPT: set[Path] = set()
"""The member directories whose former member's data the log named, in this process: once
a process, not once a start of the worker (a role taken away restarts it)."""


class ControlPlane:
    """One start of the worker."""

    def __init__(self, node: NodeContext, settings: ControlPlaneSettings) -> None:
        self.node = node
        self.settings = settings

    @property
    def member_directory(self) -> Path:
        """Where the etcd member keeps its data and TLS files."""
        return self.node.data_dir / "etcd"

    @property
    def bootstrap_file(self) -> Path:
        """The bootstrap material, while a bootstrap is unfinished (see ``curator.bootstrap``)."""
        return self.node.data_dir / BOOTSTRAP_FILE

    def _forget_bootstrap_once_enrolled(self, ctx: RunContext, credentials: object) -> None:
        """Delete the bootstrap material once the node's credentials are set: the core sets
        them after saving them, so the node is enrolled and no bootstrap will resume."""
        if credentials is not None and self.bootstrap_file.exists():
            self.bootstrap_file.unlink()
            ctx.log.info("the bootstrap is complete; removed %s", self.bootstrap_file)

    async def run(self, ctx: RunContext) -> None:
        """Runs etcd and the curator while this node bootstraps or is a consensus member."""
        values = self.node.values
        sources = (values.read(ROLES), values.read(BOOTSTRAP), values.read(NODE_CREDENTIALS))
        saved = load_saved_member(self.member_directory)
        async with Combined(*sources, values.read(NETWORK)) as inputs:
            current = await inputs.get()
            wanted = _wanted(current, saved)
            from_records = False
            try:
                if not wanted:
                    self._without_control_plane(ctx)
                else:
                    startup = _fold(current, saved)
                    while isinstance(startup, str) and _wanted(current, saved):
                        ctx.set_note(startup)
                        current = await inputs.get()
                        startup = _fold(current, saved)
                    if not isinstance(startup, str):
                        from_records = startup.saved
                        current = await self._start_following(ctx, startup, inputs, current, saved)
                while _wanted(current, saved) == wanted:
                    self._forget_bootstrap_once_enrolled(ctx, current[2])
                    if not wanted:
                        self._say_without(ctx, current[0])
                    elif from_records:
                        ctx.set_note(FROM_RECORDS_NOTE if current[0] is None else "")
                    current = await inputs.get()
                await _restart(ctx, wanted)
            finally:
                values.set(LOCAL_CONTROL_PLANE, LocalControlPlane.NONE)

    async def _start_following(
        self,
        ctx: RunContext,
        startup: Startup,
        inputs: Combined,
        current: tuple[Any, ...],
        saved: SavedMember | None,
    ) -> tuple[Any, ...]:
        """Start the control plane, following the values meanwhile; the latest values.

        A start may never end: a member its cluster refuses (NotAMemberError, final) leaves
        its curator waiting for etcd. Whether a control plane is wanted may change meanwhile
        (the roles, unknown when the member started from its own records, come from another
        curator without the role): the worker restarts then, as it does once started.
        """
        latest = current
        failed: Exception | None = None

        async def follow() -> None:
            nonlocal latest
            while _wanted(latest, saved):
                latest = await inputs.get()
            await _restart(ctx, wanted=True)

        async with anyio.create_task_group() as group:
            group.start_soon(follow)
            try:
                await self._start(ctx, startup)
            except Exception as exc:  # raised as itself, not in the task group's group
                failed = exc
            group.cancel_scope.cancel()
        if failed is not None:
            raise failed
        return latest

    def _without_control_plane(self, ctx: RunContext) -> None:
        """No control plane on this node; a former member's data is left alone.

        Whether that member was removed is the cluster's to say, never this node's guess:
        the roles may be unknown (no saved roles, corrupt ones, no curator answering) while
        the node is a member all the same. Deleting the data then (as this worker once did
        whenever it started without the role) took a voter's log from the cluster, and etcd,
        started again on nothing, panicked in a loop. So nothing changes on disk here. If the
        role is given again, the member's next start asks the cluster (``plan_start``): a
        removed member's data is moved aside then (``data.removed-<time>``), and a member the
        cluster still lists restarts on its data.
        """
        self.node.values.set(LOCAL_CONTROL_PLANE, LocalControlPlane.NONE)
        ctx.signal_healthy()

    def _say_without(self, ctx: RunContext, roles: NodeRoles | None) -> None:
        """The note while there is no control plane, and (once a process, when the roles
        are known) where a former member's data stays."""
        if roles is None:
            ctx.set_note("waiting for the node's roles")
            return
        ctx.set_note("no consensus_member role")
        data = self.member_directory / "data"
        if self.member_directory not in _TOLD_DATA_KEPT and data.exists():
            _TOLD_DATA_KEPT.add(self.member_directory)
            ctx.log.info(
                "no consensus_member role: the etcd data of this node's former member stays "
                "in %s; given the role again, the member moves it aside once the cluster "
                "confirms it removed the member",
                data,
            )

    async def _start(self, ctx: RunContext, startup: Startup) -> None:
        # Here, not at the top: etcd's client, the member and the curator load when this
        # node first wants a control plane, not on every node (a worker runs always).
        from roleserve_controlplane.controlplane_start import ControlPlaneStart

        start = ControlPlaneStart(
            self.node, self.settings, self.member_directory, self.bootstrap_file
        )
        await start.start(ctx, startup)


async def _restart(ctx: RunContext, wanted: bool) -> None:
    """Restart the worker: whether a control plane is wanted is no longer ``wanted``."""
    ctx.log.info("consensus_member role %s: restarting", "gone" if wanted else "given")
    ctx.restart()
    await anyio.sleep_forever()
