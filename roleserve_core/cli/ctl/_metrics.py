"""``ctl metrics NODE``: a node's key figures, for people without Prometheus.

::

    GetNodes (the leader) ─▶ the node's record: state, health, heartbeat, version, address
    GetSupervisionTree    ─┐
    GetValues (the node)  ─┴▶ figures: runnables by state, crash-looping, final, restarts
                               and failures (and which runnable restarted most), values set,
                               value changes, the last one; how long root has been HEALTHY

Only what the node already tells its node management API (the figures ``ctl tree`` and
``ctl values`` show one by one), summed up in a few lines: it needs ``viewer`` credentials,
as those do (a ``metrics`` certificate scrapes the metrics server, it reads no node).
``--json`` gives the same figures for scripts.
"""

from __future__ import annotations

import argparse
import datetime
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from roleserve_core.cli._format import NONE, format_age, format_duration, print_json, seconds
from roleserve_core.cli._node_display import health_name, state_name
from roleserve_core.cli.ctl import _command

if TYPE_CHECKING:
    from roleserve_core.cli.ctl._session import Session
    from roleserve_core.proto import management_pb2
    from roleserve_core.proto.nodemanagement_pb2 import Runnable, Value

__all__ = ["add_parsers", "figure_lines", "node_figures", "show_metrics"]

STATE_ORDER = ("HEALTHY", "NEW", "DONE", "DEAD", "CANCELED")
"""The order states are counted in; any other follows, sorted."""


def add_parsers(commands: Any) -> None:
    """Register ``metrics``."""
    parser = _command.add(
        commands,
        "metrics",
        show_metrics,
        without_leader=True,
        description=(
            "Show the key figures of NODE in a few lines: its state, health, heartbeat and "
            "version; how long it has run; its runnables by state, crash-looping and final "
            "ones, restarts and failures; its values set and changed. Read from the node's "
            "management API, as `tree` and `values` read them (viewer credentials)."
        ),
    )
    _command.add_node_argument(parser)
    _command.add_json_option(parser)


def node_figures(
    node: management_pb2.Node,
    runnables: Sequence[Runnable],
    values: Sequence[Value],
    now: datetime.datetime,
) -> dict[str, Any]:
    """The figures of one node, as ``--json`` prints them (``now``: for ages)."""
    states = Counter(runnable.state for runnable in runnables)
    order = [state for state in STATE_ORDER if state in states]
    order += sorted(state for state in states if state not in STATE_ORDER)
    restarted = max(runnables, key=lambda runnable: runnable.restarts, default=None)
    root = next((runnable for runnable in runnables if runnable.dn == "root"), None)
    changed = [value for value in values if value.HasField("last_changed")]
    last = max(changed, key=lambda value: value.last_changed.ToNanoseconds(), default=None)
    return {
        "node": node.id,
        "address": node.status.external_address or None,
        "state": state_name(node.state),
        "health": health_name(node.health),
        "version": node.status.version or None,
        "heartbeat_age": seconds(node.time_since_heartbeat)
        if node.HasField("time_since_heartbeat")
        else None,
        "root_state": root.state if root is not None else None,
        "root_state_for": _age(root.since.ToDatetime(datetime.UTC), now)
        if root is not None and root.HasField("since")
        else None,
        "runnables": len(runnables),
        "runnables_by_state": {state: states[state] for state in order},
        "crash_looping": sorted(r.dn for r in runnables if r.crash_looping),
        "final": sorted(r.dn for r in runnables if r.final),
        "restarts": sum(runnable.restarts for runnable in runnables),
        "failures": sum(runnable.failures for runnable in runnables),
        "most_restarted": {"dn": restarted.dn, "restarts": restarted.restarts}
        if restarted is not None and restarted.restarts
        else None,
        "values": len(values),
        "values_set": sum(1 for value in values if value.is_set),
        "value_changes": sum(value.sets for value in values),
        "last_value_change": {
            "name": last.name,
            "age": _age(last.last_changed.ToDatetime(datetime.UTC), now),
        }
        if last is not None
        else None,
    }


def _age(moment: datetime.datetime, now: datetime.datetime) -> float:
    return max(0.0, (now - moment).total_seconds())


def figure_lines(figures: dict[str, Any]) -> list[str]:
    """The figures for people: one line per subject, nothing shown that is not there."""
    about = [figures["state"], figures["health"]]
    if figures["version"]:
        about.append(f"version {figures['version']}")
    about.append(figures["address"] or "no address")
    running = NONE
    if figures["root_state"] is not None:
        running = figures["root_state"]
        if figures["root_state_for"] is not None:
            running += f" for {format_duration(figures['root_state_for'])}"
    by_state = ", ".join(
        f"{count} {state}" for state, count in figures["runnables_by_state"].items()
    )
    runnables = f"{figures['runnables']}" + (f": {by_state}" if by_state else "")
    trouble = []
    if figures["crash_looping"]:
        trouble.append(f"crash-looping: {', '.join(figures['crash_looping'])}")
    if figures["final"]:
        trouble.append(f"final: {', '.join(figures['final'])}")
    restarts = f"{figures['restarts']} (failures {figures['failures']})"
    if figures["most_restarted"] is not None:
        most = figures["most_restarted"]
        restarts += f", most: {most['dn']} ({most['restarts']})"
    values = (
        f"{figures['values_set']} of {figures['values']} set, {figures['value_changes']} changes"
    )
    if figures["last_value_change"] is not None:
        last = figures["last_value_change"]
        values += f", the last {format_age(last['age'])} ({last['name']})"
    lines = [
        f"node:       {figures['node']} ({', '.join(about)})",
        f"heartbeat:  {format_age(figures['heartbeat_age'])}",
        f"root:       {running}",
        f"runnables:  {runnables}",
    ]
    lines += [f"            {line}" for line in trouble]
    lines += [f"restarts:   {restarts}", f"values:     {values}"]
    return lines


async def show_metrics(session: Session, args: argparse.Namespace) -> None:
    """``ctl metrics``."""
    from roleserve_core.proto import nodemanagement_pb2

    node = await session.node_client(args.node)
    tree = await session.call(
        node.about("reading the supervision tree"),
        node.stub.GetSupervisionTree,
        nodemanagement_pb2.GetSupervisionTreeRequest(dn="root"),
    )
    values = await session.call(
        node.about("reading the values"),
        node.stub.GetValues,
        nodemanagement_pb2.GetValuesRequest(),
    )
    now = datetime.datetime.now(datetime.UTC)
    figures = node_figures(node.node, tree.runnables, values.values, now)
    if args.json:
        print_json(figures)
    else:
        print("\n".join(figure_lines(figures)))
