"""What a UPF should send for a packet, written from the specs (TS 29.281, TS 38.415, RFC 791/768/
792/1812) and docs/dataplane.md, not from any UPF's program: the expectations of `gtplab conformance`
and of the tests (tests/lib/oracle.py re-exports this module: one copy).

Checksums are computed here with RFC 1071 (not Scapy's code); frames are split with a small parser
that only has to handle the valid frames the cases build. Also: readable mismatch reports, and the
encapsulation of a UPF with known departures (encap_departing, from gtplab/conformance/departs.py).
"""

from __future__ import annotations

import socket
import struct

from scapy.contrib.gtp import GTP_U_Header, GTPErrorIndication, IE_GSNAddress, IE_TEIDI
from scapy.layers.inet import ICMP, IP, UDP
from scapy.layers.inet6 import ICMPv6PacketTooBig, ICMPv6TimeExceeded, IPv6
from scapy.layers.l2 import Dot1Q, Ether
from scapy.packet import Raw

GTPU_PORT = 2152


def csum16(data: bytes, start: int = 0) -> int:
    """RFC 1071 Internet checksum of data (the value to put in a checksum field)."""
    if len(data) % 2:
        data = bytes(data) + b"\0"
    s = start + sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF


def ip_hdr_ok(hdr: bytes) -> bool:
    """True if an IPv4 header (ihl*4 bytes) checksums to zero."""
    return csum16(hdr) == 0


def pseudo_sum(src: bytes, dst: bytes, proto: int, length: int) -> int:
    return sum(struct.unpack("!4H", src + dst)) + proto + length


def udp_csum_ok(src: bytes, dst: bytes, udp: bytes) -> bool:
    """True if a UDP datagram's checksum field is the correct, non-zero RFC 768 checksum."""
    if udp[6:8] == b"\0\0":
        return False
    return csum16(udp, pseudo_sum(src, dst, 17, len(udp))) == 0


def l2_split(frame: bytes) -> tuple[int, int | None]:
    """(L2 header length, VLAN id or None) of an Ethernet frame with at most one 802.1Q tag."""
    if frame[12:14] == b"\x81\x00":
        return 18, struct.unpack("!H", frame[14:16])[0] & 0xFFF
    return 14, None


def l2_header(dmac: bytes, smac: bytes, vlan: int | None, etype: int = 0x0800) -> bytes:
    """Ethernet [+ 802.1Q, PCP 0 DEI 0] header for an IPv4 payload (etype: another one's)."""
    et = struct.pack("!H", etype)
    if vlan:
        return dmac + smac + b"\x81\x00" + struct.pack("!H", vlan & 0xFFF) + et
    return dmac + smac + et


def gtp_header_chain_len(gtp: bytes) -> int:
    """Length of the GTP-U header incl. optional fields and extension headers (valid input only)."""
    flags = gtp[0]
    if not flags & 0x07:
        return 8
    n = 12
    nxt = gtp[11] if flags & 0x04 else 0
    while nxt:
        ln = gtp[n] * 4
        nxt = gtp[n + ln - 1]
        n += ln
    return n


def ip_len(ip: bytes) -> int:
    """The length an IPv4 (total length) or IPv6 (40 + payload length) packet says it has."""
    if ip[0] >> 4 == 6:
        return 40 + struct.unpack("!H", ip[4:6])[0]
    return struct.unpack("!H", ip[2:4])[0]


def outer_len(frame: bytes, l2: int) -> int:
    """The length of the outer IP header at l2: an IPv4 header's IHL, 40 for IPv6 (GTP-U over IPv6:
    no extension header, as the PGW-U takes it)."""
    return 40 if frame[l2] >> 4 == 6 else (frame[l2] & 0xF) * 4


def gpdu_inner(frame: bytes) -> bytes:
    """The T-PDU (inner IPv4 or IPv6 packet, exactly its length) of a valid G-PDU frame, over IPv4
    or IPv6."""
    l2, _ = l2_split(frame)
    gtp = frame[l2 + outer_len(frame, l2) + 8:]
    start = gtp_header_chain_len(gtp)
    inner = gtp[start:]
    return inner[:ip_len(inner)]


