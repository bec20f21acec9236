"""The node-facing ``Curator`` service and ``CuratorLocal``, over mutual TLS on real etcd.

Each test starts from a bootstrapped cluster (node 0 leads) and enrols what it needs, by
``CuratorCluster.enrol`` or step by step with ``CuratorApi``.
"""

from __future__ import annotations

import base64
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Any

import anyio
import grpc
import pytest
from cryptography.hazmat.primitives.asymmetric import ed25519
from google.protobuf.timestamp_pb2 import Timestamp

from roleserve_controlplane.curator import curator as curator_module
from roleserve_controlplane.testing import CuratorCluster, EtcdCluster
from roleserve_controlplane.testing.curator_api import (
    Applicant,
    CuratorApi,
    labels,
    refused,
    status,
)
from roleserve_core import common_pb2, curator_pb2, curator_pb2_grpc, management_pb2
from roleserve_core.identity import (
    certificate_from_pem,
    certificate_to_pem,
    public_key_der,
    verify_node_certificate,
)
from roleserve_core.rpc import ENCRYPTION_OFFLOAD_OPTIONS, create_server
from roleserve_core.testing import DEFAULT_TIMEOUT

pytestmark = pytest.mark.anyio

Code = grpc.StatusCode
Health = management_pb2.Node.Health
UP = common_pb2.NODE_STATE_UP
NEW = common_pb2.NODE_STATE_NEW
LAST_BACKLOGGED = curator_pb2.WatchEvent.PROGRESS_LAST_BACKLOGGED


@pytest.fixture
def api(curators) -> CuratorApi:
    return CuratorApi(curators)


def watch_node(node_id: str) -> curator_pb2.WatchRequest:
    return curator_pb2.WatchRequest(
        node_in_cluster=curator_pb2.WatchRequest.NodeInCluster(node_id=node_id)
    )


def status_request(
    node_id: str, node_status: common_pb2.NodeStatus | None
) -> curator_pb2.UpdateNodeStatusRequest:
    return curator_pb2.UpdateNodeStatusRequest(node_id=node_id, status=node_status)


def wireguard_key() -> str:
    return base64.b64encode(secrets.token_bytes(32)).decode()


def clusternet(
    *prefixes: str, key: str | None = None
) -> curator_pb2.UpdateNodeClusterNetworkingRequest:
    networking = common_pb2.NodeClusterNetworking(
        wireguard_pubkey=key or wireguard_key(), prefixes=prefixes
    )
    return curator_pb2.UpdateNodeClusterNetworkingRequest(clusternet=networking)


async def heartbeat(
    api: CuratorApi, credentials, beats: int = 1
) -> list[curator_pb2.HeartbeatResponse]:
    """Send ``beats`` heartbeats on one stream and close it; the responses."""
    requests = [curator_pb2.HeartbeatRequest() for _ in range(beats)]
    async with api.curator(credentials) as curator:
        with anyio.fail_after(DEFAULT_TIMEOUT):
            return [response async for response in curator.Heartbeat(iter(requests))]


