"""Plugin API 1's path of ``roleserve_core.plugin_loader`` (finding, loading and calling
plugins), renamed so that its name says what it is among the modules about plugins: the
loader, beside ``plugin_problems`` (what is wrong with a plugin, in words), the plugin
extension APIs ``ctl_extension`` and ``cluster_extension``, and the commands
``cli/plugin_list.py`` and ``cli/plugin_new.py``.

Kept for plugins and their tests that import from here: every name still does, with a
``DeprecationWarning`` naming ``roleserve_core.plugin_loader``. It goes when the core stops
accepting plugin API 1 (docs/plugin-guide.md, "The plugin API promise").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from roleserve_core._moved import moved_module

if TYPE_CHECKING:  # what type checkers see; at run time, __getattr__ answers, and warns
    from roleserve_core.plugin_loader import ACCEPTED_PLUGIN_APIS as ACCEPTED_PLUGIN_APIS
    from roleserve_core.plugin_loader import BUILTIN_PLUGINS as BUILTIN_PLUGINS
    from roleserve_core.plugin_loader import ENTRY_POINT_GROUP as ENTRY_POINT_GROUP
    from roleserve_core.plugin_loader import PLUGIN_API_VERSION as PLUGIN_API_VERSION
    from roleserve_core.plugin_loader import BuiltinPlugin as BuiltinPlugin
    from roleserve_core.plugin_loader import HookCall as HookCall
    from roleserve_core.plugin_loader import PluginInfo as PluginInfo
    from roleserve_core.plugin_loader import PluginSelection as PluginSelection
    from roleserve_core.plugin_loader import PluginSet as PluginSet
    from roleserve_core.plugin_loader import PluginState as PluginState

__all__ = [
    "ACCEPTED_PLUGIN_APIS",
    "BUILTIN_PLUGINS",
    "ENTRY_POINT_GROUP",
    "PLUGIN_API_VERSION",
    "BuiltinPlugin",
    "HookCall",
    "PluginInfo",
    "PluginSelection",
    "PluginSet",
    "PluginState",
]

if not TYPE_CHECKING:
    __getattr__ = moved_module(__name__, "roleserve_core.plugin_loader", __all__, api=1)
