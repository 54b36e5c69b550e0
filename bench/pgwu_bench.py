#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""ns per packet of the PGW-U's XDP programs with 1, 1k, 64k and 1M bearers installed, hit as the
same bearer, in sequential order and in random order; and the time to bulk-load the tables.

    .venv/bin/python bench/pgwu_bench.py [--repeat N] [--rounds N] [--size B] [--tables 1000,65536,1000000]
                                        [--lab] [--sdf] [--n3v6] [--markdown FILE]

--sdf adds, in the same rounds, bearers with 1, 8 and 32 SDF filters a direction (`pgwu session add
--filter`) against a bearer without, the packet matching the first filter and the last.
--n3v6 adds, in the same rounds, GTP-U over IPv6 (N3 over IPv6, docs/ipv6.md): the uplink G-PDU over
IPv6 (xdp_access -> xdp_ul_n3v6, its UDP checksum verified) and the downlink encapsulated in IPv6
(xdp_sgi -> xdp_dl_n3v6, its checksum computed) of a bearer whose peer is IPv6, against the same
bearer's packets over IPv4 (downlink checksum off and on), inner IPv4 in all, one bearer.

Method (docs/benchmarks.md): BPF_PROG_TEST_RUN with `repeat` runs bench_restore
(bench/pgwu_bench.bpf.c), which gives every iteration a fresh frame (one head adjustment and direct
stores of the first 128 bytes) and the next bearer of the cell's order (same; sequential; random: a
permutation of the table drawn with a fixed seed before anything is timed, continued from run to
run), then tail-calls the program under test. The wrapper's own cost (tail-calling an empty
program, on the same work and order) is measured the same way and subtracted.
Every run of a data plane reads its verdict counters before and after and checks that every
iteration took the intended path (reason and verdict); a cell with one run that did not prints FAIL.
The runs are made in rounds: each round runs every cell once, and the wrapper alone once for each
kind of work it does, in a shuffled order. On a shared host the noise comes and goes over seconds;
this way every cell gets the quiet moments. A cell's number is the least of its rounds (noise only
adds) minus the least run of the wrapper doing the same work; the 25th-75th percentiles of its
rounds, and of its per-round ratio to 1 bearer, are printed next to it as its spread. One data plane
per table size is loaded side by side, all with the same capacity, so all are measured in every round.
bench_probe, one read in a 64 MiB array, measures what one dependent cache + TLB miss costs here.
The next hop is resolved through the kernel's routes and neighbours (bpf_fib_lookup, with the route
cache) inside a private network namespace; `--lab` adds the cross-check with the kernel's own
per-program run time (kernel.bpf_stats_enabled) while live frames cross the lab's veths.

Everything created (netns, pins) has a unique name and is removed on exit, also on failure.
"""

from __future__ import annotations

import argparse
import array
import mmap
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

from gtplab.kernel import bpf  # noqa: E402
from gtplab.gtpu import packets as P  # noqa: E402
from gtplab.dut.dataplane import Dataplane, Nexthop, pgwu_binary  # noqa: E402
from gtplab.kernel.netns import Worker  # noqa: E402

PGWU = pgwu_binary()
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

# struct bench_frame: len restore nbearers mode start order_off teid_off teid_base ue_off ue_base ck_off bytes[128]
FRAME_FMT = "=11I128s"
RESTORE_MAX = 128
ORDER_MAX = 1 << 22
SAME, SEQ, RANDOM = 0, 1, 2
MODE_NAMES = {SAME: "same bearer", SEQ: "sequential", RANDOM: "random order"}
UL_TEID_OFF = 14 + 20 + 8 + 4        # outer Ethernet, IPv4, UDP, GTP flags/type/length
UL_UE_OFF = 14 + 20 + 8 + 8 + 12     # inner IPv4 source
DL_UE_OFF = 14 + 16                  # IPv4 destination
# IPv6 (docs/ipv6.md): bearer i's /64 is fd47:7470:XXXX:YYYY::/64, XXXX:YYYY = UE_BASE + i, so the
# wrapper's 4-octet UE write lands in the /64 of the inner source (uplink) or destination (downlink)
UE6_HI = bytes.fromhex("fd477470")
UL6_UE_OFF = 14 + 20 + 8 + 8 + 8 + 4  # inner IPv6 source, octets 4-7
DL6_UE_OFF = 14 + 24 + 4             # IPv6 destination, octets 4-7
PDN6 = "fd47:7472::1"                # via the SGi gateway
SGI6_GW = "fd47:7471::2"
N3_6 = "fd47:7473::1"                # --n3v6: the PGW-U's N3 IPv6 address, on acc0
GNB6 = "fd47:7473::10"               # ... and the IPv6 peer
N3V6_TEID, N3V6_UE = TEID_BASE + 0x7000, UE_BASE + 0x7000   # its bearer (dps[1])
UL_MIN_SIZE = 82                     # Ethernet+IPv4+UDP+GTP-U + inner IPv4+UDP, with FCS
SEED = 13
PROBE_N = 1 << 20                    # bench_probe's array


def ue6_of(i: int) -> str:
    """bearer i's /64 (without the length)"""
    import ipaddress
    return str(ipaddress.IPv6Address(UE6_HI + struct.pack("!I", UE_BASE + i) + bytes(8)))


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    p = subprocess.run(list(argv), capture_output=True, text=True)
    if check and p.returncode:
        raise RuntimeError(f"Couldn't run {' '.join(argv)}: {p.stderr.strip() or p.stdout.strip()}")
    return p


