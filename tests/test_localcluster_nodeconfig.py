"""Each local node's roleserve.toml gets ``[plugins.hostsfile] path`` = its own hosts file,
before every start, keeping what else the file says; only when the hostsfile plugin would
accept it (no processes are started here: ``subprocess.Popen`` is recorded instead)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
import types
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

import pytest

from roleserve_core import Setting, hookimpl
from roleserve_core.cli import _cluster_commands as cluster_command
from roleserve_core.environment import DISABLE_PLUGINS_ENV
from roleserve_core.localcluster import LocalCluster
from roleserve_core.localcluster.nodeconfig import (
    CLUSTERNET_OFF,
    HOSTS_PATH,
    LOOPBACK_MESH_OFF,
    NodeConfigError,
    NodeSetting,
    setting_accepted,
    with_setting,
    without_setting,
)
from roleserve_core.plugin_loader import ENTRY_POINT_GROUP
from roleserve_core.settings import toml_literal

HOSTS = Path("/c/n1/hosts")
SOURCE = Path("/c/n1/roleserve.toml")
HEADER = f"[plugins.hostsfile]  {HOSTS_PATH.mark}\n"
ADDED = f'path = "{HOSTS}"  {HOSTS_PATH.mark}\n'
OPERATOR = """\
[node]
log_level = "debug"   # while I look

[plugins.controlplane]
lease_ttl = 3
"""


def everything(setting: NodeSetting) -> bool:
    """Every plugin ``up`` gives a node a setting of its own for is installed."""
    return True


def nothing(setting: NodeSetting) -> bool:
    return False


def hostsfile_only(setting: NodeSetting) -> bool:
    """Only the hostsfile plugin is installed: the hosts file's tests see its line alone."""
    return setting.plugin == "hostsfile"


def parsed(text: str) -> dict[str, Any]:
    return tomllib.loads(text)


# -- the text -----------------------------------------------------------------------------


def test_an_empty_file_gets_a_section_with_the_path() -> None:
    assert with_setting("", HOSTS_PATH, str(HOSTS), SOURCE) == f"{HEADER}{ADDED}"


def test_other_settings_and_comments_are_kept_line_for_line() -> None:
    merged = with_setting(OPERATOR, HOSTS_PATH, str(HOSTS), SOURCE)
    assert merged == f"{OPERATOR}\n{HEADER}{ADDED}"
    without_newline = with_setting(OPERATOR.rstrip("\n"), HOSTS_PATH, str(HOSTS), SOURCE)
    assert without_newline == merged


def test_a_hostsfile_section_without_a_path_gets_it_under_its_header() -> None:
    text = '[plugins.hostsfile]  # names\nhostname = true\nmachine_id = "m1"\n\n[node]\n'
    merged = with_setting(text, HOSTS_PATH, str(HOSTS), SOURCE)
    assert (
        merged
        == f'[plugins.hostsfile]  # names\n{ADDED}hostname = true\nmachine_id = "m1"\n\n[node]\n'
    )
    assert parsed(merged)["plugins"]["hostsfile"] == {
        "path": str(HOSTS),
        "hostname": True,
        "machine_id": "m1",
    }


def test_a_path_of_the_operators_is_kept() -> None:
    text = '[plugins.hostsfile]\npath = "/srv/hosts"\n'
    assert with_setting(text, HOSTS_PATH, str(HOSTS), SOURCE) is None
    assert (
        with_setting('plugins.hostsfile.path = "/srv/hosts"\n', HOSTS_PATH, str(HOSTS), SOURCE)
        is None
    )


def test_a_file_that_is_not_toml_is_left_for_the_node_to_refuse() -> None:
    assert with_setting("[plugins.hostsfile\n", HOSTS_PATH, str(HOSTS), SOURCE) is None
    assert with_setting("plugins = 5\n", HOSTS_PATH, str(HOSTS), SOURCE) is None


def test_a_path_that_escapes_is_written_as_toml() -> None:
    odd = Path('/c/my "cluster"\\n1/hosts')
    merged = with_setting("", HOSTS_PATH, str(odd), SOURCE)
    assert merged is not None
    assert parsed(merged)["plugins"]["hostsfile"]["path"] == str(odd)


def test_a_section_it_cannot_add_a_line_to_is_refused_with_the_line_to_add() -> None:
    for text in ("plugins.hostsfile.hostname = true\n", "[plugins]\nhostsfile = {}\n"):
        with pytest.raises(NodeConfigError) as refused:
            with_setting(text, HOSTS_PATH, str(HOSTS), SOURCE)
        assert str(refused.value) == (
            f"{SOURCE}: cannot add the node's own hosts file to its [plugins.hostsfile] "
            f'section; add the line path = "{HOSTS}" to it yourself (or any value of your '
            "choice), then run `cluster up` again"
        )


