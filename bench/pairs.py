#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Two generator hosts into one PGW-U (issue 34, item 5): the figures of docs/ansible.md, "Several
generator port pairs". The lab is tests/lib/pairs_lab.py's (two TRex servers, one port pair each,
a namespace each, one PGW-U attached to both pairs in generic XDP); the trials are
gtplab.measure.pairs.PairsRunner's. One JSON line per trial: the sums, the balance, each pair's
tx/rx/offered pps, the start and stop skew of the two servers.

    sudo .venv/bin/python bench/pairs.py [--rates 5000,20000,50000] [--trials 3] [--duration 2]

--sweep OUT runs `gtplab sweep` over both pairs instead (gtplab.measure.pairs.PairsSweepRunner: the
search's loads are both pairs' aggregate), its results into OUT, the sweep's own arguments after
`--`; the bearers of each direction are loaded before (the lab config has no dut.ssh):

    sudo .venv/bin/python bench/pairs.py --sweep /tmp/r -- --sizes 128 --directions uplink,downlink \\
        --flows 8 --bearers 8 --no-latency --pcap-limit 0 --no-scale --search max_load=400000
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from gtplab.lab import trex_server  # noqa: E402
from gtplab.measure.pairs import PairsRunner  # noqa: E402
from tests.lib.pairs_lab import PairsLab  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rates", default="5000,20000,50000", help="pps per pair, comma-separated")
    ap.add_argument("--trials", type=int, default=3, help="trials per rate and direction")
    ap.add_argument("--duration", type=float, default=2.0, help="seconds per trial")
    ap.add_argument("--sweep", metavar="OUT", help="run gtplab sweep over both pairs into OUT (its arguments after --)")
    ap.add_argument("sweep_args", nargs="*", help="gtplab sweep's arguments (--sweep)")
    args = ap.parse_args()
    t0 = time.monotonic()
    lab = PairsLab(trex_server.resolve()).up()
    print(f"# lab up in {time.monotonic() - t0:.1f} s", flush=True)
    bad = 0
    try:
        if args.sweep:
            return sweep(lab, args.sweep, args.sweep_args)
        with PairsRunner(lab.pairs(), lab.counters, lab.install_bearers) as r:
            for d in ("uplink", "downlink"):
                prep = r.prepare(d, {"size": 256, "flows": 8, "bearers": 8})
                for rate in map(float, args.rates.split(",")):
                    for i in range(args.trials):
                        t = r.trial(prep, rate, args.duration)
                        c = t["conservation"]
                        bad += not c["ok"]
                        print(json.dumps({
                            "direction": d, "rate_per_pair": rate, "trial": i, "exact": c["ok"],
                            "tx": t["tx_packets"], "rx": t["rx_packets"], "dut_rx": c["dut_rx"], "fwd": c["fwd"],
                            "drops": t["dut"]["drops_by_reason"], "offered_pps": round(t["offered_pps"]),
                            "pairs": [{"tx": p["tx_packets"], "rx": p["rx_packets"],
                                       "offered_pps": round(p["offered_pps"] or 0)} for p in t["pairs"]],
                            "start_skew_ms": round(t["start_skew_s"] * 1e3, 3),
                            "stop_skew_ms": round(t["stop_skew_s"] * 1e3, 3), "errors": c["errors"]}), flush=True)
    finally:
        left = lab.down()
        if left:
            print(f"# left behind: {left}", file=sys.stderr)
    return 1 if bad else 0


def sweep(lab: PairsLab, out: str, argv: list[str]) -> int:
    """gtplab sweep over both pairs (module doc); its bearers (8 flows = 8 bearers a pair, outer UDP
    checksum on, as the sweep's defaults) loaded first: the same lines serve both directions."""
    with PairsRunner(lab.pairs(), lab.counters, lab.install_bearers) as r:
        r.prepare("uplink", {"size": 128, "flows": 8, "bearers": 8}, csum="on")
    cfg = lab.lab_config(Path(out).with_suffix(".lab.yaml"))
    with lab.metrics():
        cp = lab.gtplab("sweep", "--lab-config", str(cfg), "--out", out, *argv, timeout=3600)
    sys.stderr.write(cp.stderr)
    sys.stdout.write(cp.stdout)
    return cp.returncode


if __name__ == "__main__":
    sys.exit(main())
