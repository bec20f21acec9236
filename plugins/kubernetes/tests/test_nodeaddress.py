"""The Node's addresses on a loopback node: the patch the worker sends."""

from __future__ import annotations

import ipaddress
import json

from roleserve_kubernetes.nodeaddress import address_patch


def test_the_patch_gives_the_node_its_internal_ip_and_hostname() -> None:
    patch = address_patch("node-1", ipaddress.ip_address("127.0.0.12"))
    assert json.loads(patch) == {
        "status": {
            "addresses": [
                {"type": "InternalIP", "address": "127.0.0.12"},
                {"type": "Hostname", "address": "node-1"},
            ]
        }
    }
