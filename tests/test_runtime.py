"""The node runtime (``roleserve_core.runtime``) and what plugins get from it (``node``).

Plugins here are objects built in the test (``plugin(hook=function, ...)``), registered on
the test kit's ``plugin_manager``; the node runs under a supervisor on a fake clock. Tests
wait on conditions (a state, a value, every task blocked), never on time.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Generic, TypeVar

import anyio
import pytest

from roleserve_core import (
    KubernetesWorker,
    NodeContext,
    NodeRoles,
    RunContext,
    Setting,
    State,
    Worker,
    custom_role,
    lazy_runnable,
)
from roleserve_core import builtin as core_plugin
from roleserve_core.errors import (
    InvalidRunnableNameError,
    NotValueOwnerError,
    PluginLoadError,
    RunnableNotFoundError,
)
from roleserve_core.event import Value
from roleserve_core.hookspecs import hookimpl
from roleserve_core.plugin_loader import PluginState
from roleserve_core.registry import ValueKey
from roleserve_core.supervisor import RunnableStatus
from roleserve_core.testing import NO_CHANNEL, NodeHarness, PluginHarness, wait_for_value
from roleserve_core.values import (
    CURATOR_CONNECTION,
    LOCAL_CONTROL_PLANE,
    NODE_ID,
    ROLES,
    CuratorConnection,
)

T = TypeVar("T")
StartNode = Callable[..., Awaitable[NodeHarness]]

OWN: ValueKey[str] = ValueKey("own", str, "A key the plugin under test declares.")


def plugin(**hooks: Callable[..., Any]) -> SimpleNamespace:
    """A plugin object implementing each named hook with the given function."""
    return SimpleNamespace(**{name: hookimpl(function) for name, function in hooks.items()})


def with_workers(*workers: Worker) -> SimpleNamespace:
    """A plugin contributing ``workers``."""
    return plugin(roleserve_workers=lambda node: list(workers))


class Calls:
    """Records calls, in order; a test waits until there are enough of them."""

    def __init__(self) -> None:
        self.log: list[Any] = []
        self._count: Value[int] = Value()
        self._count.set(0)

    def record(self, call: Any) -> None:
        self.log.append(call)
        self._count.set(len(self.log))

    async def wait_calls(self, count: int) -> list[Any]:
        """Wait until ``count`` calls were recorded; returns them all."""
        await wait_for_value(self._count, lambda recorded: recorded >= count)
        return list(self.log)


def transitions(harness: NodeHarness, dn: str) -> list[tuple[State, State]]:
    """From now on, every state change of ``dn`` (notes, which repeat a state, left out)."""
    seen: list[tuple[State, State]] = []

    def observe(changed: str, old: State | None, new: State) -> None:
        if changed == dn and old is not None and old is not new:
            seen.append((old, new))

    harness.supervisor.add_observer(observe)
    return seen


async def forever(ctx: RunContext) -> None:
    """Healthy until cancelled."""
    ctx.signal_healthy()
    await anyio.sleep_forever()


def is_worker(roles: NodeRoles) -> bool:
    return roles.kubernetes_worker is not None


WORKER = NodeRoles(kubernetes_worker=KubernetesWorker())


# -- workers ------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_an_ungated_worker_runs_at_once(
    plugin_manager: PluginHarness, node: StartNode, tmp_path: Path
) -> None:
    """``when=None``: at root.role.<name>, before the node knows any roles."""
    plugin_manager.register(with_workers(Worker("always", forever)), "p")
    harness = await node(plugin_manager.runtime(tmp_path))
    status = await harness.wait_state("root.role.always", State.HEALTHY)
    assert status.note == ""
    assert not harness.runtime.registry.read(ROLES, "test").statistics().is_set


@pytest.mark.anyio
async def test_a_gated_worker_runs_while_its_predicate_holds(
    plugin_manager: PluginHarness, node: StartNode, tmp_path: Path
) -> None:
    """Waits in NEW; starts when ``when(roles)`` turns true; is cancelled with its subtree
    (no failure, no backoff) when it turns false, and waits again; starts again after."""
    calls = Calls()

    async def child(ctx: RunContext) -> None:
        calls.record("child started")
        try:
            await forever(ctx)
        finally:
            calls.record("child stopped")

    async def run(ctx: RunContext) -> None:
        calls.record("started")
        ctx.run("child", child)
        try:
            await forever(ctx)
        finally:
            calls.record("stopped")

    plugin_manager.register(with_workers(Worker("gated", run, when=is_worker)), "p")
    harness = await node(plugin_manager.runtime(tmp_path))
    dn = "root.role.gated"
    changes = transitions(harness, dn)

    def waiting(status: RunnableStatus) -> bool:
        return status.state is State.NEW and status.note == "waiting for its roles"

    await harness.wait_status(dn, waiting)
    harness.set_roles(NodeRoles())
    await anyio.wait_all_tasks_blocked()
    assert (waiting(harness.status(dn)), calls.log) == (True, [])
    harness.set_roles(WORKER)
    await harness.wait_state(f"{dn}.child", State.HEALTHY)
    assert (harness.status(dn).state, harness.status(dn).note) == (State.HEALTHY, "")
    harness.set_roles(NodeRoles(kubernetes_worker=KubernetesWorker(), custom={"x": {}}))
    await anyio.wait_all_tasks_blocked()  # still true: nothing happens
    assert (harness.status(dn).state, harness.status(dn).restarts) == (State.HEALTHY, 0)
    harness.set_roles(NodeRoles(custom={"x": {}}))

    stopped = await harness.wait_status(dn, waiting)
    assert (stopped.restarts, stopped.failures, stopped.restart_in, stopped.last_error) == (
        1,
        0,
        None,
        None,
    )
    with pytest.raises(RunnableNotFoundError):
        harness.status(f"{dn}.child")
    assert calls.log[:2] == ["started", "child started"]
    assert sorted(calls.log[2:]) == ["child stopped", "stopped"]

    harness.set_roles(WORKER)
    await harness.wait_state(f"{dn}.child", State.HEALTHY)
    assert calls.log[4:] == ["started", "child started"]
    assert changes == [
        (State.NEW, State.HEALTHY),
        (State.HEALTHY, State.CANCELED),
        (State.CANCELED, State.NEW),
        (State.NEW, State.HEALTHY),
    ]
    assert harness.status(dn).restarts == 1


@pytest.mark.anyio
@pytest.mark.parametrize("when", [None, is_worker], ids=["always", "gated"])
async def test_a_worker_that_returns_without_done_is_dead_alone(
    plugin_manager: PluginHarness,
    node: StartNode,
    tmp_path: Path,
    when: Callable[[NodeRoles], bool] | None,
) -> None:
    async def quit_early(ctx: RunContext) -> None:
        ctx.signal_healthy()

    workers = with_workers(Worker("quitter", quit_early, when=when), Worker("steady", forever))
    plugin_manager.register(workers, "p")
    harness = await node(plugin_manager.runtime(tmp_path))
    changes = transitions(harness, "root.role.quitter")
    harness.set_roles(WORKER)

    dead = await harness.wait_status("root.role.quitter", lambda status: status.failures == 1)
    assert dead.last_error is not None
    assert dead.last_error.summary() == (
        "roleserve_core.errors.RunnableReturnedError: "
        "root.role.quitter: returned without signalling done (state HEALTHY)"
    )
    assert (dead.state, dead.restart_in) == (State.NEW, 0.5)  # waiting out its backoff
    assert changes == [
        (State.NEW, State.HEALTHY),
        (State.HEALTHY, State.DEAD),
        (State.DEAD, State.NEW),
    ]
    for dn in ("root", "root.role", "root.role.steady"):
        status = harness.status(dn)
        assert (dn, status.state, status.restarts) == (dn, State.HEALTHY, 0)


@pytest.mark.parametrize("name", ["", "Upper", "with-dash", "dot.ted", "space d", "a" * 65, 7])
def test_worker_names_are_validated(name: Any) -> None:
    with pytest.raises(InvalidRunnableNameError, match=r"invalid worker name .*\^\[a-z0-9_\]"):
        Worker(name, forever)


@pytest.mark.parametrize("name", ["a", "kube_worker_2", "0", "a" * 64])
def test_valid_worker_names(name: str) -> None:
    assert Worker(name, forever).name == name


async def documented(ctx: RunContext) -> None:
    """
    Keeps the thing running.

    More detail that ``roleserve plugins`` does not show.
    """


async def blank(ctx: RunContext) -> None:
    """ """


async def undocumented(ctx: RunContext) -> None:
    pass


@pytest.mark.parametrize(
    ("run", "doc", "expected"),
    [
        (documented, "", "Keeps the thing running."),
        (documented, "Given.", "Given."),
        (undocumented, "", ""),
        (blank, "", ""),
    ],
)
def test_worker_doc_defaults_to_the_first_docstring_line(
    run: Callable[[RunContext], Awaitable[None]], doc: str, expected: str
) -> None:
    assert Worker("w", run, doc=doc).doc == expected


def test_worker_reads_become_a_tuple() -> None:
    assert Worker("w", forever, reads=[ROLES]).reads == (ROLES,)  # type: ignore[arg-type]


def test_a_custom_role_predicate_names_its_role_and_holds_while_the_node_has_it() -> None:
    gated = Worker("w", forever, when=custom_role("backup"))
    assert gated.custom_role == "backup"
    assert gated.when is not None
    assert gated.when(NodeRoles(custom={"backup": {}}))
    assert not gated.when(NodeRoles(custom={"other": {}}))
    assert Worker("w", forever, when=lambda roles: True).custom_role is None
    assert Worker("w", forever).custom_role is None


def test_a_custom_role_name_is_validated() -> None:
    with pytest.raises(ValueError, match="invalid custom role name 'Back Up'"):
        custom_role("Back Up")


# -- assembly -----------------------------------------------------------------------------


@pytest.fixture
def lenient() -> PluginHarness:
    """A harness that records a broken plugin and goes on, as a node does, instead of
    raising as the kit's strict default does."""
    return PluginHarness(strict=False)


