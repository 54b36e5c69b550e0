"""A sweep's report: `gtplab report RESULTS_DIR [OTHER_RESULTS_DIR]` -> a static HTML page with PNG plots.

    build_report(results_dir, other_dir=None, out_dir=None) -> Path of index.html

Reads only the results directory (docs/results.md: run.json, cases.jsonl). Plots, one PNG each
(matplotlib, Agg): throughput in Mpps and in Gbps (L1, L2), loss, latency percentiles, DUT CPU cost
with a linear fit (scikit-learn) per direction, checksum on vs off, single vs multi flow. With
OTHER_RESULTS_DIR, every plot shows the two runs side by side (A = RESULTS_DIR, B = OTHER) and a
table gives the change (B - A) / A in %. Flame graphs written by `gtplab sweep --flamegraph`
(RESULTS_DIR/flamegraphs/case-<id>.svg) are linked from the table of cases.

A plot with no data is not drawn; the page says what is missing instead. The report is written into
a temporary directory next to OUT_DIR and renamed into place, so a failure leaves the previous
report (or nothing) and never half a report. docs/report.md explains the plots and the fit.

Used by `gtplab report` and by `gtplab sweep` at its end. This module reads and compares the runs;
plots.py draws the PNGs and html.py writes the page (both imported only when a report is built).
"""

from __future__ import annotations

import argparse
import html
import json
import math
import os
import shutil
import tempfile
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable

from gtplab.results import store as results
from gtplab.errors import UserError

DIRECTIONS = ("uplink", "downlink")
# case parameters besides direction and frame size; a plot series is one combination of those that vary
VARIANT_DIMS = ("flow_mode", "flows", "checksum", "bearers", "rate_mode", "order")
NUMERIC_FIELDS = ("duration_s", "offered_pps", "offered_bps_l1", "offered_bps_l2", "rx_pps",
                  "rx_bps_l1", "rx_bps_l2", "tx_packets", "rx_packets", "loss_ratio", "flows", "bearers")
LATENCY_STATS = ("min", "avg", "p50", "p99", "max")
DUT_NUMERIC = ("rx_packets", "fwd_packets", "drop_packets", "ns_per_packet", "cpu_seconds",
               "cpu_ns_per_packet")
COST_METRICS = (("dut.cpu_ns_per_packet", "DUT CPU time per packet (ns)"),
                ("dut.ns_per_packet", "XDP program run time per packet (ns)"))
# what the comparison table compares, with how it is shown
CHANGE_METRICS = (("rx_pps", "rx Mpps", 1e-6), ("rx_bps_l1", "rx Gbps L1", 1e-9),
                  ("loss_ratio", "loss %", 100.0), ("latency_us.p99", "latency p99 µs", 1.0),
                  ("dut.ns_per_packet", "XDP ns/pkt", 1.0), ("dut.cpu_ns_per_packet", "CPU ns/pkt", 1.0))
MARKER = ".gtplab-report"  # in every report directory: only such a directory is ever replaced


# --- reading and checking the results directory -----------------------------------------------------

