"""What the curator refuses from nodes: addresses, labels, cluster networking."""

from __future__ import annotations

import base64
import ipaddress
from collections.abc import Callable

import grpc
import pytest

from roleserve_controlplane.curator.errors import RefusedError
from roleserve_controlplane.curator.roles import check_changes
from roleserve_controlplane.curator.validation import (
    MAX_LABELS,
    check_address,
    check_clusternet,
    check_labels,
    check_node_id,
    check_status,
)
from roleserve_controlplane.proto import state_pb2
from roleserve_core import RequestLimitError, common_pb2, curator_pb2, management_pb2
from roleserve_core.limits import (
    ETCD_MAX_REQUEST_BYTES,
    MAX_CUSTOM_ROLES,
    MAX_HANDLED_CUSTOM_ROLES,
    MAX_KEY_BYTES,
    MAX_LABEL_LENGTH,
    MAX_PLUGIN_ERROR_LENGTH,
    MAX_PLUGIN_NAME_LENGTH,
    MAX_PLUGINS,
    MAX_PREFIXES,
    MAX_REQUEST_BYTES,
    MAX_ROLE_CHANGES,
    MAX_ROLE_PARAMETER_VALUE_LENGTH,
    MAX_ROLE_PARAMETERS,
    MAX_TICKET_BYTES,
    MAX_VERSION_LENGTH,
)

INVALID = grpc.StatusCode.INVALID_ARGUMENT
KEY = base64.b64encode(bytes(range(32))).decode()
OTHER_KEY = base64.b64encode(bytes(range(1, 33))).decode()
OWN_V4 = "192.0.2.7"
OWN_V6 = "2001:db8::7"


def _refused(check: Callable[[], object], code: grpc.StatusCode, *words: str) -> None:
    """``check()`` refuses with ``code``, in a message containing each of ``words``."""
    with pytest.raises(RefusedError) as caught:
        check()
    assert caught.value.code == code
    for word in words:
        assert word in str(caught.value)


def _refused_or_beyond(check: Callable[[], object], *words: str) -> None:
    """``check()`` refuses as INVALID_ARGUMENT (a RefusedError, or a RequestLimitError,
    which the services answer so), in a message containing each of ``words``."""
    with pytest.raises((RefusedError, RequestLimitError)) as caught:
        check()
    if isinstance(caught.value, RefusedError):
        assert caught.value.code == INVALID
    for word in words:
        assert word in str(caught.value)


# -- addresses -----------------------------------------------------------------------


@pytest.mark.parametrize("text", ["192.0.2.7", "2001:db8::7", "::1"])
def test_an_ip_address_is_a_valid_external_address(text: str) -> None:
    assert check_address(text) == ipaddress.ip_address(text)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "not an IP address"),
        ("node.example", "not an IP address"),
        ("192.0.2.7/32", "not an IP address"),
        ("192.0.2.256", "not an IP address"),
        (" 192.0.2.7", "not an IP address"),
        ("fe80::1%eth0", "has a zone"),
    ],
)
def test_anything_but_a_plain_ip_address_is_refused(text: str, reason: str) -> None:
    _refused(lambda: check_address(text), INVALID, repr(text), reason)


# -- labels --------------------------------------------------------------------------


def _labels(*pairs: tuple[str, str]) -> common_pb2.NodeLabels:
    labels = common_pb2.NodeLabels()
    for key, value in pairs:
        labels.pairs.add(key=key, value=value)
    return labels


def _many(count: int) -> common_pb2.NodeLabels:
    return _labels(*((f"key-{i}", f"value-{i}") for i in range(count)))


@pytest.mark.parametrize(
    "labels",
    [
        _labels(),
        _labels(("a", "b"), ("zone.x_y-z", "Z0-9_.")),
        _labels(("9lives", "0"), ("k" * 63, "v" * 63)),
        _many(MAX_LABELS),
    ],
    ids=["none", "characters", "lengths-1-and-63", "128-labels"],
)
def test_labels_within_the_limits_are_accepted(labels: common_pb2.NodeLabels) -> None:
    check_labels(labels)


