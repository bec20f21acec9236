"""Harnesses that assemble plugins, a node runtime and a supervisor for one test."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, TypeAlias, TypeVar

import anyio
import grpc
from anyio.abc import TaskGroup, TaskStatus

from roleserve_core.clock import Clock
from roleserve_core.plugin_loader import (
    BUILTIN_PLUGINS,
    BuiltinPlugin,
    PluginInfo,
    PluginSelection,
    PluginSet,
)
from roleserve_core.registry import ValueKey
from roleserve_core.roles import NodeRoles
from roleserve_core.runtime import CORE_READER, NodeRuntime
from roleserve_core.supervisor import BackoffPolicy, Runnable, RunnableStatus, State, Supervisor
from roleserve_core.testing._wait import DEFAULT_TIMEOUT, wait_for_state, wait_for_status
from roleserve_core.values import ROLES

__all__ = [
    "NO_CHANNEL",
    "NodeHarness",
    "PluginHarness",
    "StartNode",
    "SupervisorRunner",
    "load_installed_plugin",
    "start_plugin_node",
]

T = TypeVar("T")


class _NoChannel:
    """A channel that never reaches a server: nothing can be called through it, and it
    never becomes ready (a failed session keeps waiting for a new connection, as with a
    leader that is gone)."""

    def get_state(self, try_to_connect: bool = False) -> grpc.ChannelConnectivity:
        return grpc.ChannelConnectivity.IDLE

    def __repr__(self) -> str:
        return "NO_CHANNEL"


NO_CHANNEL: Any = _NoChannel()
"""The channel of a ``CuratorConnection`` built by a test that never calls through it
(hook dispatch, value plumbing)."""


def _builtins(*names: str) -> tuple[BuiltinPlugin, ...]:
    """The built-in plugins of these names, in their load order."""
    return tuple(builtin for builtin in BUILTIN_PLUGINS if builtin.name in names)


class PluginHarness:
    """The built-in plugin ``core`` (the node's values) plus exactly the plugins a test
    registers.

    Installed entry-point plugins stay out, so a test sees the same plugins on every
    machine. The built-in plugins of the core's workers (rolefetch, statuspush, heartbeat,
    nodemgmt...) stay out too unless ``core_workers=True``: a test of one plugin's worker
    wants that worker's tree, not the node's whole. ``cluster_nodes=True`` adds the one
    built-in ``nodewatch``, for a worker that reads ``cluster_nodes`` (connect the node to a
    ``fake_cluster`` curator).

    Strict by default, as ``roleserve plugins --strict`` is: a plugin module without
    ``ROLESERVE_PLUGIN_API``, a misspelled hook, a hook with a wrong signature, a bad worker
    name or a value key another plugin owns raises ``PluginError`` at ``register`` or
    ``runtime``, with the one line that says what to fix, instead of surfacing later as a
    worker that never starts. A test of how the node isolates a broken plugin passes
    ``strict=False``.
    """

    def __init__(
        self, *, strict: bool = True, core_workers: bool = False, cluster_nodes: bool = False
    ) -> None:
        if core_workers:
            builtins = BUILTIN_PLUGINS
        elif cluster_nodes:
            builtins = _builtins("core", "nodewatch")
        else:
            builtins = _builtins("core")
        self.plugins = PluginSet.load(
            strict=strict, selection=PluginSelection(), entry_points=[], builtins=builtins
        )

    def register(self, plugin: object, name: str = "test_plugin") -> PluginInfo:
        """Register ``plugin`` (a module, class or object with ``@hookimpl`` functions)."""
        return self.plugins.register(plugin, name)

    def runtime(self, data_dir: Path, **options: Any) -> NodeRuntime:
        """Assemble a ``NodeRuntime`` from the registered plugins (starts nothing).

        Hooks nobody defines are checked here, once every plugin is in: a later one may
        define the hook an earlier one implements.
        """
        self.plugins.check_unknown_hooks()
        return NodeRuntime(self.plugins, data_dir=data_dir, **options)


class SupervisorRunner:
    """Starts supervisors and stops them all when its block ends.

    Each supervisor lives in a task of the runner's own, so supervisors started from
    different places can be stopped in any order (``stop``), and none of them nests inside
    the caller's cancel scopes. The test kit's fixture runs them on a fake clock;
    benchmarks pass a real one.
    """

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._tasks: TaskGroup | None = None
        self._stops: dict[Supervisor, tuple[anyio.Event, anyio.Event]] = {}

    async def start(
        self, root: Runnable, *, after_stop: Callable[[], None] | None = None, **options: Any
    ) -> Supervisor:
        """A running ``Supervisor`` of ``root`` on this runner's clock; stopped at the end.

        Backoff has no jitter unless ``backoff=`` says otherwise, so delays are exact.

        :param after_stop: called once the supervisor has stopped every runnable.
        """
        if self._tasks is None:
            raise RuntimeError("start supervisors inside the runner's async with block")
        options.setdefault("clock", self.clock)
        options.setdefault("backoff", BackoffPolicy(jitter=0.0))
        supervisor: Supervisor = await self._tasks.start(self._host, root, options, after_stop)
        return supervisor

    async def _host(
        self,
        root: Runnable,
        options: dict[str, Any],
        after_stop: Callable[[], None] | None,
        *,
        task_status: TaskStatus[Supervisor],
    ) -> None:
        stop, stopped = anyio.Event(), anyio.Event()
        try:
            async with Supervisor(root, **options) as supervisor:
                self._stops[supervisor] = (stop, stopped)
                task_status.started(supervisor)
                await stop.wait()
        finally:
            if after_stop is not None:
                after_stop()
            stopped.set()

    async def stop(self, supervisor: Supervisor) -> None:
        """Stop ``supervisor`` now (every runnable cancelled), before the block ends."""
        stop, stopped = self._stops[supervisor]
        stop.set()
        await stopped.wait()

    async def __aenter__(self) -> SupervisorRunner:
        self._tasks = anyio.create_task_group()
        await self._tasks.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        assert self._tasks is not None
        for stop, _ in self._stops.values():
            stop.set()
        tasks, self._tasks = self._tasks, None
        return await tasks.__aexit__(exc_type, exc, tb)


class NodeHarness:
    """A node runtime running under a supervisor, with helpers to drive and observe it."""

    def __init__(self, runtime: NodeRuntime, supervisor: Supervisor) -> None:
        self.runtime = runtime
        self.supervisor = supervisor

    def set_roles(self, roles: NodeRoles) -> None:
        """Set the node's roles, as rolefetch would."""
        self.set(ROLES, roles)

    def set(self, key: ValueKey[T], value: T, *, by: str = CORE_READER) -> None:
        """Set a value on behalf of its owner (the core unless ``by`` says otherwise)."""
        self.runtime.registry.set(key, value, by=by)

    async def wait_state(
        self, dn: str, *states: State, timeout: float = DEFAULT_TIMEOUT
    ) -> RunnableStatus:
        """Wait until ``dn`` is in one of ``states`` (default HEALTHY)."""
        return await wait_for_state(self.supervisor, dn, *states, timeout=timeout)

    async def wait_status(
        self,
        dn: str,
        predicate: Callable[[RunnableStatus], bool],
        *,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> RunnableStatus:
        """Wait until the status of ``dn`` satisfies ``predicate``."""
        return await wait_for_status(self.supervisor, dn, predicate, timeout=timeout)

    def status(self, dn: str) -> RunnableStatus:
        """The status of one runnable."""
        return self.supervisor.status_of(dn)

    @classmethod
    async def start(
        cls, runner: SupervisorRunner, runtime: NodeRuntime, **options: Any
    ) -> NodeHarness:
        """Run ``runtime`` under a supervisor from ``runner``."""
        options.setdefault("logtree", runtime.logtree)
        # As the node process does: its sockets go once everything has stopped.
        supervisor = await runner.start(
            runtime.root, after_stop=runtime.remove_runtime_dir, **options
        )
        return cls(runtime, supervisor)


def load_installed_plugin(name: str) -> PluginInfo:
    """Load the installed plugin ``name`` through its entry point, alone and strictly, and
    assemble a node runtime from it, so the info lists its values and workers.

    For a plugin's own tests: proves the distribution declares the entry point, the module
    imports and declares the plugin API this core provides, and its start-up hooks work.

    :raises PluginLoadError: if it fails; ``LookupError`` if it is not installed (a plugin's
        tests run in an environment without it installed), saying how to install it.
    """
    plugins = PluginSet.load(strict=True, selection=PluginSelection(allow=frozenset({name})))
    try:
        info = plugins.info(name)
    except KeyError:
        raise LookupError(
            f"no installed plugin {name!r} (entry point group roleserve.plugins); its entry "
            "point exists only once it is installed: in its directory, uv pip install -e ."
        ) from None
    NodeRuntime(plugins, data_dir=Path("/nonexistent/roleserve-test"))
    return info


StartNode: TypeAlias = "Callable[..., Awaitable[NodeHarness]]"
"""The ``node`` fixture: ``await node(runtime, **supervisor_options)`` runs a runtime."""


async def start_plugin_node(
    node: StartNode,
    data_dir: Path,
    plugins: Mapping[str, object],
    *,
    config: Mapping[str, Mapping[str, Any]] | None = None,
    cluster_nodes: bool = False,
    core_workers: bool = False,
) -> NodeHarness:
    """A node of exactly ``plugins`` running under the test's supervisor, on its clock.

    What a plugin's worker test does first, and used to write again in each file: a strict
    ``PluginHarness``, each plugin registered, a runtime in ``data_dir``, started by the
    ``node`` fixture.

    :param node: the ``node`` fixture.
    :param plugins: name → hook module, class or object, registered in this order.
    :param config: name → its ``[plugins.<name>]`` table, as a roleserve.toml gives it.
    :param cluster_nodes: add the core's ``nodewatch``, for a worker that reads
        ``cluster_nodes``; ``core_workers``: all the core's workers (``PluginHarness``).
    """
    harness = PluginHarness(cluster_nodes=cluster_nodes, core_workers=core_workers)
    for name, plugin in plugins.items():
        harness.register(plugin, name)
    return await node(harness.runtime(data_dir, config=config))
