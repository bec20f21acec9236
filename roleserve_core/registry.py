"""The value registry: every named ``Value`` of one node, each with exactly one owner.

Values are the only state plugins share. The registry makes that sharing explicit::

    plugin "core"          declares roles ────────┐ owner: may set()
    plugin "kubernetes"    declares pod_network   │
                                                  ▼
                        ValueRegistry { key name → Value, owner, readers }
                                                  │ read-only views
    plugin "clusternet"    reads pod_network ◀────┘ (watch(), never set())

- A ``ValueKey`` names a value and documents its type. Keys are module constants, declared
  where their type lives, and imported by readers.
- A plugin owns the keys its ``roleserve_values`` hook returns. Declaring a key twice is an
  error, and only the owner may ``set`` it: a reader gets a read-only ``ValueWatch``.
- Readers are recorded as they read, and plugins name the keys their workers read up
  front (``Worker(reads=...)``), so the node reports at start-up a plugin that reads a key
  nobody owns instead of letting its worker wait forever.

``entries()`` gives, per key, its owner, type, readers, whether it is set and when it last
changed: what ``roleserve ctl values`` shows.

A value that costs something to keep (``cluster_nodes`` holds a Watch stream to the leader)
is kept only while someone reads it. ``reading(reader, keys)`` marks a reader active for
the length of a block (the runtime wraps each worker's run in one, for the keys it
declares); ``active_readers(key)`` is the set of active readers, as a value its owner
watches to start and stop its work.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import pprint
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from roleserve_core.errors import (
    DuplicateValueKeyError,
    NotValueOwnerError,
    UnknownValueKeyError,
)
from roleserve_core.event import Value, ValueWatch, Watcher
from roleserve_core.text import cut

__all__ = [
    "PluginValues",
    "ValueInfo",
    "ValueKey",
    "ValueRegistry",
    "prefixed",
    "unprefixed_key_warning",
    "value_details",
]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ValueKey(Generic[T]):
    """The name, type and meaning of one node value.

    ``type`` documents what ``set`` accepts; it is also checked on ``set``, so a plugin that
    sets the wrong type fails at the ``set``, not in some reader far away.
    """

    name: str
    """Unique within a node, ``snake_case``."""
    type: type[T]
    """The type of the value."""
    doc: str
    """One or two sentences: what the value means, and its invariants."""

    def __repr__(self) -> str:
        return f"ValueKey({self.name!r}, {self.type.__qualname__})"


def prefixed(plugin: str, name: str) -> str:
    """``name`` as a key of plugin ``plugin`` would be named: ``<plugin>_<name>``."""
    prefix = plugin.replace("-", "_")
    return name if name == prefix or name.startswith(f"{prefix}_") else f"{prefix}_{name}"


def unprefixed_key_warning(plugin: str, key: ValueKey[Any]) -> str | None:
    """The warning for a plugin's own key whose name does not begin with the plugin's
    name, None if it does.

    Key names share one namespace per node, so a key named for its plugin cannot collide
    with another plugin's by accident (``hello_greeting``, ``clusternet_status``). A
    warning rather than a refusal: keys the core declares for several plugins to meet on
    (``roleserve_core.values``: ``local_control_plane``, ``cluster_nodes``) are named for
    what they hold, as are the two that moved from there to the kubernetes plugin
    (``values.MOVED_KEY_NAMES``: ``pod_network``, ``kubernetes_status``), and plugins
    written before the rule keep loading.
    """
    wanted = prefixed(plugin, key.name)
    if wanted == key.name:
        return None
    return (
        f"value {key.name!r} does not begin with the plugin's name; name it {wanted!r} so "
        "that no other plugin's value can take its name"
    )


@dataclass(frozen=True, slots=True)
class ValueInfo:
    """Introspection record of one key, for ``roleserve ctl values``."""

    name: str
    type: str
    doc: str
    owner: str
    readers: tuple[str, ...]
    is_set: bool
    sets: int
    watchers: int
    last_changed: float | None
    """Wall-clock time of the last set, or None."""
    current: str | None
    """``repr`` of the current value (shortened), or None if unset."""
    details: str | None = None
    """The current value in full (``value_details``); only from ``entry(name)``."""

    def as_json(self) -> dict[str, Any]:
        """A JSON-ready dict; ``last_changed`` as an ISO 8601 string."""
        changed = None
        if self.last_changed is not None:
            changed = _dt.datetime.fromtimestamp(self.last_changed, _dt.UTC).isoformat()
        return {
            "name": self.name,
            "type": self.type,
            "doc": self.doc,
            "owner": self.owner,
            "readers": list(self.readers),
            "is_set": self.is_set,
            "sets": self.sets,
            "watchers": self.watchers,
            "last_changed": changed,
            "current": self.current,
            "details": self.details,
        }


@dataclass(slots=True)
class _Entry:
    key: ValueKey[Any]
    owner: str
    value: Value[Any]
    readers: set[str]


_REPR_LIMIT = 200


class ValueRegistry:
    """The named values of one node."""

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}
        self._declared_reads: dict[str, set[str]] = {}
        self._active: dict[str, Value[frozenset[str]]] = {}

    def declare(self, key: ValueKey[T], owner: str) -> Value[T]:
        """Create the value for ``key``, owned by ``owner``.

        :raises DuplicateValueKeyError: if a key of that name is already declared.
        """
        existing = self._entries.get(key.name)
        if existing is not None:
            raise DuplicateValueKeyError(
                f"value {key.name!r} declared by {owner!r} is already owned by "
                f"{existing.owner!r}; a value has exactly one owner"
            )
        value: Value[T] = Value()
        self._entries[key.name] = _Entry(key, owner, value, set())
        return value

    def _entry(self, key: ValueKey[T], who: str) -> _Entry:
        entry = self._entries.get(key.name)
        if entry is None:
            raise UnknownValueKeyError(
                f"{who!r} uses value {key.name!r}, which no loaded plugin owns; "
                "is the plugin that declares it installed and enabled?"
            )
        if entry.key.type is not key.type:
            raise UnknownValueKeyError(
                f"{who!r} uses value {key.name!r} as {key.type.__qualname__}, but "
                f"{entry.owner!r} declared it as {entry.key.type.__qualname__}"
            )
        return entry

    def read(self, key: ValueKey[T], reader: str) -> ValueWatch[T]:
        """A read-only view of ``key``'s value, recording ``reader`` as a reader.

        :raises UnknownValueKeyError: if nobody declared ``key``.
        """
        entry = self._entry(key, reader)
        entry.readers.add(reader)
        value: Value[T] = entry.value
        return value.read_only()

    def owned(self, key: ValueKey[T], owner: str) -> Value[T]:
        """The writable value of ``key``, for its owner only.

        :raises UnknownValueKeyError: if nobody declared ``key``.
        :raises NotValueOwnerError: if ``owner`` does not own it.
        """
        entry = self._entry(key, owner)
        if entry.owner != owner:
            raise NotValueOwnerError(
                f"{owner!r} may not set value {key.name!r}: it is owned by {entry.owner!r}"
            )
        value: Value[T] = entry.value
        return value

    def set(self, key: ValueKey[T], value: T, *, by: str) -> None:
        """Set ``key`` to ``value`` on behalf of ``by``, which must own it.

        :raises NotValueOwnerError: if ``by`` does not own the key.
        :raises TypeError: if ``value`` is not a ``key.type``.
        """
        target = self.owned(key, by)
        if not isinstance(value, key.type):
            raise TypeError(
                f"{by!r} set value {key.name!r} to a {type(value).__qualname__}; "
                f"it holds {key.type.__qualname__}"
            )
        target.set(value)

    def forget_owner(self, owner: str) -> None:
        """Drop every key ``owner`` declared; for a plugin refused after declaring.

        Only safe before anyone reads: the node calls it while assembling, never later.
        """
        for name in [name for name, entry in self._entries.items() if entry.owner == owner]:
            del self._entries[name]

    def declare_reads(self, reader: str, keys: Iterable[ValueKey[Any]]) -> None:
        """Record that ``reader`` will read ``keys`` (from ``Worker(reads=...)``)."""
        self._declared_reads.setdefault(reader, set()).update(key.name for key in keys)

    @contextlib.contextmanager
    def reading(self, reader: str, keys: Iterable[ValueKey[Any]]) -> Iterator[None]:
        """Mark ``reader`` as an active reader of ``keys`` for the block (see the module
        docstring). Readers are named uniquely by the caller (a runnable's DN)."""
        names = {key.name for key in keys}
        for name in names:
            active = self._active_value(name)
            active.set(active.get_nowait() | {reader})
        try:
            yield
        finally:
            for name in names:
                active = self._active_value(name)
                active.set(active.get_nowait() - {reader})

    def active_readers(self, key: ValueKey[Any]) -> ValueWatch[frozenset[str]]:
        """The readers active on ``key`` now (``reading``), as a value to watch."""
        return self._active_value(key.name).read_only()

    def _active_value(self, name: str) -> Value[frozenset[str]]:
        active = self._active.get(name)
        if active is None:
            active = self._active[name] = Value()
            active.set(frozenset())
        return active

    def unowned_reads(self) -> list[tuple[str, str]]:
        """``(reader, key name)`` for every declared read of a key nobody declared."""
        return sorted(
            (reader, name)
            for reader, names in self._declared_reads.items()
            for name in names
            if name not in self._entries
        )

    def owner_of(self, key: ValueKey[Any]) -> str:
        """The owner of ``key``'s name, whatever type it was declared with.

        By name, like ``key in registry``: the node asks it to name the owner of a key a
        second plugin tries to declare, possibly with another type, and that is a duplicate
        of the owned key, not an unknown key.

        :raises UnknownValueKeyError: if nobody declared a key of that name.
        """
        entry = self._entries.get(key.name)
        if entry is None:
            raise UnknownValueKeyError(f"no loaded plugin owns value {key.name!r}")
        return entry.owner

    def __contains__(self, key: ValueKey[Any]) -> bool:
        """Whether a key of that name is declared."""
        return key.name in self._entries

    def keys(self) -> list[ValueKey[Any]]:
        """Every declared key, in declaration order."""
        return [entry.key for entry in self._entries.values()]

    def entries(self) -> list[ValueInfo]:
        """Introspection of every declared key, sorted by name."""
        return [self._info(entry) for _, entry in sorted(self._entries.items())]

    def entry(self, name: str) -> ValueInfo:
        """Introspection of the key ``name``, with its current value in full (``details``).

        :raises UnknownValueKeyError: if no key of that name is declared.
        """
        entry = self._entries.get(name)
        if entry is None:
            raise UnknownValueKeyError(
                f"no value {name!r} on this node; its values are {', '.join(sorted(self._entries))}"
            )
        info = self._info(entry)
        if not info.is_set:
            return info
        return dataclasses.replace(info, details=value_details(entry.value.get_nowait()))

    def _info(self, entry: _Entry) -> ValueInfo:
        stats = entry.value.statistics()
        readers = entry.readers | {
            reader for reader, names in self._declared_reads.items() if entry.key.name in names
        }
        current = None
        if stats.is_set:
            current = cut(repr(entry.value.get_nowait()), _REPR_LIMIT)
        return ValueInfo(
            name=entry.key.name,
            type=entry.key.type.__qualname__,
            doc=entry.key.doc,
            owner=entry.owner,
            readers=tuple(sorted(readers)),
            is_set=stats.is_set,
            sets=stats.sets,
            watchers=stats.watchers,
            last_changed=stats.last_set,
            current=current,
        )

    def scoped(self, plugin: str) -> PluginValues:
        """The view of this registry that plugin ``plugin`` gets in its ``NodeContext``."""
        return PluginValues(self, plugin)


def value_details(value: object) -> str:
    """``value`` in full, for ``roleserve ctl values NODE NAME``: its ``details()`` if it
    has one (a value whose one-line ``repr`` is a summary, say its peers on their own
    lines), else its ``repr`` pretty-printed over several lines."""
    details = getattr(value, "details", None)
    if callable(details):
        return str(details())
    return pprint.pformat(value, width=100, sort_dicts=False)


class PluginValues:
    """One plugin's access to the node's values: read anything, set only what it owns."""

    __slots__ = ("_plugin", "_registry")

    def __init__(self, registry: ValueRegistry, plugin: str) -> None:
        self._registry = registry
        self._plugin = plugin

    def __contains__(self, key: ValueKey[Any]) -> bool:
        """Whether some loaded plugin declares ``key``: for reading values of optional
        plugins (``LOCAL_CONTROL_PLANE in node.values``)."""
        return key in self._registry

    def watch(self, key: ValueKey[T]) -> Watcher[T]:
        """A new watcher of ``key`` (see ``Value.watch``); use it as a ``with`` block."""
        return self._registry.read(key, self._plugin).watch()

    def read(self, key: ValueKey[T]) -> ValueWatch[T]:
        """A read-only view of ``key``, to watch repeatedly or to hand on."""
        return self._registry.read(key, self._plugin)

    def get_nowait(self, key: ValueKey[T]) -> T:
        """The current value of ``key``.

        :raises LookupError: if it was never set.
        """
        return self._registry.read(key, self._plugin).get_nowait()

    def set(self, key: ValueKey[T], value: T) -> None:
        """Set ``key``; this plugin must own it."""
        self._registry.set(key, value, by=self._plugin)

    def owned(self, key: ValueKey[T]) -> Value[T]:
        """The writable ``Value`` of a key this plugin owns."""
        return self._registry.owned(key, self._plugin)

    def reading(
        self, reader: str, keys: Iterable[ValueKey[Any]]
    ) -> contextlib.AbstractContextManager[None]:
        """Mark ``reader`` an active reader of ``keys`` for a block: for a reader that is
        not a worker (whose declared reads the runtime marks itself)."""
        return self._registry.reading(f"{self._plugin}.{reader}", keys)

    def active_readers(self, key: ValueKey[Any]) -> ValueWatch[frozenset[str]]:
        """Who reads ``key`` now: for the owner of a value kept only while it is read."""
        return self._registry.active_readers(key)
