"""A cluster of node processes on this machine, for trying roleserve and testing plugins.

::

    D/
    ├── first-address   node 1's address (127.0.0.11 unless chosen); node i has the i-th;
    │                   one in 198.18.0.0/15 makes it a --netns cluster (netns.py)
    ├── cluster-network the cluster network it bootstraps with, no other local cluster's
    │                   (clusternetwork.py, with the machine's record of its clusters)
    ├── owner/          the owner's access directory (written by node 1's bootstrap)
    ├── up.lock         held by the `cluster up` at work on it (``lock``): one at a time
    ├── down            when `cluster down` last ran (a foreground up then ends)
    ├── n1/ … nN/       each node's data directory, log (node.log), PID (node.pid) and
    │                   hosts file (hosts, when the hostsfile plugin is installed)

    up():   first: the cluster's network, its own on this machine (clusternetwork: a new
            cluster takes a free one; refused in one line when another cluster is in the way)
            before each start: the node's roleserve.toml given its own hosts file
            (nodeconfig: [plugins.hostsfile] path = "n<i>/hosts"); node 1's, the cluster
            network too ([plugins.controlplane] cluster_network)
            every enrolled node that is not running: started (it rejoins without flags);
            node 1 of a new cluster: --bootstrap                        127.0.0.11
            wait for the leader (only now: the members need each other for a quorum)
            nodes not enrolled yet: registered ($ROLESERVE_REGISTER_TICKET, never in argv)
            with --join-address node 1, approved, waited for until UP   127.0.0.12, …
            alongside: roles (layout.default_roles, kubernetes_worker on the first K:
            workers_for_up), each node's once it is UP: only those a node lacks, none taken
            away; consensus members one at a time (each joins etcd as a learner and is
            promoted), the others alongside them
            wait until every node is UP and HEALTHY
            each plugin extension's settle (cluster_extension: e.g. every kubernetes_worker's
            Kubernetes Node Ready); only then "the cluster is up"
    down(): SIGTERM every node, wait for each to stop (SIGKILL after a while); the
            command first writes D/down (record_down), which ends a foreground up

    --netns (``netns``): up first makes the namespaces, veths and bridge (removing those
    a killed run left, with one line, when no node runs) and starts each node in its
    namespace; down removes them all once the nodes have stopped.

Every node listens on its own loopback address with the standard ports, as real nodes do
on their own IPs. ``up`` on a directory that holds a cluster starts those of its nodes that
are not running and enrols any it lacks, so ``cluster down`` then ``cluster up`` brings the
same cluster back. The cluster's size is what the directory holds (``size_for_up``): ``up``
grows a cluster, never shrinks one (a node leaves through ``ctl decommission``). Progress
goes to a callback, one line per step.
"""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import signal
import stat
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import anyio
import grpc

from roleserve_core.access import ClusterAccess
from roleserve_core.cluster_extension import (
    ClusterExtension,
    ClusterMember,
    ClusterView,
    RunnableSeen,
)
from roleserve_core.connection import NoLeaderError
from roleserve_core.enrolment import RegisterTicket
from roleserve_core.environment import REGISTER_TICKET_ENV
from roleserve_core.errors import RoleserveError
from roleserve_core.files import write_atomically
from roleserve_core.identity import certificate_from_pem
from roleserve_core.localcluster import netns as _netns
from roleserve_core.localcluster.clusternetwork import (
    CLUSTER_NETWORK_FILE,
    DEFAULT_NETWORK,
    ClusterRecords,
    IPNetwork,
    Wanted,
    network_value,
    saved_network,
)
from roleserve_core.localcluster.layout import (
    ALL_WORKERS,
    DEFAULT_KUBERNETES_WORKERS,
    DEFAULT_SIZE,
    DOWN_FILE,
    FIRST_ADDRESS,
    FIRST_ADDRESS_FILE,
    OWNER_DIRECTORY,
    default_kubernetes_workers,
    default_roles,
)
from roleserve_core.localcluster.management import LeaderManagement
from roleserve_core.localcluster.nodeconfig import (
    CLUSTERNET_INTERFACE,
    CLUSTERNET_NETWORK,
    CLUSTERNET_OFF,
    CONTROLPLANE_NETWORK,
    HOSTS_FILE,
    HOSTS_PATH,
    LOOPBACK_MESH_OFF,
    NodeSetting,
    configured,
    configured_in,
    operators_value,
    setting_accepted,
    with_setting,
    without_setting,
)
from roleserve_core.localcluster.process import LocalNode
from roleserve_core.localcluster.recovery import (
    growth_message,
    leaderless_message,
    quorum_said,
    stop_started,
)
from roleserve_core.ports import NODE_MANAGEMENT_PORT, endpoint
from roleserve_core.proto import (
    common_pb2,
    management_pb2,
    nodemanagement_pb2,
    nodemanagement_pb2_grpc,
)
from roleserve_core.roles import roles_from_proto
from roleserve_core.rpc import secure_channel

__all__ = [
    "DEFAULT_SIZE",
    "FIRST_ADDRESS",
    "KubernetesWorkers",
    "LocalCluster",
    "LocalClusterError",
    "held_nodes",
    "running",
    "saved_first_address",
    "size_for_up",
    "workers_for_up",
]

STEP_TIMEOUT = 120.0
"""Seconds one step (a node enrolling, a member joining etcd) may take."""
POLL = 0.25
ROLE_CHANGES_AT_ONCE = 16
"""Role changes ``cluster up`` has in flight together (each one ``UpdateNodeRoles``)."""
WORKER_ROLE = "kubernetes_worker"
RUNNABLE_PATIENCE = 5.0
"""Seconds a node may take to show a runnable of its tree to an extension."""

Progress = Callable[[str], None]
KubernetesWorkers = int | Literal["all"] | None
"""``--kubernetes-workers``: a count, ``"all"``, or None for the default
(``layout.default_kubernetes_workers``)."""
Management = LeaderManagement


class LocalClusterError(RoleserveError):
    """A step of the local cluster failed; the message points at the node's log."""


