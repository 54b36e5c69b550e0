"""A sweep case's results as Pushgateway metrics: the grouping key and the gauges of one push.

One push per case, grouping key {job="gtplab_sweep", action, uuid, case_id, frame_size, direction,
flows, checksum, ip, n3, backend} (ip: the user packets' address family, 4, 6 or 4v6; n3: the
tunnel's, GTP-U over IPv4 or IPv6, 4 or 6; "4" for results written before they existed): a case's metrics replace only that case's earlier push, never another
case's. Every value is a gauge in base units (seconds, bits, ratios); docs/monitoring.md lists them.
No I/O: gtplab.results.pusher pushes them.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any, Callable

from prometheus_client import CollectorRegistry, Gauge

from gtplab.goalcode import dense_code

JOB = "gtplab_sweep"
LATENCY_STATS = ("min", "avg", "p50", "p99", "max")


def grouping_key(run: dict[str, Any], case: dict[str, Any]) -> dict[str, str]:
    """The labels that identify one case in the gateway (and in Prometheus, with honor_labels)."""
    return {
        "action": str(case["direction"]),
        "uuid": str(run["uuid"]),
        "case_id": str(case["case_id"]),
        "frame_size": str(case["frame_size"]),
        "direction": str(case["direction"]),
        "flows": str(case.get("flows", "")),
        "checksum": str(case.get("checksum", "")),
        "ip": str(case.get("ip") or "4"),
        "n3": str(case.get("n3") or "4"),
        "backend": str(run.get("backend", "")),
    }


def _num(v: Any) -> float | None:
    if v is None or isinstance(v, bool):
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _timestamp(iso: Any) -> float | None:
    try:
        return datetime.fromisoformat(str(iso).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def case_registry(run: dict[str, Any], case: dict[str, Any], now: float | None = None) -> CollectorRegistry:
    """The metrics of one case; values the case does not have (None, missing) are left out."""
    reg = CollectorRegistry()
    gauges: dict[str, Gauge] = {}

    def gauge(name: str, doc: str, value: Any, **labels: str) -> None:
        v = _num(value)
        if v is None:
            return
        if name not in gauges:  # else: the same metric with another label value
            gauges[name] = Gauge(name, doc, list(labels), registry=reg)
        g = gauges[name]
        (g.labels(**labels) if labels else g).set(v)

    info = Gauge("gtplab_case_info", "Constant 1; the case's other parameters as labels",
                 ["flow_mode", "rate_mode", "lab", "host", "goal", "goal_rfc_code", "limit"], registry=reg)
    info.labels(flow_mode=str(case.get("flow_mode", "")), rate_mode=str(case.get("rate_mode", "")),
                lab=str(run.get("lab", "")), host=str(run.get("host", "")), goal=str(case.get("goal") or ""),
                goal_rfc_code=_claim_rfc_code(case), limit=str(case.get("limit") or "")).set(1)
    gauge("gtplab_case_bearers", "Bearers (sessions) installed on the DUT", case.get("bearers"))
    gauge("gtplab_case_generator_pairs", "Generator port pairs driven together (only with several)",
          case.get("pairs"))
    gauge("gtplab_case_duration_seconds", "Traffic duration of the case", case.get("duration_s"))
    gauge("gtplab_case_offered_packets_per_second", "Offered load", case.get("offered_pps"))
    for layer in ("l1", "l2"):
        gauge("gtplab_case_offered_bytes_per_second",
              "Offered load (bits/s / 8); l1 counts preamble, SFD and inter-frame gap (20 bytes per frame)",
              scaled(case.get(f"offered_bps_{layer}"), 1 / 8), layer=layer)
    gauge("gtplab_case_received_packets_per_second", "Received (forwarded by the DUT) rate",
          case.get("rx_pps"))
    for layer in ("l1", "l2"):
        gauge("gtplab_case_received_bytes_per_second",
              "Received rate (bits/s / 8); l1 counts preamble, SFD and inter-frame gap (20 bytes per frame)",
              scaled(case.get(f"rx_bps_{layer}"), 1 / 8), layer=layer)
    gauge("gtplab_case_sent_packets", "Packets the generator sent in the case", case.get("tx_packets"))
    gauge("gtplab_case_received_packets", "Packets the generator received in the case",
          case.get("rx_packets"))
    gauge("gtplab_case_loss_ratio", "Lost packets / sent packets (0..1)", case.get("loss_ratio"))
    latency = case.get("latency_us") or {}
    for stat in LATENCY_STATS:
        gauge("gtplab_case_latency_seconds", "Latency through the DUT, by statistic",
              scaled(latency.get(stat), 1e-6), stat=stat)
    dut = case.get("dut") or {}
    for stage, key in (("received", "rx_packets"), ("forwarded", "fwd_packets"),
                       ("dropped", "drop_packets")):
        gauge("gtplab_case_dut_packets", "Packets the DUT's XDP programs saw, by stage",
              dut.get(key), stage=stage)
    for reason, n in sorted((dut.get("drops_by_reason") or {}).items()):
        gauge("gtplab_case_dut_dropped_packets", "Packets the DUT dropped, by drop reason", n,
              reason=str(reason))
    gauge("gtplab_case_dut_program_seconds_per_packet",
          "XDP program run time per packet (kernel BPF stats)", scaled(dut.get("ns_per_packet"), 1e-9))
    gauge("gtplab_case_dut_cpu_seconds", "CPU time the DUT used during the case", dut.get("cpu_seconds"))
    gauge("gtplab_case_dut_cpu_seconds_per_packet", "DUT CPU time per received packet",
          scaled(dut.get("cpu_ns_per_packet"), 1e-9))
    rx = case.get("rx_path") or {}
    for pt in rx.get("loss_points") or []:
        gauge("gtplab_case_rx_path_lost_packets", "Packets lost on the receive path in the trial just above "
              "the case's result, by the place that lost them (gtplab.measure.rxpath)", pt.get("packets"),
              where=str(pt.get("key")))
    for row in rx.get("softnet") or []:
        for k in ("processed", "dropped", "time_squeeze"):
            gauge(f"gtplab_case_softnet_{k}", f"softnet_stat {k} per CPU during that trial (the host's)",
                  row.get(k), cpu=str(row.get("cpu")))
    for table in ("udp", "ip"):
        for k, v in sorted((rx.get(table) or {}).items()):
            gauge(f"gtplab_case_dut_{table}", f"The DUT netns's {table.upper()} MIB counters that moved "
                  "during that trial (/proc/net/snmp)", v, counter=str(k))
    by_name: dict[str, list] = {}
    for t in rx.get("threads") or []:       # by name: a thread id is new in every run
        row = by_name.setdefault(str(t.get("name")), [0.0, t.get("cpu")])
        row[0] += t.get("run_s") or 0.0
    for name, (run_s, cpu) in sorted(by_name.items()):
        gauge("gtplab_case_dut_thread_cpu_seconds", "CPU time of the DUT's threads during that trial, by "
              "name, and the CPU they last ran on", run_s, thread=name, cpu=str(cpu))
    search_gauges(gauge, case)
    gauge("gtplab_run_start_timestamp_seconds", "When the sweep run started (Unix time)",
          _timestamp(run.get("started")))
    gauge("gtplab_case_end_timestamp_seconds", "When the case ended and was pushed (Unix time)",
          case.get("end_timestamp", now if now is not None else time.time()))
    return reg


def _rfc_code(g: dict[str, Any] | None) -> str:
    """RFC 9971's dense code of a case's goal result ('0.5f1d0l50e'): stored, else computed from the
    goal's attributes (results written before it was stored), else ""."""
    return str((g or {}).get("rfc_code") or dense_code((g or {}).get("goal")) or "")


