#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""ns per packet of the PGW-U's XDP programs, and the time to bulk-load 1,000,000 bearers.

    .venv/bin/python bench/pgwu_bench.py [--repeat N] [--rounds N] [--lab] [--markdown FILE]

Method (docs/benchmarks.md): BPF_PROG_TEST_RUN with `repeat` runs bench_restore
(bench/pgwu_bench.bpf.c), which gives every iteration a fresh frame and a random installed bearer,
then tail-calls the program under test. The wrapper's own cost (tail-calling an empty program) is
measured the same way and subtracted. The floor is a MAC-swap XDP_TX program measured the same way.
Every run of the data plane reads its verdict counters before and after and checks that every
iteration took the intended path (reason and verdict); a cell with one run that did not prints FAIL
instead of a number.
The runs are made in rounds: each round runs every cell once, and the wrapper alone once for each
kind of work it does (frame length, fields written), in a shuffled order. On a shared host the
noise comes and goes over seconds; this way every cell gets the quiet moments, instead of one cell
taking all its runs in a noisy one. A cell's number is the least of its rounds (noise only adds)
minus the least run of the wrapper doing the same work. Two data planes are loaded side by side,
one with 1 bearer and one with 1,000,000, so that both are measured in every round.
The next hop is resolved through the kernel's routes and neighbours (bpf_fib_lookup, with the route
cache) inside a private network namespace; `--lab` adds the cross-check with the kernel's own
per-program run time (kernel.bpf_stats_enabled) while live frames cross the lab's veths.