def saved_first_address(directory: Path) -> ipaddress.IPv4Address | None:
    """Node 1's address as the cluster in ``directory`` recorded it; None before its first
    ``up`` (and for clusters made before the file existed, which used ``FIRST_ADDRESS``).

    :raises LocalClusterError: if the file does not hold an IPv4 address.
    """
    path = directory / FIRST_ADDRESS_FILE
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        return None
    try:
        return ipaddress.IPv4Address(text)
    except ValueError:
        raise LocalClusterError(f"{path} holds {text!r}, not an IPv4 address") from None


def held_nodes(directory: Path) -> int:
    """How many nodes the cluster in ``directory`` has: the highest ``i`` of its ``n<i>``
    directories (a gap, such as a directory removed by hand, is a node to enrol again)."""
    indexes = [
        int(path.name[1:])
        for path in directory.glob("n[0-9]*")
        if path.name[1:].isdigit() and path.is_dir()
    ]
    return max(indexes, default=0)


def running(directory: Path) -> bool:
    """Whether a node of the local cluster in ``directory`` runs (its ``node.pid``)."""
    return any(
        LocalNode(index, FIRST_ADDRESS, directory / f"n{index}").pid is not None
        for index in range(1, held_nodes(directory) + 1)
    )


def size_for_up(directory: Path, asked: int | None) -> int:
    """The size ``up`` brings the cluster in ``directory`` to: what it holds, ``asked``
    (``--nodes``) if that is larger, and ``DEFAULT_SIZE`` for a new one.

    :raises LocalClusterError: if ``asked`` is smaller than what it holds. Stopping the
        extra nodes would not remove them from the cluster (its curator and etcd still
        count them), so shrinking is ``ctl decommission``, not ``up``.
    """
    held = held_nodes(directory)
    if asked is None:
        return held or DEFAULT_SIZE
    if asked < held:
        raise LocalClusterError(
            f"the cluster in {directory} has {held} nodes, and `cluster up` does not shrink "
            f"it: run it without --nodes (or with --nodes {held} or more); a node leaves "
            "through `ctl decommission`"
        )
    return asked


def workers_for_up(asked: KubernetesWorkers, size: int) -> int:
    """How many of ``size`` nodes ``up`` gives ``kubernetes_worker`` (the first by index):
    ``asked`` (``--kubernetes-workers``), every node for ``"all"``, and
    ``default_kubernetes_workers`` when not asked.

    :raises LocalClusterError: if ``asked`` is more than ``size``: a count that cannot be
        met is a mistake to say, not to round down quietly.
    """
    if asked is None:
        return default_kubernetes_workers(size)
    if isinstance(asked, str):  # ALL_WORKERS, the one string the type allows
        return size
    if asked < 0:
        raise ValueError(f"{asked} Kubernetes workers")
    if asked > size:
        raise LocalClusterError(
            f"--kubernetes-workers {asked} is more than the cluster's {size} "
            f"node{'' if size == 1 else 's'}: give {size} or fewer, or all"
        )
    return asked


def _quiet(_: str) -> None:
    """The default progress callback: says nothing."""


