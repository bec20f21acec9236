"""The writer on real files: what it keeps, what it never does, and how it fails."""

from __future__ import annotations

import ipaddress
import os
import stat
from pathlib import Path

import pytest

from roleserve_hostsfile.block import BEGIN, render_block
from roleserve_hostsfile.errors import FileUpdateError
from roleserve_hostsfile.files import replace_file, update_hosts_file, write_if_changed

HOSTS = b"127.0.0.1 localhost\n::1 localhost ip6-localhost\n"


def block(**nodes: str) -> bytes:
    return render_block({node_id: ipaddress.ip_address(a) for node_id, a in nodes.items()})


@pytest.fixture
def hosts(tmp_path: Path) -> Path:
    path = tmp_path / "hosts"
    path.write_bytes(HOSTS)
    return path


def leftovers(directory: Path) -> list[str]:
    return sorted(entry.name for entry in directory.iterdir() if entry.name != "hosts")


def test_an_outside_edit_between_two_updates_survives(hosts: Path) -> None:
    assert update_hosts_file(hosts, block(node_a="10.0.0.1"))
    edited = hosts.read_bytes() + b"10.9.9.9 added-by-hand\n"
    hosts.write_bytes(edited)
    assert update_hosts_file(hosts, block(node_a="10.0.0.2"))
    assert hosts.read_bytes() == HOSTS + block(node_a="10.0.0.2") + b"10.9.9.9 added-by-hand\n"


def test_a_missing_file_is_created_0644(tmp_path: Path) -> None:
    path = tmp_path / "hosts"
    assert update_hosts_file(path, block(node_a="fd00::1"))
    assert path.read_bytes() == block(node_a="fd00::1")
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert leftovers(tmp_path) == []


def test_nothing_is_written_when_nothing_changed(hosts: Path) -> None:
    assert update_hosts_file(hosts, block(node_a="10.0.0.1"))
    before = hosts.stat()
    assert not update_hosts_file(hosts, block(node_a="10.0.0.1"))
    after = hosts.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def test_mode_and_owner_are_kept(hosts: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("giving a file to another user needs root")
    os.chmod(hosts, 0o640)
    os.chown(hosts, 4242, 4343)
    assert update_hosts_file(hosts, block(node_a="10.0.0.1"))
    written = hosts.stat()
    assert (stat.S_IMODE(written.st_mode), written.st_uid, written.st_gid) == (0o640, 4242, 4343)


def test_a_symbolic_link_is_followed_and_kept(hosts: Path, tmp_path: Path) -> None:
    link = tmp_path / "link"
    link.symlink_to(hosts)
    assert update_hosts_file(link, block(node_a="10.0.0.1"))
    assert link.is_symlink()
    assert hosts.read_bytes() == HOSTS + block(node_a="10.0.0.1")


@pytest.mark.parametrize("failing", ["replace", "fsync"])
def test_a_failed_write_leaves_the_old_file_and_no_temporary_file(
    hosts: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    def fail(*args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, failing, fail)
    with pytest.raises(FileUpdateError) as failed:
        update_hosts_file(hosts, block(node_a="10.0.0.1"))
    assert str(failed.value) == f"cannot write the hosts file {hosts}: No space left on device"
    assert hosts.read_bytes() == HOSTS
    assert leftovers(tmp_path) == []


def test_a_directory_is_refused_in_one_line_naming_it(tmp_path: Path) -> None:
    with pytest.raises(FileUpdateError) as failed:
        update_hosts_file(tmp_path, block())
    assert str(failed.value) == f"cannot read the hosts file {tmp_path}: Is a directory"


def test_a_path_under_a_file_is_refused_in_one_line_naming_it(hosts: Path) -> None:
    path = hosts / "hosts"
    with pytest.raises(FileUpdateError) as failed:
        update_hosts_file(path, block())
    assert str(failed.value) == f"cannot read the hosts file {path}: Not a directory"


def test_a_missing_directory_is_refused_in_one_line_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "nowhere" / "hosts"
    with pytest.raises(FileUpdateError) as failed:
        update_hosts_file(path, block())
    assert str(failed.value) == f"cannot write the hosts file {path}: No such file or directory"


def test_a_block_without_its_end_is_refused_and_the_file_kept(hosts: Path) -> None:
    broken = HOSTS + BEGIN + b"\n10.9.9.9 the-operators\n"
    hosts.write_bytes(broken)
    with pytest.raises(FileUpdateError, match=rf"^cannot update the hosts file {hosts}: its line"):
        update_hosts_file(hosts, block())
    assert hosts.read_bytes() == broken


def test_write_if_changed_sets_the_mode_it_is_given(tmp_path: Path) -> None:
    path = tmp_path / "machine-id"
    path.write_bytes(b"node-1\n")
    os.chmod(path, 0o600)
    assert write_if_changed(path, b"node-1\n", "machine ID file", mode=0o644)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    before = path.stat()
    assert not write_if_changed(path, b"node-1\n", "machine ID file", mode=0o644)
    assert path.stat().st_ino == before.st_ino


def test_replace_file_names_what_it_writes(tmp_path: Path) -> None:
    with pytest.raises(FileUpdateError, match=r"^cannot write the machine ID file /proc/"):
        replace_file(Path("/proc/roleserve-test"), b"x", "machine ID file")
