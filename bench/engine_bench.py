#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""How fast the embedded engine sends, from one core, into the namespace lab. Prints ONE table.

    sudo .venv/bin/python bench/engine_bench.py [--duration 5] [--flows 1024] [--markdown]

Rows, all measured in this one run, each sending from generator port 0 only (one port = one sending
core in the engine), DUT = an XDP drop sink unless noted:
  (a) one fixed 64-byte packet, no field engine: the ceiling of BPF_PROG_RUN live frames here
  (b) trex_profiles/gtpu_uplink.py, multi-flow (field engine: bearer, TEID, addresses), at 64 and
      1424 bytes (64 is below the uplink minimum of 82: the profile clamps it, the table says so)
  (c) (b) with per-stream statistics (TRex flow_stats, pg_id) on; (c-rx) the same with the DUT
      reflecting every frame (XDP_TX) so the engine's receive side counts them too
  (d) Scapy sendp() of the same packets from inside the generator netns (AF_PACKET, one process):
      what a newcomer would reach for; once as written naively (Scapy rebuilds every packet on every
      send), once with the packets built to bytes beforehand (Scapy's best case)
Columns: "Mpps" = packets sent / wall time of the run; "cores" = CPU seconds the sender used per second
(getrusage of this process for the engine, whose one thread per port runs BPF_PROG_RUN and, in softirq,
usually the veth peer's XDP too; process_time of the Scapy process); "Mpps/core" = packets / those CPU
seconds, which stays meaningful on a busy shared machine where the wall rate does not; "x (a)" = that,
relative to (a) at the same asked size. Target: (b) >= 0.75 x (a). Speed targets live here, never in
tests.

--runs N measures every selected row N times, interleaved (a, b, c, ... then again), and prints the
median of each column and of the per-run ratio (b)/(a): on a shared machine one run is not a number.
--cases a,b picks rows (a b c d c-rx; default all).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from gtplab.backend import TrexClient  # noqa: E402  (stream JSON from TRex's own library)
from gtplab.lab import Lab, NETNS_DIR  # noqa: E402

UPLINK = REPO / "trex_profiles" / "gtpu_uplink.py"
PG_ID = 10
STATS_MIN = 98  # uplink headers (78) + the engine's 16-byte stats trailer + FCS

# (a): one fixed packet, no field engine. Used through TRex's library like any profile.
FIXED_PROFILE = textwrap.dedent('''
    import argparse
    from trex.stl.api import STLStream, STLPktBuilder, STLTXCont
    from scapy.layers.l2 import Ether
    from scapy.layers.inet import IP, UDP

    class Fixed:
        def get_streams(self, direction=0, tunables=(), **kwargs):
            p = argparse.ArgumentParser()
            p.add_argument("--size", type=int, default=64, help="frame size incl. FCS")
            a = p.parse_args(tunables)
            pkt = Ether() / IP(src="198.18.0.1", dst="10.64.0.1") / UDP(sport=1025, dport=5001)
            pkt = pkt / (b"x" * (a.size - 4 - len(pkt)))
            return [STLStream(packet=STLPktBuilder(pkt=pkt), mode=STLTXCont(pps=1))]

    def register():
        return Fixed()
''')

# (b) fallback when trex_profiles/gtpu_uplink.py has not landed: the same stream, written inline.
UPLINK_FALLBACK = textwrap.dedent('''
    import argparse
    from trex.stl.api import STLStream, STLPktBuilder, STLTXCont, STLVM
    from scapy.layers.l2 import Ether
    from scapy.layers.inet import IP, UDP
    from scapy.contrib.gtp import GTP_U_Header

    class Uplink:
        def get_streams(self, direction=0, tunables=(), **kwargs):
            p = argparse.ArgumentParser()
            p.add_argument("--size", type=int, default=128, help="frame size incl. FCS")
            p.add_argument("--flows", type=int, default=1024, help="bearers")
            p.add_argument("--clamp", default="no", help="raise sizes below 82 to 82")
            a, _ = p.parse_known_args(tunables)
            size = max(a.size, 82)
            pkt = (Ether() / IP(src="10.201.0.16", dst="10.201.0.1") / UDP(sport=2152, dport=2152, chksum=0)
                   / GTP_U_Header(teid=0x10000, gtp_type=255)
                   / IP(src="10.64.0.1", dst="198.18.0.1") / UDP(sport=1025, dport=5001))
            pkt = pkt / (b"x" * (size - 4 - len(pkt)))
            vm = STLVM()
            vm.var(name="i", min_value=0, max_value=a.flows - 1, size=4, op="inc")
            vm.write(fv_name="i", pkt_offset=14 + 20 + 8 + 4, add_val=0x10000)       # TEID
            vm.write(fv_name="i", pkt_offset=14 + 36 + 12, add_val=0x0a400001)       # inner src (UE)
            vm.var(name="s", min_value=0, max_value=3, size=1, op="inc")
            vm.write(fv_name="s", pkt_offset=14 + 12 + 3, add_val=16)                 # SGW (last octet)
            vm.fix_chksum(offset=14)
            vm.fix_chksum(offset=14 + 36)
            return [STLStream(packet=STLPktBuilder(pkt=pkt, vm=vm), mode=STLTXCont(pps=1))]

    def register():
        return Uplink()
''')

# (d): Scapy in its own process inside the generator netns (so its interface list is the netns's).
SCAPY_SENDER = textwrap.dedent('''
    import json, sys, time
    from scapy.all import Ether, IP, UDP, Raw, sendp, conf
    from scapy.contrib.gtp import GTP_U_Header
    a = json.loads(sys.argv[1])
    pkts = []
    for i in range(a["flows"]):
        p = (Ether(src=a["src"], dst=a["dst"]) / IP(src="10.201.0.%d" % (16 + i % 4), dst="10.201.0.1")
             / UDP(sport=2152, dport=2152, chksum=0) / GTP_U_Header(teid=0x10000 + i, gtp_type=255)
             / IP(src="10.64.%d.%d" % ((1 + i) >> 8, (1 + i) & 255), dst="198.18.0.1") / UDP(sport=1025, dport=5001))
        pkts.append(p / (b"x" * (a["size"] - 4 - len(p))))
    if a["prebuilt"]:
        pkts = [Raw(bytes(p)) for p in pkts]  # built once: sendp only copies bytes
    s = conf.L2socket(iface=a["iface"])
    n = 0
    c0 = time.process_time()
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < a["duration"]:
        sendp(pkts, socket=s, verbose=False)   # what sendp(pkts, iface=...) does, minus socket setup
        n += len(pkts)
    c = time.process_time() - c0
    print(json.dumps({"packets": n, "seconds": time.perf_counter() - t0, "cpu_s": c}))
''')


def frame_len(streams: list[dict]) -> int:
    """Frame size on the wire (FCS included) of the first stream's packet."""
    return len(base64.b64decode(streams[0]["packet"]["binary"])) + 4



def streams_from(trex: TrexClient, path: Path, **tunables) -> list[dict]:
    return trex.profile_streams(str(path), direction=0, port_id=0, tunables=tunables)


def with_flow_stats(streams: list[dict], pg_id: int) -> list[dict]:
    """What STLStream(flow_stats=STLFlowStats(pg_id)) puts in the JSON, pg_id per stream."""
    out = []
    for k, s in enumerate(streams):
        s = json.loads(json.dumps(s))
        s["flow_stats"] = {"enabled": True, "stream_id": pg_id + k, "rule_type": "stats"}
        out.append(s)
    return out


def run_engine(client, streams: list[dict], duration: float) -> dict:
    client.reset(ports=[0, 1])
    client.add_streams(streams, ports=[0])
    client.clear_stats()
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    w0 = time.perf_counter()
    client.start(ports=[0], mult="1000mpps", duration=duration, force=True)  # far above reach: flat out
    client.wait_on_traffic(ports=[0], timeout=duration + 60)
    wall = time.perf_counter() - w0
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    st = client.get_stats()
    return {"tx": st[0]["opackets"], "rx": st[0].get("ipackets", 0), "wall": wall,
            "cpu_s": (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)}


def run_scapy(lab: Lab, size: int, flows: int, duration: float, prebuilt: bool) -> dict:
    p0 = lab.ports[0]
    arg = json.dumps({"iface": p0.ifname, "src": p0.mac, "dst": p0.dut_mac, "size": size,
                      "flows": min(flows, 256), "duration": duration, "prebuilt": prebuilt})
    out = subprocess.run(["nsenter", f"--net={NETNS_DIR / lab.gen_ns}", "--", sys.executable, "-c",
                          SCAPY_SENDER, arg], capture_output=True, text=True, check=True, cwd="/")
    r = json.loads(out.stdout.strip().splitlines()[-1])
    return {"tx": r["packets"], "rx": 0, "wall": r["seconds"], "cpu_s": r["cpu_s"]}


CASES = ("a", "b", "c", "d", "c-rx")


def median_result(results: list[dict]) -> dict:
    """One row from several runs: the median of each counter (and of the per-core rate)."""
    out = {k: statistics.median(r[k] for r in results) for k in ("tx", "rx", "wall", "cpu_s")}
    out["per_core"] = statistics.median(r["tx"] / max(r["cpu_s"], 1e-9) for r in results)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=5.0, help="seconds per row")
    ap.add_argument("--flows", type=int, default=1024, help="bearers the multi-flow profile cycles through")
    ap.add_argument("--runs", type=int, default=1, help="measure every row this many times (medians)")
    ap.add_argument("--cases", default=",".join(CASES), help="rows to run, comma separated: " + " ".join(CASES))
    ap.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    args = ap.parse_args()
    cases = set(args.cases.split(","))
    if not cases <= set(CASES) or args.runs < 1:
        ap.error(f"--cases takes some of {','.join(CASES)}; --runs must be >= 1")
    if "b" in cases:
        cases.add("a")      # (b) is reported relative to (a) of the same run
    try:
        from gtplab.engine import LocalClient  # noqa: F401
    except ImportError as e:
        print(f"engine_bench: the embedded engine (gtplab.engine) is not there: {e}", file=sys.stderr)
        return 2

    load0 = f"{os.getloadavg()[0]:.2f}"
    tmp = Path(tempfile.mkdtemp(prefix="gtplab-bench-"))
    fixed = tmp / "bench_fixed.py"
    fixed.write_text(FIXED_PROFILE)
    uplink, note = UPLINK, "trex_profiles/gtpu_uplink.py"
    if not UPLINK.exists():
        uplink, note = tmp / "bench_uplink.py", "inline fallback (gtpu_uplink.py missing)"
        uplink.write_text(UPLINK_FALLBACK)

    trex = TrexClient()
    runs: dict[tuple, list[dict]] = {}  # (case, asked size, real size) -> results, in run order
    ratios: dict[int, list[float]] = {64: [], 1424: []}

    def add(case: str, asked: int, size: int, r: dict) -> None:
        runs.setdefault((case, asked, size), []).append(r)

    try:
        s_fixed = {sz: streams_from(trex, fixed, size=sz) for sz in (64, 1424)}
        s_up = {sz: streams_from(trex, uplink, size=sz, flows=args.flows, clamp="yes") for sz in (64, 1424)}
        # per-stream stats put a 16-byte trailer in the payload: the smallest uplink frame with room
        # for it is 98 bytes, so the "64" row of (c) sends 98-byte frames (the table says so)
        s_st = {sz: streams_from(trex, uplink, size=max(sz, STATS_MIN), flows=args.flows, clamp="yes")
                for sz in (64, 1424)}
        real = {sz: frame_len(s_up[sz]) for sz in s_up}
        real_st = {sz: frame_len(s_st[sz]) for sz in s_st}
        with Lab.up(dut="drop") as lab:
            c = lab.client()
            c.connect()
            try:
                for _ in range(args.runs):
                    for sz in (64, 1424):
                        ra = run_engine(c, s_fixed[sz], args.duration)
                        add("(a) fixed packet, no field engine", sz, sz, ra)
                        if "b" in cases:
                            rb = run_engine(c, s_up[sz], args.duration)
                            add(f"(b) uplink multi-flow, {note}", sz, real[sz], rb)
                            ratios[sz].append((rb["tx"] / max(rb["cpu_s"], 1e-9))
                                              / (ra["tx"] / max(ra["cpu_s"], 1e-9)))
                    if "c" in cases:
                        for sz in (64, 1424):
                            add("(c) (b) + per-stream stats, drop sink", sz, real_st[sz],
                                run_engine(c, with_flow_stats(s_st[sz], PG_ID), args.duration))
            finally:
                c.disconnect()
            if "d" in cases:
                lab.attach_gen_pass()
                for _ in range(args.runs):
                    for prebuilt, case in ((False, "(d) Scapy sendp(pkts), AF_PACKET"),
                                           (True, "(d) Scapy sendp, packets prebuilt to bytes")):
                        for sz in (64, 1424):
                            add(case, sz, real[sz], run_scapy(lab, real[sz], args.flows, args.duration, prebuilt))
        if "c-rx" in cases:
            with Lab.up(dut="tx") as lab:
                c = lab.client()
                c.connect()
                try:
                    for _ in range(args.runs):
                        for sz in (64, 1424):
                            add("(c-rx) (b) + per-stream stats, reflector", sz, real_st[sz],
                                run_engine(c, with_flow_stats(s_st[sz], PG_ID), args.duration))
                finally:
                    c.disconnect()
    finally:
        trex.close()
        shutil.rmtree(tmp, ignore_errors=True)

    rows = [(case, asked, size, median_result(rs)) for (case, asked, size), rs in runs.items()]
    ceiling = {asked: r["per_core"] for case, asked, _, r in rows if case.startswith("(a)")}
    head = ("case", "asked", "frame", "Mpps", "cores", "Mpps/core", "x (a)", "Gbit/s L1", "rx pkts")
    table = []
    for case, asked, size, r in rows:
        pps = r["tx"] / r["wall"]
        table.append((case, str(asked), str(size), f"{pps / 1e6:.4g}", f"{r['cpu_s'] / r['wall']:.2f}",
                      f"{r['per_core'] / 1e6:.4g}", f"{r['per_core'] / ceiling[asked]:.3g}",
                      f"{pps * (size + 20) * 8 / 1e9:.3g}", str(int(r["rx"]))))
    widths = [max(len(x) for x in col) for col in zip(head, *table)]
    if args.markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "|".join("---" for _ in head) + "|")
        for t in table:
            print("| " + " | ".join(t) + " |")
    else:
        for t in [head] + table:
            print("  ".join(x.ljust(w) for x, w in zip(t, widths)))
    print()
    for sz in (64, 1424):
        if not ratios[sz]:
            continue
        ratio = statistics.median(ratios[sz])
        each = " ".join(f"{x:.2f}" for x in ratios[sz])
        print(f"(b)/(a) per core at {sz} bytes asked: {ratio:.2f}  "
              f"(target >= 0.75: {'met' if ratio >= 0.75 else 'NOT met'})"
              + (f"; median of {len(ratios[sz])} runs: {each}" if len(ratios[sz]) > 1 else ""))
    print(f"profile: {note}; flows {args.flows}; {args.duration:g} s per row; {args.runs} run(s), "
          f"medians; kernel {platform.release()}; {os.cpu_count()} CPUs; "
          f"load average before/after: {load0} / {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
