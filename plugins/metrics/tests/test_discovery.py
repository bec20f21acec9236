"""``/discovery``: the http_sd list of a view, the view served over real HTTP, who serves it."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import make_mocked_request

from roleserve_core import (
    ClusterNodes,
    ConfigError,
    ConsensusMember,
    KubernetesWorker,
    NodeRoles,
    common_pb2,
    curator_pb2,
)
from roleserve_core.testing import ThrowawayCA, node_record, random_loopback
from roleserve_metrics.discovery import (
    ALL,
    CONSENSUS,
    DISCOVERY_SETTING,
    MODES,
    NONE,
    DiscoveryView,
    discovery_mode,
    discovery_when,
    http_sd_targets,
    label_name,
    serves_discovery,
    target_group,
)
from roleserve_metrics.exporters import ExporterTable
from roleserve_metrics.server import Admission, MetricsRoutes, TlsIdentity
from roleserve_metrics.testing import client_context, free_port
from roleserve_metrics.worker_metrics import _serving

LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")
"""What Prometheus accepts as a label name."""


def labelled(record: curator_pb2.Node, **labels: str) -> curator_pb2.Node:
    for key, value in labels.items():
        record.labels.pairs.add(key=key.replace("__", "."), value=value)
    return record


def cluster(*records: curator_pb2.Node, backlogged: bool = True) -> ClusterNodes:
    return ClusterNodes({record.id: record for record in records}, backlogged=backlogged)


MEMBER = NodeRoles(consensus_member=ConsensusMember(), custom={"backup": {"at": "daily"}})
WORKER = NodeRoles(kubernetes_worker=KubernetesWorker())


# -- the pure function ---------------------------------------------------------------------


def test_one_group_per_up_node_with_its_roles_and_labels() -> None:
    nodes = cluster(
        labelled(node_record("node-b", "10.0.0.2", roles=WORKER), rack="r2"),
        labelled(node_record("node-a", "10.0.0.1", roles=MEMBER), rack="r1", zone="z"),
        node_record("node-c", "fd00::3"),
    )
    assert http_sd_targets(nodes) == [
        {
            "targets": ["10.0.0.1:7840"],
            "labels": {
                "roleserve_label_rack": "r1",
                "roleserve_label_zone": "z",
                "roleserve_node": "node-a",
                "roleserve_role_consensus_member": "true",
                "roleserve_role_custom_backup": "true",
            },
        },
        {
            "targets": ["10.0.0.2:7840"],
            "labels": {
                "roleserve_label_rack": "r2",
                "roleserve_node": "node-b",
                "roleserve_role_kubernetes_worker": "true",
            },
        },
        {"targets": ["[fd00::3]:7840"], "labels": {"roleserve_node": "node-c"}},
    ]


@pytest.mark.parametrize(
    "state",
    [
        common_pb2.NODE_STATE_NEW,
        common_pb2.NODE_STATE_STANDBY,
        common_pb2.NODE_STATE_DECOMMISSIONED,
    ],
)
def test_only_up_nodes_count(state: common_pb2.NodeState.ValueType) -> None:
    nodes = cluster(
        node_record("node-a", "10.0.0.1"), node_record("node-b", "10.0.0.2", state=state)
    )
    assert [group["labels"]["roleserve_node"] for group in http_sd_targets(nodes)] == ["node-a"]


def test_nodes_without_an_address_that_parses_are_left_out() -> None:
    nodes = cluster(
        node_record("node-a", ""), node_record("node-b", "not an address"), node_record("node-c")
    )
    assert http_sd_targets(nodes) == []


def test_role_names_and_label_keys_become_prometheus_label_names() -> None:
    roles = NodeRoles(
        consensus_member=ConsensusMember(),
        custom={"db.primary": {}, "edge-proxy": {}, "consensus_member": {}, "9lives": {}},
    )
    record = labelled(
        node_record("node-a", "10.0.0.1", roles=roles),
        **{"topology.zone": "z1", "team-name": "infra", "9": "nine"},
    )
    group = target_group(record)
    assert group is not None
    assert group["labels"] == {
        "roleserve_label_9": "nine",
        "roleserve_label_team_name": "infra",
        "roleserve_label_topology_zone": "z1",
        "roleserve_node": "node-a",
        "roleserve_role_consensus_member": "true",
        # a custom role named like a built-in one cannot pose as it
        "roleserve_role_custom_consensus_member": "true",
        "roleserve_role_custom_9lives": "true",
        "roleserve_role_custom_db_primary": "true",
        "roleserve_role_custom_edge_proxy": "true",
    }
    assert all(LABEL_NAME.match(name) for name in group["labels"])


def test_label_keys_that_sanitise_alike_keep_the_first_in_sorted_order() -> None:
    record = node_record("node-a", "10.0.0.1")
    for key, value in [("a.b", "dot"), ("a-b", "dash"), ("a_b", "underscore")]:
        record.labels.pairs.add(key=key, value=value)
    group = target_group(record)
    assert group is not None
    assert group["labels"]["roleserve_label_a_b"] == "dash"  # "a-b" < "a.b" < "a_b"


def test_label_name() -> None:
    assert label_name("a.b-c_d9") == "a_b_c_d9"


# -- the view: updates ----------------------------------------------------------------------


def targets_of(view: DiscoveryView) -> list[dict[str, Any]] | None:
    """``view.targets``, read anew (mypy narrows the attribute across calls otherwise)."""
    return view.targets


def test_the_view_waits_for_a_whole_view_and_follows_every_role_change() -> None:
    view = DiscoveryView()
    assert targets_of(view) is None
    assert not view.update(cluster(node_record("node-a", "10.0.0.1"), backlogged=False))
    assert targets_of(view) is None

    member = cluster(node_record("node-a", "10.0.0.1", roles=MEMBER))
    assert view.update(member)
    assert targets_of(view) == http_sd_targets(member)

    # Monogon's quirk: a worker-role change never reached Prometheus. Here it does.
    changed = NodeRoles(consensus_member=ConsensusMember(), kubernetes_worker=KubernetesWorker())
    assert view.update(cluster(node_record("node-a", "10.0.0.1", roles=changed)))
    groups = targets_of(view)
    assert groups is not None
    assert groups[0]["labels"]["roleserve_role_kubernetes_worker"] == "true"

    # a change that changes no group (a new boot ID) republishes nothing
    record = node_record("node-a", "10.0.0.1", roles=changed)
    record.status.boot_id = b"another boot"
    assert not view.update(cluster(record))

    # a node going away, or stopping being UP, leaves the list
    new = node_record("node-b", "10.0.0.2", state=common_pb2.NODE_STATE_NEW)
    assert not view.update(cluster(record, new))
    assert view.update(cluster(new))
    assert targets_of(view) == []

    view.clear()
    assert targets_of(view) is None


# -- the view: served over HTTP ---------------------------------------------------------------


@pytest.fixture
async def served() -> AsyncIterator[tuple[DiscoveryView, aiohttp.ClientSession, str]]:
    """The metrics server (as the worker serves it: HTTPS, client certificates) on a
    loopback address, answering ``/discovery`` from a view; a client with a ``metrics``
    certificate."""
    view = DiscoveryView()
    ca = ThrowawayCA()
    host = str(random_loopback())
    port = free_port(host)
    routes = MetricsRoutes(ExporterTable(), Admission(ca.certificate), discovery=view)
    connector = aiohttp.TCPConnector(
        ssl=client_context(ca.certificate, ca.user()), force_close=True
    )
    async with (
        _serving(routes, host, port, TlsIdentity(ca.node())),
        aiohttp.ClientSession(connector=connector) as client,
    ):
        yield view, client, f"https://{host}:{port}/discovery"


@pytest.mark.anyio
async def test_503_until_the_first_whole_view_then_the_targets(
    served: tuple[DiscoveryView, aiohttp.ClientSession, str],
) -> None:
    view, client, url = served
    async with client.get(url) as response:
        assert response.status == 503
        assert await response.text() == (
            "discovery has no whole view of the cluster's nodes yet; it runs on consensus "
            "members only ([plugins.metrics] discovery = 'consensus')"
        )
        assert response.headers["Retry-After"] == "5"

    view.update(cluster(node_record("node-a", "10.0.0.1", roles=MEMBER), backlogged=False))
    async with client.get(url) as response:
        assert response.status == 503

    nodes = cluster(
        labelled(node_record("node-a", "10.0.0.1", roles=MEMBER), rack="r1"),
        node_record("node-b", "10.0.0.2", roles=WORKER),
    )
    view.update(nodes)
    async with client.get(url) as response:
        assert response.status == 200
        assert response.content_type == "application/json"
        assert json.loads(await response.read()) == http_sd_targets(nodes)

    view.clear()
    async with client.get(url) as response:
        assert response.status == 503
        assert await response.text() == (
            "discovery does not run on this node now; it runs on consensus members only "
            "([plugins.metrics] discovery = 'consensus')"
        )


@pytest.mark.anyio
@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "HEAD"])
async def test_get_only(
    served: tuple[DiscoveryView, aiohttp.ClientSession, str], method: str
) -> None:
    view, client, url = served
    view.update(cluster(node_record("node-a", "10.0.0.1")))
    async with client.request(method, url) as response:
        assert response.status == 405


@pytest.mark.anyio
@pytest.mark.parametrize("path", ["/", "/other", "/discovery/x", "/metrics/core/x", "/metrics"])
async def test_other_paths_are_404(
    served: tuple[DiscoveryView, aiohttp.ClientSession, str], path: str
) -> None:
    _, client, url = served
    async with client.get(url.removesuffix("/discovery") + path) as response:
        assert response.status == 404


# -- who serves it ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "roles", "serves"),
    [
        (CONSENSUS, MEMBER, True),
        (CONSENSUS, WORKER, False),
        (CONSENSUS, NodeRoles(custom={"consensus_member": {}}), False),
        (CONSENSUS, None, False),
        (ALL, WORKER, True),
        (ALL, NodeRoles(), True),
        (ALL, None, True),
        (NONE, MEMBER, False),
        (NONE, None, False),
    ],
)
def test_who_serves_discovery(mode: str, roles: NodeRoles | None, serves: bool) -> None:
    assert serves_discovery(mode, roles) is serves
    when = discovery_when(mode)
    if roles is not None:
        assert (when is None or when(roles)) is serves


def test_all_runs_the_feed_always_even_before_the_roles_are_known() -> None:
    assert discovery_when(ALL) is None


def test_the_setting() -> None:
    assert (DISCOVERY_SETTING.name, DISCOVERY_SETTING.default) == ("discovery", CONSENSUS)
    assert discovery_mode({}) == CONSENSUS
    assert [discovery_mode({"discovery": mode}) for mode in MODES] == list(MODES)
    with pytest.raises(ConfigError) as raised:
        discovery_mode({"discovery": "members"})
    assert str(raised.value) == (
        """[plugins.metrics] discovery must be one of "consensus", "all", "none", not 'members'"""
    )


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("mode", "who"), [(ALL, "on every node"), (NONE, "on no node"), (CONSENSUS, "on consensus")]
)
async def test_a_503_says_where_discovery_runs(mode: str, who: str) -> None:
    view = DiscoveryView(mode)
    response = await view.handle(make_mocked_request("GET", "/discovery"))
    assert response.status == 503
    assert response.text is not None
    assert f"it runs {who}" in response.text
    assert response.text.endswith(f"([plugins.metrics] discovery = {mode!r})")
