"""What a plugin's ``roleserve ctl`` sub-command is written with (entry-point group
``roleserve.ctl``; see ``roleserve_core.cli.ctl._plugin_commands`` and the plugin guide).

::

    [project.entry-points."roleserve.ctl"]
    kubeconfig = "roleserve_kubernetes.ctl:add_parsers"

    def add_parsers(commands):                       # called when `ctl kubeconfig` runs
        parser = add_ctl_command(commands, "kubeconfig", run, help=..., description=...)
        parser.add_argument("--out", ...)

    async def run(session: CtlSession, args) -> None:
        stub = MyServiceStub(session.channel)        # the leader, over mutual TLS
        ...
        raise CtlError("one line, what to do", EXIT_USAGE)

A sub-command added so gets what every core sub-command has: the connection options, a
session with the leading curator, and its refusals as one line with an exit code. The names
here are the core's own, under names that say they are ``ctl``'s, exported at the top of
``roleserve_core``.
"""

from __future__ import annotations

from roleserve_core.access import ClusterAccess
from roleserve_core.cli.ctl._command import add
from roleserve_core.cli.ctl._errors import EXIT_REFUSED, EXIT_USAGE, CtlError
from roleserve_core.cli.ctl._session import Session, open_session

__all__ = [
    "EXIT_REFUSED",
    "EXIT_USAGE",
    "ClusterAccess",
    "CtlError",
    "CtlSession",
    "add_ctl_command",
    "open_ctl_session",
]

add_ctl_command = add
"""Register a ``ctl`` sub-command (``_command.add``): ``add_ctl_command(commands, name,
run, help=..., description=...)`` returns its parser for the command's own arguments."""

CtlSession = Session
"""What a sub-command's ``run(session, args)`` gets: the access, the leader, its channel."""

open_ctl_session = open_session
"""``async with open_ctl_session(access, timeout) as session``: a session as ``ctl`` opens
one, for tests of a plugin's sub-command."""
