"""The status code the node's RPC statistics count a call under (``rpc/_stats.py``): what
``roleserve_grpc_server_handled_total{method,code}`` of the metrics plugin is labelled with."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from roleserve_core.rpc._stats import _code


class _Context:
    def __init__(self, code: object) -> None:
        self._code = code

    def code(self) -> object:
        return self._code


@pytest.mark.parametrize(
    ("code", "error", "expected"),
    [
        (None, None, "OK"),
        (grpc.StatusCode.OK, None, "OK"),
        (grpc.StatusCode.PERMISSION_DENIED, Exception("aborted"), "PERMISSION_DENIED"),
        (7, Exception("aborted"), "PERMISSION_DENIED"),
        (None, RuntimeError("bug"), "UNKNOWN"),
        (None, asyncio.CancelledError(), "CANCELLED"),
    ],
)
def test_the_code_a_call_ended_with(
    code: object, error: BaseException | None, expected: str
) -> None:
    assert _code(_Context(code), error) == expected  # type: ignore[arg-type]