async def test_the_curators_server_offloads_its_writes(
    cluster: EtcdCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A leader sends each change to every node's stream: its server is given the option
    that hands every write to gRPC's own threads (``rpc._offload``; the node process turns
    gRPC's experiment on)."""
    given: list[Sequence[tuple[str, Any]]] = []

    def recording(*arguments: Any, **keywords: Any) -> grpc.aio.Server:
        given.append(keywords.get("options", ()))
        return create_server(*arguments, **keywords)

    monkeypatch.setattr(curator_module, "create_server", recording)
    async with CuratorCluster(cluster) as curators:
        await curators.bootstrap()
    assert given, "no curator server was made"
    for options in given:
        assert set(ENCRYPTION_OFFLOAD_OPTIONS) <= set(options)


# -- Watch ----------------------------------------------------------------------------------


async def test_watch_of_one_node_sends_it_then_each_change_of_it_alone(api: CuratorApi, curators):
    first, node = curators.nodes[0], await curators.enrol(1)
    await api.settled(lambda nodes: node.node_id in nodes)
    async with api.watching(watch_node(node.node_id), node.credentials) as watch:
        snapshot = await watch.next()
        async with api.curator(first.credentials) as curator:
            await curator.UpdateNodeStatus(
                status_request(first.node_id, status(first.address, version="other"))
            )
        async with api.curator(node.credentials) as curator:
            await curator.UpdateNodeStatus(
                status_request(node.node_id, status(node.address, version="9.9"))
            )
        shown = await watch.until(lambda nodes: nodes[node.node_id].status.version == "9.9")
    assert [n.id for n in snapshot.nodes] == [node.node_id]
    assert snapshot.progress == LAST_BACKLOGGED
    assert shown[node.node_id].state == UP
    assert shown[node.node_id].status.external_address == str(node.address)
    assert list(shown) == [node.node_id], "a change of another node reached the stream"


async def test_watch_of_every_node_sends_all_then_a_registration(api: CuratorApi, curators):
    first, second = curators.nodes[0], await curators.enrol(1)
    applicant = Applicant()
    await api.settled(lambda nodes: second.node_id in nodes)
    async with api.watching(credentials=second.credentials) as watch:
        snapshot = await watch.next()
        await api.register(applicant)
        shown = await watch.until(lambda nodes: applicant.node_id in nodes)
    assert {node.id for node in snapshot.nodes} == {first.node_id, second.node_id}
    assert snapshot.progress == LAST_BACKLOGGED
    assert shown[applicant.node_id].state == NEW
    assert shown[first.node_id].roles.HasField("consensus_member")


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (watch_node(""), "node_id is empty"),
        (curator_pb2.WatchRequest(), "say which nodes to watch"),
    ],
    ids=["empty-node-id", "no-kind"],
)
async def test_watch_refuses_a_request_that_names_no_node(
    api: CuratorApi, request_: curator_pb2.WatchRequest, message: str
) -> None:
    with refused(Code.INVALID_ARGUMENT, message):
        async with api.watching(request_) as watch:
            await watch.next()


async def test_watch_refuses_an_ephemeral_caller(api: CuratorApi) -> None:
    with refused(Code.UNAUTHENTICATED, "needs a node or user certificate"):
        async with api.watching(credentials=Applicant().ephemeral(api.ca)) as watch:
            await watch.next()


# -- UpdateNodeStatus -----------------------------------------------------------------------


async def test_a_node_replaces_its_own_status_and_the_curator_stamps_it(
    api: CuratorApi, curators
) -> None:
    node = await curators.enrol(1)
    sent = status(node.address, version="1.2.3", timestamp=Timestamp(seconds=1))
    sent.running_curator.port = 7835
    async with api.watching(watch_node(node.node_id)) as watch:
        async with api.curator(node.credentials) as curator:
            before = Timestamp()
            before.GetCurrentTime()
            await curator.UpdateNodeStatus(status_request(node.node_id, sent))
            after = Timestamp()
            after.GetCurrentTime()
            shown = await watch.until(lambda n: n[node.node_id].status.version == "1.2.3")
            stamped = shown[node.node_id].status
            await curator.UpdateNodeStatus(status_request(node.node_id, status(node.address)))
        replaced = await watch.until(lambda n: not n[node.node_id].status.version)
    assert stamped.running_curator.port == 7835
    assert before.ToNanoseconds() <= stamped.timestamp.ToNanoseconds() <= after.ToNanoseconds()
    assert not replaced[node.node_id].status.HasField("running_curator")


async def test_a_node_may_not_update_another_nodes_status(api: CuratorApi, curators) -> None:
    first, second = curators.nodes[0], await curators.enrol(1)
    async with api.curator(second.credentials) as curator:
        with refused(
            Code.PERMISSION_DENIED, f"may update only its own status, not {first.node_id}"
        ):
            await curator.UpdateNodeStatus(status_request(first.node_id, status(second.address)))


@pytest.mark.parametrize(
    ("node_status", "message"),
    [
        (None, "the status is missing"),
        (status("node-0.example"), "is not an IP address"),
    ],
    ids=["missing", "host-name"],
)
async def test_update_node_status_refuses_a_status_without_an_ip_address(
    api: CuratorApi, curators, node_status: common_pb2.NodeStatus | None, message: str
) -> None:
    node = curators.nodes[0]
    async with api.curator(node.credentials) as curator:
        with refused(Code.INVALID_ARGUMENT, message):
            await curator.UpdateNodeStatus(status_request(node.node_id, node_status))


