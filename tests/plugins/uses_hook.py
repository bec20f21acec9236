"""A test plugin that implements ``roleserve_greeting``, which adds_hook defines."""

from roleserve_core import hookimpl

ROLESERVE_PLUGIN_API = 1


@hookimpl
def roleserve_greeting(name: str) -> str:
    """Greets in English."""
    return f"hello {name}"
