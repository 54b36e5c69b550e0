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

import os
import socket
import struct

import pytest
from scapy.contrib.gtp import GTP_U_Header, GTPErrorIndication, IE_GSNAddress, IE_TEIDI
from scapy.layers.inet import UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from gtplab.conformance import cases as C
from gtplab.dut.local import LocalDut
from gtplab.dut.sock import SocketKnobs
from gtplab.gtpu import packets as P
from gtplab.lab.topology import Lab
from tests.lib.socklab import only, send
from tests.lib import oracle as O

pytestmark = pytest.mark.lab

QFI = 9
PEER6_I, QFI6_I, PEER4_I = 0, 1, 2      # bearers: IPv6 peer; IPv6 peer with a QFI; IPv4 peer (as before)
N_BEARERS = 3
SERVER6 = C.server6(1)
UNKNOWN_TEID = 0x0BAD0001


@pytest.fixture(scope="module")
def lab():
    lab = Lab.up(dut="socket", pgwu_load_args=("--max-bearers", "4096"))
    try:
        a = lab.addressing
        lines = [f"{a.local_teid(i):#x} {a.ue(i)} {a.sgw(i)} {a.sgw_teid(i):#x} ue6={C.ue6_prefix(i)}"
                 + (f" qfi={QFI}" if i == QFI6_I else "") + (f" sgw6={a.sgw6(i)}" if i != PEER4_I else "")
                 for i in range(N_BEARERS)]
        path = f"/tmp/gtplab-sockn3v6-{lab.name}.bearers"
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        lab.pgwu("session", "load", path)
        os.unlink(path)
        yield lab
    finally:
        lab.down()


@pytest.fixture(scope="module", params=["defaults", "recvfrom"])
def dut(request, lab):
    lab.start_socket(SocketKnobs.parse({} if request.param == "defaults" else {"batch": 1}))
    d = LocalDut(lab)
    try:
        yield lab, d
    finally:
        d.close()


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
