"""Bootstrap: this node creates a new cluster (``node run --bootstrap``).

::

    node key (made once, saved) ─▶ bootstrap value ─▶ controlplane plugin: etcd bootstraps,
                                                      the cluster's records are written,
                                                      the curator starts
    bootstrapped value ─▶ owner access directory (credentials + this curator's endpoint)
                       ─▶ roles.pb (the bootstrap roles: a restart before the curator's
                          first answer still starts the control plane)
                       ─▶ node credentials (last: the node is enrolled)
                       ─▶ marker removed; node_credentials, node_id set

Each step is repeatable: the controlplane keeps its bootstrap material on disk, so an
interrupted bootstrap resumes with the same CA, and the owner directory is overwritten only
with the same cluster's credentials.
"""

from __future__ import annotations

from pathlib import Path

from roleserve_core.access import ClusterAccess
from roleserve_core.connection.curators import KnownCurators
from roleserve_core.datadir import NodeDataDirectory
from roleserve_core.enrolment._enrolled import announce, save_credentials
from roleserve_core.errors import EnrolmentError, IdentityError
from roleserve_core.identity import (
    CA_FILE,
    CERTIFICATE_FILE,
    certificate_from_pem,
    certificate_to_pem,
)
from roleserve_core.ports import CURATOR_PORT, endpoint
from roleserve_core.registry import PluginValues
from roleserve_core.supervisor import RunContext
from roleserve_core.values import BOOTSTRAP, BOOTSTRAPPED, NETWORK, Bootstrapped, BootstrapRequest
from roleserve_core.workers.rolefetch import ROLES_FILE, save_roles

__all__ = ["bootstrap"]


async def bootstrap(
    ctx: RunContext,
    datadir: NodeDataDirectory,
    values: PluginValues,
    known: KnownCurators,
    owner_directory: Path,
) -> None:
    """Bootstrap a cluster through the controlplane plugin and save what it made."""
    key = datadir.load_or_create_key(datadir.key)
    with values.watch(NETWORK) as network:
        status = await network.get(filter=lambda status: status.external_address is not None)
    address = status.external_address
    assert address is not None
    ctx.set_note("bootstrapping a new cluster")
    ctx.log.info("bootstrapping a new cluster at %s", address)
    values.set(BOOTSTRAP, BootstrapRequest(key))
    with values.watch(BOOTSTRAPPED) as watcher:
        done = await watcher.get()
    curator = endpoint(address, CURATOR_PORT)
    _save_owner(owner_directory, done, curator)
    save_roles(datadir.plugin("core") / ROLES_FILE, done.roles)
    save_credentials(datadir, done.node, known, [curator])
    datadir.bootstrapping.unlink(missing_ok=True)
    ctx.log.info(
        "bootstrapped a new cluster; this node is %s. The owner's credentials are in %s: "
        "roleserve ctl --credentials %s nodes",
        done.node.node_id,
        owner_directory,
        owner_directory,
    )
    announce(values, done.node)


def _save_owner(directory: Path, done: Bootstrapped, curator: str) -> None:
    """Write the owner's access directory, unless it holds another cluster's credentials.

    Only the CA file decides whose they are. The directory is written file by file, the CA
    first, so a crash during an earlier attempt of this bootstrap leaves this cluster's CA
    beside a certificate without its key: incomplete, but ours to overwrite. (Loading the
    whole credentials, as this did before, called that "other cluster credentials" and
    stopped the node for good.)
    """
    if (directory / CERTIFICATE_FILE).exists():
        try:
            existing = certificate_from_pem((directory / CA_FILE).read_bytes())
        except (OSError, IdentityError):
            existing = None
        ours = certificate_to_pem(done.owner.ca_certificate)
        if existing is None or certificate_to_pem(existing) != ours:
            raise EnrolmentError(
                f"{directory} now holds other cluster credentials; the new cluster's owner "
                "credentials were not written there. Move them away and restart the node"
            )
    ClusterAccess.of(done.owner, [curator]).save(directory)
