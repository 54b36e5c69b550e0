"""The report's HTML: the page (index.html) with its sections, and the tables of cases, limits,
regressions, changes and the reference ratios. Used only by gtplab.results.report; what the tables
show is computed by gtplab.results.analysis.
"""

from __future__ import annotations

import html
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gtplab.goalcode import dense_code
from gtplab.goalcode import label as mlr_label
from gtplab.results import store as results
from gtplab.results.analysis import (CHANGE_METRICS, SCALE_TARGET, Change, Regression, Run, case_goal_label,
                                     dut_label, goal_labels, goal_rfc_code, limit_text, value)
from gtplab.results.layout import layout_text


def _fmt(v: Any, scale: float = 1.0, digits: int = 4) -> str:
    if v is None:
        return "–"
    if isinstance(v, float) or scale != 1.0:
        x = float(v) * scale
        return f"{x:.{digits}g}" if abs(x) < 10 ** digits else f"{x:,.0f}"
    return html.escape(str(v))


def _pct(v: float | None) -> str:
    if v is None:
        return "n/a"
    cls = "up" if v > 0 else "down" if v < 0 else ""
    return f'<span class="{cls}">{v:+.1f}%</span>'


CASE_COLUMNS = (
    ("case_id", "case", 1.0), ("direction", "dir", 1.0), ("frame_size", "frame B", 1.0),
    ("flows", "flows", 1.0), ("flow_mode", "flow mode", 1.0), ("checksum", "csum", 1.0),
    ("ip", "IP", 1.0), ("n3", "N3", 1.0), ("bearers", "bearers", 1.0), ("rate_mode", "rate", 1.0), ("duration_s", "s", 1.0),
    ("goal", "goal", 1.0), ("ndr_pps", "claim Mpps", 1e-6), ("ndr.gbps_l1", "claim Gbps L1", 1.0),
    ("ndr.gbps_l2", "claim Gbps L2", 1.0), ("limit", "limit", 1.0),
    ("offered_pps", "offered Mpps", 1e-6), ("rx_pps", "rx Mpps", 1e-6), ("rx_bps_l1", "rx Gbps L1", 1e-9),
    ("rx_bps_l2", "rx Gbps L2", 1e-9), ("loss_ratio", "loss %", 100.0),
    ("latency_us.p50", "lat p50 µs", 1.0), ("latency_us.p99", "lat p99 µs", 1.0),
    ("latency_us.max", "lat max µs", 1.0), ("dut.ns_per_packet", "XDP ns/pkt", 1.0),
    ("dut.cpu_ns_per_packet", "CPU ns/pkt", 1.0),
    # the DUT's costs apart from the search (Runner.case_costs): its CPU ns/packet above the reference
    # forwarder's at the same load on the same links, what the lab can resolve of the DUT's own work
    ("cost.above_reference_ns_per_packet", "CPU ns/pkt above ref", 1.0),
    ("cost.reference_cpu_ns_per_packet", "ref CPU ns/pkt", 1.0),
    ("dut.drop_packets", "DUT drops", 1.0),
)


def _cell(c: dict[str, Any], key: str, scale: float) -> str:
    if key == "goal":           # the claim's goal, its dense code beside it (RFC 9971 appendix C)
        return html.escape(case_goal_label(c)) if c.get("goal") else _fmt(None)
    if "." in key or scale != 1.0:
        return _fmt(value(c, key), scale)
    return _fmt(c.get(key))


def _cases_table(r: Run, out_dir: Path, codes: list[str] = ()) -> str:
    """Every case: its parameters, claim, limit, rates, latency, DUT cost; per search goal its
    relevant lower bound; the flame graph."""
    cols = list(CASE_COLUMNS)
    at = cols.index(("limit", "limit", 1.0)) + 1
    names = goal_labels([r])
    cols[at:at] = [(f"goals.{code}.lower_pps", f"{names.get(code, code)} lower Mpps", 1e-6) for code in codes]
    if any(c.get("pairs") for c in r.cases):     # several generator pairs (gtplab.measure.pairs): how many
        cols.insert(cols.index(("bearers", "bearers", 1.0)) + 1, ("pairs", "generator pairs", 1.0))
    head = "".join(f"<th>{html.escape(t)}</th>" for _, t, _ in cols) + "<th>flame graph</th>"
    rows = []
    for c in r.cases:
        cells = "".join(f"<td>{_cell(c, k, s)}</td>" for k, _, s in cols)
        fg = results.flamegraph_path(r.path, c["case_id"])
        if fg.is_file():
            rel = os.path.relpath(fg.resolve(), out_dir.resolve())
            cells += f'<td><a href="{html.escape(rel)}">svg</a></td>'
        else:
            cells += "<td>–</td>"
        rows.append(f"<tr>{cells}</tr>")
    return f'<table class="cases"><tr>{head}</tr>\n' + "\n".join(rows) + "</table>"


