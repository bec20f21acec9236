"""The last step of every enrolment path: save the credentials, then announce them."""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence

from roleserve_core.connection.curators import KnownCurators
from roleserve_core.datadir import NodeDataDirectory
from roleserve_core.identity import NodeCredentials
from roleserve_core.registry import PluginValues
from roleserve_core.values import NODE_CREDENTIALS, NODE_ID

__all__ = ["announce", "save_credentials"]


def save_credentials(
    datadir: NodeDataDirectory,
    credentials: NodeCredentials,
    known: KnownCurators,
    seeds: Sequence[str],
) -> None:
    """Save the seeds, then the credentials, as one rename: a crash leaves the node either
    not enrolled (the enrolment resumes) or enrolled, never half."""
    known.set_seeds(seeds)
    staging = datadir.node / "credentials.new"
    if staging.exists():
        shutil.rmtree(staging)
    credentials.save(staging)
    os.replace(staging, datadir.credentials)


def announce(values: PluginValues, credentials: NodeCredentials) -> None:
    """Set ``node_credentials`` and ``node_id``: the connection and the workers start."""
    values.set(NODE_ID, credentials.node_id)
    values.set(NODE_CREDENTIALS, credentials)
