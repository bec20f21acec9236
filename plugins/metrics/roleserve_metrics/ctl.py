"""``roleserve ctl prometheus-config --out DIR``: a Prometheus scrape configuration for the
cluster.

::

    prometheus-config --out DIR [--name NAME] [--install-dir PATH] [--force]
                      [--scrape-interval DURATION]
        GetClusterInfo ─▶ the consensus members' addresses (where /discovery is served)
        new key ─▶ CSR ─▶ IssueCredentials(NAME, scope metrics)   (credentials issue's code)
        ─▶ DIR/{ca.pem, cert.pem, key.pem, endpoints}   an access directory, as issue writes
           DIR/prometheus.yml                           one job per exporter, every target
                                                        from http_sd on each member

Each job scrapes ``https://<node>:7840/metrics/<exporter>``; its targets come from
``https://<member>:7840/discovery`` (the metrics plugin's http_sd, one target group per UP
node). A member that is down costs nothing: the others list the same targets, and
Prometheus scrapes a target listed twice once. The ``etcd`` job keeps the consensus members
only, by their role label.

Every job scrapes every ``--scrape-interval`` (15 s unless given), which the file's
``global`` section also sets, with the rules' evaluation interval: Prometheus's default is
a minute, and a ``rate(...[1m])`` over samples a minute apart is empty. Each job names it
too, so that it stays when the jobs are merged into a configuration of one's own.

TLS, both ways, for discovery and scrapes alike: Prometheus presents the metrics
certificate (the only scope the metrics server needs), and verifies the node against the
cluster CA. Node certificates name the node ID and ``ANY_NODE_NAME``, never an address, so
``server_name`` is ``ANY_NODE_NAME``: every node's certificate carries it, no other
certificate of the CA does (user certificates lack ServerAuth), and Prometheus cannot set a
name per target.

The credentials name, unless ``--name``: ``prometheus-YYYYMMDD-<6 hex digits>``; names are
never issued twice, so a second run makes new credentials (revoke the old ones with
``ctl credentials revoke``).

Registered with the core's ``ctl`` through the entry-point group ``roleserve.ctl`` (as the
kubernetes plugin's ``kubeconfig``), so the core knows neither the exporters nor the labels
of this plugin's discovery, and loaded only when ``prometheus-config`` is run. It issues and
writes the credentials with the core's ctl-plugin API (``issue_ctl_credentials``,
``save_ctl_access``), as ``ctl credentials issue`` does.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import secrets
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from roleserve_core import (
    EXIT_USAGE,
    CtlError,
    add_ctl_command,
    check_ctl_out,
    endpoint,
    issue_ctl_credentials,
    roleserve_command,
    save_ctl_access,
)
from roleserve_metrics.discovery import DISCOVERY_PATH, ROLE_LABEL
from roleserve_metrics.ports import METRICS_PORT

if TYPE_CHECKING:
    from roleserve_core import CtlSession
    from roleserve_core.identity import UserCredentials

__all__ = [
    "CONFIG_FILE",
    "EXPORTERS",
    "add_parsers",
    "default_name",
    "prometheus_config",
    "prometheus_yaml",
]

CONFIG_FILE = "prometheus.yml"
SCOPE = "metrics"
EXPORTERS: tuple[tuple[str, str | None], ...] = (
    ("core", None),
    ("node", None),
    ("etcd", "consensus_member"),
    ("containerd", "kubernetes_worker"),
)
"""Each exporter the metrics server serves at ``/metrics/<name>``, and the role a node must
hold to have it (None: every node). Written out: ``ctl`` runs no node, and the exporters
come from hooks that read a node's roles; the workspace's tests/test_metrics_exporters_listed.py
derives it from the installed plugins' hooks and compares."""
JOB_PREFIX = "roleserve-"
"""Job names are ``roleserve-<exporter>``: merged into an existing configuration, ours do
not clash with its jobs (a ``node`` job for node_exporter is common)."""
DEFAULT_SCRAPE_INTERVAL = "15s"
"""How often every target is scraped and rules are evaluated: four samples a minute, so
that ``rate(...[1m])`` has two in any window even with a scrape missed."""
DURATION = re.compile(r"(\d+y)?(\d+w)?(\d+d)?(\d+h)?(\d+m)?(\d+s)?(\d+ms)?")
"""A Prometheus duration (``15s``, ``1m30s``, ``500ms``): units from years to milliseconds,
largest first."""
REFRESH_INTERVAL = "30s"
"""How often Prometheus asks /discovery again (its default is a minute)."""