def raise_error(*args: Any) -> Any:
    raise RuntimeError("broken")


@pytest.mark.parametrize(
    ("declare", "error"),
    [
        (raise_error, "roleserve_values raised RuntimeError: broken"),
        (
            lambda: [OWN, "roles"],
            "roleserve_values raised TypeError: "
            "roleserve_values must return ValueKey objects, got 'roles'",
        ),
        (
            lambda: [OWN, ROLES],
            "roleserve_values raised DuplicateValueKeyError: value 'roles' is already owned "
            "by plugin 'core', which loaded first; a value has exactly one owner: name this "
            "plugin's key 'bad_roles', or read the one 'core' owns",
        ),
        (
            lambda: [OWN, ValueKey("roles", int, "another type")],
            "roleserve_values raised DuplicateValueKeyError: value 'roles' is already owned "
            "by plugin 'core', which loaded first; a value has exactly one owner: name this "
            "plugin's key 'bad_roles', or read the one 'core' owns",
        ),
        (
            lambda: [OWN, OWN],
            "roleserve_values raised DuplicateValueKeyError: value 'own' is declared twice",
        ),
    ],
    ids=["raises", "not-a-key", "owned-by-another", "owned-with-another-type", "twice"],
)
def test_a_plugin_whose_values_are_refused_is_left_out(
    lenient: PluginHarness, tmp_path: Path, declare: Callable[[], Any], error: str
) -> None:
    """Nothing of its declaration stays, and its other hooks are not called."""
    lenient.register(plugin(roleserve_values=declare, roleserve_workers=raise_error), "bad")
    lenient.register(with_workers(Worker("fine", forever)), "fine")
    runtime = lenient.runtime(tmp_path)
    bad = lenient.plugins.info("bad")
    assert (bad.state, bad.error, bad.values) == (PluginState.FAILED, error, [])
    assert lenient.plugins.loaded() == ["core", "fine"]
    core = core_plugin.roleserve_values()
    assert [info.owner for info in runtime.registry.entries()] == ["core"] * len(core)
    assert list(runtime.workers) == ["fine"]


