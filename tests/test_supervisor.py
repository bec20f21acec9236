"""The supervisor: the cases of Monogon's supervisor_test.go and the rules of its docstring.

Every supervisor here runs on the fake clock with jitter-free backoff (``supervisor_runner``),
so a backoff lasts until the test advances the clock and its length is exact. Tests wait on
conditions only: a runnable's status (``wait_for_status``), the clock's sleepers, or every
task being blocked (``anyio.wait_all_tasks_blocked``), each under a timeout.

Most runnables are ``Switch`` instances: they count their runs and cancellations and fail
when the test says so. A runnable with no children that dies is reset to NEW (waiting out
its backoff) in the same step, so its DEAD state shows in the transitions an observer
records (``Transitions``), while its status shows the failure and the pending restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio
import pytest

from roleserve_core.errors import (
    ChildrenAfterHealthyError,
    InvalidRunnableNameError,
    InvalidSignalError,
    RunnableNotFoundError,
    RunnableReturnedError,
    SupervisorError,
)
from roleserve_core.supervisor import (
    BackoffPolicy,
    CrashLoopPolicy,
    RunContext,
    Runnable,
    RunnableError,
    RunnableStatus,
    State,
    Supervisor,
)
from roleserve_core.testing import (
    DEFAULT_TIMEOUT,
    FakeClock,
    SupervisorRunner,
    wait_for_state,
    wait_for_status,
)

pytestmark = pytest.mark.anyio

NEW, HEALTHY, DONE, DEAD, CANCELED = (
    State.NEW,
    State.HEALTHY,
    State.DONE,
    State.DEAD,
    State.CANCELED,
)

Start = Callable[..., Awaitable[Supervisor]]
Transition = tuple[State | None, State]


# -- runnables ------------------------------------------------------------------------------


async def serve(ctx: RunContext) -> None:
    """Signal healthy and run until cancelled."""
    ctx.signal_healthy()
    await anyio.sleep_forever()


class Switch:
    """A runnable the test drives: counts runs and cancellations, fails a run on demand.

    Each run starts ``groups`` (one ``run_group`` each), signals healthy, then waits until
    ``fail()`` makes it raise. With ``crash`` a run raises at once, before it starts
    anything; with ``finish`` it signals done and returns. With ``linger`` a run holds on,
    shielded from cancellation, until ``release()`` before it ends (after being cancelled,
    or before returning with ``finish``), so its subtree does not drain.

    Create it inside the test: its events need the running event loop.
    """

    def __init__(
        self,
        *groups: Mapping[str, Runnable],
        crash: bool = False,
        finish: bool = False,
        linger: bool = False,
    ) -> None:
        self.groups = groups
        self.crash = crash
        self.finish = finish
        self.linger = linger
        self.runs = 0
        self.cancellations = 0
        self.contexts: list[RunContext] = []
        self._failed = anyio.Event()
        self._released = anyio.Event()

    def fail(self) -> None:
        """Make the current run raise."""
        self._failed.set()

    def release(self) -> None:
        """Let a lingering run (and every later one) end."""
        self._released.set()

    async def _hold_on(self) -> None:
        if self.linger:
            with anyio.CancelScope(shield=True):
                await self._released.wait()

    async def __call__(self, ctx: RunContext) -> None:
        self.runs += 1
        self.contexts.append(ctx)
        if self.crash:
            raise RuntimeError(f"{ctx.dn} crashed")
        for group in self.groups:
            ctx.run_group(group)
        ctx.signal_healthy()
        if self.finish:
            ctx.signal_done()
            await self._hold_on()
            return
        failed = self._failed = anyio.Event()
        try:
            await failed.wait()
        except anyio.get_cancelled_exc_class():
            self.cancellations += 1
            await self._hold_on()
            raise
        raise RuntimeError(f"{ctx.dn} failed on purpose")


def chain(depth: int) -> list[Switch]:
    """``depth`` switches, top first, each the only child (named ``level``) of the one before."""
    switches = [Switch()]
    for _ in range(depth - 1):
        switches.insert(0, Switch({"level": switches[0]}))
    return switches


def chain_dns(top: str, depth: int) -> list[str]:
    """The DNs of a ``chain(depth)`` started as ``top``, top first."""
    return [top + ".level" * level for level in range(depth)]


def spawn(*names: str) -> Runnable:
    """A runnable that starts one ``serve`` child per name, then signals healthy."""

    async def run(ctx: RunContext) -> None:
        for name in names:
            ctx.run(name, serve)
        ctx.signal_healthy()
        await anyio.sleep_forever()

    return run


async def children_after_healthy(ctx: RunContext) -> None:
    ctx.signal_healthy()
    ctx.run("late", serve)


async def healthy_twice(ctx: RunContext) -> None:
    ctx.signal_healthy()
    ctx.signal_healthy()


async def done_before_healthy(ctx: RunContext) -> None:
    ctx.signal_done()


async def done_twice(ctx: RunContext) -> None:
    ctx.signal_healthy()
    ctx.signal_done()
    ctx.signal_done()


async def returns_when_new(ctx: RunContext) -> None:
    return


async def returns_when_healthy(ctx: RunContext) -> None:
    ctx.signal_healthy()


class BoomError(Exception):
    """An exception type the supervisor knows nothing about."""


async def raises_key_error(ctx: RunContext) -> None:
    ctx.signal_healthy()
    settings: dict[str, str] = {}
    settings["missing"]


async def raises_boom(ctx: RunContext) -> None:
    raise BoomError("kaboom")


async def fails_in_task_group(ctx: RunContext) -> None:
    async def disk_full() -> None:
        raise OSError("disk full")

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(disk_full)
        ctx.signal_healthy()
        await anyio.sleep_forever()


def stubborn(runs: list[RunContext]) -> Runnable:
    """A runnable that swallows its cancellation and returns (appending each run's ctx)."""

    async def run(ctx: RunContext) -> None:
        runs.append(ctx)
        ctx.signal_healthy()
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            return  # swallowed on purpose: the supervisor must still stop and not restart it

    return run


def spawns_when_cancelled(runs: list[RunContext]) -> Runnable:
    """A runnable that, while being cancelled, starts a child (still allowed: it is NEW)."""

    async def run(ctx: RunContext) -> None:
        runs.append(ctx)
        try:
            await anyio.sleep_forever()
        finally:
            ctx.run("late", serve)

    return run


# -- observation ----------------------------------------------------------------------------


class Transitions:
    """A state observer that records every ``(dn, old, new)`` call, in order."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, State | None, State]] = []

    def __call__(self, dn: str, old: State | None, new: State) -> None:
        self.seen.append((dn, old, new))

    def of(self, dn: str) -> list[Transition]:
        """The ``(old, new)`` pairs of one DN."""
        return [(old, new) for seen, old, new in self.seen if seen == dn]


@pytest.fixture
def transitions() -> Transitions:
    return Transitions()


@pytest.fixture
def start(supervisor_runner: SupervisorRunner, transitions: Transitions) -> Start:
    """``await start(root, **options)``: a running supervisor that reports to ``transitions``."""

    async def start(root: Runnable, **options: Any) -> Supervisor:
        options.setdefault("observers", [transitions])
        return await supervisor_runner.start(root, **options)

    return start


def states(supervisor: Supervisor) -> dict[str, State]:
    """The whole tree: DN → state."""
    return {status.dn: status.state for status in supervisor.status()}


async def wait_restarted(
    supervisor: Supervisor, dn: str, restarts: int = 1, state: State = HEALTHY
) -> RunnableStatus:
    """Wait until ``dn`` was restarted ``restarts`` times and is in ``state``."""
    return await wait_for_status(
        supervisor, dn, lambda status: status.restarts == restarts and status.state is state
    )


async def wait_backing_off(supervisor: Supervisor, dn: str, failures: int = 1) -> RunnableStatus:
    """Wait until ``dn`` died ``failures`` times and now waits out its backoff.

    By then its subtree has stopped: a dead runnable restarts only once it has drained.
    """
    return await wait_for_status(
        supervisor, dn, lambda status: status.failures == failures and status.restart_in is not None
    )


async def wait_failed(supervisor: Supervisor, dn: str, failures: int = 1) -> RunnableError:
    """Wait until ``dn`` died ``failures`` times; return its last error."""
    status = await wait_for_status(supervisor, dn, lambda status: status.failures == failures)
    assert status.last_error is not None
    return status.last_error


def died(transitions: Transitions, dn: str) -> bool:
    """Whether the observer saw ``dn`` become DEAD."""
    return any(new is DEAD for _, new in transitions.of(dn))


def qualified(exc_type: type[BaseException]) -> str:
    """How ``RunnableError.type`` names an exception type."""
    return f"{exc_type.__module__}.{exc_type.__qualname__}".removeprefix("builtins.")


# -- Monogon's supervisor_test.go -----------------------------------------------------------


async def test_simple_group_becomes_healthy(start: Start) -> None:
    """TestSimple: both members of a group start and become healthy."""
    one, two = Switch(), Switch()
    root = Switch({"one": one, "two": two})
    supervisor = await start(root)

    await wait_for_state(supervisor, "root.one")
    await wait_for_state(supervisor, "root.two")

    assert states(supervisor) == {"root": HEALTHY, "root.one": HEALTHY, "root.two": HEALTHY}
    assert (root.runs, one.runs, two.runs) == (1, 1, 1)


async def test_simple_failure_restarts_sibling_at_once_and_dead_after_backoff(
    start: Start, fake_clock: FakeClock, transitions: Transitions
) -> None:
    """TestSimpleFailure: when two dies, one is cancelled and restarted at once; two waits."""
    one, two = Switch(), Switch()
    supervisor = await start(Switch({"one": one, "two": two}))
    await wait_for_state(supervisor, "root.one")
    await wait_for_state(supervisor, "root.two")

    two.fail()

    restarted = await wait_restarted(supervisor, "root.one")
    assert (restarted.failures, one.runs, one.cancellations) == (0, 2, 1)
    waiting = supervisor.status_of("root.two")
    assert (waiting.state, waiting.failures, waiting.restart_in) == (NEW, 1, 0.5)
    assert transitions.of("root.one")[-3:] == [(HEALTHY, CANCELED), (CANCELED, NEW), (NEW, HEALTHY)]

    fake_clock.advance(0.5)
    await wait_restarted(supervisor, "root.two")
    assert (two.runs, one.runs) == (2, 2)  # two's restart does not touch one again


async def test_deep_failure_restarts_whole_subtree(start: Start) -> None:
    """TestDeepFailure: a group sibling's 5-level subtree is cancelled and restarted."""
    deep = chain(5)
    trigger = Switch()
    supervisor = await start(Switch({"one": deep[0], "two": trigger}))
    dns = chain_dns("root.one", 5)
    await wait_for_state(supervisor, dns[-1])

    trigger.fail()

    await wait_restarted(supervisor, "root.one")
    for dn in dns[1:]:  # fresh nodes: their parent's new run started them
        await wait_for_status(supervisor, dn, lambda s: s.state is HEALTHY and s.restarts == 0)
    assert [(switch.runs, switch.cancellations) for switch in deep] == [(2, 1)] * 5


@pytest.mark.parametrize(
    ("runnable", "error_type", "message"),
    [(raises_key_error, KeyError, "'missing'"), (raises_boom, BoomError, "kaboom")],
    ids=["builtin", "custom"],
)
async def test_unexpected_exception_is_failure_with_type_message_traceback(
    start: Start,
    transitions: Transitions,
    runnable: Runnable,
    error_type: type[Exception],
    message: str,
) -> None:
    """TestPanic: any exception type is a failure; the sibling restarts; the record is full."""
    one = Switch()
    supervisor = await start(Switch({"one": one, "two": runnable}))

    error = await wait_failed(supervisor, "root.two")

    assert (error.type, error.message) == (qualified(error_type), message)
    assert error.summary() == f"{qualified(error_type)}: {message}"
    assert "Traceback (most recent call last)" in error.traceback
    assert runnable.__name__ in error.traceback  # the frame that raised
    assert f"{error_type.__name__}: {message}" in error.traceback
    assert died(transitions, "root.two")
    await wait_restarted(supervisor, "root.one")


async def test_multiple_level_failures_all_recover(start: Start, fake_clock: FakeClock) -> None:
    """TestMultipleLevelFailure: two 4-level trees fail at different levels and recover.

    A middle node's failure restarts it and what is below it; a leaf's failure only the leaf.
    """
    left, right = chain(4), chain(4)
    supervisor = await start(Switch({"left": left[0]}, {"right": right[0]}))
    dns = chain_dns("root.left", 4) + chain_dns("root.right", 4)
    for dn in dns:
        await wait_for_state(supervisor, dn)

    left[1].fail()
    right[3].fail()
    await fake_clock.wait_sleepers(2)  # both dead nodes wait out their backoff
    fake_clock.advance(0.5)

    await wait_restarted(supervisor, dns[1])
    await wait_restarted(supervisor, dns[7])
    for dn in dns:
        await wait_for_state(supervisor, dn)
    assert [switch.runs for switch in left] == [1, 2, 2, 2]
    assert [switch.runs for switch in right] == [1, 1, 1, 2]
    assert set(states(supervisor).values()) == {HEALTHY}


async def test_backoff_grows_with_quick_failures_and_resets_on_healthy(
    start: Start, fake_clock: FakeClock
) -> None:
    """TestBackoff: 0.5 s × 1.5 per failure; a healthy signal resets it; the clock gates it."""
    flaky = Switch(crash=True)
    supervisor = await start(Switch({"flaky": flaky}))

    delays: list[float] = []
    for failures in range(1, 6):
        await wait_failed(supervisor, "root.flaky", failures)
        await fake_clock.wait_sleepers(1)
        restart_in = supervisor.status_of("root.flaky").restart_in
        deadline = fake_clock.next_deadline()
        assert restart_in is not None
        assert deadline is not None
        assert deadline - fake_clock.now() == restart_in
        delays.append(restart_in)
        if failures < 5:
            fake_clock.advance(restart_in)

    assert delays == [0.5 * 1.5**n for n in range(5)]
    assert delays[4] >= 1.0

    # The fifth restart does not happen before its delay has passed on the clock.
    flaky.crash = False
    fake_clock.advance(delays[4] - 0.5)
    await anyio.wait_all_tasks_blocked()
    assert (flaky.runs, fake_clock.sleepers()) == (5, 1)
    fake_clock.advance(0.5)
    await wait_restarted(supervisor, "root.flaky", restarts=5)
    assert flaky.runs == 6

    # Healthy reset the backoff: the next failure waits the initial 0.5 s again.
    flaky.fail()
    await wait_failed(supervisor, "root.flaky", 6)
    assert supervisor.status_of("root.flaky").restart_in == 0.5


async def test_failed_parent_abandons_childs_pending_restart(
    start: Start, fake_clock: FakeClock
) -> None:
    """TestCancelRestart: inner waits out its backoff, outer fails, outer restarts alone."""
    inner = Switch()
    outer = Switch({"inner": inner})
    supervisor = await start(Switch({"outer": outer}))
    await wait_for_state(supervisor, "root.outer.inner")

    inner.fail()
    await wait_failed(supervisor, "root.outer.inner")
    await fake_clock.wait_sleepers(1)
    outer.fail()

    waiting = await wait_for_status(supervisor, "root.outer", lambda s: s.restart_in is not None)
    assert (waiting.state, waiting.failures, waiting.restart_in) == (NEW, 1, 0.5)
    assert [status.dn for status in supervisor.status("root.outer")] == ["root.outer"]
    await fake_clock.wait_sleepers(1)
    assert fake_clock.sleepers() == 1  # only outer's backoff; inner's restart was abandoned
    assert fake_clock.next_deadline() == fake_clock.now() + 0.5

    fake_clock.advance(0.25)
    await anyio.wait_all_tasks_blocked()
    assert (outer.runs, inner.runs) == (1, 1)

    fake_clock.advance(0.25)
    await wait_restarted(supervisor, "root.outer")
    fresh = await wait_for_state(supervisor, "root.outer.inner")
    assert (fresh.restarts, fresh.failures) == (0, 0)
    assert (outer.runs, inner.runs) == (2, 2)


async def test_done_but_not_returned_node_restarts_only_after_it_returns(
    start: Start, fake_clock: FakeClock
) -> None:
    """TestDoneDelay: a node that signalled done keeps its parent's restart until it returns."""
    child = Switch(finish=True, linger=True)
    parent = Switch({"child": child})
    supervisor = await start(Switch({"parent": parent}))
    await wait_for_state(supervisor, "root.parent.child")
    assert child.contexts[0].done

    parent.fail()
    await wait_for_state(supervisor, "root.parent", DEAD)
    await anyio.wait_all_tasks_blocked()
    assert states(supervisor) == {
        "root": HEALTHY,
        "root.parent": DEAD,
        "root.parent.child": HEALTHY,
    }
    assert fake_clock.sleepers() == 0  # no backoff started while the child has not returned

    child.release()
    waiting = await wait_for_status(supervisor, "root.parent", lambda s: s.restart_in == 0.5)
    assert waiting.state is NEW
    fake_clock.advance(0.5)
    await wait_restarted(supervisor, "root.parent")
    await wait_for_state(supervisor, "root.parent.child", DONE)
    assert child.runs == 2


async def test_done_node_whose_group_sibling_dies_is_restarted(
    start: Start, fake_clock: FakeClock
) -> None:
    """TestCancelDoneSibling: the DONE node's child is cancelled, then both run again."""
    child = Switch()
    finisher = Switch({"child": child}, finish=True)
    sibling = Switch()
    supervisor = await start(Switch({"finisher": finisher, "sibling": sibling}))
    await wait_for_state(supervisor, "root.finisher", DONE)
    await wait_for_state(supervisor, "root.finisher.child")
    await wait_for_state(supervisor, "root.sibling")

    sibling.fail()

    await wait_restarted(supervisor, "root.finisher", state=DONE)
    await wait_for_state(supervisor, "root.finisher.child")
    assert (finisher.runs, child.runs, child.cancellations) == (2, 2, 1)
    assert supervisor.status_of("root.sibling").restart_in == 0.5


def signals_through_first_context() -> Runnable:
    """Fails its first run, then signals through that run's (stale) context."""
    contexts: list[RunContext] = []

    async def run(ctx: RunContext) -> None:
        contexts.append(ctx)
        if len(contexts) == 1:
            raise RuntimeError("first run fails")
        contexts[0].signal_healthy()

    return run


async def test_misbehaving_runnables_leave_a_healthy_one_alone(
    start: Start, fake_clock: FakeClock
) -> None:
    """TestResilience: misusing runnables fail over and over, alone.

    Alongside them, a healthy runnable restarts only when its group sibling fails, five
    rounds. (Monogon's busy loop has no equivalent: a cooperative scheduler cannot survive
    a task that never yields.)
    """
    healthy, panicky = Switch(), Switch()
    misbehaving: dict[str, tuple[Runnable, type[Exception]]] = {
        "stale": (signals_through_first_context(), SupervisorError),
        "early_done": (done_before_healthy, InvalidSignalError),
        "late_child": (children_after_healthy, ChildrenAfterHealthyError),
    }
    root = Switch(
        {"healthy": healthy, "panicky": panicky},
        *({name: runnable} for name, (runnable, _) in misbehaving.items()),
    )
    supervisor = await start(root)

    for rounds in range(1, 6):
        await wait_restarted(supervisor, "root.panicky", restarts=rounds - 1)
        panicky.fail()
        await wait_restarted(supervisor, "root.healthy", restarts=rounds)
        await fake_clock.wait_sleepers(1 + len(misbehaving))  # all pending restarts
        fake_clock.advance(60)

    for name, (_, error_type) in misbehaving.items():
        error = await wait_failed(supervisor, f"root.{name}", failures=6)
        assert error.type == qualified(error_type)
    assert (healthy.runs, healthy.cancellations, root.runs) == (6, 5, 1)
    assert supervisor.status_of("root.healthy").failures == 0


async def test_observer_sees_every_transition(
    start: Start, fake_clock: FakeClock, transitions: Transitions
) -> None:
    """TestMetrics: (dn, old, new) for NEW, HEALTHY, DEAD, CANCELED and DONE, per DN.

    It also shows a DONE node's child running on, and a restarted parent's child being a
    new runnable (its first transition has no old state).
    """
    child = Switch()
    one = Switch({"child": child}, finish=True)
    two = Switch()
    supervisor = await start(Switch({"one": one, "two": two}))
    await wait_for_state(supervisor, "root.one", DONE)
    await wait_for_state(supervisor, "root.one.child")
    await wait_for_state(supervisor, "root.two")

    two.fail()
    await wait_restarted(supervisor, "root.one", state=DONE)
    await fake_clock.wait_sleepers(1)
    fake_clock.advance(0.5)
    await wait_restarted(supervisor, "root.two")
    await wait_for_state(supervisor, "root.one.child")

    assert transitions.of("root") == [(None, NEW), (NEW, HEALTHY)]
    assert transitions.of("root.two") == [
        (None, NEW),
        (NEW, HEALTHY),
        (HEALTHY, DEAD),
        (DEAD, NEW),
        (NEW, HEALTHY),
    ]
    assert transitions.of("root.one") == [
        (None, NEW),
        (NEW, HEALTHY),
        (HEALTHY, DONE),
        (DONE, NEW),
        (NEW, HEALTHY),
        (HEALTHY, DONE),
    ]
    assert transitions.of("root.one.child") == [
        (None, NEW),
        (NEW, HEALTHY),
        (HEALTHY, CANCELED),
        (None, NEW),
        (NEW, HEALTHY),
    ]


async def test_observer_added_later_sees_later_transitions(start: Start) -> None:
    late = Transitions()
    worker = Switch()
    supervisor = await start(Switch({"worker": worker}), observers=[])
    await wait_for_state(supervisor, "root.worker")

    supervisor.add_observer(late)
    supervisor.restart("root.worker")
    await wait_restarted(supervisor, "root.worker")

    assert late.of("root.worker") == [(HEALTHY, CANCELED), (CANCELED, NEW), (NEW, HEALTHY)]
    assert late.of("root") == []


async def test_child_logger_records_land_under_its_dn(start: Start) -> None:
    """TestSubLoggers: ``ctx.log.getChild`` logs at ``<dn>.<name>`` in the same log tree."""

    async def uses_child_logger(ctx: RunContext) -> None:
        ctx.log.getChild("dut").info("from the sub-logger")
        ctx.signal_healthy()
        await anyio.sleep_forever()

    supervisor = await start(Switch({"foo": uses_child_logger}))
    await wait_for_state(supervisor, "root.foo")

    entries = supervisor.logtree.entries("root.foo", subtree=True)
    assert [(e.dn, e.message) for e in entries] == [("root.foo.dut", "from the sub-logger")]


# -- the docstring's rules: failure, cancellation, restart -----------------------------------


async def test_failure_cancels_subtree_and_group_but_not_other_groups_or_parent(
    start: Start, fake_clock: FakeClock
) -> None:
    """A death cancels its subtree and group siblings; other groups and the parent run on."""
    below = Switch()
    dying, sibling, other = Switch({"below": below}), Switch(), Switch()
    root = Switch({"dying": dying, "sibling": sibling}, {"other": other})
    supervisor = await start(root)
    for dn in ("root.dying.below", "root.sibling", "root.other"):
        await wait_for_state(supervisor, dn)

    dying.fail()

    await wait_restarted(supervisor, "root.sibling")
    await wait_backing_off(supervisor, "root.dying")
    await anyio.wait_all_tasks_blocked()
    switches = {"root": root, "dying": dying, "below": below, "sibling": sibling, "other": other}
    assert {name: (s.runs, s.cancellations) for name, s in switches.items()} == {
        "root": (1, 0),
        "dying": (1, 0),
        "below": (1, 1),
        "sibling": (2, 1),
        "other": (1, 0),
    }
    assert states(supervisor) == {
        "root": HEALTHY,
        "root.dying": NEW,  # waiting out its backoff, without children
        "root.sibling": HEALTHY,
        "root.other": HEALTHY,
    }
    summary = {s.dn: (s.restarts, s.failures, s.restart_in) for s in supervisor.status()}
    assert summary == {
        "root": (0, 0, None),
        "root.dying": (1, 1, 0.5),
        "root.sibling": (1, 0, None),
        "root.other": (0, 0, None),
    }


async def test_each_cancelled_node_restarts_once_its_own_subtree_drained(
    start: Start, fake_clock: FakeClock
) -> None:
    """A cancelled node whose subtree is still stopping waits for it, and no longer."""
    dying_child, sibling_child = Switch(linger=True), Switch(linger=True)
    dying, sibling = Switch({"child": dying_child}), Switch({"child": sibling_child})
    supervisor = await start(Switch({"dying": dying, "sibling": sibling}))
    await wait_for_state(supervisor, "root.dying.child")
    await wait_for_state(supervisor, "root.sibling.child")

    dying.fail()
    await wait_for_state(supervisor, "root.dying", DEAD)
    await wait_for_state(supervisor, "root.sibling", CANCELED)
    await anyio.wait_all_tasks_blocked()
    assert states(supervisor) == {
        "root": HEALTHY,
        "root.dying": DEAD,
        "root.dying.child": HEALTHY,  # cancelled, still running
        "root.sibling": CANCELED,
        "root.sibling.child": HEALTHY,
    }
    assert fake_clock.sleepers() == 0

    sibling_child.release()
    await wait_restarted(supervisor, "root.sibling")
    await wait_for_state(supervisor, "root.sibling.child")
    assert supervisor.status_of("root.dying").state is DEAD

    dying_child.release()
    waiting = await wait_for_status(supervisor, "root.dying", lambda s: s.restart_in == 0.5)
    assert (waiting.state, dying.runs) == (NEW, 1)
    fake_clock.advance(0.5)
    await wait_restarted(supervisor, "root.dying")
    await wait_for_state(supervisor, "root.dying.child")


async def test_done_leaves_children_running_and_supervised(
    start: Start, fake_clock: FakeClock
) -> None:
    """signal_done() then return: DONE; the children run on, and restart on their own."""
    child = Switch()
    finisher = Switch({"child": child}, finish=True)
    supervisor = await start(Switch({"finisher": finisher}))
    await wait_for_state(supervisor, "root.finisher", DONE)
    await wait_for_state(supervisor, "root.finisher.child")
    await anyio.wait_all_tasks_blocked()

    assert states(supervisor) == {
        "root": HEALTHY,
        "root.finisher": DONE,
        "root.finisher.child": HEALTHY,
    }
    assert child.cancellations == 0
    assert finisher.contexts[0].done

    child.fail()
    await wait_failed(supervisor, "root.finisher.child")
    fake_clock.advance(0.5)
    await wait_restarted(supervisor, "root.finisher.child")
    done = supervisor.status_of("root.finisher")
    assert (done.state, done.restarts, finisher.runs) == (DONE, 0, 1)


@pytest.mark.parametrize(
    ("runnable", "error_type", "fragment"),
    [
        (spawn("oneSibling"), InvalidRunnableNameError, "'oneSibling'"),
        (spawn("a.b"), InvalidRunnableNameError, "'a.b'"),
        (spawn(""), InvalidRunnableNameError, "''"),
        (spawn("x" * 65), InvalidRunnableNameError, "x" * 65),
        (spawn("console-/dev/tty0"), InvalidRunnableNameError, "'console-/dev/tty0'"),
        (spawn("dup", "dup"), InvalidRunnableNameError, "'dup' exists"),
        (children_after_healthy, ChildrenAfterHealthyError, "before signal_healthy()"),
        (healthy_twice, InvalidSignalError, "signal_healthy() in state HEALTHY"),
        (done_before_healthy, InvalidSignalError, "signal_done() in state NEW"),
        (done_twice, InvalidSignalError, "after signal_done()"),
        (returns_when_new, RunnableReturnedError, "without signalling done (state NEW)"),
        (returns_when_healthy, RunnableReturnedError, "without signalling done (state HEALTHY)"),
    ],
    ids=[
        "camel-case-name",
        "dotted-name",
        "empty-name",
        "65-char-name",
        "path-name",
        "duplicate-name",
        "children-after-healthy",
        "healthy-twice",
        "done-before-healthy",
        "done-twice",
        "return-when-new",
        "return-when-healthy",
    ],
)
async def test_misuse_fails_that_runnable_alone(
    start: Start,
    transitions: Transitions,
    runnable: Runnable,
    error_type: type[Exception],
    fragment: str,
) -> None:
    """Bad input raises inside the runnable: it is DEAD with the error naming its DN."""
    bystander = Switch()
    root = Switch({"bystander": bystander}, {"bad": runnable})
    supervisor = await start(root)

    status = await wait_backing_off(supervisor, "root.bad")
    error = status.last_error

    assert error is not None
    assert error.type == qualified(error_type)
    assert error.message.startswith("root.bad: ")
    assert fragment in error.message
    assert error_type.__name__ in error.traceback
    assert died(transitions, "root.bad")
    assert [s.dn for s in supervisor.status("root.bad")] == ["root.bad"]  # nothing left over
    await anyio.wait_all_tasks_blocked()
    assert (root.runs, root.cancellations, bystander.runs, bystander.cancellations) == (1, 0, 1, 0)
    assert states(supervisor)["root.bystander"] is HEALTHY


@pytest.mark.parametrize("name", ["a", "0", "a_1", "x" * 64])
async def test_valid_names_are_accepted(start: Start, name: str) -> None:
    supervisor = await start(spawn(name))
    await wait_for_state(supervisor, f"root.{name}")


async def test_rejected_group_starts_none_of_its_members(start: Start) -> None:
    """A group with one bad name is refused whole; a runnable may catch that and go on."""
    refused: list[InvalidRunnableNameError] = []

    async def tries_a_bad_group(ctx: RunContext) -> None:
        try:
            ctx.run_group({"good": serve, "Bad": serve})
        except InvalidRunnableNameError as error:
            refused.append(error)
        ctx.run("after", serve)
        ctx.signal_healthy()
        await anyio.sleep_forever()

    supervisor = await start(tries_a_bad_group)
    await wait_for_state(supervisor, "root.after")
    await anyio.wait_all_tasks_blocked()

    assert len(refused) == 1
    assert states(supervisor) == {"root": HEALTHY, "root.after": HEALTHY}


async def test_task_group_failure_is_summarised_by_its_sole_cause(start: Start) -> None:
    supervisor = await start(Switch({"worker": fails_in_task_group}))

    error = await wait_failed(supervisor, "root.worker")

    assert (error.type, error.message) == ("OSError", "disk full")
    assert "ExceptionGroup" in error.traceback  # the traceback keeps the whole group
    assert "disk_full" in error.traceback


async def cancelled_by_a_grpc_call(ctx: RunContext) -> None:
    """As a call cancelled under its caller raises (grpc.aio: asyncio.CancelledError)."""
    raise asyncio.CancelledError


async def cancelled_in_a_task_group(ctx: RunContext) -> None:
    raise BaseExceptionGroup("unhandled", [asyncio.CancelledError()])


@pytest.mark.parametrize("runnable", [cancelled_by_a_grpc_call, cancelled_in_a_task_group])
async def test_a_cancellation_nobody_asked_for_fails_that_runnable_alone(
    start: Start, transitions: Transitions, runnable: Runnable
) -> None:
    """Let through, it would cancel the supervisor's task group: the whole tree would end
    with no error at all, as a node once did when a gRPC call was cancelled under it."""
    one = Switch()
    supervisor = await start(Switch({"one": one, "stray": runnable}))

    error = await wait_failed(supervisor, "root.stray")

    assert error.type == "roleserve_core.errors.RunnableCancelledError"
    assert error.message == (
        "root.stray: raised a cancellation nobody asked for (a gRPC call cancelled under it?)"
    )
    assert runnable.__name__ in error.traceback
    assert died(transitions, "root.stray")
    await wait_restarted(supervisor, "root.one")
    assert supervisor.status_of("root").state is HEALTHY


def cancelled_into_a_grpc_error(runs: list[RunContext], *, grouped: bool) -> Runnable:
    """A runnable whose cancellation a library turns into a CancelledError of its own, as a
    gRPC call cancelled under a restarting worker does (anyio's scope lets it through)."""

    async def run(ctx: RunContext) -> None:
        runs.append(ctx)
        ctx.signal_healthy()
        with contextlib.suppress(anyio.get_cancelled_exc_class()):
            await anyio.sleep_forever()
        # A fresh one, with no context leading back to anyio's: what grpc.aio raises when
        # the call is cancelled from its own side.
        if grouped:
            raise BaseExceptionGroup("unhandled", [asyncio.CancelledError()])
        raise asyncio.CancelledError

    return run


@pytest.mark.parametrize("grouped", [False, True])
async def test_a_restart_that_a_library_cancels_its_own_way_restarts_that_runnable_only(
    start: Start, transitions: Transitions, grouped: bool
) -> None:
    """It once ended a node's whole tree, with no error ("the supervision tree ended by
    itself"), at a leader change: every curator worker restarts inside its gRPC calls."""
    runs: list[RunContext] = []
    other = Switch()
    supervisor = await start(
        Switch({"caller": cancelled_into_a_grpc_error(runs, grouped=grouped), "other": other})
    )
    await wait_for_state(supervisor, "root.caller")

    runs[0].restart()

    restarted = await wait_restarted(supervisor, "root.caller")
    assert (restarted.failures, restarted.last_error, len(runs)) == (0, None, 2)
    assert not died(transitions, "root.caller")
    # The tree lives on (let through, the cancellation reaches the supervisor's task group
    # a moment later, and everything stops): a second restart works as the first did.
    runs[1].restart()
    await wait_restarted(supervisor, "root.caller", restarts=2)
    assert states(supervisor) == {"root": HEALTHY, "root.caller": HEALTHY, "root.other": HEALTHY}
    assert other.cancellations == 0


async def test_returning_when_cancelled_by_sibling_is_canceled_not_dead(
    start: Start, transitions: Transitions
) -> None:
    runs: list[RunContext] = []
    trigger = Switch()
    supervisor = await start(Switch({"stubborn": stubborn(runs), "trigger": trigger}))
    await wait_for_state(supervisor, "root.stubborn")
    await wait_for_state(supervisor, "root.trigger")

    trigger.fail()

    restarted = await wait_restarted(supervisor, "root.stubborn")
    assert (restarted.failures, restarted.last_error, len(runs)) == (0, None, 2)
    assert transitions.of("root.stubborn")[2:] == [
        (HEALTHY, CANCELED),
        (CANCELED, NEW),
        (NEW, HEALTHY),
    ]


# -- cancellation is never swallowed ---------------------------------------------------------


async def test_leaving_the_block_cancels_every_runnable(fake_clock: FakeClock) -> None:
    """Also a runnable waiting out its backoff: the block returns without the clock moving."""
    leaf = Switch()
    middle = Switch({"leaf": leaf})
    crasher = Switch(crash=True)
    root = Switch({"middle": middle}, {"crasher": crasher})

    with anyio.fail_after(DEFAULT_TIMEOUT):
        async with Supervisor(root, clock=fake_clock) as supervisor:
            await wait_for_state(supervisor, "root.middle.leaf")
            await fake_clock.wait_sleepers(1)

    assert [s.cancellations for s in (root, middle, leaf)] == [1, 1, 1]
    assert states(supervisor) == {
        "root": CANCELED,
        "root.middle": CANCELED,
        "root.middle.leaf": CANCELED,
        "root.crasher": CANCELED,
    }
    assert (supervisor.statistics().live, crasher.runs) == (0, 1)


async def test_host_cancel_scope_stops_the_supervisor(fake_clock: FakeClock) -> None:
    leaf = Switch()
    root = Switch({"leaf": leaf})

    with anyio.fail_after(DEFAULT_TIMEOUT), anyio.CancelScope() as host:
        async with Supervisor(root, clock=fake_clock) as supervisor:
            await wait_for_state(supervisor, "root.leaf")
            host.cancel()
            await anyio.sleep_forever()

    assert host.cancelled_caught
    assert (root.cancellations, leaf.cancellations) == (1, 1)
    assert states(supervisor) == {"root": CANCELED, "root.leaf": CANCELED}
    assert supervisor.statistics().live == 0


async def test_runnable_swallowing_its_shutdown_cancellation_is_not_restarted(
    fake_clock: FakeClock,
) -> None:
    runs: list[RunContext] = []
    seen = Transitions()

    with anyio.fail_after(DEFAULT_TIMEOUT):
        async with Supervisor(stubborn(runs), clock=fake_clock, observers=[seen]) as supervisor:
            await wait_for_state(supervisor, "root")

    assert len(runs) == 1
    assert seen.of("root") == [(None, NEW), (NEW, HEALTHY), (HEALTHY, CANCELED)]
    assert supervisor.status_of("root").failures == 0


async def test_child_started_while_cancelled_starts_cancelled(fake_clock: FakeClock) -> None:
    """A child started from a ``finally`` of a cancelled runnable is cancelled too.

    Otherwise nothing would cancel it: its parent would never restart, and leaving the
    supervisor would wait for it forever.
    """
    runs: list[RunContext] = []
    trigger = Switch()
    root = Switch({"spawner": spawns_when_cancelled(runs), "trigger": trigger})

    with anyio.fail_after(DEFAULT_TIMEOUT):
        async with Supervisor(root, clock=fake_clock) as supervisor:
            await wait_for_state(supervisor, "root.trigger")
            trigger.fail()
            await wait_for_status(supervisor, "root.spawner", lambda s: s.restarts == 1)
            await anyio.wait_all_tasks_blocked()
            assert len(runs) == 2

    assert supervisor.statistics().live == 0


# -- crash loops, restarts, contexts ---------------------------------------------------------


async def test_crash_looping_flag_follows_the_window(start: Start, fake_clock: FakeClock) -> None:
    """Set at the threshold of deaths within the window; cleared as they leave the window."""
    flaky = Switch(crash=True)
    supervisor = await start(
        Switch({"flaky": flaky}), crash_loop=CrashLoopPolicy(threshold=3, window=10.0)
    )
    first_failure = fake_clock.now()

    flags = []
    for failures in range(1, 4):
        await wait_failed(supervisor, "root.flaky", failures)
        flags.append(supervisor.status_of("root.flaky").crash_looping)
        if failures == 3:
            flaky.crash = False
        await fake_clock.advance_to_next()
    assert flags == [False, False, True]

    await wait_restarted(supervisor, "root.flaky", restarts=3)
    assert supervisor.status_of("root.flaky").crash_looping  # healthy, but recently looping
    fake_clock.advance(first_failure + 10.0 - fake_clock.now())
    assert supervisor.status_of("root.flaky").crash_looping  # the first death is on the edge
    fake_clock.advance(0.001)
    cleared = supervisor.status_of("root.flaky")
    assert (cleared.crash_looping, cleared.failures) == (False, 3)


async def test_supervisor_restart_needs_no_backoff_and_counts_no_failure(
    start: Start, fake_clock: FakeClock, transitions: Transitions
) -> None:
    leaf = Switch()
    worker = Switch({"leaf": leaf})
    supervisor = await start(Switch({"worker": worker}))
    await wait_for_state(supervisor, "root.worker.leaf")

    supervisor.restart("root.worker")

    restarted = await wait_restarted(supervisor, "root.worker")
    await wait_for_state(supervisor, "root.worker.leaf")
    assert (restarted.failures, restarted.last_error) == (0, None)
    assert [(s.runs, s.cancellations) for s in (worker, leaf)] == [(2, 1), (2, 1)]
    assert DEAD not in {new for _, new in transitions.of("root.worker")}


async def test_supervisor_restart_cuts_a_pending_backoff_short(
    start: Start, fake_clock: FakeClock
) -> None:
    flaky = Switch(crash=True)
    supervisor = await start(Switch({"flaky": flaky}))
    await wait_failed(supervisor, "root.flaky")
    await fake_clock.wait_sleepers(1)
    flaky.crash = False

    supervisor.restart("root.flaky")

    restarted = await wait_restarted(supervisor, "root.flaky", restarts=2)
    assert (restarted.failures, flaky.runs, fake_clock.sleepers()) == (1, 2, 0)


async def test_runnable_restarts_itself(start: Start, fake_clock: FakeClock) -> None:
    runs: list[RunContext] = []

    async def restarts_once(ctx: RunContext) -> None:
        runs.append(ctx)
        if len(runs) == 1:
            ctx.restart()
            await anyio.sleep_forever()  # the cancellation arrives here
        ctx.signal_healthy()
        await anyio.sleep_forever()

    supervisor = await start(Switch({"worker": restarts_once}))

    restarted = await wait_restarted(supervisor, "root.worker")
    assert (restarted.failures, len(runs), fake_clock.sleepers()) == (0, 2, 0)


STALE_CALLS: dict[str, Callable[[RunContext], None]] = {
    "run": lambda ctx: ctx.run("child", serve),
    "run_group": lambda ctx: ctx.run_group({"child": serve}),
    "signal_healthy": lambda ctx: ctx.signal_healthy(),
    "signal_done": lambda ctx: ctx.signal_done(),
    "set_note": lambda ctx: ctx.set_note("stale"),
    "restart": lambda ctx: ctx.restart(),
}


@pytest.mark.parametrize("call", list(STALE_CALLS.values()), ids=list(STALE_CALLS))
@pytest.mark.parametrize(
    "restarted", ["root.parent.worker", "root.parent"], ids=["own-restart", "parent-restart"]
)
async def test_context_of_an_earlier_run_raises(
    start: Start, restarted: str, call: Callable[[RunContext], None]
) -> None:
    """After a restart of the runnable, or of its parent, its old context is dead.

    The second case is a regression test: the old node was out of the tree, and its
    context restarted it as a runnable nothing would ever stop.
    """
    worker = Switch()
    parent = Switch({"worker": worker})
    supervisor = await start(Switch({"parent": parent}))
    await wait_for_state(supervisor, "root.parent.worker")
    supervisor.restart(restarted)
    await wait_restarted(supervisor, restarted)
    await wait_for_state(supervisor, "root.parent.worker")
    assert worker.runs == 2

    with pytest.raises(SupervisorError, match=r"root\.parent\.worker: .* earlier run"):
        call(worker.contexts[0])

    await anyio.wait_all_tasks_blocked()
    assert worker.runs == 2
    current = supervisor.status_of("root.parent.worker")
    assert (current.state, current.note) == (HEALTHY, "")
    assert [s.dn for s in supervisor.status()] == ["root", "root.parent", "root.parent.worker"]
    assert supervisor.statistics().live == 3


# -- status, statistics, lookup, logs --------------------------------------------------------


async def test_status_reports_counters_error_backoff_since_and_note(
    start: Start, fake_clock: FakeClock, transitions: Transitions
) -> None:
    worker = Switch()
    supervisor = await start(Switch({"worker": worker}))
    fresh = await wait_for_state(supervisor, "root.worker")
    assert (fresh.dn, fresh.name, fresh.depth) == ("root.worker", "worker", 1)
    assert (fresh.restarts, fresh.failures, fresh.last_error) == (0, 0, None)
    assert (fresh.restart_in, fresh.note, fresh.crash_looping) == (None, "", False)

    worker.contexts[0].set_note("syncing")
    noted = await wait_for_status(supervisor, "root.worker", lambda s: s.note == "syncing")
    assert noted.since == fresh.since  # a note is not a state change
    assert transitions.of("root.worker") == [(None, NEW), (NEW, HEALTHY)]

    before_failure = time.time()
    worker.fail()
    await wait_failed(supervisor, "root.worker")
    waiting = supervisor.status_of("root.worker")
    assert (waiting.state, waiting.restarts, waiting.failures) == (NEW, 1, 1)
    assert (waiting.restart_in, waiting.note) == (0.5, "")  # the note went with its run
    assert fresh.since <= before_failure <= waiting.since
    assert waiting.last_error is not None
    assert waiting.last_error.summary() == "RuntimeError: root.worker failed on purpose"
    assert before_failure <= waiting.last_error.at

    fake_clock.advance(0.25)
    assert supervisor.status_of("root.worker").restart_in == 0.25
    fake_clock.advance(0.25)
    healthy = await wait_restarted(supervisor, "root.worker")
    assert (healthy.restart_in, healthy.failures, healthy.last_error) == (
        None,
        1,
        waiting.last_error,
    )


async def test_statistics_count_the_tree(start: Start) -> None:
    worker = Switch({"leaf": serve})
    supervisor = await start(Switch({"worker": worker}, {"finisher": Switch(finish=True)}))
    await wait_for_state(supervisor, "root.worker.leaf")
    await wait_for_state(supervisor, "root.finisher", DONE)

    before = supervisor.statistics()
    supervisor.restart("root.worker")
    await wait_restarted(supervisor, "root.worker")
    await wait_for_state(supervisor, "root.worker.leaf")
    after = supervisor.statistics()

    expected_states = {**dict.fromkeys(State, 0), HEALTHY: 3, DONE: 1}
    assert (before.runnables, before.live, before.by_state, before.restarts) == (
        4,
        3,
        expected_states,
        0,
    )
    assert (after.runnables, after.live, after.by_state, after.restarts) == (
        4,
        3,
        expected_states,
        1,
    )


@pytest.mark.parametrize("dn", ["", "nope", "ROOT", "root.nope", "root.worker.nope", "root."])
async def test_unknown_dn_raises_not_found(start: Start, dn: str) -> None:
    supervisor = await start(Switch({"worker": serve}))
    await wait_for_state(supervisor, "root.worker")

    with pytest.raises(RunnableNotFoundError, match="no runnable"):
        supervisor.status_of(dn)
    with pytest.raises(RunnableNotFoundError, match="no runnable"):
        supervisor.status(dn)
    with pytest.raises(RunnableNotFoundError, match="no runnable"):
        supervisor.restart(dn)


def test_status_before_start_raises_not_found() -> None:
    supervisor = Supervisor(serve)
    with pytest.raises(RunnableNotFoundError, match="not running"):
        supervisor.status()
    assert supervisor.statistics().runnables == 0


async def test_supervisor_can_be_entered_once(start: Start) -> None:
    supervisor = await start(serve)
    with pytest.raises(SupervisorError, match="only once"):
        await supervisor.__aenter__()


async def test_root_restarts_after_failing(start: Start, fake_clock: FakeClock) -> None:
    root = Switch(crash=True)
    supervisor = await start(root)

    error = await wait_failed(supervisor, "root")
    assert error.summary() == "RuntimeError: root crashed"
    assert supervisor.status_of("root").restart_in == 0.5
    root.crash = False
    fake_clock.advance(0.5)

    await wait_restarted(supervisor, "root")
    assert root.runs == 2


async def test_logs_land_under_the_dn_and_an_unexpected_failure_has_its_traceback(
    start: Start,
) -> None:
    async def chatty(ctx: RunContext) -> None:
        ctx.log.info("starting %s", "up")
        ctx.log.debug("not kept at the default level")
        ctx.signal_healthy()
        raise RuntimeError("gave up")

    supervisor = await start(Switch({"chatty": chatty}))
    await wait_failed(supervisor, "root.chatty")

    entries = supervisor.logtree.entries("root.chatty")
    assert [(e.level_name, e.message) for e in entries] == [
        ("INFO", "starting up"),
        ("ERROR", "runnable failed: RuntimeError: gave up; restarting in 0.50s"),
    ]
    assert entries[0].exc_text is None
    assert entries[1].exc_text is not None
    assert "Traceback (most recent call last)" in entries[1].exc_text
    assert "RuntimeError: gave up" in entries[1].exc_text


async def test_backoff_policy_is_configurable(start: Start) -> None:
    supervisor = await start(
        Switch({"flaky": Switch(crash=True)}),
        backoff=BackoffPolicy(initial=2.0, multiplier=3.0, jitter=0.0),
    )
    await wait_failed(supervisor, "root.flaky")
    assert supervisor.status_of("root.flaky").restart_in == 2.0
