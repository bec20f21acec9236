"""The core's own workings that plugins' tests compare against, so that those tests import
only the plugin API and this kit (tests/test_exports.py checks), never a private module.

- ``record_leftover``: a process recorded as the program runner records the programs it
  starts, so that a test can leave one behind as a killed node would;
- ``tree_line``: a runnable's line in ``roleserve ctl tree``, as the node sends it and
  ``ctl`` draws it;
- ``plugin_set``: a node's plugin set holding only the given plugin modules;
- ``renewal_due``: when the core renews a certificate.

(``prometheus_yaml`` and ``PROMETHEUS_ROLE_LABEL``, what ``ctl prometheus-config`` writes,
moved with the command to the metrics plugin: ``roleserve_metrics``.)
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from roleserve_core.cli.ctl._tree import describe
from roleserve_core.plugin_loader import PluginSelection, PluginSet
from roleserve_core.process import ProcessRecord
from roleserve_core.process._proc import boot_id, read_stat
from roleserve_core.service_nodemanagement import runnable_message
from roleserve_core.supervisor import RunnableStatus
from roleserve_core.workers.renewal import renewal_due

__all__ = [
    "plugin_set",
    "record_leftover",
    "renewal_due",
    "tree_line",
]


def record_leftover(pid: int, command: list[str], path: Path) -> None:
    """Record the running process ``pid`` (started as ``command``) at ``path``, as the
    program runner records what it starts: the next start of that program finds it a
    leftover of a killed node and stops it."""
    stat = read_stat(pid)
    if stat is None:
        raise ValueError(f"process {pid} is not running: there is nothing to record")
    ProcessRecord(
        pid=pid,
        pgid=pid,
        start_time=stat.start_time,
        boot_id=boot_id(),
        executable=command[0],
        arguments=command[1:],
        node_pid=1,
    ).write(path)


def tree_line(status: RunnableStatus, name: str) -> str:
    """The line of the runnable ``status`` (drawn as ``name``) in ``roleserve ctl tree``."""
    return describe(runnable_message(status), name)


def plugin_set(plugins: Mapping[str, object]) -> PluginSet:
    """A plugin set of the given modules only (name → module), without entry points or the
    built-in plugins: for a test that builds a ``NodeIntrospection``."""
    loaded = PluginSet.load(selection=PluginSelection(), entry_points=[], builtins=())
    for name, module in plugins.items():
        loaded.register(module, name)
    return loaded
