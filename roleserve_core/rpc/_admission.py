"""What the server and its clients agree on for calls with a request stream: the initial
metadata that says the call was admitted.

Its own module, not ``_server``'s: the client side (``_client``) reads it, and a client
(``roleserve ctl``) must not load the server side for one constant.
"""

from __future__ import annotations

__all__ = ["ADMITTED_METADATA", "ADMITTED_METADATA_KEY"]

ADMITTED_METADATA_KEY = "roleserve-admitted"
ADMITTED_METADATA = ((ADMITTED_METADATA_KEY, "1"),)
"""Initial metadata the server sends once it admitted a call with a request stream.

A grpc.aio client that is still writing requests when the server ends the call reports
INTERNAL ("Internal error from Core") instead of the server's status (grpc issues 36066 and
43486), which would hide every refusal of a streaming call. So the client of
``secure_channel`` starts writing only once the server announced the call admitted; a
refused call ends before any request is written, and its status reaches the caller intact.
The handler itself can therefore not send initial metadata of its own on such methods."""
