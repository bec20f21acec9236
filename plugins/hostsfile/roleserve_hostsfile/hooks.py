"""Cluster name resolution: no workers yet (the hostsfile worker comes with issue 10)."""

from __future__ import annotations

ROLESERVE_PLUGIN_API = 1
