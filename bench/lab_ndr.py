#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""NDR of the PGW-U against the reference forwarder on this machine's embedded lab. Prints ONE table.

    sudo .venv/bin/python bench/lab_ndr.py [--runs 3] [--sizes 64,512,1424] [--markdown]
    sudo .venv/bin/python bench/lab_ndr.py --scale [--runs 3] [--sizes 64] [--markdown]

Each run is two `gtplab sweep`s, one with the PGW-U (`--dut pgwu`) and one with the plain XDP forwarder
(`--dut fwd`), same sizes, both directions, same CPU layout; runs alternate pgwu, fwd, pgwu, fwd ... so
both see the same machine. Per (direction, size): the median NDR of each over the runs, its spread
(min-max), how many runs claimed none (the generator or a busy host set the result), the median DUT
CPU ns/packet and XDP ns/packet of the PGW-U, and the ratio PGW-U / forwarder of the medians. The
sweeps search NDR and PDR0.5 together (MLRsearch, the default goals); `--goal PDR0.5` tables the PDR
instead of the NDR. The results directories are kept under --keep (default: a temporary dir,
removed). docs/lab.md has the table measured here (with the binary search of 1 s trials the sweep
ran before issue 26).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from tables import median as med, num as f, print_table, spread  # noqa: E402


def claimed(c: dict, goal: str) -> float | None:
    """The case's claimed rate for the goal (its relevant lower bound when the DUT set it)."""
    return ((c.get("goals") or {}).get(goal) or {}).get("claimed_pps")


def sweep(out: Path, dut: str, sizes: str, scale: bool = False) -> list[dict]:
    spec = []
    if scale:       # the grid's 1024 bearers in order and the scale case's 1 M in random order
        spec_file = out.parent / "scale-spec.yaml"
        spec_file.write_text(f"scale: {{flows: 1000000, order: random, frame_sizes: [{sizes}]}}\n")
        spec = ["--spec", str(spec_file)]
    cp = subprocess.run([sys.executable, "-m", "gtplab", "sweep", *spec, *([] if scale else ["--no-scale"]),
                         "--dut", dut, "--sizes", sizes,
                         "--rate-mode", "search", "--pcap-limit", "0",
                         "--no-latency", "--out", str(out)], cwd=REPO, capture_output=True, text=True)
    if cp.returncode != 0:
        raise SystemExit(f"lab_ndr: gtplab sweep --dut {dut} failed ({cp.returncode}): {cp.stderr[-2000:]}")
    return [json.loads(ln) for ln in (out / "cases.jsonl").read_text().splitlines() if ln.strip()]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="sweeps per DUT, alternating")
    ap.add_argument("--sizes", default="64,512,1424", help="frame sizes")
    ap.add_argument("--goal", choices=("NDR", "PDR0.5"), default="NDR", help="the goal whose result is tabled")
    ap.add_argument("--keep", metavar="DIR", help="keep the results directories here")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--scale", action="store_true",
                    help="instead: the PGW-U with the grid's 1024 bearers in order against 1,000,000 bearers "
                         "in random order (issue 13), same sweep, same sizes")
    args = ap.parse_args()
    if args.scale:
        return scale_table(args)
    base = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="gtplab-lab-ndr-"))
    base.mkdir(parents=True, exist_ok=True)
    got: dict[tuple, list[dict]] = {}
    load0 = f"{os.getloadavg()[0]:.2f}"
    try:
        for k in range(args.runs):
            for dut in ("pgwu", "fwd"):
                for c in sweep(base / f"{dut}-{k}", dut, args.sizes):
                    got.setdefault((c["direction"], c["frame_size"], dut), []).append(c)
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)

    head = ("direction", "frame B", f"PGW-U {args.goal} Mpps", "spread", "none claimed",
            "forwarder Mpps", "spread", "none claimed", "PGW-U / fwd", "PGW-U CPU ns/pkt", "PGW-U XDP ns/pkt",
            "fwd XDP ns/pkt")
    rows = []
    for d in ("uplink", "downlink"):
        for size in sorted({s for (dd, s, _) in got if dd == d}):
            pg, fw = got.get((d, size, "pgwu"), []), got.get((d, size, "fwd"), [])
            pv = [claimed(c, args.goal) for c in pg if claimed(c, args.goal)]
            fv = [claimed(c, args.goal) for c in fw if claimed(c, args.goal)]
            mp, mf = med(pv), med(fv)
            rows.append((d, str(size), f(mp), spread(pv),
                         f"{len(pg) - len(pv)}/{len(pg)}", f(mf), spread(fv),
                         f"{len(fw) - len(fv)}/{len(fw)}", f(mp / mf if mp and mf else None, 1, "{:.2f}"),
                         f(med([c["dut"].get("cpu_ns_per_packet") for c in pg]), 1, "{:.0f}"),
                         f(med([c["dut"].get("ns_per_packet") for c in pg]), 1, "{:.0f}"),
                         f(med([c["dut"].get("ns_per_packet") for c in fw]), 1, "{:.0f}")))
    print_table(head, rows, args.markdown)
    print(f"\n{args.runs} run(s) per DUT, alternating; MLRsearch of the sweep's default goals, {args.goal} tabled; "
          f"medians, spread min-max over the runs with a result; none claimed = runs whose result the "
          f"generator or a busy host set; kernel {platform.release()}; "
          f"load average before/after {load0} / {os.getloadavg()[0]:.2f}")
    return 0


