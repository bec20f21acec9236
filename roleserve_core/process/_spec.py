"""What a plugin tells the runner about a program: ``ProgramSpec``, ``Bind``, and finding
the binary.

The binary is looked for in a fixed order, and the first executable file wins:

1. ``configured``, the path from the plugin's configuration: if it is set, it is the only
   candidate. An operator who names a binary means that one; falling back to another
   would hide the mistake.
2. ``executable`` itself if it is a path, else ``executable`` in each directory of ``PATH``.
3. ``fallbacks``, in order (e.g. a binary shipped in a wheel, for development).

Nothing found is ``ProgramNotFoundError`` naming every path tried and what to change
(``setting``): final, not a crash loop.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from roleserve_core.ports import endpoint
from roleserve_core.process._errors import ProgramNotFoundError
from roleserve_core.process._parsers import LineParser, plain_text

__all__ = ["Bind", "ProgramSpec", "resolve_binary"]

_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")


@dataclass(frozen=True, slots=True)
class Bind:
    """One address a program will listen on; checked before the program starts."""

    host: str
    """The IP address, e.g. ``127.0.0.11`` or ``::1``; ``0.0.0.0`` or ``::`` for all."""
    port: int
    """The port, 1 to 65535."""
    protocol: Literal["tcp", "udp"] = "tcp"
    """``tcp`` (a listener) or ``udp``."""

    def __post_init__(self) -> None:
        ipaddress.ip_address(self.host)  # ValueError names the bad address
        if not 0 < self.port < 65536 or self.protocol not in ("tcp", "udp"):
            raise ValueError(f"{self!r}: the port must be 1 to 65535, the protocol tcp or udp")

    def __str__(self) -> str:
        return f"{endpoint(self.host, self.port)}/{self.protocol}"


@dataclass(frozen=True)
class ProgramSpec:
    """Everything the runner needs to start, watch and stop one program.

    Example, etcd as the controlplane plugin runs it (``EtcdMember.program_spec``; its
    binary was chosen before by ``find_etcd``, so it is named by path)::

        ProgramSpec(
            name="etcd",
            executable=str(config.binary.path),
            setting=INSTALL_HINT,
            arguments=config.arguments(tls),
            state_dir=config.directory,
            binds=[Bind(address, 7836), Bind(address, 7837)],
            parser=parse_zap_json,
            stop_grace=config.stop_grace,
        )
    """

    name: str
    """Short name, ``^[a-z0-9][a-z0-9_.-]{0,63}$``: in messages, and the record's file name."""
    executable: str
    """The binary: a name looked up on ``PATH`` (``etcd``), or a path."""
    state_dir: Path
    """Where the runner keeps this program's record (``<name>.process.json``): the plugin's
    data directory, so a node started again finds what its killed run left behind."""
    arguments: Sequence[str] = ()
    """The command-line arguments after the binary."""
    configured: str | os.PathLike[str] | None = None
    """The binary named in configuration; if set, the only candidate."""
    fallbacks: Sequence[Path] = ()
    """Binaries to try after ``PATH``."""
    setting: str = ""
    """What to change when no binary is found, e.g. ``set `etcd = "/path"` in
    [plugins.controlplane] of roleserve.toml, or apt-get install etcd-server``."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Environment variables for the program, on top of the node's own (see ``inherit_env``)."""
    inherit_env: bool = True
    """Whether the program also gets the node's environment; False: only ``env``."""
    cwd: Path | None = None
    """Its working directory; None: the node's."""
    binds: Sequence[Bind] = ()
    """Addresses it will listen on; one held by another process stops the start."""
    parser: LineParser = plain_text
    """Its output lines → (level, message); default: plain text at INFO."""
    stop_grace: float = 5.0
    """Seconds it may take to stop after SIGTERM before its process group gets SIGKILL."""
    error_lines: int = 3
    """How many of its last error lines to keep for ``ProgramExitedError``."""

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ValueError(f"program name {self.name!r} is not ^[a-z0-9][a-z0-9_.-]{{0,63}}$")

    @property
    def record_path(self) -> Path:
        """The file that records the running program: ``state_dir/<name>.process.json``."""
        return self.state_dir / f"{self.name}.process.json"


def resolve_binary(spec: ProgramSpec, search_path: str | None = None) -> Path:
    """The binary ``spec`` runs: the first executable file among its candidates.

    :param search_path: the ``PATH`` to search; the node's own if None.
    :raises ProgramNotFoundError: naming every path tried and ``spec.setting``.
    """
    tried: list[str] = []
    for candidate, source in _candidates(spec, search_path):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
        why = "not executable" if candidate.exists() else "not found"
        tried.append(f"{candidate} ({source}, {why})")
    hint = f"; {spec.setting}" if spec.setting else ""
    raise ProgramNotFoundError(
        f"cannot start {spec.name}: no executable {spec.executable}; tried "
        + ", ".join(tried or ["nothing: PATH is empty"])
        + hint
    )


def _candidates(spec: ProgramSpec, search_path: str | None) -> list[tuple[Path, str]]:
    if spec.configured:
        return [(Path(spec.configured), "configured")]
    if os.sep in spec.executable:
        found = [(Path(spec.executable), "given")]
    else:
        directories = (os.environ.get("PATH", "") if search_path is None else search_path).split(
            os.pathsep
        )
        found = [(Path(d) / spec.executable, "PATH") for d in directories if d]
    return found + [(Path(fallback), "fallback") for fallback in spec.fallbacks]
