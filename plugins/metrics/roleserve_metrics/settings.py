"""The plugin's settings: ``[plugins.metrics]`` in a node's ``roleserve.toml``.

The ``Setting`` records are the one source of the names, types, defaults and docs: the
``roleserve_settings`` hook declares them, the core checks the file against them, and
``roleserve plugins`` lists them. ``MetricsSettings`` gathers the checked values for the
worker.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from roleserve_core import Setting
from roleserve_metrics.discovery import DISCOVERY_SETTING
from roleserve_metrics.ports import METRICS_PORT, NODE_EXPORTER_PORT

__all__ = [
    "NODE_EXPORTER",
    "NODE_EXPORTER_EXECUTABLE",
    "NODE_EXPORTER_PORT_SETTING",
    "PORT",
    "SETTINGS",
    "UPSTREAM_TIMEOUT",
    "MetricsSettings",
]

NODE_EXPORTER_EXECUTABLE = "prometheus-node-exporter"
"""The name looked up on ``PATH`` when ``node_exporter`` is empty (Debian's package)."""

PORT: Setting[int] = Setting(
    "port",
    int,
    METRICS_PORT,
    "The HTTPS port of /metrics/<exporter>, on the node's address.",
    minimum=1,
    maximum=65535,
)
NODE_EXPORTER: Setting[str] = Setting(
    "node_exporter",
    str,
    "",
    f"The node_exporter binary; empty: {NODE_EXPORTER_EXECUTABLE} on PATH. Not found: "
    "no `node` exporter (one log line).",
)
NODE_EXPORTER_PORT_SETTING: Setting[int] = Setting(
    "node_exporter_port",
    int,
    NODE_EXPORTER_PORT,
    "node_exporter's port, on 127.0.0.1 (or the node's own address if it is a loopback one).",
    minimum=1,
    maximum=65535,
)
UPSTREAM_TIMEOUT: Setting[float] = Setting(
    "upstream_timeout",
    float,
    10.0,
    "Seconds a proxied exporter may take to answer before the scrape gets 504.",
    predicate=lambda seconds: seconds > 0,
    requirement="a number above 0",
)
SETTINGS: tuple[Setting[Any], ...] = (
    PORT,
    NODE_EXPORTER,
    NODE_EXPORTER_PORT_SETTING,
    UPSTREAM_TIMEOUT,
    DISCOVERY_SETTING,
)
"""Everything ``[plugins.metrics]`` accepts, in the order ``roleserve plugins`` lists."""


@dataclass(frozen=True)
class MetricsSettings:
    """The ``[plugins.metrics]`` section, as the worker uses it (see ``SETTINGS``)."""

    port: int = PORT.default
    node_exporter: str = NODE_EXPORTER.default
    """Empty: look for ``NODE_EXPORTER_EXECUTABLE`` on PATH."""
    node_exporter_port: int = NODE_EXPORTER_PORT_SETTING.default
    upstream_timeout: float = UPSTREAM_TIMEOUT.default

    @classmethod
    def of(cls, config: Mapping[str, Any]) -> MetricsSettings:
        """The settings of the plugin's ``NodeContext.config`` (checked by the core against
        the allowed values of ``SETTINGS``)."""
        return cls(
            port=PORT.read(config),
            node_exporter=NODE_EXPORTER.read(config),
            node_exporter_port=NODE_EXPORTER_PORT_SETTING.read(config),
            upstream_timeout=UPSTREAM_TIMEOUT.read(config),
        )
