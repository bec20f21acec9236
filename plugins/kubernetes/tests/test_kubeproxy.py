"""kube-proxy: one per network namespace (its nftables tables have fixed names), the next
taking over as soon as the holder stops; and what it is started with."""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path

import anyio
import pytest

from roleserve_core.testing import poll_until
from roleserve_kubernetes.kubeproxy import hold_lock, netns_lock_path
from roleserve_kubernetes.plans import ProxyInputs, kube_proxy_plan
from roleserve_kubernetes.testing import throwaway_pki

pytestmark = pytest.mark.anyio


class Recorded:
    """The part of a ``RunContext`` the lock uses: its note (a standby signals nothing:
    it runs no kube-proxy, so it is never HEALTHY)."""

    def __init__(self) -> None:
        self.note = ""

    def set_note(self, note: str) -> None:
        self.note = note


async def _hold(
    ctx: Recorded,
    path: Path,
    holder: dict[str, str],
    inside: anyio.Event,
    scope: anyio.CancelScope | None = None,
) -> None:
    """Hold the lock for ``holder`` until ``scope`` (its proxy) is cancelled."""
    with scope or anyio.CancelScope():
        async with hold_lock(ctx, path, holder):  # type: ignore[arg-type]
            inside.set()
            await anyio.sleep_forever()


async def _note_of(ctx: Recorded, start: str) -> None:
    async def note() -> str:
        return ctx.note

    await poll_until(f"a note starting {start!r}", note, lambda n: n.startswith(start))


async def test_one_proxy_per_network_namespace_and_the_next_takes_over(tmp_path: Path) -> None:
    path = netns_lock_path(tmp_path)
    first, second, stranger = Recorded(), Recorded(), Recorded()
    first_in, second_in, stranger_in = anyio.Event(), anyio.Event(), anyio.Event()
    ours = {"node": "node-a", "data_dir": "/a", "cluster": "c1"}
    first_scope = anyio.CancelScope()
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(_hold, first, path, ours, first_in, first_scope)
        await first_in.wait()
        tasks.start_soon(_hold, second, path, {**ours, "node": "node-b"}, second_in)
        tasks.start_soon(_hold, stranger, path, {**ours, "cluster": "c2"}, stranger_in)
        await _note_of(second, "standby: node node-a (/a) runs kube-proxy")
        await _note_of(stranger, "standby: node node-a")
        assert not second_in.is_set()
        assert stranger.note.endswith("for another cluster: no Service of this one is reachable")
        assert json.loads(path.read_text())["node"] == "node-a"
        first_scope.cancel()  # node-a's proxy stops: the lock goes with it

        async def taken() -> tuple[bool, bool]:
            return second_in.is_set(), stranger_in.is_set()

        await poll_until("a standby taking over", taken, any)
        assert second_in.is_set() != stranger_in.is_set()  # exactly one took over
        taker = "node-b" if second_in.is_set() else "node-a"
        assert json.loads(path.read_text())["node"] == taker
        tasks.cancel_scope.cancel()
    assert not path.exists()  # no proxy runs: no file is left


def test_another_network_namespace_has_a_lock_of_its_own(tmp_path: Path) -> None:
    """The lock's name is this process's network namespace's inode: a node in a namespace
    of its own (``cluster up --netns``) runs its proxy beside the others."""
    here = netns_lock_path(tmp_path)
    assert here.parent == tmp_path
    assert here.name == f"kube-proxy.net-{Path('/proc/self/ns/net').stat().st_ino}.lock"


def test_its_configuration_leaves_the_machine_s_sysctls_and_serves_the_node_address(
    tmp_path: Path,
) -> None:
    pki = throwaway_pki()
    ca = pki["ca"].certificate_pem
    assert ca is not None
    inputs = ProxyInputs(
        directory=tmp_path,
        node_id="node-1",
        address=ipaddress.ip_address("10.0.0.7"),
        apiserver="https://10.0.0.1:6443",
        ca_pem=ca,
        client=pki["admin"],
        search_path="/usr/bin:/bin",
    )
    plan = kube_proxy_plan(inputs)
    config = json.loads(next(f.content for f in plan.files if f.path.name == "config.json"))
    assert config["mode"] == "nftables"
    assert config["nodePortAddresses"] == ["10.0.0.7/32"]
    assert config["hostnameOverride"] == "node-1"
    # pods are told by their bridge, whatever network the cluster took
    assert config["detectLocalMode"] == "InterfaceNamePrefix"
    assert config["detectLocal"] == {"interfaceNamePrefix": "rsp"}
    assert config["conntrack"] == {
        "maxPerCore": 0,
        "min": 0,
        "tcpEstablishedTimeout": "0s",
        "tcpCloseWaitTimeout": "0s",
    }
    assert plan.env["PATH"] == "/usr/bin:/bin:/usr/sbin:/sbin"
    assert plan.arguments == (f"--config={tmp_path / 'config.json'}",)
