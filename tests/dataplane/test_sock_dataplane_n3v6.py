"""N3 over IPv6 through the socket-path PGW-U (`pgwu socket`, dataplane/pgwu_sock_packet.c: ul6n3_one,
n3v6_encap; docs/ipv6.md "IPv6 in the PGW-U's socket path"), in a namespace lab, frame for frame.

The XDP path's N3v6 rows (test_dataplane_n3v6.py) mirrored where the socket path takes the packet:
G-PDUs over IPv6 to the lab's N3 IPv6 address (fd47:7473::1, `pgwu load --n3-addr6`) read from the
socket path's UDP socket on [n3_addr6]:2152, decapsulated (inner IPv4 and IPv6), Echo Request and
an unknown TEID answered over IPv6; the downlink of a bearer whose peer is IPv6 (bearer file
`sgw6=`, PGWU_B_PEER6) encapsulated in GTP-U/UDP/IPv6 to that peer. Outputs compared octet for
octet with frames built here from the spec (the XDP rows' expectations, the lab's MACs), the counter
delta exactly the row's, conservation closed with the veths' counters (tests/dataplane/
test_sock_dataplane.py's `send`), usage counted per bearer as over IPv4.

A zero or wrong outer UDP checksum over IPv6: the kernel's UDPv6 socket drops it before the socket
path reads it (RFC 8200 8.1; no UDP_NO_CHECK6_RX), counted in Udp6 InCsumErrors, which the lab's
conservation reads as kernel_udp_incsumerrors (gtplab/dut/local.py).
"""

from __future__ import annotations

import socket
import struct

import pytest
from scapy.contrib.gtp import GTP_U_Header, GTPErrorIndication, IE_GSNAddress, IE_TEIDI
from scapy.layers.inet import UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from gtplab.conformance import cases as C
from gtplab.conformance import oracle as conformance_oracle
from gtplab.gtpu import packets as P
from tests.lib.socklab import check_reply, knobbed_dut, only, route_mtu, send, socket_lab
from tests.lib import oracle as O

pytestmark = pytest.mark.lab

QFI = 9
PEER6_I, QFI6_I, PEER4_I = 0, 1, 2      # bearers: IPv6 peer; IPv6 peer with a QFI; IPv4 peer (as before)
N_BEARERS = 3
SERVER6 = C.server6(1)
UNKNOWN_TEID = 0x0BAD0001


def _bearer_lines(a) -> list[str]:
    return [f"{a.local_teid(i):#x} {a.ue(i)} {a.sgw(i)} {a.sgw_teid(i):#x} ue6={C.ue6_prefix(i)}"
            + (f" qfi={QFI}" if i == QFI6_I else "") + (f" sgw6={a.sgw6(i)}" if i != PEER4_I else "")
            for i in range(N_BEARERS)]


@pytest.fixture(scope="module")
def lab():
    with socket_lab("sockn3v6", _bearer_lines) as lab:
        yield lab


@pytest.fixture(scope="module", params=["defaults", "recvfrom"])
def dut(request, lab):
    with knobbed_dut(lab, {} if request.param == "defaults" else {"batch": 1}) as d:
        yield d


# ---- the packets ----------------------------------------------------------------------------------
def ul6_frame(lab, inner, i=PEER6_I, *, teid: int | None = None, **kw) -> bytes:
    """A G-PDU over IPv6 from bearer i's gNB to the DUT's N3 IPv6 address (UDP checksum computed)."""
    a, p0 = lab.addressing, lab.ports[0]
    if i == QFI6_I and "ext" not in kw:
        kw["ext"] = [P.pdu_session_container(qfi=QFI, uplink=True)]
    return bytes(P.gtpu(inner, teid=a.local_teid(i) if teid is None else teid, src=kw.pop("src", a.sgw6(i)),
                        dst=a.dut_access6, src_mac=p0.mac, dst_mac=p0.dut_mac, **kw))


def inner4(lab, i=PEER6_I, n: int = 100) -> bytes:
    return bytes(P.ip_packet(lab.addressing.ue(i), lab.addressing.pdn(i), payload_len=n))


def inner6(i=PEER6_I, n: int = 100) -> bytes:
    return bytes(P.ip6_packet(C.ue6(i), SERVER6, payload_len=n))


