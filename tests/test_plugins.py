"""Loading plugins (``roleserve_core.plugin_loader``), and one end-to-end test per hook.

The test plugins are small modules in ``tests/plugins/``, found through entry points made
here exactly as installed plugins are found, so the loader's whole path runs; the plugins
installed in the environment stay out. Each hook has a ``test_hook_<name>`` test that shows
its documented behaviour from entry point to call.
"""

from __future__ import annotations

import importlib
import logging
import operator
import warnings
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from importlib.metadata import EntryPoint
from pathlib import Path
from types import SimpleNamespace
from typing import Any, TypeVar

import anyio
import pytest

from roleserve_core import NodeRoles, RunContext, Setting, State, ValueKey, Worker, hookimpl
from roleserve_core import builtin as core_plugin
from roleserve_core.errors import (
    EssentialPluginError,
    NotValueOwnerError,
    PluginAPIVersionError,
    PluginError,
    PluginLoadError,
)
from roleserve_core.plugin_loader import (
    BUILTIN_PLUGINS,
    ENTRY_POINT_GROUP,
    HookCall,
    PluginSelection,
    PluginSet,
    PluginState,
    log_old_names,
)
from roleserve_core.runtime import NodeRuntime
from roleserve_core.testing import NO_CHANNEL, NodeHarness, wait_for_value
from roleserve_core.values import CURATOR_CONNECTION, ROLES, CuratorConnection
from roleserve_core.version import core_version

CORE_WORKERS = [
    "rolefetch",
    "statuspush",
    "heartbeat",
    "nodemgmt",
    "nodewatch",
    "renewal",
    "revocations",
]
"""The built-in plugin core's workers, in the order they start."""

BUILTINS = [builtin.name for builtin in BUILTIN_PLUGINS]
"""core, then a plugin per worker of the core (CORE_WORKERS)."""
BUILTINS_LOADED = dict.fromkeys(BUILTINS, (PluginState.LOADED, None))

T = TypeVar("T")

PLUGINS_DIR = Path(__file__).parent / "plugins"
ENVIRONMENT = ("ROLESERVE_PLUGINS", "ROLESERVE_DISABLE_PLUGINS", "ROLESERVE_TRACE_HOOKS")

GOOD_ROLES: ValueKey[NodeRoles] = ValueKey("good_roles", NodeRoles, "tests/plugins/good.py")
GOOD_CONNECTION: ValueKey[CuratorConnection] = ValueKey(
    "good_connection", CuratorConnection, "tests/plugins/good.py"
)
"""good.py's keys, by name and type (a registry finds a key by those two)."""

TIMES: Setting[int] = Setting("times", int, 1, "How often.")

Load = Callable[..., PluginSet]
StartNode = Callable[..., Awaitable[NodeHarness]]
LOADED, FAILED, BLOCKED = PluginState.LOADED, PluginState.FAILED, PluginState.BLOCKED


def entry_point(module: str, name: str | None = None) -> EntryPoint:
    """The entry point an installed plugin ``name`` with hook module ``module`` would have."""
    return EntryPoint(name or module, module, ENTRY_POINT_GROUP)


@pytest.fixture
def load(monkeypatch: pytest.MonkeyPatch) -> Load:
    """``load("good", entry_point("no_api", "x"), strict=..., environ={...})``: the built-ins
    and these test plugins, selected by ``environ`` (default: none of the variables set)."""
    monkeypatch.syspath_prepend(str(PLUGINS_DIR))
    for variable in ENVIRONMENT:
        monkeypatch.delenv(variable, raising=False)

    def load_plugins(
        *plugins: str | EntryPoint, strict: bool = False, environ: Mapping[str, str] = {}
    ) -> PluginSet:
        return PluginSet.load(
            strict=strict,
            selection=PluginSelection.from_env(environ),
            entry_points=[p if isinstance(p, EntryPoint) else entry_point(p) for p in plugins],
        )

    return load_plugins


def states(plugins: PluginSet) -> dict[str, tuple[PluginState, str | None]]:
    """Each plugin's state and the reason it is blocked, in load order."""
    return {info.name: (info.state, info.reason) for info in plugins.infos()}


def plugin_log(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    """What the loader logged."""
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "roleserve.plugins"]


