"""The conformance cases, as data: each a name, the spec clause it checks, the port it sends on, the
packets (gtplab/gtpu/packets.py, in the lab's addressing) and the output the oracle computes for
them (gtplab/conformance/oracle.py): the spec's, or, given a UPF's known departures
(gtplab/conformance/departs.py, the facts named in `uses`), what that UPF is known to send.

The frame lists (uplink_frames, downlink_frames, qfi_downlink_frames) are also the ones
tests/dataplane/test_suite_correctness.py sends: one list of packets. They take the lab (anything
with .addressing and .ports) and the uplink TEID of bearer i (default: the lab's, gtplab's own;
a UPF that chooses its F-TEIDs gives others).

Bearers as the runner provisions them (runner.py): 0-3 plain (4G-style, no QFI), the outer UDP
checksum on for 0 and 1 and off for 2 and 3 where the UPF has that knob (the PGW-U's bearer file;
over PFCP there is none: on), and bearer QFI_BEARER a 5G N3 QoS flow with QFI (TS 38.415).
"""

from __future__ import annotations

import fnmatch
import ipaddress
import socket
import struct
import time
from dataclasses import dataclass, field, replace
from typing import Callable

from scapy.layers.inet import ICMP, IP, IPerror, UDP, fragment
from scapy.layers.inet6 import IPerror6, IPv6
from scapy.layers.l2 import Dot1Q, Ether
from scapy.packet import Raw

from gtplab.conformance import departs
from gtplab.conformance import oracle as O
from gtplab.conformance.judge import Expect, Like
from gtplab.gtpu import packets
from gtplab.gtpu.bearers import load_common

N_EACH = 3          # copies of each packet (one single-burst stream per packet)
QFI_BEARER = 4      # the 5G N3 bearer
QFI = 9
ENCAP_FACTS = ("inner_ttl", "outer_udp_sport", "outer_udp_csum", "outer_ip", "dl_psc_qfi", "pdr_without_qer")


@dataclass
class Ctx:
    """What a case needs of the lab and of how its bearers were provisioned."""
    addressing: object
    ports: list
    teids: dict = field(default_factory=dict)        # bearer index -> uplink TEID in force
    csum_on: frozenset = frozenset()                 # bearers with the outer UDP checksum on
    qfi: int | None = None                           # bearer QFI_BEARER's QFI; None: no QFI session
    qfi_why: str = ""                                # why not, then
    first_qer_qfi: int | None = None                 # for "pdr_without_qer"
    mtu_access: int = 0
    mtu_sgi: int = 0
    upf: str = "pgwu"                                # departs.DEPARTS row
    upf_started: float | None = None                 # time.time() the lab started an external UPF
    ipv6: bool = False                               # bearers IPV6_BEARERS have their UE's /64
    n3: str = "4"                                    # "6": the bearers' peers are IPv6 (N3 over IPv6)
    n3_why: str = ""                                 # n3 "6" the UPF refused: its answer

    def upf_age(self) -> float | None:
        return None if self.upf_started is None else time.time() - self.upf_started

    def teid(self, i: int) -> int:
        return self.teids.get(i, self.addressing.local_teid(i))


def n3_addr(lab) -> str:
    """The UPF's N3 address of the lab's N3 family (lab.n3, "4" without one): the G-PDUs' destination."""
    return lab.addressing.dut_access6 if getattr(lab, "n3", "4") == "6" else lab.addressing.dut_access


def outer_grow(lab) -> int:
    """How much bigger a G-PDU frame is over N3 IPv6 (40-octet outer header, not 20): the frame sizes
    grow by it, so that the T-PDUs are the same over either family."""
    return 20 if getattr(lab, "n3", "4") == "6" else 0


def peer(lab, i: int) -> str:
    """The gNB / SGW address of bearer i (and of any sender i) in the lab's N3 family."""
    return lab.addressing.sgw6(i) if getattr(lab, "n3", "4") == "6" else lab.addressing.sgw(i)


def ue6(i: int) -> str:
    """Bearer i's UE IPv6 address: its /64 (fd47:7470:XXXX:YYYY::/64, XXXX:YYYY = i, as the sweep's
    bearer files give it) and interface identifier 1 (trex_profiles/gtpu_common.py: one definition)."""
    return load_common().ue6_addr(i)


def ue6_prefix(i: int) -> str:
    return load_common().ue6_prefix(i)


def server6(n: int) -> str:
    """Server n (>= 1) of the lab's N6 IPv6 prefix fd47:7471::/64."""
    return load_common().server6_addr(n)


def _teid(lab, teid=None):
    return teid or getattr(lab, "teid", None) or lab.addressing.local_teid


# ------------------------------------------------------------------------------------------ frames

def uplink_frames(lab, teid=None):
    a, p0, t, g = lab.addressing, lab.ports[0], _teid(lab, teid), lambda i: peer(lab, i)
    kw = dict(outer_dst=n3_addr(lab), src_mac=p0.mac, dst_mac=p0.dut_mac)
    o = outer_grow(lab)
    return [
        packets.gpdu(t(0), a.ue(0), a.pdn(0), size=128 + o, outer_src=g(0), **kw),
        packets.gpdu(t(1), a.ue(1), a.pdn(1), size=1518 + o, outer_src=g(1), udp_csum=True, **kw),
        packets.gpdu(t(2), a.ue(2), a.pdn(2), size=3024 + o, outer_src=g(2), **kw),
        packets.gpdu(t(3), a.ue(3), a.pdn(3), size=200 + o, l4="tcp", ttl=2, outer_src=g(3), **kw),
        packets.gpdu(t(0), a.ue(0), a.pdn(5), size=100 + o, l4="icmp", df=True, tos=0x28,
                     outer_src=g(0), **kw),
        # one 802.1Q tag on the access side is accepted; the SGi side sends untagged
        packets.gpdu(t(1), a.ue(1), a.pdn(6), size=256 + o, outer_src=g(1), vlan=100, **kw),
        # GTP-U with a sequence number and a PDU session container: the header chain is removed too
        packets.gpdu(t(2), a.ue(2), a.pdn(7), size=300 + o, outer_src=g(2), seq=7,
                     ext=[packets.pdu_session_container(qfi=5)], **kw),
    ]


def downlink_frames(lab):
    a, p1 = lab.addressing, lab.ports[1]
    kw = dict(src_mac=p1.mac, dst_mac=p1.dut_mac)
    return [
        packets.downlink_ip(a.ue(0), a.pdn(0), 64, **kw),
        packets.downlink_ip(a.ue(1), a.pdn(1), 1518, df=True, **kw),
        packets.downlink_ip(a.ue(2), a.pdn(2), 3024, **kw),
        packets.downlink_ip(a.ue(3), a.pdn(3), 300, l4="tcp", tos=0xb8, **kw),
        packets.downlink_ip(a.ue(0), a.pdn(4), 128, l4="icmp", **kw),
        packets.downlink_ip(a.ue(2), a.pdn(5), 200, udp_csum=False, **kw),     # inner UDP checksum 0
        packets.downlink_ip(a.ue(1), a.pdn(6), 256, vlan=42, **kw),            # tagged on SGi
    ]


IPV6_BEARERS = (0, 1, 2, 3)     # the bearers provisioned IPv4v6 (their /64: ue6_prefix)


def uplink6_frames(lab, teid=None):
    """G-PDUs of the IPv4v6 bearers carrying IPv6 packets from their UEs' /64s to N6 servers."""
    a, p0, t = lab.addressing, lab.ports[0], _teid(lab, teid)

    def g6(i, srv, size, src=None, **ipkw):
        return packets.gpdu6(t(i), src or ue6(i), server6(srv), size=size + outer_grow(lab), outer_src=peer(lab, i),
                             outer_dst=n3_addr(lab), src_mac=p0.mac, dst_mac=p0.dut_mac, **ipkw)
    return [
        g6(0, 1, 128),
        g6(1, 2, 1518, tc=0xB8, fl=0x12345),
        g6(2, 3, 300, l4="tcp", hlim=2),
        g6(3, 4, 200, l4="icmp"),
        g6(0, 5, 128, src=ue6(1)),                       # [4]: bearer 0's tunnel, bearer 1's /64
    ]


