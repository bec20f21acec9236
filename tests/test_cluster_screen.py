"""What ``cluster up`` shows on a terminal while the cluster runs: the live table, redrawn,
with the hint on how to operate the cluster under it every time (no processes here: the
table is a stand-in)."""

from __future__ import annotations

import io
import time
from pathlib import Path

import anyio
import pytest

from roleserve_core.cli import _cluster_commands as cluster_command
from roleserve_core.identity import generate_key, node_id, private_key_to_pem
from roleserve_core.localcluster import LocalCluster
from roleserve_core.proto import common_pb2, management_pb2

CLEAR = "\x1b[2J\x1b[H"


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class EnoughScreensError(Exception):
    """Ends the redraw loop after the screens the test wants."""


def test_the_hint_stays_under_the_table_on_every_redraw(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    drawn: list[int] = []

    async def table(cluster: LocalCluster) -> str:
        if len(drawn) == 3:
            raise EnoughScreensError
        drawn.append(len(drawn))
        return f"TABLE {len(drawn)}"

    screen = Terminal()
    monkeypatch.setattr(cluster_command, "_status_table", table)
    monkeypatch.setattr(cluster_command, "REFRESH", 0)
    monkeypatch.setattr("sys.stdout", screen)
    monkeypatch.setenv("ROLESERVE_COMMAND", "./dev roleserve")
    with pytest.raises(EnoughScreensError):
        anyio.run(cluster_command._live_status, LocalCluster(tmp_path, 1), tmp_path, 0.0)
    screens = screen.getvalue().split(CLEAR)[1:]
    owner = tmp_path / "owner"
    hint = f"operate it with: export ROLESERVE_CREDENTIALS={owner}; ./dev roleserve ctl nodes"
    assert len(screens) == 3
    for number, shown in enumerate(screens, start=1):
        assert shown.endswith(f"TABLE {number}\n\n{hint}\n")


@pytest.mark.parametrize("terminal", [True, False])
def test_the_live_status_ends_once_cluster_down_stopped_the_nodes(
    terminal: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A foreground ``up`` once kept waiting after ``cluster down`` from another terminal
    stopped its nodes. A ``cluster down`` from before this ``up`` (``since``) does not end
    it."""
    cluster = LocalCluster(tmp_path, 1)  # no node runs: none was started
    cluster.record_down()  # an earlier down
    since = time.time()
    looks: list[bool] = []
    stopped_by_down = cluster.stopped_by_down

    def look(when: float) -> bool:
        if looks:  # the second look: `cluster down` ran meanwhile
            cluster.record_down()
        looks.append(stopped_by_down(when))
        return looks[-1]

    async def table(_: LocalCluster) -> str:
        return "TABLE"

    async def live() -> None:
        with anyio.fail_after(10):
            await cluster_command._live_status(cluster, tmp_path, since)

    monkeypatch.setattr(cluster, "stopped_by_down", look)
    monkeypatch.setattr(cluster_command, "_status_table", table)
    monkeypatch.setattr(cluster_command, "REFRESH", 0)
    monkeypatch.setattr("sys.stdout", Terminal() if terminal else io.StringIO())
    anyio.run(live)
    assert looks == [False, True]


def known_nodes(cluster: LocalCluster) -> dict[str, management_pb2.Node]:
    """What a leader would say of each node of ``cluster``, whose keys this writes: UP,
    every role of ``cluster up``, node 2 with a heartbeat too old."""
    nodes = {}
    for local in cluster.nodes:
        key = generate_key()
        local.datadir.key.parent.mkdir(parents=True, exist_ok=True)
        local.datadir.key.write_bytes(private_key_to_pem(key))
        node = management_pb2.Node(
            id=node_id(key.public_key()),
            state=common_pb2.NODE_STATE_UP,
            health=management_pb2.Node.HEARTBEAT_TIMEOUT
            if local.index == 2
            else management_pb2.Node.HEALTHY,
            leader=local.index == 1,
        )
        node.status.external_address = str(local.address)
        for role in (node.roles.consensus_member, node.roles.kubernetes_controller):
            role.SetInParent()
        node.roles.kubernetes_worker.SetInParent()
        node.time_since_heartbeat.FromSeconds(200 if local.index == 2 else 3)
        nodes[node.id] = node
    return nodes


def test_the_status_table_fits_an_80_column_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """~150 columns as it is: the roles go under each row, the widest cells (IDs) are cut
    with an ellipsis; piped, it stays one line a node, every cell whole."""
    cluster = LocalCluster(tmp_path, 3)
    nodes = known_nodes(cluster)

    async def leader_says(_: LocalCluster) -> dict[str, management_pb2.Node]:
        return nodes

    monkeypatch.setattr(cluster_command, "_nodes", leader_says)
    monkeypatch.delenv("COLUMNS", raising=False)
    piped = anyio.run(cluster_command._status_table, cluster).splitlines()
    assert len(piped) == 4
    assert all(node_id in "\n".join(piped) for node_id in nodes)
    assert max(map(len, piped)) > 80

    monkeypatch.setenv("COLUMNS", "80")
    fitted = anyio.run(cluster_command._status_table, cluster).splitlines()
    assert max(map(len, fitted)) <= 80, "\n".join(fitted)
    assert fitted[0].split() == ["NODE", "PID", "ID", "ADDRESS", "STATE", "HEALTH", "HEARTBEAT"]
    roles = "  roles: consensus_member, kubernetes_controller, kubernetes_worker"
    assert fitted[2::2] == [roles] * 3
    rows = [line.replace(" * ", " ").split() for line in fitted[1::2]]
    assert [row[:2] for row in rows] == [["n1", "stopped"], ["n2", "stopped"], ["n3", "stopped"]]
    for row, identity in zip(rows, nodes, strict=True):  # cut, still a prefix ctl takes
        assert row[2].endswith("…")
        assert identity.startswith(row[2].removesuffix("…"))
    assert rows[1][5] == "HEARTBEAT_TIME…"


def test_the_status_table_names_a_failed_plugin_under_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The row's '!' says that a plugin failed; the line under the table, as under
    ``ctl nodes``, says which and where to read why, fitted to the terminal."""
    cluster = LocalCluster(tmp_path, 2)
    nodes = known_nodes(cluster)
    second = list(nodes.values())[1]
    second.status.plugins.add(name="brittle", version="0.3", state="failed", error="no spool")

    async def leader_says(_: LocalCluster) -> dict[str, management_pb2.Node]:
        return nodes

    monkeypatch.setattr(cluster_command, "_nodes", leader_says)
    monkeypatch.setenv("ROLESERVE_COMMAND", "./dev roleserve")
    monkeypatch.setenv("COLUMNS", "80")
    shown = anyio.run(cluster_command._status_table, cluster).splitlines()
    assert max(map(len, shown)) <= 80, "\n".join(shown)
    at = next(index for index, line in enumerate(shown) if line.startswith(second.id))
    assert " ".join(line.strip() for line in shown[at:]) == (
        f"{second.id}: ! plugin brittle failed: it started without; "
        f"`./dev roleserve ctl plugins {second.id}` says why"
    )
