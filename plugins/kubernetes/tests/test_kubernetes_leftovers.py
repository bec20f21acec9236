"""The leftovers' removal finds this node's shims by their ``-address`` alone, and kills
them with everything under them; another node's are left alone. No root needed: the
shims are stand-ins (a shell whose argv[0] says containerd-shim-runc-v2)."""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from roleserve_core.testing import poll_until
from roleserve_kubernetes.leftovers import descendants, kill_shims, shim_pids

pytestmark = pytest.mark.anyio

LOG = logging.getLogger("test.kubernetes.leftovers")


@pytest.fixture
def shims(tmp_path: Path) -> Iterator[dict[str, subprocess.Popen[bytes]]]:
    """Two stand-in shims, of the sockets ``ours`` and ``theirs``, each with a child."""
    started = {}
    for name in ("ours", "theirs"):
        socket = tmp_path / name / "containerd.sock"
        started[name] = subprocess.Popen(
            [
                "bash",
                "-c",
                f'exec -a containerd-shim-runc-v2 sh -c "sleep 600; :" - -namespace k8s.io '
                f"-id x -address {socket}",
            ]
        )
    try:
        yield started
    finally:
        for process in started.values():
            process.kill()
            process.wait()


async def test_only_the_shims_of_this_socket_die_with_their_children(
    tmp_path: Path, shims: dict[str, subprocess.Popen[bytes]]
) -> None:
    ours, theirs = tmp_path / "ours" / "containerd.sock", tmp_path / "theirs" / "containerd.sock"
    pid = shims["ours"].pid

    async def children() -> list[int]:
        return descendants([pid])

    children_of_ours = await poll_until("the stand-in shim's child", children)
    assert shim_pids(ours) == [pid]

    assert await kill_shims(ours, LOG) == 1 + len(children_of_ours)
    assert shims["ours"].wait(timeout=10) == -9
    assert shim_pids(ours) == []
    assert shim_pids(theirs) == [shims["theirs"].pid]
    assert shims["theirs"].poll() is None
    assert await kill_shims(tmp_path / "nobody.sock", LOG) == 0
