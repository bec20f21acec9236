"""``roleserve ctl``, run through ``main()`` against a fake cluster on real gRPC with mTLS.

The fake is the test kit's (``ctl_cluster``, ``roleserve_core.testing.FakeCtlCluster``): it
plays the leading curator and a node, records every request and answers from plain fields
a test sets, so each test compares what was sent and what was printed. Here it holds three
nodes (``setup``); ``ctl`` runs a command with the owner's credentials, ``cli`` any
``roleserve`` command, both through ``main()`` (the kit's ``run_ctl_main`` and
``run_roleserve_main``).
"""

from __future__ import annotations

import datetime
import io
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import grpc
import pytest
from cryptography.hazmat.primitives import hashes
from typing_extensions import override

from roleserve_core.access import ClusterAccess
from roleserve_core.cli._format import format_age
from roleserve_core.cli._node_display import state_name
from roleserve_core.cli.ctl import _session as session_module
from roleserve_core.cli.ctl._credentials import SCOPES
from roleserve_core.cli.ctl._errors import CtlError
from roleserve_core.cli.ctl._metrics import figure_lines, node_figures
from roleserve_core.cli.ctl._resolve import match_node
from roleserve_core.datadir import NodeDataDirectory
from roleserve_core.enrolment.ticket import RegisterTicket
from roleserve_core.identity import (
    Scope,
    UserCredentials,
    certificate_scope,
)
from roleserve_core.ports import CURATOR_PORT, NODE_MANAGEMENT_PORT
from roleserve_core.proto import (
    common_pb2,
    curator_pb2,
    management_pb2,
    nodemanagement_pb2,
)
from roleserve_core.testing import FakeCtlCluster, RunMain, ThrowawayCA, random_loopback

T = TypeVar("T")
Context = Any
Change = management_pb2.UpdateNodeRolesRequest.Change
Member = management_pb2.GetConsensusStatusResponse.Member

LOG_TIME = 1_700_000_000
"""Seconds of the fake log records; each adds its index and .123 s. The fake's compaction
time too (``FakeCtlCluster.compacted_at``)."""


# -- the fake cluster (the test kit's ctl_cluster) -----------------------------------


def other_id(leader_id: str, *, avoid: str = "", fill: str = "1") -> str:
    """A node ID whose first hex digit differs from the leader's (and ``avoid``): prefixes
    of it never match the leader, whatever ID the leader's random key gave it."""
    first = next(digit for digit in "abcdef" if digit not in (leader_id[5], avoid))
    return f"node-{first}{fill * 31}"


@dataclass
class Setup:
    cluster: FakeCtlCluster
    access_dir: Path
    leader_id: str
    new_id: str
    """A NEW node without address or heartbeat."""
    worker_id: str
    """An UP node whose heartbeats stopped, sharing the first hex digit with ``new_id``."""


def three_nodes(cluster: FakeCtlCluster, new_id: str, worker_id: str) -> list[management_pb2.Node]:
    """The leader (UP, serving), a NEW node, and an UP worker whose heartbeats stopped."""
    leader = management_pb2.Node(
        id=cluster.leader.node_id,
        state=common_pb2.NODE_STATE_UP,
        health=management_pb2.Node.HEALTHY,
        leader=True,
    )
    leader.status.external_address = cluster.address
    leader.status.version = "0.1.0"
    leader.roles.consensus_member.SetInParent()
    leader.roles.custom["backup"].parameters["schedule"] = "daily"
    leader.time_since_heartbeat.FromNanoseconds(2_140_000_000)
    leader.labels.pairs.add(key="rack", value="r1")
    worker = management_pb2.Node(
        id=worker_id, state=common_pb2.NODE_STATE_UP, health=management_pb2.Node.HEARTBEAT_TIMEOUT
    )
    worker.status.external_address = "127.0.0.99"
    worker.roles.kubernetes_worker.SetInParent()
    worker.time_since_heartbeat.FromSeconds(200)
    return [leader, management_pb2.Node(id=new_id, state=common_pb2.NODE_STATE_NEW), worker]


@pytest.fixture
def setup(ctl_cluster: FakeCtlCluster, ctl_access_dir: Path) -> Setup:
    """The kit's fake cluster with three nodes, the leader serving, and the owner's access
    directory."""
    leader_id = ctl_cluster.leader.node_id
    new_id = other_id(leader_id)
    worker_id = other_id(leader_id, fill="2")
    ctl_cluster.nodes = three_nodes(ctl_cluster, new_id, worker_id)
    return Setup(ctl_cluster, ctl_access_dir, leader_id, new_id, worker_id)


@pytest.fixture
def ca(setup: Setup) -> ThrowawayCA:
    """The fake cluster's CA."""
    return setup.cluster.issuer


@pytest.fixture
def cli(run_roleserve_main: RunMain) -> RunMain:
    """``cli("ctl", ...)``: ``roleserve ...`` through ``main()``."""
    return run_roleserve_main


@pytest.fixture
def ctl(setup: Setup, run_ctl_main: RunMain) -> RunMain:
    """``ctl("nodes", ...)``: ``roleserve ctl --credentials <owner> ...`` through ``main()``."""
    return run_ctl_main


# -- nodes ---------------------------------------------------------------------------------


def test_nodes_table(setup: Setup, ctl: Any) -> None:
    result = ctl("nodes")
    assert result.code == 0, result.err
    assert result.err == ""
    header, *rows = result.out.splitlines()
    assert header.split() == ["ID", "ADDRESS", "STATE", "ROLES", "HEALTH", "HEARTBEAT"]
    cells = [re.split(r" {2,}", row.strip()) for row in rows]
    assert cells == [
        [
            "*",
            setup.leader_id,
            setup.cluster.address,
            "UP",
            "consensus_member, custom:backup(schedule=daily)",
            "HEALTHY",
            "2.1s ago",
        ],
        [setup.new_id, "-", "NEW", "-", "UNKNOWN", "-"],
        [
            setup.worker_id,
            "127.0.0.99",
            "UP",
            "kubernetes_worker",
            "HEARTBEAT_TIMEOUT",
            "3m20s ago",
        ],
    ]
    # Columns line up: every ID starts where the header's does.
    column = header.index("ID")
    assert all(row[column:].startswith("node-") for row in rows)
    assert setup.cluster.received("GetNodes") == [management_pb2.GetNodesRequest()]


