"""The roles a local cluster gives its nodes: a consensus that survives what it can."""

from __future__ import annotations

import pytest

from roleserve_core.localcluster import default_roles
from roleserve_core.localcluster.layout import CONSENSUS_MEMBERS
from roleserve_core.roles import NodeRoles

CONTROL = ["consensus_member", "kubernetes_controller", "kubernetes_worker"]
WORKER = ["kubernetes_worker"]


def layout(size: int) -> list[list[str]]:
    return [default_roles(index, size) for index in range(1, size + 1)]


@pytest.mark.parametrize(
    ("size", "expected"),
    [
        (1, [CONTROL]),
        # Two members would survive the loss of neither (etcd needs a majority): keep one.
        (2, [CONTROL, WORKER]),
        (3, [CONTROL, CONTROL, CONTROL]),
        (5, [CONTROL, CONTROL, CONTROL, WORKER, WORKER]),
    ],
)
def test_default_roles(size: int, expected: list[list[str]]) -> None:
    assert layout(size) == expected


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7])
def test_the_consensus_has_an_odd_size_and_every_node_works(size: int) -> None:
    members = [roles for roles in layout(size) if "consensus_member" in roles]
    assert len(members) == (CONSENSUS_MEMBERS if size >= CONSENSUS_MEMBERS else 1)
    assert len(members) % 2 == 1
    assert all("kubernetes_worker" in roles for roles in layout(size))


@pytest.mark.parametrize("size", [1, 2, 3, 5])
def test_the_roles_are_role_names_with_the_controller_on_consensus_members(size: int) -> None:
    """Names ``NodeRoles.has`` knows, and a controller only where a member runs (as the
    curator requires), consensus first as documented."""
    for roles in layout(size):
        for name in roles:
            NodeRoles().has(name)  # raises for a name that is not a role
        assert ("kubernetes_controller" in roles) == ("consensus_member" in roles)
        if "consensus_member" in roles:
            assert roles[0] == "consensus_member"