@pytest.mark.parametrize(
    ("labels", "words"),
    [
        (_many(MAX_LABELS + 1), ["129 labels", "at most 128"]),
        (_labels(("k" * 64, "v")), ["label key", "k" * 64, "1–63"]),
        (_labels(("k", "v" * 64)), ["label value", "v" * 64]),
        (_labels(("", "v")), ["label key ''"]),
        (_labels(("k", "")), ["label value ''"]),
        (_labels(("-k", "v")), ["'-k'", "starting with a letter or digit"]),
        (_labels(("k", ".v")), ["'.v'"]),
        (_labels(("k/x", "v")), ["'k/x'"]),
        (_labels(("k", "v w")), ["'v w'"]),
        (_labels(("k", "é")), ["'é'"]),
        (_labels(("k", "v\n")), ["'v\\n'"]),
        (_labels(("k", "1"), ("other", "2"), ("k", "3")), ["'k' is given twice"]),
    ],
    ids=[
        "129-labels",
        "key-64",
        "value-64",
        "empty-key",
        "empty-value",
        "leading-dash",
        "leading-dot",
        "slash",
        "space",
        "non-ascii",
        "trailing-newline",
        "duplicate-key",
    ],
)
def test_labels_beyond_the_limits_are_refused(
    labels: common_pb2.NodeLabels, words: list[str]
) -> None:
    _refused(lambda: check_labels(labels), INVALID, *words)


# -- cluster networking --------------------------------------------------------------


def _clusternet(*prefixes: str, key: str = KEY) -> common_pb2.NodeClusterNetworking:
    return common_pb2.NodeClusterNetworking(wireguard_pubkey=key, prefixes=prefixes)


@pytest.mark.parametrize(
    ("own", "prefixes"),
    [
        (OWN_V4, []),
        (OWN_V4, ["10.192.0.0/11", "10.192.4.0/24", "10.223.255.255/32"]),
        (OWN_V4, [f"{OWN_V4}/32", "10.200.0.0/16"]),
        (OWN_V6, [f"{OWN_V6}/128"]),
    ],
    ids=["no-prefixes", "inside-the-cluster-network", "own-v4-address", "own-v6-address"],
)
def test_a_fresh_key_and_allowed_prefixes_are_accepted(own: str, prefixes: list[str]) -> None:
    check_clusternet(_clusternet(*prefixes), own, {OTHER_KEY})


@pytest.mark.parametrize(
    "key",
    [
        "",
        "not base64!",
        base64.b64encode(bytes(31)).decode(),
        base64.b64encode(bytes(33)).decode(),
        KEY.rstrip("="),  # unpadded
        KEY[:-2] + "B=",  # the same 32 bytes, with a spare bit set
    ],
    ids=["empty", "not-base64", "31-bytes", "33-bytes", "unpadded", "non-canonical"],
)
def test_a_wireguard_key_must_be_canonical_base64_of_32_bytes(key: str) -> None:
    _refused(lambda: check_clusternet(_clusternet(key=key), OWN_V4, set()), INVALID, "base64")


def test_another_nodes_wireguard_key_is_refused_as_existing() -> None:
    _refused(
        lambda: check_clusternet(_clusternet(), OWN_V4, {OTHER_KEY, KEY}),
        grpc.StatusCode.ALREADY_EXISTS,
        "another node already uses this WireGuard key",
    )


