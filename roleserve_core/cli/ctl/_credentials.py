"""``ctl whoami`` and ``ctl credentials issue|list|revoke``: scoped user credentials.

::

    credentials issue NAME --scope S --out DIR
        new key (here; it never leaves) ─▶ CSR ─▶ IssueCredentials (owner only)
        ─▶ DIR/{ca.pem, cert.pem, key.pem, endpoints}: an access directory like the owner's,
           so `ctl --credentials DIR ...` works with it at once
    credentials list      ─▶ ListCredentials: name, scope, serial, expiry, revoked
    credentials revoke NAME ─▶ RevokeCredentials: the leader refuses them within seconds
    whoami                ─▶ the access directory's certificate: who, scope, which cluster,
                             until when (and the leader that answered); GetClusterInfo
                             ─▶ refused as revoked? then that, in one line, exit 1

``--out`` must be a new or empty directory: writing over another access directory (the
owner's!) would lose the credentials in it, and with them the way into the cluster.
"""

from __future__ import annotations

import argparse
import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from roleserve_core.cli._format import print_json
from roleserve_core.cli._invocation import roleserve_command
from roleserve_core.cli._table import output_width, render_table
from roleserve_core.cli.ctl import _command
from roleserve_core.cli.ctl._errors import EXIT_USAGE, CtlError

if TYPE_CHECKING:
    from cryptography import x509

    from roleserve_core.cli.ctl._session import Session
    from roleserve_core.identity import UserCredentials
    from roleserve_core.proto import management_pb2

__all__ = [
    "SCOPES",
    "add_parsers",
    "check_out",
    "issue",
    "issue_credentials",
    "list_issued",
    "revoke",
    "save_access",
    "whoami",
]

SCOPES = ("owner", "operator", "viewer", "metrics")
"""The names of ``identity.Scope``, spelt out so that ``--help`` loads no cryptography (a
test checks they are the same)."""
HEADERS = ("NAME", "SCOPE", "SERIAL", "EXPIRES", "REVOKED")


def add_parsers(commands: Any) -> None:
    """Register ``whoami`` and ``credentials issue|list|revoke``."""
    parser = _command.add(
        commands,
        "whoami",
        whoami,
        description=(
            "Show the identity of the access directory's certificate, its scope (what it "
            "may do), its serial and expiry, the cluster it belongs to (its CA) and the "
            "leader that answered; if the cluster revoked the certificate, say only that "
            "(exit 1)."
        ),
    )
    _command.add_json_option(parser)
    credentials = commands.add_parser(
        "credentials",
        description="Issue, list and revoke user credentials of a scope (owner only).",
    )
    actions = credentials.add_subparsers(title="actions", metavar="ACTION", required=True)
    parser = _command.add(
        actions,
        "issue",
        issue,
        help="issue credentials of a scope into a new access directory",
        description=(
            "Generate a key here, have the leader sign it for NAME with SCOPE, and write "
            "an access directory (ca.pem, cert.pem, key.pem, endpoints) to DIR, which "
            "must be new or empty. Scopes: owner (everything), operator (roles, approve, "
            "decommission, node management and restarts), viewer (read status, nodes, "
            "trees, values, logs), metrics (scrape metrics only)."
        ),
    )
    parser.add_argument("name", metavar="NAME", help="the new certificate's identity")
    parser.add_argument("--scope", required=True, choices=SCOPES, help="what it may do")
    parser.add_argument("--out", required=True, metavar="DIR", type=Path, help="where to")
    parser = _command.add(
        actions,
        "list",
        list_issued,
        help="list issued credentials",
        description="List the credentials issued: name, scope, serial, expiry, revoked.",
    )
    _command.add_json_option(parser)
    parser = _command.add(
        actions,
        "revoke",
        revoke,
        help="revoke issued credentials",
        description=(
            "Revoke the credentials issued as NAME: the leading curator refuses them "
            "within seconds, and so does every node's management server."
        ),
    )
    parser.add_argument("name", metavar="NAME", help="as `credentials list` shows it")


def check_out(directory: Path) -> None:
    """:raises CtlError: unless ``directory`` is new or an empty directory."""
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise CtlError(
            f"{directory} exists and is not an empty directory; give a new one to --out",
            EXIT_USAGE,
        )


async def issue(session: Session, args: argparse.Namespace) -> None:
    """``ctl credentials issue NAME --scope S --out DIR``."""
    check_out(args.out)
    credentials = await issue_credentials(session, args.name, args.scope)
    save_access(session, credentials, args.out)
    certificate = credentials.certificate
    print(
        f"issued {args.scope} credentials {args.name!r} (serial {certificate.serial_number:x}, "
        f"expires {_day(certificate.not_valid_after_utc)}) into {args.out}; "
        f"use them with: {roleserve_command()} ctl --credentials {args.out} whoami"
    )


