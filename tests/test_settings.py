"""Plugin settings (``roleserve_core.settings``): the ``Setting`` record, and how the node
checks each ``[plugins.NAME]`` section of roleserve.toml against the declarations.

A refusal is all the operator gets before the node stops, so each message is compared
whole: one line with the file, the section, the key, what was expected and what to do.
The plugins are the small modules of ``tests/plugins/``: ``configurable`` declares one
setting of every kind, ``good`` declares none.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

import pytest

from roleserve_core import Setting
from roleserve_core.errors import ConfigError
from roleserve_core.plugin_loader import ENTRY_POINT_GROUP, PluginSelection, PluginSet
from roleserve_core.runtime import NodeRuntime, resolve_plugin_config
from roleserve_core.settings import toml_literal

PLUGINS_DIR = Path(__file__).parent / "plugins"
SOURCE = "/srv/node/roleserve.toml"
ENVIRONMENT = ("ROLESERVE_PLUGINS", "ROLESERVE_DISABLE_PLUGINS", "ROLESERVE_TRACE_HOOKS")

Load = Callable[..., PluginSet]


@pytest.fixture
def load(monkeypatch: pytest.MonkeyPatch) -> Load:
    """``load("good", environ={...})``: the built-ins and these test plugins."""
    monkeypatch.syspath_prepend(str(PLUGINS_DIR))
    for variable in ENVIRONMENT:
        monkeypatch.delenv(variable, raising=False)

    def load_plugins(*modules: str, environ: Mapping[str, str] = {}) -> PluginSet:
        return PluginSet.load(
            selection=PluginSelection.from_env(environ),
            entry_points=[EntryPoint(module, module, ENTRY_POINT_GROUP) for module in modules],
        )

    return load_plugins


def resolved(plugins: PluginSet, sections: Mapping[str, Mapping[str, Any]]) -> Any:
    return resolve_plugin_config(plugins, sections, SOURCE)


def refusal(plugins: PluginSet, sections: Mapping[str, Mapping[str, Any]]) -> str:
    with pytest.raises(ConfigError) as caught:
        resolved(plugins, sections)
    message = str(caught.value)
    assert "\n" not in message
    return message


CONFIGURABLE_DEFAULTS = {
    "greeting": "hello",
    "times": 1,
    "pause": 0.5,
    "loud": False,
    "names": [],
    "log_file": None,
}


# -- the record ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("setting", "type_name", "expected", "optional"),
    [
        (Setting("a", str, "x", "d"), "str", "a string", False),
        (Setting("a", int, 1, "d"), "int", "an integer", False),
        (Setting("a", float, 1, "d"), "float", "a number", False),
        (Setting("a", bool, True, "d"), "bool", "true or false", False),
        (Setting("a", list[str], ["x"], "d"), "list[str]", "a list of strings", False),
        (Setting("a", str, None, "d"), "str | None", "a string", True),
    ],
)
def test_a_setting_describes_its_type(
    setting: Setting[Any], type_name: str, expected: str, optional: bool
) -> None:
    assert (setting.type_name, setting.expected, setting.optional) == (
        type_name,
        expected,
        optional,
    )


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (("Lease", int, 1, "d"), r"setting name 'Lease' must match \^\[a-z\]"),
        (("lease-ttl", int, 1, "d"), "setting name 'lease-ttl' must match"),
        (("a", dict, {}, "d"), "setting 'a' has type <class 'dict'>; a setting is a str, int"),
        (("a", list[int], [], "d"), r"setting 'a' has type list\[int\]"),
        (("a", tuple, (), "d"), "setting 'a' has type <class 'tuple'>"),
        (("a", int, "10", "d"), "setting 'a': default '10' is not an integer"),
        (("a", int, True, "d"), "setting 'a': default True is not an integer"),
        (("a", list[str], [1], "d"), r"setting 'a': default \[1\] is not a list of strings"),
        (("a", int, 1, " "), "setting 'a' has no doc; say what it changes"),
    ],
)
def test_a_setting_the_core_could_not_check_is_refused(
    arguments: tuple[Any, ...], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        Setting(*arguments)


@pytest.mark.parametrize(
    ("kind", "value", "checked"),
    [
        (str, "x", "x"),
        (int, 7, 7),
        (float, 7, 7.0),
        (float, 0.25, 0.25),
        (bool, False, False),
        (list[str], ["a", "b"], ["a", "b"]),
        (list[str], [], []),
    ],
)
def test_check_accepts_the_type(kind: Any, value: object, checked: object) -> None:
    result = Setting("a", kind, None, "d").check(value)
    assert (result, type(result)) == (checked, type(checked))


@pytest.mark.parametrize(
    ("kind", "value"),
    [
        (str, 5),
        (str, ["x"]),
        (int, True),
        (int, 1.5),
        (int, "1"),
        (float, False),
        (float, "0.5"),
        (bool, 1),
        (bool, "true"),
        (list[str], "a"),
        (list[str], ["a", 1]),
        (list[str], {"a": "b"}),
    ],
)
def test_check_refuses_another_type(kind: Any, value: object) -> None:
    setting = Setting("a", kind, None, "d")
    with pytest.raises(TypeError, match=f"^a must be {setting.expected}$"):
        setting.check(value)


def test_a_float_default_given_as_an_integer_is_a_float() -> None:
    default = Setting("pause", float, 1, "d").default
    assert (default, type(default)) == (1.0, float)


def test_read_falls_back_to_the_default() -> None:
    """A context built by hand (a unit test's) has no defaults filled in."""
    lease: Setting[int] = Setting("lease_ttl", int, 10, "d")
    assert (lease.read({}), lease.read({"lease_ttl": 3})) == (10, 3)


@pytest.mark.parametrize(
    ("value", "literal"),
    [
        (None, "(not set)"),
        (True, "true"),
        (5, "5"),
        (0.5, "0.5"),
        ('say "hi"\\', '"say \\"hi\\"\\\\"'),
        (["a", "b"], '["a", "b"]'),
    ],
)
def test_toml_literal(value: object, literal: str) -> None:
    assert toml_literal(value) == literal


# -- what a node accepts ------------------------------------------------------------------


def test_every_loaded_plugin_gets_its_defaults(load: Load) -> None:
    """An empty section is the same as none, also for a plugin that takes no settings."""
    config = resolved(load("configurable", "good"), {"good": {}})
    assert {name: dict(values) for name, values in config.sections.items()} == {
        "core": {},
        "configurable": CONFIGURABLE_DEFAULTS,
        "good": {},
    }
    assert config.warnings == ()


def test_a_section_overrides_the_defaults_it_names(load: Load) -> None:
    section = {"greeting": "hi", "pause": 2, "loud": True, "log_file": "/var/log/x"}
    config = resolved(load("configurable"), {"configurable": section, "core": {}})
    assert dict(config.sections["configurable"]) == {
        **CONFIGURABLE_DEFAULTS,
        **section,
        "pause": 2.0,
    }


def test_the_checked_sections_are_read_only(load: Load) -> None:
    config = resolved(load("configurable"), {})
    with pytest.raises(TypeError):
        config.sections["configurable"]["times"] = 2


def test_a_list_default_is_each_configs_own(load: Load) -> None:
    """A plugin that appends to its list changes neither the declaration nor another
    runtime's config."""
    plugins = load("configurable")
    first = resolved(plugins, {}).sections["configurable"]["names"]
    first.append("mine")
    assert resolved(plugins, {}).sections["configurable"]["names"] == []
    assert plugins.info("configurable").settings[4].default == []


# -- what a node refuses ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        (
            "times",
            True,
            "times must be an integer, not true (How often it says it); correct it, or remove "
            "it for the default, 1",
        ),
        (
            "greeting",
            5,
            "greeting must be a string, not 5 (What the worker says); correct it, or remove it "
            'for the default, "hello"',
        ),
        (
            "names",
            ["a", 1],
            'names must be a list of strings, not ["a", 1] (Whom it greets); correct it, or '
            "remove it for the default, []",
        ),
        (
            "log_file",
            False,
            "log_file must be a string, not false (Where it logs; unset: nowhere); correct it, "
            "or remove it to leave it unset",
        ),
    ],
)
def test_a_wrong_type(load: Load, key: str, value: object, message: str) -> None:
    assert refusal(load("configurable"), {"configurable": {key: value}}) == (
        f"{SOURCE}: [plugins.configurable] {message}"
    )


