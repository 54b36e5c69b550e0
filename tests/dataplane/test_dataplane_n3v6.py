"""N3 over IPv6 in the XDP PGW-U (issue 32 items 2-4): GTP-U/UDP/IPv6 both ways, tested in place with
BPF_PROG_TEST_RUN, byte for byte against frames Scapy builds here (dataplane/include/n3v6.h).

The config's n3_addr6 (`pgwu load --n3-addr6`) is the PGW-U's N3 IPv6 address; xdp_access hands its
IPv6 frames to xdp_ul_n3v6, xdp_sgi / xdp_sgi6 the downlink of a bearer whose peer is IPv6
(PGWU_B_PEER6: its sgw_addr an index in n3v6_peers) to xdp_dl_n3v6. Each test checks the verdict,
exactly one (reason, verdict) counted with the frame's length, the output frame, and the usage
counters. Static next hops on interface indexes that do not exist, as in test_dataplane.py.
"""

from __future__ import annotations

import json
import secrets
import socket
import struct

import pytest
from scapy.contrib.gtp import GTP_U_Header, GTPErrorIndication, IE_GSNAddress, IE_TEIDI
from scapy.layers.inet import ICMP, UDP
from scapy.layers.inet6 import ICMPv6TimeExceeded, IPv6, IPv6ExtHdrHopByHop
from scapy.layers.l2 import Dot1Q, Ether
from scapy.packet import Raw

from gtplab.dut.dataplane import B_PEER6, B_QFI, B_QFI_SHIFT, DlBearer, peer6_sgw
from gtplab.gtpu import packets as P
from tests.lib import oracle as O
from tests.lib.pgwu import pgwu
from tests.lib.pgwu_config import BASE_CONFIG, NH_ACCESS, NH_SGI, cfg_of, stats_delta

pytestmark = pytest.mark.bpf

N3_6 = "fd47:7473::1"                  # the PGW-U's N3 IPv6 address (the lab's, docs/ipv6.md)
GNB6 = "fd47:7473::10"                 # a gNB (SGW) over IPv6
GNB6_2 = "fd47:7473::11"               # another address of it
GNB6_IDX = 3                           # its entry in n3v6_peers
# (local TEID, UE IPv4, UE /64, peer TEID, QFI)
B1 = (0x0000_0A01, "10.45.0.21", "fd47:7470:0:21::", 0x6666_0001, None)
B2 = (0x0000_0A02, "10.45.0.22", "fd47:7470:0:22::", 0x6666_0002, 5)
UE6_1 = "fd47:7470:0:21::7"
SERVER = P.PDN_ADDR
SERVER6 = "fd47:7471::10"


@pytest.fixture
def dpn(dataplane):
    """The module's data plane with BASE_CONFIG + n3_addr6, GNB6 in n3v6_peers, B1 and B2 (IPv4 halves
    and /64s) whose downlink peer is GNB6; stats from zero."""
    dp = dataplane
    dp.set_config(cfg_of({"n3_addr6": N3_6}))
    dp.flush_bearers()
    dp.set_peer6(GNB6_IDX, GNB6)
    try:
        for teid, ue, pfx, steid, qfi in (B1, B2):
            dp.add_bearer_peer6(teid, ue, GNB6_IDX, steid, qfi=qfi)
            flags = B_PEER6 | (0 if qfi is None else B_QFI | qfi << B_QFI_SHIFT)
            dp.add_bearer6(teid, pfx, DlBearer(peer6_sgw(GNB6_IDX), steid, teid, flags))
        dp.reset_stats()
        yield dp
    finally:
        dp.flush_bearers()
        dp.set_peer6(GNB6_IDX, "::")


def usage(dp) -> dict:
    out = {}
    for teid, ue, pfx, *_ in (B1, B2):
        u, d = dp.ul_bearer(teid), dp.dl_bearer(ue)
        out[("ul", teid)] = (u.packets, u.bytes)
        out[("dl", ue)] = (d.packets, d.bytes)
        b6 = dp.dl6_bearer(pfx)
        out[("dl6", pfx)] = (b6.packets, b6.bytes)
        out[("ul6", teid)] = dp.ul6_usage(teid)
    return out


def run(dp, prog: str, frame: bytes):
    """(result, {(reason, verdict): (packets, bytes)} counted, usage counters that moved)"""
    u0, s0 = usage(dp), dp.stats_array()
    res = dp.run_sgi(frame) if prog == "sgi" else dp.run_access(frame)
    u1, s1 = usage(dp), dp.stats_array()
    moved = {k: (u1[k][0] - u0[k][0], u1[k][1] - u0[k][1]) for k in u1 if u1[k] != u0[k]}
    return res, stats_delta(s0, s1), moved


