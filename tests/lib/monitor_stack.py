"""Helpers for the monitoring tests (test_monitor.py, test_dashboards.py): a real local stack on random
loopback ports with a unique state dir, sweep results written by hand from the contract
(docs/results.md), and the dashboards' panel queries with their variables substituted.
"""

from __future__ import annotations

import contextlib
import json
import re
import secrets
import socket
import subprocess
import sys
import urllib.parse
import urllib.request
from pathlib import Path
from gtplab.kernel.sched import live_stat
from tests.lib import REPO

DASHBOARD_DIR = REPO / "dashboards"
RATE_INTERVAL = "10s"  # what $__rate_interval becomes in the tests (scrape interval 1s)


def gtplab(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """Run the real CLI (`python -m gtplab ...`) from the repository."""
    return subprocess.run([sys.executable, "-m", "gtplab", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout)


def free_ports(n: int) -> list[int]:
    """n distinct free TCP ports on 127.0.0.1 (the kernel picks them; released just before use)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class Stack:
    """A `gtplab monitor` stack: URLs and the state dir; up() and down() through the CLI."""

    def __init__(self, base: Path, pgwu_port: int | None = None):
        self.id = secrets.token_hex(4)
        self.state_dir = base / f"state-{self.id}"
        self.data_dir = base / f"data-{self.id}"
        self.prom_port, self.gw_port, self.node_port, pgwu = free_ports(4)
        self.pgwu_port = pgwu_port or pgwu
        self.prometheus = f"http://127.0.0.1:{self.prom_port}"
        self.gateway = f"http://127.0.0.1:{self.gw_port}"
        self.node = f"http://127.0.0.1:{self.node_port}"

    def up_args(self) -> list[str]:
        return ["monitor", "up", "--state-dir", str(self.state_dir), "--data-dir", str(self.data_dir),
                "--prometheus-port", str(self.prom_port), "--pushgateway-port", str(self.gw_port),
                "--node-exporter-port", str(self.node_port),
                "--pgwu-target", f"127.0.0.1:{self.pgwu_port}", "--scrape-interval", "1s"]

    def up(self) -> subprocess.CompletedProcess:
        cp = gtplab(*self.up_args())
        assert cp.returncode == 0, f"monitor up failed: {cp.stderr}"
        return cp

    def down(self) -> subprocess.CompletedProcess:
        return gtplab("monitor", "down", "--state-dir", str(self.state_dir))

    def pids(self) -> dict[str, int]:
        out = {}
        for name in ("prometheus", "pushgateway", "node-exporter"):
            with contextlib.suppress(FileNotFoundError, ValueError):
                out[name] = int((self.state_dir / name / "pid").read_text())
        return out


@contextlib.contextmanager
def running_stack(base: Path, pgwu_port: int | None = None):
    stack = Stack(base, pgwu_port)
    try:
        stack.up()
        yield stack
    finally:
        stack.down()


def pid_alive(pid: int) -> bool:
    """pid runs (not gone, not a zombie): gtplab.kernel.sched's reading of /proc/PID/stat."""
    return live_stat(pid) is not None


# ---- results written from the contract (docs/results.md), not with gtplab.results.store -----------------

def make_run(backend: str = "local") -> dict:
    return {"uuid": f"test-{secrets.token_hex(6)}", "started": "2026-01-02T03:04:05+00:00",
            "backend": backend, "lab": "unit-test", "host": socket.gethostname()}


def _goal(code: str, loss: float, lower: float) -> dict:
    return {"lower_pps": lower, "upper_pps": lower / 0.98, "conditional_pps": lower * (1 - loss / 2), "regular": True,
            "irregular": None, "limit": "dut", "claimed_pps": lower,
            "goal": {"code": code, "loss_ratio": loss, "exceed_ratio": 0.5, "final_trial_duration": 0.5,
                     "duration_sum": 1.0, "width": 0.02, "initial_trial_duration": 0.5}}


def make_case(i: int, direction: str, frame_size: int, flows: int = 1, checksum: str = "on") -> dict:
    """A synthetic but self-consistent case of a searched sweep: its recorded trial of 1 s at a rate
    that depends on the frame size, NDR and PDR0.5 results, latency at the PDR's shares."""
    offered = 1_000_000.0 + 1000 * i
    rx = offered * (0.9 if frame_size < 128 else 1.0)
    l2 = frame_size * 8
    l1 = (frame_size + 20) * 8
    ndr, pdr = 0.8 * rx, 0.85 * rx
    return {
        "case_id": f"{direction}-{frame_size}-{flows}-{checksum}-{i}", "direction": direction,
        "frame_size": frame_size, "flows": flows, "flow_mode": "single" if flows == 1 else "multi",
        "checksum": checksum, "bearers": flows, "rate_mode": "search", "duration_s": 1.0,
        "goal": "NDR", "limit": "dut", "ndr_pps": ndr,
        "goals": {"NDR": _goal("NDR", 0.0, ndr), "PDR0.5": _goal("PDR0.5", 0.005, pdr)},
        "disturbance": {"trials": 9, "disturbed": i % 2, "disturbed_share": (i % 2) / 9, "policy": "exclude",
                        "host_busy": False, "reasons": {}, "worst": {}},
        "latency_pdr": {"goal": "PDR0.5", "pdr_pps": pdr, "pdr_regular": True, "pdr_limit": "dut", "duration_s": 0.5,
                        "note": None, "points": {k: {"load_pps": (10e3 if k == "0" else pdr * int(k) / 100),
                                                     "latency_us": {"min": 4.0, "avg": 6.0 + int(k) / 10,
                                                                    "p50": 5.0 + int(k) / 10, "p99": 9.0 + int(k),
                                                                    "max": 30.0 + int(k)}}
                                                 for k in ("0", "10", "50", "90")}},
        "offered_pps": offered, "offered_bps_l1": offered * l1, "offered_bps_l2": offered * l2,
        "rx_pps": rx, "rx_bps_l1": rx * l1, "rx_bps_l2": rx * l2,
        "tx_packets": int(offered), "rx_packets": int(rx), "loss_ratio": 1 - rx / offered,
        "latency_us": {"min": 5.0, "avg": 8.0 + i, "p50": 7.5, "p99": 20.0 + i, "max": 40.0 + i},
        "dut": {"rx_packets": int(offered), "fwd_packets": int(rx), "drop_packets": int(offered - rx),
                "drops_by_reason": {"drop_unknown_teid": int(offered - rx)} if rx < offered else {},
                "ns_per_packet": 60.0 + frame_size / 100, "cpu_seconds": 0.8,
                "cpu_ns_per_packet": 800.0},
    }


SWEEP = [("uplink", 64), ("uplink", 1518), ("downlink", 64), ("downlink", 1518)]


def write_results_dir(d: Path, run: dict, cases: list[dict]) -> None:
    """RESULTS_DIR/run.json and RESULTS_DIR/cases.jsonl exactly as docs/results.md says."""
    d.mkdir(parents=True, exist_ok=True)
    (d / "run.json").write_text(json.dumps(run, indent=2) + "\n")
    with open(d / "cases.jsonl", "w") as f:
        for c in cases:
            f.write(json.dumps(c) + "\n")


# ---- Prometheus and Pushgateway HTTP APIs ---------------------------------------------------------

def get_json(url: str, timeout: float = 5.0) -> dict:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.load(r)


def prom_query(prometheus: str, expr: str) -> list[dict]:
    body = get_json(f"{prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
    assert body["status"] == "success", body
    return body["data"]["result"]


def gateway_groups(gateway: str, uuid: str) -> dict[str, dict]:
    """The gateway's groups of job gtplab_sweep for this run: {case_id: {metric name: group entry}}."""
    groups = {}
    for g in get_json(f"{gateway}/api/v1/metrics")["data"]:
        labels = g["labels"]
        if labels.get("job") == "gtplab_sweep" and labels.get("uuid") == uuid:
            groups[labels["case_id"]] = g
    return groups


def gateway_value(group: dict, metric: str, **labels: str) -> float:
    for m in group[metric]["metrics"]:
        if all(m["labels"].get(k) == v for k, v in labels.items()):
            return float(m["value"])
    raise KeyError(f"{metric}{labels} not in group")


# ---- dashboard queries ----------------------------------------------------------------------------

def dashboards() -> dict[str, dict]:
    return {p.name: json.loads(p.read_text()) for p in sorted(DASHBOARD_DIR.glob("*.json"))}


def all_panels(d: dict) -> list[dict]:
    out = []
    for p in d.get("panels", []):
        out.append(p)
        out.extend(p.get("panels", []))  # panels inside collapsed rows
    return out


def panel_queries(dashboards_: dict[str, dict]) -> list[tuple[str, str]]:
    """[(where, expr)] for every target of every panel."""
    out = []
    for name, d in dashboards_.items():
        for p in all_panels(d):
            for t in p.get("targets", []):
                out.append((f"{name} panel {p['id']} {p['title']!r} {t.get('refId')}", t["expr"]))
    return out


def variable_selectors(dashboards_: dict[str, dict]) -> list[tuple[str, str]]:
    """The series selector inside each label_values(SELECTOR, label) variable query."""
    out = []
    for name, d in dashboards_.items():
        for v in d.get("templating", {}).get("list", []):
            q = v.get("query")
            q = q.get("query") if isinstance(q, dict) else q
            m = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", q or "")
            assert m, f"{name} variable {v['name']}: unexpected query {q!r}"
            out.append((f"{name} variable {v['name']}", m.group(1)))
    return out


def substitute(expr: str, uuid: str) -> str:
    """Grafana's variables as Grafana would expand them: the run, All (.*) for the rest."""
    expr = expr.replace("$__rate_interval", RATE_INTERVAL).replace("$uuid", uuid)
    expr = re.sub(r"\$(action|flows|checksum|node|pgwu|goal)\b", ".*", expr)
    assert "$" not in expr, f"unsubstituted variable in {expr!r}"
    return expr
