#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""MLRsearch (gtplab.measure.mlrsearch) on this machine's embedded lab: what the default goals cost
per case and what they find. Prints ONE table (docs/mlrsearch.md has the one measured here).

    sudo flock /work/bench.lock .venv/bin/python bench/mlrsearch_lab.py [--sizes 64,512,1424]
        [--directions uplink,downlink] [--final 1] [--sum 2] [--width 0.01] [--initial 0.25]
        [--budget 12] [--no-scale] [--markdown]

Without --sizes: the default sweep's 20 cases (docs/sweep.md). Each case: the bearers and streams
the sweep uses (gtplab.measure.runner.Runner), one 0.25 s trial as fast as the generator goes to find
max load (its offered rate), then one search for NDR and PDR0.5 with the goal attributes given,
min load 10 kpps. The measurer: Runner.trial at the load and duration asked; loss from the
generator's packet counts, a generator that fell 3 % short of the load counted as loss
(TrialOutput.from_counts). Per case: trials, seconds of traffic, wall seconds (all of it: trials,
their setup and counter reads), and per goal the relevant lower bound, conditional throughput and
whether the result is regular (or why not). The first line gives the load average before and after:
the search cannot tell a busy host from a noisy DUT until trials are marked disturbed (issue 26
item 2). This is the sweep's search (gtplab.measure.search) outside the sweep, with the goal
attributes given on the command line; `gtplab sweep` itself prints the same per case.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from tables import num as f, print_table  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", help="frame sizes (default: the default sweep's)")
    ap.add_argument("--directions", default="uplink,downlink")
    ap.add_argument("--no-scale", action="store_true", help="leave out the 1,000,000-bearer cases")
    ap.add_argument("--final", type=float, default=None, help="goal final trial duration, s")
    ap.add_argument("--sum", type=float, default=None, help="goal duration sum, s")
    ap.add_argument("--width", type=float, default=None, help="goal width (relative)")
    ap.add_argument("--initial", type=float, default=None, help="goal initial trial duration, s")
    ap.add_argument("--exceed", type=float, default=None, help="goal exceed ratio")
    ap.add_argument("--budget", type=float, default=None, help="search time budget per case, s "
                    "(default: mlrsearch.default_time_budget)")
    ap.add_argument("--min-load", type=float, default=10e3)
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--trace", action="store_true", help="print every trial on stderr")
    args = ap.parse_args()

    from gtplab.lab import config as labconfig
    from gtplab.measure import mlrsearch as mlr
    from gtplab.measure.runner import Runner
    from gtplab.measure.plan import load_spec, plan, validate
    from gtplab.traffic.backend import Backend

    short = {None: "yes", mlr.IRREGULAR_BUDGET: "no: budget", mlr.IRREGULAR_MAX_LOAD: "no: max load lower",
             mlr.IRREGULAR_MIN_LOAD: "no: min load upper"}
    attrs = {k: v for k, v in (("final_trial_duration", args.final), ("duration_sum", args.sum),
                                ("width", args.width), ("initial_trial_duration", args.initial),
                                ("exceed_ratio", args.exceed)) if v is not None}
    goals = (mlr.ndr(**attrs), mlr.pdr(**attrs))
    cfg = labconfig.load(None)
    spec = load_spec(None)
    if args.sizes:
        spec["frame_sizes"] = [int(s) for s in args.sizes.split(",")]
    spec["directions"] = args.directions.split(",")
    if args.no_scale:
        spec["scale"] = None
    spec["pcap_limit"] = 0
    spec["latency"] = False
    cases, _ = plan(validate(spec))
    rows = []
    load0 = os.getloadavg()[0]
    t_all = time.monotonic()
    be = Backend.open("local", mtu=int(cfg.lab.get("mtu", 3200)), cpus=cfg.cpu_layout(), dut=cfg.dut_mode)
    try:
        with Runner(be, cfg) as runner:
            for p in cases:
                prep = runner.prepare(p)
                with runner.dut.bpf_stats():
                    t0 = time.monotonic()
                    top = runner.trial(prep, None, 0.25)["offered_pps"]

                    def trace(t: mlr.Trial) -> None:
                        print(f"  {t.load / 1e6:.4f} Mpps {t.duration:g} s: loss {t.loss_ratio:.5%}",
                              file=sys.stderr, flush=True)

                    def measure(load: float, duration: float) -> mlr.TrialOutput:
                        t = runner.trial(prep, load, duration)
                        return mlr.TrialOutput.from_counts(t["tx_packets"], t["rx_packets"],
                                                           intended=load * duration,
                                                           offered_load=t["offered_pps"])

                    res = mlr.search(measure, goals, min_load=min(args.min_load, top), max_load=top,
                                     time_budget=args.budget, on_trial=trace if args.trace else None)
                    wall = time.monotonic() - t0
                traffic = sum(t.duration for t in res.trials)
                row = [p.direction, str(p.actual_size), str(p.flows), f(top), str(len(res.trials) + 1),
                       f(traffic + 0.25, 1, "{:.1f}"), f(wall, 1, "{:.1f}"), res.stop]
                for r in res.goals:
                    row += [f(r.lower), f(r.conditional_throughput), short.get(r.irregular, r.irregular)]
                rows.append(row)
                print(" ".join(map(str, row)), file=sys.stderr, flush=True)
    finally:
        be.close()
    total = time.monotonic() - t_all
    head = ["direction", "frame B", "bearers", "max load Mpps", "trials", "traffic s", "wall s", "stop"]
    load1 = os.getloadavg()[0]
    for g in goals:
        head += [f"{g.code} lower Mpps", f"{g.code} cond. Mpps", f"{g.code} regular"]
    print(f"goals: {'; '.join(str(g) for g in goals)}; min load {args.min_load:g} pps; "
          f"{len(cases)} cases in {total:.0f} s (lab up and down included); load average {load0:.2f} "
          f"before, {load1:.2f} after; regular: {sum(r[10] == 'yes' for r in rows)} NDR, "
          f"{sum(r[13] == 'yes' for r in rows)} PDR0.5 of {len(rows)}")
    print_table(head, rows, markdown=args.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
