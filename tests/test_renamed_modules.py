"""Modules a plugin could import that were renamed to say what they are: the old path keeps
working while the core accepts plugin API 1 (docs/plugin-guide.md, "The plugin API
promise"). Each name of the old module is the very object of the new one, and using it
warns, at the line that uses it, naming the new module; the old module holds nothing of its
own, so that whatever walks its members (pluggy, pytest) finds nothing twice."""

from __future__ import annotations

import importlib
import re

import pytest

import roleserve_core
from roleserve_core._moved import PluginAPIDeprecationWarning

RENAMED = {
    "roleserve_core.plugins": "roleserve_core.plugin_loader",
    "roleserve_core.ctlplugin": "roleserve_core.ctl_extension",
    "roleserve_core.clusterplugin": "roleserve_core.cluster_extension",
    "roleserve_core.testing.plugin": "roleserve_core.testing.pytest_plugin",
}
"""Old module path -> where its names are today."""


def _names() -> list[tuple[str, str]]:
    return [(old, name) for old in RENAMED for name in importlib.import_module(old).__all__]


@pytest.mark.parametrize(("old", "name"), _names())
def test_a_name_of_a_renamed_module_warns_naming_its_module_today(old: str, name: str) -> None:
    new = RENAMED[old]
    # A name the core exports at its top level is to be imported from there (the plugin
    # API), whatever module holds it.
    place = "roleserve_core" if name in roleserve_core.__all__ else new
    expected = (
        f"{old}.{name} has moved: import {name} from {place}; the old name works while "
        "roleserve-core accepts plugin API 1"
    )
    with pytest.warns(PluginAPIDeprecationWarning, match=f"^{re.escape(expected)}$") as warned:
        found = getattr(importlib.import_module(old), name)
    assert [warning.filename for warning in warned] == [__file__]
    assert found is getattr(importlib.import_module(new), name)


@pytest.mark.parametrize("old", RENAMED)
def test_a_renamed_module_offers_only_public_names_of_its_new_module(old: str) -> None:
    """What plugins could import from the old path when it was renamed, and no more: names
    the new module gained later (the ctl-plugin API's ``check_ctl_out``, the test kit's
    ``ctl_cluster``) were never at the old path."""
    new = importlib.import_module(RENAMED[old])
    public = getattr(new, "__all__", None) or [
        name
        for name, value in vars(new).items()
        if not name.startswith("_") and getattr(value, "__module__", None) == new.__name__
    ]
    assert set(importlib.import_module(old).__all__) <= set(public)


@pytest.mark.parametrize("old", RENAMED)
def test_a_renamed_module_defines_none_of_its_names(old: str) -> None:
    module = importlib.import_module(old)
    assert set(module.__all__).isdisjoint(dir(module))
    with pytest.raises(AttributeError, match="has no attribute 'Nonesuch'"):
        getattr(module, "Nonesuch")  # noqa: B009 - an unknown name, on purpose