def ip_payload(frame: bytes) -> bytes:
    """The IPv4 or IPv6 packet (exactly its length) of an Ethernet frame."""
    l2, _ = l2_split(frame)
    return frame[l2:l2 + ip_len(frame[l2:])]


def ethertype(ip: bytes) -> int:
    """The EtherType of an IP packet: 0x86DD for IPv6, else 0x0800."""
    return 0x86DD if ip[0] >> 4 == 6 else 0x0800


def ttl_dec(ip: bytes) -> bytes:
    """The IPv4 packet with TTL - 1 and a freshly computed header checksum; an IPv6 packet with its
    hop limit - 1 (no header checksum, RFC 8200 3)."""
    b = bytearray(ip)
    if b[0] >> 4 == 6:
        b[7] -= 1
        return bytes(b)
    ihl = (b[0] & 0xF) * 4
    b[8] -= 1
    b[10:12] = b"\0\0"
    b[10:12] = struct.pack("!H", csum16(bytes(b[:ihl])))
    return bytes(b)


def decap_expected(inner: bytes, smac: bytes, dmac: bytes, vlan: int | None) -> bytes:
    """Uplink output (spec xdp_access step 13): the inner IPv4 or IPv6 packet, its EtherType."""
    return l2_header(dmac, smac, vlan, ethertype(inner)) + ttl_dec(inner)


def murmur3_32(data: bytes, seed: int = 0) -> int:
    """MurmurHash3_x86_32 (Austin Appleby's SMHasher), written from the algorithm: 4-octet
    little-endian blocks, the tail, the length, the final mix. tests/dataplane/test_dataplane.py checks it
    against the published test vectors."""
    m = 0xFFFFFFFF

    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & m

    def scramble(k: int) -> int:
        return (rotl((k * 0xCC9E2D51) & m, 15) * 0x1B873593) & m

    h = seed & m
    n = len(data) // 4 * 4
    for i in range(0, n, 4):
        h = (rotl(h ^ scramble(struct.unpack_from("<I", data, i)[0]), 13) * 5 + 0xE6546B64) & m
    if len(data) > n:
        h ^= scramble(int.from_bytes(data[n:], "little"))
    h ^= len(data)
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & m
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & m
    return h ^ (h >> 16)


def sport_of_flow(ip: bytes) -> int:
    """The outer UDP source port with source-port entropy (spec xdp_sgi step 6, pgwu_sport_of in
    pgwu.h): 49152 + the low 14 bits of murmur3_32 over the inner source and destination addresses
    and, for unfragmented TCP/UDP, the 4 octets of ports (else 4 zero octets), seeded with the
    protocol: the octets as they are in the packet, which is the words the x86 program loads."""
    if ip[0] >> 4 == 6:
        return sport_of_flow6(ip)
    ihl = (ip[0] & 0xF) * 4
    proto = ip[9]
    frag = struct.unpack("!H", ip[6:8])[0] & 0x3FFF
    tot = struct.unpack("!H", ip[2:4])[0]
    l4 = ip[ihl:ihl + 4] if proto in (6, 17) and not frag and tot >= ihl + 4 else bytes(4)
    return 0xC000 | (murmur3_32(ip[12:20] + l4, proto) & 0x3FFF)


def sport_of_flow6(ip: bytes) -> int:
    """sport_of_flow of an IPv6 packet (the PGW-U's xdp_sgi6): each address folded to one word (the
    XOR of its four 4-octet words, as they are in the packet), then as IPv4's with the Next Header
    as the protocol and, for TCP and UDP, their 4 octets of ports (no extension header walked)."""
    def fold(a: bytes) -> bytes:
        w = bytes(4)
        for k in range(0, 16, 4):
            w = bytes(x ^ y for x, y in zip(w, a[k:k + 4]))
        return w
    proto, plen = ip[6], struct.unpack("!H", ip[4:6])[0]
    l4 = ip[40:44] if proto in (6, 17) and plen >= 4 else bytes(4)
    return 0xC000 | (murmur3_32(fold(ip[8:24]) + fold(ip[24:40]) + l4, proto) & 0x3FFF)


