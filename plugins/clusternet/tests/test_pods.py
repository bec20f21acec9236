"""clusternet reads the kubernetes plugin's ``pod_network`` only where that plugin is
installed and loaded: it runs without it (its suite too: the tests that need the key skip
where the kubernetes plugin is not installed, as in CI's run of clusternet's wheel alone)."""

from __future__ import annotations

import sys
import types
from typing import Any, cast

import pytest

from roleserve_clusternet.pods import pod_network_key
from roleserve_core import PluginValues, ValueKey


class Declared:
    """The one thing ``pod_network_key`` asks of the node's values."""

    def __init__(self, *keys: ValueKey[Any]) -> None:
        self.names = {key.name for key in keys}

    def __contains__(self, key: ValueKey[Any]) -> bool:
        return key.name in self.names


def values(*keys: ValueKey[Any]) -> PluginValues:
    return cast(PluginValues, Declared(*keys))


POD_NETWORK_NAMED: ValueKey[Any] = ValueKey("pod_network", object, "Another plugin's key.")
"""A key of the name the kubernetes plugin declares, for a node's values to hold."""


def test_the_key_is_the_kubernetes_plugin_s_when_a_loaded_plugin_declares_it() -> None:
    kubernetes = pytest.importorskip("roleserve_kubernetes")
    assert pod_network_key(values(kubernetes.POD_NETWORK)) is kubernetes.POD_NETWORK


def test_no_key_when_the_kubernetes_plugin_is_installed_but_not_loaded() -> None:
    pytest.importorskip("roleserve_kubernetes")
    assert pod_network_key(values()) is None


def test_no_key_and_no_error_when_the_kubernetes_plugin_is_not_installed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "roleserve_kubernetes", None)  # as if not installed
    assert pod_network_key(values(POD_NETWORK_NAMED)) is None


def test_a_broken_kubernetes_plugin_is_not_taken_for_an_absent_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Installed, but a module it needs is missing: that error is the plugin's to show,
    not a silent "no pods"."""
    broken = types.ModuleType("roleserve_kubernetes")

    def missing_dependency(name: str) -> Any:
        raise ModuleNotFoundError("No module named 'aiohttp'", name="aiohttp")

    broken.__getattr__ = missing_dependency  # type: ignore[method-assign]
    monkeypatch.setitem(sys.modules, "roleserve_kubernetes", broken)
    with pytest.raises(ModuleNotFoundError, match="aiohttp"):
        pod_network_key(values(POD_NETWORK_NAMED))
