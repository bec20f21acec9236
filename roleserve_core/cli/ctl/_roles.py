"""``ctl roles set NODE ROLE [KEY=VALUE ...]`` and ``ctl roles unset NODE ROLE``.

One change per command, sent as one ``UpdateNodeRoles`` change; the curator checks the role
name, its dependencies (``kubernetes_controller`` needs ``consensus_member``) and what the
consensus role takes, and answers with the node's roles after the change, which are printed:
the operator sees at once what the node holds now, not only that the call returned.

Parameters belong to custom roles only. The curator would silently ignore them on a
built-in role; refusing them here (exit 2) tells the operator they had no effect.

A custom role is only a name to the curator, so a typo (``custom:helo``) is accepted. Each
node reports the custom roles its plugins handle (``NodeStatus.handled_custom_roles``);
setting any other warns on stderr and still sets it, since a role may be given before its
plugin is installed. Unsetting a role the node does not hold says so and sends nothing.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from roleserve_core.cli._format import format_roles_message
from roleserve_core.cli.ctl import _command
from roleserve_core.cli.ctl._errors import EXIT_USAGE, CtlError

if TYPE_CHECKING:
    from roleserve_core.cli.ctl._session import Session
    from roleserve_core.proto import management_pb2

__all__ = ["add_parsers", "parameter", "unhandled_role_warning"]

ROLE_HELP = (
    "consensus_member, kubernetes_controller, kubernetes_worker, or custom:<name> for a "
    "role of a third-party plugin"
)


def add_parsers(commands: Any) -> None:
    """Register ``roles set`` and ``roles unset``."""
    roles = commands.add_parser(
        "roles",
        description="Assign a role to a node, or remove one; prints the node's roles after.",
    )
    actions = roles.add_subparsers(title="actions", metavar="ACTION", required=True)

    parser = _command.add(
        actions,
        "set",
        set_role,
        help="assign a role",
        description=(
            "Assign ROLE to NODE. Custom roles (custom:<name>) take parameters as "
            "KEY=VALUE; setting a custom role the node holds replaces its parameters."
        ),
    )
    _command.add_node_argument(parser)
    parser.add_argument("role", metavar="ROLE", help=ROLE_HELP)
    parser.add_argument(
        "parameters",
        metavar="KEY=VALUE",
        nargs="*",
        type=parameter,
        help="a parameter of a custom role",
    )

    parser = _command.add(
        actions,
        "unset",
        unset_role,
        help="remove a role",
        description=(
            "Remove ROLE from NODE. Removing consensus_member removes the node's etcd "
            "member first; the curator refuses if the cluster would lose its quorum."
        ),
    )
    _command.add_node_argument(parser)
    parser.add_argument("role", metavar="ROLE", help=ROLE_HELP)


def parameter(text: str) -> tuple[str, str]:
    """``KEY=VALUE`` as a pair; the value may contain ``=``, the key may not be empty."""
    key, equals, value = text.partition("=")
    if not equals or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    return key, value


async def set_role(session: Session, args: argparse.Namespace) -> None:
    """``ctl roles set``."""
    parameters = dict(args.parameters)
    if parameters and not args.role.startswith("custom:"):
        raise CtlError(f"{args.role} takes no parameters; only custom:<name> roles do", EXIT_USAGE)
    node = await session.resolve(args.node)
    unhandled = unhandled_role_warning(node, args.role)
    if unhandled is not None:
        print(f"roleserve ctl: warning: {unhandled}", file=sys.stderr)
    await _change(session, node, args.role, assign=True, parameters=parameters)


async def unset_role(session: Session, args: argparse.Namespace) -> None:
    """``ctl roles unset``."""
    node = await session.resolve(args.node)
    if not _holds(node, args.role):
        print(f"{node.id} does not hold {args.role}; nothing to unset", file=sys.stderr)
        print(f"{node.id}: {format_roles_message(node.roles)}")
        return
    await _change(session, node, args.role, assign=False)


def unhandled_role_warning(node: management_pb2.Node, role: str) -> str | None:
    """Why setting ``role`` on ``node`` may do nothing: no plugin there handles it.

    None for built-in roles, for a handled custom role, and for a node that has not
    reported a status yet (what its plugins handle is unknown then).
    """
    name = role.removeprefix("custom:")
    if name == role or not node.HasField("status"):
        return None
    handled = node.status.handled_custom_roles
    if name in handled:
        return None
    return (
        f"no plugin on {node.id} handles {role} (its plugins handle: "
        f"{', '.join(handled) or 'no custom roles'}); setting it anyway, for a plugin "
        "installed later"
    )


def _holds(node: management_pb2.Node, role: str) -> bool:
    """Whether ``node`` holds ``role``; True for a name the curator should judge."""
    from roleserve_core.roles import roles_from_proto

    try:
        return roles_from_proto(node.roles).has(role)
    except ValueError:  # not a role name: let the curator refuse it, as for set
        return True


async def _change(
    session: Session,
    node: management_pb2.Node,
    role: str,
    *,
    assign: bool,
    parameters: Mapping[str, str] | None = None,
) -> None:
    """Assign or remove ``role``; print the node's roles after."""
    from roleserve_core.proto import management_pb2

    change = management_pb2.UpdateNodeRolesRequest.Change(
        role=role, assign=assign, parameters=parameters
    )
    request = management_pb2.UpdateNodeRolesRequest(node_id=node.id, changes=[change])
    action = f"{'assigning' if assign else 'removing'} {role} on {node.id}"
    response = await session.call(action, session.management.UpdateNodeRoles, request)
    print(f"{node.id}: {format_roles_message(response.roles)}")
