"""What a leading curator holds while it leads, and how it shows nodes to clients.

A ``LeaderState`` is built when a curator wins the election and discarded when it loses:
the leadership (which guards every write), the cache of node records, the heartbeats, the
cluster's authority, and etcd's maintenance. The services read and change the cluster only
through it.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from roleserve_controlplane.consensus import EtcdClient, EtcdMaintenance, Leadership, Membership
from roleserve_controlplane.curator.authority import ClusterAuthority
from roleserve_controlplane.curator.cache import NodeCache
from roleserve_controlplane.curator.credentials import RevokedSerials
from roleserve_controlplane.curator.health import Heartbeats
from roleserve_controlplane.curator.prefixes import ClusterNetwork
from roleserve_controlplane.curator.state import ClusterState
from roleserve_controlplane.proto import state_pb2
from roleserve_core import common_pb2, curator_pb2, management_pb2
from roleserve_core.identity import Credentials

__all__ = [
    "CURATOR_PORT",
    "LeaderState",
    "api_node",
    "cluster_directory",
    "management_node",
]

CURATOR_PORT = 7835

MAX_DIRECTORY_NODES = 15
"""Control-plane nodes in a cluster directory, as Monogon limits it."""


@dataclass
class LeaderState:
    """Everything the leader's services use."""

    node_id: str
    client: EtcdClient
    etcd_credentials: Credentials
    leadership: Leadership
    state: ClusterState
    authority: ClusterAuthority
    cache: NodeCache
    heartbeats: Heartbeats
    network: ClusterNetwork
    """The cluster network node prefixes are allocated from (from the configuration)."""
    revoked: RevokedSerials
    """The serials of revoked user certificates, from one etcd watch."""
    maintenance: EtcdMaintenance
    """etcd's compaction, defragmentation and quota alarms (``consensus.maintenance``)."""

    @property
    def membership(self) -> Membership:
        """etcd membership operations, through the leader's client."""
        return Membership(self.client, self.etcd_credentials)


def api_node(record: state_pb2.NodeRecord) -> curator_pb2.Node:
    """A node as nodes see it (no keys, no certificate)."""
    return curator_pb2.Node(
        id=record.id,
        roles=record.roles,
        status=record.status,
        clusternet=record.clusternet,
        state=record.state,
        labels=record.labels,
        cluster_prefix=record.cluster_prefix,
    )


def management_node(
    record: state_pb2.NodeRecord, heartbeats: Heartbeats, leader_id: str
) -> management_pb2.Node:
    """A node as operators see it: with its health and the leader marker."""
    node = management_pb2.Node(
        id=record.id,
        roles=record.roles,
        status=record.status,
        clusternet=record.clusternet,
        state=record.state,
        labels=record.labels,
        health=heartbeats.health(record.id, record.state),
        leader=record.id == leader_id,
        conflict=heartbeats.conflict(record.id),
        cluster_prefix=record.cluster_prefix,
    )
    since = heartbeats.since_last(record.id)
    if since is not None:
        node.time_since_heartbeat.CopyFrom(Duration(seconds=int(since), nanos=_nanos(since)))
    return node


def _nanos(seconds: float) -> int:
    return int((seconds % 1) * 1e9)


def now_timestamp() -> Timestamp:
    """The current time, for status stamps."""
    stamp = Timestamp()
    stamp.GetCurrentTime()
    return stamp


def cluster_directory(records: Iterable[state_pb2.NodeRecord]) -> common_pb2.ClusterDirectory:
    """The UP consensus members with an address, by ID, at most ``MAX_DIRECTORY_NODES``:
    the nodes a restarting node can reach the cluster through."""
    directory = common_pb2.ClusterDirectory()
    members = sorted(
        (
            record
            for record in records
            if record.state == common_pb2.NODE_STATE_UP
            and record.roles.HasField("consensus_member")
            and record.status.external_address
        ),
        key=lambda record: record.id,
    )
    for record in members[:MAX_DIRECTORY_NODES]:
        directory.nodes.add(id=record.id, addresses=[record.status.external_address])
    return directory


def peer_url(address: str, port: int) -> str:
    """The etcd peer URL of a node at ``address``."""
    host = f"[{address}]" if ipaddress.ip_address(address).version == 6 else address
    return f"https://{host}:{port}"