def decap(lab, inner: bytes) -> bytes:
    p1 = lab.ports[1]
    return O.decap_expected(inner, smac=P.mac_bytes(p1.dut_mac), dmac=P.mac_bytes(p1.mac), vlan=None)


def dl4_frame(lab, i, n: int = 100, **kw) -> bytes:
    a, p1 = lab.addressing, lab.ports[1]
    return bytes(P.downlink_ip(a.ue(i), a.pdn(i), n, src_mac=p1.mac, dst_mac=p1.dut_mac, **kw))


def dl6_frame(lab, i, n: int = 100, **kw) -> bytes:
    p1 = lab.ports[1]
    return bytes(P.downlink_ip6(C.ue6(i), SERVER6, n, src_mac=p1.mac, dst_mac=p1.dut_mac, **kw))


def encap6_expected(lab, frame: bytes, i: int) -> bytes:
    """docs/ipv6.md, "N3 over IPv6 in the PGW-U (XDP)": Ethernet to the peer's neighbour / IPv6 n3_addr6
    -> the peer, class the inner TOS or class, flow label 0, hop limit 64 / UDP from the flow's port to
    2152 with the checksum Scapy computes (never 0) / GTP-U G-PDU with the peer's TEID (and a DL PDU
    Session Container of the QFI) / the packet, its TTL or hop limit one less."""
    a, p0 = lab.addressing, lab.ports[0]
    ip = O.ip_payload(frame)
    inner = O.ttl_dec(ip)
    sport = O.sport_of_flow6(ip) if ip[0] >> 4 == 6 else O.sport_of_flow(ip)
    return bytes(Ether(dst=p0.mac, src=p0.dut_mac)
                 / IPv6(tc=O.traffic_class(ip), fl=0, hlim=64, nh=17, src=a.dut_access6, dst=a.sgw6(i))
                 / UDP(sport=sport, dport=2152)
                 / O.gtp_header_for(inner, a.sgw_teid(i), QFI if i == QFI6_I else None) / Raw(inner))


def reply6_expected(lab, frame: bytes, dport: int, gtp_type: int, seq: int, body) -> bytes:
    """A GTP-U message back to the sender over IPv6: IPv6 n3_addr6 -> the sender (class and flow label 0,
    hop limit 64), UDP 2152 -> dport with its checksum, GTP-U S set, TEID 0."""
    a, p0 = lab.addressing, lab.ports[0]
    sender = socket.inet_ntop(socket.AF_INET6, frame[14 + 8:14 + 24])
    return bytes(Ether(dst=p0.mac, src=p0.dut_mac) / IPv6(tc=0, fl=0, hlim=64, src=a.dut_access6, dst=sender)
                 / UDP(sport=2152, dport=dport)
                 / GTP_U_Header(version=1, PT=1, E=0, S=1, PN=0, gtp_type=gtp_type, teid=0, seq=seq, npdu=0,
                                next_ex=0) / body)


def usage(lab, i: int) -> dict:
    """Bearer i's usage counters (`pgwu session get --json`): uplink, downlink (the IPv4 halves') and
    uplink6, downlink6 (its /64's), each (packets, bytes)."""
    b = lab.pgwu_json("session", "get", "--teid", str(lab.addressing.local_teid(i)))
    return {k: (b[k]["packets"], b[k]["bytes"]) for k in ("uplink", "downlink", "uplink6", "downlink6") if k in b}


def _moved(u0: dict, u1: dict) -> dict:
    return {k: (u1[k][0] - u0[k][0], u1[k][1] - u0[k][1]) for k in u1 if u1[k] != u0.get(k)}


