"""containerd's metrics port, on a worker node's local exporter host
(``roleserve_core.local_exporter_host``; the core's ports are in ``roleserve_core.ports``)::

    7846  containerd metrics (kubernetes workers)                TCP, plain HTTP

Declared in the plugin's API (``from roleserve_kubernetes import CONTAINERD_METRICS_PORT``);
``[plugins.kubernetes] containerd_metrics_port`` changes it.
"""

from __future__ import annotations

__all__ = ["CONTAINERD_METRICS_PORT"]

CONTAINERD_METRICS_PORT = 7846
