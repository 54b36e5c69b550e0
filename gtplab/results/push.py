"""Sweep results to the Prometheus Pushgateway: `gtplab push RESULTS_DIR`, and the API the sweep calls.

One push per case, grouping key {job="gtplab_sweep", action, uuid, case_id, frame_size, direction,
flows, checksum, backend}: a case's metrics replace only that case's earlier push, never another
case's. Every value is a gauge in base units (seconds, bits, ratios); docs/monitoring.md lists them.

The sweep keeps its results on disk (gtplab/results/store.py) whatever happens here; a Pusher only pushes.
If the gateway is down, the Pusher says so once, holds the cases it could not push, and pushes them
as soon as the gateway answers again; what is still held at the end is pushed later with
`gtplab push RESULTS_DIR`. Nothing is lost.
"""

from __future__ import annotations

import argparse
import urllib.parse
import os
import sys
import time
import urllib.error
from datetime import datetime
from typing import Any, Callable

from prometheus_client import CollectorRegistry, Gauge, delete_from_gateway, push_to_gateway

from gtplab.results import store as results
from gtplab.errors import UserError

JOB = "gtplab_sweep"
LIVE_JOB = "gtplab_sweep_live"
DEFAULT_GATEWAY = "http://127.0.0.1:19091"
LATENCY_STATS = ("min", "avg", "p50", "p99", "max")


def default_gateway() -> str:
    return os.environ.get("GTPLAB_PUSHGATEWAY", DEFAULT_GATEWAY)


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

    def scaled(value: Any, factor: float) -> float | None:
        v = _num(value)
        return None if v is None else v * factor

    info = Gauge("gtplab_case_info", "Constant 1; the case's other parameters as labels",
                 ["flow_mode", "rate_mode", "lab", "host"], registry=reg)
    info.labels(flow_mode=str(case.get("flow_mode", "")), rate_mode=str(case.get("rate_mode", "")),
                lab=str(run.get("lab", "")), host=str(run.get("host", ""))).set(1)
    gauge("gtplab_case_bearers", "Bearers (sessions) installed on the DUT", case.get("bearers"))
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
    gauge("gtplab_run_start_timestamp_seconds", "When the sweep run started (Unix time)",
          _timestamp(run.get("started")))
    gauge("gtplab_case_end_timestamp_seconds", "When the case ended and was pushed (Unix time)",
          case.get("end_timestamp", now if now is not None else time.time()))
    return reg


def _push(gateway_url: str, run: dict[str, Any], case: dict[str, Any], timeout: float) -> None:
    """Push one case; raises OSError (URLError, HTTPError, timeouts) if the gateway does not take it."""
    push_to_gateway(gateway_url, job=JOB, registry=case_registry(run, case),
                    grouping_key=grouping_key(run, case), timeout=timeout)


def push_case(gateway_url: str, run: dict[str, Any], case: dict[str, Any], timeout: float = 5.0) -> bool:
    """Push one case's results; True if the gateway took them, False if not (never raises for that)."""
    try:
        _push(gateway_url, run, case, timeout)
        return True
    except OSError:
        return False


def _reason(e: BaseException) -> str:
    if isinstance(e, urllib.error.HTTPError):
        return f"HTTP {e.code} {e.reason}"
    if isinstance(e, urllib.error.URLError):
        return str(e.reason)
    return str(e) or type(e).__name__


