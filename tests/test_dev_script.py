"""``./dev``: the refusals it makes before doing anything (the rest runs in every CI run)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

DEV = Path(__file__).resolve().parents[1] / "dev"


def test_alone_refuses_a_directory_outside_the_workspace_in_one_line(tmp_path: Path) -> None:
    """A plugin of one's own is tested in its own directory; uv's own message ("not in the
    workspace") said nothing of that."""
    done = subprocess.run(
        [str(DEV), "alone", str(tmp_path)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert done.stderr.startswith(
        "dev: alone runs a plugin of this workspace (plugins/NAME, examples/NAME), "
        f"not {tmp_path}; test a plugin of your own in its own directory"
    )
    assert "docs/plugin-guide.md" in done.stderr


def test_uv_runs_in_the_callers_directory(tmp_path: Path) -> None:
    """``./dev uv`` takes paths as the caller gave them, not relative to the checkout."""
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "elsewhere"\nversion = "1"\n')
    done = subprocess.run(
        [str(DEV), "uv", "version", "--short"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert (done.returncode, done.stdout.strip()) == (0, "1"), done.stderr


def test_roleserve_runs_in_the_callers_directory(tmp_path: Path) -> None:
    """``./dev roleserve plugin new`` writes where it was called from, not into the
    checkout, where ``./dev`` itself works."""
    in_checkout = DEV.parent / "roleserve-devcwd"
    assert not in_checkout.exists()
    try:
        done = subprocess.run(
            [str(DEV), "roleserve", "plugin", "new", "devcwd"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert (tmp_path / "roleserve-devcwd" / "pyproject.toml").is_file()
        assert not in_checkout.exists()
    finally:
        shutil.rmtree(in_checkout, ignore_errors=True)  # written there before the fix


def test_kube_binaries_without_go_is_one_line(tmp_path: Path) -> None:
    """``./dev kube-binaries`` on a PATH without go: one line saying to install Go and run
    it again, exit 1 (the build itself: plugins/kubernetes/tests/test_kube_build.py)."""
    uv = os.environ.get("UV") or shutil.which("uv")
    assert uv, "the tests run under uv, which names itself in UV"
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "uv").symlink_to(uv)
    uv_cache = subprocess.run([uv, "cache", "dir"], capture_output=True, text=True, check=True)
    environ = {
        "PATH": f"{tools}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "UV_CACHE_DIR": uv_cache.stdout.strip(),
    }
    done = subprocess.run(
        [str(DEV), "kube-binaries"], env=environ, capture_output=True, text=True, check=False
    )
    assert done.returncode == 1
    assert done.stderr == (
        "kube-binaries: go is not on PATH: install Go 1.26 or later (https://go.dev/dl/, or"
        " /usr/local/go/bin on PATH) and run ./dev kube-binaries again\n"
    )
