"""The node's shared state: every core ``ValueKey``, its type and its invariants.

The core declares the keys it reads itself, and those several plugins meet on, so that a
reader depends on the core, never on the plugin that owns the key. A key the core reads is
the core's contract, which a plugin may own: the controlplane owns ``local_control_plane``
and ``bootstrapped``, which the core's status push, enrolment and daemon read::

    key                      type                owner          read by (typically)
    node_id                  str                 core           every plugin
    node_credentials         NodeCredentials     core           controlplane, workers with RPCs
    bootstrap                BootstrapRequest    core           controlplane
    roles                    NodeRoles           core           the role runtime, plugins
    curator_connection       CuratorConnection   core           workers talking to the curator
    network                  NetworkStatus       core           clusternet, hostsfile
    handled_custom_roles     tuple[str, ...]     core           statuspush
    cluster_nodes            ClusterNodes        core           rolefetch, statuspush (the node's
                                                                own record), hostsfile,
                                                                clusternet, metrics, the node's
                                                                curator connection
    local_control_plane      LocalControlPlane   controlplane   statuspush, kubernetes, metrics
    bootstrapped             Bootstrapped        controlplane   the node's enrolment (it saves the
                                                                credentials it carries)

A key only plugins read is declared by the plugin that owns it, in its top-level API, and
read through that: ``kubernetes_status`` and ``pod_network``, declared here under plugin
API 1, are ``roleserve_kubernetes``'s (their old names here still answer, with a warning,
and keep their names: ``MOVED_KEY_NAMES``).

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

from roleserve_core._moved import TO_PLUGINS, moved_names
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
    "LOCAL_CONTROL_PLANE",
    "MOVED_KEY_NAMES",
    "NETWORK",
    "NODE_CREDENTIALS",
    "NODE_ID",
    "REVOKED_CREDENTIALS",
    "ROLES",
    "SHARED_KEYS",
    "BootstrapRequest",
    "Bootstrapped",
    "CuratorConnection",
    "LocalControlPlane",
    "NetworkStatus",
    "RevokedCredentials",
]

ROLESERVE_PLUGIN_API = 1

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


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
class RevokedCredentials:
    """The cluster's revoked user certificates, as the leader last sent them: the node
    management server refuses their calls (``workers/revocations.py``)."""

    serials: frozenset[int]


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
        CLUSTER_NODES,
        REVOKED_CREDENTIALS,
    }
)
"""Every key this module declares. Their names are chosen here, for all plugins at once,
so they need not begin with their owner's name (the rule for a plugin's own keys,
``registry.unprefixed_key_warning``)."""

MOVED_KEY_NAMES: frozenset[str] = frozenset({"kubernetes_status", "pod_network"})
"""The names of the keys this module declared under plugin API 1 that moved to the plugin
owning them (``roleserve_kubernetes``). The core chose them, for all plugins: they keep
them, as shared keys do, without the warning for a name not beginning with its owner's."""


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
            # Declared here until their owner, the kubernetes plugin, declared them.
            **{
                name: TO_PLUGINS[name]
                for name in ("KUBERNETES_STATUS", "POD_NETWORK", "KubernetesStatus", "PodNetwork")
            },
        },
        api=1,
    )