def downlink6_frames(lab):
    """IPv6 packets from N6 servers to the IPv4v6 bearers' UEs; [4]: to a /64 no session has."""
    a, p1 = lab.addressing, lab.ports[1]

    def d6(i, srv, size, **ipkw):
        return packets.downlink_ip6(ue6(i), server6(srv), size, src_mac=p1.mac, dst_mac=p1.dut_mac, **ipkw)
    return [
        d6(0, 1, 80),
        d6(1, 2, 1518, tc=0xB8, fl=0x54321),
        d6(2, 3, 300, l4="tcp", hlim=2),
        d6(3, 4, 128, l4="icmp"),
        d6(500, 5, 128),
    ]


def qfi_downlink_frames(lab):
    a, p1, q = lab.addressing, lab.ports[1], QFI_BEARER
    kw = dict(src_mac=p1.mac, dst_mac=p1.dut_mac)
    return [
        packets.downlink_ip(a.ue(q), a.pdn(0), 64, **kw),
        packets.downlink_ip(a.ue(q), a.pdn(1), 1518, df=True, **kw),
        packets.downlink_ip(a.ue(q), a.pdn(2), 3024, **kw),
        packets.downlink_ip(a.ue(q), a.pdn(3), 300, l4="tcp", tos=0xb8, **kw),
        packets.downlink_ip(a.ue(q), a.pdn(4), 128, l4="icmp", **kw),
    ]


def qfi_uplink(lab, ext, i: int, teid=None, **kw):
    a, p0, q = lab.addressing, lab.ports[0], QFI_BEARER
    if kw.get("size"):
        kw["size"] += outer_grow(lab)
    return packets.gpdu(_teid(lab, teid)(q), a.ue(q), a.pdn(i), outer_src=peer(lab, q), outer_dst=n3_addr(lab),
                        src_mac=p0.mac, dst_mac=p0.dut_mac, ext=ext, **kw)


def outer_fragmented(lab, n: int = N_EACH, teid=None) -> tuple[list, list]:
    """n uplink G-PDUs of bearer 1 (each its own outer id), each as 3 outer IPv4 fragments: (the
    G-PDUs, their fragments as frames in order)."""
    a, p0 = lab.addressing, lab.ports[0]
    gs, frames = [], []
    for c in range(n):
        g = packets.gpdu(_teid(lab, teid)(1), a.ue(1), a.pdn(8), size=1400, inner_id=0x100 + c,
                         outer_id=0x5000 + c, outer_src=a.sgw(1), outer_dst=a.dut_access, src_mac=p0.mac,
                         dst_mac=p0.dut_mac)
        frs = fragment(g[IP], fragsize=512)
        assert len(frs) == 3 and all(f.flags.MF for f in frs[:-1]) and frs[-1].frag > 0
        gs.append(g)
        frames += [Ether(src=p0.mac, dst=p0.dut_mac) / f for f in frs]
    return gs, frames


# ------------------------------------------------------------------------------------------ outputs

def _ttl(d: dict):
    return (lambda ip: ip) if d.get("inner_ttl") == "kept" else O.ttl_dec


def decap(ctx: Ctx, frame: bytes, d: dict, vlan: int | None = None) -> bytes:
    """An uplink G-PDU's inner packet as it leaves N6: untagged (or with the egress tag), TTL-1."""
    p1 = ctx.ports[1]
    inner = O.gpdu_inner(frame)
    et = O.ethertype(inner)
    eth = Ether(dst=p1.mac, src=p1.dut_mac)
    eth = eth / Dot1Q(vlan=vlan, prio=0, type=et) if vlan else Ether(dst=p1.mac, src=p1.dut_mac, type=et)
    return bytes(eth) + _ttl(d)(inner)


def bearer_of(ctx: Ctx, frame) -> int:
    """The bearer of a downlink packet: UE i is the lab's pool + 1 + i (IPv6: ue6(i))."""
    e = Ether(bytes(frame))
    if IPv6 in e:
        ue = ipaddress.IPv6Address(e[IPv6].dst)
        for i in IPV6_BEARERS:
            if ipaddress.IPv6Address(ue6(i)) == ue:
                return i
        raise ValueError(f"no bearer for UE {ue}")
    ue = e[IP].dst
    for i in list(range(4)) + [QFI_BEARER]:
        if ctx.addressing.ue(i) == ue:
            return i
    raise ValueError(f"no bearer for UE {ue}")


def _ids_free(frame: bytes, inner: bool = False, ttl: bool = False) -> bytes | None:
    """The frame with its outer IPv4 id and header checksum zeroed (ttl: and its TTL), after checking
    the checksum (or finding it zeroed with the TTL, by the case's normalisation); inner: also a
    G-PDU's outer UDP checksum and its T-PDU's id and header checksum, after checking both. None
    when a checksum is wrong or the frame is not that."""
    try:
        l2, _ = O.l2_split(frame)
        b = bytearray(frame)
        ihl = (b[l2] & 0xF) * 4
        if frame[l2 - 2:l2] != b"\x08\x00" or b[l2] >> 4 != 4:
            return None
        if not (O.ip_hdr_ok(frame[l2:l2 + ihl]) or (ttl and b[l2 + 8] == 0 and b[l2 + 10:l2 + 12] == b"\0\0")):
            return None
        if ttl:
            b[l2 + 8] = 0
        b[l2 + 4:l2 + 6] = b[l2 + 10:l2 + 12] = b"\0\0"
        if inner:
            if not O.outer_udp_ok(frame):
                return None
            b[l2 + ihl + 6:l2 + ihl + 8] = b"\0\0"
            t = l2 + ihl + 8 + O.gtp_header_chain_len(frame[l2 + ihl + 8:])
            if not O.ip_hdr_ok(frame[t:t + (frame[t] & 0xF) * 4]):
                return None
            b[t + 4:t + 6] = b[t + 10:t + 12] = b"\0\0"
        return bytes(b)
    except (IndexError, struct.error):
        return None


def any_id(expected: bytes, what: str, inner: bool = False, ttl: bool = False) -> Like:
    """expected, but with whatever IPv4 id the sender's kernel picks (DF set or not), its checksums
    right (_ids_free)."""
    want = _ids_free(expected, inner, ttl)
    assert want is not None
    return Like(f"{what}, the kernel's IPv4 id: {Ether(expected).command()}",
                lambda g: _ids_free(g, inner, ttl) == want)


def encap(ctx: Ctx, frame, d: dict, *, qfi: int | None = None, vlan: int | None = None,
          sport: int | None = None, ttl_free: bool = False) -> bytes | Like:
    """A downlink packet as it leaves N3 in its bearer's G-PDU (outer id 0: compared id-free when
    DF is clear); with departures d, as that UPF sends it (oracle.encap_departing; the packet cut at
    d's "max_packet"; a Like when its outer id is the kernel's, ttl_free: the case's normalisation)."""
    a, p0 = ctx.addressing, ctx.ports[0]
    ip = O.ip_payload(bytes(frame))
    i = bearer_of(ctx, frame)
    if ctx.n3 == "6":
        if any(k in d for k in ENCAP_FACTS):
            return _encap6_departing(ctx, ip, i, d, qfi)
        return O.encap6_expected(ip, smac=p0.dut_mac, dmac=p0.mac, vlan=vlan, local6=a.dut_access6,
                                 sgw6=a.sgw6(i), teid=a.sgw_teid(i), sport=sport, qfi=qfi)
    if any(k in d for k in ENCAP_FACTS):
        if qfi is None and d.get("pdr_without_qer") == "applies the first QER stored":
            qfi = ctx.first_qer_qfi
        if d.get("max_packet"):
            ip = ip[:d["max_packet"]]
        g = O.encap_departing(d, ip, smac=p0.dut_mac, dmac=p0.mac, local=a.dut_access, sgw=a.sgw(i),
                              teid=a.sgw_teid(i), qfi=qfi)
        if d["outer_ip"]["id"] == "kernel":
            return any_id(g, "a G-PDU", ttl=ttl_free)
        return g
    return O.encap_expected(ip, smac=p0.dut_mac, dmac=p0.mac, vlan=vlan, local=a.dut_access, sgw=a.sgw(i),
                            teid=a.sgw_teid(i), csum=i in ctx.csum_on, ip_id=0, sport=sport, qfi=qfi)


