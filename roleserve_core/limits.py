"""Request limits: every bound on what a caller may send to a roleserve server, in one place.

::

    gRPC message ─▶ MAX_REQUEST_BYTES (every server; larger: INVALID_ARGUMENT naming the
        │           limit; beyond MAX_READ_BYTES: RESOURCE_EXHAUSTED from gRPC, not read)
        ▼ parsed (a string that is not UTF-8: INVALID_ARGUMENT, see ``rpc._server``)
    handler ─▶ the checks below, before anything is stored (beyond one: INVALID_ARGUMENT,
               naming the field and its limit)
        │
        ▼ etcd record (a node's record stays far below etcd's 1.5 MiB request limit,
                       ``ETCD_MAX_REQUEST_BYTES``: with every limit filled at once, under
                       half of it, says the controlplane's test_curator_validation.py,
                       ``test_the_largest_node_record_fits_one_etcd_request``)

Why these numbers: each is well above what roleserve itself sends, and together they keep a
node's record in etcd (labels, roles, status, cluster networking) under a few hundred KiB
however a caller fills it, so no accepted request can make a later write of the record fail
in etcd (``--max-request-bytes``, 1.5 MiB by default), and no request makes the leader copy
or compare megabytes. docs/wire-api.md ("Request limits") has the same table.

Lengths of text are counted in characters (Unicode code points), as Python's ``len``.
"""

from __future__ import annotations

from collections.abc import Sized

from roleserve_core.errors import RequestLimitError

__all__ = [
    "ETCD_MAX_REQUEST_BYTES",
    "MAX_CREDENTIALS_NAME_LENGTH",
    "MAX_CSR_BYTES",
    "MAX_CUSTOM_ROLES",
    "MAX_DN_LENGTH",
    "MAX_FILTER_ENTRIES",
    "MAX_HANDLED_CUSTOM_ROLES",
    "MAX_INSTANCE_LENGTH",
    "MAX_KEY_BYTES",
    "MAX_LABELS",
    "MAX_LABEL_LENGTH",
    "MAX_NODE_ID_LENGTH",
    "MAX_PLUGINS",
    "MAX_PLUGIN_ERROR_LENGTH",
    "MAX_PLUGIN_NAME_LENGTH",
    "MAX_PLUGIN_STATE_LENGTH",
    "MAX_PREFIXES",
    "MAX_READ_BYTES",
    "MAX_REQUEST_BYTES",
    "MAX_ROLE_CHANGES",
    "MAX_ROLE_LENGTH",
    "MAX_ROLE_PARAMETERS",
    "MAX_ROLE_PARAMETER_KEY_LENGTH",
    "MAX_ROLE_PARAMETER_VALUE_LENGTH",
    "MAX_TICKET_BYTES",
    "MAX_VALUE_NAME_LENGTH",
    "MAX_VERSION_LENGTH",
    "RequestLimitError",
    "check_bytes",
    "check_count",
    "check_text",
    "request_too_large",
]

MAX_REQUEST_BYTES = 1 << 20
"""The largest request message a server reads (``grpc.max_receive_message_length``), 1 MiB.

gRPC's default is 4 MiB. The largest valid request is an UpdateNodeRoles at the limits
below: 16 changes of 16 parameters, about 80 KiB in ASCII and 330 KiB in four-byte
characters; a RegisterNode with 128 labels of 63-character keys and values is 17 KiB, and
everything else is smaller. 1 MiB leaves room for those and any future field while keeping
each request under etcd's request limit: no single request can carry more than etcd would
take. Responses are not limited by it (a
Watch snapshot is sent in chunks of 2 MiB; clients keep gRPC's 4 MiB default)."""

MAX_READ_BYTES = 4 << 20
"""The largest request a server reads at all (``grpc.max_receive_message_length``), 4 MiB
as gRPC's default: one above ``MAX_REQUEST_BYTES`` is read only to be refused by name
(``request_too_large``), since gRPC's own refusal of an unread one (RESOURCE_EXHAUSTED,
"Received message larger than max") reads as the server lacking a resource."""


def request_too_large(size: int) -> str | None:
    """Why a request of ``size`` bytes is refused (beyond ``MAX_REQUEST_BYTES``); None if it
    is not."""
    if size <= MAX_REQUEST_BYTES:
        return None
    return (
        f"the request is {size:,} bytes; a request may be at most {MAX_REQUEST_BYTES:,} "
        "bytes (1 MiB)"
    )


