"""A test plugin that does not declare ROLESERVE_PLUGIN_API."""

from roleserve_core import hookimpl


@hookimpl
def on_roles() -> None:
    """Never called: the plugin is refused before it is registered."""