def _encap6_departing(ctx: Ctx, ip: bytes, i: int, d: dict, qfi: int | None) -> Like:
    """A downlink G-PDU over IPv6 as a UPF with departures d sends it: the facts of the inner packet
    and the G-PDU header as over IPv4 (inner_ttl, outer_udp_sport, dl_psc_qfi, pdr_without_qer), the
    outer IPv6 header with d's traffic class (outer_ip "tos") and hop limit ("ttl"), its UDP
    checksum right (mandatory over IPv6); the flow label whatever the UPF's kernel picks (RFC 6437)."""
    a, p0 = ctx.addressing, ctx.ports[0]
    if qfi is None and d.get("pdr_without_qer") == "applies the first QER stored":
        qfi = ctx.first_qer_qfi
    if d.get("max_packet"):
        ip = ip[:d["max_packet"]]
    inner = ip if d.get("inner_ttl") == "kept" else O.ttl_dec(ip)
    o = d.get("outer_ip") or {}
    want = bytes(Ether(dst=p0.mac, src=p0.dut_mac)
                 / IPv6(tc=o.get("tos", O.traffic_class(ip)), fl=0, hlim=o.get("ttl", 64), nh=17, src=a.dut_access6,
                        dst=a.sgw6(i))
                 / UDP(sport=d.get("outer_udp_sport") or O.sport_of_flow(ip), dport=O.GTPU_PORT)
                 / O.gtp_header_for(inner, a.sgw_teid(i), d.get("dl_psc_qfi") if qfi is None else qfi)
                 / Raw(inner))
    return _fl_free(want, "a G-PDU over IPv6")


def _fl_free(want: bytes, what: str) -> Like:
    """want (an untagged IPv6 frame), with whatever flow label its sender's kernel picks (RFC 6437)."""
    def fl_free(g: bytes) -> bytes:
        b = bytearray(g)
        if len(b) >= 18 and b[12:14] == b"\x86\xdd":
            b[15] &= 0xF0
            b[16:18] = b"\0\0"
        return bytes(b)
    return Like(f"{what}, any flow label: {Ether(want).command()}", lambda g: fl_free(g) == fl_free(want))


def kernel_icmp(port, *, src: str, dst: str, kind: tuple[int, int], quoted: bytes) -> Like:
    """An ICMP error of the DUT's kernel (type, code = kind): src -> dst, back to port's generator
    side, quoting the start of the packet it answers (its IP header and 8 octets, RFC 792)."""
    def test(frame: bytes) -> bool:
        try:
            e = Ether(frame)
            return ((e.dst, e.src) == (port.mac, port.dut_mac) and ICMP in e and IPerror in e
                    and (e[IP].src, e[IP].dst, e[ICMP].type, e[ICMP].code) == (src, dst, *kind)
                    and bytes(e[IPerror])[:28] == quoted[:28])
        except Exception:
            return False
    return Like(f"ICMP {kind[0]}/{kind[1]} from the DUT's kernel, {src} -> {dst}, quoting the packet sent", test)


def kernel_icmp6(port, *, src: str, dst: str, kind: tuple[int, int], quoted: bytes) -> Like:
    """An ICMPv6 error of the DUT's kernel (type, code = kind): src -> dst, back to port's generator
    side, quoting the start of the packet it answers (RFC 4443 2.4: as much as fits in 1280)."""
    def test(frame: bytes) -> bool:
        try:
            e = Ether(frame)
            if (e.dst, e.src) != (port.mac, port.dut_mac) or IPv6 not in e or IPerror6 not in e:
                return False
            icmp = bytes(e[IPv6].payload)
            return (ipaddress.ip_address(e[IPv6].src) == ipaddress.ip_address(src)
                    and ipaddress.ip_address(e[IPv6].dst) == ipaddress.ip_address(dst)
                    and e[IPv6].nh == 58 and (icmp[0], icmp[1]) == kind
                    and bytes(e[IPerror6])[:48] == quoted[:48])
        except Exception:
            return False
    return Like(f"ICMPv6 {kind[0]}/{kind[1]} from the DUT's kernel, {src} -> {dst}, quoting the packet sent", test)


# ------------------------------------------------------------------------------------------ cases

@dataclass(frozen=True)
class Case:
    name: str
    clause: str                         # the spec clause(s) it checks
    what: str                           # one line: what is sent, what must come out
    tx: int                             # 0: access/N3 (uplink), 1: SGi/N6 (downlink)
    frames: Callable                    # (ctx) -> [frames]
    expect: Callable                    # (ctx, frames, facts) -> Expect; facts {} = the spec's
    uses: tuple[str, ...] = ()          # departure facts the expectation reads
    needs: tuple[str, ...] = ()         # "qfi": a QFI session; "pgwu": a `pgwu config` knob
    copies: int = N_EACH
    spaced_us: float = 0.0              # frame k sent k * spaced_us after the first, in order
    id_free: bool = False               # forwarded frames compared with a free outer id (DF clear)
    defragment: bool = False            # forwarded frames reassembled (Scapy) before comparing
    config: tuple = ()                  # `pgwu config` arguments before, and after (undo)
    route_mtu: Callable | None = None   # (ctx) -> Route: added in the DUT's namespace for the case, removed after
    n3: tuple[str, ...] = ("4",)        # the N3 families it is built for ("6": GTP-U over IPv6, `--n3 6`)


def _nothing(ctx, frames, d):
    return Expect()


def _uplink_decap(idx):
    return lambda ctx: [uplink_frames(ctx)[i] for i in idx]


def _ul_vlan(ctx, frames, d):
    if d.get("vlan"):
        return Expect()
    return Expect(fwd=[(decap(ctx, bytes(f), d), N_EACH) for f in frames])


def _gtp_len(frame: bytes) -> int:
    """The UDP payload (GTP-U message) length of a G-PDU frame."""
    l2, _ = O.l2_split(frame)
    return struct.unpack("!H", frame[l2 + O.outer_len(frame, l2) + 4:][:2])[0] - 8


def _ul_decap(ctx, frames, d):
    # "max_packet": a G-PDU bigger than the UPF's buffer is cut there, its T-PDU then dropped
    return Expect(fwd=[(decap(ctx, bytes(f), d), N_EACH) for f in frames
                       if not d.get("max_packet") or _gtp_len(bytes(f)) <= d["max_packet"]])


def _dl_encap(ctx, frames, d, **kw):
    if d.get("vlan") and any(Dot1Q in Ether(bytes(f)) for f in frames):
        return Expect()
    return Expect(fwd=[(encap(ctx, f, d, **kw), N_EACH) for f in frames])


def _ext_chain(ctx):
    psc = packets.pdu_session_container(qfi=ctx.qfi or QFI, uplink=True)
    return [qfi_uplink(ctx, [packets.ext_header(packets.EXT_UDP_PORT, b"\x00\x00"), psc], 2, size=300)]


def _ext_chain_out(ctx, frames, d):
    if d.get("gtp_ext_headers") == "psc only, else aborted":
        return Expect()
    return _ul_decap(ctx, frames, d)