def test_nodes_table_fits_an_80_column_terminal(
    setup: Setup, ctl: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Roles go under their node's row, the widest cells are cut (``…``); piped, without
    $COLUMNS, the table stays as test_nodes_table shows it."""
    monkeypatch.setenv("COLUMNS", "80")
    result = ctl("nodes")
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert max(map(len, lines)) <= 80, result.out
    assert lines[0].split() == ["ID", "ADDRESS", "STATE", "HEALTH", "HEARTBEAT"]
    assert lines[2] == "  roles: consensus_member, custom:backup(schedule=daily)"
    assert lines[-1] == "  roles: kubernetes_worker"
    assert len(lines) == 6  # the NEW node has no roles: no line says so
    worker = re.split(r" {2,}", lines[-2])
    assert setup.worker_id.startswith(worker[0].removesuffix("…"))


def test_nodes_filters_and_json(setup: Setup, ctl: Any) -> None:
    setup.cluster.node(setup.leader_id).cluster_prefix = "10.192.0.0/24"
    setup.cluster.node(setup.leader_id).clusternet.wireguard_pubkey = "a2V5"
    setup.cluster.node(setup.leader_id).clusternet.prefixes.append("10.192.0.1/32")
    result = ctl("nodes", "--state", "up", "--state", "NEW", "--role", "custom:backup", "--json")
    assert result.code == 0, result.err
    assert setup.cluster.received("GetNodes") == [
        management_pb2.GetNodesRequest(
            states=[common_pb2.NODE_STATE_UP, common_pb2.NODE_STATE_NEW], role="custom:backup"
        )
    ]
    leader, new, worker = json.loads(result.out)
    assert leader == {
        "id": setup.leader_id,
        "address": setup.cluster.address,
        "state": "UP",
        "roles": {"consensus_member": {}, "custom:backup": {"schedule": "daily"}},
        "health": "HEALTHY",
        "heartbeat_age": 2.14,
        "leader": True,
        "version": "0.1.0",
        "labels": {"rack": "r1"},
        "conflict": None,
        "failed_plugins": [],
        "cluster_prefix": "10.192.0.0/24",
        "clusternet": {"wireguard_pubkey": "a2V5", "prefixes": ["10.192.0.1/32"]},
    }
    assert new == {
        "id": setup.new_id,
        "address": None,
        "state": "NEW",
        "roles": {},
        "health": "UNKNOWN",
        "heartbeat_age": None,
        "leader": False,
        "version": None,
        "labels": {},
        "conflict": None,
        "failed_plugins": [],
        "cluster_prefix": None,
        "clusternet": None,
    }
    assert (worker["health"], worker["heartbeat_age"]) == ("HEARTBEAT_TIMEOUT", 200.0)


def test_nodes_shows_a_node_that_two_processes_claim(setup: Setup, ctl: Any) -> None:
    seen = (
        "connected from 127.0.0.11:40000; a second process from 127.0.0.1:41000 was refused "
        "3s ago: two processes share this node's identity"
    )
    setup.cluster.node(setup.leader_id).conflict = seen
    table = ctl("nodes")
    assert table.code == 0, table.err
    _header, leader, _new, _worker, line = table.out.splitlines()
    assert re.split(r" {2,}", leader.strip())[5] == "HEALTHY, CONFLICT"
    assert line == f"{setup.leader_id}: CONFLICT: {seen}"
    [shown, *_] = json.loads(ctl("nodes", "--json").out)
    assert shown["conflict"] == seen


def report_plugins(node: management_pb2.Node) -> None:
    """``node`` reports a loaded plugin, a failed one and a blocked one."""
    node.status.plugins.extend(
        [
            common_pb2.PluginStatus(name="core", version="0.1.0", state="loaded"),
            common_pb2.PluginStatus(
                name="brittle",
                version="0.3",
                state="failed",
                error="roleserve_workers raised RuntimeError: no spool directory",
            ),
            common_pb2.PluginStatus(
                name="nodemgmt",
                version="0.1.0",
                state="blocked",
                error="named in ROLESERVE_DISABLE_PLUGINS",
            ),
        ]
    )


def test_nodes_marks_a_node_running_without_a_failed_plugin(
    setup: Setup, ctl: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever its heartbeat says (this one timed out), not all of it runs: '!' after the
    health, and a line under the table naming the plugin and where to read why, with the
    command as typed. The line says "started without", true whether the node still runs."""
    monkeypatch.setenv("ROLESERVE_COMMAND", "./dev roleserve")
    report_plugins(setup.cluster.node(setup.worker_id))
    table = ctl("nodes")
    assert table.code == 0, table.err
    _header, leader, _new, worker, line = table.out.splitlines()
    assert re.split(r" {2,}", leader.strip())[5] == "HEALTHY"
    assert re.split(r" {2,}", worker.strip())[4] == "HEARTBEAT_TIMEOUT!"
    assert line == (
        f"{setup.worker_id}: ! plugin brittle failed: it started without; "
        f"`./dev roleserve ctl plugins {setup.worker_id}` says why"
    )
    _leader, _new, shown = json.loads(ctl("nodes", "--json").out)
    assert shown["failed_plugins"] == ["brittle"]


def test_nodes_wraps_its_failed_plugin_lines_to_the_terminal(
    setup: Setup, ctl: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("ROLESERVE_COMMAND", "roleserve")
    report_plugins(setup.cluster.node(setup.worker_id))
    table = ctl("nodes")
    assert table.code == 0, table.err
    lines = table.out.splitlines()
    assert all(len(line) <= 80 for line in lines), lines
    at = next(index for index, line in enumerate(lines) if "! plugin brittle" in line)
    assert " ".join(line.strip() for line in lines[at:]) == (
        f"{setup.worker_id}: ! plugin brittle failed: it started without; "
        f"`roleserve ctl plugins {setup.worker_id}` says why"
    )


def test_plugins_lists_a_nodes_plugins(setup: Setup, ctl: Any) -> None:
    report_plugins(setup.cluster.node(setup.worker_id))
    table = ctl("plugins", setup.worker_id[:10])
    assert table.code == 0, table.err
    assert [re.split(r" {2,}", row) for row in table.out.splitlines()] == [
        ["NAME", "VERSION", "STATE", "ERROR"],
        ["core", "0.1.0", "loaded", "-"],
        ["brittle", "0.3", "failed", "roleserve_workers raised RuntimeError: no spool directory"],
        ["nodemgmt", "0.1.0", "blocked", "named in ROLESERVE_DISABLE_PLUGINS"],
    ]
    shown = ctl("plugins", setup.worker_id, "--json")
    assert shown.code == 0, shown.err
    assert json.loads(shown.out) == [
        {"name": "core", "version": "0.1.0", "state": "loaded", "error": None},
        {
            "name": "brittle",
            "version": "0.3",
            "state": "failed",
            "error": "roleserve_workers raised RuntimeError: no spool directory",
        },
        {
            "name": "nodemgmt",
            "version": "0.1.0",
            "state": "blocked",
            "error": "named in ROLESERVE_DISABLE_PLUGINS",
        },
    ]


def test_plugins_fits_the_terminal_with_each_error_under_its_row(
    setup: Setup, ctl: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "50")
    report_plugins(setup.cluster.node(setup.worker_id))
    table = ctl("plugins", setup.worker_id)
    assert table.code == 0, table.err
    assert table.out.splitlines() == [
        "NAME      VERSION  STATE",
        "core      0.1.0    loaded",
        "brittle   0.3      failed",
        "  error: roleserve_workers raised RuntimeError: no",
        "    spool directory",
        "nodemgmt  0.1.0    blocked",
        "  error: named in ROLESERVE_DISABLE_PLUGINS",
    ]


def test_plugins_of_a_node_that_reported_none_says_so(setup: Setup, ctl: Any) -> None:
    result = ctl("plugins", setup.new_id)
    assert (result.code, result.out) == (1, "")
    assert result.err == (
        f"roleserve ctl: error: {setup.new_id} has reported no plugins: it has not reported "
        "its status since it started, or runs a roleserve that does not report them\n"
    )


def test_nodes_refuses_an_unknown_state(ctl: Any) -> None:
    result = ctl("nodes", "--state", "running")
    assert result.code == 2
    assert "invalid choice: 'RUNNING'" in result.err


# -- roles ---------------------------------------------------------------------------------


def test_roles_set_and_unset_send_one_change_each(setup: Setup, ctl: Any) -> None:
    prefix = setup.worker_id[:8]
    assert ctl("roles", "set", prefix, "custom:backup", "schedule=daily", "keep=a=b").code == 0
    assert ctl("roles", "set", prefix, "consensus_member").code == 0
    result = ctl("roles", "unset", prefix, "kubernetes_worker")
    assert result.code == 0, result.err
    assert setup.cluster.received("UpdateNodeRoles") == [
        management_pb2.UpdateNodeRolesRequest(
            node_id=setup.worker_id,
            changes=[
                Change(
                    role="custom:backup",
                    assign=True,
                    parameters={"schedule": "daily", "keep": "a=b"},
                )
            ],
        ),
        management_pb2.UpdateNodeRolesRequest(
            node_id=setup.worker_id, changes=[Change(role="consensus_member", assign=True)]
        ),
        management_pb2.UpdateNodeRolesRequest(
            node_id=setup.worker_id, changes=[Change(role="kubernetes_worker", assign=False)]
        ),
    ]
    # The roles the curator answered with, after the last change:
    assert result.out == (
        f"{setup.worker_id}: consensus_member, custom:backup(keep=a=b,schedule=daily)\n"
    )
    result = ctl("roles", "unset", prefix, "custom:backup")
    assert result.out == f"{setup.worker_id}: consensus_member\n"
    assert setup.cluster.received("UpdateNodeRoles")[-1].changes == [
        Change(role="custom:backup", assign=False)
    ]


def test_roles_set_refuses_parameters_for_a_builtin_role(setup: Setup, ctl: Any) -> None:
    result = ctl("roles", "set", setup.worker_id, "kubernetes_worker", "a=b")
    assert result.code == 2
    assert result.err == (
        "roleserve ctl: error: kubernetes_worker takes no parameters; only custom:<name> roles do\n"
    )
    assert setup.cluster.received("UpdateNodeRoles") == []


def test_roles_set_refuses_a_parameter_without_a_key(setup: Setup, ctl: Any) -> None:
    result = ctl("roles", "set", setup.worker_id, "custom:backup", "=daily")
    assert result.code == 2
    assert "'=daily' is not KEY=VALUE" in result.err
    assert setup.cluster.requests == []  # refused before connecting


def test_roles_set_reports_the_curators_refusal(setup: Setup, ctl: Any) -> None:
    message = "unknown role 'backup'; third-party roles are written custom:<name>"
    setup.cluster.refusals["UpdateNodeRoles"] = (grpc.StatusCode.INVALID_ARGUMENT, message)
    result = ctl("roles", "set", setup.worker_id, "backup")
    assert result.code == 1
    assert result.err == (
        f"roleserve ctl: error: assigning backup on {setup.worker_id}: {message} "
        "(INVALID_ARGUMENT)\n"
    )


def handling(setup: Setup, *roles: str) -> None:
    """The leader reports that its plugins handle the custom ``roles``."""
    setup.cluster.node(setup.leader_id).status.handled_custom_roles[:] = roles


def test_roles_set_warns_about_a_custom_role_no_plugin_handles_and_sets_it(
    setup: Setup, ctl: Any
) -> None:
    handling(setup, "backup", "hello")
    result = ctl("roles", "set", setup.leader_id, "custom:helo")
    assert result.code == 0, result.err
    assert result.err == (
        f"roleserve ctl: warning: no plugin on {setup.leader_id} handles custom:helo "
        "(its plugins handle: backup, hello); setting it anyway, for a plugin installed later\n"
    )
    assert setup.cluster.received("UpdateNodeRoles")[-1].changes == [
        Change(role="custom:helo", assign=True)
    ]
    assert "custom:helo" in result.out


def test_roles_set_says_nothing_about_handled_builtin_or_unknown_cases(
    setup: Setup, ctl: Any
) -> None:
    handling(setup, "hello")
    handled = ctl("roles", "set", setup.leader_id, "custom:hello")
    builtin = ctl("roles", "set", setup.leader_id, "kubernetes_worker")
    unreported = ctl("roles", "set", setup.new_id, "custom:helo")  # no status: unknown
    assert [r.err for r in (handled, builtin, unreported)] == ["", "", ""]
    assert len(setup.cluster.received("UpdateNodeRoles")) == 3


def test_roles_set_names_a_node_whose_plugins_handle_no_custom_role(setup: Setup, ctl: Any) -> None:
    result = ctl("roles", "set", setup.worker_id, "custom:backup")
    assert result.code == 0
    assert "(its plugins handle: no custom roles)" in result.err


def test_roles_unset_of_a_role_the_node_does_not_hold_says_so(setup: Setup, ctl: Any) -> None:
    result = ctl("roles", "unset", setup.worker_id, "custom:x")
    assert result.code == 0
    assert result.err == f"{setup.worker_id} does not hold custom:x; nothing to unset\n"
    assert result.out == f"{setup.worker_id}: kubernetes_worker\n"
    assert setup.cluster.received("UpdateNodeRoles") == []


# -- naming nodes by prefix ----------------------------------------------------------------


@pytest.mark.parametrize("how", ["full", "prefix", "hex-only"])
def test_approve_resolves_a_unique_prefix(setup: Setup, ctl: Any, how: str) -> None:
    text = {
        "full": setup.new_id,
        "prefix": setup.new_id[:8],
        "hex-only": setup.new_id[5:8],
    }[how]
    result = ctl("approve", text)
    assert result.code == 0, result.err
    assert result.out == f"approved {setup.new_id}\n"
    assert setup.cluster.received("ApproveNode") == [
        management_pb2.ApproveNodeRequest(node_id=setup.new_id)
    ]


def test_an_ambiguous_prefix_lists_the_candidates(setup: Setup, ctl: Any) -> None:
    shared = setup.new_id[:6]
    result = ctl("approve", shared)
    assert result.code == 2
    candidates = ", ".join(sorted([setup.new_id, setup.worker_id]))
    assert result.err == (
        f"roleserve ctl: error: {shared!r} matches 2 nodes, give more of the ID: {candidates}\n"
    )
    assert setup.cluster.received("ApproveNode") == []


def test_an_unknown_node_lists_the_nodes(setup: Setup, ctl: Any) -> None:
    unknown = other_id(setup.leader_id, avoid=setup.new_id[5])[:7]
    result = ctl("approve", unknown)
    assert result.code == 1
    every = ", ".join(sorted([setup.leader_id, setup.new_id, setup.worker_id]))
    assert result.err == (
        f"roleserve ctl: error: no node matches {unknown!r}; the cluster's nodes: {every}\n"
    )
    assert setup.cluster.received("ApproveNode") == []


def local_cluster(setup: Setup, directory: Path) -> Path:
    """``directory`` laid out as a local cluster's (``cluster up``): first-address, the
    owner's access directory as owner/, and node 1's key (the fake leader's) in n1/."""
    shutil.copytree(setup.access_dir, directory / "owner")
    (directory / "first-address").write_text("127.0.0.11\n")
    key = NodeDataDirectory(directory / "n1").key
    key.parent.mkdir(parents=True)
    key.write_bytes(setup.cluster.leader.key_pem)
    (directory / "n2").mkdir()  # no key yet: no name
    return directory


@pytest.mark.parametrize("given", ["the cluster's directory", "its owner directory"])
def test_a_local_clusters_table_names_are_nodes_and_its_directory_credentials(
    setup: Setup, cli: Any, tmp_path: Path, given: str
) -> None:
    """``cluster status`` calls the nodes n1, n2, ...: ctl takes those names, given the
    cluster's directory (it reads its owner/; it said ``key.pem is missing``) or owner/."""
    cluster = local_cluster(setup, tmp_path / "cluster")
    credentials = cluster if given == "the cluster's directory" else cluster / "owner"
    result = cli("ctl", "--credentials", str(credentials), "approve", "n1")
    assert result.code == 0, result.err
    assert result.out == f"approved {setup.leader_id}\n"
    assert setup.cluster.received("ApproveNode") == [
        management_pb2.ApproveNodeRequest(node_id=setup.leader_id)
    ]
    result = cli("ctl", "--credentials", str(credentials), "approve", "n2")
    assert result.code == 1
    assert result.err.startswith("roleserve ctl: error: no node matches 'n2'; ")


def test_match_node_lists_at_most_ten_candidates() -> None:
    nodes = [management_pb2.Node(id=f"node-{index:032x}") for index in range(12)]
    with pytest.raises(CtlError, match=r"matches 12 nodes.*09 and 2 more$") as caught:
        match_node(nodes, "node-0")
    assert f"node-{10:032x}" not in caught.value.message
    assert match_node(nodes, f"node-{11:032x}").id == f"node-{11:032x}"


@pytest.mark.parametrize(
    ("age", "cell"),
    [(None, "-"), (0.04, "0.0s ago"), (59.94, "59.9s ago"), (60, "1m00s ago"), (3725, "1h02m ago")],
)
def test_heartbeat_ages(age: float | None, cell: str) -> None:
    assert format_age(age) == cell


def test_enum_values_newer_than_the_client_show_as_numbers() -> None:
    """A newer server's node state must not make ``ctl nodes`` fail."""
    assert (state_name(common_pb2.NODE_STATE_UP), state_name(42)) == ("UP", "42")  # type: ignore[arg-type]


# -- decommission ---------------------------------------------------------------------------


class Terminal(io.StringIO):
    """Typed answers on a stdin that is a terminal."""

    @override
    def isatty(self) -> bool:
        return True


def test_decommission_refuses_without_a_terminal_or_yes(setup: Setup, ctl: Any) -> None:
    result = ctl("decommission", setup.worker_id)
    assert result.code == 2
    assert result.err == (
        f"roleserve ctl: error: decommissioning {setup.worker_id} needs confirmation, and "
        "stdin is not a terminal to ask on; pass --yes to confirm\n"
    )
    assert setup.cluster.received("DecommissionNode") == []


def test_decommission_with_yes(setup: Setup, ctl: Any) -> None:
    result = ctl("decommission", "--yes", setup.worker_id)
    assert (result.code, result.out) == (0, f"decommissioned {setup.worker_id}\n")
    assert setup.cluster.received("DecommissionNode") == [
        management_pb2.DecommissionNodeRequest(node_id=setup.worker_id)
    ]


@pytest.mark.parametrize(("answer", "done"), [("y\n", True), ("yes\n", True), ("\n", False)])
def test_decommission_asks_on_a_terminal(
    setup: Setup, ctl: Any, monkeypatch: pytest.MonkeyPatch, answer: str, done: bool
) -> None:
    monkeypatch.setattr("sys.stdin", Terminal(answer))
    result = ctl("decommission", setup.worker_id)
    assert result.err.startswith(f"Decommission {setup.worker_id} (127.0.0.99)? ")
    assert "[y/N]" in result.err
    sent = setup.cluster.received("DecommissionNode")
    if done:
        assert (result.code, len(sent)) == (0, 1)
    else:
        assert (result.code, sent) == (1, [])
        assert result.err.endswith("error: not confirmed; nothing was changed\n")


def test_a_refusal_prints_the_servers_message(setup: Setup, ctl: Any) -> None:
    message = f"node {setup.leader_id} is a consensus member; remove that role first"
    setup.cluster.refusals["DecommissionNode"] = (grpc.StatusCode.FAILED_PRECONDITION, message)
    result = ctl("decommission", "-y", setup.leader_id)
    assert result.code == 1
    assert result.out == ""
    assert result.err == (
        f"roleserve ctl: error: decommissioning {setup.leader_id}: {message} "
        "(FAILED_PRECONDITION)\n"
    )


# -- ticket, leader, consensus ---------------------------------------------------------------


def test_ticket_round_trips(
    setup: Setup, ctl: Any, ca: ThrowawayCA, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ROLESERVE_COMMAND", raising=False)  # the hint says `roleserve`
    result = ctl("ticket")
    assert result.code == 0, result.err
    [line] = result.out.splitlines()
    ticket = RegisterTicket.decode(line)
    assert ticket.ticket == setup.cluster.ticket
    assert ticket.ca_certificate == ca.certificate
    assert line not in result.err  # the command reads it from a file, out of `ps`
    assert result.err == (
        "A new node registers with the ticket saved in a file "
        "(`roleserve ctl ticket > TICKET_FILE`):\n"
        "  roleserve node run --data-dir DATA_DIR --address NODE_ADDRESS "
        f"--register-file TICKET_FILE --join-address {setup.cluster.address}\n"
        "(or with the ticket in $ROLESERVE_REGISTER_TICKET instead of --register-file)\n"
    )


def test_leader(setup: Setup, ctl: Any) -> None:
    endpoint = f"{setup.cluster.address}:{CURATOR_PORT}"
    result = ctl("leader")
    assert (result.code, result.out) == (0, f"{setup.leader_id}  {endpoint}\n")
    assert json.loads(ctl("leader", "--json").out) == {
        "node_id": setup.leader_id,
        "endpoint": endpoint,
        "answered_by": endpoint,
    }


def test_consensus_table_and_json(setup: Setup, ctl: Any) -> None:
    setup.cluster.consensus = [
        Member(node_id=setup.leader_id, status=Member.FULL, peer_url="https://a:7837"),
        Member(
            node_id=setup.worker_id,
            status=Member.LEARNER,
            peer_url="https://b:7837",
            alarms=["NOSPACE"],
        ),
        Member(node_id=setup.new_id, leader=True),
    ]
    for answered in setup.cluster.consensus[:2]:
        answered.db_size, answered.db_size_in_use, answered.revision = 21_000_000, 350_000, 5003
    result = ctl("consensus")
    assert result.code == 0, result.err
    *table, history = result.out.splitlines()
    assert [line.split() for line in table] == [
        ["NODE", "STATUS", "PEER", "URL", "DB", "SIZE", "IN", "USE", "REVISION", "ALARMS"],
        [setup.leader_id, "FULL", "https://a:7837", "21.0MB", "0.3MB", "5003", "-"],
        [setup.worker_id, "LEARNER", "https://b:7837", "21.0MB", "0.3MB", "5003", "NOSPACE"],
        ["*", setup.new_id, "UNKNOWN", "-", "-", "-", "-", "-"],
    ]
    assert history == "history: not compacted since the curator leads; kept for 5m00s"
    members = json.loads(ctl("consensus", "--json").out)
    assert members[1] == {
        "node_id": setup.worker_id,
        "status": "LEARNER",
        "peer_url": "https://b:7837",
        "leader": False,
        "db_size": 21_000_000,
        "db_size_in_use": 350_000,
        "revision": 5003,
        "alarms": ["NOSPACE"],
    }
    assert members[2]["leader"] is True
    assert members[2]["db_size"] is None  # it did not answer


def test_consensus_says_the_last_compaction(setup: Setup, ctl: Any) -> None:
    setup.cluster.consensus = [Member(node_id=setup.leader_id, status=Member.FULL)]
    setup.cluster.compacted_revision = 4000
    last = ctl("consensus").out.splitlines()[-1]
    assert last == (
        "history: compacted to revision 4000 at 2023-11-14T22:13:20+00:00; kept for 5m00s"
    )


def test_consensus_rebuild_names_the_node_and_what_the_leader_did(setup: Setup, ctl: Any) -> None:
    result = ctl("consensus", "rebuild", setup.worker_id[:12])
    assert (result.code, result.out) == (
        0,
        f"rebuilding {setup.worker_id}: removed member 1, added 2; `ctl consensus` shows it "
        "LEARNER, then FULL\n",
    )
    assert setup.cluster.received("RebuildConsensusMember") == [
        management_pb2.RebuildConsensusMemberRequest(node_id=setup.worker_id)
    ]
    assert setup.cluster.received("GetConsensusStatus") == []


def test_consensus_rebuild_refused_is_the_leaders_line(setup: Setup, ctl: Any) -> None:
    message = "not rebuilding node x: cannot remove x (1): 1 of the 2 voting members left ..."
    setup.cluster.refusals["RebuildConsensusMember"] = (
        grpc.StatusCode.FAILED_PRECONDITION,
        message,
    )
    result = ctl("consensus", "rebuild", setup.worker_id)
    assert (result.code, result.out) == (1, "")
    assert result.err == (
        f"roleserve ctl: error: rebuilding the etcd member of {setup.worker_id}: {message} "
        "(FAILED_PRECONDITION)\n"
    )


# -- tree, values, logs --------------------------------------------------------------------


def runnable(dn: str, state: str = "HEALTHY", **fields: Any) -> nodemanagement_pb2.Runnable:
    return nodemanagement_pb2.Runnable(dn=dn, state=state, **fields)


def test_tree_draws_the_supervision_tree(setup: Setup, ctl: Any) -> None:
    failing = runnable(
        "root.role.nodemgmt",
        "DEAD",
        restarts=3,
        failures=3,
        crash_looping=True,
        last_error="OSError: cannot bind\nsecond line",
    )
    failing.restart_in.FromMilliseconds(1600)
    setup.cluster.runnables = [
        runnable("root"),
        runnable("root.network", note="address 127.0.0.11"),
        runnable("root.network.dhcp", "DONE"),
        runnable("root.role"),
        runnable("root.role.heartbeat"),
        failing,
    ]
    result = ctl("tree", setup.leader_id[:9])
    assert result.code == 0, result.err
    assert result.out.splitlines() == [
        "root  HEALTHY",
        "├── network  HEALTHY  address 127.0.0.11",
        "│   └── dhcp  DONE",
        "└── role  HEALTHY",
        "    ├── heartbeat  HEALTHY",
        "    └── nodemgmt  DEAD  restarts=3 failures=3  crash-looping  "
        "last error: OSError: cannot bind  restart in 1.6s",
    ]
    assert setup.cluster.received("GetSupervisionTree") == [
        nodemanagement_pb2.GetSupervisionTreeRequest(dn="root")
    ]


def test_tree_marks_a_final_failure_and_shows_its_message_once(setup: Setup, ctl: Any) -> None:
    message = "no etcd binary found; install etcd"
    setup.cluster.runnables = [
        runnable(
            "root.role.controlplane",
            "DEAD",
            failures=1,
            final=True,
            note=message,
            last_error=f"roleserve_controlplane.consensus.errors.EtcdNotFoundError: {message}",
        )
    ]
    result = ctl("tree", setup.leader_id, "root.role.controlplane")
    assert result.out.splitlines() == [
        "root.role.controlplane  DEAD  restarts=0 failures=1  "
        f"final (not restarted until fixed and restarted with `ctl restart`)  {message}"
    ]
    listing = json.loads(ctl("tree", setup.leader_id, "root.role.controlplane", "--json").out)
    assert listing[0]["final"] is True


def test_tree_of_a_subtree_and_json(setup: Setup, ctl: Any) -> None:
    setup.cluster.runnables = [runnable("root.role"), runnable("root.role.heartbeat")]
    assert ctl("tree", setup.leader_id, "root.role").out.splitlines() == [
        "root.role  HEALTHY",
        "└── heartbeat  HEALTHY",
    ]
    listing = json.loads(ctl("tree", setup.leader_id, "root.role", "--json").out)
    assert [entry["dn"] for entry in listing] == ["root.role", "root.role.heartbeat"]
    assert listing[0] == {
        "dn": "root.role",
        "state": "HEALTHY",
        "restarts": 0,
        "failures": 0,
        "last_error": None,
        "last_error_traceback": None,
        "since": None,
        "crash_looping": False,
        "restart_in": None,
        "note": None,
        "final": False,
    }
    assert [request.dn for request in setup.cluster.received("GetSupervisionTree")] == [
        "root.role",
        "root.role",
    ]


def test_tree_reports_the_nodes_refusal(setup: Setup, ctl: Any) -> None:
    setup.cluster.refusals["GetSupervisionTree"] = (
        grpc.StatusCode.NOT_FOUND,
        "no runnable root.nope",
    )
    result = ctl("tree", setup.leader_id, "root.nope")
    assert result.code == 1
    assert result.err == (
        f"roleserve ctl: error: reading the supervision tree of node {setup.leader_id} at "
        f"{setup.cluster.address}:{NODE_MANAGEMENT_PORT}: no runnable root.nope (NOT_FOUND)\n"
    )


def test_restart_asks_the_node_to_restart_the_runnable(setup: Setup, ctl: Any) -> None:
    result = ctl("restart", setup.leader_id[:9], "root.role.heartbeat")
    assert (result.code, result.err) == (0, "")
    assert result.out == f"restarted root.role.heartbeat on node {setup.leader_id}\n"
    [request] = setup.cluster.received("RestartRunnable")
    assert request.dn == "root.role.heartbeat"


def test_restart_reports_the_nodes_refusal(setup: Setup, ctl: Any) -> None:
    setup.cluster.refusals["RestartRunnable"] = (
        grpc.StatusCode.INVALID_ARGUMENT,
        "root cannot be restarted; stop the node instead",
    )
    result = ctl("restart", setup.leader_id, "root")
    assert result.code == 1
    assert result.err == (
        f"roleserve ctl: error: restarting root of node {setup.leader_id} at "
        f"{setup.cluster.address}:{NODE_MANAGEMENT_PORT}: root cannot be restarted; stop the "
        "node instead (INVALID_ARGUMENT)\n"
    )


def test_a_node_without_an_address_cannot_be_inspected(setup: Setup, ctl: Any) -> None:
    result = ctl("values", setup.new_id)
    assert result.code == 1
    assert f"node {setup.new_id} has not reported its address yet" in result.err


def key_figures_of_a_node() -> tuple[
    list[nodemanagement_pb2.Runnable], list[nodemanagement_pb2.Value], datetime.datetime
]:
    now = datetime.datetime(2026, 12, 3, 12, 0, tzinfo=datetime.UTC)
    root = runnable("root")
    root.since.FromDatetime(now - datetime.timedelta(seconds=3725))
    runnables = [
        root,
        runnable("root.role"),
        runnable("root.role.heartbeat", restarts=1, failures=1),
        runnable("root.role.nodemgmt", "DEAD", restarts=3, failures=3, crash_looping=True),
        runnable("root.role.controlplane", "DEAD", failures=1, final=True),
        runnable("root.role.hello", "NEW"),
    ]
    network = nodemanagement_pb2.Value(name="network", is_set=True, sets=3)
    network.last_changed.FromDatetime(now - datetime.timedelta(seconds=2.5))
    roles = nodemanagement_pb2.Value(name="roles", is_set=True, sets=2)
    roles.last_changed.FromDatetime(now - datetime.timedelta(seconds=60))
    values = [network, roles, nodemanagement_pb2.Value(name="kubernetes_status")]
    return runnables, values, now


def test_metrics_sums_a_node_up(setup: Setup) -> None:
    runnables, values, now = key_figures_of_a_node()
    node = setup.cluster.node(setup.leader_id)
    figures = node_figures(node, runnables, values, now)
    assert figure_lines(figures) == [
        f"node:       {setup.leader_id} (UP, HEALTHY, version 0.1.0, {setup.cluster.address})",
        "heartbeat:  2.1s ago",
        "root:       HEALTHY for 1h02m",
        "runnables:  6: 3 HEALTHY, 1 NEW, 2 DEAD",
        "            crash-looping: root.role.nodemgmt",
        "            final: root.role.controlplane",
        "restarts:   4 (failures 5), most: root.role.nodemgmt (3)",
        "values:     2 of 3 set, 5 changes, the last 2.5s ago (network)",
    ]
    assert figures["runnables_by_state"] == {"HEALTHY": 3, "NEW": 1, "DEAD": 2}
    assert figures["last_value_change"] == {"name": "network", "age": 2.5}


def test_metrics_of_a_node_with_nothing_to_say(setup: Setup) -> None:
    node = setup.cluster.node(setup.new_id)
    now = datetime.datetime(2026, 12, 3, tzinfo=datetime.UTC)
    assert figure_lines(node_figures(node, [], [], now)) == [
        f"node:       {setup.new_id} (NEW, UNKNOWN, no address)",
        "heartbeat:  -",
        "root:       -",
        "runnables:  0",
        "restarts:   0 (failures 0)",
        "values:     0 of 0 set, 0 changes",
    ]


def test_metrics_reads_the_tree_and_the_values_of_the_node(setup: Setup, ctl: Any) -> None:
    runnables, values, _ = key_figures_of_a_node()
    setup.cluster.runnables, setup.cluster.values = runnables, values
    result = ctl("metrics", setup.leader_id[:9])
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[0].startswith(f"node:       {setup.leader_id} (UP, HEALTHY")
    assert lines[3] == "runnables:  6: 3 HEALTHY, 1 NEW, 2 DEAD"
    assert setup.cluster.received("GetSupervisionTree") == [
        nodemanagement_pb2.GetSupervisionTreeRequest(dn="root")
    ]
    assert setup.cluster.received("GetValues") == [nodemanagement_pb2.GetValuesRequest()]
    figures = json.loads(ctl("metrics", setup.leader_id, "--json").out)
    assert (figures["node"], figures["restarts"], figures["values_set"]) == (setup.leader_id, 4, 2)


def test_values_table(setup: Setup, ctl: Any) -> None:
    setup.cluster.values = [
        nodemanagement_pb2.Value(
            name="network", owner="core", is_set=True, sets=2, current="Network(" + "x" * 80 + ")"
        ),
        nodemanagement_pb2.Value(name="roles", owner="core"),
    ]
    result = ctl("values", setup.leader_id)
    assert result.code == 0, result.err
    header, network, roles = result.out.splitlines()
    assert header.split() == ["NAME", "OWNER", "SET", "SETS", "CURRENT"]
    assert network.split() == ["network", "core", "yes", "2", "Network(" + "x" * 51 + "…"]
    assert roles.split() == ["roles", "core", "no", "0", "-"]
    [value] = [v for v in json.loads(ctl("values", setup.leader_id, "--json").out) if v["is_set"]]
    assert value["current"] == "Network(" + "x" * 80 + ")"


def test_values_with_a_name_shows_that_value_in_full(setup: Setup, ctl: Any) -> None:
    details = "interface rsnet1w1, UDP port 7838\n2 peers:\n  node-a ...\n  node-b ..."
    setup.cluster.values = [
        nodemanagement_pb2.Value(
            name="clusternet_status",
            type="ClusternetStatus",
            doc="The WireGuard mesh interface.",
            owner="clusternet",
            is_set=True,
            sets=3,
            current="ClusternetStatus(rsnet1w1 …)",
            details=details,
        ),
    ]
    result = ctl("values", setup.leader_id, "clusternet_status")
    assert result.code == 0, result.err
    assert result.out == (
        "clusternet_status (ClusternetStatus, owned by clusternet, set 3×)\n"
        f"The WireGuard mesh interface.\n\n{details}\n"
    )
    assert setup.cluster.received("GetValues")[-1].name == "clusternet_status"
    shown = json.loads(ctl("values", setup.leader_id, "clusternet_status", "--json").out)
    assert (shown["name"], shown["details"]) == ("clusternet_status", details)


def log_entry(index: int, dn: str, message: str, level: int = 20) -> nodemanagement_pb2.LogEntry:
    entry = nodemanagement_pb2.LogEntry(seq=index, dn=dn, level=level, message=message)
    entry.time.seconds = LOG_TIME + index
    entry.time.nanos = 123_000_000
    return entry


def clock(index: int) -> str:
    """The local time a test log entry is printed with."""
    return time.strftime("%H:%M:%S", time.localtime(LOG_TIME + index)) + ".123"


def test_logs_prints_stored_records(setup: Setup, ctl: Any) -> None:
    failed = log_entry(2, "root.role.nodemgmt", "failed", level=40)
    failed.exception = "Traceback (most recent call last):\nOSError: cannot bind"
    setup.cluster.stored_logs = [
        log_entry(1, "root.role.heartbeat", "beating every 5.0s"),
        failed,
    ]
    result = ctl("logs", setup.leader_id)
    assert result.code == 0, result.err
    assert result.out.splitlines() == [
        f"{clock(1)} I root.role.heartbeat: beating every 5.0s",
        f"{clock(2)} E root.role.nodemgmt: failed",
        "Traceback (most recent call last):",
        "OSError: cannot bind",
    ]
    result = ctl("logs", setup.leader_id, "root.role", "--no-subtree", "-n", "1")
    assert result.out.splitlines()[0] == f"{clock(2)} E root.role.nodemgmt: failed"
    assert setup.cluster.received("GetLogs") == [
        nodemanagement_pb2.GetLogsRequest(dn="root", subtree=True, backlog=-1, follow=False),
        nodemanagement_pb2.GetLogsRequest(dn="root.role", subtree=False, backlog=1, follow=False),
    ]


@pytest.mark.parametrize(
    ("argv", "method", "code"),
    [(["logs", "LEADER", "-f"], "GetLogs", 0), (["nodes"], "GetNodes", 130)],
    ids=["logs-follow", "nodes"],
)
def test_ctrl_c(setup: Setup, ctl: Any, argv: list[str], method: str, code: int) -> None:
    """Ctrl-C ends following as intended (exit 0); anything else it interrupts (130)."""
    setup.cluster.interrupt_in = method
    result = ctl(*(setup.leader_id if arg == "LEADER" else arg for arg in argv))
    assert (result.code, result.err) == (code, "")
    assert [name for name, _ in setup.cluster.requests][-1] == method


def test_logs_follow_ends_when_the_node_ends_the_stream(setup: Setup, ctl: Any) -> None:
    setup.cluster.stored_logs = [log_entry(1, "root.role.heartbeat", "stored")]
    gap = log_entry(3, "", "2 log records of root lost here: this reader fell behind", 30)
    setup.cluster.new_logs = [log_entry(2, "root.role.heartbeat", "new"), gap]
    result = ctl("logs", setup.leader_id, "--follow", "-n", "5")
    assert result.code == 0, result.err
    assert result.out.splitlines() == [
        f"{clock(1)} I root.role.heartbeat: stored",
        f"{clock(2)} I root.role.heartbeat: new",
        f"{clock(3)} W [gap] 2 log records of root lost here: this reader fell behind",
    ]
    assert result.err == f"roleserve ctl: {setup.leader_id} ended the log stream\n"
    assert setup.cluster.received("GetLogs") == [
        nodemanagement_pb2.GetLogsRequest(dn="root", subtree=True, backlog=5, follow=True)
    ]


# -- whoami, credentials issue|list|revoke --------------------------------------------------


def test_credentials_issue_writes_an_access_directory_whoami_reads(
    setup: Setup, ctl: Any, cli: Any, tmp_path: Path
) -> None:
    out = tmp_path / "alice"
    issued = ctl("credentials", "issue", "alice", "--scope", "viewer", "--out", str(out))
    assert issued.code == 0, issued.err
    [request] = setup.cluster.received("IssueCredentials")
    assert (request.name, request.scope) == ("alice", "viewer")
    credentials = UserCredentials.load(out)  # checked: key, certificate and CA belong together
    assert credentials.identity == "alice"
    assert certificate_scope(credentials.certificate) == "viewer"
    assert ClusterAccess.load(out).endpoints == (f"{setup.cluster.address}:{CURATOR_PORT}",)
    assert (out / "key.pem").stat().st_mode & 0o777 == 0o600
    serial = f"{credentials.certificate.serial_number:x}"
    assert issued.out.startswith(f"issued viewer credentials 'alice' (serial {serial}, expires ")
    assert issued.out.rstrip().endswith(f"use them with: roleserve ctl --credentials {out} whoami")

    whoami = cli("ctl", "--credentials", str(out), "whoami")
    assert whoami.code == 0, whoami.err
    fingerprint = credentials.ca_certificate.fingerprint(hashes.SHA256()).hex()
    expires = credentials.certificate.not_valid_after_utc.isoformat()
    assert whoami.out.splitlines() == [
        "identity:     alice",
        "scope:        viewer",
        "permissions:  READ_CLUSTER_STATUS READ_NODE",
        f"serial:       {serial}",
        f"expires:      {expires}",
        f"cluster ca:   sha256:{fingerprint}",
        f"leader:       {setup.leader_id} at {setup.cluster.address}:{CURATOR_PORT}",
    ]


@pytest.mark.parametrize("scope", ["viewer", "metrics"])
def test_whoami_of_revoked_credentials_says_so_in_one_line(
    setup: Setup, ctl: Any, cli: Any, tmp_path: Path, scope: str
) -> None:
    """Finding the leader is open to all, revoked or not; whoami asks the leader something
    to learn it, and hears it whatever its scope may call (metrics: nothing)."""
    out = tmp_path / "alice"
    assert ctl("credentials", "issue", "alice", "--scope", scope, "--out", str(out)).code == 0
    serial = UserCredentials.load(out).certificate.serial_number
    assert cli("ctl", "--credentials", str(out), "whoami").code == 0
    setup.cluster.revoked.add(serial)
    whoami = cli("ctl", "--credentials", str(out), "whoami")
    assert (whoami.code, whoami.out) == (1, "")
    assert whoami.err == (
        f"roleserve ctl: error: credentials 'alice' (serial {serial:x}) were revoked; ask the "
        "owner for new credentials\n"
    )


def test_whoami_of_credentials_without_a_scope_says_owner(setup: Setup, ctl: Any) -> None:
    result = ctl("whoami", "--json")
    assert result.code == 0, result.err
    facts = json.loads(result.out)
    assert (facts["identity"], facts["scope"]) == ("owner", "owner")
    assert "MANAGE_CREDENTIALS" in facts["permissions"].split()


def test_credentials_issue_never_writes_over_a_directory_in_use(setup: Setup, ctl: Any) -> None:
    before = (setup.access_dir / "key.pem").read_bytes()
    result = ctl("credentials", "issue", "x", "--scope", "viewer", "--out", str(setup.access_dir))
    assert result.code == 2
    assert result.err == (
        f"roleserve ctl: error: {setup.access_dir} exists and is not an empty directory; "
        "give a new one to --out\n"
    )
    assert setup.cluster.received("IssueCredentials") == []
    assert (setup.access_dir / "key.pem").read_bytes() == before


def test_credentials_issue_refused_says_why_in_one_line(
    setup: Setup, ctl: Any, tmp_path: Path
) -> None:
    setup.cluster.refusals["IssueCredentials"] = (
        grpc.StatusCode.PERMISSION_DENIED,
        "viewer credentials cannot IssueCredentials (needs MANAGE_CREDENTIALS); "
        "ask the owner for owner credentials",
    )
    out = tmp_path / "x"
    result = ctl("credentials", "issue", "x", "--scope", "viewer", "--out", str(out))
    assert result.code == 1
    assert result.err == (
        "roleserve ctl: error: issuing credentials 'x': viewer credentials cannot "
        "IssueCredentials (needs MANAGE_CREDENTIALS); ask the owner for owner credentials "
        "(PERMISSION_DENIED)\n"
    )
    assert not out.exists()


def test_credentials_list_and_revoke(setup: Setup, ctl: Any) -> None:
    listed = management_pb2.IssuedCredentials(
        name="alice", scope="viewer", serial="1f", revoked=True
    )
    listed.not_after.FromSeconds(LOG_TIME)
    setup.cluster.issued = [listed]
    table = ctl("credentials", "list")
    assert table.code == 0, table.err
    assert [line.split() for line in table.out.splitlines()] == [
        ["NAME", "SCOPE", "SERIAL", "EXPIRES", "REVOKED"],
        ["alice", "viewer", "1f", "2023-11-14", "yes"],
    ]
    revoked = ctl("credentials", "revoke", "alice")
    assert revoked.code == 0, revoked.err
    assert [r.name for r in setup.cluster.received("RevokeCredentials")] == ["alice"]
    assert revoked.out == (
        "revoked credentials 'alice': the curator and every node's management server refuse "
        "them within seconds\n"
    )


def test_the_scope_choices_are_the_scopes() -> None:
    assert tuple(scope.value for scope in Scope) == SCOPES


# -- credentials and connection ----------------------------------------------------------------


def test_missing_credentials_directory(
    tmp_path: Path, cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    nowhere = tmp_path / "nowhere"
    result = cli("ctl", "--credentials", str(nowhere), "nodes")
    assert result.code == 2
    assert result.err == (
        f"roleserve ctl: error: no cluster credentials at {nowhere}; pass --credentials DIR "
        "or set ROLESERVE_CREDENTIALS to the directory the bootstrap printed\n"
    )
    monkeypatch.setenv("ROLESERVE_CREDENTIALS", str(nowhere))
    result = cli("ctl", "leader")
    assert result.code == 2
    assert f"no cluster credentials at {nowhere}; pass --credentials" in result.err


def test_without_credentials_the_local_clusters_owner_is_named(
    setup: Setup, tmp_path: Path, cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No --credentials, no $ROLESERVE_CREDENTIALS, nothing in ~/.config/roleserve/owner,
    but a cluster in ``cluster up``'s default directory: the error says where its owner's
    credentials are (it named ~/.config/roleserve/owner alone)."""
    monkeypatch.delenv("ROLESERVE_CREDENTIALS", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    default = tmp_path / "config" / "roleserve" / "owner"
    result = cli("ctl", "nodes")
    assert result.code == 2
    assert result.err == (
        f"roleserve ctl: error: no cluster credentials at {default}; pass --credentials DIR "
        "or set ROLESERVE_CREDENTIALS to the directory the bootstrap printed\n"
    )
    cluster = local_cluster(setup, tmp_path / "state" / "roleserve" / "cluster")
    result = cli("ctl", "nodes")
    assert result.code == 2
    assert result.err == (
        f"roleserve ctl: error: no cluster credentials at {default}; pass --credentials DIR "
        "or set ROLESERVE_CREDENTIALS to the directory the bootstrap printed; the local "
        f"cluster in {cluster} has its owner's: --credentials {cluster / 'owner'}\n"
    )


def test_credentials_from_the_environment(
    setup: Setup, cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ROLESERVE_CREDENTIALS", str(setup.access_dir))
    result = cli("ctl", "leader")
    assert (result.code, result.out.split()[0]) == (0, setup.leader_id)


def test_endpoint_overrides_the_access_directory(setup: Setup, ctl: Any) -> None:
    nobody = f"{random_loopback()}:{CURATOR_PORT}"
    (setup.access_dir / "endpoints").write_text(f"{nobody}\n")  # never asked: --endpoint wins
    result = ctl("leader", "--endpoint", setup.cluster.address, "--timeout", "5")
    assert (result.code, result.out.split()[0]) == (0, setup.leader_id), result.err
    (setup.access_dir / "endpoints").unlink()  # not needed with --endpoint
    result = ctl("--endpoint", f"{setup.cluster.address}:{CURATOR_PORT}", "leader")
    assert (result.code, result.out.split()[0]) == (0, setup.leader_id), result.err


def test_the_access_directory_learns_the_clusters_curators(setup: Setup, ctl: Any) -> None:
    """So that ctl still finds the leader when the node it first knew is down."""
    other = str(random_loopback())
    setup.cluster.directory.nodes.add(id=setup.leader_id, addresses=[setup.cluster.address])
    setup.cluster.directory.nodes.add(id=setup.worker_id, addresses=[other])
    endpoints = setup.access_dir / "endpoints"
    assert ctl("leader", "--endpoint", setup.cluster.address).code == 0
    assert endpoints.read_text().split() == [f"{setup.cluster.address}:{CURATOR_PORT}"]
    assert ctl("leader").code == 0
    assert sorted(endpoints.read_text().split()) == sorted(
        [f"{setup.cluster.address}:{CURATOR_PORT}", f"{other}:{CURATOR_PORT}"]
    )
    assert ClusterAccess.load(setup.access_dir).credentials.identity == "owner"


def test_a_closed_port_fails_at_once_saying_connection_refused(setup: Setup, ctl: Any) -> None:
    closed = f"{random_loopback()}:9"  # nobody listens there: refused at once
    other = f"{random_loopback()}:{CURATOR_PORT}"
    result = ctl("nodes", "--endpoint", closed, "--endpoint", other)  # the default timeout
    assert result.code == 1
    assert result.err == (
        f"roleserve ctl: error: connection refused at {closed}, {other}: no curator listens "
        "there; is the cluster running, and are these its addresses?\n"
    )


def test_another_clusters_credentials_are_one_line_at_once(
    setup: Setup, cli: Any, tmp_path: Path
) -> None:
    """Credentials of one cluster, the address of another: the curator's certificate fails
    verification against our CA, which no waiting changes. Said at once, naming the
    curator and the directory, instead of "no curator named a leader" after the timeout;
    a refusing endpoint beside it changes nothing."""
    elsewhere = tmp_path / "elsewhere"
    ClusterAccess.of(ThrowawayCA().user(), [setup.cluster.address]).save(elsewhere)
    closed = f"{random_loopback()}:9"
    result = cli("ctl", "--credentials", str(elsewhere), "nodes", "--timeout", "60")
    assert (result.code, result.out) == (1, "")
    foreign = f"{setup.cluster.address}:{CURATOR_PORT}"
    assert result.err == (
        f"roleserve ctl: error: the curator at {foreign} is not of the cluster in {elsewhere} "
        "(its CA differs); use the credentials of the cluster at that address "
        "(--credentials DIR), or the addresses of this one (--endpoint)\n"
    )
    with_closed = cli(
        "ctl", "--credentials", str(elsewhere), "nodes", "--endpoint", foreign, "--endpoint", closed
    )
    assert with_closed.err == result.err


def test_grpcs_own_lines_stay_off_the_terminal_unless_debugging(
    setup: Setup, tmp_path: Path
) -> None:
    """gRPC's C core writes a line of its own for each failed handshake; a command at a
    terminal shows only its own message, and ``--debug`` shows gRPC's too. A process of its
    own: the C core reads GRPC_VERBOSITY once, when it loads."""
    elsewhere = tmp_path / "elsewhere"
    ClusterAccess.of(ThrowawayCA().user(), [setup.cluster.address]).save(elsewhere)
    environment = {k: v for k, v in os.environ.items() if k != "GRPC_VERBOSITY"}

    def stderr(*debug: str) -> list[str]:
        command = [sys.executable, "-m", "roleserve_core", *debug, "ctl"]
        command += ["--credentials", str(elsewhere), "nodes"]
        done = subprocess.run(command, capture_output=True, text=True, env=environment)
        assert done.returncode == 1
        return done.stderr.splitlines()

    quiet = stderr()
    assert len(quiet) == 1, quiet
    assert quiet[0].startswith("roleserve ctl: error: the curator at ")
    debugging = stderr("--debug")
    assert any("Handshake failed" in line for line in debugging), debugging


@pytest.mark.parametrize("argv", [["nodes"], ["nodes", "--json"], ["tree", "LEADER"]])
def test_a_reader_that_went_away_ends_ctl_quietly(setup: Setup, argv: list[str]) -> None:
    """``ctl tree NODE | head -1``: no traceback of the closed pipe, and exit 0 whenever the
    reader left (see test_cli's twin)."""
    setup.cluster.runnables = [runnable("root"), runnable("root.role")]
    reading, writing = os.pipe()
    os.close(reading)
    try:
        command = [sys.executable, "-m", "roleserve_core", "ctl"]
        command += ["--credentials", str(setup.access_dir)]
        command += [setup.leader_id if arg == "LEADER" else arg for arg in argv]
        done = subprocess.run(command, stdout=writing, stderr=subprocess.PIPE, text=True)
    finally:
        os.close(writing)
    assert (done.returncode, done.stderr) == (0, "")


def test_no_leader(setup: Setup, ctl: Any) -> None:
    with socket.create_server((str(random_loopback()), 0)) as silent:  # accepts, never answers
        host, port = silent.getsockname()
        result = ctl("nodes", "--endpoint", f"{host}:{port}", "--timeout", "0.3")
    assert result.code == 1
    assert result.err == (
        f"roleserve ctl: error: no curator at {host}:{port} named a leader within 0.3 s; is "
        "the cluster running, and are these its addresses?\n"
    )


def test_a_leader_that_does_not_answer_is_said_and_left_for_the_next(
    setup: Setup, ctl: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hung leader accepts TCP and never completes a connection; the curators name it
    until its lease runs out. ctl says so and asks again, rather than waiting out its
    deadline on the hung one and failing."""
    monkeypatch.setattr(session_module, "LEADER_ANSWER_TIMEOUT", 0.2)
    with socket.create_server((str(random_loopback()), 0)) as silent:  # accepts, never answers
        host, port = silent.getsockname()
        setup.cluster.hung_leader = (setup.new_id, host, port)
        result = ctl("nodes")
    assert result.code == 0, result.err
    assert result.err == (
        f"roleserve ctl: the leader {setup.new_id} at {host}:{port} does not answer; "
        "waiting for the other curators to elect another\n"
    )
    assert f"*  {setup.leader_id}" in result.out


def without_quorum(setup: Setup) -> str:
    """The fake's curator answers as one of three members with no quorum, the only one
    that answers; the text ctl says about it, up to what to do."""
    member = curator_pb2.NoQuorum.Member
    setup.cluster.no_quorum = curator_pb2.NoQuorum(
        members=[
            member(node_id=setup.leader_id, address=setup.cluster.address, answers=True),
            member(node_id=setup.new_id, address="127.0.0.98", answers=False),
            member(node_id=setup.worker_id, address="127.0.0.99", answers=False),
        ]
    )
    return (
        f"no quorum: 1 of 3 consensus members answer ({setup.leader_id}); not answering: "
        f"{setup.new_id} 127.0.0.98, {setup.worker_id} 127.0.0.99; "
    )


def test_no_quorum_is_said_at_once_with_the_members(setup: Setup, ctl: Any) -> None:
    said = without_quorum(setup)
    result = ctl("nodes")  # the default timeout, 10 s: a search would take all of it
    assert result.code == 1
    assert result.err == (
        f"roleserve ctl: error: {said}start them (`roleserve node run` on each), and a leader "
        "is elected once a majority answers\n"
    )
    assert setup.cluster.requests == []  # no Management call: there is no leader


def test_no_quorum_in_a_local_cluster_says_to_run_cluster_up(setup: Setup, ctl: Any) -> None:
    said = without_quorum(setup)
    cluster = setup.access_dir.parent
    (cluster / "first-address").write_text("127.0.0.11\n")  # D/owner of `cluster up --dir D`
    result = ctl("nodes")
    assert result.code == 1
    assert said in result.err
    assert f" cluster up --dir {cluster}, and a leader is elected" in result.err


def test_tree_without_quorum_reaches_a_member_that_answers(setup: Setup, ctl: Any) -> None:
    """Where an operator looks for why there is no leader: the node's own view."""
    said = without_quorum(setup)
    note = "waiting: no quorum (1 of 3 members answer)"
    setup.cluster.runnables = [runnable("root"), runnable("root.curator", "NEW", note=note)]
    result = ctl("tree", setup.leader_id)
    assert result.code == 0, result.err
    assert result.err.startswith(f"roleserve ctl: {said}start them")
    assert result.err.endswith("; reaching the members that answer\n")
    assert result.out.splitlines() == ["root  HEALTHY", f"└── curator  NEW  {note}"]


def test_tree_without_quorum_of_a_member_that_does_not_answer_says_so(
    setup: Setup, ctl: Any
) -> None:
    without_quorum(setup)
    result = ctl("tree", setup.new_id)
    assert result.code == 1
    assert f"no node matches {setup.new_id!r}" in result.err
    assert "(without a leader, only the consensus members that answer can be reached" in result.err
    assert setup.cluster.received("GetSupervisionTree") == []


def test_help_describes_every_subcommand(cli: Any) -> None:
    result = cli("ctl", "--help")
    assert result.code == 0
    for name in ("nodes", "approve", "decommission", "roles", "ticket", "leader", "consensus"):
        assert f"    {name} " in result.out
    for name in ("tree", "values", "logs"):
        assert f"    {name} " in result.out
