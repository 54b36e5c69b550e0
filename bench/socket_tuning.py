#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""The socket-path tuning experiment in one command: what each socket trick buys, step by step, on the
CPUs the lab has, next to the XDP PGW-U and the XDP forwarder. Prints ONE table and plots it.

    sudo .venv/bin/python bench/socket_tuning.py [--lab-config embedded] [--sizes 64] [--runs 1]
                                                 [--rate-mode ndr] [--markdown] [--plot FILE.png]

The classic receive experiments, as measured steps (docs/socket.md): recvfrom/sendto in one thread,
then recvmmsg/sendmmsg (batch 64, 256), a larger socket buffer, busy polling, SO_PREFER_BUSY_POLL,
workers at the NAPI threads' real-time priority (the receive livelock of one CPU), one thread per DUT
CPU in an SO_REUSEPORT group (at least two: on one CPU, two threads share it), the same threads on
one shared socket, UDP GRO. Each step is one `gtplab sweep --dut
socket` of both directions with that step's knobs (a lab config written from --lab-config with
`dut.socket`), then `--dut pgwu` and `--dut fwd`, each its own lab with the same CPU layout; with
--runs N the whole list runs N times, in order, and the table gives medians. Per step and direction:
the NDR (or PDR), what it bought against the step before and the first, the DUT's CPU ns per packet
(its NAPI threads and the socket path's threads), and where the packets were lost just above the
result (the case's receive-path summary: the dominant loss point). The results directories are kept
under --keep (default: removed).
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

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO))

from tables import median as med, num as f, print_table, spread  # noqa: E402

from gtplab.lab import config as labconfig  # noqa: E402


def steps(n_cpus: int) -> list[tuple[str, dict | None, str]]:
    """(name, socket knobs or None, DUT mode): the cumulative steps for a lab with n_cpus DUT CPUs,
    then the XDP PGW-U and the forwarder."""
    threads = max(2, n_cpus)
    k = {"threads": 1, "batch": 1}
    out = [("recvfrom/sendto, 1 thread", dict(k), "socket")]
    k["batch"] = 64
    out.append(("+ recvmmsg/sendmmsg, batch 64", dict(k), "socket"))
    k["batch"] = 256
    out.append(("+ batch 256", dict(k), "socket"))
    k["rcvbuf"] = 4 << 20
    out.append(("+ SO_RCVBUF 4 MiB", dict(k), "socket"))
    out.append(("+ SO_BUSY_POLL 50 us", dict(k, busy_poll=50), "socket"))
    out.append(("+ SO_PREFER_BUSY_POLL, budget 64",
                dict(k, busy_poll=50, prefer_busy_poll=True, busy_poll_budget=64), "socket"))
    # the NAPI threads run SCHED_FIFO 50 on the same CPUs: at the same priority the workers get the
    # CPU whenever the receive side has nothing left, instead of only when no real-time thread runs
    k["rt_priority"] = 50
    out.append(("no busy poll; workers SCHED_FIFO 50", dict(k), "socket"))
    k["threads"] = threads
    out.append((f"+ {threads} threads, SO_REUSEPORT", dict(k), "socket"))
    out.append((f"{threads} threads, one shared socket", dict(k, reuseport=False), "socket"))
    out.append((f"{threads} threads, SO_REUSEPORT, UDP GRO", dict(k, gro=True), "socket"))
    out.append(("XDP PGW-U", None, "pgwu"))
    out.append(("XDP forwarder", None, "fwd"))
    return out


def lab_config(base: labconfig.LabConfig, knobs: dict | None, mode: str, path: Path) -> Path:
    """A lab config file: base's, with dut.mode and (socket) dut.socket."""
    data = yaml.safe_load(Path(base.path).read_text())
    data["name"] = f"{base.name}-{mode}"
    data["dut"] = {**(data.get("dut") or {}), "mode": mode}
    data["dut"].pop("socket", None)
    if knobs is not None:
        data["dut"]["socket"] = knobs
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def sweep(out: Path, cfg: Path, sizes: str, rate_mode: str, duration: float) -> list[dict]:
    cp = subprocess.run([sys.executable, "-m", "gtplab", "sweep", "--lab-config", str(cfg), "--no-scale",
                         "--sizes", sizes, "--rate-mode", rate_mode, "--duration", str(duration),
                         "--pcap-limit", "0", "--no-latency", "--out", str(out)],
                        cwd=REPO, capture_output=True, text=True)
    if cp.returncode not in (0, 1):     # 1: a conservation failure, recorded in the cases
        raise SystemExit(f"socket_tuning: gtplab sweep ({cfg.name}) failed ({cp.returncode}): {cp.stderr[-2000:]}")
    return [json.loads(ln) for ln in (out / "cases.jsonl").read_text().splitlines() if ln.strip()]


def where_lost(c: dict) -> str:
    """The case's dominant loss point just above its result, shortened for a table cell."""
    rx = c.get("rx_path") or {}
    pts = rx.get("loss_points") or []
    if not pts:
        return "-"
    p = pts[0]
    total = sum(x["packets"] for x in pts)
    return f"{p['key']} {p['packets'] / total:.0%}"


