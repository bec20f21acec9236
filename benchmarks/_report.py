"""Shared printing for the benchmark programs: figures, and ratios to a same-run baseline."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

__all__ = ["Summary", "print_comparison", "summarise"]


class Summary:
    """Median and 99th percentile of a list of samples, in seconds."""

    def __init__(self, samples: Sequence[float]) -> None:
        ordered = sorted(samples)
        self.count = len(ordered)
        self.median = statistics.median(ordered)
        self.p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def summarise(samples: Sequence[float]) -> Summary:
    """A ``Summary`` of ``samples``."""
    return Summary(samples)


def _scaled(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.3f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3f} ms"
    return f"{seconds * 1e6:.2f} µs"


def print_comparison(title: str, measured: Summary, baseline: Summary, baseline_name: str) -> None:
    """Print one measurement next to its baseline, with the ratio of the medians."""
    print(f"{title}")
    print(
        f"  roleserve   median {_scaled(measured.median):>12}   p99 {_scaled(measured.p99):>12}"
        f"   (n={measured.count})"
    )
    print(
        f"  baseline    median {_scaled(baseline.median):>12}   p99 {_scaled(baseline.p99):>12}"
        f"   ({baseline_name})"
    )
    print(f"  ratio       {measured.median / baseline.median:.2f}× the baseline median")