# ---- the packets ---------------------------------------------------------------------------------------
def ul_frame(inner, bearer=B1, *, src: str = GNB6, **kw) -> bytes:
    """A G-PDU over IPv6 from the gNB to the PGW-U's N3 address (UDP checksum computed by Scapy)."""
    teid, qfi = bearer[0], bearer[4]
    if qfi is not None and "ext" not in kw:
        kw["ext"] = [P.pdu_session_container(qfi)]
    return bytes(P.gtpu(inner, teid=teid, src=src, dst=N3_6, **kw))


def inner4(bearer=B1, n: int = 40) -> bytes:
    return bytes(P.ip_packet(bearer[1], SERVER, payload_len=n))


def inner6(src: str = UE6_1, n: int = 40) -> bytes:
    return bytes(P.ip6_packet(src, SERVER6, payload_len=n))


def decap_expected(inner: bytes) -> bytes:
    return O.decap_expected(inner, P.mac_bytes(NH_SGI.smac), P.mac_bytes(NH_SGI.dmac), None)


def dl_frame4(ue: str, n: int = 64, **kw) -> bytes:
    return bytes(Ether(src=NH_SGI.dmac, dst=P.PGW_SGI_MAC) / P.ip_packet(SERVER, ue, payload_len=n, **kw))


def dl_frame6(dst: str, n: int = 64) -> bytes:
    return bytes(Ether(src=NH_SGI.dmac, dst=P.PGW_SGI_MAC) / P.ip6_packet(SERVER6, dst, payload_len=n, tc=0x28))


def encap6_expected(frame: bytes, teid: int, qfi: int | None) -> bytes:
    """The spec (docs/ipv6.md, "N3 over IPv6 in the PGW-U"): Ethernet to the access next hop / IPv6
    N3_6 -> the gNB, class the inner TOS or class, flow label 0, hop limit 64 / UDP from the flow's
    port to 2152 with the checksum Scapy computes (never 0) / GTP-U G-PDU with the peer's TEID (and
    a DL PDU Session Container of the QFI) / the packet, its TTL or hop limit one less."""
    ip = O.ip_payload(frame)
    inner = O.ttl_dec(ip)
    return bytes(Ether(dst=NH_ACCESS.dmac, src=NH_ACCESS.smac)
                 / IPv6(tc=O.traffic_class(ip), fl=0, hlim=64, nh=17, src=N3_6, dst=GNB6)
                 / UDP(sport=O.sport_of_flow(ip), dport=2152)
                 / O.gtp_header_for(inner, teid, qfi) / Raw(inner))


def reply6_expected(frame: bytes, dport: int, gtp_type: int, seq: int, body) -> bytes:
    """A GTP-U message back to the sender over IPv6: MACs swapped, IPv6 N3_6 -> the sender (class and
    flow label 0, hop limit 64), UDP 2152 -> dport with its checksum, GTP-U S set, TEID 0."""
    sender = socket.inet_ntop(socket.AF_INET6, frame[14 + 8:14 + 24])
    return bytes(Ether(dst=frame[6:12], src=frame[0:6]) / IPv6(tc=0, fl=0, hlim=64, src=N3_6, dst=sender)
                 / UDP(sport=2152, dport=dport)
                 / GTP_U_Header(version=1, PT=1, E=0, S=1, PN=0, gtp_type=gtp_type, teid=0, seq=seq, npdu=0,
                                next_ex=0) / body)


# ---- uplink ----------------------------------------------------------------------------------------------
def test_ul_over_ipv6_ipv4_inner_decapsulated_as_over_ipv4(dpn):
    inner = inner4()
    f = ul_frame(inner)
    res, counted, moved = run(dpn, "access", f)
    assert (res.verdict, counted) == ("redirect", {("ul_fwd", "redirect"): (1, len(f))}), (res.verdict, counted)
    want = decap_expected(inner)
    assert res.data == want, O.mismatch_report(want, res.data)
    assert moved == {("ul", B1[0]): (1, len(inner))}


def test_ul_over_ipv6_ipv6_inner_decapsulated_as_over_ipv4(dpn):
    inner = inner6()
    f = ul_frame(inner)
    res, counted, moved = run(dpn, "access", f)
    assert (res.verdict, counted) == ("redirect", {("ul_fwd", "redirect"): (1, len(f))}), (res.verdict, counted)
    want = decap_expected(inner)
    assert res.data == want, O.mismatch_report(want, res.data)
    assert moved == {("ul6", B1[0]): (1, len(inner))}


def test_ul_over_ipv6_qfi_checked_as_over_ipv4(dpn):
    """B2 has QFI 5: its G-PDU without a PSC is drop_qfi_mismatch, with one forwarded."""
    inner = inner4(B2)
    f = ul_frame(inner, B2, ext=[])
    res, counted, moved = run(dpn, "access", f)
    assert (res.verdict, counted, moved) == ("drop", {("drop_qfi_mismatch", "drop"): (1, len(f))}, {})
    f = ul_frame(inner, B2)
    res, counted, moved = run(dpn, "access", f)
    assert (res.verdict, moved) == ("redirect", {("ul", B2[0]): (1, len(inner))}), counted


