"""The plugin API promise: what a plugin could import under plugin API 1 still imports.

``API_1`` is plugin API 1 as released (the commit before "one import surface"): the top of
``roleserve_core`` and every module its plugin guide and docstrings sent plugin authors
to, each with the names it exported then. Each name must import from there while the core
accepts API 1: as it is, or, for the names that moved since (``MOVED``), with a
``DeprecationWarning`` naming the place it has today, and as the very object found there.
The suite makes warnings errors, so a name of API 1 that warns without being listed as
moved fails too.

The frozen plugin of tests/plugin_api_1/ runs such a plugin; the last test keeps it frozen.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import roleserve_core
from roleserve_core import hookspecs, plugin_problems, values
from roleserve_core.hookspecs import PROJECT
from roleserve_core.plugin_loader import ACCEPTED_PLUGIN_APIS

API_1: dict[str, str] = {
    "roleserve_core": """
        ConsensusMember ConsensusPeer ExpectedError FinalError KubernetesController
        KubernetesWorker NodeContext NodeRoles PLUGIN_API_VERSION ResourceError RoleserveError
        RunContext Setting State Supervisor Value ValueKey ValueWatch Watcher Worker
        custom_role hookimpl hookspec
    """,
    "roleserve_core.keys": """
        BOOTSTRAP BOOTSTRAPPED BootstrapRequest Bootstrapped CLUSTER_NODES CURATOR_CONNECTION
        CuratorConnection HANDLED_CUSTOM_ROLES KUBERNETES_STATUS KubernetesStatus
        LOCAL_CONTROL_PLANE LocalControlPlane NETWORK NODE_CREDENTIALS NODE_ID NetworkStatus
        POD_NETWORK PodNetwork REVOKED_CREDENTIALS ROLES RevokedCredentials SHARED_KEYS
    """,
    "roleserve_core.values": """
        PluginValues ValueInfo ValueKey ValueRegistry prefixed unprefixed_key_warning
        value_details
    """,
    "roleserve_core.clusternodes": """
        ClusterNodes NodeChanges NodeWatchFold changes follow_changes node_address
    """,
    "roleserve_core.event": "Combined Value ValueStatistics ValueWatch Watcher",
    "roleserve_core.connection": """
        LEADER_CHANGE_WINDOW LeaderInfo LeaderRefusedError LeaderUnresponsiveError
        NoLeaderError NoQuorumError Session find_leader follow_leader on_each_connection
    """,
    "roleserve_core.process": """
        Bind LineParser PortInUseError ProcessRecord ProgramError ProgramExitedError
        ProgramNotFoundError ProgramSpec RunningProgram find_setpriv parse_zap_json plain_text
        program_runnable read_record resolve_binary start_program stop_leftover
        zap_json_parser
    """,
    "roleserve_core.errors": """
        CertificateVerificationError ChildrenAfterHealthyError ConcurrentGetError ConfigError
        CredentialsError DataDirectoryError DuplicateValueKeyError EnrolmentError
        EssentialPluginError EventError ExpectedError FinalError IdentityError
        InvalidRunnableNameError InvalidSignalError NodeSetupError NotValueOwnerError
        PluginAPIVersionError PluginError PluginLoadError RefusedError RequestLimitError
        ResourceError RoleserveError RunnableCancelledError RunnableNotFoundError
        RunnableReturnedError SupervisorError UnknownValueKeyError ValueRegistryError
        WatcherClosedError leaf_exceptions
    """,
    "roleserve_core.proto": """
        authorization_pb2 authorization_pb2_grpc common_pb2 common_pb2_grpc curator_pb2
        curator_pb2_grpc management_pb2 management_pb2_grpc node_pb2 node_pb2_grpc
        nodemanagement_pb2 nodemanagement_pb2_grpc
    """,
    "roleserve_core.testing": """
        DEFAULT_TIMEOUT FakeCall FakeClock FakeCluster FakeCurator NO_CHANNEL NodeHarness
        POLL_INTERVAL PluginHarness REQUIRE_REAL_ENV SupervisorRunner ThrowawayCA Tmpfs
        load_installed_plugin mounted_tmpfs node_record poll_until presented_certificate
        random_loopback require_real wait_for_state wait_for_status wait_for_value
    """,
    "roleserve_core.workers.nodemgmt": "Listen SERVER_OPTIONS nodemgmt_worker plan restart_needed",
}
"""Plugin API 1's modules and their names, as released."""

