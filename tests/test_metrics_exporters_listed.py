"""``roleserve_metrics.ctl.EXPORTERS`` (what ``ctl prometheus-config`` makes a job of, and
the role a node must hold to serve each) is written by hand: it cannot be derived, since
``ctl`` runs no node and the exporters come from hooks that read a node's roles and
address. So this test derives it from the installed plugins, and compares.

Here, not in the metrics plugin's own suite: it needs every plugin that contributes an
exporter (``roleserve_metrics_exporters``) installed, as the workspace has them."""

from __future__ import annotations

import importlib
import importlib.metadata
import ipaddress
from pathlib import Path
from typing import Any

import pytest

from roleserve_core import (
    NETWORK,
    ROLES,
    ConsensusMember,
    KubernetesWorker,
    NetworkStatus,
    NodeRoles,
)
from roleserve_core.testing import PluginHarness

pytest.importorskip("roleserve_metrics", reason="the metrics plugin is not installed")
from roleserve_metrics.ctl import EXPORTERS

HOOK = "roleserve_metrics_exporters"
BUILTIN = ("core", "node")
"""The metrics plugin's own exporters, on every node (``worker_metrics``): ``core``, and
``node`` when node_exporter is found."""
ROLES_GIVEN: dict[str, NodeRoles] = {
    "consensus_member": NodeRoles(
        consensus_member=ConsensusMember(ca_certificate=b"", peer_certificate=b"", peers=())
    ),
    "kubernetes_worker": NodeRoles(kubernetes_worker=KubernetesWorker()),
}


def contributors() -> dict[str, Any]:
    """Each installed plugin's hook module that implements the hook, by plugin name."""
    found = {}
    for entry in importlib.metadata.entry_points(group="roleserve.plugins"):
        module = importlib.import_module(entry.value)
        if hasattr(module, HOOK):
            found[entry.name] = module
    return found


def exporters_of(roles: NodeRoles, tmp_path: Path) -> set[str]:
    """The names every contributor gives a node holding ``roles``, with an address."""
    plugins = PluginHarness()
    modules = contributors()
    for name, module in modules.items():
        plugins.register(module, name)
    runtime = plugins.runtime(tmp_path, config={name: {} for name in modules})
    runtime.registry.set(ROLES, roles, by="core")
    runtime.registry.set(NETWORK, NetworkStatus(ipaddress.ip_address("127.0.0.12")), by="core")
    names = set()
    for name, module in modules.items():
        for item in getattr(module, HOOK)(runtime.context(name)):
            names.add(item.name if hasattr(item, "name") else item[0])
    return names


def test_every_plugin_exporter_is_listed_with_its_role(tmp_path: Path) -> None:
    listed = dict(EXPORTERS)
    assert len(listed) == len(EXPORTERS)  # no name twice
    assert {name for name, role in EXPORTERS if role is None} == set(BUILTIN)
    assert exporters_of(NodeRoles(), tmp_path / "none") == set()  # none without a role
    for role, roles in ROLES_GIVEN.items():
        given = exporters_of(roles, tmp_path / role)
        assert given == {name for name, needed in EXPORTERS if needed == role}, role
    gated = {role for _, role in EXPORTERS if role is not None}
    assert gated <= set(ROLES_GIVEN)  # a new role in EXPORTERS needs a case here
