"""Sweep results to the Prometheus Pushgateway: `gtplab push RESULTS_DIR`, and the API the sweep calls.

One push per case, grouping key {job="gtplab_sweep", action, uuid, case_id, frame_size, direction,
flows, checksum, ip, backend} (ip: the user packets' address family, 4, 6 or 4v6; "4" for results
written before it existed): a case's metrics replace only that case's earlier push, never another
case's. Every value is a gauge in base units (seconds, bits, ratios); docs/monitoring.md lists them.

The sweep keeps its results on disk (gtplab/results/store.py) whatever happens here; a Pusher only pushes.
If the gateway is down, the Pusher says so once, holds the cases it could not push, and pushes them
as soon as the gateway answers again; what is still held at the end is pushed later with
`gtplab push RESULTS_DIR`. Nothing is lost.

While a sweep runs it keeps one "sweep running" group (job gtplab_sweep_live) that names its owner
(host, boot, pid and the pid's start time); finish() deletes it. A sweep killed with SIGKILL never
gets there, so the next push (a Pusher's first contact, `gtplab push`) and `gtplab monitor up`
delete every running group whose owner is gone (clear_stale_live_groups).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import socket
import sys
import time
import urllib.error
import urllib.parse
from datetime import datetime
from typing import Any, Callable

from prometheus_client import CollectorRegistry, Gauge, delete_from_gateway, push_to_gateway

from gtplab.bounded import http_get
from gtplab.goalcode import dense_code
from gtplab.results import store as results
from gtplab.errors import UserError
from gtplab.kernel.sched import live_stat

JOB = "gtplab_sweep"
LIVE_JOB = "gtplab_sweep_live"
DEFAULT_GATEWAY = "http://127.0.0.1:19091"
LATENCY_STATS = ("min", "avg", "p50", "p99", "max")


# A running group whose owner cannot be checked from here (another host, another boot) is taken as
# stale once it has not been pushed for this long (a running sweep pushes at every case start).
UNCHECKABLE_STALE_AFTER_S = 24 * 3600


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
        "ip": str(case.get("ip") or "4"),
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


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


def _pid_start(pid: int) -> str | None:
    """The process's start time (clock ticks after boot, /proc/PID/stat field 22); None if it is gone."""
    st = live_stat(pid)
    return str(st.start_ticks) if st else None


def owner_labels(pid: int | None = None) -> dict[str, str]:
    """Who runs a sweep: enough to tell later, from this host, whether it still runs."""
    pid = os.getpid() if pid is None else pid
    return {"host": socket.gethostname(), "boot_id": _boot_id(), "pid": str(pid),
            "pid_start": _pid_start(pid) or ""}


def owner_alive(owner: dict[str, str]) -> bool | None:
    """True/False for an owner on this host and boot; None when it cannot be checked from here."""
    if owner.get("host") != socket.gethostname() or owner.get("boot_id") != _boot_id():
        return None
    try:
        pid = int(owner.get("pid", ""))
    except ValueError:
        return False
    start = _pid_start(pid)
    return start is not None and start == owner.get("pid_start")


# What the gateway's answers may take (gtplab.bounded): its status is a few kB; its metrics are every
# group it holds (a sweep case some 10 kB), so a gateway of thousands of cases stays under the bound
GATEWAY_STATUS_MAX_BYTES = 1 << 20
GATEWAY_METRICS_MAX_BYTES = 64 << 20


def _gateway_json(gateway_url: str, path: str, limit: int, timeout: float) -> Any:
    """The JSON of one of the gateway's API answers, at most `limit` bytes within `timeout` s (OSError
    when it does not answer or answers more or longer, ValueError when it is not JSON)."""
    url = gateway_url.rstrip("/") + path
    return json.loads(http_get(url, limit, timeout, what=f"pushgateway {url}"))


def live_groups(gateway_url: str, timeout: float = 5.0) -> list[dict[str, Any]]:
    """The gateway's "sweep running" groups: [{"labels": grouping key with job, "owner": labels or
    None, "pushed": push time}] (OSError, ValueError if the gateway does not answer sensibly)."""
    body = _gateway_json(gateway_url, "/api/v1/metrics", GATEWAY_METRICS_MAX_BYTES, timeout)
    out = []
    for g in body.get("data") or []:
        labels = g.get("labels") or {}
        if labels.get("job") != LIVE_JOB:
            continue
        owner = None
        for m in (g.get("gtplab_sweep_owner_info") or {}).get("metrics") or []:
            owner = {k: m["labels"].get(k, "") for k in ("host", "boot_id", "pid", "pid_start")}
        pushed = None
        for m in (g.get("push_time_seconds") or {}).get("metrics") or []:
            pushed = _num(m.get("value"))
        out.append({"labels": labels, "owner": owner, "pushed": pushed})
    return out