def test_ul_over_ipv6_spoofed_source_dropped(dpn):
    f = ul_frame(bytes(P.ip_packet("10.45.0.99", SERVER, payload_len=8)))
    res, counted, moved = run(dpn, "access", f)
    assert (res.verdict, counted, moved) == ("drop", {("drop_spoofed", "drop"): (1, len(f))}, {})


def test_echo_request_over_ipv6_answered_over_ipv6(dpn):
    f = bytes(P.gtpu(b"", gtp_type=P.GTP_ECHO_REQUEST, teid=0, seq=0x1234, src=GNB6, dst=N3_6, sport=40123))
    res, counted, _ = run(dpn, "access", f)
    assert (res.verdict, counted) == ("tx", {("echo_reply", "tx"): (1, len(f))}), (res.verdict, counted)
    want = reply6_expected(f, 40123, P.GTP_ECHO_RESPONSE, 0x1234, Raw(bytes([14, 0])))
    assert res.data == want, O.mismatch_report(want, res.data)


def test_echo_request_from_multicast_ipv6_not_answered(dpn):
    f = bytes(P.gtpu(b"", gtp_type=P.GTP_ECHO_REQUEST, teid=0, seq=1, src="ff02::1", dst=N3_6))
    res, counted, _ = run(dpn, "access", f)
    assert (res.verdict, counted) == ("drop", {("drop_echo_bad_src", "drop"): (1, len(f))})


def test_unknown_teid_over_ipv6_answered_with_error_indication_over_ipv6(dpn):
    f = ul_frame(inner4(), (0x0BAD_0001, *B1[1:]))
    res, counted, _ = run(dpn, "access", f)
    assert (res.verdict, counted) == ("tx", {("drop_unknown_teid", "tx"): (1, len(f))}), (res.verdict, counted)
    body = GTPErrorIndication(IE_list=[IE_TEIDI(TEIDI=0x0BAD_0001), IE_GSNAddress(length=16, ipv6_address=N3_6)])
    want = reply6_expected(f, 2152, P.GTP_ERROR_INDICATION, 0, body)
    assert res.data == want, O.mismatch_report(want, res.data)
    assert dpn.events()["err_ind_sent"] == 1


def test_error_indications_over_ipv6_rate_limited_per_peer(dpn):
    """reply_budget (PGWU_REPLY_BURST at once): the 11th of a burst from one peer is dropped and
    counted err_ind_rate_limited; another peer still gets its own. Peers of their own (the budget
    outlives a test)."""
    a, b = (f"fd47:7473::{secrets.randbelow(0xffff) + 1:x}:{i}" for i in (1, 2))
    f = ul_frame(inner4(), (0x0BAD_0002, *B1[1:]), src=a)
    verdicts = [run(dpn, "access", f)[0].verdict for _ in range(11)]
    assert verdicts == ["tx"] * 10 + ["drop"], verdicts
    assert dpn.events()["err_ind_rate_limited"] == 1
    other = ul_frame(inner4(), (0x0BAD_0002, *B1[1:]), src=b)
    assert run(dpn, "access", other)[0].verdict == "tx"


# ---- the IPv4 outer's answers over IPv6 N3: Time Exceeded, Supported Extension Headers Notification ------
LOCAL6 = "fd47:7472::1"                # the PGW-U's N6 address (config local_addr6), ICMPv6's source
UE6_2 = "fd47:7470:0:22::7"            # in B2's /64


def answer(dp, frame: bytes, reason: str, event: str):
    """One frame answered (tx): counted (reason, tx) with the frame's length, the event once, no usage
    moved; reply_budget cleared first (it outlives a test). Returns the answer."""
    dp.clear_map("reply_budget")
    dp.reset_stats()
    res, counted, moved = run(dp, "access", frame)
    assert (res.verdict, counted, moved) == ("tx", {(reason, "tx"): (1, len(frame))}, {}), (
        res.verdict, counted, moved, O.describe("input", frame))
    ev = dp.events()
    assert ev[event] == 1, ev
    return res.data


def udp6_csum_valid(ip6) -> bool:
    """The UDP checksum over the IPv6 pseudo header as Scapy computes it (RFC 8200 8.1), never 0."""
    again = IPv6(bytes(ip6))
    del again[UDP].chksum
    return ip6[UDP].chksum != 0 and IPv6(bytes(again))[UDP].chksum == ip6[UDP].chksum


def inner4_ttl(bearer=B1, ttl: int = 1) -> bytes:
    return bytes(P.ip_packet(bearer[1], SERVER, payload_len=40, ttl=ttl))