def test_the_lines_it_added_are_taken_out_again_and_nothing_else() -> None:
    for text in ("", OPERATOR, "[plugins.hostsfile]\nhostname = true\n"):
        merged = with_setting(text, HOSTS_PATH, str(HOSTS), SOURCE)
        assert merged is not None
        assert without_setting(merged, HOSTS_PATH) == text
    assert without_setting(OPERATOR, HOSTS_PATH) is None  # nothing of ours
    assert without_setting('[plugins.hostsfile]\npath = "/srv/hosts"\n', HOSTS_PATH) is None


def test_a_section_the_operator_wrote_under_its_header_keeps_the_header() -> None:
    merged = f"{OPERATOR}\n{HEADER}{ADDED}hostname = true\n"
    assert without_setting(merged, HOSTS_PATH) == f"{OPERATOR}\n{HEADER}hostname = true\n"


# -- whether the plugin would accept it ---------------------------------------------------


def fake_plugin(monkeypatch: pytest.MonkeyPatch, module: str, *settings: str) -> EntryPoint:
    """An installed plugin ``hostsfile`` (module ``module``) declaring ``settings``."""
    plugin = types.ModuleType(module)
    plugin.ROLESERVE_PLUGIN_API = 1  # type: ignore[attr-defined]

    @hookimpl
    def roleserve_settings() -> list[Setting[Any]]:
        return [Setting(name, str, "", f"The {name}.") for name in settings]

    plugin.roleserve_settings = roleserve_settings  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module, plugin)
    return EntryPoint("hostsfile", module, ENTRY_POINT_GROUP)


def test_the_path_is_accepted_by_an_installed_hostsfile_plugin_that_declares_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ROLESERVE_PLUGINS", raising=False)
    monkeypatch.delenv("ROLESERVE_DISABLE_PLUGINS", raising=False)
    declaring = fake_plugin(monkeypatch, "fake_hostsfile_path", "path", "machine_id")
    silent = fake_plugin(monkeypatch, "fake_hostsfile_none")
    other = EntryPoint("metrics", "fake_hostsfile_path", ENTRY_POINT_GROUP)
    assert setting_accepted(HOSTS_PATH, [other, declaring])
    assert not setting_accepted(HOSTS_PATH, [silent])  # a node would refuse the key
    assert not setting_accepted(HOSTS_PATH, [other])  # ... or the section of no installed plugin
    monkeypatch.setenv("ROLESERVE_DISABLE_PLUGINS", "hostsfile")
    assert not setting_accepted(HOSTS_PATH, [declaring])  # ... or warn at every start


# -- LocalCluster, before each start ------------------------------------------------------


class Recorded:
    """``subprocess.Popen``, recorded: the node "runs" with a PID no process has."""

    pid = 4_000_000

    def __init__(self, command: list[str], **options: Any) -> None:
        pass

    def poll(self) -> int | None:
        return None


@pytest.fixture
def no_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(subprocess, "Popen", Recorded)


def config_of(cluster: LocalCluster, index: int) -> str:
    return cluster.nodes[index - 1].datadir.config.read_text()


def test_a_new_clusters_nodes_get_the_config_and_their_own_hosts_file(
    tmp_path: Path, no_processes: None
) -> None:
    cluster = LocalCluster(tmp_path, 2, config=OPERATOR, accepts=hostsfile_only)
    cluster._start_enrolled()  # node 1 bootstraps
    cluster._register(cluster.nodes[1], "rs1-ticket")
    for node in cluster.nodes:
        hosts = node.directory / "hosts"
        assert config_of(cluster, node.index) == (
            f'{OPERATOR}\n{HEADER}path = "{hosts}"  {HOSTS_PATH.mark}\n'
        )
        assert cluster.hosts_file(node) == hosts


