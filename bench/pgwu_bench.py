#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""ns per packet of the PGW-U's XDP programs, and the time to bulk-load 1,000,000 bearers.

    .venv/bin/python bench/pgwu_bench.py [--repeat N] [--runs N] [--markdown FILE]

Method (docs/benchmarks.md): BPF_PROG_TEST_RUN with `repeat` runs bench_restore
(bench/pgwu_bench.bpf.c), which gives every iteration a fresh frame and a random installed bearer,
then tail-calls the program under test. The wrapper's own cost (tail-calling an empty program) is
measured the same way and subtracted. The floor is a MAC-swap XDP_TX program measured the same way.
Every cell reads the verdict counters before and after and checks that every iteration took the
intended path (reason and verdict); a cell that did not prints FAIL instead of a number.
The next hop is resolved through the kernel's routes and neighbours (bpf_fib_lookup, with the route
cache) inside a private network namespace; `--lab` adds the cross-check with the kernel's own
per-program run time (kernel.bpf_stats_enabled) while live frames cross the lab's veths.

Everything created (netns, pins) has a unique name and is removed on exit, also on failure.
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
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
from gtplab.lab import run_in_netns  # noqa: E402

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


class Bench:
    def __init__(self, args):
        self.args = args
        uid = secrets.token_hex(3)
        self.ns = f"gtplab-bench-{uid}"
        self.pin = f"/sys/fs/bpf/gtplab-bench-{uid}"
        self.wrap_pin = f"/sys/fs/bpf/gtplab-benchw-{uid}"
        self.dp: Dataplane | None = None
        self.objs: list = []

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

        sh(str(PGWU), "-d", self.pin, "load", "--max-bearers", "1048576", "--local-addr", LOCAL,
           "--ue-pool", "10.64.0.0/12")
        self.dp = Dataplane(self.pin)
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
        for o in self.objs:
            o.close()
        if self.dp:
            self.dp.close()
        sh(str(PGWU), "-d", self.pin, "unload", check=False)
        sh("rm", "-rf", self.wrap_pin, check=False)
        sh("ip", "netns", "del", self.ns, check=False)

    # --- measuring -------------------------------------------------------------------------------
    def register_watcher(self) -> None:
        """Stand in for `pgwu watch`: the route cache is used only while a watcher is registered in
        fib_gen[1]. Nothing changes the bench's routes, and this process's exit clears it."""
        self.dp.maps["fib_gen"].update(struct.pack("=I", 1), struct.pack("=Q", os.getpid()))

    def run(self, target: bpf.Prog, frame: bytes, ingress: str, nbearers: int = 0, teid_off: int = 0,
            ue_off: int = 0) -> float:
        """ns per iteration of target on frame, the wrapper's cost subtracted: each run times
        bench_restore + bench_null and bench_restore + target back to back on the same frame and
        bearers; the least time of each over the runs is taken (noise only adds), then subtracted."""
        self.frame.update(struct.pack("=I", 0), struct.pack(
            FRAME_FMT, len(frame), min(len(frame), 256), nbearers, teid_off, TEID_BASE, ue_off, UE_BASE, 0,
            frame[:256].ljust(256, b"\0")))
        ifindex = self.ifindex[ingress]
        diffs, wraps = [], []
        for _ in range(self.args.runs):
            t = {}
            for name, prog in (("null", self.null), ("target", target)):
                self.progs.update(struct.pack("=I", 0), struct.pack("=I", prog.fd))
                self.base.update(struct.pack("=I", 0), struct.pack("=I", 0))
                self.register_watcher()
                t[name] = run_in_netns(self.ns, target_run, self.wrap, frame, self.args.repeat, ifindex).duration
            diffs.append(t["target"])
            wraps.append(t["null"])
        # noise on a shared box only ever adds time: the least of the runs is the best estimate
        self.last_wrapper = min(wraps)
        return min(diffs) - min(wraps)

    def cell(self, prog: str, frame: bytes, ingress: str, reason: str, verdict: str, **kw) -> str:
        before = self.dp.stats()
        ns = self.run(self.dp.progs[prog], frame, ingress, **kw)
        after = self.dp.stats()
        total = self.args.repeat * self.args.runs
        delta = {k: after.get(k, (0, 0))[0] - before.get(k, (0, 0))[0] for k in after}
        delta = {k: v for k, v in delta.items() if v}
        if delta != {(reason, verdict): total}:
            self.failures.append(f"{prog} {len(frame) + 4} B: expected {total} x {reason}/{verdict}, got {delta}")
            return "FAIL"
        self.checked += total
        return f"{ns:.1f}"


