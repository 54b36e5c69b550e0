"""`gtplab pairs`: trials over every generator port pair of a lab config at once (issue 34, item 5;
gtplab/measure/pairs.py, docs/ansible.md "Several generator port pairs").

    gtplab pairs --lab-config my-lab.yaml --direction uplink --rate 10000 --duration 2 --trials 3 -o t.jsonl

The lab config's `generators:` (or its one pair, `ports:`) are driven together, one TRex client per
server; the DUT is the config's remote PGW-U (dut.metrics_url: its counters; dut.ssh: its bearers,
as for the sweep). Each trial is one JSON line (-o, else stdout): the sums, the balance over them,
each pair's figures. One summary line per trial on stderr. Exit 1 when any trial's conservation is
not exact.

It lives in gtplab/cli/ because it reads lab configs (lab/) and drives the DUT probes (dut/) and the
measurement (measure/).
"""

from __future__ import annotations

import argparse
import json
import math
import sys

from gtplab.dut.metrics import MetricsDut
from gtplab.errors import UserError
from gtplab.lab import config as labconfig
from gtplab.measure.pairs import PairsRunner
from gtplab.measure.sweep import trial_hook
from gtplab.rates import line_rate_pps
from gtplab.results.store import check_writable


def _positive(kind, top):
    def conv(v: str):
        try:
            x = kind(v)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{v!r} is not a number") from None
        if not (x > 0 and math.isfinite(x) and x <= top):
            raise argparse.ArgumentTypeError(f"{v!r} must be above 0 and at most {top:g}")
        return x
    return conv


def add_parser(sub) -> None:
    p = sub.add_parser("pairs", help="trials over several generator port pairs at once (lab config generators:)",
                       description=__doc__.split("\n\n")[0])
    p.add_argument("--lab-config", required=True, metavar="NAME|FILE", help="a lab config with generators: (or ports:)")
    p.add_argument("--direction", choices=("uplink", "downlink"), default="uplink")
    p.add_argument("--rate", type=_positive(float, 1e9), default=10000.0, metavar="PPS",
                   help="per pair (default 10000; at most the line rate of port_speed_bps at --size)")
    p.add_argument("--duration", type=_positive(float, 3600), default=1.0, metavar="S", help="per trial (default 1)")
    p.add_argument("--trials", type=_positive(int, 1000), default=1, metavar="N")
    p.add_argument("--size", type=_positive(int, 3024), default=256, metavar="BYTES", help="frame size (default 256)")
    p.add_argument("--flows", type=_positive(int, 1 << 20), default=8, metavar="N", help="flows and bearers per pair")
    p.add_argument("-o", "--out", metavar="FILE", help="JSON lines, one per trial (default stdout)")
    p.add_argument("--on-trial-start", metavar="CMD",
                   help="a shell command run in every trial once all pairs are sending, to its end (at most "
                        "30 s; the trial's traffic runs on meanwhile), as gtplab sweep's: e.g. one that writes "
                        "background frames on the links (tools/multihost/background.py)")
    p.set_defaults(func=run)


def run(args) -> int:
    cfg = labconfig.load(args.lab_config)
    if cfg.backend != "trex":
        raise UserError(f"lab config {cfg.path}: backend {cfg.backend}: gtplab pairs drives TRex servers (backend: trex)")
    top = line_rate_pps(cfg.port_speed_bps, args.size)
    if args.rate > top:
        raise UserError(f"--rate {args.rate:g}: above the line rate at {args.size} B ({top:.0f} pps at "
                        f"port_speed_bps {cfg.port_speed_bps:.0f})")
    if args.out:
        check_writable(args.out, "--out")
    dut = MetricsDut(cfg)
    out = open(args.out, "w") if args.out else sys.stdout
    bad = 0
    try:
        with PairsRunner(cfg.generators, dut.counters, dut.install_bearers) as r:
            if args.on_trial_start:
                r.on_start = trial_hook(args.on_trial_start)
            prep = r.prepare(args.direction, {"size": args.size, "flows": args.flows, "bearers": args.flows})
            for i in range(args.trials):
                t = r.trial(prep, args.rate, args.duration)
                out.write(json.dumps(t) + "\n")
                out.flush()
                c = t["conservation"]
                bad += not c["ok"]
                print(f"gtplab pairs: trial {i + 1}: {len(t['pairs'])} pairs, tx {t['tx_packets']} rx "
                      f"{t['rx_packets']} ("
                      + ", ".join(f"pair {p['pair']} {p['tx_packets']}/{p['rx_packets']}" for p in t["pairs"])
                      + f"), start skew {t['start_skew_s'] * 1e3:.1f} ms, conservation "
                      + ("exact" if c["ok"] else "NOT exact: " + "; ".join(c["errors"])), file=sys.stderr)
    finally:
        dut.close()
        if args.out:
            out.close()
    return 1 if bad else 0
