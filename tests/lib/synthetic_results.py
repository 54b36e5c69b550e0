"""Sweep results directories written by hand, as docs/results.md describes them, for the report's and
the runs' tests (tests/measure/test_report.py, tests/measure/test_robust_runs.py): a synthetic sweep
with a known cost model (CPU ns/packet = intercept + slope * frame size per direction), so the
report's fits can be checked against the numbers that made them.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from gtplab.results import store as results

SIZES = (64, 128, 256, 512, 1024, 1518)
# per direction: (CPU ns/packet = a + b * size, XDP program ns/packet = c + d * size)
COST = {"uplink": (310.0, 0.052, 71.0, 0.011), "downlink": (280.0, 0.047, 64.0, 0.009)}
# checksum on adds this many XDP ns per byte (downlink encap computes the outer UDP checksum)
CSUM_NS_PER_BYTE = 0.02
OFFERED_PPS = 3_000_000.0


def make_case(direction: str, size: int, *, checksum: str = "on", flow_mode: str = "multi",
              flows: int = 1000, scale: float = 1.0, latency: bool = True, dut: bool = True) -> dict:
    """One case as `gtplab sweep` writes it: the DUT saturates at 1e9 / (CPU ns per packet)."""
    a, b, c, d = COST[direction]
    cpu_ns = (a + b * size) * scale
    xdp_ns = (c + d * size + (CSUM_NS_PER_BYTE * size if checksum == "on" else 0.0)) * scale
    duration = 10.0
    rx_pps = min(OFFERED_PPS, 1e9 / cpu_ns)
    tx = int(OFFERED_PPS * duration)
    rx = int(rx_pps * duration)
    case = {
        "case_id": f"{direction}-{size}-{flows}-{checksum}",
        "direction": direction, "frame_size": size, "flows": flows, "flow_mode": flow_mode,
        "checksum": checksum, "bearers": 1000, "rate_mode": "fixed", "duration_s": duration,
        "offered_pps": OFFERED_PPS, "offered_bps_l1": OFFERED_PPS * (size + 20) * 8,
        "offered_bps_l2": OFFERED_PPS * size * 8,
        "rx_pps": rx_pps, "rx_bps_l1": rx_pps * (size + 20) * 8, "rx_bps_l2": rx_pps * size * 8,
        "tx_packets": tx, "rx_packets": rx, "loss_ratio": (tx - rx) / tx,
        "latency_us": ({"min": 4.1, "avg": 9.8 + size / 500, "p50": 9.1 + size / 500, "p99": 31.0 + size / 100,
                        "max": 120.0} if latency else
                       {"min": None, "avg": None, "p50": None, "p99": None, "max": None}),
        "dut": ({"rx_packets": tx, "fwd_packets": rx, "drop_packets": tx - rx,
                 "drops_by_reason": {"drop_unknown_teid": 0, "drop_queue_full": tx - rx},
                 "ns_per_packet": xdp_ns, "cpu_seconds": cpu_ns * tx * 1e-9, "cpu_ns_per_packet": cpu_ns}
                if dut else
                {"rx_packets": None, "fwd_packets": None, "drop_packets": None, "drops_by_reason": {},
                 "ns_per_packet": None, "cpu_seconds": None, "cpu_ns_per_packet": None}),
        "end_timestamp": 1767323045.0,
    }
    return case


def sweep_cases(**kw) -> list[dict]:
    """Both directions at every size with checksum on; 512 B also with checksum off and one flow."""
    cases = [make_case(d, s, **kw) for d in ("uplink", "downlink") for s in SIZES]
    cases += [make_case(d, 512, checksum="off", **kw) for d in ("uplink", "downlink")]
    cases += [make_case(d, 512, flows=1, flow_mode="single", **kw) for d in ("uplink", "downlink")]
    return cases


def write_results(d: Path, cases: list[dict], uuid: str = "3f2c9a1e-0000-4000-8000-000000000001") -> Path:
    """run.json, cases.jsonl and cases.csv exactly as docs/results.md describes them."""
    d.mkdir(parents=True, exist_ok=True)
    (d / "run.json").write_text(json.dumps({"uuid": uuid, "started": "2026-01-02T03:04:05+00:00",
                                            "backend": "local", "lab": "veth-lab", "host": "lab1"}))
    (d / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases))
    rows = [results.flatten(c) for c in cases]
    cols = list(dict.fromkeys(k for r in rows for k in r))
    with open(d / "cases.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        w.writerows(rows)
    return d
