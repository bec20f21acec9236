"""The kube binaries of the pinned Kubernetes version: where they are cached, and their build.

No registry these machines reach ships kube-apiserver or kubelet, but the Go module proxy
serves ``k8s.io/kubernetes``; so the binaries are built here, from the Go module kept
beside this file (``kube/go.mod``, ``kube/go.sum``: the pin, checksums and all)::

    ./dev kube-binaries ─▶ python -m roleserve_kubernetes.kubebuild
        │
        ├─ <cache>/<version>-<digest>/bin has all six  ──▶ "built in …", exit 0 at once
        │
        └─ else, under <cache>/.lock (one build at a time):
             go build -mod=readonly -trimpath … k8s.io/kubernetes/cmd/<each>
                 into <cache>/.<key>.XXXX/bin, one binary after another (progress lines)
             rename .<key>.XXXX ─▶ <version>-<digest>   (all six or nothing; the next
                                                         build removes a killed one's)

``<cache>`` is ``${XDG_CACHE_HOME:-$HOME/.cache}/roleserve/kube``. The key holds a digest
of ``go.mod``, ``go.sum`` and the build flags, so a new pin (or new flags) builds into a
new directory and never reuses binaries of another; old ones stay until removed by hand.

Go's own caches (``go env GOMODCACHE GOCACHE``) are Go's defaults: they make a rebuild
after a pin change minutes instead of tens of minutes.

Refusals (no ``go``, a failed ``go build``) are one line saying what to do; go's full
output of a failed build is kept in ``<cache>/<key>.log``.

Nodes do not yet launch the binaries from this cache by default: ``binaries.py`` still
looks at the settings and PATH only (README, "Which Kubernetes").
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from roleserve_kubernetes.errors import KubeBuildError

__all__ = [
    "BINARIES",
    "MODULE_DIR",
    "KubeBuildError",
    "Pin",
    "build",
    "cache_root",
    "is_built",
    "main",
    "pinned",
    "pinned_bin_dir",
]

MODULE_DIR = Path(__file__).parent / "kube"
"""The Go module that pins the version: ``go.mod`` requires ``k8s.io/kubernetes`` and
replaces each staging module by its published ``v0.x``; ``go.sum`` holds every checksum."""

BINARIES = (
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubelet",
    "kube-proxy",
    "kubectl",
)
"""What is built, each from ``k8s.io/kubernetes/cmd/<name>``, in this order."""

_VERSION_PACKAGES = ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version")
"""Where ``--version`` (servers) and ``kubectl version --client`` read the version from;
a build from the module proxy has no git tree, so the version is stamped with ``-X``."""

_GO_ENV = {"CGO_ENABLED": "0", "GOWORK": "off"}
"""Static binaries as Kubernetes' releases are, needing no C compiler; and a ``go.work``
of the user's never changes what is built."""

_REQUIRE = re.compile(r"^\s*(?:require\s+)?k8s\.io/kubernetes\s+(v\d+\.(\d+)\.\d+)(?:\s|$)", re.M)

_BUILD_HINT = "./dev kube-binaries"


@dataclass(frozen=True, slots=True)
class Pin:
    """The pinned Kubernetes version and the key of its cache directory."""

    version: str
    """``vX.Y.Z`` of ``k8s.io/kubernetes`` in ``go.mod``."""
    minor: str
    """``Y``: stamped as ``gitMinor``."""
    digest: str
    """Short digest of ``go.mod``, ``go.sum`` and the build flags."""

    @property
    def key(self) -> str:
        """The cache directory's name: changes whenever the pin or the flags change."""
        return f"{self.version}-{self.digest}"

    def ldflags(self) -> str:
        """Stripped binaries that report this version."""
        flags = ["-s", "-w"]
        stamps = {
            "gitVersion": self.version,
            "gitMajor": self.version[1:].split(".")[0],
            "gitMinor": self.minor,
            "gitTreeState": "clean",
        }
        for package in _VERSION_PACKAGES:
            flags += [f"-X {package}.{name}={value}" for name, value in stamps.items()]
        return " ".join(flags)

    def go_build(self, binary: str, output: Path) -> list[str]:
        """The ``go build`` command of one binary (run in ``MODULE_DIR``)."""
        return [
            "go",
            "build",
            "-mod=readonly",
            "-trimpath",
            f"-ldflags={self.ldflags()}",
            "-o",
            str(output),
            f"k8s.io/kubernetes/cmd/{binary}",
        ]


def pinned(module_dir: Path = MODULE_DIR) -> Pin:
    """The pin of ``module_dir``'s ``go.mod``/``go.sum``."""
    go_mod = (module_dir / "go.mod").read_text()
    match = _REQUIRE.search(go_mod)
    if match is None:
        raise KubeBuildError(f"{module_dir / 'go.mod'} requires no k8s.io/kubernetes vX.Y.Z")
    version, minor = match.group(1), match.group(2)
    unstamped = Pin(version, minor, "")
    digest = hashlib.sha256()
    digest.update(go_mod.encode())
    digest.update((module_dir / "go.sum").read_bytes())
    digest.update(" ".join(unstamped.go_build("", Path())).encode())
    digest.update(repr(sorted(_GO_ENV.items())).encode())
    return Pin(version, minor, digest.hexdigest()[:12])


