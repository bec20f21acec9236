"""A local cluster: N node processes on loopback addresses (``roleserve cluster up``)."""

from roleserve_core.localcluster.cluster import (
    DEFAULT_SIZE,
    FIRST_ADDRESS,
    LocalCluster,
    LocalClusterError,
    held_nodes,
    saved_first_address,
    size_for_up,
)
from roleserve_core.localcluster.layout import default_roles
from roleserve_core.localcluster.process import LocalNode

__all__ = [
    "DEFAULT_SIZE",
    "FIRST_ADDRESS",
    "LocalCluster",
    "LocalClusterError",
    "LocalNode",
    "default_roles",
    "held_nodes",
    "saved_first_address",
    "size_for_up",
]
