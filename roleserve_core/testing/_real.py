"""Tests that need a real component (etcd, wireguard-go, ...) and what to do without it."""

from __future__ import annotations

import os

import pytest

__all__ = ["REQUIRE_REAL_ENV", "require_real"]

REQUIRE_REAL_ENV = "ROLESERVE_REQUIRE_REAL"
"""Set to 1 (CI does) to make a missing real component fail a test instead of skipping it."""


def require_real(component: str, found: object, install_hint: str) -> None:
    """Skip the calling test unless ``found`` is truthy, saying what is missing and how to
    install it; under ``ROLESERVE_REQUIRE_REAL=1`` fail it instead.

    :param component: what the test needs, e.g. ``"etcd"``.
    :param found: the result of looking for it (a path, a version, a bool).
    :param install_hint: how to get it, e.g. ``"apt-get install etcd-server"``.
    """
    if found:
        return
    message = f"{component} is not available ({install_hint})"
    if os.environ.get(REQUIRE_REAL_ENV, "") not in ("", "0"):
        pytest.fail(f"{message}, and {REQUIRE_REAL_ENV} is set", pytrace=False)
    pytest.skip(message)
