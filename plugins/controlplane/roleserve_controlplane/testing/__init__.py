"""Test helpers of the controlplane plugin: real etcd clusters, and curators on them.

``etcd``: members on loopback under supervisors; ``curator``: a bootstrapped cluster whose
nodes enrol through the curator's API, as real nodes do.
"""

from roleserve_controlplane.testing.curator import (
    CuratorCluster,
    CuratorNode,
    change_roles,
    enrol_node,
    update_roles,
)
from roleserve_controlplane.testing.etcd import (
    ETCD_SOURCES,
    EtcdCluster,
    EtcdClusterRunner,
    RunningMember,
    damage_wal,
    etcd_binary,
    fill_database,
    require_node_etcd,
    wait_healthy_through_backoff,
)

__all__ = [
    "ETCD_SOURCES",
    "CuratorCluster",
    "CuratorNode",
    "EtcdCluster",
    "EtcdClusterRunner",
    "RunningMember",
    "change_roles",
    "damage_wal",
    "enrol_node",
    "etcd_binary",
    "fill_database",
    "require_node_etcd",
    "update_roles",
    "wait_healthy_through_backoff",
]
