"""The value registry: keys, owners, readers, scoping per plugin, and introspection."""

from __future__ import annotations

import datetime as dt
import json
import time
from dataclasses import dataclass
from typing import Any

import anyio
import pytest

from roleserve_core.errors import (
    DuplicateValueKeyError,
    NotValueOwnerError,
    UnknownValueKeyError,
    ValueRegistryError,
)
from roleserve_core.event import Value, ValueWatch, Watcher
from roleserve_core.registry import PluginValues, ValueInfo, ValueKey, ValueRegistry, value_details

pytestmark = pytest.mark.anyio

TIMEOUT = 10.0


@dataclass(frozen=True)
class Greeting:
    text: str


GREETING: ValueKey[Greeting] = ValueKey("greeting", Greeting, "What the node says.")
COUNT: ValueKey[int] = ValueKey("count", int, "How many greetings were said.")
FLAG: ValueKey[bool] = ValueKey("flag", bool, "Whether the greeting was saved.")
BLOB: ValueKey[str] = ValueKey("blob", str, "A long text.")
UNDECLARED: ValueKey[int] = ValueKey("nobody_owns_this", int, "Declared by no one.")


def info(registry: ValueRegistry, name: str) -> ValueInfo:
    """The ``entries()`` record of ``name``."""
    [entry] = [entry for entry in registry.entries() if entry.name == name]
    return entry


# -- declare ------------------------------------------------------------------------------


def test_declare_returns_an_unset_value_the_owner_sets(value_registry: ValueRegistry) -> None:
    value = value_registry.declare(GREETING, "core")
    assert isinstance(value, Value)
    assert not value.is_set()
    value_registry.set(GREETING, Greeting("hi"), by="core")
    assert value.get_nowait() == Greeting("hi")
    assert value_registry.owned(GREETING, "core") is value


def test_declare_twice_by_the_same_owner_is_refused(value_registry: ValueRegistry) -> None:
    value_registry.declare(GREETING, "core")
    with pytest.raises(DuplicateValueKeyError, match=r"already owned by 'core'"):
        value_registry.declare(GREETING, "core")


def test_declare_by_another_owner_names_the_existing_owner(
    value_registry: ValueRegistry,
) -> None:
    original = value_registry.declare(GREETING, "core")
    with pytest.raises(DuplicateValueKeyError) as raised:
        value_registry.declare(GREETING, "intruder")
    message = str(raised.value)
    assert "'greeting'" in message
    assert "'intruder'" in message
    assert "already owned by 'core'" in message
    # The first owner keeps the key and its value.
    assert value_registry.owner_of(GREETING) == "core"
    assert value_registry.owned(GREETING, "core") is original


def test_declare_of_a_taken_name_with_another_type_is_refused(
    value_registry: ValueRegistry,
) -> None:
    value_registry.declare(COUNT, "core")
    other: ValueKey[str] = ValueKey("count", str, "Same name, other type.")
    with pytest.raises(DuplicateValueKeyError, match=r"already owned by 'core'"):
        value_registry.declare(other, "intruder")


def test_registry_errors_share_a_base() -> None:
    """Callers catch registry misuse as one error; the standard bases still match."""
    for error in (DuplicateValueKeyError, NotValueOwnerError, UnknownValueKeyError):
        assert issubclass(error, ValueRegistryError)
    assert issubclass(UnknownValueKeyError, LookupError)
    assert issubclass(NotValueOwnerError, PermissionError)


# -- set and owned --------------------------------------------------------------------------


def test_set_by_a_non_owner_is_refused_and_names_the_owner(
    value_registry: ValueRegistry,
) -> None:
    value = value_registry.declare(COUNT, "core")
    with pytest.raises(NotValueOwnerError) as raised:
        value_registry.set(COUNT, 1, by="metrics")
    message = str(raised.value)
    assert "'metrics'" in message
    assert "'count'" in message
    assert "owned by 'core'" in message
    assert not value.is_set()


def test_owned_by_a_non_owner_is_refused(value_registry: ValueRegistry) -> None:
    value_registry.declare(COUNT, "core")
    with pytest.raises(NotValueOwnerError, match=r"owned by 'core'"):
        value_registry.owned(COUNT, "metrics")


def test_set_with_the_wrong_type_is_refused(value_registry: ValueRegistry) -> None:
    value = value_registry.declare(COUNT, "core")
    with pytest.raises(TypeError) as raised:
        value_registry.set(COUNT, "three", by="core")  # type: ignore[misc]
    message = str(raised.value)
    assert "'count'" in message
    assert "str" in message
    assert "int" in message
    assert not value.is_set()
    assert value.statistics().sets == 0


