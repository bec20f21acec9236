"""Test helpers of the kubernetes plugin: a PKI of the contract's kind, made in memory.

The real PKI lives in etcd (``pki``); tests of the launch plans, the probes and the
runnables need certificates of the same shape without etcd: ``throwaway_pki`` makes every
``PKI_NAMES`` entry, the apiserver's serving certificate naming ``addresses``.
"""

from __future__ import annotations

import ipaddress
import sys
from collections.abc import Sequence
from pathlib import Path

from roleserve_core.identity import (
    certificate_to_pem,
    create_ca,
    generate_key,
    issue_certificate,
    private_key_to_pem,
)
from roleserve_core.testing import require_real
from roleserve_kubernetes.kubebuild import is_built, pinned, pinned_bin_dir
from roleserve_kubernetes.pki import KeyPair

__all__ = [
    "STAND_IN_APISERVER",
    "STAND_IN_KUBELET",
    "require_kube_binaries",
    "stand_in_apiserver",
    "stand_in_kubelet",
    "throwaway_pki",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_CLIENTS = {
    "front-proxy-client": ("front-proxy-ca", "front-proxy-client"),
    "apiserver-kubelet-client": ("ca", "kube-apiserver-kubelet-client"),
    "controller-manager": ("ca", "system:kube-controller-manager"),
    "scheduler": ("ca", "system:kube-scheduler"),
    "admin": ("ca", "admin"),
}

STAND_IN_APISERVER = """\
#!{python}
# A stand-in kube-apiserver: checks that every file flag names a file (keys 0600), then
# serves /readyz over TLS with the planned certificate, on the planned address and port;
# /readyz answers 500 while a file <this script>.not-ready exists.
import http.server, os, ssl, sys

NOT_READY = sys.argv[0] + ".not-ready"

flags = dict(argument[2:].split("=", 1) for argument in sys.argv[1:])
FILES = ("file", "-key", "-certificate", "certificate-authority")
PRIVATE = ("-key", "keyfile", "private-key-file", "signing-key-file")
for name, value in flags.items():
    if name.endswith(FILES):
        if not os.path.isfile(value):
            sys.exit(f"error: --{{name}}: no file {{value}}")
        if name.endswith(PRIVATE) and os.stat(value).st_mode & 0o077:
            sys.exit(f"error: --{{name}}: {{value}} is readable by others")

class Ready(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        ready = not os.path.exists(NOT_READY)
        self.send_response((200 if ready else 500) if self.path == "/readyz" else 404)
        self.end_headers()
        self.wfile.write(b"ok" if ready else b"not ready")

    def log_message(self, *args):
        pass

server = http.server.HTTPServer((flags["bind-address"], int(flags["secure-port"])), Ready)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(flags["tls-cert-file"], flags["tls-private-key-file"])
context.load_verify_locations(flags["client-ca-file"])
server.socket = context.wrap_socket(server.socket, server_side=True)
print("serving", flush=True)
server.serve_forever()
"""
"""A stand-in kube-apiserver (a Python script; ``{python}``: the interpreter). It proves a
plan's flags and files fit together: it refuses a file flag naming no file or a private
key others may read, and serves ``/readyz`` over TLS with the planned certificate, on the
planned address and port; ``/readyz`` answers 500 while a file named as the script plus
``.not-ready`` exists (an apiserver that lost etcd, say)."""


STAND_IN_KUBELET = """\
#!{python}
# A stand-in kubelet: reads its --config (JSON), checks that the files it and the flags
# name exist and that its kubeconfig is 0600, then serves /healthz on plain HTTP on the
# configured healthz address and port; binds its pod-resources socket in its --root-dir,
# as the kubelet does (a path Linux limits to 107 bytes), and leaves a file there.
import http.server, json, os, socket, sys

flags = dict(argument[2:].split("=", 1) for argument in sys.argv[1:])
config = json.load(open(flags["config"]))
named = [flags["kubeconfig"], config["tlsCertFile"], config["tlsPrivateKeyFile"],
         config["authentication"]["x509"]["clientCAFile"]]
for path in named:
    if not os.path.isfile(path):
        sys.exit(f"error: no file {{path}}")
if os.stat(flags["kubeconfig"]).st_mode & 0o077:
    sys.exit("error: the kubeconfig is readable by others")
if not flags["container-runtime-endpoint"].startswith("unix:///"):
    sys.exit("error: --container-runtime-endpoint is not a unix socket")

root = flags.get("root-dir")
if root:
    os.makedirs(os.path.join(root, "pod-resources"), exist_ok=True)
    path = os.path.join(root, "pod-resources", "kubelet.sock")
    if os.path.exists(path):
        os.unlink(path)
    resources = socket.socket(socket.AF_UNIX)
    resources.bind(path)
    open(os.path.join(root, "stand-in-was-here"), "w").close()

class Healthy(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/healthz" else 404)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass

address = (config["healthzBindAddress"], config["healthzPort"])
print("serving", flush=True)
http.server.HTTPServer(address, Healthy).serve_forever()
"""
"""A stand-in kubelet, as ``STAND_IN_APISERVER`` is for the apiserver."""


def require_kube_binaries() -> Path:
    """The pinned build's directory (``kubebuild.pinned_bin_dir``) with every kube binary
    in it; else skip the calling test (fail it under ROLESERVE_REQUIRE_REAL=1), naming the
    command that builds them."""
    bin_dir = pinned_bin_dir()
    require_real(
        f"a build of Kubernetes {pinned().version}",
        is_built(bin_dir),
        "./dev kube-binaries builds them, tens of minutes the first time",
    )
    return bin_dir


def stand_in_apiserver(path: Path) -> Path:
    """Write ``STAND_IN_APISERVER`` to ``path``, executable; return ``path``."""
    return _executable(path, STAND_IN_APISERVER)


def stand_in_kubelet(path: Path) -> Path:
    """Write ``STAND_IN_KUBELET`` to ``path``, executable; return ``path``."""
    return _executable(path, STAND_IN_KUBELET)


def _executable(path: Path, template: str) -> Path:
    path.write_text(template.format(python=sys.executable))
    path.chmod(0o755)
    return path


def throwaway_pki(addresses: Sequence[IPAddress] = ()) -> dict[str, KeyPair]:
    """Every entry of ``PKI_NAMES``, freshly made; ``apiserver`` serves ``addresses``."""
    keys = {name: generate_key() for name in ("ca", "front-proxy-ca")}
    cas = {name: create_ca(key) for name, key in keys.items()}
    pki = {
        name: KeyPair(private_key_to_pem(keys[name]), certificate_to_pem(cas[name])) for name in cas
    }
    for name, (ca, common_name) in _CLIENTS.items():
        key = generate_key()
        certificate = issue_certificate(keys[ca], cas[ca], key.public_key(), common_name)
        pki[name] = KeyPair(private_key_to_pem(key), certificate_to_pem(certificate))
    key = generate_key()
    serving = issue_certificate(
        keys["ca"],
        cas["ca"],
        key.public_key(),
        "kube-apiserver",
        server=True,
        dns_names=("kubernetes", "kubernetes.default.svc.cluster.local"),
        ip_addresses=tuple(addresses),
    )
    pki["apiserver"] = KeyPair(private_key_to_pem(key), certificate_to_pem(serving))
    pki["service-account"] = KeyPair(private_key_to_pem(generate_key()), None)
    return pki