STYLE = """
body { font-family: sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1em; font-size: 0.85em; }
th, td { border: 1px solid #ccc; padding: 2px 6px; text-align: right; }
th { background: #eee; } td:first-child, th:first-child { text-align: left; }
img { max-width: 100%; border: 1px solid #ddd; }
.note { background: #fff6d5; border-left: 4px solid #e0b000; padding: 4px 8px; margin: 4px 0; }
.up { color: #08660b; } .down { color: #a00; }
.fit { font-family: monospace; }
"""


@dataclass
class Section:
    id: str
    title: str
    text: str
    png: str | None = None
    notes: list[str] = field(default_factory=list)
    extra: str = ""


def _layout_html(r: Run) -> str:
    lay = r.run.get("cpu_layout")
    mode = r.run.get("dut_mode") or "pgwu"
    dut = {"pgwu": "the PGW-U (dataplane/pgwu)", "fwd": "the reference forwarder (MAC rewrite + redirect)"}.get(
        mode, dut_label(r.run))
    if mode == "external":
        dut += (f", an external UPF in the namespace lab (lab config {r.run.get('lab')}, its counters "
                f"{r.run.get('dut_counters')}, provisioned by {r.run.get('dut_provision')})")
    if not lay:
        return (f"<p>{r.label}: DUT {html.escape(dut)}; no CPU layout recorded (a real lab, or a run "
                "from before layouts): the DUT's CPU cost is its host's.</p>")
    text, notes = layout_text(r.run, r.cases)
    text = html.escape(text, quote=False).replace("The layout was NOT honoured", "<b>The layout was NOT honoured</b>").replace(
        "Not applied:", "<b>Not applied:</b>")
    txt = f"<p>{r.label}: DUT {html.escape(dut)}. {text}</p>"
    upf = lay.get("upf")
    if upf:
        txt += (f"<p>{r.label}: the UPF's own process (pid {upf.get('pid')}, {upf.get('threads')} threads: its "
                f"control plane and runtime) ran on CPU(s) {', '.join(map(str, upf.get('cpus') or []))}; "
                "its XDP program in the NAPI threads above.</p>")
    for n in notes:
        txt += f'<p class="note">{r.label}: {html.escape(str(n))}</p>'
    return txt


def _trials_text(c: dict[str, Any]) -> str:
    """A case's trials: the search's, and how many of them the host disturbed."""
    trials = c.get("trials") or []
    if c.get("rate_mode") != "search":
        return str(len(trials))
    n = sum(1 for t in trials if t.get("phase") == "search")
    d = (c.get("disturbance") or {}).get("disturbed") or 0
    return f"{n}" + (f" ({d} disturbed)" if d else "")


def _limits_table(r: Run) -> str:
    rows = []
    for c in r.cases:
        d = c.get("dut") or {}
        goal = case_goal_label(c) or (c.get("rate_mode") or "").upper()
        rows.append(f"<tr><td>{html.escape(c['case_id'])}</td><td>{html.escape(goal)}</td>"
                    f"<td>{_fmt(value(c, 'ndr.mpps'))}</td>"
                    f"<td>{_fmt(value(c, 'ndr.gbps_l1'))}</td><td>{_fmt(value(c, 'ndr.gbps_l2'))}</td>"
                    f"<td>{_fmt(c.get('offered_pps'), 1e-6)}</td><td>{html.escape(limit_text(c))}</td>"
                    f"<td>{_fmt(d.get('cpu_ns_per_packet'), 1.0)}</td><td>{_fmt(d.get('ns_per_packet'), 1.0)}</td>"
                    f"<td>{_trials_text(c)}</td></tr>")
    return ("<table><tr><th>case</th><th>goal</th><th>claim Mpps</th><th>Gbps L1</th><th>Gbps L2</th>"
            "<th>recorded trial offered Mpps</th><th>limit</th><th>DUT CPU ns/pkt</th><th>XDP ns/pkt</th>"
            "<th>trials</th></tr>" + "".join(rows) + "</table>")