# ---- uplink -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("family", [4, 6])
@pytest.mark.parametrize("i", [PEER6_I, QFI6_I])
def test_ul_over_ipv6_decapsulated_as_over_ipv4(dut, family, i):
    """A G-PDU over IPv6 to n3_addr6: its T-PDU (IPv4 or IPv6) leaves on SGi decapsulated, TTL or hop
    limit - 1, octet for octet; counted ul_fwd; the bearer's uplink usage counts its inner octets."""
    lab = dut[0]
    inner = inner4(lab, i) if family == 4 else inner6(i)
    f = ul6_frame(lab, inner, i)
    u0 = usage(lab, i)
    got, dd = send(dut, 0, [f, f])
    want = decap(lab, inner)
    assert got[0] == [], [O.describe("back", g) for g in got[0]]
    assert got[1] == [want, want], O.mismatch_report(want, got[1][0]) if got[1] else "nothing forwarded"
    assert only(dd) == {"fwd": 2}
    moved = (2, 2 * len(inner))
    assert _moved(u0, usage(lab, i)) == ({"uplink": moved} if family == 4 else {"uplink": moved, "uplink6": moved})


def test_ul_over_ipv6_qfi_checked_as_over_ipv4(dut):
    """The QFI bearer's G-PDU without its PDU Session Container: drop_qfi_mismatch, as over IPv4."""
    lab = dut[0]
    got, dd = send(dut, 0, [ul6_frame(lab, inner4(lab, QFI6_I), QFI6_I, ext=[])])
    assert got == [[], []] and only(dd) == {"drop_qfi_mismatch/drop": 1}


def test_ul_over_ipv6_spoofed_source_dropped(dut):
    lab = dut[0]
    f = ul6_frame(lab, bytes(P.ip_packet("10.45.0.99", lab.addressing.pdn(0), payload_len=8)))
    got, dd = send(dut, 0, [f])
    assert got == [[], []] and only(dd) == {"drop_spoofed/drop": 1}


@pytest.mark.parametrize("dut", ["defaults"], indirect=True)
def test_echo_request_over_ipv6_answered_over_ipv6(dut):
    lab = dut[0]
    f = ul6_frame(lab, b"", gtp_type=P.GTP_ECHO_REQUEST, teid=0, seq=0x1234, sport=40123, ext=[])
    got, dd = send(dut, 0, [f])
    want = reply6_expected(lab, f, 40123, P.GTP_ECHO_RESPONSE, 0x1234, Raw(bytes([14, 0])))
    assert got[1] == [] and len(got[0]) == 1, [O.describe("out", g) for g in got[0] + got[1]]
    assert got[0][0] == want, O.mismatch_report(want, got[0][0])
    assert only(dd) == {"echo_reply/tx": 1}


@pytest.mark.parametrize("dut", ["defaults"], indirect=True)
def test_unknown_teid_over_ipv6_answered_with_error_indication_over_ipv6(dut):
    """TS 29.281 7.3.1 over IPv6: its GTP-U Peer Address IE the 16 octets of n3_addr6."""
    lab = dut[0]
    f = ul6_frame(lab, inner4(lab), teid=UNKNOWN_TEID)
    got, dd = send(dut, 0, [f])
    body = GTPErrorIndication(IE_list=[IE_TEIDI(TEIDI=UNKNOWN_TEID),
                                       IE_GSNAddress(length=16, ipv6_address=lab.addressing.dut_access6)])
    want = reply6_expected(lab, f, 2152, P.GTP_ERROR_INDICATION, 0, body)
    assert got[1] == [] and len(got[0]) == 1, [O.describe("out", g) for g in got[0] + got[1]]
    assert got[0][0] == want, O.mismatch_report(want, got[0][0])
    assert only(dd) == {"drop_unknown_teid/drop": 1}        # answered: counted with its reason


def _zero_csum(f: bytes) -> bytes:
    return f[:14 + 46] + b"\0\0" + f[14 + 48:]


def _wrong_csum(f: bytes) -> bytes:
    return f[:-1] + bytes([f[-1] ^ 1])


@pytest.mark.parametrize("dut", ["defaults"], indirect=True)
@pytest.mark.parametrize("mutate", [_zero_csum, _wrong_csum], ids=["zero", "wrong"])
def test_outer_udp_checksum_zero_or_wrong_over_ipv6_dropped_by_the_kernel_and_counted(dut, mutate):
    """RFC 8200 8.1 (RFC 6936: a zero checksum only where a tunnel allows it; the socket does not): the
    kernel's UDPv6 socket drops it before the socket path reads it, in Udp6 InCsumErrors, which the lab
    counts as kernel_udp_incsumerrors (the XDP path's drop_outer_udp_csum); nothing leaves."""
    lab = dut[0]
    f = mutate(ul6_frame(lab, inner4(lab)))
    got, dd = send(dut, 0, [f, f])
    assert got == [[], []], [O.describe("out", g) for g in got[0] + got[1]]
    assert only(dd) == {"kernel_udp_incsumerrors/drop": 2}