class Pusher:
    """What the sweep uses: push(case) after each case. Never raises because of the gateway.

    If a push fails, it warns once (on `warn`), holds the case, and goes on; at the next successful
    push it first pushes every held case, in order. `pending` lists what is still held.
    """

    def __init__(self, gateway_url: str | None, run: dict[str, Any], results_dir: str | None = None,
                 timeout: float = 2.0, warn: Callable[[str], None] | None = None):
        self.gateway_url = gateway_url
        self.run = run
        self.results_dir = results_dir
        self.timeout = timeout
        self.warn = warn or (lambda msg: print(f"gtplab: {msg}", file=sys.stderr, flush=True))
        self.pending: list[dict[str, Any]] = []
        self.pushed = 0
        self.warned = False

    def _warn_down(self, e: BaseException) -> None:
        if self.warned:
            return
        self.warned = True
        later = f"; push them later with `gtplab push {self.results_dir}`" if self.results_dir else ""
        self.warn(f"pushgateway {self.gateway_url} is not taking results ({_reason(e)}); "
                  f"the sweep goes on, every result stays on disk{later}")

    def push(self, case: dict[str, Any]) -> bool:
        """Push this case (and any held before it). True if everything is pushed now."""
        if not self.gateway_url:
            return False
        self.pending.append(case)
        while self.pending:
            try:
                _push(self.gateway_url, self.run, self.pending[0], self.timeout)
            except Exception as e:      # OSError, and anything else: never the sweep's problem
                self._warn_down(e)
                return False
            self.pending.pop(0)
            self.pushed += 1
        return True

    def case_started(self, case: dict[str, Any], index: int | None = None, total: int | None = None) -> bool:
        """Optional: tell the live dashboard which case runs now (one group per run, replaced each time)."""
        if not self.gateway_url:
            return False
        reg = CollectorRegistry()
        key = grouping_key(self.run, case)
        labels = {k: key[k] for k in ("action", "case_id", "frame_size", "direction", "flows", "checksum")}
        g = Gauge("gtplab_sweep_running_case_info", "Constant 1; the case running now as labels",
                  list(labels), registry=reg)
        g.labels(**labels).set(1)
        Gauge("gtplab_sweep_case_start_timestamp_seconds", "When the running case started (Unix time)",
              registry=reg).set(time.time())
        if index is not None:
            Gauge("gtplab_sweep_cases_done", "Cases finished in this run", registry=reg).set(index)
        if total is not None:
            Gauge("gtplab_sweep_cases", "Cases planned in this run", registry=reg).set(total)
        try:
            push_to_gateway(self.gateway_url, job=LIVE_JOB, registry=reg,
                            grouping_key={"uuid": str(self.run["uuid"]),
                                          "backend": str(self.run.get("backend", ""))},
                            timeout=self.timeout)
            return True
        except Exception as e:
            self._warn_down(e)
            return False

    def finish(self) -> bool:
        """End of the sweep: one last try for held cases, remove the live group. True if none is held."""
        if self.gateway_url and self.pending:
            last = self.pending.pop()
            self.push(last)  # pushes the held cases first, then last
        if self.gateway_url and not self.pending:
            try:
                delete_from_gateway(self.gateway_url, job=LIVE_JOB,
                                    grouping_key={"uuid": str(self.run["uuid"]),
                                                  "backend": str(self.run.get("backend", ""))},
                                    timeout=self.timeout)
            except Exception:
                pass
        if self.pending and self.results_dir:
            self.warn(f"{len(self.pending)} case(s) not pushed; they are in {self.results_dir}: "
                      f"`gtplab push {self.results_dir}` pushes them")
        return not self.pending


def push_results_dir(results_dir: str, gateway_url: str, timeout: float = 5.0) -> tuple[int, int, str | None]:
    """Push every case of a results directory: (pushed, failed, first error or None)."""
    run = results.read_run(results_dir)
    cases = results.read_cases(results_dir)
    pushed = failed = 0
    first_error = None
    for case in cases:
        try:
            _push(gateway_url, run, case, timeout)
            pushed += 1
        except OSError as e:
            failed += 1
            first_error = first_error or _reason(e)
    return pushed, failed, first_error


def check_gateway_url(url: str) -> str:
    """The Pushgateway URL, checked before anything starts (UserError naming what is wrong)."""
    try:
        u = urllib.parse.urlsplit(url)
        u.port    # raises ValueError for a bad port, or an unclosed [IPv6 address
    except ValueError as e:
        raise UserError(f"pushgateway URL {url!r}: {e}") from None
    if u.scheme not in ("http", "https") or not u.hostname:
        raise UserError(f"pushgateway URL {url!r}: give http://HOST[:PORT]")
    return url


def do_push(args: argparse.Namespace) -> int:
    check_gateway_url(args.gateway)
    torn = results.torn_last_line(args.results_dir)
    if torn:
        print(f"gtplab push: line {torn} of {args.results_dir}/cases.jsonl is torn (the run was killed "
              "while writing it): pushing the cases before it", file=sys.stderr)
    try:
        pushed, failed, err = push_results_dir(args.results_dir, args.gateway, args.timeout)
    except results.ResultsError as e:
        raise UserError(str(e)) from None
    total = pushed + failed
    print(f"pushed {pushed} of {total} case(s) from {args.results_dir} to {args.gateway}")
    if failed:
        print(f"gtplab push: {failed} case(s) not pushed: {err}; nothing is lost, try again later",
              file=sys.stderr)
        return 1
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("push", help="push a sweep's results (RESULTS_DIR) to the Pushgateway",
                       description=__doc__.splitlines()[0])
    p.add_argument("results_dir", metavar="RESULTS_DIR", help="a sweep results directory (run.json, cases.jsonl)")
    p.add_argument("--gateway", default=default_gateway(), metavar="URL",
                   help="Pushgateway URL (default: $GTPLAB_PUSHGATEWAY or %(default)s)")
    p.add_argument("--timeout", type=float, default=5.0, metavar="S", help="per push (default: %(default)s)")
    p.set_defaults(func=do_push)
