"""``/discovery``: Prometheus ``http_sd`` targets, one group per UP node, from ``cluster_nodes``.

::

    cluster_nodes (whole views only) ──▶ DiscoveryView.update ──▶ groups {node ID → group}
        node_changes(): only nodes whose group differs          │  rendered to JSON once per
        (address, state, any role, any label)              ▼  change, not per request
    GET /discovery ──▶ DiscoveryView.handle ──▶ 200 [group, ...] sorted by node ID
                                                 503 before the first whole view, and
                                                     after the feed stopped (``clear``)

One target group per node that is UP and has an address that parses::

    {"targets": ["10.0.0.5:7840"],
     "labels": {"roleserve_node": "node-1a2b…",
                "roleserve_role_consensus_member": "true",
                "roleserve_role_custom_backup": "true",
                "roleserve_label_rack": "r1"}}

The labels, and why they look so:

- Plain names, not ``__meta_…``: Prometheus drops labels starting with ``__`` after
  relabelling, so ``__meta_`` labels (what Monogon sends) are usable only by a scrape config
  that copies them. Plain ones land on every series as they are: ``up{roleserve_role_
  consensus_member="true"}`` works with no relabelling, and relabelling still sees them.
- ``roleserve_`` first: an exporter's own labels (``node``, ``role``, ``instance``…) never
  clash with ours.
- ``roleserve_role_<role>="true"`` for every role held, and only those: built-in roles by
  their field name (``consensus_member``, ``kubernetes_controller``, ``kubernetes_worker``),
  custom roles as ``custom_<name>`` (``ctl roles set N custom:backup`` gives
  ``roleserve_role_custom_backup``), so a custom role named like a built-in one cannot pose
  as it. A role not held has no label: select such nodes with ``!="true"``. Monogon sends
  the three built-in roles as ``"true"``/``"false"`` and no custom role at all.
- ``roleserve_label_<key>`` = the node label's value.
- Names are sanitised into Prometheus label names (``[a-zA-Z_][a-zA-Z0-9_]*``): every ``-``
  and ``.`` of a role name or label key becomes ``_``. Two label keys that sanitise alike
  (``a-b``, ``a.b``) give one label: the key first in sorted order wins. Two custom roles
  that do give one label too, which is ``"true"`` either way.

The fix of Monogon's quirk: Monogon compares nodes by ConsensusMember (twice) and
KubernetesController presence and the address only, so a node's worker-role change never
reaches Prometheus. Here two records of a node are the same exactly when their target groups
are, so any change of what the group says (a role, a label, the address, the state)
republishes it.

Who serves it: the setting ``discovery`` (``[plugins.metrics]``) says: ``consensus`` (the
default, as Monogon: only consensus members, which is where the scrape config that
``roleserve ctl prometheus-config`` writes looks), ``all`` (every node), ``none``.
``serves_discovery`` decides for one node's roles; ``discovery_when`` is the same as a
worker's ``when=``.

Wiring, for the plugin's hooks and server::

    roleserve_settings: [..., DISCOVERY_SETTING]
    roleserve_workers:  view = DiscoveryView(discovery_mode(node.config))   (ConfigError: bad)
                        discovery_worker(node.values, view)   (runs while serves_discovery)
    server:             app.add_routes(discovery_routes(view))   on every node: one that
                        does not serve discovery answers 503 saying where it runs
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from roleserve_core import (
    CLUSTER_NODES,
    ClusterNodes,
    ConfigError,
    NodeRoles,
    PluginValues,
    RunContext,
    Setting,
    Worker,
    common_pb2,
    curator_pb2,
    endpoint,
    node_address,
    node_changes,
)
from roleserve_metrics.ports import METRICS_PORT

if TYPE_CHECKING:
    from aiohttp import web

__all__ = [
    "ALL",
    "CONSENSUS",
    "DISCOVERY_PATH",
    "DISCOVERY_SETTING",
    "MODES",
    "NONE",
    "NOT_RUNNING",
    "SERVING",
    "WAITING",
    "WAITING_NOTE",
    "DiscoveryView",
    "discovery_mode",
    "discovery_routes",
    "discovery_when",
    "discovery_worker",
    "feed_discovery",
    "http_sd_targets",
    "label_name",
    "serves_discovery",
    "target_group",
]

DISCOVERY_PATH = "/discovery"

CONSENSUS = "consensus"
ALL = "all"
NONE = "none"
MODES = (CONSENSUS, ALL, NONE)
"""What the setting ``discovery`` may be."""

DISCOVERY_SETTING: Setting[str] = Setting(
    "discovery",
    str,
    CONSENSUS,
    "Which nodes serve /discovery (Prometheus http_sd of every UP node): consensus "
    "(the consensus members), all (every node) or none.",
    choices=MODES,
)

NODE_LABEL = "roleserve_node"
ROLE_LABEL = "roleserve_role_"
NODE_LABEL_PREFIX = "roleserve_label_"
BUILTIN_ROLES = ("consensus_member", "kubernetes_controller", "kubernetes_worker")

WHO = {
    CONSENSUS: "on consensus members only",
    ALL: "on every node",
    NONE: "on no node",
}
WAITING = (
    "discovery has no whole view of the cluster's nodes yet; it runs {who} "
    "([plugins.metrics] discovery = {mode!r})"
)
"""The 503 body before the first whole view (``str.format`` with ``who`` and ``mode``)."""
NOT_RUNNING = (
    "discovery does not run on this node now; it runs {who} "
    "([plugins.metrics] discovery = {mode!r})"
)
"""The 503 body after the feed stopped (``str.format`` with ``who`` and ``mode``)."""
SERVING = "serving /discovery"
"""How the worker's log line about each change starts."""
WAITING_NOTE = "waiting for the cluster's nodes (cluster_nodes)"
"""The worker's note until the first whole view."""
RETRY_AFTER = "5"
"""Seconds a 503 asks the client to wait (Prometheus keeps its last targets meanwhile)."""

