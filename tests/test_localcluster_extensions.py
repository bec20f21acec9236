"""What plugins add to ``cluster up`` (``cluster_extension``): ``up`` says the cluster is up only
once every extension's ``settle`` returned, and fails with its line when it raises; the
status table gets each extension's column and the lines under it its hint; a broken entry
point is left out with one line. No processes: the leader's answers are stand-ins."""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
from collections.abc import AsyncIterator, Mapping
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest

from roleserve_core import ClusterView
from roleserve_core.cli import _cluster_commands as cluster_command
from roleserve_core.cluster_extension import GROUP, load_extensions
from roleserve_core.errors import RoleserveError
from roleserve_core.localcluster import LocalCluster
from roleserve_core.proto import management_pb2
from tests.test_cluster_screen import known_nodes


class Extension:
    """A plugin's extension: records what it was given, answers what the test says."""

    column = "THING"

    def __init__(
        self,
        said: list[str],
        *,
        cells: Mapping[str, str] | None = None,
        fails: str | None = None,
        slow: bool = False,
    ) -> None:
        self.said = said
        self._cells = cells
        self.fails = fails
        self.slow = slow
        self.views: list[ClusterView] = []

    async def settle(self, view: ClusterView) -> None:
        self.views.append(view)
        view.progress("thing: waiting for the thing")
        if self.fails:
            raise RoleserveError(self.fails)

    async def cells(self, view: ClusterView) -> Mapping[str, str] | None:
        self.views.append(view)
        if self.slow:
            await anyio.sleep_forever()
        return self._cells

    def hint(self, view: ClusterView) -> str | None:
        return "reach the thing with: thingctl"


def settled_cluster(tmp_path: Path, extension: Extension) -> LocalCluster:
    """A 3-node cluster whose every step through the leader is a stand-in: enrolled,
    roles given, UP and HEALTHY at once."""
    cluster = LocalCluster(tmp_path, 3, progress=extension.said.append, extensions=[extension])
    nodes = known_nodes(cluster)

    @contextlib.asynccontextmanager
    async def management(patience: float | None = None) -> AsyncIterator[Any]:
        yield None

    async def members(_: Any) -> list[Any]:
        return list(cluster.nodes)

    async def nothing(*_: Any, **__: Any) -> None:
        return None

    async def by_id(_: Any) -> dict[str, management_pb2.Node]:
        return nodes

    cluster.management = management  # type: ignore[method-assign]
    cluster._members = members  # type: ignore[method-assign,assignment]
    cluster._assign_roles = nothing  # type: ignore[method-assign]
    cluster._until = nothing  # type: ignore[method-assign]
    cluster._save_curators = nothing  # type: ignore[method-assign]
    cluster.nodes_by_id = by_id  # type: ignore[method-assign,assignment]
    return cluster


def test_up_says_the_cluster_is_up_only_after_the_extensions_settled(tmp_path: Path) -> None:
    said: list[str] = []
    extension = Extension(said)
    cluster = settled_cluster(tmp_path, extension)
    anyio.run(cluster._enrol_and_settle, [])
    assert said[-2:] == ["thing: waiting for the thing", "the cluster is up: 3 nodes"]
    [view] = extension.views
    assert view.directory == cluster.directory
    assert view.owner == cluster.directory / "owner"
    assert [member.index for member in view.nodes] == [1, 2, 3]
    assert [member.node_id for member in view.nodes] == [cluster.node_id(n) for n in cluster.nodes]
    assert view.nodes[0].roles == ("consensus_member", "kubernetes_controller", "kubernetes_worker")
    assert view.nodes[1].config == cluster.nodes[1].datadir.config


def test_an_extension_that_fails_fails_up_and_the_cluster_is_never_said_up(
    tmp_path: Path,
) -> None:
    said: list[str] = []
    cluster = settled_cluster(tmp_path, Extension(said, fails="the thing never came"))
    with pytest.raises(RoleserveError, match=r"^the thing never came$"):
        anyio.run(cluster._enrol_and_settle, [])
    assert not any("the cluster is up" in line for line in said), said


