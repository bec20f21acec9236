"""The cluster's records: the authority's CAs, bootstrap material and its one transaction,
and the leader-guarded writes of node records, on real etcd."""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import anyio
import grpc
import pytest
from cryptography import x509

from roleserve_controlplane.consensus import (
    DEFAULT_PEER_PORT,
    ETCD_SERVER_NAME,
    EtcdClient,
    Leadership,
    LeadershipLostError,
)
from roleserve_controlplane.curator import (
    CURATOR_PORT,
    OWNER_IDENTITY,
    BootstrapMaterial,
    ClusterAuthority,
    ClusterState,
    NodeNotFoundError,
    write_bootstrap,
)
from roleserve_controlplane.curator.errors import handled
from roleserve_controlplane.curator.state import (
    CONFIGURATION_KEY,
    JOIN_KEYS_PREFIX,
    MAX_CONFLICT_RETRIES,
    OWNER_KEY,
    SECRETS_KEY,
    TICKET_KEY,
    StoredNode,
    UpdateConflictError,
    node_key,
)
from roleserve_controlplane.proto import state_pb2
from roleserve_core import CertificateVerificationError, CredentialsError, IdentityError, common_pb2
from roleserve_core.identity import (
    PrivateKey,
    generate_key,
    node_id,
    verify_node_certificate,
    verify_user_certificate,
)

ADDRESS = ipaddress.IPv4Address("192.0.2.1")


# -- the authority -------------------------------------------------------------------


def _verify_member_certificate(
    certificate: x509.Certificate, authority: ClusterAuthority, node: str
) -> None:
    """``certificate`` is an etcd member certificate of ``node`` at ``ADDRESS``, from the
    consensus CA."""
    certificate.verify_directly_issued_by(authority.consensus.certificate)
    names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {node, ETCD_SERVER_NAME} <= set(names.get_values_for_type(x509.DNSName))
    assert ADDRESS in names.get_values_for_type(x509.IPAddress)


def test_the_authority_round_trips_through_its_secrets_and_issues_certificates() -> None:
    original = ClusterAuthority.create()
    authority = ClusterAuthority.from_secrets(original.secrets())
    assert authority.secrets() == original.secrets()
    key = generate_key().public_key()
    node = verify_node_certificate(authority.node_certificate(key), original.ca_certificate)
    assert node == node_id(key)
    user = authority.user_certificate(key, "alice")
    assert verify_user_certificate(user, original.ca_certificate) == "alice"
    member = authority.member_certificate(key, node, [ADDRESS])
    _verify_member_certificate(member, original, node)
    # The two CAs stay apart: a member certificate is no identity in the cluster.
    with pytest.raises(CertificateVerificationError, match="not issued by this cluster's CA"):
        verify_node_certificate(member, original.ca_certificate)


@pytest.mark.parametrize(
    ("field", "named"),
    [
        ("ca_key", "the cluster CA key"),
        ("ca_certificate", "the cluster CA certificate"),
        ("consensus_ca_key", "the consensus CA key"),
        ("consensus_ca_certificate", "the consensus CA certificate"),
    ],
)
def test_corrupt_secrets_name_the_part_that_is_corrupt(field: str, named: str) -> None:
    secrets = ClusterAuthority.create().secrets()
    setattr(secrets, field, b"corrupt")
    with pytest.raises(IdentityError, match=named):
        ClusterAuthority.from_secrets(secrets)


# -- bootstrap material --------------------------------------------------------------


def test_bootstrap_material_is_saved_privately_and_reloaded(tmp_path: Path) -> None:
    path = tmp_path / "bootstrap" / "material"
    key = generate_key()
    created = BootstrapMaterial.load_or_create(path, key, ADDRESS)
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.parent.stat().st_mode & 0o777 == 0o700
    loaded = BootstrapMaterial.load_or_create(path, key, ipaddress.IPv4Address("192.0.2.99"))
    assert loaded.to_proto() == created.to_proto()
    assert loaded.node.node_id == node_id(key.public_key())
    assert loaded.owner.identity == OWNER_IDENTITY
    _verify_member_certificate(loaded.member.certificate, _authority(loaded), loaded.node.node_id)


def test_bootstrap_material_of_another_node_key_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "material"
    BootstrapMaterial.load_or_create(path, generate_key(), ADDRESS)
    with pytest.raises(CredentialsError, match=f"{path}: bootstrap material of another node key"):
        BootstrapMaterial.load_or_create(path, generate_key(), ADDRESS)


