"""A local cluster whose node's curator port another process holds: `cluster up` shows the
node's one line at once (real node process), instead of waiting with nothing to say while
the curator logged a traceback at every try."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import anyio
import pytest

from roleserve_core.localcluster import LocalCluster, LocalClusterError
from roleserve_core.ports import CURATOR_PORT
from roleserve_core.testing import random_loopback

pytestmark = pytest.mark.anyio


@pytest.mark.timeout(90)
async def test_up_with_the_curators_port_held_fails_at_once_naming_it(tmp_path: Path) -> None:
    first = random_loopback()
    cluster = LocalCluster(tmp_path, 1, first_address=first)
    node = cluster.nodes[0]
    with socket.socket() as holder:
        holder.bind((str(first), CURATOR_PORT))
        holder.listen()
        try:
            with anyio.fail_after(45), pytest.raises(LocalClusterError) as failed:
                await cluster.up()
        finally:
            await cluster.down()
    message = str(failed.value)
    assert message.startswith("node 1 cannot start: root.role.controlplane.curator: ")
    assert f"cannot listen on {first}:{CURATOR_PORT}: held by pid {os.getpid()} (" in message, (
        message
    )
    assert message.endswith(
        f"(its log: {node.log_file}); once that is done, run `cluster up` again"
    )
    assert "\n" not in message
    assert "Traceback" not in node.log_file.read_text()