def _unknown_ext(ctx):
    a, p0 = ctx.addressing, ctx.ports[0]
    return [packets.gpdu(ctx.teid(3), a.ue(3), a.pdn(9), size=128, outer_src=a.sgw(7), outer_dst=a.dut_access,
                         src_mac=p0.mac, dst_mac=p0.dut_mac, ext=[packets.ext_header(0xC1, b"\x01\x02")])]


def _supp_ext_like(ctx, frame: bytes) -> Like:
    a, p0 = ctx.addressing, ctx.ports[0]
    sender = Ether(frame)[IP].src
    sport = Ether(frame)[UDP].sport

    def test(g: bytes) -> bool:
        try:
            e = Ether(g)
            gtp = bytes(e[UDP].payload)
            return ((e.dst, e.src, e[IP].src, e[IP].dst, e[UDP].sport, e[UDP].dport) ==
                    (p0.mac, p0.dut_mac, a.dut_access, sender, 2152, sport)
                    and gtp[1] == packets.GTP_SUPPORTED_EXT_HDRS and gtp[4:8] == b"\0\0\0\0"
                    and 141 in gtp[8 + (4 if gtp[0] & 7 else 0):][:1])
        except Exception:
            return False
    return Like(f"a Supported Extension Headers Notification (type 31, IE 141) {a.dut_access}:2152 -> "
                f"{sender}:{sport}", test)


def _unknown_ext_out(ctx, frames, d):
    if d.get("unknown_ext_header") == "ignored":
        return _ul_decap(ctx, frames, d)
    return Expect(back=[(_supp_ext_like(ctx, bytes(f)), N_EACH) for f in frames])


def _echo(ctx):
    p0 = ctx.ports[0]
    return [packets.echo_request(0x1234, src=peer(ctx, 6), dst=n3_addr(ctx), src_mac=p0.mac, dst_mac=p0.dut_mac)]


def _echo_out(ctx, frames, d):
    a, p0 = ctx.addressing, ctx.ports[0]
    if ctx.n3 == "6":               # a departure known over IPv4 (its kernel's socket): any flow label
        want = [O.echo_response_expected(bytes(f), a.dut_access6) for f in frames]
        return Expect(back=[(_fl_free(w, "the Echo Response over IPv6") if d.get("echo_response") else w, N_EACH)
                            for w in want])
    if d.get("echo_response") == "no Recovery IE, no UDP checksum":
        from scapy.contrib.gtp import GTP_U_Header
        return Expect(back=[(bytes(Ether(dst=p0.mac, src=p0.dut_mac)
                                   / IP(src=a.dut_access, dst=a.sgw(6), ttl=64, id=0, flags=0, tos=0)
                                   / UDP(sport=2152, dport=2152, chksum=0)
                                   / GTP_U_Header(version=1, PT=1, reserved=0, E=0, S=1, PN=0,
                                                  gtp_type=packets.GTP_ECHO_RESPONSE, teid=0, seq=0x1234,
                                                  npdu=0, next_ex=0)), N_EACH)])
    spec = packets.echo_response(0x1234, src=a.dut_access, dst=a.sgw(6), src_mac=p0.dut_mac, dst_mac=p0.mac)
    if d.get("echo_response") == "DF set, the kernel's id":
        e = Ether(bytes(spec))
        e[IP].flags = 2
        del e[IP].chksum
        return Expect(back=[(any_id(bytes(e), "the Echo Response with DF"), N_EACH)])
    return Expect(back=[(bytes(packets.echo_response(0x1234, src=a.dut_access, dst=a.sgw(6), src_mac=p0.dut_mac,
                                                     dst_mac=p0.mac)), N_EACH)])


def _unknown_teid(ctx):
    a, p0 = ctx.addressing, ctx.ports[0]
    return [packets.gpdu(a.local_teid(999), a.ue(999), a.pdn(0), size=128 + outer_grow(ctx), outer_src=peer(ctx, 0),
                         outer_dst=n3_addr(ctx), src_mac=p0.mac, dst_mac=p0.dut_mac)]


def _kernel_icmp_back(port, src: str, dst: str, kind: tuple[int, int], frames) -> Expect:
    """What a UPF that passes a packet to its kernel gets back: the kernel's ICMP error of kind from
    src to dst on port, quoting each frame's IP packet, N_EACH times."""
    return Expect(back=[(kernel_icmp(port, src=src, dst=dst, kind=kind, quoted=bytes(Ether(bytes(f))[IP])), N_EACH)
                        for f in frames])


def _unknown_teid_out(ctx, frames, d):
    a, p0 = ctx.addressing, ctx.ports[0]
    if d.get("unknown_teid") and d["unknown_teid"][0] == "silent after start":
        return _silent_after_start(ctx, frames, d["unknown_teid"][1])
    if d.get("unknown_teid") and ctx.n3 == "4":     # known over IPv4 only: over IPv6 the spec's
        return _kernel_icmp_back(p0, a.dut_access, a.sgw(0), d["unknown_teid"][1], frames)
    return Expect(back=[(O.error_indication_expected(bytes(f), n3_addr(ctx)), N_EACH) for f in frames])


def _silent_after_start(ctx, frames, period: float):
    """No Error Indication while the UPF is younger than period s (Open5GS: TS 23.527 4.3.2), then
    its own (departs.py "unknown_teid"): which one is known before the packets are sent; within a
    second or two of the edge (its clock counts whole seconds from a little after its start), wait."""
    age = ctx.upf_age()
    if age is None:
        raise ValueError("unknown_teid 'silent after start' needs the UPF's start time")
    if age < period - 1:
        return Expect()
    if age < period + 2.5:
        time.sleep(period + 2.5 - age)
    a, p0 = ctx.addressing, ctx.ports[0]
    out = []
    for f in frames:
        e = Ether(bytes(f))
        teid = struct.unpack("!I", bytes(e[UDP].payload)[4:8])[0]
        body = (bytes([0, 0, 0, 0x40, 1, 0, 0, 0])                # seq 0, N-PDU 0, next 0x40; UDP Port 0
                + bytes([16]) + struct.pack("!I", teid)            # TEID Data I
                + bytes([133, 0, 4]) + bytes(map(int, a.dut_access.split("."))))   # GTP-U Peer Address
        if IPv6 in e:                   # over IPv6: a 16-octet Peer Address, the kernel's flow label
            body = body[:-7] + bytes([133, 0, 16]) + ipaddress.IPv6Address(a.dut_access6).packed
            gtp = bytes([0x36, 26]) + struct.pack("!HI", len(body), teid) + body
            ei = bytes(Ether(dst=p0.mac, src=p0.dut_mac) / IPv6(tc=0, fl=0, hlim=64, src=a.dut_access6,
                                                                dst=e[IPv6].src)
                       / UDP(sport=2152, dport=e[UDP].sport) / gtp)
            out.append((_fl_free(ei, "Open5GS's Error Indication over IPv6"), N_EACH))
            continue
        gtp = bytes([0x36, 26]) + struct.pack("!HI", len(body), teid) + body
        ei = bytes(Ether(dst=p0.mac, src=p0.dut_mac) / IP(tos=0, id=0, flags=2, ttl=64, src=a.dut_access,
                                                          dst=e[IP].src)
                   / UDP(sport=2152, dport=e[UDP].sport) / gtp)
        out.append((any_id(ei, "Open5GS's Error Indication"), N_EACH))
    return Expect(back=out)


def _end_marker(ctx):
    a, p0 = ctx.addressing, ctx.ports[0]
    return [packets.end_marker(ctx.teid(0), src=peer(ctx, 0), dst=n3_addr(ctx), src_mac=p0.mac, dst_mac=p0.dut_mac)]


def _end_marker_out(ctx, frames, d):
    a, p0 = ctx.addressing, ctx.ports[0]
    if d.get("end_marker") and ctx.n3 == "4":       # known over IPv4 only: over IPv6 the spec's
        return _kernel_icmp_back(p0, a.dut_access, a.sgw(0), d["end_marker"][1], frames)
    return Expect()


