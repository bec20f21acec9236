"""Scoped user credentials on the real curator over mutual TLS, on real etcd: issued for a
key the caller keeps, listed, revoked, and then refused by the leader."""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from roleserve_controlplane.testing.curator_api import CuratorApi, refused
from roleserve_core import curator_pb2, management_pb2
from roleserve_core.identity import (
    UserCredentials,
    certificate_from_pem,
    certificate_scope,
    generate_key,
    signing_request,
)
from roleserve_core.testing import DEFAULT_TIMEOUT, poll_until

pytestmark = pytest.mark.anyio

Code = grpc.StatusCode
MANAGEMENT = management_pb2.DESCRIPTOR.services_by_name["Management"]

OPERATOR_MAY = {
    "GetClusterInfo",
    "GetNodes",
    "GetConsensusStatus",
    "ApproveNode",
    "UpdateNodeRoles",
    "DecommissionNode",
    "RebuildConsensusMember",
}
"""Management methods an operator may call; a viewer only the first three, metrics none,
the owner every one (written out: the test checks the protos against issue 11)."""
MAY: dict[str, set[str]] = {
    "owner": {method.name for method in MANAGEMENT.methods},
    "operator": OPERATOR_MAY,
    "viewer": {"GetClusterInfo", "GetNodes", "GetConsensusStatus"},
    "metrics": set(),
}


@pytest.fixture
def api(curators) -> CuratorApi:
    return CuratorApi(curators)


async def issue(api: CuratorApi, name: str, scope: str) -> UserCredentials:
    """Credentials issued by the leader for a new key generated here."""
    key = generate_key()
    request = management_pb2.IssueCredentialsRequest(
        name=name, scope=scope, csr=signing_request(key, name)
    )
    async with api.management() as management:
        response = await management.IssueCredentials(request)
    return UserCredentials(
        key,
        certificate_from_pem(response.certificate),
        certificate_from_pem(response.ca_certificate),
    )


async def listed(api: CuratorApi) -> list[tuple[str, str, str, bool]]:
    async with api.management() as management:
        response = await management.ListCredentials(management_pb2.ListCredentialsRequest())
    return [(c.name, c.scope, c.serial, c.revoked) for c in response.credentials]


async def cluster_info(api: CuratorApi, credentials: UserCredentials) -> None:
    async with api.management(credentials) as management:
        await management.GetClusterInfo(management_pb2.GetClusterInfoRequest())


async def refusal_of(api: CuratorApi, credentials: UserCredentials) -> tuple[Code, str] | None:
    """How the leader answers a call with ``credentials``: None if it serves it."""
    try:
        await cluster_info(api, credentials)
    except grpc.aio.AioRpcError as exc:
        return exc.code(), exc.details() or ""
    return None


async def test_issued_credentials_are_listed_revoked_and_then_refused(api: CuratorApi) -> None:
    viewer = await issue(api, "alice", "viewer")
    serial = format(viewer.certificate.serial_number, "x")
    assert (viewer.identity, certificate_scope(viewer.certificate)) == ("alice", "viewer")
    await cluster_info(api, viewer)
    assert await listed(api) == [("alice", "viewer", serial, False)]

    async with api.management() as management:
        await management.RevokeCredentials(management_pb2.RevokeCredentialsRequest(name="alice"))
    # The leader learns of it through its watch of etcd: asked again until it has.
    refusal = await poll_until("the leader refuses alice", lambda: refusal_of(api, viewer))
    assert refusal == (
        Code.PERMISSION_DENIED,
        f"credentials 'alice' (serial {serial}) were revoked; ask the owner for new credentials",
    )
    assert await listed(api) == [("alice", "viewer", serial, True)]


async def refused_or_not(channel: Any, method: str) -> bool:
    """Whether an empty request of ``method`` is refused PERMISSION_DENIED (an empty
    request changes nothing: every write needs a node or a name, so it is NOT_FOUND or
    INVALID_ARGUMENT when let in)."""
    path = f"/{MANAGEMENT.full_name}/{method}"
    try:
        if MANAGEMENT.methods_by_name[method].server_streaming:
            async for _ in channel.unary_stream(path)(b"", timeout=DEFAULT_TIMEOUT):
                pass
        else:
            await channel.unary_unary(path)(b"", timeout=DEFAULT_TIMEOUT)
    except grpc.aio.AioRpcError as exc:
        return exc.code() is Code.PERMISSION_DENIED
    return False


