"""Output parsers: one line of a program's output → (logging level, message).

A parser is any ``Callable[[str], tuple[int, str]]``. It gets one line without its line
ending and returns the level to log it at and the text to log. The runner logs each line
through the program's parser into the runnable's logger, and keeps the lines at ERROR and
above as the program's last errors. A parser that raises loses nothing: the line is
logged as it came, at INFO.

Given here: ``plain_text`` (everything at INFO) and ``zap_json_parser`` (Go programs
logging with zap: etcd, and with ``--log-format=json`` many others). containerd's logfmt and
wireguard-go's prefixes come with the plugins that run them.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import TypeAlias

__all__ = ["LineParser", "parse_zap_json", "plain_text", "zap_json_parser"]

LineParser: TypeAlias = Callable[[str], tuple[int, str]]
"""One line of output (no line ending) → (logging level, message)."""


def plain_text(line: str) -> tuple[int, str]:
    """Every line as it is, at INFO: the default for programs with no log format."""
    return logging.INFO, line


_ZAP_LEVELS = {
    "debug": logging.DEBUG,
    "warn": logging.WARNING,
    "error": logging.ERROR,
    "dpanic": logging.CRITICAL,
    "panic": logging.CRITICAL,
    "fatal": logging.CRITICAL,
}

_ZAP_NOISE = ("ts", "caller", "logger", "stacktrace")


def zap_json_parser(*, info_level: int = logging.DEBUG) -> LineParser:
    """A parser for zap's JSON lines (``{"level":"warn","msg":"...","key":value,...}``).

    The message is ``msg`` followed by the other fields as ``key=value``; the time, caller
    and stack trace are left out (the log tree has its own time). A line that is not a JSON
    object (a Go panic's stack trace, a banner) is logged as it is: at CRITICAL if it starts
    a panic, else at INFO.

    :param info_level: the level zap's ``info`` maps to. DEBUG by default: etcd says a lot
        at info that an operator does not need to see (every snapshot, every peer stream).
    """

    def parse(line: str) -> tuple[int, str]:
        try:
            entry = json.loads(line)
        except ValueError:
            entry = None
        if not isinstance(entry, dict):
            return (logging.CRITICAL if line.startswith("panic:") else logging.INFO), line
        level = _ZAP_LEVELS.get(str(entry.pop("level", "info")), info_level)
        message = str(entry.pop("msg", ""))
        for noise in _ZAP_NOISE:
            entry.pop(noise, None)
        details = " ".join(f"{key}={value}" for key, value in entry.items())
        return level, f"{message} {details}".strip()

    parse.__doc__ = f"zap JSON lines, info at {logging.getLevelName(info_level)}."
    return parse


parse_zap_json: LineParser = zap_json_parser()
"""zap's JSON lines with ``info`` at DEBUG: etcd's ``--logger=zap --log-outputs=stderr``."""
