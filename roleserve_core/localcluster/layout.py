"""The roles a local cluster gives its nodes unless told otherwise.

::

    nodes   consensus_member + kubernetes_controller     kubernetes_worker (K workers)
    1–2     node 1                                       nodes 1 … K
    3+      nodes 1, 2, 3                                nodes 1 … K

Three consensus members survive the loss of any one; two would survive none (etcd needs a
majority), so a cluster of two keeps one. Roles whose plugins are not installed are simply
held, as on a real cluster.

K (``cluster up --kubernetes-workers``) is every node up to ``DEFAULT_KUBERNETES_WORKERS``
nodes and that many above: the first nodes by index, the consensus members first. A
kubelet and its containerd cost about 0.9 % of a core idle and 135 MiB each, so 100 of
them on a laptop's few cores are a Kubernetes benchmark, not a cluster to try (issue 30:
no curator answered in time at 100 nodes with every kubelet); 10 workers keep Kubernetes
there to try while the role server's own scale shows.
"""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path
from typing import Final, Literal

__all__ = [
    "ALL_WORKERS",
    "CONSENSUS_MEMBERS",
    "DEFAULT_KUBERNETES_WORKERS",
    "DEFAULT_SIZE",
    "DOWN_FILE",
    "FIRST_ADDRESS",
    "FIRST_ADDRESS_FILE",
    "MAX_SIZE",
    "OWNER_DIRECTORY",
    "default_cluster_directory",
    "default_kubernetes_workers",
    "default_roles",
    "kubernetes_workers_value",
]

CONSENSUS_MEMBERS = 3
DEFAULT_SIZE = 3
"""Nodes of a new cluster when ``--nodes`` is not given: the fewest that survive a loss."""
MAX_SIZE = 100
"""The most nodes ``cluster up`` starts: what ``benchmarks/scale.py`` measures on two cores
(issue 30). Loopback and ``--netns`` addresses hold more (``netns.MAX_NODES``); one machine's
memory and CPU are the limit, not the addressing."""
DEFAULT_KUBERNETES_WORKERS = 10
"""The most nodes that get ``kubernetes_worker`` unless ``--kubernetes-workers`` says
otherwise (see the module docstring)."""
ALL_WORKERS: Final = "all"
"""``--kubernetes-workers all``: every node gets ``kubernetes_worker``."""
FIRST_ADDRESS = ipaddress.IPv4Address("127.0.0.11")
"""Node 1's address unless chosen; node i has the i-th from it."""
FIRST_ADDRESS_FILE = "first-address"
"""In the cluster's directory: node 1's address, so later commands find the nodes again
(and ``ctl`` knows the directory for a local cluster's)."""
DOWN_FILE = "down"
"""In the cluster's directory: when ``cluster down`` last ran (nanoseconds since the epoch),
so that a foreground ``cluster up`` showing its status ends when its nodes were stopped."""
OWNER_DIRECTORY = "owner"
"""In the cluster's directory: the owner's access directory, which node 1's bootstrap
writes."""


def default_cluster_directory() -> Path:
    """``$XDG_STATE_HOME/roleserve/cluster`` (``~/.local/state/roleserve/cluster``): where
    ``cluster up`` keeps a cluster unless ``--dir`` says otherwise, and where ``ctl`` looks
    for one when it has no credentials."""
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "roleserve" / "cluster"


def default_kubernetes_workers(size: int) -> int:
    """How many nodes of ``size`` get ``kubernetes_worker`` unless told: all of a small
    cluster, ``DEFAULT_KUBERNETES_WORKERS`` of a larger one."""
    return min(size, DEFAULT_KUBERNETES_WORKERS)


def kubernetes_workers_value(text: str) -> int | Literal["all"]:
    """``--kubernetes-workers``' value (of ``cluster up`` and the benchmarks that run it):
    a number of nodes, or ``all``.

    :raises ValueError: for anything else, saying what is taken.
    """
    if text == ALL_WORKERS:
        return ALL_WORKERS
    if not text.isdecimal():
        raise ValueError(f"{text!r} is not a number of nodes (0 or more) nor {ALL_WORKERS}")
    return int(text)


def default_roles(index: int, size: int, *, workers: int | None = None) -> list[str]:
    """The roles of node ``index`` (1-based) of ``size``, consensus first.

    :param workers: how many nodes get ``kubernetes_worker``, the first by index;
        ``default_kubernetes_workers(size)`` unless given.
    """
    members = CONSENSUS_MEMBERS if size >= CONSENSUS_MEMBERS else 1
    roles = ["consensus_member", "kubernetes_controller"] if index <= members else []
    if workers is None:
        workers = default_kubernetes_workers(size)
    return [*roles, "kubernetes_worker"] if index <= workers else roles
