"""Streams for the traffic generators' tests: named test packets, TRex stream JSON and TRex's field
semantics computed independently (the engine's tests), a tiny TRex profile (the backend and TRex
tests).
"""

from __future__ import annotations

import base64
import textwrap

from scapy.all import IP, TCP, UDP, Dot1Q, Ether, Raw, raw
from scapy.contrib.gtp import GTP_U_Header


# ---- the engine: named test packets, TRex stream JSON, TRex's field semantics ----------------------
# (tests/engine/test_engine_vm.py, tests/engine/test_engine_lab.py)

UDP_PKT = Ether(dst="02:00:00:00:00:02", src="02:00:00:00:00:01") / \
    IP(src="16.0.0.1", dst="48.0.0.1") / UDP(sport=1025, dport=12) / Raw(b"x" * 40)
TCP_PKT = Ether() / IP(src="16.0.0.1", dst="48.0.0.1") / TCP(sport=1025, dport=80) / Raw(b"y" * 41)
VLAN_PKT = Ether() / Dot1Q(prio=5, vlan=100) / IP(src="16.0.0.1", dst="48.0.0.1") / UDP() / Raw(b"z" * 30)
GTPU_PKT = Ether() / IP(src="10.201.0.16", dst="10.201.0.1") / UDP(sport=2152, dport=2152) / \
    GTP_U_Header(teid=0x10000) / IP(src="10.64.0.1", dst="198.18.0.1") / UDP(sport=1234, dport=5678) / \
    Raw(b"p" * 50)
# offsets in GTPU_PKT: outer IP 14, outer UDP 34, GTP 42, inner IP 50, inner UDP 70
GTP_TEID_OFF, INNER_IP, INNER_SRC = 46, 50, 62


def stream(pkt, instructions, **extra):
    js = {"mode": {"type": "continuous", "rate": {"type": "pps", "value": 1000}},
          "packet": {"binary": base64.b64encode(raw(pkt)).decode(), "meta": ""},
          "vm": {"instructions": instructions}, "flow_stats": {"enabled": False}}
    js.update(extra)
    return js


def fv(name, size, op, lo, hi, init=None, step=1):
    d = {"type": "flow_var", "name": name, "size": size, "op": op, "min_value": lo,
         "max_value": hi, "step": step, "next_var": None, "split_to_cores": True}
    d["init_value"] = (hi if op == "dec" else lo) if init is None else init
    return d


def wr(name, off, add=0, big=True):
    return {"type": "write_flow_var", "name": name, "pkt_offset": off, "add_value": add,
            "is_big_endian": big}


def assert_checksums(frame: bytes):
    """Every IPv4/UDP/TCP checksum in the frame (inner ones too) is what Scapy computes."""
    p = Ether(frame)
    q = p.copy()
    for layer in (IP, UDP, TCP):
        i = 1
        while q.getlayer(layer, i) is not None:
            ly = q.getlayer(layer, i)
            if not (layer is UDP and ly.chksum == 0):
                ly.chksum = None
            i += 1
    q = Ether(raw(q))
    for layer in (IP, UDP, TCP):
        i = 1
        while p.getlayer(layer, i) is not None:
            assert p.getlayer(layer, i).chksum == q.getlayer(layer, i).chksum, \
                f"{layer.__name__}#{i} checksum wrong in {p.summary()}"
            i += 1


# TRex semantics, computed independently

def trex_inc(lo, hi, init, step, n):
    span = hi - lo + 1
    return [lo + ((init - lo) + k * step) % span for k in range(n)]


def trex_dec(lo, hi, init, step, n):
    span = hi - lo + 1
    return [lo + ((init - lo) - k * step) % span for k in range(n)]


def fastrand(seed):
    """trex_stl_stream_vm.h fastrand/vm_rand16: an LCG, 15 bits per draw."""
    while True:
        seed = (214013 * seed + 2531011) & 0xFFFFFFFF
        yield (seed >> 16) & 0x7FFF


def rand_values(seed, size, lo, hi, n, limit=None):
    out, k = [], 0
    g = fastrand(seed)
    for i in range(n):
        if limit is not None and k == limit:
            g, k = fastrand(seed), 0
        r = next(g) if size <= 2 else (next(g) << 16) + next(g)
        out.append(lo + r % (hi - lo + 1))
        k += 1
    return out


# ---- a tiny TRex profile (tests/engine/test_backend.py, tests/trex/test_trex.py) ----------------

PROFILE = textwrap.dedent('''
    import argparse
    from trex.stl.api import STLStream, STLPktBuilder, STLTXCont, STLVM, STLProfile
    from scapy.layers.l2 import Ether
    from scapy.layers.inet import IP, UDP

    class Prof:
        def get_streams(self, direction=0, tunables=(), **kwargs):
            p = argparse.ArgumentParser()
            p.add_argument("--flows", type=int, default=4, help="number of source addresses")
            a = p.parse_args(tunables)
            vm = STLVM()
            vm.var(name="src", min_value="16.0.0.1", max_value="16.0.0.%d" % a.flows, size=4, op="inc")
            vm.write(fv_name="src", pkt_offset="IP.src")
            vm.fix_chksum()
            pkt = Ether() / IP(dst="48.0.0.1") / UDP(dport=12, sport=1025) / (b"x" * 18)
            return [STLStream(packet=STLPktBuilder(pkt=pkt, vm=vm), mode=STLTXCont(pps=10))]

    def register():
        return Prof()
''')


def ipv6_l4_ok(ip6) -> bool:
    """The UDP/TCP checksum of the layer after an IPv6 header (Scapy), recomputed over the IPv6
    pseudo header: right, and never 0 (RFC 8200 8.1: a UDP checksum over IPv6 is mandatory)."""
    from scapy.layers.inet6 import in6_chksum
    l4 = ip6.payload
    nh, pos = (17, 6) if isinstance(l4, UDP) else (6, 16)
    b = bytearray(raw(l4))
    got = int.from_bytes(b[pos:pos + 2], "big")
    b[pos:pos + 2] = b"\0\0"
    want = in6_chksum(nh, ip6, bytes(b))
    if nh == 17 and want == 0:
        want = 0xFFFF
    return got == want and got != 0