def traffic_class(ip: bytes) -> int:
    """An IPv4 packet's TOS, an IPv6 packet's Traffic Class."""
    return ((ip[0] & 0xF) << 4 | ip[1] >> 4) if ip[0] >> 4 == 6 else ip[1]


def encap_expected(ip: bytes, *, smac: bytes, dmac: bytes, vlan: int | None, local: str, sgw: str,
                   teid: int, csum: bool, ip_id: int, sport: int | None = None, qfi: int | None = None) -> bytes:
    """Downlink output (spec xdp_sgi step 6), built with Scapy; ip_id is the outer id to expect;
    sport None: the flow's (sport_of_flow, the default), 2152 with `--sport-entropy off`."""
    if sport is None:
        sport = sport_of_flow(ip)
    inner = ttl_dec(ip)
    tos = traffic_class(ip)
    df = ip[0] >> 4 == 4 and bool(ip[6] & 0x40)    # an IPv6 packet's tunnel: DF clear
    eth = Ether(dst=dmac, src=smac)
    if vlan:
        eth = eth / Dot1Q(vlan=vlan, prio=0)
    pkt = (eth / IP(ihl=5, tos=tos, id=ip_id, flags=2 if df else 0, frag=0, ttl=64, proto=17, src=local, dst=sgw)
           / UDP(sport=sport, dport=GTPU_PORT, chksum=None if csum else 0)
           / gtp_header_for(inner, teid, qfi) / Raw(inner))
    return bytes(pkt)


def encap6_expected(ip: bytes, *, smac: bytes, dmac: bytes, vlan: int | None, local6: str, sgw6: str,
                    teid: int, sport: int | None = None, qfi: int | None = None) -> bytes:
    """Downlink output to a peer over IPv6 (N3 over IPv6, docs/ipv6.md "N3 over IPv6 in the PGW-U"):
    IPv6 local6 -> sgw6, traffic class the inner TOS or class, flow label 0, hop limit 64; UDP from
    the flow's port (sport None) to 2152 with its checksum (always: RFC 8200 8.1, Scapy's); the
    G-PDU header of encap_expected; the inner packet, TTL or hop limit one less."""
    if sport is None:
        sport = sport_of_flow(ip)
    inner = ttl_dec(ip)
    eth = Ether(dst=dmac, src=smac)
    if vlan:
        eth = eth / Dot1Q(vlan=vlan, prio=0)
    return bytes(eth / IPv6(tc=traffic_class(ip), fl=0, hlim=64, nh=17, src=local6, dst=sgw6)
                 / UDP(sport=sport, dport=GTPU_PORT) / gtp_header_for(inner, teid, qfi) / Raw(inner))


def gtp_header_for(inner: bytes, teid: int, qfi: int | None):
    """The downlink G-PDU's GTP-U header: 8 octets, or with a QFI (5G N3) E set, the optional fields
    (sequence and N-PDU 0, next type 0x85) and a PDU Session Container (TS 38.415 5.5.2.1: length 1,
    PDU type 0 = DL PDU SESSION INFORMATION with no optional field, PPP 0 RQI 0 QFI, next type 0)."""
    if qfi is None:
        return GTP_U_Header(version=1, PT=1, reserved=0, E=0, S=0, PN=0, gtp_type=255, length=len(inner), teid=teid)
    return (GTP_U_Header(version=1, PT=1, reserved=0, E=1, S=0, PN=0, gtp_type=255, length=len(inner) + 8,
                         teid=teid, seq=0, npdu=0, next_ex=0x85) / Raw(bytes([1, 0x00, qfi & 0x3F, 0])))


