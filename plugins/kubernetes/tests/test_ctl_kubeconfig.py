"""``roleserve ctl kubeconfig``: a plugin's ``ctl`` sub-command, listed without loading the
plugin, and an admin kubeconfig from a real curator that kubectl accepts."""

from __future__ import annotations

import argparse
import base64
import json
import shutil
import stat
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from roleserve_controlplane.consensus import EtcdBinary
from roleserve_controlplane.testing import ETCD_SOURCES, CuratorCluster, EtcdCluster, etcd_binary
from roleserve_core import ClusterAccess, CtlError, open_ctl_session
from roleserve_core.identity import certificate_from_pem
from roleserve_core.testing import SupervisorRunner, require_real
from roleserve_kubernetes.ctl import kubeconfig
from roleserve_kubernetes.service import curator_extension

PROBE = """
import sys
from roleserve_core.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print("loaded" if "roleserve_kubernetes" in sys.modules else "not loaded", file=sys.stderr)
"""


def _roleserve(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, check=False
    )


def test_ctl_help_lists_kubeconfig_without_loading_the_plugin() -> None:
    done = _roleserve("ctl", "--help")
    assert "kubeconfig" in done.stdout
    assert done.stderr.strip().splitlines()[-1] == "not loaded"


def test_the_sub_commands_own_help_comes_from_the_plugin() -> None:
    done = _roleserve("ctl", "kubeconfig", "--help")
    assert "--out FILE" in done.stdout
    assert "--force" in done.stdout
    assert done.stderr.strip().splitlines()[-1] == "loaded"


def test_a_missing_out_is_a_usage_error_of_the_plugins_parser() -> None:
    done = _roleserve("ctl", "kubeconfig")
    assert "the following arguments are required: --out" in done.stderr


# -- against a curator --------------------------------------------------------------


@pytest.fixture(params=ETCD_SOURCES)
def binary(request: pytest.FixtureRequest) -> EtcdBinary:
    return etcd_binary(request.param)


@pytest.fixture
async def access(
    binary: EtcdBinary, tmp_path: Path, supervisor_runner: SupervisorRunner
) -> AsyncIterator[ClusterAccess]:
    """The owner's access to a bootstrapped cluster serving ``KubernetesCertificates``."""
    etcd = EtcdCluster(binary, tmp_path / "etcd", supervisor_runner.start)
    async with CuratorCluster(etcd, extensions=[curator_extension()]) as curators:
        leader = await curators.bootstrap()
        assert curators.owner is not None
        yield ClusterAccess.of(curators.owner, [leader.endpoint])


async def _kubeconfig(access: ClusterAccess, out: Path, *, force: bool = False) -> None:
    args = argparse.Namespace(out=out, force=force, server=None)
    async with open_ctl_session(access, 10.0) as session:
        await kubeconfig(session, args)


@pytest.mark.anyio
async def test_the_admin_kubeconfig_is_accepted_by_kubectl(
    access: ClusterAccess, tmp_path: Path
) -> None:
    out = tmp_path / "admin.kubeconfig"
    await _kubeconfig(access, out)
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    config = json.loads(out.read_text())
    user = config["users"][0]["user"]
    certificate = certificate_from_pem(base64.b64decode(user["client-certificate-data"]))
    assert certificate.subject.rfc4514_string() == "CN=owner,O=system:masters"
    kubectl = shutil.which("kubectl")
    require_real("kubectl", kubectl, "apt-get install kubernetes-client")
    assert kubectl is not None
    viewed = await anyio.run_process(
        [kubectl, "config", "view", "--kubeconfig", str(out), "--raw", "-o", "json"]
    )
    seen = json.loads(viewed.stdout)
    assert seen["current-context"] == "roleserve"
    host = access.endpoints[0].rsplit(":", 1)[0]
    assert seen["clusters"][0]["cluster"]["server"] == f"https://{host}:6443"
    assert seen["users"][0]["user"]["client-key-data"] == user["client-key-data"]


@pytest.mark.anyio
async def test_an_existing_file_is_kept_unless_forced(
    access: ClusterAccess, tmp_path: Path
) -> None:
    out = tmp_path / "config"
    out.write_text("other clusters' credentials\n")
    with pytest.raises(CtlError, match=f"{out} exists; pass --force to overwrite it"):
        await _kubeconfig(access, out)
    assert out.read_text() == "other clusters' credentials\n"
    await _kubeconfig(access, out, force=True)
    assert json.loads(out.read_text())["kind"] == "Config"
