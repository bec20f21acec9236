"""The curators a node knows: where it looks for the leader.

Two sources, as in Monogon's resolver: the *seeds* it enrolled through (the join addresses,
or its own curator when it bootstrapped), kept for good; and the *curators* it learns from
the cluster itself, every node whose status says it runs a curator, replaced on each
change. Both are saved in ``node/curators.pb``, so a node that restarts after its seeds
are gone still finds the cluster.
"""

from __future__ import annotations

from collections.abc import Iterable

from roleserve_core.datadir import NodeDataDirectory
from roleserve_core.ports import CURATOR_PORT, endpoint
from roleserve_core.proto import curator_pb2, node_pb2

__all__ = ["KnownCurators", "curator_endpoint"]


class KnownCurators:
    """Seeds and learned curators, saved to the data directory on every change."""

    def __init__(self, datadir: NodeDataDirectory) -> None:
        self.datadir = datadir
        self.saved = node_pb2.KnownCurators()
        datadir.read_message(datadir.curators, self.saved)

    @property
    def seeds(self) -> list[str]:
        return list(self.saved.seeds)

    @property
    def curators(self) -> list[str]:
        return list(self.saved.curators)

    def candidates(self) -> list[str]:
        """Every endpoint to ask for the leader: learned curators first, then seeds."""
        return list(dict.fromkeys([*self.saved.curators, *self.saved.seeds]))

    def set_seeds(self, seeds: Iterable[str]) -> None:
        """Replace the seeds (at enrolment) and save."""
        del self.saved.seeds[:]
        self.saved.seeds.extend(dict.fromkeys(seeds))
        self.datadir.write_message(self.datadir.curators, self.saved)

    def learn(self, curators: Iterable[str]) -> bool:
        """Replace the learned curators; save and return True if they changed."""
        learned = sorted(set(curators))
        if learned == sorted(self.saved.curators):
            return False
        del self.saved.curators[:]
        self.saved.curators.extend(learned)
        self.datadir.write_message(self.datadir.curators, self.saved)
        return True


def curator_endpoint(node: curator_pb2.Node) -> str | None:
    """``host:port`` of the curator ``node`` runs, if its status says it runs one."""
    status = node.status
    if not status.external_address or not status.HasField("running_curator"):
        return None
    return endpoint(status.external_address, status.running_curator.port or CURATOR_PORT)
