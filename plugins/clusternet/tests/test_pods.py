"""clusternet reads the kubernetes plugin's ``pod_network`` only where that plugin is
installed and loaded: it runs without it."""

from __future__ import annotations

import sys
from typing import Any, cast

import pytest

from roleserve_clusternet.pods import pod_network_key
from roleserve_core import PluginValues, ValueKey
from roleserve_kubernetes import POD_NETWORK


class Declared:
    """The one thing ``pod_network_key`` asks of the node's values."""

    def __init__(self, *keys: ValueKey[Any]) -> None:
        self.names = {key.name for key in keys}

    def __contains__(self, key: ValueKey[Any]) -> bool:
        return key.name in self.names


def values(*keys: ValueKey[Any]) -> PluginValues:
    return cast(PluginValues, Declared(*keys))


def test_the_key_is_the_kubernetes_plugin_s_when_a_loaded_plugin_declares_it() -> None:
    assert pod_network_key(values(POD_NETWORK)) is POD_NETWORK


def test_no_key_when_the_kubernetes_plugin_is_installed_but_not_loaded() -> None:
    assert pod_network_key(values()) is None


def test_no_key_and_no_error_when_the_kubernetes_plugin_is_not_installed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "roleserve_kubernetes", None)  # as if not installed
    assert pod_network_key(values(POD_NETWORK)) is None
