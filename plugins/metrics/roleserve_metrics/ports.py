"""The metrics plugin's ports (the core's are in ``roleserve_core.ports``)::

    7840  metrics (Prometheus, HTTPS), on the node's own address   TCP, mutual TLS
    7841  node_exporter, on the node's local exporter host          TCP, plain HTTP

Declared in the plugin's API (``from roleserve_metrics import METRICS_PORT``);
``[plugins.metrics] port`` and ``node_exporter_port`` change them.
"""

from __future__ import annotations

__all__ = ["METRICS_PORT", "NODE_EXPORTER_PORT"]

METRICS_PORT = 7840
NODE_EXPORTER_PORT = 7841
