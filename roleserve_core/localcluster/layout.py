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

__all__ = ["CONSENSUS_MEMBERS", "default_roles"]

CONSENSUS_MEMBERS = 3


def default_roles(index: int, size: int) -> list[str]:
    """The roles of node ``index`` (1-based) of ``size``, consensus first."""
    members = CONSENSUS_MEMBERS if size >= CONSENSUS_MEMBERS else 1
    roles = ["consensus_member", "kubernetes_controller"] if index <= members else []
    return [*roles, "kubernetes_worker"]
