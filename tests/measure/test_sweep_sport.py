"""A downlink sweep on the embedded lab with the PGW-U's default outer UDP source port entropy
(TS 29.281 4.4.2.0): packet conservation still holds, and the G-PDUs that reach the generator's
access port (the case's pcap, read with Scapy) come from the port of their inner flow
(tests/lib/oracle.py sport_of_flow), as many ports as flows, all to 2152. The engine's receive side
counts by its trailer and never looks at the outer source port: nothing in the lab filters on 2152."""

from __future__ import annotations

import struct
import subprocess
import sys

import pytest
from scapy.all import raw, rdpcap

from gtplab.results import store as results
from tests.lib import oracle as O
from tests.lib import REPO

pytestmark = pytest.mark.lab

FLOWS = 256


def test_downlink_sweep_conserves_and_spreads_source_ports(tmp_path):
    out = tmp_path / "run"
    cp = subprocess.run([sys.executable, "-m", "gtplab", "sweep", "--no-scale", "--sizes", "128",
                         "--directions", "downlink", "--flows", str(FLOWS), "--rate-mode", "fixed",
                         "--rate", "20kpps", "--duration", "0.5", "--no-latency", "--pcap-limit", str(2 * FLOWS),
                         "--out", str(out)], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert cp.returncode == 0, cp.stderr[-3000:]
    [case] = results.read_cases(out)
    assert case["direction"] == "downlink" and case["conservation_ok"], case["conservation"]
    for t in case["trials"]:
        c = t["conservation"]
        assert c["ok"] and not c["errors"] and c["gen_tx"] > 0 and c["fwd"] > 0, c
    frames = [raw(p) for p in rdpcap(str(out / case["pcap"]))]
    assert len(frames) == 2 * FLOWS, len(frames)
    flows, ports = set(), set()
    for f in frames:
        assert struct.unpack("!H", f[12:14])[0] == 0x0800 and f[14 + 9] == 17, f.hex()
        sport, dport = struct.unpack("!HH", f[34:38])
        inner = f[14 + 36:]
        assert dport == 2152 and sport == O.sport_of_flow(inner), (sport, dport, f.hex())
        flows.add(inner[12:24])
        ports.add(sport)
    # the engine cycles through the bearers: every flow is in the capture, each on its own port
    # (a uniform 14-bit hash puts 256 flows on ~254 ports; the multiply-and-xor one gave 17 here)
    assert len(flows) == FLOWS and len(ports) >= FLOWS - 8, (len(flows), len(ports))
