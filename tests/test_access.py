"""Access directories: what the bootstrap writes for the owner and ``ctl`` reads back.

The messages matter as much as the round trip: ``ctl`` prints them as they are, and an
operator who pointed at the wrong directory must learn which file is wrong and how to
point at another (``--credentials``, ``$ROLESERVE_CREDENTIALS``).
"""

from __future__ import annotations

import re
import stat
from pathlib import Path

import pytest

from roleserve_core.access import (
    CHECKED_FILE,
    CREDENTIALS_ENV,
    ENDPOINTS_FILE,
    ClusterAccess,
    default_access_directory,
    resolve_access_directory,
)
from roleserve_core.errors import CredentialsError
from roleserve_core.identity import (
    CA_FILE,
    CERTIFICATE_FILE,
    KEY_FILE,
    PemCredentials,
    UserCredentials,
    certificate_to_pem,
)
from roleserve_core.testing import ThrowawayCA

POINT_ELSEWHERE = f"pass --credentials DIR or set {CREDENTIALS_ENV} to another access directory"


@pytest.fixture(scope="module")
def owner() -> UserCredentials:
    return ThrowawayCA().user()


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def refused(directory: Path) -> str:
    with pytest.raises(CredentialsError) as caught:
        ClusterAccess.load(directory)
    return str(caught.value)


# -- save and load ------------------------------------------------------------------------


def test_an_access_directory_round_trips(tmp_path: Path, owner: UserCredentials) -> None:
    directory = tmp_path / "owner"
    access = ClusterAccess.of(owner, ["127.0.0.11:7835", "127.0.0.12"])
    access.save(directory)

    assert sorted(path.name for path in directory.iterdir()) == sorted(
        [CA_FILE, CERTIFICATE_FILE, KEY_FILE, ENDPOINTS_FILE]
    )
    assert mode(directory) == 0o700
    assert mode(directory / KEY_FILE) == 0o600
    assert mode(directory / ENDPOINTS_FILE) == 0o644
    assert (directory / ENDPOINTS_FILE).read_text() == "127.0.0.11:7835\n127.0.0.12:7835\n"

    loaded = ClusterAccess.load(directory)
    assert loaded.endpoints == ("127.0.0.11:7835", "127.0.0.12:7835")
    assert loaded.credentials.identity == "owner"
    assert loaded.credentials.certificate_pem == owner.certificate_pem
    assert certificate_to_pem(loaded.credentials.ca_certificate) == certificate_to_pem(
        owner.ca_certificate
    )


def test_saving_again_replaces_the_endpoints(tmp_path: Path, owner: UserCredentials) -> None:
    ClusterAccess.of(owner, ["127.0.0.11"]).save(tmp_path)
    ClusterAccess.of(owner, ["127.0.0.12", "127.0.0.13"]).save(tmp_path)
    assert ClusterAccess.load(tmp_path).endpoints == ("127.0.0.12:7835", "127.0.0.13:7835")


def test_endpoints_are_normalised(owner: UserCredentials) -> None:
    access = ClusterAccess.of(
        owner,
        [
            "10.0.0.1",  # the curator's standard port
            "10.0.0.1:7835",  # the same curator again
            " 10.0.0.2:7000 ",
            "2001:db8::1",  # IPv6 gets its brackets
            "[2001:db8::1]:7835",  # and is the same one again
            "[2001:db8::2]:7001",
            "curator.example.com",
        ],
    )
    assert access.endpoints == (
        "10.0.0.1:7835",
        "10.0.0.2:7000",
        "[2001:db8::1]:7835",
        "[2001:db8::2]:7001",
        "curator.example.com:7835",
    )


def test_the_endpoints_file_is_read_loosely(tmp_path: Path, owner: UserCredentials) -> None:
    """Blank lines, spaces and duplicates, as an operator's editor may leave them."""
    ClusterAccess.of(owner, ["127.0.0.11"]).save(tmp_path)
    (tmp_path / ENDPOINTS_FILE).write_text("\n  127.0.0.12 \n\n127.0.0.12:7835\n2001:db8::1")
    assert ClusterAccess.load(tmp_path).endpoints == ("127.0.0.12:7835", "[2001:db8::1]:7835")


@pytest.mark.parametrize("bad", ["10.0.0.1:0", "10.0.0.1:99999", "10.0.0.1:http", "[::1"])
def test_a_bad_endpoint_is_refused(owner: UserCredentials, bad: str) -> None:
    with pytest.raises(CredentialsError) as caught:
        ClusterAccess.of(owner, ["10.0.0.1", bad])
    assert str(caught.value).startswith(f"curator endpoint {bad!r} is not HOST[:PORT]")