# ---- downlink ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("family", [4, 6])
@pytest.mark.parametrize("i", [PEER6_I, QFI6_I])
def test_dl_to_ipv6_peer_encapsulated_with_ipv6_outer_and_checksum(dut, family, i):
    """The downlink of a bearer whose peer is IPv6 (sgw6=): GTP-U/UDP/IPv6 from n3_addr6 to the peer,
    octet for octet (the outer UDP checksum never 0); counted dl_fwd; the bearer's downlink usage."""
    lab = dut[0]
    f = dl4_frame(lab, i, tos=0x48) if family == 4 else dl6_frame(lab, i, tc=0x28)
    u0 = usage(lab, i)
    got, dd = send(dut, 1, [f, f])
    want = encap6_expected(lab, f, i)
    assert got[1] == [], [O.describe("back", g) for g in got[1]]
    assert got[0] == [want, want], O.mismatch_report(want, got[0][0]) if got[0] else "nothing forwarded"
    assert struct.unpack_from("!H", got[0][0], 14 + 40 + 6)[0] != 0
    assert only(dd) == {"fwd": 2}
    moved = (2, 2 * len(O.ip_payload(f)))
    assert _moved(u0, usage(lab, i)) == ({"downlink": moved} if family == 4 else {"downlink": moved, "downlink6": moved})


@pytest.mark.parametrize("dut", ["defaults"], indirect=True)
def test_dl_large_packet_checksum_right(dut):
    lab = dut[0]
    f = dl4_frame(lab, PEER6_I, n=1371)
    got, dd = send(dut, 1, [f])
    want = encap6_expected(lab, f, PEER6_I)
    assert got[0] == [want], O.mismatch_report(want, got[0][0]) if got[0] else ("nothing forwarded", only(dd))


@pytest.mark.parametrize("dut", ["defaults"], indirect=True)
def test_ipv4_peer_bearer_unchanged_beside_ipv6_ones(dut):
    """A bearer with an IPv4 peer next to the IPv6 ones: its downlink still GTP-U over IPv4."""
    lab = dut[0]
    a, p0 = lab.addressing, lab.ports[0]
    f = dl4_frame(lab, PEER4_I)
    got, dd = send(dut, 1, [f])
    assert only(dd) == {"fwd": 1} and len(got[0]) == 1 and got[0][0][12:14] == b"\x08\x00", only(dd)
    ip_id = struct.unpack_from("!H", got[0][0], 18)[0]
    want = O.encap_expected(O.ip_payload(f), smac=P.mac_bytes(p0.dut_mac), dmac=P.mac_bytes(p0.mac), vlan=None,
                            local=a.dut_access, sgw=a.sgw(PEER4_I), teid=a.sgw_teid(PEER4_I), csum=True, ip_id=ip_id)
    assert got[0][0] == want, O.mismatch_report(want, got[0][0])


# ---- over the N3 IPv6 route's MTU (n3v6_too_big: the raw IPv6 socket refuses it, EMSGSIZE) ----------
# The access route to the bearer's IPv6 peer given a lower MTU for one test (route_mtu); the tunnel
# takes N3V6 octets (IPv6 40 + UDP 8 + GTP-U 8, + 8 with a PDU Session Container).
N3V6 = {PEER6_I: 56, QFI6_I: 64}


@pytest.mark.parametrize("dut", ["defaults"], indirect=True)
@pytest.mark.parametrize("i,mtu", [(PEER6_I, 1400), (QFI6_I, 1400), (PEER6_I, 1335)],
                         ids=["bearer", "qfi-bearer", "tunnel-under-1280"])
