#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""What MLRsearch's goal attributes cost per case, on simulated DUTs (no lab, a few seconds). Prints
ONE table; docs/mlrsearch.md has the one that chose the defaults.

    .venv/bin/python bench/mlrsearch_sim.py [--seeds 20] [--overhead 0.2] [--budget 12] [--markdown]

Each row is one set of goal attributes for an NDR and a PDR0.5 goal searched together, as the sweep
will (gtplab.measure.mlrsearch.search), between 10 kpps and 1.5 Mpps (the embedded lab's generator
reaches 1.2-2.8 Mpps). Search seconds are the trials' durations plus --overhead per trial (the
embedded lab's time per trial besides its traffic: 0.19 s, docs/mlrsearch.md). Two kinds of DUT:

  hard   drops what is above its capacity (0.1, 0.3, 0.6, 0.9, 1.3 Mpps): the RFC 9971 5.6.1 limit
  noisy  the embedded lab as its sweeps show it: overloaded above C1 (hard limit), and below it host
         stalls at a rate rising linearly from 0 at C0 to 3 per second at C1, each losing 200
         packets (a veth ring's worth); C1 0.7 or 1.2 Mpps, C0 0.1, 0.3 or 0.7 of C1; --seeds runs
         of each

Columns: mean and worst search seconds without a budget, trials per case, and with --budget the
share of goal results left irregular because the budget ran out.

--coarse: rows with a shorter initial trial duration, searched both ways: as the controller does
(a goal with a non-zero exceed ratio runs its final trial duration, and its initial one for probes),
and with the coarse phases it keeps for exceed-ratio-0 goals forced on (trial durations doubling
from the initial one): what those phases would cost such goals.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from gtplab.measure import mlrsearch as mlr  # noqa: E402
from gtplab.measure.mlrsearch import controller  # noqa: E402
from tables import print_table  # noqa: E402

PHASES = controller.phases

MIN_LOAD, MAX_LOAD = 10e3, 1.5e6

# (final trial duration, duration sum, width, initial trial duration, exceed ratio)
ROWS = [
    (1.0, 2.0, 0.01, 1.0, 0.5),
    (1.0, 2.0, 0.02, 1.0, 0.5),
    (1.0, 2.0, 0.02, 0.25, 0.5),
    (1.0, 1.0, 0.02, 1.0, 0.5),
    (0.5, 1.0, 0.01, 0.5, 0.5),
    (0.5, 1.0, 0.02, 0.5, 0.5),
    (0.5, 1.0, 0.02, 0.25, 0.5),
    (0.5, 0.5, 0.02, 0.5, 0.0),
]


def hard(capacity: float):
    return lambda load, duration: mlr.TrialOutput(round(max(0.0, 1.0 - capacity / load), 12))


def stalls(c0: float, c1: float, rng: random.Random, rate_at_c1: float = 3.0, packets: int = 200):
    def measure(load: float, duration: float) -> mlr.TrialOutput:
        loss = max(0.0, 1.0 - c1 / load)
        mu = rate_at_c1 * max(0.0, (load - c0) / (c1 - c0)) * duration
        if mu > 30:
            k = max(0, round(rng.gauss(mu, math.sqrt(mu))))
        else:
            k, p, limit = 0, rng.random(), math.exp(-mu)       # Poisson by multiplication
            while p >= limit:
                k += 1
                p *= rng.random()
        return mlr.TrialOutput(min(1.0, loss + k * packets / (load * duration)))
    return measure


COARSE_ROWS = [
    (1.0, 2.0, 0.02, 0.25, 0.5),
    (2.0, 4.0, 0.02, 0.25, 0.5),
    (8.0, 16.0, 0.02, 0.5, 0.5),
]


def forced_phases(goal):
    """controller.phases() as it is for exceed ratio 0, for any goal."""
    from dataclasses import replace
    targets = PHASES(replace(goal, exceed_ratio=0.0))
    return (goal,) + tuple(replace(t, exceed_ratio=goal.exceed_ratio) for t in targets[1:])


def row(attrs: tuple, seeds: int, overhead: float, budget: float) -> list[str]:
    final, total, width, initial, exceed = attrs
    kw = dict(final_trial_duration=final, duration_sum=total, width=width, initial_trial_duration=initial,
              exceed_ratio=exceed)
    goals = (mlr.ndr(**kw), mlr.pdr(**kw))

    def run(measure, time_budget):
        return mlr.search(measure, goals, min_load=MIN_LOAD, max_load=MAX_LOAD, time_budget=time_budget,
                          trial_overhead=overhead)

    hard_runs = [run(hard(c), math.inf) for c in (0.1e6, 0.3e6, 0.6e6, 0.9e6, 1.3e6)]
    duts = [(f0 * c1, c1, s) for c1 in (0.7e6, 1.2e6) for f0 in (0.1, 0.3, 0.7) for s in range(seeds)]
    noisy = [run(stalls(c0, c1, random.Random(s)), math.inf) for c0, c1, s in duts]
    capped = [run(stalls(c0, c1, random.Random(s)), budget) for c0, c1, s in duts]
    irregular = sum(not g.regular for r in capped for g in r.goals) / (2 * len(capped))
    return [f"{final:g}", f"{total:g}", f"{width:.0%}", f"{initial:g}", f"{exceed:g}",
            f"{statistics.mean(r.search_time for r in hard_runs):.1f}",
            f"{statistics.mean(r.search_time for r in noisy):.1f}", f"{max(r.search_time for r in noisy):.1f}",
            f"{statistics.mean(len(r.trials) for r in noisy):.1f}", f"{irregular:.0%}"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=20, help="runs per noisy DUT")
    ap.add_argument("--overhead", type=float, default=mlr.DEFAULT_TRIAL_OVERHEAD, help="seconds per trial")
    ap.add_argument("--budget", type=float, default=mlr.DEFAULT_TIME_BUDGET, help="search seconds per case")
    ap.add_argument("--coarse", action="store_true", help="instead: what coarse phases cost goals with a "
                    "non-zero exceed ratio")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    head = ("final s", "sum s", "width", "initial s", "exceed", "hard: mean s", "noisy: mean s", "worst s",
            "trials", f"irregular at {args.budget:g} s")
    if not args.coarse:
        print_table(head, [row(a, args.seeds, args.overhead, args.budget) for a in ROWS], markdown=args.markdown)
        return 0
    rows = []
    for a in COARSE_ROWS:
        rows.append(["as is"] + row(a, args.seeds, args.overhead, args.budget))
        controller.phases = forced_phases
        try:
            rows.append(["phases"] + row(a, args.seeds, args.overhead, args.budget))
        finally:
            controller.phases = PHASES
    print_table(("search",) + head, rows, markdown=args.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
