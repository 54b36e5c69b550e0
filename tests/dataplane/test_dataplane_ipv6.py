"""IPv6 inside the IPv4 tunnel in the XDP PGW-U (issue 32 item 3), tested in place with BPF_PROG_TEST_RUN.

A bearer's UE /64 lives in two maps beside the IPv4 halves (dataplane/include/maps.h): dl6_bearers
(/64 -> downlink half, the dl_bearers value) and ul6_prefix (local TEID -> /64 and the IPv6 uplink's
usage). xdp_sgi hands IPv6 frames to xdp_sgi6, xdp_access G-PDUs with an IPv6 T-PDU to xdp_access6
(tail calls); the uplink (`ul6` tests) also runs with the kernel's FIB in a namespace of its own. Each test builds its frame with Scapy, runs it, and checks packet by
packet: the verdict, exactly one (reason, verdict) counted with the frame's length, the output frame
against one built here independently (outer IPv4/UDP/GTP-U, TEID, the inner packet unchanged but its
hop limit), and the bearers' usage counters.

Static next hops (config.nexthop) on interface indexes that do not exist, as in test_dataplane.py.
"""

from __future__ import annotations

import json
import secrets
import socket
import struct
import subprocess
import time

import pytest
from scapy.layers.inet import IP, UDP, TCP
from scapy.layers.inet6 import (IPv6, ICMPv6EchoRequest, ICMPv6PacketTooBig, ICMPv6TimeExceeded, ICMPv6DestUnreach, ICMPv6ND_NS, ICMPv6ND_NA, IPv6ExtHdrHopByHop, IPv6ExtHdrDestOpt,
                                 IPv6ExtHdrRouting, IPv6ExtHdrFragment, PadN)
from scapy.layers.l2 import Dot1Q, Ether
from scapy.packet import Raw

from gtplab.dut.dataplane import (REASONS, VERDICTS, DlBearer, B_PEER6, B_QFI, B_QFI_SHIFT, B_CSUM_OFF, Nexthop,
                                  Qos, peer6_sgw,
                                  QOS_QUOTA,
                                  QOS_QUOTA_UL, QOS_UL_CLOSED)
from gtplab.gtpu import packets as P
from gtplab.lab.topology import run_in_netns
from tests.lib import oracle as O
from tests.lib.pgwu import pgwu
from tests.lib.pgwu_config import BASE_CONFIG, NH_ACCESS, NH_SGI, cfg_of, stats_delta

LO_IF = socket.if_nametoindex("lo")

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
    try:
        for teid, ue, pfx, sgw, steid, qfi in BEARERS6:
            dp.add_bearer(teid, ue, sgw, steid, qfi=qfi)
            flags = 0 if qfi is None else B_QFI | qfi << B_QFI_SHIFT
            # in the hash maps and the slot index, as pgwu writes them (the packet path's fast way)
            dp.add_bearer6(teid, pfx, DlBearer(sgw, steid, teid, flags))
        dp.reset_stats()
        yield dp
    finally:
        dp.flush_bearers()


def dl6_usage(dp, pfx: str) -> tuple[int, int]:
    b = dp.dl6_bearer(pfx)
    return b.packets, b.bytes


def ul6_usage(dp, teid: int) -> tuple[int, int]:
    """(packets, bytes) of the TEID's IPv6 uplink (ul6_prefix and its slot)."""
    return dp.ul6_usage(teid)


def usage_all(dp) -> dict:
    out = {}
    for teid, ue, pfx, *_ in BEARERS6:
        u, d = dp.ul_bearer(teid), dp.dl_bearer(ue)
        out[("ul", teid)] = (u.packets, u.bytes)
        out[("dl", ue)] = (d.packets, d.bytes)
        out[("dl6", pfx)] = dl6_usage(dp, pfx)
        out[("ul6", teid)] = ul6_usage(dp, teid)
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
    dp6.set_dl6(pfx, DlBearer(sgw, steid, B1[0], B_CSUM_OFF))
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


# ---- uplink: xdp_access hands G-PDUs with an IPv6 T-PDU to xdp_access6 ------------------------------
# The spec (docs/ipv6.md "Uplink"): the outer checks, the TEID's bearer and its QFI as for IPv4; a
# bearer without a /64 takes no IPv6 (drop_inner_not_ipv4); the T-PDU one whole IPv6 packet
# (drop_inner_bad); its source in the bearer's /64 (drop_spoofed); hop limit > 1 (drop_ttl_expired);
# then out to the SGi next hop with the hop limit one less and the outer headers gone, counted in the
# TEID's ul6_prefix entry (uplink6).
B3 = (0x0000_0900, "10.45.0.9", None, "192.0.2.9", 0x9999_0003, None)     # IPv4 only: no /64


def ul6_inner(src: str = UE6_1, dst: str = SERVER6, *, hlim: int = 64, tc: int = 0, payload=None,
              size: int | None = None) -> bytes:
    """The IPv6 packet a UE sends (the T-PDU); size: its length, padded with UDP payload."""
    body = payload if payload is not None else UDP(sport=50000, dport=5001) / Raw(b"\x6b" * 24)
    pkt = IPv6(src=src, dst=dst, hlim=hlim, tc=tc, fl=0x54321) / body
    if size is not None and len(pkt) < size:
        pkt = IPv6(src=src, dst=dst, hlim=hlim, tc=tc, fl=0x54321) / (body / Raw(b"\xa5" * (size - len(pkt))))
    return bytes(pkt)


def ul6_frame(inner: bytes, bearer=B1, **kw) -> bytes:
    """The G-PDU an SGW sends for `bearer` (its local TEID; the UL PDU Session Container of its QFI
    unless ext is given) carrying `inner`; other keywords go to gtplab.gtpu.packets.gtpu()."""
    teid, qfi = bearer[0], bearer[5]
    if qfi is not None and "ext" not in kw:
        kw["ext"] = [P.pdu_session_container(qfi)]
    return bytes(P.gtpu(inner, teid=teid, **kw))


def ul6_expected(inner: bytes, *, vlan: int | None = None) -> bytes:
    """Ethernet from the SGi next hop's MACs (EtherType IPv6, the egress VLAN if any), then the
    T-PDU as sent, its hop limit one less: nothing of the tunnel left."""
    out = bytearray(inner)
    out[7] -= 1
    eth = Ether(src=NH_SGI.smac, dst=NH_SGI.dmac, type=0x86DD if vlan is None else 0x8100)
    if vlan is not None:
        return bytes(eth / Dot1Q(vlan=vlan, type=0x86DD)) + bytes(out)
    return bytes(eth) + bytes(out)


def check_ul6_forwarded(dp, frame: bytes, inner: bytes, bearer=B1, *, vlan: int | None = None):
    res, counted, moved = run(dp, "access", frame)
    assert (res.verdict, counted) == ("redirect", {("ul_fwd", "redirect"): (1, len(frame))}), (
        res.verdict, counted, O.describe("input", frame))
    want = ul6_expected(inner, vlan=vlan)
    assert res.data == want, O.mismatch_report(want, res.data)
    assert moved == {("ul6", bearer[0]): (1, len(inner))}, moved
    return res.data


