"""A test plugin written for a plugin API this core does not provide."""

from roleserve_core import hookimpl

ROLESERVE_PLUGIN_API = 2


@hookimpl
def on_roles() -> None:
    """Never called: the plugin is refused before it is registered."""
