"""A plugin's settings as one frozen dataclass (``roleserve_core.settingsclass``): each
field declared once with ``setting`` or ``port_setting`` gives both the ``Setting`` records
the ``roleserve_settings`` hook returns and the typed object built from a checked config.

mypy checks this file too: the ``assert_type`` lines fail it if a field's type is not the
annotation's, and ``setting``'s overloads make a default (or a conversion's result) that does
not fit the annotation a mypy error.
"""

from __future__ import annotations

import dataclasses
import datetime
from dataclasses import dataclass
from pathlib import Path
from typing import Any, assert_type

import pytest

from roleserve_core import (
    ConfigError,
    PluginSettings,
    Setting,
    former_setting_constants,
    hookimpl,
    port_setting,
    setting,
)
from roleserve_core._moved import PluginAPIDeprecationWarning
from roleserve_core.settingsclass import Allowed
from roleserve_core.testing import PluginHarness


@dataclass(frozen=True)
class ExampleSettings(PluginSettings):
    """One field of each way to declare one."""

    target: Path = setting(
        "target",
        str,
        "/var/backups",
        "Where backups go (absolute path).",
        predicate=lambda path: Path(path).is_absolute(),
        requirement="an absolute path",
        convert=Path,
    )
    port: int = port_setting("port", 7000, "The port it listens on.")
    metrics_port: int = port_setting(
        "metrics_port", 0, "Its metrics port; 0: no metrics.", allow_zero=True
    )
    interval: datetime.timedelta = setting(
        "interval",
        float,
        60,
        "Seconds between two backups.",
        minimum=1,
        convert=lambda seconds: datetime.timedelta(seconds=seconds),
    )
    spool: Path | None = setting(
        "spool",
        str,
        "",
        "A spool directory; empty: none.",
        convert=lambda path: Path(path) if path else None,
    )
    label: str | None = setting("label", str, None, "A label; unset: none.")
    tags: list[str] = setting("tags", list[str], ["daily"], "Tags of each backup.")
    mode: str = setting("mode", str, "fast", "How.", choices=("fast", "safe"))


def test_each_field_declares_its_setting_in_field_order() -> None:
    declared = ExampleSettings.declared()
    assert [s.name for s in declared] == [f.name for f in dataclasses.fields(ExampleSettings)]
    assert [(s.type_name, s.default) for s in declared] == [
        ("str", "/var/backups"),
        ("int", 7000),
        ("int", 0),
        ("float", 60.0),  # the core's record: the file's type and value
        ("str", ""),
        ("str | None", None),
        ("list[str]", ["daily"]),
        ("str", "fast"),
    ]
    assert [s.allowed for s in declared[:4]] == [
        "an absolute path",
        "an integer from 1 to 65535",
        "an integer from 0 to 65535",
        "a number of at least 1",
    ]
    assert declared[-1].choices == ("fast", "safe")
    assert declared[0].doc == "Where backups go (absolute path)."


def test_the_field_defaults_are_the_settings_defaults_converted() -> None:
    defaults = ExampleSettings()
    assert defaults == ExampleSettings.of({})
    assert defaults == ExampleSettings(
        Path("/var/backups"),
        7000,
        0,
        datetime.timedelta(seconds=60),
        None,
        None,
        ["daily"],
        "fast",
    )


def test_of_reads_each_value_and_converts_it() -> None:
    config = {"target": "/srv/backups", "port": 8000, "interval": 5.0, "spool": "/var/spool/b"}
    settings = ExampleSettings.of(config)
    assert settings == ExampleSettings(
        Path("/srv/backups"), 8000, 0, datetime.timedelta(seconds=5), Path("/var/spool/b")
    )
    # mypy sees each field as its annotation says, not as the file's type.
    assert_type(settings.target, Path)
    assert_type(settings.interval, datetime.timedelta)
    assert_type(settings.spool, Path | None)
    assert_type(settings.port, int)
    assert_type(settings.label, str | None)
    assert_type(settings.tags, list[str])
    assert settings.target.is_absolute()
    assert settings.interval.total_seconds() + settings.port == 8005


def test_of_checks_nothing_itself() -> None:
    """The core checked a node's config; a hand-made one (a test's) passes as it is."""
    assert ExampleSettings.of({"port": 0}).port == 0


def test_the_object_is_frozen() -> None:
    settings = ExampleSettings()
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.port = 1  # type: ignore[misc]


def test_a_list_default_is_each_objects_own() -> None:
    first, second = ExampleSettings(), ExampleSettings.of({})
    first.tags.append("weekly")
    assert second.tags == ["daily"] == ExampleSettings().tags
    assert ExampleSettings.declared()[6].default == ["daily"]


def test_the_core_checks_a_port_and_the_other_fields(tmp_path: Path) -> None:
    """Declared through the hook, the fields' records are checked as any ``Setting``."""

    class Plugin:
        @staticmethod
        @hookimpl
        def roleserve_settings() -> list[Setting[Any]]:
            return list(ExampleSettings.declared())

    harness = PluginHarness()
    harness.register(Plugin, "example")
    for key, value, allowed in [
        ("port", 0, "an integer from 1 to 65535"),
        ("port", 65536, "an integer from 1 to 65535"),
        ("metrics_port", -1, "an integer from 0 to 65535"),
        ("target", "relative", "an absolute path"),
    ]:
        with pytest.raises(ConfigError, match=rf"\[plugins.example\] {key} must be {allowed},"):
            harness.runtime(tmp_path, config={"example": {key: value}})
    runtime = harness.runtime(tmp_path, config={"example": {"metrics_port": 0, "port": 65535}})
    assert ExampleSettings.of(runtime.config["example"]).port == 65535


