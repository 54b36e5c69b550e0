"""A sweep's report: `gtplab report RESULTS_DIR [OTHER_RESULTS_DIR ...]` -> a static HTML page with PNG plots.

    build_report(results_dir, other_dir=None, out_dir=None) -> Path of index.html
    build_report(pgwu_dir, [eupf_dir, fwd_dir])              # several runs: A, B, C ...

Reads only the results directory (docs/results.md: run.json, cases.jsonl). Plots, one PNG each
(matplotlib, Agg): the search's results per goal (MLRsearch, RFC 9971: relevant bounds and
conditional throughput, with every goal attribute and the deviations from RFC 2544 stated), latency
at 0, 10, 50 and 90 % of the PDR, throughput in Mpps and in Gbps (L1, L2), loss, latency
percentiles, DUT CPU cost with a linear fit (scikit-learn) per direction, checksum on vs off,
single vs multi flow. With OTHER_RESULTS_DIRs, every plot shows the runs side by side (A =
RESULTS_DIR, B, C ... = the others in order), each named by the DUT it measured (run.json's dut_name
or dut_mode: the PGW-U, eUPF, the reference forwarder ...), a table puts their NDR and costs next to
each other, one gives the change from A to each other run in %, and each DUT is divided by the
reference forwarder when one run is the forwarder's. Flame graphs written by `gtplab sweep --flamegraph`
(RESULTS_DIR/flamegraphs/case-<id>.svg) are linked from the table of cases.

A plot with no data is not drawn; the page says what is missing instead. The report is written into
a temporary directory next to OUT_DIR and renamed into place, so a failure leaves the previous
report (or nothing) and never half a report. docs/report.md explains the plots and the fit.

Used by `gtplab report` and by `gtplab sweep` at its end. build_report reads the runs and analyses
them (analysis.py), has plots.py draw the PNGs (matplotlib is loaded only then) and html.py write the
page, then puts the report in place.
"""

from __future__ import annotations

import argparse
import html
import json
import os
import shutil
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable

from gtplab.errors import UserError
from gtplab.results import store as results
from gtplab.results.analysis import (VARIANT_DIMS, Run, case_goal_label, changes, dim_label, dut_label, forwarder,
                                     goal_codes, goal_labels, latency_loads, load, reference_ratios, reference_subset,
                                     regressions, scale_ratios, side_by_side, varying_dims)
from gtplab.results.html import (Section, _cases_table, _change_table, _ratio_table, _regression_table,
                                 _scale_table, _side_table, _write_html, goals_table, latency_table,
                                 search_results_table)
from gtplab.results.plots import Panel, change_plot, cost_plot, series_plot

MARKER = ".gtplab-report"  # in every report directory: only such a directory is ever replaced


# --- the report -------------------------------------------------------------------------------------

LABELS = "ABCDEFGH"


def _default_out(a: Run, others: list[Run]) -> Path:
    if not others:
        return a.path / "report"
    return a.path / ("report-vs-" + "-".join(r.path.resolve().name for r in others))


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


