"""Plain-text tables for people; every command also has ``--json`` for scripts.

A table fits the width it is given, the terminal's (``output_width``)::

    fits as it is ─────────────▶ one line a row, each column as wide as its widest cell
    too wide ──────────────────▶ 1. the ``notes`` columns (lists: roles, hooks) leave the
                                    table: a line of their own under each row, wrapped
                                    (none for a cell that says nothing, ``-``)
                                 2. still too wide: the widest column is cut by a
                                    character, and again, ``…`` ending each cut cell, never
                                    narrower than its header

Notes first: a list cut short hides what it lists, while a long ID cut to its first 20
characters still names its node (``ctl`` takes a prefix). Text lines around a table fit
the same width through ``fill``. Piped or written to a file (no terminal, no
``$COLUMNS``), every line is as long as it needs: ``grep`` sees whole cells.
"""

from __future__ import annotations

import os
import shutil
import sys
import textwrap
from collections.abc import Sequence

from roleserve_core.text import cut

__all__ = ["fill", "output_width", "render_table"]

GAP = "  "
"""Between two columns."""
NOTHING = ("", "-")
"""Cells that say there is nothing (``-`` is every command's: ``_format.NONE``): as a
note, they would add a line that says nothing."""


def output_width() -> int | None:
    """The width a table must fit: ``$COLUMNS`` if it is a number, else the terminal's
    when stdout is one (``shutil.get_terminal_size``); None (no limit) when stdout is a pipe
    or a file."""
    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    if sys.stdout.isatty():
        return shutil.get_terminal_size().columns
    return None


def render_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    width: int | None = None,
    notes: Sequence[str] = (),
) -> str:
    """Columns padded to their widest cell, separated by two spaces; no trailing spaces.

    :param width: the most characters a line may have (``output_width()``); None: no limit.
    :param notes: the headers of the columns that go under their row when the table is
        wider than ``width`` (see the module docstring).
    """
    widths = _natural_widths(headers, rows)
    if width is None or _total(widths) <= width:
        return "\n".join(_line(row, widths) for row in [headers, *rows])
    kept = [index for index, header in enumerate(headers) if header not in notes]
    noted = [index for index, header in enumerate(headers) if header in notes]
    widths = _fitted([headers[index] for index in kept], [widths[index] for index in kept], width)
    lines = [_line([headers[index] for index in kept], widths)]
    for row in rows:
        cells = [cut(row[index], most) for index, most in zip(kept, widths, strict=True)]
        lines.append(_line(cells, widths))
        for index in noted:
            if row[index] not in NOTHING:
                note = f"{headers[index].lower()}: {row[index]}"
                lines.append(fill(note, width, indent="  "))
    return "\n".join(lines)


def fill(text: str, width: int | None, *, indent: str = "") -> str:
    """``text`` after ``indent``, wrapped at spaces into lines of at most ``width``
    characters (as it is for None), each further line indented two more spaces."""
    if width is None:
        return indent + text
    return textwrap.fill(
        text,
        width,
        initial_indent=indent,
        subsequent_indent=indent + "  ",
        break_on_hyphens=False,
    )


def _natural_widths(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[int]:
    widths = [len(header) for header in headers]
    for row in rows:
        for index, cell in enumerate(row):
            widths[index] = max(widths[index], len(cell))
    return widths


def _total(widths: Sequence[int]) -> int:
    return sum(widths) + len(GAP) * (len(widths) - 1)


def _fitted(headers: Sequence[str], widths: list[int], width: int) -> list[int]:
    """``widths``, the widest cut by one again and again until the line fits ``width``,
    none below its header (or 1); as narrow as that allows if it never fits."""
    floors = [max(len(header), 1) for header in headers]
    while _total(widths) > width:
        cuttable = [index for index, each in enumerate(widths) if each > floors[index]]
        if not cuttable:
            break
        widest = max(cuttable, key=lambda index: widths[index])
        widths[widest] -= 1
    return widths


def _line(cells: Sequence[str], widths: Sequence[int]) -> str:
    padded = [cell.ljust(widths[index]) for index, cell in enumerate(cells)]
    return GAP.join(padded).rstrip()
