"""Choosing the enrolment path: every row of the table in ``enrolment.plan``.

::

    node/credentials exists ─────────────▶ join      (flags refused: already enrolled)
    node/bootstrapping exists ───────────▶ bootstrap (resumed; --register refused)
    node/registration.pb exists ─────────▶ register  (resumed; a new --register replaces it)
    --bootstrap ─────────────────────────▶ bootstrap (marker written first)
    --register TICKET --join-address A ──▶ register  (registration.pb written first)
    nothing ─────────────────────────────▶ error: say which flags start a node

Besides the path, what matters is the disk: a plan writes what a later start without flags
resumes from, and a refused plan writes nothing at all.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from roleserve_core.datadir import NodeDataDirectory
from roleserve_core.enrolment.plan import (
    BootstrapPlan,
    EnrolmentRequest,
    JoinPlan,
    RegisterPlan,
    plan_enrolment,
)
from roleserve_core.enrolment.ticket import RegisterTicket
from roleserve_core.errors import ConfigError, DataDirectoryError, EnrolmentError
from roleserve_core.proto import node_pb2
from roleserve_core.testing import ThrowawayCA


@pytest.fixture
def ca() -> ThrowawayCA:
    return ThrowawayCA()


@pytest.fixture
def datadir(tmp_path: Path) -> NodeDataDirectory:
    return NodeDataDirectory(tmp_path / "node1")


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where the default owner directory goes: never the real home of whoever runs this."""
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    return home


def plan(
    datadir: NodeDataDirectory, *, can_bootstrap: bool = True, **request: Any
) -> JoinPlan | BootstrapPlan | RegisterPlan:
    return plan_enrolment(datadir, EnrolmentRequest(**request), can_bootstrap=can_bootstrap)


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root`` (the data directory and the home), with file contents."""
    return {
        str(path.relative_to(root)): path.read_bytes() if path.is_file() else None
        for path in sorted(root.rglob("*"))
    }


def refusal(kind: type[Exception], datadir: NodeDataDirectory, **request: Any) -> str:
    """Plan, expect ``kind``, check that nothing on disk changed; the message."""
    root = datadir.root.parent
    before = snapshot(root)
    with pytest.raises(kind) as caught:
        plan(datadir, **request)
    assert snapshot(root) == before, "a refused plan wrote something"
    return str(caught.value)


def enrolled(datadir: NodeDataDirectory) -> None:
    datadir.create()
    datadir.credentials.mkdir()


def bootstrapping(datadir: NodeDataDirectory, owner: Path) -> None:
    datadir.create()
    datadir.bootstrapping.write_text(f"{owner}\n")


def registering(
    datadir: NodeDataDirectory, ca: ThrowawayCA, *addresses: str
) -> node_pb2.PendingRegistration:
    pending = node_pb2.PendingRegistration(
        ticket=RegisterTicket.decode(ca.ticket()).to_proto(),
        join_addresses=list(addresses) or ["10.0.0.1:7835"],
        registered=True,
    )
    datadir.create()
    datadir.write_message(datadir.registration, pending)
    return pending


# -- options that contradict each other -------------------------------------------------


@pytest.mark.parametrize(
    ("request_", "expected"),
    [
        (
            {"bootstrap": True, "ticket": "rs1-x", "join_addresses": ("10.0.0.1",)},
            "give either --bootstrap or --register, not both",
        ),
        ({"ticket": "rs1-x"}, "--register needs at least one --join-address HOST[:PORT]"),
        (
            {"join_addresses": ("10.0.0.1",)},
            "--join-address is for --register (or --register-file, $ROLESERVE_REGISTER_TICKET)",
        ),
        ({"owner_credentials": Path("/tmp/owner")}, "--owner-credentials is for --bootstrap"),
        (
            {"owner_credentials": Path("/tmp/owner"), "ticket": "rs1-x", "join_addresses": ("a",)},
            "--owner-credentials is for --bootstrap",
        ),
    ],
)
def test_contradictory_options(
    datadir: NodeDataDirectory, request_: dict[str, object], expected: str
) -> None:
    assert refusal(ConfigError, datadir, **request_) == expected


def test_options_are_checked_before_the_directory(datadir: NodeDataDirectory) -> None:
    """Even an enrolled node says what is wrong with the options first."""
    enrolled(datadir)
    assert refusal(ConfigError, datadir, ticket="rs1-x") == (
        "--register needs at least one --join-address HOST[:PORT]"
    )


# -- nothing asked, nothing there -------------------------------------------------------


def test_nothing_at_all_says_which_flags_start_a_node(datadir: NodeDataDirectory) -> None:
    message = refusal(EnrolmentError, datadir)
    assert message == (
        f"{datadir.root} holds no cluster membership; start with --bootstrap to create a "
        "cluster, or with a ticket (--register-file PATH, $ROLESERVE_REGISTER_TICKET or "
        "--register TICKET) and --join-address HOST to join one"
    )
    assert not datadir.root.exists()


# -- join -------------------------------------------------------------------------------


def test_an_enrolled_node_joins(datadir: NodeDataDirectory) -> None:
    enrolled(datadir)
    assert plan(datadir) == JoinPlan()
    assert plan(datadir, can_bootstrap=False) == JoinPlan()


def test_an_enrolled_node_that_crashed_before_cleaning_up_joins(
    datadir: NodeDataDirectory, ca: ThrowawayCA, tmp_path: Path
) -> None:
    """The credentials are written last: once they exist, leftovers do not matter."""
    bootstrapping(datadir, tmp_path / "owner")
    registering(datadir, ca)
    enrolled(datadir)
    assert plan(datadir) == JoinPlan()


@pytest.mark.parametrize(
    ("flag", "request_"),
    [
        ("--bootstrap", {"bootstrap": True}),
        ("--register", {"ticket": "rs1-x", "join_addresses": ("10.0.0.1",)}),
        (
            "--register-file /etc/ticket",
            {
                "ticket": "rs1-x",
                "ticket_source": "--register-file /etc/ticket",
                "join_addresses": ("10.0.0.1",),
            },
        ),
    ],
)
def test_an_enrolled_node_refuses_a_flag(
    datadir: NodeDataDirectory, flag: str, request_: dict[str, object]
) -> None:
    enrolled(datadir)
    assert refusal(EnrolmentError, datadir, **request_) == (
        f"{datadir.root} already belongs to a cluster; start the node without {flag}: it "
        "rejoins with its saved credentials"
    )


# -- bootstrap --------------------------------------------------------------------------


def test_bootstrap_writes_the_marker_first_and_a_later_start_resumes_it(
    datadir: NodeDataDirectory, tmp_path: Path
) -> None:
    owner = tmp_path / "owner"
    assert plan(datadir, bootstrap=True, owner_credentials=owner) == BootstrapPlan(owner)
    assert datadir.bootstrapping.read_text() == f"{owner}\n"
    assert not owner.exists()  # the bootstrap writes it, once the cluster exists

    assert plan(datadir) == BootstrapPlan(owner)
    assert plan(datadir, bootstrap=True) == BootstrapPlan(owner)


def test_bootstrap_writes_the_owner_to_the_default_directory(
    datadir: NodeDataDirectory, home: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert plan(datadir, bootstrap=True) == BootstrapPlan(home / ".config/roleserve/owner")
    datadir.bootstrapping.unlink()

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert plan(datadir, bootstrap=True) == BootstrapPlan(tmp_path / "xdg/roleserve/owner")


def test_bootstrap_saves_the_owner_directory_absolute(
    datadir: NodeDataDirectory, home: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A later start may run from another directory: the marker holds an absolute path."""
    monkeypatch.chdir(tmp_path)
    assert plan(datadir, bootstrap=True, owner_credentials=Path("owner")) == BootstrapPlan(
        tmp_path / "owner"
    )
    assert datadir.bootstrapping.read_text() == f"{tmp_path / 'owner'}\n"
    datadir.bootstrapping.unlink()
    assert plan(datadir, bootstrap=True, owner_credentials=Path("~/owner")) == BootstrapPlan(
        home / "owner"
    )