# -- loading ------------------------------------------------------------------------------


def test_builtins_load_first(load: Load) -> None:
    plugins = load(entry_point("good", "alpha"))
    core = plugins.info("core")
    assert plugins.loaded() == [*BUILTINS, "alpha"]
    assert (core.builtin, core.distribution, core.version, core.module) == (
        True,
        "roleserve-core",
        core_version(),
        "roleserve_core.builtin",
    )
    good = plugins.info("alpha")
    assert (good.builtin, good.state, good.module, good.error) == (False, LOADED, "good", None)
    assert (
        good.description
        == "A well-behaved test plugin: one value of its own per hook, and a gated worker."
    )
    assert good.hooks == [
        "on_curator_connection",
        "on_roles",
        "roleserve_values",
        "roleserve_workers",
    ]


ESSENTIAL = {
    "core": "it owns the node's values",
    "rolefetch": "without it the node never learns its roles",
    "statuspush": "without it the cluster does not learn the node's address",
    "heartbeat": "without it the cluster takes the node for dead",
    "nodewatch": "the connection to the curator finds curators through it",
    "renewal": "without it the node certificate expires and the node is cut off",
}


def test_the_builtins_are_core_then_a_plugin_per_core_worker() -> None:
    assert [builtin.name for builtin in BUILTIN_PLUGINS] == ["core", *CORE_WORKERS]
    assert {b.name: b.essential for b in BUILTIN_PLUGINS if b.essential} == ESSENTIAL


@pytest.mark.parametrize("name", sorted(ESSENTIAL))
def test_an_essential_builtin_refuses_to_be_disabled_and_says_why(load: Load, name: str) -> None:
    with pytest.raises(EssentialPluginError) as caught:
        load("good", environ={"ROLESERVE_DISABLE_PLUGINS": f"good,{name}"})
    assert str(caught.value) == (
        f"plugin {name!r} is essential and cannot be disabled: {ESSENTIAL[name]}; "
        "remove it from ROLESERVE_DISABLE_PLUGINS"
    )


def test_nodemgmt_and_revocations_can_be_disabled(load: Load, tmp_path: Path) -> None:
    blocked_workers = ("nodemgmt", "revocations")
    plugins = load(environ={"ROLESERVE_DISABLE_PLUGINS": ",".join(blocked_workers)})
    blocked = (BLOCKED, "named in ROLESERVE_DISABLE_PLUGINS")
    assert states(plugins) == {**BUILTINS_LOADED, "nodemgmt": blocked, "revocations": blocked}
    runtime = NodeRuntime(plugins, data_dir=tmp_path)
    assert list(runtime.workers) == [w for w in CORE_WORKERS if w not in blocked_workers]


def test_a_core_worker_plugin_acts_for_core(load: Load, tmp_path: Path) -> None:
    """Its worker writes the core's values and keeps its files where the core's are."""
    runtime = NodeRuntime(load(), data_dir=tmp_path)
    assert runtime.workers["rolefetch"][0] == "rolefetch"
    assert runtime.context("rolefetch") is runtime.context("core")
    assert runtime.context("rolefetch").data_dir == tmp_path / "plugins/core"
    assert runtime.registry.owner_of(ROLES) == "core"


async def reported(ctx: RunContext) -> None:
    """The test's own statuspush."""


def test_a_test_puts_a_plugin_of_its_own_in_place_of_a_builtin(tmp_path: Path) -> None:
    """As pytest's default_plugins: the tuple without statuspush, and a plugin of the test's
    own under its name, whose worker runs at statuspush's DN."""
    builtins = tuple(b for b in BUILTIN_PLUGINS if b.name != "statuspush")
    plugins = PluginSet.load(
        strict=True, selection=PluginSelection(), entry_points=[], builtins=builtins
    )
    mine = SimpleNamespace(
        roleserve_workers=hookimpl(lambda node: [Worker("statuspush", reported)])
    )
    assert plugins.register(mine, "statuspush").state is LOADED
    runtime = NodeRuntime(plugins, data_dir=tmp_path)
    assert [name for name, _ in runtime.workers.items()][-1] == "statuspush"
    plugin, worker = runtime.workers["statuspush"]
    assert (plugin, worker.run, plugins.info(plugin).builtin) == ("statuspush", reported, False)
    assert runtime.context("statuspush").data_dir == tmp_path / "plugins/statuspush"