def build_report(results_dir: str | os.PathLike, other_dir=None, out_dir: str | os.PathLike | None = None) -> Path:
    """Write the report (index.html, one PNG per plot, summary.json) and return index.html's path.

    other_dir: a second run's directory, or a list of them (up to 7: B, C ...). out_dir defaults to
    RESULTS_DIR/report, or RESULTS_DIR/report-vs-<the others' names>. Raises results.ResultsError
    (file and line) for a directory that does not follow docs/results.md; then nothing is written."""
    others = ([] if other_dir is None else [other_dir] if isinstance(other_dir, (str, os.PathLike))
              else list(other_dir))
    if len(others) >= len(LABELS):
        raise results.ResultsError(f"at most {len(LABELS)} runs in one report ({len(others) + 1} given)")
    a = load(results_dir, "A")
    runs = [a] + [load(d, LABELS[i + 1]) for i, d in enumerate(others)]
    out = Path(out_dir) if out_dir is not None else _default_out(a, runs[1:])
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
    dims = varying_dims(runs)
    # each run's plots titled with the DUT it measured when the runs are several
    cols = [(f"{r.label} ({dut_label(r.run)})" if len(runs) > 1 else r.label, r.cases) for r in runs]
    sections: list[Section] = []
    plots: list[str] = []

    def plot(s: Section, name: str, ok: bool, missing: str) -> None:
        if ok:
            s.png = name
            plots.append(name)
        else:
            s.notes.append(missing)
        sections.append(s)

    codes = goal_codes(runs)
    names = goal_labels(runs)           # 'NDR [0.5f1d0l50e]': the dense code beside every short name
    if codes:
        s = Section("search", "Search results per goal (MLRsearch, RFC 9971)", search_text(runs))
        s.extra = goals_table(run_goals(runs)) + "".join(
            (f"<h3>{r.label}</h3>" if len(runs) > 1 else "") + search_results_table(r, codes) for r in runs)
        s.notes += [f"{r.label}: {c['case_id']}: {case_goal_label(c, g)}: irregular ({v['irregular']})"
                    for r in runs for c in r.cases for g, v in (c.get("goals") or {}).items()
                    if v.get("irregular")][:40]
        plot(s, "search.png", series_plot(tmp / "search.png", "Search results per goal", cols, [
            Panel(f"{names.get(code, code)}: relevant bounds", "Mpps",
                  [(f"goals.{code}.lower_pps", 1e-6, " lower bound (the result)", "-"),
                   (f"goals.{code}.upper_pps", 1e-6, " upper bound", ":"),
                   (f"goals.{code}.conditional_pps", 1e-6, " conditional throughput", "--")]) for code in codes],
            dims), "No case has a relevant bound: every goal's search ended without one.")
    loads = latency_loads(runs)
    if loads:
        s = Section("latency-pdr", "Latency at 0, 10, 50 and 90 % of the PDR",
                    "FD.io CSIT's latency: after the search, one trial at each share of the PDR found (the "
                    "relevant lower bound of the goal with the largest loss ratio; 0 % is idle: a low load), "
                    "and the latency stream's p50 (solid) and p99 (dotted) in µs.")
        s.extra = "".join((f"<h3>{r.label}</h3>" if len(runs) > 1 else "") + latency_table(r, loads) for r in runs)
        s.notes += [f"{r.label}: {c['case_id']}: {c['latency_pdr']['note']}" for r in runs for c in r.cases
                    if (c.get("latency_pdr") or {}).get("note")]
        plot(s, "latency_pdr.png", series_plot(tmp / "latency_pdr.png", "Latency at shares of the PDR", cols, [
            Panel("idle" if k == "0" else f"{k} % of the PDR", "µs",
                  [(f"latency_pdr.points.{k}.latency_us.p50", 1.0, " p50", "-"),
                   (f"latency_pdr.points.{k}.latency_us.p99", 1.0, " p99", ":")]) for k in loads], dims),
            "No latency was measured at the PDR's loads (no room for the latency trailer, or no PDR found).")

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
                "One-way latency of the latency streams in µs: median, 99th percentile and maximum"
                + (" (a searched case: of its recorded trial, at the first goal's lower bound)" if codes else "")
                + ".")
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
        fixed_txt = ", ".join(dim_label(d, v) for d, v in fixed.items())
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
    if len(runs) > 1:
        rows = side_by_side(runs)
        s = Section("side-by-side", "The DUTs side by side",
                    "Per direction and frame size (the sequential cases), each run's NDR (PDR), which side set "
                    "it, and what a packet cost its DUT: the CPU time of the DUT's receive threads per packet "
                    "and its XDP program's own run time (where it has one). "
                    + "; ".join(f"{r.label}: {html.escape(dut_label(r.run))}" for r in runs) + ".")
        s.extra = _side_table(rows, runs)
        sections.append(s)
        summary["side_by_side"] = rows
        summary["duts"] = {r.label: dut_label(r.run) for r in runs}
    for i, other in enumerate(runs[1:]):
        x = other.label
        chs, only_a, only_b = changes(runs[0], other, dims)
        s = Section("change" if i == 0 else f"change-{x}",
                    f"Change from A ({dut_label(runs[0].run)}) to {x} ({dut_label(other.run)})",
                    "Cases with the same parameters (direction, frame size, " + ", ".join(VARIANT_DIMS)
                    + f") in both runs, matched. Change = ({x} − A) / A; n/a when A is 0 or a value is missing.")
        if only_a:
            s.notes.append(f"Only in A ({len(only_a)}): {', '.join(only_a[:20])}{' …' if len(only_a) > 20 else ''}")
        if only_b:
            s.notes.append(f"Only in {x} ({len(only_b)}): {', '.join(only_b[:20])}{' …' if len(only_b) > 20 else ''}")
        s.extra = _change_table(chs, x)
        name = "change.png" if i == 0 else f"change-{x}.png"
        plot(s, name, change_plot(tmp / name, chs), f"No case of A matches a case of {x} with values on both sides.")
        if i == 0:
            summary["changes"] = [asdict(c) for c in chs]
            summary["only_a"], summary["only_b"] = only_a, only_b
        else:
            summary.setdefault("changes_from_a", {})[x] = {"changes": [asdict(c) for c in chs],
                                                           "only_a": only_a, "only_other": only_b}
    fw = forwarder(runs) if len(runs) > 1 else None
    for r in runs:
        ratios = reference_ratios(r, fw) if fw is not None and r is not fw else None
        if ratios is None:
            continue
        first = "reference_ratios" not in summary
        name = dut_label(r.run)
        s = Section("reference" if first else f"reference-{r.label}",
                    f"{name} ({r.label}) against the reference forwarder ({fw.label})",
                    f"NDR of {html.escape(name)} divided by the NDR of the plain XDP forwarder on the same "
                    "machine, CPU layout and frame size: how much of what this machine can forward at all "
                    "the DUT's own work leaves.")
        s.extra = _ratio_table(ratios, name)
        sections.append(s)
        if first:
            summary["reference_ratios"] = ratios
        summary.setdefault("reference_ratios_by_run", {})[r.label] = ratios
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
        (f"<h3>{r.label} ({html.escape(dut_label(r.run))}): {html.escape(str(r.path))}</h3>" if len(runs) > 1
         else "") + _cases_table(r, final, codes)
        for r in runs)
    fg = sum(1 for r in runs for c in r.cases if results.flamegraph_path(r.path, c["case_id"]).is_file())
    tables += (f"<p>{fg} flame graph(s) from <code>gtplab sweep --flamegraph</code> are linked in the table.</p>"
               if fg else "<p>No flame graphs (run <code>gtplab sweep --flamegraph</code> to record them).</p>")
    summary["goals"] = codes
    summary["goal_labels"] = names
    summary["plots"] = plots
    summary["notes"] = [n for s in sections for n in s.notes]
    _write_html(tmp / "index.html", runs, sections, tables)
    (tmp / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")


def run_goals(runs: list[Run]) -> list[dict[str, Any]]:
    """The goals the runs searched, with every attribute: from the cases' results, by code."""
    out: dict[str, dict] = {}
    for r in runs:
        for c in r.cases:
            for code, g in (c.get("goals") or {}).items():
                out.setdefault(code, g.get("goal") or {"code": code})
    return list(out.values())


def search_text(runs: list[Run]) -> str:
    """What the search section says: the method, what a value means, the deviations from RFC 2544's
    trial (RFC 9971 4.4.3: they MUST be described) and the disturbed trials' policy."""
    policies = sorted({str(((r.run.get("spec") or {}).get("search") or {}).get("disturbed", "exclude"))
                       for r in runs})
    durations = sorted({g.get("final_trial_duration") for g in run_goals(runs) if g.get("final_trial_duration")})
    # the shortfall forgiven: what the runs' searches say (results before it was recorded forgave 3 %)
    shares = sorted({float((c.get("search") or {}).get("shortfall_allowance", 0.03))
                     for r in runs for c in r.cases if c.get("goals")})
    allowance = " / ".join(f"{a * 100:.3g} %" for a in shares) or "n/a"
    return (
        "MLRsearch (RFC 9971) per case, every goal from one set of trials. Per goal: the <b>relevant lower "
        "bound</b> (the result: the largest load classified Lower Bound below the smallest Upper Bound), the "
        "relevant upper bound, and the <b>conditional throughput</b> (the forwarding rate at the lower bound, "
        "for comparing runs). A result is <b>regular</b> when both bounds exist within the goal width; an "
        "irregular one is marked with why (max load a lower bound: the generator's limit; min load an upper "
        "bound; the budget ran out). The goals' attributes are in the first table (RFC 9971 4.9.3). "
        "Deviations from RFC 2544's trial (RFC 9971 4.4.3): trials of "
        + ", ".join(f"{d:g} s" for d in durations)
        + " instead of 60 s; no 2 s wait and no learning phase between trials (the bearers are installed "
        "once per case); the Trial Loss Ratio is of the frames the generator sent, not of those intended "
        "(RFC 9971 4.5.5's default), when it sent at most " + allowance + " less than the load asked (half "
        "the narrowest goal width: no lower bound is more than that above the load offered there); a larger "
        "shortfall is counted as loss (RFC 9971 4.9.1); trials the host disturbed are kept and reported, and "
        + (" / ".join("excluded from Load Classification (measured again)" if p == "exclude" else
                      "classified like any other" for p in policies))
        + ". A case whose trial time was mostly disturbed says \"host busy\" and claims nothing.")


# --- CLI --------------------------------------------------------------------------------------------

# run kinds whose report another layer writes, by run.json's "kind": kind -> writer(results_dir) ->
# the page's path (gtplab.upftests registers "upftest" when its command is added to the parser)
REPORT_WRITERS: dict[str, Callable[[str], Path]] = {}


def _other_kind(d: str) -> str | None:
    """run.json's kind when another layer writes that kind's report, else None (a sweep, or no run)."""
    try:
        kind = results.read_run(d).get("kind")
    except (results.ResultsError, OSError):
        return None
    return kind if kind in REPORT_WRITERS else None


def do_report(args: argparse.Namespace) -> int:
    kind = _other_kind(args.results_dir) if not args.other_dirs else None
    if kind:                        # an upftest run: its own report, written again from its records
        if args.out:
            raise UserError(f"{args.results_dir}: the report of a gtplab {kind} run is written in the run's own "
                            "directory; drop -o")
        try:
            index = REPORT_WRITERS[kind](args.results_dir)
        except results.ResultsError as e:
            raise UserError(str(e)) from None
        except OSError as e:
            raise UserError(f"couldn't write the report in {args.results_dir}: {e.strerror or e}") from None
        end = results.ending(args.results_dir)
        if end["cut_short"]:
            print(f"gtplab report: {args.results_dir}: {end['cut_short']} (the run was {end['how']})", file=sys.stderr)
        print(index)
        return 0
    try:
        index = build_report(args.results_dir, args.other_dirs or None, args.out)
    except results.ResultsError as e:
        raise UserError(str(e)) from None
    except OSError as e:            # the report directory, named: e.filename may be only its parent
        where = args.out or f"in {args.results_dir}"
        raise UserError(f"couldn't write the report {where}: {e.strerror or e}") from None
    for d in [args.results_dir, *(args.other_dirs or [])]:
        end = results.ending(d)
        if end["cut_short"]:          # said where a run is read, not only at the top of the page
            print(f"gtplab report: {d}: {end['cut_short']} (the run was {end['how']})", file=sys.stderr)
    print(index)
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("report", help="HTML report with plots of a sweep (or of several sweeps compared)",
                       description=__doc__.splitlines()[0])
    p.add_argument("results_dir", metavar="RESULTS_DIR", help="a sweep results directory (run.json, cases.jsonl)")
    p.add_argument("other_dirs", metavar="OTHER_RESULTS_DIR", nargs="*",
                   help="more runs (up to 7): plots side by side (A = RESULTS_DIR, B, C ... = these, each "
                        "named by its DUT), their NDR and costs in one table, changes from A in %%, each DUT "
                        "against the reference forwarder when one run is the forwarder's")
    p.add_argument("-o", "--out", metavar="DIR",
                   help="report directory (default: RESULTS_DIR/report, or RESULTS_DIR/report-vs-<OTHERS> "
                        "with more runs); an earlier report there is replaced")
    p.set_defaults(func=do_report)
