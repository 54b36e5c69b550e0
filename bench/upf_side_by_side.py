#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""The PGW-U, eUPF and the reference forwarder side by side on this machine's lab. Prints ONE table.

    sudo flock /work/bench.lock .venv/bin/python bench/upf_side_by_side.py [--runs 3] [--sizes 64,512,1424]
                                                                           [--markdown] [--keep DIR]

Each run is three `gtplab sweep`s on the namespace lab, same sizes, both directions, same CPU layout
(lab config cpus: auto): the XDP PGW-U (lab config embedded, --dut pgwu), eUPF (embedded-eupf: the
lab starts it, gtplab provisions it over PFCP on the lab's N4 link) and the plain XDP forwarder
(embedded, --dut fwd). The three are interleaved and their order rotates from run to run (pgwu eupf
fwd, eupf fwd pgwu, fwd pgwu eupf ...), so each sees the same machine. Per (direction, size): each
DUT's median NDR over the runs with its spread (min-max) and how many runs were generator-bound (no
NDR claimed), each UPF's NDR over the forwarder's (medians), and what a packet cost each DUT: the CPU
time of its receive NAPI threads per packet (DUT CPU ns/pkt: where every XDP program runs) and its XDP
program's own run time (bpf_stats; the PGW-U's xdp_access/xdp_sgi, eUPF's upf_ip_entrypoint by
program id, the forwarder's). With --keep DIR the results directories stay there, and the last run's
three go into one report (`gtplab report PGWU EUPF FWD`: DIR/report/index.html). Skips eUPF, saying
so, when its runtime is absent. docs/benchmarks.md has the table measured here.
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
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from tables import median as med, num as f, print_table, spread  # noqa: E402

from gtplab.lab import config as labconfig  # noqa: E402
from gtplab.lab import runtime  # noqa: E402

DUTS = {          # name: (lab config, --dut)
    "pgwu": ("embedded", "pgwu"),
    "eupf": ("embedded-eupf", None),
    "fwd": ("embedded", "fwd"),
}
NAMES = {"pgwu": "PGW-U", "eupf": "eUPF", "fwd": "fwd"}


def sweep(out: Path, dut: str, sizes: str, duration: float) -> list[dict]:
    cfg, mode = DUTS[dut]
    cp = subprocess.run([sys.executable, "-m", "gtplab", "sweep", "--no-scale", "--lab-config", cfg,
                         *(["--dut", mode] if mode else []), "--sizes", sizes, "--rate-mode", "ndr",
                         "--duration", str(duration), "--pcap-limit", "0", "--no-latency", "--out", str(out)],
                        cwd=REPO, capture_output=True, text=True)
    if cp.returncode != 0:
        raise SystemExit(f"upf_side_by_side: gtplab sweep ({dut}) failed ({cp.returncode}): {cp.stderr[-2000:]}")
    return [json.loads(ln) for ln in (out / "cases.jsonl").read_text().splitlines() if ln.strip()]


def eupf_available() -> str | None:
    """None when eUPF's runtime is there, else why not."""
    spec = labconfig.load("embedded-eupf").external_spec()
    try:
        runtime.resolve(spec.runtime, spec.runtime_env, "eUPF")
    except runtime.RuntimeUnavailable as e:
        return str(e)
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="rounds of the three sweeps, interleaved")
    ap.add_argument("--sizes", default="64,512,1424", help="frame sizes")
    ap.add_argument("--duration", type=float, default=1.0, help="seconds per trial")
    ap.add_argument("--keep", metavar="DIR", help="keep the results directories here (and a report of the last run)")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    duts = list(DUTS)
    why = eupf_available()
    if why:
        print(f"upf_side_by_side: without eUPF: {why}", file=sys.stderr)
        duts.remove("eupf")
    base = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="gtplab-upf-side-"))
    base.mkdir(parents=True, exist_ok=True)
    got: dict[tuple, list[dict]] = {}
    load0 = f"{os.getloadavg()[0]:.2f}"
    try:
        for k in range(args.runs):
            order = duts[k % len(duts):] + duts[:k % len(duts)]
            for dut in order:
                print(f"upf_side_by_side: run {k + 1}/{args.runs}: {dut}", file=sys.stderr)
                for c in sweep(base / f"{dut}-{k}", dut, args.sizes, args.duration):
                    got.setdefault((c["direction"], c["frame_size"], dut), []).append(c)
        if args.keep:
            last = args.runs - 1
            rep = subprocess.run([sys.executable, "-m", "gtplab", "report", *[str(base / f"{d}-{last}") for d in duts],
                                  "-o", str(base / "report")], cwd=REPO, capture_output=True, text=True)
            print(f"upf_side_by_side: report: {rep.stdout.strip() or rep.stderr.strip()}", file=sys.stderr)
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)

    head = ["direction", "frame B"]
    for d in duts:
        head += [f"{NAMES[d]} NDR Mpps", "spread", "gen-bound"]
    head += [f"{NAMES[d]} / fwd" for d in duts if d != "fwd"]
    head += [f"{NAMES[d]} CPU ns/pkt" for d in duts] + [f"{NAMES[d]} XDP ns/pkt" for d in duts]
    rows = []
    for direction in ("uplink", "downlink"):
        for size in sorted({s for (dd, s, _) in got if dd == direction}):
            row = [direction, str(size)]
            ndr = {}
            for d in duts:
                cs = got.get((direction, size, d), [])
                vals = [c["ndr_pps"] for c in cs if c.get("ndr_pps")]
                ndr[d] = med(vals)
                row += [f(ndr[d]), spread(vals), f"{len(cs) - len(vals)}/{len(cs)}"]
            for d in duts:
                if d != "fwd":
                    x, y = ndr[d], ndr.get("fwd")
                    row.append(f(x / y if x and y else None, 1, "{:.2f}"))
            for key in ("cpu_ns_per_packet", "ns_per_packet"):
                row += [f(med([c["dut"].get(key) for c in got.get((direction, size, d), [])]), 1, "{:.0f}")
                        for d in duts]
            rows.append(tuple(row))
    print_table(tuple(head), rows, args.markdown)
    print(f"\n{args.runs} run(s) of {', '.join(NAMES[d] for d in duts)}, interleaved, the order rotating; "
          f"{args.duration:g} s trials, NDR search (at most 8 trials), 1024 flows; medians, spread min-max over "
          f"the runs with a result; gen-bound = runs whose result the generator set (no NDR claimed); "
          f"{os.cpu_count()} CPUs, kernel {platform.release()}; load average before/after {load0} / "
          f"{os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