@pytest.mark.parametrize(
    ("workers", "error"),
    [
        (raise_error, "roleserve_workers raised RuntimeError: broken"),
        (
            lambda node: [Worker("mine", forever), "mine"],
            "roleserve_workers raised TypeError: "
            "roleserve_workers must return Worker objects, got 'mine'",
        ),
        (
            lambda node: [Worker("mine", forever), Worker("taken", forever)],
            "roleserve_workers raised ValueError: worker name 'taken' is already used by 'first'",
        ),
        (
            lambda node: [Worker("mine", forever), Worker("mine", forever)],
            "roleserve_workers raised ValueError: two workers are named 'mine'",
        ),
    ],
    ids=["raises", "not-a-worker", "name-taken", "twice"],
)
def test_a_plugin_whose_workers_are_refused_is_left_out_with_its_values(
    lenient: PluginHarness, tmp_path: Path, workers: Callable[..., Any], error: str
) -> None:
    lenient.register(with_workers(Worker("taken", forever)), "first")
    lenient.register(
        plugin(roleserve_values=lambda: [OWN], roleserve_workers=workers, on_roles=raise_error),
        "bad",
    )
    runtime = lenient.runtime(tmp_path)
    bad = lenient.plugins.info("bad")
    assert (bad.state, bad.error, bad.values, bad.workers) == (PluginState.FAILED, error, [], [])
    assert OWN not in runtime.registry
    assert list(runtime.workers) == ["taken"]
    assert lenient.plugins.implementations("on_roles") == []


