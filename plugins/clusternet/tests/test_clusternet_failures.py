"""What stops the worker, and how it says so: one line, final when a restart cannot help."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from contextlib import AsyncExitStack
from pathlib import Path

import anyio
import anyio.to_thread
import pytest

from roleserve_clusternet import hooks, interface
from roleserve_clusternet.errors import InterfaceError, InterfaceInUseError, UapiError
from roleserve_clusternet.interface import InterfaceSpec, open_interface
from roleserve_clusternet.privatekey import KEY_FILE
from roleserve_clusternet.testing import NetnsPair, netns_pair
from roleserve_clusternet.worker_clusternet import WAITING_FOR_ID
from roleserve_core import NODE_ID, FinalError, ProgramSpec, State
from roleserve_core.testing import (
    NodeHarness,
    StartNode,
    record_leftover,
    require_real,
    start_plugin_node,
)

__all__ = ["netns_pair"]  # the fixture, imported to be found

pytestmark = pytest.mark.anyio

DN = "root.role.clusternet"
LOG = logging.getLogger("test.clusternet")


async def start(
    node: StartNode, tmp_path: Path, key_file: str | None = None, **settings: object
) -> NodeHarness:
    """The plugin on a node with no ID; the ID is set once it waits for it (with
    ``key_file`` written in between, if given)."""
    harness = await start_plugin_node(
        node, tmp_path / "node", {"clusternet": hooks}, config={"clusternet": settings}
    )
    await harness.wait_status(DN, lambda s: s.note == WAITING_FOR_ID)
    path = tmp_path / "node" / "plugins" / "clusternet" / KEY_FILE
    assert not path.exists()  # nothing made before the node has an ID
    if key_file is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(key_file)
    harness.set(NODE_ID, "node-test")
    return harness


async def dead(harness: NodeHarness) -> tuple[str, str]:
    """The worker's final error, and its one logged line."""
    status = await harness.wait_status(DN, lambda s: s.failures == 1)
    assert (status.state, status.final) == (State.DEAD, True)
    assert status.last_error is not None
    [line] = [e for e in harness.runtime.logtree.entries(DN) if e.level >= logging.WARNING]
    assert line.exc_text is None  # one line, no traceback
    return status.last_error.summary(), line.message


async def test_a_corrupt_key_file_is_final_and_named(node: StartNode, tmp_path: Path) -> None:
    key_file = tmp_path / "node" / "plugins" / "clusternet" / KEY_FILE
    harness = await start(node, tmp_path, key_file="garbage\n")
    error, line = await dead(harness)
    assert error == (
        f"roleserve_clusternet.errors.KeyFileError: the WireGuard key file {key_file} is "
        "corrupt (not base64); remove it to make a new key (the node's public key changes)"
    )
    assert str(key_file) in line
    assert key_file.read_text() == "garbage\n"


async def test_without_tun_the_worker_is_final_saying_why(
    node: StartNode, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(interface, "TUN", tmp_path / "tun")
    error, _ = await dead(await start(node, tmp_path, interface="rscn-notun"))
    assert error == (
        "roleserve_clusternet.errors.InterfaceError: cannot create the WireGuard interface "
        f"rscn-notun: {tmp_path / 'tun'}: no such device; clusternet needs root "
        "(CAP_NET_ADMIN) and /dev/net/tun"
    )


async def test_without_wireguard_go_the_worker_is_final_naming_the_setting(
    node: StartNode, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tun = tmp_path / "tun"
    tun.write_bytes(b"")
    monkeypatch.setattr(interface, "TUN", tun)
    missing = tmp_path / "wireguard-go"
    error, _ = await dead(await start(node, tmp_path, wireguard_go=str(missing)))
    assert error.startswith(
        "roleserve_core.ProgramNotFoundError: cannot start wireguard-go: "
        f"no executable wireguard-go; tried {missing} (configured, not found); "
    )
    assert "[plugins.clusternet]" in error


async def test_an_interface_another_process_holds_is_left_alone(
    netns_pair: NetnsPair, tmp_path: Path
) -> None:
    """As another node on the same machine would: never deleted from under it."""
    a = netns_pair.a
    spec = InterfaceSpec(a.interface, 1420, netns_pair.mesh, tmp_path / "one", netns=a.netns)
    async with AsyncExitStack() as stack:
        device, _ = await stack.enter_async_context(open_interface(LOG, spec))
        second = InterfaceSpec(a.interface, 1420, netns_pair.mesh, tmp_path / "two", netns=a.netns)
        with pytest.raises(InterfaceInUseError, match=f"the interface {a.interface} exists"):
            async with open_interface(LOG, second):
                pass
        await device.read()  # the first one still answers


NOT_ROOT = """
import anyio
from roleserve_clusternet import link
from roleserve_clusternet.errors import InterfaceError
try:
    anyio.run(link.create_kernel_link, "rscn-noperm")
except InterfaceError as exc:
    print(type(exc).__name__, exc)
"""


def test_without_cap_net_admin_creating_the_interface_is_final_saying_why() -> None:
    """As a user without CAP_NET_ADMIN (nobody, through setpriv): the kernel's EPERM."""
    setpriv = shutil.which("setpriv")
    require_real("root and setpriv", os.geteuid() == 0 and setpriv, "apt-get install util-linux")
    assert setpriv is not None
    done = subprocess.run(
        [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all",
         sys.executable, "-c", NOT_ROOT],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert (done.returncode, done.stdout.strip()) == (
        0,
        "InterfaceError cannot create the WireGuard interface rscn-noperm: Operation not "
        "permitted; clusternet needs root (CAP_NET_ADMIN) and /dev/net/tun",
    ), done.stderr
    assert issubclass(InterfaceError, FinalError)


async def test_a_wireguard_go_left_by_a_killed_run_is_stopped_and_replaced(
    netns_pair: NetnsPair, tmp_path: Path
) -> None:
    """Its interface exists, but the record in the data directory proves it ours: the
    runner stops it, and the interface is made again."""
    a = netns_pair.a
    state_dir = tmp_path / "state"
    spec = InterfaceSpec(a.interface, 1420, netns_pair.mesh, state_dir, netns=a.netns)
    program = interface.program_spec(spec)
    leftover = start_by_hand(program)
    try:
        device = interface.UapiInterface(a.interface, a.netns)
        with anyio.fail_after(10):
            while True:  # polling a program started by hand, not the code under test
                try:
                    await device.read()
                    break
                except UapiError:
                    await anyio.sleep(0.02)
        state_dir.mkdir()
        record_leftover(
            leftover.pid, [str(program.executable), *program.arguments], program.record_path
        )
        async with open_interface(LOG, spec) as (device, running):
            assert running.pid != leftover.pid
            await device.read()
        assert await anyio.to_thread.run_sync(leftover.wait) is not None  # stopped
    finally:
        leftover.kill()
        await anyio.to_thread.run_sync(leftover.wait)


def start_by_hand(program: ProgramSpec) -> subprocess.Popen[bytes]:
    """``program`` as a killed node would leave it: running, in a session of its own."""
    return subprocess.Popen(
        [program.executable, *program.arguments],
        env={**os.environ, **program.env},
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
