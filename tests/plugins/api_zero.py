"""A test plugin written for plugin API 0, older than any this core accepts."""

from roleserve_core import hookimpl

ROLESERVE_PLUGIN_API = 0


@hookimpl
def on_roles() -> None:
    """Never called: the plugin is refused before it is registered."""