API_1_HOOKS = {
    "roleserve_add_hookspecs": ("plugin_manager",),
    "roleserve_settings": (),
    "roleserve_values": (),
    "roleserve_workers": ("node",),
    "on_roles": ("roles", "node"),
    "on_curator_connection": ("connection", "node"),
}
"""Plugin API 1's hooks and the arguments each passed."""

KUBERNETES_KEYS = ("KUBERNETES_STATUS", "POD_NETWORK", "KubernetesStatus", "PodNetwork")
"""The kubernetes plugin's keys and their types, the core's under plugin API 1."""

MOVED: dict[str, str] = {
    **{
        f"roleserve_core.keys.{name}": f"roleserve_core.{name}"
        for name in API_1["roleserve_core.keys"].split()
        if name not in KUBERNETES_KEYS
    },
    **{f"roleserve_core.keys.{name}": f"roleserve_kubernetes.{name}" for name in KUBERNETES_KEYS},
    "roleserve_core.keys.SHARED_KEYS": "roleserve_core.values.SHARED_KEYS",
    "roleserve_core.values.PluginValues": "roleserve_core.PluginValues",
    "roleserve_core.values.ValueRegistry": "roleserve_core.ValueRegistry",
    "roleserve_core.values.ValueInfo": "roleserve_core.registry.ValueInfo",
    "roleserve_core.values.prefixed": "roleserve_core.registry.prefixed",
    "roleserve_core.values.unprefixed_key_warning": (
        "roleserve_core.registry.unprefixed_key_warning"
    ),
    "roleserve_core.values.value_details": "roleserve_core.registry.value_details",
    "roleserve_core.clusternodes.changes": "roleserve_core.node_changes",
    "roleserve_core.workers.nodemgmt.plan": "roleserve_core.plan_listen",
}
"""Plugin API 1's names that moved, and where each is today (the warning names it)."""

PORTS_MOVED = {
    "CONTAINERD_METRICS_PORT": "roleserve_kubernetes",
    "ETCD_CLIENT_PORT": "roleserve_controlplane",
    "ETCD_PEER_PORT": "roleserve_controlplane",
    "ETCD_METRICS_PORT": "roleserve_controlplane",
    "METRICS_PORT": "roleserve_metrics",
    "NODE_EXPORTER_PORT": "roleserve_metrics",
    "CLUSTERNET_PORT": "roleserve_clusternet",
}
MOVED_TO_PLUGINS: dict[str, str] = {
    **{f"roleserve_core.{name}": f"roleserve_kubernetes.{name}" for name in KUBERNETES_KEYS},
    **{f"roleserve_core.values.{name}": f"roleserve_kubernetes.{name}" for name in KUBERNETES_KEYS},
    **{f"roleserve_core.{name}": f"{plugin}.{name}" for name, plugin in PORTS_MOVED.items()},
    **{f"roleserve_core.ports.{name}": f"{plugin}.{name}" for name, plugin in PORTS_MOVED.items()},
    "roleserve_core.testing.PROMETHEUS_ROLE_LABEL": "roleserve_metrics.ROLE_LABEL",
    "roleserve_core.testing.prometheus_yaml": "roleserve_metrics.prometheus_yaml",
}
"""Names the core exported after plugin API 1's release that moved to the plugin owning them
(beside those of ``roleserve_core.keys`` in ``MOVED``), and their place there (the test
kit's two with ``ctl prometheus-config``). Each plugin declares them in its top-level API;
the core names them only as strings."""