class LocalCluster:
    """``size`` node processes in ``directory`` (see the module docstring).

    :param first_address: node 1's address; by default the one ``directory`` recorded,
        else ``FIRST_ADDRESS``. A different one than recorded is refused.
    :param netns: each node in a network namespace of its own (``netns``), at an address
        of the /24 of ``netns.NETNS_RANGE`` the directory hashes to. None follows what the
        directory recorded (``down``, ``status``); True or False that differs from it is
        refused: ``up`` does what its flag says or nothing, rather than quietly switching
        a cluster's network (and needing root) behind the operator's back.
    :param config: the ``roleserve.toml`` text of nodes created by this cluster.
    :param extensions: what plugins add (``cluster_extension``): ``up`` waits for each one's
        ``settle`` before it says the cluster is up.
    :param kubernetes_workers: how many nodes ``up`` gives ``kubernetes_worker``
        (``workers_for_up``; by default every node up to ``DEFAULT_KUBERNETES_WORKERS``).
    :param accepts: whether a node would accept a setting ``up`` gives each node a value
        of its own for (``nodeconfig``: the hosts file's path; with --netns, the clusternet
        interface; on loopback, why the mesh is off); by default, whether its plugin is
        installed and declares it.
    :param cluster_network: the cluster network a new cluster bootstraps with
        (``--cluster-network``); by default a free one (``clusternetwork``). Another one
        than a bootstrapped cluster has is refused.
    :param records: this machine's record of its local clusters (``clusternetwork``); the
        one under the runtime root by default.
    """

    def __init__(
        self,
        directory: Path,
        size: int,
        *,
        first_address: ipaddress.IPv4Address | None = None,
        netns: bool | None = None,
        config: str = "",
        accepts: Callable[[NodeSetting], bool] = setting_accepted,
        progress: Progress = _quiet,
        extensions: Sequence[ClusterExtension] = (),
        kubernetes_workers: KubernetesWorkers = None,
        cluster_network: IPNetwork | None = None,
        records: ClusterRecords | None = None,
    ) -> None:
        if size < 1:
            raise ValueError("a cluster has at least one node")
        self.cluster_network_asked = cluster_network
        self.records = records
        self.cluster_network: IPNetwork | None = None
        """The cluster's network, once ``up`` knows it (``_claim_network``)."""
        self.workers = workers_for_up(kubernetes_workers, size)
        self.workers_asked = kubernetes_workers is not None
        self.directory = directory.absolute()
        self.config = config
        self.accepts = functools.cache(accepts)
        self.progress = progress
        self.extensions = tuple(extensions)
        saved = saved_first_address(self.directory)
        recorded = None if saved is None else saved in _netns.NETNS_RANGE
        if netns is not None and recorded not in (None, netns):
            mode = "in network namespaces (--netns)" if recorded else "on loopback"
            flag = "with" if recorded else "without"
            raise LocalClusterError(
                f"the cluster in {self.directory} runs {mode}; run `cluster up` {flag} "
                "--netns on it, or use another --dir"
            )
        self.network: _netns.NetnsPlan | None = None
        if netns or (netns is None and recorded):
            self.network = self._plan(saved, first_address, size)
            self.nodes = [
                LocalNode(
                    index,
                    self.network.address(index),
                    self.directory / f"n{index}",
                    self.network.namespace(index),
                )
                for index in range(1, size + 1)
            ]
            return
        first = first_address or saved or FIRST_ADDRESS
        if saved not in (None, first):
            raise LocalClusterError(
                f"the cluster in {self.directory} runs from {saved}, not {first}; "
                f"give --first-address {saved} (or none), or another --dir"
            )
        last = ipaddress.IPv4Address(int(first) + size - 1)  # int: may pass the end
        if not (first.is_loopback and last.is_loopback):
            raise LocalClusterError(f"{size} nodes from {first} do not all fit in 127.0.0.0/8")
        self.nodes = [
            LocalNode(index, first + index - 1, self.directory / f"n{index}")
            for index in range(1, size + 1)
        ]

    def _plan(
        self,
        saved: ipaddress.IPv4Address | None,
        first_address: ipaddress.IPv4Address | None,
        size: int,
    ) -> _netns.NetnsPlan:
        """The network of a --netns cluster: from its recorded first address, else from
        its directory."""
        if first_address is not None:
            raise LocalClusterError(
                "--first-address is for loopback clusters; a --netns cluster takes its "
                f"addresses from {_netns.NETNS_RANGE} by its directory"
            )
        try:
            if saved is not None:
                return _netns.NetnsPlan.from_first_address(saved, size)
            return _netns.NetnsPlan(_netns.subnet_for(self.directory), size)
        except ValueError as exc:
            raise LocalClusterError(f"the cluster in {self.directory}: {exc}") from None

    @classmethod
    def existing(cls, directory: Path, **options: Any) -> LocalCluster:
        """The cluster in ``directory`` with as many nodes as it has directories, at the
        addresses it was created with.

        :raises LocalClusterError: if it holds no cluster.
        """
        size = held_nodes(directory)
        if size == 0:
            raise LocalClusterError(f"{directory} holds no local cluster (no n1, n2, ...)")
        return cls(directory, size, **options)

    @property
    def owner_directory(self) -> Path:
        return self.directory / OWNER_DIRECTORY

    def access(self) -> ClusterAccess:
        """The owner's access to the cluster."""
        return ClusterAccess.load(self.owner_directory)

    def hosts_file(self, node: LocalNode) -> Path | None:
        """The hosts file ``node``'s roleserve.toml names (``[plugins.hostsfile] path``);
        None if it names none."""
        path = configured(node.datadir.config, HOSTS_PATH)
        return Path(path) if path is not None else None

    def node_id(self, node: LocalNode) -> str | None:
        """The ID of ``node``, once it has made its key."""
        return node.datadir.read_node_id()

    def view(self, records: Mapping[str, management_pb2.Node]) -> ClusterView:
        """The cluster for a plugin's extension (``cluster_extension``), with each node's
        roles from ``records`` (what the leader knows, by node ID; none: no roles)."""
        members = []
        for node in self.nodes:
            identity = self.node_id(node)
            record = records.get(identity or "")
            roles = roles_from_proto(record.roles).names() if record is not None else []
            members.append(
                ClusterMember(
                    node.index, identity, str(node.address), node.datadir.config, tuple(roles)
                )
            )
        return ClusterView(
            self.directory, self.owner_directory, tuple(members), self.progress, self._runnables
        )

    async def _runnables(self, member: ClusterMember, dn: str) -> list[RunnableSeen]:
        """``ClusterView.runnables``: the subtree at ``dn`` of ``member``'s supervision tree."""
        request = nodemanagement_pb2.GetSupervisionTreeRequest(dn=dn)
        try:
            with anyio.fail_after(RUNNABLE_PATIENCE):
                async with self.node_management(self.nodes[member.index - 1]) as stub:
                    tree = await stub.GetSupervisionTree(request)
        except (grpc.aio.AioRpcError, TimeoutError, LocalClusterError, OSError):
            return []
        return [
            RunnableSeen(each.dn, each.state, each.note, each.last_error, each.final)
            for each in tree.runnables
        ]

    # -- up and down ---------------------------------------------------------------

    async def up(self) -> None:
        """Start (or resume, or grow) the cluster and wait until every node is UP and
        HEALTHY; see the module docstring for the order.

        :raises LocalNetworkError: before anything starts, in one line, if the cluster's
            network is another local cluster's, or none is free (``clusternetwork``).
        """
        if self.network is not None:
            self._refuse_netns_here()
        await self._claim_network()
        if self.network is not None:
            await self._network_up(self.network)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._save_first_address()
        newcomers = [node for node in self.nodes[1:] if not node.datadir.enrolled]
        grown = growth_message(self.nodes, newcomers)
        if grown:
            self.progress(grown)
        self._start_enrolled()
        first = self.nodes[0]
        await self._until("node 1 wrote the owner's credentials", self._owner_written, node=first)
        self.progress("waiting for the cluster's leader")
        try:
            await self._watching(lambda: self._enrol_and_settle(newcomers))
        except NoLeaderError as exc:
            quorum = await quorum_said(self.access())
            raise LocalClusterError(
                leaderless_message(self.directory, self.nodes, str(exc), quorum)
            ) from exc

    async def _enrol_and_settle(self, newcomers: list[LocalNode]) -> None:
        """Through the leader: enrol ``newcomers``, give every node its roles, and wait
        until every node is UP and HEALTHY."""
        async with self.management() as management:
            members = await self._members(management)
            up = {node.index: Arrival() for node in newcomers}
            if newcomers:
                ticket = await self._ticket(management)
                for node in newcomers:
                    self._register(node, ticket)

            async def approve() -> None:
                if newcomers:
                    await self._approve(management, newcomers, up)

            async def assign() -> None:
                await self._assign_every_role(management, members, up)

            await _alongside({"the approvals": approve, "the roles": assign})
            await self._until_healthy(management, members)
            await self._save_curators(management)
            view = self.view(await self.nodes_by_id(management))
        for extension in self.extensions:
            await extension.settle(view)
        count, gone = len(members), len(self.nodes) - len(members)
        left = f" ({gone} decommissioned)" if gone else ""
        self.progress(f"the cluster is up: {count} node{'' if count == 1 else 's'}{left}")

    async def down(self) -> None:
        """Stop every node cleanly, in parallel; then, for a --netns cluster, remove its
        namespaces, veths and bridge."""
        async with anyio.create_task_group() as tasks:
            for node in self.nodes:
                if node.pid is not None:
                    self.progress(f"stopping node {node.index} (pid {node.pid})")
                    tasks.start_soon(node.stop)
        if self.network is not None:
            await self._network_down(self.network)

    def record_down(self) -> None:
        """Say in the directory that ``cluster down`` stops the cluster now (``DOWN_FILE``),
        for a foreground ``up`` showing its status in another terminal
        (``stopped_by_down``)."""
        write_atomically(self.directory / DOWN_FILE, f"{time.time_ns()}\n".encode())

    def stopped_by_down(self, since: float) -> bool:
        """Whether ``cluster down`` ran after ``since`` (seconds since the epoch) and no
        node runs now: what ends a foreground ``up``, which otherwise would show stopped
        nodes until Ctrl-C. A node that merely exits is not this: ``up`` goes on showing
        it, for the operator to see."""
        try:
            stamp = int((self.directory / DOWN_FILE).read_text())
        except (OSError, ValueError):
            return False
        return stamp >= since * 1e9 and all(node.pid is None for node in self.nodes)

    async def stop_started(self) -> bool:
        """Stop only the nodes this process started (``recovery``), and for a --netns
        cluster whose nodes are all stopped then, its network too; whether every node is
        stopped now."""
        if all(node.started_here for node in self.nodes if node.pid is not None):
            await self.down()
            return True
        return await stop_started(self.nodes, self.progress)

    def _refuse_netns_here(self) -> None:
        """Refuse, before anything is made, where --netns cannot run, or where the
        kernel's ARP table is too small for the cluster (``neighbour_shortage``)."""
        problem = _netns.unsupported() or _netns.neighbour_shortage(len(self.nodes))
        if problem is not None:
            raise LocalClusterError(problem)

    async def _network_up(self, plan: _netns.NetnsPlan) -> None:
        """Remove what a killed run left when no node runs (a namespace outlives the nodes
        that were in it); make what is missing (``_refuse_netns_here`` said it can)."""
        network = str(plan.subnet.network_address).rsplit(".", 1)[0]
        self.progress(
            f"network: bridge {plan.bridge} at {plan.host_address}/24 on the host, "
            f"node i in namespace {plan.prefix}n<i> at {network}.({_netns.NODE_OFFSET}+i)"
        )
        idle = all(node.pid is None for node in self.nodes)
        said = await _netns.network_up(plan, self.directory, clean=idle)
        if said:
            self.progress(said)

    async def _network_down(self, plan: _netns.NetnsPlan) -> None:
        """Remove the cluster's namespaces and links (never another cluster's bridge);
        nothing without the means to (root, pyroute2): nothing could have been made."""
        if _netns.unsupported() is not None:
            return
        said = await _netns.network_down(plan, self.directory)
        if said:
            self.progress(said)

    async def _claim_network(self) -> None:
        """Know the cluster's network, its own on this machine (``clusternetwork``)."""
        wanted = self._wanted_network()
        records = self.records or ClusterRecords()
        claim = functools.partial(records.claim, self.directory, wanted, runs=running)
        self.cluster_network = await anyio.to_thread.run_sync(claim)
        if wanted.bootstrapped:
            self.progress(f"cluster network {self.cluster_network}, as node 1 bootstrapped it")
        else:
            self.progress(
                f"cluster network {self.cluster_network}, no other local cluster's "
                f"(recorded in {self.directory / CLUSTER_NETWORK_FILE})"
            )

    def _wanted_network(self) -> Wanted:
        """What ``up`` asks the machine's record for: the network node 1 bootstrapped
        with; for a new cluster, the operator's (``--cluster-network``, or node 1's
        setting), else any free one.

        :raises LocalClusterError: if ``--cluster-network`` differs from the network of a
            bootstrapped cluster (the curator's: it cannot change) or from node 1's setting.
        """
        recorded = saved_network(self.directory)
        asked = self.cluster_network_asked
        first = self.nodes[0]
        if first.datadir.enrolled:
            # Without a record (a cluster made before it): what node 1 bootstrapped with.
            network = (
                recorded
                or _network_or_none(configured(first.datadir.config, CONTROLPLANE_NETWORK))
                or DEFAULT_NETWORK
            )
            if asked not in (None, network):
                raise LocalClusterError(
                    f"the cluster in {self.directory} has the cluster network {network}, set "
                    f"when node 1 bootstrapped it; give --cluster-network {network} (or "
                    "none), or another --dir for a new cluster"
                )
            return Wanted(network, bootstrapped=True)
        setting, where = self._operators_network()
        if asked is not None and setting not in (None, asked):
            raise LocalClusterError(
                f'--cluster-network {asked} differs from cluster_network = "{setting}" in '
                f"{where}'s [plugins.controlplane], which node 1 bootstraps with; give the "
                "same, or take one of them out"
            )
        if asked is not None:
            return Wanted(asked, preferred=recorded)
        if setting is not None:
            given_by = f"cluster_network in {where}'s [plugins.controlplane]"
            return Wanted(setting, given_by=given_by, preferred=recorded)
        return Wanted(None, preferred=recorded)

    def _operators_network(self) -> tuple[IPNetwork | None, str]:
        """The cluster network the operator set for node 1's bootstrap, in its
        ``roleserve.toml`` or, before it has one, in the cluster's config; and where. A
        value that is no private network is left for the node to refuse."""
        path = self.nodes[0].datadir.config
        if path.exists():
            text = operators_value(path, CONTROLPLANE_NETWORK)
        else:
            text = configured_in(self.config, CONTROLPLANE_NETWORK)
        return _network_or_none(text), str(path)

    def _save_first_address(self) -> None:
        """Record node 1's address (the constructor refused any other than a saved one:
        the nodes' etcd members and statuses name their addresses)."""
        (self.directory / FIRST_ADDRESS_FILE).write_text(f"{self.nodes[0].address}\n")

    def _start_enrolled(self) -> None:
        """Start every enrolled node that is not running, all before asking for a leader:
        the consensus members of a stopped cluster have no quorum until enough of them
        run. Node 1 of a new cluster bootstraps it."""
        first = self.nodes[0]
        if not first.datadir.enrolled and first.pid is None:
            self.progress(f"bootstrapping a new cluster on node 1 at {first.address}")
            self._launch(first, "--bootstrap", "--owner-credentials", str(self.owner_directory))
        for node in self.nodes:
            if not node.datadir.enrolled:
                continue
            if node.pid is not None:
                self.progress(f"node {node.index} at {node.address} runs (pid {node.pid})")
            else:
                self.progress(f"starting node {node.index} at {node.address} (it rejoins)")
                self._launch(node)

    def _register(self, node: LocalNode, ticket: str) -> None:
        """Start ``node`` registering with ``ticket``, which it reads from its environment:
        an argument would show the ticket to every local user in ``ps``."""
        if node.pid is not None:
            self.progress(f"node {node.index} at {node.address} runs (pid {node.pid})")
            return
        self.progress(f"registering node {node.index} at {node.address}")
        flags = ("--join-address", str(self.nodes[0].address))
        self._launch(node, *flags, env={REGISTER_TICKET_ENV: ticket})

    def _launch(self, node: LocalNode, *flags: str, env: dict[str, str] | None = None) -> None:
        """Start ``node`` with its config written first; refused at once on a full disk,
        where it could write neither its state nor the log line that would say so."""
        node.directory.mkdir(parents=True, exist_ok=True)
        if (stuck := self._full(node)) is not None:
            raise LocalClusterError(stuck)
        self._write_config(node)
        node.start(*flags, env=env)

    def _write_config(self, node: LocalNode) -> None:
        """Before ``node`` starts: the cluster's config for a node that has none, and the
        node's own values of the settings that must differ between nodes (``nodeconfig``,
        which says when and why)."""
        node.directory.mkdir(parents=True, exist_ok=True)
        path = node.datadir.config
        existed = path.exists()
        if self.config and not existed:
            path.write_text(self.config)
        try:
            text, mode = path.read_text(), stat.S_IMODE(path.stat().st_mode)
        except FileNotFoundError:
            text, mode = "", 0o644
        written = text
        for setting, value in self._own_settings(node):
            if self.accepts(setting):
                changed = with_setting(written, setting, value, path)
                said = f"node {node.index}: its {setting.what} is {value} (added to {path})"
            else:
                changed = without_setting(written, setting)
                said = (
                    f"node {node.index}: no {setting.plugin} plugin takes [plugins."
                    f"{setting.plugin}] {setting.key}; the one cluster up added is taken out "
                    f"of {path}"
                )
            if changed is not None:
                written = changed
                if existed:  # a file of the operator's, or of a cluster from before
                    self.progress(said)
        if written != text:
            write_atomically(path, written.encode(), mode)

    def _own_settings(self, node: LocalNode) -> list[tuple[NodeSetting, str]]:
        """The settings ``node`` gets a value of its own for, and the values."""
        own = [(HOSTS_PATH, str(node.directory / HOSTS_FILE))]
        if self.network is not None:
            own.append((CLUSTERNET_INTERFACE, self.network.wireguard_interface(node.index)))
        else:
            own.append((CLUSTERNET_OFF, LOOPBACK_MESH_OFF))
        if self.cluster_network is not None:
            if node.index == 1:
                own.append((CONTROLPLANE_NETWORK, str(self.cluster_network)))
            if self.network is not None:
                own.append((CLUSTERNET_NETWORK, str(self.cluster_network)))
        return own

    async def _owner_written(self) -> bool:
        try:
            self.access()
        except RoleserveError:
            return False
        return True

    # -- through the leader's Management service -----------------------------------

    @contextlib.asynccontextmanager
    async def management(self, patience: float | None = None) -> AsyncIterator[Management]:
        """The leading curator's Management service, following the leader
        (``LeaderManagement``).

        :param patience: seconds each call may spend finding a leader that answers;
            ``STEP_TIMEOUT`` (read at each call, so a test may shorten it) by default.
        """
        management = LeaderManagement(self.access(), patience or STEP_TIMEOUT)
        try:
            yield management
        finally:
            with anyio.CancelScope(shield=True):
                await management.aclose()

    async def nodes_by_id(self, management: Management) -> dict[str, management_pb2.Node]:
        """Every node of the cluster, by ID."""
        nodes = await management.stream("GetNodes", management_pb2.GetNodesRequest())
        return {node.id: node for node in nodes}

    async def _ticket(self, management: Management) -> str:
        ticket = await management.GetRegisterTicket(management_pb2.GetRegisterTicketRequest())
        info = await management.GetClusterInfo(management_pb2.GetClusterInfoRequest())
        return RegisterTicket(ticket.ticket, certificate_from_pem(info.ca_certificate)).encode()

    async def _approve(
        self, management: Management, newcomers: list[LocalNode], up: Mapping[int, Arrival]
    ) -> None:
        """Approve each of ``newcomers`` as soon as it registered, and wait until all are UP
        and have reported their address, giving each one's ``Arrival`` in ``up`` (by index)
        the records read as it is: its roles come next, and the curator refuses a consensus
        member without an address (the last approved, UP a moment before its first status
        report, failed ``up`` with FAILED_PRECONDITION).

        One loop for all of them, one ``GetNodes`` a round: approving them one after the
        other, each waited for until UP, took a second a node (100 s at 100 nodes), and a
        poller per node would ask the curator for every node 4 times a second each.
        """
        waiting = {node.index: node for node in newcomers}
        approved: set[str] = set()

        async def all_up() -> bool:
            nodes = await self.nodes_by_id(management)
            for node in list(waiting.values()):
                identity = self.node_id(node)
                known = nodes.get(identity) if identity is not None else None
                if identity is None or known is None:  # no key yet, or not registered yet
                    continue
                if known.state == common_pb2.NODE_STATE_UP and known.status.external_address:
                    del waiting[node.index]
                    up[node.index].arrived(nodes)
                elif known.state == common_pb2.NODE_STATE_NEW and identity not in approved:
                    self.progress(f"approving node {node.index} ({identity})")
                    await management.ApproveNode(
                        management_pb2.ApproveNodeRequest(node_id=identity)
                    )
                    approved.add(identity)
            return not waiting

        def what() -> str:
            return (
                "every new node is UP and reported its address (" + _indexes(waiting) + " not yet)"
            )

        await self._until(what, all_up, running=newcomers, progress=lambda: len(waiting))

    async def _assign_every_role(
        self,
        management: Management,
        members: list[LocalNode],
        up: Mapping[int, Arrival] | None = None,
    ) -> None:
        """Give every node its default roles: the consensus members one after the other
        (etcd takes one learner at a time, each waited for until it votes), and alongside
        them all the others at once, ``ROLE_CHANGES_AT_ONCE`` at a time (one after the
        other, a 100-node up spent a minute and more on them; after the consensus joins, it
        spent 17 s more waiting for them under the load of the nodes still starting).

        A node in ``up`` (a newcomer, by index) gets them once it arrived (UP with its
        address), with the record ``_approve`` read then: alongside ``_approve``, so that
        the first nodes' roles (etcd joins, the Kubernetes control plane) start while the
        last ones still start; without that, a 100-node ``--netns`` up spent 24 s on them
        after the last node was UP.
        """
        up = up or {}
        known = await self.nodes_by_id(management)
        self._say_workers(members, known)
        joining = [n for n in members if "consensus_member" in self._default_roles(n)]
        limiter = anyio.CapacityLimiter(ROLE_CHANGES_AT_ONCE)

        async def join_one_by_one() -> None:
            for node in joining:
                await self._assign_roles(management, node, await self._record(node, up, known))

        async def assign(node: LocalNode) -> None:
            record = await self._record(node, up, known)
            async with limiter:
                await self._assign_roles(management, node, record)

        steps: dict[str, Callable[[], Awaitable[None]]] = {"the consensus joins": join_one_by_one}
        for node in members:
            if node not in joining and self._default_roles(node):
                steps[f"the roles of node {node.index}"] = functools.partial(assign, node)
        await _alongside(steps)

    async def _record(
        self, node: LocalNode, up: Mapping[int, Arrival], known: dict[str, management_pb2.Node]
    ) -> management_pb2.Node:
        """``node``'s record as ``_assign_roles`` needs it: from ``known`` for a node
        enrolled before this ``up``; a newcomer's (which had none when ``known`` was read,
        nor a key: its process makes it) once it arrived."""
        arrival = up.get(node.index)
        records = known if arrival is None else await arrival.wait()
        identity = self.node_id(node)
        assert identity is not None  # enrolled, or arrived: it has a key
        return records[identity]

    def _default_roles(self, node: LocalNode) -> list[str]:
        return default_roles(node.index, len(self.nodes), workers=self.workers)

    def _say_workers(self, members: list[LocalNode], known: dict[str, management_pb2.Node]) -> None:
        """One line about the nodes past the ``workers`` first: when the default leaves
        some without ``kubernetes_worker``, which, and how to have a kubelet on each; when
        ``--kubernetes-workers`` was asked and some hold it already (an earlier ``up``, the
        operator), that they keep it and how to take it away: ``up`` only adds roles."""
        past = [node for node in members if node.index > self.workers]
        holding = [
            node.index
            for node in past
            if (record := known.get(self.node_id(node) or "")) is not None
            and roles_from_proto(record.roles).has(WORKER_ROLE)
        ]
        without = [node.index for node in past if node.index not in holding]
        if self.workers_asked and holding:
            self.progress(
                f"{_spans(holding)} {_verb('keep', holding)} {WORKER_ROLE}: cluster up takes "
                f"no role away (`ctl roles unset NODE {WORKER_ROLE}` does)"
            )
        elif not self.workers_asked and without:
            self.progress(
                f"{_spans(without)} {_verb('get', without)} no {WORKER_ROLE} "
                f"({DEFAULT_KUBERNETES_WORKERS} by default above {DEFAULT_KUBERNETES_WORKERS} "
                f"nodes; --kubernetes-workers {ALL_WORKERS} gives it to every node)"
            )

    async def _assign_roles(
        self, management: Management, node: LocalNode, record: management_pb2.Node
    ) -> None:
        """Give ``node`` the default roles it lacks in ``record`` (its record, read once:
        a consensus join changes no other node's roles)."""
        identity = self.node_id(node)
        assert identity is not None
        current = roles_from_proto(record.roles)
        held = current.names()
        wanted = [role for role in self._default_roles(node) if not current.has(role)]
        if "consensus_member" in wanted:
            self.progress(f"node {node.index} joins the consensus (etcd learner, then voter)")
            await self._change_roles(management, identity, ["consensus_member"])
            await self._until(
                f"node {node.index} became a voting etcd member",
                lambda: self._voting(management, identity),
                node=node,
            )
            wanted.remove("consensus_member")
            held.append("consensus_member")
        if wanted:
            self.progress(_roles_added(node.index, wanted, held))
            await self._change_roles(management, identity, wanted)

    async def _change_roles(self, management: Management, identity: str, roles: list[str]) -> None:
        changes = [
            management_pb2.UpdateNodeRolesRequest.Change(role=role, assign=True) for role in roles
        ]
        await management.UpdateNodeRoles(
            management_pb2.UpdateNodeRolesRequest(node_id=identity, changes=changes)
        )

    async def _save_curators(self, management: Management) -> None:
        """Put every curator in the owner's endpoints, so that ctl finds the leader even
        when node 1 is down."""
        nodes = await self.nodes_by_id(management)
        curators = [
            endpoint(node.status.external_address, node.status.running_curator.port)
            for node in nodes.values()
            if node.status.HasField("running_curator") and node.status.external_address
        ]
        access = self.access()
        ClusterAccess.of(access.credentials, [*curators, *access.endpoints]).save(
            self.owner_directory
        )

    @contextlib.asynccontextmanager
    async def node_management(self, node: LocalNode) -> AsyncIterator[Any]:
        """A NodeManagement stub for ``node``, as the owner."""
        identity = self.node_id(node)
        if identity is None:
            raise LocalClusterError(f"node {node.index} has no key yet")
        target = endpoint(node.address, NODE_MANAGEMENT_PORT)
        async with secure_channel(target, self.access().credentials, node_id=identity) as channel:
            yield nodemanagement_pb2_grpc.NodeManagementStub(channel)

    async def _voting(self, management: Management, identity: str) -> bool:
        status = await management.GetConsensusStatus(management_pb2.GetConsensusStatusRequest())
        full = management_pb2.GetConsensusStatusResponse.Member.FULL
        return any(m.node_id == identity and m.status == full for m in status.members)

    async def _members(self, management: Management) -> list[LocalNode]:
        """The nodes that have not left the cluster. A decommissioned node (``ctl
        decommission``, how a cluster shrinks) can never be UP again: ``up`` says so and
        leaves it out, instead of waiting for it."""
        known = await self.nodes_by_id(management)
        members = []
        for node in self.nodes:
            record = known.get(self.node_id(node) or "")
            if record is not None and record.state == common_pb2.NODE_STATE_DECOMMISSIONED:
                self.progress(f"node {node.index} is decommissioned; it is left out")
            else:
                members.append(node)
        return members

    async def _until_healthy(self, management: Management, members: list[LocalNode]) -> None:
        """Wait until every one of ``members`` is UP and HEALTHY (``_not_healthy``); the
        wait progresses when fewer nodes than ever before are not (a node that flaps, or a
        leader change that makes every node report again, does not hold it open)."""
        self.progress("waiting until every node is UP and HEALTHY")
        waiting = {node.index: node for node in members}
        fewest = [len(waiting)]

        async def all_healthy() -> bool:
            not_yet = await self._not_healthy(management, members)
            waiting.clear()
            waiting.update((node.index, node) for node in not_yet)
            fewest[0] = min(fewest[0], len(waiting))
            return not waiting

        def what() -> str:
            return "every node is UP and HEALTHY (" + _indexes(waiting) + " not yet)"

        await self._until(what, all_healthy, running=members, progress=lambda: fewest[0])

    async def _not_healthy(
        self, management: Management, members: list[LocalNode]
    ) -> list[LocalNode]:
        """Those of ``members`` not yet UP and HEALTHY, a consensus member not running its
        curator, or a node this process started not reporting since it started it.

        The curator's HEALTHY outlives a node's process by the heartbeat timeout (15 s):
        a node restarted here that exits at once was still HEALTHY by its old process's
        heartbeats, and ``up`` said the cluster was up. Its first status report (which a
        node sends on every connection) is stamped by the curator, so a stamp from
        before the start is the old process's."""
        nodes = await self.nodes_by_id(management)
        return [
            local
            for local in members
            if (node := nodes.get(self.node_id(local) or "")) is None
            or not _ready(node)
            or not _reported_since(node, local.started_at)
        ]

    async def _until(
        self,
        what: str | Callable[[], str],
        check: Callable[[], Awaitable[bool]],
        *,
        node: LocalNode | None = None,
        running: Sequence[LocalNode] = (),
        progress: Callable[[], object] | None = None,
    ) -> None:
        """Poll ``check`` until it holds; fail naming ``what`` and the node's log, or at
        once when ``node`` or one of ``running`` exits (nothing it waits for can happen
        then: a node that stopped is never UP and HEALTHY), logs that it waits for the
        operator (too little disk space: one line, ``LocalNode.refusal``), or has a full
        disk (where it cannot even log that).

        It fails after ``STEP_TIMEOUT`` without success, counted from the last change of
        ``progress()`` where given: a wait for many nodes at once (100 nodes in network
        namespaces starting on 2 cores took more than 120 s to all be UP, each one in a
        few seconds) fails only once none of them moved for that long."""
        watched = [node] if node is not None else list(running)
        seen = progress() if progress is not None else None
        with anyio.CancelScope(deadline=anyio.current_time() + STEP_TIMEOUT) as scope:
            while not await check():
                for each in watched:
                    stuck = self._stuck(each)
                    if stuck is not None:
                        raise LocalClusterError(stuck)
                if progress is not None and progress() != seen:
                    seen = progress()
                    scope.deadline = anyio.current_time() + STEP_TIMEOUT
                await anyio.sleep(POLL)
            return
        said = what() if callable(what) else what
        raise LocalClusterError(self._failure(f"timed out waiting until {said}", node))

    async def _watching(self, work: Callable[[], Awaitable[None]]) -> None:
        """Do ``work`` (a wait for the leader, through it for the nodes), failing at once
        when a node this process started waits for the operator (``_waiting``): such a
        node names no leader and never turns HEALTHY, and the wait would end only at its
        timeout, with a generic line. A node that exits is left to ``work``'s own waits
        and ``leaderless_message``: a decommissioned node, started again, exits at once,
        and ``up`` goes on without it."""
        stuck: list[str] = []
        failed: Exception | None = None
        async with anyio.create_task_group() as group:
            group.start_soon(self._watch, stuck, group.cancel_scope)
            try:
                await work()
            except Exception as exc:  # raised as it is below, not in an ExceptionGroup
                failed = exc
            group.cancel_scope.cancel()
        if not stuck and failed is not None and (why := self._first_waiting()) is not None:
            stuck.append(why)  # the node's own line is the cause of the wait's failure
        if stuck:
            raise LocalClusterError(stuck[0]) from failed
        if failed is not None:
            raise failed

    async def _watch(self, stuck: list[str], scope: anyio.CancelScope) -> None:
        """Poll the nodes started here until one waits for the operator; then put its
        line in ``stuck`` and cancel ``scope``."""
        while True:  # a node's log, polled: nothing to wait on as an event
            why = self._first_waiting()
            if why is not None:
                stuck.append(why)
                scope.cancel()
                return
            await anyio.sleep(POLL)

    def _first_waiting(self) -> str | None:
        """The line of the first node started here that waits for the operator; None if
        none does."""
        for node in self.nodes:
            if node.started_here and (why := self._waiting(node)) is not None:
                return why
        return None

    def _stuck(self, node: LocalNode) -> str | None:
        """Why ``node`` will not get where ``up`` waits for it, in one line (a full disk
        first: it is the cause of whatever else the node then did); None if nothing says
        so yet."""
        if node.pid is None:
            return self._full(node) or self._exited(node)
        return self._waiting(node)

    def _waiting(self, node: LocalNode) -> str | None:
        """That ``node`` waits for the operator, in one line: its disk is full, or it said
        so in its log (``LocalNode.refusal``); None if neither."""
        if (full := self._full(node)) is not None:
            return full
        if (refusal := node.refusal()) is not None:
            return (
                f"node {node.index} cannot start: {refusal} (its log: "
                f"{node.log_file}); once that is done, run `cluster up` again"
            )
        return None

    def _full(self, node: LocalNode) -> str | None:
        """That ``node``'s disk is full, in one line; None if it is not."""
        free = node.disk_full()
        if free is None:
            return None
        if node.pid is not None:
            state = "is stuck"
        else:
            state = "exited" if node.started_here else "cannot start"
        return (
            f"node {node.index} {state}: the disk of {node.directory} is full ({free} "
            "bytes free), so the node can write neither its state nor its log; free "
            "space there, then run `cluster up` again"
        )

    def _exited(self, node: LocalNode) -> str:
        """``node`` exited: its own error line first (of this start, when ``up`` started
        it), then where its log is; its last lines instead when it said none."""
        said = f"node {node.index} exited{_exit_status(node.exit_status())}"
        cause = node.own_error()
        if cause is not None:
            return f"{said}: {cause} (its log: {node.log_file})"
        return self._failure(said, node)

    def _failure(self, what: str, node: LocalNode | None) -> str:
        if node is None:
            return f"{what}; the nodes' logs are {self.directory}/n*/node.log"
        since = " since this start" if node.started_here else ""
        tail = "\n    ".join(node.log_tail())
        return f"{what}; the end of {node.log_file}{since}:\n    {tail}"