def test_set_type_check_is_isinstance(value_registry: ValueRegistry) -> None:
    """A subclass instance is a value of the type; a bool key refuses an int."""

    class LoudGreeting(Greeting):
        pass

    value_registry.declare(GREETING, "core")
    value_registry.set(GREETING, LoudGreeting("HI"), by="core")
    value_registry.declare(FLAG, "hostsfile")
    with pytest.raises(TypeError):
        value_registry.set(FLAG, 1, by="hostsfile")  # type: ignore[misc]
    value_registry.set(FLAG, True, by="hostsfile")
    assert value_registry.owned(FLAG, "hostsfile").get_nowait() is True


def test_set_of_an_undeclared_key_is_refused(value_registry: ValueRegistry) -> None:
    with pytest.raises(UnknownValueKeyError, match=r"'core' uses value 'nobody_owns_this'"):
        value_registry.set(UNDECLARED, 1, by="core")


async def test_set_reaches_readers(value_registry: ValueRegistry) -> None:
    value_registry.declare(COUNT, "core")
    view = value_registry.read(COUNT, "metrics")
    with view.watch() as watcher, anyio.fail_after(TIMEOUT):
        value_registry.set(COUNT, 1, by="core")
        value_registry.set(COUNT, 2, by="core")
        assert await watcher.get() == 2
    assert view.get_nowait() == 2
    assert view.statistics().sets == 2


# -- read --------------------------------------------------------------------------------------


def test_read_of_an_undeclared_key_names_the_reader(value_registry: ValueRegistry) -> None:
    with pytest.raises(UnknownValueKeyError) as raised:
        value_registry.read(UNDECLARED, "clusternet")
    message = str(raised.value)
    assert "'clusternet'" in message
    assert "'nobody_owns_this'" in message
    assert "no loaded plugin owns" in message


def test_read_with_a_key_of_another_type_is_refused(value_registry: ValueRegistry) -> None:
    value_registry.declare(COUNT, "core")
    as_text: ValueKey[str] = ValueKey("count", str, "Same name, other type.")
    with pytest.raises(UnknownValueKeyError) as raised:
        value_registry.read(as_text, "metrics")
    message = str(raised.value)
    assert "'metrics'" in message
    assert "as str" in message
    assert "'core' declared it as int" in message
    assert info(value_registry, "count").readers == ()


def test_read_gives_a_read_only_view(value_registry: ValueRegistry) -> None:
    value = value_registry.declare(COUNT, "core")
    view = value_registry.read(COUNT, "metrics")
    assert isinstance(view, ValueWatch)
    assert not hasattr(view, "set")
    value.set(5)
    assert view.get_nowait() == 5


def test_read_of_an_unset_key_raises_lookup_error_on_get_nowait(
    value_registry: ValueRegistry,
) -> None:
    value_registry.declare(COUNT, "core")
    with pytest.raises(LookupError):
        value_registry.read(COUNT, "metrics").get_nowait()


# -- readers, declared reads, unowned reads ---------------------------------------------------


def test_readers_are_recorded_by_read_and_declare_reads(value_registry: ValueRegistry) -> None:
    value_registry.declare(COUNT, "core")
    value_registry.declare(GREETING, "core")
    value_registry.read(COUNT, "metrics")
    value_registry.read(COUNT, "metrics")
    value_registry.declare_reads("clusternet", [COUNT])
    value_registry.declare_reads("hostsfile", [COUNT, GREETING])
    value_registry.declare_reads("hostsfile", [COUNT])
    assert info(value_registry, "count").readers == ("clusternet", "hostsfile", "metrics")
    assert info(value_registry, "greeting").readers == ("hostsfile",)


def test_unowned_reads_lists_declared_reads_of_undeclared_keys(
    value_registry: ValueRegistry,
) -> None:
    other: ValueKey[int] = ValueKey("another_orphan", int, "Declared by no one either.")
    value_registry.declare(COUNT, "core")
    value_registry.declare_reads("metrics", [COUNT, UNDECLARED])
    value_registry.declare_reads("clusternet", [UNDECLARED, other])
    assert value_registry.unowned_reads() == [
        ("clusternet", "another_orphan"),
        ("clusternet", "nobody_owns_this"),
        ("metrics", "nobody_owns_this"),
    ]
    value_registry.declare(UNDECLARED, "late")
    assert value_registry.unowned_reads() == [("clusternet", "another_orphan")]


def test_unowned_reads_is_empty_when_every_read_is_owned(
    value_registry: ValueRegistry,
) -> None:
    assert value_registry.unowned_reads() == []
    value_registry.declare(COUNT, "core")
    value_registry.declare_reads("metrics", [COUNT])
    assert value_registry.unowned_reads() == []


# -- forget_owner, contains, keys, owner_of ---------------------------------------------------


