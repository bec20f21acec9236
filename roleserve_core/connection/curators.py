"""The curators a node knows: where it looks for the leader.

Two sources, as in Monogon's resolver: the *seeds* it enrolled through (the join addresses,
or its own curator when it bootstrapped), kept for good; and the *curators* it learns from
the cluster itself, every node whose status says it runs a curator, replaced on each
change. Both are saved in ``node/curators.pb``, so a node that restarts after its seeds
are gone still finds the cluster.

The file is a cache, and a cache never stops a node: one that cannot be read or parsed is
reported in one warning naming it and ignored. The node then asks its *fallback* endpoints
(the daemon gives its own curator's, which answers on a consensus member), and the file is
written anew as soon as the node learns the curators from the cluster. While the file
holds any endpoint, the fallback is not asked.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

from roleserve_core.datadir import NodeDataDirectory
from roleserve_core.errors import DataDirectoryError
from roleserve_core.logtree import PROCESS_LOGGER
from roleserve_core.ports import CURATOR_PORT, endpoint
from roleserve_core.proto import curator_pb2, node_pb2

__all__ = ["KnownCurators", "curator_endpoint"]

log = logging.getLogger(f"{PROCESS_LOGGER}.connection")


class KnownCurators:
    """Seeds and learned curators, saved to the data directory on every change.

    :param fallback: endpoints to ask when nothing is known (no file, or a corrupt one).
    """

    def __init__(self, datadir: NodeDataDirectory, fallback: Sequence[str] = ()) -> None:
        self.datadir = datadir
        self.fallback = list(dict.fromkeys(fallback))
        self.saved = _load(datadir, self.fallback)

    @property
    def seeds(self) -> list[str]:
        return list(self.saved.seeds)

    @property
    def curators(self) -> list[str]:
        return list(self.saved.curators)

    def candidates(self) -> list[str]:
        """Every endpoint to ask for the leader: learned curators first, then seeds; the
        fallback if there are neither."""
        known = list(dict.fromkeys([*self.saved.curators, *self.saved.seeds]))
        return known or list(self.fallback)

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


def _load(datadir: NodeDataDirectory, fallback: Sequence[str]) -> node_pb2.KnownCurators:
    """The saved endpoints; none, with a warning, if the file is unreadable or corrupt."""
    saved = node_pb2.KnownCurators()
    try:
        datadir.read_message(datadir.curators, saved)
    except DataDirectoryError as exc:
        asking = ", ".join(fallback) or "nothing else"
        log.warning(
            "%s; ignoring this cache of the cluster's curators: asking %s, and saving it "
            "anew once the curators are learned",
            exc,
            asking,
        )
        return node_pb2.KnownCurators()
    return saved


def curator_endpoint(node: curator_pb2.Node) -> str | None:
    """``host:port`` of the curator ``node`` runs, if its status says it runs one."""
    status = node.status
    if not status.external_address or not status.HasField("running_curator"):
        return None
    return endpoint(status.external_address, status.running_curator.port or CURATOR_PORT)
