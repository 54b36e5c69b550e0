"""IPv6 inside the IPv4 tunnel in the XDP PGW-U (issue 32 item 3), tested in place with BPF_PROG_TEST_RUN.

A bearer's UE /64 lives in two maps beside the IPv4 halves (dataplane/include/maps.h): dl6_bearers
(/64 -> downlink half, the dl_bearers value) and ul6_prefix (local TEID -> /64). xdp_sgi hands IPv6
frames to xdp_sgi6 (a tail call). Each test builds its frame with Scapy, runs it, and checks packet by
packet: the verdict, exactly one (reason, verdict) counted with the frame's length, the output frame
against one built here independently (outer IPv4/UDP/GTP-U, TEID, the inner packet unchanged but its
hop limit), and the bearers' usage counters.

Static next hops (config.nexthop) on interface indexes that do not exist, as in test_dataplane.py.
"""

from __future__ import annotations

import os
import socket
import struct

import pytest
from scapy.layers.inet import IP, UDP, TCP
from scapy.layers.inet6 import IPv6, ICMPv6EchoRequest, ICMPv6ND_NS, ICMPv6ND_NA, IPv6ExtHdrHopByHop
from scapy.layers.l2 import Dot1Q, Ether
from scapy.packet import Raw

from gtplab.dut.dataplane import REASONS, VERDICTS, DlBearer, B_QFI, B_QFI_SHIFT, B_CSUM_OFF
from gtplab.gtpu import packets as P
from gtplab.kernel import bpf
from tests.lib import oracle as O
from tests.lib.pgwu_config import BASE_CONFIG, NH_ACCESS, NH_SGI, cfg_of, stats_delta

pytestmark = pytest.mark.bpf

# (local TEID, UE IPv4, UE /64, SGW, SGW TEID, QFI)
B1 = (0x0000_0700, "10.45.0.7", "fd47:7470:0:1::", "192.0.2.7", 0x7777_0001, None)
B2 = (0x0000_0800, "10.45.0.8", "fd47:7470:0:2::", "192.0.2.8", 0x8888_0002, 9)
BEARERS6 = (B1, B2)
UE6_1 = "fd47:7470:0:1::10"          # an address in B1's /64
UE6_2 = "fd47:7470:0:2:aaaa:bbbb:cccc:dddd"
SERVER6 = "fd47:7471::10"            # an N6 server (docs/ipv6.md)
UNKNOWN6 = "fd47:7470:0:99::1"       # a /64 with no bearer


def p64(addr: str) -> bytes:
    return socket.inet_pton(socket.AF_INET6, addr)[:8]


@pytest.fixture
def dp6(dataplane):
    """The module's data plane with BASE_CONFIG, B1 and B2 (IPv4 halves and their /64s), stats and
    counters from zero; the two IPv6 maps opened beside it."""
    dp = dataplane
    dp.set_config(BASE_CONFIG)
    dp.flush_bearers()
    maps = {n: bpf.Map.pinned(os.path.join(dp.pin_dir, n)) for n in ("dl6_bearers", "ul6_prefix")}
    try:
        for m in maps.values():
            for k in list(m.keys()):
                m.delete(k)
        for teid, ue, pfx, sgw, steid, qfi in BEARERS6:
            dp.add_bearer(teid, ue, sgw, steid, qfi=qfi)
            flags = 0 if qfi is None else B_QFI | qfi << B_QFI_SHIFT
            maps["dl6_bearers"].update(p64(pfx), DlBearer(sgw, steid, teid, flags).pack())
            maps["ul6_prefix"].update(struct.pack("!I", teid), p64(pfx))
        dp.reset_stats()
        dp.maps6 = maps
        yield dp
    finally:
        for m in maps.values():
            for k in list(m.keys()):
                m.delete(k)
            m.close()


def dl6_usage(dp, pfx: str) -> tuple[int, int]:
    b = DlBearer.unpack(dp.maps6["dl6_bearers"].lookup(p64(pfx)))
    return b.packets, b.bytes