def test_dl6_over_the_n3v6_route_mtu_answered_with_packet_too_big(dut, i, mtu):
    """A downlink IPv6 packet one octet too big for the tunnel to its IPv6 peer: drop_too_big, answered
    with ICMPv6 Packet Too Big from local_addr6 out of SGi, MTU = the route's MTU - 56 (64 with a PSC),
    quoting the packet as it arrived, as xdp_dl_n3v6; under 1280 (RFC 8200 5) not answered. One
    octet less is encapsulated whole, octet for octet."""
    lab = dut[0]
    a, p0 = lab.addressing, lab.ports[0]
    fit = mtu - N3V6[i]
    big, fits = dl6_frame(lab, i, fit + 1 + 18), dl6_frame(lab, i, fit + 18)
    assert len(O.ip_payload(fits)) == fit
    with route_mtu(lab, f"{a.sgw6(i)}/128", p0.dut_ifname, mtu):
        got, dd = send(dut, 1, [big, fits])
    want = encap6_expected(lab, fits, i)
    assert got[0] == [want], O.mismatch_report(want, got[0][0]) if got[0] else ("nothing forwarded", only(dd))
    if fit >= 1280:
        ptb = O.packet_too_big6_dl_expected(big, a.dut_sgi6, fit)
        assert got[1] == [ptb], O.mismatch_report(ptb, got[1][0]) if got[1] else "no Packet Too Big came back"
    else:
        assert got[1] == [], [O.describe("back", g) for g in got[1]]
    assert only(dd) == {"drop_too_big/drop": 1, "fwd": 1}, only(dd)


@pytest.mark.parametrize("dut", ["defaults"], indirect=True)
@pytest.mark.parametrize("df", [True, False], ids=["df", "no-df"])
def test_dl4_over_the_n3v6_route_mtu_answered_with_frag_needed(dut, df):
    """A downlink IPv4 packet one octet too big for the tunnel to its IPv6 peer (the kernel does not
    fragment the raw socket's IPv6): drop_frag_needed; with DF answered with Fragmentation Needed from
    local_addr out of SGi, next-hop MTU the route's - 56 (RFC 1191), quoting the packet as it arrived;
    without DF dropped unanswered, as xdp_dl_n3v6. One octet less is encapsulated whole. (The answer's
    IPv4 id is the kernel's: a raw socket's packet without DF.)"""
    lab = dut[0]
    a, p0 = lab.addressing, lab.ports[0]
    mtu = 1400
    fit = mtu - N3V6[PEER6_I]
    big, fits = dl4_frame(lab, PEER6_I, fit + 1 + 18, df=df), dl4_frame(lab, PEER6_I, fit + 18, df=df)
    with route_mtu(lab, f"{a.sgw6(PEER6_I)}/128", p0.dut_ifname, mtu):
        got, dd = send(dut, 1, [big, fits])
    want = encap6_expected(lab, fits, PEER6_I)
    assert got[0] == [want], O.mismatch_report(want, got[0][0]) if got[0] else ("nothing forwarded", only(dd))
    check_reply(got[1], O.frag_needed_dl_expected(big, a.dut_access, mtu, encap=N3V6[PEER6_I]) if df else None)
    assert only(dd) == {"drop_frag_needed/drop": 1, "fwd": 1}, only(dd)


# ---- signalling received over IPv6: recorded as XDP records it (peers6, sig_rx6; sig_record) -------------
def path6(lab) -> dict:
    """`pgwu path --json`: {addr: entry} of its IPv6 peers"""
    return {p["addr"]: p for p in lab.pgwu_json("path")["peers"] if p["family"] == 6}


def signalling6(lab) -> dict:
    """`pgwu signalling --json` of the IPv6 peers: {(message, teid, peer): (packets, from, bearer)}"""
    return {(s["message"], s["teid"], s["peer"]): (s["packets"], s["from"], s["bearer"])
            for s in lab.pgwu_json("signalling")["signalling"] if ":" in s["peer"]}


def echo_response6_frame(lab, src: str, restart: int, seq: int) -> bytes:
    return ul6_frame(lab, bytes([14, restart]), gtp_type=P.GTP_ECHO_RESPONSE, teid=0, seq=seq, src=src, ext=[])


