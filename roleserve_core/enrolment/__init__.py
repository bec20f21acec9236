"""Enrolment: how a node becomes, and stays, a member of a cluster (``root.enrolment``).

::

    plan_enrolment(data dir, flags) ─▶ JoinPlan        join.py       saved credentials
                                    ├▶ BootstrapPlan   bootstrap.py  a new cluster
                                    └▶ RegisterPlan    register.py   ticket, approval, commit
    every path ends the same way: credentials saved (node/credentials), then
    node_credentials and node_id set, which starts the curator connection and the workers

The runnable signals healthy and done once the node is enrolled. A refusal that waiting
cannot cure (a wrong ticket, a decommissioned node, corrupt credentials) stops the node
with the reason, through ``stop``; anything else (no leader yet, a curator restarting)
fails the runnable, and the supervisor retries with backoff.
"""

from __future__ import annotations

from collections.abc import Callable

from roleserve_core.connection.curators import KnownCurators
from roleserve_core.datadir import NodeDataDirectory
from roleserve_core.enrolment.bootstrap import bootstrap
from roleserve_core.enrolment.join import join
from roleserve_core.enrolment.plan import (
    BootstrapPlan,
    EnrolmentPlan,
    EnrolmentRequest,
    JoinPlan,
    RegisterPlan,
    plan_enrolment,
)
from roleserve_core.enrolment.register import register
from roleserve_core.enrolment.ticket import (
    InvalidTicketError,
    RegisterTicket,
)
from roleserve_core.errors import CredentialsError, EnrolmentError
from roleserve_core.registry import PluginValues
from roleserve_core.supervisor import RunContext

__all__ = [
    "BootstrapPlan",
    "Enrolment",
    "EnrolmentPlan",
    "EnrolmentRequest",
    "InvalidTicketError",
    "JoinPlan",
    "RegisterPlan",
    "RegisterTicket",
    "plan_enrolment",
]


class Enrolment:
    """The runnable: carries out one ``EnrolmentPlan``.

    :param stop: called with the reason when the node cannot go on (see the module
        docstring); the node process stops then.
    """

    def __init__(
        self,
        plan: EnrolmentPlan,
        datadir: NodeDataDirectory,
        values: PluginValues,
        known: KnownCurators,
        stop: Callable[[str], None],
    ) -> None:
        self.plan = plan
        self.datadir = datadir
        self.values = values
        self.known = known
        self.stop = stop

    async def __call__(self, ctx: RunContext) -> None:
        try:
            await self._enrol(ctx)
        except EnrolmentError as exc:
            # A FinalError: the supervisor logs its one line and does not restart it.
            self.stop(str(exc))
            raise
        except CredentialsError as exc:
            ctx.log.error("%s", exc)
            self.stop(str(exc))
            raise
        ctx.set_note("")
        ctx.signal_healthy()
        ctx.signal_done()

    async def _enrol(self, ctx: RunContext) -> None:
        plan = self.plan
        if isinstance(plan, JoinPlan):
            await join(ctx, self.datadir, self.values)
        elif isinstance(plan, BootstrapPlan):
            await bootstrap(ctx, self.datadir, self.values, self.known, plan.owner_directory)
        else:
            await register(ctx, self.datadir, self.values, self.known, plan.pending)