def test_a_node_of_a_cluster_from_before_gets_its_path_when_it_restarts(
    tmp_path: Path, no_processes: None
) -> None:
    said: list[str] = []
    cluster = LocalCluster(
        tmp_path, 2, config="[node]\n", accepts=hostsfile_only, progress=said.append
    )
    for node in cluster.nodes:
        node.datadir.credentials.mkdir(parents=True)  # enrolled
    cluster.nodes[0].datadir.config.write_text(OPERATOR)
    config = cluster.nodes[0].datadir.config
    config.chmod(0o600)
    cluster._start_enrolled()
    hosts = cluster.nodes[0].directory / "hosts"
    assert config_of(cluster, 1) == f'{OPERATOR}\n{HEADER}path = "{hosts}"  {HOSTS_PATH.mark}\n'
    assert config.stat().st_mode & 0o777 == 0o600
    assert f"node 1: its hosts file is {hosts} (added to {config})" in said
    # node 2 had no roleserve.toml: it gets the cluster's, and no line is said about it
    assert parsed(config_of(cluster, 2))["plugins"]["hostsfile"]["path"].endswith("n2/hosts")
    assert not any(line.startswith("node 2:") for line in said)


def test_a_path_the_operator_set_is_kept_and_shown(tmp_path: Path, no_processes: None) -> None:
    text = f'{OPERATOR}\n[plugins.hostsfile]\npath = "/srv/n1-hosts"\n'
    cluster = LocalCluster(tmp_path, 1, config=text, accepts=hostsfile_only)
    cluster._start_enrolled()
    assert config_of(cluster, 1) == text
    assert cluster.hosts_file(cluster.nodes[0]) == Path("/srv/n1-hosts")


def test_without_the_plugin_the_file_is_not_touched(tmp_path: Path, no_processes: None) -> None:
    cluster = LocalCluster(tmp_path, 1, config=OPERATOR, accepts=nothing)
    cluster._start_enrolled()
    assert config_of(cluster, 1) == OPERATOR
    assert cluster.hosts_file(cluster.nodes[0]) is None
    bare = LocalCluster(tmp_path / "bare", 1, accepts=nothing)
    bare._start_enrolled()
    assert not bare.nodes[0].datadir.config.exists()


def test_without_the_plugin_the_path_it_added_goes_again(
    tmp_path: Path, no_processes: None
) -> None:
    """A node would refuse a section of a plugin that is not installed (another checkout)."""
    said: list[str] = []
    cluster = LocalCluster(tmp_path, 1, accepts=nothing, progress=said.append)
    node = cluster.nodes[0]
    node.datadir.credentials.mkdir(parents=True)
    hosts = node.directory / "hosts"
    node.datadir.config.write_text(with_setting(OPERATOR, HOSTS_PATH, str(hosts), SOURCE) or "")
    cluster._start_enrolled()
    assert config_of(cluster, 1) == OPERATOR
    assert (
        "node 1: no hostsfile plugin takes [plugins.hostsfile] path; the one cluster up "
        f"added is taken out of {node.datadir.config}"
    ) in said


# -- where the operator finds them --------------------------------------------------------


def test_the_status_line_names_the_hosts_files(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path, 3, accepts=everything)
    assert cluster_command._hosts_files(cluster) is None  # no node names one
    for node in cluster.nodes:
        node.directory.mkdir()
        hosts = node.directory / "hosts"
        text = with_setting(
            "", HOSTS_PATH, str(Path("/srv/n3-hosts") if node.index == 3 else hosts), SOURCE
        )
        node.datadir.config.write_text(text or "")
    assert cluster_command._hosts_files(cluster) == (
        f"hosts files: {tmp_path}/n<i>/hosts, n3: /srv/n3-hosts"
    )
    assert cluster_command._node_json(cluster, 0, {})["hosts_file"] == f"{tmp_path}/n1/hosts"


def test_a_netns_clusters_nodes_get_their_own_wireguard_interface(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path, 2, netns=True, config=OPERATOR, accepts=everything)
    assert cluster.network is not None
    for node in cluster.nodes:
        cluster._write_config(node)
    names = [
        parsed(config_of(cluster, index))["plugins"]["clusternet"]["interface"] for index in (1, 2)
    ]
    assert names == [cluster.network.wireguard_interface(index) for index in (1, 2)]
    assert len(set(names)) == 2
    assert all(len(name) <= 15 for name in names)
    assert all("off" not in parsed(config_of(cluster, i))["plugins"]["clusternet"] for i in (1, 2))