@pytest.mark.parametrize(
    ("module", "error", "exception"),
    [
        pytest.param(
            "broken_import",
            "import failed: ModuleNotFoundError: "
            "No module named 'roleserve_test_missing_dependency'",
            "ModuleNotFoundError",
            id="import-error",
        ),
        pytest.param(
            "wrong_api",
            "was written for plugin API 2; this roleserve-core accepts plugin API 1. Install "
            "a version of the plugin made for it.",
            None,
            id="other-api-version",
        ),
        pytest.param(
            "no_api",
            "does not declare the plugin API it was written for; add the line "
            "`ROLESERVE_PLUGIN_API = 1` to tests/plugins/no_api.py",
            None,
            id="no-api-version",
        ),
        pytest.param(
            "bad_signature",
            "roleserve_workers(node, cluster) asks for 'cluster', which the hook does not "
            "pass; define it as roleserve_workers(node), leaving out the arguments it does "
            "not use",
            "PluginValidationError",
            id="invalid-hook-signature",
        ),
    ],
)
def test_a_broken_plugin_is_recorded_and_the_others_load(
    load: Load, caplog: pytest.LogCaptureFixture, module: str, error: str, exception: str | None
) -> None:
    plugins = load(module, entry_point("good", "zulu"))  # loaded after the broken one
    info = plugins.info(module)
    assert (info.state, info.error) == (FAILED, error)
    if exception is None:  # refused by the loader: no exception, no traceback
        assert info.traceback is None
    else:
        assert info.traceback is not None
        assert f"{exception}: " in info.traceback
    assert plugins.loaded() == [*BUILTINS, "zulu"]
    assert plugins.manager.get_plugin(module) is None
    where = f"plugin {module!r}" if info.file is None else f"plugin {module!r} ({info.file})"
    assert plugin_log(caplog) == [(logging.ERROR, f"{where} failed: {error}")]


@pytest.mark.parametrize(
    ("module", "raised"),
    [
        ("broken_import", PluginLoadError),
        ("bad_signature", PluginLoadError),
        ("raising_hookspecs", PluginLoadError),
        ("wrong_api", PluginAPIVersionError),
        ("no_api", PluginAPIVersionError),
        ("api_zero", PluginAPIVersionError),
    ],
)
def test_strict_mode_raises(load: Load, module: str, raised: type[PluginError]) -> None:
    with pytest.raises(raised, match=f"plugin '{module}'"):
        load("good", module, strict=True)


def test_strict_mode_keeps_the_cause(load: Load) -> None:
    with pytest.raises(PluginLoadError) as caught:
        load("broken_import", strict=True)
    assert isinstance(caught.value.__cause__, ModuleNotFoundError)


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        pytest.param(
            {},
            {**BUILTINS_LOADED, "broken_import": (FAILED, None), "good": (LOADED, None)},
            id="no-selection",
        ),
        pytest.param(
            {"ROLESERVE_PLUGINS": "good"},
            {
                **BUILTINS_LOADED,
                "broken_import": (BLOCKED, "not named in ROLESERVE_PLUGINS"),
                "good": (LOADED, None),
            },
            id="allow-list-keeps-builtins",
        ),
        pytest.param(
            {"ROLESERVE_PLUGINS": ""},
            {
                **BUILTINS_LOADED,
                "broken_import": (BLOCKED, "not named in ROLESERVE_PLUGINS"),
                "good": (BLOCKED, "not named in ROLESERVE_PLUGINS"),
            },
            id="empty-allow-list",
        ),
        pytest.param(
            {"ROLESERVE_DISABLE_PLUGINS": " broken_import , "},
            {
                **BUILTINS_LOADED,
                "broken_import": (BLOCKED, "named in ROLESERVE_DISABLE_PLUGINS"),
                "good": (LOADED, None),
            },
            id="block-list",
        ),
        pytest.param(
            {"ROLESERVE_PLUGINS": "good,broken_import", "ROLESERVE_DISABLE_PLUGINS": "good"},
            {
                **BUILTINS_LOADED,
                "broken_import": (FAILED, None),
                "good": (BLOCKED, "named in ROLESERVE_DISABLE_PLUGINS"),
            },
            id="block-list-wins",
        ),
    ],
)
def test_selection(load: Load, environ: dict[str, str], expected: dict[str, Any]) -> None:
    """A blocked plugin is not even imported: broken_import would fail if it were."""
    plugins = load("good", "broken_import", environ=environ)
    assert states(plugins) == expected
    assert plugins.warnings == []


