"""Exporters: what ``/metrics/<name>`` serves, and the table the server looks names up in.

::

    builtin: core (CoreCollector), node (node_exporter, if found)
    plugins: roleserve_metrics_exporters(node) ─▶ Exporter | (name, url | collector)
                │                                      │
                └── gather_exporters() ── checks: name pattern, type, duplicates ──▶
                    {name: Exporter} ──▶ ExporterTable.replace() ──▶ the server's lookups

An exporter is either a local URL the server proxies (node_exporter, etcd) or a
``prometheus_client`` collector it serves from a registry of the exporter's own. A name
taken twice is refused: the first keeps it, and one ERROR names both plugins.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.registry import Collector, CollectorRegistry

from roleserve_core import NodeIntrospection, RoleserveError

__all__ = [
    "HOOK",
    "NAME_PATTERN",
    "DuplicateExporterError",
    "Exporter",
    "ExporterTable",
    "Gathered",
    "gather_exporters",
]

HOOK = "roleserve_metrics_exporters"
"""The hook's name (``hookspecs``)."""

NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
"""What an exporter's name must match: it is a path segment of ``/metrics/<name>``."""


class DuplicateExporterError(RoleserveError):
    """Two plugins contributed exporters of one name."""


@dataclass(frozen=True)
class Exporter:
    """One exporter: a name and either a local URL to proxy or a collector to serve."""

    name: str
    url: str | None = None
    """``http://127.0.0.1:<port>/<path>``: proxied as it answers (a local exporter)."""
    collector: Collector | None = None
    """Served from ``registry``, a registry of its own."""
    owner: str = ""
    """The plugin that contributed it (``metrics`` for ``core`` and ``node``)."""
    registry: CollectorRegistry | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not NAME_PATTERN.match(self.name):
            raise ValueError(f"exporter name {self.name!r} is not {NAME_PATTERN.pattern}")
        if (self.url is None) == (self.collector is None):
            raise ValueError(f"exporter {self.name!r} needs exactly one of a URL or a collector")
        if self.url is not None and not self.url.startswith("http://"):
            raise ValueError(f"exporter {self.name!r}: {self.url!r} is not a local http:// URL")
        if self.collector is not None and self.registry is None:
            registry = CollectorRegistry(auto_describe=False)
            registry.register(self.collector)
            object.__setattr__(self, "registry", registry)


def exporter_of(item: Any, owner: str) -> Exporter:
    """``item`` as an ``Exporter`` owned by ``owner``.

    :raises ValueError: for anything else than an ``Exporter`` or a ``(name, target)`` pair.
    """
    if isinstance(item, Exporter):
        return Exporter(item.name, item.url, item.collector, owner, item.registry)
    if isinstance(item, tuple) and len(item) == 2:
        name, target = item
        if isinstance(target, str):
            return Exporter(name, url=target, owner=owner)
        if callable(getattr(target, "collect", None)):
            return Exporter(name, collector=target, owner=owner)
    raise ValueError(f"an exporter is an Exporter or a (name, URL or collector) pair, not {item!r}")


@dataclass(frozen=True)
class Gathered:
    """What ``gather_exporters`` found: the exporters by name, and each refusal's line."""

    exporters: dict[str, Exporter]
    refused: list[str]


def gather_exporters(builtin: Iterable[Exporter], introspection: NodeIntrospection) -> Gathered:
    """The builtin exporters and every plugin's (``roleserve_metrics_exporters``).

    A plugin whose hook raises or returns something malformed contributes nothing, and the
    failure counts against it; a name already taken is refused, naming both plugins.
    """
    exporters: dict[str, Exporter] = {}
    refused: list[str] = []

    def add(exporter: Exporter) -> None:
        first = exporters.get(exporter.name)
        if first is not None:
            refused.append(
                str(
                    DuplicateExporterError(
                        f"exporter {exporter.name!r} of plugin {exporter.owner!r} refused: "
                        f"plugin {first.owner!r} already contributes an exporter of that name"
                    )
                )
            )
            return
        exporters[exporter.name] = exporter

    for exporter in builtin:
        add(exporter)
    plugins, context = introspection.plugins, introspection.context
    if plugins is None or context is None:
        return Gathered(exporters, refused)
    for call in plugins.implementations(HOOK):
        try:
            contributed = [
                exporter_of(item, call.plugin) for item in call(node=context(call.plugin))
            ]
        except Exception as exc:
            plugins.record_hook_failure(call.plugin, HOOK)
            refused.append(f"plugin {call.plugin!r}: {HOOK} failed, its exporters left out: {exc}")
            continue
        for exporter in contributed:
            add(exporter)
    return Gathered(exporters, refused)


class ExporterTable:
    """The exporters the server serves, replaced whole when they change (roles)."""

    def __init__(self, exporters: Mapping[str, Exporter] | None = None) -> None:
        self._exporters: dict[str, Exporter] = dict(exporters or {})

    def get(self, name: str) -> Exporter | None:
        """The exporter ``name``, or None."""
        return self._exporters.get(name)

    def names(self) -> list[str]:
        """Every name served, sorted."""
        return sorted(self._exporters)

    def replace(self, exporters: Mapping[str, Exporter]) -> None:
        """Serve ``exporters`` from now on."""
        self._exporters = dict(exporters)