FROZEN = Path(__file__).parent / "plugin_api_1"
FROZEN_DIGESTS = {
    "pyproject.toml": "631736dec01579bf10768a413f91aa8a",
    "roleserve_api1/__init__.py": "e539914692291951d88492e9b8cea25f",
    "roleserve_api1/hooks.py": "62d9f03f71a19be5a57d968dfee45e85",
    "roleserve_api1/py.typed": "e3b0c44298fc1c149afbf4c8996fb924",
    "tests/test_api1_plugin.py": "3fcad40c702dfd03e3c807d745879a9d",
}
"""SHA-256 (its first half) of each file of the frozen plugin and its suite, as written
for plugin API 1."""


def _names() -> list[tuple[str, str]]:
    return [(module, name) for module, names in API_1.items() for name in names.split()]


def _resolve(dotted: str) -> object:
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def test_plugin_api_1_is_accepted() -> None:
    """The names below are kept because the core accepts API 1; they go only with it."""
    assert 1 in ACCEPTED_PLUGIN_APIS


@pytest.mark.parametrize(
    ("accepted", "declared", "problem"),
    [
        ((1,), 1, None),
        ((1,), True, "was written for plugin API True; this roleserve-core accepts plugin API 1."),
        ((1, 2), 2, None),
        ((1, 2), 1, None),
        (
            (1, 2),
            3,
            "was written for plugin API 3; this roleserve-core accepts plugin APIs 1 and 2.",
        ),
        (
            (1, 2, 3),
            "2",
            "was written for plugin API '2'; this roleserve-core accepts plugin APIs 1, 2 and 3.",
        ),
    ],
)
def test_a_core_accepting_several_plugin_apis_loads_each(
    monkeypatch: pytest.MonkeyPatch,
    accepted: tuple[int, ...],
    declared: object,
    problem: str | None,
) -> None:
    """The time between two APIs: a core accepting API N and N+1 loads plugins of both."""
    monkeypatch.setattr(plugin_problems, "ACCEPTED_PLUGIN_APIS", accepted)
    plugin = SimpleNamespace(ROLESERVE_PLUGIN_API=declared)
    found = plugin_problems.api_problem(plugin, "hooks.py")
    if problem is None:
        assert found is None
    else:
        assert found == f"{problem} Install a version of the plugin made for it."


def _moved_warns(old: str, new: str) -> object:
    """``old`` (``module.NAME``) still resolves, warning once, at this file's line, with the
    message naming ``new`` (``place.NAME``); the object it resolved to."""
    module, _, name = old.rpartition(".")
    place, _, new_name = new.rpartition(".")
    expected = (
        f"{old} has moved: import {new_name} from {place}; the old name works while "
        "roleserve-core accepts plugin API 1"
    )
    with pytest.warns(DeprecationWarning, match=f"^{re.escape(expected)}$") as warned:
        found = getattr(importlib.import_module(module), name)
    assert [warning.filename for warning in warned] == [__file__]
    return found


@pytest.mark.parametrize(("module", "name"), _names())
def test_every_name_of_plugin_api_1_imports_from_where_api_1_put_it(module: str, name: str) -> None:
    """``from MODULE import NAME`` of API 1 still works; a moved name warns, at the line
    that imports it, naming its place today, and is the object found there."""
    old = f"{module}.{name}"
    if old not in MOVED:
        assert _resolve(old) is not None  # and no warning: the suite makes one an error
        return
    assert _moved_warns(old, MOVED[old]) is _resolve(MOVED[old])


@pytest.mark.parametrize("old", sorted(MOVED_TO_PLUGINS))
def test_a_name_moved_to_its_plugin_still_imports_from_the_core_and_warns(old: str) -> None:
    """``from roleserve_core import KUBERNETES_STATUS`` and the like keep working, naming
    the plugin's declared API, and give the plugin's very object."""
    new = MOVED_TO_PLUGINS[old]
    assert _moved_warns(old, new) is _resolve(new)
    place, _, new_name = new.rpartition(".")
    assert new_name in importlib.import_module(place).__all__