def _mismatched(key: PrivateKey) -> bytes:
    """Material whose node certificate is the owner's: it does not belong to the key."""
    stored = BootstrapMaterial.create(key, ADDRESS).to_proto()
    stored.node_certificate = stored.owner_certificate
    return stored.SerializeToString()


@pytest.mark.parametrize(
    "contents",
    [
        lambda key: b"",
        lambda key: b"\xff not a protobuf",
        lambda key: BootstrapMaterial.create(key, ADDRESS).to_proto().SerializeToString()[:600],
        _mismatched,
    ],
    ids=["empty", "garbage", "truncated", "certificate-of-another-key"],
)
def test_corrupt_bootstrap_material_is_refused_naming_its_file(
    tmp_path: Path, contents: Callable[[PrivateKey], bytes]
) -> None:
    path = tmp_path / "material"
    key = generate_key()
    path.write_bytes(contents(key))
    with pytest.raises(CredentialsError, match=f"{path}: corrupt bootstrap material"):
        BootstrapMaterial.load_or_create(path, key, ADDRESS)


# -- write_bootstrap -----------------------------------------------------------------

BOOTSTRAP_KEYS = [SECRETS_KEY, CONFIGURATION_KEY, TICKET_KEY, OWNER_KEY]


def _material() -> BootstrapMaterial:
    return BootstrapMaterial.create(generate_key(), ADDRESS)


def _authority(material: BootstrapMaterial) -> ClusterAuthority:
    assert material.authority is not None, "material without CA keys"
    return material.authority


def _private_keys_in(path: Path) -> set[bytes]:
    """Every PEM private key block in the file at ``path``."""
    data = path.read_bytes()
    return {block.split(b"-----END")[0] for block in data.split(b"-----BEGIN PRIVATE KEY-----")[1:]}


@pytest.mark.anyio
async def test_a_committed_bootstrap_keeps_no_ca_key_on_disk_and_resumes_without_it(
    etcd_client: EtcdClient, tmp_path: Path
) -> None:
    """Interrupted before the commit, the material (CA keys and all) is reused and the
    transaction written; once committed, the file holds the node's and the owner's keys
    only, and a resumed bootstrap with it writes nothing and finds its cluster."""
    path, key = tmp_path / "bootstrap.pb", generate_key()
    first = BootstrapMaterial.load_or_create(path, key, ADDRESS)  # then interrupted
    resumed = BootstrapMaterial.load_or_create(path, key, ADDRESS)
    assert await write_bootstrap(etcd_client, resumed, ADDRESS)
    assert await ClusterState(etcd_client).secrets() == _authority(first).secrets()

    committed = resumed.without_ca_keys(path)
    assert path.stat().st_mode & 0o777 == 0o600
    secrets = _authority(first).secrets()
    on_disk = path.read_bytes()
    assert secrets.ca_key not in on_disk
    assert secrets.consensus_ca_key not in on_disk
    assert len(_private_keys_in(path)) == 2  # the node's and the owner's, nothing else

    again = BootstrapMaterial.load_or_create(path, key, ADDRESS)
    assert again.authority is None
    assert again.to_proto() == committed.to_proto()
    assert (again.node.certificate_pem, again.owner.certificate_pem) == (
        first.node.certificate_pem,
        first.owner.certificate_pem,
    )
    assert not await write_bootstrap(etcd_client, again, ADDRESS)


@pytest.mark.anyio
async def test_committed_material_refuses_an_etcd_without_its_cluster(
    etcd_client: EtcdClient, tmp_path: Path
) -> None:
    """It cannot bootstrap (it has no CA keys to store): etcd's data was lost."""
    committed = _material().without_ca_keys(tmp_path / "bootstrap.pb")
    with pytest.raises(CredentialsError, match="etcd holds no cluster"):
        await write_bootstrap(etcd_client, committed, ADDRESS)
    assert await ClusterState(etcd_client).secrets() is None


