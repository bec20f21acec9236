"""The register ticket an operator hands to a new node, as one copyable string.

``roleserve ctl ticket`` prints it; ``roleserve node run`` takes it from a file
(``--register-file PATH``), from ``$ROLESERVE_REGISTER_TICKET``, or as ``--register TICKET``
(which every local user sees in ``ps``, so the other two are for real use). It
carries the cluster's register ticket and the cluster CA certificate: a node that has never
talked to the cluster must verify the curator it registers with, and gRPC cannot connect
without verifying, so the CA travels with the ticket (Monogon's node parameters carry it
the same way)::

    rs1-<base64url of roleserve.node.RegisterTicket, no padding>
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding
from google.protobuf.message import DecodeError

from roleserve_core.errors import CertificateVerificationError, ConfigError
from roleserve_core.identity import verify_ca
from roleserve_core.proto import node_pb2

__all__ = ["TICKET_PREFIX", "InvalidTicketError", "RegisterTicket"]

TICKET_PREFIX = "rs1-"


class InvalidTicketError(ConfigError):
    """A register ticket string that cannot be used."""


@dataclass(frozen=True)
class RegisterTicket:
    """A cluster's register ticket and its CA."""

    ticket: bytes
    ca_certificate: x509.Certificate

    def encode(self) -> str:
        """The string form, ``rs1-...``."""
        message = self.to_proto()
        data = base64.urlsafe_b64encode(message.SerializeToString()).rstrip(b"=")
        return TICKET_PREFIX + data.decode()

    def to_proto(self) -> node_pb2.RegisterTicket:
        """The message form, as a pending registration saves it."""
        der = self.ca_certificate.public_bytes(Encoding.DER)
        return node_pb2.RegisterTicket(ticket=self.ticket, ca_certificate=der)

    @classmethod
    def from_proto(cls, message: node_pb2.RegisterTicket) -> RegisterTicket:
        """The ticket a message holds.

        :raises InvalidTicketError: if a part is missing or the CA is not a CA.
        """
        if not message.ticket:
            raise InvalidTicketError("the register ticket is empty")
        try:
            ca = x509.load_der_x509_certificate(message.ca_certificate)
            verify_ca(ca)
        except (ValueError, CertificateVerificationError) as exc:
            raise InvalidTicketError(f"the ticket's cluster CA is unusable: {exc}") from None
        return cls(message.ticket, ca)

    @classmethod
    def decode(cls, text: str) -> RegisterTicket:
        """Parse the string form.

        :raises InvalidTicketError: saying what is wrong with it.
        """
        text = text.strip()
        if not text.startswith(TICKET_PREFIX):
            raise InvalidTicketError(
                f"a register ticket starts with {TICKET_PREFIX!r}; get one with "
                "`roleserve ctl ticket`"
            )
        body = text[len(TICKET_PREFIX) :]
        try:
            data = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
            message = node_pb2.RegisterTicket.FromString(data)
        except (binascii.Error, ValueError, DecodeError):
            raise InvalidTicketError(
                "the register ticket is damaged (not base64url of a ticket); copy it again"
            ) from None
        return cls.from_proto(message)