async def _alongside(steps: Mapping[str, Callable[[], Awaitable[None]]]) -> None:
    """Run ``steps`` (by name) together; the first to fail cancels the others, and its
    exception is raised as it is (not in an ``ExceptionGroup``: ``up``'s callers catch
    ``LocalClusterError`` and ``NoLeaderError``).

    :raises RuntimeError: naming the steps that ended neither done nor failed: a
        ``CancelledError`` that was not this task group's ended their task silently (a bug;
        ``LeaderManagement`` had one), and ``up`` must not go on as if they were done.
    """
    failures: list[Exception] = []
    done: set[str] = set()

    async with anyio.create_task_group() as group:

        async def run(name: str, step: Callable[[], Awaitable[None]]) -> None:
            try:
                await step()
            except Exception as exc:
                failures.append(exc)
                group.cancel_scope.cancel()
            else:
                done.add(name)

        for name, step in steps.items():
            group.start_soon(run, name, step)
    if failures:
        raise failures[0]
    unfinished = [name for name in steps if name not in done]
    if unfinished:
        raise RuntimeError(f"cancelled from elsewhere, unfinished: {', '.join(unfinished)}")


class Arrival:
    """A newcomer's arrival (UP with its address), as ``_approve`` sees it: the cluster's
    nodes as read then, for its roles."""

    def __init__(self) -> None:
        self._event = anyio.Event()
        self._nodes: dict[str, management_pb2.Node] = {}

    def arrived(self, nodes: dict[str, management_pb2.Node]) -> None:
        self._nodes = nodes
        self._event.set()

    async def wait(self) -> dict[str, management_pb2.Node]:
        await self._event.wait()
        return self._nodes


