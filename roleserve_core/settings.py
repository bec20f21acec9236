"""Plugin settings: what each plugin accepts in its ``[plugins.NAME]`` section of roleserve.toml.

::

    roleserve_settings() ──▶ [Setting("lease_ttl", int, 10, "..."), ...]   per plugin, at load
                                     │  (PluginInfo.settings; ``roleserve plugins`` lists them)
    roleserve.toml [plugins.NAME] ───┤
    PluginSet: loaded / blocked ─────┴─▶ runtime.resolve_plugin_config ─▶ NodeContext.config
                                             │  check_sections (here): checked, defaults
                                             ▼  filled in, read-only
                     a wrong type, a value not allowed, an unknown key, a section of no
                     installed plugin:
                     ConfigError naming the file, the section, the key and what was expected
                     (the node exits 2 before it starts anything)

Why a hook that returns ``Setting`` records, rather than a typed schema class (a dataclass
or a pydantic model) that the core introspects:

- A record carries its documentation at run time. A dataclass field's docstring exists only
  in the source, so ``roleserve plugins`` could not show it; a pydantic model would make
  every plugin depend on pydantic, and its error format is not ours.
- TOML has a handful of types; a closed set (``str``, ``int``, ``float``, ``bool``,
  ``list[str]``, each optional with a ``None`` default) lets the core give exact,
  one-line errors ("must be an integer") and refuse ``true`` for an integer, which
  ``isinstance`` alone would accept.
- It is one more declaration hook like ``roleserve_values``: the same per-plugin loading,
  failure isolation, tracing and listing, with no second mechanism.
- ``Setting[T]`` is typed: ``LEASE_TTL.read(node.config)`` is an ``int`` to mypy, so a plugin
  may still gather its values in a dataclass of its own, while names, defaults and docs
  live in one place, the records (``settingsclass.PluginSettings`` is that dataclass, each
  field declared once with its record).

Beyond its type, a setting may say which values it allows: a range (``minimum``,
``maximum``), a set of ``choices``, or a ``predicate`` with the ``requirement`` it checks
("an absolute path"). The core refuses any other value exactly as a wrong type, before the
node starts, and ``roleserve plugins`` shows what is allowed: the checks every plugin used to
write by hand in ``roleserve_workers``, where a refusal only failed the plugin and left the
node running without it. Only a check across settings stays the plugin's (it raises
``ConfigError`` in ``roleserve_workers``, which refuses the node the same way).

Deliberate omissions: no required settings (every setting has a default, so a node starts
with an empty file), no nested tables, no checks across settings.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Generic, TypeVar, cast

from roleserve_core.errors import ConfigError

__all__ = ["SETTING_TYPES", "Setting", "check_sections", "toml_literal", "unknown_section"]

T = TypeVar("T")

SETTING_TYPES: dict[Any, tuple[str, str]] = {
    str: ("str", "a string"),
    int: ("int", "an integer"),
    float: ("float", "a number"),
    bool: ("bool", "true or false"),
    list[str]: ("list[str]", "a list of strings"),
}
"""Every type a setting may have: its name, and how an error message says it."""

NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_]{0,63}$")


@dataclass(frozen=True, slots=True)
class Setting(Generic[T]):
    """One key a plugin accepts in its ``[plugins.<name>]`` section of roleserve.toml.

    Declared by the plugin's ``roleserve_settings`` hook, usually as a module constant::

        LEASE_TTL: Setting[int] = Setting("lease_ttl", int, 10, "Seconds a lease lasts.", minimum=1)
        ETCD: Setting[str | None] = Setting("etcd", str, None, "Path of the etcd binary.")
        MODE: Setting[str] = Setting("mode", str, "fast", "How.", choices=("fast", "safe"))

    :raises ValueError: for a name, type, default, doc or allowed values the core could not
        check against, or a default they do not allow.
    """

    name: str
    """The key in the section: ``^[a-z][a-z0-9_]{0,63}$``."""
    type: Any
    """What the value must be: ``str``, ``int``, ``float``, ``bool`` or ``list[str]``. An
    integer is accepted for ``float``; ``true`` is not accepted for ``int``."""
    default: T
    """The value when the section does not set it. ``None`` makes the setting optional:
    unset unless the file gives it (TOML has no null, so it cannot be set to None)."""
    doc: str
    """One line for ``roleserve plugins`` and the docs: what it changes, in which unit."""
    minimum: int | float | None = None
    """The smallest value allowed (inclusive), for an ``int`` or ``float``; None: no bound."""
    maximum: int | float | None = None
    """The largest value allowed (inclusive), for an ``int`` or ``float``; None: no bound."""
    choices: tuple[Any, ...] | None = None
    """The only values allowed; None: any of the type."""
    predicate: Callable[[Any], bool] | None = None
    """A check of a value of the right type (within the range and choices): true if it is
    allowed. Needs ``requirement``."""
    requirement: str = ""
    """What ``predicate`` requires, as the end of "NAME must be ...": ``an absolute path``."""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not NAME_PATTERN.fullmatch(self.name):
            raise ValueError(f"setting name {self.name!r} must match {NAME_PATTERN.pattern}")
        if self.type not in SETTING_TYPES:
            raise ValueError(
                f"setting {self.name!r} has type {self.type!r}; "
                "a setting is a str, int, float, bool or list[str]"
            )
        if self.default is not None:
            default = _converted(self.type, self.default)
            if default is None:
                raise ValueError(
                    f"setting {self.name!r}: default {self.default!r} is not {self.expected}"
                )
            object.__setattr__(self, "default", default)  # 1 → 1.0 for a float
        if not isinstance(self.doc, str) or not self.doc.strip():
            raise ValueError(f"setting {self.name!r} has no doc; say what it changes")
        self._check_allowed_declaration()

    def _check_allowed_declaration(self) -> None:
        """The allowed values make sense for the type, and allow the default."""
        numeric = self.type in (int, float)
        if (self.minimum is not None or self.maximum is not None) and not numeric:
            raise ValueError(f"setting {self.name!r}: a range needs an int or float setting")
        for bound in (self.minimum, self.maximum):
            if bound is not None and _converted(float, bound) is None:
                raise ValueError(f"setting {self.name!r}: bound {bound!r} is not a number")
        if self.choices is not None:
            if not self.choices or any(_converted(self.type, c) is None for c in self.choices):
                raise ValueError(
                    f"setting {self.name!r}: choices must be values of its type, at least one"
                )
            object.__setattr__(self, "choices", tuple(self.choices))
        if self.predicate is not None and not self.requirement.strip():
            raise ValueError(
                f"setting {self.name!r}: a predicate needs a requirement saying what it checks"
            )
        if self.default is not None and (problem := self.not_allowed(self.default)):
            raise ValueError(f"setting {self.name!r}: default {self.default!r} {problem}")

    @property
    def optional(self) -> bool:
        """Whether the setting is unset (None) unless the file gives it."""
        return self.default is None

    @property
    def type_name(self) -> str:
        """``int``, ``list[str]``, ...; with ``| None`` if optional."""
        name = SETTING_TYPES[self.type][0]
        return f"{name} | None" if self.optional else name

    @property
    def expected(self) -> str:
        """What the value must be, in words: "an integer"."""
        return SETTING_TYPES[self.type][1]

    def read(self, config: Mapping[str, Any]) -> T:
        """This setting's value in a plugin's ``NodeContext.config``.

        The core has checked the value and filled in the default; the fallback to the
        default serves a context built by hand (a unit test's).
        """
        return cast(T, config.get(self.name, self.default))

    @property
    def allowed(self) -> str:
        """What the value must be, in words, the allowed values included: "an integer from
        1 to 65535", "one of "a", "b"", "an absolute path"; just ``expected`` if any value of
        the type is allowed."""
        if self.choices is not None:
            text = "one of " + ", ".join(toml_literal(choice) for choice in self.choices)
        else:
            text = self.expected + self._range()
        if self.predicate is None:
            return text
        return self.requirement if text == self.expected else f"{text}, {self.requirement}"

    def _range(self) -> str:
        if self.minimum is not None and self.maximum is not None:
            return f" from {self.minimum} to {self.maximum}"
        if self.minimum is not None:
            return f" of at least {self.minimum}"
        if self.maximum is not None:
            return f" of at most {self.maximum}"
        return ""

    def not_allowed(self, value: object) -> str | None:
        """Why ``value``, of the setting's type, is not allowed ("is below 1"); None if it
        is."""
        if self.minimum is not None and cast(float, value) < self.minimum:
            return f"is below {self.minimum}"
        if self.maximum is not None and cast(float, value) > self.maximum:
            return f"is above {self.maximum}"
        if self.choices is not None and value not in self.choices:
            return "is none of the choices"
        if self.predicate is not None and not self.predicate(value):
            return f"is not {self.requirement}"
        return None

    def check(self, value: object) -> T:
        """``value`` as this setting's type (an integer becomes a float for ``float``).

        :raises TypeError: if it is not of the setting's type.
        :raises ValueError: if it is of the type but not allowed (range, choices,
            predicate).
        """
        converted = _converted(self.type, value)
        if converted is None:
            raise TypeError(f"{self.name} must be {self.expected}")
        if self.not_allowed(converted) is not None:
            raise ValueError(f"{self.name} must be {self.allowed}")
        return cast(T, converted)


def _converted(kind: Any, value: object) -> object | None:
    """``value`` as ``kind``, or None if it is not one. ``bool`` is an ``int`` to Python,
    but ``true`` is never a number in a configuration file."""
    if kind is bool:
        return value if isinstance(value, bool) else None
    if isinstance(value, bool):
        return None
    if kind is float and isinstance(value, int | float):
        return float(value)
    if kind == list[str]:
        if not isinstance(value, list):
            return None
        return list(value) if all(isinstance(item, str) for item in value) else None
    return value if isinstance(value, kind) else None


def toml_literal(value: object) -> str:
    """``value`` as TOML would write it: ``"text"``, ``true``, ``[]``; ``(not set)`` for None."""
    if value is None:
        return "(not set)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # its escapes are TOML's too
    if isinstance(value, list):
        return "[" + ", ".join(toml_literal(item) for item in value) + "]"
    return repr(value)


def check_declaration(settings: Iterable[object]) -> list[Setting[Any]]:
    """A plugin's ``roleserve_settings`` result, refused whole if any part is wrong.

    :raises TypeError: for something that is not a ``Setting``.
    :raises ValueError: for two settings of one name.
    """
    checked: dict[str, Setting[Any]] = {}
    for setting in settings:
        if not isinstance(setting, Setting):
            raise TypeError(f"roleserve_settings must return Setting objects, got {setting!r}")
        if setting.name in checked:
            raise ValueError(f"setting {setting.name!r} is declared twice")
        checked[setting.name] = setting
    return list(checked.values())


def check_sections(
    source: str,
    sections: Mapping[str, Mapping[str, Any]],
    declared: Mapping[str, list[Setting[Any]]],
) -> dict[str, Mapping[str, Any]]:
    """Each plugin of ``declared``'s section of ``sections`` (empty if absent), checked
    against the settings it declared and filled in with their defaults, read-only.

    Which sections to check, and what to say about the others, is the caller's: it knows
    the plugins (``runtime.resolve_plugin_config``).

    :param source: the file the sections came from, for messages.
    :raises ConfigError: one line naming ``source``, the section, the key and what to do.
    """
    return {
        name: MappingProxyType(_section(source, name, sections.get(name, {}), settings))
        for name, settings in declared.items()
    }


def _section(
    source: str, plugin: str, section: Mapping[str, Any], settings: list[Setting[Any]]
) -> dict[str, Any]:
    """One loaded plugin's values: the section's, checked, then the defaults."""
    by_name = {setting.name: setting for setting in settings}
    for key in section:
        if key not in by_name:
            raise ConfigError(_unknown_key(source, plugin, key, list(by_name)))
    values: dict[str, Any] = {}
    for setting in settings:
        if setting.name not in section:
            values[setting.name] = _fresh(setting.default)
            continue
        value = section[setting.name]
        try:
            values[setting.name] = setting.check(value)
        except (TypeError, ValueError):
            raise ConfigError(
                f"{source}: [plugins.{plugin}] {setting.name} must be {setting.allowed}, "
                f"not {toml_literal(value)} ({setting.doc.rstrip('.')}); correct it, or "
                f"remove it {_without(setting)}"
            ) from None
    return values


def _fresh(default: object) -> object:
    """A default of one node's config: a list is copied, so a plugin that changes its
    value does not change the declaration every later runtime reads."""
    return list(default) if isinstance(default, list) else default


def _without(setting: Setting[Any]) -> str:
    """What removing the key means."""
    if setting.optional:
        return "to leave it unset"
    return f"for the default, {toml_literal(setting.default)}"


def _unknown_key(source: str, plugin: str, key: str, known: list[str]) -> str:
    where = f"{source}: [plugins.{plugin}] has no setting {key!r}"
    if not known:
        return f"{where}: plugin {plugin!r} takes no settings; remove the key"
    return f"{where}{_did_you_mean(key, known)}; its settings are {', '.join(known)}"


def unknown_section(source: str, name: str, installed: list[str]) -> str:
    """Why a section of no installed plugin is refused, and what to do."""
    return (
        f"{source}: [plugins.{name}] names no installed plugin{_did_you_mean(name, installed)}; "
        f"known plugins: {', '.join(installed)}. Remove the section, install the plugin, or "
        "name it in ROLESERVE_DISABLE_PLUGINS if it is left out on purpose"
    )


def _did_you_mean(word: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(word, choices, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""