_NOT_A_LABEL_CHARACTER = re.compile(r"[^A-Za-z0-9_]")

Node = curator_pb2.Node
TargetGroup = dict[str, Any]
"""One http_sd entry: ``{"targets": ["host:7840"], "labels": {name: value}}``."""


# -- the setting and who serves ---------------------------------------------------------


def discovery_mode(config: Mapping[str, Any]) -> str:
    """The setting ``discovery`` of the plugin's ``NodeContext.config``: one of ``MODES``
    (its ``choices``) in a node's, which the core checked.

    :raises ConfigError: for a value that is none of ``MODES``, in a config built by hand.
    """
    mode = DISCOVERY_SETTING.read(config)
    if DISCOVERY_SETTING.not_allowed(mode) is not None:
        raise ConfigError(
            f"[plugins.metrics] discovery must be {DISCOVERY_SETTING.allowed}, not {mode!r}"
        )
    return mode


def serves_discovery(mode: str, roles: NodeRoles | None) -> bool:
    """Whether a node with ``roles`` (None: not known yet) serves discovery under ``mode``."""
    if mode == ALL:
        return True
    if mode == CONSENSUS:
        return roles is not None and roles.consensus_member is not None
    return False


def discovery_when(mode: str) -> Callable[[NodeRoles], bool] | None:
    """``serves_discovery`` as a worker's ``when=`` (None, always, for ``all``)."""
    if mode == ALL:
        return None

    def serves(roles: NodeRoles) -> bool:
        return serves_discovery(mode, roles)

    return serves


# -- the targets, as pure functions -----------------------------------------------------


def label_name(text: str) -> str:
    """``text`` with every character a Prometheus label name cannot hold made ``_``.

    Only for the part after our prefixes, which start with a letter: a leading digit stays.
    """
    return _NOT_A_LABEL_CHARACTER.sub("_", text)


def target_group(node: Node) -> TargetGroup | None:
    """The http_sd entry of ``node``; None if it is not UP or has no address that parses."""
    if node.state != common_pb2.NODE_STATE_UP:
        return None
    try:
        address = node_address(node)
    except ValueError:
        return None
    if address is None:
        return None
    labels = {NODE_LABEL: node.id}
    for role in _roles(node.roles):
        labels[ROLE_LABEL + label_name(role)] = "true"
    for pair in sorted(node.labels.pairs, key=lambda pair: pair.key, reverse=True):
        labels[NODE_LABEL_PREFIX + label_name(pair.key)] = pair.value  # the first key wins
    return {"targets": [endpoint(address, METRICS_PORT)], "labels": dict(sorted(labels.items()))}


def _roles(roles: common_pb2.NodeRoles) -> list[str]:
    """Every role of the wire message: built-in ones by field name, ``custom_<name>``."""
    held = [role for role in BUILTIN_ROLES if roles.HasField(role)]  # type: ignore[arg-type]
    return held + [f"custom_{name}" for name in sorted(roles.custom)]


def http_sd_targets(nodes: Mapping[str, Node]) -> list[TargetGroup]:
    """The http_sd list of a view of the cluster's nodes: one group per UP node with an
    address, sorted by node ID."""
    groups = (target_group(nodes[node_id]) for node_id in sorted(nodes))
    return [group for group in groups if group is not None]


def _counts(node: Node) -> bool:
    """Whether ``node`` has a group (as ``target_group``, without building it: ``changes``
    asks this of every node of both views on every event)."""
    if node.state != common_pb2.NODE_STATE_UP:
        return False
    try:
        return node_address(node) is not None
    except ValueError:
        return False


def _same_group(old: Node, new: Node) -> bool:
    return target_group(old) == target_group(new)


