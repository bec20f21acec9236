"""A test plugin written for plugin API 2, newer than any this core accepts."""

from roleserve_core import hookimpl

ROLESERVE_PLUGIN_API = 2


@hookimpl
def on_roles() -> None:
    """Never called: the plugin is refused before it is registered."""
