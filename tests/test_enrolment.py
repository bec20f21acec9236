"""Enrolment carried out: register, join and bootstrap, run by the ``Enrolment`` runnable.

::

    plan_enrolment (tests/test_enrolment_plan.py) ─▶ Enrolment at root.enrolment
        register   a follower names the leader ─▶ RegisterNode ─▶ CommitNode until approved
        join       the saved credentials, no call at all
        bootstrap  bootstrap value ─▶ (the test, as controlplane) bootstrapped value
                   ─▶ owner access directory, roles, credentials
    each path ─▶ node/credentials (one rename) ─▶ node_credentials, node_id
    a refusal waiting cannot cure ─▶ stop(reason); anything else ─▶ retried after backoff

Each test runs the runnable in a node runtime (the core's values, no workers) under a
supervisor on the fake clock, as the node process does, against fake curators of the test
kit: real gRPC servers with mutual TLS on loopback addresses of the test's own. The kit's
fake answers RegisterNode and CommitNode with UNIMPLEMENTED, so the leader here is a
``Registrar`` that enrols nodes as the real curator does. The CommitNode interval is
shortened; tests wait for calls, values, states and files, never on a sleep.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import importlib
import itertools
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import anyio
import grpc
import pytest
from typing_extensions import override

from roleserve_core import hookimpl
from roleserve_core.access import ClusterAccess
from roleserve_core.cli import main
from roleserve_core.connection.curators import KnownCurators
from roleserve_core.datadir import NodeDataDirectory
from roleserve_core.enrolment import Enrolment, EnrolmentRequest, plan_enrolment
from roleserve_core.event import ValueWatch
from roleserve_core.identity import (
    CA_FILE,
    CERTIFICATE_FILE,
    KEY_FILE,
    Credentials,
    NodeCredentials,
    PrivateKey,
    PublicKey,
    UserCredentials,
    certificate_to_pem,
    generate_key,
    issue_node_certificate,
    node_id,
    private_key_from_pem,
    private_key_to_pem,
    public_key_der,
)
from roleserve_core.logtree import PROCESS_LOGGER
from roleserve_core.ports import CURATOR_PORT, endpoint
from roleserve_core.proto import curator_pb2, node_pb2
from roleserve_core.registry import ValueKey
from roleserve_core.roles import ConsensusMember, KubernetesWorker, NodeRoles
from roleserve_core.rpc import UnauthenticatedPeer, current_peer
from roleserve_core.runtime import CORE_READER
from roleserve_core.supervisor import RunnableStatus, State
from roleserve_core.testing import (
    FakeClock,
    FakeCurator,
    NodeHarness,
    PluginHarness,
    SupervisorRunner,
    ThrowawayCA,
    random_loopback,
    wait_for_value,
)
from roleserve_core.values import (
    BOOTSTRAP,
    BOOTSTRAPPED,
    NETWORK,
    NODE_CREDENTIALS,
    NODE_ID,
    Bootstrapped,
    NetworkStatus,
)
from roleserve_core.workers.rolefetch import ROLES_FILE, load_saved_roles

pytestmark = pytest.mark.anyio

T = TypeVar("T")

register_module = importlib.import_module("roleserve_core.enrolment.register")
"""The module (``roleserve_core.enrolment.register`` is the function, re-exported)."""

ENROLMENT = "root.enrolment"
CONTROLPLANE = "fake_controlplane"
"""A test plugin that owns ``bootstrapped``, as the controlplane plugin does."""

WAIT = 5.0
"""Seconds any one wait may take; everything here happens in well under one."""

COMMIT_EVERY = 0.02
"""The CommitNode interval in these tests, instead of a second."""

SECRET = b"the test cluster's register ticket"

MEMBER = NodeRoles(
    consensus_member=ConsensusMember(ca_certificate=b"ca", peer_certificate=b"peer"),
    kubernetes_worker=KubernetesWorker(),
)


@pytest.fixture(autouse=True)
def commit_often(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(register_module, "COMMIT_EVERY", COMMIT_EVERY)


class Registrar(FakeCurator):
    """A fake leader that enrols nodes as the real curator does.

    RegisterNode checks the ticket (PERMISSION_DENIED, "wrong register ticket"); CommitNode
    answers PERMISSION_DENIED, "not approved yet", until ``approve()``, then issues a node
    certificate for the key the caller's ephemeral certificate proves. ``refuse`` comes
    first, as for every method of the fake.
    """

    def __init__(self, ca: ThrowawayCA) -> None:
        super().__init__(ca.node())
        self.ca = ca
        self.approved = False
        self.enrolling: list[str] = []
        """The node ID of each RegisterNode and CommitNode caller's key, in order."""

    def approve(self) -> None:
        """As ``roleserve ctl approve``: the next CommitNode gets the certificate."""
        self.approved = True

    async def _enrolling_key(self, method: str, request: Any, context: Any) -> PublicKey:
        await self._admit(method, request, context)
        peer = current_peer()
        key = peer.public_key if isinstance(peer, UnauthenticatedPeer) else None
        if key is None:
            await context.abort(
                grpc.StatusCode.UNAUTHENTICATED,
                "call this with the ephemeral certificate of the key to enrol",
            )
            raise AssertionError("abort returned")  # pragma: no cover - abort raises
        self.enrolling.append(node_id(key))
        return key

    @override
    async def RegisterNode(
        self, request: curator_pb2.RegisterNodeRequest, context: Any
    ) -> curator_pb2.RegisterNodeResponse:
        key = await self._enrolling_key("RegisterNode", request, context)
        if request.register_ticket != SECRET:
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, "wrong register ticket")
        return curator_pb2.RegisterNodeResponse(node_id=node_id(key))

    @override
    async def CommitNode(
        self, request: curator_pb2.CommitNodeRequest, context: Any
    ) -> curator_pb2.CommitNodeResponse:
        key = await self._enrolling_key("CommitNode", request, context)
        if not self.approved:
            await context.abort(
                grpc.StatusCode.PERMISSION_DENIED,
                f"node {node_id(key)} is not approved yet; wait for an operator to approve it",
            )
        return curator_pb2.CommitNodeResponse(
            ca_certificate=certificate_to_pem(self.ca.certificate),
            node_certificate=certificate_to_pem(
                issue_node_certificate(self.ca.key, self.ca.certificate, key)
            ),
        )