GOAL_ATTRS = (("loss_ratio", "goal loss ratio", 100.0, "%"), ("exceed_ratio", "goal exceed ratio", 100.0, "%"),
              ("final_trial_duration", "final trial duration", 1.0, "s"),
              ("duration_sum", "duration sum", 1.0, "s"), ("width", "goal width", 100.0, "%"),
              ("initial_trial_duration", "initial trial duration", 1.0, "s"))


def goals_table(goals: list[dict[str, Any]]) -> str:
    """Every attribute of every goal (RFC 9971 4.9.3: the report states them all), its code and RFC
    9971's dense code (appendix C: final s, sum s, loss %, exceed %), computed from the attributes
    for results written before the code was stored."""
    head = "<th>goal</th><th>dense code</th>" + "".join(f"<th>{t}</th>" for _, t, _, _ in GOAL_ATTRS)
    rows = "".join("<tr><td>" + html.escape(str(g.get("code"))) + "</td><td>"
                   + html.escape(dense_code(g) or "n/a") + "</td>" + "".join(
        f"<td>{_fmt(g.get(k), scale, 6)} {unit}</td>" for k, _, scale, unit in GOAL_ATTRS) + "</tr>" for g in goals)
    return f"<table><tr>{head}</tr>{rows}</table>"


def search_results_table(r: Run, codes: list[str]) -> str:
    """Per searched case and goal: the relevant bounds (the lower one is the number to report,
    RFC 9971 4.8.4.1), the conditional throughput, regular or why not, and which side set it."""
    rows = []
    for c in r.cases:
        goals = c.get("goals") or {}
        sr = c.get("search") or {}
        for code in codes:
            g = goals.get(code)
            if g is None:
                continue
            reg = "regular" if g.get("regular") else f"<b>irregular</b>: {html.escape(str(g.get('irregular')))}"
            name = case_goal_label(c, code)
            rows.append(f"<tr><td>{html.escape(c['case_id'])}</td><td>{html.escape(name)}</td>"
                        f"<td>{_fmt(g.get('lower_pps'), 1e-6)}</td><td>{_fmt(g.get('upper_pps'), 1e-6)}</td>"
                        f"<td>{_fmt(g.get('conditional_pps'), 1e-6)}</td><td>{reg}</td>"
                        f"<td>{html.escape(str(g.get('limit')))}</td><td>{_fmt(g.get('claimed_pps'), 1e-6)}</td>"
                        f"<td>{_fmt(sr.get('max_load'), 1e-6)} ({html.escape(str(sr.get('max_load_source')))})</td>"
                        f"<td>{_trials_text(c)}</td><td>{html.escape(str(sr.get('stop')))}</td></tr>")
    return ("<table><tr><th>case</th><th>goal</th><th>lower bound Mpps</th><th>upper bound Mpps</th>"
            "<th>conditional throughput Mpps</th><th>result</th><th>limit</th><th>claimed Mpps</th>"
            "<th>max load Mpps (from)</th><th>trials</th><th>search stop</th></tr>" + "".join(rows) + "</table>")


def latency_table(r: Run, loads: list[str]) -> str:
    """Per case, the latency trials at each load: the load, p50, p99 and max (µs), loss; FD.io CSIT's
    latency at 0 (idle), 10, 50 and 90 % of the PDR."""
    head = "<th>case</th><th>PDR (goal) Mpps</th>" + "".join(
        f"<th>{'idle' if k == '0' else k + ' %'}: load Mpps</th><th>p50</th><th>p99</th><th>max µs</th>"
        for k in loads) + "<th>note</th>"
    rows = []
    for c in r.cases:
        lat = c.get("latency_pdr")
        if not lat:
            continue
        cells = "".join(
            f"<td>{_fmt(value(c, f'latency_pdr.points.{k}.load_pps'), 1e-6)}</td>"
            + "".join(f"<td>{_fmt(value(c, f'latency_pdr.points.{k}.latency_us.{st}'), 1.0)}</td>"
                      for st in ("p50", "p99", "max")) for k in loads)
        name = mlr_label(str(lat.get("goal")), lat.get("rfc_code")
                         or goal_rfc_code((c.get("goals") or {}).get(lat.get("goal"))))
        rows.append(f"<tr><td>{html.escape(c['case_id'])}</td><td>{_fmt(lat.get('pdr_pps'), 1e-6)} "
                    f"({html.escape(name)})</td>{cells}<td>{html.escape(lat.get('note') or '')}</td></tr>")
    return f"<table><tr>{head}</tr>" + "".join(rows) + "</table>"


