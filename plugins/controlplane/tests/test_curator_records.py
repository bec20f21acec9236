"""A node record's two keys (records.py): a role change writes only the small one, the
credentials change with the certificates, and a record stored whole still reads."""

from __future__ import annotations

import ipaddress
from collections.abc import AsyncIterator

import anyio
import pytest

from roleserve_controlplane.consensus import EtcdClient, KeyValue
from roleserve_controlplane.curator import BootstrapMaterial, ClusterState, NodeCache
from roleserve_controlplane.curator.records import (
    credentials_key,
    join_record,
    node_key,
    split_record,
)
from roleserve_controlplane.proto import state_pb2
from roleserve_core.identity import generate_key

ADDRESS = ipaddress.IPv4Address("192.0.2.1")


def _member_record() -> state_pb2.NodeRecord:
    """A whole record as bootstrap writes it: UP, with the consensus role and every
    certificate (its peers list holds itself)."""
    return BootstrapMaterial.create(generate_key(), ADDRESS).first_node(ADDRESS)


def _set_custom_role(record: state_pb2.NodeRecord, value: str) -> None:
    record.roles.custom["churn"].parameters["n"] = value


def _leave_consensus(record: state_pb2.NodeRecord) -> None:
    record.roles.ClearField("consensus_member")


# -- the two parts ---------------------------------------------------------------------


def test_a_record_splits_into_two_parts_that_join_into_it() -> None:
    record = _member_record()
    rest, credentials = split_record(record)
    assert join_record(rest, credentials) == record
    assert not (rest.certificate)
    assert not (rest.public_key)
    assert not (rest.roles.consensus_member.ca_certificate)
    assert rest.roles.HasField("consensus_member")  # the role stays with the record
    assert list(rest.roles.consensus_member.peers) == list(record.roles.consensus_member.peers)
    # What a role change writes is a small part of the whole.
    assert rest.ByteSize() * 4 < record.ByteSize()


def test_the_bootstrap_member_keeps_its_role_without_peers_or_certificates() -> None:
    record = _member_record()
    record.roles.consensus_member.ClearField("peers")
    rest, credentials = split_record(record)
    parsed = state_pb2.NodeRecord.FromString(rest.SerializeToString())
    assert parsed.roles.HasField("consensus_member")
    assert join_record(parsed, credentials) == record


def test_stale_consensus_certificates_do_not_bring_the_role_back() -> None:
    record = _member_record()
    _, credentials = split_record(record)
    _leave_consensus(record)
    rest, _ = split_record(record)
    joined = join_record(rest, credentials)
    assert not joined.roles.HasField("consensus_member")
    assert joined.certificate == record.certificate


# -- on etcd ---------------------------------------------------------------------------


async def _key(client: EtcdClient, key: str) -> KeyValue:
    stored = await client.get(key)
    assert stored is not None, f"no key {key}"
    return stored


@pytest.fixture
async def member(state: ClusterState) -> state_pb2.NodeRecord:
    record = _member_record()
    assert await state.create_node(record)
    return record


@pytest.mark.anyio
async def test_a_role_change_writes_the_record_and_not_its_credentials(
    state: ClusterState, member: state_pb2.NodeRecord
) -> None:
    before = await _key(state.client, credentials_key(member.id))
    updated = await state.update_node(member.id, lambda record: _set_custom_role(record, "1"))
    record = await _key(state.client, node_key(member.id))
    assert await _key(state.client, credentials_key(member.id)) == before
    assert record.mod_revision > before.mod_revision
    assert len(record.value) * 4 < updated.ByteSize()
    stored = await state.node(member.id)
    assert stored is not None
    assert stored.record == updated
    assert stored.record.roles.consensus_member.peer_certificate  # joined on read


@pytest.mark.anyio
async def test_new_credentials_are_written_with_the_record_and_read_back(
    state: ClusterState, member: state_pb2.NodeRecord
) -> None:
    renewed = _member_record().certificate

    def renew(record: state_pb2.NodeRecord) -> None:
        record.certificate = renewed

    await state.update_node(member.id, renew)
    record = await _key(state.client, node_key(member.id))
    credentials = await _key(state.client, credentials_key(member.id))
    assert credentials.mod_revision == record.mod_revision  # one transaction
    nodes, _ = await state.nodes()
    assert [node.certificate for node in nodes] == [renewed]


@pytest.mark.anyio
async def test_leaving_consensus_drops_the_member_certificates(
    state: ClusterState, member: state_pb2.NodeRecord
) -> None:
    await state.update_node(member.id, _leave_consensus)
    credentials = await _key(state.client, credentials_key(member.id))
    stored = state_pb2.NodeRecord.FromString(credentials.value)
    assert not stored.roles.consensus_member.peer_certificate
    read = await state.node(member.id)
    assert read is not None
    assert not read.record.roles.HasField("consensus_member")


@pytest.mark.anyio
async def test_a_record_stored_whole_reads_whole_and_is_split_by_its_next_write(
    state: ClusterState,
) -> None:
    whole = _member_record()
    await state.client.put(node_key(whole.id), whole.SerializeToString())
    stored = await state.node(whole.id)
    assert stored is not None
    assert stored.record == whole
    assert stored.credentials is None
    updated = await state.update_node(whole.id, lambda record: _set_custom_role(record, "1"))
    assert updated.certificate == whole.certificate
    assert await state.client.get(credentials_key(whole.id)) is not None
    again = await state.node(whole.id)
    assert again is not None
    assert again.record == updated


@pytest.fixture
async def cache(state: ClusterState) -> AsyncIterator[NodeCache]:
    cache = NodeCache(state.client)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(cache.run)
        with anyio.fail_after(10):
            await cache.ready.wait()
        yield cache
        tasks.cancel_scope.cancel()


@pytest.mark.anyio
async def test_the_cache_joins_both_keys_and_follows_each(
    state: ClusterState, member: state_pb2.NodeRecord, cache: NodeCache
) -> None:
    assert cache.get(member.id) == member
    renewed = _member_record().certificate

    def renew_and_change(record: state_pb2.NodeRecord) -> None:
        record.certificate = renewed
        _set_custom_role(record, "2")

    with cache.subscribe(member.id) as subscription:
        expected = await state.update_node(member.id, renew_and_change)
        with anyio.fail_after(10):
            batch = await subscription.next_batch()
    # Both keys changed in one transaction; the subscriber saw the record whole.
    assert batch == {member.id: expected}
    with cache.subscribe(member.id) as subscription:
        expected = await state.update_node(member.id, lambda record: _set_custom_role(record, "3"))
        with anyio.fail_after(10):
            assert await subscription.next_batch() == {member.id: expected}
    assert cache.get(member.id) == expected
