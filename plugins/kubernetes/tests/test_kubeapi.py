"""The plugin's own API calls (``kubeapi``) when the apiserver does not answer as it
should: one KubeAPIError naming the call, the server and why, never a traceback of
http.client's. (Their success, against the real apiserver: ``test_controlplane_wiring``.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from roleserve_core.testing import SupervisorRunner, random_loopback, wait_for_state
from roleserve_kubernetes.apiserver import apiserver_runnable
from roleserve_kubernetes.errors import KubeAPIError
from roleserve_kubernetes.kubeapi import KubeAPI
from roleserve_kubernetes.plans import apiserver_url
from roleserve_kubernetes.testing import stand_in_apiserver

from .test_runnables import controller_inputs, start

pytestmark = pytest.mark.anyio


def client_files(tmp_path: Path, certificate: bytes, key: bytes) -> tuple[Path, Path]:
    files = (tmp_path / "admin.pem", tmp_path / "admin-key.pem")
    files[0].write_bytes(certificate)
    files[1].write_bytes(key)
    files[1].chmod(0o600)
    return files


async def test_an_apiserver_that_answers_otherwise_is_one_error_naming_the_call(
    tmp_path: Path, supervisor_runner: SupervisorRunner
) -> None:
    inputs = controller_inputs(tmp_path)
    binary = stand_in_apiserver(tmp_path / "kube-apiserver")
    supervisor = await start(
        supervisor_runner,
        {"apiserver": apiserver_runnable(inputs, binary, tmp_path, lambda _ready: None)},
    )
    await wait_for_state(supervisor, "root.apiserver")
    ca, admin = inputs.pki["ca"].certificate_pem, inputs.pki["admin"]
    assert ca is not None
    assert admin.certificate_pem is not None
    certificate, key = client_files(tmp_path, admin.certificate_pem, admin.key_pem)
    server = apiserver_url(inputs.address)
    async with KubeAPI(server, ca, certificate, key) as api:
        # The stand-in serves /readyz alone: 404 for the list, 501 for a DELETE.
        with pytest.raises(KubeAPIError) as listed:
            await api.node_names()
        assert str(listed.value).startswith(
            f"cannot list the Nodes at {server}: GET /api/v1/nodes answered 404"
        )
        with pytest.raises(KubeAPIError) as deleted:
            await api.delete_node("node-a")
        assert str(deleted.value).startswith(
            f"cannot delete the Node node-a at {server}: DELETE /api/v1/nodes/node-a answered 501"
        )
    nobody = apiserver_url(random_loopback())
    async with KubeAPI(nobody, ca, certificate, key) as api:
        with pytest.raises(KubeAPIError, match=f"^cannot list the Nodes at {nobody}: "):
            await api.node_names()
