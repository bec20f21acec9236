"""Services other plugins add to the leading curator (hook ``roleserve_curator_services``).

::

    plugin: roleserve_curator_services(node) ──▶ [CuratorExtension(services, add), ...]
    worker controlplane: gather_extensions() ──▶ CuratorConfig.extensions
    curator, on each election won: add(server, CuratorLeader) for each, beside Curator and
        Management, under the same authorization interceptor, node gate and revocations;
        while following: their methods answer UNAVAILABLE "not the leader; the leader
        is ...", as the leader's own services' do

A plugin meets the curator only through ``CuratorLeader``: the leader's etcd client and
read-only views of the node records, not the curator's internals (``LeaderState``), which
may change without notice.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.descriptor import ServiceDescriptor

from roleserve_controlplane.consensus import EtcdClient
from roleserve_controlplane.curator.leader import LeaderState
from roleserve_controlplane.curator.roles import has_role
from roleserve_core import NodeContext, common_pb2

__all__ = ["HOOK", "CuratorExtension", "CuratorLeader", "gather_extensions"]

log = logging.getLogger("roleserve.curator")

HOOK = "roleserve_curator_services"
"""The hook's name (``roleserve_controlplane.hookspecs``)."""

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True)
class CuratorLeader:
    """What a plugin's services get of the leading curator."""

    node_id: str
    """The leading curator's node ID."""
    etcd: EtcdClient
    """The curator's etcd client (consensus CA credentials): use it during the term only;
    the curator closes it when it stops."""
    _leader: LeaderState

    @classmethod
    def of(cls, leader: LeaderState) -> CuratorLeader:
        """The view of ``leader`` a plugin gets."""
        return cls(leader.node_id, leader.client, leader)

    def node_address(self, node_id: str) -> IPAddress | None:
        """The external address ``node_id`` last reported, if it is UP and reported one."""
        record = self._leader.cache.nodes.get(node_id)
        if record is None or record.state != common_pb2.NODE_STATE_UP:
            return None
        return _address(record.status.external_address)

    def role_addresses(self, role: str) -> list[tuple[str, IPAddress]]:
        """``(node ID, address)`` of every UP node holding ``role`` (a built-in role's name,
        or ``custom:<name>``) that reported an address, sorted by node ID."""
        found = []
        for node_id, record in sorted(self._leader.cache.nodes.items()):
            address = _address(record.status.external_address)
            up = record.state == common_pb2.NODE_STATE_UP
            if up and address is not None and has_role(record.roles, role):
                found.append((node_id, address))
        return found


def _address(text: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(text) if text else None
    except ValueError:
        return None


@dataclass(frozen=True)
class CuratorExtension:
    """Services a plugin adds to the leading curator."""

    services: Sequence[ServiceDescriptor]
    """The services ``add`` registers (from their ``_pb2`` module's ``DESCRIPTOR``): a
    follower answers their methods UNAVAILABLE, naming itself, as it does the leader's."""
    add: Callable[[grpc.aio.Server, CuratorLeader], None]
    """Registers the services on the leader's server (``add_XServicer_to_server``); called
    each time this curator starts leading, before its server starts."""
    plugin: str = ""
    """The plugin that contributed it (set by ``gather_extensions``)."""


def gather_extensions(node: NodeContext) -> list[CuratorExtension]:
    """Every plugin's ``roleserve_curator_services``; one that raises or returns something
    else than extensions is left out with one ERROR line, and counted as its hook failure."""
    introspection = node.introspection
    if introspection is None or introspection.plugins is None or introspection.context is None:
        return []
    plugins, context = introspection.plugins, introspection.context
    gathered: list[CuratorExtension] = []
    for call in plugins.implementations(HOOK):
        try:
            returned: Any = call(node=context(call.plugin))
            extensions = [_extension(item, call.plugin) for item in returned]
        except Exception as exc:
            plugins.record_hook_failure(call.plugin, HOOK)
            log.error("plugin %r: %s failed, its services left out: %s", call.plugin, HOOK, exc)
            continue
        gathered += extensions
    return gathered


def _extension(item: object, plugin: str) -> CuratorExtension:
    if not isinstance(item, CuratorExtension):
        raise TypeError(f"{HOOK} returns CuratorExtension objects, not {item!r}")
    return CuratorExtension(tuple(item.services), item.add, plugin)