def test_a_name_moved_to_a_plugin_not_installed_is_an_attribute_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """So ``getattr(roleserve_core, NAME, default)`` still works; the error names the
    plugin."""
    monkeypatch.setitem(sys.modules, "roleserve_kubernetes", None)  # as if not installed
    with (
        pytest.warns(DeprecationWarning, match="POD_NETWORK has moved"),
        pytest.raises(AttributeError, match="moved to roleserve_kubernetes, which is not"),
    ):
        getattr(roleserve_core, "POD_NETWORK")  # noqa: B009 - a moved name, on purpose


def test_a_from_import_of_a_name_moved_to_a_plugin_not_installed_still_names_its_place(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``from roleserve_core import NAME`` turns the AttributeError into Python's own
    ImportError: the warning before it is what names the plugin (the plugin guide says so)."""
    monkeypatch.setitem(sys.modules, "roleserve_kubernetes", None)  # as if not installed
    with (
        pytest.warns(DeprecationWarning, match="import POD_NETWORK from roleserve_kubernetes"),
        pytest.raises(ImportError, match="cannot import name 'POD_NETWORK'"),
    ):
        from roleserve_core import POD_NETWORK  # type: ignore[attr-defined]  # noqa: F401


def test_the_moved_names_are_out_of_the_core_s_listings() -> None:
    """Whatever walks the core's members (pluggy, ``dir``) meets no warning and no plugin."""
    for old in MOVED_TO_PLUGINS:
        module, _, name = old.rpartition(".")
        found = importlib.import_module(module)
        assert name not in getattr(found, "__all__", ()), old
        assert name not in dir(found), old


def test_every_moved_name_is_a_name_of_plugin_api_1() -> None:
    assert set(MOVED) <= {f"{module}.{name}" for module, name in _names()}


def test_every_hook_of_plugin_api_1_still_passes_what_it_passed() -> None:
    """An implementation may take any of its hook's arguments, so none may go."""
    for hook, arguments in API_1_HOOKS.items():
        spec = getattr(hookspecs, hook)
        assert hasattr(spec, f"{PROJECT}_spec"), f"{hook} is no longer a hook"
        assert set(arguments) <= set(inspect.signature(spec).parameters), hook


def test_roleserve_core_values_keeps_its_meaning_of_today() -> None:
    """It holds the core's keys; the registry's names of API 1 answer only when asked for:
    not in ``__all__`` or ``dir()``, so pluggy, which registers this module as the plugin
    ``core``, and whatever walks its members, find today's module and no warning."""
    assert values.ROLES is roleserve_core.ROLES
    # The one name both meanings share, the same class in both.
    assert _resolve("roleserve_core.values.ValueKey") is roleserve_core.ValueKey
    registry_names = set(API_1["roleserve_core.values"].split()) - {"ValueKey"}
    assert registry_names.isdisjoint(values.__all__)
    assert registry_names.isdisjoint(dir(values))
    assert dict(inspect.getmembers(values))["ROLES"] is values.ROLES
    with pytest.raises(AttributeError, match="has no attribute 'Nonesuch'"):
        getattr(values, "Nonesuch")  # noqa: B009 - an unknown name, on purpose


def test_the_plugin_written_for_plugin_api_1_is_frozen() -> None:
    """It proves the promise only as API 1 released it: change the core, never it."""
    digests = {
        name: hashlib.sha256((FROZEN / name).read_bytes()).hexdigest()[:32]
        for name in FROZEN_DIGESTS
    }
    assert digests == FROZEN_DIGESTS, (
        "tests/plugin_api_1 is a plugin written for plugin API 1, frozen; a change to the "
        "core that needs it changed breaks the plugin API promise (docs/plugin-guide.md)"
    )
