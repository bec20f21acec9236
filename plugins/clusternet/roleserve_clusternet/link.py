"""The interface itself, over netlink (pyroute2): create, MTU, up, address, route.

Blocking calls, each in a worker thread (``anyio.to_thread``): pyroute2's ``IPRoute`` is
synchronous. pyroute2 is imported on first use, and only the part of it used here
(``netlink_import``): it costs a third of a second whole, which a node whose clusternet
worker never starts should not pay. Nothing here parses ``ip``.

``netns``: the name of a network namespace (``ip netns``) to do it all in; None for the
node's own. Only tests set it (two mesh nodes on one machine); each call then runs in a
short-lived thread that enters the namespace (``_in_thread`` says why).
"""

from __future__ import annotations

import errno
import ipaddress
import logging
import os
import socket
import threading
from typing import TYPE_CHECKING, Any

import anyio.to_thread

from roleserve_clusternet.device import IPInterface, IPNetwork
from roleserve_clusternet.errors import InterfaceError, InterfaceInUseError, LinkError
from roleserve_clusternet.netlink_import import ip_route_class, netlink_error

if TYPE_CHECKING:
    from pyroute2 import IPRoute

__all__ = [
    "ROUTE_PROTOCOL",
    "create_kernel_link",
    "delete_link",
    "link_exists",
    "set_address",
    "set_up",
]

ROUTE_PROTOCOL = 129
"""The protocol number of the cluster network's route (as Monogon's), so that an operator
(``ip route show proto 129``) tells it from the routes others made."""

MAIN_TABLE = 254

NO_PERMISSION = (
    "cannot create the WireGuard interface {name}: {reason}; clusternet needs root "
    "(CAP_NET_ADMIN) and /dev/net/tun"
)


def _ipr(netns: str | None) -> IPRoute:
    """A netlink socket in the calling thread's network namespace (``_in_thread`` has
    put the thread in ``netns``)."""
    ip_route: IPRoute = ip_route_class()()
    return ip_route


def _code(exc: Exception) -> int | None:
    code = getattr(exc, "code", None)
    return code if isinstance(code, int) else None


def _index(ipr: IPRoute, name: str) -> int | None:
    found: list[int] = ipr.link_lookup(ifname=name)
    return found[0] if found else None


async def _in_thread(function: Any, name: str, netns: str | None, *args: Any) -> Any:
    """``function(name, netns, *args)`` in a worker thread; for a ``netns``, in a thread of
    its own that enters the namespace first and ends after.

    Why not pyroute2's own ``IPRoute(netns=...)``: it forks a helper process, and forking
    a process that runs gRPC's threads is unsafe. ``setns`` changes the namespace of the
    calling thread alone, and a netlink socket stays in the namespace it was made in; the
    thread ends with the call, so no pooled thread is left in another namespace.
    """
    if netns is None:
        return await anyio.to_thread.run_sync(function, name, netns, *args)
    return await anyio.to_thread.run_sync(_run_in_netns, netns, function, name, *args)


def _run_in_netns(netns: str, function: Any, name: str, *args: Any) -> Any:
    outcome: list[Any] = []

    def target() -> None:
        try:
            _enter_netns(netns)
            outcome.append((True, function(name, netns, *args)))
        except BaseException as exc:
            outcome.append((False, exc))

    thread = threading.Thread(target=target, name=f"netns-{netns}")
    thread.start()
    thread.join()
    ok, value = outcome[0]
    if not ok:
        raise value
    return value


def _enter_netns(netns: str) -> None:
    """Move the calling thread into the network namespace ``netns`` (``ip netns``)."""
    import ctypes

    descriptor = os.open(f"/run/netns/{netns}", os.O_RDONLY | os.O_CLOEXEC)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.setns(descriptor, CLONE_NEWNET) != 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))
    finally:
        os.close(descriptor)


CLONE_NEWNET = 0x40000000


def _create_kernel_link(name: str, netns: str | None) -> bool:
    NetlinkError = netlink_error()  # noqa: N806 (the class, as pyroute2 names it)

    with _ipr(netns) as ipr:
        try:
            ipr.link("add", ifname=name, kind="wireguard")
        except NetlinkError as exc:
            if exc.code == errno.EOPNOTSUPP:
                return False
            if exc.code in (errno.EPERM, errno.EACCES):
                raise InterfaceError(
                    NO_PERMISSION.format(name=name, reason="Operation not permitted")
                ) from None
            raise LinkError(f"cannot create the WireGuard interface {name}: {exc}") from None
    return True


async def create_kernel_link(name: str, netns: str | None = None) -> bool:
    """Create ``name`` as a kernel WireGuard link; False if the kernel has no WireGuard.

    :raises InterfaceError: no permission (final).
    """
    created: bool = await _in_thread(_create_kernel_link, name, netns)
    return created


def _link_exists(name: str, netns: str | None) -> bool:
    with _ipr(netns) as ipr:
        return _index(ipr, name) is not None


async def link_exists(name: str, netns: str | None = None) -> bool:
    """Whether an interface ``name`` exists."""
    exists: bool = await _in_thread(_link_exists, name, netns)
    return exists


