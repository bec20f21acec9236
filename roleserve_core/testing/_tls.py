"""What a server presents: a TLS handshake of its own, to check a renewed certificate.

gRPC's channels verify a server's certificate but do not hand it to the caller, and a
renewed node certificate verifies exactly as the old one did (same key, node ID and CA);
only the certificate itself tells them apart.
"""

from __future__ import annotations

import socket
import ssl
import tempfile
from pathlib import Path

import anyio
from cryptography import x509

from roleserve_core.identity import Credentials

__all__ = ["presented_certificate"]


async def presented_certificate(host: str, port: int, client: Credentials) -> x509.Certificate:
    """The certificate the server at ``host:port`` presents in a new TLS handshake, made
    with ``client``'s certificate (roleserve servers require one). The server's certificate
    is only looked at, not trusted."""
    return await anyio.to_thread.run_sync(_handshake, host, port, client)


def _handshake(host: str, port: int, client: Credentials) -> x509.Certificate:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(["h2"])
    with tempfile.TemporaryDirectory() as directory:  # ssl loads keys from files only
        certificate, key = Path(directory, "cert.pem"), Path(directory, "key.pem")
        certificate.write_bytes(client.certificate_pem)
        key.write_bytes(client.key_pem)
        context.load_cert_chain(certificate, key)
    with (
        socket.create_connection((host, port), timeout=10) as raw,
        context.wrap_socket(raw) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    if der is None:
        raise ssl.SSLError(f"{host}:{port} presented no certificate")
    return x509.load_der_x509_certificate(der)
