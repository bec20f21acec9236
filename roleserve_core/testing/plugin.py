"""Plugin API 1's path of ``roleserve_core.testing.pytest_plugin``, the test kit's pytest
plugin, renamed so that its name says which kind of plugin it is: pytest's, not roleserve's.

pytest finds the fixtures through the ``pytest11`` entry point, which names the new module;
this one is kept for a suite that imports from it (a fixture or hook function by name):
each name still imports, with a ``DeprecationWarning`` naming
``roleserve_core.testing.pytest_plugin``. It holds no fixture of its own, so listing it in
``pytest_plugins`` too registers nothing twice. It goes when the core stops accepting plugin
API 1 (docs/plugin-guide.md, "The plugin API promise").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from roleserve_core._moved import moved_module

if TYPE_CHECKING:  # what type checkers see; at run time, __getattr__ answers, and warns
    from roleserve_core.testing.pytest_plugin import anyio_backend as anyio_backend
    from roleserve_core.testing.pytest_plugin import fake_clock as fake_clock
    from roleserve_core.testing.pytest_plugin import fake_cluster as fake_cluster
    from roleserve_core.testing.pytest_plugin import node as node
    from roleserve_core.testing.pytest_plugin import plugin_manager as plugin_manager
    from roleserve_core.testing.pytest_plugin import pytest_configure as pytest_configure
    from roleserve_core.testing.pytest_plugin import pytest_unconfigure as pytest_unconfigure
    from roleserve_core.testing.pytest_plugin import supervisor_runner as supervisor_runner
    from roleserve_core.testing.pytest_plugin import value_registry as value_registry

__all__ = [
    "anyio_backend",
    "fake_clock",
    "fake_cluster",
    "node",
    "plugin_manager",
    "pytest_configure",
    "pytest_unconfigure",
    "supervisor_runner",
    "value_registry",
]

if not TYPE_CHECKING:
    __getattr__ = moved_module(__name__, "roleserve_core.testing.pytest_plugin", __all__, api=1)