class FakeControlplane:
    """Owns ``bootstrapped``; the test sets it as the controlplane plugin would."""

    @hookimpl
    def roleserve_values(self) -> list[ValueKey[Any]]:
        return [BOOTSTRAPPED]


@dataclass
class Enrolling:
    """A node runtime with ``Enrolment`` at root.enrolment, as the node process runs it."""

    harness: NodeHarness
    stops: list[str]
    """The reasons the runnable asked the node to stop for."""

    def value(self, key: ValueKey[T]) -> ValueWatch[T]:
        return self.harness.runtime.registry.read(key, CORE_READER)

    async def credentials(self) -> NodeCredentials:
        """The node_credentials value, once set."""
        return await wait_for_value(self.value(NODE_CREDENTIALS), timeout=WAIT)

    async def wait(self, predicate: Callable[[RunnableStatus], bool]) -> RunnableStatus:
        return await self.harness.wait_status(ENROLMENT, predicate, timeout=WAIT)

    def status(self) -> RunnableStatus:
        return self.harness.status(ENROLMENT)

    def logged(self, level: int) -> list[str]:
        entries = self.harness.runtime.logtree.entries(ENROLMENT)
        return [entry.message for entry in entries if entry.level == level]


Enrol = Callable[..., Awaitable[Enrolling]]


@pytest.fixture
def ca() -> ThrowawayCA:
    return ThrowawayCA()


