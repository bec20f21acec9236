"""The kube components' klog lines are logged at their own levels, not all at INFO."""

from __future__ import annotations

import ipaddress
import logging
from pathlib import Path

import pytest

from roleserve_kubernetes.klog import klog_parser
from roleserve_kubernetes.plans import (
    ControllerInputs,
    EtcdClientFiles,
    KubeletInputs,
    LaunchPlan,
    apiserver_plan,
    controller_manager_plan,
    kubelet_plan,
    program_spec,
    scheduler_plan,
)
from roleserve_kubernetes.testing import throwaway_pki

ADDRESS = ipaddress.ip_address("10.0.0.7")


def test_each_severity_is_its_level_without_time_and_thread() -> None:
    parse = klog_parser()
    lines = [
        'I1204 22:56:22.902825    8939 server.go:530] "Kubelet version" kubeletVersion="v1.37.2"',
        "W1204 22:56:23.000001    8939 feature_gate.go:352] unrecognized feature gate: X",
        'E1204 22:56:24.100000      12 kubelet_node_status.go:107] "Unable to register node"',
        "F1204 22:56:25.000000       1 server.go:99] cannot continue",
    ]
    assert [parse(line) for line in lines] == [
        (logging.DEBUG, 'server.go:530] "Kubelet version" kubeletVersion="v1.37.2"'),
        (logging.WARNING, "feature_gate.go:352] unrecognized feature gate: X"),
        (logging.ERROR, 'kubelet_node_status.go:107] "Unable to register node"'),
        (logging.CRITICAL, "server.go:99] cannot continue"),
    ]


def test_a_continued_entry_keeps_its_level_and_errors_stand_out() -> None:
    parse = klog_parser()
    lines = [
        "Flag --pod-infra-container-image has been deprecated",
        'E1204 22:56:24.100000      12 run.go:72] "command failed" err=<',
        "\tfailed to run Kubelet: invalid configuration",
        " >",
        "Error: unknown flag: --nope",
        "Usage:",
        "panic: runtime error: invalid memory address",
        "goroutine 1 [running]:",
    ]
    assert [parse(line)[0] for line in lines] == [
        logging.INFO,
        logging.ERROR,
        logging.ERROR,
        logging.ERROR,
        logging.ERROR,
        logging.INFO,
        logging.CRITICAL,
        logging.INFO,
    ]


def test_each_parser_keeps_its_own_entry() -> None:
    first, second = klog_parser(), klog_parser()
    first("E1204 22:56:24.100000      12 a.go:1] broken: <")
    assert second("  continued elsewhere") == (logging.INFO, "  continued elsewhere")
    assert first("  continued here") == (logging.ERROR, "  continued here")


def plans(tmp_path: Path) -> list[LaunchPlan]:
    pki = throwaway_pki([ADDRESS])
    etcd = EtcdClientFiles(tmp_path / "ca", tmp_path / "cert", tmp_path / "key")
    controller = ControllerInputs(tmp_path / "controller", ADDRESS, pki, "x:1", etcd)
    kubelet = KubeletInputs(
        directory=tmp_path / "kubelet",
        node_id="node-1",
        address=ADDRESS,
        apiserver="https://10.0.0.7:6443",
        ca_pem=pki["ca"].certificate_pem or b"",
        client=pki["admin"],
        serving=pki["admin"],
        containerd_socket=tmp_path / "containerd.sock",
        pod_prefix=ipaddress.ip_network("10.192.0.128/25"),
    )
    return [
        apiserver_plan(controller),
        controller_manager_plan(controller),
        scheduler_plan(controller),
        kubelet_plan(kubelet),
    ]


@pytest.mark.parametrize("index", range(4))
def test_every_kube_component_is_started_with_the_klog_parser(tmp_path: Path, index: int) -> None:
    plan = plans(tmp_path)[index]
    spec = program_spec(plan, Path("/bin/true"), tmp_path)
    line = "W1204 22:56:23.000001    8939 x.go:1] careful"
    assert spec.parser(line) == (logging.WARNING, "x.go:1] careful"), plan.name


def test_a_known_harmless_message_is_seen_once_then_quiet() -> None:
    parse = klog_parser(quiet=["nodeIP can't be loopback address"])
    line = (
        'E1204 22:56:24.100000      12 kubelet_node_status.go:90] "Failed to set some node '
        'status fields" err="failed to validate nodeIP: nodeIP can\'t be loopback address"'
    )
    assert [parse(line)[0] for _ in range(3)] == [logging.WARNING, logging.DEBUG, logging.DEBUG]
    other = "E1204 22:56:24.100000      12 a.go:1] something else"
    assert parse(other)[0] == logging.ERROR