def test_bootstrap_needs_the_controlplane_plugin(datadir: NodeDataDirectory) -> None:
    message = refusal(EnrolmentError, datadir, bootstrap=True, can_bootstrap=False)
    assert message == (
        "bootstrapping a cluster needs the controlplane plugin "
        "(pip install roleserve-controlplane), and it is not loaded"
    )


def test_resuming_a_bootstrap_needs_the_controlplane_plugin(
    datadir: NodeDataDirectory, tmp_path: Path
) -> None:
    bootstrapping(datadir, tmp_path / "owner")
    assert "needs the controlplane plugin" in refusal(EnrolmentError, datadir, can_bootstrap=False)


def test_bootstrap_refuses_an_owner_directory_that_holds_credentials(
    datadir: NodeDataDirectory, ca: ThrowawayCA, tmp_path: Path
) -> None:
    """Another cluster's owner credentials would be lost: the only way to manage it."""
    owner = tmp_path / "owner"
    ca.user().save(owner)
    message = refusal(EnrolmentError, datadir, bootstrap=True, owner_credentials=owner)
    assert message == (
        f"{owner} already holds cluster credentials; move them away, or pass "
        "--owner-credentials DIR to write this cluster's owner credentials elsewhere"
    )
    assert not datadir.root.exists()


def test_bootstrap_refuses_a_default_owner_directory_that_holds_credentials(
    datadir: NodeDataDirectory, ca: ThrowawayCA, home: Path
) -> None:
    ca.user().save(home / ".config/roleserve/owner")
    assert "--owner-credentials DIR" in refusal(EnrolmentError, datadir, bootstrap=True)


