"""gRPC's encryption offload (``rpc._offload``): the environment a node process starts
gRPC with, and a TLS stream through a server that offloads every write."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from roleserve_core.rpc import enable_encryption_offload
from roleserve_core.rpc._offload import ENCRYPTION_OFFLOAD_EXPERIMENT, GRPC_EXPERIMENTS_ENV

EXPERIMENT = ENCRYPTION_OFFLOAD_EXPERIMENT


def test_the_experiment_joins_those_the_environment_names() -> None:
    alone: dict[str, str] = {}
    enable_encryption_offload(alone)
    assert alone == {GRPC_EXPERIMENTS_ENV: EXPERIMENT}
    others = {GRPC_EXPERIMENTS_ENV: "one, two,", "PATH": "/bin"}
    enable_encryption_offload(others)
    assert others == {GRPC_EXPERIMENTS_ENV: f"one, two,{EXPERIMENT}", "PATH": "/bin"}


@pytest.mark.parametrize("own", [EXPERIMENT, f"-{EXPERIMENT}", f"one,-{EXPERIMENT},"])
def test_the_operators_own_mention_of_the_experiment_wins(own: str) -> None:
    environ = {GRPC_EXPERIMENTS_ENV: own}
    enable_encryption_offload(environ)
    assert environ == {GRPC_EXPERIMENTS_ENV: own}


@pytest.mark.parametrize("other", [f" {EXPERIMENT}", f"--{EXPERIMENT}", EXPERIMENT.upper()])
def test_what_grpc_would_not_read_as_the_experiment_does_not_stand_for_it(other: str) -> None:
    """gRPC reads each name exactly (no spaces trimmed, case kept); so does this."""
    environ = {GRPC_EXPERIMENTS_ENV: other}
    enable_encryption_offload(environ)
    assert environ == {GRPC_EXPERIMENTS_ENV: f"{other},{EXPERIMENT}"}


STREAM = textwrap.dedent(
    """
    import asyncio, sys
    import grpc
    from roleserve_core.rpc import ENCRYPTION_OFFLOAD_OPTIONS, secure_channel, server_credentials
    from roleserve_core.testing import ThrowawayCA

    SIZES = [1, 2, 100, 5_000, 40_000, 300_000, 3, 70_000] * 25

    async def replies(request, context):
        for index, size in enumerate(SIZES):
            yield index.to_bytes(4, "big") * (size // 4 + 1)

    async def main():
        ca = ThrowawayCA()
        offloading = list(ENCRYPTION_OFFLOAD_OPTIONS) if "--plain" not in sys.argv else []
        server = grpc.aio.server(options=offloading)
        handler = grpc.unary_stream_rpc_method_handler(replies)
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("t.T", {"Replies": handler}),)
        )
        port = server.add_secure_port("127.0.0.1:0", server_credentials(ca.node()))
        await server.start()
        async with secure_channel(f"127.0.0.1:{port}", ca.user()) as channel:
            received = [reply async for reply in channel.unary_stream("/t.T/Replies")(b"")]
        await server.stop(None)
        expected = [i.to_bytes(4, "big") * (s // 4 + 1) for i, s in enumerate(SIZES)]
        print("whole and in order" if received == expected else f"{len(received)} differ")

    asyncio.run(main())
    """
)
"""A server on the node's mutual TLS (``server_credentials``, a ``secure_channel`` of a
user of the same throwaway cluster), without the node's interceptors: the method is the
test's own."""


def test_a_server_offloading_every_write_streams_whole_and_in_order(tmp_path: Path) -> None:
    """In a process of its own (gRPC reads its experiments once, when its core starts), with
    the experiment on as ``roleserve node`` turns it on: the installed gRPC knows it (an
    unknown one is an error line on stderr); 200 replies of 1 B to 300 KB arrive whole and
    in order; and the option is what sends small writes off the loop too. gRPC's
    ``secure_endpoint`` trace logs "Pending" and the write's first bytes (at most 64) for
    each write it hands to its threads, or queues behind one: a server without the option
    hands over first a write past 32 KiB (the experiment alone), one with it its very first
    write, the connection's small SETTINGS frame."""
    environ = {k: v for k, v in os.environ.items() if k != GRPC_EXPERIMENTS_ENV}
    enable_encryption_offload(environ)
    environ.update(GRPC_VERBOSITY="DEBUG", GRPC_TRACE="secure_endpoint")
    script = tmp_path / "stream.py"
    script.write_text(STREAM)

    def first_handed_over(*arguments: str) -> int:
        """The bytes the trace shows of the first write handed over."""
        done = subprocess.run(
            [sys.executable, str(script), *arguments],
            capture_output=True,
            text=True,
            env=environ,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        assert "Unknown experiment" not in done.stderr
        assert done.stdout.strip() == "whole and in order"
        pending = [line for line in done.stderr.splitlines() if "] Pending " in line]
        assert pending, "no write was handed over"
        shown = pending[0].split(": ", 1)[1].split(" '", 1)[0]
        return len(shown.split())

    assert first_handed_over("--plain") >= 64
    assert first_handed_over() < 64
