"""The controller worker in a node: it waits for the role and a local control plane, runs
the components whose binaries it has (a stand-in apiserver here), reports them in
``kubernetes_status``, and resets that when the role goes."""

from __future__ import annotations

import ipaddress
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import pytest

from roleserve_core import (
    LOCAL_CONTROL_PLANE,
    NETWORK,
    KubernetesController,
    LocalControlPlane,
    NetworkStatus,
    NodeContext,
    NodeRoles,
    State,
    hookimpl,
)
from roleserve_core.testing import (
    FakeClock,
    NodeHarness,
    random_loopback,
    start_plugin_node,
    wait_for_value,
)
from roleserve_kubernetes import KUBERNETES_STATUS, POD_NETWORK, KubernetesStatus, binaries, probe
from roleserve_kubernetes.hooks import controller_worker
from roleserve_kubernetes.pki import KeyPair
from roleserve_kubernetes.plans import EtcdClientFiles
from roleserve_kubernetes.testing import stand_in_apiserver, throwaway_pki
from roleserve_kubernetes.worker_controller import (
    WAITING_FOR_ADDRESS,
    WAITING_FOR_CONTROL_PLANE,
    WAITING_FOR_ROLE,
    WAITING_FOR_ROLES,
    ControllerStartup,
    fold,
)

pytestmark = pytest.mark.anyio

DN = "root.role.kubernetes_controller"
CONTROLLER = NodeRoles(kubernetes_controller=KubernetesController())


class RecordingPKI:
    """The PKI source: records each startup it is asked for."""

    def __init__(self, pki: Mapping[str, KeyPair]) -> None:
        self.pki = pki
        self.calls: list[ControllerStartup] = []

    async def __call__(self, startup: ControllerStartup) -> Mapping[str, KeyPair]:
        self.calls.append(startup)
        return self.pki


def etcd_files(tmp_path: Path) -> EtcdClientFiles:
    directory = tmp_path / "etcd"
    directory.mkdir()
    files = EtcdClientFiles(
        directory / "ca.pem", directory / "member.pem", directory / "member-key.pem"
    )
    for path in (files.ca, files.certificate, files.key):
        path.write_bytes(b"read by the real apiserver only")
    files.key.chmod(0o600)
    return files


def plugins(pki: RecordingPKI, files: EtcdClientFiles) -> dict[str, object]:
    """The controller worker with the test's PKI, and a stand-in owner of
    ``local_control_plane``."""

    def values() -> list[Any]:
        return [KUBERNETES_STATUS, POD_NETWORK]

    def settings() -> list[Any]:
        return list(binaries.SETTINGS)

    def workers(node: NodeContext) -> list[Any]:
        return [controller_worker(node, pki=pki, etcd_files=lambda _startup: files)]

    return {
        "kubernetes": SimpleNamespace(
            roleserve_values=hookimpl(values),
            roleserve_settings=hookimpl(settings),
            roleserve_workers=hookimpl(workers),
        ),
        "controlplane": SimpleNamespace(roleserve_values=hookimpl(lambda: [LOCAL_CONTROL_PLANE])),
    }