def _reply_l2_ip(frame: bytes, local: str, dport: int, gtp_type: int, body, seq: int = 0) -> bytes:
    """A signalling message back to the sender of frame (spec: "Replies"): MACs swapped, the same
    802.1Q tag, IPv4 local -> sender (ttl 64, id 0, tos 0), UDP 2152 -> dport with its checksum, GTP-U
    flags 0x32 (S set), TEID 0, sequence seq, then body. Over IPv6 (the frame's outer header is): IPv6
    local -> sender, class and flow label 0, hop limit 64."""
    l2, vlan = l2_split(frame)
    eth = Ether(dst=frame[6:12], src=frame[0:6])
    if vlan is not None:
        eth = eth / Dot1Q(vlan=vlan, prio=(frame[14] >> 5), dei=(frame[14] >> 4) & 1)
    gtp = GTP_U_Header(version=1, PT=1, reserved=0, E=0, S=1, PN=0, gtp_type=gtp_type, teid=0, seq=seq, npdu=0,
                       next_ex=0)
    if frame[l2] >> 4 == 6:
        sender = socket.inet_ntop(socket.AF_INET6, frame[l2 + 8:l2 + 24])
        return bytes(eth / IPv6(tc=0, fl=0, hlim=64, nh=17, src=local, dst=sender)
                     / UDP(sport=GTPU_PORT, dport=dport) / gtp / body)
    sender = socket.inet_ntoa(frame[l2 + 12:l2 + 16])
    return bytes(eth / IP(ihl=5, tos=0, id=0, flags=0, ttl=64, proto=17, src=local, dst=sender)
                 / UDP(sport=GTPU_PORT, dport=dport) / gtp / body)


def error_indication_expected(frame: bytes, local: str) -> bytes:
    """The Error Indication (TS 29.281 7.3.1) for a G-PDU with an unknown TEID: to its sender's port
    2152 (4.4.2.4), IEs Tunnel Endpoint Identifier Data I = the G-PDU's TEID, GTP-U Peer Address =
    the address the G-PDU was sent to (local; over IPv6 a 16-octet address)."""
    l2, _ = l2_split(frame)
    ihl = outer_len(frame, l2)
    teid = struct.unpack("!I", frame[l2 + ihl + 12:l2 + ihl + 16])[0]
    peer = (IE_GSNAddress(length=16, ipv6_address=local) if ":" in local else
            IE_GSNAddress(length=4, ipv4_address=local))
    body = GTPErrorIndication(IE_list=[IE_TEIDI(TEIDI=teid), peer])
    return _reply_l2_ip(frame, local, GTPU_PORT, 26, body)


# The extension header types the PGW-U knows (TS 29.281 Figure 5.2.1-3), in the order it lists them.
KNOWN_EXT_TYPES = (0x03, 0x20, 0x40, 0x81, 0x82, 0x83, 0x84, 0x85, 0xC0)


def echo_response_expected(frame: bytes, local: str) -> bytes:
    """The Echo Response (TS 29.281 7.2.2) to an Echo Request frame: to its source port (4.4.2.2),
    its sequence number, one Recovery IE (restart counter 0); over the request's IP family."""
    l2, _ = l2_split(frame)
    o = l2 + outer_len(frame, l2)
    sport = struct.unpack("!H", frame[o:o + 2])[0]
    seq = struct.unpack("!H", frame[o + 16:o + 18])[0]
    return _reply_l2_ip(frame, local, sport, 2, Raw(bytes([14, 0])), seq=seq)


def supp_ext_notification_expected(frame: bytes, local: str) -> bytes:
    """The Supported Extension Headers Notification (TS 29.281 7.2.3) for a message with an extension
    header that must be comprehended and is not: to the sender's source port (4.4.2.5), one IE
    Extension Header Type List (8.5: type 141, a one-octet length, the types). Built by hand: Scapy's
    IE_ExtensionHeaderList writes a two-octet length."""
    l2, _ = l2_split(frame)
    ihl = (frame[l2] & 0xF) * 4
    sport = struct.unpack("!H", frame[l2 + ihl:l2 + ihl + 2])[0]
    body = Raw(bytes([141, len(KNOWN_EXT_TYPES)]) + bytes(KNOWN_EXT_TYPES))
    return _reply_l2_ip(frame, local, sport, 31, body)


def _time_exceeded(local: str, dst: str, expired: bytes):
    """IPv4 local -> dst (ttl 64, id 0) / ICMP Time Exceeded (11/0) quoting the expired packet's
    header and the 8 octets after it (RFC 792), or all of it when it is shorter."""
    ihl = (expired[0] & 0xF) * 4
    return (IP(ihl=5, tos=0, id=0, flags=0, ttl=64, proto=1, src=local, dst=dst)
            / ICMP(type=11, code=0) / Raw(expired[:ihl + 8]))