async def _update_status(curator: curator_pb2_grpc.CuratorAsyncStub) -> object:
    return await curator.UpdateNodeStatus(status_request("node-x", status("192.0.2.1")))


async def _heartbeat(curator: curator_pb2_grpc.CuratorAsyncStub) -> object:
    return [r async for r in curator.Heartbeat(iter([curator_pb2.HeartbeatRequest()]))]


async def _clusternet(curator: curator_pb2_grpc.CuratorAsyncStub) -> object:
    return await curator.UpdateNodeClusterNetworking(clusternet("10.192.0.0/24"))


NODE_ONLY: dict[str, Callable[[curator_pb2_grpc.CuratorAsyncStub], Awaitable[object]]] = {
    "UpdateNodeStatus": _update_status,
    "Heartbeat": _heartbeat,
    "UpdateNodeClusterNetworking": _clusternet,
}


@pytest.mark.parametrize("method", sorted(NODE_ONLY))
async def test_a_user_may_not_call_what_only_nodes_do(api: CuratorApi, method: str) -> None:
    call = NODE_ONLY[method]
    async with api.curator(api.owner) as curator:
        needed = (
            f"owner credentials cannot {method} (needs UPDATE_NODE_SELF); only nodes may call it"
        )
        with refused(Code.PERMISSION_DENIED, needed):
            await call(curator)


# -- Heartbeat ------------------------------------------------------------------------------


async def test_heartbeats_make_a_node_healthy_and_others_stay_unknown_in_the_grace(
    api: CuratorApi, curators
) -> None:
    first, beating = curators.nodes[0], await curators.enrol(1)
    new = await api.register(Applicant())
    responses = await heartbeat(api, beating.credentials, beats=2)
    await api.settled(lambda nodes: nodes[beating.node_id].state == UP and new in nodes)
    nodes = await api.nodes()
    assert [r.interval.ToTimedelta() for r in responses] == [timedelta(seconds=5)] * 2
    assert nodes[beating.node_id].health == Health.HEALTHY
    assert nodes[beating.node_id].HasField("time_since_heartbeat")
    # The leader started moments ago: nodes that never beat are in their grace.
    assert nodes[first.node_id].health == Health.HEALTH_UNKNOWN
    assert not nodes[first.node_id].HasField("time_since_heartbeat")
    assert nodes[new].health == Health.HEALTH_UNKNOWN


async def test_a_node_that_is_not_up_is_of_unknown_health_even_when_it_beat(
    api: CuratorApi, curators
) -> None:
    """It beat just before it was decommissioned (it may beat no more after that)."""
    node = await curators.enrol(1)
    await heartbeat(api, node.credentials)
    await api.decommission(node.node_id)
    await api.settled(
        lambda nodes: nodes[node.node_id].state == common_pb2.NODE_STATE_DECOMMISSIONED
    )
    shown = (await api.nodes(node_ids=[node.node_id]))[node.node_id]
    assert shown.HasField("time_since_heartbeat")
    assert shown.health == Health.HEALTH_UNKNOWN


