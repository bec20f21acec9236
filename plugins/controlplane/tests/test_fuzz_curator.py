"""Fuzzed requests to every method of ``Curator``, ``CuratorLocal`` and ``Management``, on a
real curator on real etcd, over mutual TLS (issue 11, item 5).

The methods come from the service descriptors, so a method added later is fuzzed too; the
requests from the request messages' descriptors (``roleserve_core.testing.fuzz``), with a
few fields steered to real values (the node's own ID, the register ticket, a valid CSR) so
that calls get past the first check and some succeed. Each call is made as whom the method
is for: node-only methods with node 1's certificate, enrolment methods with a new
applicant's ephemeral certificate, everything else as the owner.

After every call: it ended OK or with a deliberate refusal (``fuzz.ACCEPTABLE``), a refusal
says why, nothing was logged as an unexpected exception, a refused call changed no key in
etcd, and the leader still answers. Every stream of these services answers at once (a
snapshot, an interval, the leader), so a stream is read until its first answer. One
cluster (one etcd member) serves the whole module; what successful calls add (nodes, roles,
credentials) piles up, as it would in a cluster.
"""

from __future__ import annotations

import base64
import contextlib
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import grpc
import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from google.protobuf import message_factory
from google.protobuf.descriptor import MethodDescriptor, ServiceDescriptor
from google.protobuf.message import DecodeError
from hypothesis import given
from hypothesis import strategies as st

from roleserve_controlplane.consensus import EtcdBinary, EtcdClient
from roleserve_controlplane.testing import CuratorCluster, CuratorNode, EtcdCluster, etcd_binary
from roleserve_controlplane.testing.curator_api import Applicant, CuratorApi
from roleserve_core import curator_pb2, management_pb2
from roleserve_core.identity import (
    Credentials,
    generate_key,
    public_key_der,
    signing_request,
)
from roleserve_core.limits import MAX_READ_BYTES, MAX_REQUEST_BYTES
from roleserve_core.rpc import Permission, method_authorization
from roleserve_core.testing import FakeClock, SupervisorRunner
from roleserve_core.testing.fuzz import (
    ACCEPTABLE,
    CALL_TIMEOUT,
    OVERLY_LARGE_REPR,
    ErrorRecords,
    Overrides,
    call,
    methods,
    raw_requests,
    register_profiles,
    requests,
    texts,
)

pytestmark = pytest.mark.filterwarnings(OVERLY_LARGE_REPR)

register_profiles()

CURATOR = curator_pb2.DESCRIPTOR.services_by_name["Curator"]
SERVICES: tuple[ServiceDescriptor, ...] = (
    CURATOR,
    curator_pb2.DESCRIPTOR.services_by_name["CuratorLocal"],
    management_pb2.DESCRIPTOR.services_by_name["Management"],
)
METHODS = [(method.containing_service, method) for method in methods(*SERVICES)]
IDS = [method.name for _, method in METHODS]

ROLES = (
    "kubernetes_worker",
    "kubernetes_controller",
    "custom:gpu",
    "custom:x.y-z",
    "custom:" + "a" * 63,
    "custom:" + "a" * 64,
    "custom:GPU",
    "kubernetes",
    "",
)
"""Roles to steer to. Not consensus_member: assigning it adds an etcd learner for an address
no etcd listens at, which the role tests cover; here it would only leave the one-member
cluster with learners that never start."""