# -- the latest view, served --------------------------------------------------------------


class DiscoveryView:
    """The targets of the latest whole view of ``cluster_nodes``, and the handler serving them.

    Fed with ``update`` (by ``feed_discovery``); answers 503 until the first whole view and
    again after ``clear``, saying why and which nodes serve discovery under ``mode`` (the
    setting). The JSON is rendered on change, so a request costs no work.
    """

    def __init__(self, mode: str = CONSENSUS) -> None:
        self.mode = mode
        self._nodes: Mapping[str, Node] = {}
        self._groups: dict[str, TargetGroup] = {}
        self._body: bytes | None = None
        self._unavailable = self._reason(WAITING)

    def _reason(self, template: str) -> str:
        return template.format(who=WHO.get(self.mode, "?"), mode=self.mode)

    @property
    def targets(self) -> list[TargetGroup] | None:
        """The http_sd list served now; None while answering 503."""
        if self._body is None:
            return None
        return self._sorted()

    def _sorted(self) -> list[TargetGroup]:
        return [self._groups[node_id] for node_id in sorted(self._groups)]

    def update(self, view: ClusterNodes) -> bool:
        """Take a view of ``cluster_nodes``; one that is not whole (``backlogged``) is
        ignored. Returns whether what is served changed."""
        if not view.backlogged:
            return False
        found = node_changes(self._nodes, view, include=_counts, same=_same_group)
        self._nodes = view
        if not found and self._body is not None:
            return False
        for node in (*found.added, *found.updated):
            group = target_group(node)
            assert group is not None  # _counts
            self._groups[node.id] = group
        for node_id in found.removed:
            self._groups.pop(node_id, None)
        self._body = json.dumps(self._sorted(), separators=(",", ":")).encode()
        return True

    def clear(self) -> None:
        """Answer 503 again until the next whole view: the feed stopped."""
        self._nodes = {}
        self._groups = {}
        self._body = None
        self._unavailable = self._reason(NOT_RUNNING)

    def answer(self) -> tuple[int, bytes, dict[str, str]]:
        """``GET /discovery``'s status, body and headers: 200 and the JSON, or 503 saying
        why, with ``Retry-After``."""
        if self._body is None:
            return 503, self._unavailable.encode(), {"Retry-After": RETRY_AFTER}
        return 200, self._body, {}

    async def handle(self, request: web.Request) -> web.Response:
        """``GET /discovery``, for an aiohttp application (``discovery_routes``)."""
        from aiohttp import web  # here: the hooks import this module, which stays light

        status, body, headers = self.answer()
        if status != 200:
            return web.Response(status=status, text=body.decode(), headers=headers)
        return web.Response(body=body, content_type="application/json")


def discovery_routes(view: DiscoveryView) -> list[web.RouteDef]:
    """``GET /discovery`` (any other method: 405) for an aiohttp application; the metrics
    server answers the same from the view itself (``server.MetricsRoutes``)."""
    from aiohttp import web  # here: the hooks import this module, which stays light

    return [web.get(DISCOVERY_PATH, view.handle, allow_head=False)]


# -- the feed ----------------------------------------------------------------------------


async def feed_discovery(
    values: PluginValues,
    view: DiscoveryView,
    *,
    changed: Callable[[int], None] = lambda count: None,
) -> None:
    """Keep ``view`` at the latest whole view of ``cluster_nodes``, until cancelled; then
    ``view`` answers 503 again (``clear``). ``changed(count)`` is called whenever what
    is served changed (the first whole view included), with the number of target groups.
    The worker running it must declare ``reads=(CLUSTER_NODES,)``."""
    try:
        with values.watch(CLUSTER_NODES) as views:
            async for nodes in views:
                if view.update(nodes):
                    changed(len(view.targets or ()))
    finally:
        view.clear()


def discovery_worker(values: PluginValues, view: DiscoveryView) -> Worker:
    """The worker ``metrics_discovery``: ``feed_discovery`` while this node serves
    discovery under ``view.mode`` (``discovery_when``); healthy once it serves the first
    whole view; logs the number of targets on each change. With ``none`` it never runs."""

    async def metrics_discovery(ctx: RunContext) -> None:
        """Keeps /discovery's Prometheus targets at the cluster's nodes."""
        ctx.set_note(WAITING_NOTE)
        healthy = False

        def changed(count: int) -> None:
            nonlocal healthy
            if not healthy:
                healthy = True
                ctx.set_note("")
                ctx.signal_healthy()
            ctx.log.info("%s: %d UP node%s", SERVING, count, "" if count == 1 else "s")

        await feed_discovery(values, view, changed=changed)

    return Worker(
        "metrics_discovery",
        metrics_discovery,
        when=discovery_when(view.mode),
        reads=(CLUSTER_NODES,),
    )