def test_reading_a_key_nobody_owns_is_reported(
    lenient: PluginHarness, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Also a key whose owner was refused: its values are forgotten."""
    nobody: ValueKey[int] = ValueKey("nobody_owns", int, "Declared by no plugin.")
    reads = (ROLES, OWN, nobody)
    lenient.register(with_workers(Worker("reader", forever, reads=reads)), "reader")
    lenient.register(plugin(roleserve_values=lambda: [OWN], roleserve_workers=raise_error), "own")
    runtime = lenient.runtime(tmp_path)
    reader = lenient.plugins.info("reader")
    expected = [
        f"its workers read value {name!r}, which no loaded plugin owns; "
        "they will fail when they read it"
        for name in ("nobody_owns", "own")
    ]
    assert (reader.state, reader.reads, reader.warnings) == (
        PluginState.LOADED,
        ["nobody_owns", "own", "roles"],
        expected,
    )
    logged = [(entry.level, entry.message) for entry in runtime.logtree.entries("runtime")]
    assert logged == [(logging.WARNING, f"plugin 'reader': {message}") for message in expected]


SHARED: ValueKey[str] = ValueKey("first_shared", str, "Owned by 'first'.")


@pytest.mark.parametrize(
    ("hooks", "line"),
    [
        pytest.param(
            {"p": {"roleserve_workers": lambda node: [Worker("a-b", forever)]}},
            "plugin 'p' (tests/test_runtime.py) failed: roleserve_workers raised "
            "InvalidRunnableNameError: invalid worker name 'a-b'; names must match "
            "^[a-z0-9_]{1,64}$ (the last part of its DN): call it 'a_b'",
            id="worker-name-with-a-dash",
        ),
        pytest.param(
            {"p": {"roleserve_workers": lambda node: [Worker("x", lazy_runnable("pkg.x:run"))]}},
            "plugin 'p' (tests/test_runtime.py) failed: roleserve_workers raised "
            "InvalidWorkerError: worker 'x': add doc=\"one line\" to its Worker(...), which "
            "roleserve plugins shows: its run is a lazy_runnable, whose docstring would be "
            "read only by importing its module",
            id="lazy-worker-without-doc",
        ),
        pytest.param(
            {
                "first": {"roleserve_values": lambda: [SHARED]},
                "second": {"roleserve_values": lambda: [SHARED]},
            },
            "plugin 'second' (tests/test_runtime.py) failed: roleserve_values raised "
            "DuplicateValueKeyError: value 'first_shared' is already owned by plugin 'first', "
            "which loaded first; a value has exactly one owner: name this plugin's key "
            "'second_first_shared', or read the one 'first' owns",
            id="key-owned-twice-blames-the-second",
        ),
    ],
)
def test_a_mistake_fails_the_strict_harness_with_one_line_naming_the_fix(
    plugin_manager: PluginHarness,
    tmp_path: Path,
    hooks: dict[str, dict[str, Callable[..., Any]]],
    line: str,
) -> None:
    for name, implementations in hooks.items():
        plugin_manager.register(plugin(**implementations), name)
    with pytest.raises(PluginLoadError) as caught:
        plugin_manager.runtime(tmp_path)
    assert str(caught.value) == line


def test_a_key_not_named_for_its_plugin_gives_a_warning(
    plugin_manager: PluginHarness, tmp_path: Path
) -> None:
    """Only a warning: a key of the core's values.py (local_control_plane, owned by the
    controlplane) is named for what it holds, and needs no prefix."""
    named: ValueKey[str] = ValueKey("p_named", str, "Named for its plugin.")
    bare: ValueKey[str] = ValueKey("status", str, "Named for nothing.")
    plugin_manager.register(
        plugin(roleserve_values=lambda: [named, bare, LOCAL_CONTROL_PLANE]), "p"
    )
    runtime = plugin_manager.runtime(tmp_path)
    warning = (
        "value 'status' does not begin with the plugin's name; name it 'p_status' so that "
        "no other plugin's value can take its name"
    )
    info = plugin_manager.plugins.info("p")
    assert (info.state, info.values, info.warnings) == (
        PluginState.LOADED,
        ["p_named", "status", "local_control_plane"],
        [warning],
    )
    logged = [(entry.level, entry.message) for entry in runtime.logtree.entries("runtime")]
    assert logged == [(logging.WARNING, f"plugin 'p': {warning}")]


def test_a_key_that_moved_out_of_the_core_keeps_its_name_without_a_warning(
    plugin_manager: PluginHarness, tmp_path: Path
) -> None:
    """pod_network was the core's (plugin API 1) and is the kubernetes plugin's now: the
    name the core chose for it needs no prefix still; any other bare name does."""
    pods: ValueKey[str] = ValueKey("pod_network", str, "Named by the core, once.")
    bare: ValueKey[str] = ValueKey("pod_networks", str, "Named for nothing.")
    plugin_manager.register(plugin(roleserve_values=lambda: [pods, bare]), "kube")
    plugin_manager.runtime(tmp_path)
    assert plugin_manager.plugins.info("kube").warnings == [
        "value 'pod_networks' does not begin with the plugin's name; name it "
        "'kube_pod_networks' so that no other plugin's value can take its name"
    ]


@pytest.mark.anyio
async def test_each_plugin_data_dir_exists_before_its_workers_start(
    plugin_manager: PluginHarness, node: StartNode, tmp_path: Path
) -> None:
    """Created when the node starts, mode 0700; a worker may write there at once."""
    seen: Value[bool] = Value()

    def roleserve_workers(node: NodeContext) -> list[Worker]:
        async def writer(ctx: RunContext) -> None:
            seen.set(node.data_dir.is_dir())
            ctx.signal_healthy()
            await anyio.sleep_forever()

        return [Worker("writer", writer)]

    plugin_manager.register(plugin(roleserve_workers=roleserve_workers), "p")
    runtime = plugin_manager.runtime(tmp_path)
    assert not (tmp_path / "plugins").exists()  # assembling writes nothing
    await node(runtime)
    assert await wait_for_value(seen) is True
    assert (tmp_path / "plugins/p").stat().st_mode & 0o777 == 0o700


def test_node_context(plugin_manager: PluginHarness, tmp_path: Path) -> None:
    """Each plugin's own: its data directory (not created), its config section (checked,
    defaults filled in, read-only), the node ID once the core sets it; roleserve_workers
    gets the same object."""
    contexts: list[NodeContext] = []

    def roleserve_workers(node: NodeContext) -> list[Worker]:
        contexts.append(node)
        return []

    settings = [
        Setting("greeting", str, "hello", "What to say."),
        Setting("times", int, 1, "How often."),
    ]
    plugin_manager.register(
        plugin(roleserve_workers=roleserve_workers, roleserve_settings=lambda: settings), "p"
    )
    plugin_manager.register(plugin(on_roles=lambda: None), "q")
    runtime = plugin_manager.runtime(tmp_path / "node", config={"p": {"greeting": "hi"}})
    p, q = runtime.context("p"), runtime.context("q")
    assert contexts == [p]
    assert (p.plugin, p.data_dir, dict(p.config)) == (
        "p",
        tmp_path / "node/plugins/p",
        {"greeting": "hi", "times": 1},
    )
    assert (q.plugin, q.data_dir, dict(q.config)) == ("q", tmp_path / "node/plugins/q", {})
    with pytest.raises(TypeError):
        p.config["times"] = 2  # type: ignore[index]  # read-only: plugins share nothing
    assert list(tmp_path.iterdir()) == []
    assert runtime.context("p") is p

    assert (p.node_id, q.node_id) == (None, None)
    runtime.registry.set(NODE_ID, "node-0123", by="core")
    assert (p.node_id, q.node_id) == ("node-0123", "node-0123")
    with pytest.raises(NotValueOwnerError):
        p.values.set(NODE_ID, "node-4567")


# -- hook dispatch ------------------------------------------------------------------------


@dataclass(frozen=True)
class Hook(Generic[T]):
    """One of the value hooks: its name, the value it follows, and values to set."""

    name: str
    key: ValueKey[T]
    values: tuple[T, ...]

    def implementation(self, body: Callable[[T, NodeContext], Any]) -> SimpleNamespace:
        """A plugin whose implementation of this hook is ``body(value, node)``."""
        if self.key is ROLES:
            return plugin(on_roles=lambda roles, node: body(roles, node))
        return plugin(on_curator_connection=lambda connection, node: body(connection, node))


HOOKS = [
    pytest.param(
        Hook(
            "on_roles",
            ROLES,
            tuple(NodeRoles(custom={f"r{index}": {}}) for index in range(5)),
        ),
        id="on_roles",
    ),
    pytest.param(
        Hook(
            "on_curator_connection",
            CURATOR_CONNECTION,
            tuple(
                CuratorConnection("node-1", f"node-{i}", f"127.0.0.{i}:7835", NO_CHANNEL)
                for i in range(5)
            ),
        ),
        id="on_curator_connection",
    ),
]


@pytest.mark.anyio
@pytest.mark.parametrize("hook", HOOKS)
async def test_each_plugin_is_called_with_its_own_context_in_order(
    plugin_manager: PluginHarness, node: StartNode, tmp_path: Path, hook: Hook[Any]
) -> None:
    """Sync and async implementations alike, on each change, one plugin after the other."""
    calls = Calls()

    async def later(value: Any, node: NodeContext) -> None:
        await anyio.lowlevel.checkpoint()
        calls.record((node, value))

    plugin_manager.register(hook.implementation(later), "first")
    plugin_manager.register(
        hook.implementation(lambda value, node: calls.record((node, value))), "second"
    )
    harness = await node(plugin_manager.runtime(tmp_path))
    first, second = harness.runtime.context("first"), harness.runtime.context("second")
    one, two = hook.values[:2]
    harness.set(hook.key, one)
    await calls.wait_calls(2)
    harness.set(hook.key, two)
    assert await calls.wait_calls(4) == [(first, one), (second, one), (first, two), (second, two)]


@pytest.mark.anyio
@pytest.mark.parametrize("hook", HOOKS)
async def test_calls_are_coalesced_and_one_at_a_time(
    plugin_manager: PluginHarness, node: StartNode, tmp_path: Path, hook: Hook[Any]
) -> None:
    """While the first call is held, three more values are set: the next round gets only
    the newest, and the second plugin is not called before the first returns."""
    calls = Calls()
    release = anyio.Event()

    async def held(value: Any, node: NodeContext) -> None:
        calls.record(("held", value))
        await release.wait()

    plugin_manager.register(hook.implementation(held), "held")
    plugin_manager.register(
        hook.implementation(lambda value, node: calls.record(("next", value))), "next"
    )
    harness = await node(plugin_manager.runtime(tmp_path))
    first, second, third, newest, last = hook.values
    harness.set(hook.key, first)
    await calls.wait_calls(1)
    for value in (second, third, newest):
        harness.set(hook.key, value)
    await anyio.wait_all_tasks_blocked()
    assert calls.log == [("held", first)]
    release.set()
    assert await calls.wait_calls(4) == [
        ("held", first),
        ("next", first),
        ("held", newest),
        ("next", newest),
    ]
    harness.set(hook.key, last)
    assert (await calls.wait_calls(6))[4:] == [("held", last), ("next", last)]


async def hang(value: Any, node: NodeContext) -> None:
    await anyio.sleep_forever()


def fail(value: Any, node: NodeContext) -> None:
    raise RuntimeError("broken")


@pytest.mark.anyio
@pytest.mark.parametrize("hook", HOOKS)
@pytest.mark.parametrize(
    ("broken", "error"),
    [(fail, "raised RuntimeError: broken"), (hang, "did not finish within 0.01s")],
    ids=["raises", "times-out"],
)
async def test_a_failing_implementation_is_counted_and_the_others_still_run(
    plugin_manager: PluginHarness,
    node: StartNode,
    tmp_path: Path,
    hook: Hook[Any],
    broken: Callable[[Any, NodeContext], Any],
    error: str,
) -> None:
    """Logged at root.hooks.<hook> and counted in hook_failures; the dispatcher stays
    healthy. (The fast implementation is sync, so the tiny timeout cannot catch it.)"""
    calls = Calls()
    plugin_manager.register(hook.implementation(broken), "broken")
    plugin_manager.register(hook.implementation(lambda value, node: calls.record(value)), "fine")
    harness = await node(plugin_manager.runtime(tmp_path, hook_timeout=0.01))
    dn = f"root.hooks.{hook.name}"
    for count, value in enumerate(hook.values[:2], start=1):
        harness.set(hook.key, value)
        await calls.wait_calls(count)
        assert plugin_manager.plugins.info("broken").hook_failures == {hook.name: count}
    assert calls.log == list(hook.values[:2])
    status = harness.status(dn)
    assert (status.state, status.failures, status.restarts) == (State.HEALTHY, 0, 0)
    logged = [(entry.level, entry.message) for entry in harness.runtime.logtree.entries(dn)]
    assert logged == [(logging.ERROR, f"plugin 'broken': {hook.name} {error}")] * 2
