"""What a report says about one sweep or several, before anything is drawn: the results directory
read and checked (load, value), the series a plot shows (varying_dims, series_label, points), the
DUT's cost against frame size (regressions, a linear fit with scikit-learn), the change between two
runs (changes, pct_change), a DUT against the reference forwarder (reference_ratios), the DUTs of
several runs side by side (side_by_side, which DUT each is: dut_label) and the bearer scale ratios
(scale_ratios).

Pure functions of the runs: no file is written and nothing is drawn here. gtplab.results.report
reads with load(), analyses with the rest, then has plots.py draw and html.py write; docs/report.md
explains the method.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from gtplab.goalcode import dense_code, label
from gtplab.results import store as results

DIRECTIONS = ("uplink", "downlink")
# case parameters besides direction and frame size; a plot series is one combination of those that vary
VARIANT_DIMS = ("flow_mode", "flows", "checksum", "bearers", "rate_mode", "order", "ip", "n3")
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
    if run.get("kind") == "upftest":
        raise results.ResultsError(f"{d}: a gtplab upftest run ({run.get('test')}, {run.get('upf')}): its report "
                                   f"is {d / 'report.md'} and {d / 'report' / 'index.html'}, written by "
                                   "gtplab upftest; several runs side by side: gtplab upftest table DIR...")
    cases = results.read_cases(d, run.get("uuid"))
    path = d / results.CASES_FILE
    lines = [n for n, raw, _ in results._lines(path) if raw.strip()]     # a line at a time, to the store's bounds
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
        c.setdefault("ip", "4")             # the user packets' family: IPv4 before issue 32
        if str(c["ip"]) not in ("4", "6", "4v6"):
            raise bad(f"ip is {c['ip']!r}, not 4, 6 or 4v6")
        c.setdefault("n3", "4")             # GTP-U over IPv4 before issue 32's N3 over IPv6
        if str(c["n3"]) not in ("4", "6"):
            raise bad(f"n3 is {c['n3']!r}, not 4 or 6")
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
    """case["a"]["b"] for key "a.b" (as cases.csv names the columns); a key with dots of its own
    (the goal code PDR0.5 in "goals.PDR0.5.lower_pps") is matched whole. None when missing, null or
    not a number."""
    v: Any = case
    parts = key.split(".")
    i = 0
    while i < len(parts):
        if not isinstance(v, dict):
            return None
        for j in range(len(parts), i, -1):
            k = ".".join(parts[i:j])
            if k in v:
                v, i = v[k], j
                break
        else:
            return None
    return float(v) if _is_num(v) else None


def goal_codes(runs: Iterable[Run]) -> list[str]:
    """The search goals' codes of the runs' cases (rate mode search), in the order they first appear."""
    out: list[str] = []
    for r in runs:
        for c in r.cases:
            for code in c.get("goals") or {}:
                if code not in out:
                    out.append(code)
    return out


def goal_rfc_code(g: dict[str, Any] | None) -> str | None:
    """RFC 9971's dense code of one goal result of a case (case["goals"][code]): its rfc_code, else
    computed from its goal's attributes (results written before the code was stored), else None."""
    if not g:
        return None
    return g.get("rfc_code") or dense_code(g.get("goal"))


def case_goal_label(c: dict[str, Any], code: str | None = None) -> str:
    """A case's goal (its claim's, c["goal"], when code is None) named with its dense code beside it:
    'NDR [0.5f1d0l50e]'; the bare code when the case does not say what it stands for."""
    code = code if code is not None else c.get("goal")
    if not code:
        return ""
    rfc = goal_rfc_code((c.get("goals") or {}).get(code))
    if rfc is None and code == c.get("goal"):
        rfc = c.get("goal_rfc_code")
    return label(code, rfc)