def target_run(prog: bpf.Prog, frame: bytes, repeat: int, ifindex: int):
    return prog.test_run(frame, repeat=repeat, ingress_ifindex=ifindex)


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
    ap.add_argument("--repeat", type=int, default=200_000, help="iterations per test run (default 200000)")
    ap.add_argument("--runs", type=int, default=5, help="test runs per cell; the least is used (default 5)")
    ap.add_argument("--sizes", default="64,512,1424,3024", help="frame sizes incl. FCS (default 64,512,1424,3024)")
    ap.add_argument("--bearers", type=int, default=1_000_000, help="the large table (default 1000000)")
    ap.add_argument("--markdown", help="also write the table to this file")
    ap.add_argument("--lab", action="store_true",
                    help="also cross-check in the lab: a short `gtplab sweep` of live frames through veths, "
                         "with the kernel's own per-program run time (kernel.bpf_stats_enabled)")
    args = ap.parse_args()
    if os.geteuid():
        sys.exit("pgwu_bench: must run as root")
    sizes = [int(s) for s in args.sizes.split(",")]
    if 1424 not in sizes:  # the checksum target and the extra rows are at 1424 B
        sizes.append(1424)

    b = Bench(args)
    b.failures, b.checked = [], 0
    lines: list[str] = []
    try:
        b.setup()
        dp = b.dp
        dp.set_config(csum=False, fib_cache=True)
        dl = b.ifindex
        # the wrapper's cost, and the floor, per frame size
        wrapper, floor = {}, {}
        for s in sizes:
            f = build_downlink(s)
            floor[s] = b.run(b.macswap, f, "sgi0", nbearers=1, ue_off=DL_UE_OFF)
            wrapper[s] = b.last_wrapper

        rows = [("uplink decap", "xdp_access", "acc0", "ul_fwd", "redirect", False),
                ("downlink encap, csum off", "xdp_sgi", "sgi0", "dl_fwd", "redirect", False),
                ("downlink encap, csum on", "xdp_sgi", "sgi0", "dl_fwd", "redirect", True)]
        results: dict[tuple[str, int, int], str] = {}

        def measure_all(nb: int, key=None):
            key = key if key is not None else nb
            for name, prog, ing, reason, verdict, csum in rows:
                dp.set_config(csum=csum)
                for s in sizes:
                    if prog == "xdp_access":
                        f = build_uplink(s)
                        kw = dict(nbearers=nb, teid_off=UL_TEID_OFF, ue_off=UL_UE_OFF)
                    else:
                        f = build_downlink(s)
                        kw = dict(nbearers=nb, ue_off=DL_UE_OFF)
                    results[(name, s, key)] = b.cell(prog, f, ing, reason, verdict, **kw)

        dp.add_bearer(TEID_BASE, int2ip(UE_BASE), SGW, SGW_TEID_BASE)
        measure_all(1)
        # the extra rows: where the next hop comes from, and the full-sum checksum fallback (1 bearer)
        extra = {}
        f = build_downlink(1424, udp_csum=False)
        dp.set_config(csum=True)
        extra["downlink encap, csum on, inner UDP csum 0 (full sum), 1424 B"] = b.cell(
            "xdp_sgi", f, "sgi0", "dl_fwd", "redirect", nbearers=1, ue_off=DL_UE_OFF)
        dp.set_config(csum=False, fib_cache=False)
        extra["uplink decap, route lookup without the cache, 1424 B"] = b.cell(
            "xdp_access", build_uplink(1424), "acc0", "ul_fwd", "redirect", nbearers=1,
            teid_off=UL_TEID_OFF, ue_off=UL_UE_OFF)
        dp.set_config(fib_cache=True)
        cfg = dp.get_config()
        static = (Nexthop(b.ifindex["acc0"], "02:00:00:00:01:01", SGW_MAC),
                  Nexthop(b.ifindex["sgi0"], "02:00:00:00:02:01", GW_MAC))
        dp.set_config(nexthop=static)
        extra["uplink decap, static next hop (no route lookup), 1424 B"] = b.cell(
            "xdp_access", build_uplink(1424), "acc0", "ul_fwd", "redirect", nbearers=1,
            teid_off=UL_TEID_OFF, ue_off=UL_UE_OFF)
        extra["downlink encap, csum off, static next hop (no route lookup), 1424 B"] = b.cell(
            "xdp_sgi", build_downlink(1424), "sgi0", "dl_fwd", "redirect", nbearers=1, ue_off=DL_UE_OFF)
        dp.set_config(nexthop=cfg.nexthop)
        arp = bytes(P.arp_request())
        extra["an ARP request passed to the kernel (parse, count, XDP_PASS), 64 B"] = b.cell(
            "xdp_access", arp, "acc0", "pass_not_ipv4", "pass")

        subprocess.run([str(PGWU), "-d", b.pin, "session", "flush"], check=True, capture_output=True)
        with tempfile.NamedTemporaryFile("w", suffix=".bearers", delete=False) as tf:
            path = tf.name
        try:
            bearer_file(path, args.bearers)
            t0 = time.monotonic()
            sh(str(PGWU), "-d", b.pin, "session", "load", path)
            load_s = time.monotonic() - t0
        finally:
            os.unlink(path)
        big = args.bearers
        measure_all(1, key="big-hot")      # 1M installed, the same bearer every packet
        measure_all(big)                   # 1M installed, a random one every packet

        hdr = (f"| case | frame B | ns/pkt, 1 bearer | {big:,} bearers, same one | ratio | "
               f"{big:,} bearers, random one | above floor (1 / {big:,} same) |")
        lines += [hdr, "|---|---:|---:|---:|---:|---:|---:|"]
        for s in sizes:
            lines.append(f"| floor: MAC swap + XDP_TX | {s} | {floor[s]:.1f} | | | | |")
        for name, *_ in rows:
            for s in sizes:
                a, h, z = results[(name, s, 1)], results[(name, s, "big-hot")], results[(name, s, big)]
                shown = f"{max(s, UL_MIN_SIZE)}" + ("*" if name.startswith("uplink") and s < UL_MIN_SIZE else "")
                if "FAIL" in (a, h, z):
                    lines.append(f"| {name} | {shown} | {a} | {h} | | {z} | |")
                    continue
                lines.append(f"| {name} | {shown} | {a} | {h} | {float(h) / float(a):.2f} | {z} | "
                             f"{float(a) - floor[s]:.1f} / {float(h) - floor[s]:.1f} |")
        lines.append("")
        lines.append("| other | ns/pkt |")
        lines.append("|---|---:|")
        for k, v in extra.items():
            lines.append(f"| {k} | {v} |")
        for s in sizes:
            lines.append(f"| wrapper (restore + tail call), subtracted above, {s} B | {wrapper[s]:.1f} |")
        lines.append(f"| bulk load of {big:,} bearers (`pgwu session load`), seconds | {load_s:.2f} |")
        lines.append("")
        on = results[("downlink encap, csum on", 1424, 1)]
        off = results[("downlink encap, csum off", 1424, 1)]
        targets = []
        if "FAIL" not in (on, off):
            targets.append(f"checksum on / off at 1424 B: {float(on) / float(off):.2f} (target <= 1.10)")
        worst = max((float(results[(n, s, "big-hot")]) / float(results[(n, s, 1)]) for n, *_ in rows
                     for s in sizes if "FAIL" not in (results[(n, s, "big-hot")], results[(n, s, 1)])),
                    default=float("nan"))
        targets.append(f"{big:,} bearers installed / 1, worst cell: {worst:.2f} (target <= 1.25)")
        above = max((float(results[(n, s, nb)]) - floor[s] for n, *_ in rows for s in sizes
                     for nb in (1, "big-hot") if results[(n, s, nb)] != "FAIL"), default=float("nan"))
        targets.append(f"worst full packet above the floor: {above:.1f} ns (target <= 120)")
        targets.append(f"bulk load: {load_s:.2f} s (target <= 5)")
        lines.append("Targets: " + "; ".join(targets) + ".")
        lines.append(f"Path check: {b.checked:,} iterations counted by the data plane's verdict counters, "
                     f"each with the intended reason and verdict; {len(b.failures)} cells failed.")
        if any(s < UL_MIN_SIZE for s in sizes):
            lines.append(f"* an uplink G-PDU with inner IPv4/UDP is at least {UL_MIN_SIZE} B on the wire.")
    finally:
        b.teardown()
    if args.lab:
        lines += [""] + lab_crosscheck(sizes)
    out = "\n".join(lines)
    print(out)
    for f in b.failures:
        print("FAIL:", f, file=sys.stderr)
    if args.markdown:
        Path(args.markdown).write_text(out + "\n")
    return 1 if b.failures else 0


if __name__ == "__main__":
    sys.exit(main())