def test_selection_names_that_are_not_installed_give_warnings(load: Load) -> None:
    plugins = load(
        "good",
        environ={"ROLESERVE_PLUGINS": "good,core,gone", "ROLESERVE_DISABLE_PLUGINS": "missing"},
    )
    assert plugins.warnings == [
        "ROLESERVE_PLUGINS names 'gone', which is not installed",
        "ROLESERVE_DISABLE_PLUGINS names 'missing', which is not installed",
    ]
    assert plugins.loaded() == [*BUILTINS, "good"]


def test_selection_reads_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROLESERVE_PLUGINS", "a, b")
    monkeypatch.setenv("ROLESERVE_DISABLE_PLUGINS", "c")
    assert PluginSelection.from_env() == PluginSelection(frozenset({"a", "b"}), frozenset({"c"}))
    monkeypatch.delenv("ROLESERVE_PLUGINS")
    monkeypatch.delenv("ROLESERVE_DISABLE_PLUGINS")
    assert PluginSelection.from_env() == PluginSelection(None, frozenset())


def test_duplicate_entry_point_names_keep_the_first(load: Load) -> None:
    plugins = load(entry_point("good", "twin"), entry_point("no_api", "twin"))
    assert (plugins.info("twin").module, plugins.info("twin").state) == ("good", LOADED)
    assert plugins.warnings == [
        "plugin name 'twin' of no_api is already used by good; the second one is ignored"
    ]


def test_an_entry_point_cannot_take_a_builtin_name(load: Load) -> None:
    plugins = load(entry_point("good", "core"))
    assert plugins.loaded() == BUILTINS
    assert plugins.info("core").module == "roleserve_core.builtin"
    assert plugins.warnings == [
        "plugin name 'core' of good is already used by roleserve-core; the second one is ignored"
    ]


def test_register_refuses_a_taken_name(load: Load) -> None:
    plugins = load("good")
    with pytest.raises(PluginError, match="a plugin named 'good' is already registered"):
        plugins.register(object(), "good")


def unknown_hook_warning(hook: str, meant: str | None = None) -> str:
    guess = "misspelled?" if meant is None else f"did you mean {meant!r}?"
    return (
        f"implements {hook!r}, which no loaded plugin defines; {guess} "
        "(mark it @hookimpl(optionalhook=True) if it belongs to an optional plugin)"
    )


def test_a_hook_nobody_specified_gives_a_warning_unless_optional(load: Load) -> None:
    """typo_hook implements on_role (a typo) and, marked optional, a hook of an absent plugin."""
    info = load("typo_hook").info("typo_hook")
    assert (info.state, info.warnings) == (LOADED, [unknown_hook_warning("on_role", "on_roles")])


def test_a_misspelled_hook_fails_strict_mode_with_the_hook_meant(load: Load) -> None:
    with pytest.raises(PluginLoadError) as caught:
        load("good", "typo_hook", strict=True)
    assert str(caught.value) == (
        "plugin 'typo_hook' (tests/plugins/typo_hook.py): "
        + unknown_hook_warning("on_role", "on_roles")
    )


def test_roleserve_add_hookspecs_that_raises_fails_the_plugin(load: Load) -> None:
    plugins = load("good", "raising_hookspecs")
    info = plugins.info("raising_hookspecs")
    assert (info.state, info.error) == (
        FAILED,
        "roleserve_add_hookspecs raised RuntimeError: hookspecs are broken",
    )
    assert info.traceback is not None
    assert "RuntimeError: hookspecs are broken" in info.traceback
    assert plugins.loaded() == [*BUILTINS, "good"]
    assert plugins.manager.get_plugin("raising_hookspecs") is None


def no_values() -> list[ValueKey[Any]]:
    return []


