"""Cutting text to a length, one way everywhere: ``…`` ends what was cut.

The cut text is at most the length asked for, ``…`` included, so whatever has a limit (a
table column, a field the curator checks, a log line) gets text within it, and the reader
sees that something is missing. Internal to the core, not part of the plugin API.
"""

from __future__ import annotations

__all__ = ["CUT", "cut"]

CUT = "…"
"""Ends text that was cut."""


def cut(text: str, most: int) -> str:
    """``text`` if it has at most ``most`` characters, else its first ``most - 1`` and
    ``CUT`` (``most`` at least 1)."""
    return text if len(text) <= most else text[: most - 1] + CUT
