"""The plugin's errors, in one tree.

::

    ExpectedError (roleserve_core.errors)
    └── HostsfileError            a failure of the worker hostsfile, told in one line
        ├── FileUpdateError       a file it keeps (the hosts file, the machine ID file)
        │                         cannot be read or replaced; names the path and the reason
        ├── MalformedBlockError   the hosts file has a BEGIN line without an END line
        │                         (raised by the block's merge; said as a FileUpdateError)
        └── HostnameError         the hostname could not be set to the node ID

All of them are ``ExpectedError``: the worker goes DEAD with one WARNING line (no
traceback) and the supervisor restarts it after its backoff. Not ``FinalError``, on
purpose: what fixes them (a permission, a remount, a path in roleserve.toml and a node
restart) happens outside the node, and a retry at most a minute later picks it up without
the operator having to run ``roleserve ctl restart``.
"""

from __future__ import annotations

import errno
from pathlib import Path

from roleserve_core import ExpectedError

__all__ = ["FileUpdateError", "HostnameError", "HostsfileError", "MalformedBlockError"]


class HostsfileError(ExpectedError):
    """Base of the plugin's errors."""


class FileUpdateError(HostsfileError):
    """A file the worker keeps cannot be read or replaced.

    The message is one line: ``cannot write the hosts file /etc/hosts: Read-only file
    system``.
    """

    def __init__(self, what: str, path: Path, action: str, reason: str | OSError) -> None:
        self.what = what
        self.path = path
        self.action = action
        if isinstance(reason, OSError):
            reason = _reason(reason)
        self.reason = reason
        super().__init__(f"cannot {action} the {what} {path}: {reason}")


class MalformedBlockError(HostsfileError, ValueError):
    """The file holds a BEGIN line without an END line after it: replacing "the block"
    would take every line after it, which may be the operator's."""


class HostnameError(HostsfileError):
    """``sethostname`` refused the node ID."""


def _reason(error: OSError) -> str:
    """The system's words for ``error``, without the temporary file's name ``str()`` adds."""
    reason = error.strerror or str(error)
    if error.errno == errno.EBUSY:
        reason += " (a file mounted over, as in a container, cannot be replaced by a rename)"
    return reason
