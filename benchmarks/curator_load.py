"""The curator under load: N simulated nodes, each holding what a real node holds.

Run: ``./dev sync && .venv/bin/python benchmarks/curator_load.py [--sizes 1000 5000 10000]
[--without-offload]``.

Three kinds of process, so that each one's CPU time can be read from /proc and the latency
seen is the curator's, not the simulator's:

- the curator (with its etcd), bootstrapped on a loopback address, with gRPC's encryption
  offload on as a node's process has it (``roleserve_core.rpc._offload``; off with
  ``--without-offload``, for the figures before it); it makes the largest N
  simulated nodes (a key and a node certificate of the cluster's CA each, saved for the
  load) and writes their records into etcd (UP, with a status, cluster networking and a
  prefix, as a real node's), so that the cluster has N nodes;
- the load: N simulated nodes in processes of ``PER_PROCESS`` each, each node on a
  channel of its own with its own mutual TLS identity, as real nodes connect. Every
  simulated node sends a heartbeat at the curator's interval (5 s, each at its own random
  offset), pings on its channel as a real node does (every 30 s), and holds ONE Watch
  stream: the all-nodes Watch (``NodesInCluster``) that ``roleserve_core.workers.nodewatch``
  holds for ``cluster_nodes``, sent as nodewatch sends it. Its events are read as bytes (a real node
  parses them; here only the curator's cost is measured) and searched for markers;
- this process, the probe: one more node that sends a heartbeat every 50 ms on its own
  channel and times each round trip. It is lightly loaded, so what it measures is how
  quickly the curator answers while it serves the N others.

For each N, each against the issue's goal (issue 30, item 4):

- the probe's heartbeat round trips (p50, p99) over two intervals; goal p99 < 50 ms;
- a role change (``UpdateNodeRoles``) of a random simulated node until that node's Watch
  has it, ``ROLE_CHANGES`` times; goal p99 < 100 ms;
- a status change (the probe's ``UpdateNodeStatus``) until every one of the N watchers has
  it, ``STATUS_CHANGES`` times; goal < 2 s each;
- the curator's RSS (its process, without etcd) and CPU over the heartbeat window, per
  1,000 nodes; and how long N Watch streams took to receive their snapshot.

Times across processes are taken with the wall clock of this one machine. The measuring
side's own delay is reported beside the figures: each process (curator, loads, probe)
writes how late its event loop ran and its garbage collector's pauses, each second
(``LoopWatch``), and the report gives them for the heartbeat window and for the changes.

Baseline, in the same run: plain insecure gRPC bidi ping-pong between two tasks of this
process (the transport alone).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import ipaddress
import logging
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import grpc
from _proc import cpu_seconds, status_value
from _report import Summary, print_comparison, summarise
from anyio.streams.buffered import BufferedByteReceiveStream

# This file's directory leaves sys.path (see benchmarks/etcd.py): etcd3aio's namespace
# package ``etcd`` must not meet benchmarks/etcd.py.
_HERE = str(Path(__file__).resolve().parent)
sys.path[:] = [entry for entry in sys.path if str(Path(entry or ".").resolve()) != _HERE]

from typing_extensions import override  # noqa: E402

from roleserve_controlplane.consensus import DEFAULT_TTL, EtcdClient  # noqa: E402
from roleserve_controlplane.curator import ClusterAuthority, ClusterState  # noqa: E402
from roleserve_controlplane.curator.records import record_writes  # noqa: E402
from roleserve_controlplane.proto import state_pb2  # noqa: E402
from roleserve_controlplane.testing import (  # noqa: E402
    CuratorCluster,
    EtcdClusterRunner,
    enrol_node,
    etcd_binary,
)
from roleserve_core.connection.leader import NODE_KEEPALIVE_OPTIONS  # noqa: E402
from roleserve_core.identity import (  # noqa: E402
    NodeCredentials,
    UserCredentials,
    generate_key,
    public_key_der,
)
from roleserve_core.proto import (  # noqa: E402
    common_pb2,
    curator_pb2,
    curator_pb2_grpc,
    management_pb2,
    management_pb2_grpc,
)
from roleserve_core.rpc import enable_encryption_offload, secure_channel  # noqa: E402

INTERVAL = 5.0
PROBE_EVERY = 0.05
"""Seconds between the probe's heartbeats."""
ROLE_CHANGES = 20
STATUS_CHANGES = 3
STARTING = 16
"""Simulated nodes waiting for their Watch snapshot at once, over every load process (a
failover's reconnecting nodes are spread over seconds, too; all at once would hold N
snapshots in flight)."""
PER_PROCESS = 2500
"""Simulated nodes per load process: one event loop serving 10,000 streams would be late
by more than the curator (``LoopWatch`` says by how much)."""

