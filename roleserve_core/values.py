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
    handled_custom_roles     tuple[str, ...]     core           statuspush
    cluster_nodes            ClusterNodes        core           hostsfile, clusternet, metrics,
                                                                the node's curator connection
    local_control_plane      LocalControlPlane   controlplane   statuspush, kubernetes, metrics
    bootstrapped             Bootstrapped        controlplane   the node's enrolment (it saves the
                                                                credentials it carries)
    kubernetes_status        KubernetesStatus    kubernetes     status push, metrics
    pod_network              PodNetwork          kubernetes     clusternet

This module only declares: the built-in plugin ``core`` (``roleserve_core.builtin``) owns
the core's keys, and its ``roleserve_values`` hook returns them, so the keys depend on no
plugin machinery (docs/architecture.md, "Layers"). ``cluster_nodes`` is declared beside its
type and the helpers that follow it, in ``roleserve_core.clusternodes``, and is one of this
module's names too. The core's workers are built-in plugins of their own, which test
harnesses leave out when they want the core's values without its workers. ``SHARED_KEYS``
is every key above: their names are chosen here for all plugins, so they need not begin
with their owner's name.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from roleserve_core._moved import moved_names
from roleserve_core.clusternodes import CLUSTER_NODES
from roleserve_core.identity import Credentials, NodeCredentials, PrivateKey, UserCredentials
from roleserve_core.registry import ValueKey
from roleserve_core.roles import NodeRoles

if TYPE_CHECKING:
    import grpc

    # Plugin API 1's names of this module, the registry then (see the end of the module).
    from roleserve_core.registry import PluginValues as PluginValues
    from roleserve_core.registry import ValueInfo as ValueInfo
    from roleserve_core.registry import ValueRegistry as ValueRegistry
    from roleserve_core.registry import prefixed as prefixed
    from roleserve_core.registry import unprefixed_key_warning as unprefixed_key_warning
    from roleserve_core.registry import value_details as value_details

__all__ = [
    "BOOTSTRAP",
    "BOOTSTRAPPED",
    "CLUSTER_NODES",
    "CURATOR_CONNECTION",
    "HANDLED_CUSTOM_ROLES",
    "KUBERNETES_STATUS",
    "LOCAL_CONTROL_PLANE",
    "NETWORK",
    "NODE_CREDENTIALS",
    "NODE_ID",
    "POD_NETWORK",
    "REVOKED_CREDENTIALS",
    "ROLES",
    "SHARED_KEYS",
    "BootstrapRequest",
    "Bootstrapped",
    "CuratorConnection",
    "KubernetesStatus",
    "LocalControlPlane",
    "NetworkStatus",
    "PodNetwork",
    "RevokedCredentials",
]

ROLESERVE_PLUGIN_API = 1

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True, eq=False)
class CuratorConnection:
    """This node's connection to the leading curator: one mutual TLS channel that every
    worker shares, verified to reach exactly ``leader_node_id``.

    Set once the node is enrolled and a leader is known; replaced by a new connection (with
    a new channel) when the leader changes, and the old channel is closed then. A worker
    that talks to the curator therefore starts its calls again on every new value (see
    ``roleserve_core.connection.on_each_connection``).
    """

    node_id: str
    """This node's ID."""
    leader_node_id: str
    """The node ID of the leading curator, the identity the channel verifies."""
    leader_endpoint: str
    """``host:port`` of the leading curator."""
    channel: grpc.aio.Channel
    """The channel to the leader (a ``roleserve_core.rpc.CancellationSafeChannel``)."""
    on_unresponsive: Callable[[str], None] = field(default=lambda reason: None, repr=False)
    """Called through ``report_unresponsive``; set by the connector (a no-op otherwise)."""
    on_refused: Callable[[str], None] = field(default=lambda reason: None, repr=False)
    """Called through ``report_refused``; set by the connector (a no-op otherwise)."""

    def __repr__(self) -> str:
        return f"CuratorConnection(leader={self.leader_node_id} at {self.leader_endpoint})"

    def report_unresponsive(self, reason: str) -> None:
        """Tell the connector that the leader stopped answering on this connection (``reason``
        says what went unanswered, for its log). The connector then asks the other known
        curators for the leader and sets a new connection, even to the same leader if they
        still name it. The heartbeat worker reports a reply that does not come in time; a
        report about a connection that was already replaced is ignored. Never blocks."""
        self.on_unresponsive(reason)

    def report_refused(self, reason: str) -> None:
        """Tell the connector that the cluster refuses this node for good (a call ended with
        ``roleserve_core.rpc.node_refusal``: the node is decommissioned). Waiting cannot
        cure that, so the node stops with ``reason`` (exit 1). ``on_each_connection``
        reports it for every worker's session. Never blocks."""
        self.on_refused(reason)


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
    etcd_credentials: Credentials | None = field(default=None, repr=False, compare=False)
    """What a client of the local member connects with: the member's key and certificate
    (it may act as a client) and the consensus CA (etcd admits only certificates of that
    CA, not of the cluster CA). For plugins that keep state in etcd next to the curator's
    (the Kubernetes PKI, kube-apiserver's store); None with ``NONE``. Not compared: the
    endpoints say which control plane runs."""

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


@dataclass(frozen=True)
class Bootstrapped:
    """What bootstrapping a cluster on this node produced (set by the controlplane plugin)."""

    node: NodeCredentials
    """The node's credentials in the new cluster."""
    owner: UserCredentials
    """The owner's credentials: the only way to manage the cluster; the node saves them."""
    roles: NodeRoles
    """The roles the bootstrap gave this node, saved so that a restart before the first
    answer of the curator still starts the control plane."""