def test_an_unknown_key(load: Load) -> None:
    assert refusal(load("configurable"), {"configurable": {"greting": "hi"}}) == (
        f"{SOURCE}: [plugins.configurable] has no setting 'greting' (did you mean "
        "'greeting'?); its settings are greeting, times, pause, loud, names, log_file"
    )


@pytest.mark.parametrize("plugin", ["good", "core"])
def test_a_plugin_without_settings_accepts_no_key(load: Load, plugin: str) -> None:
    assert refusal(load("good"), {plugin: {"verbose": True}}) == (
        f"{SOURCE}: [plugins.{plugin}] has no setting 'verbose': plugin {plugin!r} takes no "
        "settings; remove the key"
    )


def test_an_unknown_section(load: Load) -> None:
    assert refusal(load("configurable", "good"), {"god": {}}) == (
        f"{SOURCE}: [plugins.god] names no installed plugin (did you mean 'good'?); known "
        "plugins: configurable, core, good. Remove the section, install the plugin, or name "
        "it in ROLESERVE_DISABLE_PLUGINS if it is left out on purpose"
    )


def test_a_section_of_a_core_worker_plugin_is_refused(load: Load) -> None:
    """rolefetch acts for core and reads [plugins.core]: its own section would be read by
    nobody, so it names no plugin a section can configure."""
    assert refusal(load("good"), {"rolefetch": {}}) == (
        f"{SOURCE}: [plugins.rolefetch] names no installed plugin; known plugins: core, good. "
        "Remove the section, install the plugin, or name it in ROLESERVE_DISABLE_PLUGINS if it "
        "is left out on purpose"
    )


