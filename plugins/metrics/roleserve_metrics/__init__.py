"""roleserve-metrics: Prometheus exporters over mutual TLS, and service discovery."""
