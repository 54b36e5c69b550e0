# SPDX-License-Identifier: GPL-2.0
"""The one way bench/ scripts print their table: Markdown (for docs/) or aligned plain text."""

from __future__ import annotations


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
