"""``roleserve cluster up|status|down``, the README's run command, as an operator runs it:
real processes, a one-node cluster on a loopback address of the test's own."""

from __future__ import annotations

import ipaddress
import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from roleserve_core.localcluster import FIRST_ADDRESS

TIMEOUT = 120.0
"""Seconds a command may take: bootstrapping a one-node cluster takes a few."""
COMMAND = [sys.executable, "-m", "roleserve_core", "cluster"]


def cluster(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*COMMAND, *args], capture_output=True, text=True, timeout=TIMEOUT, check=False
    )


def status(directory: Path) -> list[dict[str, Any]]:
    shown = cluster("status", "--json", "--dir", str(directory))
    assert shown.returncode == 0, shown.stderr
    nodes: list[dict[str, Any]] = json.loads(shown.stdout)
    return nodes


def test_up_detached_status_and_down(
    components: None, first_address: ipaddress.IPv4Address, tmp_path: Path
) -> None:
    directory, first = tmp_path / "cluster", first_address
    up = cluster("up", "--nodes", "1", "--detach", "--dir", str(directory),
                 "--first-address", str(first))  # fmt: skip
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert "the cluster is up: 1 node\n" in up.stdout
        owner = directory / "owner"
        assert f"operate it with: export ROLESERVE_CREDENTIALS={owner};" in up.stdout
        assert (directory / "first-address").read_text() == f"{first}\n"
        [node] = status(directory)
        assert node["address"] == str(first)
        assert node["cluster"]["state"] == "UP"
        assert node["cluster"]["health"] in ("HEALTHY", "UNKNOWN")
        assert node["cluster"]["leader"] is True
        moved = cluster("up", "--nodes", "1", "--detach", "--dir", str(directory),
                        "--first-address", str(FIRST_ADDRESS))  # fmt: skip
        assert moved.returncode == 1
        assert f"runs from {first}, not {FIRST_ADDRESS}" in moved.stderr
        [still] = status(directory)  # the refusal stopped nothing
        assert (still["pid"], still["cluster"]["state"]) == (node["pid"], "UP")
    finally:
        down = cluster("down", "--dir", str(directory))
    assert down.returncode == 0, down.stderr
    assert "every node stopped" in down.stdout
    [node] = status(directory)
    assert (node["pid"], node["cluster"]) == (None, None)


def test_up_in_the_foreground_stops_every_node_on_ctrl_c(
    components: None, first_address: ipaddress.IPv4Address, tmp_path: Path
) -> None:
    directory, first = tmp_path / "cluster", first_address
    argv = [*COMMAND, "up", "--nodes", "1", "--dir", str(directory), "--first-address", str(first)]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None
    try:
        # Without a terminal, the status table is printed once, when the cluster is up.
        for line in process.stdout:
            if line.startswith("n1 ") and " UP " in line:
                break
        else:
            pytest.fail(f"cluster up ended ({process.wait()}): {process.stderr.read()}")
        pid = status(directory)[0]["pid"]
        assert pid is not None
        process.send_signal(signal.SIGINT)
        rest, errors = process.communicate(timeout=TIMEOUT)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, errors
    assert rest.splitlines()[-1].endswith("every node stopped")
    assert not Path(f"/proc/{pid}").exists()
