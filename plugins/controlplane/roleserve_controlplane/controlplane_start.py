"""Starting etcd and the curator on this node: the half of the worker ``controlplane``
that runs only where a control plane is wanted (``worker_controlplane``, which imports this
module then).

Apart from the worker because of what it imports: etcd's client (etcd3aio), the member and
the curator with its services are most of what the plugin weighs, and the worker runs on
every node, most of which never hold the ``consensus_member`` role.

::

    Startup ──start──▶ disk space, etcd binary
        bootstrap:  BootstrapMaterial ─▶ etcd (bootstrap) ─▶ cluster records written
                    ─▶ bootstrapped set ─▶ curator
        otherwise:  etcd (join / restart, as its membership record says) ─▶ curator
        once the curator follows or leads and etcd serves: local_control_plane set, healthy
"""

from __future__ import annotations

import datetime
import functools
import ipaddress
from pathlib import Path
from typing import TYPE_CHECKING, Any

from roleserve_controlplane.consensus import (
    DEFAULT_CLIENT_PORT,
    DEFAULT_PEER_PORT,
    ETCD_RETRY,
    EtcdClient,
    EtcdMember,
    EtcdRequestError,
    MemberConfig,
    MemberMode,
    find_etcd,
    recorded_etcd,
    require_space,
)
from roleserve_controlplane.curator import (
    CURATOR_PORT,
    BootstrapMaterial,
    ClusterNetwork,
    Curator,
    CuratorConfig,
    write_bootstrap,
)
from roleserve_controlplane.curator.extension import gather_extensions
from roleserve_controlplane.ports import ETCD_METRICS_PORT
from roleserve_controlplane.settings import ControlPlaneSettings
from roleserve_core import (
    BOOTSTRAPPED,
    LOCAL_CONTROL_PLANE,
    NODE_CREDENTIALS,
    Bootstrapped,
    LocalControlPlane,
    NodeContext,
    RunContext,
    retry,
    roles_from_proto,
)
from roleserve_core.identity import Credentials, NodeCredentials

if TYPE_CHECKING:
    from roleserve_controlplane.worker_controlplane import Startup

