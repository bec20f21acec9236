"""``roleserve ctl prometheus-config``, run through the core's ``main()`` (the command comes
through the ``roleserve.ctl`` entry point) against the test kit's fake cluster for ctl
(``ctl_cluster``: ``Management`` and ``CuratorLocal`` on a random loopback address, in a
thread of its own; ``run_ctl_main`` runs a command with the owner's credentials,
``ctl_access_dir``).
"""

from __future__ import annotations

import datetime
import json
import re
import shutil
import subprocess
from pathlib import Path

import grpc
import pytest

from roleserve_core import CURATOR_PORT, ClusterAccess, common_pb2
from roleserve_core.identity import UserCredentials, certificate_scope
from roleserve_core.testing import FakeCtlCluster, RunMain, require_real
from roleserve_metrics.ctl import default_name


def promtool_check(config: Path) -> None:
    """``promtool check config`` accepts ``config`` (Debian's prometheus package)."""
    promtool = shutil.which("promtool")
    require_real("promtool", promtool, "apt-get install prometheus")
    assert promtool is not None
    checked = subprocess.run(
        [promtool, "check", "config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def directory_of(*members: str) -> common_pb2.ClusterDirectory:
    directory = common_pb2.ClusterDirectory()
    for index, address in enumerate(members):
        directory.nodes.add(id=f"node-{index}", addresses=[address])
    return directory


def test_prometheus_config_writes_credentials_and_a_config_promtool_accepts(
    ctl_cluster: FakeCtlCluster, run_ctl_main: RunMain, run_roleserve_main: RunMain, tmp_path: Path
) -> None:
    ctl_cluster.directory = directory_of(ctl_cluster.address, "fd00::2")
    out = tmp_path / "prometheus"
    result = run_ctl_main("prometheus-config", "--out", str(out))
    assert result.code == 0, result.err

    [request] = ctl_cluster.received("IssueCredentials")
    assert request.scope == "metrics"
    assert re.fullmatch(r"prometheus-\d{8}-[0-9a-f]{6}", request.name)
    credentials = UserCredentials.load(out)  # key, certificate and CA belong together
    assert credentials.identity == request.name
    assert certificate_scope(credentials.certificate) == "metrics"
    assert credentials.ca_certificate == ctl_cluster.issuer.certificate
    assert ClusterAccess.load(out).endpoints == (f"{ctl_cluster.address}:{CURATOR_PORT}",)
    assert (out / "key.pem").stat().st_mode & 0o777 == 0o600

    config = out / "prometheus.yml"
    promtool_check(config)
    text = config.read_text()
    jobs = ("core", "node", "etcd", "containerd")
    for exporter in jobs:
        assert f'- job_name: "roleserve-{exporter}"' in text
        assert f'metrics_path: "/metrics/{exporter}"' in text
    assert text.count(f'url: "https://{ctl_cluster.address}:7840/discovery"') == len(jobs)
    assert text.count('url: "https://[fd00::2]:7840/discovery"') == len(jobs)
    assert text.count('server_name: "any-node.roleserve.invalid"') == 3 * len(jobs)
    assert text.count(f'cert_file: "{out.resolve()}/cert.pem"') == 3 * len(jobs)
    assert text.count('source_labels: ["roleserve_role_consensus_member"]') == 1
    assert text.count('source_labels: ["roleserve_role_kubernetes_worker"]') == 1
    # Prometheus's default, 1m, leaves rate(...[1m]) empty; each job keeps it when merged.
    assert "global:\n  scrape_interval: 15s\n  evaluation_interval: 15s\n" in text
    assert text.count("    scrape_interval: 15s\n") == len(jobs)

    serial = f"{credentials.certificate.serial_number:x}"
    assert result.out.splitlines() == [
        f"issued metrics credentials {request.name!r} (serial {serial}, expires "
        f"{credentials.certificate.not_valid_after_utc:%Y-%m-%d}) and wrote {config}: jobs "
        "roleserve-core, roleserve-node, roleserve-etcd, roleserve-containerd, targets from "
        "/discovery on 2 consensus members",
        f"check it with: promtool check config {config}",
    ]

    # the directory is an access directory too: whoami names the metrics credentials
    whoami = run_roleserve_main("ctl", "--credentials", str(out), "whoami", "--json")
    assert whoami.code == 0, whoami.err
    assert json.loads(whoami.out)["scope"] == "metrics"


def test_prometheus_config_name_install_dir_and_force(
    ctl_cluster: FakeCtlCluster, run_ctl_main: RunMain, tmp_path: Path
) -> None:
    ctl_cluster.directory = directory_of(ctl_cluster.address)
    out = tmp_path / "prometheus"
    first = run_ctl_main("prometheus-config", "--out", str(out), "--name", "scraper-1")
    assert first.code == 0, first.err

    again = run_ctl_main("prometheus-config", "--out", str(out), "--name", "scraper-2")
    assert again.code == 2
    assert again.err == (
        f"roleserve ctl: error: {out} exists and is not an empty directory; "
        "give a new one to --out\n"
    )

    elsewhere = "/etc/prometheus/roleserve"
    forced = run_ctl_main(
        "prometheus-config", "--out", str(out), "--name", "scraper-2", "--force",
        "--install-dir", elsewhere, "--scrape-interval", "1m30s",
    )  # fmt: skip
    assert forced.code == 0, forced.err
    assert [r.name for r in ctl_cluster.received("IssueCredentials")] == [
        "scraper-1",
        "scraper-2",
    ]
    assert UserCredentials.load(out).identity == "scraper-2"
    assert forced.out.splitlines()[-1] == (
        "the credentials 'scraper-1' it replaced stay valid until revoked: "
        "roleserve ctl credentials revoke scraper-1"
    )
    text = (out / "prometheus.yml").read_text()
    assert f'key_file: "{elsewhere}/key.pem"' in text
    assert str(out) not in text
    assert "global:\n  scrape_interval: 1m30s\n  evaluation_interval: 1m30s\n" in text


@pytest.mark.parametrize("interval", ["0s", "15", "1.5s", "s", "5m1h"])
def test_prometheus_config_refuses_what_is_no_prometheus_duration(
    run_ctl_main: RunMain, tmp_path: Path, interval: str
) -> None:
    out = tmp_path / "prometheus"
    result = run_ctl_main("prometheus-config", "--out", str(out), "--scrape-interval", interval)
    assert result.code == 2
    assert result.err.splitlines()[-1] == (
        "roleserve ctl prometheus-config: error: argument --scrape-interval: "
        f"{interval!r} is not a Prometheus duration longer than 0, such as 15s, 1m or 500ms"
    )
    assert not out.exists()


def test_prometheus_config_force_never_writes_over_an_access_directory(
    ctl_cluster: FakeCtlCluster, ctl_access_dir: Path, run_ctl_main: RunMain
) -> None:
    ctl_cluster.directory = directory_of(ctl_cluster.address)
    before = (ctl_access_dir / "key.pem").read_bytes()
    result = run_ctl_main("prometheus-config", "--out", str(ctl_access_dir), "--force")
    assert result.code == 2
    assert result.err == (
        f"roleserve ctl: error: {ctl_access_dir} holds no prometheus.yml of an earlier run; "
        "--force replaces only those: give a new or empty directory to --out\n"
    )
    assert ctl_cluster.received("IssueCredentials") == []
    assert (ctl_access_dir / "key.pem").read_bytes() == before


def test_prometheus_config_without_members_or_refused_says_why(
    ctl_cluster: FakeCtlCluster, run_ctl_main: RunMain, tmp_path: Path
) -> None:
    out = tmp_path / "prometheus"
    result = run_ctl_main("prometheus-config", "--out", str(out))
    assert (result.code, result.err) == (
        1,
        "roleserve ctl: error: the cluster names no consensus member with an address to "
        "discover from\n",
    )
    ctl_cluster.directory = directory_of(ctl_cluster.address)
    ctl_cluster.refusals["IssueCredentials"] = (
        grpc.StatusCode.PERMISSION_DENIED,
        "metrics credentials cannot IssueCredentials (needs MANAGE_CREDENTIALS)",
    )
    result = run_ctl_main("prometheus-config", "--out", str(out), "--name", "p")
    assert result.code == 1
    assert result.err == (
        "roleserve ctl: error: issuing credentials 'p': metrics credentials cannot "
        "IssueCredentials (needs MANAGE_CREDENTIALS) (PERMISSION_DENIED)\n"
    )
    assert not out.exists()


def test_the_default_name() -> None:
    name = default_name(datetime.date(2026, 12, 3))
    assert re.fullmatch(r"prometheus-20261203-[0-9a-f]{6}", name)
    assert default_name() != default_name()