Everything created (netns, pins) has a unique name and is removed on exit, also on failure.
"""

from __future__ import annotations

import argparse
import os
import random
import secrets
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from gtplab import bpf  # noqa: E402
from gtplab import packets as P  # noqa: E402
from gtplab.dataplane import Dataplane, Nexthop  # noqa: E402
from gtplab.netns import Worker  # noqa: E402

PGWU = REPO / "dataplane" / "pgwu"
BENCH_OBJ = REPO / "bench" / "pgwu_bench.bpf.o"

LOCAL = "10.201.0.1"
SGW = "10.201.0.16"
SGI_GW = "10.202.0.2"
PDN = "198.18.0.1"
UE_BASE = 0x0A400001        # 10.64.0.1
TEID_BASE = 0x00010000
SGW_TEID_BASE = 0x80000000
GW_MAC = "02:00:00:00:02:02"
SGW_MAC = "02:00:00:00:01:02"

# struct bench_frame: len restore nbearers teid_off teid_base ue_off ue_base pad bytes[256]
FRAME_FMT = "=8I256s"
UL_TEID_OFF = 14 + 20 + 8 + 4        # outer Ethernet, IPv4, UDP, GTP flags/type/length
UL_UE_OFF = 14 + 20 + 8 + 8 + 12     # inner IPv4 source
DL_UE_OFF = 14 + 16                  # IPv4 destination
UL_MIN_SIZE = 82                     # Ethernet+IPv4+UDP+GTP-U + inner IPv4+UDP, with FCS


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    p = subprocess.run(list(argv), capture_output=True, text=True)
    if check and p.returncode:
        raise RuntimeError(f"Couldn't run {' '.join(argv)}: {p.stderr.strip() or p.stdout.strip()}")
    return p


def ip2int(a: str) -> int:
    return struct.unpack("!I", bytes(int(x) for x in a.split(".")))[0]


def int2ip(n: int) -> str:
    return ".".join(str(b) for b in struct.pack("!I", n))


class Cell:
    """One number of the table: a program on a frame, with a data plane configuration."""

    def __init__(self, key, prog, frame: bytes, ingress: str, dp=None, config=None, path=None,
                 nbearers: int = 0, teid_off: int = 0, ue_off: int = 0):
        self.key, self.prog, self.frame, self.ingress = key, prog, frame, ingress
        self.dp, self.config, self.path = dp, config or {}, path   # path: (reason, verdict) or None
        self.frame_value = struct.pack(FRAME_FMT, len(frame), min(len(frame), 256), nbearers, teid_off,
                                       TEID_BASE, ue_off, UE_BASE, 0, frame[:256].ljust(256, b"\0"))
        # what the wrapper does for this cell: restore len bytes, write a TEID and/or a UE address
        self.wrapper_work = (len(frame), bool(nbearers and teid_off), bool(nbearers and ue_off))
        self.target: list[int] = []
        self.wrapper: list[int] = []
        self.wrapper_min = 0.0   # set after the rounds: see pool_wrappers()
        self.failure = ""

    def ns(self) -> float:
        """Least target run minus the least wrapper run (noise only ever adds time)."""
        return min(self.target) - self.wrapper_min

    def shown(self) -> str:
        return "FAIL" if self.failure else f"{self.ns():.1f}"


def pool_wrappers(cells) -> None:
    """The wrapper does the same work behind any program for the same frame length and the same
    fields to write, so its runs are pooled over the cells that share that: the estimate of its
    cost gets every round of all of them, and cells compared with each other (checksum on / off,
    1 / 1,000,000 bearers) subtract the very same number."""
    best: dict[tuple, float] = {}
    for c in cells:
        if c.wrapper:
            best[c.wrapper_work] = min(best.get(c.wrapper_work, float("inf")), min(c.wrapper))
    for c in cells:
        c.wrapper_min = best[c.wrapper_work]


class Bench:
    def __init__(self, args):
        self.args = args
        uid = secrets.token_hex(3)
        self.ns = f"gtplab-bench-{uid}"
        self.pins = {"small": f"/sys/fs/bpf/gtplab-bench-{uid}-1", "big": f"/sys/fs/bpf/gtplab-bench-{uid}-m"}
        self.wrap_pin = f"/sys/fs/bpf/gtplab-benchw-{uid}"
        self.dps: dict[str, Dataplane] = {}
        self.objs: list = []
        self.applied: dict[int, dict] = {}   # id(data plane) -> the config last set on it
        self.worker: Worker | None = None
        self.checked = 0

    # --- setup / teardown ------------------------------------------------------------------------
    def setup(self) -> None:
        ns = self.ns
        sh("ip", "netns", "add", ns)
        for a, b in (("acc0", "acc1"), ("sgi0", "sgi1")):
            sh("ip", "-n", ns, "link", "add", a, "type", "veth", "peer", "name", b)
            sh("ip", "-n", ns, "link", "set", a, "mtu", "3200", "up")
            sh("ip", "-n", ns, "link", "set", b, "mtu", "3200", "up")
        sh("ip", "-n", ns, "addr", "add", f"{LOCAL}/24", "dev", "acc0")
        sh("ip", "-n", ns, "addr", "add", "10.202.0.1/24", "dev", "sgi0")
        sh("ip", "-n", ns, "neigh", "add", SGW, "lladdr", SGW_MAC, "dev", "acc0", "nud", "permanent")
        sh("ip", "-n", ns, "neigh", "add", SGI_GW, "lladdr", GW_MAC, "dev", "sgi0", "nud", "permanent")
        sh("ip", "-n", ns, "route", "add", "198.18.0.0/15", "via", SGI_GW)
        sh("ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv4.ip_forward=1")
        self.ifindex = {n: int(sh("ip", "-n", ns, "-o", "link", "show", n).stdout.split(":")[0])
                        for n in ("acc0", "sgi0")}
        self.worker = Worker(ns)   # one thread in the netns for every test run

        # the same capacity for both: the same table geometry, only the number installed differs
        for name, pin in self.pins.items():
            sh(str(PGWU), "-d", pin, "load", "--max-bearers", "1048576", "--local-addr", LOCAL,
               "--ue-pool", "10.64.0.0/12")
            self.dps[name] = Dataplane(pin)
            self.register_watcher(self.dps[name])
        os.makedirs(self.wrap_pin)
        sh("bpftool", "prog", "loadall", str(BENCH_OBJ), self.wrap_pin, "pinmaps", f"{self.wrap_pin}/maps")
        m = f"{self.wrap_pin}/maps"
        self.frame = bpf.Map.pinned(f"{m}/frame")
        self.base = bpf.Map.pinned(f"{m}/base")
        self.progs = bpf.Map.pinned(f"{m}/progs")
        self.wrap = bpf.Prog.pinned(f"{self.wrap_pin}/bench_restore")
        self.null = bpf.Prog.pinned(f"{self.wrap_pin}/bench_null")
        self.macswap = bpf.Prog.pinned(f"{self.wrap_pin}/bench_macswap")
        self.objs = [self.frame, self.base, self.progs, self.wrap, self.null, self.macswap]

    def teardown(self) -> None:
        if self.worker:
            self.worker.close()
        for o in self.objs:
            o.close()
        for name, dp in self.dps.items():
            dp.close()
        for pin in self.pins.values():
            sh(str(PGWU), "-d", pin, "unload", check=False)
        sh("rm", "-rf", self.wrap_pin, check=False)
        sh("ip", "netns", "del", self.ns, check=False)

    # --- measuring -------------------------------------------------------------------------------
    def register_watcher(self, dp: Dataplane) -> None:
        """Stand in for `pgwu watch`: the route cache is used only while a watcher is registered in
        fib_gen[1]. Nothing changes the bench's routes. It stays registered until this process
        exits (the exit hook ignores the exits of its threads)."""
        dp.maps["fib_gen"].update(struct.pack("=I", 1), struct.pack("=Q", os.getpid()))

    def time_one(self, prog: bpf.Prog, cell: Cell) -> int:
        """ns per iteration of bench_restore + prog on the cell's frame (the kernel's mean). One
        wrapper program for every measurement: copies of it, identical but for the slot they
        tail-call, differed by 10 to 20 ns here (where the JIT put them)."""
        self.progs.update(struct.pack("=I", 0), struct.pack("=I", prog.fd))
        self.base.update(struct.pack("=I", 0), struct.pack("=I", 0))
        return self.worker.call(target_run, self.wrap, cell.frame, self.args.repeat, self.ifindex[cell.ingress])

    def measure_wrapper(self, cell: Cell) -> None:
        """One run of the wrapper alone (tail-calling bench_null) on the cell's frame."""
        self.frame.update(struct.pack("=I", 0), cell.frame_value)
        cell.wrapper.append(self.time_one(self.null, cell))

    def measure(self, cell: Cell) -> None:
        """One run of the wrapper + the cell's program; the data plane's counters must show every
        iteration on the cell's path."""
        if cell.dp is not None and self.applied.get(id(cell.dp)) != cell.config:
            cell.dp.set_config(**cell.config)
            self.applied[id(cell.dp)] = dict(cell.config)
        self.frame.update(struct.pack("=I", 0), cell.frame_value)
        before = cell.dp.stats() if cell.path else None
        cell.target.append(self.time_one(cell.prog, cell))
        if cell.path:
            after = cell.dp.stats()
            delta = {k: after.get(k, (0, 0))[0] - before.get(k, (0, 0))[0] for k in after}
            delta = {k: v for k, v in delta.items() if v}
            if delta != {cell.path: self.args.repeat}:
                cell.failure = cell.failure or (f"{cell.key}: expected {self.args.repeat} x "
                                                f"{'/'.join(cell.path)}, got {delta}")
            else:
                self.checked += self.args.repeat


