#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""ns per packet that QoS enforcement (the qos map: QER gate, MBR token bucket, volume quota, volume
threshold) adds to
the PGW-U's XDP programs, uplink and downlink, one bearer.

    .venv/bin/python bench/qos_bench.py [--repeat N] [--rounds N] [--size B] [--markdown FILE]

Method: the harness of bench/pgwu_bench.py (docs/benchmarks.md): BPF_PROG_TEST_RUN with `repeat` runs
bench_restore, which gives every iteration a fresh frame and tail-calls the program under test; the
wrapper's own cost is measured alone and subtracted; every run's verdict counters must show every
iteration on the cell's path (reason and verdict), else the cell prints FAIL. One data plane is loaded
per variant, side by side, each with the same single bearer:
  plain       the bearer without PGWU_B_QOS (the qos map is never looked at)
  lookup      PGWU_B_QOS, an entry with the gates open and no MBR: the hash lookup and the gate check
  mbr         an MBR of 100 Gbit/s with a 1 GB bucket (every packet passes): the clock read, the
              lock, the refill and the charge
  mbr+quota   the same and a volume quota of 10^18 octets
  volth       a URR's volume threshold of 10^18 octets measured by the data path, no MBR: the lock
              and the threshold's count (never reached: the crossing is one packet in very many)
  mbr+volth   the MBR of mbr and that threshold (one lock for both)
  gate drop   the gate closed: dropped before any lock (drop_gate_closed)
  mbr drop    an MBR whose bucket holds less than one packet: every packet refused under the lock
              (drop_mbr)
