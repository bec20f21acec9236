"""etcd's log lines as the node logs them (issue 28): the warnings of normal operation at
DEBUG, every other warning and error at its level."""

from __future__ import annotations

import json
import logging

import pytest

from roleserve_controlplane.consensus.etcdlog import HARMLESS_ETCD_WARNINGS, parse_etcd_log


def zap(level: str, msg: str, **fields: object) -> str:
    """A line as etcd writes it with ``--logger=zap``."""
    return json.dumps(
        {"level": level, "ts": "2026-12-04T20:00:00Z", "caller": "x.go:1", "msg": msg, **fields}
    )


MEMBER_ADD = (
    "rejecting member add request; local member has not been connected to all peers, "
    "reconfigure breaks active quorum"
)


@pytest.mark.parametrize(
    ("line", "level", "message"),
    [
        # The one seen 21 times in a node.log: DEBUG, its fields kept.
        (
            zap("warn", MEMBER_ADD, **{"local-member-id": "8e9e05c52164694d"}),
            logging.DEBUG,
            f"{MEMBER_ADD} local-member-id=8e9e05c52164694d",
        ),
        (
            zap("warn", "simple token is not cryptographically signed"),
            logging.DEBUG,
            "simple token is not cryptographically signed",
        ),
        # Other warnings stay warnings, a listed message's look-alikes too.
        (
            zap("warn", "peer became inactive (message send to peer failed)", peer="a"),
            logging.WARNING,
            "peer became inactive (message send to peer failed) peer=a",
        ),
        (
            zap("warn", "rejecting member promote request; not enough healthy members"),
            logging.WARNING,
            "rejecting member promote request; not enough healthy members",
        ),
        (
            zap("warn", MEMBER_ADD + " and more"),
            logging.WARNING,
            MEMBER_ADD + " and more",
        ),
        (
            zap("warn", "slow fdatasync", took="1.2s", detail=MEMBER_ADD),
            logging.WARNING,
            f"slow fdatasync took=1.2s detail={MEMBER_ADD}",
        ),
        # etcd's errors and panics stay, even with a listed message.
        (zap("error", MEMBER_ADD), logging.ERROR, MEMBER_ADD),
        (
            zap("panic", "tocommit(180) is out of range [lastIndex(0)]"),
            logging.CRITICAL,
            "tocommit(180) is out of range [lastIndex(0)]",
        ),
        ("panic: cannot use none as id", logging.CRITICAL, "panic: cannot use none as id"),
        # Info stays at DEBUG, as before.
        (
            zap("info", "serving client traffic securely"),
            logging.DEBUG,
            "serving client traffic securely",
        ),
    ],
)
def test_etcd_lines_are_logged_at_their_level(line: str, level: int, message: str) -> None:
    assert parse_etcd_log(line) == (level, message)


def test_the_list_is_small_and_named_by_etcd_messages() -> None:
    assert len(HARMLESS_ETCD_WARNINGS) <= 5
    assert len(set(HARMLESS_ETCD_WARNINGS)) == len(HARMLESS_ETCD_WARNINGS)
    assert all(message == message.strip() and message for message in HARMLESS_ETCD_WARNINGS)