def ip2int(a: str) -> int:
    return struct.unpack("!I", bytes(int(x) for x in a.split(".")))[0]


def int2ip(n: int) -> str:
    return ".".join(str(b) for b in struct.pack("!I", n))


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))]


class Cell:
    """One number of the table: a program on a frame, with a data plane configuration, and the
    bearers the wrapper writes into the frame (how many, in which order)."""

    def __init__(self, key, prog, frame: bytes, ingress: str, dp=None, config=None, path=None,
                 nbearers: int = 0, mode: int = SAME, order_off: int = 0, teid_off: int = 0, ue_off: int = 0,
                 ipv6: bool = False):
        self.key, self.prog, self.frame, self.ingress = key, prog, frame, ingress
        self.dp, self.config, self.path = dp, config or {}, path   # path: (reason, verdict) or None
        self.n, self.mode, self.order_off = nbearers, mode, order_off
        self.teid_off, self.ue_off = teid_off, ue_off
        # the uplink's inner source is covered by the inner header checksum, which the data plane
        # checks (RFC 1812 5.2.2): the wrapper updates it with the address. IPv6 has none (and its
        # /64 is at the same offset: UL6_UE_OFF == UL_UE_OFF)
        self.ck_off = ue_off - 2 if ue_off == UL_UE_OFF and not ipv6 else 0
        self.restore = min(RESTORE_MAX, len(frame) & ~7)
        self.pos = 0        # where in the order the next run starts: runs continue the order
        # what the wrapper does for this cell (pool_wrappers): the same bytes restored, the same
        # fields written, the same order (a random order reads its permutation)
        self.wrapper_work = (len(frame), bool(nbearers and teid_off), bool(nbearers and ue_off), self.ck_off, mode,
                             (nbearers, order_off) if mode == RANDOM else 0)
        self.target: list[int] = []
        self.wrapper: list[int] = []
        self.wrapper_min = 0.0   # set after the rounds: see pool_wrappers()
        self.failure = ""

    def value(self) -> bytes:
        return struct.pack(FRAME_FMT, len(self.frame), self.restore, self.n, self.mode, self.pos,
                           self.order_off, self.teid_off, TEID_BASE, self.ue_off, UE_BASE, self.ck_off,
                           self.frame[:RESTORE_MAX].ljust(RESTORE_MAX, b"\0"))

    def advance(self, repeat: int) -> None:
        if self.n:
            self.pos = (self.pos + repeat) % self.n

    def rounds(self) -> list[float]:
        """this cell's runs, each minus the least wrapper run on the same work"""
        return [t - self.wrapper_min for t in self.target]

    def ns(self) -> float:
        """Least target run minus the least wrapper run (noise only ever adds time)."""
        return min(self.target) - self.wrapper_min

    def spread(self) -> str:
        r = self.rounds()
        return f"{pct(r, 0.25):.0f}-{pct(r, 0.75):.0f}"

    def shown(self) -> str:
        return "FAIL" if self.failure else f"{self.ns():.1f}"


def pool_wrappers(cells) -> None:
    """The wrapper does the same work behind any program for the same frame length, fields to
    write and order, so its runs are pooled over the cells that share that: the estimate of its
    cost gets every round of all of them, and cells compared with each other subtract the very
    same number."""
    best: dict[tuple, float] = {}
    for c in cells:
        if c.wrapper:
            best[c.wrapper_work] = min(best.get(c.wrapper_work, float("inf")), min(c.wrapper))
    for c in cells:
        c.wrapper_min = best[c.wrapper_work]