def test_a_bootstrapping_directory_refuses_register(
    datadir: NodeDataDirectory, ca: ThrowawayCA, tmp_path: Path
) -> None:
    bootstrapping(datadir, tmp_path / "owner")
    message = refusal(EnrolmentError, datadir, ticket=ca.ticket(), join_addresses=("10.0.0.1",))
    assert message == (
        f"{datadir.root} is bootstrapping a new cluster; start it without --register to "
        "finish, or use another data directory"
    )


# -- register ---------------------------------------------------------------------------


def test_register_writes_the_registration_first_and_a_later_start_resumes_it(
    datadir: NodeDataDirectory, ca: ThrowawayCA
) -> None:
    ticket = ca.ticket()
    made = plan(
        datadir,
        ticket=ticket,
        join_addresses=("10.0.0.1", "10.0.0.2:7000", "2001:db8::1", "[2001:db8::2]:7001"),
        can_bootstrap=False,  # registering needs no controlplane plugin
    )
    expected = node_pb2.PendingRegistration(
        ticket=RegisterTicket.decode(ticket).to_proto(),
        join_addresses=[
            "10.0.0.1:7835",
            "10.0.0.2:7000",
            "[2001:db8::1]:7835",
            "[2001:db8::2]:7001",
        ],
    )
    assert made == RegisterPlan(expected)
    saved = node_pb2.PendingRegistration()
    assert datadir.read_message(datadir.registration, saved)
    assert saved == expected

    assert plan(datadir) == RegisterPlan(expected)


def test_a_resumed_registration_keeps_its_progress(
    datadir: NodeDataDirectory, ca: ThrowawayCA
) -> None:
    pending = registering(datadir, ca, "10.0.0.9:7835")
    assert plan(datadir) == RegisterPlan(pending)
    assert plan(datadir).pending.registered is True  # type: ignore[union-attr]


def test_a_new_register_replaces_a_pending_registration(
    datadir: NodeDataDirectory, ca: ThrowawayCA
) -> None:
    registering(datadir, ca, "10.0.0.9:7835")
    other = ThrowawayCA()
    made = plan(datadir, ticket=other.ticket(b"new"), join_addresses=("10.0.0.1",))
    expected = node_pb2.PendingRegistration(
        ticket=RegisterTicket.decode(other.ticket(b"new")).to_proto(),
        join_addresses=["10.0.0.1:7835"],
    )
    assert made == RegisterPlan(expected)
    assert isinstance(made, RegisterPlan)
    assert made.pending.registered is False
    assert plan(datadir) == RegisterPlan(expected)


def test_a_registering_directory_refuses_bootstrap(
    datadir: NodeDataDirectory, ca: ThrowawayCA
) -> None:
    registering(datadir, ca)
    assert refusal(EnrolmentError, datadir, bootstrap=True) == (
        f"{datadir.root} is registering with a cluster; it cannot bootstrap one"
    )


def test_a_damaged_ticket_is_refused(datadir: NodeDataDirectory, ca: ThrowawayCA) -> None:
    message = refusal(ConfigError, datadir, ticket=ca.ticket()[:-2], join_addresses=("10.0.0.1",))
    assert message.startswith("--register: the register ticket is damaged")


def test_a_damaged_ticket_is_named_by_where_it_came_from(
    datadir: NodeDataDirectory, ca: ThrowawayCA
) -> None:
    source = "$ROLESERVE_REGISTER_TICKET"
    message = refusal(
        ConfigError, datadir, ticket="x", ticket_source=source, join_addresses=("10.0.0.1",)
    )
    assert message.startswith(f"{source}: a register ticket starts with 'rs1-'")


def test_a_damaged_ticket_leaves_a_pending_registration_alone(
    datadir: NodeDataDirectory, ca: ThrowawayCA
) -> None:
    registering(datadir, ca)
    message = refusal(ConfigError, datadir, ticket="nonsense", join_addresses=("10.0.0.1",))
    assert message.startswith("--register: a register ticket starts with 'rs1-'")


@pytest.mark.parametrize("address", ["10.0.0.1:0", "10.0.0.1:http", "[2001:db8::1", ":7835"])
def test_a_bad_join_address_is_refused(
    datadir: NodeDataDirectory, ca: ThrowawayCA, address: str
) -> None:
    message = refusal(
        ConfigError, datadir, ticket=ca.ticket(), join_addresses=("10.0.0.1", address)
    )
    assert message.startswith(f"--join-address: {address!r} is not HOST[:PORT]")


def test_a_corrupt_registration_is_refused(datadir: NodeDataDirectory) -> None:
    datadir.create()
    datadir.registration.write_bytes(b"\x0a\x05ab")
    assert refusal(DataDirectoryError, datadir) == f"{datadir.registration} is corrupt"
