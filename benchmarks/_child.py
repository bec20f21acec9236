"""A benchmark's own node, run as a child process of it (``<program> --node ...``)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import anyio
import anyio.abc

__all__ = ["child_node"]


@asynccontextmanager
async def child_node(program: str, arguments: Sequence[str]) -> AsyncIterator[anyio.abc.Process]:
    """``program --node ARGUMENTS`` in a process of its own, so that its memory and its
    event loop are its own. Its stdin is its lifeline: closed at the end of the block, the
    child stops; one that has not within 30 s is killed."""
    process = await anyio.open_process(
        [sys.executable, program, "--node", *arguments], stderr=subprocess.DEVNULL
    )
    assert process.stdin is not None
    assert process.stdout is not None
    try:
        yield process
    finally:
        await process.stdin.aclose()
        with anyio.move_on_after(30):
            await process.wait()
        if process.returncode is None:
            process.kill()
        await process.aclose()
