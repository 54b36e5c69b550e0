#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""How fast the DUT CPU wakes, with each way of keeping it out of halt this host offers (issue 26
item 3). Prints ONE table (docs/lab.md, "Idle").

    sudo flock /work/bench.lock .venv/bin/python bench/wakeup_latency.py [--rounds 3] [--wakeups 5000]
        [--period-us 200] [--markdown]

bench/wakeup_latency.c (built here with cc) wakes a SCHED_FIFO 50 thread on the DUT CPU from the
generator CPU every --period-us, as the generator's frames wake the DUT's receive threads, and times
each wake-up. Ways, interleaved, --rounds times each:
  none      nothing: with a cpuidle driver its idle states as they are, without one the CPU halts;
  cpuidle   the DUT CPU's idle states but polling off (only with a cpuidle driver);
  pm_qos    /dev/cpu_dma_latency held at 0 (a global PM QoS request) and the DUT CPU's
            power/pm_qos_resume_latency_us at "n/a": read only by cpuidle governors;
  spinner   gtplab.lab.awake's SCHED_IDLE spinner on the DUT CPU (what the lab does without cpuidle).
Per way: the wake-up latency's percentiles (medians over the rounds), and the DUT CPU's steal.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from tables import print_table  # noqa: E402


def build(tmp: str) -> str:
    out = os.path.join(tmp, "wakeup_latency")
    subprocess.run(["cc", "-O2", "-pthread", "-o", out, str(REPO / "bench" / "wakeup_latency.c")], check=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--wakeups", type=int, default=5000)
    ap.add_argument("--period-us", type=int, default=200)
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()

    from gtplab.kernel.sched import cpu_times
    from gtplab.lab import awake
    from gtplab.lab.cpu import CpuLayout

    lay = CpuLayout.default()
    gen, dut = lay.generator[0], lay.dut[0]
    ways = ["none", "pm_qos", "spinner"] + (["cpuidle"] if awake.idle_states(dut) else [])
    got: dict[str, list[list[float]]] = {w: [] for w in ways}
    steal: dict[str, list[float]] = {w: [] for w in ways}
    qos = Path(f"/sys/devices/system/cpu/cpu{dut}/power/pm_qos_resume_latency_us")
    load0 = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="gtplab-wakeup-") as tmp:
        exe = build(tmp)
        for _ in range(args.rounds):
            for w in ways:
                rec, fd, old = None, None, None
                try:
                    if w in ("spinner", "cpuidle"):
                        rec = awake.keep_awake([dut], w)
                        if not rec["applied"]:
                            raise SystemExit(f"wakeup_latency: {w} not applied: {rec['notes']}")
                    elif w == "pm_qos":
                        fd = os.open("/dev/cpu_dma_latency", os.O_WRONLY)
                        os.write(fd, (0).to_bytes(4, "little"))
                        old = qos.read_text().strip()
                        qos.write_text("n/a")
                    s0 = cpu_times()[dut].steal
                    out = subprocess.run([exe, str(args.wakeups), str(args.period_us), str(gen), str(dut), "50"],
                                         capture_output=True, text=True, check=True).stdout.split()
                    steal[w].append(cpu_times()[dut].steal - s0)
                    got[w].append([float(x) for x in out[1:]])
                finally:
                    if rec:
                        awake.restore(rec)
                    if fd is not None:
                        os.close(fd)
                    if old is not None:
                        qos.write_text(old)
    load1 = os.getloadavg()
    rows = []
    for w in ways:
        cols = list(zip(*got[w]))
        rows.append([w] + [f"{statistics.median(c):.1f}" for c in cols]
                    + [f"{min(c[-1] for c in got[w]):.0f}-{max(c[-1] for c in got[w]):.0f}",
                       f"{sum(steal[w]) * 1e3:.0f}"])
    print(f"{args.wakeups} wake-ups every {args.period_us} us per run, {args.rounds} round(s) interleaved, medians; "
          f"waker on CPU {gen}, SCHED_FIFO 50 sleeper on CPU {dut}; cpuidle driver: "
          f"{awake.cpuidle_driver() or 'none'}; load average before {load0[0]:.2f}, after {load1[0]:.2f}; "
          f"kernel {os.uname().release}")
    print_table(["way", "p50 us", "p90 us", "p99 us", "p99.9 us", "max us", "max spread us", "steal ms"], rows,
                markdown=args.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