@pytest.fixture
def datadir(tmp_path: Path) -> NodeDataDirectory:
    return NodeDataDirectory(tmp_path / "node1")


@pytest.fixture
async def curators() -> AsyncIterator[contextlib.AsyncExitStack]:
    """Fake curators serve until the test ends (after the node: ``enrol`` requests this
    fixture, so it is set up before the node and torn down after)."""
    async with contextlib.AsyncExitStack() as stack:
        yield stack


@dataclass
class Cluster:
    ca: ThrowawayCA
    leader: Registrar
    follower: FakeCurator
    """The node's join address: it names the leader."""

    def register(self, secret: bytes = SECRET) -> dict[str, Any]:
        """``--register TICKET --join-address <follower>``."""
        return {"ticket": self.ca.ticket(secret), "join_addresses": (self.follower.endpoint,)}


@pytest.fixture
async def cluster(ca: ThrowawayCA, curators: contextlib.AsyncExitStack) -> Cluster:
    leader = Registrar(ca)
    await curators.enter_async_context(leader)
    follower = await curators.enter_async_context(FakeCurator(ca.node()))
    leader.lead()
    follower.follow(leader)
    return Cluster(ca, leader, follower)


@pytest.fixture
def enrol(
    curators: contextlib.AsyncExitStack,
    node: Callable[..., Awaitable[NodeHarness]],
    datadir: NodeDataDirectory,
) -> Enrol:
    """``await enrol(**request)``: plan with the node's options, as ``node run`` does,
    and run the plan; the node's address is a loopback one unless ``network=`` says."""

    async def start(*, network: NetworkStatus | None = None, **request: Any) -> Enrolling:
        plugins = PluginHarness()
        plugins.register(FakeControlplane(), CONTROLPLANE)
        runtime = plugins.runtime(datadir.root)
        values = runtime.registry.scoped(CORE_READER)
        plan = plan_enrolment(datadir, EnrolmentRequest(**request), can_bootstrap=True)
        stops: list[str] = []
        known = KnownCurators(datadir)
        runtime.add_service("enrolment", Enrolment(plan, datadir, values, known, stops.append))
        values.set(NETWORK, network or NetworkStatus(random_loopback()))
        return Enrolling(await node(runtime), stops)

    return start


def names(directory: Path) -> list[str]:
    return sorted(path.name for path in directory.iterdir())


def the_key(path: Path) -> PrivateKey:
    return private_key_from_pem(path.read_bytes())


def same(first: Credentials, second: Credentials) -> bool:
    """The same key, certificate and CA."""
    return (first.key_pem, first.certificate_pem, first.ca_pem) == (
        second.key_pem,
        second.certificate_pem,
        second.ca_pem,
    )


def pending(datadir: NodeDataDirectory) -> node_pb2.PendingRegistration:
    saved = node_pb2.PendingRegistration()
    assert datadir.read_message(datadir.registration, saved)
    return saved


# -- register ---------------------------------------------------------------------------