def scale_table(args) -> int:
    """NDR with 1,000,000 bearers hit in random order against 1024 in order, per (direction, size):
    each run is one PGW-U sweep holding both cases of a size back to back."""
    base = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="gtplab-lab-scale-"))
    base.mkdir(parents=True, exist_ok=True)
    load0 = f"{os.getloadavg()[0]:.2f}"
    got: dict[tuple, list[dict]] = {}
    try:
        for k in range(args.runs):
            for c in sweep(base / f"scale-{k}", "pgwu", args.sizes, scale=True):
                got.setdefault((c["direction"], c["frame_size"], c.get("order", "seq")), []).append(c)
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)

    head = ("direction", "frame B", f"1024 seq {args.goal} Mpps", "spread", "1M random Mpps",
            "spread", "random / seq (medians)", "per run", "XDP ns/pkt seq", "XDP ns/pkt random",
            "CPU ns/pkt seq", "CPU ns/pkt random")
    rows = []
    for d in ("uplink", "downlink"):
        for size in sorted({s for (dd, s, _) in got if dd == d}):
            sq, rn = got.get((d, size, "seq"), []), got.get((d, size, "random"), [])
            sv = [claimed(c, args.goal) for c in sq]
            rv = [claimed(c, args.goal) for c in rn]
            ms, mr = med(sv), med(rv)
            per = [f"{r / q:.2f}" if q and r else "-" for q, r in zip(sv, rv)]
            svv, rvv = [x for x in sv if x], [x for x in rv if x]
            rows.append((d, str(size), f(ms), spread(svv), f(mr),
                         spread(rvv),
                         f(mr / ms if ms and mr else None, 1, "{:.2f}"), " ".join(per),
                         f(med([c["dut"].get("ns_per_packet") for c in sq]), 1, "{:.0f}"),
                         f(med([c["dut"].get("ns_per_packet") for c in rn]), 1, "{:.0f}"),
                         f(med([c["dut"].get("cpu_ns_per_packet") for c in sq]), 1, "{:.0f}"),
                         f(med([c["dut"].get("cpu_ns_per_packet") for c in rn]), 1, "{:.0f}")))
    print_table(head, rows, args.markdown)
    print(f"\n{args.runs} PGW-U sweep(s), each with both cases of a size back to back; MLRsearch of the sweep's "
          f"default goals, {args.goal} tabled; medians, spread min-max; target random / seq >= 0.7; "
          f"kernel {platform.release()}; load average before/after {load0} / {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