def _delete_link(name: str, netns: str | None) -> bool:
    NetlinkError = netlink_error()  # noqa: N806 (the class, as pyroute2 names it)

    with _ipr(netns) as ipr:
        index = _index(ipr, name)
        if index is None:
            return False
        [message] = ipr.get_links(index)
        info = message.get_attr("IFLA_LINKINFO")
        kind = info.get_attr("IFLA_INFO_KIND") if info is not None else None
        if kind != "wireguard":
            raise InterfaceInUseError(
                f"the interface {name} exists already ({kind or 'no kind'}), held by another "
                "process (another node on this machine?); set [plugins.clusternet] interface "
                "to another name"
            )
        try:
            ipr.link("del", index=index)
        except NetlinkError as exc:
            if exc.code == errno.ENODEV:
                return False
            raise LinkError(f"cannot delete the old interface {name}: {exc}") from None
    return True


async def delete_link(name: str, netns: str | None = None) -> bool:
    """Delete a kernel WireGuard interface ``name`` left by an earlier run; whether there
    was one.

    Any other interface of that name is not ours to delete: a wireguard-go's TUN device
    goes with its process (and the runner stops a leftover of our own first), so one that
    exists belongs to another process, such as another node on the same machine, and
    deleting it would make the two nodes take the name from each other forever.

    :raises InterfaceInUseError: an interface of that name that is not kernel WireGuard.
    """
    deleted: bool = await _in_thread(_delete_link, name, netns)
    return deleted


def _set_up(name: str, netns: str | None, mtu: int, route: IPNetwork) -> None:
    NetlinkError = netlink_error()  # noqa: N806 (the class, as pyroute2 names it)

    with _ipr(netns) as ipr:
        index = _existing_index(ipr, name)
        try:
            ipr.link("set", index=index, mtu=mtu, state="up")
            ipr.route("replace", dst=str(route), oif=index, proto=ROUTE_PROTOCOL)
        except NetlinkError as exc:
            raise LinkError(f"cannot set up {name} (MTU {mtu}, route {route}): {exc}") from None


async def set_up(name: str, mtu: int, route: IPNetwork, netns: str | None = None) -> None:
    """Set the MTU, bring ``name`` up, and route ``route`` through it (replacing a route to
    the same destination).

    :raises LinkError: netlink refused.
    """
    await _in_thread(_set_up, name, netns, mtu, route)


def _route_through(ipr: IPRoute, index: int, route: IPNetwork) -> bool:
    """Whether the main table routes ``route`` (exactly) through interface ``index``."""
    family = socket.AF_INET if route.version == 4 else socket.AF_INET6
    for message in ipr.get_routes(family=family):
        if (
            message.get_attr("RTA_TABLE") == MAIN_TABLE
            and message["dst_len"] == route.prefixlen
            and message.get_attr("RTA_DST") == str(route.network_address)
            and message.get_attr("RTA_OIF") == index
        ):
            return True
    return False


def _existing_index(ipr: IPRoute, name: str) -> int:
    index = _index(ipr, name)
    if index is None:
        raise LinkError(f"the interface {name} is gone")
    return index


def _route_if_missing(ipr: IPRoute, name: str, index: int, route: IPNetwork) -> bool:
    """Route ``route`` through interface ``index`` unless the main table does; whether it
    did."""
    NetlinkError = netlink_error()  # noqa: N806 (the class, as pyroute2 names it)

    try:
        if _route_through(ipr, index, route):
            return False
        ipr.route("replace", dst=str(route), oif=index, proto=ROUTE_PROTOCOL)
    except NetlinkError as exc:
        raise LinkError(f"cannot route {route} through {name}: {exc}") from None
    return True


def _set_address(
    name: str, netns: str | None, address: IPInterface | None, route: IPNetwork | None
) -> tuple[bool, bool]:
    """One netlink session: the address, then the route if asked; what each changed."""
    with _ipr(netns) as ipr:
        index = _existing_index(ipr, name)
        changed = _only_address(ipr, name, index, address)
        routed = route is not None and _route_if_missing(ipr, name, index, route)
    return changed, routed


def _only_address(ipr: IPRoute, name: str, index: int, address: IPInterface | None) -> bool:
    NetlinkError = netlink_error()  # noqa: N806 (the class, as pyroute2 names it)

    changed = False
    try:
        for message in ipr.get_addr(index=index):
            text = message.get_attr("IFA_ADDRESS")
            length = message["prefixlen"]
            if address is not None and (text, length) == (
                str(address.ip),
                address.network.prefixlen,
            ):
                address = None  # already there
                continue
            if ipaddress.ip_address(text).is_link_local:
                continue  # the kernel's own (IPv6 on a TUN device)
            ipr.addr("del", index=index, address=text, prefixlen=length)
            changed = True
        if address is not None:
            ipr.addr(
                "add", index=index, address=str(address.ip), prefixlen=address.network.prefixlen
            )
            changed = True
    except NetlinkError as exc:
        raise LinkError(f"cannot set the address of {name}: {exc}") from None
    return changed


async def set_address(
    name: str,
    address: IPInterface | None,
    netns: str | None = None,
    log: logging.Logger | None = None,
    route: IPNetwork | None = None,
) -> None:
    """Make ``address`` the only address of ``name`` (None: none), link-local ones aside;
    with ``route``, then route it through ``name`` again if the main table does not (in
    the same netlink session; with a WARNING: the kernel drops every route through an
    interface when its last IPv4 address goes, and an operator may have removed it).

    :raises LinkError: netlink refused, or the interface is gone.
    """
    changed, routed = await _in_thread(_set_address, name, netns, address, route)
    if log is not None:
        if changed:
            log.info("address of %s: %s", name, address or "none")
        if routed:
            log.warning("the route of %s through %s was missing; set again", route, name)