async def test_register_through_a_follower_waits_for_approval_then_saves_the_credentials(
    cluster: Cluster, enrol: Enrol, datadir: NodeDataDirectory
) -> None:
    leader, follower = cluster.leader, cluster.follower
    follower.follow(None)  # an election: no leader to name yet
    node = await enrol(**cluster.register())

    await follower.wait_calls("GetCurrentLeader", 1, timeout=WAIT)
    assert node.status().note == f"looking for the cluster's leader at {follower.endpoint}"

    # The follower names the leader: the node registers there, then commits until approved.
    follower.follow(leader)
    refused = await leader.wait_calls("CommitNode", 3, timeout=WAIT)
    identity = node_id(the_key(datadir.key).public_key())
    waiting = f"waiting for approval: roleserve ctl approve {identity}"
    assert node.status().note == waiting
    assert node.status().state is State.NEW
    assert f"registered as {identity}; {waiting}" in node.logged(logging.INFO)
    gaps = [later.at - earlier.at for earlier, later in itertools.pairwise(refused)]
    assert min(gaps) >= COMMIT_EVERY * 0.8, gaps  # every COMMIT_EVERY, not in a tight loop
    # Registered and waiting: the pending registration says so, for a restart to resume.
    assert pending(datadir).registered
    assert not datadir.enrolled
    assert not node.value(NODE_CREDENTIALS).statistics().is_set

    leader.approve()
    credentials = await node.credentials()
    await node.wait(lambda status: status.state is State.DONE)

    assert credentials.node_id == identity
    assert node.value(NODE_ID).get_nowait() == identity
    assert credentials.ca_pem == certificate_to_pem(cluster.ca.certificate)
    assert same(NodeCredentials.load(datadir.credentials), credentials)
    assert KnownCurators(datadir).seeds == [follower.endpoint]
    assert names(datadir.node) == ["credentials", "curators.pb", "join-key.pem", "key.pem"]
    assert f"approved: this node is {identity}" in node.logged(logging.INFO)
    assert node.status().note == ""
    assert node.stops == []

    # The whole conversation: the leader was found through the follower only (asked once
    # or more: it had no leader at first); one RegisterNode with the ticket and the join
    # key, then CommitNode until approved, all over the node key's ephemeral certificate.
    assert {call.method for call in follower.calls.get_nowait()} == {"GetCurrentLeader"}
    methods = [call.method for call in leader.calls.get_nowait()]
    assert methods == ["RegisterNode"] + ["CommitNode"] * (len(methods) - 1)
    assert len(methods) >= 5
    assert leader.requests("RegisterNode") == [
        curator_pb2.RegisterNodeRequest(
            register_ticket=SECRET,
            join_key=public_key_der(the_key(datadir.join_key).public_key()),
        )
    ]
    assert set(leader.enrolling) == {identity}


async def test_a_restart_while_waiting_for_approval_resumes_without_registering_again(
    cluster: Cluster,
    enrol: Enrol,
    datadir: NodeDataDirectory,
    supervisor_runner: SupervisorRunner,
) -> None:
    leader = cluster.leader
    first = await enrol(**cluster.register())
    await leader.wait_calls("CommitNode", 1, timeout=WAIT)
    await supervisor_runner.stop(first.harness.supervisor)  # the node process stops
    identity = node_id(the_key(datadir.key).public_key())
    assert pending(datadir).registered

    leader.approve()
    resumed = await enrol()  # no flags: the pending registration resumes
    credentials = await resumed.credentials()
    assert credentials.node_id == identity
    assert len(leader.requests("RegisterNode")) == 1
    assert len(leader.requests("CommitNode")) >= 2
    assert set(leader.enrolling) == {identity}  # the same key, so the same node
    assert not datadir.registration.exists()


async def test_a_registration_whose_answer_was_lost_goes_on_to_commit(
    cluster: Cluster, enrol: Enrol, datadir: NodeDataDirectory
) -> None:
    """FAILED_PRECONDITION: this key registered before and is past NEW already."""
    cluster.leader.refuse("RegisterNode", grpc.StatusCode.FAILED_PRECONDITION, "past NEW")
    cluster.leader.approve()
    node = await enrol(**cluster.register())
    credentials = await node.credentials()
    assert credentials.node_id == node_id(the_key(datadir.key).public_key())
    assert [call.method for call in cluster.leader.calls.get_nowait()] == [
        "RegisterNode",
        "CommitNode",
    ]
    assert node.stops == []


REFUSED_REGISTRATION = (
    "the cluster refused the registration: {details}. Get a new ticket with "
    "`roleserve ctl ticket` and start the node again with --register"
)


