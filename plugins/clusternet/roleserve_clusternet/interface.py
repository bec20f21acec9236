"""Opening the node's WireGuard interface: wireguard-go under the core's program runner,
configured over its UAPI socket (``uapi``), its link over netlink (``link``).

::

    open_interface(log, spec)
    ├── /dev/net/tun missing or not ours ─▶ InterfaceError (final)
    ├── an interface of that name: kernel WireGuard (a killed node's) ─▶ deleted;
    │     any other (another node's wireguard-go) ─▶ InterfaceInUseError, unless this
    │     node's record of an earlier wireguard-go exists (the runner stops that one)
    ├── kernel WireGuard? (netlink "add kind wireguard"): no permission ─▶ InterfaceError
    │     (final); supported ─▶ the probe link is deleted again (see below)
    ├── start_program: [ip netns exec NS] wireguard-go -f IFNAME    (dies with the node,
    │     output into the log tree, a missing binary is ProgramNotFoundError, final)
    ├── ready: the UAPI socket answers get=1 and the link exists (against the child started:
    │     its exit cancels the wait)
    └── yields UapiInterface(name) and the RunningProgram; stops wireguard-go at the end

Kernel WireGuard: the kernel's interface is configured over generic netlink, not the
UAPI, and this machine's kernels have no WireGuard to test that against; so for now a
kernel with WireGuard gets wireguard-go too (it works on every kernel with TUN), and the
log says so. The probe still tells a missing permission apart from a missing module.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import anyio

from roleserve_clusternet import link
from roleserve_clusternet.device import DeviceChange, DeviceState, IPInterface, IPNetwork
from roleserve_clusternet.errors import InterfaceError, InterfaceInUseError, UapiError
from roleserve_clusternet.uapi import UapiSocket, socket_path
from roleserve_core import ProgramSpec, RunningProgram, resolve_binary, start_program

__all__ = [
    "READY_TIMEOUT",
    "InterfaceSpec",
    "UapiInterface",
    "open_interface",
    "parse_wireguard_go",
]

READY_TIMEOUT = 10.0
"""Seconds wireguard-go may take to answer on its UAPI socket (it takes milliseconds)."""

TUN = Path("/dev/net/tun")

INSTALL_HINT = (
    'apt-get install wireguard-go, or set `wireguard_go = "/path"` in [plugins.clusternet] '
    "of roleserve.toml"
)


@dataclass(frozen=True)
class InterfaceSpec:
    """What ``open_interface`` makes."""

    name: str
    mtu: int
    route: IPNetwork
    """The cluster network, routed through the interface."""
    state_dir: Path
    """The plugin's data directory: wireguard-go's process record."""
    wireguard_go: str | None = None
    """The configured binary; None: ``wireguard-go`` on ``PATH``."""
    netns: str | None = None
    """A network namespace to run it all in (tests); None: the node's."""


class UapiInterface:
    """A ``MeshInterface`` (see ``device``): peers over UAPI, the address over netlink.

    With a ``route`` (the cluster network), ``set_address`` also routes it through the
    interface again if it is gone: removing the interface's last IPv4 address (an address
    that changes, or one removed by hand) makes the kernel drop every route through it, and
    the reconcile calls ``set_address`` once every interval (``Mesh.link_due``).
    """

    def __init__(
        self,
        name: str,
        netns: str | None = None,
        log: logging.Logger | None = None,
        socket: Path | None = None,
        route: IPNetwork | None = None,
    ) -> None:
        self._name = name
        self.netns = netns
        self.log = log
        self.uapi = UapiSocket(name, socket)
        self.route = route

    @property
    def name(self) -> str:
        return self._name

    async def configure(self, change: DeviceChange) -> None:
        await self.uapi.set(change)

    async def read(self) -> DeviceState:
        return await self.uapi.get()

    async def set_address(self, address: IPInterface | None) -> None:
        await link.set_address(self._name, address, self.netns, self.log, route=self.route)


def parse_wireguard_go(line: str) -> tuple[int, str]:
    """wireguard-go's lines (``ERROR: (clusternet) 2026/12/03 ... text``) at their level;
    its banner (a box claiming the kernel has WireGuard, printed whether or not it has) at
    DEBUG."""
    for prefix, level in (("ERROR:", logging.ERROR), ("DEBUG:", logging.DEBUG)):
        if line.startswith(prefix):
            return level, line[len(prefix) :].strip()
    if line.startswith("INFO:"):
        return logging.INFO, line[5:].strip()
    if line[:1] in ("┌", "│", "└"):
        return logging.DEBUG, line
    return logging.INFO, line


