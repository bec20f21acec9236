"""Is an address a program will bind free, and if not, who holds it?

The kernel decides: the runner binds a socket of its own to the address (TCP with
``SO_REUSEADDR``, as servers do, so connections in TIME_WAIT do not count) and closes it at
once. Only when that fails does it look for the holder: the socket's inode in
``/proc/net/{tcp,tcp6,udp,udp6}``, then the process with ``socket:[inode]`` among its
``/proc/PID/fd``. That is what ``psutil.net_connections()`` does too, for every socket of
every process; the core needs one inode and about fifty lines, so it does not take on
psutil as a dependency for it.

The holder is named, never signalled: a process this node did not start is not ours to
stop, even if it looks like a leftover of ours (those are found by their records).
"""

from __future__ import annotations

import errno
import ipaddress
import os
import socket
from collections.abc import Iterable
from pathlib import Path

from roleserve_core.errors import AddressInUseError
from roleserve_core.ports import endpoint
from roleserve_core.process._errors import PortInUseError, ProgramError
from roleserve_core.process._proc import command_line
from roleserve_core.process._spec import Bind

__all__ = ["address_in_use", "check_binds", "find_holder", "holds"]

_TCP_LISTEN = "0A"
_TCP_TIME_WAIT = "06"

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def check_binds(name: str, binds: Iterable[Bind]) -> None:
    """Raise unless every address in ``binds`` can be bound now.

    :raises PortInUseError: an address is held; the message names it, the holder's pid and
        command when readable, and what to do.
    :raises ProgramError: an address that is not on this machine.
    """
    for bind in binds:
        problem = _try_bind(bind)
        if problem is None:
            continue
        if problem.errno == errno.EADDRNOTAVAIL:
            raise ProgramError(
                f"cannot start {name}: {bind.host} is not an address of this machine; "
                "add it to an interface, or configure another address"
            )
        if problem.errno != errno.EADDRINUSE:
            raise ProgramError(f"cannot start {name}: cannot bind {bind}: {problem.strerror}")
        holder = find_holder(bind)
        who = _named(holder)
        raise PortInUseError(
            f"cannot start {name}: {bind} is held by {who}, which this node did not start; "
            f"stop that process, or configure {name} to use another address",
            address=str(bind),
            holder_pid=holder[0] if holder else None,
        )


def address_in_use(host: str, port: int) -> AddressInUseError | None:
    """Why a server cannot listen on ``host:port``, if another process holds it (a bind
    of this node's own fails with EADDRINUSE); None if not, or if ``host`` is no address.

    For a server that learnt only that it failed (gRPC's ``add_secure_port`` says no more
    than that, and logs a line of its own): asked once its listen failed.
    """
    try:
        bind = Bind(host, port)
    except ValueError:  # port 0, or a name rather than an address: nothing to probe
        return None
    problem = _try_bind(bind)
    if problem is None or problem.errno != errno.EADDRINUSE:
        return None
    address = endpoint(host, port)
    return AddressInUseError(
        f"cannot listen on {address}: held by {_named(find_holder(bind))}; stop that "
        "process, or configure another port, and this starts again by itself",
        address,
    )


def _named(holder: tuple[int, str | None] | None) -> str:
    """The holder of an address as a message names it."""
    if holder is None:
        return "a process this node cannot see (another user, or another network namespace)"
    pid, command = holder
    return f"pid {pid} ({command or 'command unreadable'})"


def _try_bind(bind: Bind) -> OSError | None:
    address = ipaddress.ip_address(bind.host)
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    kind = socket.SOCK_STREAM if bind.protocol == "tcp" else socket.SOCK_DGRAM
    with socket.socket(family, kind) as probe:
        if bind.protocol == "tcp":
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((bind.host, bind.port))
        except OSError as exc:
            return exc
    return None


def find_holder(bind: Bind) -> tuple[int, str | None] | None:
    """``(pid, command line)`` of a process holding ``bind``, or None if none is visible."""
    inodes = _socket_inodes(bind)
    if not inodes:
        return None
    wanted = {f"socket:[{inode}]" for inode in inodes}
    with os.scandir("/proc") as processes:
        for process in processes:
            if process.name.isdigit() and _holds(process.path, wanted):
                pid = int(process.name)
                return pid, command_line(pid)
    return None


def holds(pid: int, bind: Bind) -> bool:
    """Whether process ``pid`` holds a socket bound to ``bind`` (its address or a wildcard)."""
    inodes = _socket_inodes(bind)
    return bool(inodes) and _holds(f"/proc/{pid}", {f"socket:[{inode}]" for inode in inodes})


def _holds(process: str, sockets: set[str]) -> bool:
    try:
        descriptors = os.scandir(f"{process}/fd")
    except OSError:
        return False
    with descriptors:
        for descriptor in descriptors:
            try:
                if os.readlink(descriptor.path) in sockets:
                    return True
            except OSError:
                continue
    return False


def _socket_inodes(bind: Bind) -> list[str]:
    """Inodes of sockets bound to ``bind``'s port on its address or a wildcard; listeners
    first."""
    host = ipaddress.ip_address(bind.host)
    found: list[tuple[bool, str]] = []
    for table in (f"/proc/net/{bind.protocol}", f"/proc/net/{bind.protocol}6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10:
                continue
            local, state, inode = fields[1], fields[3], fields[9]
            address_hex, _, port_hex = local.partition(":")
            if int(port_hex, 16) != bind.port or inode == "0" or state == _TCP_TIME_WAIT:
                continue
            if _overlaps(_decode(address_hex), host):
                found.append((bind.protocol == "udp" or state == _TCP_LISTEN, inode))
    return [inode for _, inode in sorted(found, key=lambda item: not item[0])]


def _decode(address_hex: str) -> IPAddress:
    """An address of ``/proc/net/tcp*``: 32-bit words in host (little-endian) order."""
    raw = bytes.fromhex(address_hex)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    address = ipaddress.ip_address(words)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _overlaps(bound: IPAddress, wanted: IPAddress) -> bool:
    """Whether a socket bound to ``bound`` keeps a bind to ``wanted`` (same port) from
    succeeding: the same address, or either one a wildcard."""
    return bound == wanted or bound.is_unspecified or wanted.is_unspecified
