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
session with the leading curator, and its refusals as one line with an exit code. A command
that issues credentials and writes them out (the metrics plugin's ``prometheus-config``)
does it as ``credentials issue`` does: ``check_ctl_out`` refuses a non-empty ``--out``,
``issue_ctl_credentials`` has the leader sign a key made here, ``save_ctl_access`` writes an
access directory; ``roleserve_command`` names the command to print in what it writes. The
names here are the core's own, under names that say they are ``ctl``'s, exported at the top
of ``roleserve_core``.
"""

from __future__ import annotations

from roleserve_core.access import ClusterAccess
from roleserve_core.cli._invocation import roleserve_command
from roleserve_core.cli.ctl._command import add
from roleserve_core.cli.ctl._credentials import check_out, issue_credentials, save_access
from roleserve_core.cli.ctl._errors import EXIT_REFUSED, EXIT_USAGE, CtlError
from roleserve_core.cli.ctl._session import Session, open_session

__all__ = [
    "EXIT_REFUSED",
    "EXIT_USAGE",
    "ClusterAccess",
    "CtlError",
    "CtlSession",
    "add_ctl_command",
    "check_ctl_out",
    "issue_ctl_credentials",
    "open_ctl_session",
    "roleserve_command",
    "save_ctl_access",
]

add_ctl_command = add
"""Register a ``ctl`` sub-command (``_command.add``): ``add_ctl_command(commands, name,
run, help=..., description=...)`` returns its parser for the command's own arguments."""

CtlSession = Session
"""What a sub-command's ``run(session, args)`` gets: the access, the leader, its channel."""

open_ctl_session = open_session
"""``async with open_ctl_session(access, timeout) as session``: a session as ``ctl`` opens
one, for tests of a plugin's sub-command."""

check_ctl_out = check_out
"""``check_ctl_out(directory)``: refuse (``CtlError``, exit 2) a ``--out`` that is not new or
an empty directory, as ``credentials issue`` does."""

issue_ctl_credentials = issue_credentials
"""``await issue_ctl_credentials(session, name, scope)``: new ``UserCredentials`` of
``scope`` for ``name``, a key made here and the certificate the leader signs for it."""

save_ctl_access = save_access
"""``save_ctl_access(session, credentials, directory)``: the credentials as an access
directory (with the session's endpoints), so that ``ctl --credentials DIR`` works with it."""
