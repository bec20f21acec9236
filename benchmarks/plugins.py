"""What installed plugins cost ``roleserve plugins``: with 1 and with 50 generated plugins.

Run: ``./dev sync && .venv/bin/python benchmarks/plugins.py [--counts 1 50] [--runs 10]``.

For each count N, a fresh virtual environment (``uv venv``) gets the core's wheel and N
plugins made by ``roleserve plugin new`` (``bench0`` ... each a complete distribution with a
worker, installed from its directory as a user would). Then, ``--runs`` times each, as fresh
processes:

- ``roleserve plugins`` (finds every entry point, loads every hook module, lists them):
  wall time from exec to exit, and peak RSS (the child's ``ru_maxrss``);
- baseline: ``python -c 'import roleserve_core'`` in the same environment.

The wheel is built once (``uv build``) into a temporary directory; building and installing
the plugins is not timed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from _report import Summary, print_comparison, summarise

ROOT = Path(__file__).resolve().parent.parent


def uv() -> str:
    """The uv that ``./dev`` uses."""
    found = shutil.which("uv") or str(Path.home() / ".cache/roleserve/uv/bin/uv")
    if not Path(found).exists():
        raise SystemExit("benchmarks/plugins.py: uv not found; run ./dev sync first")
    return found


def run(*command: str | Path, cwd: Path | None = None) -> None:
    """Run ``command``; it must succeed (its output is kept quiet)."""
    subprocess.run([str(part) for part in command], check=True, capture_output=True, cwd=cwd)


def core_wheel(scratch: Path) -> Path:
    """The core's wheel, built into ``scratch``."""
    run(uv(), "build", "--package", "roleserve-core", "--wheel", "--out-dir", scratch, cwd=ROOT)
    [wheel] = scratch.glob("roleserve_core-*.whl")
    return wheel


def environment(scratch: Path, wheel: Path, count: int) -> Path:
    """A virtual environment of the core and ``count`` generated plugins; its Python."""
    venv = scratch / f"venv{count}"
    run(uv(), "venv", "--quiet", venv)
    python = venv / "bin" / "python"
    environ_python = ["--python", str(python)]
    run(uv(), "pip", "install", "--quiet", *environ_python, wheel)
    plugins = scratch / f"plugins{count}"
    for index in range(count):
        run(python, "-m", "roleserve_core", "plugin", "new", f"bench{index}",
            "--dir", plugins / f"bench{index}")  # fmt: skip
    if count:
        run(uv(), "pip", "install", "--quiet", *environ_python, *sorted(plugins.iterdir()))
    return python


def timed(command: list[str], runs: int) -> tuple[Summary, float]:
    """Wall seconds of ``command`` per run, and its peak RSS in MB over the runs."""
    samples, peak = [], 0.0
    for _ in range(runs):
        start = time.perf_counter()
        quiet = [(os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0)]  # the table it prints
        pid = os.posix_spawn(command[0], command, os.environ, file_actions=quiet)
        _, status, usage = os.wait4(pid, 0)
        samples.append(time.perf_counter() - start)
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"benchmarks/plugins.py: {' '.join(command)} failed")
        peak = max(peak, usage.ru_maxrss / 1024)  # kB on Linux
    return summarise(samples), peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", type=int, nargs="+", default=[1, 50])
    parser.add_argument("--runs", type=int, default=10)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        scratch = Path(directory)
        wheel = core_wheel(scratch)
        for count in options.counts:
            python = str(environment(scratch, wheel, count))
            plugins, plugins_rss = timed([python, "-m", "roleserve_core", "plugins"], options.runs)
            baseline, baseline_rss = timed([python, "-c", "import roleserve_core"], options.runs)
            print_comparison(
                f"roleserve plugins with {count} generated plugin(s) installed",
                plugins,
                baseline,
                "python -c 'import roleserve_core', same environment",
            )
            print(f"  peak RSS    {plugins_rss:.1f} MB (baseline {baseline_rss:.1f} MB)")


if __name__ == "__main__":
    main()
