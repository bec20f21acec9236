"""What stops containerd, and how it says so: one line naming the file or path and what to
do; final when a restart cannot help, retried after the backoff when it might; the rest of
the node (the pod network, the worker) keeps running. No root needed: containerd, ctr and
busybox are stand-ins or missing."""

from __future__ import annotations

import logging
import stat
import tomllib
from pathlib import Path

import pytest

from roleserve_core import State, node_runtime_dir
from roleserve_core.testing import FakeClock, NodeHarness, StartNode

from .kubernetes_real import (
    CONTAINERD_DN,
    DN,
    POD_NETWORK_DN,
    deep_directory,
    start_worker,
)

pytestmark = pytest.mark.anyio

EXITS_AT_ONCE = """#!/bin/sh
echo 'time="2026-01-01T00:00:00Z" level=info msg="starting containerd"' >&2
echo 'containerd: failed to load TOML from config.toml: invalid plugin key' >&2
exit 1
"""


def stand_in(path: Path, text: str = "#!/bin/sh\nexit 0\n") -> str:
    """An executable script at ``path``; its path."""
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def settings_without_real_binaries(tmp_path: Path, **settings: str) -> dict[str, str]:
    """Stand-ins for ctr and busybox, so the tests run where neither is installed."""
    busybox = tmp_path / "busybox"
    busybox.write_bytes(b"\x7fELF not really")
    return {"ctr": stand_in(tmp_path / "ctr"), "busybox": str(busybox), **settings}


async def containerd_dead(harness: NodeHarness, failures: int = 1) -> tuple[bool, str]:
    """(final, error summary) once containerd has failed ``failures`` times: DEAD if
    final, else waiting for its backoff; the rest of the worker still running."""
    status = await harness.wait_status(CONTAINERD_DN, lambda s: s.failures == failures)
    assert status.last_error is not None
    if status.final:
        assert status.state is State.DEAD
    else:
        assert status.restart_in is not None  # the backoff
    assert harness.status(DN).state is State.HEALTHY
    await harness.wait_state(POD_NETWORK_DN)
    return status.final, status.last_error.summary()


async def test_a_missing_containerd_is_final_naming_the_path_and_the_setting(
    node: StartNode, tmp_path: Path
) -> None:
    missing = tmp_path / "no" / "containerd"
    settings = settings_without_real_binaries(tmp_path, containerd=str(missing))
    worker = await start_worker(node, tmp_path / "node", None, **settings)
    final, error = await containerd_dead(worker.harness)
    assert final
    assert error.startswith(
        "roleserve_core.ProgramNotFoundError: cannot start containerd: "
        f"no executable containerd; tried {missing} (configured, not found); "
    )
    assert "[plugins.kubernetes]" in error


async def test_a_containerd_that_exits_at_once_is_dead_with_its_reason_and_restarts(
    node: StartNode, tmp_path: Path, fake_clock: FakeClock
) -> None:
    containerd = stand_in(tmp_path / "containerd", EXITS_AT_ONCE)
    settings = settings_without_real_binaries(tmp_path, containerd=containerd)
    worker = await start_worker(node, tmp_path / "node", None, **settings)
    final, error = await containerd_dead(worker.harness)
    assert not final
    assert error == (
        "roleserve_core.ProgramExitedError: containerd exited with status 1: "
        "containerd: failed to load TOML from config.toml: invalid plugin key"
    )
    await fake_clock.advance_to_next()
    await containerd_dead(worker.harness, failures=2)
    logged = [
        entry.message
        for entry in worker.harness.runtime.logtree.entries(CONTAINERD_DN)
        if entry.level >= logging.ERROR
    ]
    assert "containerd: failed to load TOML from config.toml: invalid plugin key" in logged


async def test_a_deep_data_directory_does_not_reach_containerd_s_socket(
    node: StartNode, tmp_path: Path
) -> None:
    """Its sockets are in the node's runtime directory: containerd is started (here a
    stand-in, which exits), where a socket in the data directory was refused."""
    deep = deep_directory(tmp_path)
    containerd = stand_in(tmp_path / "containerd", EXITS_AT_ONCE)
    settings = settings_without_real_binaries(tmp_path, containerd=containerd)
    worker = await start_worker(node, deep, None, **settings)
    final, error = await containerd_dead(worker.harness)
    assert not final
    assert error.startswith("roleserve_core.ProgramExitedError: containerd")
    socket = node_runtime_dir(deep) / "kubernetes" / "containerd.sock"
    assert worker.layout.socket == socket
    config = tomllib.loads(worker.layout.config.read_text())
    assert config["grpc"]["address"] == str(socket)


async def test_a_missing_busybox_is_final_naming_the_file(node: StartNode, tmp_path: Path) -> None:
    settings = settings_without_real_binaries(
        tmp_path, containerd=stand_in(tmp_path / "c"), busybox=str(tmp_path / "nobusybox")
    )
    worker = await start_worker(node, tmp_path / "node", None, **settings)
    final, error = await containerd_dead(worker.harness)
    assert final
    assert error.startswith(
        "roleserve_kubernetes.errors.SandboxImageError: cannot build the sandbox image: "
        f"{tmp_path / 'nobusybox'}: No such file or directory; apt-get install busybox-static"
    )
