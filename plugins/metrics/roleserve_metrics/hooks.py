"""Prometheus exporters over mutual TLS: the node's own, node_exporter's, other plugins'.

Served at ``https://<node address>:7840/metrics/<name>``: ``core`` (the node's own
metrics), ``node`` (node_exporter's), and what other plugins contribute.

The worker ``metrics`` (see ``worker_metrics``) serves them to holders of a user
certificate whose scope may scrape (``metrics``, ``owner``). Other plugins contribute
exporters through the hook this plugin defines, ``roleserve_metrics_exporters``
(``hookspecs``). The plugin owns no values.

The worker ``metrics_discovery`` (see ``discovery``) keeps the Prometheus ``http_sd``
targets the same server answers at ``/discovery``, on consensus members by default.

Configuration (``[plugins.metrics]`` in roleserve.toml): ``port``, ``node_exporter``,
``node_exporter_port``, ``upstream_timeout``, ``discovery``; declared in ``settings``, where
each is documented (``roleserve plugins`` lists them).
"""

from __future__ import annotations

from typing import Any

import pluggy

from roleserve_core import (
    NETWORK,
    NODE_CREDENTIALS,
    REVOKED_CREDENTIALS,
    ROLES,
    NodeContext,
    Setting,
    Worker,
    hookimpl,
    lazy_runnable,
)
from roleserve_metrics import hookspecs
from roleserve_metrics.discovery import DiscoveryView, discovery_mode, discovery_worker
from roleserve_metrics.settings import SETTINGS, MetricsSettings

ROLESERVE_PLUGIN_API = 1


@hookimpl
def roleserve_add_hookspecs(plugin_manager: pluggy.PluginManager) -> None:
    """Adds ``roleserve_metrics_exporters``, for other plugins' exporters."""
    plugin_manager.add_hookspecs(hookspecs)


@hookimpl
def roleserve_settings() -> list[Setting[Any]]:
    """What ``[plugins.metrics]`` accepts (see ``settings``)."""
    return list(SETTINGS)


@hookimpl
def roleserve_workers(node: NodeContext) -> list[Worker]:
    """The worker ``metrics``, always running, and ``metrics_discovery``, on the nodes the
    setting ``discovery`` names; they share the view ``/discovery`` answers from."""
    view = DiscoveryView(discovery_mode(node.config))
    settings = MetricsSettings.of(node.config)
    return [
        Worker(
            "metrics",
            lazy_runnable("roleserve_metrics.worker_metrics:run", node, settings, view),
            reads=(NODE_CREDENTIALS, NETWORK, ROLES, REVOKED_CREDENTIALS),
            doc="Serves Prometheus exporters over mutual TLS on port 7840.",
        ),
        discovery_worker(node.values, view),
    ]