@dataclass
class Run:
    path: Path
    run: dict[str, Any]
    cases: list[dict[str, Any]]
    label: str = "A"


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def load(results_dir: str | os.PathLike, label: str = "A") -> Run:
    """run.json and cases.jsonl, checked for what the report needs (ResultsError names file:line)."""
    d = Path(results_dir)
    if not d.is_dir():
        raise results.ResultsError(f"{d}: not a directory")
    run = results.read_run(d)
    cases = results.read_cases(d)
    path = d / results.CASES_FILE
    lines = [n for n, line in enumerate(path.read_text().splitlines(), 1) if line.strip()]
    seen: dict[str, int] = {}
    for n, c in zip(lines, cases):
        where = f"{path}:{n}"

        def bad(msg: str) -> results.ResultsError:
            return results.ResultsError(f"{where}: {msg}")

        cid = c["case_id"]
        if not isinstance(cid, str) or not cid:
            raise bad(f"case_id is not a non-empty string: {cid!r}")
        if cid in seen:
            raise bad(f"case_id {cid!r} already on line {seen[cid]}")
        seen[cid] = n
        if c["direction"] not in DIRECTIONS:
            raise bad(f"direction is {c['direction']!r}, not uplink or downlink")
        fs = c["frame_size"]
        if not isinstance(fs, int) or isinstance(fs, bool) or fs <= 0:
            raise bad(f"frame_size is not a positive integer: {fs!r}")
        for k in NUMERIC_FIELDS:
            if c.get(k) is not None and not _is_num(c[k]):
                raise bad(f"{k} is not a number: {c[k]!r}")
        for k, keys in (("latency_us", LATENCY_STATS), ("dut", DUT_NUMERIC)):
            sub = c.get(k)
            if sub is None:
                continue
            if not isinstance(sub, dict):
                raise bad(f"{k} is not an object: {sub!r}")
            for s in keys:
                if sub.get(s) is not None and not _is_num(sub[s]):
                    raise bad(f"{k}.{s} is not a number: {sub[s]!r}")
    if not cases:
        raise results.ResultsError(f"{path}: no cases (did the sweep finish any case?)")
    return Run(d, run, cases, label)


def value(case: dict[str, Any], key: str) -> float | None:
    """case["a"]["b"] for key "a.b"; None when missing, null or not a number."""
    v: Any = case
    for part in key.split("."):
        if not isinstance(v, dict):
            return None
        v = v.get(part)
    return float(v) if _is_num(v) else None


# --- series -----------------------------------------------------------------------------------------

def varying_dims(runs: Iterable[Run]) -> list[str]:
    """The case parameters (besides direction, frame size) that take more than one value."""
    vals: dict[str, set] = defaultdict(set)
    for r in runs:
        for c in r.cases:
            for d in VARIANT_DIMS:
                vals[d].add(json.dumps(c.get(d)))
    return [d for d in VARIANT_DIMS if len(vals[d]) > 1]


def _dim_label(dim: str, v: Any) -> str:
    if dim == "flows":
        return f"{v} flow{'s' if v != 1 else ''}"
    if dim == "bearers":
        return f"{v} bearers"
    if dim == "checksum":
        return f"checksum {v}"
    if dim == "flow_mode":
        return f"{v} flow" if v in ("single", "multi") else f"flow_mode {v}"
    return f"{dim} {v}"


def series_label(case: dict[str, Any], dims: list[str]) -> str:
    parts = [str(case["direction"])]
    for d in dims:
        if d == "flow_mode" and "flows" in dims:
            continue  # shown with flows: "1 flow (single)"
        part = _dim_label(d, case.get(d))
        if d == "flows" and "flow_mode" in dims:
            part += f" ({case.get('flow_mode')})"
        parts.append(part)
    return ", ".join(parts)


def _series_order(label: str) -> tuple:
    d = label.split(",")[0]
    return (DIRECTIONS.index(d) if d in DIRECTIONS else 9, label)


def points(cases: list[dict[str, Any]], metric: str, dims: list[str]) -> dict[str, list[tuple[int, float]]]:
    """{series: [(frame_size, mean of metric over the cases of that size), ...]} sorted by size."""
    acc: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for c in cases:
        v = value(c, metric)
        if v is not None:
            acc[series_label(c, dims)][c["frame_size"]].append(v)
    return {s: sorted((fs, sum(vs) / len(vs)) for fs, vs in by.items())
            for s, by in sorted(acc.items(), key=lambda kv: _series_order(kv[0]))}


# parameters that change together with another one (a single-flow case has 1 flow): not held fixed
TIED = {"flow_mode": ("flows",), "flows": ("flow_mode",)}