@pytest.mark.parametrize(
    ("own", "prefix", "reason"),
    [
        (OWN_V4, "10.192.0.1/11", "not in canonical CIDR form"),
        (OWN_V4, "10.192.0.1", "not in canonical form"),
        (OWN_V4, "10.192.0.0/255.224.0.0", "not in canonical form"),
        (OWN_V6, "2001:DB8::7/128", "not in canonical form"),
        (OWN_V4, "", "not in canonical CIDR form"),
        (OWN_V4, "10.128.0.0/10", "neither inside 10.192.0.0/11"),
        (OWN_V4, "10.224.0.0/16", "neither inside"),
        (OWN_V4, "192.0.2.8/32", "nor this node's own address"),
        (OWN_V4, "192.0.2.0/24", "neither inside"),
        (OWN_V6, "2001:db8::8/128", "neither inside"),
        ("", "192.0.2.7/32", "neither inside"),
    ],
    ids=[
        "host-bits",
        "no-length",
        "netmask",
        "upper-case-v6",
        "empty",
        "wider-than-the-network",
        "outside-the-network",
        "another-nodes-32",
        "own-address-network",
        "another-nodes-128",
        "no-own-address",
    ],
)
def test_prefixes_outside_what_a_node_may_announce_are_refused(
    own: str, prefix: str, reason: str
) -> None:
    clusternet = _clusternet("10.192.0.0/16", prefix)
    _refused(lambda: check_clusternet(clusternet, own, set()), INVALID, prefix, reason)


# -- cluster networking with allocated prefixes ----------------------------------------

ALLOCATED = {"10.192.0.0/24": "node-a", "10.192.1.0/24": "node-own", "10.192.2.0/24": "node-b"}


def _check_allocated(*prefixes: str, own: str = OWN_V4, network: str = "10.192.0.0/11") -> None:
    check_clusternet(
        _clusternet(*prefixes),
        own,
        set(),
        network=ipaddress.ip_network(network),
        own_prefix="10.192.1.0/24" if network == "10.192.0.0/11" else "",
        allocated=ALLOCATED,
    )


def test_prefixes_inside_the_nodes_own_or_clear_of_others_are_accepted() -> None:
    _check_allocated("10.192.1.0/24", "10.192.1.7/32", "10.192.1.128/25", f"{OWN_V4}/32")
    _check_allocated("10.192.3.0/24", "10.200.0.0/16")  # in the network, nobody's prefix


@pytest.mark.parametrize(
    ("prefix", "words"),
    [
        ("10.192.0.0/24", ["overlaps 10.192.0.0/24, the prefix of node node-a"]),
        ("10.192.2.128/25", ["overlaps 10.192.2.0/24, the prefix of node node-b"]),
        ("10.192.0.0/16", ["overlaps 10.192.0.0/24"]),
        ("10.192.0.0/11", ["overlaps"]),
    ],
    ids=["another-nodes", "inside-another-nodes", "covering-others", "the-whole-network"],
)
def test_prefixes_overlapping_another_nodes_prefix_are_refused(
    prefix: str, words: list[str]
) -> None:
    _refused(lambda: _check_allocated(prefix), INVALID, prefix, *words)


def test_the_configured_network_replaces_the_default() -> None:
    _check_allocated("fd00:10:0:5::/64", own=OWN_V6, network="fd00:10::/48")
    _refused(
        lambda: _check_allocated("10.192.3.0/24", network="fd00:10::/48"),
        INVALID,
        "neither inside fd00:10::/48",
    )


# -- request limits (roleserve_core.limits) --------------------------------------------


def test_a_refusal_quotes_a_long_text_cut_short() -> None:
    """A refusal travels in gRPC trailers, which clients take up to 8 KiB of: a refused
    100 000-character address used to be quoted whole."""
    with pytest.raises(RefusedError) as caught:
        check_address("1" * 100_000)
    assert len(str(caught.value)) < 200
    assert "(100000 characters)" in str(caught.value)