def cache_root(environ: Mapping[str, str] = os.environ) -> Path:
    """``${XDG_CACHE_HOME:-$HOME/.cache}/roleserve/kube``: outside the repository."""
    base = environ.get("XDG_CACHE_HOME") or str(Path(environ.get("HOME", "~")) / ".cache")
    return Path(base).expanduser() / "roleserve" / "kube"


def pinned_bin_dir(environ: Mapping[str, str] = os.environ, pin: Pin | None = None) -> Path:
    """Where the binaries of the pinned version are (or will be, once built)."""
    return cache_root(environ) / (pin or pinned()).key / "bin"


def is_built(bin_dir: Path) -> bool:
    """Whether ``bin_dir`` holds every binary, executable."""
    return all(os.access(bin_dir / name, os.X_OK) for name in BINARIES)


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    """One build at a time per cache: a second waits, then finds the binaries built."""
    with open(root / ".lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            _say("another build of the kube binaries is running; waiting for it")
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _say(line: str) -> None:
    print(f"kube-binaries: {line}", file=sys.stderr, flush=True)


def _last_line(log: Path) -> str:
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines()]
    return next((line for line in reversed(lines) if line), "no output")


def _run_go(command: Sequence[str], log: Path, what: str, heartbeat: float) -> None:
    """Run one ``go build``; its output goes to ``log``, its module downloads (and a line
    every ``heartbeat`` seconds) to stderr, so a long cold build shows it is alive."""
    environ = {**os.environ, **_GO_ENV}
    started = time.monotonic()
    with open(log, "a") as out:
        out.write(f"$ {' '.join(command)}\n")
        out.flush()
        process = subprocess.Popen(
            command, cwd=MODULE_DIR, env=environ, stdout=out, stderr=subprocess.STDOUT
        )
        while True:
            try:
                code = process.wait(timeout=heartbeat)
                break
            except subprocess.TimeoutExpired:
                _say(f"still building {what}, {time.monotonic() - started:.0f} s")
    if code != 0:
        raise KubeBuildError(
            f"building {what} failed (go exit {code}): {_last_line(log)}; the whole output"
            f" is in {log}; fix that (Go >= 1.26, the module proxy reachable) and run"
            f" {_BUILD_HINT} again"
        )


def build(environ: Mapping[str, str] = os.environ, heartbeat: float = 60.0) -> Path:
    """The directory holding the pinned binaries, building them first if they are not there.

    :raises KubeBuildError: no ``go`` on PATH, or a ``go build`` failed.
    """
    pin = pinned()
    root = cache_root(environ)
    final = root / pin.key
    if is_built(final / "bin"):
        return final / "bin"
    if shutil.which("go", path=environ.get("PATH")) is None:
        raise KubeBuildError(
            f"go is not on PATH: install Go 1.26 or later (https://go.dev/dl/, or"
            f" /usr/local/go/bin on PATH) and run {_BUILD_HINT} again"
        )
    root.mkdir(parents=True, exist_ok=True)
    with _locked(root):
        if is_built(final / "bin"):  # built by the build we waited for
            return final / "bin"
        _remove_unfinished(root)
        log = root / f"{pin.key}.log"
        log.write_text("")
        work = Path(tempfile.mkdtemp(prefix=f".{pin.key}.", dir=root))
        try:
            _build_into(pin, work / "bin", log, heartbeat)
            shutil.rmtree(final, ignore_errors=True)  # an incomplete one, from before
            work.rename(final)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return final / "bin"


def _remove_unfinished(root: Path) -> None:
    """Remove what a killed build left (its temporary directory, hundreds of MB): under
    the lock, no other build is running, so every such directory is unfinished."""
    for path in root.glob(".v*"):
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)


def _build_into(pin: Pin, bin_dir: Path, log: Path, heartbeat: float) -> None:
    started = time.monotonic()
    _say(f"building Kubernetes {pin.version} into {bin_dir.parent.parent / pin.key}")
    _say(f"go's output goes to {log}")
    for number, binary in enumerate(BINARIES, start=1):
        what = f"{binary} ({number}/{len(BINARIES)})"
        _say(f"building {what}")
        began = time.monotonic()
        _run_go(pin.go_build(binary, bin_dir / binary), log, what, heartbeat)
        _say(f"built {binary} in {time.monotonic() - began:.0f} s")
    _say(f"all {len(BINARIES)} built in {time.monotonic() - started:.0f} s")


def main(argv: Sequence[str] | None = None) -> int:
    """``./dev kube-binaries``: build the pinned binaries unless built; say where they are."""
    del argv  # no options
    with contextlib.suppress(OSError):
        os.nice(19)  # a long build must not starve the machine's other work (and tests)
    try:
        bin_dir = build()
    except KubeBuildError as error:
        _say(str(error))
        return 1
    except KeyboardInterrupt:
        _say(f"interrupted; nothing was kept; run {_BUILD_HINT} again")
        return 130
    _say(f"Kubernetes {pinned().version} is built in {bin_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