def _spoofed(ctx):
    a, p0 = ctx.addressing, ctx.ports[0]
    return [packets.gpdu(ctx.teid(0), a.ue(1), a.pdn(0), size=128 + outer_grow(ctx), outer_src=peer(ctx, 0),
                         outer_dst=n3_addr(ctx), src_mac=p0.mac, dst_mac=p0.dut_mac)]


def _spoofed_out(ctx, frames, d):
    if d.get("spoofed_source") == "forwarded":
        return _ul_decap(ctx, frames, d)
    return Expect()


def _ul_ttl1(ctx):
    a, p0 = ctx.addressing, ctx.ports[0]
    return [packets.gpdu(ctx.teid(1), a.ue(1), a.pdn(10), size=128, ttl=1, outer_src=a.sgw(1),
                         outer_dst=a.dut_access, src_mac=p0.mac, dst_mac=p0.dut_mac)]


def _kernel_time_exceeded(src: str, ip: bytes) -> bytes:
    """The DUT kernel's ICMP Time Exceeded for ip: TOS 0xc0, TTL 64, DF clear, id 0 here, quoting
    as much of ip as fits in 576 octets (RFC 1812 4.3.2.3)."""
    return bytes(IP(tos=0xC0, id=0, flags=0, ttl=64, proto=1, src=src, dst=socket.inet_ntoa(ip[12:16]))
                 / ICMP(type=11, code=0) / ip[:576 - 28])


def _ul_ttl1_out(ctx, frames, d):
    a, p0 = ctx.addressing, ctx.ports[0]
    if d.get("ttl_expired") == "the kernel's":
        # the kernel's answer, routed to the UE through the UPF's TUN device: tunnelled as any
        # downlink packet of bearer 1, with the UPF's own departures (its ICMP not forwarded: TTL 64)
        full = {**departs.facts(ctx.upf), "inner_ttl": "kept"}
        return Expect(back=[(any_id(O.encap_departing(
            full, _kernel_time_exceeded(a.dut_access, O.gpdu_inner(bytes(f))), smac=p0.dut_mac, dmac=p0.mac,
            local=a.dut_access, sgw=a.sgw(1), teid=a.sgw_teid(1)), "the kernel's ICMP 11/0 in a G-PDU",
            inner=True), N_EACH) for f in frames])
    if d.get("inner_ttl") == "kept":
        return _ul_decap(ctx, frames, d)
    return Expect(back=[(O.time_exceeded_ul_expected(bytes(f), a.dut_access, a.sgw(1), a.sgw_teid(1)), N_EACH)
                        for f in frames])


def _frags(ctx):
    return outer_fragmented(ctx)[1]


def _frags_out(ctx, frames, d):
    gs = [frames[i] for i in range(0, len(frames), 3)]
    if d.get("outer_fragments") == "first decapsulated alone":
        p1 = ctx.ports[1]
        return Expect(fwd=[(bytes(Ether(dst=p1.mac, src=p1.dut_mac, type=0x0800))
                            + _ttl(d)(bytes(Ether(bytes(f))[IP])[20 + 8 + 8:]), 1) for f in gs])
    whole, _ = outer_fragmented(ctx)
    return Expect(fwd=[(decap(ctx, bytes(g), d), 1) for g in whole])


def _qfi_ul(ctx):
    psc = packets.pdu_session_container(qfi=ctx.qfi or QFI, uplink=True)
    return [qfi_uplink(ctx, [psc], 0, size=128), qfi_uplink(ctx, [psc], 1, size=1518, l4="tcp", seq=11)]


def _qfi_mismatch(ctx):
    q = ctx.qfi or QFI
    return [qfi_uplink(ctx, [], 0, size=128),
            qfi_uplink(ctx, [packets.pdu_session_container(qfi=(q + 1) % 64, uplink=True)], 1, size=200),
            qfi_uplink(ctx, [packets.pdu_session_container(qfi=q, uplink=False)], 2, size=200)]


def _qfi_mismatch_out(ctx, frames, d):
    if d.get("uplink_qfi") == "not checked":
        return _ul_decap(ctx, frames, d)
    return Expect()


def _dl_too_big(ctx):
    a, p1 = ctx.addressing, ctx.ports[1]
    return [packets.downlink_ip(a.ue(0), a.pdn(9), ctx.mtu_sgi + 18, src_mac=p1.mac, dst_mac=p1.dut_mac)]


def _dl_too_big_out(ctx, frames, d):
    if d.get("downlink_too_big"):
        return Expect()
    if d.get("max_packet"):             # cut, in one G-PDU with DF (the UPF's outer header)
        full = departs.facts(ctx.upf)
        return Expect(fwd=[(encap(ctx, f, full, ttl_free=True), N_EACH) for f in frames])
    return Expect(fwd=[(encap(ctx, f, {}), N_EACH) for f in frames])


def _dl_df_too_big(ctx):
    a, p1 = ctx.addressing, ctx.ports[1]
    return [packets.downlink_ip(a.ue(1), a.pdn(11), ctx.mtu_sgi + 18, df=True, src_mac=p1.mac, dst_mac=p1.dut_mac)]


def _dl_df_too_big_out(ctx, frames, d):
    if d.get("downlink_too_big"):
        return Expect()
    if d.get("max_packet"):             # cut, in one G-PDU with DF (the UPF's outer header)
        return Expect(fwd=[(encap(ctx, f, departs.facts(ctx.upf)), N_EACH) for f in frames])
    return Expect(back=[(O.frag_needed_dl_expected(bytes(f), ctx.addressing.dut_access, ctx.mtu_access), N_EACH)
                        for f in frames])


def _unknown_ue(ctx):
    a, p1 = ctx.addressing, ctx.ports[1]
    return [packets.downlink_ip(a.ue(500), a.pdn(0), 128, src_mac=p1.mac, dst_mac=p1.dut_mac)]


def _unknown_ue_out(ctx, frames, d):
    a, p1 = ctx.addressing, ctx.ports[1]
    if d.get("unknown_ue"):
        return _kernel_icmp_back(p1, a.dut_sgi, a.pdn(0), d["unknown_ue"][1], frames)
    return Expect()


def _dl_ttl1(ctx):
    a, p1 = ctx.addressing, ctx.ports[1]
    return [packets.downlink_ip(a.ue(0), a.pdn(12), 128, ttl=1, src_mac=p1.mac, dst_mac=p1.dut_mac)]


def _dl_ttl1_out(ctx, frames, d):
    if d.get("ttl_expired") == "the kernel's":       # from the N6 address, id-free (DF clear)
        a, p1 = ctx.addressing, ctx.ports[1]
        return Expect(back=[(bytes(Ether(dst=p1.mac, src=p1.dut_mac, type=0x0800)) + _kernel_time_exceeded(
            a.dut_sgi, O.ip_payload(bytes(f))), N_EACH) for f in frames])
    if d.get("inner_ttl") == "kept":
        return _dl_encap(ctx, frames, d)
    return Expect(back=[(O.time_exceeded_dl_expected(bytes(f), ctx.addressing.dut_access), N_EACH) for f in frames])


def _ul6_out(ctx, frames, d):
    # a UPF that does not forward IPv6 (departs.py "ipv6"): passed to its kernel, which routes no
    # IPv6 from N3: nothing
    return Expect() if d.get("ipv6") else _ul_decap(ctx, frames, d)


def _dl6_kernel(ctx, frames, kind) -> Expect:
    """What comes back of IPv6 packets a UPF passed to its kernel: its ICMPv6 error of kind, from
    the DUT's N6 address to each sender."""
    a, p1 = ctx.addressing, ctx.ports[1]
    return Expect(back=[(kernel_icmp6(p1, src=a.dut_sgi6, dst=Ether(bytes(f))[IPv6].src, kind=kind,
                                      quoted=bytes(Ether(bytes(f))[IPv6])), N_EACH) for f in frames])