def _roles_added(index: int, added: list[str], held: list[str]) -> str:
    """``node 4: gets role kubernetes_worker``, ``node 1: gets roles kubernetes_controller,
    kubernetes_worker (keeps consensus_member)``: what ``up`` adds, and what the node
    holds already, so that the line does not read as the node's only roles."""
    line = f"node {index}: gets role{'s' if len(added) > 1 else ''} {', '.join(added)}"
    return f"{line} (keeps {', '.join(held)})" if held else line


def _verb(verb: str, indexes: list[int]) -> str:
    """``verb`` agreeing with ``_spans(indexes)``: ``nodes 2–3 keep``, ``node 2 keeps``."""
    return verb if len(indexes) > 1 else f"{verb}s"


def _spans(indexes: list[int]) -> str:
    """``node 4``, ``nodes 11–100``, ``nodes 11–40, 45–100``: sorted node indexes, with
    each run of consecutive ones as its ends."""
    runs: list[list[int]] = []
    for index in sorted(indexes):
        if runs and index == runs[-1][-1] + 1:
            runs[-1].append(index)
        else:
            runs.append([index])
    spans = [str(run[0]) if len(run) == 1 else f"{run[0]}–{run[-1]}" for run in runs]
    return f"node{'s' if len(indexes) > 1 else ''} {', '.join(spans)}"


