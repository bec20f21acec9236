"""The roles a local cluster gives its nodes unless told otherwise.

::

    nodes   consensus_member + kubernetes_controller     kubernetes_worker
    1–2     node 1                                       every node
    3+      nodes 1, 2, 3                                every node

Three consensus members survive the loss of any one; two would survive none (etcd needs a
majority), so a cluster of two keeps one. Roles whose plugins are not installed are simply
held, as on a real cluster.
"""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path

__all__ = [
    "CONSENSUS_MEMBERS",
    "DEFAULT_SIZE",
    "FIRST_ADDRESS",
    "FIRST_ADDRESS_FILE",
    "MAX_SIZE",
    "OWNER_DIRECTORY",
    "default_cluster_directory",
    "default_roles",
]

CONSENSUS_MEMBERS = 3
DEFAULT_SIZE = 3
"""Nodes of a new cluster when ``--nodes`` is not given: the fewest that survive a loss."""
MAX_SIZE = 100
"""The most nodes ``cluster up`` starts: what ``benchmarks/scale.py`` measures on two cores
(issue 30). Loopback and ``--netns`` addresses hold more (``netns.MAX_NODES``); one machine's
memory and CPU are the limit, not the addressing."""
FIRST_ADDRESS = ipaddress.IPv4Address("127.0.0.11")
"""Node 1's address unless chosen; node i has the i-th from it."""
FIRST_ADDRESS_FILE = "first-address"
"""In the cluster's directory: node 1's address, so later commands find the nodes again
(and ``ctl`` knows the directory for a local cluster's)."""
OWNER_DIRECTORY = "owner"
"""In the cluster's directory: the owner's access directory, which node 1's bootstrap
writes."""


def default_cluster_directory() -> Path:
    """``$XDG_STATE_HOME/roleserve/cluster`` (``~/.local/state/roleserve/cluster``): where
    ``cluster up`` keeps a cluster unless ``--dir`` says otherwise, and where ``ctl`` looks
    for one when it has no credentials."""
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "roleserve" / "cluster"


def default_roles(index: int, size: int) -> list[str]:
    """The roles of node ``index`` (1-based) of ``size``, consensus first."""
    members = CONSENSUS_MEMBERS if size >= CONSENSUS_MEMBERS else 1
    roles = ["consensus_member", "kubernetes_controller"] if index <= members else []
    return [*roles, "kubernetes_worker"]
