"""Named test packets for the PGW-U: the one source of packets for unit tests, live tests, TRex profile
tests and docs (Scapy 2.8, scapy.contrib.gtp).

Frame size convention (as TRex): `size` is the frame's size on the wire INCLUDING the 4-byte Ethernet
FCS, so the bytes a function returns (what XDP sees) are `size - 4` long. The L4 payload is padded to
hit the size exactly; a size that cannot be met (smaller than the headers, or below the 64-byte
Ethernet minimum) raises ValueError. `size=None` means "no payload padding".

The addresses below are documentation ranges (RFC 5737) and locally administered MACs: use them in
namespaces you create, never on real networks.

GTP-U (3GPP TS 29.281): flags octet = version(3) PT(1) spare(1) E(1) S(1) PN(1); message type; length
(octets after the first 8); TEID; when any of E/S/PN is set, 4 optional octets: sequence number (2),
N-PDU number (1), next extension header type (1). Extension headers (5.2): length in 4-octet units,
content, next extension header type (last octet).

Used by the tests and bench/ (Scapy; gtplab/gtpu/walk.py reads the same headers from raw bytes).
"""

from __future__ import annotations

import socket
import struct

from scapy.contrib.gtp import (GTP_U_Header, GTPEchoResponse, GTPPDUSessionContainer, IE_Recovery)
from scapy.layers.inet import ICMP, IP, TCP, UDP
from scapy.layers.inet6 import ICMPv6EchoRequest, ICMPv6ND_RS, IPv6
from scapy.layers.l2 import ARP, Dot1Q, Ether
from scapy.packet import Packet, Raw
from scapy.fields import ByteField, StrLenField, XByteField

GTPU_PORT = 2152
FCS_LEN = 4
ETH_MIN_FRAME = 64  # on the wire, incl. FCS

# The lab's default addressing (RFC 5737 documentation ranges, RFC 1918 UE pool).
PGW_ADDR = "192.0.2.1"          # PGW-U GTP-U (S5/S1-U) address: config.local_addr
SGW_ADDR = "192.0.2.2"          # the SGW (eNB) peer
UE_POOL = "10.45.0.0/16"
UE_ADDR = "10.45.0.2"
PDN_ADDR = "198.51.100.10"      # a server on the SGi side
TEID_UL = 0x00000100            # local TEID (uplink key)
TEID_DL = 0x00000200            # the SGW's TEID written into downlink G-PDUs

SGW_MAC = "02:00:00:00:01:02"         # SGW on the access link
PGW_ACCESS_MAC = "02:00:00:00:01:01"  # PGW-U's access interface
PGW_SGI_MAC = "02:00:00:00:02:01"     # PGW-U's SGi interface
ROUTER_SGI_MAC = "02:00:00:00:02:02"  # the SGi router

# GTP-U message types (TS 29.281 6.1)
GTP_ECHO_REQUEST = 1
GTP_ECHO_RESPONSE = 2
GTP_ERROR_INDICATION = 26
GTP_SUPPORTED_EXT_HDRS = 31
GTP_END_MARKER = 254
GTP_GPDU = 255

EXT_PDU_SESSION_CONTAINER = 0x85
EXT_UDP_PORT = 0x40
EXT_PDCP_PDU_NUMBER = 0xC0
EXT_LONG_PDCP_PDU_NUMBER = 0x82
EXT_SERVICE_CLASS_INDICATOR = 0x20


