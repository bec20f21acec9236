"""One error tree: every exception roleserve raises on purpose is a ``RoleserveError``, and
the core's are all drawn in ``roleserve_core.errors``' docstring, once each.

A new exception class anywhere in the core, or in a plugin of this repository, fails here
until it joins the tree; a second class of a core error's name (there were two
``RefusedError``) fails too.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from collections.abc import Iterator
from types import ModuleType

import pytest

import roleserve_core
from roleserve_core import errors
from roleserve_core.errors import RoleserveError

PLUGIN_PACKAGES = (
    "roleserve_controlplane",
    "roleserve_hostsfile",
    "roleserve_clusternet",
    "roleserve_metrics",
    "roleserve_kubernetes",
)


def modules_of(package: ModuleType) -> Iterator[ModuleType]:
    """``package`` and every module under it, generated protos left out."""
    yield package
    for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
        if not info.name.endswith(("_pb2", "_pb2_grpc", "__main__")):
            yield importlib.import_module(info.name)


def exceptions_defined_in(package: ModuleType) -> dict[str, type[BaseException]]:
    """Every exception class defined (not imported) in ``package``, by qualified name.

    Warning categories (``PluginAPIDeprecationWarning``) are left out: they are Python
    exceptions only by descent, given to ``warnings.warn`` and never raised as errors."""
    found = {}
    for module in modules_of(package):
        for _, value in inspect.getmembers(module, inspect.isclass):
            if (
                issubclass(value, BaseException)
                and not issubclass(value, Warning)
                and value.__module__ == module.__name__
            ):
                found[f"{value.__module__}.{value.__qualname__}"] = value
    return found


def drawn_names() -> list[str]:
    """The class names in the tree of ``roleserve_core.errors``' docstring, its root first."""
    assert errors.__doc__ is not None
    return re.findall(r"^    (?:[│ ]*[├└]── )?(\w+Error)\b", errors.__doc__, re.MULTILINE)


CORE = exceptions_defined_in(roleserve_core)


@pytest.mark.parametrize("name", sorted(CORE))
def test_every_exception_of_the_core_is_a_roleserve_error_drawn_in_the_tree(name: str) -> None:
    exception = CORE[name]
    assert issubclass(exception, RoleserveError), f"{name} is not a RoleserveError"
    assert exception.__name__ in drawn_names(), f"{name} is not drawn in roleserve_core.errors"


def test_each_name_is_drawn_once_and_defined_once() -> None:
    drawn = drawn_names()
    assert sorted(set(drawn)) == sorted(drawn)
    defined = [exception.__name__ for exception in CORE.values()]
    assert sorted(defined) == sorted(drawn), "the tree names classes the core does not define"


@pytest.mark.parametrize("package", PLUGIN_PACKAGES)
def test_every_exception_of_a_plugin_is_a_roleserve_error_with_a_name_of_its_own(
    package: str,
) -> None:
    """A plugin's errors join the tree under ``RoleserveError`` (the supervisor and the
    command line judge failures by it) and do not repeat a core error's name."""
    try:
        plugin = importlib.import_module(package)
    except ImportError:
        pytest.skip(f"{package} is not installed")
    core_names = {exception.__name__ for exception in CORE.values()}
    for name, exception in exceptions_defined_in(plugin).items():
        assert issubclass(exception, RoleserveError), f"{name} is not a RoleserveError"
        assert exception.__name__ not in core_names, f"{name} repeats roleserve_core.errors"
