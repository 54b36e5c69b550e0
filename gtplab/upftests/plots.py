"""The plots of a UPF test's report (report/<kind>.svg, shown in report/index.html), one per kind, drawn
from the case records alone (cases.jsonl), with the sweep report's figure, legend and file helpers
(gtplab.results.plots):

    policing   delivered rate against offered load, a line per burst size, a panel per direction and
               session, the MBR and its +-1 % band (POLICING_TOLERANCE); below, delivered / MBR - 1 in %
               for the loads above the MBR, the band again: what the criterion judges
    handover   per session the sequence number against time on each path (old, new: the case's
               seq_series, downsampled), the Update FAR's send and answer and the End Markers marked
    usage      per session the usage reports in order of arrival, their UL and DL octets added up,
               against the generator's count (dashed) and the threshold or quota (dotted)
    n4         per procedure its latency percentiles (p50, p90, p99, max), idle and loaded

SVG with its text as text (svg.fonttype none): crisp in a browser, searchable, and each element an
engineer asks about has an id (gid, _gid): "mbr-uplink-s0", "series-uplink-s0-burst-8", "path-old-s0",
"end-marker-s0-0" ... Each function returns False and writes nothing when the cases hold nothing to draw.
"""

from __future__ import annotations

import re
from pathlib import Path

from gtplab.results.plots import _colors, _legend, _plt, _save
from gtplab.upftests import criteria as C

COL_W, ROW_H = 5.0, 3.0


def _fig(nrows: int, ncols: int, sharey: str | bool = False):
    from gtplab.results.plots import LEGEND_W
    return _plt().subplots(nrows, ncols, figsize=(COL_W * ncols + LEGEND_W, ROW_H * nrows + 0.8),
                           sharey=sharey, squeeze=False)


def _write(fig, path: Path) -> None:
    with _plt().rc_context({"svg.fonttype": "none", "svg.hashsalt": "gtplab"}):
        _save(fig, path)


def _gid(text: str) -> str:
    """An SVG id from words: "series uplink s0 burst 8, 512 B" -> "series-uplink-s0-burst-8-512-B"."""
    return re.sub(r"[^A-Za-z0-9_.]+", "-", text).strip("-")


def _title(c: dict) -> str:
    return f"{c['case_id']}: {c.get('verdict', '')}"


# ---- policing ------------------------------------------------------------------------------------

def _burst_label(c: dict, sizes: int) -> str:
    b = f"burst {c['burst']}" + (" (15,000 octets)" if c.get("burst_role") == "minimum" else "")
    return b + (f", {c['frame_size']} B" if sizes > 1 else "")


def policing_cases(cases: list[dict]) -> list[dict]:
    """The load cases: a session and direction at a factor of its MBR, with what it delivered."""
    return [c for c in cases if c.get("kind") == "policing" and c.get("factor") is not None
            and c.get("mbr_bps") and c.get("delivered_bps") is not None and c.get("burst") is not None
            and c.get("session") is not None and c.get("direction") in ("uplink", "downlink")]