def delete_live_group(gateway_url: str, key: dict[str, str], timeout: float = 5.0) -> bool:
    """Delete one "sweep running" group and wait (up to `timeout`) until the gateway no longer lists
    it: the gateway answers a DELETE with 202 and applies it later, so a reader right after the
    call could still see the group. True once it is gone (OSError if the gateway does not answer)."""
    delete_from_gateway(gateway_url, job=LIVE_JOB, grouping_key=key, timeout=timeout)
    deadline = time.monotonic() + timeout
    while True:
        labels = [{k: v for k, v in g["labels"].items() if k != "job"}
                  for g in live_groups(gateway_url, timeout)]
        if key not in labels:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)


def clear_stale_live_groups(gateway_url: str, timeout: float = 5.0, now: float | None = None
                            ) -> list[dict[str, str]]:
    """Delete the "sweep running" groups of sweeps that are gone: owner on this host and boot no
    longer running; else (unknown owner, another host) not pushed for UNCHECKABLE_STALE_AFTER_S.
    Returns the grouping keys deleted. Raises OSError/ValueError if the gateway does not answer."""
    now = time.time() if now is None else now
    deleted = []
    for g in live_groups(gateway_url, timeout):
        alive = owner_alive(g["owner"]) if g["owner"] else None
        if alive is None:
            alive = g["pushed"] is None or now - g["pushed"] < UNCHECKABLE_STALE_AFTER_S
        if alive:
            continue
        key = {k: v for k, v in g["labels"].items() if k != "job"}
        delete_live_group(gateway_url, key, timeout)
        deleted.append(key)
    return deleted


# finish() waits for the gateway's next persistence write when its interval is at most this long
# (gtplab monitor runs it with 1 s; the gateway's own default is 5 min: not waited for)
MAX_PERSIST_WAIT_S = 10.0


def go_duration(text: str) -> float | None:
    """Seconds of a Go duration as the gateway prints its flags ("1s", "5m0s", "1m30.5s", "500ms")."""
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|us|µs|ns|h|m|s)", text or "")
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return sum(float(n) * units[u] for n, u in parts)


def gateway_start_time(gateway_url: str, timeout: float = 5.0) -> str:
    """When the gateway process started (its /api/v1/status): changes when it was restarted."""
    return str(_gateway_json(gateway_url, "/api/v1/status", GATEWAY_STATUS_MAX_BYTES, timeout)["data"]["start_time"])


