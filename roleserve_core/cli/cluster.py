"""``roleserve cluster up|down|status``: a cluster of node processes on this machine.

``up`` starts N nodes on 127.0.0.11, 127.0.0.12, ... (``--first-address`` moves them; see
``localcluster``), prints each
step, then a live status table until Ctrl-C, which stops the nodes it started cleanly
(nodes it found running keep running). ``--detach``
leaves the nodes running instead; ``down`` stops them and ``status`` shows them.
``up --netns`` (root) runs each node in a network namespace of its own instead, at an
address of 198.18.0.0/15 (``localcluster.netns``). A new cluster gets a cluster network
(its nodes' prefixes, its pods' addresses) that no other local cluster of this machine has,
or the one ``--cluster-network`` gives (``localcluster.clusternetwork``).

This module is the command line; what each sub-command does is in ``_cluster_commands``,
imported when one runs, so that ``--help`` loads neither anyio nor grpc.
"""

from __future__ import annotations

import argparse
import ipaddress
import sys
from pathlib import Path
from typing import Any, Literal

from roleserve_core.cli._failure import report, sole_error
from roleserve_core.errors import RoleserveError
from roleserve_core.localcluster.clusternetwork import (
    DEFAULT_NETWORK,
    NETWORK_PREFIX_LENGTH,
    POOL,
    IPNetwork,
    network_value,
)
from roleserve_core.localcluster.layout import (
    ALL_WORKERS,
    DEFAULT_KUBERNETES_WORKERS,
    DEFAULT_SIZE,
    FIRST_ADDRESS,
    MAX_SIZE,
    default_cluster_directory,
    kubernetes_workers_value,
)

__all__ = ["add_parser"]