def test_an_unknown_section_is_refused_even_with_an_allow_list(load: Load) -> None:
    """The allow list says which installed plugins load; it does not excuse a typo."""
    plugins = load("good", environ={"ROLESERVE_PLUGINS": "good"})
    assert "[plugins.nosuch] names no installed plugin" in refusal(plugins, {"nosuch": {}})


# -- plugins absent on purpose, or broken -------------------------------------------------


@pytest.mark.parametrize(
    ("environ", "why"),
    [
        ({"ROLESERVE_DISABLE_PLUGINS": "configurable"}, "named in ROLESERVE_DISABLE_PLUGINS"),
        ({"ROLESERVE_PLUGINS": "good"}, "not named in ROLESERVE_PLUGINS"),
    ],
)
def test_a_section_of_a_blocked_plugin_is_ignored_with_a_warning(
    load: Load, environ: dict[str, str], why: str
) -> None:
    plugins = load("configurable", "good", environ=environ)
    config = resolved(plugins, {"configurable": {"times": "many"}})
    assert "configurable" not in config.sections
    assert config.warnings == (
        f"{SOURCE}: [plugins.configurable] is ignored: plugin 'configurable' is {why}",
    )


def test_a_section_of_a_disabled_plugin_that_is_not_installed_gives_a_warning(
    load: Load,
) -> None:
    """One roleserve.toml for many machines: a plugin left out here is not a typo."""
    plugins = load("good", environ={"ROLESERVE_DISABLE_PLUGINS": "kubernetes"})
    config = resolved(plugins, {"kubernetes": {"x": 1}})
    assert config.warnings == (
        f"{SOURCE}: [plugins.kubernetes] is ignored: plugin 'kubernetes' is named in "
        "ROLESERVE_DISABLE_PLUGINS (and not installed)",
    )


@pytest.mark.parametrize("broken", ["broken_import", "raising_settings"])
def test_a_section_of_a_plugin_that_failed_to_load_gives_a_warning(load: Load, broken: str) -> None:
    config = resolved(load(broken, "good"), {broken: {"x": 1}})
    assert broken not in config.sections
    assert config.warnings == (
        f"{SOURCE}: [plugins.{broken}] is not checked: plugin {broken!r} failed to load",
    )


# -- in the node runtime ------------------------------------------------------------------


