"""The plugin's hooks for a test node, with the worker's test option ``netns`` (run
containerd, and so the pods' bridge, in a network namespace the test made)."""

from __future__ import annotations

from typing import Any

from roleserve_core import NodeContext, Setting, ValueKey, Worker, hookimpl
from roleserve_kubernetes import KUBERNETES_STATUS, POD_NETWORK
from roleserve_kubernetes.hooks import kubernetes_worker
from roleserve_kubernetes.settings import SETTINGS, WorkerSettings


class KubernetesHooks:
    """Register with ``PluginHarness.register(KubernetesHooks(netns=...), "kubernetes")``."""

    def __init__(self, **worker_options: Any) -> None:
        self.worker_options = worker_options

    @hookimpl
    def roleserve_settings(self) -> list[Setting[Any]]:
        return list(SETTINGS)

    @hookimpl
    def roleserve_values(self) -> list[ValueKey[Any]]:
        return [KUBERNETES_STATUS, POD_NETWORK]

    @hookimpl
    def roleserve_workers(self, node: NodeContext) -> list[Worker]:
        return [kubernetes_worker(node, WorkerSettings.of(node.config), **self.worker_options)]
