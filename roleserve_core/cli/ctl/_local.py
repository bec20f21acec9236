"""A local cluster (``roleserve cluster up``) seen from ``ctl``: its owner's credentials and
the names its table gives its nodes.

::

    D/ (first-address, owner/, n1/ … nN/)
      --credentials D ─────────────▶ D/owner            (D itself holds no key.pem)
      no credentials, none in ~/.config/roleserve/owner,
      a cluster in cluster up's default directory ─▶ named in the error, to pass
      access directory D/owner ────▶ n<i> as NODE: node i's ID, from D/n<i>'s key
                                     (``Session.resolve``, for that name only)

The names are read from the cluster's own directory, the one ``cluster status`` reads for
its table, so ``n2`` means what that table shows; any other NODE is an ID or a prefix of
one, matched against the cluster's nodes as before.
"""

from __future__ import annotations

import re
from pathlib import Path

from roleserve_core.localcluster.layout import FIRST_ADDRESS_FILE, OWNER_DIRECTORY

__all__ = ["cluster_of", "local_credentials_hint", "node_id_named", "owner_of"]

_NODE_DIRECTORY = re.compile(r"^n[0-9]+$")


def _is_cluster(directory: Path) -> bool:
    return (directory / FIRST_ADDRESS_FILE).is_file() and (directory / OWNER_DIRECTORY).is_dir()


def owner_of(directory: Path) -> Path:
    """The access directory to read for ``directory``: its ``owner/`` when it is a local
    cluster's directory, else ``directory`` itself."""
    return directory / OWNER_DIRECTORY if _is_cluster(directory) else directory


def cluster_of(access: Path) -> Path | None:
    """The local cluster whose owner's access directory ``access`` is; None if it is none."""
    if access.name == OWNER_DIRECTORY and _is_cluster(access.parent):
        return access.parent
    return None


def node_id_named(access: Path, name: str) -> str | None:
    """The ID of the node ``name`` (``n<i>``) names in the local cluster of ``access``;
    None when ``name`` is no such name, ``access`` no local cluster's owner directory, or
    that node has no key yet (or a broken one). Only that node's key is read."""
    from roleserve_core.datadir import NodeDataDirectory
    from roleserve_core.errors import IdentityError

    cluster = cluster_of(access)
    if cluster is None or not _NODE_DIRECTORY.match(name):
        return None
    try:
        return NodeDataDirectory(cluster / name).read_node_id()
    except IdentityError:
        return None


def local_credentials_hint(default_cluster: Path) -> str:
    """What to add to "no credentials" when none were given: where the local cluster in
    ``cluster up``'s default directory keeps its owner's, if there is one there."""
    if not _is_cluster(default_cluster):
        return ""
    owner = default_cluster / OWNER_DIRECTORY
    return f"; the local cluster in {default_cluster} has its owner's: --credentials {owner}"
