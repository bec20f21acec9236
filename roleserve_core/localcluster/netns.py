"""The network of ``cluster up --netns``: a namespace per node, veth pairs, one bridge.

::

    host namespace                                 namespace rsnet<k>-n<i>  (one per node)
    ┌──────────────────────────────────────────┐   ┌─────────────────────────────────────┐
    │ bridge rsnet<k>   198.18.<k>.1/24        │   │ lo    127.0.0.1 (up)                │
    │   ├── rsnet<k>-1 ◀── veth pair ──────────┼──▶│ eth0  198.18.<k>.(10+i)/24          │
    │   ├── rsnet<k>-2 ◀── ...                 │   │ default via 198.18.<k>.1            │
    │   └── ...                                │   │ node i: nsenter --net=<its netns>   │
    └──────────────────────────────────────────┘   └─────────────────────────────────────┘
    (198.18.<k> stands for the k-th /24 of 198.18.0.0/15: k = 256 is 198.19.0)

Decisions:

- **Addresses**: 198.18.0.0/15, which RFC 2544 (and RFC 6890) sets aside for testing
  networks: never routed on the internet and almost never a LAN's. Each cluster takes the
  /24 its directory's path hashes to (``subnet_for``), so two clusters of one machine
  usually differ; the bridge holds ``.1`` (so the host, and ``ctl`` on it, reaches every
  node directly), node ``i`` holds ``.(10+i)``, the same last byte as on loopback
  (127.0.0.11, ...). The cluster records node 1's address (``first-address``), so a
  directory that is moved keeps its subnet, and the subnet alone names everything else.
- **Names** come from ``k``, the /24's place in the range, the cluster's short ID:
  bridge ``rsnet<k>``, host veth ends ``rsnet<k>-<i>`` (at most 11 characters, under the
  kernel's 15), namespaces ``rsnet<k>-n<i>``; the veth end in a namespace is ``eth0`` (a
  name is per namespace). Whatever starts with ``rsnet<k>-`` is the cluster's, which is how
  leftovers are found.
- **Ownership**: the bridge's alias is the cluster's directory. A bridge of the subnet with
  another directory belongs to another cluster (two paths hashed alike, or a cluster
  moved): ``up`` refuses instead of taking its network down as a leftover.
- **Running a node inside**: ``nsenter --net=/var/run/netns/NAME`` (util-linux) enters
  the namespace and execs the node in place, so the PID ``cluster up`` records is the
  node's, its session and process group stay its own, and what the node starts (etcd,
  under ``setpriv --pdeathsig``) sees the node as its parent, as on loopback. Only the
  network is the node's own: it keeps the host's mounts. ``ip netns exec`` is not used: it
  also gives the command a mount namespace of its own, with a fresh ``/sys`` (the
  namespace's interfaces under ``/sys/class/net``) and none of the cgroup file systems
  mounted under it, so runc could start no container there ("no cgroup mount found in
  mountinfo"); and it bind-mounts ``/etc/netns/NAME/*`` over ``/etc``, which no node
  uses (each node's hosts file is its own by setting: ``nodeconfig``). Nothing in a node
  reads ``/sys/class/net``: pyroute2 and wireguard-go speak netlink and ``/dev/net/tun``,
  and ``/proc/sys/net`` follows the network namespace of whoever opens it. Setting the
  namespace in a ``preexec_fn`` instead would run Python between fork and exec in a
  process with gRPC's threads, which can deadlock.
- **pyroute2** does the netlink work (no ``ip`` output is parsed). It is the optional
  extra ``roleserve-core[netns]``: a node agent never needs it, and its import costs about
  a third of a second, so it is imported here, inside functions, only for ``--netns``.
- **In a process of its own**: ``cluster up`` and ``down`` make and remove the network
  through ``python -m roleserve_core.localcluster.netns up|down`` (``network_up``,
  ``network_down``), not in their own process. pyroute2 forks to enter a namespace and
  stops that child with SIGTERM; a child forked from ``cluster up`` carries its signal
  wake-up descriptor, so the child's SIGTERM reached ``cluster up`` as its own and stopped
  the cluster it was starting. pyroute2's synchronous API also runs an asyncio loop of its
  own, which cannot run inside ``cluster up``'s, and a fork beside gRPC's threads is
  unsafe: one small process avoids all three.
- **Removal** deletes the host veth ends first (each takes its pair along), then the
  namespaces, then the bridge: a namespace's own veth outlives its ``remove`` for a
  moment, and a veth deleted first never does.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import importlib.util
import ipaddress
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from roleserve_core.errors import RoleserveError

__all__ = [
    "NETNS_RANGE",
    "PEER_NAME",
    "Leftovers",
    "NetnsError",
    "NetnsPlan",
    "create",
    "in_namespace",
    "leftovers",
    "main",
    "neighbour_entries",
    "neighbour_shortage",
    "network_down",
    "network_up",
    "owner",
    "remove",
    "subnet_for",
    "unsupported",
]

NETNS_RANGE = ipaddress.IPv4Network("198.18.0.0/15")
"""Where ``--netns`` clusters take their addresses: RFC 2544's network-testing range."""
PREFIX = "rsnet"
PEER_NAME = "eth0"
"""The name of each node's veth end inside its namespace."""
HOST_OFFSET = 1
NODE_OFFSET = 10
"""Node ``i`` holds the subnet's address ``NODE_OFFSET + i``."""
MAX_NODES = 254 - NODE_OFFSET
EXTRA = "roleserve-core[netns]"
NETNS_DIR = Path("/var/run/netns")
"""Where a named network namespace is mounted (iproute2's, and pyroute2's, place)."""
NEIGHBOUR_LIMIT = Path("/proc/sys/net/ipv4/neigh/default/gc_thresh3")
"""The most IPv4 neighbour (ARP) entries the kernel keeps, for all namespaces together."""


