"""A test plugin whose roleserve_add_hookspecs raises."""

import pluggy

from roleserve_core import hookimpl

ROLESERVE_PLUGIN_API = 1


@hookimpl
def roleserve_add_hookspecs(plugin_manager: pluggy.PluginManager) -> None:
    """Fails, as a plugin with a bug would."""
    raise RuntimeError("hookspecs are broken")
