"""``roleserve ctl`` run by a test, as an operator runs it: for the tests that start real
nodes (a local cluster) and operate them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

__all__ = ["CTL_TIMEOUT", "run_ctl"]

CTL_TIMEOUT = 60.0
"""Seconds one command may take: long enough to find a leader through an election."""


def run_ctl(
    credentials: Path, *args: str, check: bool = False, timeout: float = CTL_TIMEOUT
) -> subprocess.CompletedProcess[str]:
    """``roleserve ctl --credentials CREDENTIALS ARGS`` in a process of its own, its output
    captured as text; whatever it exits with, unless ``check``.

    Run as ``python -m roleserve_core`` with this interpreter: the command the hints it
    prints name when ``$ROLESERVE_COMMAND`` is unset, and the roleserve under test.

    :param credentials: an access directory, or a local cluster's directory (its owner's).
    :param check: a command that fails fails the test, with what it said on stderr.
    :raises subprocess.TimeoutExpired: after ``timeout`` seconds.
    """
    command = [sys.executable, "-m", "roleserve_core", "ctl", "--credentials", str(credentials)]
    done = subprocess.run(
        [*command, *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and done.returncode != 0:
        raise AssertionError(f"ctl {' '.join(args)} exited {done.returncode}: {done.stderr}")
    return done
