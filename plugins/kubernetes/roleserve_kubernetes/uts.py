"""A host name of its own for a program: the node's kube-apiserver, in a UTS namespace.

Why. kube-apiserver names its identity Lease (``kube-system/apiserver-<hash>``, renewed
every 10 s) after ``os.Hostname()``, and has no flag for it. The controllers of a local
cluster share one machine, hence one host name: their apiservers took one Lease, each
overwriting the others' renewals, and every one logged ``"Failed to update lease" ...
the object has been modified`` at ERROR every 10 s, a needless write to etcd each time.
Turning the ``APIServerIdentity`` gate off would take away a GA feature; a host name per
apiserver keeps it. The Lease's ``kubernetes.io/hostname`` label then names the node.

How. The runner starts every program as ``setpriv --pdeathsig KILL -- BINARY ARGS``;
``with_hostname`` makes BINARY util-linux's ``unshare``::

    setpriv --pdeathsig KILL -- unshare --uts -- /bin/sh -c 'hostname "$0" && exec "$@"'
        NAME kube-apiserver ARGS...

Each step execs the next (``unshare`` without ``--fork``, the shell's ``exec``), so the
program keeps setpriv's pid and process group, and its death signal: nothing runs Python
between fork and exec (the node has gRPC threads). The namespace is the program's alone:
the node's own host name does not change. Nothing else the apiserver serves depends on
its host name: it advertises and serves on the node's address (``--advertise-address``,
a certificate with IP SANs), and the kubelet's node name is its own flag.

When. Making a UTS namespace takes ``CAP_SYS_ADMIN``: only a node running as root does it
(``own_hostname``); one that does not keeps the machine's host name, which on a cluster of
one node per machine is each apiserver's own anyway.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import replace

from roleserve_core import ProgramSpec

__all__ = ["SET_HOSTNAME", "own_hostname", "with_hostname"]

SET_HOSTNAME = 'hostname "$0" && exec "$@"'
"""The shell's script: ``$0`` the host name, ``$@`` the program and its arguments."""

_TOOLS = ("unshare", "hostname")


def own_hostname(node_id: str | None) -> str | None:
    """The host name the node's apiserver gets: ``node_id`` if this process may give it
    one (root, with util-linux ``unshare`` and ``hostname`` on ``PATH``); None: it keeps
    the machine's (the module docstring)."""
    if node_id is None or os.geteuid() != 0:
        return None
    if any(shutil.which(tool) is None for tool in _TOOLS):
        return None
    return node_id


def with_hostname(spec: ProgramSpec, hostname: str) -> ProgramSpec:
    """``spec``'s program started in a UTS namespace of its own named ``hostname``."""
    return replace(
        spec,
        executable="unshare",
        arguments=[
            "--uts",
            "--",
            "/bin/sh",
            "-c",
            SET_HOSTNAME,
            hostname,
            spec.executable,
            *spec.arguments,
        ],
    )