@pytest.mark.parametrize(
    ("secret", "refusal", "message", "methods"),
    [
        pytest.param(
            b"an old ticket",
            None,
            REFUSED_REGISTRATION.format(details="wrong register ticket"),
            ["RegisterNode"],
            id="wrong-ticket",
        ),
        pytest.param(
            SECRET,
            ("RegisterNode", grpc.StatusCode.ALREADY_EXISTS, "join key taken"),
            REFUSED_REGISTRATION.format(details="join key taken"),
            ["RegisterNode"],
            id="join-key-taken",
        ),
        pytest.param(
            SECRET,
            ("RegisterNode", grpc.StatusCode.INVALID_ARGUMENT, "join key is not 32 bytes"),
            REFUSED_REGISTRATION.format(details="join key is not 32 bytes"),
            ["RegisterNode"],
            id="invalid-request",
        ),
        pytest.param(
            SECRET,
            ("CommitNode", grpc.StatusCode.FAILED_PRECONDITION, "decommissioned"),
            "the cluster refused {identity}: decommissioned",
            ["RegisterNode", "CommitNode"],
            id="decommissioned",
        ),
    ],
)
async def test_a_definitive_refusal_stops_the_node_and_leaves_no_credentials(
    cluster: Cluster,
    enrol: Enrol,
    datadir: NodeDataDirectory,
    secret: bytes,
    refusal: tuple[str, grpc.StatusCode, str] | None,
    message: str,
    methods: list[str],
) -> None:
    if refusal is not None:
        cluster.leader.refuse(*refusal)
    cluster.leader.approve()  # a refusal is final even for an approved node
    node = await enrol(**cluster.register(secret))

    failed = await node.wait(lambda status: status.failures == 1)
    expected = message.format(identity=node_id(the_key(datadir.key).public_key()))
    assert node.stops == [expected]
    assert failed.final  # not restarted: the node stops anyway, and another try is refused
    assert failed.restart_in is None
    assert failed.last_error is not None
    assert failed.last_error.summary() == f"roleserve_core.errors.EnrolmentError: {expected}"
    assert node.logged(logging.ERROR) == [f"failed for good, not restarting: {expected}"]
    assert [call.method for call in cluster.leader.calls.get_nowait()] == methods
    # Nothing of credentials, not even a staging directory; the registration stays.
    assert not node.value(NODE_CREDENTIALS).statistics().is_set
    assert names(datadir.node) == ["join-key.pem", "key.pem", "registration.pb"]
    assert pending(datadir).registered == ("CommitNode" in methods)


async def test_a_passing_failure_is_retried_after_the_backoff_without_stopping_the_node(
    cluster: Cluster, enrol: Enrol, fake_clock: FakeClock
) -> None:
    """UNAVAILABLE (a curator restarting) is no refusal: the supervisor tries again."""
    leader = cluster.leader
    leader.refuse("CommitNode", grpc.StatusCode.UNAVAILABLE, "restarting")
    node = await enrol(**cluster.register())
    failed = await node.wait(lambda status: status.failures == 1)
    assert failed.restart_in is not None  # waiting out its backoff
    assert node.stops == []

    leader.allow("CommitNode")
    leader.approve()
    await fake_clock.advance_to_next()  # the backoff, on the supervisor's fake clock
    await node.credentials()
    assert [call.method for call in leader.calls.get_nowait()] == [
        "RegisterNode",  # once: the restart resumes from the registered registration
        "CommitNode",
        "CommitNode",
    ]
    assert node.stops == []


# -- join -------------------------------------------------------------------------------


async def test_join_announces_the_saved_credentials_without_asking_the_cluster(
    cluster: Cluster, enrol: Enrol, datadir: NodeDataDirectory, tmp_path: Path
) -> None:
    saved = cluster.ca.node()
    datadir.create()
    saved.save(datadir.credentials)
    KnownCurators(datadir).set_seeds([cluster.follower.endpoint])
    # Leftovers of an enrolment that crashed just after saving the credentials.
    datadir.bootstrapping.write_text(f"{tmp_path / 'owner'}\n")
    datadir.registration.write_bytes(b"")

    node = await enrol()
    credentials = await node.credentials()
    await node.wait(lambda status: status.state is State.DONE)

    assert same(credentials, saved)
    assert node.value(NODE_ID).get_nowait() == saved.node_id
    assert f"joining the cluster as {saved.node_id} with the saved credentials" in node.logged(
        logging.INFO
    )
    assert names(datadir.node) == ["credentials", "curators.pb"]
    assert cluster.leader.calls.get_nowait() == ()
    assert cluster.follower.calls.get_nowait() == ()
    assert node.stops == []