def _claim_rfc_code(case: dict[str, Any]) -> str:
    """The dense code of the case's claim goal (its `goal`), "" for a case without one."""
    if not case.get("goal"):
        return ""
    return _rfc_code((case.get("goals") or {}).get(case["goal"])) or str(case.get("goal_rfc_code") or "")


def search_gauges(gauge: Callable[..., None], case: dict[str, Any]) -> None:
    """A searched case (MLRsearch): per goal, with its code as the label `goal` and RFC 9971's dense
    code beside it as `rfc_code` (what "NDR" stands for: 0.5f1d0l50e is 0.5 s trials summed to 1 s,
    not RFC 2544's 60 s), the relevant bounds, the conditional throughput, the claim, whether the
    result is regular, and which side set it (as a label of gtplab_case_goal_info); the search's
    trials and those the host disturbed; latency at the shares of the PDR (label load_percent, "0"
    idle)."""
    for code, g in (case.get("goals") or {}).items():
        lb = {"goal": code, "rfc_code": _rfc_code(g)}
        gauge("gtplab_case_goal_lower_bound_packets_per_second", "Relevant lower bound of the goal (RFC 9971 "
              "4.8.2): the result", g.get("lower_pps"), **lb)
        gauge("gtplab_case_goal_upper_bound_packets_per_second", "Relevant upper bound of the goal (RFC 9971 4.8.1)",
              g.get("upper_pps"), **lb)
        gauge("gtplab_case_goal_conditional_throughput_packets_per_second", "Conditional throughput of the goal "
              "(RFC 9971 4.8.3): the forwarding rate at its lower bound", g.get("conditional_pps"), **lb)
        gauge("gtplab_case_goal_claimed_packets_per_second", "The goal's lower bound when the DUT set it (not "
              "the generator, not a busy host)", g.get("claimed_pps"), **lb)
        gauge("gtplab_case_goal_regular", "1 when the goal's result is regular (RFC 9971 4.8.4), else 0",
              1.0 if g.get("regular") else 0.0, **lb)
        gauge("gtplab_case_goal_info", "Constant 1; the goal's limit and why its result is irregular, as labels",
              1.0, **lb, limit=str(g.get("limit") or ""), irregular=str(g.get("irregular") or ""))
    d = case.get("disturbance") or {}
    if case.get("goals"):
        gauge("gtplab_case_search_trials", "Trials of the case's search", d.get("trials"))
        gauge("gtplab_case_search_disturbed_trials", "Trials of the case's search the host disturbed",
              d.get("disturbed"))
        gauge("gtplab_case_host_busy", "1 when most of the search's trial time was disturbed (the case claims "
              "nothing), else 0", 1.0 if d.get("host_busy") else 0.0)
    for k, pt in ((case.get("latency_pdr") or {}).get("points") or {}).items():
        gauge("gtplab_case_latency_at_pdr_load_packets_per_second", "The load of the latency trial at this share "
              "of the PDR", pt.get("load_pps"), load_percent=str(k))
        for stat in LATENCY_STATS:
            gauge("gtplab_case_latency_at_pdr_seconds", "Latency through the DUT at a share of the PDR found "
                  "(load_percent 0: idle), by statistic", scaled((pt.get("latency_us") or {}).get(stat), 1e-6),
                  load_percent=str(k), stat=stat)


def scaled(value: Any, factor: float) -> float | None:
    v = _num(value)
    return None if v is None else v * factor