def _scale_table(rows: list[dict[str, Any]]) -> str:
    def verdict(r):
        return "" if r["ratio"] is None else ("met" if r["ratio"] >= SCALE_TARGET else "not met")
    body = "".join(f"<tr><td>{r['direction']}</td><td>{r['frame_size']}</td><td>{r['flows']}</td>"
                   f"<td>{_fmt(r['ndr_pps'], 1e-6)}</td><td>{r['scale_flows']}</td>"
                   f"<td>{_fmt(r['scale_ndr_pps'], 1e-6)}</td><td>{_fmt(r['ratio'], 1.0, 3)} {verdict(r)}</td>"
                   f"<td>{_fmt(r['cpu_ns'], 1.0)} / {_fmt(r['scale_cpu_ns'], 1.0)}</td>"
                   f"<td>{_fmt(r['xdp_ns'], 1.0)} / {_fmt(r['scale_xdp_ns'], 1.0)}</td>"
                   f"<td>{html.escape(r['note'])}</td></tr>" for r in rows)
    return ("<table><tr><th>direction</th><th>frame B</th><th>bearers (seq)</th><th>NDR Mpps</th>"
            "<th>bearers (random)</th><th>NDR Mpps</th><th>random / seq (target ≥ "
            f"{SCALE_TARGET})</th><th>DUT CPU ns/pkt seq / random</th><th>XDP ns/pkt seq / random</th>"
            "<th>note</th></tr>" + body + "</table>")


def _ratio_table(rows: list[dict[str, Any]], name: str = "PGW-U") -> str:
    n = html.escape(name)
    body = "".join(f"<tr><td>{r['direction']}</td><td>{r['frame_size']}</td><td>{_fmt(r['dut_ndr_pps'], 1e-6)}</td>"
                   f"<td>{_fmt(r['fwd_ndr_pps'], 1e-6)}</td><td>{_fmt(r['ratio'], 1.0, 3)}</td>"
                   f"<td>{html.escape(r['note'])}</td></tr>" for r in rows)
    return (f"<table><tr><th>direction</th><th>frame B</th><th>{n} NDR Mpps</th><th>forwarder NDR Mpps</th>"
            f"<th>{n} / forwarder</th><th>note</th></tr>" + body + "</table>")


def _side_table(rows: list[dict[str, Any]], runs: list[Run]) -> str:
    """Each run's NDR, limit and costs per direction and frame size (analysis.side_by_side)."""
    head = "<tr><th rowspan='2'>direction</th><th rowspan='2'>frame B</th>" + "".join(
        f"<th colspan='4'>{r.label}: {html.escape(dut_label(r.run))}</th>" for r in runs) + "</tr><tr>" + "".join(
        "<th>NDR Mpps</th><th>limit</th><th>CPU ns/pkt</th><th>XDP ns/pkt</th>" for _ in runs) + "</tr>"
    body = []
    for row in rows:
        cells = ""
        for r in runs:
            v = row["runs"].get(r.label)
            if v is None:
                cells += "<td>–</td><td>not in this run</td><td>–</td><td>–</td>"
                continue
            cells += (f"<td>{_fmt(v['ndr_pps'], 1e-6)}</td><td>{html.escape(v['limit'])}</td>"
                      f"<td>{_fmt(v['cpu_ns'], 1.0)}</td><td>{_fmt(v['xdp_ns'], 1.0)}</td>")
        body.append(f"<tr><td>{row['direction']}</td><td>{row['frame_size']}</td>{cells}</tr>")
    return "<table class='side'>" + head + "\n".join(body) + "</table>"


