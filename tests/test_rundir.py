"""A node's runtime directory: short whatever the data directory, one per node, the same
at each start, the node's own (0700); made while the node runs, removed when it stops."""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from roleserve_core import NodeContext, ValueRegistry, node_runtime_dir
from roleserve_core.errors import RuntimeDirectoryError
from roleserve_core.rundir import (
    KEY_LENGTH,
    SYSTEM_RUNTIME_ROOT,
    make_runtime_dir,
    mount_points_under,
    remove_runtime_dir,
    runtime_root,
)
from roleserve_core.testing import NodeHarness, PluginHarness, SupervisorRunner

pytestmark = pytest.mark.anyio

StartNode = Callable[..., Awaitable[NodeHarness]]

DEEP = 200


def deep(base: Path, length: int = DEEP) -> Path:
    return base / ("d" * (length - len(str(base)) - 1))


@pytest.fixture
def made(tmp_path: Path) -> Iterator[Path]:
    """The node runtime directory of ``tmp_path``, removed after the test."""
    path = node_runtime_dir(tmp_path)
    try:
        yield path
    finally:
        remove_runtime_dir(path)


def test_it_is_short_whatever_the_data_directory(tmp_path: Path) -> None:
    data = deep(tmp_path)
    assert len(str(data)) == DEEP
    path = node_runtime_dir(data)
    assert path.parent == runtime_root()
    assert len(path.name) == KEY_LENGTH
    assert int(path.name, 16) >= 0  # hex digits
    # containerd's longest socket there fits its 104 bytes with room to spare.
    assert len(str(path / "kubernetes" / "containerd.sock.ttrpc")) < 70


def test_two_nodes_of_one_machine_get_two(tmp_path: Path) -> None:
    paths = {node_runtime_dir(tmp_path / f"n{i}") for i in range(50)}
    assert len(paths) == 50


def test_a_node_keeps_its_own_however_its_directory_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "node"
    data.mkdir()
    (tmp_path / "link").symlink_to(data)
    monkeypatch.chdir(tmp_path)
    expected = node_runtime_dir(data)
    assert node_runtime_dir(Path("node")) == expected
    assert node_runtime_dir(tmp_path / "link") == expected
    assert node_runtime_dir(tmp_path / "x" / ".." / "node") == expected


def test_root_uses_run_and_other_users_their_runtime_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert runtime_root() == SYSTEM_RUNTIME_ROOT == Path("/run/roleserve")
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert runtime_root() == tmp_path / "roleserve"
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    assert runtime_root() == Path("/tmp/roleserve-1000")
    monkeypatch.setenv("XDG_RUNTIME_DIR", "relative")  # not a runtime directory
    assert runtime_root() == Path("/tmp/roleserve-1000")


def test_a_plugin_s_own_is_in_its_node_s(tmp_path: Path) -> None:
    plugin = NodeContext("kubernetes", ValueRegistry().scoped("x"), tmp_path / "plugins" / "k")
    assert plugin.runtime_dir == node_runtime_dir(tmp_path) / "kubernetes"


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_it_is_made_0700_and_made_0700_again(made: Path) -> None:
    plugin = made / "kubernetes"
    assert make_runtime_dir(plugin) == plugin
    assert (mode(made), mode(plugin)) == (0o700, 0o700)
    assert mode(runtime_root()) == 0o700
    plugin.chmod(0o755)
    (plugin / "stale.sock").touch()  # a crashed program's: kept, its program replaces it
    make_runtime_dir(plugin)
    assert mode(plugin) == 0o700
    assert (plugin / "stale.sock").exists()
    remove_runtime_dir(made)
    assert not made.exists()
    assert runtime_root().is_dir()  # the machine's other nodes keep theirs


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_a_directory_of_another_user_is_refused_in_one_line(made: Path) -> None:
    make_runtime_dir(made)
    os.chown(made, 65534, 65534)
    with pytest.raises(RuntimeDirectoryError) as caught:
        make_runtime_dir(made / "kubernetes")
    assert str(caught.value) == (
        f"the runtime directory {made} is not a directory of user 0; remove it, or set "
        "XDG_RUNTIME_DIR to a directory of your own"
    )


async def test_the_node_makes_each_plugin_s_and_removes_its_own_when_it_stops(
    tmp_path: Path, node: StartNode, supervisor_runner: SupervisorRunner
) -> None:
    data = deep(tmp_path)
    runtime = PluginHarness().runtime(data)
    harness = await node(runtime)
    await harness.wait_state("root")
    assert runtime.runtime_dir == node_runtime_dir(data)
    core = runtime.context("core").runtime_dir
    assert core.parent == runtime.runtime_dir
    assert (mode(runtime.runtime_dir), mode(core)) == (0o700, 0o700)
    await supervisor_runner.stop(harness.supervisor)
    assert not runtime.runtime_dir.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="a bind mount needs root")
def test_a_mount_inside_keeps_it_whole_and_what_it_shows(made: Path, tmp_path: Path) -> None:
    """The kubelet's root directory on disk is mounted in the runtime directory: removing
    the runtime directory through that mount would remove the pods' files on disk."""
    on_disk = tmp_path / "kubelet root"  # a space: escaped in mountinfo
    on_disk.mkdir()
    (on_disk / "volume").write_text("a pod's data")
    point = make_runtime_dir(made / "kubernetes") / "kubelet"
    point.mkdir()
    subprocess.run(["mount", "--bind", str(on_disk), str(point)], check=True)
    try:
        assert mount_points_under(made) == [point]
        assert remove_runtime_dir(made) == [point]
        assert (on_disk / "volume").read_text() == "a pod's data"
        assert (point / "volume").exists()
    finally:
        subprocess.run(["umount", str(point)], check=True)
    assert remove_runtime_dir(made) == []
    assert not made.exists()
    assert (on_disk / "volume").exists()
