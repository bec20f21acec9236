"""The log tree: per-DN ring buffers, subtree reads, levels, live followers, forwarding."""

from __future__ import annotations

import logging
import time

import anyio
import pytest

from roleserve_core.event import Value
from roleserve_core.logtree import PROCESS_LOGGER, LogEntry, LogFollower, LogTree
from roleserve_core.supervisor import RunContext
from roleserve_core.testing import (
    DEFAULT_TIMEOUT,
    SupervisorRunner,
    wait_for_state,
    wait_for_value,
)

pytestmark = pytest.mark.anyio


def log_each(tree: LogTree, *records: tuple[str, str]) -> None:
    """Log ``(dn, message)`` records at INFO, in order."""
    for dn, message in records:
        tree.logger(dn).info(message)


def messages(entries: list[LogEntry]) -> list[str]:
    return [entry.message for entry in entries]


# -- reading ----------------------------------------------------------------------------------


def test_each_dn_keeps_its_last_capacity_records() -> None:
    tree = LogTree(capacity=3)
    log_each(tree, ("root.quiet", "hello"))
    log_each(tree, *(("root.chatty", str(n)) for n in range(5)))

    assert messages(tree.entries("root.chatty")) == ["2", "3", "4"]
    assert messages(tree.entries("root.quiet")) == ["hello"]  # not pushed out by the chatty one


def test_subtree_read_merges_records_in_logging_order() -> None:
    tree = LogTree()
    log_each(
        tree,
        ("root.a", "a1"),
        ("root", "root1"),
        ("root.a.b", "b1"),
        ("root.ab", "ab1"),  # shares the prefix, but is not under root.a
        ("root.a", "a2"),
        ("root.a.b.c", "c1"),
        ("root.a.b", "b2"),
    )

    subtree = tree.entries("root.a", subtree=True)
    assert messages(subtree) == ["a1", "b1", "a2", "c1", "b2"]
    assert [entry.seq for entry in subtree] == sorted(entry.seq for entry in subtree)
    assert messages(tree.entries("root.a")) == ["a1", "a2"]
    assert len(tree.entries("root", subtree=True)) == 7


def test_limit_returns_the_newest_records() -> None:
    tree = LogTree()
    log_each(tree, ("root.a", "1"), ("root.a.b", "2"), ("root.a", "3"))

    assert messages(tree.entries("root.a", subtree=True, limit=2)) == ["2", "3"]
    assert messages(tree.entries("root.a", limit=1)) == ["3"]
    assert messages(tree.entries("root.a", limit=10)) == ["1", "3"]
    assert tree.entries("root.a", subtree=True, limit=0) == []
    with pytest.raises(ValueError, match="limit must not be negative"):
        tree.entries("root.a", limit=-1)


def test_unknown_dn_has_no_records_and_dns_lists_the_loggers() -> None:
    tree = LogTree()
    log_each(tree, ("root.b", "x"), ("root.a", "y"), ("root.b", "z"))

    assert tree.entries("root.nope") == []
    assert tree.entries("root.nope", subtree=True) == []
    assert tree.dns() == ["root.a", "root.b"]


def test_capacity_must_be_positive() -> None:
    with pytest.raises(ValueError, match="capacity must be at least 1"):
        LogTree(capacity=0)


def test_exception_is_stored_as_text() -> None:
    tree = LogTree()
    try:
        raise ValueError("bad input")
    except ValueError:
        tree.logger("root.x").exception("it failed")

    (entry,) = tree.entries("root.x")
    assert (entry.level_name, entry.message) == ("ERROR", "it failed")
    assert entry.exc_text is not None
    assert entry.exc_text.startswith("Traceback (most recent call last)")
    assert entry.exc_text.endswith("ValueError: bad input")


def test_entry_formats_as_one_line_plus_exception() -> None:
    at = time.mktime((2024, 5, 6, 12, 34, 56, 0, 0, -1)) + 0.25
    plain = LogEntry(seq=0, dn="root.x", time=at, level=logging.WARNING, message="disk low")
    failed = LogEntry(
        seq=1, dn="root.x", time=at, level=logging.ERROR, message="gave up", exc_text="Trace"
    )

    assert plain.format() == "12:34:56.250 W root.x: disk low"
    assert failed.format() == "12:34:56.250 E root.x: gave up\nTrace"
    assert (plain.level_name, failed.level_name) == ("WARNING", "ERROR")
    # .123 is not exactly representable: the milliseconds must not be truncated to .122,
    # nor a time just below a second roll over into the wrong second.
    odd = LogEntry(seq=2, dn="root.x", time=at - 0.25 + 0.123, level=logging.INFO, message="m")
    assert odd.format().startswith("12:34:56.123 ")
    late = LogEntry(seq=3, dn="root.x", time=at - 0.25 + 0.9996, level=logging.INFO, message="m")
    assert late.format().startswith("12:34:57.000 ")


def test_bad_format_arguments_are_reported_not_raised(capsys: pytest.CaptureFixture[str]) -> None:
    """As with any standard handler, a broken log call must not raise into its caller."""
    tree = LogTree()
    log = tree.logger("root.x")

    log.info("%d items", "not a number")
    log.info("still logging")

    assert messages(tree.entries("root.x")) == ["still logging"]
    assert "--- Logging error ---" in capsys.readouterr().err


# -- levels and the logging hierarchy ------------------------------------------------------


def test_debug_is_kept_only_below_a_lowered_level() -> None:
    tree = LogTree()
    chatty, other = tree.logger("root.chatty"), tree.logger("root.other")
    chatty.debug("dropped")

    chatty.setLevel(logging.DEBUG)
    chatty.debug("kept")
    other.debug("dropped too")

    assert messages(tree.entries("root", subtree=True)) == ["kept"]


