"""The curator: the cluster's control plane service, next to every etcd member.

::

    ┌─────────────── leader (won the etcd election) ───────────────┐
    │ Curator      Watch ◀── NodeCache ◀── one etcd watch /nodes/  │
    │              UpdateNodeStatus, Heartbeat, Register/Commit/   │
    │              JoinNode, UpdateNodeClusterNetworking           │
    │ Management   GetNodes (health), roles, approve, tickets, ... │
    │ CuratorLocal GetCurrentLeader (itself), GetCACertificate     │
    └──────────────────────────────┬───────────────────────────────┘
                                   │ writes: ClusterState, guarded by the leadership
    followers: CuratorLocal only ──┴─▶ etcd (every node record, secrets, ticket)

Modules: ``curator`` (the runnable), ``service_*`` (the three services), ``state`` (etcd
records), ``cache`` (the leader's watch fan-out), ``watchevents`` (Watch events encoded
once for every stream), ``health`` (heartbeats), ``roles`` (role changes), ``prefixes``
(the cluster network and node prefixes), ``bootstrap``,
``authority`` (the CAs), ``validation``, ``errors``, ``extension`` (other plugins' services
on the leader: ``roleserve_curator_services``).
"""

from roleserve_controlplane.curator.authority import (
    DEFAULT_NODE_CERTIFICATE_LIFETIME,
    ClusterAuthority,
    node_certificate_lifetime,
)
from roleserve_controlplane.curator.bootstrap import (
    OWNER_IDENTITY,
    BootstrapMaterial,
    write_bootstrap,
)
from roleserve_controlplane.curator.cache import NodeCache, Subscription
from roleserve_controlplane.curator.curator import Curator, CuratorConfig
from roleserve_controlplane.curator.extension import CuratorExtension, CuratorLeader
from roleserve_controlplane.curator.health import (
    DEFAULT_HEARTBEAT_INTERVAL,
    MISSED_BEATS,
    Heartbeats,
)
from roleserve_controlplane.curator.leader import CURATOR_PORT, LeaderState
from roleserve_controlplane.curator.prefixes import (
    ClusterNetwork,
    ClusterNetworkError,
    PrefixesExhaustedError,
)
from roleserve_controlplane.curator.state import ClusterState, NodeNotFoundError

__all__ = [
    "CURATOR_PORT",
    "DEFAULT_HEARTBEAT_INTERVAL",
    "DEFAULT_NODE_CERTIFICATE_LIFETIME",
    "MISSED_BEATS",
    "OWNER_IDENTITY",
    "BootstrapMaterial",
    "ClusterAuthority",
    "ClusterNetwork",
    "ClusterNetworkError",
    "ClusterState",
    "Curator",
    "CuratorConfig",
    "CuratorExtension",
    "CuratorLeader",
    "Heartbeats",
    "LeaderState",
    "NodeCache",
    "NodeNotFoundError",
    "PrefixesExhaustedError",
    "Subscription",
    "node_certificate_lifetime",
    "write_bootstrap",
]
