"""The public surface: what plugin authors import from ``roleserve_core``.

The plugin API is ``roleserve_core``'s top level (listed in ``__init__.pyi``), its
namespaces for plugins that serve the cluster (``SERVING_NAMESPACES``), and the test kit.
Every plugin of the repository, the example and what ``roleserve plugin new`` writes import
only from those: a test walks their sources.

The same holds between plugins: a plugin that others build on declares its API in its
package's top-level ``__all__`` (``roleserve_controlplane``, ``roleserve_kubernetes``,
``roleserve_metrics``, ...), and another plugin's code imports only those names; its tests
may also use the owner's test kit (``roleserve_<plugin>.testing``). The last tests walk the
plugins' sources and tests for that.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pickle
import pkgutil
import subprocess
import sys
import typing
from collections.abc import Iterator
from pathlib import Path

import pytest

import roleserve_core
from roleserve_core._public import is_private, publish
from roleserve_core.cli.plugin_new import NewPlugin, render
from roleserve_core.plugin_loader import PLUGIN_API_VERSION
from roleserve_core.registry import ValueKey
from roleserve_core.values import SHARED_KEYS
from roleserve_core.version import core_version

REPOSITORY = Path(__file__).resolve().parents[1]

SERVING_NAMESPACES = ("identity", "rpc", "limits", "stats", "environment")
"""Modules exported whole, for plugins that serve or sign for the cluster."""
TEST_KIT = ("roleserve_core.testing", "roleserve_core.testing.fuzz")
SURFACE = frozenset(
    {"roleserve_core", *(f"roleserve_core.{name}" for name in SERVING_NAMESPACES), *TEST_KIT}
)


def test_all_names_exist_once() -> None:
    """(Its order is ruff's RUF022 to keep.)"""
    assert len(set(roleserve_core.__all__)) == len(roleserve_core.__all__)
    for name in roleserve_core.__all__:
        assert hasattr(roleserve_core, name), name


def test_plugin_author_api_is_at_the_top() -> None:
    from roleserve_core import (  # noqa: F401 - the import itself is the test
        CLUSTER_NODES,
        CURATOR_CONNECTION,
        NETWORK,
        ROLES,
        NodeContext,
        NodeRoles,
        RunContext,
        Value,
        ValueKey,
        Worker,
        common_pb2,
        curator_pb2,
        curator_pb2_grpc,
        follow_changes,
        hookimpl,
        on_each_connection,
    )


def test_every_core_value_key_is_exported_under_its_constant_name() -> None:
    import roleserve_core.values as core_values

    constants = {name: key for name, key in vars(core_values).items() if isinstance(key, ValueKey)}
    assert set(constants.values()) == set(SHARED_KEYS)
    for name, key in constants.items():
        assert getattr(roleserve_core, name) is key, name


def test_the_serving_namespaces_are_modules_of_the_core() -> None:
    for name in SERVING_NAMESPACES:
        assert getattr(roleserve_core, name).__name__ == f"roleserve_core.{name}"


def test_public_objects_say_where_they_live() -> None:
    """Every exported class or function is defined in a roleserve_core module and documented."""
    for name in roleserve_core.__all__:
        obj = getattr(roleserve_core, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            assert (obj.__doc__ or "").strip(), f"{name} has no docstring"


def _exported_classes() -> Iterator[tuple[str, type]]:
    """Every class the plugin API exports, by the name it is imported as, defined in the core."""
    places = ["roleserve_core", *(f"roleserve_core.{name}" for name in SERVING_NAMESPACES)]
    for place in [*places, *TEST_KIT]:
        module = importlib.import_module(place)
        for name in getattr(module, "__all__", ()):
            found = getattr(module, name)
            if inspect.isclass(found) and found.__module__.startswith("roleserve_core"):
                yield f"{place}.{name}", found


def _core_exceptions() -> Iterator[type]:
    """Every exception class of the core: ``RoleserveError`` and what derives from it, once
    every module of the core is imported."""
    from roleserve_core.errors import RoleserveError

    for info in pkgutil.walk_packages(roleserve_core.__path__, "roleserve_core."):
        if "plugin_template" not in info.name and info.name != "roleserve_core.__main__":
            importlib.import_module(info.name)
    pending: list[type] = [RoleserveError]
    while pending:
        found = pending.pop()
        pending.extend(found.__subclasses__())
        if found.__module__.startswith("roleserve_core"):
            yield found


def _names_public_place(cls: type) -> bool:
    """Whether ``cls`` reports a public module that holds it under the name it reports
    (``roleserve_core.ProgramNotFoundError``), as status lines, tracebacks and pickles say."""
    if is_private(cls.__module__):
        return False
    return getattr(importlib.import_module(cls.__module__), cls.__qualname__, None) is cls


def test_every_exported_class_reports_its_public_module() -> None:
    """As trio's do: a status line naming ``roleserve_core.process._errors.X`` would send a
    plugin author to a private module (roleserve_core._public)."""
    private = sorted(
        f"{name}: {cls.__module__}.{cls.__qualname__}"
        for name, cls in _exported_classes()
        if not _names_public_place(cls)
    )
    assert private == []
    assert roleserve_core.ProgramNotFoundError.__module__ == "roleserve_core"
    assert roleserve_core.rpc.NodePeer.__module__ == "roleserve_core.rpc"


ANNOTATIONS_FOR_TYPE_CHECKERS_ONLY = frozenset(
    {"ClusterAccess", "CtlSession", "CuratorConnection", "ValueKey", "Worker"}
)
"""Exported classes whose annotations name what their module imports only for type
checkers (under ``TYPE_CHECKING``, to stay light), so ``get_type_hints`` fails for them
wherever they report to live; it did before they were published too."""


def test_published_classes_keep_their_annotations_readable_at_run_time() -> None:
    """``typing.get_type_hints`` (cattrs, pydantic, typeguard) reads a class's string
    annotations in the module ``__module__`` names: publishing resolves them first, or
    ``BackoffPolicy``'s ``random`` would be looked up in ``roleserve_core``."""
    unreadable = []
    for name, cls in _exported_classes():
        try:
            typing.get_type_hints(cls)
        except (NameError, TypeError) as exc:
            if name.rpartition(".")[2] not in ANNOTATIONS_FOR_TYPE_CHECKERS_ONLY:
                unreadable.append(f"{name}: {exc}")
    assert unreadable == []
    assert typing.get_type_hints(roleserve_core.BackoffPolicy)


def test_every_exception_of_the_core_reports_its_public_module() -> None:
    private = sorted(
        f"{cls.__module__}.{cls.__qualname__}"
        for cls in _core_exceptions()
        if not _names_public_place(cls)
    )
    assert private == []


def test_an_exception_of_a_private_module_pickles_and_reads_by_its_public_name() -> None:
    error = roleserve_core.ProgramNotFoundError("cannot start etcd: not found")
    assert f"{type(error).__module__}.{type(error).__qualname__}" == (
        "roleserve_core.ProgramNotFoundError"
    )
    again = pickle.loads(pickle.dumps(error))
    assert (type(again), again.args) == (type(error), error.args)


def test_publish_names_the_top_level_or_the_package() -> None:
    """On classes made here, as if defined in a private module of a public package."""
    top = type("ProgramSpec", (), {"__module__": "roleserve_core.x._private"})
    own = type("Thing", (), {"__module__": "roleserve_core.x._private"})
    public = type("Kept", (), {"__module__": "roleserve_core.values"})
    publish("roleserve_core.x", {"ProgramSpec": top, "Renamed": own, "Kept": public},
            ["ProgramSpec", "Renamed", "Kept"])  # fmt: skip
    assert (top.__module__, top.__qualname__) == ("roleserve_core", "ProgramSpec")
    assert (own.__module__, own.__qualname__, own.__name__) == ("roleserve_core.x",) + (
        "Renamed",
    ) * 2
    assert (public.__module__, public.__qualname__) == ("roleserve_core.values", "Kept")


def test_importing_the_package_loads_none_of_its_heavy_dependencies() -> None:
    """Every ``roleserve`` command imports the package first, ``--version`` too; the
    exports load on first use."""
    probe = (
        "import sys, roleserve_core\n"
        "print(' '.join(m for m in ('grpc', 'google.protobuf', 'cryptography', 'pluggy', "
        "'anyio') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.split() == []


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="Nonesuch"):
        getattr(roleserve_core, "Nonesuch")  # noqa: B009 - an unknown name, on purpose


def _sources() -> Iterator[tuple[Path, str]]:
    """Every Python source of the plugins, the example, and what ``plugin new`` writes."""
    for pattern in ("plugins/*/roleserve_*/**/*.py", "plugins/*/tests/**/*.py", "examples/**/*.py"):
        for path in sorted(REPOSITORY.glob(pattern)):
            if not path.name.endswith(("_pb2.py", "_pb2_grpc.py")):
                yield path, path.read_text()
    new = NewPlugin.checked("backup", None, core_version(), PLUGIN_API_VERSION)
    for target, text in render(new).items():
        if target.endswith(".py"):
            yield REPOSITORY / "roleserve_core" / "cli" / "plugin_template" / target, text


def _imports_outside_the_surface(tree: ast.AST) -> Iterator[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("roleserve_core"):
            private = [alias.name for alias in node.names if alias.name.startswith("_")]
            if node.module not in SURFACE or private:
                yield f"line {node.lineno}: from {node.module} import {private or '...'}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("roleserve_core") and alias.name not in SURFACE:
                    yield f"line {node.lineno}: import {alias.name}"


def test_plugins_the_example_and_the_template_import_only_the_plugin_api() -> None:
    outside = {
        str(path.relative_to(REPOSITORY)): found
        for path, text in _sources()
        if (found := list(_imports_outside_the_surface(ast.parse(text))))
    }
    assert outside == {}, (
        "these import roleserve_core's insides; export what they need in "
        "roleserve_core/__init__.pyi (or the test kit) and import it from there"
    )


PLUGIN_PACKAGES = frozenset(path.name for path in REPOSITORY.glob("plugins/*/roleserve_*"))
"""Every plugin's package in the repository (``roleserve_controlplane``, ...)."""
BUILT_ON = ("roleserve_controlplane", "roleserve_kubernetes", "roleserve_metrics")
"""The plugins others build on, which must declare an API whatever imports them today."""


def _declared(package: str) -> frozenset[str]:
    """``package``'s declared API: its top-level ``__all__`` (empty without one)."""
    return frozenset(getattr(importlib.import_module(package), "__all__", ()))


def _imports_across_plugins(tree: ast.AST, own: str, in_tests: bool) -> Iterator[str]:
    """Imports in a source of plugin package ``own`` from another plugin's package that go
    past its declared API: a module below its top level (but its test kit, in tests), or a
    name its ``__all__`` does not list."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            package, _, below = node.module.partition(".")
            if package not in PLUGIN_PACKAGES or package == own:
                continue
            if below:
                if not (in_tests and (below == "testing" or below.startswith("testing."))):
                    yield f"line {node.lineno}: from {node.module} import ..."
                continue
            undeclared = sorted(a.name for a in node.names if a.name not in _declared(package))
            if undeclared:
                yield f"line {node.lineno}: from {package} import {', '.join(undeclared)}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                package, _, below = alias.name.partition(".")
                if package in PLUGIN_PACKAGES and package != own and below:
                    yield f"line {node.lineno}: import {alias.name}"


def _plugin_sources() -> Iterator[tuple[Path, str, bool]]:
    """Every plugin's Python sources and tests: path, its plugin's package, whether a test."""
    for plugin in sorted(REPOSITORY.glob("plugins/*/roleserve_*")):
        for path in sorted(plugin.parent.glob("**/*.py")):
            if ".venv" not in path.parts and not path.name.endswith(("_pb2.py", "_pb2_grpc.py")):
                yield path, plugin.name, "tests" in path.relative_to(plugin.parent).parts


def test_plugins_import_each_other_only_through_their_declared_api() -> None:
    across = {
        str(path.relative_to(REPOSITORY)): found
        for path, own, in_tests in _plugin_sources()
        if (found := list(_imports_across_plugins(ast.parse(path.read_text()), own, in_tests)))
    }
    assert across == {}, (
        "these import another plugin's insides; declare what they need in that plugin's "
        "__init__.pyi (its top-level __all__), or its test kit for tests, and import it from there"
    )


def test_the_plugins_others_build_on_declare_their_api() -> None:
    """Each lists its API, and every name of it resolves (``lazy_loader`` imports it)."""
    for package in BUILT_ON:
        module = importlib.import_module(package)
        assert module.__all__, package
        for name in module.__all__:
            assert getattr(module, name) is not None, f"{package}.{name}"


@pytest.mark.parametrize(
    ("source", "in_tests", "found"),
    [
        ("from roleserve_controlplane import EtcdClient, handled", False, []),
        ("from roleserve_controlplane import Nonesuch, csr_key", False, ["Nonesuch"]),
        ("from roleserve_controlplane.curator.errors import handled", False, ["curator.errors"]),
        ("import roleserve_controlplane.consensus", False, ["import roleserve_controlplane."]),
        ("from roleserve_controlplane.testing import EtcdCluster", True, []),
        ("from roleserve_controlplane.testing import EtcdCluster", False, ["testing"]),
        ("from roleserve_kubernetes.values import POD_NETWORK", False, []),  # its own
        ("import roleserve_controlplane", False, []),
    ],
)
def test_the_plugin_import_check_tells_declared_from_private(
    source: str, in_tests: bool, found: list[str]
) -> None:
    """What the walk above counts, on sources of the kubernetes plugin."""
    lines = list(_imports_across_plugins(ast.parse(source), "roleserve_kubernetes", in_tests))
    assert len(lines) == len(found)
    for line, part in zip(lines, found, strict=True):
        assert part in line
