"""The roles the control plane assigns to a node: what ``when=`` predicates look at.

A node's roles are one immutable ``NodeRoles`` value, replaced whole on every change.
Built-in roles are typed fields: present (an object, possibly with parameters) or absent
(``None``). Third-party roles live in ``custom``, a map from role name to string
parameters, so a plugin can gate its workers on a role of its own without changing the
core::

    NodeRoles(
        consensus_member=ConsensusMember(...),   # runs an etcd member + curator
        kubernetes_controller=None,
        kubernetes_worker=KubernetesWorker(),
        custom={"backup": {"schedule": "daily"}},
    )

``kubernetes_controller`` requires ``consensus_member``; the curator enforces that when it
assigns roles (a ``NodeRoles`` value itself only records what was assigned).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from roleserve_core.proto import common_pb2

__all__ = [
    "CUSTOM_ROLE_NAME",
    "ConsensusMember",
    "ConsensusPeer",
    "KubernetesController",
    "KubernetesWorker",
    "NodeRoles",
    "check_custom_role_name",
    "roles_from_proto",
    "roles_to_proto",
]

CUSTOM_ROLE_NAME = re.compile(r"[a-z0-9]([a-z0-9_.-]{0,61}[a-z0-9])?")
"""Custom role names: lower case, digits, ``_.-`` inside, at most 63 characters."""


@dataclass(frozen=True, slots=True)
class ConsensusPeer:
    """Another etcd member this node's member should know about."""

    name: str
    """The member's node ID."""
    url: str
    """Its peer URL, e.g. ``https://127.0.0.11:7837``."""


@dataclass(frozen=True, slots=True)
class ConsensusMember:
    """The node runs an etcd member and a curator."""

    ca_certificate: bytes = b""
    """PEM of the CA that issues etcd peer certificates."""
    peer_certificate: bytes = b""
    """PEM of this node's etcd peer certificate."""
    peers: tuple[ConsensusPeer, ...] = ()
    """The members to join (empty when this node bootstraps the cluster)."""


@dataclass(frozen=True, slots=True)
class KubernetesController:
    """The node runs the Kubernetes control plane services."""


@dataclass(frozen=True, slots=True)
class KubernetesWorker:
    """The node runs Kubernetes workloads."""


def check_custom_role_name(name: object) -> None:
    """:raises ValueError: if ``name`` cannot name a custom role, saying what can."""
    if not isinstance(name, str) or not CUSTOM_ROLE_NAME.fullmatch(name):
        raise ValueError(
            f"invalid custom role name {name!r}: use lower case letters, digits and "
            "'_.-' (not at either end), at most 63 characters"
        )


def _frozen_custom(custom: Mapping[str, Mapping[str, str]]) -> Mapping[str, Mapping[str, str]]:
    for name in custom:
        check_custom_role_name(name)
    return MappingProxyType(
        {name: MappingProxyType(dict(params)) for name, params in sorted(custom.items())}
    )


@dataclass(frozen=True, slots=True)
class NodeRoles:
    """Every role assigned to one node. Immutable; compare with ``==``."""

    consensus_member: ConsensusMember | None = None
    kubernetes_controller: KubernetesController | None = None
    kubernetes_worker: KubernetesWorker | None = None
    custom: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """Third-party roles: name → parameters."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "custom", _frozen_custom(self.custom))

    def __hash__(self) -> int:
        """Hash by value, like the other role types: the generated hash would hash the
        ``custom`` mapping proxies, which are not hashable."""
        custom = frozenset(
            (name, frozenset(params.items())) for name, params in self.custom.items()
        )
        return hash(
            (self.consensus_member, self.kubernetes_controller, self.kubernetes_worker, custom)
        )

    def has(self, role: str) -> bool:
        """Whether the role named ``role`` is assigned.

        ``role`` is a built-in role's field name (``kubernetes_worker``) or
        ``custom:<name>`` for a third-party role.
        """
        if role.startswith("custom:"):
            return role.removeprefix("custom:") in self.custom
        if role not in _BUILTIN_ROLES:
            raise ValueError(
                f"unknown role {role!r}; built-in roles are {', '.join(_BUILTIN_ROLES)}, "
                "third-party roles are written custom:<name>"
            )
        return getattr(self, role) is not None

    def names(self) -> list[str]:
        """The assigned roles, built-in first, as ``has()`` spells them."""
        builtin = [role for role in _BUILTIN_ROLES if getattr(self, role) is not None]
        return builtin + [f"custom:{name}" for name in self.custom]


_BUILTIN_ROLES = ("consensus_member", "kubernetes_controller", "kubernetes_worker")


def roles_from_proto(message: common_pb2.NodeRoles) -> NodeRoles:
    """The ``NodeRoles`` of the wire message (as the curator sends them)."""
    consensus = None
    if message.HasField("consensus_member"):
        member = message.consensus_member
        consensus = ConsensusMember(
            ca_certificate=member.ca_certificate,
            peer_certificate=member.peer_certificate,
            peers=tuple(ConsensusPeer(peer.name, peer.url) for peer in member.peers),
        )
    return NodeRoles(
        consensus_member=consensus,
        kubernetes_controller=(
            KubernetesController() if message.HasField("kubernetes_controller") else None
        ),
        kubernetes_worker=KubernetesWorker() if message.HasField("kubernetes_worker") else None,
        custom={name: dict(role.parameters) for name, role in message.custom.items()},
    )


def roles_to_proto(roles: NodeRoles) -> common_pb2.NodeRoles:
    """The wire message of ``roles`` (to persist them, or to send them)."""
    message = common_pb2.NodeRoles()
    if roles.consensus_member is not None:
        member = message.consensus_member
        member.ca_certificate = roles.consensus_member.ca_certificate
        member.peer_certificate = roles.consensus_member.peer_certificate
        for peer in roles.consensus_member.peers:
            member.peers.add(name=peer.name, url=peer.url)
    if roles.kubernetes_controller is not None:
        message.kubernetes_controller.SetInParent()
    if roles.kubernetes_worker is not None:
        message.kubernetes_worker.SetInParent()
    for name, parameters in roles.custom.items():
        message.custom[name].parameters.update(parameters)
    return message
