"""A test plugin whose on_roles and on_curator_connection raise on every call."""

from roleserve_core import NodeContext, NodeRoles, hookimpl
from roleserve_core.values import CuratorConnection

ROLESERVE_PLUGIN_API = 1


@hookimpl
def on_roles(roles: NodeRoles, node: NodeContext) -> None:
    """Fails, as a plugin with a bug would."""
    raise RuntimeError("on_roles is broken")


@hookimpl
def on_curator_connection(connection: CuratorConnection, node: NodeContext) -> None:
    """Fails, as a plugin with a bug would."""
    raise RuntimeError("on_curator_connection is broken")
