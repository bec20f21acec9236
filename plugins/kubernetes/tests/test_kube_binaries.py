"""The kube binaries ``./dev kube-binaries`` built: each is in the pinned version's cache
and reports the pinned version. Skips when they are not built (fails under
``ROLESERVE_REQUIRE_REAL=1``, as CI runs, after building them)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from roleserve_kubernetes.kubebuild import BINARIES, pinned
from roleserve_kubernetes.testing import require_kube_binaries

VERSION_COMMANDS = {binary: ["--version"] for binary in BINARIES} | {
    "kubectl": ["version", "--client"]
}
"""How each says its version: "Kubernetes vX.Y.Z", kubectl "Client Version: vX.Y.Z"."""


@pytest.fixture(scope="module")
def bin_dir() -> Path:
    """The pinned version's binaries, or a skip naming the command that builds them."""
    return require_kube_binaries()


@pytest.mark.parametrize("binary", BINARIES)
def test_reports_the_pinned_version(bin_dir: Path, binary: str) -> None:
    """The binary runs and prints the pinned version, as stamped at build time."""
    result = subprocess.run(
        [str(bin_dir / binary), *VERSION_COMMANDS[binary]],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    expected = "Client Version: " if binary == "kubectl" else "Kubernetes "
    assert f"{expected}{pinned().version}" in result.stdout.splitlines()