def policing_plot(path: Path, cases: list[dict]) -> bool:
    load = policing_cases(cases)
    if not load:
        return False
    dirs = [d for d in ("uplink", "downlink") if any(c["direction"] == d for c in load)]
    sessions = sorted({(c["session"], c["mbr_bps"]) for c in load})
    sizes = len({c["frame_size"] for c in load})
    labels = sorted({_burst_label(c, sizes) for c in load},
                    key=lambda s: (int(s.split()[1].split(",")[0]) if s.split()[1].split(",")[0].isdigit() else 0, s))
    color = _colors(labels)
    tol = C.POLICING_TOLERANCE
    fig, axes = _fig(2 * len(dirs), len(sessions))
    for row, d in enumerate(dirs):
        for col, (sess, mbr) in enumerate(sessions):
            ax, err = axes[2 * row][col], axes[2 * row + 1][col]
            mine = [c for c in load if c["direction"] == d and c["session"] == sess]
            m = mbr / 1e6
            band = dict(color="0.6", alpha=0.35, linewidth=0)
            ax.axhspan(m * (1 - tol), m * (1 + tol), **band, gid=_gid(f"mbr-band {d} s{sess}"))
            ax.axhline(m, color="black", linewidth=1, gid=_gid(f"mbr {d} s{sess}"))
            err.axhspan(-100 * tol, 100 * tol, **band, gid=_gid(f"mbr-band-error {d} s{sess}"))
            err.axhline(0, color="black", linewidth=1)
            top = 0.0
            for lab in labels:
                pts = sorted(((c.get("offered_bps") or c["factor"] * mbr) / 1e6, c["delivered_bps"] / 1e6, c["factor"])
                             for c in mine if _burst_label(c, sizes) == lab)
                if not pts:
                    continue
                top = max(top, *(x for x, _, _ in pts), *(y for _, y, _ in pts))
                ax.plot([x for x, _, _ in pts], [y for _, y, _ in pts], "-o", markersize=4, color=color[lab],
                        gid=_gid(f"series {d} s{sess} {lab}"))
                above = [(x, 100 * (y / m - 1)) for x, y, f in pts if f > 1]
                if above:
                    err.plot([x for x, _ in above], [y for _, y in above], "-o", markersize=4, color=color[lab],
                             gid=_gid(f"error {d} s{sess} {lab}"))
            ax.plot([0, top], [0, top], ":", color="0.5", linewidth=1)          # delivered = offered
            ax.text(0.02, 0.97, f"MBR {m:g} Mb/s ± {100 * tol:g} %", transform=ax.transAxes, va="top", fontsize=8)
            ax.set_title(f"{d}, session {sess}: MBR {m:g} Mb/s", fontsize=10)
            ax.set_xlabel("offered (Mb/s, the UE's IP packets)")
            ax.set_ylabel("delivered (Mb/s)")
            ax.set_xlim(left=0)
            ax.set_ylim(bottom=0)
            lo, hi = err.get_ylim()
            err.set_ylim(min(lo, -5 * 100 * tol), max(hi, 5 * 100 * tol))
            err.set_title(f"{d}, session {sess}: above the MBR, delivered vs MBR", fontsize=10)
            err.set_xlabel("offered (Mb/s)")
            err.set_ylabel("delivered / MBR − 1 (%)")
            for a in (ax, err):
                a.grid(True, alpha=0.3)
    _legend(fig, color, [("-", "MBR (band: ± 1 %)"), (":", "delivered = offered")])
    fig.suptitle("Policing: delivered rate against offered load, per burst size")
    _write(fig, path)
    return True


# ---- handover ------------------------------------------------------------------------------------

PATH_COLORS = {"old": "tab:blue", "new": "tab:orange"}


ZOOM_MARGIN_S = 0.005        # the zoomed panel: the switch's events and this much either side


def _switch_times(c: dict) -> tuple[dict, list[float]]:
    """The Update's figures (premise "switch while the traffic ran") and the times the zoom must show:
    the send, the answer, the last old and first new packet, the End Markers."""
    fig_ = next((x.get("figures") or {} for x in c.get("premises") or []
                 if x.get("name") == "switch while the traffic ran"), {})
    ser = c["seq_series"]
    ts = [0.0] + [fig_[k] for k in ("update_answered_at",) if fig_.get(k) is not None]
    ts += [pts[i][0] for p, i in (("old", -1), ("new", 0)) for pts in [ser.get(p) or []] if pts]
    ts += list(ser.get("end_markers_old_at") or []) + list(ser.get("end_markers_new_at") or [])
    return fig_, ts


