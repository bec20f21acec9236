"""node_exporter, the machine's metrics, as a child program of the worker.

::

    find_node_exporter(settings) ── not found ──▶ no ``node`` exporter, one log line, and
         │                                      the child NEW (not running, never HEALTHY)
         │                                      with the reason as its note: no crash loop
         │ found
         ▼
    node_exporter_runnable ── start_program (roleserve_core.process: dies with the node,
                              leftovers stopped, output into the log tree)
         └─ healthy once it listens on <local exporter host>:7841 (checked against its pid)

It listens on plain HTTP on the node's local exporter host (``local_exporter_host``), which
no other machine reaches; the worker's HTTPS server proxies it as ``/metrics/node``. If it
exits, its runnable dies and the supervisor starts it again after the backoff; scrapes of
``node`` meanwhile get 502.

Its default collectors all stay on, on purpose: they run only when scraped, so an idle
node_exporter uses no CPU (0.00% of a core over 60 s, ``benchmarks/scale.py``) and 13.7 MiB
of RSS, which ``--collector.disable-defaults`` with the usual dozen collectors cuts by
about 1 MiB (its Go runtime is the rest), at the price of metrics users expect.
"""

from __future__ import annotations

from pathlib import Path

import anyio

from roleserve_core import (
    Bind,
    ProgramNotFoundError,
    ProgramSpec,
    RunContext,
    Runnable,
    RunningProgram,
    endpoint,
    program_runnable,
    resolve_binary,
)
from roleserve_metrics.settings import NODE_EXPORTER_EXECUTABLE, MetricsSettings

__all__ = [
    "READY_POLL",
    "absent_node_exporter_runnable",
    "node_exporter_arguments",
    "node_exporter_runnable",
    "node_exporter_spec",
    "resolve_node_exporter",
]

SYSTEMD = Path("/run/systemd/system")
"""Exists when systemd runs the machine (``sd_booted``)."""

READY_POLL = 0.02
"""Seconds between looks at whether node_exporter listens yet (it takes ~50 ms)."""


def node_exporter_spec(
    settings: MetricsSettings, host: str, state_dir: Path, binary: Path | None = None
) -> ProgramSpec:
    """node_exporter listening on ``host``:``settings.node_exporter_port``.

    :param binary: the binary already found (``resolve_node_exporter``); None: look it up.
    """
    listen = endpoint(host, settings.node_exporter_port)
    return ProgramSpec(
        name="node_exporter",
        executable=str(binary) if binary is not None else NODE_EXPORTER_EXECUTABLE,
        configured=settings.node_exporter or None,
        setting=(
            'set `node_exporter = "/path"` in [plugins.metrics] of roleserve.toml, '
            "or apt-get install prometheus-node-exporter"
        ),
        arguments=node_exporter_arguments(listen),
        state_dir=state_dir,
        binds=[Bind(host, settings.node_exporter_port)],
    )


def node_exporter_arguments(listen: str = "127.0.0.1:7841") -> list[str]:
    """node_exporter's arguments: listen on ``listen``, log warnings and errors only, and
    no systemd collector on a machine without systemd (a container), where it would log
    an error at every scrape."""
    arguments = [f"--web.listen-address={listen}", "--log.level=warn"]
    if not SYSTEMD.is_dir():
        arguments.append("--no-collector.systemd")
    return arguments


def resolve_node_exporter(spec: ProgramSpec) -> Path | ProgramNotFoundError:
    """The binary ``spec`` would run, or why there is none."""
    try:
        return resolve_binary(spec)
    except ProgramNotFoundError as exc:
        return exc


def node_exporter_runnable(spec: ProgramSpec) -> Runnable:
    """A runnable running ``spec``, healthy once it listens on its address."""
    bind = spec.binds[0]

    async def ready(program: RunningProgram, ctx: RunContext) -> None:
        # Nothing announces a socket another process binds: polling /proc is the way.
        while not program.listens_on(bind):  # noqa: ASYNC110
            await anyio.sleep(READY_POLL)

    return program_runnable(spec, ready=ready)


def absent_node_exporter_runnable(reason: ProgramNotFoundError) -> Runnable:
    """Stands for node_exporter where there is none, so that ``ctl tree`` shows it: not
    running (NEW, never HEALTHY), its note the reason; restarting could not help."""

    async def absent(ctx: RunContext) -> None:
        ctx.set_note(f"not running: {reason}")
        await anyio.sleep_forever()

    return absent