def _reply_eth(frame: bytes):
    """Ethernet back to the frame's sender; the received VLAN id kept (PCP 0), a VID 0 tag dropped."""
    _, vlan = l2_split(frame)
    eth = Ether(dst=frame[6:12], src=frame[0:6])
    return eth / Dot1Q(vlan=vlan, prio=0) if vlan else eth


def frag_needed_dl_expected(frame: bytes, local: str, mtu: int, encap: int = 36) -> bytes:
    """Downlink packet with DF too big once encapsulated: ICMP Destination Unreachable, Fragmentation
    Needed (3/4) to its sender with next-hop MTU = the access route's MTU - the encapsulation (RFC
    1191): 36 octets over IPv4, 56 (64 with a PDU Session Container) over IPv6 N3."""
    ip = ip_payload(frame)
    ihl = (ip[0] & 0xF) * 4
    icmp = (IP(ihl=5, tos=0, id=0, flags=0, ttl=64, proto=1, src=local, dst=socket.inet_ntoa(ip[12:16]))
            / ICMP(type=3, code=4, nexthopmtu=mtu - encap) / Raw(ip[:ihl + 8]))
    return bytes(_reply_eth(frame) / icmp)


def time_exceeded_dl_expected(frame: bytes, local: str) -> bytes:
    """Downlink packet whose TTL expired: ICMP Time Exceeded to its sender, back out of SGi."""
    ip = ip_payload(frame)
    return bytes(_reply_eth(frame) / _time_exceeded(local, socket.inet_ntoa(ip[12:16]), ip))


def time_exceeded_ul_expected(frame: bytes, local: str, sgw: str, sgw_teid: int, qfi: int | None = None) -> bytes:
    """Uplink inner packet whose TTL expired: ICMP Time Exceeded to the UE, in a G-PDU to the bearer's
    SGW (UDP 2152 -> 2152, checksum 0; with the bearer's PDU Session Container when it has a QFI),
    back to the sender of the G-PDU."""
    inner = gpdu_inner(frame)
    icmp = bytes(_time_exceeded(local, socket.inet_ntoa(inner[12:16]), inner))
    return bytes(_reply_eth(frame) / IP(ihl=5, tos=0, id=0, flags=0, ttl=64, proto=17, src=local, dst=sgw)
                 / UDP(sport=GTPU_PORT, dport=GTPU_PORT, chksum=0)
                 / gtp_header_for(icmp, sgw_teid, qfi) / Raw(icmp))


# RFC 4443 2.4(c): an ICMPv6 error quotes as much of the invoking packet as fits in the IPv6 minimum
# MTU, 1280 octets: 1280 - 40 (IPv6) - 8 (ICMPv6)
ICMP6_QUOTE_MAX = 1232


def _time_exceeded6(local6: str, dst: str, expired: bytes):
    """IPv6 local6 -> dst (class and flow label 0, hop limit 64) / ICMPv6 Time Exceeded, hop limit
    exceeded in transit (3/0, RFC 4443 3.3) quoting the expired packet, ICMP6_QUOTE_MAX octets at most;
    the checksum Scapy's, over the pseudo header."""
    return (IPv6(tc=0, fl=0, hlim=64, src=local6, dst=dst) / ICMPv6TimeExceeded(code=0)
            / Raw(expired[:ICMP6_QUOTE_MAX]))


def time_exceeded6_dl_expected(frame: bytes, local6: str) -> bytes:
    """Downlink IPv6 packet whose hop limit expired: ICMPv6 Time Exceeded from the PGW-U's N6 address
    to its sender, back out of SGi (the received VLAN id kept)."""
    ip = ip_payload(frame)
    return bytes(_reply_eth(frame) / _time_exceeded6(local6, socket.inet_ntop(socket.AF_INET6, ip[8:24]), ip))