async def test_a_second_process_with_a_nodes_identity_is_refused_and_shown(
    api: CuratorApi, curators
) -> None:
    """Two channels with the node's credentials: its process, and a copy of its data
    directory started elsewhere. The first keeps the node; the second is refused."""
    node = await curators.enrol(1)
    conflict = (
        f"node {node.node_id} is already connected from 127.",
        "two processes share its identity (a copied data directory?)",
    )
    send, receive = anyio.create_memory_object_stream[curator_pb2.HeartbeatRequest](1)

    async def beats() -> AsyncIterator[curator_pb2.HeartbeatRequest]:
        async with receive:
            async for beat in receive:
                yield beat

    async with api.curator(node.credentials) as first, api.curator(node.credentials) as second:
        held = first.Heartbeat(beats())
        async with send:
            await send.send(curator_pb2.HeartbeatRequest(instance="first"))
            with anyio.fail_after(DEFAULT_TIMEOUT):
                assert isinstance(await held.read(), curator_pb2.HeartbeatResponse)

            for part in conflict:
                with refused(Code.ALREADY_EXISTS, part):
                    await second.Heartbeat(
                        iter([curator_pb2.HeartbeatRequest(instance="second")])
                    ).read()
            impostor = status_request(node.node_id, status("192.0.2.9"))
            impostor.instance = "second"
            with refused(Code.ALREADY_EXISTS, conflict[1]):
                await second.UpdateNodeStatus(impostor)
            own = status_request(node.node_id, status(node.address, version="first"))
            own.instance = "first"
            await first.UpdateNodeStatus(own)

            shown = (await api.nodes(node_ids=[node.node_id]))[node.node_id]
            assert shown.health == Health.HEALTHY
            assert shown.conflict.startswith("connected from 127.")
            assert "; a second process from 127." in shown.conflict
            assert shown.conflict.endswith("two processes share this node's identity")
        held.cancel()
    settled = await api.settled(lambda nodes: nodes[node.node_id].status.version == "first")
    assert settled[node.node_id].status.external_address == str(node.address)


# -- RegisterNode ---------------------------------------------------------------------------


async def test_register_node_creates_a_new_node_named_by_its_ephemeral_key(
    api: CuratorApi,
) -> None:
    applicant = Applicant()
    registered = await api.register(applicant, labels(rack="r1", zone="a"))
    repeated = await api.register(applicant)
    shown = await api.settled(lambda nodes: applicant.node_id in nodes)
    assert registered == repeated == applicant.node_id
    assert shown[registered].state == NEW
    assert {(p.key, p.value) for p in shown[registered].labels.pairs} == {
        ("rack", "r1"),
        ("zone", "a"),
    }


async def test_register_node_refuses_a_wrong_ticket(api: CuratorApi) -> None:
    applicant = Applicant()
    ticket = await api.ticket()
    request = api.register_request(applicant, ticket[:-1] + bytes([ticket[-1] ^ 1]))
    async with api.curator(applicant.ephemeral(api.ca)) as curator:
        with refused(Code.PERMISSION_DENIED, "wrong register ticket"):
            await curator.RegisterNode(request)


@pytest.mark.parametrize(
    ("join_key", "message"),
    [
        (b"\x30\x03garbage", "join_key: not a DER public key"),
        (
            public_key_der(ed25519.Ed25519PrivateKey.generate().public_key()),
            "join_key: public key is not an ECDSA P-256 key",
        ),
    ],
    ids=["garbage", "ed25519"],
)
async def test_register_node_refuses_a_bad_join_key(
    api: CuratorApi, join_key: bytes, message: str
) -> None:
    applicant = Applicant()
    request = api.register_request(applicant, await api.ticket())
    request.join_key = join_key
    async with api.curator(applicant.ephemeral(api.ca)) as curator:
        with refused(Code.INVALID_ARGUMENT, message):
            await curator.RegisterNode(request)


@pytest.mark.parametrize(
    ("node_labels", "message"),
    [
        (labels(**{"-rack": "r1"}), "label key '-rack'"),
        (labels(**{f"k{i}": "v" for i in range(129)}), "129 labels; a node has at most 128"),
    ],
    ids=["key-starts-with-dash", "too-many"],
)
async def test_register_node_refuses_invalid_labels(
    api: CuratorApi, node_labels: common_pb2.NodeLabels, message: str
) -> None:
    applicant = Applicant()
    request = api.register_request(applicant, await api.ticket(), node_labels)
    async with api.curator(applicant.ephemeral(api.ca)) as curator:
        with refused(Code.INVALID_ARGUMENT, message):
            await curator.RegisterNode(request)


async def test_register_node_refuses_a_node_past_new(api: CuratorApi) -> None:
    applicant = Applicant()
    await api.approve(await api.register(applicant))
    with refused(Code.FAILED_PRECONDITION, f"node {applicant.node_id} is already registered"):
        await api.register(applicant)
    await api.commit(applicant)
    with refused(Code.FAILED_PRECONDITION, "is already registered and past NEW"):
        await api.register(applicant)


