#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Repeatability of the embedded lab's NDR, and whether the lab notices a noisy neighbour (issue 26
item 6). Prints the tables of docs/benchmarks.md, "Repeatability".

    sudo flock /work/bench.lock .venv/bin/python bench/repeatability.py [--runs 5] [--hog-runs 2]
        [--sizes 64,1424] [--directions uplink,downlink] [--awake auto|spinner|none] [--markdown]

One lab (the PGW-U, the default lab config's CPU layout), one Runner. Each run searches every case
once with MLRsearch (gtplab.measure.mlrsearch, the default goals: NDR and PDR0.5; disturbed trials
excluded and measured again), in this order: --runs quiet runs, then --hog-runs noisy runs, during
which a CPU hog (a busy loop, SCHED_OTHER, pinned to the DUT CPU) runs for HOG_ON_S seconds out of
every HOG_ON_S + HOG_OFF_S, so part of each search's trials overlap it and part do not.

Table 1, per case: the NDR (relevant lower bound) of the quiet runs, median, spread (min-max) and
coefficient of variation (stdev / mean; target <= 5 %), the cases that ended "host busy", and the
noisy runs' NDR median and how far it moved from the quiet median (target <= 5 %, or host busy).
Table 1b: the NDR the same trials give when the flags are ignored (every trial counted, relevant
lower bound recomputed): what the lab would have claimed without knowing it was disturbed.
Table 2, the disturbance flags: of the trials the hog was on for at least OVERLAP_MIN of their time
(the truth, from the hog's own on/off timestamps, taken once it is pinned and spinning), how many
the lab flagged as disturbed (target >= 95 %); the trials it overlapped by less, apart; of the trials
it did not overlap, how many the lab flagged anyway (the rest of the host: other developers' tests).
Table 2b: which figure flagged them (a trial can trip several).
Table 4, what the search saw in the quiet runs' undisturbed trials: how many lost packets and where
(the conservation's places: the DUT's ingress ring, its drops by reason, the generator's ingress ring,
anything on no counter), the lowest load that lost and the highest that did not, and the flat-out
trial before each search (the generator's top rate, what the DUT forwarded at it: max load, and the
forwarding rate the search's first step down aims at).
Table 3, the host figures per trial (median, p95, max) with and without the hog: what the thresholds
(gtplab.observe.host.THRESHOLDS) were chosen from.
The first line gives the load average before and after, and the background: the median share of the
DUT's and the generator's CPUs other tasks took in the quiet runs' trials (a quiet host: ~0).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from tables import num as f, print_table, spread  # noqa: E402

HOG_ON_S, HOG_OFF_S = 2.0, 2.0
OVERLAP_MIN = 0.1       # a trial the hog was on for this share of its time is truly disturbed (table 2)
FIGURES = (("dut", "others_ratio"), ("generator", "others_ratio"), ("dut", "steal_ratio"),
           ("generator", "steal_ratio"), ("dut", "wait_ratio"))


class Hog:
    """A busy loop pinned to `cpus`, switched on and off every HOG_ON_S / HOG_OFF_S seconds while
    running; `intervals` are its on times (monotonic), the truth a trial is compared with."""

    def __init__(self, cpus: list[int]):
        self.cpus = cpus
        self.intervals: list[list[float]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _spin(self) -> subprocess.Popen:
        """The hog, started and pinned; returns once it says it is spinning on the DUT CPU(s): its on
        time starts there, not at fork (Python's start-up, ~50 ms here, runs on this process's CPUs)."""
        p = subprocess.Popen([sys.executable, "-c", "import os, sys; os.sched_setaffinity(0, %r)\n"
                              "sys.stdout.write('spinning\\n'); sys.stdout.flush()\nwhile True: pass"
                              % (self.cpus,)], stdout=subprocess.PIPE, start_new_session=True)
        p.stdout.readline()
        return p

    def _loop(self) -> None:
        while not self._stop.is_set():
            p = self._spin()
            t0 = time.monotonic()
            self.intervals.append([t0, float("inf")])
            self._stop.wait(HOG_ON_S)
            p.kill()
            p.wait()
            self.intervals[-1][1] = time.monotonic()
            self._stop.wait(HOG_OFF_S)

    def __enter__(self) -> "Hog":
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join()

    def overlap(self, t0: float, t1: float) -> float:
        """The share of [t0, t1] the hog was on (a hog still on counts up to now)."""
        now = time.monotonic()
        on = sum(max(0.0, min(b if b != float("inf") else now, t1) - max(a, t0)) for a, b in self.intervals)
        return on / (t1 - t0) if t1 > t0 else 0.0


def _mcv(xs: list[float]) -> tuple[float | None, float | None]:
    """Median and coefficient of variation (population stdev / mean) of xs."""
    if not xs:
        return None, None
    return statistics.median(xs), (statistics.pstdev(xs) / statistics.mean(xs) if len(xs) > 1 else None)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:.1f} %"


def pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5, help="quiet runs (every case searched once per run)")
    ap.add_argument("--hog-runs", type=int, default=2, help="noisy runs, with the CPU hog on the DUT CPU")
    ap.add_argument("--sizes", default="64,1424", help="frame sizes")
    ap.add_argument("--directions", default="uplink,downlink")
    ap.add_argument("--flows", type=int, default=1024)
    ap.add_argument("--awake", choices=("auto", "cpuidle", "spinner", "none"), default=None,
                    help="how the DUT CPUs are kept out of halt (default: the lab config's, auto)")
    ap.add_argument("--budget", type=float, default=None, help="search time budget per case, s")
    ap.add_argument("--min-load", type=float, default=10e3)
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--json", metavar="FILE", help="also write every trial's host record and each run's NDR here")
    args = ap.parse_args()

    from gtplab.lab import config as labconfig
    from gtplab.measure import mlrsearch as mlr
    from gtplab.measure.plan import CaseParams
    from gtplab.measure.runner import Runner
    from gtplab.observe.host import THRESHOLDS
    from gtplab.traffic.backend import Backend

    cfg = labconfig.load(None)
    if args.awake:
        cfg.lab["awake"] = args.awake
    cases = [CaseParams(d, int(s), flows=args.flows, latency=False)
             for d in args.directions.split(",") for s in args.sizes.split(",")]
    load0 = os.getloadavg()
    t_all = time.monotonic()
    ndr: dict[tuple, dict[str, list]] = {}
    trials: dict[str, list[dict]] = {"quiet": [], "hog": []}
    be = Backend.open("local", mtu=int(cfg.lab.get("mtu", 3200)), cpus=cfg.cpu_layout(), dut=cfg.dut_mode,
                      share_cpus=cfg.lab.get("share_cpus"))
    awake = None
    try:
        with Runner(be, cfg) as runner:
            awake = dict(be.lab.state.get("awake") or {})
            preps = [runner.prepare(p) for p in cases]
            for k in range(args.runs + args.hog_runs):
                kind = "quiet" if k < args.runs else "hog"
                hog = Hog(be.lab.cpus.dut) if kind == "hog" else None
                with (hog or _null()):
                    for p, prep in zip(cases, preps):
                        runner.install_bearers(p, prep.tunables)
                        flat = runner.trial(prep, None, 0.25)
                        top = flat["offered_pps"]

                        def measure(load: float, duration: float) -> mlr.TrialOutput:
                            t = runner.trial(prep, load, duration)
                            h = t["host"]
                            overlap = hog.overlap(*h["window"]) if hog else 0.0    # its traffic's time
                            lost = t["tx_packets"] - t["rx_packets"]
                            trials[kind].append({"host": h, "overlap": overlap, "case": (p.direction, p.actual_size),
                                                 "run": k, "load": load, "duration": duration,
                                                 "offered_pps": t["offered_pps"], "tx": t["tx_packets"],
                                                 "rx": t["rx_packets"], "lost": lost, "loss": t["loss"],
                                                 "drops": t["dut"]["drops_by_reason"], "limit": t["limit"],
                                                 "conservation": t["conservation"].get("ok")})
                            return mlr.TrialOutput.from_counts(t["tx_packets"], t["rx_packets"],
                                                               intended=load * duration,
                                                               offered_load=t["offered_pps"],
                                                               disturbed=bool(h["disturbed"]))

                        res = mlr.search(measure, mlr.DEFAULT_GOALS, min_load=min(args.min_load, top),
                                         max_load=top, time_budget=args.budget)
                        g = res["NDR"] if "NDR" in {r.code for r in res.goals} else res.goals[0]
                        row = ndr.setdefault((p.direction, p.actual_size), {"quiet": [], "hog": [],
                                                                            "busy_quiet": 0, "busy_hog": 0,
                                                                            "all_quiet": [], "all_hog": [],
                                                                            "regular_quiet": 0, "regular_hog": 0,
                                                                            "flat_out": []})
                        row["flat_out"].append([top, flat["rx_pps"]])
                        # the same trials with the flags ignored: what the NDR would be if disturbed
                        # trials counted as evidence
                        row[f"all_{kind}"].append(mlr.relevant_bounds(mlr.by_load(res.trials), g.goal).lower)
                        if res.host_busy:
                            row[f"busy_{kind}"] += 1
                        else:
                            row[kind].append(g.lower)
                            row[f"regular_{kind}"] += g.regular
                        print(f"run {k + 1} ({kind}) {p.direction} {p.actual_size} B: NDR "
                              f"{(g.lower or 0) / 1e6:.4f} Mpps, {len(res.trials)} trials, "
                              f"{res.disturbed_trials} disturbed{', HOST BUSY' if res.host_busy else ''}",
                              file=sys.stderr, flush=True)
    finally:
        be.close()
    load1 = os.getloadavg()
    if args.json:
        import json
        Path(args.json).write_text(json.dumps({
            "ndr": [{"direction": d, "frame_size": size, **r} for (d, size), r in ndr.items()],
            "trials": trials, "awake": awake, "load": [load0, load1]}, default=str) + "\n")

    # table 1: the NDR per case
    rows, rows_all = [], []
    for (d, size), r in ndr.items():
        q, h = [x for x in r["quiet"] if x], [x for x in r["hog"] if x]
        qm, cv = _mcv(q)
        hm = statistics.median(h) if h else None
        moved = (hm - qm) / qm if qm and hm else None
        rows.append([d, str(size), f"{len(q)} ({r['regular_quiet']})", f(qm), spread(q), _pct(cv),
                     "met" if cv is not None and cv <= 0.05 else "NOT met" if cv is not None else "-",
                     str(r["busy_quiet"]), f(hm), str(r["busy_hog"]),
                     (f"{moved * 100:+.1f} %" if moved is not None else "-"),
                     "met" if (moved is not None and abs(moved) <= 0.05) or (r["busy_hog"] and not h) else
                     "NOT met" if moved is not None else "-"])
        aq, ah = [x for x in r["all_quiet"] if x], [x for x in r["all_hog"] if x]
        am, acv = _mcv(aq)
        ahm = statistics.median(ah) if ah else None
        rows_all.append([d, str(size), f(am), spread(aq), _pct(acv), f(ahm), spread(ah),
                         f"{(ahm - am) / am * 100:+.1f} %" if am and ahm else "-"])
    quiet = trials["quiet"]
    bg = {side: statistics.median([t["host"][side]["others_ratio"] for t in quiet if side in t["host"]] or [0])
          for side in ("dut", "generator")}
    print(f"{args.runs} quiet + {args.hog_runs} noisy run(s) (hog on the DUT CPU(s) {HOG_ON_S:g} s of every "
          f"{HOG_ON_S + HOG_OFF_S:g} s); MLRsearch default goals ({', '.join(g.code for g in mlr.DEFAULT_GOALS)}), "
          f"disturbed trials excluded; DUT CPUs kept awake: {awake.get('method')}"
          f"{'' if awake.get('applied') else ' (NOT applied)'}; {time.monotonic() - t_all:.0f} s; "
          f"load average before {load0[0]:.2f}, after {load1[0]:.2f}; background in the quiet runs' trials "
          f"(median share other tasks took): DUT CPUs {bg['dut']:.1%}, generator CPUs {bg['generator']:.1%}; "
          f"kernel {os.uname().release}, {os.cpu_count()} CPUs")
    print_table(["direction", "frame B", "quiet runs with an NDR (regular)", "NDR Mpps median", "spread", "CV", "CV <= 5 %",
                 "host busy (quiet)", "noisy NDR Mpps", "host busy (noisy)", "moved", "within 5 % or busy"],
                rows, markdown=args.markdown)

    print()
    print_table(["direction", "frame B", "NDR Mpps counting every trial (quiet runs)", "spread", "CV",
                 "noisy runs", "spread", "moved"], rows_all, markdown=args.markdown)

    # table 2: the flags against the truth. A trial the hog overlapped for a sliver of its time was not
    # disturbed beyond the thresholds: at most the sliver's share of the DUT CPU went to the hog, under
    # the 2 % of the DUT CPUs' "others" (THRESHOLDS) below OVERLAP_MIN (running a whole trial it took
    # 11-26 % of the DUT CPU on the quiet host); those are counted apart, not in the target
    hog_t = trials["hog"]
    truly = [t for t in hog_t if t["overlap"] >= OVERLAP_MIN]
    partly = [t for t in hog_t if 0 < t["overlap"] < OVERLAP_MIN]
    clean = [t for t in hog_t if not t["overlap"]] + quiet
    flagged = sum(bool(t["host"]["disturbed"]) for t in truly)
    rate = flagged / len(truly) if truly else None

    def share(group: list[dict]) -> list[str]:
        n = sum(bool(t["host"]["disturbed"]) for t in group)
        return [str(len(group)), str(n), f"{n / len(group):.1%}" if group else "-"]
    print()
    print_table(["trials", "count", "flagged disturbed", "share", "target"], [
        [f"the hog on for >= {OVERLAP_MIN:.0%} of the trial", *share(truly),
         ">= 95 %: " + ("met" if rate is not None and rate >= 0.95 else "NOT met" if rate is not None else "-")],
        [f"the hog on for less than {OVERLAP_MIN:.0%} of it", *share(partly), "(at most that share taken)"],
        ["the hog off (quiet runs and its off time)", *share(clean), "(the rest of the host)"]],
        markdown=args.markdown)

    # table 2b: which figure flagged them (a trial can trip several)
    trips = (("other tasks on the DUT CPUs", lambda h: (h.get("dut") or {}).get("others_ratio", 0)
              > THRESHOLDS["dut_others_ratio"]),
             ("other tasks on the generator CPUs", lambda h: (h.get("generator") or {}).get("others_ratio", 0)
              > THRESHOLDS["generator_others_ratio"]),
             ("steal on the DUT CPUs", lambda h: (h.get("dut") or {}).get("steal_ratio", 0) > THRESHOLDS["steal_ratio"]),
             ("steal on the generator CPUs", lambda h: (h.get("generator") or {}).get("steal_ratio", 0)
              > THRESHOLDS["steal_ratio"]),
             ("the DUT threads' run-queue wait", lambda h: (h.get("dut") or {}).get("wait_ratio", 0)
              > THRESHOLDS["dut_wait_ratio"]),
             ("the idle tuning stopped holding", lambda h: bool((h.get("awake") or {}).get("applied"))
              and not (h.get("awake") or {}).get("held")))
    print()
    print_table(["beyond its threshold", "hog off: trials", "share", f"hog on >= {OVERLAP_MIN:.0%}: trials", "share"],
                [[name, str(sum(map(fn, [t["host"] for t in clean]))),
                  f"{sum(map(fn, [t['host'] for t in clean])) / len(clean):.1%}" if clean else "-",
                  str(sum(map(fn, [t["host"] for t in truly]))),
                  f"{sum(map(fn, [t['host'] for t in truly])) / len(truly):.1%}" if truly else "-"]
                 for name, fn in trips], markdown=args.markdown)

    # table 4: where the quiet runs' undisturbed trials lost packets (the conservation's places), the
    # lowest load that lost and the highest that did not, and the flat-out trial: what the search saw
    rows = []
    for (d, size), r in ndr.items():
        ts = [t for t in quiet if tuple(t["case"]) == (d, size) and not t["host"]["disturbed"]]
        lossy = [t for t in ts if t["lost"] > 0]
        places: dict[str, int] = {}
        for t in lossy:
            for where, n in (t["loss"] or {}).items():
                if n:
                    places[where] = places.get(where, 0) + n
            for why, n in (t["drops"] or {}).items():
                places[f"dut drop {why}"] = places.get(f"dut drop {why}", 0) + n
        unexplained = sum(t["lost"] for t in lossy) - sum(places.values())
        if unexplained:
            places["not on a counter"] = unexplained
        total = sum(places.values()) or 1
        clean_loads = [t["load"] for t in ts if t["lost"] == 0]
        fo = r["flat_out"]
        rows.append([d, str(size), str(len(ts)), str(len(lossy)),
                     "; ".join(f"{w} {n / total:.0%}" for w, n in sorted(places.items(), key=lambda x: -x[1])) or "-",
                     f(min((t["load"] for t in lossy), default=None)),
                     f(max(clean_loads, default=None)),
                     f(statistics.median(x[0] for x in fo)) if fo else "-",
                     f(statistics.median(x[1] for x in fo)) if fo else "-",
                     str(sum(not t["conservation"] for t in ts))])
    print()
    print_table(["direction", "frame B", "undisturbed trials (quiet runs)", "with loss", "lost at",
                 "lowest load that lost, Mpps", "highest lossless, Mpps", "flat out: offered Mpps",
                 "flat out: forwarded Mpps", "conservation broken"], rows, markdown=args.markdown)

    # table 3: the figures the thresholds come from
    rows = []
    for side, key in FIGURES:
        th = THRESHOLDS.get(f"{side}_{key}", THRESHOLDS.get(key))
        for name, group in (("without the hog", clean), (f"with the hog (>= {OVERLAP_MIN:.0%})", truly)):
            xs = [t["host"][side][key] for t in group if key in (t["host"].get(side) or {})]
            rows.append([f"{side} {key}", name, str(len(xs)), f(pct(xs, 0.5), 1, "{:.3f}"),
                         f(pct(xs, 0.95), 1, "{:.3f}"), f(max(xs) if xs else None, 1, "{:.3f}"),
                         f"{th:g}" if th is not None else "-"])
    print()
    print_table(["figure", "trials", "n", "median", "p95", "max", "threshold"], rows, markdown=args.markdown)
    return 0


class _null:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return None


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))
    sys.exit(main())
