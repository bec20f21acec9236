"""The kube components' output, klog's lines, parsed into log levels.

::

    I1204 22:56:22.902825    8939 file.go:721] "Starting kubelet" version="v1.37.2"
    │└─┬┘ └──────┬──────┘    └┬─┘ └────┬────┘  └──────────────── message ─────────────┘
    │ month/day  time        thread  source
    └ severity: I → DEBUG, W → WARNING, E → ERROR, F → CRITICAL

logged as ``file.go:721] "Starting kubelet" version="v1.37.2"``: the time and thread are
left out (the log tree has its own time), the source stays (it is how a klog line is
found in the Kubernetes source).

Why info at DEBUG: the kubelet alone says about 1400 lines a minute at info while it runs,
which would bury the node's own log; warnings and errors stay visible. Lines that are not
klog's: a message of several lines (klog writes a multi-line value as it is, on lines of
its own) is at the level of the entry it continues; ``Error: ...`` (cobra, before klog
runs) is ERROR and a Go ``panic:`` or ``fatal error:`` CRITICAL, so that they become the
program's last errors; what follows them (a usage text, a stack trace) is at INFO, so it
does not push them out of the last errors.

The parser keeps the level of the last entry, so each program gets its own
(``klog_parser()``).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable

from roleserve_core import LineParser

__all__ = ["KLOG_LEVELS", "klog_parser"]

KLOG_LEVELS = {
    "I": logging.DEBUG,
    "W": logging.WARNING,
    "E": logging.ERROR,
    "F": logging.CRITICAL,
}
"""klog's severity letter → the level its line is logged at."""

_HEADER = re.compile(r"([IWEF])\d{4} \d{2}:\d{2}:\d{2}\.\d{6}\s+\d+ (\S+\] ?.*)")
_STARTS = (
    ("Error:", logging.ERROR),
    ("panic:", logging.CRITICAL),
    ("fatal error:", logging.CRITICAL),
)


def klog_parser(quiet: Iterable[str] = ()) -> LineParser:
    """A parser for one kube program's output (the module docstring).

    :param quiet: messages known to repeat harmlessly (the kubelet's refusal of a loopback
        node IP, at every status update): an entry containing one is logged once at
        WARNING, so that it is seen, and at DEBUG after that.
    """
    continued = logging.INFO
    known = tuple(quiet)
    seen: set[str] = set()

    def parse(line: str) -> tuple[int, str]:
        nonlocal continued
        header = _HEADER.fullmatch(line)
        if header is not None:
            message = header.group(2)
            continued = _quieted(KLOG_LEVELS[header.group(1)], message, known, seen)
            return continued, message
        for start, level in _STARTS:
            if line.startswith(start):
                continued = logging.INFO
                return level, line
        return continued, line

    return parse


def _quieted(level: int, message: str, known: tuple[str, ...], seen: set[str]) -> int:
    """``level``, or WARNING the first time a known message comes and DEBUG after."""
    for text in known:
        if text in message:
            if text in seen:
                return logging.DEBUG
            seen.add(text)
            return min(level, logging.WARNING)
    return level