def test_forget_owner_drops_only_that_owners_keys(value_registry: ValueRegistry) -> None:
    value_registry.declare(COUNT, "refused")
    value_registry.declare(FLAG, "refused")
    value_registry.declare(GREETING, "core")
    value_registry.forget_owner("refused")
    assert COUNT not in value_registry
    assert FLAG not in value_registry
    assert GREETING in value_registry
    assert value_registry.keys() == [GREETING]
    with pytest.raises(UnknownValueKeyError):
        value_registry.read(COUNT, "metrics")
    # The name is free again.
    value_registry.declare(COUNT, "core")
    assert value_registry.owner_of(COUNT) == "core"


def test_forget_owner_of_an_unknown_owner_changes_nothing(
    value_registry: ValueRegistry,
) -> None:
    value_registry.declare(COUNT, "core")
    value_registry.forget_owner("nobody")
    assert value_registry.keys() == [COUNT]


def test_contains_is_by_name(value_registry: ValueRegistry) -> None:
    assert COUNT not in value_registry
    value_registry.declare(COUNT, "core")
    assert COUNT in value_registry
    assert ValueKey("count", str, "Same name, other type.") in value_registry
    assert GREETING not in value_registry


def test_keys_in_declaration_order(value_registry: ValueRegistry) -> None:
    keys: list[ValueKey[Any]] = [GREETING, COUNT, BLOB]
    for key in keys:
        value_registry.declare(key, "core")
    assert value_registry.keys() == [GREETING, COUNT, BLOB]


def test_owner_of(value_registry: ValueRegistry) -> None:
    value_registry.declare(COUNT, "core")
    value_registry.declare(FLAG, "hostsfile")
    assert value_registry.owner_of(COUNT) == "core"
    assert value_registry.owner_of(FLAG) == "hostsfile"
    with pytest.raises(UnknownValueKeyError, match="'nobody_owns_this'"):
        value_registry.owner_of(UNDECLARED)


def test_owner_of_is_by_name_like_contains(value_registry: ValueRegistry) -> None:
    """The node asks owner_of about a key a second plugin declares, maybe with another type.

    It must name the owner (to report a duplicate), not claim the key is unknown.
    """
    value_registry.declare(COUNT, "core")
    as_text: ValueKey[str] = ValueKey("count", str, "Same name, other type.")
    assert as_text in value_registry
    assert value_registry.owner_of(as_text) == "core"


# -- entries and ValueInfo -----------------------------------------------------------------------


def test_entries_of_an_unset_key(value_registry: ValueRegistry) -> None:
    value_registry.declare(GREETING, "core")
    assert value_registry.entries() == [
        ValueInfo(
            name="greeting",
            type="Greeting",
            doc="What the node says.",
            owner="core",
            readers=(),
            is_set=False,
            sets=0,
            watchers=0,
            last_changed=None,
            current=None,
        )
    ]


def test_entries_show_owner_type_sets_watchers_and_last_change(
    value_registry: ValueRegistry,
) -> None:
    value_registry.declare(COUNT, "core")
    with value_registry.read(COUNT, "metrics").watch():
        before = time.time()
        value_registry.set(COUNT, 1, by="core")
        value_registry.set(COUNT, 2, by="core")
        after = time.time()
        entry = info(value_registry, "count")
    assert entry.owner == "core"
    assert entry.type == "int"
    assert entry.doc == "How many greetings were said."
    assert entry.readers == ("metrics",)
    assert entry.is_set
    assert entry.sets == 2
    assert entry.watchers == 1
    assert entry.last_changed is not None
    assert before <= entry.last_changed <= after
    assert entry.current == "2"
    assert info(value_registry, "count").watchers == 0


def test_entries_are_sorted_by_name(value_registry: ValueRegistry) -> None:
    keys: list[ValueKey[Any]] = [GREETING, COUNT, FLAG, BLOB]
    for key in keys:
        value_registry.declare(key, "core")
    assert [entry.name for entry in value_registry.entries()] == [
        "blob",
        "count",
        "flag",
        "greeting",
    ]


def test_entries_show_the_repr_of_the_current_value(value_registry: ValueRegistry) -> None:
    value_registry.declare(GREETING, "core")
    value_registry.set(GREETING, Greeting("hi"), by="core")
    assert info(value_registry, "greeting").current == repr(Greeting("hi"))


def test_entries_shorten_a_long_repr(value_registry: ValueRegistry) -> None:
    value_registry.declare(BLOB, "core")
    long_text = "x" * 1000
    value_registry.set(BLOB, long_text, by="core")
    current = info(value_registry, "blob").current
    assert current is not None
    assert len(current) == 200
    assert current.endswith("…")
    assert current[:-1] == repr(long_text)[:199]


