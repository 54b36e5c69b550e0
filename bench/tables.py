# SPDX-License-Identifier: GPL-2.0
"""The one way bench/ scripts print their table: Markdown (for docs/) or aligned plain text."""

from __future__ import annotations

import statistics


def median(xs):
    """The median of the values that are not None; None when there is none."""
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def num(x, scale=1e-6, fmt="{:.3f}") -> str:
    """x * scale in fmt (default: pps as Mpps), "-" for None."""
    return "-" if x is None else fmt.format(x * scale)


def spread(xs, scale=1e-6) -> str:
    """min-max of the values that are not None, as num() writes them; "-" when there is none."""
    xs = [x for x in xs if x is not None]
    return f"{num(min(xs), scale)}-{num(max(xs), scale)}" if xs else "-"


def print_table(head: tuple[str, ...], rows: list[tuple[str, ...]], markdown: bool) -> None:
    if markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "|".join("---" for _ in head) + "|")
        for r in rows:
            print("| " + " | ".join(r) + " |")
        return
    widths = [max(len(x) for x in col) for col in zip(head, *rows)]
    for r in [head] + list(rows):
        print("  ".join(x.ljust(w) for x, w in zip(r, widths)))
