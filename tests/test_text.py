"""``roleserve_core.text.cut``: the one way text is cut to a length."""

from __future__ import annotations

from roleserve_core.text import cut


def test_cut_keeps_what_fits_and_ends_a_cut_with_an_ellipsis() -> None:
    assert cut("abcd", 4) == "abcd"
    assert cut("abcde", 4) == "abc…"
    assert len(cut("x" * 100, 64)) == 64