def goal_labels(runs: Iterable[Run]) -> dict[str, str]:
    """Per goal code of the runs (goal_codes), its name with the dense code beside it: 'NDR
    [0.5f1d0l50e]'. A code that stood for different goals in different cases (an older default,
    say) lists every dense code it had: 'NDR [1f2d0l50e | 0.5f1d0l50e]', so runs that named
    different things alike are not read as the same."""
    seen: dict[str, list[str]] = {}
    for r in runs:
        for c in r.cases:
            for code, g in (c.get("goals") or {}).items():
                rfc = goal_rfc_code(g)
                codes = seen.setdefault(code, [])
                if rfc and rfc not in codes:
                    codes.append(rfc)
    return {code: label(code, " | ".join(rfcs)) for code, rfcs in seen.items()}


def latency_loads(runs: Iterable[Run]) -> list[str]:
    """The latency loads (% of the PDR, "0" idle) the runs' cases measured, in numeric order."""
    keys = {k for r in runs for c in r.cases for k in ((c.get("latency_pdr") or {}).get("points") or {})}
    return sorted(keys, key=float)


# --- series -----------------------------------------------------------------------------------------

def varying_dims(runs: Iterable[Run]) -> list[str]:
    """The case parameters (besides direction, frame size) that take more than one value."""
    vals: dict[str, set] = defaultdict(set)
    for r in runs:
        for c in r.cases:
            for d in VARIANT_DIMS:
                vals[d].add(json.dumps(c.get(d)))
    return [d for d in VARIANT_DIMS if len(vals[d]) > 1]


def dim_label(dim: str, v: Any) -> str:
    if dim == "flows":
        return f"{v} flow{'s' if v != 1 else ''}"
    if dim == "bearers":
        return f"{v} bearers"
    if dim == "checksum":
        return f"checksum {v}"
    if dim == "ip":
        return f"IPv{v}"
    if dim == "n3":
        return f"GTP-U over IPv{v}"
    if dim == "flow_mode":
        return f"{v} flow" if v in ("single", "multi") else f"flow_mode {v}"
    return f"{dim} {v}"


def series_label(case: dict[str, Any], dims: list[str]) -> str:
    parts = [str(case["direction"])]
    for d in dims:
        if d == "flow_mode" and "flows" in dims:
            continue  # shown with flows: "1 flow (single)"
        part = dim_label(d, case.get(d))
        if d == "flows" and "flow_mode" in dims:
            part += f" ({case.get('flow_mode')})"
        parts.append(part)
    return ", ".join(parts)


def series_order(label: str) -> tuple:
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
            for s, by in sorted(acc.items(), key=lambda kv: series_order(kv[0]))}


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
        for s in sorted(pts, key=series_order):
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
    for ca in sorted(a.cases, key=lambda c: (series_order(series_label(c, dims)), c["frame_size"])):
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
    if lim == "host busy":
        d = c.get("disturbance") or {}
        reasons = "; ".join(list(d.get("reasons") or {})[:3]) or "no reason given"
        return (f"host busy: {d.get('disturbed')} of {d.get('trials')} trials disturbed "
                f"({(d.get('disturbed_share') or 0):.0%} of the trial time): {reasons}; nothing claimed, "
                "the DUT's limit was not measured")
    if c.get("rate_mode") in ("ndr", "pdr", "search"):
        what = case_goal_label(c) or c["rate_mode"].upper()
        if c.get("ndr_pps"):
            return "DUT: loss began at the DUT above this rate"
        if lim == "max load":
            return f"max load (the spec's) is a lower bound: no {what} claimed, the DUT's is higher"
        if c.get("generator_bound"):
            return (f"{lim or 'generator (transmit)'}: no {what} claimed, the "
                    "DUT's is higher than the generator could show")
        if lim == "dut":
            g = (c.get("goals") or {}).get(c.get("goal")) or {}
            return f"DUT: no {what} found ({g.get('irregular') or c.get('status', '')})"
        return "no result: " + str(c.get("status", ""))
    return {"dut": "DUT (it lost packets)", "generator (transmit)": "generator: sent less than asked",
            "generator (receive)": "generator: its receive side lost packets"}.get(lim, "none: no loss at "
                                                                                  "the rate asked")


DUT_NAMES = {"pgwu": "PGW-U", "fwd": "reference forwarder", "socket": "socket-path PGW-U"}


