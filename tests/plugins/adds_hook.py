"""A test plugin that defines a hook of its own: ``roleserve_greeting``."""

import pluggy

from roleserve_core import hookimpl, hookspec

ROLESERVE_PLUGIN_API = 1


class GreetingSpecs:
    """The hooks this plugin adds."""

    @hookspec
    def roleserve_greeting(self, name: str) -> str:
        """A greeting for ``name``; every plugin may contribute one."""
        raise NotImplementedError  # specification only


@hookimpl
def roleserve_add_hookspecs(plugin_manager: pluggy.PluginManager) -> None:
    """Add ``roleserve_greeting``."""
    plugin_manager.add_hookspecs(GreetingSpecs)
