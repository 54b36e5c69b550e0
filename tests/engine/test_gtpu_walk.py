"""gtplab.gtpu.walk, the one walker of GTP-U headers in raw bytes (the engine's checksum fix-ups use
it): every header's offset and length against where Scapy (gtplab.gtpu.packets) put it, and frames
cut short or of another kind yield what was found before the problem, never an exception."""

from __future__ import annotations

import pytest
from scapy.layers.inet import IP, UDP
from scapy.packet import raw

from gtplab.gtpu import packets as P
from gtplab.gtpu import walk


def _ip_offsets(pkt) -> list[int]:
    """Offsets of every IPv4 layer Scapy built, outermost first."""
    frame, out, layer = raw(pkt), [], pkt
    while layer:
        if isinstance(layer, IP):
            out.append(len(frame) - len(raw(layer)))
        layer = layer.payload
    return out


def _kinds(frame: bytes) -> list[str]:
    return [h.kind for h in walk.headers(frame)]


@pytest.mark.parametrize("name,pkt,kinds", [
    ("uplink UDP", P.gpdu(size=200), ["eth", "ipv4", "udp", "gtpu", "ipv4", "udp"]),
    ("uplink TCP", P.gpdu(size=200, l4="tcp"), ["eth", "ipv4", "udp", "gtpu", "ipv4", "tcp"]),
    ("uplink VLAN, PDU session container + another extension",
     P.gpdu(size=300, vlan=7, ext=[P.pdu_session_container(), P.ext_header(P.EXT_UDP_PORT, b"\x12\x34")]),
     ["eth", "vlan", "ipv4", "udp", "gtpu", "ipv4", "udp"]),
    ("uplink with sequence number", P.gpdu(size=128, seq=5), ["eth", "ipv4", "udp", "gtpu", "ipv4", "udp"]),
    ("downlink plain IPv4", P.downlink_ip(size=128), ["eth", "ipv4", "udp"]),
    ("downlink VLAN TCP", P.downlink_ip(size=128, vlan=9, l4="tcp"), ["eth", "vlan", "ipv4", "tcp"]),
])
def test_headers_where_scapy_put_them(name, pkt, kinds):
    frame = raw(pkt)
    hs = walk.headers(frame)
    assert [h.kind for h in hs] == kinds, name
    assert [h.off for h in hs if h.kind == "ipv4"] == _ip_offsets(pkt), name
    inner = pkt.getlayer(IP, nb=len(_ip_offsets(pkt)))
    l4 = inner.payload
    cks = walk.l4_checksums(frame)
    last = cks[-1]
    assert last.l4 == len(frame) - len(raw(l4)) and last.udp == isinstance(l4, UDP), name
    # the checksum field really is where the walker says: Scapy's value is there
    assert int.from_bytes(frame[last.csum_off:last.csum_off + 2], "big") == \
        (l4.__class__(raw(l4)).chksum), name
    if "gtpu" in kinds:
        g = hs[kinds.index("gtpu")]
        assert g.off + g.len == _ip_offsets(pkt)[-1], name      # the inner packet follows GTP-U
        assert len(cks) == 2 and cks[0].udp and cks[0].l4 == hs[kinds.index("udp")].off


def test_not_gtpu_port_stops_after_udp():
    frame = raw(P.gpdu(size=200, dport=9999))
    assert _kinds(frame) == ["eth", "ipv4", "udp"]


CUT_PKT = P.gpdu(size=200, ext=[P.pdu_session_container()])
CUT_KINDS = ["eth", "ipv4", "udp", "gtpu", "ipv4", "udp"]


@pytest.mark.parametrize("cut", range(0, 120))
def test_frames_cut_short_yield_every_header_that_fits(cut):
    """A frame cut after `cut` bytes yields exactly the headers of the whole frame that end within
    them (the GTP-U header with its extension headers counts as one), so the cut decides the answer:
    nothing before 14 bytes, everything from the inner UDP header's end on."""
    full = walk.headers(raw(CUT_PKT))
    assert [h.kind for h in full] == CUT_KINDS      # the reference itself, checked against Scapy above
    got = walk.headers(raw(CUT_PKT)[:cut])
    assert got == [h for h in full if h.off + h.len <= cut], (cut, got)


def test_extension_header_longer_than_frame():
    # length octet says 255 words: the walker stops before GTP-U instead of reading past the end
    frame = raw(P.gpdu(size=200, ext=[P.ext_header(P.EXT_UDP_PORT, b"\x12\x34", length=255)]))
    assert _kinds(frame) == ["eth", "ipv4", "udp"]
    zero = raw(P.gpdu(size=200, ext=[P.ext_header(P.EXT_UDP_PORT, b"\x12\x34", length=0)]))
    assert _kinds(zero) == ["eth", "ipv4", "udp"]


def test_not_ipv4():
    assert _kinds(raw(P.ipv6_packet())) == ["eth"]
    assert _kinds(raw(P.arp_request())) == ["eth"]
    assert walk.headers(b"\0" * 13) == []
