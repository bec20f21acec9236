"""Join: an enrolled node starts with the credentials it saved.

No call to the curator is needed (or possible, when the control plane is down and this
node must start its part of it from its saved roles): the saved node certificate is the
node's identity. Leftovers of an enrolment that finished just before a crash (the bootstrap
marker, the pending registration) are removed.

A node certificate that has expired (the node was down for longer than the third of its
lifetime the ``renewal`` worker leaves) stops the node at once with one line: every TLS
handshake with it fails, and renewing takes a valid one. The node's ID is its key's, so the
way back is a new key: decommission the old node, remove the data directory, register anew.
"""

from __future__ import annotations

from roleserve_core.datadir import NodeDataDirectory
from roleserve_core.enrolment._enrolled import announce
from roleserve_core.errors import CredentialsError, IdentityError
from roleserve_core.identity import (
    CERTIFICATE_FILE,
    NodeCredentials,
    PublicKey,
    certificate_from_pem,
    node_id,
)
from roleserve_core.registry import PluginValues
from roleserve_core.supervisor import RunContext

__all__ = ["join"]


async def join(ctx: RunContext, datadir: NodeDataDirectory, values: PluginValues) -> None:
    """Load the saved credentials and announce them.

    :raises CredentialsError: if they are missing, corrupt or mismatched (naming the file),
        or the certificate has expired (saying how to enrol the machine anew).
    """
    _check_not_expired(datadir, ctx.clock.wall())
    credentials = NodeCredentials.load(datadir.credentials)
    datadir.bootstrapping.unlink(missing_ok=True)
    datadir.registration.unlink(missing_ok=True)
    ctx.log.info("joining the cluster as %s with the saved credentials", credentials.node_id)
    announce(values, credentials)


def _check_not_expired(datadir: NodeDataDirectory, now: float) -> None:
    """Checked before the credentials are loaded, which would refuse an expired certificate
    too, without saying what to do.

    :raises CredentialsError: if the saved node certificate expired before ``now`` (epoch
        seconds). A missing or corrupt one passes: loading names the file.
    """
    try:
        pem = (datadir.credentials / CERTIFICATE_FILE).read_bytes()
        certificate = certificate_from_pem(pem, "the node certificate")
    except (OSError, IdentityError):
        return
    expired = certificate.not_valid_after_utc
    key = certificate.public_key()
    if expired.timestamp() > now or not isinstance(key, PublicKey):
        return
    identity = node_id(key)
    raise CredentialsError(
        f"the node certificate of {identity} expired at {expired:%Y-%m-%d %H:%M:%S} UTC; "
        "the cluster no longer accepts it: decommission the node (roleserve ctl "
        f"decommission --yes {identity}), remove the data directory {datadir.root} and "
        "register the machine anew"
    )
