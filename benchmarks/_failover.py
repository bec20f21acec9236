"""Failover of a local cluster's leading curator, measured from outside: shared by
``failover.py`` (a chosen lease TTL, several runs) and ``scale.py`` (clusters of 10 to 100).

The leader's process group (its node process) gets SIGSTOP (a stalled disk, a paused VM) or
SIGKILL (a crash), or its node process alone SIGTERM (a clean stop: ``cluster down``,
systemd; the leader resigns, see docs/curator.md "A clean stop"); from the signal, two
times:

- *survivors HEALTHY*: until a curator other than the old leader leads and shows every
  other node HEALTHY (each beats to it);
- *role arrives*: a ``custom:hello`` role is set on a survivor as soon as a leader takes
  it, until the node's gated worker ``hello`` (examples/hello) is HEALTHY in its
  supervision tree.

Each line also says when a new leader first answered ``GetNodes`` (elected: the old lease
ran out; and serving: its state loaded), so that what follows, the nodes finding it and
beating to it, reads apart from the lease TTL.

Each look asks only the survivors' curators, with short deadlines, as an operator's tool
would once it knows the old leader hangs. Then the victim is resumed (SIGCONT) or started
again (once it has stopped), and the cluster made whole before the next fault.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import random
import signal
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio
from _report import print_comparison, summarise

from roleserve_core.connection import find_leader
from roleserve_core.localcluster import LocalCluster, LocalNode
from roleserve_core.localcluster.layout import kubernetes_workers_value
from roleserve_core.ports import CURATOR_PORT, endpoint
from roleserve_core.proto import (
    management_pb2,
    management_pb2_grpc,
    nodemanagement_pb2,
)
from roleserve_core.rpc import CancellationSafeChannel, secure_channel

__all__ = [
    "Samples",
    "fault_and_recover",
    "measure_fault",
    "nodes_at_leader",
    "print_failover",
    "random_first_address",
    "until",
    "whole_again",
]

HELLO = "root.role.hello"
LOOK_TIMEOUT = 2.0
"""Seconds one look may take before it counts as 'not yet'."""
GIVE_UP = 180.0
"""Seconds after the fault after which a measurement is reported as never reached."""

T = TypeVar("T")


async def _leader_management(
    cluster: LocalCluster, survivors: list[LocalNode]
) -> tuple[str, Any, CancellationSafeChannel]:
    """The leader the survivors' curators name, a Management stub to it (aio, untyped by
    the generated stubs), and its channel to close."""
    access = cluster.access()
    endpoints = [endpoint(node.address, CURATOR_PORT) for node in survivors]
    leader = await find_leader(endpoints, access.credentials, timeout=LOOK_TIMEOUT)
    channel = secure_channel(leader.endpoint, access.credentials, node_id=leader.node_id)
    return leader.node_id, management_pb2_grpc.ManagementStub(channel), channel


async def nodes_at_leader(
    cluster: LocalCluster, survivors: list[LocalNode]
) -> tuple[str, dict[str, management_pb2.Node]]:
    """One bounded look: the leader's ID and every node as it sees them."""
    leader, management, channel = await _leader_management(cluster, survivors)
    async with channel:
        call = management.GetNodes(management_pb2.GetNodesRequest(), timeout=LOOK_TIMEOUT)
        return leader, {node.id: node async for node in call}


async def set_hello(
    cluster: LocalCluster, survivors: list[LocalNode], node: LocalNode, assign: bool
) -> None:
    _, management, channel = await _leader_management(cluster, survivors)
    change = management_pb2.UpdateNodeRolesRequest.Change(role="custom:hello", assign=assign)
    identity = cluster.node_id(node) or ""
    request = management_pb2.UpdateNodeRolesRequest(node_id=identity, changes=[change])
    async with channel:
        await management.UpdateNodeRoles(request, timeout=LOOK_TIMEOUT)


async def hello_state(cluster: LocalCluster, node: LocalNode) -> str:
    async with cluster.node_management(node) as stub:
        request = nodemanagement_pb2.GetSupervisionTreeRequest()
        response = await stub.GetSupervisionTree(request, timeout=LOOK_TIMEOUT)
    states = {runnable.dn: str(runnable.state) for runnable in response.runnables}
    return states.get(HELLO, "absent")


async def until(look: Callable[[], Awaitable[T]], done: Callable[[T], bool]) -> None:
    """Look again and again (each look bounded, failures count as 'not yet') until
    ``done``; gives up after ``GIVE_UP`` seconds with TimeoutError."""
    with anyio.fail_after(GIVE_UP):
        while True:
            with anyio.move_on_after(LOOK_TIMEOUT * 2):
                try:
                    if done(await look()):
                        return
                except Exception:  # a failed look is a 'not yet'
                    pass
            await anyio.sleep(0.05)


