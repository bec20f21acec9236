"""A plugin's settings as one frozen dataclass: each setting declared once, as a field.

::

    @dataclass(frozen=True)
    class BackupSettings(PluginSettings):
        target: Path = setting("target", str, "/var/backups", "Where.", convert=Path)
        port: int = port_setting("port", 7000, "The port it listens on.")
                        │
       BackupSettings.declared() ──▶ (Setting("target", ...), Setting("port", ...))
                        │               what the roleserve_settings hook returns
       BackupSettings.of(node.config) ──▶ BackupSettings(target=Path(...), port=7000)
                                           the worker's typed, read-only settings

Why: a plugin that gathered its checked values in a dataclass of its own named each setting
four times (a ``Setting`` constant, a field, a read in ``of``, the list for the hook) and
wrote its port ranges by hand; a field declared with ``setting`` carries its ``Setting``
record in the field's metadata, so the class yields both.

Why a plain frozen dataclass rather than a base class that makes one
(``dataclass_transform``): the decorator is what mypy and a reader already know, and
``setting`` is typed as returning the field's value, so mypy checks a default (or what its
``convert`` returns) against the field's annotation; mypy would accept a field specifier
of ``dataclass_transform`` called with keywords only.

A conversion (``convert``) turns the value as the file holds it (a ``str``, an ``int``) into
the type the worker uses (a ``Path``, None for an empty string); it is applied to the
default too, which is the field's default. It sees a value the core checked (types and
allowed values); ``of`` itself checks nothing, so a test may build one from a hand-made
config. A check across settings stays the plugin's, in ``roleserve_workers``.
"""

from __future__ import annotations

import copy
import dataclasses
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Self, TypedDict, TypeVar, Unpack, cast, overload

from roleserve_core._moved import PluginAPIDeprecationWarning
from roleserve_core.settings import Setting

__all__ = [
    "PORT_MAXIMUM",
    "Allowed",
    "PluginSettings",
    "former_setting_constants",
    "port_setting",
    "setting",
]

V = TypeVar("V")
T = TypeVar("T")

PORT_MAXIMUM = 65535
"""The largest TCP or UDP port."""

_METADATA_KEY = "roleserve_setting"


class Allowed(TypedDict, total=False):
    """What a ``setting`` field allows beyond its type: ``Setting``'s keywords, as there."""

    minimum: int | float | None
    maximum: int | float | None
    choices: tuple[Any, ...] | None
    predicate: Callable[[Any], bool] | None
    requirement: str


@dataclass(frozen=True, slots=True)
class _Declared:
    """What a field's metadata holds: its record, and how a value becomes the field's."""

    setting: Setting[Any]
    convert: Callable[[Any], Any] | None

    def value(self, config: Mapping[str, Any]) -> Any:
        """The field's value from a plugin's ``NodeContext.config``."""
        value = self.setting.read(config)
        return value if self.convert is None else self.convert(value)


@overload
def setting(name: str, kind: Any, default: V, doc: str, **allowed: Unpack[Allowed]) -> V: ...


@overload
def setting(
    name: str,
    kind: Any,
    default: V,
    doc: str,
    *,
    convert: Callable[[V], T],
    **allowed: Unpack[Allowed],
) -> T: ...


def setting(
    name: str,
    kind: Any,
    default: Any,
    doc: str,
    *,
    convert: Callable[[Any], Any] | None = None,
    **allowed: Unpack[Allowed],
) -> Any:
    """A field of a ``PluginSettings`` dataclass, and the ``Setting`` it is read from.

    ``name``, ``kind`` (the ``Setting``'s type), ``default``, ``doc`` and the keywords of
    ``Allowed`` make the ``Setting`` (and are checked as there); ``convert``, if given,
    turns its value into the field's, the default's too.

    Typed as the field's value, so that mypy checks the default (or ``convert``'s result)
    against the field's annotation; at run time it is a ``dataclasses.Field``, which the
    ``dataclass`` decorator takes as the field's declaration.

    :raises ValueError: as ``Setting`` does, for a declaration the core could not check.
    """
    declared = _Declared(Setting(name, kind, default, doc, **allowed), convert)
    value = declared.value({})
    metadata = {_METADATA_KEY: declared}
    if type(value).__hash__ is None:  # a list: each object gets its own copy
        return dataclasses.field(default_factory=lambda: copy.copy(value), metadata=metadata)
    return dataclasses.field(default=value, metadata=metadata)


def port_setting(name: str, default: int, doc: str, *, allow_zero: bool = False) -> int:
    """A ``setting`` field for a TCP or UDP port: an integer from 1 to 65535, or from 0 if
    ``allow_zero`` (say in ``doc`` what 0 means, e.g. "0: no metrics")."""
    return setting(name, int, default, doc, minimum=0 if allow_zero else 1, maximum=PORT_MAXIMUM)