class NetnsError(RoleserveError):
    """The network of a ``--netns`` cluster cannot be made, or cannot be here at all."""


@dataclass(frozen=True)
class NetnsPlan:
    """The names and addresses of a ``--netns`` cluster of ``size`` nodes in ``subnet``
    (a /24 of ``NETNS_RANGE``)."""

    subnet: ipaddress.IPv4Network
    size: int

    def __post_init__(self) -> None:
        if self.subnet.prefixlen != 24 or not self.subnet.subnet_of(NETNS_RANGE):
            raise ValueError(f"{self.subnet} is not a /24 of {NETNS_RANGE}")
        if not 1 <= self.size <= MAX_NODES:
            raise ValueError(f"a --netns cluster has 1 to {MAX_NODES} nodes, not {self.size}")

    @classmethod
    def from_first_address(cls, first: ipaddress.IPv4Address, size: int) -> NetnsPlan:
        """The plan whose node 1 is ``first``.

        :raises ValueError: if ``first`` is not node 1's address of a /24 of the range.
        """
        subnet = ipaddress.IPv4Network(f"{first}/24", strict=False)
        plan = cls(subnet, size)
        if plan.address(1) != first:
            raise ValueError(f"{first} is not node 1's address of {subnet} (that is .11)")
        return plan

    @property
    def key(self) -> int:
        """The cluster's short ID: the subnet's place among the /24s of the range."""
        return (int(self.subnet.network_address) - int(NETNS_RANGE.network_address)) >> 8

    @property
    def prefix(self) -> str:
        """What every name of this cluster's namespaces and veths starts with."""
        return f"{PREFIX}{self.key}-"

    @property
    def bridge(self) -> str:
        return f"{PREFIX}{self.key}"

    @property
    def host_address(self) -> ipaddress.IPv4Address:
        """The bridge's address: the host's on this network, and each node's gateway."""
        return self.subnet[HOST_OFFSET]

    def address(self, index: int) -> ipaddress.IPv4Address:
        """Node ``index``'s (1-based) address."""
        return self.subnet[NODE_OFFSET + index]

    def namespace(self, index: int) -> str:
        return f"{self.prefix}n{index}"

    def veth(self, index: int) -> str:
        """The host end of node ``index``'s veth pair."""
        return f"{self.prefix}{index}"

    def wireguard_interface(self, index: int) -> str:
        """Node ``index``'s clusternet interface (``[plugins.clusternet] interface``): its
        own name, since wireguard-go's sockets share one directory across namespaces."""
        return f"{PREFIX}{self.key}w{index}"


