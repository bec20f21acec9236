"""Plugin API 1's path of ``roleserve_core.cluster_extension`` (what a plugin adds to
``roleserve cluster up|status``), renamed after the ``ClusterExtension`` it defines, so that
its name says what it is: an extension of ``cluster``, not a part of the plugin loader
(``plugin_loader``, ``plugin_problems``).

Kept for plugins that import from here: every name still does, with a ``DeprecationWarning``
naming ``roleserve_core.cluster_extension`` (the classes a plugin needs are also at
``roleserve_core``'s top level). It goes when the core stops accepting plugin API 1
(docs/plugin-guide.md, "The plugin API promise").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from roleserve_core._moved import moved_module

if TYPE_CHECKING:  # what type checkers see; at run time, __getattr__ answers, and warns
    from roleserve_core.cluster_extension import GROUP as GROUP
    from roleserve_core.cluster_extension import ClusterExtension as ClusterExtension
    from roleserve_core.cluster_extension import ClusterMember as ClusterMember
    from roleserve_core.cluster_extension import ClusterView as ClusterView
    from roleserve_core.cluster_extension import RunnableSeen as RunnableSeen
    from roleserve_core.cluster_extension import load_extensions as load_extensions

__all__ = [
    "GROUP",
    "ClusterExtension",
    "ClusterMember",
    "ClusterView",
    "RunnableSeen",
    "load_extensions",
]

if not TYPE_CHECKING:
    __getattr__ = moved_module(__name__, "roleserve_core.cluster_extension", __all__, api=1)