def _handover_axes(ax, c: dict, scale: float, zoom: bool) -> None:
    ser, sess = c["seq_series"], c.get("session")
    z = "zoom-" if zoom else ""
    fig_, ts = _switch_times(c)
    lo, hi = min(ts) - ZOOM_MARGIN_S, max(ts) + ZOOM_MARGIN_S
    seqs = []
    for p in ("old", "new"):
        pts = ser.get(p) or []
        if zoom:
            pts = [(t, q) for t, q in pts if lo <= t <= hi]
            seqs += [q for _, q in pts]
        if pts:
            ax.plot([t * scale for t, _ in pts], [q for _, q in pts], "o", markersize=3 if zoom else 2,
                    color=PATH_COLORS[p], gid=_gid(f"{z}path {p} s{sess}"))
    ax.axvline(0, color="black", linewidth=1, gid=_gid(f"{z}update-sent s{sess}"))
    if fig_.get("update_answered_at") is not None:
        ax.axvline(fig_["update_answered_at"] * scale, color="black", linestyle="--", linewidth=1,
                   gid=_gid(f"{z}update-answered s{sess}"))
    for i, t in enumerate(ser.get("end_markers_old_at") or []):
        ax.axvline(t * scale, color="tab:red", linewidth=1.5, gid=_gid(f"{z}end-marker s{sess} {i}"))
    for i, t in enumerate(ser.get("end_markers_new_at") or []):
        ax.axvline(t * scale, color="tab:red", linestyle=":", linewidth=1.5, gid=_gid(f"{z}end-marker-new s{sess} {i}"))
    if zoom:
        ax.set_xlim(lo * scale, hi * scale)
        if seqs:
            ax.set_ylim(min(seqs) - 2, max(seqs) + 2)
        ax.set_title(f"session {sess}: the switch, zoomed", fontsize=10)
        ax.set_xlabel("time from the Update FAR's send (ms)")
    else:
        n = ser.get("packets") or {}
        sw = f"switch {c['switch_ms']:.2f} ms" if c.get("switch_ms") is not None else "no packet on the new path"
        ax.text(0.02, 0.97, f"old path {n.get('old', '?')} packets, new {n.get('new', '?')}; missing "
                f"{c.get('missing', '?')}, twice {c.get('duplicates', '?')}; {sw}",
                transform=ax.transAxes, va="top", fontsize=7)
        ax.set_title(_title(c) + (f" (QFI {c['qfi']})" if c.get("qfi") is not None else ""), fontsize=10)
        ax.set_xlabel("time from the Update FAR's send (s)")
    ax.set_ylabel("sequence number")
    ax.grid(True, alpha=0.3)


def handover_plot(path: Path, cases: list[dict]) -> bool:
    hs = [c for c in cases if c.get("kind") == "handover" and isinstance(c.get("seq_series"), dict)]
    if not hs:
        return False
    fig, axes = _fig(2, len(hs))
    for col, c in enumerate(hs):
        _handover_axes(axes[0][col], c, 1.0, zoom=False)
        _handover_axes(axes[1][col], c, 1e3, zoom=True)
    from matplotlib.lines import Line2D
    handles = [Line2D([], [], color=PATH_COLORS[p], marker="o", linestyle="") for p in ("old", "new")] + [
        Line2D([], [], color="black"), Line2D([], [], color="black", linestyle="--"),
        Line2D([], [], color="tab:red", linewidth=1.5)]
    fig.legend(handles, ["old path", "new path", "Update FAR sent", "Update FAR answered", "End Marker (old tunnel)"],
               loc="center right", fontsize=8, frameon=False)
    fig.suptitle("Handover: each downlink packet's sequence number on the old and the new path")
    _write(fig, path)
    return True


# ---- usage ---------------------------------------------------------------------------------------

VOL_COLORS = {"uplink": "tab:blue", "downlink": "tab:orange"}


