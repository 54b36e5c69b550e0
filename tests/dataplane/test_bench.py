"""bench/pgwu_bench.py, run small: it must still measure every cell on the path it claims (the
data plane's verdict counters, checked by the script), print a number in every cell, and leave
nothing behind. The numbers themselves are not asserted: speed targets belong to the benchmark's
table (docs/benchmarks.md), not to tests."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from tests.lib import REPO

pytestmark = pytest.mark.lab



def netns_names() -> set[str]:
    return set(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else set()


def test_pgwu_bench_small_run(tmp_path):
    md = tmp_path / "bench.md"
    cp = subprocess.run([sys.executable, str(REPO / "bench" / "pgwu_bench.py"), "--repeat", "500", "--rounds", "2",
                         "--size", "128", "--tables", "1000,2000", "--markdown", str(md)],
                        capture_output=True, text=True, timeout=300)
    assert cp.returncode == 0, cp.stdout[-3000:] + cp.stderr[-3000:]
    out = md.read_text()
    # per direction and IP version: 1 bearer, then 2 tables x (same, sequential, random): 7 data
    # plane cells; the checksum-on cell, the source-port-2152 cell, the inner-checksum-check-off cell
    # and the uplink-without-route-cache cell: every iteration of each of their 2 rounds path-checked
    m = re.search(r"Path check: ([\d,]+) iterations .*; (\d+) cells failed", out)
    assert m, out
    assert int(m.group(1).replace(",", "")) == (4 * 7 + 4) * 2 * 500 and m.group(2) == "0", out
    # IPv6 against IPv4 (issue 32 item 3): both directions, 1 bearer and the biggest table's 3 orders
    v6 = [ln for ln in out.splitlines() if re.match(r"\| (uplink|downlink) \| [\d,]+ \| (same bearer|"
                                                    r"sequential|random order) \|", ln)]
    assert len(v6) == 2 * 4, out
    for ln in v6:
        cols = [c.strip() for c in ln.strip("|").split("|")]
        assert re.fullmatch(r"\*\*-?\d+\.\d\d\*\* \(-?\d+\.\d\d--?\d+\.\d\d\)", cols[5]), ln
    assert re.search(r"IPv6 / IPv4, uplink decap, 2,000 bearers random: \d+\.\d\d", out), out
    assert re.search(r"\| uplink decap, IPv4, no route cache .*, 1 bearer \| \d+\.\d \|", out), out
    assert re.search(r"\| uplink decap, inner IPv4 checksum check off, 1 bearer \| \d+\.\d \|", out), out
    assert re.search(r"\| downlink encap, csum off, outer source port 2152 \(sport entropy off\), 1 bearer "
                     r"\| \d+\.\d \|", out), out
    assert re.search(r"sport entropy on / off, downlink, 1 bearer: \d+\.\d\d", out), out
    assert "FAIL" not in out
    rows = [ln for ln in out.splitlines() if re.match(r"\| (uplink decap|downlink encap, csum off) \| [\d,]+ \|", ln)]
    assert len(rows) == 2 * 3, out
    for ln in rows:
        cols = [c.strip() for c in ln.strip("|").split("|")]
        if cols[1] == "1":
            float(cols[2].split()[0])
            continue
        for c in (cols[2], cols[4], cols[6]):    # ns (spread) in each order
            assert re.fullmatch(r"-?\d+\.\d \(-?\d+--?\d+\)", c), ln
        for c in (cols[3], cols[5], cols[7]):    # ratio (spread)
            assert re.fullmatch(r"\*\*-?\d+\.\d\d\*\* \(-?\d+\.\d\d--?\d+\.\d\d\)", c), ln
    assert "bulk load of 2,000 bearers" in out
    assert re.search(r"Miss cost \(probe random - probe same\): -?\d+\.\d ns", out), out
    # nothing left behind: the run's own netns and pins (it names them) are gone (other runs may
    # come and go meanwhile, so only its own are checked)
    m = re.search(r"pgwu_bench: netns (\S+), pins (.*)", cp.stderr)
    assert m, cp.stderr[-2000:]
    assert m.group(1) not in netns_names()
    assert not any(os.path.exists(p) for p in m.group(2).split())


def test_qos_bench_small_run(tmp_path):
    """bench/qos_bench.py, run small: every cell measured on its claimed path (policed packets
    forwarded, gate-closed and over-MBR ones dropped with their reasons), a number in every cell,
    nothing left behind."""
    md = tmp_path / "qos.md"
    cp = subprocess.run([sys.executable, str(REPO / "bench" / "qos_bench.py"), "--repeat", "500", "--rounds", "2",
                         "--markdown", str(md)], capture_output=True, text=True, timeout=300)
    assert cp.returncode == 0, cp.stdout[-3000:] + cp.stderr[-3000:]
    out = md.read_text()
    m = re.search(r"Path check: ([\d,]+) iterations .*; (\d+) cells failed", out)
    assert m and int(m.group(1).replace(",", "")) == 8 * 2 * 2 * 500 and m.group(2) == "0", out
    assert "FAIL" not in out
    for v in ("lookup", "mbr", "mbr\\+quota", "volth", "mbr\\+volth", "gate drop", "mbr drop"):
        assert re.search(rf"\| {v} \| \d+\.\d \(-?\d+--?\d+\) \| \*\*[+-]\d+\.\d\*\* .* \| \d+\.\d .* \| \*\*[+-]\d+\.\d\*\*",
                         out), (v, out)
    m = re.search(r"pgwu_bench: netns (\S+), pins (.*)", cp.stderr)
    assert m, cp.stderr[-2000:]
    assert m.group(1) not in netns_names()
    assert not any(os.path.exists(p) for p in m.group(2).split())
