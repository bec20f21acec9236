"""A test plugin whose roleserve_values raises."""

from typing import Any

from roleserve_core import ValueKey, hookimpl

ROLESERVE_PLUGIN_API = 1


@hookimpl
def roleserve_values() -> list[ValueKey[Any]]:
    """Fails, as a plugin with a bug would."""
    raise RuntimeError("values are broken")
