"""Every environment variable roleserve reads, in one place.

Operators look here for what a variable does; the ``roleserve`` command names them in its
``--help``, so this module imports nothing (``--help`` must not wait for grpc or
cryptography to say which variable to set).
"""

from __future__ import annotations

__all__ = [
    "COMMAND_ENV",
    "CREDENTIALS_ENV",
    "DEBUG_ENV",
    "DISABLE_PLUGINS_ENV",
    "PLUGINS_ENV",
    "REGISTER_TICKET_ENV",
    "RUNTIME_DIR_ENV",
    "TEST_ETCD_ENV",
    "TEST_FAULT_ENV",
    "TRACE_HOOKS_ENV",
]

CREDENTIALS_ENV = "ROLESERVE_CREDENTIALS"
"""The access directory ``roleserve ctl`` uses when ``--credentials`` is not given."""

REGISTER_TICKET_ENV = "ROLESERVE_REGISTER_TICKET"
"""The register ticket ``roleserve node run`` reads when neither ``--register`` nor
``--register-file`` is given; removed from the node's environment once read."""

PLUGINS_ENV = "ROLESERVE_PLUGINS"
"""Comma-separated: load only these plugins (the built-in ``core`` always)."""

DISABLE_PLUGINS_ENV = "ROLESERVE_DISABLE_PLUGINS"
"""Comma-separated: do not load these plugins."""

TRACE_HOOKS_ENV = "ROLESERVE_TRACE_HOOKS"
"""Set to 1: log every hook call with its arguments and result."""

DEBUG_ENV = "ROLESERVE_DEBUG"
"""Set to 1 (``roleserve --debug`` does): refusals print their traceback too."""

COMMAND_ENV = "ROLESERVE_COMMAND"
"""How the person at the terminal runs ``roleserve`` (``./dev`` sets ``./dev roleserve``),
for the commands the hints suggest."""

RUNTIME_DIR_ENV = "XDG_RUNTIME_DIR"
"""For a node not run by root: its runtime directory (its unix sockets) goes under
``$XDG_RUNTIME_DIR/roleserve`` (``/tmp/roleserve-<uid>`` without it); root's nodes use
``/run/roleserve`` (``roleserve_core.rundir``)."""

TEST_ETCD_ENV = "ROLESERVE_TEST_ETCD"
"""Tests only: comma-separated, the etcd builds the controlplane plugin's tests run against
(``debian``, ``wheel``; both when unset). CI's run against the wheels sets ``debian``: the
workspace run before it covered both."""

TEST_FAULT_ENV = "ROLESERVE_TEST_FAULT"
"""Tests only: a named step of a consensus bootstrap or join at which the node fails, as a
crash there would (``roleserve_controlplane.consensus.faults``); never set in production."""