def usage_all(dp) -> dict:
    out = {}
    for teid, ue, pfx, *_ in BEARERS6:
        u, d = dp.ul_bearer(teid), dp.dl_bearer(ue)
        out[("ul", teid)] = (u.packets, u.bytes)
        out[("dl", ue)] = (d.packets, d.bytes)
        out[("dl6", pfx)] = dl6_usage(dp, pfx)
    return out


def run(dp, prog: str, frame: bytes):
    """(result, {(reason, verdict): (packets, bytes)} counted, usage counters that moved)"""
    u0, s0 = usage_all(dp), dp.stats_array()
    res = dp.run_sgi(frame) if prog == "sgi" else dp.run_access(frame)
    u1, s1 = usage_all(dp), dp.stats_array()
    moved = {k: (u1[k][0] - u0[k][0], u1[k][1] - u0[k][1]) for k in u1 if u1[k] != u0[k]}
    return res, stats_delta(s0, s1), moved


# ---- downlink: frames and the expected G-PDU ---------------------------------------------------------
def dl6_frame(dst: str, *, src: str = SERVER6, hlim: int = 64, tc: int = 0, payload=None, vlan: int | None = None,
              size: int | None = None) -> bytes:
    """An IPv6 packet from an N6 server as the SGi router sends it to the PGW-U."""
    eth = Ether(src=NH_SGI.dmac, dst=P.PGW_SGI_MAC)
    if vlan is not None:
        eth = eth / Dot1Q(vlan=vlan)
    body = payload if payload is not None else UDP(sport=40000, dport=5001) / Raw(b"\x5a" * 32)
    pkt = eth / IPv6(src=src, dst=dst, hlim=hlim, tc=tc, fl=0x12345) / body
    if size is not None and len(pkt) < size:
        pkt = eth / IPv6(src=src, dst=dst, hlim=hlim, tc=tc, fl=0x12345) / (
            body / Raw(b"\xa5" * (size - len(pkt))))
    return bytes(pkt)


def inner6(frame: bytes) -> bytes:
    l2 = 18 if frame[12:14] == b"\x81\x00" else 14
    plen = struct.unpack_from("!H", frame, l2 + 4)[0]
    return frame[l2:l2 + 40 + plen]


def sport6(ip6: bytes) -> int:
    """The outer UDP source port of an IPv6 flow: murmur3_32 (pgwu_sport_of) over the source and the
    destination each folded to 4 octets by XOR of its four words, then the TCP/UDP ports (else 4 zero
    octets), seeded with the next header."""
    def fold(a: bytes) -> bytes:
        return bytes(a[i] ^ a[4 + i] ^ a[8 + i] ^ a[12 + i] for i in range(4))
    nh = ip6[6]
    l4 = ip6[40:44] if nh in (6, 17) and len(ip6) >= 44 else bytes(4)
    return 0xC000 | (O.murmur3_32(fold(ip6[8:24]) + fold(ip6[24:40]) + l4, nh) & 0x3FFF)


def dl6_expected(frame: bytes, bearer, *, ip_id: int, csum: bool = True) -> bytes:
    """The G-PDU (spec: as xdp_sgi's IPv4 encapsulation): Ethernet to the access next hop, IPv4
    local -> SGW, TOS = the Traffic Class, no DF (the kernel may fragment it), TTL 64, UDP from the
    flow's port to 2152, GTP-U G-PDU with the SGW's TEID (and the PDU Session Container of a QFI),
    then the IPv6 packet with its hop limit one less."""
    _, _, _, sgw, steid, qfi = bearer
    ip6 = bytearray(inner6(frame))
    ip6[7] -= 1
    tc = ((ip6[0] & 0x0F) << 4) | (ip6[1] >> 4)
    pkt = (Ether(dst=NH_ACCESS.dmac, src=NH_ACCESS.smac)
           / IP(ihl=5, tos=tc, id=ip_id, flags=0, frag=0, ttl=64, proto=17, src=BASE_CONFIG.local_addr, dst=sgw)
           / UDP(sport=sport6(bytes(ip6)), dport=2152, chksum=None if csum else 0)
           / O.gtp_header_for(bytes(ip6), steid, qfi) / Raw(bytes(ip6)))
    return bytes(pkt)


