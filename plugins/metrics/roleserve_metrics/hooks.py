"""Prometheus exporters over mutual TLS, and service discovery: no workers yet.

It will serve the node's metrics and the exporters other plugins contribute
over HTTPS with client certificates, plus Prometheus http_sd discovery. Until then it runs
nothing.
"""

ROLESERVE_PLUGIN_API = 1