def target_run(prog: bpf.Prog, frame: bytes, repeat: int, ifindex: int) -> int:
    return prog.test_run(frame, repeat=repeat, ingress_ifindex=ifindex).duration


def build_uplink(size: int) -> bytes:
    s = max(size, UL_MIN_SIZE)

    def make(n):
        inner = P.ip_packet(int2ip(UE_BASE), PDN, l4="udp", payload_len=n)
        return bytes(P.gtpu(inner, teid=TEID_BASE, src=SGW, dst=LOCAL, src_mac=SGW_MAC,
                            dst_mac="02:00:00:00:01:01"))
    f = make(s - 4 - len(make(0)))
    assert len(f) + 4 == s, (len(f), s)
    return f


def build_downlink(size: int, udp_csum: bool = True) -> bytes:
    f = bytes(P.downlink_ip(ue=int2ip(UE_BASE), src=PDN, size=size, src_mac=GW_MAC, dst_mac="02:00:00:00:02:01",
                            udp_csum=udp_csum))
    assert len(f) + 4 == size
    return f


def lab_crosscheck(sizes: list[int]) -> list[str]:
    """The DUT's ns per packet from the kernel's run-time stats while live frames cross the lab
    (what `gtplab sweep` records as dut.ns_per_packet), single flow, checksum off and on."""
    import json
    with tempfile.TemporaryDirectory(prefix="gtplab-bench-") as tmp:
        cp = subprocess.run([sys.executable, "-m", "gtplab", "sweep", "--sizes", ",".join(map(str, sizes)),
                             "--flow-modes", "single", "--checksum", "off,on", "--duration", "2",
                             "--pcap-limit", "0", "--out", f"{tmp}/r"], cwd=REPO, capture_output=True,
                            text=True)
        if cp.returncode:
            raise RuntimeError(f"Couldn't run the lab sweep: {cp.stderr.strip()[-2000:]}")
        cases = [json.loads(ln) for ln in open(f"{tmp}/r/cases.jsonl")]
    out = ["Lab cross-check: live frames through the veths of `gtplab sweep` (single flow, 2 s per case), "
           "the DUT program's own run time per packet (kernel.bpf_stats_enabled: run_time_ns / run_cnt)",
           "", "| case | frame B | checksum | packets forwarded | ns/pkt (kernel stats) |", "|---|---:|---|---:|---:|"]
    for c in sorted(cases, key=lambda c: (c["direction"], c["checksum"], c["frame_size"])):
        d = c.get("dut") or {}
        out.append(f"| {c['direction']} | {c['frame_size']} | {c['checksum']} | {d.get('fwd_packets')} | "
                   f"{d.get('ns_per_packet') or float('nan'):.1f} |")
    return out