def program_spec(spec: InterfaceSpec) -> ProgramSpec:
    """wireguard-go for ``spec``; in its network namespace through ``ip netns exec``
    (which execs it: the runner's pid is wireguard-go's own).

    :raises ProgramNotFoundError: no wireguard-go (final).
    """
    base = ProgramSpec(
        name="wireguard-go",
        executable="wireguard-go",
        configured=spec.wireguard_go,
        setting=INSTALL_HINT,
        arguments=["-f", spec.name],
        state_dir=spec.state_dir,
        # WG_PROCESS_FOREGROUND: what wireguard-go sets for its own daemon child; it
        # also silences the banner claiming the kernel has WireGuard (printed whether or
        # not it has), which would otherwise be the "last lines" of every exit error.
        # WG_I_PREFER_...: older versions refuse to run where the kernel has WireGuard.
        env={
            "WG_PROCESS_FOREGROUND": "1",
            "WG_I_PREFER_BUGGY_USERSPACE_TO_POLISHED_KMOD": "1",
            "LOG_LEVEL": "error",
        },
        parser=parse_wireguard_go,
    )
    binary = resolve_binary(base)
    if spec.netns is None:
        return replace(base, executable=str(binary), configured=None)
    ip = shutil.which("ip") or "/usr/sbin/ip"
    arguments = ["netns", "exec", spec.netns, str(binary), "-f", spec.name]
    return replace(base, executable=ip, configured=None, arguments=arguments)


@asynccontextmanager
async def open_interface(
    log: logging.Logger, spec: InterfaceSpec
) -> AsyncIterator[tuple[UapiInterface, RunningProgram]]:
    """The interface, up to the end of the block; see the module docstring.

    :raises InterfaceError: no permission to create it (final).
    :raises InterfaceInUseError: another process holds an interface of that name.
    :raises ProgramNotFoundError: no wireguard-go (final).
    :raises ProgramExitedError: wireguard-go exited.
    :raises UapiError: wireguard-go did not answer on its socket in time.
    """
    check_tun(spec.name)
    program = program_spec(spec)  # before touching anything: a missing binary is final
    try:
        if await link.delete_link(spec.name, spec.netns):
            log.info("deleted an old interface %s", spec.name)
        if await link.create_kernel_link(spec.name, spec.netns):
            await link.delete_link(spec.name, spec.netns)
            log.info(
                "the kernel has WireGuard; configuring it over netlink is not done yet: "
                "wireguard-go"
            )
    except InterfaceInUseError:
        if not program.record_path.exists():
            raise
        # A wireguard-go of an earlier run of this node may hold it: the runner stops
        # that one first if it is provably ours; if not, wireguard-go fails to make the
        # interface and the worker retries.
        log.info("%s exists; a wireguard-go of an earlier run may hold it", spec.name)
    device = UapiInterface(spec.name, spec.netns, log, route=spec.route)
    async with start_program(log, program) as running:
        await _wait_ready(device, running, spec)
        yield device, running


def check_tun(name: str) -> None:
    """wireguard-go needs ``/dev/net/tun``, read and write.

    :raises InterfaceError: it is missing or not ours (final).
    """
    if not os.access(TUN, os.R_OK | os.W_OK):
        reason = "no such device" if not TUN.exists() else "permission denied"
        raise InterfaceError(link.NO_PERMISSION.format(name=name, reason=f"{TUN}: {reason}"))


async def _wait_ready(device: UapiInterface, running: RunningProgram, spec: InterfaceSpec) -> None:
    path = socket_path(spec.name)
    last: Exception | None = None
    with anyio.move_on_after(READY_TIMEOUT):
        while True:
            try:
                await device.read()
                if await link.link_exists(spec.name, spec.netns):
                    return
            except UapiError as exc:
                last = exc
            await anyio.sleep(0.02)  # polling a program's startup, not a test waiting
    raise UapiError(
        f"wireguard-go (pid {running.pid}) did not answer on {path} in {READY_TIMEOUT:g} s"
        + (f": {last}" if last else "")
    )