def usage_plot(path: Path, cases: list[dict]) -> bool:
    us = [c for c in cases if c.get("kind") == "usage" and isinstance(c.get("reports"), list)]
    if not us:
        return False
    ncols = min(4, len(us))
    nrows = -(-len(us) // ncols)
    fig, axes = _fig(nrows, ncols)
    top = max([abs(v) for c in us for r in c["reports"] for v in (r.get("volume") or [])[:1] if v]
              + [v for c in us for v in (c.get("generator") or {}).values() if isinstance(v, (int, float))]
              + [c.get("limit") or 0 for c in us] + [1])
    div, unit = (1e6, "MB") if top >= 1e7 else (1e3, "kB") if top >= 1e4 else (1, "octets")
    for k, c in enumerate(us):
        ax = axes[k // ncols][k % ncols]
        reps = sorted(c["reports"], key=lambda r: (r.get("at") is None, r.get("at") or 0))
        gen = c.get("generator") or {}
        sess = c.get("session")
        for i, d in ((1, "uplink"), (2, "downlink")):
            vals = [(r.get("volume") or [None] * 3)[i] for r in reps]
            cum, tot = [], 0
            for v in vals:
                tot += v or 0
                cum.append(tot / div)
            if reps:
                ax.plot(range(1, len(reps) + 1), cum, "-o", markersize=4, drawstyle="steps-post",
                        color=VOL_COLORS[d], gid=_gid(f"reported {d} s{sess}"))
            g = gen.get(f"{d[0]}l_bytes")
            if g is not None:
                ax.axhline(g / div, color=VOL_COLORS[d], linestyle="--", linewidth=1,
                           gid=_gid(f"generator {d} s{sess}"))
        limit = c.get("limit") or (c.get("threshold") or {}).get("limit")
        if limit:
            ax.axhline(limit / div, color="black", linestyle=":", linewidth=1, gid=_gid(f"limit s{sess}"))
        if not reps:
            ax.text(0.5, 0.5, "no usage report", ha="center", va="center", transform=ax.transAxes)
        ax.set_xticks(range(1, len(reps) + 1))
        ax.set_xticklabels(["/".join(r.get("triggers") or []) or r.get("where", "") or "?" for r in reps],
                           rotation=45, ha="right", fontsize=7)
        ax.set_title(_title(c), fontsize=10)
        ax.set_ylabel(f"reported, added up ({unit})")
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
    for k in range(len(us), nrows * ncols):
        axes[k // ncols][k % ncols].set_visible(False)
    _legend(fig, {"uplink, reported": VOL_COLORS["uplink"], "downlink, reported": VOL_COLORS["downlink"]},
            [("--", "the generator's count"), (":", "threshold / quota")])
    fig.suptitle("Usage reports (in order of arrival, by trigger) against the generator's count")
    _write(fig, path)
    return True


# ---- n4 ------------------------------------------------------------------------------------------

PERCENTILES = (("p50_ms", "p50"), ("p90_ms", "p90"), ("p99_ms", "p99"), ("max_ms", "max"))
COND_COLORS = {"idle": "tab:blue", "loaded": "tab:orange"}


def n4_plot(path: Path, cases: list[dict]) -> bool:
    n4 = [c for c in cases if c.get("kind") == "n4" and c.get("phase") and c.get("condition") in COND_COLORS]
    phases = list(dict.fromkeys(c["phase"] for c in n4))
    if not any(c.get(k) is not None for c in n4 for k, _ in PERCENTILES):
        return False
    fig, axes = _fig(1, len(phases), sharey="row")
    w = 0.38
    for col, ph in enumerate(phases):
        ax = axes[0][col]
        for j, cond in enumerate(COND_COLORS):
            c = next((x for x in n4 if x["phase"] == ph and x["condition"] == cond), None)
            if c is None:
                continue
            xs = [i + (j - 0.5) * w for i, _ in enumerate(PERCENTILES)]
            ys = [c.get(k) or 0 for k, _ in PERCENTILES]
            # a case whose premise did not hold (the load not offered as asked): drawn, hatched and pale,
            # never read as the UPF's latency at that load
            undecided = c.get("verdict") == "not decided"
            for bar, (_, name) in zip(ax.bar(xs, ys, w, color=COND_COLORS[cond], alpha=0.4 if undecided else 1.0,
                                             hatch="//" if undecided else None, edgecolor="black" if undecided else None),
                                      PERCENTILES):
                bar.set_gid(_gid(f"latency {ph} {cond} {name}" + (" not decided" if undecided else "")))
            for x, (k, _) in zip(xs, PERCENTILES):
                if c.get(k) is None:
                    ax.text(x, 0, "n/a", ha="center", va="bottom", fontsize=7)
        loaded = next((x for x in n4 if x["phase"] == ph and x["condition"] == "loaded"), {})
        ax.set_xticks(range(len(PERCENTILES)))
        ax.set_xticklabels([n for _, n in PERCENTILES])
        ax.set_title(f"{ph}" + (f" (loaded: {loaded['load_pps'] / 1e6:.2f} Mpps asked"
                                + ("; not decided: hatched" if loaded.get("verdict") == "not decided" else "") + ")"
                                if loaded.get("load_pps") else ""), fontsize=10)
        ax.set_ylabel("request → answer (ms)")
        ax.tick_params(labelleft=True)          # one scale for all, read on every panel
        ax.grid(True, axis="y", alpha=0.3)
    _legend(fig, {"idle": COND_COLORS["idle"], "loaded (data plane under load)": COND_COLORS["loaded"]})
    fig.suptitle("N4: latency percentiles per procedure, idle and loaded")
    _write(fig, path)
    return True


PLOTS = {"policing": policing_plot, "handover": handover_plot, "usage": usage_plot, "n4": n4_plot}