TE_UL6 = [
    # (name, bearer, T-PDU, gtpu kwargs)
    ("ipv4-ttl-1", B1, lambda: inner4_ttl(), {}),
    ("ipv4-ttl-0-qfi-psc", B2, lambda: inner4_ttl(B2, 0), {}),
    ("ipv4-vlan-kept", B1, lambda: inner4_ttl(), {"vlan": 120}),
    ("ipv6-hop-limit-1", B1, lambda: bytes(P.ip6_packet(UE6_1, SERVER6, payload_len=40, hlim=1)), {}),
    ("ipv6-hop-limit-1-qfi-psc", B2, lambda: bytes(P.ip6_packet(UE6_2, SERVER6, payload_len=40, hlim=1)), {}),
]


@pytest.mark.parametrize("name, bearer, tpdu, kw", TE_UL6, ids=[r[0] for r in TE_UL6])
def test_ul_over_ipv6_ttl_expired_answered_with_time_exceeded_in_the_ipv6_tunnel(dpn, name, bearer, tpdu, kw):
    """An uplink T-PDU over IPv6 N3 with TTL / hop limit <= 1: ICMP (ICMPv6) Time Exceeded to the UE,
    as over IPv4 N3, in a G-PDU with the bearer's downlink TEID (and PSC) over IPv6 N3_6 -> its gNB,
    hop limit 64, the UDP checksum computed (oracle, byte for byte; then each field with Scapy)."""
    dpn.set_config(cfg_of({"n3_addr6": N3_6, "local_addr6": LOCAL6}))
    inner = tpdu()
    f = ul_frame(inner, bearer, **kw)
    v4 = inner[0] >> 4 == 4
    out = answer(dpn, f, "drop_ttl_expired", "icmp_time_exceeded_sent")
    if v4:
        want = O.time_exceeded_ul6_expected(f, BASE_CONFIG.local_addr, N3_6, GNB6, bearer[3], bearer[4])
    else:
        want = O.time_exceeded6_ul6_expected(f, LOCAL6, N3_6, GNB6, bearer[3], bearer[4])
    assert out == want, O.mismatch_report(want, out)
    o = Ether(out)
    assert o[Dot1Q].vlan == 120 if kw.get("vlan") else Dot1Q not in o
    ip6 = o[IPv6]
    assert (ip6.src, ip6.dst, ip6.hlim, ip6.tc, ip6.fl, ip6.nh) == (N3_6, GNB6, 64, 0, 0, 17)
    assert (ip6[UDP].sport, ip6[UDP].dport) == (2152, 2152) and udp6_csum_valid(ip6)
    g = o[GTP_U_Header]
    assert (g.gtp_type, g.teid, g.E) == (255, bearer[3], int(bearer[4] is not None))
    if v4:
        icmp = o[ICMP]
        assert (icmp.type, icmp.code, icmp.underlayer.src, icmp.underlayer.dst) == (11, 0, BASE_CONFIG.local_addr,
                                                                                   bearer[1])
        assert bytes(icmp.payload) == inner[:28]               # the header and 8 octets (RFC 792)
    else:
        icmp = o[ICMPv6TimeExceeded]
        ue = socket.inet_ntop(socket.AF_INET6, inner[8:24])
        assert (icmp.type, icmp.code, icmp.underlayer.src, icmp.underlayer.dst) == (3, 0, LOCAL6, ue)
        assert bytes(icmp.payload) == inner                    # all of it (under 1232 octets)


V4_PEER_AS_INDEX = socket.inet_ntoa(struct.pack("=I", GNB6_IDX))
TE_UL6_NOT = [
    # (name, config, bearer change, sender): drop_ttl_expired, unanswered
    ("replies-off", {"err_ind": False}, None, GNB6),
    ("downlink-peer-ipv4", {}, "ipv4-peer", GNB6),
    ("sender-multicast", {}, None, "ff02::1"),
]


@pytest.mark.parametrize("name, cfg, change, src", TE_UL6_NOT, ids=[r[0] for r in TE_UL6_NOT])
@pytest.mark.parametrize("family", [4, 6])
def test_ul_over_ipv6_ttl_expired_unanswered_where_over_ipv4_it_is(dpn, name, cfg, change, src, family):
    """Not answered with replies off, from a sender nobody may be answered at, nor for a bearer whose
    downlink peer is IPv4 (no IPv6 tunnel to answer in): drop_ttl_expired, drop, no event."""
    dpn.set_config(cfg_of({"n3_addr6": N3_6, "local_addr6": LOCAL6, **cfg}))
    if change == "ipv4-peer":
        # 3.0.0.0: its sgw_addr read as an n3v6_peers index is GNB6_IDX (little-endian), so only the
        # family check keeps the answer out of GNB6's tunnel
        teid, ue, pfx, steid, _ = B1
        dpn.add_bearer(teid, ue, V4_PEER_AS_INDEX, steid)
        dpn.set_dl6(pfx, DlBearer(V4_PEER_AS_INDEX, steid, teid, 0))
    inner = inner4_ttl() if family == 4 else bytes(P.ip6_packet(UE6_1, SERVER6, payload_len=40, hlim=1))
    f = ul_frame(inner, src=src)
    dpn.clear_map("reply_budget")
    res, counted, moved = run(dpn, "access", f)
    assert (res.verdict, counted, moved) == ("drop", {("drop_ttl_expired", "drop"): (1, len(f))}, {}), counted
    assert dpn.events()["icmp_time_exceeded_sent"] == 0


