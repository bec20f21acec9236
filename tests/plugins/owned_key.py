"""A test plugin that declares a key the built-in plugin core owns."""

from typing import Any

from roleserve_core import ValueKey, hookimpl
from roleserve_core.values import ROLES

ROLESERVE_PLUGIN_API = 1


@hookimpl
def roleserve_values() -> list[ValueKey[Any]]:
    """roles, which core owns and declares first."""
    return [ROLES]
