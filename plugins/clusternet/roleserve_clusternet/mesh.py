"""What the clusternet worker's runnables share during one run of it: ``Mesh``.

Not a value: it lives and dies with one run of the worker (a restarted worker has a new
interface and starts from nothing), and nobody outside the worker reads it.

::

    pull ──wanted, address──▶ Mesh ◀──reads── reconcile ──▶ clusternet_status
    push ──announced──────────▶ Mesh
    pull (a failed batch), push (announced) ──kick()──▶ reconcile runs at once

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

    def __post_init__(self) -> None:
        self.kicks.set(0)
        self.announced.set(())

    def kick(self) -> None:
        """Ask reconcile for a pass now (after an error, or for a fresh status)."""
        self.kicks.set(self.kicks.get_nowait() + 1)
