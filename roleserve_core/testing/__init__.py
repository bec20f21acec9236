"""Test kit for roleserve and its plugins: fake clock, fake curator and throwaway cluster,
a fake cluster for ``roleserve ctl`` commands, harnesses, and waits on conditions.

The fixtures live in ``roleserve_core.testing.pytest_plugin``, registered with pytest through
the ``pytest11`` entry point. The rule behind all of it: tests wait on conditions (a value
satisfying a predicate, a runnable reaching a state, a task falling asleep on the fake
clock), each under a timeout, and never on ``sleep``.

``roleserve_core.testing.fuzz`` (hypothesis strategies of gRPC requests, for fuzzing a
server) is imported by name only: it needs hypothesis, a test dependency, and this package
is imported in every suite through the pytest plugin.
"""

from roleserve_core._moved import moved_names
from roleserve_core._public import publish
from roleserve_core.testing._clock import FakeClock
from roleserve_core.testing._cluster import FakeCluster, ThrowawayCA
from roleserve_core.testing._core import plugin_set, record_leftover, renewal_due, tree_line
from roleserve_core.testing._ctl import CTL_TIMEOUT, run_ctl
from roleserve_core.testing._ctl_cluster import (
    FakeCtlCluster,
    MainResult,
    RunMain,
    ServerThread,
    run_main,
    start_fake_ctl_cluster,
)
from roleserve_core.testing._curator import FakeCall, FakeCurator, random_loopback
from roleserve_core.testing._harness import (
    NO_CHANNEL,
    NodeHarness,
    PluginHarness,
    StartNode,
    SupervisorRunner,
    load_installed_plugin,
    start_plugin_node,
)
from roleserve_core.testing._real import REQUIRE_REAL_ENV, require_real
from roleserve_core.testing._records import node_record
from roleserve_core.testing._tls import presented_certificate
from roleserve_core.testing._tmpfs import Tmpfs, mounted_tmpfs
from roleserve_core.testing._wait import (
    DEFAULT_TIMEOUT,
    POLL_INTERVAL,
    poll_until,
    wait_for_state,
    wait_for_status,
    wait_for_value,
)

__all__ = [
    "CTL_TIMEOUT",
    "DEFAULT_TIMEOUT",
    "NO_CHANNEL",
    "POLL_INTERVAL",
    "REQUIRE_REAL_ENV",
    "FakeCall",
    "FakeClock",
    "FakeCluster",
    "FakeCtlCluster",
    "FakeCurator",
    "MainResult",
    "NodeHarness",
    "PluginHarness",
    "RunMain",
    "ServerThread",
    "StartNode",
    "SupervisorRunner",
    "ThrowawayCA",
    "Tmpfs",
    "load_installed_plugin",
    "mounted_tmpfs",
    "node_record",
    "plugin_set",
    "poll_until",
    "presented_certificate",
    "random_loopback",
    "record_leftover",
    "renewal_due",
    "require_real",
    "run_ctl",
    "run_main",
    "start_fake_ctl_cluster",
    "start_plugin_node",
    "tree_line",
    "wait_for_state",
    "wait_for_status",
    "wait_for_value",
]

# What `ctl prometheus-config` writes moved with the command to the metrics plugin.
__getattr__ = moved_names(
    __name__,
    {
        "PROMETHEUS_ROLE_LABEL": "roleserve_metrics:ROLE_LABEL",
        "prometheus_yaml": "roleserve_metrics:prometheus_yaml",
    },
    api=1,
)

# Its classes report this package (or the top level) as theirs: see _public.
publish(__name__, globals(), __all__)