def time_exceeded6_ul_expected(frame: bytes, local: str, local6: str, sgw: str, sgw_teid: int,
                               qfi: int | None = None) -> bytes:
    """Uplink IPv6 T-PDU whose hop limit expired: ICMPv6 Time Exceeded from the PGW-U's N6 address to
    the UE, in a G-PDU to the bearer's SGW, as the IPv4 one (time_exceeded_ul_expected)."""
    inner = gpdu_inner(frame)
    icmp = bytes(_time_exceeded6(local6, socket.inet_ntop(socket.AF_INET6, inner[8:24]), inner))
    return bytes(_reply_eth(frame) / IP(ihl=5, tos=0, id=0, flags=0, ttl=64, proto=17, src=local, dst=sgw)
                 / UDP(sport=GTPU_PORT, dport=GTPU_PORT, chksum=0)
                 / gtp_header_for(icmp, sgw_teid, qfi) / Raw(icmp))


def _packet_too_big6(local6: str, dst: str, big: bytes, mtu: int):
    """IPv6 local6 -> dst (class and flow label 0, hop limit 64) / ICMPv6 Packet Too Big (2/0, RFC
    4443 3.2) with the MTU, quoting the packet, ICMP6_QUOTE_MAX octets at most."""
    return (IPv6(tc=0, fl=0, hlim=64, src=local6, dst=dst) / ICMPv6PacketTooBig(code=0, mtu=mtu)
            / Raw(big[:ICMP6_QUOTE_MAX]))


def packet_too_big6_dl_expected(frame: bytes, local6: str, mtu: int) -> bytes:
    """Downlink IPv6 packet too big for the tunnel: ICMPv6 Packet Too Big from the PGW-U's N6 address
    to its sender, back out of SGi, with mtu = the access route's MTU - the encapsulation (36 octets,
    44 with a PDU Session Container): the caller's."""
    ip = ip_payload(frame)
    return bytes(_reply_eth(frame) / _packet_too_big6(local6, socket.inet_ntop(socket.AF_INET6, ip[8:24]), ip, mtu))


def packet_too_big6_ul_expected(frame: bytes, local: str, local6: str, sgw: str, sgw_teid: int,
                                qfi: int | None, mtu: int) -> bytes:
    """Uplink IPv6 T-PDU over the SGi route's MTU: ICMPv6 Packet Too Big with that MTU from the
    PGW-U's N6 address to the UE, in a G-PDU to the bearer's SGW, as time_exceeded6_ul_expected."""
    inner = gpdu_inner(frame)
    icmp = bytes(_packet_too_big6(local6, socket.inet_ntop(socket.AF_INET6, inner[8:24]), inner, mtu))
    return bytes(_reply_eth(frame) / IP(ihl=5, tos=0, id=0, flags=0, ttl=64, proto=17, src=local, dst=sgw)
                 / UDP(sport=GTPU_PORT, dport=GTPU_PORT, chksum=0)
                 / gtp_header_for(icmp, sgw_teid, qfi) / Raw(icmp))


# ---- over an IPv6 N3 (GTP-U/UDP/IPv6, docs/ipv6.md "N3 over IPv6 in the PGW-U (XDP)") ----------------
def gpdu6_inner(frame: bytes) -> bytes:
    """The T-PDU (exactly its length) of a valid G-PDU frame over IPv6 (no outer extension header)."""
    l2, _ = l2_split(frame)
    gtp = frame[l2 + 40 + 8:]
    inner = gtp[gtp_header_chain_len(gtp):]
    return inner[:ip_len(inner)]


def _tunnel6_error(frame: bytes, n3_6: str, peer6: str, peer_teid: int, qfi: int | None, inner: bytes) -> bytes:
    """An error to a UE through its downlink tunnel over IPv6: Ethernet back to the sender of the
    G-PDU (its VLAN id) / IPv6 n3_6 -> peer6 (class and flow label 0, hop limit 64) / UDP 2152 ->
    2152, the checksum Scapy's (RFC 8200 8.1) / the G-PDU header to peer_teid (with the PDU Session
    Container of a QFI) / inner."""
    return bytes(_reply_eth(frame) / IPv6(tc=0, fl=0, hlim=64, nh=17, src=n3_6, dst=peer6)
                 / UDP(sport=GTPU_PORT, dport=GTPU_PORT) / gtp_header_for(inner, peer_teid, qfi) / Raw(inner))