def reference_subset(runs: list[Run], dim: str) -> tuple[list[list[dict]], dict[str, Any]]:
    """The cases of each run where every other varying parameter (except those tied to `dim`) has its
    most common value, so a plot of `dim` compares like with like. Returns (cases per run, the fixed
    values)."""
    others = [d for d in varying_dims(runs) if d != dim and d not in TIED.get(dim, ())]
    fixed = {}
    for d in others:
        cnt = Counter(json.dumps(c.get(d)) for r in runs for c in r.cases)
        fixed[d] = json.loads(cnt.most_common(1)[0][0])
    subset = [[c for c in r.cases if all(c.get(d) == v for d, v in fixed.items())] for r in runs]
    return subset, fixed


# --- regression -------------------------------------------------------------------------------------

@dataclass
class Regression:
    run: str
    metric: str
    series: str
    n: int                      # points (cases) in the fit
    sizes: int                  # distinct frame sizes
    slope: float | None = None  # ns per byte of frame
    intercept: float | None = None  # ns per packet at 0 bytes: the fixed per-packet cost
    r2: float | None = None
    note: str = ""


def regressions(run: Run, dims: list[str]) -> list[Regression]:
    """Least squares fit metric = slope * frame_size + intercept, per metric and series."""
    import numpy as np
    from sklearn.linear_model import LinearRegression

    out = []
    for metric, _ in COST_METRICS:
        pts: dict[str, list[tuple[int, float]]] = defaultdict(list)
        for c in run.cases:
            v = value(c, metric)
            if v is not None:
                pts[series_label(c, dims)].append((c["frame_size"], v))
        for s in sorted(pts, key=_series_order):
            xy = pts[s]
            sizes = len({x for x, _ in xy})
            reg = Regression(run.label, metric, s, len(xy), sizes)
            if sizes < 2:
                reg.note = f"not fitted: needs at least 2 frame sizes, has {sizes}"
            else:
                x = np.array([[float(x)] for x, _ in xy])
                y = np.array([y for _, y in xy])
                lr = LinearRegression().fit(x, y)
                reg.slope = float(lr.coef_[0])
                reg.intercept = float(lr.intercept_)
                reg.r2 = float(lr.score(x, y))
                if len(xy) == 2:
                    reg.note = "2 points: the line passes through both, R² = 1 says nothing"
            out.append(reg)
    return out


# --- comparison -------------------------------------------------------------------------------------

def case_key(c: dict[str, Any]) -> tuple:
    return (c["direction"], c["frame_size"]) + tuple(json.dumps(c.get(d)) for d in VARIANT_DIMS)


def pct_change(a: float | None, b: float | None) -> float | None:
    """(b - a) / a in %, None when either is missing or a is 0."""
    if a is None or b is None or a == 0:
        return None
    return (b - a) / abs(a) * 100.0


@dataclass
class Change:
    key: str                      # the matched parameters, readable
    series: str
    frame_size: int
    case_a: str
    case_b: str
    values: dict[str, list] = field(default_factory=dict)  # metric -> [a, b, change %]


def changes(a: Run, b: Run, dims: list[str]) -> tuple[list[Change], list[str], list[str]]:
    """Cases of A and B with the same parameters, matched; plus the case ids found only in A, in B."""
    kb = {}
    for c in b.cases:
        kb.setdefault(case_key(c), c)
    out, only_a, matched = [], [], set()
    for ca in sorted(a.cases, key=lambda c: (_series_order(series_label(c, dims)), c["frame_size"])):
        cb = kb.get(case_key(ca))
        if cb is None or case_key(ca) in matched:
            only_a.append(ca["case_id"])
            continue
        matched.add(case_key(ca))
        ch = Change(f"{series_label(ca, dims)}, {ca['frame_size']} B", series_label(ca, dims),
                    ca["frame_size"], ca["case_id"], cb["case_id"])
        for m, _, _ in CHANGE_METRICS:
            va, vb = value(ca, m), value(cb, m)
            ch.values[m] = [va, vb, pct_change(va, vb)]
        out.append(ch)
    only_b = [c["case_id"] for c in b.cases if case_key(c) not in matched]
    return out, only_a, only_b


