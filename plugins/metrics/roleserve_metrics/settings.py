"""The plugin's settings: ``[plugins.metrics]`` in a node's ``roleserve.toml``.

``MetricsSettings`` declares each setting the worker uses once, as a field
(``roleserve_core.setting``): its name, type, default, doc and allowed values make the
``Setting`` record the ``roleserve_settings`` hook declares (``SETTINGS``), the core checks
the file against, and ``roleserve plugins`` lists; ``MetricsSettings.of`` gathers the
checked values for the worker. ``discovery`` is declared by the discovery module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from roleserve_core import (
    PluginSettings,
    Setting,
    former_setting_constants,
    port_setting,
    setting,
)
from roleserve_metrics.discovery import DISCOVERY_SETTING
from roleserve_metrics.ports import METRICS_PORT, NODE_EXPORTER_PORT

__all__ = ["NODE_EXPORTER_EXECUTABLE", "SETTINGS", "MetricsSettings"]

NODE_EXPORTER_EXECUTABLE = "prometheus-node-exporter"
"""The name looked up on ``PATH`` when ``node_exporter`` is empty (Debian's package)."""


@dataclass(frozen=True)
class MetricsSettings(PluginSettings):
    """The ``[plugins.metrics]`` section, as the worker uses it (``discovery`` aside)."""

    port: int = port_setting(
        "port", METRICS_PORT, "The HTTPS port of /metrics/<exporter>, on the node's address."
    )
    node_exporter: str = setting(
        "node_exporter",
        str,
        "",
        f"The node_exporter binary; empty: {NODE_EXPORTER_EXECUTABLE} on PATH. Not found: "
        "no `node` exporter (one log line).",
    )
    """Empty: look for ``NODE_EXPORTER_EXECUTABLE`` on PATH."""
    node_exporter_port: int = port_setting(
        "node_exporter_port",
        NODE_EXPORTER_PORT,
        "node_exporter's port, on 127.0.0.1 (or the node's own address if it is a loopback one).",
    )
    upstream_timeout: float = setting(
        "upstream_timeout",
        float,
        10.0,
        "Seconds a proxied exporter may take to answer before the scrape gets 504.",
        predicate=lambda seconds: seconds > 0,
        requirement="a number above 0",
    )


SETTINGS: tuple[Setting[Any], ...] = (*MetricsSettings.declared(), DISCOVERY_SETTING)
"""Everything ``[plugins.metrics]`` accepts, in the order ``roleserve plugins`` lists
(``discovery`` is the discovery module's)."""


if not TYPE_CHECKING:
    # Before MetricsSettings, each setting then declared was a ``Setting`` constant of
    # this module, named here as git history has them (a setting added since has
    # none); they still answer, with a warning naming the field's record.
    __getattr__ = former_setting_constants(
        __name__,
        MetricsSettings,
        renamed={"NODE_EXPORTER_PORT_SETTING": "node_exporter_port"},
        constants=("PORT", "NODE_EXPORTER", "UPSTREAM_TIMEOUT"),
    )