class GTPExtHeader(Packet):
    """A generic GTP-U extension header (TS 29.281 5.2.1): length in 4-octet units, content, next type.

    `length=None` computes it from the content, which must then be 2 mod 4 octets long (zero-padded
    to that otherwise). Set `length` explicitly to build broken headers (0, or longer than the data).
    """
    name = "GTP-U extension header"
    fields_desc = [ByteField("length", None),
                   StrLenField("content", b"", length_from=lambda p: max(p.length * 4 - 2, 0)),
                   XByteField("next_ex", 0)]

    def post_build(self, p, pay):
        if self.length is None:
            content = p[1:-1]
            content += b"\0" * ((-(len(content) + 2)) % 4)
            p = bytes([(len(content) + 2) // 4]) + content + p[-1:]
        return p + pay

    def guess_payload_class(self, payload):
        if self.next_ex == EXT_PDU_SESSION_CONTAINER:
            return GTPPDUSessionContainer
        if self.next_ex:
            return GTPExtHeader
        if payload[:1] and payload[0] >> 4 == 4:
            return IP
        return Raw


def ext_header(ext_type: int, content: bytes = b"\0\0", length: int | None = None):
    """An extension header for gpdu(ext=[...]): (type, layer). The type goes into the previous header."""
    return ext_type, GTPExtHeader(content=content, length=length)


def pdu_session_container(qfi: int = 9, uplink: bool = True):
    """PDU Session Container (TS 38.415 5.5.2): UL PDU Session Information (type 1) or DL (type 0)."""
    return EXT_PDU_SESSION_CONTAINER, GTPPDUSessionContainer(type=1 if uplink else 0, QFI=qfi)


def _filler(n: int) -> bytes:
    """Deterministic, non-zero payload bytes (so checksums and copies are really exercised)."""
    return bytes((i * 7 + 0x41) & 0xFF for i in range(n))


def _fit(build, size: int | None, what: str) -> Packet:
    """build(n) makes the packet with an n-byte payload; choose n so the frame is `size` on the wire."""
    if size is None:
        return build(0)
    if size < ETH_MIN_FRAME:
        raise ValueError(f"{what}: frame size {size} is below the Ethernet minimum {ETH_MIN_FRAME}")
    base = len(bytes(build(0)))
    n = size - FCS_LEN - base
    if n < 0:
        raise ValueError(f"{what}: frame size {size} is too small, the headers alone need {base + FCS_LEN}")
    pkt = build(n)
    assert len(bytes(pkt)) == size - FCS_LEN
    return pkt


def _l2(src_mac: str, dst_mac: str, vlan: int | None) -> Packet:
    if vlan is None:
        return Ether(src=src_mac, dst=dst_mac)
    return Ether(src=src_mac, dst=dst_mac) / Dot1Q(vlan=vlan)


def ip_packet(src: str, dst: str, *, l4: str | int = "udp", payload_len: int = 0, payload: bytes | None = None,
              ttl: int = 64, tos: int = 0, ip_id: int = 1, df: bool = False, mf: bool = False,
              frag: int = 0, sport: int = 40000, dport: int = 5001, udp_csum: bool = True,
              options: bytes = b"", spi: int | None = None) -> Packet:
    """An IPv4 packet as a UE or a server sends it (no Ethernet).

    l4: "udp", "tcp", "icmp" (echo request), or an IP protocol number (payload follows the IP header).
    payload: the L4 payload bytes (default payload_len filler bytes). udp_csum=False sends UDP checksum 0.
    df/mf/frag: the DF and MF flags and the fragment offset (8-octet units). Checksums are computed.
    spi: with a protocol number (ESP, 50), the payload starts with this Security Parameter Index and
    sequence number 1 (RFC 4303 2.1, 2.2), the payload after them.
    """
    data = payload if payload is not None else _filler(payload_len)
    flags = (2 if df else 0) | (1 if mf else 0)
    ip = IP(src=src, dst=dst, ttl=ttl, tos=tos, id=ip_id, flags=flags, frag=frag)
    if options:
        from scapy.layers.inet import IPOption
        ip.options = [IPOption(options)]
    if l4 == "udp":
        return ip / UDP(sport=sport, dport=dport, chksum=None if udp_csum else 0) / Raw(data)
    if l4 == "tcp":
        return ip / TCP(sport=sport, dport=dport, flags="A", seq=1000, ack=2000, window=8192) / Raw(data)
    if l4 == "icmp":
        return ip / ICMP(type=8, code=0, id=0x4242, seq=1) / Raw(data)
    if isinstance(l4, int):
        ip.proto = l4
        if spi is not None:
            data = struct.pack("!II", spi, 1) + data
        return ip / Raw(data)
    raise ValueError(f"unknown l4 {l4!r}: use udp, tcp, icmp or a protocol number")


def gtpu(inner, *, teid: int = TEID_UL, gtp_type: int = GTP_GPDU, src: str = SGW_ADDR, dst: str = PGW_ADDR,
         sport: int = GTPU_PORT, dport: int = GTPU_PORT, src_mac: str = SGW_MAC, dst_mac: str = PGW_ACCESS_MAC,
         vlan: int | None = None, ext=(), seq: int | None = None, npdu: int | None = None, pn: bool = False,
         flags: int | None = None, length: int | None = None, outer_ttl: int = 64, outer_id: int = 0,
         outer_df: bool = False, udp_csum: bool = False) -> Packet:
    """Ethernet [/802.1Q] / IPv4 / UDP / GTP-U [optional fields, extension headers] / inner; over IPv6
    (hop limit outer_ttl, the UDP checksum computed whatever udp_csum says) when dst is an IPv6 address.

    inner: a Scapy packet or bytes (the T-PDU or message body; b"" for none).
    ext: a list of (type, layer) from ext_header() / pdu_session_container(); sets E and chains the
    next-type octets (last one 0). seq sets S; npdu/pn set PN; the optional octets are present when
    any of E/S/PN is set (seq/N-PDU 0 when not given).
    flags: raw GTP flags octet, overrides version/PT/E/S/PN (for broken packets); length: raw GTP length.
    udp_csum: compute the outer UDP checksum (default 0, as SGWs usually send).
    """
    ext = list(ext)
    e = 1 if ext else 0
    s = 1 if seq is not None else 0
    p = 1 if (pn or npdu is not None) else 0
    gtp = GTP_U_Header(version=1, PT=1, reserved=0, E=e, S=s, PN=p, gtp_type=gtp_type, teid=teid, length=length)
    if flags is not None:
        gtp.version, gtp.PT, gtp.reserved = flags >> 5, (flags >> 4) & 1, (flags >> 3) & 1
        gtp.E, gtp.S, gtp.PN = (flags >> 2) & 1, (flags >> 1) & 1, flags & 1
    if gtp.E or gtp.S or gtp.PN:
        gtp.seq = seq or 0
        gtp.npdu = npdu or 0
        gtp.next_ex = ext[0][0] if ext else 0
    chain = gtp
    for i, (_, layer) in enumerate(ext):
        layer = layer.copy()
        nxt = ext[i + 1][0] if i + 1 < len(ext) else 0
        if isinstance(layer, GTPPDUSessionContainer):
            # Scapy's container pads everything after it to 4 octets when it is not last: take
            # its own octets only (they are right) and chain them as a generic header.
            layer.NextExtHdr = nxt
            raw = bytes(layer)
            layer = GTPExtHeader(length=raw[0], content=raw[1:-1], next_ex=nxt)
        else:
            layer.next_ex = nxt
        chain = chain / layer
    body = Raw(inner) if isinstance(inner, (bytes, bytearray)) else inner
    if len(bytes(body)):
        chain = chain / body
    if ":" in dst:                      # GTP-U over IPv6: the UDP checksum is mandatory (RFC 8200 8.1)
        return (_l2(src_mac, dst_mac, vlan) / IPv6(src=src, dst=dst, hlim=outer_ttl) /
                UDP(sport=sport, dport=dport) / chain)
    outer = IP(src=src, dst=dst, ttl=outer_ttl, id=outer_id, flags=2 if outer_df else 0)
    return (_l2(src_mac, dst_mac, vlan) / outer /
            UDP(sport=sport, dport=dport, chksum=None if udp_csum else 0) / chain)


def gpdu(teid: int = TEID_UL, ue: str = UE_ADDR, dst: str = PDN_ADDR, *, size: int | None = None,
         l4: str | int = "udp", ttl: int = 64, tos: int = 0, df: bool = False, inner_id: int = 1,
         inner_udp_csum: bool = True, inner: Packet | None = None, outer_src: str = SGW_ADDR,
         outer_dst: str = PGW_ADDR, inner_sport: int = 40000, inner_dport: int = 5001,
         spi: int | None = None, **kw) -> Packet:
    """An uplink G-PDU: SGW -> PGW-U, carrying an IPv4 packet from `ue` to `dst`.

    size: frame size on the wire (incl. FCS); the inner L4 payload is padded to reach it.
    inner: a ready inner packet (then size must be None). Other keywords go to gtpu() (vlan, ext, seq,
    npdu, MACs, flags, length, sport/dport of the outer UDP ...) or are the inner packet's (l4, ttl,
    tos, df, inner_sport, inner_dport, spi). dst is the inner destination; outer_src/outer_dst are the
    tunnel's addresses (SGW -> PGW-U).
    """
    kw.update(src=outer_src, dst=outer_dst)
    if inner is not None:
        if size is not None:
            raise ValueError("gpdu: give either inner or size, not both")
        return gtpu(inner, teid=teid, **kw)

    def build(n):
        return gtpu(ip_packet(ue, dst, l4=l4, payload_len=n, ttl=ttl, tos=tos, df=df, ip_id=inner_id,
                              udp_csum=inner_udp_csum, sport=inner_sport, dport=inner_dport, spi=spi),
                    teid=teid, **kw)
    return _fit(build, size, "gpdu")


def downlink_ip(ue: str = UE_ADDR, src: str = PDN_ADDR, size: int | None = None, *, vlan: int | None = None,
                l4: str | int = "udp", src_mac: str = ROUTER_SGI_MAC, dst_mac: str = PGW_SGI_MAC,
                **ipkw) -> Packet:
    """A downlink IPv4 packet as it arrives on SGi: Ethernet [/802.1Q] / IPv4(src -> ue) / l4 / payload.

    size: frame size on the wire incl. FCS. ipkw go to ip_packet() (ttl, tos, df, mf, frag, ip_id,
    udp_csum, sport, dport, payload).
    """
    def build(n):
        return _l2(src_mac, dst_mac, vlan) / ip_packet(src, ue, l4=l4, payload_len=n, **ipkw)
    if "payload" in ipkw and size is not None:
        raise ValueError("downlink_ip: give either payload or size, not both")
    return _fit(build, size, "downlink_ip")


def ip6_packet(src: str, dst: str, *, l4: str = "udp", payload_len: int = 0, hlim: int = 64, tc: int = 0,
               fl: int = 0, sport: int = 40000, dport: int = 5001) -> Packet:
    """An IPv6 packet as a UE or a server sends it (no Ethernet): UDP, TCP or an ICMPv6 Echo Request,
    its checksum over the IPv6 pseudo header (never 0, RFC 8200 8.1); payload_len filler octets."""
    ip = IPv6(src=src, dst=dst, hlim=hlim, tc=tc, fl=fl)
    data = Raw(bytes((k * 7 + 3) & 0xFF for k in range(payload_len)))
    if l4 == "udp":
        return ip / UDP(sport=sport, dport=dport) / data
    if l4 == "tcp":
        return ip / TCP(sport=sport, dport=dport, flags="A", seq=1000, ack=2000, window=8192) / data
    if l4 == "icmp":
        return ip / ICMPv6EchoRequest(id=0x4242, seq=1) / data
    raise ValueError(f"unknown l4 {l4!r}: use udp, tcp or icmp")


def router_solicitation6(src: str, *, hlim: int = 255) -> Packet:
    """An ICMPv6 Router Solicitation (RFC 4861 4.1: type 133, code 0, reserved 0) from src to
    all-routers ff02::2, without options, its checksum over the IPv6 pseudo header."""
    return IPv6(src=src, dst="ff02::2", hlim=hlim) / ICMPv6ND_RS()


def gpdu6(teid: int, ue: str, dst: str, *, size: int | None = None, outer_src: str = SGW_ADDR,
          outer_dst: str = PGW_ADDR, l4: str = "udp", hlim: int = 64, tc: int = 0, fl: int = 0,
          inner_sport: int = 40000, inner_dport: int = 5001, **kw) -> Packet:
    """An uplink G-PDU carrying an IPv6 packet from `ue` to `dst` (GTP-U over IPv4, as gpdu()); size
    the frame on the wire; kw go to gtpu() (MACs, ext, seq ...)."""
    kw.update(src=outer_src, dst=outer_dst)
    return _fit(lambda n: gtpu(ip6_packet(ue, dst, l4=l4, payload_len=n, hlim=hlim, tc=tc, fl=fl,
                                          sport=inner_sport, dport=inner_dport), teid=teid, **kw), size, "gpdu6")


def downlink_ip6(ue: str, src: str, size: int | None = None, *, src_mac: str = ROUTER_SGI_MAC,
                 dst_mac: str = PGW_SGI_MAC, vlan: int | None = None, **ipkw) -> Packet:
    """A downlink IPv6 packet as it arrives on N6: Ethernet [/802.1Q] / IPv6(src -> ue) / l4; ipkw go
    to ip6_packet() (l4, hlim, tc, fl, sport, dport)."""
    return _fit(lambda n: _l2(src_mac, dst_mac, vlan) / ip6_packet(src, ue, payload_len=n, **ipkw), size,
                "downlink_ip6")


def echo_request(seq: int | None = 0, *, recovery: int | None = None, extra: bytes = b"", **kw) -> Packet:
    """GTP-U Echo Request (TS 29.281 7.2.1), TEID 0. seq=None sends it without the S flag (and without
    optional fields). recovery: add a Recovery IE (old peers do). extra: trailing bytes (private
    extension etc.). kw go to gtpu() (vlan, src, dst, sport, MACs ...)."""
    body = (bytes(IE_Recovery(restart_counter=recovery)) if recovery is not None else b"") + extra
    return gtpu(body, teid=0, gtp_type=GTP_ECHO_REQUEST, seq=seq, **kw)


def echo_response(seq: int = 0, *, restart_counter: int = 0, src: str = PGW_ADDR, dst: str = SGW_ADDR,
                  dport: int = GTPU_PORT, src_mac: str = PGW_ACCESS_MAC, dst_mac: str = SGW_MAC,
                  vlan: int | None = None) -> Packet:
    """GTP-U Echo Response as a PGW-U sends it (TS 29.281 7.2.2): flags 0x32 (v1, PT, S), length 6,
    TEID 0, the request's sequence number, one Recovery IE; IPv4 ttl 64, id 0, UDP checksum computed."""
    gtp = GTP_U_Header(version=1, PT=1, reserved=0, E=0, S=1, PN=0, gtp_type=GTP_ECHO_RESPONSE, teid=0,
                       seq=seq, npdu=0, next_ex=0)
    return (_l2(src_mac, dst_mac, vlan) / IP(src=src, dst=dst, ttl=64, id=0, flags=0, tos=0) /
            UDP(sport=GTPU_PORT, dport=dport) / gtp /
            GTPEchoResponse(IE_list=[IE_Recovery(restart_counter=restart_counter)]))


def error_indication(teid: int = TEID_UL, peer: str | None = None, **kw) -> Packet:
    """GTP-U Error Indication (TS 29.281 7.3.1): TEID 0, S set, IEs Tunnel Endpoint Identifier Data I (16)
    = the TEID the sender did not know, GTP-U Peer Address (133) = `peer` (default: the sender's own
    address, src), the address that G-PDU was sent to."""
    addr = peer if peer is not None else kw.get("src", SGW_ADDR)
    body = struct.pack("!BI", 16, teid) + struct.pack("!BH", 133, 4) + socket.inet_aton(addr)
    return gtpu(body, teid=0, gtp_type=GTP_ERROR_INDICATION, seq=kw.pop("seq", 0), **kw)


def end_marker(teid: int = TEID_UL, **kw) -> Packet:
    """GTP-U End Marker (TS 29.281 7.3.2): the tunnel's TEID, no payload."""
    return gtpu(b"", teid=teid, gtp_type=GTP_END_MARKER, **kw)


def supported_ext_headers_notification(types=(EXT_PDU_SESSION_CONTAINER,), **kw) -> Packet:
    """GTP-U Supported Extension Headers Notification (TS 29.281 7.2.3): IE type 141, list of types."""
    body = struct.pack("!BB", 141, len(types)) + bytes(types)
    return gtpu(body, teid=0, gtp_type=GTP_SUPPORTED_EXT_HDRS, seq=kw.pop("seq", 0), **kw)


def gtp_message(gtp_type: int, body: bytes = b"", **kw) -> Packet:
    """Any GTP-U message type with a raw body (for unknown-type tests)."""
    return gtpu(body, gtp_type=gtp_type, **kw)


def arp_request(src: str = SGW_ADDR, target: str = PGW_ADDR, *, src_mac: str = SGW_MAC,
                vlan: int | None = None) -> Packet:
    """Broadcast ARP who-has."""
    return _l2(src_mac, "ff:ff:ff:ff:ff:ff", vlan) / ARP(op=1, hwsrc=src_mac, psrc=src, pdst=target)


def ipv6_packet(*, src_mac: str = SGW_MAC, dst_mac: str = PGW_ACCESS_MAC, vlan: int | None = None,
                payload_len: int = 16) -> Packet:
    """An IPv6/UDP packet (the PGW-U passes it to the kernel)."""
    return (_l2(src_mac, dst_mac, vlan) / IPv6(src="2001:db8::2", dst="2001:db8::1") /
            UDP(sport=40000, dport=GTPU_PORT) / Raw(_filler(payload_len)))


def with_trailer(pkt, n: int, fill: bytes = b"\0") -> Packet:
    """The frame with n bytes of Ethernet padding after the IP packet (not counted in any length)."""
    return Ether(bytes(pkt) + (fill * n)[:n])


def frame_size(pkt) -> int:
    """Frame size on the wire (incl. FCS) of a packet built here."""
    return len(bytes(pkt)) + FCS_LEN


def mac_bytes(mac: str) -> bytes:
    return bytes(int(x, 16) for x in mac.split(":"))
