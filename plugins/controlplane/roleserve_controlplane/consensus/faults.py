"""A test hook: make a member, or the leader, fail at a named step of a bootstrap or join.

``ROLESERVE_TEST_FAULT=<step>`` in the node's environment makes the member, on reaching
``<step>``, SIGKILL its etcd (as a crash of the whole node would leave it) and raise
``InjectedFaultError``, so the runnable fails there and the supervisor restarts it. The hook
fires every time the step is reached while the variable is set: a test unsets it to let
the retry through. Unset (production), ``fault_point`` is one dictionary lookup.

Steps (``<mode>`` is ``bootstrap`` or ``join``):

- ``<mode>:started``: etcd was started, its data may be partial, nothing is recorded;
- ``<mode>:serving``: etcd serves as this member, the membership record is not written yet;
- ``<mode>:recorded``: the membership record is written (a joined member is still a
  learner until the leader promotes it);
- ``join:after-member-add``, in the leader's ``UpdateNodeRoles``: the learner was added to
  etcd, the node's role not yet written (the request fails; a retry reuses the learner).

A fault that is no crash of this process (ENOSPC while etcd creates its data) leaves the
same state as ``<mode>:started``; tests make that state directly.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from roleserve_controlplane.consensus.errors import ConsensusError
from roleserve_core.environment import TEST_FAULT_ENV

__all__ = ["FAULT_VARIABLE", "InjectedFaultError", "fault_point"]

FAULT_VARIABLE = TEST_FAULT_ENV
"""``ROLESERVE_TEST_FAULT``, declared with every variable in ``roleserve_core.environment``."""


class InjectedFaultError(ConsensusError):
    """A fault injected by ``ROLESERVE_TEST_FAULT`` (tests only)."""


def fault_point(step: str, crash: Callable[[], None] | None = None) -> None:
    """Fail here if ``ROLESERVE_TEST_FAULT`` names ``step``: ``crash()`` (SIGKILL etcd), if
    given, then raise ``InjectedFaultError``."""
    if os.environ.get(FAULT_VARIABLE) != step:
        return
    if crash is not None:
        crash()
    raise InjectedFaultError(f"fault injected at step {step} ({FAULT_VARIABLE})")
