"""The worker's plain functions: containerd's configuration, the CNI configuration, the
pod prefix, the socket path check, the sandbox image, containerd's log lines, leftover
mounts, the exporter it contributes."""

from __future__ import annotations

import hashlib
import io
import ipaddress
import json
import logging
import re
import tarfile
import tomllib
from pathlib import Path
from typing import Any

import pytest

from roleserve_core import NETWORK, ROLES, ConfigError, KubernetesWorker, NetworkStatus, NodeRoles
from roleserve_core.testing import PluginHarness
from roleserve_kubernetes import hooks
from roleserve_kubernetes.cni import bridge_name, cni_conflist, write_cni_config
from roleserve_kubernetes.containerd import parse_containerd_log
from roleserve_kubernetes.containerd_config import (
    DISABLED_PLUGINS,
    SNAPSHOTTERS,
    UNUSED_PLUGINS,
    ContainerdConfig,
    containerd_toml,
)
from roleserve_kubernetes.errors import PodNetworkError, SandboxImageError, SocketPathError
from roleserve_kubernetes.image import (
    BUSYBOX_IMAGE,
    SANDBOX_COMMAND,
    SANDBOX_IMAGE,
    build_sandbox_image,
    layer_tar,
    oci_archive,
)
from roleserve_kubernetes.layout import (
    CONTAINERD_SOCKET_PATH_LIMIT,
    SOCKET_PATH_LIMIT,
    WorkerLayout,
    check_socket_path,
)
from roleserve_kubernetes.leftovers import mounts_under
from roleserve_kubernetes.podnetwork import pod_prefix
from roleserve_kubernetes.settings import WorkerSettings

RUN = "/run/roleserve/0123456789ab/kubernetes"
LAYOUT = WorkerLayout(Path("/var/lib/roleserve/plugins/kubernetes"), Path(RUN))
CRI = "io.containerd.grpc.v1.cri"


def test_containerd_config_keeps_everything_under_the_data_directory_but_sockets() -> None:
    text = containerd_toml(
        ContainerdConfig(LAYOUT, SANDBOX_IMAGE, "/usr/lib/cni", "native", "127.0.0.11:7846")
    )
    config = tomllib.loads(text)
    base = "/var/lib/roleserve/plugins/kubernetes"
    assert (config["version"], config["root"], config["state"]) == (
        2,
        f"{base}/containerd/root",
        f"{base}/containerd/state",
    )
    assert config["grpc"]["address"] == f"{RUN}/containerd.sock"
    assert config["metrics"]["address"] == "127.0.0.11:7846"
    assert config["plugins"]["io.containerd.internal.v1.opt"]["path"].startswith(base)
    cri = config["plugins"][CRI]
    assert cri["sandbox_image"] == SANDBOX_IMAGE
    assert (cri["netns_mounts_under_state_dir"], cri["restrict_oom_score_adj"]) == (True, True)
    assert cri["cni"] == {
        "bin_dir": "/usr/lib/cni",
        "conf_dir": f"{base}/cni/net.d",
        "max_conf_num": 1,
    }
    assert cri["containerd"]["snapshotter"] == "native"
    runc = cri["containerd"]["runtimes"]["runc"]
    assert runc["options"]["Root"] == f"{base}/containerd/state/runc"
    no_metrics = tomllib.loads(containerd_toml(ContainerdConfig(LAYOUT, "i", "/cni")))
    assert no_metrics["metrics"]["address"] == ""


@pytest.mark.parametrize(
    ("snapshotter", "other"), [("overlayfs", "native"), ("native", "overlayfs")]
)
def test_containerd_disables_what_the_node_never_uses(snapshotter: str, other: str) -> None:
    config = ContainerdConfig(LAYOUT, SANDBOX_IMAGE, "/cni", snapshotter)
    disabled = tomllib.loads(containerd_toml(config))["disabled_plugins"]
    assert disabled == [
        *DISABLED_PLUGINS,
        "io.containerd.internal.v1.restart",
        f"io.containerd.snapshotter.v1.{other}",
    ]
    assert UNUSED_PLUGINS == ("io.containerd.internal.v1.restart",)
    # The snapshotter in use, and the v1 runtime containerd 1.6's tasks service needs, stay.
    assert f"io.containerd.snapshotter.v1.{snapshotter}" not in disabled
    assert "io.containerd.runtime.v1.linux" not in disabled


def test_the_snapshotters_are_the_settings_choices() -> None:
    setting = next(each for each in WorkerSettings.declared() if each.name == "snapshotter")
    assert setting.choices == SNAPSHOTTERS


