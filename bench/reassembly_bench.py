#!/usr/bin/env python3
"""What a G-PDU in outer fragments costs the PGW-U (docs/dataplane.md, "Outer fragments").

On an embedded lab (access MTU 1500, one bearer), sent with AF_PACKET from the generator namespace:
  1. N G-PDUs of a 1480-octet inner packet (1516 octets encapsulated: two outer fragments each),
     paced by the sender: the CPU time of `pgwu reassemble` (process context: reading the datagram,
     the checks, the raw socket's send down to the SGi veth) per G-PDU;
  2. bursts of B such G-PDUs queued while the reassembler is stopped (SIGSTOP: still registered,
     the kernel reassembles them onto its socket), then drained (SIGCONT): reassembled G-PDUs per
     second through the reassembler, wall clock, read from reasm_stats every millisecond.
The kernel's own share (xdp_access passing the fragments, reassembly, UDP delivery) runs in the DUT's
NAPI kthreads and is not in these numbers.
Usage: bench/reassembly_bench.py [N] [B]   (as root; defaults 5000 and 1500)
"""

from __future__ import annotations

import os
import signal
import struct
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scapy.all import IP, UDP, Ether, Raw, fragment, raw  # noqa: E402
from scapy.contrib.gtp import GTP_U_Header  # noqa: E402

from gtplab.kernel import bpf  # noqa: E402
from gtplab.kernel.sched import proc_stat  # noqa: E402
from gtplab.lab.topology import Lab  # noqa: E402
from tests.lib.lab import add_bearer, reassembler_pid, send_frames  # noqa: E402


def proc_cpu_s(pid: int) -> float:
    return proc_stat(pid).cpu_s


def reasm(lab) -> dict:
    return lab.pgwu_json("stats")["reassembler"]


def frames(lab, n: int, inner_len: int, frag: bool, id0: int = 0) -> list[bytes]:
    a = lab.addressing
    acc = lab.ports[0]
    out = []
    for i in range(n):
        inner = IP(src=a.ue(0), dst=a.pdn(0), id=i & 0xffff) / UDP(sport=1024 + i % 50000, dport=9) / \
            Raw(b"\0" * (inner_len - 28))
        pkt = IP(src=a.sgw(0), dst=a.dut_access, id=(id0 + i) & 0xffff) / UDP(sport=2152, dport=2152) / \
            GTP_U_Header(teid=a.local_teid(0), gtp_type=255) / inner
        for p in (fragment(pkt, fragsize=1480) if frag else [pkt]):
            out.append(raw(Ether(src=acc.mac, dst=acc.dut_mac) / p))
    return out


def forwarded(m) -> int:
    return bpf.u64(m.lookup(struct.pack("=I", 1)))      # PGWU_RA_FORWARDED


def wait_forwarded(m, target: int, timeout: float = 60) -> float:
    deadline = time.monotonic() + timeout
    while True:
        if forwarded(m) >= target or time.monotonic() > deadline:
            return time.monotonic()
        time.sleep(0.001)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
    burst = int(sys.argv[2]) if len(sys.argv) > 2 else 1500
    with Lab.up(mtu=1500) as lab:
        add_bearer(lab, 0)
        pid = reassembler_pid(lab)
        assert pid, lab.state.get("reassembler")
        frag_frames = frames(lab, n, 1480, True)
        whole_frames = frames(lab, n, 1464, False)
        assert len(frag_frames) == 2 * n

        # 1. fragmented, paced by the sender
        m = bpf.Map.pinned(os.path.join(lab.pin_dir, "reasm_stats"))
        r0 = reasm(lab)
        d0, t0 = proc_cpu_s(pid), time.monotonic()
        send_frames(lab, 0, frag_frames)
        t1 = wait_forwarded(m, r0["forwarded"] + n)
        r1 = reasm(lab)
        d1 = proc_cpu_s(pid)
        fwd = r1["forwarded"] - r0["forwarded"]
        print(f"paced: {n} G-PDUs ({2 * n} fragments) sent, {fwd} forwarded, "
              f"{r1['received'] - r0['received'] - fwd} dropped by the reassembler, in {t1 - t0:.2f} s "
              f"({fwd / (t1 - t0):,.0f} G-PDUs/s, the sender's pace); "
              f"pgwu reassemble CPU {(d1 - d0) / max(fwd, 1) * 1e6:.1f} us per G-PDU")

        # 2. bursts drained by the reassembler alone
        rates = []
        for rep in range(3):
            bf = frames(lab, burst, 1480, True, id0=(rep + 1) * 20000)
            os.kill(pid, signal.SIGSTOP)
            try:
                f0 = forwarded(m)
                send_frames(lab, 0, bf)
                time.sleep(0.5)     # the kernel reassembles them onto the stopped reader's socket
            finally:
                os.kill(pid, signal.SIGCONT)
            t0 = time.monotonic()
            t1 = wait_forwarded(m, f0 + burst, timeout=30)
            fwd = forwarded(m) - f0
            rates.append(fwd / (t1 - t0))
            print(f"burst {rep + 1}: {burst} G-PDUs queued, {fwd} forwarded in {(t1 - t0) * 1e3:.1f} ms: "
                  f"{fwd / (t1 - t0):,.0f} G-PDUs/s")
        m.close()
        rates.sort()
        print(f"reassembler drain rate, median of 3: {rates[1]:,.0f} reassembled G-PDUs/s")


if __name__ == "__main__":
    main()