UL6_FORWARDED = [
    # (name, bearer, inner kwargs, gtpu kwargs)
    ("udp", B1, dict(), dict()),
    ("udp-qfi-psc", B2, dict(src=UE6_2), dict()),
    ("tcp", B1, dict(payload=TCP(sport=50000, dport=443, flags="S") / Raw(b"t" * 60)), dict()),
    ("icmpv6-echo", B1, dict(payload=ICMPv6EchoRequest(id=1, seq=2, data=b"ping" * 8)), dict()),
    ("hop-limit-2", B1, dict(hlim=2), dict()),
    ("hop-limit-255", B1, dict(hlim=255), dict()),
    ("traffic-class-kept", B1, dict(tc=0xB8), dict()),
    ("gtp-seq-and-ext-chain", B2, dict(src=UE6_2), dict(seq=0x1234, ext=[
        P.pdu_session_container(9), P.ext_header(P.EXT_UDP_PORT, b"\x08\x68")])),
    ("vlan-in", B1, dict(), dict(vlan=100)),
    ("header-only", B1, dict(payload=Raw(b"")), dict()),
    ("1500-octets", B1, dict(size=1500), dict()),
    ("3000-octets", B2, dict(src=UE6_2, size=3000), dict()),
    # extension headers: walked to the upper-layer protocol, passed on untouched
    ("hop-by-hop", B1, dict(payload=IPv6ExtHdrHopByHop() / UDP(sport=1, dport=2) / Raw(b"h" * 20)), dict()),
    ("hop-by-hop-long-then-dest-opts", B1, dict(
        payload=IPv6ExtHdrHopByHop(options=[PadN(optdata=b"\0" * 20)]) / IPv6ExtHdrDestOpt()
        / TCP(sport=1, dport=2) / Raw(b"d" * 9)), dict()),
    ("routing-header", B1, dict(payload=IPv6ExtHdrRouting(addresses=["fd47:7471::1"]) / UDP() / Raw(b"r")), dict()),
    ("first-fragment", B1, dict(payload=IPv6ExtHdrFragment(id=7, m=1, offset=0) / UDP(sport=1, dport=2)
                                / Raw(b"f" * 32)), dict()),
    ("later-fragment", B1, dict(payload=IPv6ExtHdrFragment(id=7, m=0, offset=5, nh=17) / Raw(b"g" * 16)), dict()),
    ("fragment-header-alone", B1, dict(payload=IPv6ExtHdrFragment(id=8, m=1, offset=0, nh=59)), dict()),
    ("nine-extension-headers", B1, dict(payload=IPv6ExtHdrHopByHop() / IPv6ExtHdrDestOpt() / IPv6ExtHdrDestOpt()
                                        / IPv6ExtHdrDestOpt() / IPv6ExtHdrDestOpt() / IPv6ExtHdrDestOpt()
                                        / IPv6ExtHdrDestOpt() / IPv6ExtHdrDestOpt() / IPv6ExtHdrDestOpt()
                                        / UDP() / Raw(b"n")), dict()),
]


@pytest.mark.parametrize("name,bearer,ikw,gkw", UL6_FORWARDED, ids=[r[0] for r in UL6_FORWARDED])
def test_ul6_forwarded(dp6, name, bearer, ikw, gkw):
    inner = ul6_inner(**ikw)
    check_ul6_forwarded(dp6, ul6_frame(inner, bearer, **gkw), inner, bearer)


def test_ul6_egress_vlan(dp6):
    dp6.set_config(cfg_of({"egress_vlan": (0, 300)}))
    inner = ul6_inner()
    check_ul6_forwarded(dp6, ul6_frame(inner, vlan=12), inner, vlan=300)


def test_ul6_ethernet_padding_cut(dp6):
    """A G-PDU padded past its IP datagram: only the T-PDU comes out."""
    inner = ul6_inner(payload=Raw(b""))
    f = ul6_frame(inner)
    check_ul6_forwarded(dp6, f + b"\0" * 12, inner)


def test_ul6_tx_when_egress_is_ingress(dp6):
    """The SGi next hop out of the interface the G-PDU came in on: XDP_TX, as IPv4's."""
    dp6.set_config(cfg_of({"nexthop": (NH_ACCESS, Nexthop(LO_IF, NH_SGI.smac, NH_SGI.dmac))}))
    inner = ul6_inner()
    f = ul6_frame(inner)
    s0 = dp6.stats_array()
    res = dp6.run_access(f, ingress_ifindex=LO_IF)
    assert (res.verdict, stats_delta(s0, dp6.stats_array())) == ("tx", {("ul_fwd", "tx"): (1, len(f))})
    assert res.data == ul6_expected(inner)


def test_ul6_counts_accumulate_and_session_get_shows_them(dp6):
    """Each forwarded packet adds to the TEID's uplink6 (not the IPv4 half's own counters), and
    `pgwu session get --json` shows it as uplink6 and within uplink."""
    inners = [ul6_inner(size=n) for n in (60, 100, 1000, 1400, 41)]
    for i in inners:
        assert dp6.run_access(ul6_frame(i)).verdict == "redirect"
    want = (len(inners), sum(len(i) for i in inners))
    assert ul6_usage(dp6, B1[0]) == want
    assert (dp6.ul_bearer(B1[0]).packets, dp6.ul_bearer(B1[0]).bytes) == (0, 0)
    v4 = bytes(P.gpdu(teid=B1[0], ue=B1[1], size=200))
    assert dp6.run_access(v4).verdict == "redirect"
    v4_len = len(O.gpdu_inner(v4))
    got = json.loads(pgwu(dp6.pin_dir, "session", "get", "--teid", str(B1[0]), "--json").stdout)
    assert got["uplink6"] == {"packets": want[0], "bytes": want[1]}
    assert got["uplink"] == {"packets": want[0] + 1, "bytes": want[1] + v4_len}


UL6_DROPPED = [
    # (name, bearer, inner kwargs, gtpu kwargs, reason)
    ("spoofed-other-bearers-64", B1, dict(src=UE6_2), dict(), "drop_spoofed"),
    ("spoofed-next-64", B1, dict(src="fd47:7470:0:3::10"), dict(), "drop_spoofed"),
    ("spoofed-link-local", B1, dict(src="fe80::10"), dict(), "drop_spoofed"),
    ("spoofed-unspecified", B1, dict(src="::"), dict(), "drop_spoofed"),
    ("hop-limit-1", B1, dict(hlim=1), dict(), "drop_ttl_expired"),
    ("hop-limit-0", B1, dict(hlim=0), dict(), "drop_ttl_expired"),
    ("qfi-bearer-without-psc", B2, dict(src=UE6_2), dict(ext=[]), "drop_qfi_mismatch"),
    ("qfi-bearer-wrong-qfi", B2, dict(src=UE6_2), dict(ext=[P.pdu_session_container(10)]), "drop_qfi_mismatch"),
]