def test_a_path_with_quotes_and_backslashes_stays_one_toml_string() -> None:
    odd = WorkerLayout(Path("/data"), Path('/run/"odd"\\dir'))
    config = tomllib.loads(containerd_toml(ContainerdConfig(odd, "i", "/cni")))
    assert config["grpc"]["address"] == '/run/"odd"\\dir/containerd.sock'


def test_cni_config_is_a_bridge_with_the_pod_prefix(tmp_path: Path) -> None:
    prefix = ipaddress.ip_network("10.192.3.128/25")
    network = json.loads(cni_conflist(prefix, "rsp0123456789", tmp_path / "ipam"))
    assert (network["cniVersion"], network["name"]) == ("1.0.0", "roleserve")
    [bridge] = network["plugins"]
    assert (bridge["type"], bridge["bridge"], bridge["isGateway"], bridge["ipMasq"]) == (
        "bridge",
        "rsp0123456789",
        True,
        False,
    )
    assert bridge["ipam"] == {
        "type": "host-local",
        "ranges": [[{"subnet": "10.192.3.128/25"}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": str(tmp_path / "ipam"),
    }
    v6 = json.loads(cni_conflist(ipaddress.ip_network("fd00::80/121"), "b", tmp_path))
    assert v6["plugins"][0]["ipam"]["routes"] == [{"dst": "::/0"}]


def test_the_cni_config_is_rewritten_only_when_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "net.d" / "10-roleserve.conflist"
    assert write_cni_config(path, "one")
    assert not write_cni_config(path, "one")
    assert write_cni_config(path, "two")
    assert path.read_text() == "two"
    assert sorted(p.name for p in path.parent.iterdir()) == ["10-roleserve.conflist"]


def test_bridge_names_fit_ifnamsiz_and_differ_per_node() -> None:
    names = {bridge_name(f"node-{n:032x}") for n in range(100)}
    assert len(names) == 100
    assert all(len(name) <= 15 and name.startswith("rsp") for name in names)
    assert bridge_name("node-a") == bridge_name("node-a")


@pytest.mark.parametrize(
    ("prefix", "pods"),
    [
        ("10.192.3.0/24", "10.192.3.128/25"),
        ("10.192.0.0/20", "10.192.8.0/21"),
        ("10.192.0.8/29", "10.192.0.12/30"),
        ("fd00:1::/64", "fd00:1::8000:0:0:0/65"),
    ],
)
def test_pods_get_the_upper_half_of_the_node_prefix(prefix: str, pods: str) -> None:
    assert pod_prefix(prefix) == ipaddress.ip_network(pods)
    mesh_address = next(ipaddress.ip_network(prefix).hosts())  # clusternet's
    assert mesh_address not in pod_prefix(prefix)


@pytest.mark.parametrize(
    ("prefix", "message"),
    [
        ("10.192.0.0/30", "this node's cluster_prefix 10.192.0.0/30 is too small for pods"),
        ("fd00::/126", "this node's cluster_prefix fd00::/126 is too small for pods"),
        ("nonsense", "this node's cluster_prefix 'nonsense' is not a network"),
    ],
)
def test_a_prefix_that_cannot_hold_pods_is_named(prefix: str, message: str) -> None:
    with pytest.raises(PodNetworkError, match="^" + re.escape(message)):
        pod_prefix(prefix)


def test_a_socket_path_too_long_for_containerd_is_refused_naming_it_and_the_setting() -> None:
    """containerd's limit (104 bytes, its ``.ttrpc`` twin's path), not Linux's 107."""
    fits = Path("/" + "a" * (104 - len(".ttrpc") - 1))
    check_socket_path(fits)
    too_long = Path(str(fits) + "b")
    with pytest.raises(SocketPathError) as caught:
        check_socket_path(too_long)
    assert str(caught.value) == (
        f"containerd's socket {too_long}.ttrpc is 105 bytes, more than containerd takes "
        "(104); set XDG_RUNTIME_DIR to a shorter directory (the node's sockets go under it)"
    )
    assert "\n" not in str(caught.value)


def test_the_api_of_0_1_0_still_works() -> None:
    """The plugin API promise: a caller of 0.1.0's layout and error keeps working, warned
    of the new arguments; ``SOCKET_PATH_LIMIT`` keeps its value and meaning (Linux's)."""
    with pytest.warns(DeprecationWarning, match="pass runtime_dir="):
        layout = WorkerLayout(Path("/data/kubernetes"))
    assert layout.socket == Path("/data/kubernetes/containerd.sock")  # where it was
    assert layout == WorkerLayout(Path("/data/kubernetes"), Path("/data/kubernetes"))
    with pytest.warns(DeprecationWarning, match=r"pass program and setting too"):
        error = SocketPathError(Path("/deep/containerd.sock"), 107)
    assert str(error) == (
        "containerd's socket /deep/containerd.sock.ttrpc is 27 bytes, more than a unix "
        "socket takes (107); give the node a shorter --data-dir"
    )
    assert error.path == Path("/deep/containerd.sock")
    assert (SOCKET_PATH_LIMIT, CONTAINERD_SOCKET_PATH_LIMIT) == (107, 104)


def members(data: bytes) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return {member.name: member for member in tar.getmembers()}


def test_the_layer_holds_busybox_and_its_applets_with_no_times_or_owners() -> None:
    layer = layer_tar(b"BUSYBOX", ["sh", "sleep", "busybox", "../evil", ""])
    found = members(layer)
    assert sorted(found) == ["bin", "bin/busybox", "bin/sh", "bin/sleep", "tmp"]
    assert (found["bin/sh"].issym(), found["bin/sh"].linkname) == (True, "busybox")
    assert found["bin/busybox"].mode == 0o755
    assert {(m.mtime, m.uid, m.gid) for m in found.values()} == {(0, 0, 0)}
    assert layer == layer_tar(b"BUSYBOX", ["sleep", "sh"])  # reproducible


def test_the_oci_archive_is_one_image_whose_digests_match_its_blobs() -> None:
    layer = layer_tar(b"BUSYBOX", ["sh"])
    archive = oci_archive(layer, "roleserve.local/x:tag", ["/bin/sh"], arch="amd64")
    with tarfile.open(fileobj=io.BytesIO(archive.data)) as tar:

        def read(name: str) -> bytes:
            member = tar.extractfile(name)
            assert member is not None
            return member.read()

        index = json.loads(read("index.json"))
        [entry] = index["manifests"]
        assert entry["annotations"]["io.containerd.image.name"] == "roleserve.local/x:tag"
        assert entry["platform"] == {"architecture": "amd64", "os": "linux"}
        assert entry["digest"] == archive.manifest_digest
        for name in tar.getnames():
            if name.startswith("blobs/sha256/"):
                assert hashlib.sha256(read(name)).hexdigest() == name.rsplit("/", 1)[1]
        manifest = json.loads(read(f"blobs/sha256/{archive.manifest_digest[7:]}"))
        assert manifest["config"]["digest"] == archive.config_digest
        config = json.loads(read(f"blobs/sha256/{archive.config_digest[7:]}"))
        assert config["rootfs"]["diff_ids"] == [manifest["layers"][0]["digest"]]
        assert config["config"]["Entrypoint"] == ["/bin/sh"]
        assert json.loads(read("oci-layout")) == {"imageLayoutVersion": "1.0.0"}


def test_the_busybox_image_for_pods_shares_the_sandbox_images_layer(tmp_path: Path) -> None:
    """Two images in one archive: the sandbox's (its entrypoint sleeps) as before, and
    ``BUSYBOX_IMAGE``, which runs a pod's args (``Cmd`` sh, no ``Entrypoint``)."""
    busybox = tmp_path / "busybox"
    busybox.write_bytes(b"BUSYBOX")
    archive = build_sandbox_image(busybox, ["sh", "echo"])
    with tarfile.open(fileobj=io.BytesIO(archive.data)) as tar:

        def read(name: str) -> Any:
            member = tar.extractfile(name)
            assert member is not None
            return json.loads(member.read())

        entries = read("index.json")["manifests"]
        names = [entry["annotations"]["io.containerd.image.name"] for entry in entries]
        assert names == [SANDBOX_IMAGE, BUSYBOX_IMAGE]
        manifests = [read(f"blobs/sha256/{entry['digest'][7:]}") for entry in entries]
        configs = [read(f"blobs/sha256/{m['config']['digest'][7:]}") for m in manifests]
    assert manifests[0]["layers"] == manifests[1]["layers"]
    assert configs[0]["config"]["Entrypoint"] == list(SANDBOX_COMMAND)
    assert "Cmd" not in configs[0]["config"]
    assert configs[1]["config"] == {"Cmd": ["sh"], "Env": ["PATH=/bin"], "WorkingDir": "/"}
    assert archive.images == {
        SANDBOX_IMAGE: manifests[0]["config"]["digest"],
        BUSYBOX_IMAGE: manifests[1]["config"]["digest"],
    }
    assert archive.config_digest == archive.images[SANDBOX_IMAGE]
    assert archive.manifest_digest == entries[0]["digest"]
    # The sandbox image's ID is what a one-image archive of it had: a node that imported
    # it before keeps it.
    alone = oci_archive(layer_tar(b"BUSYBOX", ["sh", "echo"]), SANDBOX_IMAGE, SANDBOX_COMMAND)
    assert alone.config_digest == archive.config_digest
    assert build_sandbox_image(busybox, ["sh", "echo"]).data == archive.data  # reproducible


def test_no_busybox_is_one_line_naming_the_file_and_the_package(tmp_path: Path) -> None:
    with pytest.raises(SandboxImageError) as caught:
        build_sandbox_image(tmp_path / "busybox", ["sh"])
    assert str(caught.value) == (
        f"cannot build the sandbox image: {tmp_path / 'busybox'}: No such file or directory; "
        'apt-get install busybox-static, or set `busybox = "/path"` in [plugins.kubernetes] '
        "of roleserve.toml"
    )


@pytest.mark.parametrize(
    ("line", "level", "message"),
    [
        (
            'time="2026-12-03T19:05:12Z" level=info msg="loading plugin" id=io.containerd.x',
            logging.DEBUG,
            "loading plugin id=io.containerd.x",
        ),
        (
            'time="t" level=warning msg="cleanup warnings \\"quoted\\"" namespace=k8s.io',
            logging.WARNING,
            'cleanup warnings "quoted" namespace=k8s.io',
        ),
        (
            'time="t" level=error msg="RunPodSandbox failed" error="boom"',
            logging.ERROR,
            "RunPodSandbox failed error=boom",
        ),
        ("containerd: failed to load TOML: x", logging.ERROR, "containerd: failed to load TOML: x"),
        (
            'time="t" level=fatal msg="serve failure" address=/run/c.sock'
            ' error="grpc: the server has been stopped"',
            logging.INFO,
            "serve failure address=/run/c.sock error=grpc: the server has been stopped",
        ),
        (
            'time="t" level=fatal msg="serve failure" address=/run/c.sock error="bind: denied"',
            logging.CRITICAL,
            "serve failure address=/run/c.sock error=bind: denied",
        ),
    ],
)
def test_containerd_log_lines(line: str, level: int, message: str) -> None:
    assert parse_containerd_log(line) == (level, message)


def test_leftover_mounts_are_found_under_the_directories_deepest_first() -> None:
    mountinfo = "\n".join(
        [
            "22 1 0:21 / /proc rw - proc proc rw",
            "90 1 0:50 / /d/containerd/state/netns/cni-1 rw - nsfs nsfs rw",
            "91 1 0:51 / /d/containerd/root/snap/1/fs rw - overlay overlay rw",
            "92 91 0:52 / /d/containerd/root/snap/1/fs/dev/shm rw - tmpfs shm rw",
            "93 1 0:53 / /d/containerd/root\\040x rw - tmpfs t rw",
            "94 1 0:54 / /d/containerd/rootless rw - tmpfs t rw",
        ]
    )
    roots = [Path("/d/containerd/root"), Path("/d/containerd/state")]
    assert mounts_under(roots, mountinfo) == [
        Path("/d/containerd/root/snap/1/fs/dev/shm"),
        Path("/d/containerd/root/snap/1/fs"),
        Path("/d/containerd/state/netns/cni-1"),
    ]
    assert mounts_under([Path("/d/containerd/root x")], mountinfo) == [Path("/d/containerd/root x")]


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"containerd_metrics_port": 70000}, "containerd_metrics_port must be an integer from 0"),
        ({"snapshotter": "zfs"}, 'snapshotter must be one of "overlayfs", "native", not "zfs"'),
    ],
)
def test_bad_settings_refuse_the_node_in_one_line_naming_the_key(
    settings: dict[str, object], message: str, tmp_path: Path
) -> None:
    plugins = PluginHarness()
    plugins.register(hooks, "kubernetes")
    refused = re.escape(f"roleserve.toml: [plugins.kubernetes] {message}")
    with pytest.raises(ConfigError, match="^" + refused):
        plugins.runtime(tmp_path, config={"kubernetes": settings})


def test_the_containerd_exporter_is_contributed_on_workers_only(tmp_path: Path) -> None:
    plugins = PluginHarness()
    plugins.register(hooks, "kubernetes")
    runtime = plugins.runtime(tmp_path, config={"kubernetes": {}})
    context = runtime.context("kubernetes")
    assert hooks.roleserve_metrics_exporters(context) == []
    runtime.registry.set(ROLES, NodeRoles(kubernetes_worker=KubernetesWorker()), by="core")
    assert hooks.roleserve_metrics_exporters(context) == [
        ("containerd", "http://127.0.0.1:7846/v1/metrics")
    ]
    runtime.registry.set(NETWORK, NetworkStatus(ipaddress.ip_address("127.0.0.12")), by="core")
    assert hooks.roleserve_metrics_exporters(context) == [
        ("containerd", "http://127.0.0.12:7846/v1/metrics")
    ]
    runtime.registry.set(ROLES, NodeRoles(), by="core")
    assert hooks.roleserve_metrics_exporters(context) == []