class Pusher:
    """What the sweep uses: push(case) after each case. Never raises because of the gateway.

    If a push fails, it warns once (on `warn`), holds the case, and goes on; at the next successful
    push it first pushes every held case, in order. `pending` lists what is still held.

    A gateway killed (SIGKILL, OOM, power) loses what it took since it last wrote its persistence
    file. So each push first asks the gateway when it started; if that changed since the last push,
    the gateway was restarted, and every case this run pushed before is pushed again (a push
    replaces its own group: pushing twice is harmless).
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
        self.cleared = False     # stale "sweep running" groups looked for (once the gateway answers)
        self.owner = owner_labels()
        self.sent: list[dict[str, Any]] = []     # pushed (to the gateway that runs since gateway_start)
        self.gateway_start: str | None = None
        self.restarts_seen = 0

    def _clear_stale(self) -> None:
        """Once, at the first contact with the gateway: remove groups of sweeps killed earlier."""
        if self.cleared:
            return
        try:
            clear_stale_live_groups(self.gateway_url, self.timeout)
            self.cleared = True
        except Exception:       # the gateway is down or odd: try again at the next push
            pass

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
        self._clear_stale()
        self.pending.append(case)
        try:
            start: str | None = gateway_start_time(self.gateway_url, self.timeout)
        except urllib.error.HTTPError:
            start = None        # it answers, without the status API: no restart detection
        except Exception as e:
            self._warn_down(e)
            return False
        if start is not None and self.gateway_start is not None and start != self.gateway_start:
            # restarted since our last push: what it had from us may be gone with it
            self.restarts_seen += 1
            self.pending[:0] = self.sent
            self.sent = []
        self.gateway_start = start if start is not None else self.gateway_start
        while self.pending:
            try:
                _push(self.gateway_url, self.run, self.pending[0], self.timeout)
            except Exception as e:      # OSError, and anything else: never the sweep's problem
                self._warn_down(e)
                return False
            self.sent.append(self.pending.pop(0))
            self.pushed += 1
        return True

    def case_started(self, case: dict[str, Any], index: int | None = None, total: int | None = None) -> bool:
        """Optional: tell the live dashboard which case runs now (one group per run, replaced each time)."""
        if not self.gateway_url:
            return False
        self._clear_stale()
        reg = CollectorRegistry()
        key = grouping_key(self.run, case)
        labels = {k: key[k] for k in ("action", "case_id", "frame_size", "direction", "flows", "checksum", "ip")}
        g = Gauge("gtplab_sweep_running_case_info", "Constant 1; the case running now as labels",
                  list(labels), registry=reg)
        g.labels(**labels).set(1)
        Gauge("gtplab_sweep_owner_info", "Constant 1; the process running the sweep, as labels",
              list(self.owner), registry=reg).labels(**self.owner).set(1)
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

    def _until_persisted(self) -> None:
        """After the run's last push: wait until the gateway has written its persistence file once
        more (its persistence.interval, when that is at most MAX_PERSIST_WAIT_S), then check it
        still runs the same process. If it was restarted meanwhile, push the run again and wait
        again; if it does not answer, hold the run's cases (finish() then says `gtplab push`)."""
        if not self.sent:
            return
        try:
            flags = _gateway_json(self.gateway_url, "/api/v1/status", GATEWAY_STATUS_MAX_BYTES,
                                  self.timeout)["data"]["flags"]
        except (urllib.error.HTTPError, ValueError, KeyError, TypeError):
            return      # it answers, without the status API: nothing to wait for
        except Exception:
            # down since the last push (killed right after it): what it persisted is unknown
            self.pending[:0] = self.sent
            self.sent = []
            return
        interval = go_duration(flags.get("persistence.interval", ""))
        if not flags.get("persistence.file") or interval is None or interval > MAX_PERSIST_WAIT_S:
            return
        for _ in range(3):
            time.sleep(interval + 0.5)
            try:
                start = gateway_start_time(self.gateway_url, self.timeout)
            except Exception:
                self.pending[:0] = self.sent   # gone: what it persisted is unknown
                self.sent = []
                return
            if start == self.gateway_start:
                return
            self.restarts_seen += 1
            self.gateway_start = start
            self.pending[:0] = self.sent
            self.sent = []
            while self.pending:
                try:
                    _push(self.gateway_url, self.run, self.pending[0], self.timeout)
                except Exception:
                    return
                self.sent.append(self.pending.pop(0))

    def finish(self) -> bool:
        """End of the sweep: one last try for held cases, remove the live group. True if none is held."""
        if self.gateway_url and self.pending:
            last = self.pending.pop()
            self.push(last)  # pushes the held cases first, then last
        if self.gateway_url and not self.pending:
            try:
                delete_live_group(self.gateway_url, {"uuid": str(self.run["uuid"]),
                                                     "backend": str(self.run.get("backend", ""))},
                                  timeout=self.timeout)
            except Exception:
                pass
            self._until_persisted()
        if self.pending and self.results_dir:
            self.warn(f"{len(self.pending)} case(s) not pushed; they are in {self.results_dir}: "
                      f"`gtplab push {self.results_dir}` pushes them")
        return not self.pending


def push_results_dir(results_dir: str, gateway_url: str, timeout: float = 5.0) -> tuple[int, int, str | None]:
    """Push every case of a results directory: (pushed, failed, first error or None). A gateway that
    does not answer at all (refused, timed out: not an HTTP error) is not asked again for the
    remaining cases, which count as failed: a hanging gateway costs one timeout, not one per case."""
    run = results.read_run(results_dir)
    cases = results.read_cases(results_dir, run.get("uuid"))
    pushed = failed = 0
    first_error = None
    for i, case in enumerate(cases):
        try:
            _push(gateway_url, run, case, timeout)
            pushed += 1
        except OSError as e:
            failed += 1
            first_error = first_error or _reason(e)
            if not isinstance(e, urllib.error.HTTPError):
                failed += len(cases) - i - 1
                break
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
    if not (math.isfinite(args.timeout) and 0 < args.timeout <= 3600):
        raise UserError(f"--timeout {args.timeout}: seconds, > 0 and at most 3600")
    try:
        for key in clear_stale_live_groups(args.gateway, args.timeout):
            print(f"gtplab push: removed the stale 'sweep running' group of run {key.get('uuid', '?')} "
                  "(its sweep is gone)", file=sys.stderr)
    except Exception:
        pass  # the pushes below say whether the gateway answers
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
        print(f"gtplab push: {failed} case(s) not pushed to {args.gateway}: {err}; nothing is lost, try again later",
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
