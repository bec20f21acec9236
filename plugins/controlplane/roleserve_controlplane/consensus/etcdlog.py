"""etcd's log lines as the node logs them: zap's JSON, its known-harmless warnings at DEBUG.

::

    etcd's stderr ──▶ parse_zap_json ──▶ (level, "msg key=value ...")
                                            │ WARNING, and msg in HARMLESS_ETCD_WARNINGS
                                            ▼
                                         DEBUG; everything else at its level

etcd warns of things that a working cluster does every day: one node.log held 21 lines
``rejecting member add request; local member has not been connected to all peers``, etcd
refusing a learner for a few seconds after each membership change, which
``Membership.add_learner`` retries until it is accepted. An operator reading the log for a
cause met those first. So the messages listed in ``HARMLESS_ETCD_WARNINGS`` go to DEBUG, as
etcd's info lines do; every other warning, and every error or panic, stays at its level, so
that a warning nobody has judged is never hidden.

The list is matched against etcd's message itself (zap's ``msg``), never its fields, and
only at WARNING: a message is listed only once it is known to come from normal operation,
with the reason beside it. Left out on purpose: warnings that may mean a real problem as
well as a passing one (``peer became inactive``: a member restarting, or one down for good;
``rejecting member promote request; not enough healthy members``: a quorum in danger).
"""

from __future__ import annotations

import json
import logging

from roleserve_core import parse_zap_json

__all__ = ["HARMLESS_ETCD_WARNINGS", "parse_etcd_log"]

HARMLESS_ETCD_WARNINGS: tuple[str, ...] = (
    # The leader refuses a membership change until it has been connected to every voter for
    # etcd's health interval (5 s), as after each member's start or change; the curator's
    # ``Membership.add_learner`` retries until the change is accepted, or says it gave up.
    "rejecting member add request; local member has not been connected to all peers, "
    "reconfigure breaks active quorum",
    # At each start: etcd's own authentication is off (its ``simple`` token is never used);
    # clients and peers are authenticated by the consensus CA's certificates instead.
    "simple token is not cryptographically signed",
)
"""etcd's messages (zap's ``msg``) that it logs at WARNING in normal operation: the node
logs them at DEBUG (see the module docstring)."""


def parse_etcd_log(line: str) -> tuple[int, str]:
    """One line of etcd's output → (level, message): ``parse_zap_json``'s, with the
    ``HARMLESS_ETCD_WARNINGS`` at DEBUG. A ``LineParser`` for the core's program runner."""
    level, message = parse_zap_json(line)
    if level == logging.WARNING and _zap_message(line) in HARMLESS_ETCD_WARNINGS:
        return logging.DEBUG, message
    return level, message


def _zap_message(line: str) -> str | None:
    """zap's ``msg`` in ``line`` (read again only for a warning: few lines are)."""
    try:
        entry = json.loads(line)
    except ValueError:
        return None
    message = entry.get("msg") if isinstance(entry, dict) else None
    return message if isinstance(message, str) else None
