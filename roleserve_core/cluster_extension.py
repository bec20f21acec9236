"""What a plugin adds to ``roleserve cluster up|status`` (entry-point group ``roleserve.cluster``).

::

    [project.entry-points."roleserve.cluster"]
    kubernetes = "roleserve_kubernetes.localcluster:EXTENSION"

    class MyExtension:                        # a ClusterExtension
        column = "K8S"                        # its column in the status table
        async def settle(self, view): ...     # after every node is UP and HEALTHY, before
                                              # `up` says "the cluster is up"; raise a
                                              # RoleserveError (one line) if it never is
        async def cells(self, view): ...      # node ID -> its cell; None: no column
        def hint(self, view): ...             # a line under the table; None: none

What the local cluster shows of a plugin's own components (Kubernetes' Nodes, say) only the
plugin knows how to ask, and the core must not import it: ``cluster`` loads the entry
points of this group when it runs (never for ``--help``) and gives each extension a
``ClusterView``, the cluster as the core knows it: its directory, the owner's access, and
each node's index, ID, address, roles and ``roleserve.toml``. An entry point that fails
to load is left out with one line saying so; the cluster runs as it would without it.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from roleserve_core.access import ClusterAccess

__all__ = [
    "GROUP",
    "ClusterExtension",
    "ClusterMember",
    "ClusterView",
    "RunnableSeen",
    "load_extensions",
]

GROUP = "roleserve.cluster"
"""The entry-point group of plugins' local-cluster extensions."""


@dataclass(frozen=True, slots=True)
class ClusterMember:
    """One node of the local cluster, as ``cluster up`` and ``cluster status`` know it."""

    index: int
    """``i`` of ``n<i>``: the node's directory and place in the table."""
    node_id: str | None
    """Its ID once it made its key; None before."""
    address: str
    """Its address (loopback, or in 198.18.0.0/15 with ``--netns``)."""
    config: Path
    """Its ``roleserve.toml``: the settings its plugins run with."""
    roles: tuple[str, ...]
    """Its roles as the leading curator knows them (``NodeRoles.names``); empty when the
    leader did not answer, or the node is not enrolled yet."""


@dataclass(frozen=True, slots=True)
class RunnableSeen:
    """One runnable of a node's supervision tree, as ``roleserve ctl tree`` shows it."""

    dn: str
    state: str
    """``NEW``, ``HEALTHY``, ``DONE``, ``DEAD`` or ``CANCELED``."""
    note: str
    last_error: str
    """``Type: message`` of its last failure; empty if it never failed."""
    final: bool
    """DEAD of a final error: not restarted until the operator restarts it."""


async def _unseen(member: ClusterMember, dn: str) -> list[RunnableSeen]:
    """The default ``ClusterView.runnables``: nothing is seen."""
    return []


@dataclass(frozen=True, slots=True)
class ClusterView:
    """The local cluster, for a ``ClusterExtension``."""

    directory: Path
    """The cluster's directory (``--dir``): a plugin may keep files of its own there."""
    owner: Path
    """The owner's access directory: ``ClusterAccess.load(view.owner)``, e.g. for
    ``open_ctl_session``."""
    nodes: tuple[ClusterMember, ...]
    progress: Callable[[str], None]
    """Prints one line of ``up``'s progress, with the time."""
    runnables: Callable[[ClusterMember, str], Awaitable[list[RunnableSeen]]] = _unseen
    """``await view.runnables(member, dn)``: the subtree at ``dn`` of the node's supervision
    tree (its node management service, as the owner), parents first; empty if the node
    does not answer in a few seconds or has no such runnable. E.g. to stop waiting for what
    a runnable that failed for good will never bring."""

    def access(self) -> ClusterAccess:
        """The owner's access to the cluster."""
        return ClusterAccess.load(self.owner)


class ClusterExtension(Protocol):
    """What a ``roleserve.cluster`` entry point names (see the module docstring)."""

    column: str
    """The header of its column in the status table."""

    async def settle(self, view: ClusterView) -> None:
        """Once every node is UP and HEALTHY: wait until what the plugin runs is ready,
        saying what it waits for through ``view.progress``; ``up`` says "the cluster is up"
        only after every extension's ``settle`` returned.

        :raises RoleserveError: one line, if it will not be ready: ``up`` fails with it.
        """
        ...

    async def cells(self, view: ClusterView) -> Mapping[str, str] | None:
        """Each node's cell of the column, by node ID (a node left out shows ``-``); None:
        nothing to show, no column (e.g. the plugin's components are not installed)."""
        ...

    def hint(self, view: ClusterView) -> str | None:
        """One line under the status table (e.g. the command that reaches what it runs);
        None: none."""
        ...


def load_extensions(
    warn: Callable[[str], None],
    entry_points: list[importlib.metadata.EntryPoint] | None = None,
) -> list[ClusterExtension]:
    """The installed extensions, by entry-point name; one that fails to load is left out
    with one line to ``warn``."""
    if entry_points is None:
        entry_points = list(importlib.metadata.entry_points(group=GROUP))
    loaded = []
    for entry in sorted(entry_points, key=lambda entry: entry.name):
        try:
            loaded.append(entry.load())
        except Exception as exc:  # a broken plugin must not stop the cluster
            warn(
                f"plugin {entry.name}: its cluster extension ({entry.value}) failed to load: {exc}"
            )
    return loaded