class Bench:
    def __init__(self, args, tables: list[int]):
        self.args = args
        # GTPLAB_RUN_TAG: a word in the names, so a run can be told from others on a shared host
        tag = os.environ.get("GTPLAB_RUN_TAG", "")
        uid = (f"{tag}-" if tag.isalnum() else "") + secrets.token_hex(3)
        self.ns = f"gtplab-bench-{uid}"
        self.pins = {n: f"/sys/fs/bpf/gtplab-bench-{uid}-{n}" for n in tables}
        self.wrap_pin = f"/sys/fs/bpf/gtplab-benchw-{uid}"
        self.dps: dict[int, Dataplane] = {}
        self.objs: list = []
        self.applied: dict[int, dict] = {}   # id(data plane) -> the config last set on it
        self.worker: Worker | None = None
        self.checked = 0
        self.order_offs: dict[int, int] = {}

    # --- setup / teardown ------------------------------------------------------------------------
    def setup(self) -> None:
        ns = self.ns
        print(f"pgwu_bench: netns {ns}, pins {' '.join([*self.pins.values(), self.wrap_pin])}", file=sys.stderr)
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
        # IPv6 on SGi: the uplink's bpf_fib_lookup(AF_INET6) resolves PDN6 through SGI6_GW
        sh("ip", "-n", ns, "-6", "addr", "add", "fd47:7471::1/64", "dev", "sgi0", "nodad")
        sh("ip", "-n", ns, "-6", "neigh", "add", SGI6_GW, "lladdr", GW_MAC, "dev", "sgi0", "nud", "permanent")
        sh("ip", "-n", ns, "-6", "route", "add", "fd47:7472::/48", "via", SGI6_GW, "dev", "sgi0")
        sh("ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.all.forwarding=1")
        # N3 over IPv6 (--n3v6): the downlink's bpf_fib_lookup(AF_INET6) resolves GNB6 on acc0
        sh("ip", "-n", ns, "-6", "addr", "add", f"{N3_6}/64", "dev", "acc0", "nodad")
        sh("ip", "-n", ns, "-6", "neigh", "add", GNB6, "lladdr", SGW_MAC, "dev", "acc0", "nud", "permanent")
        self.ifindex = {n: int(sh("ip", "-n", ns, "-o", "link", "show", n).stdout.split(":")[0])
                        for n in ("acc0", "sgi0")}
        self.worker = Worker(ns)   # one thread in the netns for every test run

        # the same capacity for all: the same table geometry, only the number installed differs
        for n, pin in self.pins.items():
            sh(str(PGWU), "-d", pin, "load", "--max-bearers", "1048576", "--local-addr", LOCAL,
               "--ue-pool", "10.64.0.0/12")
            self.dps[n] = Dataplane(pin)
            self.register_watcher(self.dps[n])
        os.makedirs(self.wrap_pin)
        # bench_probe_hash looks up in the biggest table's own ul_bearers
        sh("bpftool", "prog", "loadall", str(BENCH_OBJ), self.wrap_pin, "map", "name", "probe_hash", "pinned",
           f"{self.pins[max(self.pins)]}/ul_bearers", "pinmaps", f"{self.wrap_pin}/maps")
        m = f"{self.wrap_pin}/maps"
        self.frame = bpf.Map.pinned(f"{m}/frame")
        self.state = bpf.Map.pinned(f"{m}/state")
        self.order = bpf.Map.pinned(f"{m}/order")
        self.progs = bpf.Map.pinned(f"{m}/progs")
        self.wrap = bpf.Prog.pinned(f"{self.wrap_pin}/bench_restore")
        self.null = bpf.Prog.pinned(f"{self.wrap_pin}/bench_null")
        self.macswap = bpf.Prog.pinned(f"{self.wrap_pin}/bench_macswap")
        self.probe = bpf.Prog.pinned(f"{self.wrap_pin}/bench_probe")
        self.probe_hash = bpf.Prog.pinned(f"{self.wrap_pin}/bench_probe_hash")
        self.objs = [self.frame, self.state, self.order, self.progs, self.wrap, self.null, self.macswap, self.probe,
                     self.probe_hash]

    def write_orders(self, sizes: list[int]) -> None:
        """A permutation of 0..n-1 for each table size n, drawn with a fixed seed, written into the
        wrapper's `order` array through mmap, before anything is timed."""
        rng = random.Random(SEED)
        off = 0
        with mmap.mmap(self.order.fd, 8 * ORDER_MAX, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE) as mm:
            for n in sorted(set(sizes)):
                if off + n > ORDER_MAX:
                    raise RuntimeError("permutations do not fit in the order map")
                perm = list(range(n))
                rng.shuffle(perm)
                mm[8 * off:8 * (off + n)] = array.array("Q", perm).tobytes()
                self.order_offs[n] = off
                off += n

    def teardown(self) -> None:
        if self.worker:
            self.worker.close()
        for o in self.objs:
            o.close()
        for dp in self.dps.values():
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
        self.frame.update(struct.pack("=I", 0), cell.value())
        self.progs.update(struct.pack("=I", 0), struct.pack("=I", prog.fd))
        self.state.update(struct.pack("=I", 0), struct.pack("=I", 0))
        self.state.update(struct.pack("=I", 1), struct.pack("=I", 0))
        t = self.worker.call(target_run, self.wrap, cell.frame, self.args.repeat, self.ifindex[cell.ingress])
        cell.advance(self.args.repeat)
        return t

    def measure_wrapper(self, cell: Cell) -> None:
        """One run of the wrapper alone (tail-calling bench_null) on the cell's frame and order."""
        cell.wrapper.append(self.time_one(self.null, cell))

    def measure(self, cell: Cell) -> None:
        """One run of the wrapper + the cell's program; the data plane's counters must show every
        iteration on the cell's path."""
        if cell.dp is not None and self.applied.get(id(cell.dp)) != cell.config:
            cell.dp.set_config(**cell.config)
            self.applied[id(cell.dp)] = dict(cell.config)
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
    f = bytes(P.gpdu(TEID_BASE, int2ip(UE_BASE), PDN, size=s, outer_src=SGW, outer_dst=LOCAL, src_mac=SGW_MAC,
                     dst_mac="02:00:00:00:01:01"))
    assert len(f) + 4 == s, (len(f), s)
    return f


