"""Each local cluster's cluster network: one that no other local cluster of this machine has.

The cluster network is where the curator takes each node's prefix from (the kubernetes
plugin gives a node's pods the upper half of it); it is set once, when node 1 bootstraps,
from its ``[plugins.controlplane] cluster_network``. Every local cluster used to take the
default, 10.192.0.0/11, so two loopback clusters put the same pod prefixes on the host's one
network (10.192.0.128/25, node 1's, on both clusters' pod bridges): one cluster's pods were
unreachable, the other's shadowed. ``up`` now gives each new cluster a network of its own::

    D/cluster-network          the cluster's network (CIDR): written by its first up,
                               read by every later one (the curator holds it from then on)
    <runtime root>/clusters/   this machine's local clusters (rundir.runtime_root:
    ├── <key>                  /run/roleserve for root), one file each, holding the
    │                          cluster's directory D (key: rundir.runtime_key(D))
    └── lock                   flock'd by the up that decides

    up of D, holding the lock, before it starts anything:
      node 1 bootstrapped   the network D records (one made before the record: node 1's
                            cluster_network setting, else 10.192.0.0/11; recorded now)
                            ── refused if it overlaps the network of a cluster that runs
      new, a network given  --cluster-network, or node 1's cluster_network setting
                            ── refused if it overlaps the network of any recorded cluster
      new, none given       D's own record, from an earlier up that did not finish, if
                            still free; else the first free /16 of POOL, searched from
                            D's own place in it (``start_for``); free: overlaps no recorded
                            cluster's network and no route of the host ── none: refused
      then: D in the machine's record, its network in D/cluster-network; up writes it
      into node 1's [plugins.controlplane] (and each --netns node's [plugins.clusternet],
      whose mesh routes it: nodeconfig)

Decisions:

- **What the machine records** is directories, not networks: each cluster's network is read
  from its own ``D/cluster-network`` whenever it is needed, so the two never disagree. A
  record whose directory records no network (removed, or never got that far) is dropped.
  A stopped cluster keeps its network (``up`` brings it back with the same one; the
  curator could not take another); removing its directory gives it back.
- **Where**: under the runtime root, beside the runtime directories of the user's nodes,
  one place for the whole machine whatever the clusters' directories. Root's clusters share
  ``/run/roleserve``; they are the ones whose pods get bridges on the host (CNI's bridge
  needs root). A reboot empties ``/run``; each cluster's next ``up`` records it again from
  ``D/cluster-network``.
- **The pool**: the 32 /16s of 10.128.0.0/11. Not the default network: clusters made before
  this took all of 10.192.0.0/11, and their nodes hold its first prefixes (each node the
  lowest free one); they are in no record until their next ``up``, and a new cluster never
  lands on them. Not the Service range, 10.224.0.0/16. A /16 holds 256 node prefixes of the
  default /24, more than the ``layout.MAX_SIZE`` nodes of a local cluster. A route of the
  host (a LAN or VPN of 10.0.0.0/8) takes the /16s it overlaps out of the choice.
- **Each search starts at the directory's own /16** (the hash of its path, as
  ``netns.subnet_for``), not at the first: after a reboot emptied the record, a new cluster
  made before an older, stopped one's ``up`` rarely lands on that one's network; if it
  does, the second of them to run is refused, naming the first.
- **Overlap is a collision, whatever the clusters' modes.** Loopback nodes' pod bridges
  share the host's network; ``--netns`` nodes' do not, but a node in a namespace reaches
  the host through its bridge, and one rule keeps every pod address of the machine one
  cluster's.
- **Refusals are one line**, naming the other cluster's directory and what to do, before
  anything starts: ``--cluster-network`` for a network of the operator's choice, ``cluster
  down --dir`` for a cluster in the way. A cluster made before this, on the default
  network, is refused only while another such one runs (new ones are never in its way).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import ipaddress
import os
import socket
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from roleserve_core.errors import RoleserveError
from roleserve_core.files import write_atomically
from roleserve_core.rundir import KEY_LENGTH, make_runtime_dir, runtime_key, runtime_root

__all__ = [
    "CLUSTER_NETWORK_FILE",
    "DEFAULT_NETWORK",
    "NETWORK_PREFIX_LENGTH",
    "POOL",
    "RECORD_DIRECTORY",
    "ClusterRecords",
    "LocalNetworkError",
    "Wanted",
    "free_network",
    "host_routes",
    "network_value",
    "saved_network",
    "start_for",
]

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

POOL = ipaddress.IPv4Network("10.128.0.0/11")
"""Where a new local cluster's network comes from (module docstring)."""
NETWORK_PREFIX_LENGTH = 16
"""A new local cluster's network is a /16 of ``POOL``."""
DEFAULT_NETWORK = ipaddress.IPv4Network("10.192.0.0/11")
"""The controlplane's default cluster network: what a cluster made before this has, unless
its node 1's ``roleserve.toml`` set another."""
CLUSTER_NETWORK_FILE = "cluster-network"
"""In the cluster's directory: its cluster network."""
RECORD_DIRECTORY = "clusters"
"""Under the runtime root: this machine's local clusters."""
LOCK_FILE = "lock"
"""In ``RECORD_DIRECTORY``: held while an ``up`` decides."""
ROUTES = Path("/proc/net/route")
"""The host's IPv4 routes (the kernel's main table)."""