def _dl6_out(ctx, frames, d):
    return _dl6_kernel(ctx, frames, d["ipv6"][1]) if d.get("ipv6") else _dl_encap(ctx, frames, d)


def _unknown_ue6_out(ctx, frames, d):
    return _dl6_kernel(ctx, frames, d["ipv6"][1]) if d.get("ipv6") else Expect()


def _ul6_hlim1(ctx):
    a, p0 = ctx.addressing, ctx.ports[0]
    return [packets.gpdu6(ctx.teid(1), ue6(1), server6(10), size=128, hlim=1, outer_src=a.sgw(1),
                          outer_dst=a.dut_access, src_mac=p0.mac, dst_mac=p0.dut_mac)]


def _kernel_icmp6_like(expected: bytes, what: str, tunnelled: bool, sources: tuple[str, ...] = ()) -> Like:
    """expected (the PGW-U's ICMPv6 error) as the DUT's kernel sends it (departs.py "ttl_expired": the
    kernel's): its own flow label (RFC 6437), else the same octets; from expected's source or any of
    sources (the DUT's other addresses its source selection may pick), with the ICMPv6 checksum right
    for it; tunnelled, in a G-PDU whose outer IPv4 id and DF are the sender's kernel's, its header
    checksum right, its UDP checksum right or 0."""
    src0 = Ether(expected)[IPv6].src

    def norm(frame: bytes) -> bytes | None:
        try:
            e = Ether(frame)
            if IPv6 not in e:
                return None
            if tunnelled:
                if IP not in e or UDP not in e or not O.ip_hdr_ok(bytes(e[IP])[:20]):
                    return None
                if e[UDP].chksum and not O.outer_udp_ok(frame):
                    return None
                e[IP].id, e[IP].flags, e[IP].chksum, e[UDP].chksum = 0, 0, None, 0
            e[IPv6].fl = 0
            if e[IPv6].src != src0:
                if e[IPv6].src not in sources:
                    return None
                icmp = e[IPv6].payload
                sent = icmp.cksum
                del icmp.cksum
                if Ether(bytes(e))[IPv6].payload.cksum != sent:     # right for the source it came from
                    return None
                e[IPv6].src = src0
            return bytes(e)
        except Exception:
            return None
    want = norm(expected)
    assert want is not None
    return Like(f"{what}, the kernel's flow label: {Ether(expected).command()}", lambda g: norm(g) == want)


def _ul6_hlim1_out(ctx, frames, d):
    # a UPF that forwards no IPv6 (departs.py "ipv6"): its kernel routes no IPv6 from N3: nothing
    if d.get("ipv6"):
        return Expect()
    a = ctx.addressing
    want = [O.time_exceeded6_ul_expected(bytes(f), a.dut_access, a.dut_sgi6, a.sgw(1), a.sgw_teid(1)) for f in frames]
    if d.get("ttl_expired") == "the kernel's":
        # the kernel's ICMPv6, routed to the UE through the UPF's TUN device and tunnelled by it
        return Expect(back=[(_kernel_icmp6_like(w, "the kernel's ICMPv6 3/0 in a G-PDU", True, (a.dut_access6,)),
                             N_EACH) for w in want])
    return Expect(back=[(w, N_EACH) for w in want])


PTB_MTU = 1400                  # the MTU of the route a Packet Too Big case adds (ip route ... mtu lock)
PTB_BEARER = 3                  # its bearer: IPv4v6, no QFI, alone on its SGW (sgw(3))
PTB_SERVER = 20                 # server6(20): the uplink case's destination, alone on its route


@dataclass(frozen=True)
class Route:
    """A route added in the DUT's namespace for one case (`ip [-6] route add DEST [via VIA] dev DEV mtu
    lock MTU`) and removed after it: the lab's route MTU lowered for one destination."""
    dest: str
    dev: str
    mtu: int
    via: str | None = None

    def args(self, verb: str) -> list[str]:
        fam = ["-6"] if ":" in self.dest else ["-4"]
        return fam + ["route", verb, self.dest] + (["via", self.via] if self.via else []) + \
            ["dev", self.dev, "mtu", "lock", str(self.mtu)]


def _ptb_ul_route(ctx) -> Route:
    a = ctx.addressing
    return Route(f"{server6(PTB_SERVER)}/128", ctx.ports[1].dut_ifname, PTB_MTU, via=a.gen_sgi6)


def _ptb_dl_route(ctx) -> Route:
    return Route(f"{ctx.addressing.sgw(PTB_BEARER)}/32", ctx.ports[0].dut_ifname, PTB_MTU)


def _ul6_too_big(ctx):
    """Two G-PDUs of bearer PTB_BEARER to server6(PTB_SERVER): an IPv6 packet one octet over the
    route's MTU, then one exactly at it (gpdu6's size: the frame's, 54 octets of it outside the
    T-PDU, FCS included)."""
    a, p0, i = ctx.addressing, ctx.ports[0], PTB_BEARER
    return [packets.gpdu6(ctx.teid(i), ue6(i), server6(PTB_SERVER), size=PTB_MTU + 1 + 54, outer_src=a.sgw(i),
                          outer_dst=a.dut_access, src_mac=p0.mac, dst_mac=p0.dut_mac),
            packets.gpdu6(ctx.teid(i), ue6(i), server6(PTB_SERVER), size=PTB_MTU + 54, outer_src=a.sgw(i),
                          outer_dst=a.dut_access, src_mac=p0.mac, dst_mac=p0.dut_mac)]


def _ul6_too_big_out(ctx, frames, d):
    if d.get("ipv6"):                   # its kernel routes no IPv6 from N3: nothing either way
        return Expect()
    a, (big, fits) = ctx.addressing, frames
    want = O.packet_too_big6_ul_expected(bytes(big), a.dut_access, a.dut_sgi6, a.sgw(PTB_BEARER),
                                         a.sgw_teid(PTB_BEARER), None, PTB_MTU)
    if d.get("packet_too_big") == "the kernel's":
        back = _kernel_icmp6_like(want, "the kernel's ICMPv6 2/0 in a G-PDU", True, (a.dut_access6,))
    else:
        back = want
    return Expect(fwd=_ul_decap(ctx, [fits], d).fwd, back=[(back, N_EACH)])


def _dl6_too_big(ctx):
    """Two IPv6 packets to bearer PTB_BEARER's UE: one octet more than the tunnel leaves (the route's
    MTU less 36), then exactly that (downlink_ip6's size: the frame's, 18 octets of it not IPv6)."""
    p1, i = ctx.ports[1], PTB_BEARER
    return [packets.downlink_ip6(ue6(i), server6(13), PTB_MTU - 36 + 1 + 18, src_mac=p1.mac, dst_mac=p1.dut_mac),
            packets.downlink_ip6(ue6(i), server6(13), PTB_MTU - 36 + 18, src_mac=p1.mac, dst_mac=p1.dut_mac)]


def _dl6_too_big_out(ctx, frames, d):
    if d.get("ipv6"):
        return _dl6_kernel(ctx, frames, d["ipv6"][1])
    big, fits = frames
    return Expect(fwd=_dl_encap(ctx, [fits], d).fwd,
                  back=[(O.packet_too_big6_dl_expected(bytes(big), ctx.addressing.dut_sgi6, PTB_MTU - 36), N_EACH)])


def _dl6_hlim1(ctx):
    a, p1 = ctx.addressing, ctx.ports[1]
    return [packets.downlink_ip6(ue6(0), server6(12), 128, hlim=1, src_mac=p1.mac, dst_mac=p1.dut_mac)]


def _dl6_hlim1_out(ctx, frames, d):
    if d.get("ipv6"):
        return _dl6_kernel(ctx, frames, d["ipv6"][1])
    want = [O.time_exceeded6_dl_expected(bytes(f), ctx.addressing.dut_sgi6) for f in frames]
    if d.get("ttl_expired") == "the kernel's":
        return Expect(back=[(_kernel_icmp6_like(w, "the kernel's ICMPv6 3/0", False), N_EACH) for w in want])
    return Expect(back=[(w, N_EACH) for w in want])