async def test_waits_runs_reports_and_resets(
    node: Callable[..., Awaitable[NodeHarness]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    fake_clock: FakeClock,
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no kube binary on PATH, whatever the machine
    monkeypatch.setattr(probe, "READY_RECHECK", 0.5)  # each wait below is 10 s at most
    address = random_loopback()
    pki = RecordingPKI(throwaway_pki([address]))
    apiserver = stand_in_apiserver(tmp_path / "kube-apiserver")
    # Only the stand-in: not the pinned build's other components either.
    absent = str(tmp_path / "no-built-binaries")
    config = {"kubernetes": {"kube_apiserver": str(apiserver), "kube_binaries_dir": absent}}
    stand_ins = plugins(pki, etcd_files(tmp_path))
    harness = await start_plugin_node(node, tmp_path / "node", stand_ins, config=config)
    status = harness.runtime.registry.read(KUBERNETES_STATUS, "test")

    await harness.wait_status(DN, lambda s: s.note == WAITING_FOR_ROLES)
    assert status.get_nowait() == KubernetesStatus.NONE
    harness.set_roles(NodeRoles())
    await harness.wait_status(DN, lambda s: s.note == WAITING_FOR_ROLE)
    harness.set_roles(CONTROLLER)
    await harness.wait_status(DN, lambda s: s.note == WAITING_FOR_CONTROL_PLANE)
    harness.set(NETWORK, NetworkStatus(address))
    assert harness.status(DN).state is State.NEW  # not healthy while it waits
    etcd = f"{address}:7836"
    harness.set(LOCAL_CONTROL_PLANE, LocalControlPlane(f"{address}:7835", etcd), by="controlplane")

    ready = await wait_for_value(status, lambda s: s.apiserver_ready)
    assert pki.calls == [ControllerStartup(address, etcd)]
    assert ready == KubernetesStatus(
        apiserver=f"https://{address}:6443",
        ca_pem=pki.pki["ca"].certificate_pem,
        apiserver_ready=True,
        running=("kube-apiserver",),
        absent=("kube-controller-manager", "kube-scheduler"),
    )
    assert harness.status(DN).state is State.HEALTHY
    assert harness.status(f"{DN}.apiserver").note.startswith("kube-apiserver ready, pid ")
    for name, component in (
        ("controller_manager", binaries.CONTROLLER_MANAGER),
        ("scheduler", binaries.SCHEDULER),
    ):
        child = await harness.wait_status(f"{DN}.{name}", lambda s: s.note != "")
        assert (child.state, child.note) == (State.NEW, component.absent_note)  # not running

    # Ready only while /readyz says so (asked again while it runs), and again when it does.
    not_ready = anyio.Path(f"{apiserver}.not-ready")
    await not_ready.touch()
    assert not (await wait_for_value(status, lambda s: not s.apiserver_ready)).apiserver_ready
    unready = await harness.wait_status(f"{DN}.apiserver", lambda s: "not ready" in s.note)
    assert unready.note == "kube-apiserver not ready: /readyz answered 500"
    assert unready.state is State.HEALTHY  # it runs: not restarted within UNREADY_LIMIT
    await not_ready.unlink()
    assert (await wait_for_value(status, lambda s: s.apiserver_ready)) == ready

    # Not ready for longer than UNREADY_LIMIT: failed and started again, never left HEALTHY.
    monkeypatch.setattr(probe, "UNREADY_LIMIT", 1.0)
    await not_ready.touch()
    failed = await harness.wait_status(f"{DN}.apiserver", lambda s: s.failures > 0)
    assert failed.last_error is not None
    assert failed.last_error.type.endswith("ComponentNotReadyError"), failed.last_error
    assert "/readyz has not answered ready for 1 s (/readyz answered 500)" in str(
        failed.last_error.message
    )
    await not_ready.unlink()
    await fake_clock.advance_to_next()  # the supervisor's backoff
    again = await harness.wait_status(f"{DN}.apiserver", lambda s: s.state is State.HEALTHY)
    assert again.note.startswith("kube-apiserver ready, pid "), again
    assert (await wait_for_value(status, lambda s: s.apiserver_ready)) == ready

    harness.set_roles(NodeRoles())  # the role goes: nothing runs, and the status says so
    assert await wait_for_value(status, lambda s: not s.controller_running) == (
        KubernetesStatus.NONE
    )
    await harness.wait_status(DN, lambda s: s.note == WAITING_FOR_ROLE)
    with pytest.raises(LookupError):
        harness.status(f"{DN}.apiserver")


def test_fold_waits_for_each_input_in_turn() -> None:
    address = ipaddress.ip_address("10.0.0.1")
    running = LocalControlPlane("10.0.0.1:7835", "10.0.0.1:7836")
    assert fold(None, running, NetworkStatus(address)) == WAITING_FOR_ROLES
    assert fold(NodeRoles(), running, NetworkStatus(address)) == WAITING_FOR_ROLE
    assert fold(CONTROLLER, LocalControlPlane.NONE, None) == WAITING_FOR_CONTROL_PLANE
    assert fold(CONTROLLER, running, NetworkStatus(None)) == WAITING_FOR_ADDRESS
    assert fold(CONTROLLER, running, NetworkStatus(address)) == ControllerStartup(
        address, "10.0.0.1:7836"
    )


def test_kubernetes_status_none_says_nothing_runs() -> None:
    """The value the kubernetes plugin leaves when its controller stops: no apiserver, no
    CA, nothing running; a started controller runs, even with every binary absent."""
    assert KubernetesStatus(None, None, False, (), ()) == KubernetesStatus.NONE
    assert not KubernetesStatus.NONE.controller_running
    running = KubernetesStatus("https://10.0.0.1:6443", b"CA", True, ("kube-apiserver",), ())
    assert running.controller_running
    assert KubernetesStatus(None, b"CA", False, (), ("kube-apiserver",)).controller_running
    assert repr(KubernetesStatus.NONE) == "KubernetesStatus(NONE)"  # ctl values shows it
    assert repr(running) == (
        "KubernetesStatus(apiserver='https://10.0.0.1:6443', ready=True, "
        "running=('kube-apiserver',), absent=())"
    )