def table(
    cluster: LocalCluster,
    monkeypatch: pytest.MonkeyPatch,
    nodes: dict[str, management_pb2.Node] | None = None,
) -> list[str]:
    nodes = nodes if nodes is not None else known_nodes(cluster)

    async def leader_says(_: LocalCluster) -> dict[str, management_pb2.Node]:
        return nodes

    monkeypatch.setattr(cluster_command, "_nodes", leader_says)
    monkeypatch.delenv("COLUMNS", raising=False)
    return anyio.run(cluster_command._status_table, cluster).splitlines()


def test_the_status_table_has_a_column_per_extension(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each node's cell by its ID; a node the extension leaves out shows '-'."""
    extension = Extension([])
    cluster = LocalCluster(tmp_path, 3, extensions=[extension])
    nodes = known_nodes(cluster)  # writes the keys: the IDs exist from here on
    ids = [cluster.node_id(node) for node in cluster.nodes]
    extension._cells = {ids[0] or "": "Ready, api ready", ids[1] or "": "NotReady"}
    shown = table(cluster, monkeypatch, nodes)
    assert shown[0].split()[-2:] == ["HEARTBEAT", "THING"]
    assert shown[1].endswith("  Ready, api ready")
    assert shown[2].endswith("  NotReady")
    assert shown[3].endswith("  -")
    assert extension.views[-1].nodes[2].node_id == ids[2]


def test_an_extension_without_cells_has_no_column(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = LocalCluster(tmp_path, 2, extensions=[Extension([], cells=None)])
    shown = table(cluster, monkeypatch)
    assert shown[0].split()[-1] == "HEARTBEAT"


@pytest.mark.timeout(20)
def test_an_extension_that_does_not_answer_in_time_shows_a_question_mark(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cluster_command, "EXTENSION_PATIENCE", 0.05)
    cluster = LocalCluster(tmp_path, 2, extensions=[Extension([], slow=True)])
    shown = table(cluster, monkeypatch)  # the test's timeout, were the wait not bounded
    assert shown[0].split()[-1] == "THING"
    assert [line.split()[-1] for line in shown[1:3]] == ["?", "?"]


def test_the_extensions_hint_goes_under_the_operators(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ROLESERVE_COMMAND", "./dev roleserve")
    cluster = LocalCluster(tmp_path, 1, extensions=[Extension([])])
    assert anyio.run(cluster_command._hints, cluster, tmp_path).splitlines() == [
        f"operate it with: export ROLESERVE_CREDENTIALS={tmp_path / 'owner'}; "
        "./dev roleserve ctl nodes",
        "reach the thing with: thingctl",
    ]


def test_an_entry_point_that_fails_to_load_is_left_out_with_one_line() -> None:
    said: list[str] = []
    entries = [
        importlib.metadata.EntryPoint("broken", "no_such_module_here:EXTENSION", GROUP),
        importlib.metadata.EntryPoint("fine", "tests.test_localcluster_extensions:FINE", GROUP),
    ]
    assert load_extensions(said.append, entries) == [FINE]
    assert said == [
        "plugin broken: its cluster extension (no_such_module_here:EXTENSION) failed to load: "
        "No module named 'no_such_module_here'"
    ]


FINE = Extension([])


def test_status_json_gives_each_extensions_cell_by_its_header(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    extension = Extension([])
    cluster = LocalCluster(tmp_path, 2, extensions=[extension])
    nodes = known_nodes(cluster)
    first = cluster.node_id(cluster.nodes[0]) or ""
    extension._cells = {first: "Ready, api ready"}

    async def leader_says(_: LocalCluster) -> dict[str, management_pb2.Node]:
        return nodes

    monkeypatch.setattr(cluster_command, "_nodes", leader_says)
    anyio.run(partial(cluster_command._print_status, cluster, tmp_path, json=True))
    shown = json.loads(capsys.readouterr().out)
    assert [node["columns"] for node in shown] == [{"THING": "Ready, api ready"}, {"THING": None}]