def test_implementations_follow_load_order(load: Load) -> None:
    """Built-ins, then entry points by name, then what is registered later."""
    plugins = load(entry_point("good", "b"), entry_point("raising_workers", "a"))
    late = plugins.register(SimpleNamespace(roleserve_values=hookimpl(no_values)), "late")
    assert late.state is LOADED
    assert [info.name for info in plugins.infos()] == [*BUILTINS, "a", "b", "late"]
    assert plugins.loaded() == [*BUILTINS, "a", "b", "late"]
    calls = plugins.implementations("roleserve_values")
    assert [(call.plugin, call.hook) for call in calls] == [
        ("core", "roleserve_values"),
        ("a", "roleserve_values"),
        ("b", "roleserve_values"),
        ("late", "roleserve_values"),
    ]
    assert [call.plugin for call in plugins.implementations("on_roles", only="b")] == ["b"]
    assert plugins.implementations("on_roles", only="a") == []
    assert plugins.implementations("no_such_hook") == []


@pytest.mark.parametrize("setting", [None, "0", "1"])
def test_trace_hooks(
    load: Load,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    setting: str | None,
) -> None:
    caplog.set_level(logging.INFO, logger="roleserve.hooks")
    if setting is not None:
        monkeypatch.setenv("ROLESERVE_TRACE_HOOKS", setting)
    plugins = load("adds_hook", "uses_hook")
    manager = repr(plugins.manager)
    [greet] = plugins.implementations("roleserve_greeting")
    assert greet(name="ada") == "hello ada"
    traced = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "roleserve.hooks"]
    if setting == "1":
        assert traced == [
            (logging.INFO, f"adds_hook → roleserve_add_hookspecs({{'plugin_manager': {manager}}})"),
            (logging.INFO, "adds_hook ← roleserve_add_hookspecs: None"),
            (logging.INFO, "uses_hook → roleserve_greeting({'name': 'ada'})"),
            (logging.INFO, "uses_hook ← roleserve_greeting: 'hello ada'"),
        ]
    else:
        assert traced == []


# -- one test per hook --------------------------------------------------------------------


@pytest.mark.parametrize(
    "names",
    [("a", "b"), ("b", "a")],
    ids=["implemented-before-defined", "defined-before-implemented"],
)
def test_hook_roleserve_add_hookspecs(load: Load, names: tuple[str, str]) -> None:
    """adds_hook defines roleserve_greeting; uses_hook implements it, loaded before or after.

    Without adds_hook, uses_hook's implementation is a hook nobody defines.
    """
    user, provider = names
    plugins = load(entry_point("uses_hook", user), entry_point("adds_hook", provider))
    assert [(info.name, info.state, info.warnings) for info in plugins.infos()] == [
        *((name, LOADED, []) for name in BUILTINS),
        ("a", LOADED, []),
        ("b", LOADED, []),
    ]
    assert plugins.info(provider).hooks == ["roleserve_add_hookspecs"]
    assert plugins.info(user).hooks == ["roleserve_greeting"]
    assert plugins.manager.hook.roleserve_greeting(name="bob") == ["hello bob"]

    alone = load("uses_hook").info("uses_hook")
    assert alone.warnings == [unknown_hook_warning("roleserve_greeting")]


def test_the_core_declares_its_values_in_builtin_and_the_old_place_warns() -> None:
    """The core's ``roleserve_values`` is its plugin's (``builtin``), so ``values`` only
    declares keys; the hook's old place still finds it, warning, and stays out of ``dir()``
    (pluggy, walking the module, sees no hook there)."""
    old_place = importlib.import_module("roleserve_core.values")
    with pytest.warns(
        DeprecationWarning,
        match=r"^roleserve_core\.values\.roleserve_values has moved: import roleserve_values "
        r"from roleserve_core\.builtin;",
    ):
        assert old_place.roleserve_values is core_plugin.roleserve_values
    assert "roleserve_values" not in dir(old_place)