@pytest.mark.parametrize("dut", ["defaults"], indirect=True)
def test_echo_response_over_ipv6_recorded_in_pgwu_path(dut):
    """An Echo Response from an IPv6 peer: consumed (sig_echo_response, drop) and shown by `pgwu path`
    as XDP's xdp_ul_n3v6 records it (peers6): up, its Recovery restart counter, a restart when that
    changes, the responses counted."""
    lab = dut[0]
    peer = "fd47:7473::77"              # not a bearer's peer: only this test writes its entry
    before = path6(lab).get(peer, {"responses": 0, "restarts": 0})
    got, dd = send(dut, 0, [echo_response6_frame(lab, peer, 7, 0x4001)])
    assert got == [[], []] and only(dd) == {"sig_echo_response/drop": 1}, only(dd)
    p = path6(lab)[peer]
    assert (p["state"], p["restart_counter"], p["responses"] - before["responses"]) == ("up", 7, 1), p
    send(dut, 0, [echo_response6_frame(lab, peer, 8, 0x4002)])
    p = path6(lab)[peer]
    assert (p["restart_counter"], p["restarts"] - before["restarts"], p["responses"] - before["responses"]) == (
        8, 1, 2), p


@pytest.mark.parametrize("dut", ["defaults"], indirect=True)
def test_error_indication_and_end_marker_over_ipv6_shown_by_pgwu_signalling(dut):
    """An Error Indication from another address of an IPv6 peer naming PEER6_I's downlink tunnel (its
    TEID Data I; its GTP-U Peer Address the peer's 16 octets: that address keyed, the sender as from)
    and an End Marker on PEER6_I's TEID: consumed (sig_error_ind, sig_end_marker) and recorded
    (sig_rx6), joined to the bearer by `pgwu signalling`, as XDP's."""
    lab = dut[0]
    a = lab.addressing
    gnb6, other = a.sgw6(PEER6_I), "fd47:7473::78"
    body = GTPErrorIndication(IE_list=[IE_TEIDI(TEIDI=a.sgw_teid(PEER6_I)),
                                       IE_GSNAddress(length=16, ipv6_address=gnb6)])
    ei = ul6_frame(lab, bytes(body), gtp_type=P.GTP_ERROR_INDICATION, teid=0, seq=0, src=other, ext=[])
    em = ul6_frame(lab, b"", gtp_type=P.GTP_END_MARKER, src=gnb6, ext=[])
    before = signalling6(lab)
    got, dd = send(dut, 0, [ei, ei, em])
    assert got == [[], []] and only(dd) == {"sig_error_ind/drop": 2, "sig_end_marker/drop": 1}, only(dd)
    b = {"teid": a.local_teid(PEER6_I), "ue": a.ue(PEER6_I)}
    moved = {k: (v[0] - before.get(k, (0,))[0], v[1], v[2]) for k, v in signalling6(lab).items()
             if v[0] != before.get(k, (0,))[0]}
    assert moved == {("error_ind", a.sgw_teid(PEER6_I), gnb6): (2, other, b),
                     ("end_marker", a.local_teid(PEER6_I), gnb6): (1, gnb6, b)}, moved


# ---- answers into the tunnel over IPv6 (tunnel_error_send) and the Notification over IPv6 ----------------
def tunnel6_expected(lab, icmp: bytes, i: int) -> bytes:
    """An ICMP or ICMPv6 error to bearer i's UE in a G-PDU over IPv6 to its peer: IPv6 n3_addr6 -> the
    peer (class and flow label 0, hop limit 64) / UDP 2152 -> 2152 with its checksum / GTP-U G-PDU to
    the peer's TEID (with a DL PDU Session Container of the QFI) / the error."""
    a, p0 = lab.addressing, lab.ports[0]
    return bytes(Ether(dst=p0.mac, src=p0.dut_mac)
                 / IPv6(tc=0, fl=0, hlim=64, nh=17, src=a.dut_access6, dst=a.sgw6(i))
                 / UDP(sport=2152, dport=2152)
                 / O.gtp_header_for(icmp, a.sgw_teid(i), QFI if i == QFI6_I else None) / Raw(icmp))


