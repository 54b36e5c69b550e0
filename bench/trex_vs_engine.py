#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""TRex (DPDK af_packet) against the embedded engine as the generator of the same lab. Prints ONE table.

    sudo .venv/bin/python bench/trex_vs_engine.py [--runs 3] [--sizes 64,512,1424] [--markdown]

Same machine, same profile and tunables (gtplab.measure.plan.CaseParams: 1024 flows, outer UDP checksum on,
no latency stream), same DUT (the PGW-U) and CPU layout (generator CPUs / DUT CPUs of the default
layout): only the generator differs, `Lab.up(generator="engine")` or `Lab.up(generator="trex")`.
Runs alternate engine, TRex, engine, TRex ..., each on a lab of its own, so both see the same machine.

Per generator, direction and frame size (uplink 64 B is the profile's minimum, 82 B):
- max: one trial flat out ("100%"), `--duration` seconds: the rate sent (packets over the time it
  took: the engine's counters, TRex's counter read while it runs), and the generator's CPU time
  while it sent, from /proc: every thread of the generator's processes (the engine runs in this
  process; TRex: its server and gtplab's TRex client worker) plus the generator ports' receive NAPI
  kthreads. "per core" = packets sent / generator CPU seconds. TRex busy-polls its core (low_end),
  so its CPU time is its wall time whatever it sends.
- NDR: the search `gtplab sweep` runs (gtplab.measure.search: MLRsearch, the NDR goal with its
  default attributes, max load the flat-out trial's rate, at most --max-trials); "gen" when the
  generator set the result (no NDR claimed). (Until issue 26 the sweep's binary search of 1 s
  trials; docs/trex.md's table was measured with that one.)
Medians over the runs, spread min-max. docs/trex.md has the table measured here.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from tables import median as med, num as mpps, print_table, spread  # noqa: E402


def task_cpu_s(pid: int) -> float:
    """CPU seconds of every thread of process pid (/proc/PID/task/*/schedstat; 0 when gone)."""
    from gtplab.kernel.threads import thread_cpu_ns
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0.0
    return sum(thread_cpu_ns(int(t)) for t in tids if t.isdigit()) / 1e9


def generator_cpu(lab, client) -> callable:
    """A function: CPU seconds so far of the lab's generator (see the module's docstring)."""
    from gtplab.kernel.threads import napi_threads, thread_cpu_ns
    from gtplab.lab import trex_server
    procs = [os.getpid()]
    if lab.generator == "trex":
        import subprocess
        pids = subprocess.run(["ip", "netns", "pids", lab.gen_ns], capture_output=True, text=True).stdout.split()
        procs = [int(p) for p in pids if trex_server.is_trex(int(p))]
        if client._proc is not None:
            procs.append(client._proc.pid)

    def cpu() -> float:
        napi = [t for p in lab.ports for t in napi_threads(p.ifname)]
        return sum(task_cpu_s(p) for p in procs) + sum(thread_cpu_ns(t) for t in napi) / 1e9
    return cpu


def measure(generator: str, sizes: list[int], duration: float, max_trials: int) -> dict:
    from gtplab.lab import config as labconfig
    from gtplab.lab.topology import Lab
    from gtplab.measure.plan import CaseParams
    from gtplab.measure.runner import Runner
    from gtplab.measure import mlrsearch as mlr
    from gtplab.measure import search
    from gtplab.traffic.backend import Backend
    cfg = labconfig.load("embedded-trex" if generator == "trex" else "embedded")
    lab = Lab.up(generator=generator, trex_runtime=cfg.trex_runtime(), cpus=cfg.cpu_layout())
    out = {}
    try:
        be = Backend.open("trex" if generator == "trex" else "local", lab=lab)
        try:
            with Runner(be, cfg) as r:
                r.generator_cpu = generator_cpu(lab, be.client)
                for d in ("uplink", "downlink"):
                    for size in sizes:
                        prep = r.prepare(CaseParams(direction=d, frame_size=size, latency=False))
                        t = r.trial(prep, None, duration)
                        g = t["generator_cpu"]
                        cs = search.run(lambda load, s: r.trial(prep, load, s), [mlr.ndr()],
                                        min_load=search.DEFAULT_MIN_LOAD,
                                        max_load=search.MaxLoad(t["offered_pps"], "generator", (t,)),
                                        max_trials=max_trials)
                        v = search.verdict(cs)
                        out[(d, prep.params.actual_size)] = {
                            "max_pps": t["offered_pps"], "cores": g["cpu_s"] / g["wall_s"],
                            "per_core_pps": t["tx_packets"] / g["cpu_s"] if g["cpu_s"] else None,
                            "ndr_pps": v.claim,
                            "gen_bound": (v.limit or "").startswith("generator"),
                            "conservation": all(x["conservation"]["ok"] for x in [t] + cs.trials)}
                        print(f"  {generator} {d} {prep.params.actual_size}: {out[(d, prep.params.actual_size)]}",
                              file=sys.stderr)
        finally:
            be.close()
    finally:
        lab.down()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="runs per generator, alternating")
    ap.add_argument("--sizes", default="64,512,1424", help="frame sizes")
    ap.add_argument("--duration", type=float, default=1.0, help="seconds of the flat-out trial")
    ap.add_argument("--max-trials", type=int, default=12, help="most trials of an NDR search")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    got: dict[tuple, list[dict]] = {}
    load0 = f"{os.getloadavg()[0]:.2f}"
    for k in range(args.runs):
        for gen in ("engine", "trex"):
            print(f"run {k + 1}/{args.runs}: {gen}", file=sys.stderr)
            for key, v in measure(gen, sizes, args.duration, args.max_trials).items():
                got.setdefault((gen, *key), []).append(v)

    head = ("direction", "frame B", "engine max Mpps", "spread", "TRex max Mpps", "spread",
            "engine Mpps/core", "spread", "TRex Mpps/core", "spread", "engine/TRex per core",
            "engine NDR Mpps", "gen", "TRex NDR Mpps", "gen", "conservation")
    rows = []
    for d in ("uplink", "downlink"):
        for size in sorted({s for (g, dd, s) in got if dd == d}):
            e, t = got.get(("engine", d, size), []), got.get(("trex", d, size), [])
            epc, tpc = med([x["per_core_pps"] for x in e]), med([x["per_core_pps"] for x in t])
            rows.append((d, str(size), mpps(med([x["max_pps"] for x in e])), spread([x["max_pps"] for x in e]),
                         mpps(med([x["max_pps"] for x in t])), spread([x["max_pps"] for x in t]),
                         mpps(epc), spread([x["per_core_pps"] for x in e]),
                         mpps(tpc), spread([x["per_core_pps"] for x in t]),
                         f"{epc / tpc:.1f}" if epc and tpc else "-",
                         mpps(med([x["ndr_pps"] for x in e])), f"{sum(x['gen_bound'] for x in e)}/{len(e)}",
                         mpps(med([x["ndr_pps"] for x in t])), f"{sum(x['gen_bound'] for x in t)}/{len(t)}",
                         "ok" if all(x["conservation"] for x in e + t) else "FAILED"))
    print_table(head, rows, args.markdown)
    print(f"\n{args.runs} run(s) per generator, alternating; {args.duration:g} s trials; medians, spread min-max; "
          f"gen = runs whose NDR search the generator ended (no NDR claimed); kernel {platform.release()}; "
          f"load average before/after {load0} / {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