def supp_ext_frame(src: str = GNB6) -> bytes:
    """A G-PDU over IPv6 with extension header 0xa0 (comprehension required, unknown), from port 40000."""
    return ul_frame(inner4(), src=src, sport=40000, ext=[P.ext_header(0xA0, b"\x01\x02")])


def test_ul_over_ipv6_unknown_ext_header_answered_with_supported_ext_notification_over_ipv6(dpn):
    """TS 29.281 7.2.3 over IPv6: the Notification to the sender's address and port, as over IPv4 (its
    Extension Header Type List, 11 octets: the UDP datagram's odd length summed right)."""
    f = supp_ext_frame()
    out = answer(dpn, f, "drop_gtp_ext_unsupported", "supp_ext_sent")
    want = O.supp_ext_notification6_expected(f, N3_6)
    assert out == want, O.mismatch_report(want, out)
    ip6 = Ether(out)[IPv6]
    assert (ip6.src, ip6.dst, ip6.hlim, ip6[UDP].sport, ip6[UDP].dport) == (N3_6, GNB6, 64, 2152, 40000)
    assert udp6_csum_valid(ip6) and len(ip6[UDP]) % 2 == 1
    g = ip6[GTP_U_Header]
    assert (g.gtp_type, g.teid, g.S) == (31, 0, 1)
    assert bytes(g.payload) == bytes([141, len(O.KNOWN_EXT_TYPES)]) + bytes(O.KNOWN_EXT_TYPES)


def test_supported_ext_notifications_over_ipv6_rate_limited_per_peer(dpn):
    """reply_budget as the Error Indications': the 11th of a burst from one peer dropped and counted
    supp_ext_rate_limited; another peer still answered. Peers of their own (the budget outlives a test)."""
    a, b = (f"fd47:7473::{secrets.randbelow(0xffff) + 1:x}:{i}" for i in (3, 4))
    f = supp_ext_frame(a)
    verdicts = [run(dpn, "access", f)[0].verdict for _ in range(11)]
    assert verdicts == ["tx"] * 10 + ["drop"], verdicts
    ev = dpn.events()
    assert (ev["supp_ext_sent"], ev["supp_ext_rate_limited"]) == (10, 1), ev
    assert run(dpn, "access", supp_ext_frame(b))[0].verdict == "tx"


def test_supported_ext_notification_over_ipv6_not_sent_with_replies_off(dpn):
    dpn.set_config(cfg_of({"n3_addr6": N3_6, "err_ind": False}))
    f = supp_ext_frame()
    res, counted, _ = run(dpn, "access", f)
    assert (res.verdict, counted) == ("drop", {("drop_gtp_ext_unsupported", "drop"): (1, len(f))}), counted
    assert dpn.events()["supp_ext_sent"] == 0


@pytest.mark.parametrize("name, mutate, reason, verdict", [
    ("zero outer UDP checksum", lambda b: b[:14 + 46] + b"\0\0" + b[14 + 48:], "drop_outer_udp_csum", "drop"),
    ("wrong outer UDP checksum", lambda b: b[:-1] + bytes([b[-1] ^ 1]), "drop_outer_udp_csum", "drop"),
    ("UDP length not the payload length", lambda b: b[:14 + 44] + struct.pack("!H", len(b) - 14 - 40 - 2) + b[14 + 46:],
     "drop_bad_udp_len", "drop"),
    ("payload length past the frame", lambda b: b[:14 + 4] + struct.pack("!H", len(b)) + b[14 + 6:], "drop_bad_ip", "drop"),
    ("UDP not to 2152", None, "pass_not_gtpu", "pass"),
    ("an outer extension header", None, "pass_not_gtpu", "pass"),
    ("to another IPv6 address", None, "pass_not_ipv4", "pass"),
])
def test_malformed_outer_ipv6_counted_under_its_reason(dpn, name, mutate, reason, verdict):
    inner = inner4()
    if name == "UDP not to 2152":
        f = ul_frame(inner, dport=2153)
    elif name == "an outer extension header":
        g = Ether(bytes(P.gtpu(inner, teid=B1[0], src=GNB6, dst=N3_6)))
        f = bytes(Ether(src=g.src, dst=g.dst) / IPv6(src=GNB6, dst=N3_6) / IPv6ExtHdrHopByHop() / g[UDP])
    elif name == "to another IPv6 address":
        f = bytes(P.gtpu(inner, teid=B1[0], src=GNB6, dst="fd47:7473::2"))
    else:
        f = mutate(ul_frame(inner))
    res, counted, moved = run(dpn, "access", f)
    assert (res.verdict, counted, moved) == (verdict, {(reason, verdict): (1, len(f))}, {}), (name, counted)