HEARTBEAT_GOAL = 0.050
ROLE_GOAL = 0.100
STATUS_GOAL = 2.0

MARK = b"MARK"
"""Markers in role parameters and statuses: ``MARK`` + the target node's index (5 digits;
``PROBE_TARGET`` for the probe's status) + 8 hex digits, found in the Watch events' bytes."""
MARK_LENGTH = len(MARK) + 5 + 8
PROBE_TARGET = 99999
PROBE_ADDRESS = "127.0.0.100"

WATCH_METHOD = "/roleserve.curator.Curator/Watch"
LOAD_CHANNEL = [
    *NODE_KEEPALIVE_OPTIONS,
    ("grpc.experimental.tcp_max_read_chunk_size", 64 * 1024),
    ("grpc.http2.bdp_probe", 0),
]
"""Each simulated node's channel pings the curator as a real node's does (every 30 s,
``NODE_KEEPALIVE_OPTIONS``; the channels' default of 10 s tripled the pings the curator
answers), and reads at most 64 KiB at a time: gRPC grows a connection's
read buffer to the messages it reads and keeps it, and N snapshots of N nodes would hold
N × N × 200 bytes in the load (a real node has one such buffer)."""

Line = BufferedByteReceiveStream


async def read_line(stream: Line) -> str:
    """The next line a child process printed."""
    with anyio.fail_after(600):
        return (await stream.receive_until(b"\n", 1 << 16)).decode()


def marker(target: int) -> str:
    """A new marker for a change of the simulated node ``target``."""
    return f"{MARK.decode()}{target:05d}{random.getrandbits(32):08x}"


def requests_of(
    receive: anyio.abc.ObjectReceiveStream[curator_pb2.HeartbeatRequest],
) -> AsyncIterator[curator_pb2.HeartbeatRequest]:
    """A request iterator fed by a memory stream: one heartbeat per ``send``."""

    async def requests() -> AsyncIterator[curator_pb2.HeartbeatRequest]:
        async with receive:
            async for request in receive:
                yield request

    return requests()


async def beat(stub: Any, every: float, samples: list[float] | None, count: int | None) -> None:
    """Heartbeats on one stream, ``every`` seconds; round trips into ``samples``."""
    send, receive = anyio.create_memory_object_stream[curator_pb2.HeartbeatRequest](1)
    stream = stub.Heartbeat(requests_of(receive))
    answers = aiter(stream)
    try:
        async with send:
            sent = 0
            while count is None or sent < count:
                start = time.perf_counter()
                await send.send(curator_pb2.HeartbeatRequest())
                await anext(answers)
                sent += 1
                if samples is not None:
                    samples.append(time.perf_counter() - start)
                await anyio.sleep(max(0.0, every - (time.perf_counter() - start)))
    finally:
        stream.cancel()


# -- the curator's process -------------------------------------------------------------


def simulated_directory(directory: Path, index: int) -> Path:
    """Where simulated node ``index``'s credentials are."""
    return directory / "simulated" / str(index)


def simulated_record(index: int, credentials: NodeCredentials) -> state_pb2.NodeRecord:
    """What a real worker node's record holds, about 200 bytes as nodes see it."""
    address = ipaddress.IPv4Address("10.0.0.0") + 1 + index
    record = state_pb2.NodeRecord(
        id=credentials.node_id,
        state=common_pb2.NODE_STATE_UP,
        public_key=public_key_der(credentials.key.public_key()),
        certificate=credentials.certificate_pem,
    )
    record.roles.kubernetes_worker.SetInParent()
    record.status.external_address = str(address)
    record.status.version = "0.30.0"
    record.status.boot_id = random.randbytes(16)
    record.status.timestamp.GetCurrentTime()
    record.clusternet.wireguard_pubkey = "k" * 43 + "="
    record.clusternet.prefixes.append(f"{address}/32")
    record.cluster_prefix = f"10.{64 + index // 256 % 64}.{index % 256}.0/24"
    return record