async def issue_credentials(session: Session, name: str, scope: str) -> UserCredentials:
    """New credentials of ``scope`` for ``name``: a key generated here (it never leaves),
    and the certificate the leader signs for its CSR.

    :raises CtlError: if the leader refuses (not an owner, a name issued before, ...).
    """
    from roleserve_core.identity import (
        UserCredentials,
        certificate_from_pem,
        generate_key,
        signing_request,
    )
    from roleserve_core.proto import management_pb2

    key = generate_key()
    request = management_pb2.IssueCredentialsRequest(
        name=name, scope=scope, csr=signing_request(key, name)
    )
    answer = await session.call(
        f"issuing credentials {name!r}", session.management.IssueCredentials, request
    )
    certificate = certificate_from_pem(answer.certificate, "the certificate the leader sent")
    ca = certificate_from_pem(answer.ca_certificate, "the cluster CA the leader sent")
    return UserCredentials(key, certificate, ca)


def save_access(session: Session, credentials: UserCredentials, directory: Path) -> None:
    """``credentials`` as an access directory (ca.pem, cert.pem, key.pem, endpoints: the
    session's), so that ``ctl --credentials DIRECTORY`` works with it at once."""
    from roleserve_core.access import ClusterAccess

    ClusterAccess.of(credentials, session.access.endpoints).save(directory)


async def list_issued(session: Session, args: argparse.Namespace) -> None:
    """``ctl credentials list``."""
    from roleserve_core.proto import management_pb2

    answer = await session.call(
        "listing credentials",
        session.management.ListCredentials,
        management_pb2.ListCredentialsRequest(),
    )
    if args.json:
        print_json([_issued_json(issued) for issued in answer.credentials])
        return
    rows = [
        [c.name, c.scope, c.serial, _day(c.not_after.ToDatetime(datetime.UTC)), _yes(c.revoked)]
        for c in answer.credentials
    ]
    print(render_table(HEADERS, rows, width=output_width()))


def _issued_json(issued: management_pb2.IssuedCredentials) -> dict[str, Any]:
    return {
        "name": issued.name,
        "scope": issued.scope,
        "serial": issued.serial,
        "expires": issued.not_after.ToDatetime(datetime.UTC).isoformat(),
        "revoked": issued.revoked,
    }


async def revoke(session: Session, args: argparse.Namespace) -> None:
    """``ctl credentials revoke NAME``."""
    from roleserve_core.proto import management_pb2

    await session.call(
        f"revoking credentials {args.name!r}",
        session.management.RevokeCredentials,
        management_pb2.RevokeCredentialsRequest(name=args.name),
    )
    print(
        f"revoked credentials {args.name!r}: the curator and every node's management "
        "server refuse them within seconds"
    )


async def whoami(session: Session, args: argparse.Namespace) -> None:
    """``ctl whoami``: read from the access directory's certificate; the leader only says
    that the cluster answered, which node leads it, and whether it revoked the certificate.

    :raises CtlError: if the leader refuses the certificate as revoked.
    """
    from roleserve_core.identity import certificate_scope
    from roleserve_core.rpc import permission_name, scope_permissions

    await _refuse_revoked(session)
    credentials = session.access.credentials
    certificate = credentials.certificate
    scope = certificate_scope(certificate)
    facts = {
        "identity": credentials.identity,
        "scope": scope or "(unreadable: no permission)",
        "permissions": " ".join(sorted(permission_name(p) for p in scope_permissions(scope))),
        "serial": f"{certificate.serial_number:x}",
        "expires": certificate.not_valid_after_utc.isoformat(),
        "cluster_ca": _fingerprint(credentials.ca_certificate),
        "leader": f"{session.leader.node_id} at {session.leader.endpoint}",
    }
    if args.json:
        print_json(facts)
        return
    for name, value in facts.items():
        print(f"{name.replace('_', ' ') + ':':<13} {value}")


async def _refuse_revoked(session: Session) -> None:
    """Ask the leader something, to learn whether it revoked the session's certificate.

    Finding the leader does not tell: ``GetCurrentLeader`` is open to every caller, revoked
    or not. The leader checks revocation before permissions and marks that refusal
    (``rpc.REVOKED_METADATA``), so any scope hears it, even metrics credentials, which may
    not call ``GetClusterInfo`` itself. Any other outcome says nothing of revocation, and
    ``whoami`` goes on with what the certificate says.

    :raises CtlError: with the leader's message, if it refused the certificate as revoked.
    """
    import grpc

    from roleserve_core.proto import management_pb2
    from roleserve_core.rpc import user_revocation

    request = management_pb2.GetClusterInfoRequest()
    try:
        await session.management.GetClusterInfo(request, timeout=session.timeout)
    except grpc.aio.AioRpcError as exc:
        revoked = user_revocation(exc)
        if revoked is not None:
            raise CtlError(revoked) from None


def _fingerprint(certificate: x509.Certificate) -> str:
    """SHA-256 of the CA certificate: tells clusters apart (each has its own CA)."""
    from cryptography.hazmat.primitives import hashes

    return "sha256:" + certificate.fingerprint(hashes.SHA256()).hex()


def _day(moment: datetime.datetime) -> str:
    return moment.strftime("%Y-%m-%d")


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"