def test_hook_roleserve_values(load: Load, tmp_path: Path) -> None:
    """A plugin owns the keys it returns: it alone may set them, anyone may read them. One
    that raises is failed and unloaded, and the node assembles without it."""
    plugins = load("good", "raising_values")
    runtime = NodeRuntime(plugins, data_dir=tmp_path)

    assert plugins.info("good").values == ["good_roles", "good_connection"]
    core = [key.name for key in core_plugin.roleserve_values()]
    assert [info.name for info in runtime.registry.entries()] == sorted(
        [*core, "good_connection", "good_roles"]
    )
    assert runtime.registry.owner_of(GOOD_ROLES) == "good"
    runtime.context("good").values.set(GOOD_ROLES, NodeRoles())
    assert runtime.context("core").values.get_nowait(GOOD_ROLES) == NodeRoles()
    with pytest.raises(NotValueOwnerError, match="it is owned by 'good'"):
        runtime.context("core").values.set(GOOD_ROLES, NodeRoles())

    failed = plugins.info("raising_values")
    assert (failed.state, failed.error, failed.values) == (
        FAILED,
        "roleserve_values raised RuntimeError: values are broken",
        [],
    )
    assert plugins.loaded() == [*BUILTINS, "good"]


@pytest.mark.anyio
async def test_hook_roleserve_settings(load: Load, node: StartNode, tmp_path: Path) -> None:
    """A plugin's settings are recorded at load; its worker gets the section of
    roleserve.toml checked, converted and filled in with the defaults. One whose
    roleserve_settings raises is failed and unloaded, and its section is not checked."""
    plugins = load("configurable", "raising_settings")
    configurable = importlib.import_module("configurable")  # loaded from tests/plugins
    assert plugins.info("configurable").settings == configurable.SETTINGS
    failed = plugins.info("raising_settings")
    assert (failed.state, failed.error) == (
        FAILED,
        "roleserve_settings raised RuntimeError: settings are broken",
    )
    config = {"configurable": {"times": 3, "pause": 2, "names": ["a", "b"]}}
    runtime = NodeRuntime(plugins, data_dir=tmp_path, config=config)
    harness = await node(runtime)
    seen = await wait_for_value(harness.runtime.registry.read(configurable.SEEN, "test"))
    assert dict(seen) == {
        "greeting": "hello",
        "times": 3,
        "pause": 2.0,
        "loud": False,
        "names": ["a", "b"],
        "log_file": None,
    }
    assert isinstance(seen["pause"], float)
    assert plugins.loaded() == [*BUILTINS, "configurable"]


@pytest.mark.parametrize(
    ("declared", "error"),
    [
        (
            lambda: ["lease_ttl"],
            "roleserve_settings raised TypeError: roleserve_settings must "
            "return Setting objects, got 'lease_ttl'",
        ),
        (
            lambda: [TIMES, TIMES],
            "roleserve_settings raised ValueError: setting 'times' is declared twice",
        ),
    ],
)
def test_a_broken_settings_declaration_fails_the_plugin(
    load: Load, declared: Callable[[], list[Any]], error: str
) -> None:
    plugins = load()
    info = plugins.register(SimpleNamespace(roleserve_settings=hookimpl(declared)), "broken")
    assert (info.state, info.error, info.settings) == (FAILED, error, [])
    assert plugins.loaded() == BUILTINS


@pytest.mark.anyio
async def test_hook_roleserve_workers(load: Load, node: StartNode, tmp_path: Path) -> None:
    """Each worker runs at root.role.<name> while its predicate holds. A plugin whose
    roleserve_workers raises runs no worker and loses the values it declared."""
    plugins = load("good", "raising_workers")
    harness = await node(NodeRuntime(plugins, data_dir=tmp_path))
    good, failed = plugins.info("good"), plugins.info("raising_workers")
    assert (good.workers, good.reads) == (["good_worker"], ["roles"])
    assert (failed.state, failed.error, failed.values, failed.workers) == (
        FAILED,
        "roleserve_workers raised RuntimeError: workers are broken",
        [],
        [],
    )
    assert list(harness.runtime.workers) == [*CORE_WORKERS, "good_worker"]
    assert ValueKey("raising_workers_state", str, "") not in harness.runtime.registry

    dn = "root.role.good_worker"
    waiting = await harness.wait_status(dn, lambda status: status.note != "")
    assert (waiting.state, waiting.note) == (State.NEW, "waiting for its roles")
    harness.set_roles(NodeRoles(custom={"good": {}}))
    await harness.wait_state(dn, State.HEALTHY)
    harness.set_roles(NodeRoles())
    stopped = await harness.wait_status(dn, lambda status: status.note != "")
    assert (stopped.state, stopped.restarts, stopped.failures) == (State.NEW, 1, 0)