def time_exceeded_ul6_expected(frame: bytes, local: str, n3_6: str, peer6: str, peer_teid: int,
                               qfi: int | None = None) -> bytes:
    """An IPv4 T-PDU over IPv6 N3 whose TTL expired: ICMP Time Exceeded from local to the UE (as
    time_exceeded_ul_expected's) through the bearer's IPv6 tunnel."""
    inner = gpdu6_inner(frame)
    icmp = bytes(_time_exceeded(local, socket.inet_ntoa(inner[12:16]), inner))
    return _tunnel6_error(frame, n3_6, peer6, peer_teid, qfi, icmp)


def time_exceeded6_ul6_expected(frame: bytes, local6: str, n3_6: str, peer6: str, peer_teid: int,
                                qfi: int | None = None) -> bytes:
    """An IPv6 T-PDU over IPv6 N3 whose hop limit expired: ICMPv6 Time Exceeded from local6 to the UE
    (as time_exceeded6_ul_expected's) through the bearer's IPv6 tunnel."""
    inner = gpdu6_inner(frame)
    icmp = bytes(_time_exceeded6(local6, socket.inet_ntop(socket.AF_INET6, inner[8:24]), inner))
    return _tunnel6_error(frame, n3_6, peer6, peer_teid, qfi, icmp)


def packet_too_big6_ul6_expected(frame: bytes, local6: str, n3_6: str, peer6: str, peer_teid: int,
                                 qfi: int | None, mtu: int) -> bytes:
    """An IPv6 T-PDU over IPv6 N3 over the SGi route's MTU: ICMPv6 Packet Too Big (as
    packet_too_big6_ul_expected's) through the bearer's IPv6 tunnel."""
    inner = gpdu6_inner(frame)
    icmp = bytes(_packet_too_big6(local6, socket.inet_ntop(socket.AF_INET6, inner[8:24]), inner, mtu))
    return _tunnel6_error(frame, n3_6, peer6, peer_teid, qfi, icmp)


def supp_ext_notification6_expected(frame: bytes, n3_6: str) -> bytes:
    """supp_ext_notification_expected over IPv6: from n3_6 to the sender's address and source port
    (class and flow label 0, hop limit 64, the UDP checksum Scapy's), GTP-U S set, TEID 0, sequence 0,
    the Extension Header Type List."""
    l2, _ = l2_split(frame)
    sender = socket.inet_ntop(socket.AF_INET6, frame[l2 + 8:l2 + 24])
    sport = struct.unpack("!H", frame[l2 + 40:l2 + 42])[0]
    body = Raw(bytes([141, len(KNOWN_EXT_TYPES)]) + bytes(KNOWN_EXT_TYPES))
    return bytes(_reply_eth(frame) / IPv6(tc=0, fl=0, hlim=64, src=n3_6, dst=sender)
                 / UDP(sport=GTPU_PORT, dport=sport)
                 / GTP_U_Header(version=1, PT=1, E=0, S=1, PN=0, gtp_type=31, teid=0, seq=0, npdu=0, next_ex=0)
                 / body)


def ttl_dec_incremental(ip: bytes) -> bytes:
    """TTL - 1 with the header checksum updated as RFC 1624 does from whatever value it had (right
    or wrong): what a router that does not verify the checksum forwards."""
    b = bytearray(ip)
    b[8] -= 1
    # the kernel's ip_decrease_ttl(): the field read as a little-endian word, + htons(0x0100)
    c = struct.unpack("<H", b[10:12])[0] + 1
    c = (c + (c >= 0xFFFF)) & 0xFFFF
    b[10:12] = struct.pack("<H", c)
    return bytes(b)


def outer_udp_ok(frame: bytes) -> bool:
    """Independent RFC 1071 check of an encapsulated frame's outer UDP checksum."""
    l2, _ = l2_split(frame)
    ip = frame[l2:]
    ihl = (ip[0] & 0xF) * 4
    ulen = struct.unpack("!H", ip[ihl + 4:ihl + 6])[0]
    return udp_csum_ok(ip[12:16], ip[16:20], ip[ihl:ihl + ulen])


