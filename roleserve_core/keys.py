"""The node's shared state: every core ``ValueKey``, its type and its invariants.

The core declares the keys that several plugins meet on, so that a reader depends on the
core, never on the plugin that owns the key::

    key                      type                owner          read by (typically)
    node_id                  str                 core           every plugin
    node_credentials         NodeCredentials     core           controlplane, workers with RPCs
    bootstrap                BootstrapRequest    core           controlplane
    roles                    NodeRoles           core           the role runtime, plugins
    curator_connection       CuratorConnection   core           workers talking to the curator
    network                  NetworkStatus       core           clusternet, hostsfile
    local_control_plane      LocalControlPlane   controlplane   kubernetes, metrics
    kubernetes_status        KubernetesStatus    kubernetes     status push, metrics
    pod_network              PodNetwork          kubernetes     clusternet
    cluster_directory_saved  bool                hostsfile      status push

This module is also the built-in plugin ``core``, which owns the first four keys. It is
essential: it cannot be disabled.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any, ClassVar

from roleserve_core.hookspecs import hookimpl
from roleserve_core.identity import NodeCredentials, PrivateKey
from roleserve_core.roles import NodeRoles
from roleserve_core.values import ValueKey

__all__ = [
    "BOOTSTRAP",
    "CLUSTER_DIRECTORY_SAVED",
    "CURATOR_CONNECTION",
    "KUBERNETES_STATUS",
    "LOCAL_CONTROL_PLANE",
    "NETWORK",
    "NODE_CREDENTIALS",
    "NODE_ID",
    "POD_NETWORK",
    "ROLES",
    "BootstrapRequest",
    "CuratorConnection",
    "KubernetesStatus",
    "LocalControlPlane",
    "NetworkStatus",
    "PodNetwork",
]

ROLESERVE_PLUGIN_API = 1

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True, slots=True)
class CuratorConnection:
    """How this node reaches the curator: set once the node is enrolled, replaced when the
    leader changes. Invariant: ``leader_node_id`` and ``leader_endpoint`` are both set or
    both None (None while no leader is known)."""

    node_id: str
    """This node's ID."""
    leader_node_id: str | None = None
    """The node ID of the curator that leads, whose certificate the channel verifies."""
    leader_endpoint: str | None = None
    """``host:port`` of the leading curator."""


@dataclass(frozen=True, slots=True)
class NetworkStatus:
    """The node's own network state."""

    external_address: IPAddress | None
    """The address other nodes reach this node at; None until known."""


@dataclass(frozen=True, slots=True)
class LocalControlPlane:
    """The control plane services running on this node.

    Invariant: both endpoints are set while etcd and the curator both run here, and both
    are None otherwise (``LocalControlPlane.NONE``): values cannot be unset, so "no local
    control plane" is a value of its own, as Monogon's nil is.
    """

    curator_endpoint: str | None
    """``host:port`` of the local curator."""
    etcd_endpoint: str | None
    """``host:port`` of the local etcd member's client URL."""

    @property
    def running(self) -> bool:
        """Whether etcd and the curator run on this node."""
        return self.curator_endpoint is not None and self.etcd_endpoint is not None

    NONE: ClassVar[LocalControlPlane]


LocalControlPlane.NONE = LocalControlPlane(None, None)


@dataclass(frozen=True, slots=True)
class BootstrapRequest:
    """This node is to bootstrap a new cluster (``roleserve node run --bootstrap``)."""

    node_key: PrivateKey
    """The node's key: its ID, and the key of its first certificates."""
    owner_identity: str = "owner"
    """The identity of the owner's user certificate the bootstrap issues."""


@dataclass(frozen=True, slots=True)
class KubernetesStatus:
    """What of Kubernetes runs on this node."""

    controller_running: bool
    worker_running: bool


@dataclass(frozen=True, slots=True)
class PodNetwork:
    """The pod prefixes Kubernetes assigned to this node, to announce over the cluster mesh."""

    prefixes: tuple[IPNetwork, ...]


NODE_CREDENTIALS: ValueKey[NodeCredentials] = ValueKey(
    "node_credentials",
    NodeCredentials,
    "The node's key and node certificate, and the cluster CA; set once the node is enrolled.",
)
BOOTSTRAP: ValueKey[BootstrapRequest] = ValueKey(
    "bootstrap",
    BootstrapRequest,
    "Set on the node that bootstraps a new cluster, before it has credentials.",
)
NODE_ID: ValueKey[str] = ValueKey(
    "node_id", str, "This node's ID (node- + 32 hex characters); set once, at enrolment."
)
ROLES: ValueKey[NodeRoles] = ValueKey(
    "roles",
    NodeRoles,
    "The roles the control plane assigned to this node; replaced whole on every change.",
)
CURATOR_CONNECTION: ValueKey[CuratorConnection] = ValueKey(
    "curator_connection",
    CuratorConnection,
    "The connection to the leading curator; set after enrolment, replaced on leader change.",
)
NETWORK: ValueKey[NetworkStatus] = ValueKey(
    "network", NetworkStatus, "The node's external address."
)
LOCAL_CONTROL_PLANE: ValueKey[LocalControlPlane] = ValueKey(
    "local_control_plane",
    LocalControlPlane,
    "etcd and curator endpoints on this node while both run, else NONE (owned by controlplane).",
)
KUBERNETES_STATUS: ValueKey[KubernetesStatus] = ValueKey(
    "kubernetes_status",
    KubernetesStatus,
    "Which Kubernetes services run on this node (owned by kubernetes).",
)
POD_NETWORK: ValueKey[PodNetwork] = ValueKey(
    "pod_network", PodNetwork, "Pod prefixes assigned to this node (owned by kubernetes)."
)
CLUSTER_DIRECTORY_SAVED: ValueKey[bool] = ValueKey(
    "cluster_directory_saved",
    bool,
    "Whether a cluster directory for rejoining is saved on disk (owned by hostsfile).",
)


@hookimpl
def roleserve_values() -> list[ValueKey[Any]]:
    """The core owns the node's identity and credentials, its bootstrap request, its roles,
    curator connection and network."""
    return [NODE_ID, NODE_CREDENTIALS, BOOTSTRAP, ROLES, CURATOR_CONNECTION, NETWORK]