async def test_every_scope_against_every_management_method(api: CuratorApi, curators) -> None:
    leader = await curators.leader()
    denied: dict[str, set[str]] = {}
    for scope in MAY:
        credentials = await issue(api, f"user-{scope}", scope)
        async with curators.channel(leader, credentials) as channel:
            denied[scope] = {
                m.name for m in MANAGEMENT.methods if await refused_or_not(channel, m.name)
            }
    everything = {method.name for method in MANAGEMENT.methods}
    assert denied == {scope: everything - may for scope, may in MAY.items()}
    assert [name for name, *_ in await listed(api)] == [f"user-{scope}" for scope in sorted(MAY)]


async def test_a_viewer_may_read_but_not_change_roles(api: CuratorApi, curators) -> None:
    viewer = await issue(api, "bob", "viewer")
    request = management_pb2.UpdateNodeRolesRequest(node_id=curators.nodes[0].node_id)
    async with api.management(viewer) as management:
        await management.GetClusterInfo(management_pb2.GetClusterInfoRequest())
        with refused(
            Code.PERMISSION_DENIED,
            "viewer credentials cannot UpdateNodeRoles (needs MANAGE_ROLES); "
            "ask the owner for operator credentials",
        ):
            await management.UpdateNodeRoles(request)


async def test_only_the_owner_issues_credentials(api: CuratorApi) -> None:
    operator = await issue(api, "carol", "operator")
    key = generate_key()
    request = management_pb2.IssueCredentialsRequest(
        name="dave", scope="owner", csr=signing_request(key, "dave")
    )
    async with api.management(operator) as management:
        with refused(
            Code.PERMISSION_DENIED,
            "operator credentials cannot IssueCredentials (needs MANAGE_CREDENTIALS); "
            "ask the owner for owner credentials",
        ):
            await management.IssueCredentials(request)


@pytest.mark.parametrize(
    ("name", "scope", "csr", "code", "message"),
    [
        ("eve", "root", True, Code.INVALID_ARGUMENT, "scope 'root' is none of owner, operator"),
        ("Eve!", "viewer", True, Code.INVALID_ARGUMENT, "credentials name 'Eve!' is not"),
        ("owner", "viewer", True, Code.INVALID_ARGUMENT, "is the bootstrap owner's"),
        ("eve", "viewer", False, Code.INVALID_ARGUMENT, "is not valid DER PKCS#10"),
    ],
)
async def test_bad_requests_are_refused(
    api: CuratorApi, name: str, scope: str, csr: bool, code: Code, message: str
) -> None:
    request = management_pb2.IssueCredentialsRequest(
        name=name, scope=scope, csr=signing_request(generate_key(), name) if csr else b"junk"
    )
    async with api.management() as management:
        with refused(code, message):
            await management.IssueCredentials(request)
    assert await listed(api) == []


async def test_a_name_is_issued_once_and_an_unknown_one_is_not_revoked(api: CuratorApi) -> None:
    await issue(api, "frank", "metrics")
    with refused(Code.ALREADY_EXISTS, "credentials named 'frank' were issued before"):
        await issue(api, "frank", "metrics")
    async with api.management() as management:
        with refused(Code.NOT_FOUND, "no credentials named 'grace'"):
            await management.RevokeCredentials(
                management_pb2.RevokeCredentialsRequest(name="grace")
            )


async def test_nodes_hear_of_each_revocation(api: CuratorApi, curators) -> None:
    alice = await issue(api, "alice", "operator")
    request = curator_pb2.WatchRevokedCredentialsRequest()
    async with api.curator(curators.nodes[0].credentials) as curator:
        stream = curator.WatchRevokedCredentials(request, timeout=DEFAULT_TIMEOUT)
        answers = aiter(stream)
        assert list((await anext(answers)).serials) == []
        async with api.management() as management:
            await management.RevokeCredentials(
                management_pb2.RevokeCredentialsRequest(name="alice")
            )
        serial = format(alice.certificate.serial_number, "x")
        assert list((await anext(answers)).serials) == [serial]
        stream.cancel()


async def test_a_revoked_users_open_watch_ends(api: CuratorApi) -> None:
    viewer = await issue(api, "victor", "viewer")
    every_node = curator_pb2.WatchRequest(
        nodes_in_cluster=curator_pb2.WatchRequest.NodesInCluster()
    )
    async with api.curator(viewer) as curator:
        watch = curator.Watch(every_node, timeout=DEFAULT_TIMEOUT)
        await watch.read()  # the snapshot: the stream is open
        async with api.management() as management:
            await management.RevokeCredentials(
                management_pb2.RevokeCredentialsRequest(name="victor")
            )
        with refused(Code.PERMISSION_DENIED, "credentials 'victor' (serial "):
            while True:  # change events may come first; the revocation ends the stream
                await watch.read()
