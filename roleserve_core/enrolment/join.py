"""Join: an enrolled node starts with the credentials it saved.

No call to the curator is needed (or possible, when the control plane is down and this
node must start its part of it from its saved roles): the saved node certificate is the
node's identity. Leftovers of an enrolment that finished just before a crash (the bootstrap
marker, the pending registration) are removed.
"""

from __future__ import annotations

from roleserve_core.datadir import NodeDataDirectory
from roleserve_core.enrolment._enrolled import announce
from roleserve_core.identity import NodeCredentials
from roleserve_core.supervisor import RunContext
from roleserve_core.values import PluginValues

__all__ = ["join"]


async def join(ctx: RunContext, datadir: NodeDataDirectory, values: PluginValues) -> None:
    """Load the saved credentials and announce them.

    :raises CredentialsError: if they are missing, corrupt or mismatched (naming the file).
    """
    credentials = NodeCredentials.load(datadir.credentials)
    datadir.bootstrapping.unlink(missing_ok=True)
    datadir.registration.unlink(missing_ok=True)
    ctx.log.info("joining the cluster as %s with the saved credentials", credentials.node_id)
    announce(values, credentials)