def test_entries_keep_a_repr_at_the_limit_whole(value_registry: ValueRegistry) -> None:
    value_registry.declare(BLOB, "core")
    exactly = "y" * 198  # its repr, with the quotes, is 200 characters
    value_registry.set(BLOB, exactly, by="core")
    assert info(value_registry, "blob").current == repr(exactly)


def test_value_info_as_json_gives_iso_8601_last_changed(value_registry: ValueRegistry) -> None:
    value_registry.declare(COUNT, "core")
    value_registry.declare(FLAG, "hostsfile")
    value_registry.declare_reads("metrics", [COUNT])
    value_registry.set(COUNT, 3, by="core")
    entry = info(value_registry, "count")
    data = entry.as_json()
    assert entry.last_changed is not None
    changed = dt.datetime.fromisoformat(data["last_changed"])
    assert changed.utcoffset() == dt.timedelta(0)
    assert changed.timestamp() == pytest.approx(entry.last_changed, abs=1e-6)
    assert data == {
        "name": "count",
        "type": "int",
        "doc": "How many greetings were said.",
        "owner": "core",
        "readers": ["metrics"],
        "is_set": True,
        "sets": 1,
        "watchers": 0,
        "last_changed": data["last_changed"],
        "current": "3",
        "details": None,
    }
    assert json.loads(json.dumps(data)) == data
    unset = info(value_registry, "flag").as_json()
    assert unset["last_changed"] is None
    assert unset["current"] is None


def test_value_key_repr_names_key_and_type() -> None:
    assert repr(GREETING) == "ValueKey('greeting', Greeting)"


# -- PluginValues ---------------------------------------------------------------------------------


async def test_plugin_values_watch_records_the_plugin_as_reader(
    value_registry: ValueRegistry,
) -> None:
    value_registry.declare(COUNT, "core")
    values = value_registry.scoped("metrics")
    assert isinstance(values, PluginValues)
    with values.watch(COUNT) as watcher, anyio.fail_after(TIMEOUT):
        assert isinstance(watcher, Watcher)
        assert info(value_registry, "count").readers == ("metrics",)
        assert info(value_registry, "count").watchers == 1
        value_registry.set(COUNT, 4, by="core")
        assert await watcher.get() == 4
    assert info(value_registry, "count").watchers == 0


def test_plugin_values_read_records_the_plugin_as_reader(
    value_registry: ValueRegistry,
) -> None:
    value = value_registry.declare(COUNT, "core")
    view = value_registry.scoped("clusternet").read(COUNT)
    assert isinstance(view, ValueWatch)
    assert not hasattr(view, "set")
    value.set(8)
    assert view.get_nowait() == 8
    assert info(value_registry, "count").readers == ("clusternet",)


def test_plugin_values_get_nowait(value_registry: ValueRegistry) -> None:
    value = value_registry.declare(COUNT, "core")
    values = value_registry.scoped("metrics")
    with pytest.raises(LookupError):
        values.get_nowait(COUNT)
    value.set(2)
    assert values.get_nowait(COUNT) == 2
    assert info(value_registry, "count").readers == ("metrics",)
    with pytest.raises(UnknownValueKeyError, match="'metrics'"):
        values.get_nowait(UNDECLARED)


def test_plugin_values_set_only_what_the_plugin_owns(value_registry: ValueRegistry) -> None:
    value_registry.declare(COUNT, "core")
    value_registry.declare(FLAG, "hostsfile")
    hostsfile = value_registry.scoped("hostsfile")
    hostsfile.set(FLAG, True)
    assert value_registry.read(FLAG, "test").get_nowait() is True
    with pytest.raises(NotValueOwnerError, match=r"'hostsfile' may not set value 'count'"):
        hostsfile.set(COUNT, 1)
    with pytest.raises(TypeError):
        hostsfile.set(FLAG, "yes")  # type: ignore[misc]
    assert not value_registry.read(COUNT, "test").statistics().is_set


def test_plugin_values_owned_only_for_the_owner(value_registry: ValueRegistry) -> None:
    value = value_registry.declare(FLAG, "hostsfile")
    assert value_registry.scoped("hostsfile").owned(FLAG) is value
    with pytest.raises(NotValueOwnerError, match=r"owned by 'hostsfile'"):
        value_registry.scoped("core").owned(FLAG)


def test_value_details_prefers_the_values_own_view() -> None:
    class Summarised:
        def __repr__(self) -> str:
            return "Summarised(2 peers)"

        def details(self) -> str:
            return "peer a\npeer b"

    assert value_details(Summarised()) == "peer a\npeer b"
    long = {"peers": ["x" * 60, "y" * 60]}
    assert value_details(long) == "{'peers': ['" + "x" * 60 + "',\n           '" + "y" * 60 + "']}"