CASES: list[Case] = [
    # ---- uplink (N3 -> N6): G-PDUs decapsulated
    Case("uplink-gpdu", "TS 29.281 5.1 (G-PDU); RFC 1812 5.3.1 (TTL-1)",
         "G-PDUs of 128-3024 B (UDP, TCP with TTL 2, ICMP with DF and a DSCP): the inner packet on N6, "
         "TTL-1, byte for byte", 0, _uplink_decap((0, 2, 3, 4)), _ul_decap, uses=("inner_ttl", "max_packet")),
    Case("uplink-outer-udp-checksum", "RFC 768; TS 29.281 4.4.1",
         "a 1518 B G-PDU with an outer UDP checksum (the SGW's choice): decapsulated as any other", 0,
         _uplink_decap((1,)), _ul_decap, uses=("inner_ttl",)),
    Case("uplink-vlan", "IEEE 802.1Q", "a G-PDU with one 802.1Q tag on N3: decapsulated, untagged on N6",
         0, _uplink_decap((5,)), _ul_vlan, uses=("vlan", "inner_ttl")),
    Case("uplink-ext-psc", "TS 29.281 5.1, 5.2.1; TS 38.415 5.5.2.2",
         "a G-PDU with a sequence number and a PDU Session Container: the whole header chain removed", 0,
         _uplink_decap((6,)), _ul_decap, uses=("inner_ttl",)),
    Case("uplink-ext-chain", "TS 29.281 5.2.1 (a chain of extension headers)",
         "a G-PDU of the QFI bearer with a UDP Port header (0x40, comprehension not required) before its "
         "PDU Session Container: decapsulated", 0, _ext_chain, _ext_chain_out,
         uses=("gtp_ext_headers", "inner_ttl"), needs=("qfi",)),
    Case("uplink-unknown-ext-header", "TS 29.281 5.2.1, 7.2.3",
         "a G-PDU with an unknown extension header that must be comprehended (0xC1): not forwarded, "
         "answered with a Supported Extension Headers Notification", 0, _unknown_ext, _unknown_ext_out,
         uses=("unknown_ext_header", "inner_ttl")),
    Case("echo", "TS 29.281 7.2.1, 7.2.2, 4.4.2.2",
         "an Echo Request: an Echo Response back to its source port, the same sequence number, "
         "Recovery 0", 0, _echo, _echo_out, uses=("echo_response",)),
    Case("error-indication", "TS 29.281 7.3.1, 4.4.2.4",
         "a G-PDU for an unknown TEID: not forwarded, an Error Indication back (TEID Data I, GTP-U Peer "
         "Address)", 0, _unknown_teid, _unknown_teid_out, uses=("unknown_teid",)),
    Case("end-marker", "TS 29.281 7.3.2",
         "an End Marker of a bearer's tunnel: not forwarded, nothing back", 0, _end_marker, _end_marker_out,
         uses=("end_marker",)),
    Case("spoofed-source", "TS 29.244 5.2.1 (PDI: UE IP address)",
         "a G-PDU of bearer 0 from UE 1's address: not forwarded", 0, _spoofed, _spoofed_out,
         uses=("spoofed_source", "inner_ttl")),
    Case("uplink-ttl-expired", "RFC 1812 5.3.1, 4.3.2.3; RFC 792",
         "a G-PDU whose inner TTL is 1: not forwarded, ICMP Time Exceeded to the UE in its bearer's tunnel",
         0, _ul_ttl1, _ul_ttl1_out, uses=("inner_ttl", "ttl_expired")),
    Case("uplink-outer-fragments", "RFC 791 3.2 (reassembly); TS 29.281 4.4 (GTP-U over UDP/IP)",
         "G-PDUs in 3 outer IPv4 fragments each: one inner packet each on N6, byte for byte", 0, _frags,
         _frags_out, uses=("outer_fragments", "inner_ttl"), copies=1, spaced_us=1000),
    Case("qfi-uplink-psc", "TS 38.415 5.5.2.2; TS 29.281 5.2.2.7",
         "G-PDUs of the QFI bearer with an UL PDU Session Container with its QFI: decapsulated", 0, _qfi_ul,
         _ul_decap, uses=("inner_ttl",), needs=("qfi",)),
    Case("qfi-uplink-mismatch", "TS 29.244 5.2.1, 8.2.89 (the PDI's QFI)",
         "G-PDUs of the QFI bearer without a container, with another QFI, with a DL container: not "
         "forwarded", 0, _qfi_mismatch, _qfi_mismatch_out, uses=("uplink_qfi", "inner_ttl"), needs=("qfi",)),
    # ---- downlink (N6 -> N3): IP packets encapsulated
    Case("downlink-gpdu", "TS 29.281 5.1, 4.4.2.0; RFC 768 (outer checksum); RFC 1812 5.3.1; RFC 2983",
         "IP packets of 64-3024 B to bearers 0-3: a G-PDU each to the bearer's peer and TEID, every length "
         "and checksum right, the DSCP copied, the inner packet TTL-1 byte for byte", 1,
         lambda ctx: downlink_frames(ctx)[:5], _dl_encap, uses=ENCAP_FACTS + ("max_packet",), id_free=True),
    Case("downlink-inner-udp-checksum-0", "RFC 768 (checksum 0: none)",
         "an IP packet with a UDP checksum of 0: encapsulated with the inner checksum left 0", 1,
         lambda ctx: downlink_frames(ctx)[5:6], _dl_encap, uses=ENCAP_FACTS, id_free=True),
    Case("downlink-vlan", "IEEE 802.1Q", "an IP packet with an 802.1Q tag on N6: encapsulated, untagged on N3",
         1, lambda ctx: downlink_frames(ctx)[6:7], _dl_encap, uses=("vlan",) + ENCAP_FACTS, id_free=True),
    Case("qfi-downlink-psc", "TS 38.415 5.5.2.1; TS 29.281 5.2.2.7",
         "IP packets to the QFI bearer: G-PDUs with E set and a DL PDU Session Container with its QFI", 1,
         qfi_downlink_frames, lambda ctx, frames, d: _dl_encap(ctx, frames, d, qfi=ctx.qfi),
         uses=ENCAP_FACTS + ("max_packet",), needs=("qfi",), id_free=True),
    Case("downlink-too-big", "RFC 791 2.3 (fragmentation); TS 29.281 4.4",
         "an IP packet without DF, as big as N6 allows: too big for N3 once encapsulated, it leaves in "
         "outer fragments that reassemble into the G-PDU", 1, _dl_too_big, _dl_too_big_out,
         uses=("downlink_too_big", "max_packet"), id_free=True, defragment=True),
    Case("downlink-df-too-big", "RFC 1191; RFC 792 (3/4)",
         "an IP packet with DF, as big as N6 allows: not forwarded, ICMP Fragmentation Needed back with "
         "N3's MTU less the tunnel's 36 octets", 1, _dl_df_too_big, _dl_df_too_big_out,
         uses=("downlink_too_big", "max_packet")),
    Case("downlink-unknown-ue", "TS 29.244 5.2.1 (no PDR matches)",
         "an IP packet for an address no session has: not forwarded", 1, _unknown_ue, _unknown_ue_out,
         uses=("unknown_ue",)),
    Case("downlink-ttl-expired", "RFC 1812 5.3.1, 4.3.2.3; RFC 792",
         "an IP packet with TTL 1: not forwarded, ICMP Time Exceeded back to its sender", 1, _dl_ttl1,
         _dl_ttl1_out, uses=ENCAP_FACTS + ("ttl_expired",)),
    # ---- IPv6 UEs (IPv4v6 sessions: each bearer's /64 beside its IPv4 address; GTP-U over IPv4)
    Case("uplink-gpdu-ipv6", "TS 29.281 5.1; TS 23.401 5.3.1.2.2 (a /64 per UE); RFC 8200 3 (hop limit-1)",
         "G-PDUs of IPv4v6 bearers carrying IPv6 UDP, TCP (hop limit 2) and ICMPv6 of 128-1518 B, one with a "
         "traffic class and flow label: the inner packet on N6, hop limit-1, byte for byte", 0,
         lambda ctx: uplink6_frames(ctx)[:4], _ul6_out, uses=("ipv6", "inner_ttl"), needs=("ipv6",)),
    Case("spoofed-source-ipv6", "TS 29.244 5.2.1 (PDI: UE IP address, its IPv6 prefix)",
         "a G-PDU of bearer 0 from an address of bearer 1's /64: not forwarded", 0,
         lambda ctx: uplink6_frames(ctx)[4:5], lambda ctx, frames, d: Expect(), needs=("ipv6",)),
    Case("downlink-gpdu-ipv6", "TS 29.281 5.1, 4.4.2.0; RFC 8200 3 (hop limit-1); RFC 2983",
         "IPv6 packets of 80-1518 B to the UEs of IPv4v6 bearers (UDP, TCP with hop limit 2, ICMPv6, one with "
         "a traffic class): a G-PDU each to the bearer's peer and TEID, the traffic class as the outer TOS, "
         "the inner packet hop limit-1 byte for byte", 1, lambda ctx: downlink6_frames(ctx)[:4], _dl6_out,
         uses=("ipv6",) + ENCAP_FACTS, needs=("ipv6",), id_free=True),
    Case("downlink-unknown-ue-ipv6", "TS 29.244 5.2.1 (no PDR matches)",
         "an IPv6 packet to a /64 no session has: not forwarded", 1, lambda ctx: downlink6_frames(ctx)[4:5],
         _unknown_ue6_out, uses=("ipv6",), needs=("ipv6",)),
    Case("uplink-hop-limit-expired-ipv6", "RFC 4443 3.3, 2.4(c); RFC 8200 3",
         "a G-PDU of an IPv4v6 bearer whose inner IPv6 hop limit is 1: not forwarded, ICMPv6 Time Exceeded "
         "(3/0) from the N6 address to the UE in its bearer's tunnel", 0, _ul6_hlim1, _ul6_hlim1_out,
         uses=("ipv6", "ttl_expired"), needs=("ipv6",)),
    Case("downlink-hop-limit-expired-ipv6", "RFC 4443 3.3, 2.4(c); RFC 8200 3",
         "an IPv6 packet with hop limit 1 to the UE of an IPv4v6 bearer: not forwarded, ICMPv6 Time "
         "Exceeded (3/0) from the N6 address back to its sender", 1, _dl6_hlim1, _dl6_hlim1_out,
         uses=("ipv6", "ttl_expired"), needs=("ipv6",)),
    Case("uplink-packet-too-big-ipv6", "RFC 4443 3.2, 2.4(c); RFC 8200 5 (no fragmentation by routers)",
         f"with the N6 route to one server lowered to MTU {PTB_MTU}: a G-PDU whose IPv6 packet is one octet "
         "over it not forwarded, ICMPv6 Packet Too Big (2/0, MTU the route's) from the N6 address to the UE "
         "in its bearer's tunnel; one exactly at it forwarded", 0, _ul6_too_big, _ul6_too_big_out,
         uses=("ipv6", "inner_ttl", "packet_too_big"), needs=("ipv6",), route_mtu=_ptb_ul_route),
    Case("downlink-packet-too-big-ipv6", "RFC 4443 3.2, 2.4(c); RFC 8200 5; RFC 4213 3.2 (a tunnel's MTU)",
         f"with the N3 route to the bearer's gNB lowered to MTU {PTB_MTU}: an IPv6 packet one octet over "
         "what the tunnel leaves (the MTU less 36) not forwarded, ICMPv6 Packet Too Big with that MTU back "
         "to its sender from the N6 address; one exactly at it forwarded in a G-PDU", 1, _dl6_too_big,
         _dl6_too_big_out, uses=("ipv6",) + ENCAP_FACTS, needs=("ipv6",), id_free=True,
         route_mtu=_ptb_dl_route),
    # ---- the PGW-U's own knobs (`pgwu config`)
    Case("downlink-sport-fixed", "TS 29.281 4.4.2.0 (pgwu config --sport-entropy off)",
         "with source-port entropy off, every G-PDU from UDP port 2152", 1,
         lambda ctx: downlink_frames(ctx)[:4], lambda ctx, frames, d: _dl_encap(ctx, frames, d, sport=2152),
         needs=("pgwu",), id_free=True,
         config=(("--sport-entropy", "off"), ("--sport-entropy", "on"))),
    Case("downlink-egress-vlan", "IEEE 802.1Q (pgwu config --vlan access 7)",
         "with an access VLAN, every G-PDU leaves with that tag", 1, lambda ctx: downlink_frames(ctx)[:3],
         lambda ctx, frames, d: _dl_encap(ctx, frames, d, vlan=7), needs=("pgwu",), id_free=True,
         config=(("--vlan", "access", "7"), ("--vlan", "access", "0"))),
    Case("uplink-egress-vlan", "IEEE 802.1Q (pgwu config --vlan sgi 300)",
         "with an SGi VLAN, the decapsulated packet leaves with that tag", 0, _uplink_decap((0,)),
         lambda ctx, frames, d: Expect(fwd=[(decap(ctx, bytes(f), d, vlan=300), N_EACH) for f in frames]),
         needs=("pgwu",), config=(("--vlan", "sgi", "300"), ("--vlan", "sgi", "0"))),
]

