"""``./dev kube-binaries`` without building Kubernetes: its cache key and path, and its
command (``python -m roleserve_kubernetes.kubebuild``) against a fake ``go`` on PATH that
writes a small file where ``-o`` says, or fails as a real ``go build`` would."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from roleserve_kubernetes import kubebuild
from roleserve_kubernetes.kubebuild import BINARIES, MODULE_DIR, cache_root, pinned

FAKE_GO = """#!/bin/sh
# A stand-in for go build: record the call, then write the -o file or fail.
echo "$*" >> "$FAKE_GO_CALLS"
[ -n "$FAKE_GO_FAIL" ] && { echo "go: some/pkg: $FAKE_GO_FAIL" >&2; exit 1; }
while [ "$1" != "-o" ]; do shift; done
mkdir -p "$(dirname "$2")"
printf '#!/bin/sh\\necho fake\\n' > "$2" && chmod +x "$2"
"""


def copy_module(tmp_path: Path, go_sum_extra: str = "") -> Path:
    """A copy of the pinning module, its go.sum with ``go_sum_extra`` appended."""
    module = tmp_path / "kube"
    shutil.copytree(MODULE_DIR, module)
    with open(module / "go.sum", "a") as go_sum:
        go_sum.write(go_sum_extra)
    return module


def test_pin_is_the_required_kubernetes_version() -> None:
    """The version comes from go.mod's requirement, and the stamp makes --version say it."""
    pin = pinned()
    required = [
        line.split()[1]
        for line in (MODULE_DIR / "go.mod").read_text().splitlines()
        if line.strip().startswith("k8s.io/kubernetes ")
    ]
    assert [pin.version] == required
    assert f"k8s.io/component-base/version.gitVersion={pin.version}" in pin.ldflags()
    assert f"gitMinor={pin.minor}" in pin.ldflags()
    assert pin.key.startswith(f"{pin.version}-")
    assert len(pin.digest) == 12


def test_every_staging_module_is_replaced_by_its_published_version() -> None:
    """k8s.io/kubernetes requires its staging modules at v0.0.0; ours must replace each."""
    go_mod = (MODULE_DIR / "go.mod").read_text()
    staging = f"v0.{pinned().minor}."
    replaced = [line.split() for line in go_mod.splitlines() if "=> k8s.io/" in line]
    assert len(replaced) > 20
    for source, _arrow, target, version in replaced:
        assert source == target
        assert version.startswith(staging), (source, version)


def test_key_changes_with_the_pin(tmp_path: Path) -> None:
    """Another go.sum (a new pin) is another cache directory: old binaries are not reused."""
    same = pinned(copy_module(tmp_path / "a"))
    other = pinned(copy_module(tmp_path / "b", "example.com/m v1.0.0 h1:x=\n"))
    assert same == pinned()
    assert other.version == same.version
    assert other.key != same.key


def test_cache_is_outside_the_repository() -> None:
    """XDG_CACHE_HOME wins, else ~/.cache; the key names the version."""
    assert cache_root({"XDG_CACHE_HOME": "/x", "HOME": "/h"}) == Path("/x/roleserve/kube")
    assert cache_root({"HOME": "/h"}) == Path("/h/.cache/roleserve/kube")
    assert kubebuild.pinned_bin_dir({"HOME": "/h"}) == Path(
        f"/h/.cache/roleserve/kube/{pinned().key}/bin"
    )


def run_build(tmp_path: Path, path: str, **extra: str) -> subprocess.CompletedProcess[str]:
    """``python -m roleserve_kubernetes.kubebuild`` with PATH ``path``, caching in tmp_path."""
    environ = {
        "PATH": path,
        "HOME": str(tmp_path / "home"),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "FAKE_GO_CALLS": str(tmp_path / "calls"),
        "FAKE_GO_FAIL": "",
        **extra,
    }
    return subprocess.run(
        [sys.executable, "-m", "roleserve_kubernetes.kubebuild"],
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def fake_go(tmp_path: Path) -> str:
    """A PATH whose ``go`` is the fake (the system's tools after it)."""
    bin_dir = tmp_path / "fakebin"
    bin_dir.mkdir()
    (bin_dir / "go").write_text(FAKE_GO)
    (bin_dir / "go").chmod(0o755)
    return f"{bin_dir}:/usr/bin:/bin"


def test_no_go_is_one_line(tmp_path: Path) -> None:
    """Without go on PATH: one line saying to install Go, exit 1, nothing left in the cache."""
    result = run_build(tmp_path, str(tmp_path / "empty"))
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1, result.stderr
    assert "go is not on PATH: install Go 1.26" in result.stderr
    assert "./dev kube-binaries" in result.stderr
    assert not (tmp_path / "cache" / "roleserve" / "kube" / pinned().key).exists()


def test_failed_build_is_one_line_and_keeps_nothing(tmp_path: Path, fake_go: str) -> None:
    """A failing go build: one line naming the binary, go's last line and the log; no
    half-built directory where the binaries would be found."""
    result = run_build(tmp_path, fake_go, FAKE_GO_FAIL="cannot find module")
    assert result.returncode == 1
    last = result.stderr.splitlines()[-1]
    assert f"building kube-apiserver (1/{len(BINARIES)}) failed (go exit 1)" in last
    assert "go: some/pkg: cannot find module" in last
    assert f"{pinned().key}.log" in last
    assert "./dev kube-binaries again" in last
    assert "Traceback" not in result.stderr
    root = tmp_path / "cache" / "roleserve" / "kube"
    assert sorted(p.name for p in root.iterdir()) == [".lock", f"{pinned().key}.log"]


def test_builds_all_six_then_reuses_them(tmp_path: Path, fake_go: str) -> None:
    """All six built, each with the pinned flags, into the keyed directory (what a killed
    build left is removed); a second run calls go no more and says where they are."""
    killed = tmp_path / "cache" / "roleserve" / "kube" / f".{pinned().key}.abc123" / "bin"
    killed.mkdir(parents=True)
    (killed / "kube-apiserver").write_text("half")
    first = run_build(tmp_path, fake_go)
    assert first.returncode == 0, first.stderr
    bin_dir = tmp_path / "cache" / "roleserve" / "kube" / pinned().key / "bin"
    assert sorted(os.listdir(bin_dir)) == sorted(BINARIES)
    assert not killed.parent.exists()
    calls = (tmp_path / "calls").read_text().splitlines()
    assert [call.split()[-1] for call in calls] == [f"k8s.io/kubernetes/cmd/{b}" for b in BINARIES]
    assert all("-mod=readonly -trimpath" in call for call in calls)
    for binary in BINARIES:
        assert f"building {binary} (" in first.stderr
    second = run_build(tmp_path, fake_go)
    assert second.returncode == 0
    assert second.stderr == f"kube-binaries: Kubernetes {pinned().version} is built in {bin_dir}\n"
    assert len((tmp_path / "calls").read_text().splitlines()) == len(BINARIES)