@dataclass(frozen=True, slots=True)
class KubernetesStatus:
    """Kubernetes' control plane on this node, as the kubernetes plugin's controller runs it.

    Set by the controller worker once it started the components, again when the apiserver
    turns ready or stops being ready, and reset to ``KubernetesStatus.NONE`` ("nothing
    runs") whenever the worker stops: Monogon never resets its status, so a node that lost
    the controller role went on saying it ran one. Values cannot be unset, so "nothing" is
    a value of its own, as with ``LocalControlPlane.NONE``.
    """

    apiserver: str | None = None
    """The local kube-apiserver's URL, ``https://<node address>:6443``; None: no apiserver
    runs here (no controller, or no kube-apiserver binary)."""
    ca_pem: bytes | None = None
    """The cluster's Kubernetes CA (PEM): it signed the apiserver's serving certificate and
    every client certificate the apiserver admits."""
    apiserver_ready: bool = False
    """Whether the local apiserver answers ``/readyz`` with 200."""
    running: tuple[str, ...] = ()
    """The components started here (``kube-apiserver``, ``kube-controller-manager``,
    ``kube-scheduler``); each one's own state is its runnable's, in ``roleserve ctl tree``."""
    absent: tuple[str, ...] = ()
    """The components this node has no binary for (configured or on PATH)."""

    @property
    def controller_running(self) -> bool:
        """Whether the controller worker started Kubernetes' control plane here (with the
        binaries it found: ``running`` and ``absent`` say which)."""
        return bool(self.running or self.absent)

    def __repr__(self) -> str:
        """One short line: the CA's PEM would drown the rest (``roleserve ctl values``)."""
        if self == KubernetesStatus.NONE:
            return "KubernetesStatus(NONE)"
        return (
            f"KubernetesStatus(apiserver={self.apiserver!r}, ready={self.apiserver_ready}, "
            f"running={self.running!r}, absent={self.absent!r})"
        )

    NONE: ClassVar[KubernetesStatus]


KubernetesStatus.NONE = KubernetesStatus()


@dataclass(frozen=True, slots=True)
class RevokedCredentials:
    """The cluster's revoked user certificates, as the leader last sent them: the node
    management server refuses their calls (``workers/revocations.py``)."""

    serials: frozenset[int]


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
BOOTSTRAPPED: ValueKey[Bootstrapped] = ValueKey(
    "bootstrapped",
    Bootstrapped,
    "Set once this node has bootstrapped a new cluster: its own and the owner's credentials.",
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
HANDLED_CUSTOM_ROLES: ValueKey[tuple[str, ...]] = ValueKey(
    "handled_custom_roles",
    tuple,
    "The custom roles the workers of this node's plugins are gated on (custom_role()), "
    "sorted; set when the node starts.",
)
LOCAL_CONTROL_PLANE: ValueKey[LocalControlPlane] = ValueKey(
    "local_control_plane",
    LocalControlPlane,
    "etcd and curator endpoints on this node while both run, else NONE (owned by controlplane).",
)
KUBERNETES_STATUS: ValueKey[KubernetesStatus] = ValueKey(
    "kubernetes_status",
    KubernetesStatus,
    "Kubernetes' control plane here: apiserver URL and readiness, CA, components running "
    "and absent; NONE when no controller runs (owned by kubernetes).",
)
POD_NETWORK: ValueKey[PodNetwork] = ValueKey(
    "pod_network", PodNetwork, "Pod prefixes assigned to this node (owned by kubernetes)."
)
REVOKED_CREDENTIALS: ValueKey[RevokedCredentials] = ValueKey(
    "revoked_credentials",
    RevokedCredentials,
    "Serials of the cluster's revoked user certificates, from the leader's "
    "WatchRevokedCredentials; the node management server refuses them.",
)

SHARED_KEYS: frozenset[ValueKey[Any]] = frozenset(
    {
        NODE_ID,
        NODE_CREDENTIALS,
        BOOTSTRAP,
        BOOTSTRAPPED,
        ROLES,
        CURATOR_CONNECTION,
        NETWORK,
        HANDLED_CUSTOM_ROLES,
        LOCAL_CONTROL_PLANE,
        KUBERNETES_STATUS,
        POD_NETWORK,
        CLUSTER_NODES,
        REVOKED_CREDENTIALS,
    }
)
"""Every key this module declares. Their names are chosen here, for all plugins at once,
so they need not begin with their owner's name (the rule for a plugin's own keys,
``registry.unprefixed_key_warning``)."""


if not TYPE_CHECKING:
    # Under plugin API 1 this module was the value registry, renamed roleserve_core.registry.
    # Its names there meet none of this module's (ValueKey, the one both hold, is the same
    # class and stays as it is), so both meanings live here: this module's own names as
    # they are, the registry's with a warning naming their place today, as long as the
    # core accepts plugin API 1. __all__ lists this module's names only.
    __getattr__ = moved_names(
        __name__,
        {
            "PluginValues": "roleserve_core:PluginValues",
            "ValueRegistry": "roleserve_core:ValueRegistry",
            "ValueInfo": "roleserve_core.registry:ValueInfo",
            "prefixed": "roleserve_core.registry:prefixed",
            "unprefixed_key_warning": "roleserve_core.registry:unprefixed_key_warning",
            "value_details": "roleserve_core.registry:value_details",
            # The core's roleserve_values hook, now its plugin's (roleserve_core.builtin).
            "roleserve_values": "roleserve_core.builtin:roleserve_values",
        },
        api=1,
    )