class LocalNetworkError(RoleserveError):
    """A local cluster's cluster network is another's, or none is free; one line saying
    which cluster is in the way and what to do."""


def network_value(text: str) -> IPNetwork:
    """A cluster network as ``--cluster-network`` and the controlplane take one: a private
    network in canonical CIDR form (the controlplane's own check, which the core cannot
    import).

    :raises ValueError: saying in one line what is wrong.
    """
    try:
        network = ipaddress.ip_network(text, strict=True)
    except ValueError:
        raise ValueError(f"{text!r} is not a network in CIDR form (e.g. 10.128.0.0/16)") from None
    if str(network) != text:
        raise ValueError(f"{text!r} is not in canonical form ({network})")
    if not network.is_private or network.is_loopback or network.is_link_local:
        raise ValueError(
            f"{text} is not a private network "
            "(use one of 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, fc00::/7)"
        )
    return network


def saved_network(directory: Path) -> IPNetwork | None:
    """The cluster network the cluster in ``directory`` records; None if it records none.

    :raises LocalNetworkError: if the file holds no network.
    """
    path = directory / CLUSTER_NETWORK_FILE
    try:
        text = path.read_text().strip()
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        return ipaddress.ip_network(text)
    except ValueError:
        raise LocalNetworkError(f"{path} holds {text!r}, not a network in CIDR form") from None


def start_for(directory: Path) -> int:
    """The place of ``directory`` among the /16s of ``POOL``: where its search starts."""
    count = 1 << (NETWORK_PREFIX_LENGTH - POOL.prefixlen)
    digest = hashlib.sha256(os.fsencode(directory.absolute())).digest()
    return int.from_bytes(digest[:4], "big") % count


def free_network(
    taken: list[IPNetwork], *, start: int = 0, preferred: IPNetwork | None = None
) -> IPNetwork | None:
    """``preferred`` if it overlaps none of ``taken``; else the first /16 of ``POOL`` from
    the ``start``-th on (after the last, the first) that overlaps none of them; None if
    every one does."""
    if preferred is not None and _clear(preferred, taken):
        return preferred
    candidates = list(POOL.subnets(new_prefix=NETWORK_PREFIX_LENGTH))
    start %= len(candidates)
    for candidate in candidates[start:] + candidates[:start]:
        if _clear(candidate, taken):
            return candidate
    return None


def _clear(network: IPNetwork, taken: list[IPNetwork]) -> bool:
    return not any(_overlap(network, other) for other in taken)


def _overlap(one: IPNetwork, other: IPNetwork) -> bool:
    return one.version == other.version and one.overlaps(other)


def host_routes(path: Path = ROUTES) -> list[IPNetwork]:
    """The networks the host routes somewhere (its LANs, VPNs, pod bridges), from the
    kernel's main IPv4 table; the default route is none of them (it covers everything)."""
    try:
        lines = path.read_text().splitlines()[1:]
    except OSError:
        return []
    routes: list[IPNetwork] = []
    for line in lines:
        fields = line.split()
        if len(fields) < 8:
            continue
        try:
            destination, mask = (_address(fields[1]), _address(fields[7]))
            network = ipaddress.IPv4Network(f"{destination}/{mask}", strict=False)
        except ValueError:
            continue
        if network.prefixlen:
            routes.append(network)
    return routes


def _address(field: str) -> str:
    """An address of ``/proc/net/route``: 8 hex digits, in the host's byte order."""
    return socket.inet_ntoa(struct.pack("=I", int(field, 16)))


@dataclass(frozen=True)
class Wanted:
    """What ``up`` of a directory asks ``ClusterRecords.claim`` for."""

    network: IPNetwork | None
    """A network that must be this one: the cluster's own once node 1 bootstrapped, or the
    operator's (``--cluster-network``, the setting); None: any free one."""
    bootstrapped: bool = False
    """Whether node 1 bootstrapped the cluster with ``network`` already: only a cluster
    that runs is in its way then (the network cannot change any more)."""
    given_by: str = "--cluster-network"
    """Where the operator gave ``network``, for a refusal."""
    preferred: IPNetwork | None = None
    """What the directory recorded before node 1 bootstrapped: kept if still free."""