def test_access_needs_an_endpoint(owner: UserCredentials) -> None:
    with pytest.raises(CredentialsError, match="at least one curator endpoint"):
        ClusterAccess.of(owner, [])


# -- what load refuses --------------------------------------------------------------------


def test_a_missing_directory(tmp_path: Path) -> None:
    nowhere = tmp_path / "nowhere"
    assert refused(nowhere) == (
        f"no cluster credentials at {nowhere}; pass --credentials DIR or set "
        f"{CREDENTIALS_ENV} to the directory the bootstrap printed"
    )


def test_a_missing_endpoints_file(tmp_path: Path, owner: UserCredentials) -> None:
    owner.save(tmp_path)
    assert refused(tmp_path) == f"{tmp_path / ENDPOINTS_FILE} is missing; {POINT_ELSEWHERE}"


def test_an_empty_endpoints_file(tmp_path: Path, owner: UserCredentials) -> None:
    owner.save(tmp_path)
    (tmp_path / ENDPOINTS_FILE).write_text("\n")
    assert refused(tmp_path) == (
        f"{tmp_path / ENDPOINTS_FILE} names no curator endpoint; {POINT_ELSEWHERE}"
    )


def test_an_endpoints_file_that_is_not_text(tmp_path: Path, owner: UserCredentials) -> None:
    owner.save(tmp_path)
    (tmp_path / ENDPOINTS_FILE).write_bytes(b"\xff\xfe")
    message = refused(tmp_path)
    assert message.startswith(f"{tmp_path / ENDPOINTS_FILE} cannot be read: ")
    assert message.endswith(POINT_ELSEWHERE)


def test_a_bad_endpoint_in_the_file(tmp_path: Path, owner: UserCredentials) -> None:
    ClusterAccess.of(owner, ["127.0.0.11"]).save(tmp_path)
    (tmp_path / ENDPOINTS_FILE).write_text("127.0.0.11\n127.0.0.12:port\n")
    message = refused(tmp_path)
    assert message.startswith(
        f"{tmp_path / ENDPOINTS_FILE}: curator endpoint '127.0.0.12:port' is not HOST[:PORT]"
    )
    assert message.endswith(POINT_ELSEWHERE)


def test_missing_credentials(tmp_path: Path, owner: UserCredentials) -> None:
    ClusterAccess.of(owner, ["127.0.0.11"]).save(tmp_path)
    (tmp_path / KEY_FILE).unlink()
    assert refused(tmp_path) == f"{tmp_path / KEY_FILE} is missing; {POINT_ELSEWHERE}"


def test_credentials_of_two_users(tmp_path: Path, owner: UserCredentials) -> None:
    ClusterAccess.of(owner, ["127.0.0.11"]).save(tmp_path)
    other = ThrowawayCA().user("other")
    (tmp_path / KEY_FILE).write_bytes(other.key_pem)
    message = refused(tmp_path)
    assert re.fullmatch(
        rf"{re.escape(str(tmp_path))}: the private key does not belong to the certificate; "
        + re.escape(POINT_ELSEWHERE),
        message,
    )


# -- checked once per content ------------------------------------------------------------