async def write_simulated(client: EtcdClient, directory: Path, count: int) -> None:
    """``count`` simulated nodes: credentials into ``directory``, records into etcd."""
    secrets = await ClusterState(client).secrets()
    assert secrets is not None
    authority = ClusterAuthority.from_secrets(secrets)
    limiter = anyio.CapacityLimiter(32)

    async def write(index: int) -> None:
        async with limiter:
            key = generate_key()
            certificate = authority.node_certificate(key.public_key())
            credentials = NodeCredentials(key, certificate, authority.ca_certificate)
            credentials.save(simulated_directory(directory, index))
            for name, value in record_writes(simulated_record(index, credentials)):
                await client.put(name, value)

    async with anyio.create_task_group() as tasks:
        for index in range(count):
            tasks.start_soon(write, index)


async def serve(directory: Path, simulated: int, lease_ttl: int = DEFAULT_TTL) -> None:
    """Bootstrap a cluster of ``simulated`` nodes more, write what clients need into
    ``directory``, serve until killed."""
    logging.getLogger("roleserve").propagate = False
    async with (
        EtcdClusterRunner(etcd_binary("debian"), directory / "etcd") as etcd,
        CuratorCluster(etcd, heartbeat_interval=INTERVAL, lease_ttl=lease_ttl) as curators,
    ):
        leader = await curators.bootstrap()
        assert curators.owner is not None
        curators.owner.save(directory / "owner")
        assert leader.member is not None
        async with leader.member.client(leader.member.config.credentials) as client:
            await write_simulated(client, directory, simulated)
        print(leader.endpoint, leader.node_id, flush=True)  # the parent waits for this line
        await LoopWatch(stats_path(directory, "curator")).run()


# -- the load's processes and the curator's: what each one's event loop lost ------------