class ClusterRecords:
    """This machine's record of its local clusters (module docstring).

    :param root: the record's directory; ``RECORD_DIRECTORY`` under the runtime root by
        default.
    :param routes: the host's routes, for the choice of a free network (``host_routes``).
    """

    def __init__(
        self, root: Path | None = None, *, routes: Callable[[], list[IPNetwork]] = host_routes
    ) -> None:
        self.root = root if root is not None else runtime_root() / RECORD_DIRECTORY
        self.routes = routes

    def clusters(self, directory: Path | None = None) -> list[tuple[Path, IPNetwork]]:
        """Every recorded cluster but the one in ``directory``, with its network, in the
        order of its record's name; the records whose directory records no network (it is
        gone) are dropped.

        :raises LocalNetworkError: if a cluster's ``D/cluster-network`` holds no network.
        """
        mine = runtime_key(directory) if directory is not None else None
        found = []
        for entry in sorted(self.root.glob("[0-9a-f]" * KEY_LENGTH)):
            try:
                other = Path(entry.read_text())
            except (OSError, UnicodeDecodeError):  # removed meanwhile, or not ours
                continue
            if entry.name == mine:
                continue
            network = saved_network(other)
            if network is None:
                entry.unlink(missing_ok=True)
                continue
            found.append((other, network))
        return found

    def claim(self, directory: Path, wanted: Wanted, *, runs: Callable[[Path], bool]) -> IPNetwork:
        """The network of the cluster in ``directory`` (see the module docstring), recorded
        in it and in the machine's record. Blocks while another ``up`` decides (briefly).

        :param runs: whether a node of the cluster in a directory runs.
        :raises LocalNetworkError: in one line, if another cluster is in the way or no
            network is free.
        """
        directory = directory.absolute()
        with self._locked():
            others = self.clusters(directory)
            network = self._decide(directory, wanted, others, runs)
            directory.mkdir(parents=True, exist_ok=True)
            if saved_network(directory) != network:
                write_atomically(directory / CLUSTER_NETWORK_FILE, f"{network}\n".encode())
            entry = self.root / runtime_key(directory)
            if not entry.exists() or entry.read_text() != str(directory):
                write_atomically(entry, str(directory).encode())
        return network

    def _decide(
        self,
        directory: Path,
        wanted: Wanted,
        others: list[tuple[Path, IPNetwork]],
        runs: Callable[[Path], bool],
    ) -> IPNetwork:
        if wanted.network is not None and wanted.bootstrapped:
            for other, network in others:
                if _overlap(wanted.network, network) and runs(other):
                    raise LocalNetworkError(
                        f"the cluster in {directory} has the cluster network "
                        f"{wanted.network}, which overlaps {network}, the network of the "
                        f"cluster in {other}, which runs: their pods would take the same "
                        f"addresses; stop that one first (`cluster down --dir {other}`), "
                        "or make this one anew in another --dir (a new cluster gets a "
                        "network of its own)"
                    )
            return wanted.network
        if wanted.network is not None:
            for other, network in others:
                if _overlap(wanted.network, network):
                    state = "runs" if runs(other) else "is stopped, and keeps its network"
                    raise LocalNetworkError(
                        f"{wanted.given_by} {wanted.network} overlaps {network}, the "
                        f"network of the local cluster in {other}, which {state}; give "
                        "--cluster-network a network no other local cluster has, or none "
                        "(up then takes a free one)"
                    )
            return wanted.network
        taken = [network for _, network in others]
        chosen = free_network(
            taken + self.routes(), start=start_for(directory), preferred=wanted.preferred
        )
        if chosen is None:
            count = len(others)
            clusters = (
                f"the networks of {count} local cluster{'' if count == 1 else 's'} of this "
                f"machine (one in {others[0][0]}) and "
                if others
                else ""
            )
            raise LocalNetworkError(
                f"no /{NETWORK_PREFIX_LENGTH} of {POOL} is free for a new cluster: "
                f"{clusters}the host's routes take them all; give --cluster-network a "
                "private network no other cluster has, or remove a cluster you no longer "
                "need (`cluster down --dir D`, then its directory D)"
            )
        return chosen

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """The record's lock, held for the block (made with the record if missing)."""
        root = make_runtime_dir(self.root)
        descriptor = os.open(root / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX)
            yield
        finally:
            os.close(descriptor)