async def check_value_hook(
    load: Load,
    node: StartNode,
    tmp_path: Path,
    hook: str,
    source: ValueKey[T],
    seen: ValueKey[T],
    values: list[T],
) -> None:
    """Set ``source`` to each of ``values``: good's ``hook`` records each in ``seen``;
    failing_hooks, called first, raises each time, is logged and counted, and the
    dispatcher stays healthy."""
    plugins = load("failing_hooks", "good")
    harness = await node(NodeRuntime(plugins, data_dir=tmp_path))
    recorded = harness.runtime.registry.read(seen, "test")
    for count, value in enumerate(values, start=1):
        harness.set(source, value)
        await wait_for_value(recorded, partial(operator.eq, value))
        assert plugins.info("failing_hooks").hook_failures == {hook: count}
    dispatcher = harness.status(f"root.hooks.{hook}")
    assert (dispatcher.state, dispatcher.failures) == (State.HEALTHY, 0)
    logged = harness.runtime.logtree.entries(f"root.hooks.{hook}")
    message = f"plugin 'failing_hooks': {hook} raised RuntimeError: {hook} is broken"
    assert [(entry.level, entry.message) for entry in logged] == [(logging.ERROR, message)] * len(
        values
    )
    assert all(f"RuntimeError: {hook} is broken" in (entry.exc_text or "") for entry in logged)


@pytest.mark.anyio
async def test_hook_on_roles(load: Load, node: StartNode, tmp_path: Path) -> None:
    """Called with the new roles on each change; good's implementation is async."""
    roles = [NodeRoles(), NodeRoles(custom={"good": {}}), NodeRoles(custom={"other": {}})]
    await check_value_hook(load, node, tmp_path, "on_roles", ROLES, GOOD_ROLES, roles)


@pytest.mark.anyio
async def test_hook_on_curator_connection(load: Load, node: StartNode, tmp_path: Path) -> None:
    """Called with the new connection on each change (a leader change); good's is sync."""
    connections = [
        CuratorConnection("node-1", "node-1", "127.0.0.11:7835", NO_CHANNEL),
        CuratorConnection("node-1", "node-2", "127.0.0.12:7835", NO_CHANNEL),
        CuratorConnection("node-1", "node-3", "127.0.0.13:7835", NO_CHANNEL),
    ]
    await check_value_hook(
        load,
        node,
        tmp_path,
        "on_curator_connection",
        CURATOR_CONNECTION,
        GOOD_CONNECTION,
        connections,
    )


@pytest.mark.anyio
async def test_trace_hooks_logs_what_an_async_implementation_returns(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def double(x: int) -> int:
        await anyio.lowlevel.checkpoint()
        return 2 * x

    caplog.set_level(logging.INFO, logger="roleserve.hooks")
    call = HookCall("p", "double", double, ("x",), trace=True)
    assert await call(x=21) == 42
    assert [r.getMessage() for r in caplog.records if r.name == "roleserve.hooks"] == [
        "p → double({'x': 21})",
        "p ← double: 42",
    ]


def test_an_old_name_used_after_the_import_is_logged_once_per_place(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A plugin that looks up a moved name at run time (``keys.ROLES`` in a function): the
    node logs it at WARNING, once for that line however often it runs, where Python alone
    shows a DeprecationWarning outside ``__main__`` to nobody."""
    from roleserve_core import keys

    logger = logging.getLogger("test.old_names")
    monkeypatch.setattr(warnings, "showwarning", warnings.showwarning)  # put back after
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # as outside __main__
        log_old_names(logger)
        with caplog.at_level(logging.WARNING, logger=logger.name):
            for _ in range(3):
                assert keys.ROLES is ROLES
    said = [record for record in caplog.records if record.name == logger.name]
    assert [record.levelno for record in said] == [logging.WARNING]
    source = Path(__file__).read_text().splitlines()
    place = 1 + next(i for i, line in enumerate(source) if line.endswith("keys.ROLES is ROLES"))
    assert said[0].getMessage() == (
        f"{__file__}:{place}: roleserve_core.keys.ROLES has moved: "
        "import ROLES from roleserve_core; the old name works while roleserve-core accepts "
        "plugin API 1"
    )