def in_namespace(namespace: str, argv: Sequence[str]) -> list[str]:
    """The command that runs ``argv`` in the network namespace ``namespace``, and in
    every other namespace of this process (its mounts: see the module docstring)."""
    return ["nsenter", f"--net={NETNS_DIR / namespace}", "--", *argv]


def subnet_for(directory: Path) -> ipaddress.IPv4Network:
    """The /24 of ``NETNS_RANGE`` a new cluster in ``directory`` takes (by its path's hash)."""
    digest = hashlib.sha256(str(directory.absolute()).encode()).digest()
    count = NETNS_RANGE.num_addresses >> 8
    key = int.from_bytes(digest[:4], "big") % count
    return ipaddress.IPv4Network((int(NETNS_RANGE.network_address) + (key << 8), 24))


def unsupported() -> str | None:
    """Why ``--netns`` cannot run here, in one line; None if it can."""
    if os.geteuid() != 0:
        return "--netns needs root: it creates network namespaces"
    if not Path("/proc/self/ns/net").exists():
        return "--netns needs network namespaces, and this kernel has none (no /proc/self/ns/net)"
    if shutil.which("nsenter") is None:
        return (
            "--netns needs util-linux's `nsenter` to run nodes in namespaces "
            "(apt-get install util-linux)"
        )
    if importlib.util.find_spec("pyroute2") is None:
        return f"--netns needs pyroute2: install {EXTRA}"
    return None


def neighbour_entries(size: int) -> int:
    """The ARP entries a cluster of ``size`` nodes in namespaces may hold at once: each
    namespace one for the host and one for every other node (the WireGuard mesh reaches
    every node), and the host one for every node."""
    return size * size + size


def neighbour_shortage(size: int, limit_file: Path | None = None) -> str | None:
    """Why the kernel's ARP table is too small for ``size`` nodes in namespaces, in one
    line with the command that makes it large enough; None if it is large enough.

    The table is one for every namespace: at 100 nodes (10,100 entries against the default
    1,024) the kernel logged "neighbor table overflow", and connections between some nodes
    timed out: six nodes went without a leader for minutes after it changed."""
    needed = neighbour_entries(size)
    limit_file = limit_file or NEIGHBOUR_LIMIT
    try:
        limit = int(limit_file.read_text())
    except (OSError, ValueError):
        return None  # no such setting here: nothing known to check against
    if needed <= limit:
        return None
    return (
        f"{size} nodes in network namespaces need up to {needed} ARP entries, and the kernel "
        f"keeps at most {limit} for all namespaces ({limit_file}): some nodes would not "
        f"reach others. Raise it: sysctl -w net.ipv4.neigh.default.gc_thresh3={2 * needed} "
        f"net.ipv4.neigh.default.gc_thresh2={needed}"
    )


@dataclass(frozen=True)
class Leftovers:
    """What of a plan's network exists: namespaces and host links, by name."""

    namespaces: tuple[str, ...]
    links: tuple[str, ...]

    def __bool__(self) -> bool:
        return bool(self.namespaces or self.links)

    def __str__(self) -> str:
        return ", ".join([*self.namespaces, *self.links])


def leftovers(plan: NetnsPlan) -> Leftovers:
    """The namespaces and host links of ``plan``'s cluster that exist (of any size)."""
    from pyroute2 import IPRoute, netns

    namespaces = sorted(name for name in netns.listnetns() if name.startswith(plan.prefix))
    with IPRoute() as ipr:
        links = sorted(
            name
            for link in ipr.get_links()
            if (name := link.get("ifname")) == plan.bridge or name.startswith(plan.prefix)
        )
    return Leftovers(tuple(namespaces), tuple(links))


def owner(plan: NetnsPlan) -> str | None:
    """The directory of the cluster whose bridge ``plan.bridge`` is (its alias); None if
    there is no such bridge."""
    from pyroute2 import IPRoute

    with IPRoute() as ipr:
        found = ipr.link_lookup(ifname=plan.bridge)
        if not found:
            return None
        alias: str | None = ipr.get_links(found[0])[0].get("ifalias")
        return alias or ""


