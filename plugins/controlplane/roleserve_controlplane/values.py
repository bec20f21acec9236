"""The values the controlplane plugin owns, besides the core's ``local_control_plane``.

::

    key                 type             set by                 read by
    bootstrapped        Bootstrapped     worker_controlplane    the core's enrolment: it saves
                                                                the owner's credentials and
                                                                starts the node's connection
"""

from __future__ import annotations

from dataclasses import dataclass

from roleserve_core import ValueKey
from roleserve_core.identity import NodeCredentials, UserCredentials

__all__ = ["BOOTSTRAPPED", "Bootstrapped"]


@dataclass(frozen=True)
class Bootstrapped:
    """What bootstrapping a cluster on this node produced."""

    node: NodeCredentials
    """The node's credentials in the new cluster."""
    owner: UserCredentials
    """The owner's credentials: the only way to manage the cluster; save them."""


BOOTSTRAPPED: ValueKey[Bootstrapped] = ValueKey(
    "bootstrapped",
    Bootstrapped,
    "Set once this node has bootstrapped a new cluster: its own and the owner's credentials.",
)
