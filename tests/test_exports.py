"""The public surface: what plugin authors import from ``roleserve_core``.

The plugin API is ``roleserve_core``'s top level (listed in ``__init__.pyi``), its
namespaces for plugins that serve the cluster (``SERVING_NAMESPACES``), and the test kit.
Every plugin of the repository, the example and what ``roleserve plugin new`` writes import
only from those: the last test walks their sources.
"""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import roleserve_core
from roleserve_core.cli.plugin_new import NewPlugin, render
from roleserve_core.plugins import PLUGIN_API_VERSION
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
