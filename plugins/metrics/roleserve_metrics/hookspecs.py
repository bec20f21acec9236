"""The hook the metrics plugin defines for other plugins: ``roleserve_metrics_exporters``.

The plugin adds it to the node's plugin manager (``roleserve_add_hookspecs``); another
plugin implements it without importing this package, with the core's marker::

    from roleserve_core import hookimpl

    @hookimpl(optionalhook=True)   # quiet when the metrics plugin is not installed
    def roleserve_metrics_exporters(node):
        return [("etcd", "http://127.0.0.1:7842/metrics")]
"""

from __future__ import annotations

from typing import Any

from roleserve_core import NodeContext, hookspec

__all__ = ["roleserve_metrics_exporters"]


@hookspec
def roleserve_metrics_exporters(node: NodeContext) -> list[Any]:
    """Name the Prometheus exporters this plugin contributes to ``/metrics/<name>``.

    Called by the metrics plugin's worker when it starts and again whenever the node's
    roles change, so a plugin can contribute an exporter only while a role runs (the
    controlplane plugin's ``etcd`` on consensus members).

    :param node: this plugin's ``NodeContext``.
    :returns: exporters, each either a ``roleserve_metrics.Exporter`` or a plain
        ``(name, target)`` pair, ``target`` being a local ``http://`` URL to proxy or a
        ``prometheus_client`` collector to serve from a registry of its own. Names match
        ``^[a-z0-9][a-z0-9_-]{0,63}$``; ``core`` and ``node`` are the metrics plugin's own.
        Return ``[]`` for none.

    Synchronous only; no I/O. If it raises, or returns something else, the plugin's
    exporters are left out with one log line and the call counts as the plugin's hook
    failure. A name another plugin already contributed is refused, naming both plugins.
    """
    raise NotImplementedError  # pragma: no cover - specification only
