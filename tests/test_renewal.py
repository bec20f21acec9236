"""The core's worker ``renewal`` in a node runtime, against a fake curator, on the fake
clock: it renews at two thirds of the certificate's lifetime and not before, retries with
a doubling backoff, saves the new certificate and sets ``node_credentials``."""

from __future__ import annotations

import datetime
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from roleserve_core.identity import (
    CERTIFICATE_FILE,
    NodeCredentials,
    certificate_to_pem,
    issue_node_certificate,
)
from roleserve_core.runtime import CORE_READER
from roleserve_core.testing import (
    FakeClock,
    FakeCluster,
    FakeCurator,
    NodeHarness,
    PluginHarness,
    wait_for_value,
)
from roleserve_core.values import CURATOR_CONNECTION, NODE_CREDENTIALS
from roleserve_core.workers.renewal import RECHECK, RETRY_FIRST, Renewal, renewal_due

pytestmark = pytest.mark.anyio

LIFETIME = datetime.timedelta(hours=1)
"""Shorter than ``RECHECK``: the worker sleeps once, straight to the renewal."""


def short_lived(cluster: FakeCluster, clock: FakeClock) -> NodeCredentials:
    """The node's credentials with a certificate of ``LIFETIME`` from the clock's now."""
    start = datetime.datetime.fromtimestamp(clock.wall(), datetime.UTC)
    key = cluster.credentials.key
    certificate = issue_node_certificate(
        cluster.ca.key,
        cluster.ca.certificate,
        key.public_key(),
        not_before=start,
        not_after=start + LIFETIME,
    )
    return NodeCredentials(key, certificate, cluster.ca.certificate)


Started = tuple[NodeHarness, Renewal, FakeCurator, NodeCredentials]
Start = Callable[..., Awaitable[Started]]


@pytest.fixture
def start(
    fake_cluster: FakeCluster,
    fake_clock: FakeClock,
    node: Callable[..., Awaitable[NodeHarness]],
    tmp_path: Path,
) -> Start:
    """Start the node with the core's workers, short-lived credentials and a leader
    (``FakeCurator`` options)."""

    async def started(**curator: Any) -> Started:
        leader = await fake_cluster.curator(**curator)
        harness = await node(PluginHarness(core_workers=True).runtime(tmp_path))
        credentials = short_lived(fake_cluster, fake_clock)
        harness.set(NODE_CREDENTIALS, credentials)
        harness.set(CURATOR_CONNECTION, fake_cluster.connect(leader))
        _, worker = harness.runtime.workers["renewal"]
        renewal = getattr(worker.run, "__self__", None)
        assert isinstance(renewal, Renewal)
        return harness, renewal, leader, credentials

    return started


async def wakes_in(renewal: Renewal, clock: FakeClock, seconds: float) -> None:
    """Wait until the worker sleeps until ``seconds`` from now on the clock."""
    await wait_for_value(renewal.next_attempt, lambda at: abs(at - (clock.now() + seconds)) < 1e-6)


async def renewed(harness: NodeHarness, old: NodeCredentials) -> NodeCredentials:
    value = harness.runtime.registry.read(NODE_CREDENTIALS, CORE_READER)
    return await wait_for_value(value, lambda now: now.certificate != old.certificate)


async def test_renews_at_two_thirds_of_the_lifetime_saves_and_sets_the_credentials(
    start: Start, fake_clock: FakeClock, tmp_path: Path
) -> None:
    harness, renewal, leader, credentials = await start()
    due = renewal_due(credentials) - fake_clock.wall()
    assert due == pytest.approx(LIFETIME.total_seconds() * 2 / 3, abs=1.0)

    await wakes_in(renewal, fake_clock, due)  # not before two thirds
    fake_clock.advance(due)
    [call] = await leader.wait_calls("RenewCertificate", 1)
    assert call.caller == credentials.node_id

    new = await renewed(harness, credentials)
    assert new.node_id == credentials.node_id
    assert new.key is credentials.key
    saved = tmp_path / "node" / "credentials"
    assert (saved / CERTIFICATE_FILE).read_bytes() == certificate_to_pem(new.certificate)
    assert NodeCredentials.load(saved).certificate == new.certificate
    # The fake's certificate lasts 30 days: the next renewal is 20 days away, read again
    # every RECHECK seconds.
    await wakes_in(renewal, fake_clock, RECHECK)
    assert [c.method for c in leader.calls.get_nowait() if c.method == "RenewCertificate"] == [
        "RenewCertificate"
    ]


async def test_a_failed_renewal_is_retried_with_a_doubling_backoff(
    start: Start, fake_clock: FakeClock
) -> None:
    harness, renewal, leader, credentials = await start()
    leader.refuse("RenewCertificate", grpc.StatusCode.UNAVAILABLE, "not now")
    due = renewal_due(credentials) - fake_clock.wall()
    await wakes_in(renewal, fake_clock, due)
    fake_clock.advance(due)

    await leader.wait_calls("RenewCertificate", 1)
    await wakes_in(renewal, fake_clock, RETRY_FIRST)
    assert "cannot renew the node certificate (UNAVAILABLE: not now)" in (
        harness.status("root.role.renewal").note
    )
    fake_clock.advance(RETRY_FIRST)
    await leader.wait_calls("RenewCertificate", 2)
    await wakes_in(renewal, fake_clock, 2 * RETRY_FIRST)

    leader.allow("RenewCertificate")
    fake_clock.advance(2 * RETRY_FIRST)
    await renewed(harness, credentials)
    assert len(leader.requests("RenewCertificate")) == 3


async def test_a_certificate_due_when_it_comes_is_renewed_again_only_after_a_pause(
    start: Start, fake_clock: FakeClock
) -> None:
    """A curator whose certificates are due at once (here: valid for 1 s, backdated by the
    clock skew) gets one call per RETRY_FIRST, not a storm."""
    harness, renewal, leader, credentials = await start(
        certificate_lifetime=datetime.timedelta(seconds=1)
    )
    due = renewal_due(credentials) - fake_clock.wall()
    await wakes_in(renewal, fake_clock, due)
    fake_clock.advance(due)
    await renewed(harness, credentials)
    await wakes_in(renewal, fake_clock, RETRY_FIRST)
    assert len(leader.requests("RenewCertificate")) == 1