def add_parser(commands: Any) -> None:
    """Register ``roleserve cluster``."""
    parser: argparse.ArgumentParser = commands.add_parser(
        "cluster",
        description=(
            "Run a cluster of node processes on this machine: node i listens on 127.0.0.1x "
            "(127.0.0.11, 127.0.0.12, ...) with the standard ports, as real nodes do on "
            "their own addresses; with `up --netns` (root), each in a network namespace of "
            "its own instead. Every installed plugin runs on every node."
        ),
    )
    subcommands = parser.add_subparsers(title="commands", metavar="COMMAND")
    up = subcommands.add_parser(
        "up",
        help="start (or resume) the cluster, then show its status until Ctrl-C",
        description=(
            "Bootstrap node 1, register and approve the others, give them roles (three "
            "consensus members when there are three nodes or more; kubernetes_worker on "
            f"the first {DEFAULT_KUBERNETES_WORKERS} nodes, see --kubernetes-workers), wait until "
            "all are UP and HEALTHY (and, with the kube binaries, every kubernetes_worker's "
            "Kubernetes Node Ready: a plugin's extension), then show a live status table. "
            "Ctrl-C stops the nodes it started cleanly; nodes it found running keep "
            "running, on Ctrl-C and on failure alike; `cluster down` from another terminal "
            "ends it too (exit 0). Run it again on the same directory to "
            "bring the same cluster back: it starts every node that is not running (all of "
            "them before it waits for a leader, so two of three lost members come back "
            "too), then enrols any it lacks."
        ),
    )
    up.add_argument(
        "--nodes",
        type=_node_count,
        default=None,
        metavar="N",
        help=(
            f"how many nodes, 1 to {MAX_SIZE}: default {DEFAULT_SIZE} for a new cluster, else "
            "as many as "
            "--dir holds; more than it holds adds nodes, fewer is refused (a node leaves "
            "through `ctl decommission`)"
        ),
    )
    up.add_argument(
        "--kubernetes-workers",
        type=_worker_count,
        default=None,
        metavar="K",
        help=(
            f"how many nodes get kubernetes_worker (a kubelet and containerd each), the "
            f"first K by index, consensus members first: a number up to --nodes, or "
            f"{ALL_WORKERS}; default every node up to {DEFAULT_KUBERNETES_WORKERS} nodes and "
            f"{DEFAULT_KUBERNETES_WORKERS} above (each costs ~0.9%% of a core idle and "
            "~135 MiB). Roles a node holds already are kept"
        ),
    )
    up.add_argument(
        "--first-address",
        type=_loopback_address,
        default=None,
        metavar="ADDRESS",
        help=(
            f"node 1's address; node i gets the i-th from it (default {FIRST_ADDRESS}, or "
            "what the cluster in --dir was created with). Another one runs a second cluster "
            "beside the first, e.g. 127.0.1.11 (with a cluster network of its own: "
            "--cluster-network)"
        ),
    )
    up.add_argument(
        "--cluster-network",
        type=_cluster_network,
        default=None,
        metavar="CIDR",
        help=(
            "the cluster network a new cluster bootstraps with: its nodes' prefixes, its "
            "pods' addresses (a private network, e.g. 172.20.0.0/16; room for a /24 per "
            f"node). Default: a /{NETWORK_PREFIX_LENGTH} of {POOL} that no other local "
            "cluster of this machine has, so that two clusters never share a pod address; "
            "one that overlaps another local cluster's is refused. A cluster keeps its "
            f"network (one made before this took {DEFAULT_NETWORK})"
        ),
    )
    up.add_argument(
        "--netns",
        action="store_true",
        help=(
            "run each node in a network namespace of its own, joined to a bridge on the host "
            "by a veth pair, at an address of 198.18.0.0/15 (RFC 2544's test range; a /24 per "
            "cluster, chosen by --dir): separate networks on one machine (needs root and "
            "roleserve-core[netns]). `cluster down` removes the namespaces, veths and bridge"
        ),
    )
    up.add_argument(
        "--detach",
        action="store_true",
        help="leave the nodes running and exit (stop them with `roleserve cluster down`)",
    )
    _directory_option(up)
    up.set_defaults(handler=lambda args: _run("up", args))
    down = subcommands.add_parser(
        "down", help="stop a detached cluster", description="Stop every node of the cluster."
    )
    _directory_option(down)
    down.set_defaults(handler=lambda args: _run("down", args))
    status = subcommands.add_parser(
        "status",
        help="show the cluster's nodes",
        description=(
            "Show every node: its process, and what the leading curator knows of it; under "
            "the table, where the nodes' hosts files are (when the hostsfile plugin is installed)."
        ),
    )
    _directory_option(status)
    status.add_argument("--json", action="store_true", help="print JSON instead of a table")
    status.set_defaults(handler=lambda args: _run("status", args))
    parser.set_defaults(handler=lambda args: _usage(parser))


def _node_count(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= MAX_SIZE:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of nodes from 1 to {MAX_SIZE}")
    return int(text)


def _worker_count(text: str) -> int | Literal["all"]:
    try:
        return kubernetes_workers_value(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _cluster_network(text: str) -> IPNetwork:
    try:
        return network_value(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _loopback_address(text: str) -> ipaddress.IPv4Address:
    try:
        address = ipaddress.IPv4Address(text)
    except ValueError:
        address = None
    if address is None or not address.is_loopback:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a loopback IPv4 address (127.0.0.0/8), where local nodes live"
        )
    return address


def _directory_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dir",
        type=Path,
        default=None,
        help=f"the cluster's directory (default {default_cluster_directory()})",
    )


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def _run(command: str, args: argparse.Namespace) -> int:
    """Run the sub-command ``command`` (``up``, ``down``, ``status``)."""
    import anyio

    from roleserve_core.cli import _cluster_commands

    args.dir = (args.dir or default_cluster_directory()).expanduser()
    if args.dir.exists() and not args.dir.is_dir():
        report(
            "roleserve cluster",
            f"--dir {args.dir} is a file, not a directory; give a cluster's directory, or a "
            "new path for a new cluster",
        )
        return 2
    try:
        with sole_error():
            return anyio.run(_cluster_commands.COMMANDS[command], args)
    except RoleserveError as exc:
        report("roleserve cluster", exc)
        return 1