def dut_label(run: dict[str, Any]) -> str:
    """Which DUT a run measured, in a few words: run.json's dut_name (an external UPF's, from its lab
    config), else its dut_mode's name; "PGW-U" for a run that says neither (written before either)."""
    if run.get("dut_name"):
        return str(run["dut_name"])
    mode = run.get("dut_mode") or "pgwu"
    if mode == "external":
        return f"external UPF ({run.get('lab') or 'lab config'})"
    return DUT_NAMES.get(mode, str(mode))


def forwarder(runs: list[Run]) -> Run | None:
    """The one run of the reference forwarder among runs (None: none, or several)."""
    fw = [r for r in runs if r.run.get("dut_mode") == "fwd"]
    return fw[0] if len(fw) == 1 else None


def _seq(cases):   # the scale cases (random order) have their own table
    return [c for c in cases if c.get("order", "seq") == "seq"]


def reference_ratios(dut: Run, fwd: Run) -> list[dict[str, Any]] | None:
    """A DUT's NDR / the reference forwarder's NDR per (direction, frame size), or None when fwd is not
    the forwarder's run or dut is (either order is taken: reference_ratios(pgwu_run, fwd_run) and
    reference_ratios(fwd_run, pgwu_run) are the same)."""
    if dut.run.get("dut_mode") == "fwd":
        dut, fwd = fwd, dut
    if fwd.run.get("dut_mode") != "fwd" or dut.run.get("dut_mode") == "fwd":
        return None
    name = dut_label(dut.run)
    ref = {(c["direction"], c["frame_size"]): c for c in _seq(fwd.cases)}
    out = []
    for c in _seq(dut.cases):
        f = ref.get((c["direction"], c["frame_size"]))
        if f is None:
            continue
        x, y = c.get("ndr_pps"), f.get("ndr_pps")
        out.append({"direction": c["direction"], "frame_size": c["frame_size"], "dut_ndr_pps": x,
                    "fwd_ndr_pps": y, "ratio": x / y if x and y else None,
                    "note": "" if x and y else ("forwarder: " + limit_text(f) if not y else f"{name}: " + limit_text(c))})
    return out


def side_by_side(runs: list[Run]) -> list[dict[str, Any]]:
    """Per (direction, frame size) of the runs' sequential cases, each run's NDR (pps), which side set
    it, its DUT CPU and XDP ns per packet: the DUTs next to each other (one case per run and key: the
    first, in the order the run wrote them)."""
    keys: list[tuple[str, int]] = []
    per: list[dict[tuple[str, int], dict]] = []
    for r in runs:
        m: dict[tuple[str, int], dict] = {}
        for c in _seq(r.cases):
            k = (c["direction"], c["frame_size"])
            m.setdefault(k, c)
            if k not in keys:
                keys.append(k)
        per.append(m)
    out = []
    for k in sorted(keys, key=lambda k: (k[0] != "uplink", k[1])):
        row: dict[str, Any] = {"direction": k[0], "frame_size": k[1], "runs": {}}
        for r, m in zip(runs, per):
            c = m.get(k)
            d = (c or {}).get("dut") or {}
            row["runs"][r.label] = None if c is None else {
                "ndr_pps": c.get("ndr_pps"), "limit": limit_text(c), "rx_pps": c.get("rx_pps"),
                "cpu_ns": d.get("cpu_ns_per_packet"), "xdp_ns": d.get("ns_per_packet")}
        out.append(row)
    return out


SCALE_TARGET = 0.7   # issue 13: NDR with 1 M bearers in random order >= 0.7 x NDR with 1 k bearers


def scale_ratios(r: Run) -> list[dict[str, Any]]:
    """Each case whose traffic hits its bearers in random order, against the multi-flow case of
    the same direction, frame size and checksum in sequential order (the grid's `flows`): NDR
    ratio, and the DUT's CPU and XDP ns per packet of both."""
    grid = {(c["direction"], c["frame_size"], c.get("checksum")): c for c in r.cases
            if c.get("flow_mode") == "multi" and c.get("order", "seq") == "seq" and str(c.get("ip") or "4") == "4"
            and str(c.get("n3") or "4") == "4"}
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
