"""``ctl leader`` and ``ctl consensus [rebuild NODE]``: who leads the curators, the etcd
members, and making a member with corrupt data anew.

The two leaders differ: the curator leader holds an election lease in etcd and serves
Management; etcd's raft leader is whichever member raft elected. They are often on
different nodes, and neither depends on the other being there, so they are shown apart.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from roleserve_core.cli._format import (
    NONE,
    enum_name,
    format_duration,
    print_json,
    seconds,
    timestamp_json,
)
from roleserve_core.cli._table import output_width, render_table
from roleserve_core.cli.ctl import _command

if TYPE_CHECKING:
    from roleserve_core.cli.ctl._session import Session
    from roleserve_core.proto.management_pb2 import GetConsensusStatusResponse

    Member = GetConsensusStatusResponse.Member

__all__ = [
    "add_parsers",
    "history_line",
    "member_json",
    "member_row",
    "rebuild_member",
    "show_consensus",
    "show_leader",
]

HEADERS = ("", "NODE", "STATUS", "PEER URL", "DB SIZE", "IN USE", "REVISION", "ALARMS")
"""The first column holds ``*`` for the member that leads raft. DB SIZE is the member's
database file (what etcd's backend quota limits), IN USE the part holding data; ALARMS is
``NOSPACE`` while the member's database is over the quota (every write fails until the
leading curator's maintenance has compacted, defragmented and cleared it)."""


def add_parsers(commands: Any) -> None:
    """Register ``leader`` and ``consensus``."""
    parser = _command.add(
        commands,
        "leader",
        show_leader,
        description=(
            "Show the node whose curator leads the cluster (and serves Management), and the "
            "endpoint it answers at."
        ),
    )
    _command.add_json_option(parser)
    parser = _command.add(
        commands,
        "consensus",
        show_consensus,
        description=(
            "List the etcd members: their node, whether each is a LEARNER (catching up, "
            "not voting) or a FULL member, its peer URL, its database size and the part in "
            "use, its revision and its alarms (NOSPACE: over the backend quota, writes "
            "fail); '*' marks etcd's raft leader. Then the revision etcd's history was "
            "last compacted to, and how much history is kept. "
            "'consensus rebuild NODE' makes a member whose etcd data is corrupt anew."
        ),
    )
    _command.add_json_option(parser)
    actions = parser.add_subparsers(title="actions", metavar="ACTION")
    parser = _command.add(
        actions,
        "rebuild",
        rebuild_member,
        help="make a member whose etcd data is corrupt anew, from the other members",
        description=(
            "Rebuild NODE's etcd member, when its node says its etcd data is corrupt: the "
            "leader removes the member and adds a learner at its peer URL; the node moves "
            "its data aside (data.removed-<time>, nothing is deleted), joins as the "
            "learner and catches up from the others, and the leader promotes it. Refused "
            "when removing the member would cost the quorum (the voters left that answer "
            "could not form one), and for a node that is no consensus member."
        ),
    )
    _command.add_node_argument(parser)


async def show_leader(session: Session, args: argparse.Namespace) -> None:
    """``ctl leader``."""
    leader = session.leader
    if args.json:
        print_json(
            {
                "node_id": leader.node_id,
                "endpoint": leader.endpoint,
                "answered_by": leader.answered_by,
            }
        )
    else:
        print(f"{leader.node_id}  {leader.endpoint}")


def member_row(member: Member) -> list[str]:
    """The table row of ``member``, in ``HEADERS`` order."""
    answered = bool(member.db_size)
    return [
        "*" if member.leader else "",
        member.node_id,
        _status(member),
        member.peer_url or NONE,
        _megabytes(member.db_size) if answered else NONE,
        _megabytes(member.db_size_in_use) if answered else NONE,
        str(member.revision) if answered else NONE,
        ",".join(member.alarms) or NONE,
    ]


def member_json(member: Member) -> dict[str, Any]:
    """``member`` for scripts (sizes in bytes; None where the member did not answer)."""
    answered = bool(member.db_size)
    return {
        "node_id": member.node_id,
        "status": _status(member),
        "peer_url": member.peer_url or None,
        "leader": member.leader,
        "db_size": member.db_size if answered else None,
        "db_size_in_use": member.db_size_in_use if answered else None,
        "revision": member.revision if answered else None,
        "alarms": list(member.alarms),
    }


def history_line(status: GetConsensusStatusResponse) -> str:
    """The line under the table: the last compaction, and the history kept."""
    kept = format_duration(seconds(status.history_retention))
    if not status.compacted_revision:
        return f"history: not compacted since the curator leads; kept for {kept}"
    at = timestamp_json(status.compacted_at, status.HasField("compacted_at"))
    return f"history: compacted to revision {status.compacted_revision} at {at}; kept for {kept}"


def _megabytes(size: int) -> str:
    return f"{size / 1e6:.1f}MB"


def _status(member: Member) -> str:
    from roleserve_core.proto.management_pb2 import GetConsensusStatusResponse

    return enum_name(GetConsensusStatusResponse.Member.Status.Name, member.status, "STATUS_")


async def show_consensus(session: Session, args: argparse.Namespace) -> None:
    """``ctl consensus``."""
    from roleserve_core.proto import management_pb2

    status = await session.call(
        "reading the consensus status",
        session.management.GetConsensusStatus,
        management_pb2.GetConsensusStatusRequest(),
    )
    if args.json:
        print_json([member_json(member) for member in status.members])
    else:
        rows = [member_row(member) for member in status.members]
        print(render_table(HEADERS, rows, width=output_width()))
        print(history_line(status))


async def rebuild_member(session: Session, args: argparse.Namespace) -> None:
    """``ctl consensus rebuild NODE``."""
    from roleserve_core.proto import management_pb2

    node = await session.resolve(args.node)
    request = management_pb2.RebuildConsensusMemberRequest(node_id=node.id)
    answer = await session.call(
        f"rebuilding the etcd member of {node.id}",
        session.management.RebuildConsensusMember,
        request,
    )
    print(f"rebuilding {node.id}: {answer.done}; `ctl consensus` shows it LEARNER, then FULL")
