#!/usr/bin/env python3
"""Generate gtplab's Grafana dashboards (dashboards/*.json) with grafana-foundation-sdk.

    .venv/bin/python dashboards/generate.py           write the JSON files next to this script
    .venv/bin/python dashboards/generate.py --check   exit 1 if a committed file differs (CI)

Edit the panel tables below, never the JSON: tests/ops/test_dashboards.py fails when the committed JSON
and this generator disagree. Every query uses the provisioned datasource (uid DATASOURCE_UID,
dashboards/provisioning/datasources/prometheus.yaml). Metric names: docs/monitoring.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from grafana_foundation_sdk.builders import barchart, common, dashboard, prometheus, stat, table, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as dm
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

HERE = Path(__file__).resolve().parent
DATASOURCE_UID = "gtplab-prometheus"
DS = dm.DataSourceRef(type_val="prometheus", uid=DATASOURCE_UID)

# label selectors shared by the sweep-result queries (the variables are defined per dashboard)
CASE = 'uuid="$uuid", action=~"$action", flows=~"$flows", checksum=~"$checksum"'
NODE = 'instance=~"$node"'
PGWU = 'instance=~"$pgwu"'
DROP = 'verdict=~"drop|aborted"'


@dataclass
class Query:
    expr: str
    legend: str = ""
    instant: bool = False  # instant queries in table format (bar charts and tables), else range


@dataclass
class P:
    """One panel: kind is timeseries | barchart (value per frame size) | stat | table."""
    kind: str
    title: str
    queries: list[Query]
    unit: str = "short"
    w: int = 12
    h: int = 8
    description: str = ""
    options: dict = field(default_factory=dict)


def _by_frame_size(value: str, x: str = "frame_size", series: str = "direction") -> list[dm.DataTransformerConfig]:
    """Instant table -> one row per frame size, one column per direction, sorted by frame size."""
    return [
        dm.DataTransformerConfig(id_val="groupingToMatrix", options={
            "columnField": series, "rowField": x, "valueField": value, "emptyValue": "null"}),
        dm.DataTransformerConfig(id_val="convertFieldType", options={
            "conversions": [{"targetField": f"{x}\\{series}", "destinationType": "number"}]}),
        dm.DataTransformerConfig(id_val="sortBy", options={"sort": [{"field": f"{x}\\{series}"}]}),
        dm.DataTransformerConfig(id_val="convertFieldType", options={
            "conversions": [{"targetField": f"{x}\\{series}", "destinationType": "string"}]}),
    ]


def _target(q: Query, ref: str) -> prometheus.Dataquery:
    t = prometheus.Dataquery().expr(q.expr).ref_id(ref).datasource(DS)
    if q.legend:
        t = t.legend_format(q.legend)
    if q.instant:
        t = t.instant().format(PromQueryFormat.TABLE)
    else:
        t = t.range()
    return t


def _panel(p: P, panel_id: int):
    if p.kind == "timeseries":
        b = (timeseries.Panel().line_width(1).fill_opacity(10)
             .legend(common.VizLegendOptions().display_mode(cm.LegendDisplayMode.TABLE)
                     .placement(cm.LegendPlacement.RIGHT).show_legend(True).calcs(["mean", "max"])))
    elif p.kind == "barchart":
        b = (barchart.Panel().x_field("frame_size\\direction").show_value(cm.VisibilityMode.AUTO)
             .stacking(cm.StackingMode.NONE).orientation(cm.VizOrientation.VERTICAL).axis_label("")
             .legend(common.VizLegendOptions().display_mode(cm.LegendDisplayMode.LIST)
                     .placement(cm.LegendPlacement.BOTTOM).show_legend(True)))
        for t in _by_frame_size("Value"):
            b = b.with_transformation(t)
    elif p.kind == "stat":
        b = (stat.Panel().graph_mode(cm.BigValueGraphMode.NONE).color_mode(cm.BigValueColorMode.NONE)
             .text_mode(cm.BigValueTextMode(p.options.get("text_mode", "value_and_name")))
             .reduce_options(common.ReduceDataOptions().calcs(["lastNotNull"]).values(False)))
    elif p.kind == "table":
        b = table.Panel().show_header(True)
        b = b.with_transformation(dm.DataTransformerConfig(id_val="merge", options={}))
        b = b.with_transformation(dm.DataTransformerConfig(id_val="organize", options={
            "excludeByName": {"Time": True, "job": True, "__name__": True}}))
    else:
        raise ValueError(f"unknown panel kind {p.kind}")
    b = (b.id(panel_id).title(p.title).datasource(DS).unit(p.unit)
         .grid_pos(dm.GridPos(h=p.h, w=p.w, x=0, y=0)))
    if p.description:
        b = b.description(p.description)
    for i, q in enumerate(p.queries):
        b = b.with_target(_target(q, chr(ord("A") + i)))
    return b


def _var(name: str, query: str, label: str, multi: bool = False, numeric: bool = False):
    v = (dashboard.QueryVariable(name).label(label).datasource(DS)
         .query({"query": query, "refId": f"{name}-var"})
         .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED)
         .sort(dm.VariableSort.NUMERICAL_ASC if numeric else dm.VariableSort.ALPHABETICAL_DESC))
    if multi:
        v = v.multi(True).include_all(True).all_value(".*")
    return v


def build(uid: str, title: str, description: str, variables: list, rows: list[tuple[str, list[P]]],
          time_from: str = "now-6h", refresh: str = "30s"):
    d = (dashboard.Dashboard(title).uid(uid).description(description).tags(["gtplab"])
         .editable().timezone("browser").time(time_from, "now").refresh(refresh)
         .tooltip(dm.DashboardCursorSync.CROSSHAIR))
    for v in variables:
        d = d.with_variable(v)
    panel_id = 1
    for row_title, panels in rows:
        d = d.with_row(dashboard.Row(row_title).id(panel_id))
        panel_id += 1
        for p in panels:
            d = d.with_panel(_panel(p, panel_id))
            panel_id += 1
    return d.build()


CASE_VARIABLES = [
    _var("uuid", "label_values(gtplab_case_info, uuid)", "Run (uuid)"),
    _var("action", 'label_values(gtplab_case_info{uuid="$uuid"}, action)', "Action", multi=True),
    _var("flows", 'label_values(gtplab_case_info{uuid="$uuid"}, flows)', "Flows", multi=True, numeric=True),
    _var("checksum", 'label_values(gtplab_case_info{uuid="$uuid"}, checksum)', "Outer UDP checksum", multi=True),
]


def _per_size(metric: str, scale: str = "", extra: str = "") -> Query:
    sel = CASE + (f", {extra}" if extra else "")
    return Query(f"max by (direction, frame_size) ({metric}{{{sel}}}){scale}", instant=True)


GOAL = 'goal=~"$goal"'


def sweep_results():
    return build(
        "gtplab-sweep-results", "gtplab: sweep results",
        "Results of one sweep run (pushed by `gtplab sweep` / `gtplab push`): the search's result per goal "
        "(MLRsearch, RFC 9971), latency at shares of the PDR, rate, loss and latency per frame size and "
        "direction. Several flow counts or checksum modes are folded with max().",
        CASE_VARIABLES + [
            _var("goal", 'label_values(gtplab_case_goal_lower_bound_packets_per_second{uuid="$uuid"}, goal)',
                 "Search goal"),
        ],
        [
            ("Search result of goal $goal (MLRsearch, RFC 9971)", [
                P("barchart", "Relevant lower bound (the result), goal $goal",
                  [_per_size("gtplab_case_goal_lower_bound_packets_per_second", " / 1e6", GOAL)], unit="Mpps",
                  description="The largest load classified Lower Bound below the smallest Upper Bound "
                              "(RFC 9971 4.8.2); irregular results are in the table below"),
                P("barchart", "Conditional throughput, goal $goal",
                  [_per_size("gtplab_case_goal_conditional_throughput_packets_per_second", " / 1e6", GOAL)],
                  unit="Mpps", description="The forwarding rate at the lower bound (RFC 9971 4.8.3)"),
                P("barchart", "Latency p99 at 90 % of the PDR",
                  [_per_size("gtplab_case_latency_at_pdr_seconds", "", 'stat="p99", load_percent="90"')], unit="s"),
                P("barchart", "Latency p99 idle (0 % of the PDR)",
                  [_per_size("gtplab_case_latency_at_pdr_seconds", "", 'stat="p99", load_percent="0"')], unit="s"),
                P("table", "Goal results of every case", [
                    Query(f"gtplab_case_goal_lower_bound_packets_per_second{{{CASE}}}", instant=True),
                    Query(f"gtplab_case_goal_upper_bound_packets_per_second{{{CASE}}}", instant=True),
                    Query(f"gtplab_case_goal_conditional_throughput_packets_per_second{{{CASE}}}", instant=True),
                    Query(f"gtplab_case_goal_regular{{{CASE}}}", instant=True),
                ], w=18, h=10, description="Value #A: relevant lower bound pps, #B: relevant upper bound pps, "
                                           "#C: conditional throughput pps, #D: 1 regular, 0 irregular"),
                P("stat", "Cases the host disturbed (host busy)",
                  [Query(f"count(gtplab_case_host_busy{{{CASE}}} == 1) or vector(0)", "host busy"),
                   Query(f"sum(gtplab_case_search_disturbed_trials{{{CASE}}})", "disturbed trials")],
                  w=6, h=10),
            ]),
            ("Throughput by frame size", [
                P("barchart", "Received Mpps", [_per_size("gtplab_case_received_packets_per_second", " / 1e6")],
                  unit="Mpps", description="Packets per second the generator received, per frame size"),
                P("barchart", "Offered Mpps", [_per_size("gtplab_case_offered_packets_per_second", " / 1e6")],
                  unit="Mpps"),
                P("barchart", "Received Gbps (L1: + 20 B preamble and gap per frame)",
                  [_per_size("gtplab_case_received_bytes_per_second", " * 8 / 1e9", 'layer="l1"')], unit="Gbps"),
                P("barchart", "Received Gbps (L2: frames incl. FCS)",
                  [_per_size("gtplab_case_received_bytes_per_second", " * 8 / 1e9", 'layer="l2"')], unit="Gbps"),
            ]),
            ("Loss and latency", [
                P("barchart", "Loss ratio", [_per_size("gtplab_case_loss_ratio")], unit="percentunit"),
                P("barchart", "Latency p99", [_per_size("gtplab_case_latency_seconds", "", 'stat="p99"')], unit="s"),
                P("barchart", "Latency average", [_per_size("gtplab_case_latency_seconds", "", 'stat="avg"')],
                  unit="s"),
                P("barchart", "Latency max", [_per_size("gtplab_case_latency_seconds", "", 'stat="max"')], unit="s"),
            ]),
            ("Cases", [
                P("table", "Every case of the run", [
                    Query(f"gtplab_case_received_packets_per_second{{{CASE}}}", instant=True),
                    Query(f"gtplab_case_loss_ratio{{{CASE}}}", instant=True),
                    Query(f'gtplab_case_latency_seconds{{{CASE}, stat="p99"}}', instant=True),
                    Query(f"gtplab_case_dut_program_seconds_per_packet{{{CASE}}}", instant=True),
                ], w=24, h=10, description="Value #A: rx pps, #B: loss ratio, #C: latency p99 (s), "
                                           "#D: XDP program seconds per packet"),
            ]),
        ])


def dut():
    rate = "$__rate_interval"
    return build(
        "gtplab-dut", "gtplab: DUT (PGW-U)",
        "The device under test: CPU per core (node-exporter), the XDP programs' verdicts and drop reasons "
        "(pgwu metrics exporter), and per-case cost per packet (pushed by the sweep).",
        [
            _var("node", "label_values(node_cpu_seconds_total, instance)", "Node", multi=True),
            _var("pgwu", "label_values(pgwu_packets_total, instance)", "pgwu exporter", multi=True),
            *CASE_VARIABLES,
        ],
        [
            ("CPU", [
                P("timeseries", "CPU busy per core", [Query(
                    f'1 - avg by (cpu) (rate(node_cpu_seconds_total{{{NODE}, mode="idle"}}[{rate}]))',
                    "cpu {{cpu}}")], unit="percentunit"),
                P("timeseries", "softirq share per core (XDP runs in softirq)", [Query(
                    f'sum by (cpu) (rate(node_cpu_seconds_total{{{NODE}, mode="softirq"}}[{rate}]))'
                    f" / sum by (cpu) (rate(node_cpu_seconds_total{{{NODE}}}[{rate}]))",
                    "cpu {{cpu}}")], unit="percentunit"),
            ]),
            ("XDP", [
                P("timeseries", "Packets per second by verdict", [Query(
                    f"sum by (verdict) (rate(pgwu_packets_total{{{PGWU}}}[{rate}]))", "{{verdict}}")],
                  unit="pps"),
                P("timeseries", "Bits per second by verdict", [Query(
                    f"8 * sum by (verdict) (rate(pgwu_bytes_total{{{PGWU}}}[{rate}]))", "{{verdict}}")],
                  unit="bps"),
                P("timeseries", "Dropped packets per second by reason", [Query(
                    f"sum by (reason) (rate(pgwu_packets_total{{{PGWU}, {DROP}}}[{rate}]))", "{{reason}}")],
                  unit="pps"),
                P("timeseries", "Packets per second by reason (all verdicts)", [Query(
                    f"sum by (reason, verdict) (rate(pgwu_packets_total{{{PGWU}}}[{rate}])) > 0",
                    "{{reason}} ({{verdict}})")], unit="pps"),
                P("timeseries", "Bearer usage: packets per second by direction", [Query(
                    f"sum by (direction) (rate(pgwu_bearer_usage_packets_total{{{PGWU}}}[{rate}]))",
                    "{{direction}}")], unit="pps",
                  description="From the bearers' own counters; falls when bearers are deleted"),
                P("stat", "Bearers", [Query(f"sum by (table) (pgwu_bearers{{{PGWU}}})", "{{table}}")],
                  w=12, h=8),
            ]),
            ("Cost per packet (per sweep case)", [
                P("barchart", "XDP program ns per packet (BPF stats)",
                  [_per_size("gtplab_case_dut_program_seconds_per_packet", " * 1e9")], unit="ns"),
                P("barchart", "DUT CPU ns per packet", [_per_size("gtplab_case_dut_cpu_seconds_per_packet", " * 1e9")],
                  unit="ns"),
            ]),
        ])


def live():
    rate = "$__rate_interval"
    last = (f'gtplab_case_end_timestamp_seconds{{uuid="$uuid"}} == on (uuid) group_left '
            f'max by (uuid) (gtplab_case_end_timestamp_seconds{{uuid="$uuid"}})')
    return build(
        "gtplab-live", "gtplab: live case",
        "A sweep while it runs: the case running now, the DUT's rates and CPU, the last finished case.",
        [
            _var("uuid", 'label_values({__name__=~"gtplab_sweep_running_case_info|gtplab_case_info"}, uuid)',
                 "Run (uuid)"),
            _var("node", "label_values(node_cpu_seconds_total, instance)", "Node", multi=True),
            _var("pgwu", "label_values(pgwu_packets_total, instance)", "pgwu exporter", multi=True),
        ],
        [
            ("Now", [
                P("stat", "Running case", [Query(
                    'gtplab_sweep_running_case_info{uuid="$uuid"}',
                    "{{action}} {{frame_size}} B, {{flows}} flows, checksum {{checksum}}")],
                  w=12, h=4, options={"text_mode": "name"}),
                P("stat", "Cases done", [Query('gtplab_sweep_cases_done{uuid="$uuid"}', "done"),
                                         Query('gtplab_sweep_cases{uuid="$uuid"}', "planned")], w=6, h=4),
                P("stat", "Case running for", [Query(
                    'time() - gtplab_sweep_case_start_timestamp_seconds{uuid="$uuid"}', "")],
                  unit="s", w=6, h=4),
            ]),
            ("DUT now", [
                P("timeseries", "XDP packets per second by verdict", [Query(
                    f"sum by (verdict) (rate(pgwu_packets_total{{{PGWU}}}[{rate}]))", "{{verdict}}")], unit="pps"),
                P("timeseries", "XDP drops per second by reason", [Query(
                    f"sum by (reason) (rate(pgwu_packets_total{{{PGWU}, {DROP}}}[{rate}]))", "{{reason}}")],
                  unit="pps"),
                P("timeseries", "CPU busy per core", [Query(
                    f'1 - avg by (cpu) (rate(node_cpu_seconds_total{{{NODE}, mode="idle"}}[{rate}]))',
                    "cpu {{cpu}}")], unit="percentunit"),
                P("timeseries", "softirq share per core", [Query(
                    f'sum by (cpu) (rate(node_cpu_seconds_total{{{NODE}, mode="softirq"}}[{rate}]))'
                    f" / sum by (cpu) (rate(node_cpu_seconds_total{{{NODE}}}[{rate}]))",
                    "cpu {{cpu}}")], unit="percentunit"),
            ]),
            ("Last finished case", [
                P("stat", "Received Mpps", [Query(
                    f'gtplab_case_received_packets_per_second{{uuid="$uuid"}} / 1e6 and on (uuid, case_id) ({last})',
                    "{{action}} {{frame_size}} B")], unit="Mpps", w=8, h=5),
                P("stat", "Loss ratio", [Query(
                    f'gtplab_case_loss_ratio{{uuid="$uuid"}} and on (uuid, case_id) ({last})',
                    "{{action}} {{frame_size}} B")], unit="percentunit", w=8, h=5),
                P("stat", "Latency p99", [Query(
                    f'gtplab_case_latency_seconds{{uuid="$uuid", stat="p99"}} and on (uuid, case_id) ({last})',
                    "{{action}} {{frame_size}} B")], unit="s", w=8, h=5),
            ]),
        ], time_from="now-15m", refresh="5s")


UPFTEST_FIG = 'gtplab_upftest_case_value{{test="{test}", figure="{figure}"}}'


def upftests():
    return build(
        "gtplab-upftests", "gtplab: UPF behaviour tests",
        "The UPF behaviour tests (`gtplab upftest KIND --push URL`, docs/upftests.md): the verdict of each "
        "UPF and test kind, and the figures the criteria decided on, per case.",
        [],
        [
            ("Verdicts", [
                P("table", "Verdict per UPF and test: its worst case (1 pass, 0 fail, -1 not supported)",
                  [Query("min by (upf, test) (gtplab_upftest_case_pass)", instant=True)], w=24, h=8),
            ]),
            ("Figures per case", [
                P("table", "Policing: delivered / MBR above the MBR, per frame size and burst (1 = exact; "
                  "criterion +-1 %, or at most +1 % for bursts above what a 15,000-octet bucket keeps)", [Query(
                    UPFTEST_FIG.format(test="policing", figure="delivered_bps")
                    + " / on (upf, test, uuid, case_id) "
                    + UPFTEST_FIG.format(test="policing", figure="mbr_bps"), instant=True)], w=12),
                P("table", "Policing: burst tolerance below the MBR, octets (the largest burst passed with no loss; "
                  "15,000 required)", [Query(UPFTEST_FIG.format(test="policing", figure="tolerance_bytes"),
                                             instant=True)], w=12),
                P("table", "Policing: burst tolerance, ms at the MBR",
                  [Query(UPFTEST_FIG.format(test="policing", figure="tolerance_ms"), instant=True)], w=12),
                P("table", "Handover: switch time, ms (Update FAR sent -> first packet on the new path)",
                  [Query(UPFTEST_FIG.format(test="handover", figure="switch_ms"), instant=True)], w=12),
                P("table", "N4: p99 latency per message type, idle and loaded (ms)",
                  [Query(UPFTEST_FIG.format(test="n4", figure="p99_ms"), instant=True)], w=12),
                P("table", "Cases that did not pass", [Query("gtplab_upftest_case_pass < 1", instant=True)],
                  w=12, description="0: failed, -1: not supported (the UPF rejected the rules)"),
                P("table", "Cases not decided (a premise did not hold: no verdict either way)",
                  [Query("gtplab_upftest_case_not_decided == 1", instant=True)], w=12,
                  description="the case's premises (docs/upftests.md, Premises) and why are in its results "
                              "directory's cases.jsonl and report.md"),
            ]),
        ])


DASHBOARDS = {"sweep-results.json": sweep_results, "dut.json": dut, "live.json": live,
              "upftests.json": upftests}


def render(make) -> str:
    return json.dumps(make(), cls=JSONEncoder, indent=2, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with the files instead of writing them")
    ap.add_argument("--out-dir", default=str(HERE), help="where the JSON goes (default: next to this script)")
    args = ap.parse_args(argv)
    stale = []
    for name, make in DASHBOARDS.items():
        path = Path(args.out_dir) / name
        text = render(make)
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
            print(f"wrote {path}")
    if stale:
        print(f"stale (run dashboards/generate.py): {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
