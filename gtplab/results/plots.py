"""The report's PNG plots (matplotlib, Agg): one figure per metric with a panel per direction,
series by the dimensions that vary, and the cost and change plots, of what gtplab.results.analysis
computed. Used only by gtplab.results.report; matplotlib is imported when the first plot is drawn.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gtplab.results.analysis import (COST_METRICS, Change, Regression, Run, dut_label, points, series_label,
                                     series_order, value)


@dataclass
class Panel:
    title: str
    ylabel: str
    lines: list[tuple[str, float, str, str]]  # (metric, scale, legend suffix, line style)


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _colors(labels: list[str]) -> dict[str, Any]:
    cmap = _plt().get_cmap("tab10")
    return {s: cmap(i % 10) for i, s in enumerate(labels)}


LEGEND_W = 3.4  # inches right of the plots for the figure's legend
COL_W, ROW_H = 5.6, 3.2


def _figure(nrows: int, ncols: int):
    plt = _plt()
    return plt.subplots(nrows, ncols, figsize=(COL_W * ncols + LEGEND_W, ROW_H * nrows + 0.7),
                        sharey="row", squeeze=False)


def _legend(fig, color: dict[str, Any], styles: list[tuple[str, str]] = ()) -> None:
    """One legend for the whole figure, right of the plots: a colour per series, then line styles."""
    from matplotlib.lines import Line2D
    handles = [Line2D([], [], color=c, marker="o", markersize=4) for c in color.values()]
    labels = list(color)
    for ls, text in styles:
        handles.append(Line2D([], [], color="black", linestyle=ls))
        labels.append(text)
    fig.legend(handles, labels, loc="center right", fontsize=8, frameon=False)


def _save(fig, path: Path) -> None:
    # fixed margins: tight_layout would draw every figure twice (seconds on a busy box)
    w, h = fig.get_size_inches()
    fig.subplots_adjust(left=0.8 / w, right=1 - (LEGEND_W + 0.1) / w, bottom=0.55 / h, top=1 - 0.6 / h,
                        wspace=0.35, hspace=0.75 / ROW_H * 2)
    fig.savefig(path, dpi=90)
    _plt().close(fig)
    if not path.exists() or path.stat().st_size == 0:
        raise RuntimeError(f"matplotlib wrote nothing to {path}")


def series_plot(path: Path, title: str, runs: list[tuple[str, list[dict]]], panels: list[Panel],
                dims: list[str]) -> bool:
    """One row per panel, one column per run (shared y axis per row), one line per series.
    Writes nothing and returns False when no run has a value for any panel."""
    data = [[[(m, scale, sfx, ls, points(cases, m, dims)) for m, scale, sfx, ls in p.lines]
             for p in panels] for _, cases in runs]
    if not any(pts for run in data for panel in run for *_, pts in panel):
        return False
    labels = sorted({s for run in data for panel in run for *_, pts in panel for s in pts}, key=series_order)
    color = _colors(labels)
    fig, axes = _figure(len(panels), len(runs))
    for col, (run_label, _) in enumerate(runs):
        for row, panel in enumerate(panels):
            ax = axes[row][col]
            drawn = False
            for m, scale, sfx, ls, pts in data[col][row]:
                for s, xy in pts.items():
                    ax.plot([x for x, _ in xy], [y * scale for _, y in xy], ls, marker="o", markersize=4,
                            color=color[s])
                    drawn = True
            if not drawn:
                ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
            ax.set_title(f"{run_label}: {panel.title}" if len(runs) > 1 else panel.title, fontsize=10)
            ax.set_xlabel("frame size (bytes, incl. FCS)")
            ax.set_ylabel(panel.ylabel)
            ax.grid(True, alpha=0.3)
    styles = {(ls, sfx.strip()) for p in panels for _, _, sfx, ls in p.lines if sfx.strip()}
    _legend(fig, color, sorted(styles) if len(styles) > 1 else [])
    fig.suptitle(title)
    _save(fig, path)
    return True


def cost_plot(path: Path, runs: list[Run], regs: list[Regression], dims: list[str]) -> bool:
    """DUT cost per packet vs frame size: the cases as points, the fitted line per series."""
    have = [[points(r.cases, m, dims) for m, _ in COST_METRICS] for r in runs]
    if not any(pts for run in have for pts in run):
        return False
    labels = sorted({s for run in have for pts in run for s in pts}, key=series_order)
    color = _colors(labels)
    fig, axes = _figure(len(COST_METRICS), len(runs))
    for col, r in enumerate(runs):
        for row, (metric, ylabel) in enumerate(COST_METRICS):
            ax = axes[row][col]
            drawn = False
            fits = 0
            for c_series in labels:
                xy = [(c["frame_size"], value(c, metric)) for c in r.cases
                      if series_label(c, dims) == c_series and value(c, metric) is not None]
                if not xy:
                    continue
                ax.scatter([x for x, _ in xy], [y for _, y in xy], s=16, color=color[c_series])
                drawn = True
                reg = next((g for g in regs if g.run == r.label and g.metric == metric
                            and g.series == c_series and g.slope is not None), None)
                if reg:
                    xs = [min(x for x, _ in xy), max(x for x, _ in xy)]
                    ax.plot(xs, [reg.slope * x + reg.intercept for x in xs], "-", color=color[c_series],
                            linewidth=1)
                    ax.text(0.02, 0.97 - 0.07 * fits, f"{reg.slope:.4g} ns/B · size + {reg.intercept:.4g} ns, "
                            f"R² {reg.r2:.3f}", transform=ax.transAxes, va="top", fontsize=7,
                            color=color[c_series])
                    fits += 1
            if not drawn:
                ax.text(0.5, 0.5, "not measured", ha="center", va="center", transform=ax.transAxes)
            ax.set_title(f"{r.label} ({dut_label(r.run)}): {ylabel}" if len(runs) > 1 else ylabel, fontsize=10)
            ax.set_xlabel("frame size (bytes, incl. FCS)")
            ax.set_ylabel("ns per packet")
            ax.grid(True, alpha=0.3)
            ax.margins(y=0.25)
    _legend(fig, color, [("-", "least-squares fit")])
    fig.suptitle("DUT cost per packet vs frame size, with a linear fit")
    _save(fig, path)
    return True


def change_plot(path: Path, chs: list[Change]) -> bool:
    """Change (B - A) / A in % of received Mpps and of CPU ns/packet, per series and frame size."""
    rows = [("rx_pps", "received Mpps: change %"), ("dut.cpu_ns_per_packet", "DUT CPU ns/packet: change %")]
    by: dict[str, dict[str, list[tuple[int, float]]]] = {m: defaultdict(list) for m, _ in rows}
    for ch in chs:
        for m, _ in rows:
            pct = ch.values[m][2]
            if pct is not None:
                by[m][ch.series].append((ch.frame_size, pct))
    if not any(by[m] for m, _ in rows):
        return False
    labels = sorted({s for m, _ in rows for s in by[m]}, key=series_order)
    color = _colors(labels)
    fig, axes = _figure(len(rows), 1)
    for row, (m, title) in enumerate(rows):
        ax = axes[row][0]
        for s in labels:
            xy = sorted(by[m].get(s, []))
            if xy:
                ax.plot([x for x, _ in xy], [y for _, y in xy], "-", marker="o", markersize=4,
                        color=color[s])
        if not by[m]:
            ax.text(0.5, 0.5, "no matched values", ha="center", va="center", transform=ax.transAxes)
        ax.axhline(0, color="black", linewidth=0.8)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("frame size (bytes, incl. FCS)")
        ax.set_ylabel("% (B − A) / A")
        ax.grid(True, alpha=0.3)
    _legend(fig, color)
    fig.suptitle("B compared with A")
    _save(fig, path)
    return True
