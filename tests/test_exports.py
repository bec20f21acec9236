"""The public surface: what plugin authors import from ``roleserve_core``."""

from __future__ import annotations

import subprocess
import sys

import pytest

import roleserve_core


def test_all_names_exist_once() -> None:
    """(Its order is ruff's RUF022 to keep.)"""
    assert len(set(roleserve_core.__all__)) == len(roleserve_core.__all__)
    for name in roleserve_core.__all__:
        assert hasattr(roleserve_core, name), name


def test_plugin_author_api_is_at_the_top() -> None:
    from roleserve_core import (  # noqa: F401 - the import itself is the test
        NodeContext,
        RunContext,
        Value,
        ValueKey,
        Worker,
        hookimpl,
    )


def test_public_objects_say_where_they_live() -> None:
    """Every exported class or function is defined in a roleserve_core module and documented."""
    for name in roleserve_core.__all__:
        obj = getattr(roleserve_core, name)
        if isinstance(obj, type) or callable(obj):
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