def test_a_loopback_node_runs_the_mesh_off_saying_why(tmp_path: Path) -> None:
    """Its nodes share one network: a mesh would only put interfaces and the cluster
    network's route on the host itself. The worker says so in ``ctl tree`` rather than
    being absent without a word (the plugin used to be disabled)."""
    loopback = LocalCluster(tmp_path, 1, config=OPERATOR, accepts=everything)
    loopback._write_config(loopback.nodes[0])
    text = config_of(loopback, 1)
    assert parsed(text)["plugins"]["clusternet"] == {"off": LOOPBACK_MESH_OFF}
    assert f"off = {toml_literal(LOOPBACK_MESH_OFF)}  {CLUSTERNET_OFF.mark}\n" in text
    assert (
        CLUSTERNET_OFF.mark
        == "# roleserve cluster up: a loopback cluster's nodes share one network"
    )
    assert DISABLE_PLUGINS_ENV not in loopback.nodes[0]._environment()
    without = LocalCluster(tmp_path / "without", 1, config=OPERATOR, accepts=hostsfile_only)
    without._write_config(without.nodes[0])  # no clusternet plugin: nothing to switch off
    assert "clusternet" not in config_of(without, 1)


def test_a_stale_value_up_wrote_is_rewritten_and_an_operators_is_kept(tmp_path: Path) -> None:
    """A cluster made when the loopback mesh's reason ended mid-sentence: its line (up's,
    by its mark) gets today's reason at the next ``up``, every other line as it was. The
    same key without the mark is the operator's, and stays."""
    cluster = LocalCluster(tmp_path, 1, config=OPERATOR, accepts=everything)
    node = cluster.nodes[0]
    node.directory.mkdir(parents=True)
    old = "the nodes of a loopback cluster share one network namespace; … and the mesh"
    stale = f"[plugins.clusternet]\noff = {toml_literal(old)}  {CLUSTERNET_OFF.mark}\n"
    node.datadir.config.write_text(f"# mine\n{stale}")
    cluster._write_config(node)
    text = config_of(cluster, 1)
    assert f"# mine\n[plugins.clusternet]\noff = {toml_literal(LOOPBACK_MESH_OFF)}  " in text
    assert old not in text
    mine = '[plugins.clusternet]\noff = "not here, thanks"\n'
    node.datadir.config.write_text(mine)
    cluster._write_config(node)
    assert parsed(config_of(cluster, 1))["plugins"]["clusternet"] == {"off": "not here, thanks"}


def test_the_loopback_mesh_reason_is_a_whole_sentence_and_the_readme_quotes_it() -> None:
    """``ctl tree`` shows it as the worker's note: it once ended mid-sentence ("…gives each
    its own, and the mesh"). The clusternet README quotes the note as ``ctl tree`` draws it."""
    assert LOOPBACK_MESH_OFF == (
        "the nodes of a loopback cluster share one network namespace; "
        "`roleserve cluster up --netns` gives each node its own namespace and runs the mesh"
    )
    readme = (Path(__file__).parents[1] / "plugins/clusternet/README.md").read_text()
    assert f"clusternet  NEW  off: {LOOPBACK_MESH_OFF}\n" in readme


def test_the_old_name_of_what_a_loopback_node_ran_without_still_works_and_warns() -> None:
    from roleserve_core.localcluster import process

    with pytest.warns(DeprecationWarning, match=r"nodeconfig\.CLUSTERNET_OFF"):
        assert process.LOOPBACK_WITHOUT == ("clusternet",)
    with pytest.raises(AttributeError):
        process.NO_SUCH_NAME  # noqa: B018 - the lookup is the test


def test_an_empty_section_gets_the_line_under_its_header() -> None:
    for text in ("[plugins.hostsfile]\n", "[plugins.hostsfile]"):
        assert with_setting(text, HOSTS_PATH, str(HOSTS), SOURCE) == f"[plugins.hostsfile]\n{ADDED}"


def test_sections_added_after_other_tables_come_and_go_each_alone() -> None:
    """The second section goes after the first, both at the end, though ``[plugins]``
    tables stand before other tables; each goes again with its blank line."""
    text = f"{OPERATOR}\n[other]\nkept = true\n"
    hosts = with_setting(text, HOSTS_PATH, str(HOSTS), SOURCE)
    assert hosts == f"{text}\n{HEADER}{ADDED}"
    both = with_setting(hosts, CLUSTERNET_OFF, LOOPBACK_MESH_OFF, SOURCE)
    off = f"off = {toml_literal(LOOPBACK_MESH_OFF)}  {CLUSTERNET_OFF.mark}\n"
    assert both == f"{hosts}\n[plugins.clusternet]  {CLUSTERNET_OFF.mark}\n{off}"
    assert without_setting(both, HOSTS_PATH) == (
        f"{text}\n[plugins.clusternet]  {CLUSTERNET_OFF.mark}\n{off}"
    )
    assert without_setting(both, CLUSTERNET_OFF) == hosts
