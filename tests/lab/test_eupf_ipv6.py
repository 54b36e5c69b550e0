"""IPv6 UEs through eUPF a8d774a (issue 32), as `gtplab sweep --lab-config embedded-eupf --ip 6,4v6`
runs them: eUPF accepts the IPv4v6 sessions (the UE's /64 in the UE IP Address beside its IPv4
address) and forwards their IPv4 packets, and passes every IPv6 packet to the kernel, uplink and
downlink (its XDP verdict XDP_PASS, counted by the lab as "passed": conservation balances, nothing
forwarded). Its departure, stated in docs/ipv6.md: its downlink PDR map of IPv6 UEs is keyed by the
whole 128-bit address, so the /64 an SMF gives matches only the prefix's address ::0. A UPF that
stops departing fails this test, as surely as one that departs further. Skipped, with the reason,
without eUPF's runtime."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.lib import REPO
from tests.lib import eupf as E
from tests.lib.lab import leftovers

pytestmark = pytest.mark.lab

GTPLAB = str(REPO / ".venv/bin/gtplab")


def test_eupf_passes_ipv6_ue_traffic_to_the_kernel_both_ways_and_forwards_ipv4(tmp_path):
    E.lab_config()                      # skips, with the reason, without eUPF's runtime
    out = tmp_path / "run"
    p = subprocess.run([GTPLAB, "sweep", "--lab-config", "embedded-eupf", "--ip", "6,4v6", "--sizes", "256",
                        "--directions", "uplink,downlink", "--flows", "64", "--rate-mode", "fixed", "--rate", "2000",
                        "--duration", "1", "--no-scale", "--no-latency", "--out", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    run = json.loads((out / "run.json").read_text())
    cases = {(c["direction"], c["ip"]): c for c in map(json.loads, (out / "cases.jsonl").read_text().splitlines())}
    assert sorted(cases) == [("downlink", "4v6"), ("downlink", "6"), ("uplink", "4v6"), ("uplink", "6")]
    for (direction, ip), c in cases.items():
        cons = c["conservation"]
        assert cons["ok"], (c["case_id"], cons)
        tx = cons["gen_tx"]
        assert cons["passed"] + cons["fwd"] == cons["dut_rx"] and cons["drops"] == 0, (c["case_id"], cons)
        if ip == "6":
            assert cons["passed"] == tx and cons["fwd"] == 0, (c["case_id"], cons)
        else:       # two streams at the same rate: the IPv6 half passed, the IPv4 half forwarded
            assert cons["fwd"] > 0 and abs(cons["passed"] - cons["fwd"]) <= 1, (c["case_id"], cons)
    assert leftovers(run["lab_name"]) == []
