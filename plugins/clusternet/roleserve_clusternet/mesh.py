"""What the clusternet worker's runnables share during one run of it: ``Mesh``.

Not a value: it lives and dies with one run of the worker (a restarted worker has a new
interface and starts from nothing), and nobody outside the worker reads it.

::

    pull ──wanted, address──▶ Mesh ◀──reads── reconcile ──▶ clusternet_status
    push ──announced──────────▶ Mesh
    pull (a batch, a failed one), push (announced) ──kick()──▶ reconcile runs at once
    pull (an address not set) ──kick(link=True)──▶ the same, address and route included

``lock`` makes each read-compare-configure of the interface one step, so that reconcile
never re-adds a peer pull has just removed from a state it read before the removal.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import anyio

from roleserve_clusternet.device import IPInterface, MeshInterface
from roleserve_clusternet.peers import Wanted
from roleserve_clusternet.privatekey import WireGuardKey
from roleserve_clusternet.settings import ClusternetSettings
from roleserve_core import Value

__all__ = ["Mesh"]


@dataclass
class Mesh:
    """See the module docstring."""

    device: MeshInterface
    key: WireGuardKey
    settings: ClusternetSettings
    wanted: Value[Wanted] = field(default_factory=Value)
    """The peers the cluster asks for, set by pull from each whole view."""
    address: Value[IPInterface | None] = field(default_factory=Value)
    """This node's address on the interface (from its ``cluster_prefix``), set by pull."""
    announced: Value[tuple[str, ...]] = field(default_factory=Value)
    """The prefixes the curator accepted from push."""
    kicks: Value[int] = field(default_factory=Value)
    """Bumped to make reconcile run now."""
    lock: anyio.Lock = field(default_factory=anyio.Lock)
    link_due: bool = True
    """Whether reconcile's next pass also checks the interface's address and route (over
    netlink): its first pass, one a ``reconcile_interval`` after the last check (however
    many kicks came between), and one asked for by ``kick(link=True)``.
    Not a pass that reads a batch of peers back into the status: while a cluster forms,
    every node gets a batch for each node that joins, and two netlink sessions a batch were
    a fifth of a starting node's CPU at 100 nodes (issue 30)."""

    def __post_init__(self) -> None:
        self.kicks.set(0)
        self.announced.set(())

    def kick(self, *, link: bool = False) -> None:
        """Ask reconcile for a pass now (after an error, or for a fresh status); with
        ``link``, one that checks the address and route too."""
        self.link_due = self.link_due or link
        self.kicks.set(self.kicks.get_nowait() + 1)