def test_without_n3_addr6_ipv6_goes_to_the_kernel_as_before(dpn):
    dpn.set_config(cfg_of({"n3_addr6": "::"}))
    f = ul_frame(inner4())
    res, counted, moved = run(dpn, "access", f)
    assert (res.verdict, counted, moved) == ("pass", {("pass_not_ipv4", "pass"): (1, len(f))}, {})


# ---- signalling received over IPv6: recorded as over IPv4 (peers6, sig_rx6; pgwu path / signalling) -------
def path6(dp) -> dict:
    """`pgwu path --json`: {addr: entry} of its IPv6 peers"""
    out = json.loads(pgwu(dp.pin_dir, "path", "--json").stdout)["peers"]
    return {p["addr"]: p for p in out if p["family"] == 6}


def echo_response6(src: str, restart: int, seq: int) -> bytes:
    return bytes(P.gtpu(bytes([14, restart]), gtp_type=P.GTP_ECHO_RESPONSE, teid=0, seq=seq, src=src, dst=N3_6))


def test_echo_response_over_ipv6_recorded_in_pgwu_path(dpn):
    """An Echo Response from an IPv6 peer is consumed (sig_echo_response) and shown by `pgwu path` as an
    IPv4 peer's is: up, its Recovery restart counter, a restart when it changes. A bearer's IPv6 peer
    that never answered is listed unprobed."""
    peer = f"fd47:7473::{secrets.randbelow(0xffff) + 1:x}:77"      # the LRU map outlives a test
    f = echo_response6(peer, 7, 0x4001)
    res, counted, _ = run(dpn, "access", f)
    assert (res.verdict, counted) == ("drop", {("sig_echo_response", "drop"): (1, len(f))}), counted
    got = path6(dpn)
    assert (got[peer]["state"], got[peer]["restart_counter"], got[peer]["restarts"],
            got[peer]["responses"]) == ("up", 7, 0, 1), got
    assert got[socket.inet_ntop(socket.AF_INET6, socket.inet_pton(socket.AF_INET6, GNB6))]["state"] in (
        "unprobed", "up"), got
    run(dpn, "access", echo_response6(peer, 8, 0x4002))
    got = path6(dpn)[peer]
    assert (got["state"], got["restart_counter"], got["restarts"], got["responses"]) == ("up", 8, 1, 2), got
    text = pgwu(dpn.pin_dir, "path", "--peer6", peer).stdout.splitlines()
    assert text[1].split()[:4] == [peer, "up", "8", "1"], text


def test_error_indication_and_end_marker_over_ipv6_shown_by_pgwu_signalling(dpn):
    """An Error Indication from another address of the IPv6 peer naming B1's downlink tunnel (its TEID
    Data I, its GTP-U Peer Address the peer's 16 octets: the address keyed, not the sender's) and an End Marker on B1's TEID are recorded (sig_rx6) and joined
    to bearer B1 by `pgwu signalling`; a stray End Marker to no bearer is shown without one."""
    stray = 0x0990_0000 + secrets.randbelow(0xffff)
    body = struct.pack("!BI", 16, B1[3]) + struct.pack("!BH", 133, 16) + socket.inet_pton(socket.AF_INET6, GNB6)
    ei = bytes(P.gtpu(body, gtp_type=P.GTP_ERROR_INDICATION, teid=0, seq=0, src=GNB6_2, dst=N3_6))
    em = bytes(P.gtpu(b"", gtp_type=P.GTP_END_MARKER, teid=B1[0], src=GNB6, dst=N3_6))
    em_stray = bytes(P.gtpu(b"", gtp_type=P.GTP_END_MARKER, teid=stray, src=GNB6, dst=N3_6))
    before = {(s["message"], s["teid"], s["peer"]): s["packets"]
              for s in json.loads(pgwu(dpn.pin_dir, "signalling", "--json").stdout)["signalling"]}
    for f, reason in ((ei, "sig_error_ind"), (ei, "sig_error_ind"), (em, "sig_end_marker"),
                      (em_stray, "sig_end_marker")):
        res, counted, _ = run(dpn, "access", f)
        assert (res.verdict, counted) == ("drop", {(reason, "drop"): (1, len(f))}), counted
    sig = json.loads(pgwu(dpn.pin_dir, "signalling", "--json").stdout)["signalling"]
    got = {(s["message"], s["teid"], s["peer"]): (s["packets"] - before.get((s["message"], s["teid"], s["peer"]), 0),
                                                  s["from"], s["bearer"])
           for s in sig if ":" in s["peer"]}
    b1 = {"teid": B1[0], "ue": B1[1]}
    assert got == {("error_ind", B1[3], GNB6): (2, GNB6_2, b1),
                   ("end_marker", B1[0], GNB6): (1, GNB6, b1),
                   ("end_marker", stray, GNB6): (1, GNB6, None)}, sig