class LoopWatch:
    """How late this process's event loop runs, and its garbage collector's pauses, written
    as one line a second to ``path``: ``TIME LAG_MAX_MS GC_PAUSES GC_MAX_MS GC_TOTAL_MS
    GEN2_PAUSES GEN2_MAX_MS`` (generation 2: every tracked object scanned).

    The parent reads the lines of its measurement's window: a latency measured while the
    load's own loop ran late, or a collection paused it, is the simulator's, not the
    curator's (and the curator's pauses are the curator's)."""

    TICK = 0.005

    def __init__(self, path: Path) -> None:
        self.path = path
        self._pauses: list[tuple[int, float]] = []
        self._started = 0.0
        gc.callbacks.append(self._collected)

    def _collected(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self._pauses.append((info["generation"], time.perf_counter() - self._started))

    async def run(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", buffering=1) as out:
            while True:
                window = time.perf_counter() + 1.0
                worst = 0.0
                while (now := time.perf_counter()) < window:
                    await anyio.sleep(self.TICK)
                    worst = max(worst, time.perf_counter() - now - self.TICK)
                collected, self._pauses = self._pauses, []
                pauses = [pause for _, pause in collected]
                oldest = [pause for generation, pause in collected if generation == 2]
                out.write(
                    f"{time.time()} {worst * 1e3:.2f} {len(pauses)} "
                    f"{max(pauses, default=0.0) * 1e3:.2f} {sum(pauses) * 1e3:.2f} "
                    f"{len(oldest)} {max(oldest, default=0.0) * 1e3:.2f}\n"
                )


def stats_path(directory: Path, name: str) -> Path:
    """Where the process ``name`` writes its ``LoopWatch`` lines."""
    return directory / "stats" / name


class Load:
    """Simulated nodes ``first`` to ``first + count - 1``, each on its own channel,
    heartbeating and watching every node."""

    def __init__(
        self, directory: Path, endpoint: str, leader_id: str, first: int, count: int
    ) -> None:
        self.directory = directory
        self.endpoint = endpoint
        self.leader_id = leader_id
        self.first = first
        self.count = count
        self.seen: dict[bytes, int] = {}
        """Marker → how many of this process's watchers have it."""
        self.own: dict[int, set[bytes]] = {index: set() for index in range(first, first + count)}

    async def node(self, index: int, *, task_status: Any) -> None:
        credentials = NodeCredentials.load(simulated_directory(self.directory, index))
        async with (
            secure_channel(
                self.endpoint, credentials, node_id=self.leader_id, options=LOAD_CHANNEL
            ) as channel,
            anyio.create_task_group() as tasks,
        ):
            await tasks.start(self._watch, channel, index)
            task_status.started()
            await anyio.sleep(random.random() * INTERVAL)
            tasks.start_soon(self._beat, channel)

    async def _beat(self, channel: Any) -> None:
        """A heartbeat every interval, written and read on the call itself: no request
        iterator, no task feeding it (the probe's ``beat`` keeps those, as a node has)."""
        call = curator_pb2_grpc.CuratorStub(channel).Heartbeat()
        try:
            await call.initial_metadata()  # admitted (see roleserve_core.rpc ADMITTED)
            while True:
                start = time.perf_counter()
                await call.write(curator_pb2.HeartbeatRequest())
                await call.read()
                await anyio.sleep(max(0.0, INTERVAL - (time.perf_counter() - start)))
        finally:
            call.cancel()

    async def _watch(self, channel: Any, index: int, *, task_status: Any) -> None:
        # As nodewatch asks; the answers left as bytes (no deserializer).
        watch = channel.unary_stream(
            WATCH_METHOD, request_serializer=curator_pb2.WatchRequest.SerializeToString
        )
        every_node = curator_pb2.WatchRequest.NodesInCluster()
        call = watch(curator_pb2.WatchRequest(nodes_in_cluster=every_node))
        # Read with read(), not by iterating: grpc.aio's iterator keeps the last message in
        # its frame while it waits for the next, and N watchers would each hold their
        # snapshot of N nodes (N × N × 200 bytes: 20 GB at 10,000; a real node holds one).
        self._markers(await call.read(), index)
        task_status.started()
        while (event := await call.read()) is not grpc.aio.EOF:
            self._markers(event, index)
            del event

    def _markers(self, event: bytes, index: int) -> None:
        at = event.find(MARK)
        while at >= 0:
            self._saw(event[at : at + MARK_LENGTH], index)
            at = event.find(MARK, at + MARK_LENGTH)

    def _saw(self, mark: bytes, index: int) -> None:
        own = self.own[index]
        if mark in own:
            return
        own.add(mark)
        if int(mark[len(MARK) : len(MARK) + 5]) == index:
            print(f"own {mark.decode()} {time.time()}", flush=True)
        seen = self.seen[mark] = self.seen.get(mark, 0) + 1
        if seen == self.count:
            print(f"all {mark.decode()} {time.time()}", flush=True)


async def load(
    directory: Path, endpoint: str, leader_id: str, first: int, count: int, starting: int
) -> None:
    """Start simulated nodes ``first`` to ``first + count - 1``, ``starting`` at a time;
    print ``ready`` once each watches; run until killed."""
    simulated = Load(directory, endpoint, leader_id, first, count)
    watch = LoopWatch(stats_path(directory, f"load-{first}"))
    limiter = anyio.CapacityLimiter(starting)
    started = time.perf_counter()
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(watch.run)

        async def start(index: int) -> None:
            async with limiter:
                await tasks.start(simulated.node, index)

        async with anyio.create_task_group() as starting_group:
            for index in range(first, first + count):
                starting_group.start_soon(start, index)
        # The simulator's own collections would be counted as the curator's latency (at
        # 5,000 nodes: 671 pauses, 21 s of them, some over a second, in two minutes of
        # changes): what lives now is frozen, and nothing is collected from here on.
        gc.freeze()
        gc.disable()
        print(f"ready {time.perf_counter() - started}", flush=True)
        await anyio.sleep_forever()


# -- this process: enrol, probe, change roles and statuses ---------------------------------


class EchoCurator(curator_pb2_grpc.CuratorServicer):
    """Answers heartbeats at once, for the baseline."""

    @override
    async def Heartbeat(
        self, request_iterator: AsyncIterator[curator_pb2.HeartbeatRequest], context: Any
    ) -> AsyncIterator[curator_pb2.HeartbeatResponse]:
        async for _ in request_iterator:
            yield curator_pb2.HeartbeatResponse()


async def ping_pong_baseline(rounds: int) -> list[float]:
    """Insecure bidi ping-pong on one stream, in this process."""
    server = grpc.aio.server()
    curator_pb2_grpc.add_CuratorServicer_to_server(EchoCurator(), server)  # type: ignore[abstract]
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    samples: list[float] = []
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            await beat(curator_pb2_grpc.CuratorStub(channel), 0.0, samples, rounds + 100)
    finally:
        await server.stop(None)
    return samples[100:]


class Loads:
    """The load's processes, and what they printed: when each marker reached its own node
    (``own``), and when it reached every watcher of a process (``all``)."""

    def __init__(self, processes: list[anyio.abc.Process]) -> None:
        self.processes = processes
        self.times: dict[tuple[str, str], list[float]] = {}
        self.setup: list[float] = []
        self.ended = False
        self._changed = anyio.Event()

    async def read(self, process: anyio.abc.Process) -> None:
        """Take in one process's lines until it ends."""
        assert process.stdout is not None
        output = Line(process.stdout)
        ended = (anyio.EndOfStream, anyio.IncompleteRead, anyio.ClosedResourceError)
        with contextlib.suppress(*ended):
            while True:
                words = (await read_line(output)).split()
                if words[0] == "ready":
                    self.setup.append(float(words[1]))
                else:
                    self.times.setdefault((words[0], words[1]), []).append(float(words[2]))
                self._changed.set()
                self._changed = anyio.Event()
        self.ended = True  # its nodes no longer watch: what is awaited may never come
        self._changed.set()

    def _check(self) -> None:
        if self.ended:
            raise RuntimeError("a load process ended (its stderr says why)")

    async def ready(self) -> float:
        """Once every process's nodes watch: the seconds the slowest took."""
        with anyio.fail_after(1800):
            while len(self.setup) < len(self.processes):
                self._check()
                await self._changed.wait()
        return max(self.setup)

    async def seen_at(self, kind: str, mark: str) -> float:
        """The wall-clock time ``mark`` reached its own node (``own``), or the last of
        every watcher (``all``: once each process said it)."""
        wanted = 1 if kind == "own" else len(self.processes)
        with anyio.fail_after(600):
            while len(times := self.times.get((kind, mark), [])) < wanted:
                self._check()
                await self._changed.wait()
        return max(times)


class ProbeWatch:
    """The probe's own Watch of every node, as nodewatch holds it: when each marker came."""

    def __init__(self) -> None:
        self.seen: dict[bytes, float] = {}
        self._changed = anyio.Event()

    async def run(self, channel: Any, *, task_status: Any) -> None:
        watch = channel.unary_stream(
            WATCH_METHOD, request_serializer=curator_pb2.WatchRequest.SerializeToString
        )
        every_node = curator_pb2.WatchRequest.NodesInCluster()
        started = False
        async for event in watch(curator_pb2.WatchRequest(nodes_in_cluster=every_node)):
            now = time.time()
            at = event.find(MARK)
            while at >= 0:
                self.seen.setdefault(event[at : at + MARK_LENGTH], now)
                at = event.find(MARK, at + MARK_LENGTH)
            if not started:
                task_status.started()
                started = True
            self._changed.set()
            self._changed = anyio.Event()

    async def seen_at(self, mark: str) -> float:
        """The wall-clock time at which ``mark`` arrived."""
        with anyio.fail_after(600):
            while (at := self.seen.get(mark.encode())) is None:
                await self._changed.wait()
        return at


class Retries:
    """Calls answered UNAVAILABLE and made again, as a client does ("retry")."""

    count = 0


async def retried(call: Callable[[], Awaitable[object]]) -> None:
    """``call()``, again after 0.1 s while it is answered UNAVAILABLE (etcd busy)."""
    while True:
        try:
            await call()
            return
        except grpc.aio.AioRpcError as exc:
            if exc.code() is not grpc.StatusCode.UNAVAILABLE:
                raise
            Retries.count += 1
            await anyio.sleep(0.1)


async def change_roles(management: Any, node_id: str, mark: str) -> float:
    """Assign ``node_id`` the role ``custom:bench`` marked ``mark``; when it started."""
    change = management_pb2.UpdateNodeRolesRequest.Change(
        role="custom:bench", assign=True, parameters={"marker": mark}
    )
    request = management_pb2.UpdateNodeRolesRequest(node_id=node_id, changes=[change])
    start = time.time()
    await retried(lambda: management.UpdateNodeRoles(request))
    return start


async def probe_role_change(management: Any, probe: str, watch: ProbeWatch, loads: Loads) -> float:
    """Seconds from a role change of the probe until its own Watch had it (returns once
    every watcher had it: the next change starts on an idle curator)."""
    mark = marker(PROBE_TARGET)
    start = await change_roles(management, probe, mark)
    seen = await watch.seen_at(mark) - start
    await loads.seen_at("all", mark)
    return seen


async def role_change(
    management: Any, directory: Path, size: int, loads: Loads
) -> tuple[float, float]:
    """Seconds from a role change of a random simulated node until it was written (the
    call answered), and until the node's Watch had it."""
    target = random.randrange(size)
    mark = marker(target)
    node = NodeCredentials.load(simulated_directory(directory, target)).node_id
    start = await change_roles(management, node, mark)
    written = time.time() - start
    seen = await loads.seen_at("own", mark) - start
    await loads.seen_at("all", mark)  # the next change starts on an idle curator
    return written, seen


async def status_change(curator: Any, probe: str, loads: Loads) -> float:
    """Seconds from a status change of the probe until every watcher had it."""
    mark = marker(PROBE_TARGET)
    status = common_pb2.NodeStatus(external_address=PROBE_ADDRESS, version=mark)
    request = curator_pb2.UpdateNodeStatusRequest(node_id=probe, status=status)
    start = time.time()
    await retried(lambda: curator.UpdateNodeStatus(request))
    return await loads.seen_at("all", mark) - start


async def child(
    *arguments: str, quiet: bool = True, env: dict[str, str] | None = None
) -> anyio.abc.Process:
    """This program again, with ``arguments`` (and ``env``, else this one's); its stderr
    dropped if ``quiet``."""
    return await anyio.open_process(
        [sys.executable, __file__, *arguments],
        stderr=subprocess.DEVNULL if quiet else None,
        env=env,
    )


def curator_environment(offload: bool) -> dict[str, str]:
    """The curator process's environment: gRPC's encryption offload on, as ``roleserve
    node`` turns it on for a node's curator (``rpc._offload``), unless ``offload`` is
    False (``--without-offload``: the figures before it)."""
    environ = dict(os.environ)
    if offload:
        enable_encryption_offload(environ)
    return environ


def descendants(pid: int) -> list[int]:
    """The processes ``pid`` started, and theirs."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return []
    return [found for child in children for found in (int(child), *descendants(int(child)))]


async def stop(process: anyio.abc.Process) -> None:
    """Interrupt ``process``; kill it and its children (the curator's etcd) if it has not
    ended within 30 s: with thousands of streams open, an interrupted load or curator
    process was seen to go on for minutes."""
    process.send_signal(signal.SIGINT)
    with anyio.move_on_after(30):
        await process.wait()
    if process.returncode is None:
        for pid in descendants(process.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        process.kill()
    await process.aclose()


async def main(sizes: list[int], lease_ttl: int, offload: bool) -> None:
    """Start the curator's process, then load it at each size."""
    logging.getLogger("roleserve").propagate = False
    print(f"the curator's encryption offload: {'on' if offload else 'off'}")
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch)
        server = await child(
            "--serve", scratch, str(max(sizes)), str(lease_ttl), env=curator_environment(offload)
        )
        try:
            assert server.stdout is not None
            endpoint, leader_id = (await read_line(Line(server.stdout))).split()
            await measure(directory, server.pid, endpoint, leader_id, sizes)
        finally:
            await stop(server)


def mebibytes(pid: int) -> float:
    """The resident memory of ``pid``, in MiB."""
    return status_value(pid, "VmRSS") / 1024


def against(figure: float, goal: float) -> str:
    """``figure`` in ms next to its goal, and whether it meets it."""
    verdict = "meets" if figure < goal else "MISSES"
    return f"{figure * 1e3:9.1f} ms   goal < {goal * 1e3:.0f} ms: {verdict}"


async def start_loads(
    directory: Path, endpoint: str, leader_id: str, size: int, tasks: anyio.abc.TaskGroup
) -> Loads:
    """``size`` simulated nodes in processes of at most ``PER_PROCESS`` each."""
    processes = -(-size // PER_PROCESS)
    starting = max(4, STARTING // processes)
    children = []
    for first in range(0, size, PER_PROCESS):
        count = min(PER_PROCESS, size - first)
        arguments = [str(directory), endpoint, leader_id, str(first), str(count), str(starting)]
        children.append(await child("--load", *arguments, quiet=False))
    loads = Loads(children)
    for process in children:
        tasks.start_soon(loads.read, process)
    return loads


class Window:
    """What the processes' ``LoopWatch`` lines say of the seconds from ``start`` to now."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.start = time.time()

    def lines(self, prefix: str) -> list[list[float]]:
        """Each line in the window of the processes whose name starts with ``prefix``."""
        end = time.time()
        found = []
        for path in (self.directory / "stats").glob(f"{prefix}*"):
            for line in path.read_text().splitlines():
                fields = [float(field) for field in line.split()]
                if self.start <= fields[0] - 1.0 and fields[0] <= end:
                    found.append(fields)
        return found

    def describe(self, prefix: str) -> str:
        """``loop late by at most X ms (median of the seconds' worst Y ms); GC: N pauses,
        the longest Z ms, T ms in all``."""
        lines = self.lines(prefix)
        if not lines:
            return "no lines"
        worst = sorted(line[1] for line in lines)
        return (
            f"loop late by at most {worst[-1]:.0f} ms (median of the seconds' worst "
            f"{worst[len(worst) // 2]:.1f} ms); GC {sum(line[2] for line in lines):.0f} "
            f"pauses, longest {max(line[3] for line in lines):.1f} ms, "
            f"{sum(line[4] for line in lines):.0f} ms in all ({sum(line[5] for line in lines):.0f}"
            f" full, longest {max(line[6] for line in lines):.1f} ms), over {len(lines)} s"
            " of its processes"
        )


def cpu_of(pids: list[int]) -> float:
    """The CPU seconds ``pids`` used together."""
    return sum(cpu_seconds(pid) for pid in pids)


async def measure(
    directory: Path, pid: int, endpoint: str, leader_id: str, sizes: list[int]
) -> None:
    """Enrol the identities, then load the curator at each size."""
    owner = UserCredentials.load(directory / "owner")
    probe = await enrol_node(
        endpoint, leader_id, owner, generate_key(), ipaddress.IPv4Address(PROBE_ADDRESS)
    )
    baseline = summarise(await ping_pong_baseline(2000))
    async with (
        secure_channel(endpoint, probe, node_id=leader_id) as probe_channel,
        secure_channel(endpoint, owner, node_id=leader_id) as management_channel,
        anyio.create_task_group() as tasks,
    ):
        tasks.start_soon(LoopWatch(stats_path(directory, "probe")).run)
        management = management_pb2_grpc.ManagementStub(management_channel)
        curator = curator_pb2_grpc.CuratorStub(probe_channel)
        watch = ProbeWatch()
        await tasks.start(watch.run, probe_channel)
        for size in sizes:
            idle_rss = mebibytes(pid)
            loads = await start_loads(directory, endpoint, leader_id, size, tasks)
            pids = [process.pid for process in loads.processes]
            try:
                setup = await loads.ready()
                await anyio.sleep(INTERVAL)  # every simulated node has sent a heartbeat
                samples: list[float] = []
                window = Window(directory)
                cpu = cpu_seconds(pid), cpu_of(pids), time.perf_counter()
                await beat(curator, PROBE_EVERY, samples, int(2 * INTERVAL / PROBE_EVERY))
                wall = time.perf_counter() - cpu[2]
                curator_cpu = (cpu_seconds(pid) - cpu[0]) / wall
                load_cpu = (cpu_of(pids) - cpu[1]) / wall
                loaded_rss = mebibytes(pid)
                load_rss = sum(mebibytes(load) for load in pids)
                idle = {name: window.describe(name) for name in ("curator", "load", "probe")}
                # Printed at once: a later failure (a curator starved of CPU by other work
                # losing its lease, or etcd not answering) leaves these figures.
                report_heartbeats(size, samples, baseline)
                print(f"  curator CPU    {100 * curator_cpu:.0f} % of one core, heartbeats only;")
                print(f"                 {100 * curator_cpu * 1000 / size:.1f} % per 1,000 nodes")
                print(f"  curator RSS    {loaded_rss:.0f} MiB ({idle_rss:.0f} MiB idle before);")
                print(
                    f"                 {(loaded_rss - idle_rss) * 1000 / size:.1f} MiB per "
                    "1,000 nodes"
                )
                print(
                    f"  load CPU       {100 * load_cpu:.0f} % of one core (the {size:,} nodes, "
                    f"{len(pids)} processes)"
                )
                print(f"  load RSS       {load_rss:.0f} MiB")
                print(f"  start          {size:,} Watch snapshots received in {setup:.1f} s")
                print_loops("heartbeats only", idle)
                window = Window(directory)
                roles = [
                    await role_change(management, directory, size, loads)
                    for _ in range(ROLE_CHANGES)
                ]
                own = [
                    await probe_role_change(management, probe.node_id, watch, loads)
                    for _ in range(ROLE_CHANGES)
                ]
                statuses = [
                    await status_change(curator, probe.node_id, loads)
                    for _ in range(STATUS_CHANGES)
                ]
                await anyio.sleep(1.1)  # the last second's lines
                changing = {name: window.describe(name) for name in ("curator", "load", "probe")}
                report_changes(size, own, roles, statuses)
                print_loops("changes", changing)
            finally:
                with anyio.CancelScope(shield=True):
                    for process in loads.processes:
                        await stop(process)
        tasks.cancel_scope.cancel()


def print_loops(phase: str, described: dict[str, str]) -> None:
    """What each kind of process's ``LoopWatch`` said of ``phase``."""
    print(f"  event loops during {phase} (the measuring side's own delay):")
    for name, line in described.items():
        print(f"    {name:8} {line}")


def report_heartbeats(size: int, samples: list[float], baseline: Summary) -> None:
    """Print one size's heartbeat round trips against the goal and the baseline."""
    heartbeats = summarise(samples)
    print_comparison(
        f"N = {size:,}: the probe's heartbeat round trips over {2 * INTERVAL:.0f} s",
        heartbeats,
        baseline,
        "insecure bidi ping-pong, one stream, no load",
    )
    print(f"  heartbeat p99  {against(heartbeats.p99, HEARTBEAT_GOAL)}")


def report_changes(
    size: int, own: list[float], roles: list[tuple[float, float]], statuses: list[float]
) -> None:
    """Print one size's role and status changes, each against its goal."""
    written = summarise([write for write, _ in roles])
    loaded = summarise([seen for _, seen in roles])
    probe = summarise(own)
    print(f"  role change    of the probe, to its own Watch: median {probe.median * 1e3:.1f} ms,")
    print(f"     p99 (max)   {against(probe.p99, ROLE_GOAL)}")
    print("  role change    of a random simulated node, to its Watch in the load process (its")
    print(
        f"                 N watchers share one event loop): median {loaded.median * 1e3:.1f} ms,"
    )
    print(f"                 p99 {loaded.p99 * 1e3:.1f} ms; written (answered) median", end=" ")
    print(f"{written.median * 1e3:.1f} ms, p99 {written.p99 * 1e3:.1f} ms; {len(roles)} of each")
    print(f"  status change  to all {size:,} watchers, worst of {len(statuses)}:")
    print(f"                 {against(max(statuses), STATUS_GOAL)}")
    if Retries.count:
        print(f"  retried        {Retries.count} calls answered UNAVAILABLE (times include them)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 5000, 10000])
    parser.add_argument(
        "--lease-ttl",
        type=int,
        default=DEFAULT_TTL,
        help="the curator's lease, in seconds (a curator whose loop stalls for longer, "
        "on a machine busy with other work, loses its leadership and ends every stream)",
    )
    parser.add_argument(
        "--without-offload",
        action="store_true",
        help="the curator without gRPC's encryption offload, which a node turns on "
        "(roleserve_core.rpc._offload): the figures before it",
    )
    parser.add_argument("--serve", nargs="+", help=argparse.SUPPRESS)  # DIR [N [TTL]]
    parser.add_argument("--load", nargs=6, help=argparse.SUPPRESS)
    options = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        if options.serve:
            defaults = ["", "0", str(DEFAULT_TTL)]
            scratch, simulated, lease_ttl = options.serve + defaults[len(options.serve) :]
            anyio.run(serve, Path(scratch), int(simulated), int(lease_ttl), backend="asyncio")
        elif options.load:
            directory, endpoint, leader_id, first, count, starting = options.load
            anyio.run(
                load,
                Path(directory),
                endpoint,
                leader_id,
                int(first),
                int(count),
                int(starting),
                backend="asyncio",
            )
        else:
            anyio.run(
                main,
                options.sizes,
                options.lease_ttl,
                not options.without_offload,
                backend="asyncio",
            )