def build_uplink6(size: int) -> bytes:
    """The uplink G-PDU of bearer 0 carrying IPv6/UDP from its /64 to PDN6, size octets with FCS."""
    from scapy.layers.inet import UDP
    from scapy.layers.inet6 import IPv6
    from scapy.packet import Raw
    inner = IPv6(src=ue6_of(0).replace("::", "::10"), dst=PDN6, hlim=64) / UDP(sport=40000, dport=5001)
    pad = max(size, UL_MIN_SIZE + 20) - 4 - (14 + 20 + 8 + 8) - len(inner)
    f = bytes(P.gtpu(inner / Raw(b"\x5a" * pad), teid=TEID_BASE, src=SGW, dst=LOCAL, src_mac=SGW_MAC,
                     dst_mac="02:00:00:00:01:01"))
    assert f[UL6_UE_OFF - 4:UL6_UE_OFF + 4] == UE6_HI + struct.pack("!I", UE_BASE), "the /64 is not where the wrapper writes"
    return f


def build_downlink6(size: int) -> bytes:
    """An IPv6/UDP packet from PDN6 to bearer 0's /64, size octets with FCS."""
    from scapy.layers.inet import UDP
    from scapy.layers.inet6 import IPv6
    from scapy.layers.l2 import Ether
    from scapy.packet import Raw
    pkt = Ether(src=GW_MAC, dst="02:00:00:00:02:01") / IPv6(src=PDN6, dst=ue6_of(0).replace("::", "::10"), hlim=64) / UDP(
        sport=5001, dport=40000)
    f = bytes(pkt / Raw(b"\xa5" * (size - 4 - len(pkt))))
    assert f[DL6_UE_OFF - 4:DL6_UE_OFF + 4] == UE6_HI + struct.pack("!I", UE_BASE)
    return f


def build_n3_uplink(size: int, v6: bool) -> bytes:
    """--n3v6: the G-PDU of the N3V6 bearer (inner IPv4 to PDN), over IPv6 from GNB6 to N3_6 (its UDP
    checksum computed) or over IPv4 from SGW (checksum 0), size octets with FCS (the IPv6 one 20 more:
    the same inner packet)."""
    inner = P.ip_packet(int2ip(N3V6_UE), PDN, payload_len=max(size, UL_MIN_SIZE) - 4 - (14 + 20 + 8 + 8) - 28)
    kw = dict(src=GNB6, dst=N3_6) if v6 else dict(src=SGW, dst=LOCAL)
    return bytes(P.gtpu(inner, teid=N3V6_TEID, src_mac=SGW_MAC, dst_mac="02:00:00:00:01:01", **kw))


def build_downlink(size: int, udp_csum: bool = True) -> bytes:
    f = bytes(P.downlink_ip(ue=int2ip(UE_BASE), src=PDN, size=size, src_mac=GW_MAC, dst_mac="02:00:00:00:02:01",
                            udp_csum=udp_csum))
    assert len(f) + 4 == size
    return f


# SDF filters (issue 32 item 4): a bearer per filter count, each PDR a filter on the protocol, the
# remote's prefix and port (the remote's port 1000 + i for the i-th), both directions
SDF_COUNTS = (1, 8, 32)
SDF_TEID = 0x00020000
SDF_UE = 0x0A408000             # 10.64.128.0 + count
SDF_PORT = 1000


def sdf_filter_spec(n: int) -> str:
    """`pgwu session add --filter` for n PDRs a direction, precedence i for port SDF_PORT + i"""
    return "; ".join(f"{d} {i + 1} flow permit out 17 from 198.18.0.0/15 {SDF_PORT + i} to assigned"
                     for d in ("ul", "dl") for i in range(n))


def build_sdf_uplink(size: int, teid: int, ue: int, port: int) -> bytes:
    s = max(size, UL_MIN_SIZE)
    return bytes(P.gpdu(teid, int2ip(ue), PDN, size=s, outer_src=SGW, outer_dst=LOCAL, src_mac=SGW_MAC,
                        dst_mac="02:00:00:00:01:01", inner_dport=port))


def build_sdf_downlink(size: int, ue: int, port: int) -> bytes:
    return bytes(P.downlink_ip(ue=int2ip(ue), src=PDN, size=size, src_mac=GW_MAC, dst_mac="02:00:00:00:02:01",
                               sport=port))


