"""Programs a runnable runs: one runner for etcd, containerd, wireguard-go, node_exporter...

Monogon links etcd into its node process; roleserve runs programs, so it must make sure
that a program belongs to the node that started it. Every runnable that starts a program
goes through ``start_program`` (or ``program_runnable``), which gives:

- **death with the node**: each program has ``PR_SET_PDEATHSIG`` = SIGKILL (through
  util-linux ``setpriv``) and a process group of its own, which the node's watchdog kills
  when the node dies by any signal (``_watchdog``);
- **leftovers stopped**: each program is recorded in the plugin's data directory (pid,
  start time, boot, binary, arguments); a record found at start whose process provably
  still runs is stopped, with one WARNING; nothing not provably ours is ever signalled
  (``_records``);
- **a held port is one clear error** naming the address, the holder's pid and command,
  and what to do (``_ports``);
- **output into the log tree**, line by line through a parser per program; the last
  error lines become the error when the program exits (``_parsers``);
- **stopping** with SIGTERM to the group, a grace period, SIGKILL; the runner returns only
  once the program is reaped and its group is empty (``_runner``);
- **a missing binary is final at once**, naming the paths tried and the setting to change
  (``_spec``).

::

    runnable ──start_program(ctx.log, spec)──▶ RunningProgram(pid, exited, returncode)
                   │                                   ▲ readiness: the caller's, against pid
                   ├─ setpriv --pdeathsig KILL -- BINARY ARGS   (own session = own group)
                   ├─ record  <state_dir>/<name>.process.json   (removed once reaped)
                   ├─ watchdog ◀── "+ PGID START", "- PGID"     (kills listed groups at node death)
                   └─ stdout/stderr ──parser──▶ ctx.log ──▶ log tree

Use::

    from roleserve_core.process import Bind, ProgramSpec, parse_zap_json, start_program

    async def run(ctx: RunContext) -> None:
        spec = ProgramSpec(name="etcd", executable="etcd", arguments=[...],
                           state_dir=node.data_dir, binds=[Bind("127.0.0.11", 7836)],
                           parser=parse_zap_json)
        async with start_program(ctx.log, spec) as etcd:
            await wait_serving(etcd.pid)       # readiness against the child started
            ctx.signal_healthy()
            await etcd.wait()                  # raises ProgramExitedError when etcd exits

or, with no state of its own, ``Worker("exporter", program_runnable(spec, ready=...))``.

Modules, one concept each: ``_spec`` (the spec, finding the binary), ``_parsers``
(output lines), ``_proc`` (reading ``/proc``), ``_ports`` (held addresses), ``_records``
(records and leftovers), ``_watchdog`` (groups killed at node death), ``_runner``
(start, watch, stop), ``_errors``.
"""

from roleserve_core._public import publish
from roleserve_core.process._errors import (
    PortInUseError,
    ProgramError,
    ProgramExitedError,
    ProgramNotFoundError,
)
from roleserve_core.process._parsers import (
    LineParser,
    parse_zap_json,
    plain_text,
    zap_json_parser,
)
from roleserve_core.process._ports import address_in_use
from roleserve_core.process._proc import ProcStat, read_stat, read_stats
from roleserve_core.process._records import ProcessRecord, read_record, stop_leftover
from roleserve_core.process._runner import (
    RunningProgram,
    find_setpriv,
    program_runnable,
    start_program,
)
from roleserve_core.process._spec import Bind, ProgramSpec, resolve_binary

__all__ = [
    "Bind",
    "LineParser",
    "PortInUseError",
    "ProcStat",
    "ProcessRecord",
    "ProgramError",
    "ProgramExitedError",
    "ProgramNotFoundError",
    "ProgramSpec",
    "RunningProgram",
    "address_in_use",
    "find_setpriv",
    "parse_zap_json",
    "plain_text",
    "program_runnable",
    "read_record",
    "read_stat",
    "read_stats",
    "resolve_binary",
    "start_program",
    "stop_leftover",
    "zap_json_parser",
]

# Its classes report this package (or the top level) as theirs: see _public.
publish(__name__, globals(), __all__)
