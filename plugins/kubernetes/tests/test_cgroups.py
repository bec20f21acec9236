"""The kubelet's cgroup root: found hierarchies, made in each, removed deepest first."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from roleserve_kubernetes.cgroups import (
    cgroup_hierarchies,
    cgroup_root,
    create_cgroup_root,
    remove_cgroup_root,
)

pytestmark = pytest.mark.anyio

HYBRID = """\
24 30 0:21 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
25 24 0:22 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:8 - tmpfs tmpfs ro,mode=755
26 25 0:23 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw
27 25 0:24 / /sys/fs/cgroup/systemd rw,nosuid shared:10 - cgroup cgroup rw,xattr,name=systemd
28 25 0:25 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid shared:11 - cgroup cgroup rw,cpu,cpuacct
29 25 0:26 / /sys/fs/cgroup/memory rw,nosuid shared:12 - cgroup cgroup rw,memory
30 25 0:26 / /sys/fs/cgroup/memory rw,nosuid shared:12 - cgroup cgroup rw,memory
31 25 0:27 / /mnt/odd\\040place rw shared:13 - cgroup cgroup rw,pids
"""
UNIFIED = "26 25 0:23 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n"


def test_every_cgroup_hierarchy_is_found_once_v1_and_v2(tmp_path: Path) -> None:
    hybrid, unified = tmp_path / "hybrid", tmp_path / "unified"
    hybrid.write_text(HYBRID)
    unified.write_text(UNIFIED)
    assert cgroup_hierarchies(hybrid) == [
        Path("/sys/fs/cgroup/unified"),
        Path("/sys/fs/cgroup/systemd"),
        Path("/sys/fs/cgroup/cpu,cpuacct"),
        Path("/sys/fs/cgroup/memory"),
        Path("/mnt/odd place"),
    ]
    assert cgroup_hierarchies(unified) == [Path("/sys/fs/cgroup")]
    assert cgroup_hierarchies(tmp_path / "absent") == []


def test_one_root_per_node() -> None:
    assert cgroup_root("node-a") != cgroup_root("node-b")
    assert cgroup_root("node-a") == cgroup_root("node-a")
    assert cgroup_root("node-a").startswith("/roleserve-")


async def test_made_in_each_hierarchy_and_removed_deepest_first(tmp_path: Path) -> None:
    hierarchies = [tmp_path / "cpu", tmp_path / "cpuset"]
    for hierarchy in hierarchies:
        hierarchy.mkdir()
    (tmp_path / "cpuset" / "cpuset.mems").write_text("0\n")
    made = create_cgroup_root("/roleserve-x", hierarchies)
    assert made == [tmp_path / "cpu" / "roleserve-x", tmp_path / "cpuset" / "roleserve-x"]
    assert (made[1] / "cpuset.mems").read_text() == "0\n"
    assert create_cgroup_root("/roleserve-x", hierarchies) == made  # kept when there
    (made[1] / "cpuset.mems").unlink()  # a cgroup's files go with it
    for directory in made:
        (directory / "kubepods" / "besteffort" / "pod1").mkdir(parents=True)
    log = logging.getLogger("test")
    assert await remove_cgroup_root(log, "/roleserve-x", hierarchies)
    assert not any(directory.exists() for directory in made)
    assert all(hierarchy.is_dir() for hierarchy in hierarchies)
