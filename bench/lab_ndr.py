#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""NDR of the PGW-U against the reference forwarder on this machine's embedded lab. Prints ONE table.

    sudo .venv/bin/python bench/lab_ndr.py [--runs 3] [--sizes 64,512,1424] [--markdown]

Each run is two `gtplab sweep`s, one with the PGW-U (`--dut pgwu`) and one with the plain XDP forwarder
(`--dut fwd`), same sizes, both directions, same CPU layout; runs alternate pgwu, fwd, pgwu, fwd ... so
both see the same machine. Per (direction, size): the median NDR of each over the runs, its spread
(min-max), how many runs were generator-bound (no NDR claimed), the median DUT CPU ns/packet and XDP
ns/packet of the PGW-U, and the ratio PGW-U / forwarder of the medians. `--rate-mode pdr` gives PDR
(0.1 % loss) instead. The results directories are kept under --keep (default: a temporary dir,
removed). docs/lab.md has the table measured here.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from tables import print_table  # noqa: E402


def sweep(out: Path, dut: str, sizes: str, rate_mode: str, duration: float) -> list[dict]:
    cp = subprocess.run([sys.executable, "-m", "gtplab", "sweep", "--no-scale", "--dut", dut, "--sizes", sizes,
                         "--rate-mode", rate_mode, "--duration", str(duration), "--pcap-limit", "0",
                         "--no-latency", "--out", str(out)], cwd=REPO, capture_output=True, text=True)
    if cp.returncode != 0:
        raise SystemExit(f"lab_ndr: gtplab sweep --dut {dut} failed ({cp.returncode}): {cp.stderr[-2000:]}")
    return [json.loads(ln) for ln in (out / "cases.jsonl").read_text().splitlines() if ln.strip()]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="sweeps per DUT, alternating")
    ap.add_argument("--sizes", default="64,512,1424", help="frame sizes")
    ap.add_argument("--rate-mode", choices=("ndr", "pdr"), default="ndr")
    ap.add_argument("--duration", type=float, default=1.0, help="seconds per trial")
    ap.add_argument("--keep", metavar="DIR", help="keep the results directories here")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    base = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="gtplab-lab-ndr-"))
    base.mkdir(parents=True, exist_ok=True)
    got: dict[tuple, list[dict]] = {}
    load0 = f"{os.getloadavg()[0]:.2f}"
    try:
        for k in range(args.runs):
            for dut in ("pgwu", "fwd"):
                for c in sweep(base / f"{dut}-{k}", dut, args.sizes, args.rate_mode, args.duration):
                    got.setdefault((c["direction"], c["frame_size"], dut), []).append(c)
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)

    def med(xs):
        xs = [x for x in xs if x is not None]
        return statistics.median(xs) if xs else None

    def f(x, scale=1e-6, fmt="{:.3f}"):
        return "-" if x is None else fmt.format(x * scale)

    head = ("direction", "frame B", f"PGW-U {args.rate_mode.upper()} Mpps", "spread", "gen-bound",
            "forwarder Mpps", "spread", "gen-bound", "PGW-U / fwd", "PGW-U CPU ns/pkt", "PGW-U XDP ns/pkt",
            "fwd XDP ns/pkt")
    rows = []
    for d in ("uplink", "downlink"):
        for size in sorted({s for (dd, s, _) in got if dd == d}):
            pg, fw = got.get((d, size, "pgwu"), []), got.get((d, size, "fwd"), [])
            pv = [c["ndr_pps"] for c in pg if c.get("ndr_pps")]
            fv = [c["ndr_pps"] for c in fw if c.get("ndr_pps")]
            mp, mf = med(pv), med(fv)
            rows.append((d, str(size), f(mp), f"{f(min(pv))}-{f(max(pv))}" if pv else "-",
                         f"{len(pg) - len(pv)}/{len(pg)}", f(mf), f"{f(min(fv))}-{f(max(fv))}" if fv else "-",
                         f"{len(fw) - len(fv)}/{len(fw)}", f(mp / mf if mp and mf else None, 1, "{:.2f}"),
                         f(med([c["dut"].get("cpu_ns_per_packet") for c in pg]), 1, "{:.0f}"),
                         f(med([c["dut"].get("ns_per_packet") for c in pg]), 1, "{:.0f}"),
                         f(med([c["dut"].get("ns_per_packet") for c in fw]), 1, "{:.0f}")))
    print_table(head, rows, args.markdown)
    print(f"\n{args.runs} run(s) per DUT, alternating; {args.duration:g} s trials, {args.rate_mode.upper()} search "
          f"(at most 8 trials); medians, spread min-max over the runs with a result; gen-bound = runs whose "
          f"result the generator set (no {args.rate_mode.upper()} claimed); kernel {platform.release()}; "
          f"load average before/after {load0} / {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
