"""roleserve-metrics: Prometheus exporters over mutual TLS, and service discovery."""

from roleserve_metrics.exporters import Exporter

__all__ = ["Exporter"]