def test_the_runtime_refuses_before_any_worker_is_collected(load: Load, tmp_path: Path) -> None:
    """roleserve_workers reads the config, so it must never see an unchecked one."""
    plugins = load("configurable")
    with pytest.raises(ConfigError, match=r"^/srv/node/roleserve.toml: \[plugins.configurable\]"):
        NodeRuntime(
            plugins, data_dir=tmp_path, config={"configurable": {"x": 1}}, config_source=SOURCE
        )
    assert plugins.info("configurable").workers == []


def test_the_runtime_logs_the_warnings(load: Load, tmp_path: Path) -> None:
    plugins = load("good", environ={"ROLESERVE_DISABLE_PLUGINS": "configurable"})
    runtime = NodeRuntime(plugins, data_dir=tmp_path, config={"configurable": {}})
    assert [entry.message for entry in runtime.logtree.entries("runtime")] == [
        "roleserve.toml: [plugins.configurable] is ignored: plugin 'configurable' is named in "
        "ROLESERVE_DISABLE_PLUGINS (and not installed)"
    ]


# -- allowed values -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        (
            "port",
            0,
            "port must be an integer from 1 to 65535, not 0 (The port it listens on); correct "
            "it, or remove it for the default, 7000",
        ),
        ("port", 65536, "port must be an integer from 1 to 65535, not 65536"),
        ("mode", "slow", 'mode must be one of "fast", "safe", not "slow" (How it works)'),
        ("spool", "spool", 'spool must be an absolute path, not "spool" (Where it queues)'),
        ("ratio", 1.5, "ratio must be a number from 0 to 1, not 1.5 (A share)"),
        ("low", -1, "low must be an integer of at least 0, not -1 (The lower mark)"),
    ],
)
def test_a_value_not_allowed_is_refused_as_a_wrong_type(
    load: Load, key: str, value: object, message: str
) -> None:
    assert refusal(load("checked"), {"checked": {key: value}}).startswith(
        f"{SOURCE}: [plugins.checked] {message}"
    )


def test_allowed_values_are_accepted(load: Load) -> None:
    sections = {"checked": {"port": 65535, "mode": "safe", "spool": "/q", "ratio": 1}}
    assert dict(resolved(load("checked"), sections).sections["checked"]) == {
        "port": 65535,
        "mode": "safe",
        "spool": "/q",
        "ratio": 1.0,
        "low": 1,
        "high": 2,
    }


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"minimum": 1}, "setting 'a': default 0 is below 1"),
        ({"maximum": -1}, "setting 'a': default 0 is above -1"),
        ({"choices": (1, 2)}, "setting 'a': default 0 is none of the choices"),
        ({"choices": ()}, "setting 'a': choices must be values of its type, at least one"),
        ({"choices": ("0",)}, "setting 'a': choices must be values of its type, at least one"),
        ({"predicate": bool}, "setting 'a': a predicate needs a requirement saying what it"),
        (
            {"predicate": bool, "requirement": "not 0"},
            "setting 'a': default 0 is not not 0",
        ),
    ],
)
def test_allowed_values_that_do_not_fit_are_refused(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=f"^{message}"):
        Setting("a", int, 0, "d", **options)


def test_a_range_needs_a_number() -> None:
    with pytest.raises(ValueError, match="a range needs an int or float setting"):
        Setting("a", str, "x", "d", minimum=1)


def test_an_optional_setting_checks_only_a_given_value() -> None:
    setting: Setting[int | None] = Setting("a", int, None, "d", minimum=1)
    assert setting.check(1) == 1
    with pytest.raises(ValueError, match=r"^a must be an integer of at least 1$"):
        setting.check(0)


def test_a_plugins_own_refusal_in_roleserve_workers_refuses_the_node(
    load: Load, tmp_path: Path
) -> None:
    """A check across settings stays the plugin's; its ConfigError stops the node as the
    core's would, naming the file, instead of leaving the node up without the plugin."""
    plugins = load("checked")
    with pytest.raises(ConfigError) as caught:
        NodeRuntime(
            plugins,
            data_dir=tmp_path,
            config={"checked": {"low": 3}},
            config_source=SOURCE,
        )
    assert str(caught.value) == f"{SOURCE}: [plugins.checked] low (3) must not be above high (2)"