__all__ = ["ControlPlaneStart"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class ControlPlaneStart:
    """One start of the control plane, in the worker's run."""

    def __init__(
        self,
        node: NodeContext,
        settings: ControlPlaneSettings,
        member_directory: Path,
        bootstrap_file: Path,
    ) -> None:
        self.node = node
        self.settings = settings
        self.member_directory = member_directory
        """Where the etcd member keeps its data and TLS files."""
        self.bootstrap_file = bootstrap_file
        """The bootstrap material, while a bootstrap is unfinished."""

    async def start(self, ctx: RunContext, startup: Startup) -> None:
        """Start etcd and the curator as ``startup`` says; healthy once both serve."""
        # Too little disk space ends the worker here, before the bootstrap writes anything or
        # etcd starts: one line naming the directory, retried after the backoff until the
        # operator frees space. Final errors (no etcd, a downgrade the data refuses) end it
        # too; the supervisor leaves it DEAD until the operator restarts it.
        require_space(self.member_directory)
        binary = find_etcd(self.settings.etcd, recorded_etcd(self.member_directory))
        if startup.bootstrap is not None:
            await self._bootstrap(ctx, startup, binary)
            return
        assert startup.credentials is not None
        assert startup.member is not None
        config = self._member_config(startup, startup.credentials.node_id, startup.member, binary)
        if startup.saved:
            ctx.log.info(
                "the node's roles are unknown: starting its etcd member from its own records "
                "in %s (membership record, TLS files, peers), as its role last started it; "
                "the roles, once known, confirm it or take it away",
                self.member_directory,
            )
        member = EtcdMember(config)
        ctx.run("etcd", member)
        await self._run_curator(ctx, config, startup.credentials, member)

    def _member_config(
        self, startup: Startup, name: str, member: Credentials, binary: Any
    ) -> MemberConfig:
        return MemberConfig(
            name=name,
            directory=self.member_directory,
            address=startup.address,
            credentials=member,
            binary=binary,
            client_port=DEFAULT_CLIENT_PORT,
            peer_port=DEFAULT_PEER_PORT,
            metrics_port=ETCD_METRICS_PORT,
            peers=startup.peers,
            heartbeat_ms=self.settings.heartbeat_ms,
            election_ms=self.settings.election_ms,
            quota_backend_bytes=self.settings.maintenance.quota_backend_bytes,
            gc_percent=self.settings.gc_percent,
        )

    async def _bootstrap(self, ctx: RunContext, startup: Startup, binary: Any) -> None:
        assert startup.bootstrap is not None
        network = self.settings.network  # a bad one ends the worker before etcd starts
        lifetime = self.settings.certificate_lifetime  # so does a bad lifetime
        retention = self.settings.retention  # and a bad retention
        material = BootstrapMaterial.load_or_create(
            self.bootstrap_file, startup.bootstrap.node_key, startup.address, lifetime
        )
        config = self._member_config(startup, material.node.node_id, material.member, binary)
        if config.mode() is MemberMode.JOIN:
            raise ValueError("a bootstrapping member has no peers")
        member = EtcdMember(config)
        ctx.run("etcd", member)
        ctx.set_note("bootstrapping: waiting for etcd")
        # Only into a member that recorded its bootstrap: data without the record is moved
        # aside at the next start, and the cluster's records with it (seen with a crash
        # between etcd first answering and the record).
        with member.serving.watch() as serving:
            await serving.get(filter=bool)
        async with EtcdClient([config.endpoint], material.member) as client:
            written = await _retrying_until_written(
                client, material, startup.address, network, lifetime, retention
            )
        material = material.without_ca_keys(self.bootstrap_file)  # etcd holds them now
        ctx.log.info("bootstrapped a new cluster" if written else "the cluster was bootstrapped")
        roles = roles_from_proto(material.first_node(startup.address, self.settings.network).roles)
        self.node.values.set(BOOTSTRAPPED, Bootstrapped(material.node, material.owner, roles))
        await self._run_curator(ctx, config, material.node, member)

    def _latest_credentials(self, started: NodeCredentials) -> NodeCredentials:
        """The node's credentials as renewed since the curator started with ``started``
        (a bootstrapping node sets them after its curator started, to the same)."""
        latest = self.node.values.read(NODE_CREDENTIALS)
        return latest.get_nowait() if latest.statistics().is_set else started

    async def _run_curator(
        self, ctx: RunContext, config: MemberConfig, node: NodeCredentials, member: EtcdMember
    ) -> None:
        introspection = self.node.introspection
        curator = Curator(
            CuratorConfig(
                node=node,
                etcd=config.credentials,
                etcd_endpoints=[config.endpoint],
                address=config.address,
                port=CURATOR_PORT,
                lease_ttl=self.settings.lease_ttl,
                current_node=lambda: self._latest_credentials(node),
                stats=introspection.stats if introspection is not None else None,
                extensions=gather_extensions(self.node),
                clock=ctx.clock,
                maintenance=self.settings.maintenance,
            )
        )
        # Kept served by its member: a node stopping cancels both at once, and a leading
        # curator's revoke of its lease (the next one leads at once) needs etcd.
        ctx.run("curator", member.serving_for(curator))
        ctx.set_note("waiting for etcd and the curator")
        with curator.role.watch() as role, member.serving.watch() as serving:
            await role.get(filter=lambda now: now != "waiting")
            await serving.get(filter=bool)
        host = f"[{config.address}]" if config.address.version == 6 else str(config.address)
        self.node.values.set(
            LOCAL_CONTROL_PLANE,
            LocalControlPlane(f"{host}:{CURATOR_PORT}", config.endpoint, config.credentials),
        )
        ctx.set_note("")
        ctx.signal_healthy()


async def _retrying_until_written(
    client: EtcdClient,
    material: BootstrapMaterial,
    address: IPAddress,
    network: ClusterNetwork,
    lifetime: datetime.timedelta,
    retention: float,
) -> bool:
    """Write the bootstrap records once etcd answers."""
    write = functools.partial(
        write_bootstrap,
        client,
        material,
        address,
        network=network,
        node_certificate_lifetime=lifetime,
        history_retention=retention,
    )
    return await retry(write, retry_on=EtcdRequestError, backoff=ETCD_RETRY)
