"""Membership of a real three-member etcd cluster: learners, promotion, removal, quorum."""

from __future__ import annotations

import pytest

from roleserve_controlplane.consensus import (
    EtcdClient,
    EtcdRequestError,
    Member,
    Membership,
    MembershipError,
    QuorumError,
)
from roleserve_controlplane.testing import EtcdCluster, RunningMember

pytestmark = pytest.mark.anyio


def membership_of(cluster: EtcdCluster, *members: RunningMember) -> Membership:
    endpoints = [member.config.endpoint for member in members]
    client = EtcdClient(endpoints, cluster.admin_credentials())
    return Membership(client, cluster.admin_credentials())


async def roster(membership: Membership) -> dict[str, tuple[bool, bool]]:
    """Member name → (is learner, healthy); unstarted members are named "?"."""
    return {
        health.member.name or "?": (health.member.is_learner, health.healthy)
        for health in await membership.list()
    }


async def test_second_and_third_members_join_as_learners_and_are_promoted(
    cluster: EtcdCluster,
) -> None:
    m0 = await cluster.bootstrap()
    membership = membership_of(cluster, m0)
    async with membership.client:
        config = cluster.config(1)
        learner = await membership.add_learner(config.peer_url)
        assert learner.is_learner
        assert await roster(membership) == {"m0": (False, True), "?": (True, False)}
        await cluster.start(cluster.config(1, {"m0": m0.config.peer_url, "m1": config.peer_url}))
        assert await roster(membership) == {"m0": (False, True), "m1": (True, True)}
        await membership.promote(learner.id)
        assert await roster(membership) == {"m0": (False, True), "m1": (False, True)}
    await cluster.join(2)
    async with cluster.client() as client:
        voters = [member.name for member in await client.members() if not member.is_learner]
        await client.put("/replicated", "yes")
    assert sorted(voters) == ["m0", "m1", "m2"]
    for member in cluster.members:
        async with member.client(cluster.admin_credentials()) as one:
            status = await one.status()
            assert status.leader != 0


async def test_removal_keeps_the_rest_serving_and_a_quorum_breaking_one_is_refused(
    cluster: EtcdCluster,
) -> None:
    m0 = await cluster.bootstrap()
    m1 = await cluster.join(1)
    m2 = await cluster.join(2)
    ids = {member.name: member.id for member in await _members(cluster)}

    m1.kill()
    membership = membership_of(cluster, m0, m2)
    async with membership.client:
        with pytest.raises(QuorumError, match="1 of the 2 voting members left are reachable"):
            await membership.remove(ids["m0"])
        with pytest.raises(MembershipError, match="no etcd member"):
            await membership.remove(12345)
        await membership.remove(ids["m1"])  # the dead one: m0 and m2 are a quorum of two
        assert await roster(membership) == {"m0": (False, True), "m2": (False, True)}
        await membership.client.put("/still", "serving")
        assert (await membership.client.get("/still")) is not None
        m2.kill()
        with pytest.raises(QuorumError, match="quorum"):
            await membership.remove(ids["m0"])


async def _members(cluster: EtcdCluster) -> list[Member]:
    async with cluster.client() as client:
        return await client.members()


class LateAnswers:
    """An etcd client whose MemberAdd is applied but answered too late, once (etcd 3.5.1
    right after a MemberRemove), or not applied at all (``applies=False``)."""

    def __init__(self, *, applies: bool) -> None:
        self.applies = applies
        self.listed: list[Member] = []
        self.adds = 0

    async def add_learner(self, peer_url: str) -> Member:
        self.adds += 1
        learner = Member(0xA1, "", (peer_url,), (), is_learner=True)
        if self.adds == 1:
            if self.applies:
                self.listed.append(learner)
            raise EtcdRequestError(f"etcd add learner {peer_url}: no answer within 5s")
        return learner

    async def members(self) -> list[Member]:
        return list(self.listed)


@pytest.mark.parametrize("applies", [True, False])
async def test_an_add_answered_too_late_finds_its_learner_or_asks_again(applies: bool) -> None:
    """Asked again blindly, an add that etcd applied would fail as a duplicate peer URL."""
    url = "https://127.0.0.9:7837"
    client = LateAnswers(applies=applies)
    membership = Membership(client, None)  # type: ignore[arg-type]  # no member is asked
    learner = await membership.add_learner(url, patience=5)
    assert (learner.id, learner.peer_urls, learner.is_learner) == (0xA1, (url,), True)
    assert client.adds == (1 if applies else 2)