def lab_crosscheck(sizes: list[int]) -> list[str]:
    """The DUT's ns per packet from the kernel's run-time stats while live frames cross the lab
    (what `gtplab sweep` records as dut.ns_per_packet), single flow, checksum off and on."""
    import json
    with tempfile.TemporaryDirectory(prefix="gtplab-bench-") as tmp:
        cp = subprocess.run([sys.executable, "-m", "gtplab", "sweep", "--no-scale", "--sizes", ",".join(map(str, sizes)),
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
    """n bearers, each with its IPv4 address and its /64 (ue6_of)"""
    with open(path, "w") as f:
        for i in range(n):
            u = struct.pack("!I", UE_BASE + i).hex()
            f.write(f"{TEID_BASE + i} {int2ip(UE_BASE + i)} {SGW} {SGW_TEID_BASE + i} "
                    f"ue6=fd47:7470:{u[:4]}:{u[4:]}::/64\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=20_000, help="iterations per test run (default 20000)")
    ap.add_argument("--rounds", type=int, default=40,
                    help="rounds; each measures every cell once, and a cell's number is the least of its "
                         "rounds (default 40)")
    ap.add_argument("--size", type=int, default=512, help="frame size incl. FCS (default 512)")
    ap.add_argument("--tables", default="1000,65536,1000000",
                    help="bearer counts compared with 1 bearer (default 1000,65536,1000000)")
    ap.add_argument("--markdown", help="also write the table to this file")
    ap.add_argument("--sdf", action="store_true",
                    help="also SDF filters: 1, 8 and 32 filters a direction against none, the packet "
                         "matching the first and the last (docs/benchmarks.md)")
    ap.add_argument("--n3v6", action="store_true",
                    help="also GTP-U over IPv6 (N3 over IPv6): uplink decap and downlink encap of a bearer "
                         "whose peer is IPv6, against the same over IPv4, same rounds (docs/benchmarks.md)")
    ap.add_argument("--lab", action="store_true",
                    help="also cross-check in the lab: a short `gtplab sweep` of live frames through veths, "
                         "with the kernel's own per-program run time (kernel.bpf_stats_enabled)")
    args = ap.parse_args()
    if os.geteuid():
        sys.exit("pgwu_bench: must run as root")
    try:
        tables = sorted({int(s) for s in args.tables.split(",")})
    except ValueError:
        sys.exit(f"pgwu_bench: --tables: not a list of integers: {args.tables}")
    if args.repeat < 1 or args.rounds < 1 or any(not 2 <= n <= 1048576 for n in tables):
        sys.exit("pgwu_bench: --repeat and --rounds must be >= 1, --tables in 2..1048576")
    if not 64 <= args.size <= 3024:
        sys.exit("pgwu_bench: --size must be within 64..3024")
    size, big = args.size, tables[-1]

    b = Bench(args, [1] + tables)
    lines: list[str] = []
    failures: list[str] = []
    try:
        b.setup()
        sh(str(PGWU), "-d", b.pins[1], "session", "add", "--teid", str(TEID_BASE), "--ue", int2ip(UE_BASE),
           "--sgw", SGW, "--sgw-teid", str(SGW_TEID_BASE), "--ue6", ue6_of(0) + "/64")
        load_s = {}
        for n in tables:
            with tempfile.NamedTemporaryFile("w", suffix=".bearers", delete=False) as tf:
                path = tf.name
            try:
                bearer_file(path, n)
                t0 = time.monotonic()
                sh(str(PGWU), "-d", b.pins[n], "session", "load", path)
                load_s[n] = time.monotonic() - t0
            finally:
                os.unlink(path)
        b.write_orders(tables + [PROBE_N])
        if args.n3v6:
            # one bearer, its downlink to GNB6 over IPv6; its IPv4 twin (the reference) is the same
            # bearer's uplink over IPv4 and a downlink half of its own to SGW
            sh(str(PGWU), "-d", b.pins[1], "session", "add", "--teid", str(N3V6_TEID), "--ue", int2ip(N3V6_UE),
               "--sgw6", GNB6, "--sgw-teid", str(SGW_TEID_BASE + 0x7000))
            sh(str(PGWU), "-d", b.pins[1], "session", "add", "--teid", str(N3V6_TEID + 1), "--ue",
               int2ip(N3V6_UE + 1), "--sgw", SGW, "--sgw-teid", str(SGW_TEID_BASE + 0x7001))
        if args.sdf:
            for k in SDF_COUNTS:
                sh(str(PGWU), "-d", b.pins[1], "session", "add", "--teid", str(SDF_TEID + k), "--ue",
                   int2ip(SDF_UE + k), "--sgw", SGW, "--sgw-teid", str(SGW_TEID_BASE + k), "--filter",
                   sdf_filter_spec(k))

        fib = dict(csum=False, fib_cache=True, inner_csum_check=True, sport_entropy=True,
                   nexthop=b.dps[1].get_config().nexthop)
        rows = [("uplink decap", "xdp_access", "acc0", "ul_fwd", "redirect", False),
                ("downlink encap, csum off", "xdp_sgi", "sgi0", "dl_fwd", "redirect", False),
                ("uplink decap, IPv6", "xdp_access", "acc0", "ul_fwd", "redirect", False),
                ("downlink encap, csum off, IPv6", "xdp_sgi", "sgi0", "dl_fwd", "redirect", False)]
        v6_of = {"uplink decap": "uplink decap, IPv6", "downlink encap, csum off": "downlink encap, csum off, IPv6"}
        cells: dict = {}

        def add(key, *a, **kw):
            cells[key] = Cell(key, *a, **kw)

        dl = build_downlink(size)
        add("floor", b.macswap, dl, "sgi0", nbearers=1, ue_off=DL_UE_OFF)
        for mode in (SAME, SEQ, RANDOM):
            add(("probe", mode), b.probe, dl, "sgi0", nbearers=PROBE_N, mode=mode,
                order_off=b.order_offs[PROBE_N], ue_off=DL_UE_OFF)
        add("csum on", b.dps[1].progs["xdp_sgi"], dl, "sgi0", dp=b.dps[1], config=dict(fib, csum=True),
            path=("dl_fwd", "redirect"), nbearers=1, ue_off=DL_UE_OFF)
        # TS 29.281 4.4.2.0: the outer source port 2152 (--sport-entropy off), not the flow's hash
        add("sport fixed", b.dps[1].progs["xdp_sgi"], dl, "sgi0", dp=b.dps[1], config=dict(fib, sport_entropy=False),
            path=("dl_fwd", "redirect"), nbearers=1, ue_off=DL_UE_OFF)
        ulf = build_uplink(size)
        # RFC 1812 5.2.2: the inner IPv4 header checksum check, off (the table's uplink rows have it on)
        add("inner csum off", b.dps[1].progs["xdp_access"], ulf, "acc0", dp=b.dps[1],
            config=dict(fib, inner_csum_check=False), path=("ul_fwd", "redirect"), nbearers=1,
            teid_off=UL_TEID_OFF, ue_off=UL_UE_OFF)
        # the IPv4 uplink without the route cache: a bpf_fib_lookup every packet, as the IPv6 uplink
        add("ul no fib cache", b.dps[1].progs["xdp_access"], ulf, "acc0", dp=b.dps[1],
            config=dict(fib, fib_cache=False), path=("ul_fwd", "redirect"), nbearers=1,
            teid_off=UL_TEID_OFF, ue_off=UL_UE_OFF)
        for mode in (SAME, SEQ, RANDOM):
            add(("probe_hash", mode), b.probe_hash, ulf, "acc0", nbearers=big, mode=mode,
                order_off=b.order_offs[big], teid_off=UL_TEID_OFF, ue_off=UL_UE_OFF)
        for name, prog, ing, reason, verdict, csum in rows:
            if name.endswith("IPv6"):
                f, kw = ((build_uplink6(size), dict(teid_off=UL_TEID_OFF, ue_off=UL6_UE_OFF, ipv6=True))
                         if prog == "xdp_access" else (build_downlink6(size), dict(ue_off=DL6_UE_OFF, ipv6=True)))
            elif prog == "xdp_access":
                f, kw = build_uplink(size), dict(teid_off=UL_TEID_OFF, ue_off=UL_UE_OFF)
            else:
                f, kw = dl, dict(ue_off=DL_UE_OFF)
            cfg = dict(fib, csum=csum)
            add((name, 1, SAME), b.dps[1].progs[prog], f, ing, dp=b.dps[1], config=cfg,
                path=(reason, verdict), nbearers=1, **kw)
            for n in tables:
                for mode in (SAME, SEQ, RANDOM):
                    add((name, n, mode), b.dps[n].progs[prog], f, ing, dp=b.dps[n], config=cfg,
                        path=(reason, verdict), nbearers=n, mode=mode, order_off=b.order_offs[n], **kw)

        if args.sdf:
            # none: bearer 0 (no filters), the frame carrying its TEID / UE as the filtered ones do
            # theirs (the wrapper writes no field in any of these cells: the same work)
            for d, prog, ing, reason in (("ul", "xdp_access", "acc0", "ul_fwd"), ("dl", "xdp_sgi", "sgi0", "dl_fwd")):
                for k, where in [(0, "none")] + [(k, w) for k in SDF_COUNTS for w in ("first", "last")]:
                    teid, ue = (SDF_TEID + k, SDF_UE + k) if k else (TEID_BASE, UE_BASE)
                    port = SDF_PORT + (k - 1 if where == "last" else 0)
                    f = (build_sdf_uplink(size, teid, ue, port) if d == "ul" else build_sdf_downlink(size, ue, port))
                    add(("sdf", d, k, where), b.dps[1].progs[prog], f, ing, dp=b.dps[1], config=dict(fib),
                        path=(reason, "redirect"))

        if args.n3v6:
            # the wrapper writes no field in these cells (nbearers 0): the frames carry their bearer
            cfg6 = dict(fib, n3_addr6=N3_6)
            dl6 = bytes(P.downlink_ip(ue=int2ip(N3V6_UE), src=PDN, size=size, src_mac=GW_MAC,
                                      dst_mac="02:00:00:00:02:01"))
            dl4 = bytes(P.downlink_ip(ue=int2ip(N3V6_UE + 1), src=PDN, size=size, src_mac=GW_MAC,
                                      dst_mac="02:00:00:00:02:01"))
            for key, prog, f, ing, cfg, reason in (
                    (("n3", "ul", 4), "xdp_access", build_n3_uplink(size, False), "acc0", cfg6, "ul_fwd"),
                    (("n3", "ul", 6), "xdp_access", build_n3_uplink(size, True), "acc0", cfg6, "ul_fwd"),
                    (("n3", "dl", 4), "xdp_sgi", dl4, "sgi0", cfg6, "dl_fwd"),
                    (("n3", "dl", "4csum"), "xdp_sgi", dl4, "sgi0", dict(cfg6, csum=True), "dl_fwd"),
                    (("n3", "dl", 6), "xdp_sgi", dl6, "sgi0", cfg6, "dl_fwd")):
                add(key, b.dps[1].progs[prog], f, ing, dp=b.dps[1], config=cfg, path=(reason, "redirect"))

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

        def ratio(c: Cell, one: Cell) -> str:
            """ratio of the least runs, and the spread of the per-round ratios (same round)"""
            if c.failure or one.failure:
                return "FAIL"
            per = [x / y for x, y in zip(c.rounds(), one.rounds()) if y > 0]
            return f"**{c.ns() / one.ns():.2f}** ({pct(per, 0.25):.2f}-{pct(per, 0.75):.2f})"

        shown_size = max(size, UL_MIN_SIZE)
        lines.append(f"Frame {size} B (uplink {shown_size} B). ns/pkt = least of {args.rounds} rounds minus the "
                     "least run of the wrapper alone on the same work; in brackets the 25th-75th percentile "
                     "of the rounds (ns), and of the per-round ratios.")
        lines.append("")
        lines.append("| case | bearers | same bearer, ns | ratio | sequential, ns | ratio | random order, ns | ratio |")
        lines.append("|---|---:|---:|---:|---:|---:|---:|---:|")
        summary = []
        for name, *_ in rows:
            one = cells[(name, 1, SAME)]
            lines.append(f"| {name} | 1 | {one.shown()} ({one.spread()}) | 1 | | | | |")
            for n in tables:
                cs = [cells[(name, n, m)] for m in (SAME, SEQ, RANDOM)]
                lines.append(f"| {name} | {n:,} | " + " | ".join(
                    f"{c.shown()} ({c.spread()}) | {ratio(c, one)}" for c in cs) + " |")
            if not one.failure:
                seq, rnd = cells[(name, big, SEQ)], cells[(name, big, RANDOM)]
                if not seq.failure and not rnd.failure:
                    summary.append(f"{name}: {big:,} bearers sequential {seq.ns() / one.ns():.2f}x (target <= 1.25), "
                                   f"random {rnd.ns() / one.ns():.2f}x (target <= 2.0)")
        # IPv6 against IPv4: the same bearers, the same rounds; the ratio of the least runs and the
        # spread of the per-round ratios (issue 32 item 3: IPv6 within 1.15x of IPv4)
        lines += ["", f"IPv6 / IPv4, same run, same bearers ({big:,} installed; 1 bearer alone in the first row):", "",
                  "| direction | bearers | order | IPv4 ns | IPv6 ns | IPv6 / IPv4 (25th-75th pct of rounds) |",
                  "|---|---:|---|---:|---:|---:|"]
        for name4, name6 in v6_of.items():
            for n, mode in [(1, SAME)] + [(big, m) for m in (SAME, SEQ, RANDOM)]:
                c4, c6 = cells[(name4, n, mode)], cells[(name6, n, mode)]
                lines.append(f"| {name4.split(' ')[0]} | {n:,} | {MODE_NAMES[mode]} | {c4.shown()} ({c4.spread()}) | "
                             f"{c6.shown()} ({c6.spread()}) | {ratio(c6, c4)} |")
                if n == big and mode == RANDOM and not c4.failure and not c6.failure:
                    summary.append(f"IPv6 / IPv4, {name4.split(',')[0]}, {big:,} bearers random: "
                                   f"{c6.ns() / c4.ns():.2f} (target <= 1.15)")
        if args.sdf:
            lines += ["", "SDF filters (issue 32 item 4), 1 bearer, same run: each PDR a filter on protocol, remote "
                      "prefix and remote port; the packet matching the first filter or the last; ratio to the "
                      "bearer without filters (25th-75th pct of the per-round ratios):", "",
                      "| direction | filters | matching | ns/pkt (25th-75th pct) | ratio to none | ns over none |",
                      "|---|---:|---|---:|---:|---:|"]
            for d in ("ul", "dl"):
                none = cells[("sdf", d, 0, "none")]
                lines.append(f"| {d} | none | | {none.shown()} ({none.spread()}) | 1 | |")
                for k in SDF_COUNTS:
                    for w in ("first", "last"):
                        c = cells[("sdf", d, k, w)]
                        lines.append(f"| {d} | {k} | {w} | {c.shown()} ({c.spread()}) | {ratio(c, none)} | "
                                     f"{c.ns() - none.ns():+.1f} |")
        if args.n3v6:
            lines += ["", "GTP-U over IPv6 (N3 over IPv6), 1 bearer, same run, inner IPv4 in all: the outer IPv6 "
                      "against the outer IPv4 of the same inner packet (25th-75th pct of the per-round ratios):", "",
                      "| direction | outer | ns/pkt (25th-75th pct) | ratio to outer IPv4 | ns over outer IPv4 |",
                      "|---|---|---:|---:|---:|"]
            for d, ref in (("ul", 4), ("dl", 4)):
                r4 = cells[("n3", d, ref)]
                names = [(4, "IPv4" + (", UDP checksum 0" if d == "ul" else ", csum off")), (6, "IPv6")]
                if d == "dl":
                    names.insert(1, ("4csum", "IPv4, csum on"))
                for k, label in names:
                    c = cells[("n3", d, k)]
                    lines.append(f"| {'uplink decap' if d == 'ul' else 'downlink encap'} | {label} | "
                                 f"{c.shown()} ({c.spread()}) | {ratio(c, r4) if k != 4 else 1} | "
                                 f"{'' if k == 4 else format(c.ns() - r4.ns(), '+.1f')} |")
        fl = cells["floor"]
        ps, pr = cells[("probe", SAME)], cells[("probe", RANDOM)]
        pq = cells[("probe", SEQ)]
        lines += ["", "| other | ns/pkt | 25th-75th pct |", "|---|---:|---:|",
                  f"| floor: MAC swap + XDP_TX, {size} B | {fl.shown()} | {fl.spread()} |",
                  f"| probe: one 64 B read in a 64 MiB array, same line | {ps.shown()} | {ps.spread()} |",
                  f"| probe: the same, sequential lines | {pq.shown()} | {pq.spread()} |",
                  f"| probe: the same, random order (one dependent cache + TLB miss) | {pr.shown()} | {pr.spread()} |"]
        con = cells["csum on"]
        lines.append(f"| downlink encap, csum on, 1 bearer | {con.shown()} | {con.spread()} |")
        sfix = cells["sport fixed"]
        lines.append(f"| downlink encap, csum off, outer source port 2152 (sport entropy off), 1 bearer | "
                     f"{sfix.shown()} | {sfix.spread()} |")
        icoff = cells["inner csum off"]
        lines.append(f"| uplink decap, inner IPv4 checksum check off, 1 bearer | {icoff.shown()} | {icoff.spread()} |")
        nfc = cells["ul no fib cache"]
        lines.append(f"| uplink decap, IPv4, no route cache (bpf_fib_lookup every packet, as IPv6's), 1 bearer | "
                     f"{nfc.shown()} | {nfc.spread()} |")
        hs, hq, hr = (cells[("probe_hash", m)] for m in (SAME, SEQ, RANDOM))
        lines += [f"| the data plane's TEID hash lookup alone, {big:,} bearers, same bearer | {hs.shown()} | {hs.spread()} |",
                  f"| the same, sequential TEIDs | {hq.shown()} | {hq.spread()} |",
                  f"| the same, random order | {hr.shown()} | {hr.spread()} |"]
        for k in kinds:
            mode = MODE_NAMES[k.mode]
            what = ("floor/probe" if k.prog in (b.macswap, b.probe, b.probe_hash)
                    else k.key[0].replace(", csum off", ""))
            lines.append(f"| wrapper alone (restore, {mode}{', ' + format(k.n, ',') if k.mode == RANDOM else ''}), "
                         f"{what}, subtracted | {k.wrapper_min:.1f} | |")
        for n in tables:
            lines.append(f"| bulk load of {n:,} bearers (`pgwu session load`), seconds | {load_s[n]:.2f} | |")
        lines.append("")
        lines.append("Miss cost (probe random - probe same): "
                     f"{pr.ns() - ps.ns():.1f} ns per dependent random access to a 64 MiB table; "
                     f"the TEID hash lookup in random order costs {hr.ns() - hs.ns():.1f} ns more than the same "
                     f"TEID's, {(hr.ns() - hs.ns()) / max(pr.ns() - ps.ns(), 1e-9):.1f} such misses.")
        coff = cells[("downlink encap, csum off", 1, SAME)]
        if not con.failure and not coff.failure:
            summary.append(f"checksum on / off, 1 bearer: {con.ns() / coff.ns():.2f} (target <= 1.10)")
        if not coff.failure and not sfix.failure:
            per = [x / y for x, y in zip(coff.rounds(), sfix.rounds()) if y > 0]
            summary.append(f"sport entropy on / off, downlink, 1 bearer: {coff.ns() / sfix.ns():.2f} "
                           f"({pct(per, 0.25):.2f}-{pct(per, 0.75):.2f}), {coff.ns() - sfix.ns():+.1f} ns")
        icon = cells[("uplink decap", 1, SAME)]
        if not icon.failure and not icoff.failure:
            per = [x / y for x, y in zip(icon.rounds(), icoff.rounds()) if y > 0]
            summary.append(f"inner checksum check on / off, uplink, 1 bearer: {icon.ns() / icoff.ns():.2f} "
                           f"({pct(per, 0.25):.2f}-{pct(per, 0.75):.2f}), {icon.ns() - icoff.ns():+.1f} ns")
        if summary:
            lines.append("Targets: " + "; ".join(summary) + ".")
        lines.append(f"Path check: {b.checked:,} iterations counted by the data plane's verdict counters, "
                     f"each with the intended reason and verdict; {len(failures)} cells failed.")
        lines.append(f"Method: {args.rounds} rounds, each {len(cells)} cells and {len(kinds)} runs of the wrapper "
                     f"alone, shuffled, {args.repeat:,} iterations per run; random order: a permutation drawn "
                     f"with seed {SEED} before the rounds, continued from run to run.")
    finally:
        b.teardown()
    if args.lab:
        lines += [""] + lab_crosscheck([size])
    out = "\n".join(lines)
    print(out)
    for f in failures:
        print("FAIL:", f, file=sys.stderr)
    if args.markdown:
        Path(args.markdown).write_text(out + "\n")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
