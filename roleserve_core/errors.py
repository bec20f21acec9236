"""Every exception roleserve raises on purpose, in one tree.

Most are defined here; those that belong to one module's code are defined there, and the
tree names the module. A test keeps the tree whole: every exception class of the core is a
``RoleserveError`` named below.

::

    RoleserveError
    ├── FinalError                    restarting cannot fix this; the operator must act
    ├── ExpectedError                 a failure normal operation brings (a peer restarting)
    │   ├── ResourceError             the node lacks what only the operator can give (disk space)
    │   │   ├── AddressInUseError     a server's address is held by another process
    │   │   └── DiskFullError         a write met a full filesystem: names it (.files)
    │   ├── NoLeaderError             no curator named a leader in time (.connection)
    │   │   ├── LeaderRefusedError    nothing listens at any curator endpoint
    │   │   │   └── ForeignClusterError  the curators that answer are of another cluster
    │   │   └── NoQuorumError         the curators answer, but consensus has no quorum
    │   ├── LeaderUnresponsiveError   the leader stopped answering; the connection moves on
    │   └── StreamClosedError         the curator ended the heartbeat stream (.workers.heartbeat)
    ├── RefusedError                  a gRPC handler's deliberate refusal: status code + message
    ├── EventError
    │   ├── ConcurrentGetError        a second get() on one watcher while one is pending
    │   └── WatcherClosedError        get() on a closed watcher
    ├── ValueRegistryError
    │   ├── DuplicateValueKeyError    a key declared twice
    │   ├── UnknownValueKeyError      a key nobody declared
    │   └── NotValueOwnerError        set() by a plugin that does not own the key
    ├── SupervisorError
    │   ├── InvalidRunnableNameError  a name that is not ^[a-z0-9_]{1,64}$, or taken
    │   ├── InvalidSignalError        healthy twice, done before healthy, ...
    │   ├── ChildrenAfterHealthyError run()/run_group() after signal_healthy()
    │   ├── RunnableReturnedError     a runnable returned without signalling done
    │   ├── RunnableCancelledError    a runnable raised a cancellation nobody asked for
    │   ├── RunnableNotFoundError     no runnable with that DN
    │   └── RunnableImportError       a lazy runnable's module cannot be imported (also
    │                                 final) (.supervisor._lazy)
    ├── PluginError
    │   ├── PluginLoadError           a plugin failed to load (raised in strict mode)
    │   ├── PluginAPIVersionError     a plugin built for another plugin API version
    │   ├── EssentialPluginError      an essential built-in plugin was blocked
    │   ├── InvalidWorkerError        a Worker made in a way it cannot run (a lazy run
    │   │                             without doc=); also a ValueError
    │   └── MovedToMissingError       an old name moved to a plugin that is not installed;
    │                                 also an ImportError (._moved)
    ├── IdentityError                 a key or certificate that is not what it must be
    │   ├── CertificateVerificationError  a certificate fails verification (reason given)
    │   └── CredentialsError          saved credentials missing, corrupt or mismatched
    ├── RequestLimitError             a request field beyond its limit (.limits)
    ├── ProgramError                  a program could not start or stopped (.process)
    │   ├── ProgramNotFoundError      no executable binary (also final)
    │   ├── PortInUseError            an address it binds is held by a process not ours
    │   └── ProgramExitedError        it ended by itself (exit status, last error lines)
    ├── NodeSetupError                the node process cannot start as it was asked to
    │   ├── ConfigError               roleserve.toml or a command-line option is invalid
    │   │   └── InvalidTicketError    a register ticket that cannot be used (.enrolment.ticket)
    │   ├── DataDirectoryError        the data directory is in use, unreadable or corrupt
    │   │   └── SavedRolesError       the saved roles cannot be read; the node fetches them
    │   │                             again (.workers.rolefetch)
    │   ├── RuntimeDirectoryError     the node's runtime directory (its sockets) cannot be
    │   │                             made, or is another user's (.rundir)
    │   └── EnrolmentError            the enrolment does not fit, or was refused (also final)
    ├── LocalClusterError             a step of a local cluster failed (.localcluster.cluster)
    ├── NetnsError                    a --netns cluster's network cannot be made
    │                                 (.localcluster.netns)
    ├── NodeConfigError               a node's roleserve.toml that up cannot add a setting to
    │                                 (.localcluster.nodeconfig)
    ├── LocalNetworkError             a local cluster's network is another's, or none is
    │                                 free (.localcluster.clusternetwork)
    ├── UpLockError                   a cluster's directory that cannot hold up's lock
    │                                 (.localcluster.lock)
    ├── CtlError                      a ctl command's one-line failure, with its exit code
    │                                 (.cli.ctl._errors)
    └── NewPluginError                `plugin new` refuses its arguments or its directory
                                      (.cli.plugin_new)

Errors that describe a misuse of an API by a runnable (``InvalidSignalError`` and friends)
are raised inside that runnable, so they fail that runnable alone, with the DN in the status
and the log; nothing else stops.

Two marker classes tell the supervisor how to treat a runnable that raises (see
``roleserve_core.supervisor.classify_failure``, the one place that decides):

- ``FinalError``: restarting would fail the same way (a missing program, a downgrade the data
  refuses). The runnable stays DEAD, marked final, until the operator restarts it.
- ``ExpectedError``: the failure is part of normal operation (the leader restarting, a stream
  ended by a leader change); a restart after the backoff is the cure, and one WARNING line
  says so, without a traceback.
- ``ResourceError``, an ``ExpectedError``: the node lacks something only the operator can give
  (free disk space). Restarted after the backoff like any expected failure, so the node goes
  on by itself once the operator acted, but logged as one ERROR line that starts with
  ``WAITING_FOR_OPERATOR`` (``roleserve_core.supervisor``), which ``cluster up`` looks for.

Plugins mark their own errors by inheriting from them (multiple inheritance is fine, e.g.
``class EtcdNotFoundError(ConsensusError, FinalError)``).
"""