def create(plan: NetnsPlan, directory: Path) -> None:
    """Make whatever of ``plan``'s network is missing (bridge, namespaces, veth pairs,
    addresses, routes); what exists stays, so a cluster that grows keeps its running nodes'
    links.

    :raises NetnsError: if the bridge is another cluster's, or another interface of the
        host holds an address of the subnet.
    """
    from pyroute2 import IPRoute, NetNS, netns

    mine = str(directory.absolute())
    holder = owner(plan)
    if holder not in (None, mine):
        if holder and Path(holder).exists():
            hint = f"stop it (`cluster down --dir {holder}`), or use another --dir"
        else:  # its directory is gone: `cluster down` cannot find it any more
            hint = (
                f"its directory is gone: remove its network with `ip link del {plan.bridge}` "
                f"and `ip netns del` of each namespace `ip netns list` shows as "
                f"{plan.prefix}n<i>, or use another --dir"
            )
        raise NetnsError(
            f"{plan.subnet} is taken by the cluster in {holder or '?'} "
            f"(bridge {plan.bridge}); {hint}"
        )
    with IPRoute() as ipr:
        _refuse_taken_subnet(ipr, plan)
        if not ipr.link_lookup(ifname=plan.bridge):
            ipr.link("add", ifname=plan.bridge, kind="bridge")
        bridge = ipr.link_lookup(ifname=plan.bridge)[0]
        ipr.link("set", index=bridge, IFLA_IFALIAS=mine)
        _ensure_address(ipr, bridge, plan.host_address)
        ipr.link("set", index=bridge, state="up")
        existing = set(netns.listnetns())
        for index in range(1, plan.size + 1):
            namespace = plan.namespace(index)
            if namespace not in existing:
                netns.create(namespace)
            if not ipr.link_lookup(ifname=plan.veth(index)):
                ipr.link(
                    "add",
                    ifname=plan.veth(index),
                    kind="veth",
                    peer={"ifname": PEER_NAME, "net_ns_fd": namespace},
                )
            veth = ipr.link_lookup(ifname=plan.veth(index))[0]
            ipr.link("set", index=veth, master=bridge, state="up")
            with NetNS(namespace) as inside:
                _configure_inside(inside, plan, index)


def remove(plan: NetnsPlan) -> Leftovers:
    """Remove every namespace and host link of ``plan``'s cluster (of any size); what
    was removed."""
    from pyroute2 import IPRoute, netns

    found = leftovers(plan)
    with IPRoute() as ipr:
        bridge = [name for name in found.links if name == plan.bridge]
        for name in [*(name for name in found.links if name != plan.bridge), *bridge]:
            for index in ipr.link_lookup(ifname=name):
                _ignore_gone(functools.partial(ipr.link, "del", index=index))
    for namespace in found.namespaces:
        _ignore_gone(functools.partial(netns.remove, namespace))
    return found


def _configure_inside(inside: Any, plan: NetnsPlan, index: int) -> None:
    """``lo`` up, ``eth0`` with the node's address and up, the default route via the
    bridge."""
    inside.link("set", index=inside.link_lookup(ifname="lo")[0], state="up")
    peer = inside.link_lookup(ifname=PEER_NAME)[0]
    _ensure_address(inside, peer, plan.address(index))
    inside.link("set", index=peer, state="up")
    routes = inside.get_routes(family=2, dst_len=0, table=254)
    if not routes:
        inside.route("add", dst="0.0.0.0/0", gateway=str(plan.host_address))


def _ensure_address(ipr: Any, index: int, address: ipaddress.IPv4Address) -> None:
    held = {entry.get("address") for entry in ipr.get_addr(index=index, family=2)}
    if str(address) not in held:
        ipr.addr("add", index=index, address=str(address), prefixlen=24)


def _refuse_taken_subnet(ipr: Any, plan: NetnsPlan) -> None:
    """Refuse a subnet that an interface of the host other than the bridge has an
    address in: the host's routes to it would be ambiguous."""
    names = {link["index"]: link.get("ifname") for link in ipr.get_links()}
    for entry in ipr.get_addr(family=2):
        name = names.get(entry["index"])
        address = ipaddress.IPv4Address(entry.get("address"))
        if address in plan.subnet and name != plan.bridge:
            raise NetnsError(
                f"{plan.subnet} is in use on this host ({address} on {name}); use another --dir"
            )