async def test_register_node_refuses_a_join_key_another_node_registered(api: CuratorApi) -> None:
    first = Applicant()
    await api.register(first)
    with refused(Code.ALREADY_EXISTS, "another node registered this join key"):
        await api.register(Applicant(join_key=first.join_key))
    await api.up(first)
    async with api.curator(first.joining(api.ca)) as curator:
        joined = await curator.JoinNode(curator_pb2.JoinNodeRequest())
    assert joined.node_id == first.node_id


@pytest.mark.parametrize("caller", ["node", "owner"])
async def test_register_node_refuses_a_certificate_of_the_cluster(
    api: CuratorApi, curators, caller: str
) -> None:
    credentials = curators.nodes[0].credentials if caller == "node" else api.owner
    request = api.register_request(Applicant(), await api.ticket())
    async with api.curator(credentials) as curator:
        with refused(Code.UNAUTHENTICATED, "with the ephemeral certificate of the key to enrol"):
            await curator.RegisterNode(request)


# -- CommitNode -----------------------------------------------------------------------------


async def test_commit_node_waits_for_approval(api: CuratorApi) -> None:
    applicant = Applicant()
    await api.register(applicant)
    with refused(Code.PERMISSION_DENIED, "is not approved yet"):
        await api.commit(applicant)


async def test_commit_node_issues_the_node_certificate_and_repeats_it(api: CuratorApi) -> None:
    applicant = Applicant()
    await api.approve(await api.register(applicant))
    committed = await api.commit(applicant)
    repeated = await api.commit(applicant)
    await api.settled(lambda nodes: nodes[applicant.node_id].state == UP)
    certificate = certificate_from_pem(committed.node_certificate)
    assert committed.ca_certificate == certificate_to_pem(api.ca)
    assert verify_node_certificate(certificate, api.ca) == applicant.node_id
    assert certificate.public_key() == applicant.key.public_key()
    assert repeated == committed


async def test_commit_node_refuses_a_decommissioned_node(api: CuratorApi) -> None:
    applicant = Applicant()
    await api.up(applicant)
    await api.decommission(applicant.node_id)
    with refused(Code.FAILED_PRECONDITION, f"node {applicant.node_id} is decommissioned"):
        await api.commit(applicant)


async def test_commit_node_refuses_an_unregistered_key(api: CuratorApi) -> None:
    applicant = Applicant()
    with refused(Code.NOT_FOUND, f"no node {applicant.node_id}"):
        await api.commit(applicant)


# -- JoinNode -------------------------------------------------------------------------------


async def test_join_node_names_the_node_of_the_join_key(api: CuratorApi) -> None:
    applicant = Applicant()
    await api.up(applicant)
    async with api.curator(applicant.joining(api.ca)) as curator:
        joined = await curator.JoinNode(curator_pb2.JoinNodeRequest())
    assert (joined.node_id, joined.state) == (applicant.node_id, UP)


async def test_join_node_refuses_a_key_that_is_no_join_key(api: CuratorApi) -> None:
    applicant = Applicant()
    await api.up(applicant)
    # The node key is not the join key: it proves nothing to JoinNode.
    async with api.curator(applicant.ephemeral(api.ca)) as curator:
        with refused(Code.PERMISSION_DENIED, "unknown join key"):
            await curator.JoinNode(curator_pb2.JoinNodeRequest())


async def test_join_node_refuses_a_node_that_is_not_up(api: CuratorApi) -> None:
    applicant = Applicant()
    await api.register(applicant)
    async with api.curator(applicant.joining(api.ca)) as curator:
        with refused(Code.FAILED_PRECONDITION, f"node {applicant.node_id} is NODE_STATE_NEW"):
            await curator.JoinNode(curator_pb2.JoinNodeRequest())
        await api.approve(applicant.node_id)
        await api.commit(applicant)
        await api.decommission(applicant.node_id)
        with refused(Code.FAILED_PRECONDITION, "is NODE_STATE_DECOMMISSIONED"):
            await curator.JoinNode(curator_pb2.JoinNodeRequest())