# The cases built over N3 IPv6 too (`gtplab conformance --n3 6`: every bearer's peer an IPv6
# address, the G-PDUs to the UPF's N3 IPv6 address, the downlink expected in G-PDUs over IPv6 with
# their UDP checksum). Not these: where N3 plays no part (downlink-unknown-ue*, downlink-ttl-expired,
# downlink-hop-limit-expired-ipv6: nothing goes to N3); uplink-outer-fragments and downlink-too-big
# (IPv4 fragments of the outer packet); downlink-df-too-big and downlink-packet-too-big-ipv6 (the
# tunnel is 56 octets over IPv6: not built here); uplink-unknown-ext-header, uplink-ttl-expired,
# uplink-hop-limit-expired-ipv6, uplink-packet-too-big-ipv6 (a reply into an IPv6 tunnel: the PGW-U
# sends none yet, docs/ipv6.md).
N3V6_CASES = ("uplink-gpdu", "uplink-outer-udp-checksum", "uplink-vlan", "uplink-ext-psc", "uplink-ext-chain",
              "echo", "error-indication", "end-marker", "spoofed-source", "qfi-uplink-psc", "qfi-uplink-mismatch",
              "downlink-gpdu", "downlink-inner-udp-checksum-0", "downlink-vlan", "qfi-downlink-psc",
              "uplink-gpdu-ipv6", "spoofed-source-ipv6", "downlink-gpdu-ipv6", "downlink-sport-fixed",
              "downlink-egress-vlan", "uplink-egress-vlan")
CASES = [replace(c, n3=("4", "6")) if c.name in N3V6_CASES else c for c in CASES]
BY_NAME = {c.name: c for c in CASES}
assert all(n in BY_NAME for n in N3V6_CASES)


def select(pattern: str | None, n3: str = "4") -> list[Case]:
    """The cases whose name matches one of the comma-separated shell patterns (all without one),
    among those built for N3 family n3."""
    cases = [c for c in CASES if n3 in c.n3]
    if not pattern:
        return cases
    pats = [p.strip() for p in pattern.split(",") if p.strip()]
    return [c for c in cases if any(fnmatch.fnmatchcase(c.name, p) for p in pats)]
