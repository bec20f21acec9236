"""A local cluster: N node processes on loopback addresses (``roleserve cluster up``)."""

from roleserve_core.localcluster.cluster import (
    FIRST_ADDRESS,
    LocalCluster,
    LocalClusterError,
    saved_first_address,
)
from roleserve_core.localcluster.layout import default_roles
from roleserve_core.localcluster.process import LocalNode

__all__ = [
    "FIRST_ADDRESS",
    "LocalCluster",
    "LocalClusterError",
    "LocalNode",
    "default_roles",
    "saved_first_address",
]
