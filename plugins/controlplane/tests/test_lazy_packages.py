"""The ``consensus`` and ``curator`` packages re-export their modules' names lazily
(``lazy_loader`` stubs), so that the plugin's settings and the worker on a node without a
control plane import only the modules they use: every name still resolves, and importing
a light module does not load etcd's client."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest


@pytest.mark.parametrize("package", ["consensus", "curator"])
def test_every_re_exported_name_resolves_from_its_module(package: str) -> None:
    module = importlib.import_module(f"roleserve_controlplane.{package}")
    assert module.__all__
    for name in module.__all__:
        assert getattr(module, name) is not None, name


def test_the_settings_and_the_saved_member_load_no_etcd_client() -> None:
    code = (
        "import sys, roleserve_controlplane.settings, roleserve_controlplane.consensus.saved\n"
        "print(sorted(m for m in sys.modules if m.startswith('etcd3aio') or "
        "m.endswith(('consensus.client', 'consensus.record'))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.strip() == "[]"