@pytest.mark.parametrize("name,bearer,ikw,gkw,reason", UL6_DROPPED, ids=[r[0] for r in UL6_DROPPED])
def test_ul6_dropped(dp6, name, bearer, ikw, gkw, reason):
    f = ul6_frame(ul6_inner(**ikw), bearer, **gkw)
    res, counted, moved = run(dp6, "access", f)
    assert (res.verdict, counted, moved) == ("drop", {(reason, "drop"): (1, len(f))}, {}), (res.verdict, counted)



# ---- hop limit expired: ICMPv6 Time Exceeded (RFC 4443 3.3) -------------------------------------------
LOCAL6 = "fd47:7472::1"              # the PGW-U's N6 address (config local_addr6; the lab's dut_sgi6)
TE6_CFG = {"local_addr6": LOCAL6}
REPLY_BURST6 = 10                    # PGWU_REPLY_BURST (test_dataplane.py checks it against consts.h)


def check_time_exceeded6(dp, prog: str, frame: bytes, want: bytes):
    """One frame whose hop limit expired: answered (tx) with exactly `want`, counted drop_ttl_expired/tx
    with the frame's length, one icmp_time_exceeded_sent event, no usage moved."""
    dp.clear_map("reply_budget")
    dp.reset_stats()
    res, counted, moved = run(dp, prog, frame)
    assert (res.verdict, counted, moved) == ("tx", {("drop_ttl_expired", "tx"): (1, len(frame))}, {}), (
        res.verdict, counted, moved, O.describe("input", frame))
    assert res.data == want, O.mismatch_report(want, res.data)
    ev = dp.events()
    assert ev["icmp_time_exceeded_sent"] == 1 and ev["icmp_rate_limited"] == 0, ev
    return res.data


TE6_DL = [
    # (name, frame kwargs)
    ("hop-limit-1", dict(dst=UE6_1, hlim=1)),
    ("hop-limit-0", dict(dst=UE6_1, hlim=0)),
    ("vlan-kept", dict(dst=UE6_2, hlim=1, vlan=120)),
    ("priority-tag-dropped", dict(dst=UE6_1, hlim=1, vlan=0)),
    ("echo-request-answered", dict(dst=UE6_1, hlim=1, payload=ICMPv6EchoRequest(id=7, seq=1, data=b"x" * 40))),
    ("quote-fills-1280", dict(dst=UE6_1, hlim=1, size=1514)),
    ("quote-exactly-1232", dict(dst=UE6_1, hlim=1, size=14 + 1232)),
]


@pytest.mark.parametrize("name,kw", TE6_DL, ids=[r[0] for r in TE6_DL])
def test_dl6_hop_limit_expired_time_exceeded(dp6, name, kw):
    """A downlink IPv6 packet whose hop limit expired: ICMPv6 Time Exceeded (3/0) from the N6 address to
    its sender, back out of SGi, the packet quoted up to 1280 octets of error (oracle, Scapy)."""
    dp6.set_config(cfg_of(TE6_CFG))
    f = dl6_frame(**kw)
    out = check_time_exceeded6(dp6, "sgi", f, O.time_exceeded6_dl_expected(f, LOCAL6))
    ip6 = Ether(out)[IPv6]
    assert ip6.plen + 40 <= 1280 and ip6[ICMPv6TimeExceeded].type == 3
    if name == "quote-fills-1280":
        assert ip6.plen + 40 == 1280


TE6_UL = [
    # (name, bearer, inner kwargs, gtpu kwargs)
    ("hop-limit-1", B1, dict(hlim=1), dict()),
    ("hop-limit-0", B1, dict(hlim=0), dict()),
    ("qfi-bearer-gets-its-psc", B2, dict(src=UE6_2, hlim=1), dict()),
    ("vlan-kept", B1, dict(hlim=1), dict(vlan=130)),
    ("quote-fills-1280", B1, dict(hlim=1, size=1400), dict()),
]


@pytest.mark.parametrize("name,bearer,ikw,gkw", TE6_UL, ids=[r[0] for r in TE6_UL])
def test_ul6_hop_limit_expired_time_exceeded(dp6, name, bearer, ikw, gkw):
    """An uplink IPv6 T-PDU whose hop limit expired: ICMPv6 Time Exceeded from the N6 address to the UE,
    in a G-PDU of its bearer to the SGW (the /64's downlink half: SGW TEID, PDU Session Container of a
    QFI bearer), back to the sender of the G-PDU (oracle, Scapy)."""
    dp6.set_config(cfg_of(TE6_CFG))
    f = ul6_frame(ul6_inner(**ikw), bearer, **gkw)
    want = O.time_exceeded6_ul_expected(f, P.PGW_ADDR, LOCAL6, bearer[3], bearer[4], bearer[5])
    out = check_time_exceeded6(dp6, "access", f, want)
    ip6 = IPv6(O.gpdu_inner(out))
    assert ip6.dst == ikw.get("src", UE6_1) and ip6.plen + 40 <= 1280


TE6_SILENT = [
    # (name, prog, config changes, frame): expired, dropped, no error sent
    ("dl-no-local-addr6", "sgi", {}, lambda: dl6_frame(UE6_1, hlim=1)),
    ("ul-no-local-addr6", "access", {}, lambda: ul6_frame(ul6_inner(hlim=1))),
    ("dl-err-ind-off", "sgi", {**TE6_CFG, "err_ind": False}, lambda: dl6_frame(UE6_1, hlim=1)),
    ("ul-err-ind-off", "access", {**TE6_CFG, "err_ind": False}, lambda: ul6_frame(ul6_inner(hlim=1))),
    ("dl-about-an-icmpv6-error", "sgi", TE6_CFG,
     lambda: dl6_frame(UE6_1, hlim=1, payload=ICMPv6DestUnreach(code=1) / Raw(b"\0" * 48))),
    ("ul-about-an-icmpv6-error", "access", TE6_CFG,
     lambda: ul6_frame(ul6_inner(hlim=1, payload=ICMPv6TimeExceeded() / Raw(b"\0" * 48)))),
    ("dl-multicast-source", "sgi", TE6_CFG, lambda: dl6_frame(UE6_1, src="ff0e::1", hlim=1)),
    ("dl-unspecified-source", "sgi", TE6_CFG, lambda: dl6_frame(UE6_1, src="::", hlim=1)),
    ("dl-loopback-source", "sgi", TE6_CFG, lambda: dl6_frame(UE6_1, src="::1", hlim=1)),
]


@pytest.mark.parametrize("name,prog,cfg,make", TE6_SILENT, ids=[r[0] for r in TE6_SILENT])
def test_hop_limit_expired_without_error(dp6, name, prog, cfg, make):
    """No ICMPv6 error without an N6 address, with replies off (err-ind off), or where RFC 4443 2.4(e)
    forbids one: the packet is dropped, counted drop_ttl_expired/drop, no event."""
    dp6.set_config(cfg_of(cfg))
    dp6.clear_map("reply_budget")
    f = make()
    res, counted, moved = run(dp6, prog, f)
    assert (res.verdict, counted, moved) == ("drop", {("drop_ttl_expired", "drop"): (1, len(f))}, {}), (
        res.verdict, counted)
    assert dp6.events()["icmp_time_exceeded_sent"] == 0


