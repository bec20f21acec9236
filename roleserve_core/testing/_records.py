"""Node records as the curator sends them, for tests that feed a fake curator or a fold."""

from __future__ import annotations

from collections.abc import Iterable

from roleserve_core.proto import common_pb2, curator_pb2
from roleserve_core.roles import NodeRoles, roles_to_proto

__all__ = ["node_record"]


def node_record(
    node_id: str,
    address: str = "",
    *,
    state: common_pb2.NodeState.ValueType = common_pb2.NODE_STATE_UP,
    roles: NodeRoles | None = None,
    cluster_prefix: str = "",
    wireguard_pubkey: str = "",
    prefixes: Iterable[str] = (),
) -> curator_pb2.Node:
    """A ``curator_pb2.Node``: UP, with ``address`` as its status's external address (none
    if empty), and whatever else is given."""
    record = curator_pb2.Node(id=node_id, state=state, cluster_prefix=cluster_prefix)
    record.status.external_address = address
    if roles is not None:
        record.roles.CopyFrom(roles_to_proto(roles))
    if wireguard_pubkey or prefixes:
        record.clusternet.wireguard_pubkey = wireguard_pubkey
        record.clusternet.prefixes.extend(prefixes)
    return record
