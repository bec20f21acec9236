"""A test plugin whose roleserve_settings raises."""

from typing import Any

from roleserve_core import Setting, hookimpl

ROLESERVE_PLUGIN_API = 1


@hookimpl
def roleserve_settings() -> list[Setting[Any]]:
    """Fails, as a plugin with a bug would."""
    raise RuntimeError("settings are broken")