def rx_path_html(r: Run) -> str:
    """Per case, where its packets were lost on the receive path (the case's rx_path: the lowest
    trial that lost packets above its result, gtplab.measure.rxpath): the sentence naming the
    dominant loss point and its knob, then one table: the loss points, softnet per CPU, the DUT
    netns's UDP and IP counters that moved, the links' drops, and where each DUT thread ran."""
    out = []
    for c in r.cases:
        rx = c.get("rx_path")
        if not rx:
            continue
        at = rx.get("trial_offered_pps")
        head = (f"{html.escape(str(c['case_id']))}"
                + (f" (trial at {at / 1e6:.3f} Mpps offered, loss {(rx.get('trial_loss_ratio') or 0):.3%})"
                   if at else ""))
        rows = [("loss point", f"{p['packets']} packets", p["where"], p["knob"]) for p in rx.get("loss_points", [])]
        rows += [("softnet", f"CPU {s['cpu']}", f"processed {s['processed']}, dropped {s['dropped']}, "
                  f"time squeeze {s['time_squeeze']}", "") for s in rx.get("softnet", [])]
        for table in ("udp", "ip"):
            if rx.get(table):
                rows.append((f"DUT netns {table.upper()}", "", ", ".join(f"{k} {v}" for k, v in rx[table].items()), ""))
        rows += [("link", ifname, ", ".join(f"{k} {v}" for k, v in d.items()), "")
                 for ifname, d in (rx.get("links") or {}).items()]
        rows += [("thread", f"{t['name']} ({t['tid']})", f"ran {t['run_s']:.4f} s, last on CPU {t['cpu']}", "")
                 for t in rx.get("threads", [])]
        body = "".join("<tr>" + "".join(f"<td>{html.escape(str(x))}</td>" for x in row) + "</tr>" for row in rows)
        out.append(f"<h3>{r.label}: {head}</h3><p>{html.escape(rx.get('dominant') or '')}</p>"
                   "<table class='rxpath'><tr><th>what</th><th>where</th><th>counted</th><th>knob</th></tr>"
                   + body + "</table>")
    if not out:
        return ""
    return ("<h2 id='rxpath'>Where packets were lost on the receive path</h2><p>Per case, the trial just "
            "above its result (or the recorded one when none lost packets): every lost packet by the "
            "place that lost it, with the knob that addresses it; softnet_stat per CPU (the host's), the "
            "DUT namespace's counters, its links' drops, and the CPU each DUT thread ran on "
            "(gtplab.measure.rxpath).</p>" + "".join(out))


def _cut_cell(r: Run) -> str:
    """The run table's cases cell, after the count: a run cut short says it there too."""
    cut = results.ending(r.path, r.run, r.cases)["cut_short"]
    return f" <b>({html.escape(cut)})</b>" if cut else ""