@dataclass(repr=False)
class Fuzzed:
    """The cluster under fuzz, and what a check needs."""

    curators: CuratorCluster
    leader: CuratorNode
    node: CuratorNode
    """Node 1, UP: the caller of node-only methods. Never decommissioned here."""
    owner: Any
    """The owner's channel (untyped: calls send and receive raw bytes)."""
    own: grpc.aio.Channel
    """Node 1's channel to the leader."""
    etcd: EtcdClient
    errors: ErrorRecords
    overrides: Overrides
    portal: BlockingPortal | None = None
    """Runs ``check`` in the cluster's event loop (see ``fuzzed``)."""

    def credentials_for(self, method: MethodDescriptor) -> Credentials | None:
        """None for a new applicant's ephemeral credentials."""
        authorization = method_authorization(
            f"/{method.containing_service.full_name}/{method.name}"
        )
        assert authorization is not None, method.full_name
        if Permission.UPDATE_NODE_SELF in authorization.need:
            return self.node.credentials
        if authorization.allow_unauthenticated and method.containing_service is CURATOR:
            return None
        return self.curators.owner

    @contextlib.asynccontextmanager
    async def channel_for(self, method: MethodDescriptor) -> AsyncIterator[grpc.aio.Channel]:
        credentials = self.credentials_for(method)
        if credentials is self.node.credentials:
            yield self.own
        elif credentials is not None:
            yield self.owner
        else:
            ephemeral = Applicant().ephemeral(CuratorApi(self.curators).ca)
            async with self.curators.channel(self.leader, ephemeral) as channel:
                yield channel

    async def snapshot(self) -> dict[bytes, int]:
        """Every key in etcd and its modification revision."""
        stored, _ = await self.etcd.get_prefix("/")
        return {kv.key: kv.mod_revision for kv in stored}

    def call(
        self, service: ServiceDescriptor, method: MethodDescriptor, payload: bytes
    ) -> grpc.StatusCode:
        """``check``, from a test's thread."""
        assert self.portal is not None
        return self.portal.call(self.check, service, method, payload)

    async def check(
        self, service: ServiceDescriptor, method: MethodDescriptor, payload: bytes
    ) -> grpc.StatusCode:
        """Send ``payload``; check the answer, the log, etcd and the leader (module doc)."""
        before = await self.snapshot()
        async with self.channel_for(method) as channel:
            code, details = await call(channel, service, method, payload, wait=CALL_TIMEOUT)
        assert code in ACCEPTABLE, f"{method.name} answered {code.name}: {details[:2000]}"
        assert code is grpc.StatusCode.OK or details, f"{method.name}: {code.name} says nothing"
        assert self.errors.take() == []
        if code is not grpc.StatusCode.OK:
            assert await self.snapshot() == before, f"refused {method.name} changed etcd"
        with anyio.fail_after(CALL_TIMEOUT):
            await self.owner.unary_unary("/roleserve.curator.CuratorLocal/GetCACertificate")(b"")
        return code


def _overrides(leader: CuratorNode, node: CuratorNode, new: list[str], ticket: bytes) -> Overrides:
    """Fields steered to real values half of the time (see the module docstring)."""
    known = st.sampled_from([leader.node_id, node.node_id, *new])

    def real(values: st.SearchStrategy[object]) -> st.SearchStrategy[object]:
        return st.one_of(values, texts())

    def csr() -> bytes:
        return signing_request(generate_key(), "fuzzed")

    def key() -> bytes:
        return public_key_der(generate_key().public_key())

    wireguard = base64.b64encode(bytes(range(32))).decode()
    prefixes = st.sampled_from(
        ["10.192.200.0/24", f"{node.address}/32", "10.0.0.0/8", "::/0", "10.192.0.1/24"]
    )
    common, curator, management = "roleserve.common.", "roleserve.curator.", "roleserve.management."
    return {
        curator + "WatchRequest.NodeInCluster.node_id": real(known),
        curator + "UpdateNodeStatusRequest.node_id": real(st.just(node.node_id)),
        common + "NodeStatus.external_address": real(
            st.sampled_from([str(node.address), "192.0.2.7", "2001:db8::7", "fe80::1%eth0"])
        ),
        common + "NodeStatus.boot_id": st.one_of(st.binary(min_size=16, max_size=16), st.binary()),
        common + "NodeClusterNetworking.wireguard_pubkey": real(st.just(wireguard)),
        common + "NodeClusterNetworking.prefixes": st.one_of(
            st.lists(prefixes, max_size=3), st.lists(texts(), max_size=3)
        ),
        curator + "RegisterNodeRequest.register_ticket": st.one_of(st.just(ticket), st.binary()),
        curator + "RegisterNodeRequest.join_key": st.one_of(st.builds(key), st.binary()),
        management + "ApproveNodeRequest.node_id": real(known),
        management + "UpdateNodeRolesRequest.node_id": real(known),
        management + "UpdateNodeRolesRequest.Change.role": real(st.sampled_from(ROLES)),
        # Never node 1, which calls the node-only methods.
        management + "DecommissionNodeRequest.node_id": real(
            st.sampled_from([leader.node_id, *new])
        ),
        management + "GetNodesRequest.role": real(st.sampled_from(ROLES)),
        management + "IssueCredentialsRequest.csr": st.one_of(st.builds(csr), st.binary()),
        management + "IssueCredentialsRequest.scope": real(
            st.sampled_from(["owner", "operator", "viewer", "metrics"])
        ),
        management + "IssueCredentialsRequest.name": real(
            st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789._-", min_size=1, max_size=70)
        ),
    }


