"""The curator: the cluster's control plane service, next to every etcd member.

::

    ┌─────────────── leader (won the etcd election) ───────────────┐
    │ Curator      Watch ◀── NodeCache ◀── one etcd watch /nodes/  │
    │              UpdateNodeStatus, Heartbeat, Register/Commit/   │
    │              JoinNode, UpdateNodeClusterNetworking           │
    │ Management   GetNodes (health), roles, approve, tickets, ... │
    │ CuratorLocal GetCurrentLeader (itself), GetCACertificate     │
    └──────────────────────────────┬───────────────────────────────┘
                                   │ writes: ClusterState, guarded by the leadership
    followers: CuratorLocal only ──┴─▶ etcd (every node record, secrets, ticket)

Modules: ``curator`` (the runnable), ``service_*`` (the three services), ``state`` (etcd
records), ``cache`` (the leader's watch fan-out), ``watchevents`` (Watch events encoded
once for every stream), ``health`` (heartbeats), ``roles`` (role changes), ``prefixes``
(the cluster network and node prefixes), ``bootstrap``,
``authority`` (the CAs), ``validation``, ``errors``, ``extension`` (other plugins' services
on the leader: ``roleserve_curator_services``).
"""

from __future__ import annotations

import lazy_loader

# Each name is imported from its module on first use (the list is __init__.pyi), so that a
# module of this package imports only the modules it needs: the hook module's settings do
# not load etcd's client, nor a node without the consensus_member role.
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