def limit_text(c: dict[str, Any]) -> str:
    """Which side set a case's result, in words a reader of the report alone can act on."""
    lim = c.get("limit")
    if c.get("rate_mode") in ("ndr", "pdr"):
        if c.get("ndr_pps"):
            return "DUT: loss began at the DUT above this rate"
        if c.get("generator_bound"):
            return (f"{lim or 'generator (transmit)'}: no {c['rate_mode'].upper()} claimed, the "
                    "DUT's is higher than the generator could show")
        return "no result: " + str(c.get("status", ""))
    return {"dut": "DUT (it lost packets)", "generator (transmit)": "generator: sent less than asked",
            "generator (receive)": "generator: its receive side lost packets"}.get(lim, "none: no loss at "
                                                                                  "the rate asked")


def reference_ratios(a: Run, b: Run) -> list[dict[str, Any]] | None:
    """PGW-U NDR / reference forwarder NDR per (direction, frame size), when one run is each."""
    modes = {r.run.get("dut_mode"): r for r in (a, b)}
    if set(modes) != {"pgwu", "fwd"}:
        return None
    pg, fw = modes["pgwu"], modes["fwd"]
    def seq(cases):   # the scale cases (random order) have their own table
        return [c for c in cases if c.get("order", "seq") == "seq"]
    ref = {(c["direction"], c["frame_size"]): c for c in seq(fw.cases)}
    out = []
    for c in seq(pg.cases):
        f = ref.get((c["direction"], c["frame_size"]))
        if f is None:
            continue
        x, y = c.get("ndr_pps"), f.get("ndr_pps")
        out.append({"direction": c["direction"], "frame_size": c["frame_size"], "pgwu_ndr_pps": x,
                    "fwd_ndr_pps": y, "ratio": x / y if x and y else None,
                    "note": "" if x and y else ("forwarder: " + limit_text(f) if not y else "PGW-U: " + limit_text(c))})
    return out


SCALE_TARGET = 0.7   # issue 13: NDR with 1 M bearers in random order >= 0.7 x NDR with 1 k bearers


def scale_ratios(r: Run) -> list[dict[str, Any]]:
    """Each case whose traffic hits its bearers in random order, against the multi-flow case of
    the same direction, frame size and checksum in sequential order (the grid's `flows`): NDR
    ratio, and the DUT's CPU and XDP ns per packet of both."""
    grid = {(c["direction"], c["frame_size"], c.get("checksum")): c for c in r.cases
            if c.get("flow_mode") == "multi" and c.get("order", "seq") == "seq"}
    out = []
    for c in r.cases:
        if c.get("order", "seq") != "random":
            continue
        g = grid.get((c["direction"], c["frame_size"], c.get("checksum")))
        x, y = c.get("ndr_pps"), (g or {}).get("ndr_pps")
        note = ""
        if g is None:
            note = "no sequential multi-flow case of the same size in this run"
        elif not x or not y:
            note = ("random: " + limit_text(c)) if not x else ("sequential: " + limit_text(g))
        elif (c.get("limit") or "").startswith("generator") or (g.get("limit") or "").startswith("generator"):
            note = "a side was generator-bound: the ratio is a bound, not the DUT's"
        out.append({"direction": c["direction"], "frame_size": c["frame_size"],
                    "flows": (g or {}).get("flows"), "ndr_pps": y, "scale_flows": c["flows"],
                    "scale_ndr_pps": x, "ratio": x / y if x and y else None,
                    "cpu_ns": ((g or {}).get("dut") or {}).get("cpu_ns_per_packet"),
                    "scale_cpu_ns": (c.get("dut") or {}).get("cpu_ns_per_packet"),
                    "xdp_ns": ((g or {}).get("dut") or {}).get("ns_per_packet"),
                    "scale_xdp_ns": (c.get("dut") or {}).get("ns_per_packet"), "note": note})
    return out