def test_a_load_records_its_check_and_the_next_load_trusts_it(
    tmp_path: Path, owner: UserCredentials, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first load checks and records it; a second load of the same content does not
    parse nor check (``ctl`` then needs no cryptography), and the credentials are still
    what the files hold, parsed when asked for."""
    ClusterAccess.of(owner, ["127.0.0.11"]).save(tmp_path)
    checks: list[object] = []
    check = UserCredentials.from_pem.__func__  # type: ignore[attr-defined]

    def counted(cls: type[UserCredentials], pem: PemCredentials) -> UserCredentials:
        checks.append(pem)
        return check(cls, pem)  # type: ignore[no-any-return]

    monkeypatch.setattr(UserCredentials, "from_pem", classmethod(counted))
    ClusterAccess.load(tmp_path)
    assert len(checks) == 1
    _, expires = (tmp_path / CHECKED_FILE).read_text().split()
    assert float(expires) == round(owner.certificate.not_valid_after_utc.timestamp())
    assert mode(tmp_path / CHECKED_FILE) == 0o600

    loaded = ClusterAccess.load(tmp_path)
    assert len(checks) == 1
    assert loaded.tls.certificate_pem == owner.certificate_pem
    assert loaded.credentials.identity == "owner"


def test_credentials_changed_after_a_check_are_checked_again(
    tmp_path: Path, owner: UserCredentials
) -> None:
    """Another user's key in place after a successful load: refused, naming the directory,
    as on a first load."""
    ClusterAccess.of(owner, ["127.0.0.11"]).save(tmp_path)
    ClusterAccess.load(tmp_path)
    (tmp_path / KEY_FILE).write_bytes(ThrowawayCA().user("other").key_pem)
    assert refused(tmp_path).startswith(
        f"{tmp_path}: the private key does not belong to the certificate; "
    )


def test_a_corrupt_certificate_after_a_check_is_named(
    tmp_path: Path, owner: UserCredentials
) -> None:
    ClusterAccess.of(owner, ["127.0.0.11"]).save(tmp_path)
    ClusterAccess.load(tmp_path)
    (tmp_path / CERTIFICATE_FILE).write_bytes(b"not a certificate")
    message = refused(tmp_path)
    assert str(tmp_path / CERTIFICATE_FILE) in message
    assert message.endswith(POINT_ELSEWHERE)


@pytest.mark.parametrize(
    "record",
    [
        "{digest} 0\n",  # the certificate expired since the check
        "{digest}\n",
        "{digest} soon\n",
        "{digest} 99999999999 more\n",
        "0000 99999999999\n",  # another content's check
        "\xff\n",
    ],
    ids=["expired", "no expiry", "expiry not a number", "more words", "other content", "binary"],
)
def test_a_record_that_does_not_vouch_for_the_content_means_a_check(
    tmp_path: Path, owner: UserCredentials, record: str
) -> None:
    """Whatever the record says, unless it is of this content and unexpired, the files are
    checked (a mismatched key is refused) and the record rewritten after a passing check."""
    ClusterAccess.of(owner, ["127.0.0.11"]).save(tmp_path)
    ClusterAccess.load(tmp_path)
    good = (tmp_path / CHECKED_FILE).read_text()
    digest = good.split()[0]
    (tmp_path / CHECKED_FILE).write_bytes(record.format(digest=digest).encode("latin-1"))
    ClusterAccess.load(tmp_path)
    assert (tmp_path / CHECKED_FILE).read_text() == good

    (tmp_path / CHECKED_FILE).write_bytes(record.format(digest=digest).encode("latin-1"))
    other = ThrowawayCA().user("other")
    (tmp_path / KEY_FILE).write_bytes(other.key_pem)
    with pytest.raises(CredentialsError, match="does not belong"):
        ClusterAccess.load(tmp_path)


def test_a_record_that_cannot_be_written_changes_nothing(
    tmp_path: Path, owner: UserCredentials
) -> None:
    """The record is best effort: where it cannot be read nor written (here a directory in
    its place, which defeats root too), the credentials are checked on every load."""
    ClusterAccess.of(owner, ["127.0.0.11"]).save(tmp_path)
    (tmp_path / CHECKED_FILE).mkdir()
    assert ClusterAccess.load(tmp_path).credentials.identity == "owner"
    (tmp_path / KEY_FILE).write_bytes(ThrowawayCA().user("other").key_pem)
    with pytest.raises(CredentialsError, match="does not belong"):
        ClusterAccess.load(tmp_path)


# -- which directory ----------------------------------------------------------------------


def test_the_flag_comes_first(tmp_path: Path) -> None:
    environ = {
        CREDENTIALS_ENV: str(tmp_path / "env"),
        "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
        "HOME": str(tmp_path / "home"),
    }
    assert resolve_access_directory(tmp_path / "flag", environ) == tmp_path / "flag"
    assert resolve_access_directory(str(tmp_path / "flag"), environ) == tmp_path / "flag"


def test_then_the_environment(tmp_path: Path) -> None:
    environ = {
        CREDENTIALS_ENV: str(tmp_path / "env"),
        "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
        "HOME": str(tmp_path / "home"),
    }
    assert resolve_access_directory(None, environ) == tmp_path / "env"
    assert resolve_access_directory("", environ) == tmp_path / "env"


def test_then_xdg_config_home(tmp_path: Path) -> None:
    environ = {
        CREDENTIALS_ENV: "",
        "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
        "HOME": str(tmp_path / "home"),
    }
    assert resolve_access_directory(None, environ) == tmp_path / "xdg/roleserve/owner"


def test_then_home(tmp_path: Path) -> None:
    environ = {"XDG_CONFIG_HOME": "", "HOME": str(tmp_path / "home")}
    assert resolve_access_directory(None, environ) == tmp_path / "home/.config/roleserve/owner"
    assert default_access_directory(environ) == tmp_path / "home/.config/roleserve/owner"


def test_a_tilde_is_expanded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert resolve_access_directory("~/owner", {}) == tmp_path / "home/owner"
    assert resolve_access_directory(None, {CREDENTIALS_ENV: "~/env"}) == tmp_path / "home/env"


def test_the_process_environment_by_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CREDENTIALS_ENV, str(tmp_path / "env"))
    assert resolve_access_directory(None) == tmp_path / "env"
    monkeypatch.delenv(CREDENTIALS_ENV)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert resolve_access_directory(None) == tmp_path / "xdg/roleserve/owner"