@contextlib.asynccontextmanager
async def _fuzzed(binary: EtcdBinary, directory: Path) -> AsyncIterator[Fuzzed]:
    async with contextlib.AsyncExitStack() as stack:
        runner = await stack.enter_async_context(SupervisorRunner(FakeClock()))
        etcd = EtcdCluster(binary, directory, runner.start)
        curators = await stack.enter_async_context(CuratorCluster(etcd))
        leader = await curators.bootstrap()
        node = await curators.enrol(1)
        api = CuratorApi(curators)
        new = [await api.register(Applicant()) for _ in range(2)]
        assert curators.owner is not None
        assert node.credentials is not None
        assert leader.member is not None
        owner = await stack.enter_async_context(curators.channel(leader, curators.owner))
        own = await stack.enter_async_context(curators.channel(leader, node.credentials))
        client = await stack.enter_async_context(leader.member.client())
        errors = stack.enter_context(ErrorRecords())
        overrides = _overrides(leader, node, new, await api.ticket())
        yield Fuzzed(curators, leader, node, owner, own, client, errors, overrides)


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fuzzed]:
    """The module's cluster, in an event loop of its own thread. The tests are synchronous
    and call into it through a portal: hypothesis aborts an example by raising a
    BaseException from ``data.draw``, which in an async test would end anyio's test runner
    (and the module's cluster with it)."""
    binary = etcd_binary("debian")  # skips here, not in the portal's thread, if missing
    directory: Path = tmp_path_factory.mktemp("fuzz")
    with (
        start_blocking_portal("asyncio") as portal,
        portal.wrap_async_context_manager(_fuzzed(binary, directory)) as fuzzed,
    ):
        fuzzed.portal = portal
        yield fuzzed


def test_every_service_of_the_curator_is_fuzzed() -> None:
    """A service added to these protos later joins the fuzzing here (its methods do by
    themselves); NodeManagement is fuzzed by the core's tests/test_fuzz_nodemanagement.py."""
    declared = {
        service.full_name
        for module in (curator_pb2, management_pb2)
        for service in module.DESCRIPTOR.services_by_name.values()
    }
    assert declared == {service.full_name for service in SERVICES}


@pytest.mark.parametrize(("service", "method"), METHODS, ids=IDS)
@given(data=st.data())
def test_a_fuzzed_request_is_answered_or_refused_cleanly(
    fuzzed: Fuzzed, service: ServiceDescriptor, method: MethodDescriptor, data: st.DataObject
) -> None:
    request = data.draw(requests(method.input_type, fuzzed.overrides), label="request")
    payload = request.SerializeToString()
    code = fuzzed.call(service, method, payload)
    if len(payload) > MAX_READ_BYTES:
        assert code is grpc.StatusCode.RESOURCE_EXHAUSTED
    elif len(payload) > MAX_REQUEST_BYTES:
        assert code is grpc.StatusCode.INVALID_ARGUMENT


@pytest.mark.parametrize(("service", "method"), METHODS, ids=IDS)
@given(data=st.data())
def test_bytes_that_are_no_request_are_refused(
    fuzzed: Fuzzed, service: ServiceDescriptor, method: MethodDescriptor, data: st.DataObject
) -> None:
    payload = data.draw(raw_requests(method.input_type, fuzzed.overrides), label="payload")
    code = fuzzed.call(service, method, payload)
    try:
        message_factory.GetMessageClass(method.input_type).FromString(payload)
    except DecodeError:
        beyond = len(payload) > MAX_READ_BYTES  # not even read
        assert code is (
            grpc.StatusCode.RESOURCE_EXHAUSTED if beyond else grpc.StatusCode.INVALID_ARGUMENT
        )