@pytest.mark.parametrize(
    ("status", "words"),
    [
        (
            common_pb2.NodeStatus(external_address="192.0.2.7", version="v" * 65),
            ["version", "65", "at most 64"],
        ),
        (
            common_pb2.NodeStatus(external_address="192.0.2.7", boot_id=b"\x01" * 17),
            ["boot_id", "17 bytes"],
        ),
        (
            common_pb2.NodeStatus(
                external_address="192.0.2.7",
                running_curator=common_pb2.NodeStatus.RunningCurator(port=-1),
            ),
            ["running_curator.port -1"],
        ),
        (
            common_pb2.NodeStatus(external_address="192.0.2.7", handled_custom_roles=["gpu"] * 65),
            ["handled_custom_roles", "65 entries", "at most 64"],
        ),
        (
            common_pb2.NodeStatus(external_address="192.0.2.7", handled_custom_roles=["GPU"]),
            ["'GPU' is not a custom role name"],
        ),
        (common_pb2.NodeStatus(external_address="x"), ["not an IP address"]),
        (
            common_pb2.NodeStatus(
                external_address="192.0.2.7",
                plugins=[common_pb2.PluginStatus(name="p")] * (MAX_PLUGINS + 1),
            ),
            ["plugins", f"{MAX_PLUGINS + 1} entries", f"at most {MAX_PLUGINS}"],
        ),
        (
            common_pb2.NodeStatus(
                external_address="192.0.2.7",
                plugins=[common_pb2.PluginStatus(name="p", error="e" * 257)],
            ),
            ["plugins[0].error", "257 characters", "at most 256"],
        ),
        (
            common_pb2.NodeStatus(
                external_address="192.0.2.7", plugins=[common_pb2.PluginStatus(name="n" * 65)]
            ),
            ["plugins[0].name", "65 characters", "at most 64"],
        ),
    ],
    ids=[
        "version",
        "boot-id",
        "port",
        "many-roles",
        "role-name",
        "address",
        "many-plugins",
        "plugin-error",
        "plugin-name",
    ],
)
def test_a_status_beyond_the_limits_is_refused(
    status: common_pb2.NodeStatus, words: list[str]
) -> None:
    _refused_or_beyond(lambda: check_status(status), *words)


def test_a_status_within_the_limits_is_accepted() -> None:
    check_status(
        common_pb2.NodeStatus(
            external_address="2001:db8::7",
            running_curator=common_pb2.NodeStatus.RunningCurator(port=7835),
            version="v" * 64,
            boot_id=b"\x01" * 16,
            handled_custom_roles=[f"role-{i}" for i in range(64)],
            plugins=[
                common_pb2.PluginStatus(
                    name="p" * 64, version="v" * 64, state="failed", error="e" * 256
                )
            ]
            * MAX_PLUGINS,
        )
    )


@pytest.mark.parametrize(
    ("node_id", "words"),
    [("", ["node_id is empty"]), ("n" * 65, ["node_id is 65 characters long", "at most 64"])],
    ids=["empty", "long"],
)
def test_a_node_id_beyond_the_limits_is_refused(node_id: str, words: list[str]) -> None:
    _refused_or_beyond(lambda: check_node_id(node_id), *words)


def test_too_many_prefixes_are_refused() -> None:
    prefixes = [f"10.192.{i}.0/24" for i in range(MAX_PREFIXES + 1)]
    _refused_or_beyond(
        lambda: check_clusternet(_clusternet(*prefixes), OWN_V4, set()), "prefixes has 65 entries"
    )


def _change(role: str, **parameters: str) -> management_pb2.UpdateNodeRolesRequest.Change:
    return management_pb2.UpdateNodeRolesRequest.Change(
        role=role, assign=True, parameters=parameters
    )


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ([_change("custom:x")] * 17, ["changes has 17 entries", "at most 16"]),
        ([_change("custom:" + "x" * 100)], ["role is 107 characters long", "at most 70"]),
        ([_change("x" * 70)], ["unknown role 'xxxx"]),
        (
            [_change("custom:x", **{f"k{i}": "v" for i in range(17)})],
            ["parameters of custom:x", "17 entries"],
        ),
        ([_change("custom:x", **{"k" * 64: "v"})], ["key is 64 characters long"]),
        ([_change("custom:x", **{"": "v"})], ["a key is empty"]),
        (
            [_change("custom:x", k="v" * 257)],
            ["value of 'k' is 257 characters long", "at most 256"],
        ),
    ],
    ids=["changes", "role", "unknown-role", "parameters", "key", "empty-key", "value"],
)
def test_role_changes_beyond_the_limits_are_refused(
    changes: list[management_pb2.UpdateNodeRolesRequest.Change], words: list[str]
) -> None:
    _refused_or_beyond(lambda: check_changes(changes), *words)