from __future__ import annotations

import errno
import os

# typing only for the annotations: the ``roleserve`` command imports this module at start,
# and importing ``typing`` costs it a tenth of the interpreter's start (benchmarks/cli.py).
TYPE_CHECKING = False
if TYPE_CHECKING:
    import grpc

__all__ = [
    "AddressInUseError",
    "CertificateVerificationError",
    "ChildrenAfterHealthyError",
    "ConcurrentGetError",
    "ConfigError",
    "CredentialsError",
    "DataDirectoryError",
    "DuplicateValueKeyError",
    "EnrolmentError",
    "EssentialPluginError",
    "EventError",
    "ExpectedError",
    "FinalError",
    "IdentityError",
    "InvalidRunnableNameError",
    "InvalidSignalError",
    "InvalidWorkerError",
    "NodeSetupError",
    "NotValueOwnerError",
    "PluginAPIVersionError",
    "PluginError",
    "PluginLoadError",
    "RefusedError",
    "RequestLimitError",
    "ResourceError",
    "RoleserveError",
    "RunnableCancelledError",
    "RunnableNotFoundError",
    "RunnableReturnedError",
    "RuntimeDirectoryError",
    "SupervisorError",
    "UnknownValueKeyError",
    "ValueRegistryError",
    "WatcherClosedError",
    "leaf_exceptions",
]


class RoleserveError(Exception):
    """Base of every error roleserve raises on purpose."""


class FinalError(RoleserveError):
    """Restarting cannot fix this; the operator must act.

    A runnable that raises one is not restarted: it stays DEAD, marked final in the status,
    with this message as its note, and one ERROR line (no traceback) in the log. The
    operator fixes the cause (installs the missing program, corrects the setting) and
    restarts it (``Supervisor.restart``, ``roleserve ctl restart NODE DN``). The message
    must say what is wrong and what to do, in one line.
    """


class ExpectedError(RoleserveError):
    """A failure that normal operation brings, which a restart after the backoff cures.

    For example the curator's leader restarting, or a stream ended by a leader change. The
    supervisor logs it as one WARNING line; the traceback is kept in the runnable's last
    error only, not in the log, because nobody needs it to understand what happened.
    """


class ResourceError(ExpectedError):
    """The node lacks something only the operator can give it, such as free disk space.

    Retried after the backoff rather than final: once the operator has acted, the node goes
    on by itself, with nothing lost. The message names what is missing, where, and what to
    do, in one line: it is the line ``cluster up`` shows when a node cannot start.
    """


class AddressInUseError(ResourceError, OSError):
    """A server of the node cannot listen: another process holds its address. One line
    naming the address (and the holder, when this node can see it) and what to do; retried
    (the supervisor's backoff), so the server starts by itself once the port is free.

    Also the ``OSError`` (``EADDRINUSE``) that a failed listen raised before, so code that
    caught that still catches it.
    """

    def __init__(self, message: str, address: str) -> None:
        super().__init__(message)
        self.address = address
        """The address, ``host:port``."""
        self.errno = errno.EADDRINUSE
        self.strerror = os.strerror(errno.EADDRINUSE)

    def __str__(self) -> str:
        """The one line (OSError's own would be ``[Errno 98] …``)."""
        return str(self.args[0])