@pytest.mark.parametrize("prog", ["sgi", "access"])
def test_hop_limit_expired_rate_limited(dp6, prog):
    """ICMPv6 Time Exceeded share the IPv4 replies' budget (PGWU_REPLY_BURST per peer, then
    PGWU_REPLY_RATE a second): per sender downlink, per UE /64 uplink; the rest are dropped
    (icmp_rate_limited). Another sender / /64 still gets its own."""
    dp6.set_config(cfg_of(TE6_CFG))
    dp6.clear_map("reply_budget")
    if prog == "sgi":
        f, other = dl6_frame(UE6_1, hlim=1), dl6_frame(UE6_1, src="fd47:7471::99", hlim=1)
    else:
        f, other = ul6_frame(ul6_inner(hlim=1)), ul6_frame(ul6_inner(src=UE6_2, hlim=1), B2)
    n = REPLY_BURST6 + 5
    verdicts = [run(dp6, prog, f)[0].verdict for _ in range(n)]
    assert verdicts[:REPLY_BURST6] == ["tx"] * REPLY_BURST6, verdicts
    assert "drop" in verdicts, verdicts
    ev = dp6.events()
    assert (ev["icmp_time_exceeded_sent"], ev["icmp_rate_limited"]) == (
        verdicts.count("tx"), verdicts.count("drop")), ev
    assert run(dp6, prog, other)[0].verdict == "tx"


def test_ul6_teid_without_64_drops_ipv6(dp6):
    """A bearer without a /64 takes no IPv6 (drop_inner_not_ipv4, as before the IPv6 uplink), even
    from a source in another bearer's /64; its IPv4 still goes."""
    teid, ue, _, sgw, steid, _ = B3
    dp6.add_bearer(teid, ue, sgw, steid)
    for src in (UE6_1, "fd47:7470:0:9::1"):
        f = ul6_frame(ul6_inner(src=src), B3)
        res, counted, moved = run(dp6, "access", f)
        assert (res.verdict, counted, moved) == ("drop", {("drop_inner_not_ipv4", "drop"): (1, len(f))}, {})
    assert dp6.run_access(bytes(P.gpdu(teid=teid, ue=ue, size=128))).verdict == "redirect"


def test_ul6_unknown_teid(dp6):
    f = bytes(P.gtpu(ul6_inner(), teid=0xDEAD_0006))
    dp6.set_config(cfg_of({"err_ind": False}))
    res, counted, moved = run(dp6, "access", f)
    assert (res.verdict, counted, moved) == ("drop", {("drop_unknown_teid", "drop"): (1, len(f))}, {})


def _bad_inner(kind: str) -> bytes:
    i = bytearray(ul6_inner())
    if kind == "payload-length-past-the-t-pdu":
        i[4:6] = struct.pack("!H", len(i) - 40 + 1)
    elif kind == "payload-length-short-of-the-t-pdu":
        i[4:6] = struct.pack("!H", len(i) - 40 - 1)
    elif kind == "shorter-than-the-fixed-header":
        i = i[:39]
    elif kind == "hop-by-hop-past-the-packet":
        # a Hop-by-Hop header claiming (255 + 1) x 8 octets in a packet of far fewer
        j = bytearray(ul6_inner(payload=IPv6ExtHdrHopByHop() / UDP() / Raw(b"x" * 8)))
        j[41] = 255
        return bytes(j)
    elif kind == "hop-by-hop-cut-after-its-first-octet":
        j = bytearray(ul6_inner(payload=Raw(b"\x11")))
        j[6] = 0                                            # next header: Hop-by-Hop, one octet of it
        return bytes(j)
    return bytes(i)


UL6_BAD = ["payload-length-past-the-t-pdu", "payload-length-short-of-the-t-pdu", "shorter-than-the-fixed-header",
           "hop-by-hop-past-the-packet", "hop-by-hop-cut-after-its-first-octet"]


@pytest.mark.parametrize("kind", UL6_BAD)
def test_ul6_inner_bad(dp6, kind):
    """The T-PDU must be one whole IPv6 packet; a Hop-by-Hop header that runs past it is dropped (as the
    kernel drops it), never read past the frame: drop_inner_bad."""
    f = ul6_frame(_bad_inner(kind))
    res, counted, moved = run(dp6, "access", f)
    assert (res.verdict, counted, moved) == ("drop", {("drop_inner_bad", "drop"): (1, len(f))}, {})


def test_ul6_truncated_routing_header_ends_the_walk(dp6):
    """A Routing header that runs past the packet is not read (a router does not process it): the
    packet is forwarded, untouched but its hop limit."""
    i = bytearray(ul6_inner(payload=IPv6ExtHdrRouting(addresses=["fd47:7471::1"]) / UDP() / Raw(b"r")))
    i[41] = 200
    check_ul6_forwarded(dp6, ul6_frame(bytes(i)), bytes(i))


def test_ul6_counters_balance(dp6):
    """A mix of uplink IPv6 (forwarded, spoofed, expired, no /64, bad) and IPv4: every frame counted
    once in stats; the forwarded IPv6 bytes are exactly the usage's, the IPv4 ones the IPv4 half's."""
    teid, ue, _, sgw, steid, _ = B3
    dp6.add_bearer(teid, ue, sgw, steid)
    dp6.reset_stats()
    fwd6 = [ul6_inner(size=n) for n in (48, 333, 1280)]
    fwd6_b2 = [ul6_inner(src=UE6_2, size=n) for n in (64, 900)]
    frames = ([ul6_frame(i) for i in fwd6] + [ul6_frame(i, B2) for i in fwd6_b2]
              + [ul6_frame(ul6_inner(src=UE6_2)), ul6_frame(ul6_inner(hlim=1)), ul6_frame(ul6_inner(), B3),
                 ul6_frame(_bad_inner("payload-length-past-the-t-pdu"))]
              + [bytes(P.gpdu(teid=B1[0], ue=B1[1], size=300))])
    for f in frames:
        dp6.run_access(f)
    st = dp6.stats()
    assert sum(p for p, _ in st.values()) == len(frames)
    assert sum(b for _, b in st.values()) == sum(len(f) for f in frames)
    assert st[("ul_fwd", "redirect")] == (6, sum(len(f) for f in frames[:5]) + len(frames[-1]))
    assert ul6_usage(dp6, B1[0]) == (3, sum(map(len, fwd6)))
    assert ul6_usage(dp6, B2[0]) == (2, sum(map(len, fwd6_b2)))
    assert (dp6.ul_bearer(B1[0]).packets, dp6.ul_bearer(B1[0]).bytes) == (1, len(O.gpdu_inner(frames[-1])))
    assert {k: v[0] for k, v in st.items() if k[0] != "ul_fwd"} == {
        ("drop_spoofed", "drop"): 1, ("drop_ttl_expired", "drop"): 1, ("drop_inner_not_ipv4", "drop"): 1,
        ("drop_inner_bad", "drop"): 1}


