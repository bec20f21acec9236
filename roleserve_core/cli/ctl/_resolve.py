"""Naming a node on the command line by a prefix of its ID.

Node IDs are ``node-`` and 32 hex characters: nobody types them. Every NODE argument takes
the full ID or any prefix that matches exactly one node, with or without the ``node-``
(``node-3fa2`` and ``3fa2`` alike). The prefix is matched against the nodes the leader lists
(``GetNodes``), so it is always the cluster's current view, never a local cache that could
point at a node that is gone.

An exact ID always wins, even if it were also the prefix of another. Nothing matching is the
cluster's answer (exit 1, like the curator's NOT_FOUND); several matching is the operator's
to fix by typing more (exit 2). Both errors list the candidates, so the next attempt works.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from roleserve_core.cli.ctl._errors import EXIT_REFUSED, EXIT_USAGE, CtlError
from roleserve_core.identity import NODE_ID_PREFIX

if TYPE_CHECKING:
    from roleserve_core.proto import management_pb2

__all__ = ["MAX_LISTED", "match_node"]

MAX_LISTED = 10
"""Candidates named in an error at most; a large cluster must not flood the terminal."""


def match_node(nodes: Sequence[management_pb2.Node], text: str) -> management_pb2.Node:
    """The one node in ``nodes`` that ``text`` names.

    :raises CtlError: if none or several match, listing the candidates.
    """
    text = text.strip()
    if not text:
        raise CtlError("a node ID (or a prefix of one) cannot be empty", EXIT_USAGE)
    for node in nodes:
        if node.id == text:
            return node
    matches = [
        node
        for node in nodes
        if node.id.startswith(text) or node.id.startswith(NODE_ID_PREFIX + text)
    ]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        known = f"the cluster's nodes: {_listing(nodes)}" if nodes else "the cluster has none"
        raise CtlError(f"no node matches {text!r}; {known}", EXIT_REFUSED)
    raise CtlError(
        f"{text!r} matches {len(matches)} nodes, give more of the ID: {_listing(matches)}",
        EXIT_USAGE,
    )


def _listing(nodes: Sequence[management_pb2.Node]) -> str:
    ids = sorted(node.id for node in nodes)
    shown = ", ".join(ids[:MAX_LISTED])
    more = f" and {len(ids) - MAX_LISTED} more" if len(ids) > MAX_LISTED else ""
    return shown + more