def test_path_send_to_an_ipv6_peer_without_n3_addr6_is_one_line(dpn):
    dpn.set_config(cfg_of({"n3_addr6": "::"}))
    cp = pgwu(dpn.pin_dir, "path", "--send", "--peer6", "fd47::9", check=False)
    assert cp.returncode != 0 and "--n3-addr6" in cp.stderr and len(cp.stderr.strip().splitlines()) == 1, cp
    bad = pgwu(dpn.pin_dir, "path", "--peer6", "10.0.0.1", check=False)
    assert (bad.returncode, bad.stderr.splitlines()[0]) == (
        2, "Invalid --peer6 '10.0.0.1': expected an IPv6 address"), bad.stderr


# ---- downlink --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("bearer", [B1, B2], ids=["no-qfi", "qfi-psc"])
def test_dl_ipv4_to_ipv6_peer_encapsulated_with_ipv6_outer_and_checksum(dpn, bearer):
    f = dl_frame4(bearer[1], tos=0x48)
    res, counted, moved = run(dpn, "sgi", f)
    assert (res.verdict, counted) == ("redirect", {("dl_fwd", "redirect"): (1, len(f))}), (res.verdict, counted)
    want = encap6_expected(f, bearer[3], bearer[4])
    assert res.data == want, O.mismatch_report(want, res.data)
    ck = struct.unpack_from("!H", res.data, 14 + 40 + 6)[0]
    assert ck != 0, "outer UDP checksum 0 over IPv6"
    assert moved == {("dl", bearer[1]): (1, len(O.ip_payload(f)))}


@pytest.mark.parametrize("bearer", [B1, B2], ids=["no-qfi", "qfi-psc"])
def test_dl_ipv6_to_ipv6_peer_encapsulated_with_ipv6_outer_and_checksum(dpn, bearer):
    f = dl_frame6(bearer[2] + "5")
    res, counted, moved = run(dpn, "sgi", f)
    assert (res.verdict, counted) == ("redirect", {("dl_fwd", "redirect"): (1, len(f))}), (res.verdict, counted)
    want = encap6_expected(f, bearer[3], bearer[4])
    assert res.data == want, O.mismatch_report(want, res.data)
    assert moved == {("dl6", bearer[2]): (1, len(O.ip_payload(f)))}


@pytest.mark.parametrize("kind", ["ipv4-udp-csum", "ipv4-udp-csum-0", "ipv6"])
def test_dl_large_packet_checksum_right(dpn, kind):
    """1400 octets. An IPv4 packet's payload sum is taken from its UDP checksum (inner_sum), or, with
    none (0), summed: csum_bytes' 512- and 64-octet loops and the tail all in the sum; an IPv6 one
    is summed whole."""
    f = {"ipv4-udp-csum": lambda: dl_frame4(B1[1], n=1371),
         "ipv4-udp-csum-0": lambda: dl_frame4(B1[1], n=1371, udp_csum=False),
         "ipv6": lambda: dl_frame6(UE6_1, n=1351)}[kind]()
    res, counted, _ = run(dpn, "sgi", f)
    assert res.verdict == "redirect", counted
    want = encap6_expected(f, B1[3], None)
    assert res.data == want, O.mismatch_report(want, res.data)


def test_dl_to_an_empty_peer_entry_is_no_route(dpn):
    dpn.set_peer6(GNB6_IDX, "::")
    f = dl_frame4(B1[1])
    res, counted, moved = run(dpn, "sgi", f)
    assert (res.verdict, counted, moved) == ("drop", {("drop_no_route", "drop"): (1, len(f))}, {})


def test_dl_ttl_expired_to_ipv6_peer_dropped(dpn):
    f = dl_frame4(B1[1], ttl=1)
    res, counted, moved = run(dpn, "sgi", f)
    assert counted == {("drop_ttl_expired", res.verdict): (1, len(f))} and moved == {}, counted
    assert res.verdict in ("drop", "tx")


def test_ipv4_peer_bearers_unchanged_beside_ipv6_ones(dpn):
    """A bearer with an IPv4 peer next to the IPv6 ones: its downlink still IPv4-encapsulated."""
    dpn.add_bearer(0x0A03, "10.45.0.23", P.SGW_ADDR, 0x6666_0003)
    f = dl_frame4("10.45.0.23")
    res, counted, _ = run(dpn, "sgi", f)
    assert res.verdict == "redirect" and res.data[12:14] == b"\x08\x00", counted
    ip = O.ip_payload(f)
    want = O.encap_expected(ip, smac=NH_ACCESS.smac, dmac=NH_ACCESS.dmac, vlan=None, local=BASE_CONFIG.local_addr,
                            sgw=P.SGW_ADDR, teid=0x6666_0003, csum=True,
                            ip_id=struct.unpack_from("!H", res.data, 18)[0])
    assert res.data == want, O.mismatch_report(want, res.data)