Rounds: each round measures every cell once, in a shuffled order; a cell's number is the least of its
rounds minus the least run of the wrapper alone on the same work; the cost of a variant is its number
minus plain's, with the 25th-75th percentile of the per-round differences as its spread.
All on one CPU at a time (the test run's), in the softirq-less context of BPF_PROG_TEST_RUN; the
spin lock is uncontended here (one CPU at a time touches the bearer).
"""

from __future__ import annotations

import argparse
import os
import random
import struct
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import pgwu_bench as B  # noqa: E402
from gtplab.dut.dataplane import (QOS_DL_CLOSED, QOS_QUOTA, QOS_QUOTA_DL, QOS_QUOTA_UL, QOS_UL_CLOSED,  # noqa: E402
                                  QOS_VOLTH, QOS_VOLTH_DL, QOS_VOLTH_UL, Police, Qos, Volth)

VARIANTS = ("plain", "lookup", "mbr", "mbr+quota", "volth", "mbr+volth", "gate drop", "mbr drop")
BIG_KBPS = 100_000_000            # 100 Gbit/s
BIG_DEPTH = 1_000_000_000         # octets


def qos_of(variant: str) -> Qos | None:
    if variant == "plain":
        return None
    if variant == "lookup":
        return Qos()
    if variant == "mbr":
        return Qos(ul=Police.of(BIG_KBPS, BIG_DEPTH), dl=Police.of(BIG_KBPS, BIG_DEPTH))
    if variant == "mbr+quota":
        return Qos(flags=QOS_QUOTA | QOS_QUOTA_UL | QOS_QUOTA_DL, quota_left=10**18,
                   ul=Police.of(BIG_KBPS, BIG_DEPTH), dl=Police.of(BIG_KBPS, BIG_DEPTH))
    if variant in ("volth", "mbr+volth"):
        th = Volth(limit=(10**18, 0, 0), urr_id=1, vol_flags=1)
        pol = Police.of(BIG_KBPS, BIG_DEPTH) if variant == "mbr+volth" else Police()
        return Qos(flags=QOS_VOLTH | QOS_VOLTH_UL | QOS_VOLTH_DL, ul=pol,
                   dl=Police.of(BIG_KBPS, BIG_DEPTH) if variant == "mbr+volth" else Police(), th=th)
    if variant == "gate drop":
        return Qos(flags=QOS_UL_CLOSED | QOS_DL_CLOSED)
    # 1 kbit/s and a bucket of 1 octet: no packet ever fits
    return Qos(ul=Police.of(1, 1, full=False), dl=Police.of(1, 1, full=False))


def path_of(variant: str, direction: str) -> tuple[str, str]:
    if variant == "gate drop":
        return ("drop_gate_closed", "drop")
    if variant == "mbr drop":
        return ("drop_mbr", "drop")
    return ("ul_fwd" if direction == "ul" else "dl_fwd", "redirect")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=20_000, help="iterations per test run (default 20000)")
    ap.add_argument("--rounds", type=int, default=30, help="rounds; a cell's number is the least of them (default 30)")
    ap.add_argument("--size", type=int, default=512, help="frame size incl. FCS (default 512)")
    ap.add_argument("--markdown", help="also write the table to this file")
    args = ap.parse_args()
    if os.geteuid():
        sys.exit("qos_bench: must run as root")
    if args.repeat < 1 or args.rounds < 1 or not 82 <= args.size <= 3024:
        sys.exit("qos_bench: --repeat and --rounds must be >= 1, --size within 82..3024")
    # Bench loads one data plane per key; the keys here only name the variants
    keys = {v: i + 1 for i, v in enumerate(VARIANTS)}
    b = B.Bench(args, list(keys.values()))
    lines: list[str] = []
    failures: list[str] = []
    try:
        b.setup()
        for v, k in keys.items():
            dp, q = b.dps[k], qos_of(v)
            if q is not None:
                dp.set_qos(B.TEID_BASE, q)
            dp.add_bearer(B.TEID_BASE, B.int2ip(B.UE_BASE), B.SGW, B.SGW_TEID_BASE, qos=q is not None)
        fib = dict(csum=False, fib_cache=True, inner_csum_check=True, sport_entropy=True,
                   nexthop=b.dps[1].get_config().nexthop)
        ul, dl = B.build_uplink(args.size), B.build_downlink(args.size)
        cells: dict = {}
        for v, k in keys.items():
            dp = b.dps[k]
            cells[(v, "ul")] = B.Cell((v, "ul"), dp.progs["xdp_access"], ul, "acc0", dp=dp, config=fib,
                                      path=path_of(v, "ul"), nbearers=1, teid_off=B.UL_TEID_OFF,
                                      ue_off=B.UL_UE_OFF)
            cells[(v, "dl")] = B.Cell((v, "dl"), dp.progs["xdp_sgi"], dl, "sgi0", dp=dp, config=fib,
                                      path=path_of(v, "dl"), nbearers=1, ue_off=B.DL_UE_OFF)
        order = list(cells.values())
        kinds = list({c.wrapper_work: c for c in order}.values())
        jobs = [(b.measure, c) for c in order] + [(b.measure_wrapper, c) for c in kinds]
        rng = random.Random(1)
        t0 = time.monotonic()
        for r in range(args.rounds):
            rng.shuffle(jobs)
            for fn, c in jobs:
                fn(c)
            print(f"round {r + 1}/{args.rounds}: {time.monotonic() - t0:.0f} s", file=sys.stderr)
        B.pool_wrappers(cells.values())
        failures = [c.failure for c in cells.values() if c.failure]

        def added(c: B.Cell, base: B.Cell) -> str:
            if c.failure or base.failure:
                return "FAIL"
            per = [x - y for x, y in zip(c.rounds(), base.rounds())]
            return f"**{c.ns() - base.ns():+.1f}** ({B.pct(per, 0.25):+.1f} to {B.pct(per, 0.75):+.1f})"

        lines.append(f"Frame {args.size} B, 1 bearer. ns/pkt = least of {args.rounds} rounds minus the least run of "
                     "the wrapper alone; in brackets the 25th-75th percentile of the rounds. Added = the "
                     "variant's ns/pkt minus plain's; in brackets the 25th-75th percentile of the per-round "
                     "differences.")
        lines.append("")
        lines.append("| variant | uplink ns/pkt | added | downlink ns/pkt | added |")
        lines.append("|---|---:|---:|---:|---:|")
        for v in VARIANTS:
            u, d = cells[(v, "ul")], cells[(v, "dl")]
            pu, pd = cells[("plain", "ul")], cells[("plain", "dl")]
            lines.append(f"| {v} | {u.shown()} ({u.spread()}) | {added(u, pu) if v != 'plain' else ''} | "
                         f"{d.shown()} ({d.spread()}) | {added(d, pd) if v != 'plain' else ''} |")
        for k in kinds:
            lines.append(f"| wrapper alone ({k.key[1]}), subtracted | {k.wrapper_min:.1f} | | | |")
        lines.append("")
        lines.append(f"Path check: {b.checked:,} iterations counted by the data planes' verdict counters, each "
                     f"with the intended reason and verdict; {len(failures)} cells failed.")
        lines.append(f"Method: {args.rounds} rounds, each {len(cells)} cells and {len(kinds)} runs of the wrapper "
                     f"alone, shuffled, {args.repeat:,} iterations per run.")
    finally:
        b.teardown()
    out = "\n".join(lines)
    print(out)
    for f in failures:
        print("FAIL:", f, file=sys.stderr)
    if args.markdown:
        Path(args.markdown).write_text(out + "\n")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