def plot(rows: list[dict], path: str, title: str, rate_mode: str) -> None:
    """Per direction, a bar per step: its NDR (solid) and what it delivered flat out (light)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    dirs = sorted({r["direction"] for r in rows}, key=lambda d: d != "uplink")
    fig, axes = plt.subplots(1, len(dirs), figsize=(7.5 * len(dirs), 5.5), squeeze=False)
    for ax, d in zip(axes[0], dirs):
        rs = [r for r in rows if r["direction"] == d]
        ys = range(len(rs))
        colors = ["tab:blue" if r["mode"] == "socket" else "tab:orange" if r["mode"] == "pgwu" else "tab:gray"
                  for r in rs]
        ax.barh([y - 0.2 for y in ys], [r["mpps"] or 0 for r in rs], height=0.4, color=colors,
                label=f"{rate_mode} (no loss)" if rate_mode == "NDR" else rate_mode)
        ax.barh([y + 0.2 for y in ys], [r["top"] or 0 for r in rs], height=0.4, color=colors, alpha=0.35,
                label="delivered, offered flat out")
        ax.set_yticks(list(ys), [r["step"] for r in rs], fontsize=8)
        ax.invert_yaxis()
        ax.set_xscale("symlog", linthresh=0.01)
        ax.set_xlabel("Mpps (log scale above 0.01)")
        ax.set_title(f"{d} {rs[0]['size']} B" if rs else d)
        ax.legend(fontsize=7, loc="upper right")
    fig.suptitle(title, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def run_steps(todo, base, work: Path, tag: str, sizes: str, args) -> dict[tuple, list[dict]]:
    """Every step's sweep, args.runs times in order: {(step index, direction, size): [cases]}."""
    got: dict[tuple, list[dict]] = {}
    for run in range(args.runs):
        for i, (name, knobs, mode) in enumerate(todo):
            out = work / f"{tag}-run{run}-step{i}"
            if args.again:          # the results of an earlier run kept with --keep
                cases = [json.loads(ln) for ln in (out / "cases.jsonl").read_text().splitlines() if ln.strip()]
            else:
                cfg = lab_config(base, knobs, mode, work / f"lab-{tag}-{i}.yaml")
                print(f"socket_tuning: {tag} run {run + 1}/{args.runs}, step {i + 1}/{len(todo)}: {name}",
                      file=sys.stderr)
                cases = sweep(out, cfg, sizes, args.rate_mode, args.duration)
            for c in cases:
                got.setdefault((i, c["direction"], c["frame_size"]), []).append(c)
    return got


