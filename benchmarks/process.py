"""The program runner: what starting and stopping a program through it costs.

Run: ``./dev sync && .venv/bin/python benchmarks/process.py [--rounds 50]``.

The program is a two-line shell script, ``echo up; exec sleep 60``. Each figure is printed
next to a baseline measured in the same run, and the ratio of the two:

(p1) start to running: from the call until the program's first line ("up") has been read.
     Runner: ``start_program`` (binary lookup, leftover check, ``setpriv --pdeathsig KILL``
     exec'ing the program in a session of its own, record written, watchdog
     told) until "up" reaches the log. Baseline: ``anyio.open_process`` of the script,
     until "up" is read from its stdout.
(p2) stop to reaped: from the request to stop until the program is reaped. Runner: leaving
     the ``start_program`` block (SIGTERM to the group, wait until reaped and the group is
     empty, output drained, record removed, watchdog told). Baseline: ``terminate()`` and
     ``wait()`` of the process.

The two run interleaved, one program each in turn. The runner's first start also starts
the node's watchdog (one ``sh``); that start is made once before measuring, as a node
makes it once in its life.
"""

from __future__ import annotations

import argparse
import logging
import subprocess
import tempfile
import time
from pathlib import Path

import anyio
from _report import print_comparison, summarise

from roleserve_core.process import ProgramSpec, start_program


class FirstLine(logging.Handler):
    """Sets ``seen`` when the program's "up" line is logged."""

    def __init__(self) -> None:
        super().__init__()
        self.seen = anyio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage() == "up":
            self.seen.set()


async def through_runner(spec: ProgramSpec, log: logging.Logger) -> tuple[float, float]:
    """(start → "up" read, stop → reaped) of one program through ``start_program``."""
    handler = FirstLine()
    log.handlers[:] = [handler]
    begin = time.perf_counter()
    async with start_program(log, spec):
        await handler.seen.wait()
        started = time.perf_counter()
    stopped = time.perf_counter()
    return started - begin, stopped - started


async def bare(program: Path) -> tuple[float, float]:
    """(start → "up" read, terminate → reaped) of one program with ``anyio.open_process``."""
    begin = time.perf_counter()
    process = await anyio.open_process(
        [str(program)], stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    assert process.stdout is not None
    output = b""
    while b"up\n" not in output:
        output += await process.stdout.receive()
    started = time.perf_counter()
    process.terminate()
    await process.wait()
    stopped = time.perf_counter()
    await process.aclose()
    return started - begin, stopped - started


async def main(rounds: int) -> None:
    log = logging.getLogger("benchmark.process")
    log.propagate = False
    log.setLevel(logging.INFO)
    runner: list[tuple[float, float]] = []
    baseline: list[tuple[float, float]] = []
    with tempfile.TemporaryDirectory(prefix="roleserve-bench-") as directory:
        program = Path(directory) / "program.sh"
        program.write_text("#!/bin/sh\necho up\nexec sleep 60\n")
        program.chmod(0o755)
        spec = ProgramSpec(
            name="program", executable=str(program), state_dir=Path(directory) / "state"
        )
        await through_runner(spec, log)  # starts the node's watchdog, once in a node's life
        for _ in range(rounds):  # interleaved, so that the machine's load hits both alike
            runner.append(await through_runner(spec, log))
            baseline.append(await bare(program))
    print_comparison(
        f"(p1) start → first line read ({rounds} programs)",
        summarise([start for start, _ in runner]),
        summarise([start for start, _ in baseline]),
        "anyio.open_process",
    )
    print_comparison(
        f"(p2) stop → reaped ({rounds} programs)",
        summarise([stop for _, stop in runner]),
        summarise([stop for _, stop in baseline]),
        "terminate() + wait()",
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=50)
    anyio.run(main, parser.parse_args().rounds, backend="asyncio")
