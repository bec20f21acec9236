"""The node's own workers, one module each, run by the built-in plugin ``core``.

::

    worker      DN                      reads                         does
    rolefetch   root.role.rolefetch     curator_connection            watches this node; sets
                                                                      and persists roles
    statuspush  root.role.statuspush    curator_connection, network,  reports address, version,
                                        local_control_plane,          running curator, handled
                                        handled_custom_roles          custom roles; again when
                                                                      its record differs
    heartbeat   root.role.heartbeat     curator_connection            beats at the curator's
                                                                      interval
    nodemgmt    root.role.nodemgmt      node_credentials, network,    serves NodeManagement,
                                        revoked_credentials           refusing revoked users
    nodewatch   root.role.nodewatch     curator_connection            keeps cluster_nodes from
                                                                      one Watch of every node,
                                                                      while anyone reads it
    renewal     root.role.renewal       node_credentials,             renews the node
                                        curator_connection            certificate after 2/3 of
                                                                      its lifetime; saves and
                                                                      sets node_credentials
    revocations root.role.revocations   curator_connection            keeps revoked_credentials
                                                                      (for nodemgmt) from the
                                                                      leader's stream of them

heartbeat and statuspush send the process's instance ID (``_identity``): the curator keeps
one process per node identity, and the refused one says so and retries.
"""

from __future__ import annotations

from roleserve_core.node import NodeContext, Worker
from roleserve_core.workers.heartbeat import heartbeat_worker
from roleserve_core.workers.nodemgmt import nodemgmt_worker
from roleserve_core.workers.nodewatch import nodewatch_worker
from roleserve_core.workers.renewal import renewal_worker
from roleserve_core.workers.revocations import revocations_worker
from roleserve_core.workers.rolefetch import rolefetch_worker
from roleserve_core.workers.statuspush import statuspush_worker

__all__ = ["core_workers"]


def core_workers(node: NodeContext) -> list[Worker]:
    """Every worker of the core, for the built-in plugin's ``roleserve_workers``."""
    return [
        rolefetch_worker(node),
        statuspush_worker(node),
        heartbeat_worker(node),
        nodemgmt_worker(node),
        nodewatch_worker(node),
        renewal_worker(node),
        revocations_worker(node),
    ]
