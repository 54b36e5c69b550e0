#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Where the DUT CPU's time per packet goes on the veth path, and what the lab's own measuring costs
(issue 26 item 5). Prints the tables of docs/lab.md, "What the lab can resolve".

    sudo flock /work/bench.lock .venv/bin/python bench/dut_cost.py [--rounds 3] [--load 200000]
        [--size 64] [--directions uplink,downlink] [--markdown]

One lab (the PGW-U), one Runner; the DUT CPUs kept awake as the lab config says.
Table 1 (profile): at a fixed load (--load pps, --profile-s seconds) `perf record -g` on the DUT's
CPUs (gtplab.observe.flamegraph), for the PGW-U without and with bpf_stats, and for the reference
forwarder swapped in on the same links (gtplab.dut.reference). The samples of the DUT's own receive
threads (napi/d<lab>p*) are sorted by what they were doing (CATEGORIES, first match from the top)
and turned into ns per packet with the threads' CPU time per packet of the same trial (schedstat).
Table 2 (bpf_stats on every trial or not): --rounds rounds, each the same two cases searched twice,
interleaved: once with bpf_stats held for the whole search (what every sweep did before issue 26),
once without (the sweep now: the program's cost from one extra trial per case, Runner.case_costs);
each search an MLRsearch of the default goals, and one trial at --load for the CPU ns/packet.
Medians and spread over the rounds. --no-search: only the trials at --load (--fixed-s each), so more
rounds fit in the time: the CPU ns/packet with and without bpf_stats, interleaved. Whether bpf_stats
was really off is checked per trial (runs counted by the kernel: another process on the host may
hold BPF_ENABLE_STATS, which is global).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from tables import num as f, print_table, spread  # noqa: E402

# (category, frames any of which puts a sample in it), tried in this order on each stack
CATEGORIES = (
    ("the program (XDP, its helpers)", ("bpf_prog_",)),
    ("bpf_stats: clock reads around the program", ("sched_clock", "kvm_clock", "pvclock")),
    ("redirect: waking the peer's NAPI thread", ("__napi_schedule", "try_to_wake_up", "wake_up_process")),
    ("redirect: into the peer's ring", ("__dev_flush", "xdp_do_flush", "bq_xmit_all", "veth_xdp_xmit",
                                        "xdp_do_redirect", "dev_map")),
    ("veth receive: ring, frame setup", ("veth_xdp_rcv", "veth_poll", "__napi_poll")),
    ("NAPI thread: sleep and wake-up", ("schedule", "finish_task_switch", "napi_threaded_poll")),
    ("other", ("",)),
)


def categorize(folded: str, comms: tuple[str, ...]) -> dict[str, int]:
    out = {c: 0 for c, _ in CATEGORIES}
    for line in folded.splitlines():
        stack, _, n = line.rpartition(" ")
        frames = stack.split(";")
        if not frames or not frames[0].startswith(comms):
            continue
        for cat, keys in CATEGORIES:
            if any(k in fr for fr in frames[1:] for k in keys):
                out[cat] += int(n)
                break
    return out


PERF_ATTEMPTS = 5


def _rng(xs) -> str:
    xs = [x for x in xs if x]
    return f"{min(xs):.0f}-{max(xs):.0f}" if xs else "-"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--load", type=float, default=200e3, help="pps of the fixed-load trials")
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--directions", default="uplink,downlink")
    ap.add_argument("--profile-s", type=float, default=3.0)
    ap.add_argument("--no-profile", action="store_true")
    ap.add_argument("--no-search", action="store_true",
                    help="table 2 without the searches: only the trials at --load (more rounds for the time)")
    ap.add_argument("--fixed-s", type=float, default=1.0, help="duration of the trials at --load, s")
    ap.add_argument("--budget", type=float, default=None, help="search time budget per case, s")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()

    from gtplab.dut.reference import Reference
    from gtplab.lab import config as labconfig
    from gtplab.measure import mlrsearch as mlr
    from gtplab.measure.plan import CaseParams
    from gtplab.measure.runner import Runner
    from gtplab.observe.flamegraph import FlamegraphError, Profiler
    from gtplab.traffic.backend import Backend

    cfg = labconfig.load(None)
    dirs = args.directions.split(",")
    load0 = os.getloadavg()
    be = Backend.open("local", mtu=int(cfg.lab.get("mtu", 3200)), cpus=cfg.cpu_layout(), dut="pgwu",
                      share_cpus=cfg.lab.get("share_cpus"))
    prof_rows, runs, awake = [], {}, {}
    disturbed = stats_leak = total = perf_retries = 0
    try:
        with Runner(be, cfg) as runner:
            lab = be.lab
            awake = dict(lab.state.get("awake") or {})
            ref = Reference(lab)
            comms = tuple(f"napi/{p.dut_ifname}-" for p in lab.ports)
            preps = {d: runner.prepare(CaseParams(d, args.size, flows=1024, latency=False)) for d in dirs}

            def note(t):
                nonlocal disturbed, total
                total += 1
                disturbed += bool(t["host"]["disturbed"])
                return t

            if not args.no_profile:
                with tempfile.TemporaryDirectory(prefix="gtplab-dut-cost-") as tmp:
                    for d in dirs:
                        for name, stats, swap in (("PGW-U", False, False), ("PGW-U, bpf_stats on", True, False),
                                                  ("forwarder", False, True)):
                            prof = Profiler(Path(tmp), lab.cpus.dut)
                            for attempt in range(PERF_ATTEMPTS):
                                cm = ref.swapped() if swap else contextlib.nullcontext()
                                try:
                                    with cm as probe, (runner.dut.bpf_stats() if stats else contextlib.nullcontext()):
                                        dut = runner.dut
                                        runner.dut = probe or dut
                                        try:
                                            with prof.case(f"{d}-{len(prof_rows)}"):
                                                t = note(runner.trial(preps[d], args.load, args.profile_s))
                                        finally:
                                            runner.dut = dut
                                    break
                                except FlamegraphError as e:
                                    # perf 6.1's perf script stops on the KSYMBOL records other
                                    # processes' BPF programs leave (--no-bpf-event does not stop
                                    # those): that profile is lost, the trial is made again
                                    if "type: 17" not in str(e) or attempt == PERF_ATTEMPTS - 1:
                                        raise
                                    perf_retries += 1
                                    print(f"perf script failed ({e}); again", file=sys.stderr, flush=True)
                            cat = categorize(prof.last_svg.with_suffix(".folded").read_text(), comms)
                            n = sum(cat.values())
                            ns = t["dut"]["cpu_ns_per_packet"]
                            prof_rows.append([d, name, "on" if t["dut"].get("bpf_stats") else "off",
                                              f(t["offered_pps"]), f(ns, 1, "{:.0f}"),
                                              f(t["dut"]["ns_per_packet"], 1, "{:.0f}"), str(n)]
                                             + [f(ns * v / n if n and ns else None, 1, "{:.0f}") for v in cat.values()])
                            print(" ".join(prof_rows[-1]), file=sys.stderr, flush=True)

            for k in range(args.rounds):
                for stats in ((True, False) if k % 2 == 0 else (False, True)):
                    for d in dirs:
                        prep = preps[d]
                        res, seen = None, []
                        with (runner.dut.bpf_stats() if stats else contextlib.nullcontext()):
                            if not args.no_search:
                                top = note(runner.trial(prep, None, 0.25))["offered_pps"]

                                def measure(load: float, duration: float) -> mlr.TrialOutput:
                                    t = note(runner.trial(prep, load, duration))
                                    seen.append(t)
                                    return mlr.TrialOutput.from_counts(t["tx_packets"], t["rx_packets"],
                                                                       intended=load * duration,
                                                                       offered_load=t["offered_pps"],
                                                                       disturbed=bool(t["host"]["disturbed"]))
                                res = mlr.search(measure, mlr.DEFAULT_GOALS, min_load=min(10e3, top),
                                                 max_load=top, time_budget=args.budget)
                            fixed = note(runner.trial(prep, args.load, args.fixed_s))
                        if not stats:
                            stats_leak += sum(bool(t["dut"].get("bpf_stats")) for t in seen + [fixed])
                        r = runs.setdefault((d, stats), {"ndr": [], "cpu": [], "xdp": [], "busy": 0,
                                                         "disturbed": 0})
                        if res is not None and res.host_busy:
                            r["busy"] += 1
                        elif res is not None:
                            r["ndr"].append(res["NDR"].lower)
                        r["cpu"].append(fixed["dut"]["cpu_ns_per_packet"])
                        r["xdp"].append(fixed["dut"]["ns_per_packet"])
                        r["disturbed"] += bool(fixed["host"]["disturbed"])
                        print(f"round {k + 1} {d} bpf_stats {'on' if stats else 'off'}: "
                              + (f"NDR {(res['NDR'].lower or 0) / 1e6:.4f} Mpps"
                                 f"{' HOST BUSY' if res.host_busy else ''}, " if res is not None else "")
                              + f"CPU {fixed['dut']['cpu_ns_per_packet'] or 0:.0f} ns/pkt at {args.load:.0f} pps"
                              f"{' (disturbed)' if fixed['host']['disturbed'] else ''}",
                              file=sys.stderr, flush=True)
            ref.close()
    finally:
        be.close()
    load1 = os.getloadavg()
    print(f"{args.size} B frames asked, 1024 flows; {total} trials, {disturbed} disturbed by the host; load average "
          f"before {load0[0]:.2f}, after {load1[0]:.2f}; DUT CPUs kept awake: {awake.get('method')}"
          f"{'' if awake.get('applied') else ' (NOT applied)'}; kernel {os.uname().release}, {os.cpu_count()} CPUs")
    if prof_rows:
        print(f"profiles made again after perf script failed on other processes' KSYMBOL records: {perf_retries}")
        print_table(["direction", "DUT", "bpf_stats (seen)", "offered Mpps", "DUT CPU ns/pkt", "XDP ns/pkt", "samples"]
                    + [c for c, _ in CATEGORIES], prof_rows, markdown=args.markdown)
        print()
    rows = []
    for d in dirs:
        on, off = runs.get((d, True), {}), runs.get((d, False), {})
        mon = statistics.median(on["ndr"]) if on.get("ndr") else None
        moff = statistics.median(off["ndr"]) if off.get("ndr") else None
        con = statistics.median([x for x in on.get("cpu", []) if x] or [0]) or None
        coff = statistics.median([x for x in off.get("cpu", []) if x] or [0]) or None
        xdp = statistics.median([x for x in on.get("xdp", []) if x] or [0]) or None
        rows.append([d, f(mon), spread(on.get("ndr", [])), str(on.get("busy", 0)), f(moff),
                     spread(off.get("ndr", [])), str(off.get("busy", 0)),
                     f"{moff / mon:.2f}" if mon and moff else "-", f(con, 1, "{:.0f}"),
                     _rng(on.get("cpu", [])), f(coff, 1, "{:.0f}"),
                     _rng(off.get("cpu", [])),
                     f(con - coff if con and coff else None, 1, "{:+.0f}"), f(xdp, 1, "{:.0f}"),
                     f"{on.get('disturbed', 0)} / {off.get('disturbed', 0)}"])
    print_table(["direction", "NDR Mpps, bpf_stats on", "spread", "host busy", "NDR Mpps, off", "spread", "host busy",
                 "off / on", f"CPU ns/pkt at {args.load / 1e3:.0f} kpps, on", "spread", "off", "spread", "on - off",
                 "XDP ns/pkt (on)", "disturbed on / off"],
                rows, markdown=args.markdown)
    print(f"{args.rounds} round(s), on and off interleaved; trials meant to run without bpf_stats that ran "
          f"with it (another process held BPF_ENABLE_STATS): {stats_leak}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