def test_allowed_holds_the_keywords_of_setting() -> None:
    """``setting`` passes them on to ``Setting``; a keyword added there belongs here."""
    fields = [field.name for field in dataclasses.fields(Setting)]
    assert fields[:4] == ["name", "type", "default", "doc"]
    assert list(Allowed.__annotations__) == fields[4:]


def test_a_declaration_the_core_could_not_check_is_refused_at_once() -> None:
    with pytest.raises(ValueError, match="default 0 is below 1"):
        port_setting("port", 0, "The port.")
    with pytest.raises(ValueError, match="setting name 'Port'"):
        setting("Port", int, 1, "The port.")


def test_a_class_that_is_not_a_frozen_dataclass_is_refused() -> None:
    @dataclass
    class Mutable(PluginSettings):
        port: int = port_setting("port", 7000, "The port.")

    class Plain(PluginSettings):
        pass

    for cls in (Mutable, Plain):
        with pytest.raises(TypeError, match=r"must be a @dataclass\(frozen=True\)"):
            cls.declared()


def test_a_field_not_declared_with_setting_is_refused() -> None:
    @dataclass(frozen=True)
    class Undeclared(PluginSettings):
        port: int = port_setting("port", 7000, "The port.")
        other: int = 3

    with pytest.raises(TypeError, match=r"Undeclared.other is not declared with setting\(\)"):
        Undeclared.of({})


def test_a_setting_declared_twice_is_refused() -> None:
    @dataclass(frozen=True)
    class Twice(PluginSettings):
        port: int = port_setting("port", 7000, "The port.")
        again: int = port_setting("port", 7001, "The port again.")

    with pytest.raises(TypeError, match="declares setting 'port' twice"):
        Twice.declared()


def test_a_record_is_found_by_its_setting_name() -> None:
    assert ExampleSettings.record("port") is ExampleSettings.declared()[1]
    with pytest.raises(KeyError, match="declares no setting 'bogus'"):
        ExampleSettings.record("bogus")


def test_a_former_constant_answers_with_its_record_and_a_warning() -> None:
    """A settings module whose constants (``TARGET = Setting("target", ...)``) became fields
    still answers for them, each the very record ``declared()`` holds."""
    getattr_ = former_setting_constants(
        "example.settings", ExampleSettings, renamed={"METRICS_PORT_SETTING": "metrics_port"}
    )
    with pytest.warns(PluginAPIDeprecationWarning, match=r"ExampleSettings.record\('target'\)"):
        assert getattr_("TARGET") is ExampleSettings.record("target")
    with pytest.warns(PluginAPIDeprecationWarning, match=r"example.settings.METRICS_PORT_SETTING"):
        assert getattr_("METRICS_PORT_SETTING") is ExampleSettings.record("metrics_port")
    with pytest.raises(AttributeError, match=r"'example\.settings' has no attribute 'TARGETS'"):
        getattr_("TARGETS")


def test_only_the_constants_a_module_had_answer() -> None:
    """Given the constants the module declared, a setting added since (``port``, here) gets
    none, nor does a renamed one under its name in capitals."""
    getattr_ = former_setting_constants(
        "example.settings",
        ExampleSettings,
        renamed={"METRICS_PORT_SETTING": "metrics_port"},
        constants=["TARGET"],
    )
    with pytest.warns(PluginAPIDeprecationWarning):
        assert getattr_("TARGET") is ExampleSettings.record("target")
    for never in ("PORT", "METRICS_PORT"):
        with pytest.raises(AttributeError, match=f"has no attribute '{never}'"):
            getattr_(never)


def test_a_former_constant_of_no_setting_is_refused_at_once() -> None:
    with pytest.raises(TypeError, match="former constant TARGETS names no setting"):
        former_setting_constants("example.settings", ExampleSettings, constants=["TARGETS"])
    with pytest.raises(TypeError, match="former constant OLD names no setting"):
        former_setting_constants("example.settings", ExampleSettings, renamed={"OLD": "gone"})


@pytest.mark.parametrize(
    ("module", "constant"),
    [
        ("roleserve_kubernetes.settings", "CONTAINERD_METRICS_PORT"),
        ("roleserve_metrics.settings", "NODE_EXPORTER_PORT"),
    ],
)
def test_the_plugins_answer_no_constant_they_never_had(module: str, constant: str) -> None:
    """Their setting's constant had another name (``..._PORT_SETTING``; the name asked here
    is the port's number, an attribute of its own): the settings' ``__getattr__`` does not
    answer for it."""
    settings = pytest.importorskip(module)
    with pytest.raises(AttributeError, match=f"has no attribute '{constant}'"):
        settings.__getattr__(constant)


@pytest.mark.parametrize(
    ("module", "constant", "setting_name"),
    [
        ("roleserve_hostsfile.settings", "PATH", "path"),
        ("roleserve_clusternet.settings", "LISTEN_PORT", "listen_port"),
        ("roleserve_controlplane.settings", "LEASE_TTL", "lease_ttl"),
        (
            "roleserve_kubernetes.settings",
            "CONTAINERD_METRICS_PORT_SETTING",
            "containerd_metrics_port",
        ),
        ("roleserve_metrics.settings", "NODE_EXPORTER_PORT_SETTING", "node_exporter_port"),
    ],
)
def test_the_plugins_former_setting_constants_still_import(
    module: str, constant: str, setting_name: str
) -> None:
    """The repository's plugins declared a constant per setting before ``PluginSettings``;
    another plugin may import one."""
    settings = pytest.importorskip(module)
    with pytest.warns(PluginAPIDeprecationWarning, match=f"{module}.{constant} has moved"):
        record = getattr(settings, constant)
    assert record in settings.SETTINGS
    assert record.name == setting_name
