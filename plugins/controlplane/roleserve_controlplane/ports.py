"""etcd's ports, the same on every consensus member's own address (the core's are in
``roleserve_core.ports``; the curator's, 7835, is the core's since every node dials it)::

    7836  etcd clients                                           TCP, mutual TLS
    7837  etcd peers                                             TCP, mutual TLS
    7842  etcd metrics, on the node's local exporter host          TCP, plain HTTP

Declared in the plugin's API (``from roleserve_controlplane import ETCD_METRICS_PORT``).
"""

from __future__ import annotations

__all__ = ["ETCD_CLIENT_PORT", "ETCD_METRICS_PORT", "ETCD_PEER_PORT"]

ETCD_CLIENT_PORT = 7836
ETCD_PEER_PORT = 7837
ETCD_METRICS_PORT = 7842