# ---- pgwu session add --sgw6 / show / list ---------------------------------------------------------------
def test_session_add_sgw6_installs_a_peer6_bearer_and_show_list_print_it(dataplane):
    dp = dataplane
    dp.flush_bearers()
    d = dp.pin_dir
    try:
        out = pgwu(d, "session", "add", "--teid", "0xa10", "--ue", "10.45.0.40", "--sgw6", "fd47:7473::12",
                   "--sgw-teid", "77").stdout
        assert "SGW fd47:7473::12" in out, out
        b = dp.dl_bearer("10.45.0.40")
        assert b.flags & B_PEER6, b
        idx = struct.unpack("=I", socket.inet_aton(b.sgw_addr))[0]
        got = dp.maps["n3v6_peers"].lookup(struct.pack("=I", idx))
        assert got == socket.inet_pton(socket.AF_INET6, "fd47:7473::12")
        one = json.loads(pgwu(d, "session", "get", "--teid", "0xa10", "--json").stdout)
        assert one["sgw"] == "fd47:7473::12" and one["sgw_teid"] == 77, one
        listed = json.loads(pgwu(d, "session", "list", "--json").stdout)["bearers"]
        assert [x["sgw"] for x in listed] == ["fd47:7473::12"], listed
        assert "fd47:7473::12" in pgwu(d, "session", "list").stdout
        # a second bearer to the same peer shares its entry
        pgwu(d, "session", "add", "--teid", "0xa11", "--ue", "10.45.0.41", "--sgw6", "fd47:7473::12",
             "--sgw-teid", "78")
        assert dp.dl_bearer("10.45.0.41").sgw_addr == b.sgw_addr
    finally:
        dp.flush_bearers()
        for i in range(4):
            dp.set_peer6(i, "::")


@pytest.mark.parametrize("args, msg", [
    (["--sgw", "192.0.2.9", "--sgw6", "fd47:7473::12"], "Give exactly one of --sgw A or --sgw6 A6"),
    ([], "Give exactly one of --sgw A or --sgw6 A6"),
    (["--sgw6", "ff02::1"], "is a multicast address"),
    (["--sgw6", "fe80::1"], "is a link-local address"),
    (["--sgw6", "10.0.0.1"], "expected an IPv6 address"),
])
def test_session_add_sgw6_bad_input_one_line_exit_2(dataplane, args, msg):
    r = pgwu(dataplane.pin_dir, "session", "add", "--teid", "0xa20", "--ue", "10.45.0.50", "--sgw-teid", "1",
             *args, check=False)
    # one line saying what is wrong (the option parser's own adds its usage hint after it)
    assert r.returncode == 2 and msg in r.stderr.splitlines()[0], r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""


def test_session_load_sgw6_lines_share_peer_entries(dataplane, tmp_path):
    """`pgwu session load` with sgw6= (what gtplab's bearer files carry with --n3 6): each bearer's
    downlink peer is the IPv6 address, two SGWs two entries, the IPv4 SGW field kept for nothing."""
    dp = dataplane
    dp.flush_bearers()
    f = tmp_path / "b.txt"
    f.write_text("".join(f"{0xb00 + i:#x} 10.45.1.{i + 1} 192.0.2.9 {i + 1} sgw6=fd47:7473::{0x20 + i % 2:x}\n"
                         for i in range(6)))
    try:
        pgwu(dp.pin_dir, "session", "load", str(f))
        listed = json.loads(pgwu(dp.pin_dir, "session", "list", "--json").stdout)["bearers"]
        assert [x["sgw"] for x in listed] == [f"fd47:7473::{0x20 + i % 2:x}" for i in range(6)], listed
        assert len({dp.dl_bearer(f"10.45.1.{i + 1}").sgw_addr for i in range(6)}) == 2
        assert all(dp.dl_bearer(f"10.45.1.{i + 1}").flags & B_PEER6 for i in range(6))
    finally:
        dp.flush_bearers()
        for i in range(4):
            dp.set_peer6(i, "::")


@pytest.mark.parametrize("opt, msg", [("sgw6=fd47::1 sgw6=fd47::2", "a second sgw6= option"),
                                      ("sgw6=10.1.1.1", "expected an IPv6 address"),
                                      ("sgw6=ff02::1", "a multicast address")])
def test_session_load_bad_sgw6_is_the_line_error(dataplane, tmp_path, opt, msg):
    """A bad sgw6= is a bad line of FILE, as a bad ue6=: FILE:LINE: what, nothing loaded (exit 1, the
    tool's status for a bad file)."""
    f = tmp_path / "b.txt"
    f.write_text(f"0xc00 10.45.2.1 192.0.2.9 1 {opt}\n")
    r = pgwu(dataplane.pin_dir, "session", "load", str(f), check=False)
    assert r.returncode == 1 and f"{f}:1: " in r.stderr and msg in r.stderr and "nothing loaded" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and dataplane.dl_bearer("10.45.2.1") is None
