"""What ``cluster up`` on a cluster that is partly down owns, and how it fails there.

::

    up on D:   node 1 runs (pid 100)       ─ not ours: left alone, whatever happens
               node 2 down ─▶ started       ─ ours
               node 3 down ─▶ started       ─ ours
    Ctrl-C or a failed step: stop_started() stops nodes 2 and 3 only, and says that
    node 1 keeps running (``cluster down`` stops it)

A ``cluster up`` that stopped the nodes it found running turned a recoverable cluster
(one survivor of three, which brought the other two back in seconds once they were
started) into a stopped one, and took down the very node that held the data nobody else
had yet. The nodes it did not start belong to whoever started them (an earlier detached
``up``, an operator's ``roleserve node run``); ``cluster down`` is how they are stopped.

A leader that does not come is said in one line: which nodes do not run, and, when the
curators that run say the consensus has no quorum (``quorum_said``), which members do not
answer though their process runs (stopped, hung); where their logs are; never a traceback.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import anyio

from roleserve_core.access import ClusterAccess
from roleserve_core.connection import NoLeaderError, NoQuorumError, find_leader
from roleserve_core.localcluster.process import LocalNode
from roleserve_core.proto import curator_pb2

__all__ = [
    "DIAGNOSIS_TIMEOUT",
    "growth_message",
    "leaderless_message",
    "quorum_said",
    "stop_started",
]

DIAGNOSIS_TIMEOUT = 5.0
"""Seconds to ask the curators once more, after no leader came, whether they have a quorum."""

Progress = Callable[[str], None]


def _names(nodes: Sequence[LocalNode]) -> str:
    return ", ".join(f"node {node.index}" for node in nodes)


async def stop_started(nodes: Sequence[LocalNode], progress: Progress) -> bool:
    """Stop, in parallel, the nodes this process started; whether every node is stopped now.

    The nodes it found running keep running, and one line says which and how to stop them.
    """
    kept = [node for node in nodes if node.pid is not None and not node.started_here]
    async with anyio.create_task_group() as tasks:
        for node in nodes:
            if node.started_here and node.pid is not None:
                progress(f"stopping node {node.index} (pid {node.pid})")
                tasks.start_soon(node.stop)
    if kept:
        progress(
            f"{_names(kept)} ran before this `cluster up` and keep{'s' if len(kept) == 1 else ''}"
            " running (stop them with `cluster down`)"
        )
    return not kept


def growth_message(nodes: Sequence[LocalNode], newcomers: Sequence[LocalNode]) -> str | None:
    """One line when ``up`` adds ``newcomers`` to a cluster that has enrolled nodes
    (``--nodes`` larger than what the directory holds); None otherwise."""
    enrolled = [node for node in nodes if node.datadir.enrolled]
    if not enrolled or not newcomers:
        return None
    return (
        f"the cluster has {len(enrolled)} node{'' if len(enrolled) == 1 else 's'}; --nodes "
        f"{len(nodes)} adds {_names(newcomers)} as "
        f"{'a new node' if len(newcomers) == 1 else 'new nodes'}"
    )


async def quorum_said(access: ClusterAccess) -> curator_pb2.NoQuorum | None:
    """What a curator says of its consensus when it has no quorum; None if none says so
    within ``DIAGNOSIS_TIMEOUT`` (or one names a leader after all)."""
    try:
        await find_leader(
            access.endpoints,
            access.credentials,
            timeout=DIAGNOSIS_TIMEOUT,
            refused_is_final=True,
            no_quorum_is_final=True,
        )
    except NoQuorumError as exc:
        return exc.quorum
    except NoLeaderError:
        return None
    return None


def leaderless_message(
    directory: Path,
    nodes: Sequence[LocalNode],
    why: str,
    quorum: curator_pb2.NoQuorum | None = None,
) -> str:
    """One line for a cluster that named no leader in time: the nodes that do not run,
    the consensus members that do not answer though they run (from ``quorum``), their
    logs; else that every node runs, with the search's own ``why``."""
    down = [node for node in nodes if node.pid is None]
    said = []
    if down:
        said.append(f"{_names(down)} of {directory} not running")
    silent = _silent_members(nodes, quorum, down)
    if silent:
        said.append(f"{_names(silent)} running but not answering as consensus members")
    if not said:
        return (
            f"no leader: every node of {directory} runs, but none answers as leader "
            f"({why}); their logs: {directory}/n*/node.log"
        )
    logs = ", ".join(str(node.log_file) for node in [*down, *silent])
    counted = ""
    if quorum is not None:
        answering = sum(1 for member in quorum.members if member.answers)
        counted = f" (no quorum: {answering} of {len(quorum.members)} consensus members answer)"
    return f"no leader{counted}: {'; '.join(said)}; their logs: {logs}"


def _silent_members(
    nodes: Sequence[LocalNode],
    quorum: curator_pb2.NoQuorum | None,
    down: Sequence[LocalNode],
) -> list[LocalNode]:
    """The running nodes whose consensus member ``quorum`` says does not answer, by
    address."""
    if quorum is None:
        return []
    addresses = {member.address for member in quorum.members if not member.answers}
    return [node for node in nodes if node not in down and str(node.address) in addresses]
