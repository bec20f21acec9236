"""A test plugin with a misspelled hook, and an optional hook of a plugin that is absent."""

from roleserve_core import hookimpl

ROLESERVE_PLUGIN_API = 1


@hookimpl
def on_role() -> None:
    """Misspelled: the hook is on_roles."""


@hookimpl(optionalhook=True)
def roleserve_metrics_exporters() -> list[str]:
    """A hook the (absent) plugin that defines it would call."""
    return []