def check_dl6_forwarded(dp, frame: bytes, bearer, *, csum: bool = True):
    res, counted, moved = run(dp, "sgi", frame)
    assert (res.verdict, counted) == ("redirect", {("dl_fwd", "redirect"): (1, len(frame))}), (
        res.verdict, counted, O.describe("input", frame))
    out = res.data
    ip_id = struct.unpack_from("!H", out, 14 + 4)[0]
    want = dl6_expected(frame, bearer, ip_id=ip_id, csum=csum)
    assert out == want, O.mismatch_report(want, out)
    if csum:
        assert O.outer_udp_ok(out), "outer UDP checksum wrong (RFC 1071)"
    assert moved == {("dl6", bearer[2]): (1, len(inner6(frame)))}, moved
    return out


DL6_FORWARDED = [
    ("udp", B1, dict(dst=UE6_1)),
    ("udp-qfi-psc", B2, dict(dst=UE6_2)),
    ("tcp", B1, dict(dst=UE6_1, payload=TCP(sport=443, dport=50000, flags="A") / Raw(b"x" * 100))),
    ("icmpv6-echo", B1, dict(dst=UE6_1, payload=ICMPv6EchoRequest(id=7, seq=1, data=b"ping" * 10))),
    ("udp-zero-checksum-summed", B1, dict(dst=UE6_1, payload=UDP(sport=1, dport=2, chksum=0) / Raw(b"z" * 51))),
    ("ext-header-summed", B1, dict(dst=UE6_1, payload=IPv6ExtHdrHopByHop() / UDP(sport=9, dport=9) / Raw(b"h" * 21))),
    ("hop-limit-2", B1, dict(dst=UE6_1, hlim=2)),
    ("traffic-class", B1, dict(dst=UE6_1, tc=0xB8)),
    ("vlan-in", B1, dict(dst=UE6_1, vlan=100)),
    ("1500-octets", B2, dict(dst=UE6_2, size=1514)),
    ("3000-octets", B1, dict(dst=UE6_1, size=3014)),
]


@pytest.mark.parametrize("name,bearer,kw", DL6_FORWARDED, ids=[n for n, _, _ in DL6_FORWARDED])
def test_dl6_forwarded(dp6, name, bearer, kw):
    check_dl6_forwarded(dp6, dl6_frame(**kw), bearer)


def test_dl6_outer_checksum_off(dp6):
    dp6.set_config(cfg_of({"csum": False}))
    out = check_dl6_forwarded(dp6, dl6_frame(UE6_1), B1, csum=False)
    assert out[14 + 20 + 6:14 + 20 + 8] == b"\0\0"


def test_dl6_per_bearer_checksum_off(dp6):
    _, _, pfx, sgw, steid, _ = B1
    dp6.maps6["dl6_bearers"].update(p64(pfx), DlBearer(sgw, steid, B1[0], B_CSUM_OFF).pack())
    check_dl6_forwarded(dp6, dl6_frame(UE6_1), B1, csum=False)


def test_dl6_sport_fixed(dp6):
    dp6.set_config(cfg_of({"sport_entropy": False}))
    res, counted, _ = run(dp6, "sgi", dl6_frame(UE6_1))
    assert counted == {("dl_fwd", "redirect"): (1, len(dl6_frame(UE6_1)))}
    assert struct.unpack_from("!H", res.data, 14 + 20)[0] == 2152