def _ignore_gone(action: Callable[[], object]) -> None:
    """Run ``action``; a link or namespace that is gone already (ENOENT, ENODEV) is fine."""
    from pyroute2 import NetlinkError

    try:
        action()
    except NetlinkError as exc:
        if exc.code not in (2, 19):
            raise
    except FileNotFoundError:
        pass


# -- what cluster up and down call (in a process of its own: see the module docstring) ----


async def network_up(plan: NetnsPlan, directory: Path, *, clean: bool) -> str | None:
    """Make ``plan``'s network for the cluster in ``directory`` (absolute), first
    removing what of it exists if ``clean`` (no node runs: a killed run's leftovers) and it
    is not another cluster's; a line saying what was removed, if anything.

    :raises NetnsError: with the reason, if it cannot be made.
    """
    answer = await _run("up", plan, directory, *(["--clean"] if clean else []))
    removed = answer.get("removed")
    return f"removing what a killed run left: {removed}" if removed else None


async def network_down(plan: NetnsPlan, directory: Path) -> str | None:
    """Remove ``plan``'s network unless it is another cluster's; a line saying what was
    removed or left, if anything."""
    answer = await _run("down", plan, directory)
    if answer.get("holder"):
        return f"{plan.bridge} is the cluster's in {answer['holder']}; left as it is"
    removed = answer.get("removed")
    return f"removed the network: {removed}" if removed else None


async def _run(command: str, plan: NetnsPlan, directory: Path, *flags: str) -> dict[str, str]:
    import anyio

    argv = [sys.executable, "-m", __name__, command, str(plan.subnet), str(plan.size)]
    done = await anyio.run_process(
        [*argv, str(directory), *flags], check=False, stdin=subprocess.DEVNULL
    )
    if done.returncode != 0:
        lines = done.stderr.decode(errors="replace").strip().splitlines()
        raise NetnsError(lines[-1] if lines else f"{' '.join(argv)} failed ({done.returncode})")
    answer: dict[str, str] = json.loads(done.stdout)
    return answer


def _up(plan: NetnsPlan, directory: Path, clean: bool) -> dict[str, str]:
    answer = {}
    if clean and leftovers(plan) and owner(plan) in (None, str(directory)):
        answer["removed"] = str(remove(plan))
    create(plan, directory)
    return answer


def _down(plan: NetnsPlan, directory: Path) -> dict[str, str]:
    holder = owner(plan)
    if holder not in (None, str(directory)):
        return {"holder": holder or "?"}
    return {"removed": str(remove(plan))}


def main(argv: Sequence[str]) -> int:
    """``python -m roleserve_core.localcluster.netns up|down SUBNET SIZE DIRECTORY
    [--clean]``: what ``network_up`` and ``network_down`` run. Prints a JSON object;
    a failure is one line on stderr and status 1."""
    parser = argparse.ArgumentParser(prog=f"python -m {__name__}")
    parser.add_argument("command", choices=["up", "down"])
    parser.add_argument("subnet", type=ipaddress.IPv4Network)
    parser.add_argument("size", type=int)
    parser.add_argument("directory", type=Path)
    parser.add_argument("--clean", action="store_true")
    args = parser.parse_args(argv)
    plan = NetnsPlan(args.subnet, args.size)
    try:
        if args.command == "up":
            answer = _up(plan, args.directory, args.clean)
        else:
            answer = _down(plan, args.directory)
    except NetnsError as exc:
        print(exc, file=sys.stderr)
        return 1
    except Exception as exc:  # the caller shows one line: say what failed
        # A netlink refusal (NetlinkError: no CAP_NET_ADMIN in a container, say) or a
        # namespace the kernel cannot make (OSError from unshare or mount).
        done = "make" if args.command == "up" else "remove"
        print(f"cannot {done} the network of {plan.subnet}: {exc!r}", file=sys.stderr)
        return 1
    print(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