class RefusedError(RoleserveError):
    """A gRPC handler's deliberate refusal: the status code and one-line message the client
    receives (the curator's and node management's handlers raise it; their wrappers turn it
    into the call's status). Anything else a handler raises is a bug, answered UNKNOWN."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class EventError(RoleserveError):
    """Misuse of an event value or watcher."""


class ConcurrentGetError(EventError):
    """``get()`` was called on a watcher that already has a pending ``get()``."""


class WatcherClosedError(EventError):
    """``get()`` on a watcher that is closed (or was closed while waiting)."""


class ValueRegistryError(RoleserveError):
    """Misuse of the node's value registry."""


class DuplicateValueKeyError(ValueRegistryError):
    """A value key was declared by two owners, or twice by one."""


class UnknownValueKeyError(ValueRegistryError, LookupError):
    """A value key that no plugin declared."""


class NotValueOwnerError(ValueRegistryError, PermissionError):
    """A plugin tried to set a value it does not own."""


class SupervisorError(RoleserveError):
    """Misuse of the supervisor by a runnable, or a request about a runnable."""


class InvalidRunnableNameError(SupervisorError, ValueError):
    """A runnable name that does not match ``^[a-z0-9_]{1,64}$``, or is already taken."""


class InvalidSignalError(SupervisorError):
    """A signal in the wrong state: healthy twice, done before healthy, done twice."""


class ChildrenAfterHealthyError(SupervisorError):
    """``run()``/``run_group()`` after the runnable signalled healthy."""


class RunnableReturnedError(SupervisorError):
    """A runnable returned without having signalled done; recorded as its failure."""


class RunnableCancelledError(SupervisorError):
    """A runnable raised a cancellation nobody asked for; recorded as its failure.

    The usual source is a gRPC call cancelled underneath its caller (grpc.aio raises
    ``asyncio.CancelledError`` for a call cancelled by its channel's close). Let through,
    it would look to the supervisor's task group like the cancellation of everything, and
    silently stop the whole tree.
    """


class RunnableNotFoundError(SupervisorError, LookupError):
    """No runnable has the requested DN."""


class PluginError(RoleserveError):
    """A plugin could not be loaded or used."""


class PluginLoadError(PluginError):
    """A plugin failed to load; raised only in strict mode, otherwise recorded."""


class PluginAPIVersionError(PluginError):
    """A plugin declares a plugin API version this roleserve-core does not accept."""


class EssentialPluginError(PluginError):
    """An essential built-in plugin was named in the block list."""


class InvalidWorkerError(PluginError, ValueError):
    """A plugin's ``Worker`` that cannot be run as it was made; the message says what to
    add (a ValueError too: what was raised before it had its own class)."""


class IdentityError(RoleserveError):
    """A key, certificate or credential that is not what it must be."""


class CertificateVerificationError(IdentityError):
    """A certificate failed verification; the message says which check."""


class CredentialsError(IdentityError):
    """Saved credentials are missing, corrupt, or do not belong together."""


class RequestLimitError(RoleserveError, ValueError):
    """A field of a request exceeds its limit (``roleserve_core.limits``); the message
    names the field and the limit. Servers answer INVALID_ARGUMENT with it."""


class NodeSetupError(RoleserveError):
    """The node process cannot start as it was asked to; the message says what to change."""


class ConfigError(NodeSetupError):
    """roleserve.toml or a command-line option is invalid."""


class DataDirectoryError(NodeSetupError):
    """The data directory is in use by another process, unreadable or corrupt."""


class RuntimeDirectoryError(NodeSetupError):
    """The node's runtime directory (``roleserve_core.rundir``), where its unix sockets
    live, cannot be made, or belongs to another user."""


class EnrolmentError(NodeSetupError, FinalError):
    """The enrolment asked for does not fit the data directory (or the plugins), or the
    cluster refused it for good; final: another attempt would be refused the same way."""


def leaf_exceptions(error: BaseException) -> list[BaseException]:
    """The exceptions ``error`` stands for: itself, or every exception inside its (nested)
    exception groups. A task group wraps what its tasks raised; the supervisor and the
    command line both judge a failure by what is inside."""
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in leaf_exceptions(inner)]
    return [error]