def test_set_level_reaches_loggers_already_used() -> None:
    tree = LogTree()
    log = tree.logger("root.x")
    log.debug("dropped")  # the logger has now cached "DEBUG is off"

    tree.set_level(logging.DEBUG)
    log.debug("kept")
    tree.set_level(logging.WARNING)
    log.info("dropped again")
    log.warning("kept too")

    assert messages(tree.entries("root.x")) == ["kept", "kept too"]


async def test_runnable_lowers_its_own_level(supervisor_runner: SupervisorRunner) -> None:
    async def debugging(ctx: RunContext) -> None:
        ctx.log.debug("before")
        ctx.log.setLevel(logging.DEBUG)
        ctx.log.debug("after")
        ctx.signal_healthy()
        await anyio.sleep_forever()

    supervisor = await supervisor_runner.start(debugging)
    await wait_for_state(supervisor, "root")

    entries = supervisor.logtree.entries("root")
    assert [(entry.level_name, entry.message) for entry in entries] == [("DEBUG", "after")]


def test_standard_handlers_and_child_loggers_keep_working() -> None:
    tree = LogTree()
    seen: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(f"{record.name}: {record.getMessage()}")

    log = tree.logger("root.x")
    log.addHandler(Collect())
    log.info("direct")
    log.getChild("sub").info("from a child logger")

    assert seen == ["root.x: direct", "root.x.sub: from a child logger"]
    assert log.getChild("sub") is tree.logger("root.x.sub")
    assert messages(tree.entries("root.x.sub")) == ["from a child logger"]


def test_records_are_forwarded_to_the_process_logger(caplog: pytest.LogCaptureFixture) -> None:
    tree = LogTree()
    caplog.set_level(logging.WARNING, logger=PROCESS_LOGGER)

    tree.logger("root.x").info("kept, not forwarded")
    tree.logger("root.x").warning("kept and forwarded")

    assert [(r.name, r.levelname, r.getMessage()) for r in caplog.records] == [
        ("root.x", "WARNING", "kept and forwarded")
    ]
    assert messages(tree.entries("root.x")) == ["kept, not forwarded", "kept and forwarded"]


def test_two_trees_do_not_share_records() -> None:
    first, second = LogTree(), LogTree()
    first.logger("root.x").info("first")
    second.logger("root.x").info("second")

    assert first.logger("root.x") is not second.logger("root.x")
    assert messages(first.entries("root", subtree=True)) == ["first"]
    assert messages(second.entries("root", subtree=True)) == ["second"]
    assert logging.getLogger("root.x").handlers == []  # nothing leaked into the process tree


# -- following ------------------------------------------------------------------------------


async def collect(follower: LogFollower) -> list[str]:
    """The messages of ``follower`` until it ends."""
    with anyio.fail_after(DEFAULT_TIMEOUT):
        return [entry.message async for entry in follower]


async def test_follow_gets_new_records_of_its_dn_or_subtree_until_closed() -> None:
    tree = LogTree()
    log_each(tree, ("root.a", "before"))
    subtree, exact = tree.follow("root.a"), tree.follow("root.a", subtree=False)

    log_each(
        tree,
        ("root.a", "1"),
        ("root.b", "elsewhere"),
        ("root.a.c", "2"),
        ("root.ab", "prefix only"),
        ("root.a", "3"),
    )
    subtree.close()
    exact.close()
    log_each(tree, ("root.a", "after close"))

    assert await collect(subtree) == ["1", "2", "3"]
    assert await collect(exact) == ["1", "3"]


async def test_follower_wakes_for_each_record_and_ends_on_close() -> None:
    tree = LogTree()
    received: Value[list[str]] = Value()
    got: list[str] = []

    async def consume(follower: LogFollower) -> None:
        async for entry in follower:
            got.append(entry.message)
            received.set(list(got))

    with anyio.fail_after(DEFAULT_TIMEOUT), tree.follow("root") as follower:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(consume, follower)
            await anyio.wait_all_tasks_blocked()  # the consumer waits for a record

            tree.logger("root.x").info("one")
            await wait_for_value(received, lambda seen: seen == ["one"])
            tree.logger("root").info("two")
            await wait_for_value(received, lambda seen: seen == ["one", "two"])

            follower.close()  # ends the consumer's loop, so the task group can exit
    with pytest.raises(anyio.EndOfStream):
        await follower.next()


async def test_follower_that_falls_behind_loses_its_oldest_records() -> None:
    tree = LogTree()
    follower = tree.follow("root", buffer=2)

    log_each(tree, *(("root.x", str(n)) for n in range(5)))
    follower.close()

    assert await collect(follower) == ["3", "4"]
    assert follower.dropped == 3
    assert messages(tree.entries("root.x")) == ["0", "1", "2", "3", "4"]  # the tree has all


async def test_record_logged_from_a_thread_reaches_a_follower() -> None:
    tree = LogTree()
    log = tree.logger("root.threaded")
    entries: list[LogEntry] = []

    async def receive(follower: LogFollower) -> None:
        entries.append(await follower.next())

    with anyio.fail_after(DEFAULT_TIMEOUT), tree.follow("root") as follower:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(receive, follower)
            await anyio.wait_all_tasks_blocked()
            await anyio.to_thread.run_sync(log.info, "from a worker thread")

    assert [(e.dn, e.message) for e in entries] == [("root.threaded", "from a worker thread")]


async def test_followers_of_two_trees_are_isolated() -> None:
    first, second = LogTree(), LogTree()
    follower = first.follow("root")

    second.logger("root.x").info("other tree")
    first.logger("root.x").info("this tree")
    follower.close()

    assert await collect(follower) == ["this tree"]
