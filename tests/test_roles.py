"""``NodeRoles``: the value ``when=`` predicates look at."""

from __future__ import annotations

import re
from typing import Any

import pytest

from roleserve_core import (
    ConsensusMember,
    ConsensusPeer,
    KubernetesController,
    KubernetesWorker,
    NodeRoles,
)

MEMBER = ConsensusMember(b"ca", b"cert", (ConsensusPeer("node-1", "https://127.0.0.11:7837"),))


@pytest.mark.parametrize("name", ["a", "7", "backup", "x.y-z_1", "a" + "-" * 61 + "z"])
def test_valid_custom_role_names(name: str) -> None:
    assert NodeRoles(custom={name: {}}).has(f"custom:{name}")


@pytest.mark.parametrize(
    "name", ["", "Backup", "-a", "a-", "_a", "a.", "a b", "custom:a", "é", "a" * 64, 1]
)
def test_invalid_custom_role_names(name: Any) -> None:
    with pytest.raises(ValueError, match=r"invalid custom role name .*at most 63 characters"):
        NodeRoles(custom={name: {}})


def test_has() -> None:
    roles = NodeRoles(kubernetes_worker=KubernetesWorker(), custom={"backup": {}})
    assert [
        roles.has(role)
        for role in (
            "consensus_member",
            "kubernetes_controller",
            "kubernetes_worker",
            "custom:backup",
            "custom:other",
            "custom:",
        )
    ] == [False, False, True, True, False, False]


@pytest.mark.parametrize("role", ["kubernetes_workers", "backup", "custom", "custom_backup", ""])
def test_has_refuses_an_unknown_builtin_role(role: str) -> None:
    message = (
        f"unknown role {role!r}; built-in roles are consensus_member, kubernetes_controller, "
        "kubernetes_worker, third-party roles are written custom:<name>"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        NodeRoles().has(role)


def test_names_lists_builtins_first_then_custom_roles_by_name() -> None:
    roles = NodeRoles(
        consensus_member=MEMBER,
        kubernetes_controller=KubernetesController(),
        custom={"zeta": {}, "alpha": {"k": "v"}},
    )
    assert roles.names() == [
        "consensus_member",
        "kubernetes_controller",
        "custom:alpha",
        "custom:zeta",
    ]
    assert NodeRoles().names() == []
    assert all(roles.has(name) for name in roles.names())


def test_custom_cannot_change() -> None:
    """Neither through the value nor through the dict it was built from."""
    params = {"schedule": "daily"}
    custom = {"backup": params}
    roles = NodeRoles(custom=custom)
    params["schedule"] = "hourly"
    custom["other"] = {}
    assert dict(roles.custom) == {"backup": {"schedule": "daily"}}
    with pytest.raises(TypeError):
        roles.custom["other"] = {}  # type: ignore[index]
    with pytest.raises(TypeError):
        roles.custom["backup"]["schedule"] = "hourly"  # type: ignore[index]
    with pytest.raises(AttributeError):
        roles.custom = {}  # type: ignore[misc]


def test_equality_is_by_value() -> None:
    def roles(**custom: dict[str, str]) -> NodeRoles:
        return NodeRoles(consensus_member=MEMBER, custom=custom)

    assert roles(b={"k": "v"}, a={}) == roles(a={}, b={"k": "v"})
    assert hash(roles(b={"k": "v"}, a={})) == hash(roles(a={}, b={"k": "v"}))
    assert len({roles(), roles(), NodeRoles()}) == 2
    assert roles(a={"k": "v"}) != roles(a={"k": "w"})
    assert roles(a={}) != roles(b={})
    assert roles() != NodeRoles(consensus_member=ConsensusMember(b"other"))
    assert NodeRoles(kubernetes_worker=KubernetesWorker()) != NodeRoles()