def bearer_file(path: str, n: int) -> None:
    with open(path, "w") as f:
        f.write("".join(f"{TEID_BASE + i} {int2ip(UE_BASE + i)} {SGW} {SGW_TEID_BASE + i}\n" for i in range(n)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=20_000, help="iterations per test run (default 20000)")
    ap.add_argument("--rounds", type=int, default=100,
                    help="rounds; each measures every cell once, and a cell's number is the least of its "
                         "rounds (default 100)")
    ap.add_argument("--sizes", default="64,512,1424,3024", help="frame sizes incl. FCS (default 64,512,1424,3024)")
    ap.add_argument("--bearers", type=int, default=1_000_000, help="the large table (default 1000000)")
    ap.add_argument("--markdown", help="also write the table to this file")
    ap.add_argument("--lab", action="store_true",
                    help="also cross-check in the lab: a short `gtplab sweep` of live frames through veths, "
                         "with the kernel's own per-program run time (kernel.bpf_stats_enabled)")
    args = ap.parse_args()
    if os.geteuid():
        sys.exit("pgwu_bench: must run as root")
    if args.repeat < 1 or args.rounds < 1 or not 1 <= args.bearers <= 1048576:
        sys.exit("pgwu_bench: --repeat and --rounds must be >= 1, --bearers in 1..1048576")
    try:
        sizes = [int(s) for s in args.sizes.split(",")]
    except ValueError:
        sys.exit(f"pgwu_bench: --sizes: not a list of integers: {args.sizes}")
    if any(not 64 <= s <= 3024 for s in sizes):
        sys.exit("pgwu_bench: --sizes must be within 64..3024")
    if 1424 not in sizes:  # the checksum target and the extra rows are at 1424 B
        sizes.append(1424)
    big = args.bearers

    b = Bench(args)
    lines: list[str] = []
    failures: list[str] = []
    try:
        b.setup()
        small, large = b.dps["small"], b.dps["big"]
        small.add_bearer(TEID_BASE, int2ip(UE_BASE), SGW, SGW_TEID_BASE)
        with tempfile.NamedTemporaryFile("w", suffix=".bearers", delete=False) as tf:
            path = tf.name
        try:
            bearer_file(path, big)
            t0 = time.monotonic()
            sh(str(PGWU), "-d", b.pins["big"], "session", "load", path)
            load_s = time.monotonic() - t0
        finally:
            os.unlink(path)

        fib = dict(csum=False, fib_cache=True, nexthop=small.get_config().nexthop)
        static = dict(fib, nexthop=(Nexthop(b.ifindex["acc0"], "02:00:00:00:01:01", SGW_MAC),
                                    Nexthop(b.ifindex["sgi0"], "02:00:00:00:02:01", GW_MAC)))
        rows = [("uplink decap", "xdp_access", "acc0", "ul_fwd", "redirect", False),
                ("downlink encap, csum off", "xdp_sgi", "sgi0", "dl_fwd", "redirect", False),
                ("downlink encap, csum on", "xdp_sgi", "sgi0", "dl_fwd", "redirect", True)]
        cells: dict = {}

        def add(key, *a, **kw):
            cells[key] = Cell(key, *a, **kw)

        for s in sizes:
            add(("floor", s), b.macswap, build_downlink(s), "sgi0", nbearers=1, ue_off=DL_UE_OFF)
        for name, prog, ing, reason, verdict, csum in rows:
            for s in sizes:
                if prog == "xdp_access":
                    f, kw = build_uplink(s), dict(teid_off=UL_TEID_OFF, ue_off=UL_UE_OFF)
                else:
                    f, kw = build_downlink(s), dict(ue_off=DL_UE_OFF)
                for col, dp, nb in ((1, small, 1), ("big-hot", large, 1), (big, large, big)):
                    add((name, s, col), dp.progs[prog], f, ing, dp=dp, config=dict(fib, csum=csum),
                        path=(reason, verdict), nbearers=nb, **kw)
        extra = {
            "downlink encap, csum on, inner UDP csum 0 (full sum), 1424 B":
                ("xdp_sgi", build_downlink(1424, udp_csum=False), "sgi0", dict(fib, csum=True), ("dl_fwd", "redirect")),
            "uplink decap, route lookup without the cache, 1424 B":
                ("xdp_access", build_uplink(1424), "acc0", dict(fib, fib_cache=False), ("ul_fwd", "redirect")),
            "uplink decap, static next hop (no route lookup), 1424 B":
                ("xdp_access", build_uplink(1424), "acc0", static, ("ul_fwd", "redirect")),
            "downlink encap, csum off, static next hop (no route lookup), 1424 B":
                ("xdp_sgi", build_downlink(1424), "sgi0", static, ("dl_fwd", "redirect")),
            "an ARP request passed to the kernel (parse, count, XDP_PASS), 64 B":
                ("xdp_access", bytes(P.arp_request()), "acc0", fib, ("pass_not_ipv4", "pass")),
        }
        for k, (prog, f, ing, cfg, path) in extra.items():
            kw = dict(teid_off=UL_TEID_OFF, ue_off=UL_UE_OFF) if prog == "xdp_access" and "ARP" not in k else \
                dict(ue_off=DL_UE_OFF) if prog == "xdp_sgi" else {}
            add(k, small.progs[prog], f, ing, dp=small, config=cfg, path=path,
                nbearers=1 if kw else 0, **kw)

        order = list(cells.values())
        rng = random.Random(1)
        t0 = time.monotonic()
        # the wrapper alone: once per round for each kind of work it does (pool_wrappers)
        kinds = list({c.wrapper_work: c for c in order}.values())
        jobs = [(b.measure, c) for c in order] + [(b.measure_wrapper, c) for c in kinds]
        for r in range(args.rounds):
            rng.shuffle(jobs)
            for fn, c in jobs:
                fn(c)
            print(f"round {r + 1}/{args.rounds}: {time.monotonic() - t0:.0f} s", file=sys.stderr)
        pool_wrappers(cells.values())
        failures = [c.failure for c in cells.values() if c.failure]
        floor = {s: cells[("floor", s)].ns() for s in sizes}

        def val(key) -> float | None:
            c = cells[key]
            return None if c.failure else c.ns()

        hdr = (f"| case | frame B | ns/pkt, 1 bearer | {big:,} bearers, same one | ratio | "
               f"{big:,} bearers, random one | above floor (1 / {big:,} same) |")
        lines += [hdr, "|---|---:|---:|---:|---:|---:|---:|"]
        for s in sizes:
            lines.append(f"| floor: MAC swap + XDP_TX | {s} | {floor[s]:.1f} | | | | |")
        for name, *_ in rows:
            for s in sizes:
                a, h, z = (cells[(name, s, k)] for k in (1, "big-hot", big))
                shown = f"{max(s, UL_MIN_SIZE)}" + ("*" if name.startswith("uplink") and s < UL_MIN_SIZE else "")
                if a.failure or h.failure or z.failure:
                    lines.append(f"| {name} | {shown} | {a.shown()} | {h.shown()} | | {z.shown()} | |")
                    continue
                lines.append(f"| {name} | {shown} | {a.shown()} | {h.shown()} | {h.ns() / a.ns():.2f} | "
                             f"{z.shown()} | {a.ns() - floor[s]:.1f} / {h.ns() - floor[s]:.1f} |")
        lines += ["", "| other | ns/pkt |", "|---|---:|"]
        for k in extra:
            lines.append(f"| {k} | {cells[k].shown()} |")
        for s in sizes:
            lines.append(f"| wrapper (restore + tail call), subtracted above, {s} B | "
                         f"{cells[('floor', s)].wrapper_min:.1f} |")
        lines.append(f"| bulk load of {big:,} bearers (`pgwu session load`), seconds | {load_s:.2f} |")
        lines.append("")
        targets = []
        on, off = val(("downlink encap, csum on", 1424, 1)), val(("downlink encap, csum off", 1424, 1))
        if on is not None and off is not None:
            targets.append(f"checksum on / off at 1424 B: {on / off:.2f} (target <= 1.10)")
        pairs = [(val((n, s, "big-hot")), val((n, s, 1))) for n, *_ in rows for s in sizes]
        worst = max((h / a for h, a in pairs if h is not None and a is not None), default=float("nan"))
        targets.append(f"{big:,} bearers installed / 1, worst cell: {worst:.2f} (target <= 1.25)")
        above = max((v - floor[s] for n, *_ in rows for s in sizes for k in (1, "big-hot")
                     if (v := val((n, s, k))) is not None), default=float("nan"))
        targets.append(f"worst full packet above the floor: {above:.1f} ns (target <= 120)")
        targets.append(f"bulk load: {load_s:.2f} s (target <= 5)")
        lines.append("Targets: " + "; ".join(targets) + ".")
        lines.append(f"Path check: {b.checked:,} iterations counted by the data plane's verdict counters, "
                     f"each with the intended reason and verdict; {len(failures)} cells failed.")
        lines.append(f"Method: {args.rounds} rounds, each {len(cells)} cells and {len(kinds)} runs of the wrapper alone, "
                     f"shuffled, {args.repeat:,} iterations per run; each cell the least of its rounds minus the "
                     "least wrapper run on the same work.")
        if any(s < UL_MIN_SIZE for s in sizes):
            lines.append(f"* an uplink G-PDU with inner IPv4/UDP is at least {UL_MIN_SIZE} B on the wire.")
    finally:
        b.teardown()
    if args.lab:
        lines += [""] + lab_crosscheck(sizes)
    out = "\n".join(lines)
    print(out)
    for f in failures:
        print("FAIL:", f, file=sys.stderr)
    if args.markdown:
        Path(args.markdown).write_text(out + "\n")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