def test_role_changes_at_the_limits_are_accepted() -> None:
    parameters = {f"{i:02d}" + "k" * 61: "v" * MAX_ROLE_PARAMETER_VALUE_LENGTH for i in range(16)}
    check_changes([_change(f"custom:r{i}", **parameters) for i in range(MAX_ROLE_CHANGES)])


def _widest_plugin() -> common_pb2.PluginStatus:
    wide = "\U0010ffff"  # four bytes of UTF-8
    return common_pb2.PluginStatus(
        name=wide * MAX_PLUGIN_NAME_LENGTH,
        version=wide * MAX_VERSION_LENGTH,
        state=wide * MAX_PLUGIN_NAME_LENGTH,
        error=wide * MAX_PLUGIN_ERROR_LENGTH,
    )


def test_the_largest_node_record_fits_one_etcd_request() -> None:
    """Every limit at once, in the widest characters: a node's record (and so every write of
    it) stays below etcd's request limit, whatever callers send."""
    wide = "\U0010ffff"  # four bytes of UTF-8
    record = state_pb2.NodeRecord(id="node-" + "0" * 32, labels=_many(MAX_LABELS))
    for pair in record.labels.pairs:
        pair.key, pair.value = "k" * MAX_LABEL_LENGTH, "v" * MAX_LABEL_LENGTH
    for index in range(MAX_CUSTOM_ROLES):
        custom = record.roles.custom[f"{index:02d}" + "r" * 61].parameters
        for key in range(MAX_ROLE_PARAMETERS):
            custom[f"{key:02d}" + wide * 61] = wide * MAX_ROLE_PARAMETER_VALUE_LENGTH
    record.status.CopyFrom(
        common_pb2.NodeStatus(
            external_address="ffff:" * 7 + "ffff",
            version=wide * MAX_VERSION_LENGTH,
            boot_id=b"\xff" * 16,
            handled_custom_roles=["r" * 63] * MAX_HANDLED_CUSTOM_ROLES,
            plugins=[_widest_plugin()] * MAX_PLUGINS,
        )
    )
    record.clusternet.prefixes.extend(["ffff:" * 7 + "ffff/128"] * MAX_PREFIXES)
    record.certificate = b"c" * 4096
    assert record.ByteSize() < ETCD_MAX_REQUEST_BYTES // 2


def test_the_largest_valid_requests_fit_the_request_limit() -> None:
    wide = "\U0010ffff"  # four bytes of UTF-8
    parameters = {f"{i:02d}" + wide * 61: wide * MAX_ROLE_PARAMETER_VALUE_LENGTH for i in range(16)}
    changes = [_change("custom:" + f"{i:02d}" + "r" * 61, **parameters) for i in range(16)]
    check_changes(changes)
    roles = management_pb2.UpdateNodeRolesRequest(node_id="n" * 64, changes=changes)
    labels = _labels(*(((f"{i:03d}" + "k" * 60), "v" * 63) for i in range(MAX_LABELS)))
    check_labels(labels)
    register = curator_pb2.RegisterNodeRequest(
        register_ticket=b"t" * MAX_TICKET_BYTES, join_key=b"k" * MAX_KEY_BYTES, labels=labels
    )
    for request in (roles, register):
        assert request.ByteSize() < MAX_REQUEST_BYTES // 2