# -- UpdateNodeClusterNetworking ------------------------------------------------------------


async def test_a_node_stores_its_wireguard_key_and_prefixes(api: CuratorApi, curators) -> None:
    node = await curators.enrol(1)
    request = clusternet("10.192.4.0/24", "10.223.255.0/24", f"{node.address}/32")
    async with api.curator(node.credentials) as curator:
        await curator.UpdateNodeClusterNetworking(request)
        shown = await api.settled(lambda nodes: nodes[node.node_id].clusternet.wireguard_pubkey)
        # The same key again is the node's own: no conflict.
        request.clusternet.prefixes[:] = ["10.192.5.0/24"]
        await curator.UpdateNodeClusterNetworking(request)
    replaced = await api.settled(
        lambda nodes: list(nodes[node.node_id].clusternet.prefixes) == ["10.192.5.0/24"]
    )
    first = shown[node.node_id].clusternet
    assert first.wireguard_pubkey == request.clusternet.wireguard_pubkey
    assert list(first.prefixes) == ["10.192.4.0/24", "10.223.255.0/24", f"{node.address}/32"]
    assert replaced[node.node_id].clusternet.wireguard_pubkey == first.wireguard_pubkey


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (clusternet(key="not base64!"), "wireguard_pubkey must be the base64 of a 32-byte"),
        (clusternet("10.192.1.1/24"), "'10.192.1.1/24' is not in canonical CIDR form"),
        (clusternet("10.224.0.0/24"), "10.224.0.0/24 is neither inside 10.192.0.0/11"),
        (clusternet("192.0.2.1/32"), "192.0.2.1/32 is neither inside"),
    ],
    ids=[
        "key-not-base64",
        "host-bits-set",
        "just-outside",
        "another-address",
    ],
)
async def test_cluster_networking_refuses_bad_keys_and_prefixes(
    api: CuratorApi,
    curators,
    request_: curator_pb2.UpdateNodeClusterNetworkingRequest,
    message: str,
) -> None:
    async with api.curator(curators.nodes[0].credentials) as curator:
        with refused(Code.INVALID_ARGUMENT, message):
            await curator.UpdateNodeClusterNetworking(request_)


async def test_cluster_networking_refuses_another_nodes_key(api: CuratorApi, curators) -> None:
    first, second = curators.nodes[0], await curators.enrol(1)
    key = wireguard_key()
    async with api.curator(second.credentials) as curator:
        await curator.UpdateNodeClusterNetworking(clusternet(key=key))
    await api.settled(lambda nodes: nodes[second.node_id].clusternet.wireguard_pubkey == key)
    async with api.curator(first.credentials) as curator:
        with refused(Code.ALREADY_EXISTS, "another node already uses this WireGuard key"):
            await curator.UpdateNodeClusterNetworking(clusternet(key=key))


async def test_cluster_networking_needs_a_status_first(api: CuratorApi) -> None:
    credentials = await api.up(Applicant())
    async with api.curator(credentials) as curator:
        with refused(Code.FAILED_PRECONDITION, "report a status before cluster networking"):
            await curator.UpdateNodeClusterNetworking(clusternet("10.192.0.0/24"))


# -- CuratorLocal ---------------------------------------------------------------------------


async def test_an_ephemeral_caller_gets_the_cluster_ca(api: CuratorApi) -> None:
    async with api.local(Applicant().ephemeral(api.ca)) as local:
        response = await local.GetCACertificate(curator_pb2.GetCACertificateRequest())
    assert certificate_from_pem(response.ca_certificate) == api.ca


async def test_the_leader_names_itself_as_the_current_leader(api: CuratorApi, curators) -> None:
    leader = curators.nodes[0]
    async with api.local(Applicant().ephemeral(api.ca)) as local:
        call = local.GetCurrentLeader(curator_pb2.GetCurrentLeaderRequest())
        with anyio.fail_after(DEFAULT_TIMEOUT):
            response = await call.read()
        call.cancel()
    assert response == curator_pb2.GetCurrentLeaderResponse(
        leader_node_id=leader.node_id,
        leader_host=str(leader.address),
        leader_port=7835,
        this_node_id=leader.node_id,
    )