@pytest.mark.anyio
async def test_bootstrap_writes_the_cluster_and_its_first_node_at_once(
    etcd_client: EtcdClient,
) -> None:
    material = _material()
    assert await write_bootstrap(etcd_client, material, ADDRESS, heartbeat_interval=2.5)
    state = ClusterState(etcd_client)  # reads need no leadership
    assert await state.secrets() == _authority(material).secrets()
    configuration = await state.configuration()
    assert configuration.heartbeat_interval.ToNanoseconds() == 2_500_000_000
    assert len(await state.ticket()) == 32
    assert await state.owner() == state_pb2.OwnerRecord(
        identity=OWNER_IDENTITY, certificate=material.owner.certificate_pem
    )
    nodes, _ = await state.nodes()
    assert [node.id for node in nodes] == [material.node.node_id]
    first = nodes[0]
    assert first.state == common_pb2.NODE_STATE_UP
    assert first.certificate == material.node.certificate_pem
    member = first.roles.consensus_member
    assert first.roles.HasField("consensus_member")
    assert member.ca_certificate == material.consensus_ca_pem
    assert member.peer_certificate == material.member.certificate_pem
    assert [(peer.name, peer.url) for peer in member.peers] == [
        (first.id, f"https://{ADDRESS}:{DEFAULT_PEER_PORT}")
    ]
    assert first.roles.HasField("kubernetes_controller")
    assert not first.roles.HasField("kubernetes_worker")
    assert first.status.external_address == str(ADDRESS)
    assert first.status.running_curator.port == CURATOR_PORT == 7835
    stored = [await etcd_client.get(key) for key in [*BOOTSTRAP_KEYS, node_key(first.id)]]
    revisions = {kv.mod_revision if kv is not None else None for kv in stored}
    assert len(revisions - {None}) == len(revisions) == 1  # all written, in one transaction


@pytest.mark.anyio
async def test_repeating_the_bootstrap_writes_nothing(etcd_client: EtcdClient) -> None:
    material = _material()
    assert await write_bootstrap(etcd_client, material, ADDRESS)
    before = await etcd_client.get_prefix("/")
    assert not await write_bootstrap(etcd_client, material, ADDRESS, heartbeat_interval=1.0)
    assert await etcd_client.get_prefix("/") == before  # same keys, values and revision


@pytest.mark.anyio
async def test_bootstrap_material_of_another_cluster_is_refused(etcd_client: EtcdClient) -> None:
    ours = _material()
    assert await write_bootstrap(etcd_client, ours, ADDRESS)
    with pytest.raises(CredentialsError, match="etcd holds another cluster"):
        await write_bootstrap(etcd_client, _material(), ADDRESS)
    assert await ClusterState(etcd_client).secrets() == _authority(ours).secrets()


# -- leader-guarded writes -----------------------------------------------------------


def _record(node: str, join_key: bytes = b"") -> state_pb2.NodeRecord:
    return state_pb2.NodeRecord(id=node, state=common_pb2.NODE_STATE_NEW, join_key=join_key)


def _approve(record: state_pb2.NodeRecord) -> None:
    record.state = common_pb2.NODE_STATE_STANDBY


async def _stored(state: ClusterState, node: str) -> StoredNode:
    stored = await state.node(node)
    assert stored is not None
    return stored


@pytest.mark.anyio
async def test_create_node_writes_a_new_node_and_its_join_key_once(state: ClusterState) -> None:
    assert await state.create_node(_record("node-a", b"join-key-a"))
    assert await state.create_node(_record("node-b"))
    assert not await state.create_node(_record("node-a", b"join-key-c"))
    assert (await _stored(state, "node-a")).record == _record("node-a", b"join-key-a")
    assert await state.node_of_join_key(b"join-key-a") == "node-a"
    assert await state.node_of_join_key(b"join-key-c") is None
    join_keys, _ = await state.client.get_prefix(JOIN_KEYS_PREFIX)
    assert len(join_keys) == 1  # node-b has none; node-a's repeat wrote nothing


@pytest.mark.anyio
async def test_update_node_writes_the_change(state: ClusterState) -> None:
    await state.create_node(_record("node-a"))
    before = await _stored(state, "node-a")
    updated = await state.update_node("node-a", _approve)
    after = await _stored(state, "node-a")
    assert updated == after.record
    assert after.record.state == common_pb2.NODE_STATE_STANDBY
    assert after.mod_revision > before.mod_revision


@pytest.mark.anyio
async def test_update_node_without_a_change_writes_nothing(state: ClusterState) -> None:
    await state.create_node(_record("node-a"))
    await state.update_node("node-a", _approve)
    before = await _stored(state, "node-a")
    assert await state.update_node("node-a", _approve) == before.record
    assert await _stored(state, "node-a") == before