# --- the report -------------------------------------------------------------------------------------

def _default_out(a: Run, b: Run | None) -> Path:
    if b is None:
        return a.path / "report"
    return a.path / f"report-vs-{b.path.resolve().name}"


def _replace_dir(tmp: Path, out: Path) -> None:
    """Move the finished report tmp to out; an earlier report there is replaced, anything else refused."""
    if out.exists():
        if not (out / MARKER).is_file():
            raise results.ResultsError(f"{out}: exists and is not a gtplab report; not replacing it")
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
        os.replace(out, old / "r")
        os.replace(tmp, out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, out)


def build_report(results_dir: str | os.PathLike, other_dir: str | os.PathLike | None = None,
                 out_dir: str | os.PathLike | None = None) -> Path:
    """Write the report (index.html, one PNG per plot, summary.json) and return index.html's path.

    out_dir defaults to RESULTS_DIR/report, or RESULTS_DIR/report-vs-<OTHER's name> with other_dir.
    Raises results.ResultsError (file and line) for a directory that does not follow docs/results.md;
    then nothing is written."""
    a = load(results_dir, "A")
    b = load(other_dir, "B") if other_dir is not None else None
    runs = [a] + ([b] if b else [])
    out = Path(out_dir) if out_dir is not None else _default_out(a, b)
    if out.exists() and not out.is_dir():
        raise results.ResultsError(f"{out}: exists and is not a directory")
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.exists() and not (out / MARKER).is_file():
        raise results.ResultsError(f"{out}: exists and is not a gtplab report; not replacing it")
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        os.chmod(tmp, 0o755)  # mkdtemp makes it private; a report is for reading
        _build(runs, tmp, out)
        (tmp / MARKER).write_text("written by gtplab report; the next report replaces this directory\n")
        _replace_dir(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out / "index.html"


def _build(runs: list[Run], tmp: Path, final: Path) -> None:
    from gtplab.results.html import (Section, _cases_table, _change_table, _ratio_table, _regression_table,
                                     _scale_table, _write_html)
    from gtplab.results.plots import Panel, change_plot, cost_plot, series_plot  # matplotlib: only now
    dims = varying_dims(runs)
    cols = [(r.label, r.cases) for r in runs]
    sections: list[Section] = []
    plots: list[str] = []

    def plot(s: Section, name: str, ok: bool, missing: str) -> None:
        if ok:
            s.png = name
            plots.append(name)
        else:
            s.notes.append(missing)
        sections.append(s)

    s = Section("mpps", "Throughput (Mpps)",
                "Received packets per second (solid) and the offered load (dotted) per frame size, one "
                "line per direction" + (" and " + ", ".join(dims) if dims else "") + ".")
    plot(s, "throughput_mpps.png", series_plot(tmp / "throughput_mpps.png", "Throughput, packets", cols, [
        Panel("packets per second", "Mpps", [("rx_pps", 1e-6, " rx", "-"), ("offered_pps", 1e-6, " offered", ":")])],
        dims), "No case has rx_pps or offered_pps.")

    s = Section("gbps", "Throughput (Gbps, L1 and L2)",
                "Received bits per second. L2 counts the frame (incl. FCS); L1 adds 20 bytes per frame "
                "(preamble, SFD, inter-frame gap), which is what fills a link.")
    plot(s, "throughput_gbps.png", series_plot(tmp / "throughput_gbps.png", "Throughput, bits", cols, [
        Panel("L1 (on the wire)", "Gbps", [("rx_bps_l1", 1e-9, " rx", "-"), ("offered_bps_l1", 1e-9, " offered", ":")]),
        Panel("L2 (frames)", "Gbps", [("rx_bps_l2", 1e-9, " rx", "-"), ("offered_bps_l2", 1e-9, " offered", ":")])],
        dims), "No case has rx_bps_l1/rx_bps_l2.")

    s = Section("loss", "Loss", "(tx − rx) / tx of the generator counters, in %.")
    plot(s, "loss.png", series_plot(tmp / "loss.png", "Loss", cols, [
        Panel("loss", "% of sent packets", [("loss_ratio", 100.0, "", "-")])], dims),
        "No case has loss_ratio.")

    s = Section("latency", "Latency percentiles",
                "One-way latency of the latency streams in µs: median, 99th percentile and maximum.")
    plot(s, "latency.png", series_plot(tmp / "latency.png", "Latency", cols, [
        Panel(f"latency {st}", "µs", [(f"latency_us.{st}", 1.0, "", "-")]) for st in ("p50", "p99", "max")],
        dims), "No latency was measured in " + ("these runs" if len(runs) > 1 else "this run")
        + " (latency_us is null in every case), so there is no latency plot.")

    regs = [g for r in runs for g in regressions(r, dims)]
    s = Section("cost", "DUT CPU cost vs frame size",
                "Per packet: DUT CPU time (dut.cpu_ns_per_packet, everything the DUT's CPUs spent) and the "
                "XDP program's own run time (dut.ns_per_packet, BPF stats). A least-squares line "
                "(scikit-learn LinearRegression) per direction: <b>slope</b> = ns per byte (cost that grows "
                "with the frame: copies, checksums, cache misses), <b>intercept</b> = ns per packet "
                "at zero length (fixed per-packet cost: parsing, lookups, the XDP call), R² = how much "
                "of the variation the line explains.")
    s.extra = _regression_table(regs)
    s.notes += [f"{g.run}: {g.metric}, {g.series}: {g.note}" for g in regs if g.slope is None]
    plot(s, "cpu_cost.png", cost_plot(tmp / "cpu_cost.png", runs, regs, dims),
         "No case has dut.cpu_ns_per_packet or dut.ns_per_packet: the DUT cost was not measured.")

    for dim, pid, title, want, metrics in (
            ("checksum", "checksum", "Checksum on vs off", ("on", "off"),
             [Panel("received", "Mpps", [("rx_pps", 1e-6, "", "-")]),
              Panel("XDP program time", "ns per packet", [("dut.ns_per_packet", 1.0, "", "-")])]),
            ("flow_mode", "flows", "Single vs multi flow", ("single", "multi"),
             [Panel("received", "Mpps", [("rx_pps", 1e-6, "", "-")]),
              Panel("loss", "% of sent", [("loss_ratio", 100.0, "", "-")])])):
        subset, fixed = reference_subset(runs, dim)
        present = sorted({str(c.get(dim)) for cases in subset for c in cases})
        fixed_txt = ", ".join(_dim_label(d, v) for d, v in fixed.items())
        s = Section(pid, title, f"The cases that differ only in {dim}"
                    + (f" (the others fixed at {html.escape(fixed_txt)})" if fixed_txt else "") + ".")
        missing = [w for w in want if w not in present]
        if missing:
            s.notes.append(f"No {title.lower()} comparison: the cases have {dim} "
                           f"{' and '.join(present) or 'unset'} only (no {' or '.join(missing)}).")
            sections.append(s)
            continue
        sdims = [dim]
        plot(s, f"{pid}.png", series_plot(tmp / f"{pid}.png", title,
                                          [(r.label, cs) for r, cs in zip(runs, subset)], metrics, sdims),
             f"No values to compare for {title.lower()}.")

    summary: dict[str, Any] = {"runs": [{"label": r.label, "dir": str(r.path), **r.run, "cases": len(r.cases)}
                                        for r in runs],
                               "series_dims": dims, "regressions": [asdict(g) for g in regs]}
    tables = ""
    if len(runs) == 2:
        chs, only_a, only_b = changes(runs[0], runs[1], dims)
        s = Section("change", "Change from A to B",
                    "Cases with the same parameters (direction, frame size, " + ", ".join(VARIANT_DIMS)
                    + ") in both runs, matched. Change = (B − A) / A; n/a when A is 0 or a value is missing.")
        if only_a:
            s.notes.append(f"Only in A ({len(only_a)}): {', '.join(only_a[:20])}{' …' if len(only_a) > 20 else ''}")
        if only_b:
            s.notes.append(f"Only in B ({len(only_b)}): {', '.join(only_b[:20])}{' …' if len(only_b) > 20 else ''}")
        s.extra = _change_table(chs)
        plot(s, "change.png", change_plot(tmp / "change.png", chs),
             "No case of A matches a case of B with values on both sides.")
        summary["changes"] = [asdict(c) for c in chs]
        summary["only_a"], summary["only_b"] = only_a, only_b
        ratios = reference_ratios(runs[0], runs[1])
        if ratios is not None:
            s = Section("reference", "PGW-U against the reference forwarder",
                        "NDR of the PGW-U divided by the NDR of the plain XDP forwarder on the same machine, "
                        "CPU layout and frame size: how much of what this machine can forward at all the "
                        "PGW-U's own work leaves.")
            s.extra = _ratio_table(ratios)
            sections.append(s)
            summary["reference_ratios"] = ratios
    for r in runs:
        rows = scale_ratios(r)
        if rows:
            s = Section(f"scale-{r.label}", "Bearer scale" + (f" ({r.label})" if len(runs) > 1 else ""),
                        "NDR with many bearers hit in random order (as subscribers hit a PGW-U) against "
                        "NDR with the sweep's multi-flow bearers in sequential order, same direction, frame "
                        "size and CPU layout: what table size and cache misses cost the DUT.")
            s.extra = _scale_table(rows)
            sections.append(s)
            summary.setdefault("scale_ratios", {})[r.label] = rows
    tables = '<h2 id="cases">All cases</h2>' + "".join(
        (f"<h3>{r.label}: {html.escape(str(r.path))}</h3>" if len(runs) > 1 else "") + _cases_table(r, final)
        for r in runs)
    fg = sum(1 for r in runs for c in r.cases if results.flamegraph_path(r.path, c["case_id"]).is_file())
    tables += (f"<p>{fg} flame graph(s) from <code>gtplab sweep --flamegraph</code> are linked in the table.</p>"
               if fg else "<p>No flame graphs (run <code>gtplab sweep --flamegraph</code> to record them).</p>")
    summary["plots"] = plots
    summary["notes"] = [n for s in sections for n in s.notes]
    _write_html(tmp / "index.html", runs, sections, tables)
    (tmp / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")


# --- CLI --------------------------------------------------------------------------------------------

def do_report(args: argparse.Namespace) -> int:
    try:
        index = build_report(args.results_dir, args.other_dir, args.out)
    except results.ResultsError as e:
        raise UserError(str(e)) from None
    except OSError as e:
        raise UserError(f"couldn't write the report: {e}") from None
    print(index)
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("report", help="HTML report with plots of a sweep (or two sweeps compared)",
                       description=__doc__.splitlines()[0])
    p.add_argument("results_dir", metavar="RESULTS_DIR", help="a sweep results directory (run.json, cases.jsonl)")
    p.add_argument("other_dir", metavar="OTHER_RESULTS_DIR", nargs="?",
                   help="a second run: plots side by side (A = RESULTS_DIR, B = this) and changes in %%")
    p.add_argument("-o", "--out", metavar="DIR",
                   help="report directory (default: RESULTS_DIR/report, or RESULTS_DIR/report-vs-<OTHER> "
                        "with a second run); an earlier report there is replaced")
    p.set_defaults(func=do_report)
