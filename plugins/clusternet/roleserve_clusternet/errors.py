"""The plugin's errors, in one tree.

::

    RoleserveError (roleserve_core.errors)
    └── ClusternetError               a failure of the worker clusternet, told in one line
        ├── KeyFileError              (also FinalError) the private key file cannot be read,
        │                             written, or does not hold a key; names the file
        ├── InterfaceError            (also FinalError) the interface cannot be created:
        │                             no permission (not root, no CAP_NET_ADMIN, no TUN)
        ├── InterfaceInUseError       (also ExpectedError) an interface of that name exists,
        │                             held by another process (another node on the machine)
        ├── LinkError                 (also ExpectedError) an address, route, MTU or state
        │                             of the interface could not be set
        └── UapiError                 (also ExpectedError) the WireGuard UAPI socket refused
                                      a request, or could not be reached

``KeyFileError`` and ``InterfaceError`` are final: a restart reads the same corrupt file
and meets the same permissions; the operator acts (removes the file, runs the node as
root) and runs ``roleserve ctl restart``. A corrupt key is never replaced silently: the
node's public key is what every other node has for it, and a new one would cut it off the
mesh until the curator has it, while hiding that something overwrote the file.
``LinkError`` and ``UapiError`` are what a restart after the backoff cures (wireguard-go
restarting, a link flapping); so may ``InterfaceInUseError``, once the other holder
stops.
"""

from __future__ import annotations

from pathlib import Path

from roleserve_core import ExpectedError, FinalError, RoleserveError

__all__ = [
    "ClusternetError",
    "InterfaceError",
    "InterfaceInUseError",
    "KeyFileError",
    "LinkError",
    "UapiError",
]


class ClusternetError(RoleserveError):
    """Base of the plugin's errors."""


class KeyFileError(ClusternetError, FinalError):
    """The WireGuard private key file cannot be used.

    One line: ``the WireGuard key file /var/lib/.../private.key is corrupt (not 32 bytes of
    base64); remove it to make a new key (the node's public key changes)``.
    """

    def __init__(self, path: Path, problem: str) -> None:
        self.path = path
        super().__init__(f"the WireGuard key file {path} {problem}")


class InterfaceError(ClusternetError, FinalError):
    """The WireGuard interface cannot be created (a permission the node lacks)."""


class InterfaceInUseError(ClusternetError, ExpectedError):
    """An interface of the wanted name exists and is not one this node may replace."""


class LinkError(ClusternetError, ExpectedError):
    """An address, route, MTU or state of the interface could not be set."""


class UapiError(ClusternetError, ExpectedError):
    """The UAPI socket of the interface refused a request or could not be reached."""
