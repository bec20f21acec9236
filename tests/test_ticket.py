"""The register ticket string an operator copies from ``ctl ticket`` to ``node run``.

What matters is that a good ticket survives the trip unchanged, and that every way a copy
goes wrong is refused with text that says what to do, before the node starts anything.
"""

from __future__ import annotations

import base64

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from roleserve_core.enrolment.ticket import TICKET_PREFIX, InvalidTicketError, RegisterTicket
from roleserve_core.identity import (
    certificate_to_pem,
    create_ca,
    generate_key,
    issue_node_certificate,
)
from roleserve_core.proto import node_pb2


@pytest.fixture(scope="module")
def ca() -> x509.Certificate:
    return create_ca(generate_key())


def encoded(message: node_pb2.RegisterTicket) -> str:
    """A ticket string of any message, as ``encode`` would write it."""
    return TICKET_PREFIX + base64.urlsafe_b64encode(message.SerializeToString()).decode().rstrip(
        "="
    )


def refused(text: str) -> str:
    with pytest.raises(InvalidTicketError) as caught:
        RegisterTicket.decode(text)
    return str(caught.value)


def test_a_ticket_round_trips(ca: x509.Certificate) -> None:
    ticket = RegisterTicket(b"\x00\x01secret ticket\xff", ca)
    text = ticket.encode()
    assert text.startswith("rs1-")
    assert "=" not in text  # no padding: copies cleanly from a terminal
    assert set(text[4:]) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")

    decoded = RegisterTicket.decode(text)
    assert decoded.ticket == ticket.ticket
    assert certificate_to_pem(decoded.ca_certificate) == certificate_to_pem(ca)
    assert decoded == ticket


def test_surrounding_whitespace_of_a_copy_is_ignored(ca: x509.Certificate) -> None:
    ticket = RegisterTicket(b"secret", ca)
    assert RegisterTicket.decode(f"  {ticket.encode()}\n") == ticket


def test_the_message_form_round_trips(ca: x509.Certificate) -> None:
    """A pending registration saves the message form, and resumes from it."""
    ticket = RegisterTicket(b"secret", ca)
    message = ticket.to_proto()
    assert message.ticket == b"secret"
    assert message.ca_certificate == ca.public_bytes(Encoding.DER)
    assert RegisterTicket.from_proto(message) == ticket


@pytest.mark.parametrize("text", ["", "secret", "rs2-AAAA", "RS1-AAAA", "https://example.com"])
def test_a_string_without_the_prefix(text: str) -> None:
    assert refused(text) == (
        "a register ticket starts with 'rs1-'; get one with `roleserve ctl ticket`"
    )


@pytest.mark.parametrize("cut", [1, 2, 3, 100])
def test_a_truncated_copy_is_damaged(ca: x509.Certificate, cut: int) -> None:
    text = RegisterTicket(b"secret", ca).encode()
    assert refused(text[:-cut]) == (
        "the register ticket is damaged (not base64url of a ticket); copy it again"
    )


def test_a_message_that_is_not_a_ticket_is_damaged() -> None:
    text = TICKET_PREFIX + base64.urlsafe_b64encode(b"\xff\xff\xff\xff").decode()
    assert "is damaged" in refused(text)


def test_a_message_without_ticket(ca: x509.Certificate) -> None:
    message = node_pb2.RegisterTicket(ca_certificate=ca.public_bytes(Encoding.DER))
    assert refused(encoded(message)) == "the register ticket is empty"
    assert refused(TICKET_PREFIX) == "the register ticket is empty"


def test_a_message_without_ca() -> None:
    message = node_pb2.RegisterTicket(ticket=b"secret")
    assert refused(encoded(message)).startswith("the ticket's cluster CA is unusable: ")


def test_a_ca_that_is_not_der() -> None:
    message = node_pb2.RegisterTicket(ticket=b"secret", ca_certificate=b"not a certificate")
    assert refused(encoded(message)).startswith("the ticket's cluster CA is unusable: ")


def test_a_ca_that_is_not_a_ca() -> None:
    """A node certificate where the CA belongs: a mix-up the node cannot connect with."""
    ca_key = generate_key()
    ca = create_ca(ca_key)
    node = issue_node_certificate(ca_key, ca, generate_key().public_key())
    message = node_pb2.RegisterTicket(
        ticket=b"secret", ca_certificate=node.public_bytes(Encoding.DER)
    )
    assert refused(encoded(message)) == (
        "the ticket's cluster CA is unusable: the CA certificate is not a CA "
        "(BasicConstraints CA:TRUE missing)"
    )