async def test_join_with_mismatched_credentials_stops_the_node(
    ca: ThrowawayCA, enrol: Enrol, datadir: NodeDataDirectory
) -> None:
    datadir.create()
    ca.node().save(datadir.credentials)
    (datadir.credentials / KEY_FILE).write_bytes(private_key_to_pem(generate_key()))

    node = await enrol()
    failed = await node.wait(lambda status: status.failures == 1)
    expected = f"{datadir.credentials}: the private key does not belong to the certificate"
    assert node.stops == [expected]
    assert failed.restart_in is not None  # waiting out its backoff
    assert not node.value(NODE_CREDENTIALS).statistics().is_set


async def test_join_with_an_expired_certificate_stops_the_node_saying_how_to_enrol_anew(
    ca: ThrowawayCA, enrol: Enrol, datadir: NodeDataDirectory
) -> None:
    now = datetime.datetime.now(datetime.UTC)
    expired_at = (now - datetime.timedelta(days=1)).replace(microsecond=0)
    key = generate_key()
    certificate = issue_node_certificate(
        ca.key,
        ca.certificate,
        key.public_key(),
        not_before=now - datetime.timedelta(days=31),
        not_after=expired_at,
    )
    datadir.create()
    ca.node(key).save(datadir.credentials)  # then its certificate expired:
    (datadir.credentials / CERTIFICATE_FILE).write_bytes(certificate_to_pem(certificate))
    identity = node_id(key.public_key())

    node = await enrol()
    await node.wait(lambda status: status.failures == 1)
    assert node.stops == [
        f"the node certificate of {identity} expired at "
        f"{expired_at:%Y-%m-%d %H:%M:%S} UTC; the cluster no longer accepts it: decommission "
        f"the node (roleserve ctl decommission --yes {identity}), remove the data "
        f"directory {datadir.root} and register the machine anew"
    ]
    assert not node.value(NODE_CREDENTIALS).statistics().is_set