async def measure_fault(
    cluster: LocalCluster, fault: signal.Signals
) -> tuple[float, float, float, LocalNode]:
    """Signal the leader's process group; seconds until survivors are HEALTHY at a new
    leader, until a role set on a survivor reaches it, and until a new leader first served
    (answered GetNodes). Returns the victim too."""
    everyone = list(cluster.nodes)
    old, _ = await nodes_at_leader(cluster, everyone)
    victim = next(node for node in everyone if cluster.node_id(node) == old)
    survivors = [node for node in everyone if node is not victim]
    chosen = survivors[-1]
    group = victim.pid
    assert group is not None
    results: dict[str, float] = {}

    def survivors_healthy(look: tuple[str, dict[str, management_pb2.Node]]) -> bool:
        leader, found = look
        if leader != old:
            results.setdefault("serving", time.perf_counter() - start)
        return leader != old and all(
            found[cluster.node_id(node) or ""].health == management_pb2.Node.HEALTHY
            for node in survivors
        )

    async def healthy() -> None:
        await until(lambda: nodes_at_leader(cluster, survivors), survivors_healthy)
        results["healthy"] = time.perf_counter() - start

    async def role() -> None:
        await until(lambda: set_hello(cluster, survivors, chosen, True), lambda _: True)
        await until(lambda: hello_state(cluster, chosen), lambda state: state == "HEALTHY")
        results["role"] = time.perf_counter() - start

    start = time.perf_counter()
    if fault is signal.SIGTERM:  # as cluster down and systemd stop a node: the node alone
        os.kill(group, fault)
    else:
        os.killpg(group, fault)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(healthy)
        tasks.start_soon(role)
    await until(lambda: set_hello(cluster, survivors, chosen, False), lambda _: True)
    await until(lambda: hello_state(cluster, chosen), lambda state: state != "HEALTHY")
    return results["healthy"], results["role"], results["serving"], victim


async def whole_again(cluster: LocalCluster) -> None:
    """Every node UP and HEALTHY at whichever curator leads."""

    def all_healthy(look: tuple[str, dict[str, management_pb2.Node]]) -> bool:
        _, found = look
        return len(found) == len(cluster.nodes) and all(
            node.health == management_pb2.Node.HEALTHY for node in found.values()
        )

    await until(lambda: nodes_at_leader(cluster, list(cluster.nodes)), all_healthy)


Samples = dict[str, tuple[list[float], list[float]]]
"""Per fault: seconds until survivors were HEALTHY, and until the role arrived, per run."""


async def fault_and_recover(cluster: LocalCluster, fault: signal.Signals, samples: Samples) -> None:
    """One measurement of ``fault``; then the victim resumed (SIGSTOP) or started again
    once stopped (SIGKILL, SIGTERM), and the cluster whole before the next."""
    healthy, role, serving, victim = await measure_fault(cluster, fault)
    healthy_samples, role_samples = samples.setdefault(fault.name, ([], []))
    healthy_samples.append(healthy)
    role_samples.append(role)
    print(
        f"  {fault.name}: survivors HEALTHY {healthy:.2f} s, role {role:.2f} s "
        f"(a new leader served at {serving:.2f} s; the nodes took {healthy - serving:.2f} s "
        "more)",
        flush=True,
    )
    if fault is signal.SIGSTOP:
        os.killpg(victim.pid or 0, signal.SIGCONT)
    else:
        await until(_stopped(victim), lambda stopped: stopped)
        victim.start()
    await whole_again(cluster)


def _stopped(node: LocalNode) -> Callable[[], Awaitable[bool]]:
    """A look at whether ``node``'s process has ended (a SIGTERMed node takes seconds)."""

    async def look() -> bool:
        return node.pid is None

    return look


def print_failover(size: int, samples: Samples, ttl: float) -> None:
    """Each fault's two figures against the election lease TTL, the goal's baseline:
    failover.py and scale.py report them alike."""
    baseline = summarise([ttl])
    for fault, (healthy, role) in samples.items():
        print_comparison(
            f"{size} nodes, leader {fault}: every survivor HEALTHY at the new leader",
            summarise(healthy),
            baseline,
            "the election lease TTL",
        )
        print_comparison(
            f"{size} nodes, leader {fault}: a role set after the failover reaches its node",
            summarise(role),
            baseline,
            "the election lease TTL",
        )


def random_first_address() -> ipaddress.IPv4Address:
    """A first address of 127.0.0.0/8 unlikely to be another cluster's on this machine
    (the default 127.0.0.11 is the one a user's cluster takes)."""
    return ipaddress.IPv4Address(f"127.{random.randint(1, 254)}.{random.randint(0, 200)}.11")


def add_cluster_options(parser: argparse.ArgumentParser) -> None:
    """``--keep`` and ``--kubernetes-workers``, as both benchmarks take them."""
    parser.add_argument(
        "--keep",
        type=Path,
        help="make the clusters in this directory and keep them (their logs), instead of "
        "in a temporary one",
    )
    parser.add_argument(
        "--kubernetes-workers",
        type=kubernetes_workers_value,
        metavar="K",
        help="how many nodes get kubernetes_worker: a number or all (default: cluster up's, "
        "every node up to 10 nodes, 10 above)",
    )