def test_dl6_counts_accumulate(dp6):
    """Each forwarded packet adds to the /64's usage and to dl_fwd: 5 packets, 5 x the inner length."""
    f = dl6_frame(UE6_1)
    for _ in range(5):
        assert dp6.run_sgi(f).verdict == "redirect"
    assert dl6_usage(dp6, B1[2]) == (5, 5 * len(inner6(f)))
    assert dp6.stats()[("dl_fwd", "redirect")] == (5, 5 * len(f))
    assert dp6.dl_bearer(B1[1]).packets == 0      # the IPv4 half's counters are its own


DL6_NOT_FORWARDED = [
    # (name, frame kwargs, reason, verdict)
    ("unknown-64", dict(dst=UNKNOWN6), "drop_unknown_ue", "drop"),
    ("hop-limit-1", dict(dst=UE6_1, hlim=1), "drop_ttl_expired", "drop"),
    ("hop-limit-0", dict(dst=UE6_1, hlim=0), "drop_ttl_expired", "drop"),
    ("link-local-to-kernel", dict(dst="fe80::1"), "pass_not_ue", "pass"),
    ("multicast-to-kernel", dict(dst="ff02::1"), "pass_not_ue", "pass"),
    ("neighbor-solicitation-to-kernel", dict(dst="fd47:7472::1", payload=ICMPv6ND_NS(tgt="fd47:7472::1")),
     "pass_not_ue", "pass"),
    ("neighbor-advert-in-a-ue-64-to-kernel", dict(dst=UE6_1, payload=ICMPv6ND_NA(tgt=SERVER6)), "pass_not_ue", "pass"),
]


@pytest.mark.parametrize("name,kw,reason,verdict", DL6_NOT_FORWARDED, ids=[r[0] for r in DL6_NOT_FORWARDED])
def test_dl6_not_forwarded(dp6, name, kw, reason, verdict):
    f = dl6_frame(**kw)
    res, counted, moved = run(dp6, "sgi", f)
    assert (res.verdict, counted) == (verdict, {(reason, verdict): (1, len(f))}), (res.verdict, counted)
    assert moved == {}
    if verdict == "pass":
        assert res.data == f, "a frame for the kernel is passed unchanged"


def test_dl6_truncated_or_bad_header(dp6):
    """An IPv6 header whose payload length runs past the frame, or a version that is not 6 behind the
    IPv6 EtherType: drop_bad_ip_dl."""
    f = bytearray(dl6_frame(UE6_1))
    f[14 + 4:14 + 6] = struct.pack("!H", len(f))            # past the end
    g = bytearray(dl6_frame(UE6_1))
    g[14] = 0x45                                            # version 4 in an IPv6 frame
    for frame in (bytes(f), bytes(g)):
        res, counted, moved = run(dp6, "sgi", frame)
        assert (res.verdict, counted, moved) == ("drop", {("drop_bad_ip_dl", "drop"): (1, len(frame))}, {})


def test_dl6_ethernet_padding_cut(dp6):
    """A short IPv6 packet padded to 60 octets: only the packet is encapsulated."""
    f = dl6_frame(UE6_1, payload=UDP(sport=1, dport=2))     # 14 + 48 = 62: pad it by hand
    padded = f + b"\0" * 10
    res, counted, moved = run(dp6, "sgi", padded)
    assert counted == {("dl_fwd", "redirect"): (1, len(padded))}
    ip_id = struct.unpack_from("!H", res.data, 18)[0]
    assert res.data == dl6_expected(f, B1, ip_id=ip_id)


def test_dl6_ipv4_path_unchanged(dp6):
    """The same bearer's IPv4 downlink still goes the IPv4 way (dl_bearers, its own counters)."""
    f = bytes(Ether(src=NH_SGI.dmac, dst=P.PGW_SGI_MAC) / IP(src=P.PDN_ADDR, dst=B1[1], ttl=64)
              / UDP(sport=1, dport=2) / Raw(b"v4" * 20))
    res, counted, moved = run(dp6, "sgi", f)
    assert counted == {("dl_fwd", "redirect"): (1, len(f))}
    assert moved == {("dl", B1[1]): (1, len(f) - 14)}