def knob_text(knobs: dict | None) -> str:
    return "-" if knobs is None else " ".join(f"{k}={v}" for k, v in knobs.items())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lab-config", default="embedded", help="the lab config the steps start from")
    ap.add_argument("--sizes", default="64", help="frame sizes of the steps (uplink below 82 B runs at 82)")
    ap.add_argument("--compare-sizes", default="64,512,1424",
                    help="frame sizes of the second table: the best socket step, the XDP PGW-U and the "
                         "forwarder (\"\": no second table)")
    ap.add_argument("--runs", type=int, default=1, help="times the whole list of steps runs (medians)")
    ap.add_argument("--rate-mode", choices=("ndr", "pdr"), default="ndr")
    ap.add_argument("--duration", type=float, default=1.0, help="seconds per trial")
    ap.add_argument("--only", help="only the steps whose name contains this (comma-separated)")
    ap.add_argument("--keep", metavar="DIR", help="keep the results directories here")
    ap.add_argument("--again", action="store_true",
                    help="with --keep DIR: no traffic, the tables and plot again from DIR's results")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--plot", metavar="FILE.png", help="also plot the steps' table (default: none)")
    args = ap.parse_args()
    base = labconfig.load(args.lab_config)
    if base.backend != "local":
        raise SystemExit("socket_tuning: the socket path runs on the namespace lab (backend local)")
    dut_cpus = base.cpu_layout().dut
    todo = steps(len(dut_cpus))
    if args.only:
        want = [w.strip() for w in args.only.split(",")]
        todo = [s for s in todo if any(w in s[0] for w in want)]
    if args.again and not args.keep:
        raise SystemExit("socket_tuning: --again reads the results an earlier --keep DIR kept: give --keep DIR")
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="gtplab-socket-tuning-"))
    work.mkdir(parents=True, exist_ok=True)
    load0 = f"{os.getloadavg()[0]:.2f}"
    rm = args.rate_mode.upper()
    try:
        got = run_steps(todo, base, work, "steps", args.sizes, args)
        # the best socket step: the highest sum over directions at the steps' first size
        size0 = min(s for (_, _, s) in got)
        scored = [(sum(med([c.get("ndr_pps") for c in got.get((i, d, sz), [])]) or 0
                       for d in ("uplink", "downlink") for sz in {size0, 82}), i)
                  for i, (_, _, mode) in enumerate(todo) if mode == "socket"]
        best_i = max(scored)[1] if scored else None
        cmp_todo = ([(f"socket: {todo[best_i][0]}", todo[best_i][1], "socket")] if best_i is not None else []) + \
            [s for s in steps(len(dut_cpus)) if s[2] != "socket"]
        cmp = run_steps(cmp_todo, base, work, "compare", args.compare_sizes, args) if args.compare_sizes else {}
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)

    head = ("step", "knobs", "direction", "frame B", f"{rm} Mpps", "runs: min-max", "x step before", "x first step with one",
            "flat out: delivered Mpps", "DUT CPU ns/pkt", "lost above it at", "host-disturbed trials", "conservation")
    rows, plotted = [], []
    for d in ("uplink", "downlink"):
        for size in sorted({s for (_, dd, s) in got if dd == d}):
            first = prev = None
            for i, (name, knobs, mode) in enumerate(todo):
                cs = got.get((i, d, size), [])
                m = med([c.get("ndr_pps") for c in cs])
                rows.append(row(name, knob_text(knobs), d, size, cs, m,
                                m / prev if m and prev and mode == "socket" else None,
                                m / first if m and first else None))
                top = med([c["trials"][0].get("rx_pps") for c in cs if c.get("trials")])
                plotted.append({"step": name, "mode": mode, "direction": d, "size": size,
                                "mpps": m / 1e6 if m else None, "top": top / 1e6 if top else None})
                if mode == "socket":
                    prev = m or prev
                    first = first or m
    print_table(head, rows, args.markdown)
    note = (("results of an earlier run; " if args.again else "") + f"{args.runs} run(s) of the steps in order; {args.duration:g} s trials, {rm} search (at most 8 "
            f"trials); medians; DUT CPU(s) {','.join(map(str, dut_cpus))} of lab config {base.name}; "
            f"kernel {platform.release()}; {os.cpu_count()} CPUs"
            + ("" if args.again else f"; load average before/after {load0} / {os.getloadavg()[0]:.2f}"))
    print("\n" + note)
    if cmp:
        print()
        head2 = ("DUT", "knobs", "direction", "frame B", f"{rm} Mpps", "runs: min-max", "x XDP PGW-U", "x forwarder",
                 "flat out: delivered Mpps", "DUT CPU ns/pkt", "lost above it at", "host-disturbed trials",
                 "conservation")
        rows2 = []
        for d in ("uplink", "downlink"):
            for size in sorted({s for (_, dd, s) in cmp if dd == d}):
                ms = {i: med([c.get("ndr_pps") for c in cmp.get((i, d, size), [])])
                      for i in range(len(cmp_todo))}
                xdp = next((ms[i] for i, t in enumerate(cmp_todo) if t[2] == "pgwu"), None)
                fwd = next((ms[i] for i, t in enumerate(cmp_todo) if t[2] == "fwd"), None)
                for i, (name, knobs, mode) in enumerate(cmp_todo):
                    m = ms[i]
                    rows2.append(row(name, knob_text(knobs), d, size, cmp.get((i, d, size), []), m,
                                     m / xdp if m and xdp else None, m / fwd if m and fwd else None))
        print_table(head2, rows2, args.markdown)
    if args.plot:
        plot(plotted, args.plot, note, rm)
        print(f"plot: {args.plot}")
    return 0


def row(name, knobs, d, size, cs, m, r1, r2) -> tuple[str, ...]:
    """A table row; "runs: min-max" is the spread of the result over the runs that claimed one (of how many
    ran); "flat out" is the first trial's, at the generator's top rate: what the DUT still
    delivers when it is offered more than it can take (a receive livelock shows there); "host-disturbed
    trials": how many of the runs' trials the host disturbed (on a shared machine: most)."""
    cpu = med([(c.get("dut") or {}).get("cpu_ns_per_packet") for c in cs])
    got = [c["ndr_pps"] for c in cs if c.get("ndr_pps") is not None]
    ok = all(c.get("conservation_ok") for c in cs)
    gen = sum(1 for c in cs if c.get("generator_bound"))
    top = med([c["trials"][0].get("rx_pps") for c in cs if c.get("trials")])
    return (name, knobs, d, str(size), f(m) + (f" ({gen} gen-bound)" if gen else ""),
            spread(got) + (f" ({len(got)} of {len(cs)} runs)" if len(cs) > 1 else ""),
            f(r1, 1, "{:.2f}"), f(r2, 1, "{:.2f}"), f(top), f(cpu, 1, "{:.0f}"),
            "; ".join(where_lost(c) for c in cs) or "-", disturbed(cs),
            "exact" if ok and cs else "FAILED" if cs else "-")


def disturbed(cs: list[dict]) -> str:
    """Trials the host disturbed (gtplab.observe.host: other tasks or steal on the lab's CPUs) of all
    the runs' trials; "-" for results of a sweep that did not measure it."""
    hs = [c["host"] for c in cs if (c.get("host") or {}).get("trials")]
    return f"{sum(h['disturbed'] for h in hs)}/{sum(h['trials'] for h in hs)}" if hs else "-"


if __name__ == "__main__":
    sys.exit(main())