@pytest.mark.parametrize("dut", ["defaults"], indirect=True)
@pytest.mark.parametrize("family", [4, 6])
@pytest.mark.parametrize("i", [PEER6_I, QFI6_I])
def test_ul_ttl_expired_over_ipv6_answered_with_time_exceeded_into_the_ipv6_tunnel(dut, family, i):
    """A G-PDU over IPv6 whose T-PDU has TTL / hop limit 1: drop_ttl_expired, answered with Time
    Exceeded (ICMP from local_addr, RFC 1812 5.3.1; ICMPv6 from local_addr6, RFC 4443 3.3) to the UE
    through its bearer's tunnel, which is over IPv6 to its peer: tunnel6_expected."""
    lab = dut[0]
    a = lab.addressing
    if family == 4:
        inner = bytes(P.ip_packet(a.ue(i), a.pdn(i), payload_len=100, ttl=1))
        icmp = bytes(O._time_exceeded(a.dut_access, a.ue(i), inner))
    else:
        inner = bytes(P.ip6_packet(C.ue6(i), SERVER6, payload_len=100, hlim=1))
        icmp = bytes(conformance_oracle._time_exceeded6(a.dut_sgi6, C.ue6(i), inner))
    got, dd = send(dut, 0, [ul6_frame(lab, inner, i)])
    want = tunnel6_expected(lab, icmp, i)
    assert got[1] == [], [O.describe("out", g) for g in got[1]]
    assert got[0] == [want], O.mismatch_report(want, got[0][0]) if got[0] else ("no Time Exceeded", only(dd))
    assert only(dd) == {"drop_ttl_expired/drop": 1}, only(dd)


@pytest.mark.parametrize("dut", ["defaults"], indirect=True)
def test_unsupported_extension_header_over_ipv6_answered_with_notification_over_ipv6(dut):
    """TS 29.281 7.3.3: a G-PDU over IPv6 with an unknown comprehension-required extension header
    (type 0xA0): drop_gtp_ext_unsupported, answered with a Supported Extension Headers Notification
    over IPv6 to the sender's source port (its Extension Header Type List IE), as over IPv4."""
    lab = dut[0]
    f = ul6_frame(lab, inner4(lab), sport=40321, ext=[P.ext_header(0xA0, b"\0\0")])
    got, dd = send(dut, 0, [f])
    body = Raw(bytes([141, len(O.KNOWN_EXT_TYPES)]) + bytes(O.KNOWN_EXT_TYPES))
    want = reply6_expected(lab, f, 40321, 31, 0, body)
    assert got[1] == [] and len(got[0]) == 1, [O.describe("out", g) for g in got[0] + got[1]]
    assert got[0][0] == want, O.mismatch_report(want, got[0][0])
    assert only(dd) == {"drop_gtp_ext_unsupported/drop": 1}, only(dd)


@pytest.mark.parametrize("dut", ["defaults"], indirect=True)
def test_ul6_over_the_sgi_route_mtu_answered_with_packet_too_big_into_the_ipv6_tunnel(dut):
    """An uplink IPv6 T-PDU over IPv6 N3 too big for the SGi route (MTU 1300; the raw IPv6 socket
    refuses it): drop_too_big, answered with Packet Too Big MTU 1300 from local_addr6, quoting the
    packet as it arrived, to the UE through its bearer's IPv6 tunnel; 1300 octets still go."""
    lab = dut[0]
    a, p1 = lab.addressing, lab.ports[1]
    server = C.server6(22)                                  # alone on its lowered route

    def t_pdu(n):
        return bytes(P.ip6_packet(C.ue6(PEER6_I), server, payload_len=n - 48))
    big, fits = t_pdu(1301), t_pdu(1300)
    with route_mtu(lab, f"{server}/128", p1.dut_ifname, 1300, via=a.gen_sgi6):
        got, dd = send(dut, 0, [ul6_frame(lab, big), ul6_frame(lab, fits)])
    icmp = bytes(conformance_oracle._packet_too_big6(a.dut_sgi6, C.ue6(PEER6_I), big, 1300))
    want = tunnel6_expected(lab, icmp, PEER6_I)
    assert got[0] == [want], O.mismatch_report(want, got[0][0]) if got[0] else ("no Packet Too Big", only(dd))
    assert got[1] == [decap(lab, fits)], [O.describe("out", g) for g in got[1]]
    assert only(dd) == {"drop_too_big/drop": 1, "fwd": 1}, only(dd)
