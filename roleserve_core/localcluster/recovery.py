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

A leader that does not come is said in one line: which nodes do not run, or that all of
them run and still elect none, and where their logs are; never a traceback.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import anyio

from roleserve_core.localcluster.process import LocalNode

__all__ = ["growth_message", "leaderless_message", "stop_started"]

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


def leaderless_message(directory: Path, nodes: Sequence[LocalNode], why: str) -> str:
    """One line for a cluster that named no leader in time: the nodes that do not run
    (their logs), or that every node runs, and the search's own ``why``."""
    down = [node for node in nodes if node.pid is None]
    if down:
        logs = ", ".join(str(node.log_file) for node in down)
        return f"no leader: {_names(down)} of {directory} not running (their logs: {logs}); {why}"
    return (
        f"no leader: every node of {directory} runs, but none answers as leader "
        f"(their logs: {directory}/n*/node.log); {why}"
    )