def _indexes(nodes: dict[int, LocalNode]) -> str:
    """``node 4`` or ``nodes 4, 7, 9``: the nodes of these indexes, for a message."""
    listed = ", ".join(str(index) for index in sorted(nodes))
    return f"node{'s' if len(nodes) > 1 else ''} {listed}"


def _network_or_none(text: str | None) -> IPNetwork | None:
    """``text`` as a cluster network (``network_value``); None for none or an invalid one
    (which the node refuses when it reads its settings, in its own words)."""
    try:
        return network_value(text) if text is not None else None
    except ValueError:
        return None


def _exit_status(status: int | None) -> str:
    """`` (exit status 2)``, `` (killed by SIGKILL)``; nothing when unknown."""
    if status is None:
        return ""
    if status < 0:
        try:
            return f" (killed by {signal.Signals(-status).name})"
        except ValueError:  # a real-time signal has no name
            return f" (killed by signal {-status})"
    return f" (exit status {status})"


def _reported_since(node: management_pb2.Node, started: float | None) -> bool:
    """Whether the curator received ``node``'s status after ``started`` (seconds since
    the epoch, None: the node was not started here, anything goes)."""
    if started is None:
        return True
    stamp = node.status.timestamp
    return node.status.HasField("timestamp") and stamp.ToNanoseconds() >= int(started * 1e9)


def _ready(node: management_pb2.Node) -> bool:
    member = roles_from_proto(node.roles).has("consensus_member")
    return (
        node.state == common_pb2.NODE_STATE_UP
        and node.health == management_pb2.Node.HEALTHY
        and (not member or node.status.HasField("running_curator"))
    )