def add_parsers(commands: Any) -> None:
    """Register ``prometheus-config`` (the ``roleserve.ctl`` entry point)."""
    parser = add_ctl_command(
        commands,
        "prometheus-config",
        prometheus_config,
        help="write a Prometheus configuration and metrics credentials for it (owner only)",
        description=(
            "Issue metrics-scoped credentials (as `credentials issue` does) and write them to "
            f"DIR with a {CONFIG_FILE}: one job per exporter ("
            + ", ".join(JOB_PREFIX + name for name, _ in EXPORTERS)
            + "), its targets from the http_sd discovery the consensus members serve at "
            f"https://MEMBER:{METRICS_PORT}{DISCOVERY_PATH}, every connection mutual TLS. "
            "DIR must be new or empty; check the result with: promtool check config "
            f"DIR/{CONFIG_FILE}."
        ),
    )
    parser.add_argument("--out", required=True, metavar="DIR", type=Path, help="where to")
    parser.add_argument(
        "--name",
        help="the credentials' name (default: prometheus-YYYYMMDD- and 6 random hex digits)",
    )
    parser.add_argument(
        "--install-dir",
        metavar="PATH",
        type=Path,
        help=(
            f"where DIR's files will be on the Prometheus host: the paths {CONFIG_FILE} "
            "names (default: DIR's absolute path)"
        ),
    )
    parser.add_argument(
        "--scrape-interval",
        metavar="DURATION",
        type=_duration,
        default=DEFAULT_SCRAPE_INTERVAL,
        help=(
            "how often Prometheus scrapes every node and evaluates rules, as Prometheus "
            f"writes durations (default {DEFAULT_SCRAPE_INTERVAL}; its own default, 1m, "
            "leaves rate(...[1m]) empty)"
        ),
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help=(
            f"replace the files of an earlier run in DIR (one holding a {CONFIG_FILE}); "
            "any other non-empty DIR is still refused"
        ),
    )


def _duration(text: str) -> str:
    """``text`` if it is a Prometheus duration longer than zero."""
    if not text or not DURATION.fullmatch(text) or not any(c in "123456789" for c in text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a Prometheus duration longer than 0, such as 15s, 1m or 500ms"
        )
    return text


def default_name(today: datetime.date | None = None) -> str:
    """``prometheus-YYYYMMDD-<6 hex digits>``: unique enough that two runs never collide."""
    today = today or datetime.datetime.now(datetime.UTC).date()
    return f"prometheus-{today:%Y%m%d}-{secrets.token_hex(3)}"


def _check_out(directory: Path, force: bool) -> str | None:
    """Refuse a ``--out`` that holds anything but an earlier run's files (with ``--force``).

    :returns: the name of the credentials an earlier run left there, if any.
    :raises CtlError: for a directory it must not write into.
    """
    if not force:
        check_ctl_out(directory)
        return None
    if not directory.exists():
        return None
    if not (directory / CONFIG_FILE).is_file():
        raise CtlError(
            f"{directory} holds no {CONFIG_FILE} of an earlier run; --force replaces only "
            "those: give a new or empty directory to --out",
            EXIT_USAGE,
        )
    return _earlier_name(directory)


def _earlier_name(directory: Path) -> str | None:
    from roleserve_core import CredentialsError
    from roleserve_core.identity import UserCredentials

    try:
        return UserCredentials.load(directory).identity
    except (CredentialsError, ValueError):
        return None


async def prometheus_config(session: CtlSession, args: argparse.Namespace) -> None:
    """``ctl prometheus-config --out DIR``."""
    from roleserve_core import management_pb2

    out: Path = args.out
    earlier = _check_out(out, args.force)
    info = await session.call(
        "reading the consensus members",
        session.management.GetClusterInfo,
        management_pb2.GetClusterInfoRequest(),
    )
    members = [node.addresses[0] for node in info.cluster_directory.nodes if node.addresses]
    if not members:
        raise CtlError("the cluster names no consensus member with an address to discover from")
    name = args.name or default_name()
    credentials = await issue_ctl_credentials(session, name, SCOPE)
    save_ctl_access(session, credentials, out)
    _write_config(out, args.install_dir, members, name, args.scrape_interval)
    print(_report(out, credentials, name, members, earlier))