def test_ul6_qos_gate_and_quota(dp6):
    """The bearer's qos entry applies to its IPv6 uplink as to its IPv4: a closed uplink gate drops
    (drop_gate_closed); a quota is charged the T-PDU, and refuses the packet that does not fit
    (drop_quota); only forwarded packets are counted."""
    teid, ue, _, sgw, steid, _ = B1
    dp6.clear_map("qos")
    dp6.set_qos(teid, Qos(flags=QOS_UL_CLOSED))
    dp6.del_bearer(teid, ue)                  # re-added with B_QOS (slot and hash entry both)
    dp6.add_bearer(teid, ue, sgw, steid, qos=True)
    try:
        inner = ul6_inner(size=100)
        f = ul6_frame(inner)
        res, counted, moved = run(dp6, "access", f)
        assert (res.verdict, counted, moved) == ("drop", {("drop_gate_closed", "drop"): (1, len(f))}, {})
        dp6.set_qos(teid, Qos(flags=QOS_QUOTA | QOS_QUOTA_UL, quota_left=150))
        check_ul6_forwarded(dp6, f, inner)
        assert dp6.qos(teid).quota_left == 50
        res, counted, moved = run(dp6, "access", f)
        assert (res.verdict, counted, moved) == ("drop", {("drop_quota", "drop"): (1, len(f))}, {})
    finally:
        dp6.clear_map("qos")


# ---- uplink through the kernel's FIB (bpf_fib_lookup AF_INET6), in a namespace of our own -----------
# As tests/dataplane/test_dataplane_fib.py does for IPv4: a unique netns with an access veth (a0) and
# an SGi veth (s0, fd47:7471::1/64), IPv6 forwarding on, permanent neighbours, a prefix via a router,
# a blackhole; the program runs with BPF_PROG_TEST_RUN from a thread in that netns, ingress a0.
N6_NEAR, N6_NEAR_MAC = "fd47:7471::10", "02:aa:00:00:06:10"
N6_ROUTER, N6_ROUTER_MAC = "fd47:7471::fe", "02:aa:00:00:06:fe"
N6_FAR = "fd47:7472::20"                  # fd47:7472::/48 via the router
N6_NONEIGH = "fd47:7471::20"              # on the link, no neighbour entry
N6_BLACKHOLE = "fd47:7473::1"


def _ip(ns, *args):
    return subprocess.run(["ip", "-n", ns, *args], capture_output=True, text=True, check=True, timeout=30)


@pytest.fixture(scope="module")
def ns6():
    name = f"gtplab-v6ul-{secrets.token_hex(4)}"
    subprocess.run(["ip", "netns", "add", name], check=True, timeout=30)
    try:
        _ip(name, "link", "add", "a0", "type", "veth", "peer", "name", "a1")
        _ip(name, "link", "add", "s0", "type", "veth", "peer", "name", "s1")
        for d in ("lo", "a0", "a1", "s0", "s1"):
            _ip(name, "link", "set", d, "up")
        _ip(name, "addr", "add", "192.0.2.1/24", "dev", "a0")
        _ip(name, "-6", "addr", "add", "fd47:7471::1/64", "dev", "s0", "nodad")
        subprocess.run(["nsenter", f"--net=/run/netns/{name}", "--", "sysctl", "-qw",
                        "net.ipv6.conf.all.forwarding=1"], check=True, timeout=30)
        _ip(name, "-6", "neigh", "add", N6_NEAR, "lladdr", N6_NEAR_MAC, "dev", "s0", "nud", "permanent")
        _ip(name, "-6", "neigh", "add", N6_ROUTER, "lladdr", N6_ROUTER_MAC, "dev", "s0", "nud", "permanent")
        _ip(name, "-6", "route", "add", "fd47:7472::/48", "via", N6_ROUTER, "dev", "s0")
        _ip(name, "-6", "route", "add", "blackhole", f"{N6_BLACKHOLE}/128")
        links = {d: json.loads(_ip(name, "-j", "link", "show", "dev", d).stdout)[0] for d in ("a0", "s0")}
        yield name, {d: (j["ifindex"], j["address"]) for d, j in links.items()}
    finally:
        subprocess.run(["ip", "netns", "del", name], timeout=30)


def fib_run(dp, ns, frame, ifindex):
    s0 = dp.stats_array()
    res = run_in_netns(ns, dp.run_access, frame, ingress_ifindex=ifindex)
    return res, stats_delta(s0, dp.stats_array())


@pytest.mark.lab
@pytest.mark.parametrize("dst,mac", [(N6_NEAR, N6_NEAR_MAC), (N6_FAR, N6_ROUTER_MAC)], ids=["neighbour", "via-router"])
def test_ul6_fib_next_hop(dp6, ns6, dst, mac):
    """Without a static next hop the route and the neighbour come from the kernel: the frame goes
    out of s0 (REDIRECT to its ifindex) from s0's MAC to the neighbour's (or the router's)."""
    ns, devs = ns6
    dp6.set_config(cfg_of({"nexthop": (NH_ACCESS, Nexthop())}))
    inner = ul6_inner(dst=dst)
    f = ul6_frame(inner)
    res, counted = fib_run(dp6, ns, f, devs["a0"][0])
    assert (res.verdict, counted) == ("redirect", {("ul_fwd", "redirect"): (1, len(f))})
    out = bytearray(inner)
    out[7] -= 1
    want = bytes(Ether(src=devs["s0"][1], dst=mac, type=0x86DD)) + bytes(out)
    assert res.data == want, O.mismatch_report(want, res.data)
    assert ul6_usage(dp6, B1[0]) == (1, len(inner))


@pytest.mark.lab
def test_ul6_fib_no_neigh_passes_decapsulated(dp6, ns6):
    """No neighbour yet: the kernel gets the decapsulated packet (pass_no_neigh), in a frame
    addressed as the G-PDU was, EtherType IPv6, hop limit untouched (the kernel forwards it), and
    no usage counted."""
    ns, devs = ns6
    dp6.set_config(cfg_of({"nexthop": (NH_ACCESS, Nexthop())}))
    inner = ul6_inner(dst=N6_NONEIGH)
    f = ul6_frame(inner, vlan=7)
    res, counted = fib_run(dp6, ns, f, devs["a0"][0])
    assert (res.verdict, counted) == ("pass", {("pass_no_neigh", "pass"): (1, len(f))})
    assert res.data == f[:12] + b"\x86\xdd" + inner
    assert ul6_usage(dp6, B1[0]) == (0, 0)


@pytest.mark.lab
def test_ul6_fib_blackhole_drops(dp6, ns6):
    ns, devs = ns6
    dp6.set_config(cfg_of({"nexthop": (NH_ACCESS, Nexthop())}))
    f = ul6_frame(ul6_inner(dst=N6_BLACKHOLE))
    res, counted = fib_run(dp6, ns, f, devs["a0"][0])
    assert (res.verdict, counted) == ("drop", {("drop_no_route", "drop"): (1, len(f))})