def l4_csum_state(ip: bytes) -> str:
    """Whether an IPv4 packet's own L4 checksum can be and is right: "ok", "bad" or "none" (no usable
    checksum: fragment, UDP checksum 0, other protocol, incomplete L4 header)."""
    ihl = (ip[0] & 0xF) * 4
    tot = struct.unpack("!H", ip[2:4])[0]
    frag = struct.unpack("!H", ip[6:8])[0]
    if frag & 0x3FFF:
        return "none"
    proto = ip[9]
    l4 = ip[ihl:tot]
    if proto == 6 and len(l4) >= 20:
        return "ok" if csum16(l4, pseudo_sum(ip[12:16], ip[16:20], 6, len(l4))) == 0 else "bad"
    if proto == 17 and len(l4) >= 8:
        if l4[6:8] == b"\0\0":
            return "none"
        return "ok" if csum16(l4, pseudo_sum(ip[12:16], ip[16:20], 17, len(l4))) == 0 else "bad"
    if proto == 1 and len(l4) >= 4:
        return "ok" if csum16(l4) == 0 else "bad"
    return "none"


def hexdiff(expected: bytes, actual: bytes, width: int = 16) -> str:
    """Side-by-side hex lines, marking the lines that differ."""
    lines = [f"expected {len(expected)} bytes, actual {len(actual)} bytes"]
    for off in range(0, max(len(expected), len(actual)), width):
        e, a = expected[off:off + width], actual[off:off + width]
        mark = "  " if e == a else "!!"
        lines.append(f"{mark} {off:04x}  {e.hex(' '):<{width * 3}}| {a.hex(' ')}")
    return "\n".join(lines)


def describe(label: str, frame: bytes) -> str:
    if not frame:
        return f"--- {label}: (empty)"
    pkt = Ether(frame)
    return f"--- {label}:\n{pkt.command()}\n{pkt.show(dump=True)}"


def mismatch_report(expected: bytes, actual: bytes) -> str:
    return "\n".join([describe("expected", expected), describe("actual", actual), hexdiff(expected, actual)])


def ip4(addr: str) -> bytes:
    return socket.inet_aton(addr)


def encap_departing(d: dict, ip: bytes, *, smac: str, dmac: str, local: str, sgw: str, teid: int,
                    qfi: int | None = None) -> bytes:
    """A downlink G-PDU as a UPF with departures d (gtplab/conformance/departs.py facts) sends it,
    built with Scapy: the inner packet (TTL kept or decremented), the outer IPv4 header of d, UDP from
    d's port, d's checksum (without that fact: the right one), a DL PDU Session Container with the
    session's QFI (or d's; without that fact and a QFI: none). An id that is not a number (the
    kernel's) is built as 0: compare such frames id-free (cases.any_id)."""
    inner = ip if d.get("inner_ttl") == "kept" else ttl_dec(ip)
    o = d["outer_ip"]
    return bytes(Ether(dst=dmac, src=smac)
                 / IP(ihl=5, tos=o["tos"], id=o["id"] if isinstance(o["id"], int) else 0, flags=o["flags"],
                      frag=0, ttl=o["ttl"], proto=17, src=local, dst=sgw)
                 / UDP(sport=d["outer_udp_sport"], dport=GTPU_PORT, chksum=d.get("outer_udp_csum"))
                 / gtp_header_for(inner, teid, d.get("dl_psc_qfi") if qfi is None else qfi) / Raw(inner))


def id_free(frame: bytes) -> bytes:
    """The frame with its (outer) IPv4 id and header checksum zeroed when DF is clear and the header
    checksum is right: the sender may pick any id for such a packet (RFC 6864). A frame with a wrong
    header checksum, or that is not IPv4, is returned as it is (and so still differs)."""
    l2, _ = l2_split(frame)
    if len(frame) < l2 + 20 or frame[l2 - 2:l2] != b"\x08\x00" or frame[l2] >> 4 != 4:
        return frame
    ihl = (frame[l2] & 0xF) * 4
    if frame[l2 + 6] & 0x40 or not ip_hdr_ok(frame[l2:l2 + ihl]):
        return frame
    b = bytearray(frame)
    b[l2 + 4:l2 + 6] = b"\0\0"
    b[l2 + 10:l2 + 12] = b"\0\0"
    return bytes(b)