ETCD_MAX_REQUEST_BYTES = 1536 * 1024
"""etcd's default ``--max-request-bytes``: a record written in one request must fit."""

MAX_NODE_ID_LENGTH = 64
"""A node ID named in a request (``node-`` and 32 hex digits are 37 characters)."""
MAX_LABELS = 128
"""Labels of one node."""
MAX_LABEL_LENGTH = 63
"""Characters of a label's key or value (Kubernetes' label value limit)."""
MAX_ROLE_LENGTH = 7 + 63
"""A role named in a request: ``custom:`` and a custom role name of at most 63 characters;
the built-in names are shorter."""
MAX_ROLE_CHANGES = 16
"""Changes of one UpdateNodeRoles request (``ctl roles`` sends one)."""
MAX_CUSTOM_ROLES = 32
"""Custom roles one node holds."""
MAX_ROLE_PARAMETERS = 16
"""Parameters of one custom role."""
MAX_ROLE_PARAMETER_KEY_LENGTH = 63
"""Characters of a parameter's key (at least one)."""
MAX_ROLE_PARAMETER_VALUE_LENGTH = 256
"""Characters of a parameter's value."""
MAX_HANDLED_CUSTOM_ROLES = 64
"""Custom role names a node reports as handled by its plugins."""
MAX_VERSION_LENGTH = 64
"""Characters of the version a node reports, its own or a plugin's; the node cuts a longer
one (a local version, ``0.1.dev7+g...``, can be long), as it cuts each of its plugins' texts:
the curator refuses the whole status for one field too long."""
MAX_INSTANCE_LENGTH = 64
"""Characters of a node process's instance ID (32 hex digits in roleserve)."""
MAX_PLUGINS = 32
"""Plugins a node reports in its status (the core's are 8); a node reports the first."""
MAX_PLUGIN_NAME_LENGTH = 64
"""Characters of a reported plugin's name."""
MAX_PLUGIN_STATE_LENGTH = MAX_PLUGIN_NAME_LENGTH
"""Characters of a reported plugin's state."""
MAX_PLUGIN_ERROR_LENGTH = 256
"""Characters of a reported plugin's error; the node cuts a longer one (its log and
``roleserve plugins`` on the node keep it whole)."""
MAX_PREFIXES = 64
"""Prefixes one node announces for its cluster networking."""
MAX_FILTER_ENTRIES = 10_000
"""Node IDs, or states, of a GetNodes filter."""
MAX_TICKET_BYTES = 1024
"""A register ticket (roleserve's are 32 bytes)."""
MAX_KEY_BYTES = 1024
"""A DER public key (a P-256 SubjectPublicKeyInfo is 91 bytes)."""
MAX_CREDENTIALS_NAME_LENGTH = 63
"""Characters of a user credentials' name (it is the certificate's CN)."""
MAX_CSR_BYTES = 16 * 1024
"""A DER certificate signing request (a P-256 one is a few hundred bytes)."""
MAX_DN_LENGTH = 1024
"""Characters of a runnable's DN in a NodeManagement request."""
MAX_VALUE_NAME_LENGTH = 256
"""Characters of a value's name in a NodeManagement request."""


def check_text(field: str, text: str, most: int) -> str:
    """``text``, if it has at most ``most`` characters.

    :raises RequestLimitError: naming ``field`` and the limit.
    """
    if len(text) > most:
        raise RequestLimitError(
            f"{field} is {len(text)} characters long; at most {most} are allowed"
        )
    return text


def check_bytes(field: str, data: bytes, most: int) -> bytes:
    """``data``, if it has at most ``most`` bytes.

    :raises RequestLimitError: naming ``field`` and the limit.
    """
    if len(data) > most:
        raise RequestLimitError(f"{field} is {len(data)} bytes long; at most {most} are allowed")
    return data


def check_count(field: str, entries: Sized, most: int) -> None:
    """Refuse more than ``most`` ``entries`` of a repeated field or map.

    :raises RequestLimitError: naming ``field`` and the limit.
    """
    if len(entries) > most:
        raise RequestLimitError(f"{field} has {len(entries)} entries; at most {most} are allowed")
