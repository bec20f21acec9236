"""The system's resolver reads what the writer wrote, and a read-only file system is
refused: each in a mount namespace of its own, so the machine's files stay untouched."""

from __future__ import annotations

import ipaddress
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from roleserve_core.testing import require_real
from roleserve_hostsfile.block import render_block
from roleserve_hostsfile.files import update_hosts_file

Unshared = Callable[..., "subprocess.CompletedProcess[str]"]

HOSTS = b"127.0.0.1 localhost\n::1 localhost ip6-localhost\n"
V4 = "node-5080aa0c3d7f4e2a8b6c0d9e1f2a3b4c"
V6 = "node-fd96c52c734c5277f7049629fcd9dd39"


@pytest.fixture
def unshared() -> Unshared:
    """``unshared(command, *args)`` runs ``sh -c command args...`` in a mount namespace of
    its own, where it may bind-mount over ``/etc/hosts`` without touching the machine's.

    Skips the test where ``unshare --mount`` is missing or refused (not root, no user
    namespaces); under ``ROLESERVE_REQUIRE_REAL=1`` fails it instead.
    """
    unshare = shutil.which("unshare")
    refused = "no unshare on PATH"
    if unshare is not None:
        probe = subprocess.run(
            [unshare, "--mount", "true"], capture_output=True, text=True, check=False
        )
        refused = probe.stderr.strip() or "refused" if probe.returncode else ""
    require_real(
        "a private mount namespace (unshare --mount)",
        not refused,
        f"util-linux's unshare, run as root; here: {refused}",
    )
    assert unshare is not None

    def run(command: str, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [unshare, "--mount", "--propagation", "private", "sh", "-c", command, *args],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        )

    return run


@pytest.fixture
def hosts(tmp_path: Path) -> Path:
    path = tmp_path / "hosts"
    path.write_bytes(HOSTS)
    return path


def test_getent_resolves_node_ids_to_their_addresses(hosts: Path, unshared: Unshared) -> None:
    addresses = {V4: ipaddress.ip_address("10.81.0.7"), V6: ipaddress.ip_address("fd00:81::7")}
    assert update_hosts_file(hosts, render_block(addresses))
    if shutil.which("getent") is None:
        require_real("getent", None, "glibc's getent (libc-bin)")
    done = unshared(
        f'mount --bind "$0" /etc/hosts && getent hosts {V4} && getent hosts {V6}', hosts
    )
    answers = [line.split() for line in done.stdout.splitlines()]
    assert answers == [["10.81.0.7", V4], ["fd00:81::7", V6]]


def test_a_read_only_file_system_is_refused_and_the_file_kept(
    hosts: Path, unshared: Unshared
) -> None:
    """A read-only bind mount of the file's directory over itself."""
    script = (
        "import sys; from pathlib import Path\n"
        "from roleserve_hostsfile.errors import FileUpdateError\n"
        "from roleserve_hostsfile.files import update_hosts_file\n"
        "try:\n"
        "    update_hosts_file(Path(sys.argv[1]), sys.argv[2].encode())\n"
        "except FileUpdateError as exc:\n"
        "    print(exc)\n"
    )
    directory = hosts.parent
    done = unshared(
        'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && "$0" -c "$2" "$3" "$4"',
        sys.executable,
        str(directory),
        script,
        str(hosts),
        render_block({}).decode(),
    )
    assert done.stdout == f"cannot write the hosts file {hosts}: Read-only file system\n"
    assert hosts.read_bytes() == HOSTS