class PluginSettings:
    """Base of a plugin's settings: a frozen dataclass whose every field is declared with
    ``setting`` (or ``port_setting``), in the order ``roleserve plugins`` lists them::

        @dataclass(frozen=True)
        class BackupSettings(PluginSettings):
            target: Path = setting("target", str, "/var/backups", "Where.", convert=Path)
            port: int = port_setting("port", 7000, "The port it listens on.")

        SETTINGS = BackupSettings.declared()  # what roleserve_settings returns
        settings = BackupSettings.of(node.config)  # in roleserve_workers

    An object may also be built by hand (a test's), as any dataclass: its fields in order,
    each with its default.
    """

    @classmethod
    def declared(cls) -> tuple[Setting[Any], ...]:
        """Every field's ``Setting``, in field order: what the plugin's
        ``roleserve_settings`` hook returns (with any settings it declares elsewhere).

        :raises TypeError: if the class is not a frozen dataclass, or a field is not
            declared with ``setting``.
        """
        return tuple(declared.setting for declared in cls._fields().values())

    @classmethod
    def of(cls, config: Mapping[str, Any]) -> Self:
        """The settings of the plugin's ``NodeContext.config`` (checked by the core, the
        defaults filled in), each converted as its field says. Checks nothing itself: a key
        absent from ``config`` gets its default.

        :raises TypeError: as ``declared``.
        """
        return cls(**{name: declared.value(config) for name, declared in cls._fields().items()})

    @classmethod
    def record(cls, name: str) -> Setting[Any]:
        """The ``Setting`` of the field declared as setting ``name``.

        :raises KeyError: if no field declares ``name``.
        """
        for declared in cls.declared():
            if declared.name == name:
                return declared
        raise KeyError(f"{cls.__qualname__} declares no setting {name!r}")

    @classmethod
    def _fields(cls) -> dict[str, _Declared]:
        """Field name → its declaration."""
        params = getattr(cls, "__dataclass_params__", None)  # what @dataclass sets
        if params is None or not params.frozen:
            raise TypeError(f"{cls.__qualname__} must be a @dataclass(frozen=True)")
        found: dict[str, _Declared] = {}
        for field in dataclasses.fields(cast(Any, cls)):  # a dataclass, checked above
            declared = field.metadata.get(_METADATA_KEY)
            if not isinstance(declared, _Declared):
                raise TypeError(
                    f"{cls.__qualname__}.{field.name} is not declared with setting() "
                    "or port_setting()"
                )
            found[field.name] = declared
        names = [declared.setting.name for declared in found.values()]
        if twice := sorted({name for name in names if names.count(name) > 1}):
            raise TypeError(f"{cls.__qualname__} declares setting {twice[0]!r} twice")
        return found


def former_setting_constants(
    module: str,
    settings: type[PluginSettings],
    *,
    renamed: Mapping[str, str] | None = None,
    constants: Iterable[str] | None = None,
) -> Callable[[str], Any]:
    """The ``__getattr__`` (PEP 562) of a plugin's settings ``module`` that, before
    ``PluginSettings``, declared one ``Setting`` constant per setting (``PATH =
    Setting("path", ...)``): another plugin or a test may import one, so each still answers
    with its record, the very one ``settings.declared()`` holds, and a
    ``PluginAPIDeprecationWarning`` naming ``record``.

    :param constants: the constants the module declared, each its setting's name in
        capitals; only these answer (and ``renamed``'s), so a setting added since gets no
        constant it never had. None: every setting declared now, in capitals (what this
        did before it took ``constants``; give them).
    :param renamed: constants that were not their setting's name in capitals (constant ->
        setting name).
    :raises TypeError: if a constant names no setting ``settings`` declares.
    """
    declared = {record.name for record in settings.declared()}
    if constants is None:
        constants = [name.upper() for name in declared]
    names = {constant: constant.lower() for constant in constants}
    names.update(renamed or {})
    if unknown := sorted(name for name, setting in names.items() if setting not in declared):
        raise TypeError(
            f"{module}: former constant {unknown[0]} names no setting of "
            f"{settings.__qualname__}; map it to its setting with renamed="
        )

    def __getattr__(name: str) -> Any:  # noqa: N807 - the name PEP 562 looks for
        if name not in names:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        warnings.warn(
            f"{module}.{name} has moved: it is the field {names[name]!r} of "
            f"{settings.__qualname__}, whose record is "
            f"{settings.__qualname__}.record({names[name]!r}); the old name still works",
            PluginAPIDeprecationWarning,
            stacklevel=2,
        )
        return settings.record(names[name])

    return __getattr__
