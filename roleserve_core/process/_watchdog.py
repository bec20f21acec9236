"""The node's watchdog: kills the process groups of its programs when the node dies.

Why it exists. Each program gets ``PR_SET_PDEATHSIG`` = SIGKILL (through ``setpriv``, see
``_runner``), so the program itself dies with the node. But the death signal reaches only
that one process: helpers it forked into its process group (a shell script's children, a
server's worker processes) are reparented and live on. Something must outlive the node long enough
to kill those groups, and must learn of the node's death without the node's help, since
SIGKILL gives it none.

How. One small ``sh`` process per node process, started at the first program::

    node process ──write end──▶ pipe ──▶ sh (own session; ignores INT, HUP, TERM, QUIT)
        "+ PGID START"  a group was started (START: its leader's start time)
        "- PGID"        the group was stopped by the runner; forget it
                                   at EOF (the node died, by any signal, or exited):
                                   kill -s KILL -- -PGID for every group still listed,
                                   if its leader is gone or still has that start time

Only the node holds the write end: Python's descriptors are close-on-exec and the
runner's children get only /dev/null and their output pipes, and a child forked from the
node without exec closes its copy at once (``os.register_at_fork``), so EOF comes exactly
when the node process is gone.

Whom it may kill. A group still listed whose leader is alive with the recorded start time
is ours. So is one whose leader is gone altogether: Linux does not hand a pid out again
while a process group of that number has members, and a group of that number can only be
created by the process with that pid, so members of group PGID with no process PGID alive
are what is left of our group. A leader pid that now belongs to another process (start
time differs) means our group is empty: skipped. The one remaining window is a group that
empties, and whose number is taken by a new group leader, between the check and the kill:
microseconds, after a full wrap of the pid space.

Why not something else: ``prctl`` in a ``preexec_fn`` is unsafe with threads (grpc runs
threads); ``PR_SET_CHILD_SUBREAPER`` only helps while the node lives; a cgroup per program
would be exact but needs a writable cgroup hierarchy (root, and v1 or v2 differ); a PID
namespace per program needs privileges and changes the pids the records rely on. ``sh``
rather than Python: it starts in a millisecond and holds a megabyte, not 10.
"""

from __future__ import annotations

import contextlib
import os

__all__ = ["WATCHDOG_SCRIPT", "Watchdog", "watchdog"]

WATCHDOG_SCRIPT = r"""
trap '' INT HUP TERM QUIT PIPE
groups=''
while read -r op pgid start; do
  case $op in
    +) groups="$groups $pgid:$start" ;;
    -) kept=''
       for g in $groups; do [ "${g%%:*}" = "$pgid" ] || kept="$kept $g"; done
       groups=$kept ;;
  esac
done
for g in $groups; do
  pgid=${g%%:*}; start=${g#*:}
  stat=''
  [ -r /proc/$pgid/stat ] && read -r stat < /proc/$pgid/stat 2>/dev/null
  if [ -n "$stat" ]; then
    set -- ${stat##*) }
    [ $# -ge 20 ] || continue
    shift 19
    [ "$1" = "$start" ] || continue
  fi
  kill -s KILL -- -$pgid 2>/dev/null
done
"""


class Watchdog:
    """The watchdog of this node process (see the module docstring); one per process.

    ``watch`` and ``forget`` write one short line to the pipe (atomic below ``PIPE_BUF``,
    and never blocking, since the watchdog reads all the time). A watchdog that is gone
    (killed by hand) is replaced at the next write, and told every group still watched.
    """

    def __init__(self) -> None:
        self._pid: int | None = None
        self._fd: int | None = None
        self._groups: dict[int, int] = {}
        os.register_at_fork(after_in_child=self._forked)

    def _forked(self) -> None:
        """In a child forked from the node (without exec): drop the inherited write end,
        which would otherwise keep the node's watchdog from seeing the node die, and the
        groups, which are the node's. The child gets a watchdog of its own if it needs one.
        """
        if self._fd is not None:
            os.close(self._fd)
        self._pid = self._fd = None
        self._groups = {}

    @property
    def pid(self) -> int | None:
        """The watchdog's pid, once started."""
        return self._pid

    def watch(self, pgid: int, start_time: int) -> None:
        """Kill group ``pgid`` if the node dies (its leader started at ``start_time``)."""
        self._groups[pgid] = start_time
        self._send(f"+ {pgid} {start_time}\n")

    def forget(self, pgid: int) -> None:
        """Group ``pgid`` was stopped: leave it alone from now on."""
        if self._groups.pop(pgid, None) is not None:
            self._send(f"- {pgid}\n")

    def _send(self, line: str) -> None:
        for _ in range(2):
            if self._fd is None:
                self._start()
                if line.startswith("+"):
                    return  # _start told it every group, this one included
            assert self._fd is not None
            try:
                os.write(self._fd, line.encode())
                return
            except OSError:  # BrokenPipeError: it is gone; start another
                self._close()

    def _start(self) -> None:
        read, write = os.pipe()  # both close-on-exec: no program inherits them
        try:
            self._pid = os.posix_spawn(
                "/bin/sh",
                ["roleserve-watchdog", "-c", WATCHDOG_SCRIPT, "roleserve-watchdog"],
                {"PATH": "/usr/bin:/bin"},
                file_actions=[
                    (os.POSIX_SPAWN_DUP2, read, 0),
                    (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
                    (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0),
                ],
                setsid=True,
            )
        except BaseException:
            os.close(write)
            raise
        finally:
            os.close(read)
        self._fd = write
        lines = "".join(f"+ {pgid} {start}\n" for pgid, start in self._groups.items())
        if lines:
            os.write(write, lines.encode())

    def _close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._pid is not None:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self._pid, os.WNOHANG)
            self._pid = None


watchdog = Watchdog()
"""The watchdog of this node process."""
