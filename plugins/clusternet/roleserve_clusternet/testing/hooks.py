"""The plugin's hooks for a test node, with the worker's test options (``clusternet_worker``:
``netns`` to make the interface in a test namespace, ``device`` for an in-memory one,
``children`` for fewer runnables)."""

from __future__ import annotations

from typing import Any

from roleserve_clusternet.hooks import clusternet_worker
from roleserve_clusternet.settings import SETTINGS, ClusternetSettings
from roleserve_clusternet.values import CLUSTERNET_STATUS
from roleserve_core import NodeContext, Setting, ValueKey, Worker, hookimpl


class ClusternetHooks:
    """Register with ``PluginHarness.register(ClusternetHooks(device=...), "clusternet")``."""

    def __init__(self, **worker_options: Any) -> None:
        self.worker_options = worker_options

    @hookimpl
    def roleserve_settings(self) -> list[Setting[Any]]:
        return list(SETTINGS)

    @hookimpl
    def roleserve_values(self) -> list[ValueKey[Any]]:
        return [CLUSTERNET_STATUS]

    @hookimpl
    def roleserve_workers(self, node: NodeContext) -> list[Worker]:
        settings = ClusternetSettings.of(node.config)
        return [clusternet_worker(node, settings, **self.worker_options)]