@pytest.mark.anyio
async def test_update_node_changes_the_record_the_caller_read_without_reading_again(
    state: ClusterState, monkeypatch: pytest.MonkeyPatch
) -> None:
    await state.create_node(_record("node-a"))
    read = await _stored(state, "node-a")

    async def no_read(node: str) -> StoredNode | None:
        raise AssertionError("read again")

    monkeypatch.setattr(state, "node", no_read)
    updated = await state.update_node("node-a", _approve, read=read)
    monkeypatch.undo()
    assert (await _stored(state, "node-a")).record == updated
    assert updated.state == common_pb2.NODE_STATE_STANDBY


@pytest.mark.anyio
async def test_update_node_reads_again_when_the_record_read_is_no_longer_stored(
    state: ClusterState,
) -> None:
    """A record changed after the caller read it: the write of the change of the old one
    is refused by its revision, and the change is made to the newest."""
    await state.create_node(_record("node-a"))
    stale = await _stored(state, "node-a")

    def report(record: state_pb2.NodeRecord) -> None:
        record.status.external_address = "10.0.0.9"

    await state.update_node("node-a", report)
    updated = await state.update_node("node-a", _approve, read=stale)
    assert updated.status.external_address == "10.0.0.9"  # not lost to the stale record
    assert (await _stored(state, "node-a")).record == updated


@pytest.mark.anyio
async def test_update_node_of_an_unknown_node_fails(state: ClusterState) -> None:
    with pytest.raises(NodeNotFoundError, match="no node node-x"):
        await state.update_node("node-x", _approve)


