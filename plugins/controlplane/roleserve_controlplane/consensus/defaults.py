"""The consensus defaults the plugin's settings name, and the maintenance policy they make.

Apart from the modules that use them (``maintenance``, ``member``, ``election``, which
import them from here, and still export them) because those import etcd's client: the
settings, which the hook module imports on every node, must not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from roleserve_controlplane.consensus.client import MemberStatus

__all__ = [
    "DEFAULT_DEFRAG_FREE_BYTES",
    "DEFAULT_DEFRAG_FREE_RATIO",
    "DEFAULT_ELECTION_MS",
    "DEFAULT_GC_PERCENT",
    "DEFAULT_HEARTBEAT_MS",
    "DEFAULT_QUOTA_BACKEND_BYTES",
    "DEFAULT_RETENTION",
    "DEFAULT_TTL",
    "MaintenancePolicy",
]

DEFAULT_TTL = 10
"""Seconds a leader's lease lasts without renewal."""

DEFAULT_HEARTBEAT_MS = 250
"""etcd's heartbeat interval (etcd's own default is 100 ms). An idle member's CPU follows
the heartbeat, which is also raft's tick: three idle members used 3.4-4.8 % of a core at
100 ms, a third less at 250 ms (``benchmarks/etcd.py --only-idle``). Nothing of roleserve
needs raft to notice a lost leader in 1 s: a curator failover waits for the curator's
lease (``DEFAULT_TTL``, 10 s), and a new curator leader hands raft's lead away from its own
node (``curator.raftleader``), so a killed curator leader rarely costs a raft election."""
DEFAULT_ELECTION_MS = 1250
"""etcd's election timeout: five heartbeats, the least etcd accepts. A follower calls an
election after 1.25-2.5 s without its leader's heartbeat (1-2 s at etcd's defaults), and a
new raft leader extends every lease by one election timeout: when a raft leader and the
curator leader do fall together, the failover grows by 0.25 s, not by the 1.5 s a 2.5 s
timeout would add, and a busy host's pause of up to 1.25 s calls no election."""

DEFAULT_RETENTION = 300.0
"""Seconds of history kept (at least): the Kubernetes apiserver's compaction interval."""
DEFAULT_QUOTA_BACKEND_BYTES = 2 * 1024**3
"""etcd's own default backend quota, 2 GiB (etcd suggests at most 8 GiB)."""
DEFAULT_DEFRAG_FREE_BYTES = 64 * 1024
"""Free bytes a member's database must have before it is defragmented...

Small: a node agent's database is a few hundred KB to a few MB, which etcd defragments in
milliseconds. A churn of role changes leaves from ~0.3 MB (a retention of one minute) to
~2 MB (five) of free pages once its history is compacted, which a floor of 16 MiB (this
default before) kept for good, at five times the database's size and more. Under a steady
churn the ratio is what holds a defragmentation back: each compaction frees only the
oldest fifth of the history kept."""
DEFAULT_DEFRAG_FREE_RATIO = 0.5
"""...and the share of its file they must be: below either, a defragmentation would block
the member for little (the ratio is what holds a large database back)."""
DEFAULT_GC_PERCENT = 25
"""etcd's ``GOGC`` unless ``[plugins.controlplane] etcd_gc_percent`` says otherwise. Go's
default, 100, lets the heap reach twice the live objects before a collection, and Go keeps
what the heap reached: after a burst of writes a member stayed ~1.8 times its starting RSS
for good. At 25 it stays within ~1.35 times, for about a third more of etcd's CPU time
under writes (``benchmarks/etcd.py`` (e3), docs/consensus.md)."""


@dataclass(frozen=True)
class MaintenancePolicy:
    """When to compact and defragment, and the quota alarms are judged against."""

    retention: float = DEFAULT_RETENTION
    """Seconds of history kept (the cluster configuration's ``history_retention``)."""
    defrag_free_bytes: int = DEFAULT_DEFRAG_FREE_BYTES
    defrag_free_ratio: float = DEFAULT_DEFRAG_FREE_RATIO
    quota_backend_bytes: int = DEFAULT_QUOTA_BACKEND_BYTES
    """The members' ``--quota-backend-bytes`` (this node's setting, which every node should
    share): a NOSPACE alarm is cleared once its member's database is below
    ``maintenance.ALARM_CLEARED_BELOW`` of it (etcd 3.5 says its own quota, which is used
    instead)."""

    @property
    def period(self) -> float:
        """Seconds between passes: a quarter of the retention (at least 1 s), so history
        is kept for ``retention`` to ``1.25 × retention``."""
        return max(1.0, self.retention / 4)

    def wants_defragmentation(self, status: MemberStatus) -> bool:
        """Whether the member's free space passes both thresholds."""
        free = status.db_free
        return free > 0 and (
            free >= self.defrag_free_bytes and free >= self.defrag_free_ratio * status.db_size
        )