# ---- the IPv6 route cache (fib6_cache), under `pgwu watch` -----------------------------------------
# As test_dataplane_fib.py's cache tests for IPv4: a change of route or neighbour is seen by the next
# packet (pgwu watch bumps fib_gen before the change returns... within a poll), a packet longer than
# any the cached lookup's MTU check passed is looked up again.
N6_ROUTER2, N6_ROUTER2_MAC = "fd47:7471::fd", "02:aa:00:00:06:fd"
N6_MTU = "fd47:7474::1"                   # route with mtu lock 1300


def _watcher(dp) -> int:
    v = dp.maps["fib_gen"].lookup(struct.pack("=I", 1))
    return struct.unpack("=Q", v)[0] if v is not None else 0


@pytest.fixture
def watch6(ns6, pgwu_pin_dir, dataplane):
    """`pgwu watch` in ns6 (the cache is trusted only while it is registered), stopped after."""
    from gtplab.dut.dataplane import pgwu_binary
    proc = subprocess.Popen(["nsenter", f"--net=/run/netns/{ns6[0]}", "--", str(pgwu_binary()), "-d", pgwu_pin_dir,
                             "watch"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 5
        while not _watcher(dataplane):
            if proc.poll() is not None:
                pytest.fail(f"pgwu watch exited ({proc.returncode}): {proc.stderr.read().strip()}")
            if time.monotonic() > deadline:
                pytest.fail("pgwu watch runs but did not register itself in fib_gen[1]")
            time.sleep(0.02)
        yield proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def fib6_cached(dp, dst: str, ingress: int) -> list[tuple[int, bytes]]:
    """(egress ifindex, dmac) of every CPU's fib6_cache slot keyed (dst, ingress, ::), any slot."""
    want = socket.inet_pton(socket.AF_INET6, dst)
    found = []
    m = dp.maps["fib6_cache"]
    for k in m.keys():
        for cpu in m.lookup(k) or []:
            kdst, ksrc, kif, gen, eg, smac, dmac = struct.unpack_from("=16s16sI4xQI6s6s", cpu)
            if kdst == want and kif == ingress and ksrc == bytes(16) and eg:
                found.append((eg, dmac))
    return found


def _poll(f, timeout=3.0):
    end = time.monotonic() + timeout
    while True:
        r = f()
        if r or time.monotonic() > end:
            return r
        time.sleep(0.02)


@pytest.mark.lab
def test_ul6_cache_follows_kernel_changes(dp6, ns6, watch6):
    """With the route cache on: the first lookup is cached (fib6_cache holds it), and a neighbour's
    new MAC, its removal, a route's new gateway and a blackhole are each seen by the packets that
    follow (never the stale next hop)."""
    ns, devs = ns6
    a0 = devs["a0"][0]
    dp6.set_config(cfg_of({"nexthop": (NH_ACCESS, Nexthop()), "fib_cache": True}))
    dp6.flush_fib_cache()
    near, far = ul6_frame(ul6_inner(dst=N6_NEAR)), ul6_frame(ul6_inner(dst=N6_FAR))

    def out(f):
        res, counted = fib_run(dp6, ns, f, a0)
        return res.verdict, sorted(counted), res.data[:6]

    mac = P.mac_bytes
    try:
        assert out(near) == ("redirect", [("ul_fwd", "redirect")], mac(N6_NEAR_MAC))
        assert fib6_cached(dp6, N6_NEAR, a0) == [(devs["s0"][0], mac(N6_NEAR_MAC))], \
            "fib cache on, but the IPv6 lookup was not cached"
        _ip(ns, "-6", "neigh", "replace", N6_NEAR, "lladdr", "02:aa:00:00:06:11", "dev", "s0", "nud", "permanent")
        assert _poll(lambda: out(near)[2] == mac("02:aa:00:00:06:11")), "neighbour MAC change not followed"
        _ip(ns, "-6", "neigh", "del", N6_NEAR, "dev", "s0")
        assert _poll(lambda: out(near)[1] == [("pass_no_neigh", "pass")]), "neighbour delete not followed"

        assert out(far)[2] == mac(N6_ROUTER_MAC)
        _ip(ns, "-6", "neigh", "replace", N6_ROUTER2, "lladdr", N6_ROUTER2_MAC, "dev", "s0", "nud", "permanent")
        _ip(ns, "-6", "route", "replace", "fd47:7472::/48", "via", N6_ROUTER2, "dev", "s0")
        assert _poll(lambda: out(far)[2] == mac(N6_ROUTER2_MAC)), "route change not followed"
        _ip(ns, "-6", "route", "replace", "blackhole", "fd47:7472::/48")
        assert _poll(lambda: out(far)[:2] == ("drop", [("drop_no_route", "drop")])), "blackhole not followed"
    finally:
        _ip(ns, "-6", "neigh", "replace", N6_NEAR, "lladdr", N6_NEAR_MAC, "dev", "s0", "nud", "permanent")
        _ip(ns, "-6", "route", "replace", "fd47:7472::/48", "via", N6_ROUTER, "dev", "s0")


@pytest.mark.lab
def test_ul6_cache_longer_packet_looked_up_again(dp6, ns6, watch6):
    """A cached next hop serves only packets no longer than one the lookup's MTU check passed: after
    a 200-octet packet to a route of MTU 1300 is cached, a 1400-octet one is not forwarded (looked up
    again: drop_too_big, no N6 address to answer from here), and a 1300-octet one still is."""
    ns, devs = ns6
    a0 = devs["a0"][0]
    _ip(ns, "-6", "route", "replace", f"{N6_MTU}/128", "via", N6_ROUTER, "dev", "s0", "mtu", "lock", "1300")
    try:
        dp6.set_config(cfg_of({"nexthop": (NH_ACCESS, Nexthop()), "fib_cache": True}))
        dp6.flush_fib_cache()
        small = ul6_frame(ul6_inner(dst=N6_MTU, size=200))
        res, counted = fib_run(dp6, ns, small, a0)
        assert (res.verdict, sorted(counted)) == ("redirect", [("ul_fwd", "redirect")])
        assert fib6_cached(dp6, N6_MTU, a0), "fib cache on, but the IPv6 lookup was not cached"
        big = ul6_frame(ul6_inner(dst=N6_MTU, size=1400))
        res, counted = fib_run(dp6, ns, big, a0)
        assert (res.verdict, sorted(counted)) == ("drop", [("drop_too_big", "drop")]), \
            "a packet over the route's MTU was served from the cache"
        res, counted = fib_run(dp6, ns, ul6_frame(ul6_inner(dst=N6_MTU, size=1300)), a0)
        assert (res.verdict, sorted(counted)) == ("redirect", [("ul_fwd", "redirect")])
    finally:
        _ip(ns, "-6", "route", "del", f"{N6_MTU}/128")


def _by_src(dp) -> bool:
    v = dp.maps["fib_gen"].lookup(struct.pack("=I", 2))
    return bool(v and struct.unpack("=Q", v)[0])


@pytest.mark.lab
def test_ul6_cache_follows_source_policy_rules(dp6, ns6, watch6):
    """`ip -6 rule from B2's /64 lookup 100` sends B2's UE's traffic to N6_FAR via N6_ROUTER2, B1's
    via N6_ROUTER. With the cache on, B1's next hop must not be reused for B2: the IPv6 rule's
    addition keys the caches by source (fib_gen[2]), its removal unkeys them (pgwu watch)."""
    ns, devs = ns6
    a0 = devs["a0"][0]
    dp6.set_config(cfg_of({"nexthop": (NH_ACCESS, Nexthop()), "fib_cache": True}))
    dp6.flush_fib_cache()
    f1 = ul6_frame(ul6_inner(src=UE6_1, dst=N6_FAR), B1)
    f2 = ul6_frame(ul6_inner(src=UE6_2, dst=N6_FAR), B2)
    mac = P.mac_bytes
    _ip(ns, "-6", "neigh", "replace", N6_ROUTER2, "lladdr", N6_ROUTER2_MAC, "dev", "s0", "nud", "permanent")
    assert _poll(lambda: not _by_src(dp6)), "no policy rule, yet the cache is keyed by source"
    _ip(ns, "-6", "route", "add", "fd47:7472::/48", "via", N6_ROUTER2, "dev", "s0", "table", "100")
    _ip(ns, "-6", "rule", "add", "from", "fd47:7470:0:2::/64", "lookup", "100", "prio", "100")
    try:
        assert _by_src(dp6), "an IPv6 policy rule was added, the cache is still keyed by destination only"
        time.sleep(0.6)      # three of pgwu watch's 200 ms rule dumps: they must keep it keyed
        assert _by_src(dp6), "pgwu watch's dump of the rules unkeyed the cache while an IPv6 rule exists"
        for _ in range(3):   # after the first, from the cache
            assert fib_run(dp6, ns, f1, a0)[0].data[:6] == mac(N6_ROUTER_MAC)
            assert fib_run(dp6, ns, f2, a0)[0].data[:6] == mac(N6_ROUTER2_MAC), \
                "B1's cached next hop served B2, whose source selects another route"
    finally:
        subprocess.run(["ip", "-n", ns, "-6", "rule", "del", "from", "fd47:7470:0:2::/64", "lookup", "100",
                        "prio", "100"], capture_output=True, timeout=30)
        subprocess.run(["ip", "-n", ns, "-6", "route", "del", "fd47:7472::/48", "table", "100"],
                       capture_output=True, timeout=30)
    assert _poll(lambda: not _by_src(dp6)), "the IPv6 rule is gone, the cache is still keyed by source"
    assert _poll(lambda: fib_run(dp6, ns, f2, a0)[0].data[:6] == mac(N6_ROUTER_MAC))


# ---- too big: ICMPv6 Packet Too Big (RFC 4443 3.2), a route's MTU from the kernel in ns6 ------------
# Uplink: the SGi route's MTU (N6_PTB, mtu lock 1300). Downlink: the access route's to the bearer's
# SGW (SGW_PTB via ACC_ROUTER on a0, mtu lock set per test) less the encapsulation: 36 octets (IPv4,
# UDP, GTP-U with its optional fields), 44 with a PDU Session Container.
N6_PTB = "fd47:7475::1"
SGW_PTB, ACC_ROUTER, ACC_ROUTER_MAC = "198.18.6.1", "192.0.2.254", "02:aa:00:00:04:fe"
B_PTB = (0x0000_0900, "10.45.0.9", "fd47:7470:0:9::", SGW_PTB, 0x9999_0009, None)
B_PTB_Q = (0x0000_0a00, "10.45.0.10", "fd47:7470:0:a::", SGW_PTB, 0xaaaa_000a, 5)


@pytest.fixture
def ptb6(dp6, ns6):
    """dp6 with B_PTB and B_PTB_Q (their SGW behind a route of ns6 whose MTU a test sets), SGi through
    the kernel, local_addr6 set; ns6 with IPv4 forwarding on (the outer route's lookup) and N6_PTB
    via N6_ROUTER with mtu lock 1300. Routes removed after."""
    ns, devs = ns6
    for teid, ue, pfx, sgw, steid, qfi in (B_PTB, B_PTB_Q):
        dp6.add_bearer(teid, ue, sgw, steid, qfi=qfi)
        dp6.add_bearer6(teid, pfx, DlBearer(sgw, steid, teid, 0 if qfi is None else B_QFI | qfi << B_QFI_SHIFT))
    for k in ("net.ipv4.ip_forward=1", "net.ipv4.conf.all.forwarding=1"):
        subprocess.run(["nsenter", f"--net=/run/netns/{ns}", "--", "sysctl", "-qw", k], check=True, timeout=30)
    _ip(ns, "neigh", "replace", ACC_ROUTER, "lladdr", ACC_ROUTER_MAC, "dev", "a0", "nud", "permanent")
    _ip(ns, "-6", "route", "replace", f"{N6_PTB}/128", "via", N6_ROUTER, "dev", "s0", "mtu", "lock", "1300")
    dp6.set_config(cfg_of({**TE6_CFG, "nexthop": (Nexthop(), Nexthop())}))
    dp6.clear_map("reply_budget")
    try:
        yield dp6, ns, devs
    finally:
        subprocess.run(["ip", "-n", ns, "-6", "route", "del", f"{N6_PTB}/128"], capture_output=True, timeout=30)
        subprocess.run(["ip", "-n", ns, "route", "del", f"{SGW_PTB}/32"], capture_output=True, timeout=30)


def sgw_mtu(ns, mtu: int) -> None:
    _ip(ns, "route", "replace", f"{SGW_PTB}/32", "via", ACC_ROUTER, "dev", "a0", "mtu", "lock", str(mtu))


def ptb_run(dp, ns, prog, frame, ifindex):
    """(result, counted, icmp6_too_big_sent events) of one frame run in ns"""
    e0 = dp.events()["icmp6_too_big_sent"]
    s0 = dp.stats_array()
    res = run_in_netns(ns, dp.run_sgi if prog == "sgi" else dp.run_access, frame, ingress_ifindex=ifindex)
    return res, stats_delta(s0, dp.stats_array()), dp.events()["icmp6_too_big_sent"] - e0


@pytest.mark.lab
@pytest.mark.parametrize("bearer,vlan", [(B_PTB, None), (B_PTB_Q, None), (B_PTB, 140)], ids=["bearer", "qfi-bearer", "vlan"])
def test_ul6_too_big_packet_too_big(ptb6, bearer, vlan):
    """An uplink IPv6 T-PDU over the SGi route's MTU (1300) is not passed to the kernel (whose answer
    has no route to the UE) nor fragmented (RFC 8200 5): ICMPv6 Packet Too Big, MTU 1300, from the N6
    address to the UE in a G-PDU of its bearer (oracle); 1300 octets still go."""
    dp, ns, devs = ptb6
    src = bearer[2] + "10"
    f = ul6_frame(ul6_inner(src=src, dst=N6_PTB, size=1400), bearer, vlan=vlan)
    res, counted, sent = ptb_run(dp, ns, "access", f, devs["a0"][0])
    assert (res.verdict, counted, sent) == ("tx", {("drop_too_big", "tx"): (1, len(f))}, 1), (res.verdict, counted)
    want = O.packet_too_big6_ul_expected(f, P.PGW_ADDR, LOCAL6, bearer[3], bearer[4], bearer[5], 1300)
    assert res.data == want, O.mismatch_report(want, res.data)
    ip6 = IPv6(O.gpdu_inner(res.data))
    assert ip6.plen + 40 == 1280 and ip6[ICMPv6PacketTooBig].mtu == 1300   # quoted up to the minimum MTU
    inner = ul6_inner(src=src, dst=N6_PTB, size=1300)
    assert len(inner) == 1300
    res, counted, sent = ptb_run(dp, ns, "access", ul6_frame(inner, bearer), devs["a0"][0])
    assert (res.verdict, sorted(counted), sent) == ("redirect", [("ul_fwd", "redirect")], 0)


# Over IPv6 N3: a bearer whose downlink peer is IPv6 (n3v6_peers), its G-PDU from that peer
N3_PTB6, GNB_PTB6, GNB_PTB6_IDX = "fd47:7473::1", "fd47:7473::30", 5
B_PTB6 = (0x0000_0b00, "10.45.0.11", "fd47:7470:0:b::", None, 0xbbbb_000b, 7)


@pytest.mark.lab
def test_ul6_too_big_over_ipv6_n3_packet_too_big_in_the_ipv6_tunnel(ptb6):
    """The same over IPv6 N3: Packet Too Big, MTU 1300, to the UE in a G-PDU with the bearer's downlink
    TEID and PSC over IPv6 N3 -> its gNB, hop limit 64, UDP checksum computed (oracle, Scapy)."""
    dp, ns, devs = ptb6
    dp.set_config(cfg_of({**TE6_CFG, "n3_addr6": N3_PTB6, "nexthop": (Nexthop(), Nexthop())}))
    dp.set_peer6(GNB_PTB6_IDX, GNB_PTB6)
    try:
        teid, ue, pfx, _, steid, qfi = B_PTB6
        dp.add_bearer_peer6(teid, ue, GNB_PTB6_IDX, steid, qfi=qfi)
        dp.add_bearer6(teid, pfx, DlBearer(peer6_sgw(GNB_PTB6_IDX), steid, teid,
                                           B_PEER6 | B_QFI | qfi << B_QFI_SHIFT))
        f = ul6_frame(ul6_inner(src=pfx + "10", dst=N6_PTB, size=1400), B_PTB6, src=GNB_PTB6, dst=N3_PTB6)
        res, counted, sent = ptb_run(dp, ns, "access", f, devs["a0"][0])
        assert (res.verdict, counted, sent) == ("tx", {("drop_too_big", "tx"): (1, len(f))}, 1), (res.verdict, counted)
        want = O.packet_too_big6_ul6_expected(f, LOCAL6, N3_PTB6, GNB_PTB6, steid, qfi, 1300)
        assert res.data == want, O.mismatch_report(want, res.data)
    finally:
        dp.set_peer6(GNB_PTB6_IDX, "::")


@pytest.mark.lab
@pytest.mark.parametrize("bearer,route_mtu,ptb_mtu", [
    (B_PTB, 1400, 1364), (B_PTB_Q, 1400, 1356), (B_PTB, 1316, 1280)], ids=["bearer", "qfi-bearer", "leaves-1280"])
def test_dl6_too_big_packet_too_big(ptb6, bearer, route_mtu, ptb_mtu):
    """A downlink IPv6 packet too big for the access route once encapsulated: ICMPv6 Packet Too Big
    to its sender out of SGi, MTU = the route's MTU - 36 (44 with a PDU Session Container) (oracle); a
    packet of exactly that MTU is encapsulated and forwarded, one octet more is answered."""
    dp, ns, devs = ptb6
    sgw_mtu(ns, route_mtu)
    s0 = devs["s0"][0]
    dst = bearer[2] + "10"
    f = dl6_frame(dst, size=14 + 1400)
    res, counted, sent = ptb_run(dp, ns, "sgi", f, s0)
    assert (res.verdict, counted, sent) == ("tx", {("drop_too_big", "tx"): (1, len(f))}, 1), (res.verdict, counted)
    want = O.packet_too_big6_dl_expected(f, LOCAL6, ptb_mtu)
    assert res.data == want, O.mismatch_report(want, res.data)
    assert Ether(res.data)[ICMPv6PacketTooBig].mtu == ptb_mtu
    fits = dl6_frame(dst, size=14 + ptb_mtu)
    assert len(inner6(fits)) == ptb_mtu
    res, counted, _ = ptb_run(dp, ns, "sgi", fits, s0)
    assert (res.verdict, sorted(counted)) == ("redirect", [("dl_fwd", "redirect")])
    res, counted, _ = ptb_run(dp, ns, "sgi", dl6_frame(dst, size=14 + ptb_mtu + 1), s0)
    assert (res.verdict, sorted(counted)) == ("tx", [("drop_too_big", "tx")])


@pytest.mark.lab
def test_dl6_tunnel_under_1280_passed_for_the_kernel_to_fragment(ptb6):
    """An access route that leaves the tunnel less than 1280 octets (1315 - 36 = 1279): no Packet Too
    Big below the IPv6 minimum MTU (RFC 8200 5: the link fragments below IPv6): the encapsulated packet
    goes to the kernel (pass_fib_other) with its outer DF clear, for the kernel to fragment (as IPv4's,
    test_suite_correctness.py::test_downlink_too_big_leaves_in_outer_fragments sees it done)."""
    dp, ns, devs = ptb6
    sgw_mtu(ns, 1315)
    f = dl6_frame(B_PTB[2] + "10", size=14 + 1400)
    res, counted, sent = ptb_run(dp, ns, "sgi", f, devs["s0"][0])
    assert (res.verdict, counted, sent) == ("pass", {("pass_fib_other", "pass"): (1, len(f))}, 0), (res.verdict, counted)
    outer = IP(res.data[14:])
    assert outer.dst == SGW_PTB and not outer.flags.DF and outer.len == 1400 + 36


@pytest.mark.lab
@pytest.mark.parametrize("prog", ["sgi", "access"])
def test_too_big_without_local_addr6_dropped(ptb6, prog):
    """Without an N6 address no error is sent (as Time Exceeded): dropped, drop_too_big/drop, no event."""
    dp, ns, devs = ptb6
    dp.set_config(cfg_of({"nexthop": (Nexthop(), Nexthop())}))
    sgw_mtu(ns, 1400)
    if prog == "sgi":
        f, ifx = dl6_frame(B_PTB[2] + "10", size=14 + 1400), devs["s0"][0]
    else:
        f, ifx = ul6_frame(ul6_inner(src=B_PTB[2] + "10", dst=N6_PTB, size=1400), B_PTB), devs["a0"][0]
    res, counted, sent = ptb_run(dp, ns, prog, f, ifx)
    assert (res.verdict, counted, sent) == ("drop", {("drop_too_big", "drop"): (1, len(f))}, 0), (res.verdict, counted)
