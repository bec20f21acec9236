"""A host name of its own for a program (``uts``): the runner's program, wrapped, sees its
own host name under its own pid, and the machine's stays."""

from __future__ import annotations

import logging
import os
import socket
from pathlib import Path

import pytest

from roleserve_core import ProgramExitedError, ProgramSpec, start_program
from roleserve_kubernetes.uts import own_hostname, with_hostname

NODE_ID = "node-" + "ab" * 16
LOG = logging.getLogger(__name__)

pytestmark = pytest.mark.anyio


def test_own_hostname_is_the_node_id_only_where_the_node_may_give_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setenv("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
    assert own_hostname(NODE_ID) == NODE_ID
    assert own_hostname(None) is None  # not enrolled: no ID to take
    monkeypatch.setenv("PATH", "")  # no unshare, no hostname
    assert own_hostname(NODE_ID) is None
    monkeypatch.setenv("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
    monkeypatch.setattr(os, "geteuid", lambda: 1000)  # no CAP_SYS_ADMIN for a namespace
    assert own_hostname(NODE_ID) is None


@pytest.mark.skipif(os.geteuid() != 0, reason="a UTS namespace of its own needs root")
async def test_two_programs_on_one_machine_run_under_their_own_host_names(
    tmp_path: Path,
) -> None:
    """Through the runner (setpriv): each program sees its host name, under the pid the
    runner records (every step execs the next), and the machine keeps its own."""
    machine = socket.gethostname()
    seen = {}
    for hostname in (NODE_ID, "node-" + "cd" * 16):
        out = tmp_path / hostname
        script = f'echo "$$ $(cat /proc/sys/kernel/hostname)" > {out}'
        spec = ProgramSpec(
            name=f"uts-{hostname}",
            executable="/bin/sh",
            arguments=["-c", script],
            state_dir=tmp_path,
        )
        with pytest.raises(ProgramExitedError) as exited:
            async with start_program(LOG, with_hostname(spec, hostname)) as program:
                await program.wait()
        assert exited.value.returncode == 0, exited.value
        pid, seen[hostname] = out.read_text().split()
        assert int(pid) == program.pid
    assert seen == {hostname: hostname for hostname in seen}
    assert socket.gethostname() == machine