class Recorded(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture
def node_log() -> Iterator[list[str]]:
    """What the node process logs about itself. It configures the process logger (a
    handler on the stderr it saw at import); that is put back afterwards."""
    process = logging.getLogger(PROCESS_LOGGER)
    handlers, level, propagate = list(process.handlers), process.level, process.propagate
    own = logging.getLogger(f"{PROCESS_LOGGER}.node")
    recorded = Recorded()
    own.addHandler(recorded)
    yield recorded.messages
    own.removeHandler(recorded)
    process.handlers[:] = handlers
    process.setLevel(level)
    process.propagate = propagate


@pytest.mark.timeout(15)  # a node that does not stop would run until the global timeout
def test_a_refusal_stops_the_node_process_with_exit_code_1(
    ca: ThrowawayCA,
    datadir: NodeDataDirectory,
    node_log: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``roleserve node run`` in this process: the stop callback ends it with exit 1."""
    monkeypatch.setenv("ROLESERVE_PLUGINS", "")  # the built-in plugins only
    datadir.create()
    ca.node().save(datadir.credentials)
    (datadir.credentials / KEY_FILE).write_bytes(private_key_to_pem(generate_key()))

    address = str(random_loopback())
    code = main(["node", "run", "--data-dir", str(datadir.root), "--address", address])
    assert code == 1
    reason = f"{datadir.credentials}: the private key does not belong to the certificate"
    assert node_log[-1] == f"node stopped: {reason}"


# -- bootstrap --------------------------------------------------------------------------


async def test_bootstrap_waits_for_the_cluster_then_saves_owner_roles_and_credentials(
    ca: ThrowawayCA, enrol: Enrol, datadir: NodeDataDirectory, tmp_path: Path
) -> None:
    owner_directory = tmp_path / "owner"
    node = await enrol(
        bootstrap=True, owner_credentials=owner_directory, network=NetworkStatus(None)
    )

    # Without its address the node cannot name its curator: it asks for nothing yet.
    await anyio.wait_all_tasks_blocked()
    assert not node.value(BOOTSTRAP).statistics().is_set
    address = random_loopback()
    node.harness.set(NETWORK, NetworkStatus(address))
    request = await wait_for_value(node.value(BOOTSTRAP), timeout=WAIT)
    key = the_key(datadir.key)
    assert public_key_der(request.node_key.public_key()) == public_key_der(key.public_key())

    # Until the cluster exists, nothing but the marker and the key.
    waiting = await node.wait(lambda status: status.note == "bootstrapping a new cluster")
    assert waiting.state is State.NEW
    await anyio.wait_all_tasks_blocked()
    assert names(datadir.node) == ["bootstrapping", "key.pem"]
    assert not owner_directory.exists()

    done = Bootstrapped(node=ca.node(request.node_key), owner=ca.user(), roles=MEMBER)
    node.harness.set(BOOTSTRAPPED, done, by=CONTROLPLANE)
    credentials = await node.credentials()
    await node.wait(lambda status: status.state is State.DONE)

    curator = endpoint(address, CURATOR_PORT)
    assert same(credentials, done.node)
    assert node.value(NODE_ID).get_nowait() == node_id(key.public_key())
    assert same(NodeCredentials.load(datadir.credentials), done.node)
    owner = ClusterAccess.load(owner_directory)
    assert same(owner.credentials, done.owner)
    assert owner.endpoints == (curator,)
    assert load_saved_roles(datadir.plugin("core") / ROLES_FILE) == MEMBER
    assert KnownCurators(datadir).seeds == [curator]
    assert names(datadir.node) == ["credentials", "curators.pb", "key.pem"]  # marker gone
    assert (
        f"bootstrapped a new cluster; this node is {credentials.node_id}. The owner's "
        f"credentials are in {owner_directory}: roleserve ctl --credentials "
        f"{owner_directory} nodes"
    ) in node.logged(logging.INFO)
    assert node.stops == []


def bootstrapping(datadir: NodeDataDirectory, owner_directory: Path) -> None:
    """The marker a ``--bootstrap`` plan leaves: a start without flags resumes it."""
    datadir.create()
    datadir.bootstrapping.write_text(f"{owner_directory}\n")


async def bootstrapped(node: Enrolling, ca: ThrowawayCA, owner: UserCredentials) -> Bootstrapped:
    """Answer the node's bootstrap request, as the controlplane plugin does."""
    request = await wait_for_value(node.value(BOOTSTRAP), timeout=WAIT)
    done = Bootstrapped(node=ca.node(request.node_key), owner=owner, roles=MEMBER)
    node.harness.set(BOOTSTRAPPED, done, by=CONTROLPLANE)
    return done


@pytest.mark.parametrize(
    "written",
    [
        pytest.param((CA_FILE,), id="ca"),
        pytest.param((CA_FILE, CERTIFICATE_FILE), id="ca-cert"),
        pytest.param((CA_FILE, CERTIFICATE_FILE, KEY_FILE), id="ca-cert-key"),
    ],
)
async def test_a_resumed_bootstrap_overwrites_what_a_crash_left_of_its_owner_directory(
    ca: ThrowawayCA,
    enrol: Enrol,
    datadir: NodeDataDirectory,
    tmp_path: Path,
    written: tuple[str, ...],
) -> None:
    """The owner directory is written file by file, the CA first: a crash in between
    leaves this cluster's files, which the resumed bootstrap may overwrite."""
    owner_directory = tmp_path / "owner"
    bootstrapping(datadir, owner_directory)
    ca.user().save(owner_directory)
    for path in owner_directory.iterdir():
        if path.name not in written:
            path.unlink()

    node = await enrol()
    done = await bootstrapped(node, ca, ca.user())
    await node.credentials()
    assert same(ClusterAccess.load(owner_directory).credentials, done.owner)
    assert node.stops == []


@pytest.mark.parametrize("other", ["another-cluster", "garbage"])
async def test_bootstrap_refuses_an_owner_directory_that_now_holds_other_credentials(
    ca: ThrowawayCA, enrol: Enrol, datadir: NodeDataDirectory, tmp_path: Path, other: str
) -> None:
    """The plan checked the directory, but something wrote there since: the owner's
    credentials would be lost (another cluster's with them), so the node stops."""
    owner_directory = tmp_path / "owner"
    bootstrapping(datadir, owner_directory)
    if other == "another-cluster":
        ThrowawayCA().user().save(owner_directory)
    else:
        owner_directory.mkdir()
        (owner_directory / CERTIFICATE_FILE).write_bytes(b"not a certificate")
    before = {path.name: path.read_bytes() for path in owner_directory.iterdir()}

    node = await enrol()
    await bootstrapped(node, ca, ca.user())
    failed = await node.wait(lambda status: status.failures == 1)
    assert node.stops == [
        f"{owner_directory} now holds other cluster credentials; the new cluster's owner "
        "credentials were not written there. Move them away and restart the node"
    ]
    assert failed.final
    assert {path.name: path.read_bytes() for path in owner_directory.iterdir()} == before
    assert names(datadir.node) == ["bootstrapping", "key.pem"]
    assert not (datadir.plugin("core") / ROLES_FILE).exists()
    assert not node.value(NODE_CREDENTIALS).statistics().is_set


async def test_a_crash_while_saving_the_credentials_leaves_none_and_the_bootstrap_resumes(
    ca: ThrowawayCA,
    enrol: Enrol,
    datadir: NodeDataDirectory,
    tmp_path: Path,
    fake_clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The node's credentials are staged, then renamed into place: a failure after two of
    the three files leaves the node not enrolled, and the next attempt finishes."""
    credentials_module = importlib.import_module("roleserve_core.identity._pem")
    write = credentials_module.write_atomically
    failing = True

    def write_unless_disk_full(path: Path, data: bytes, mode: int = 0o644) -> None:
        """Fails for the key of the node's credentials, wherever they are written first."""
        if failing and path.name == KEY_FILE and path.parent.parent == datadir.node:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        write(path, data, mode)

    monkeypatch.setattr(credentials_module, "write_atomically", write_unless_disk_full)
    owner_directory = tmp_path / "owner"
    node = await enrol(bootstrap=True, owner_credentials=owner_directory)
    done = await bootstrapped(node, ca, ca.user())

    failed = await node.wait(lambda status: status.failures == 1)
    assert failed.restart_in is not None  # waiting out its backoff
    assert node.stops == []  # not a refusal: tried again after the backoff
    assert not datadir.enrolled
    assert names(datadir.node / "credentials.new") == [CA_FILE, CERTIFICATE_FILE]
    assert datadir.bootstrapping.exists()
    assert not node.value(NODE_CREDENTIALS).statistics().is_set
    assert same(ClusterAccess.load(owner_directory).credentials, done.owner)

    failing = False
    await fake_clock.advance_to_next()
    credentials = await node.credentials()
    assert same(credentials, done.node)
    assert same(NodeCredentials.load(datadir.credentials), done.node)
    assert names(datadir.credentials) == [CA_FILE, CERTIFICATE_FILE, KEY_FILE]
    assert names(datadir.node) == ["credentials", "curators.pb", "key.pem"]
    assert node.status().failures == 1