@pytest.mark.anyio
async def test_update_node_gives_up_on_a_record_that_keeps_changing(
    state: ClusterState, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another writer changes the record after each read: the update pauses, retries, and
    gives up after ``MAX_CONFLICT_RETRIES`` with an error a client may retry, nothing
    written (it raised a bare RoleserveError, which clients got as UNKNOWN)."""
    await state.create_node(_record("node-a"))
    monkeypatch.setattr("roleserve_controlplane.curator.state.CONFLICT_PAUSE_MAX", 0.001)
    read = state.node
    reads = 0

    async def read_then_changed(node: str) -> StoredNode | None:
        nonlocal reads
        reads += 1
        stored = await read(node)
        assert stored is not None
        await state.put(node_key(node), _record(node, f"elsewhere {reads}".encode()))
        return stored

    monkeypatch.setattr(state, "node", read_then_changed)
    message = f"node-a's record changed {MAX_CONFLICT_RETRIES} times while this call updated it"
    with pytest.raises(UpdateConflictError, match=message):
        await state.update_node("node-a", _approve)
    assert reads == MAX_CONFLICT_RETRIES
    stored = await read("node-a")
    assert stored is not None
    assert stored.record.state == common_pb2.NODE_STATE_NEW


class _AbortedError(Exception):
    pass


class _Context:
    """What ``handled`` uses of a gRPC servicer context: ``abort``."""

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise _AbortedError(code, details)


@pytest.mark.anyio
async def test_an_update_given_up_is_aborted_for_the_client_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    gave_up = "node-a's record changed 20 times while this call updated it"

    class Service:
        @handled
        async def update(self, request: object, context: object) -> None:
            raise UpdateConflictError(gave_up)

    with pytest.raises(_AbortedError) as aborted:
        await Service().update(None, _Context())
    assert aborted.value.args == (
        grpc.StatusCode.ABORTED,
        f"{gave_up}; nothing was written: retry",
    )
    [logged] = [r for r in caplog.records if r.name == "roleserve.curator"]
    assert (logged.levelno, logged.getMessage()) == (
        logging.WARNING,
        f"gave up an update: {gave_up}",
    )


class _RefusedError(Exception):
    pass


@pytest.mark.anyio
async def test_a_change_that_raises_leaves_the_record_untouched(state: ClusterState) -> None:
    await state.create_node(_record("node-a"))
    before = await _stored(state, "node-a")

    def approve_then_refuse(record: state_pb2.NodeRecord) -> None:
        _approve(record)
        raise _RefusedError

    with pytest.raises(_RefusedError):
        await state.update_node("node-a", approve_then_refuse)
    assert await _stored(state, "node-a") == before


class _ReadTogether(ClusterState):
    """A ClusterState of its own whose first read of a node waits until ``all_read`` is
    set: writers of two such states then race with the same revision in hand."""

    def __init__(self, state: ClusterState, all_read: list[anyio.Event]) -> None:
        super().__init__(state.client, state.leadership)
        self._read = anyio.Event()
        self._everyone = all_read
        all_read.append(self._read)

    async def node(self, node_id: str) -> StoredNode | None:
        stored = await super().node(node_id)
        if not self._read.is_set():
            self._read.set()
            for other in self._everyone:
                await other.wait()
        return stored


def _labelling(calls: list[str]) -> Callable[[str], Callable[[state_pb2.NodeRecord], None]]:
    """Changes that add the label ``key`` and note each call in ``calls``."""

    def label(key: str) -> Callable[[state_pb2.NodeRecord], None]:
        def change(record: state_pb2.NodeRecord) -> None:
            calls.append(key)
            record.labels.pairs.add(key=key, value="set")

        return change

    return label


@pytest.mark.anyio
async def test_concurrent_updates_of_one_node_from_two_writers_both_land(
    state: ClusterState,
) -> None:
    await state.create_node(_record("node-a"))
    all_read: list[anyio.Event] = []
    first, second = _ReadTogether(state, all_read), _ReadTogether(state, all_read)
    calls: list[str] = []
    label = _labelling(calls)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(first.update_node, "node-a", label("first"))
            tasks.start_soon(second.update_node, "node-a", label("second"))
    stored = await _stored(state, "node-a")
    assert sorted(pair.key for pair in stored.record.labels.pairs) == ["first", "second"]
    assert len(calls) == 3  # both read the same revision: the loser re-read and retried


@pytest.mark.anyio
async def test_one_writers_concurrent_updates_of_one_node_wait_their_turn(
    state: ClusterState,
) -> None:
    """The leader's own updates of one record are queued, so none re-reads: 50 at once
    used to spin through the optimistic retries, and some gave up."""
    await state.create_node(_record("node-a"))
    calls: list[str] = []
    label = _labelling(calls)
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tasks:
            for n in range(20):
                tasks.start_soon(state.update_node, "node-a", label(f"label-{n}"))
    stored = await _stored(state, "node-a")
    assert len(stored.record.labels.pairs) == 20
    assert len(calls) == 20  # each change ran once: no update lost a race and retried


@dataclass(frozen=True)
class _Write:
    """A write of the leader, and the key it would change."""

    name: str
    key: str
    write: Callable[[ClusterState], Awaitable[object]]


WRITES = [
    _Write("create", node_key("node-new"), lambda state: state.create_node(_record("node-new"))),
    _Write("update", node_key("node-a"), lambda state: state.update_node("node-a", _approve)),
    _Write("put", TICKET_KEY, lambda state: state.put(TICKET_KEY, b"ticket")),
]


async def _revoke_lease(client: EtcdClient, leadership: Leadership) -> None:
    await client.revoke_lease(leadership.lease)


async def _delete_key(client: EtcdClient, leadership: Leadership) -> None:
    assert await client.delete(leadership.key)


@pytest.mark.anyio
@pytest.mark.parametrize("write", WRITES, ids=lambda write: write.name)
@pytest.mark.parametrize("lose", [_revoke_lease, _delete_key], ids=["revoked", "deleted"])
async def test_a_leader_that_lost_its_leadership_writes_nothing(
    state: ClusterState,
    write: _Write,
    lose: Callable[[EtcdClient, Leadership], Awaitable[None]],
) -> None:
    leadership = state.leadership
    assert leadership is not None
    await state.create_node(_record("node-a"))
    before = await state.client.get(write.key)
    await lose(state.client, leadership)
    with pytest.raises(LeadershipLostError, match="no longer the leader"):
        await write.write(state)
    assert leadership.lost.is_set()
    assert await state.client.get(write.key) == before
    with pytest.raises(LeadershipLostError, match="was lost"):  # refused before etcd now
        await write.write(state)


@pytest.mark.anyio
async def test_writes_without_a_leadership_are_refused(state: ClusterState) -> None:
    await state.create_node(_record("node-a"))
    follower = ClusterState(state.client)
    for write in WRITES:
        before = await state.client.get(write.key)
        with pytest.raises(LeadershipLostError, match="needs a leadership"):
            await write.write(follower)
        assert await state.client.get(write.key) == before, write.name