def _write_config(
    out: Path, install_dir: Path | None, members: Sequence[str], name: str, interval: str
) -> None:
    from roleserve_core import write_atomically
    from roleserve_core.identity import ANY_NODE_NAME

    directory = install_dir or out.resolve()
    text = prometheus_yaml(
        members,
        directory,
        server_name=ANY_NODE_NAME,
        header=_header(name),
        scrape_interval=interval,
    )
    write_atomically(out / CONFIG_FILE, text.encode(), 0o644)


def _header(name: str) -> list[str]:
    return [
        f"Written by `{roleserve_command()} ctl prometheus-config` with the metrics credentials "
        f"{name!r} (in this directory).",
        f"Targets: every UP node, from {DISCOVERY_PATH} on the consensus members; labels "
        "roleserve_node, roleserve_role_<role>, roleserve_label_<key>.",
        f"Revoke the credentials with: {roleserve_command()} ctl credentials revoke {name}",
    ]


def _report(
    out: Path,
    credentials: UserCredentials,
    name: str,
    members: Sequence[str],
    earlier: str | None,
) -> str:
    certificate = credentials.certificate
    count = len(members)
    lines = [
        f"issued metrics credentials {name!r} (serial {certificate.serial_number:x}, expires "
        f"{certificate.not_valid_after_utc:%Y-%m-%d}) and wrote {out / CONFIG_FILE}: jobs "
        + ", ".join(JOB_PREFIX + exporter for exporter, _ in EXPORTERS)
        + f", targets from {DISCOVERY_PATH} on {count} consensus member{'s' * (count != 1)}",
        f"check it with: promtool check config {out / CONFIG_FILE}",
    ]
    if earlier is not None and earlier != name:
        lines.append(
            f"the credentials {earlier!r} it replaced stay valid until revoked: "
            f"{roleserve_command()} ctl credentials revoke {earlier}"
        )
    return "\n".join(lines)


# -- the file ---------------------------------------------------------------------------------


def prometheus_yaml(
    members: Sequence[str],
    directory: Path,
    *,
    server_name: str,
    header: Sequence[str] = (),
    scrape_interval: str | None = None,
) -> str:
    """The scrape configuration: one job per exporter, discovering from every member.

    :param members: the consensus members' addresses.
    :param directory: where ``ca.pem``, ``cert.pem`` and ``key.pem`` are for Prometheus.
    :param server_name: the name every node's certificate carries.
    :param header: comment lines to start with.
    :param scrape_interval: a Prometheus duration: a ``global`` section sets it as the
        scrape and evaluation interval, and each job as its own. None: neither, for a
        caller that writes a ``global`` section of its own (Prometheus's default is 1m).
    """
    from roleserve_core.identity import CA_FILE, CERTIFICATE_FILE, KEY_FILE

    tls = [
        f"ca_file: {_quoted(str(directory / CA_FILE))}",
        f"cert_file: {_quoted(str(directory / CERTIFICATE_FILE))}",
        f"key_file: {_quoted(str(directory / KEY_FILE))}",
        f"server_name: {_quoted(server_name)}",
    ]
    lines = [f"# {line}" for line in header]
    if scrape_interval is not None:
        lines += [
            "global:",
            f"  scrape_interval: {scrape_interval}",
            f"  evaluation_interval: {scrape_interval}",
        ]
    lines.append("scrape_configs:")
    for exporter, role in EXPORTERS:
        lines.append(f"  - job_name: {_quoted(JOB_PREFIX + exporter)}")
        if scrape_interval is not None:
            lines.append(f"    scrape_interval: {scrape_interval}")
        lines += [
            "    scheme: https",
            f"    metrics_path: {_quoted('/metrics/' + exporter)}",
            "    tls_config:",
            *(f"      {line}" for line in tls),
            "    http_sd_configs:",
        ]
        for member in members:
            url = f"https://{endpoint(member, METRICS_PORT)}{DISCOVERY_PATH}"
            lines += [
                f"      - url: {_quoted(url)}",
                f"        refresh_interval: {REFRESH_INTERVAL}",
                "        tls_config:",
                *(f"          {line}" for line in tls),
            ]
        if role is not None:
            lines += [
                "    relabel_configs:",
                f"      - source_labels: [{_quoted(ROLE_LABEL + role)}]",
                '        regex: "true"',
                "        action: keep",
            ]
    return "\n".join(lines) + "\n"


def _quoted(text: str) -> str:
    """A YAML double-quoted scalar: a JSON string is one (non-ASCII as ``\\uXXXX``)."""
    return json.dumps(text)