def _write_html(path: Path, runs: list[Run], sections: list[Section], tables: str) -> None:
    title = "gtplab report: " + " vs ".join(
        (f"{html.escape(dut_label(r.run))} (" if len(runs) > 1 else "") + html.escape(str(r.run.get("lab", "")))
        + " " + html.escape(str(r.run["uuid"]))[:8] + (")" if len(runs) > 1 else "") for r in runs)
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{title}</title>"
             f"<style>{STYLE}</style></head><body><h1>{title}</h1>"]
    parts.append("<table><tr><th>run</th><th>DUT</th><th>directory</th>" + "".join(
        f"<th>{k}</th>" for k in results.RUN_FIELDS) + "<th>cases</th></tr>")
    for r in runs:
        parts.append(f"<tr><td>{r.label}</td><td>{html.escape(dut_label(r.run))}</td>"
                     f"<td>{html.escape(str(r.path))}</td>" + "".join(
            f"<td>{html.escape(str(r.run.get(k)))}</td>" for k in results.RUN_FIELDS)
            + f"<td>{len(r.cases)}{_cut_cell(r)}</td></tr>")
    parts.append("</table>")
    for r in runs:
        # a run that did not end normally says so first, whoever cut it (results.ending)
        end = results.ending(r.path, r.run, r.cases)
        cut = html.escape(str(end["cut_short"]))
        intr = r.run.get("interrupted")
        if intr:
            parts.append(f'<p class="note"><b>{r.label}: {cut}; this run was interrupted</b> ({html.escape(str(intr.get("signal")))}'
                         f' during case {html.escape(str(intr.get("case")))}): {len(r.cases)} of '
                         f'{html.escape(str(r.run.get("cases_planned")))} cases finished, shown below.</p>')
        elif r.run.get("stopped"):
            parts.append(f'<p class="note"><b>{r.label}: {cut}; this run stopped early</b>: '
                         f'{html.escape(str(r.run["stopped"]))}</p>')
        elif end["how"] == "killed":
            parts.append(f'<p class="note"><b>{r.label}: {cut}; this run ended without saying how</b> (killed: '
                         "SIGKILL, out of memory or a reboot; run.json has no end record and no process holds "
                         f"its directory): the {len(r.cases)} cases that finished are shown below.</p>")
        elif end["how"] == "running":
            parts.append(f'<p class="note"><b>{r.label}: still running</b>: {len(r.cases)} of '
                         f'{html.escape(str(end["planned"]))} cases so far, shown below.</p>')
        torn = results.torn_last_line(r.path)
        if torn:
            parts.append(f'<p class="note">{r.label}: line {torn} of cases.jsonl is torn (the run was killed '
                         "while writing it) and is left out.</p>")
    parts.append("<h2 id='measurement'>What was measured, and which side was the limit</h2>")
    for r in runs:
        parts.append(_layout_html(r))
        parts.append(_limits_table(r))
    for r in runs:
        for n in r.run.get("notes") or []:
            parts.append(f'<p class="note">{r.label}: {html.escape(str(n))}</p>')
    for r in runs:
        parts.append(rx_path_html(r))
    if len(runs) > 1:
        parts.append("<p>Every plot shows the runs left to right ("
                     + ", ".join(f"{r.label}: {html.escape(dut_label(r.run))}" for r in runs)
                     + ") with the same y axis; changes are from A: (" + "/".join(r.label for r in runs[1:])
                     + " − A) / A.</p>")
    parts.append("<ul>" + "".join(f'<li><a href="#{s.id}">{html.escape(s.title)}</a></li>'
                                  for s in sections) + '<li><a href="#cases">all cases</a></li></ul>')
    for s in sections:
        parts.append(f'<h2 id="{s.id}">{html.escape(s.title)}</h2><p>{s.text}</p>')
        for n in s.notes:
            parts.append(f'<p class="note">{html.escape(n)}</p>')
        if s.png:
            parts.append(f'<p><a href="{s.png}"><img src="{s.png}" alt="{html.escape(s.title)}"></a></p>')
        parts.append(s.extra)
    parts.append(tables)
    parts.append("</body></html>\n")
    path.write_text("\n".join(parts))


def _regression_table(regs: list[Regression]) -> str:
    rows = []
    for g in regs:
        fit = (f"<td>{g.slope:.4g}</td><td>{g.intercept:.4g}</td><td>{g.r2:.4f}</td>"
               if g.slope is not None else "<td>–</td><td>–</td><td>–</td>")
        rows.append(f"<tr><td>{g.run}</td><td>{html.escape(g.metric)}</td><td>{html.escape(g.series)}</td>"
                    f"<td>{g.n}</td><td>{g.sizes}</td>{fit}<td>{html.escape(g.note)}</td></tr>")
    return ('<table class="fit"><tr><th>run</th><th>metric</th><th>series</th><th>points</th><th>sizes</th>'
            "<th>slope (ns/byte)</th><th>intercept (ns)</th><th>R²</th><th>note</th></tr>"
            + "".join(rows) + "</table>")


def _change_table(chs: list[Change], other: str = "B") -> str:
    head = f"<th>case (A / {other})</th><th>parameters</th>" + "".join(
        f"<th>{html.escape(t)} A</th><th>{other}</th><th>change</th>" for _, t, _ in CHANGE_METRICS)
    rows = []
    for ch in chs:
        cells = "".join(f"<td>{_fmt(ch.values[m][0], s)}</td><td>{_fmt(ch.values[m][1], s)}</td>"
                        f"<td>{_pct(ch.values[m][2])}</td>" for m, _, s in CHANGE_METRICS)
        rows.append(f"<tr><td>{html.escape(ch.case_a)} / {html.escape(ch.case_b)}</td>"
                    f"<td>{html.escape(ch.key)}</td>{cells}</tr>")
    return f'<table class="change"><tr>{head}</tr>' + "\n".join(rows) + "</table>"
