"""A role change, end to end: from ``roles set`` to the gated worker healthy on the node.

Run: ``./dev sync && .venv/bin/python benchmarks/role_change.py [--flips 200]``.

A one-node cluster of real processes (``LocalCluster``) runs the example plugin ``hello``,
whose worker is gated on the custom role ``hello`` and logs its greeting as soon as it is
healthy. Each flip assigns the role with a new greeting (``UpdateNodeRoles``, as ``roleserve
ctl roles set`` does) and times it until that greeting arrives on a followed ``GetLogs``
stream of the worker's DN; then removes the role and times it until the gate says the
worker stopped. The path measured: the curator's etcd write, its watch, the fan-out to the
node's Watch stream, rolefetch setting ``roles``, the gate starting the worker, the log
record reaching the follower.

Baseline, in the same run: one ``GetNodes`` round trip to the same curator.
"""

from __future__ import annotations

import argparse
import ipaddress
import random
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import grpc
from _report import print_comparison, summarise

from roleserve_core.localcluster import LocalCluster
from roleserve_core.proto import management_pb2, nodemanagement_pb2

HELLO = "root.role.hello"


async def change(management: Any, node_id: str, assign: bool, greeting: str = "") -> None:
    parameters = {"greeting": greeting} if assign else {}
    edit = management_pb2.UpdateNodeRolesRequest.Change(
        role="custom:hello", assign=assign, parameters=parameters
    )
    await management.UpdateNodeRoles(
        management_pb2.UpdateNodeRolesRequest(node_id=node_id, changes=[edit])
    )


async def until_logged(lines: AsyncIterator[Any], text: str) -> None:
    async for response in lines:
        if any(text in entry.message for entry in response.entries):
            return
    raise RuntimeError("the log stream ended")


async def until_stored(logs: Any, text: str) -> None:
    """Ask the worker's stored records until one holds ``text`` (untimed)."""
    request = nodemanagement_pb2.GetLogsRequest(dn=HELLO, backlog=-1)
    while True:
        try:
            async for response in logs.GetLogs(request):
                if any(text in entry.message for entry in response.entries):
                    return
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.NOT_FOUND:  # no record of the DN yet
                raise
        await anyio.sleep(0.05)


async def warm_up(management: Any, logs: Any, node_id: str) -> None:
    """One untimed flip, so that the worker's DN has records: the followed stream then
    starts with the last of them, and is known to be open before the first timed flip. (A
    stream asked with no backlog says nothing until a record comes, and misses a record
    logged before its follower exists: the first flip could wait for ever.)"""
    await change(management, node_id, True, "warm-up")
    await until_stored(logs, "greeting: warm-up")
    await change(management, node_id, False)
    await until_stored(logs, "no longer hold")


async def measure(cluster: LocalCluster, flips: int) -> None:
    node = cluster.nodes[0]
    node_id = cluster.node_id(node)
    assert node_id is not None
    started, stopped, baseline = [], [], []
    async with cluster.management() as management, cluster.node_management(node) as logs:
        for _ in range(flips):
            start = time.perf_counter()
            await management.stream("GetNodes", management_pb2.GetNodesRequest())
            baseline.append(time.perf_counter() - start)
        await warm_up(management, logs, node_id)
        request = nodemanagement_pb2.GetLogsRequest(dn=HELLO, backlog=1, follow=True)
        stream = logs.GetLogs(request)
        lines = aiter(stream)
        try:
            await anext(lines)  # the stored record: the follower exists
            for flip in range(flips):
                start = time.perf_counter()
                await change(management, node_id, True, f"flip-{flip}")
                await until_logged(lines, f"greeting: flip-{flip}")
                started.append(time.perf_counter() - start)
                start = time.perf_counter()
                await change(management, node_id, False)
                await until_logged(lines, "no longer hold")
                stopped.append(time.perf_counter() - start)
        finally:
            stream.cancel()
    base = summarise(baseline)
    print_comparison(
        f"roles set → gated worker healthy, {flips} flips",
        summarise(started),
        base,
        "one GetNodes round trip",
    )
    print_comparison(
        f"roles unset → gated worker stopped, {flips} flips",
        summarise(stopped),
        base,
        "one GetNodes round trip",
    )


async def main(flips: int) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        first = ipaddress.IPv4Address(f"127.{random.randint(1, 254)}.{random.randint(0, 254)}.11")
        cluster = LocalCluster(Path(scratch), 1, first_address=first)
        try:
            await cluster.up()
            await measure(cluster, flips)
        finally:
            await cluster.down()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flips", type=int, default=200)
    anyio.run(main, parser.parse_args().flips)
