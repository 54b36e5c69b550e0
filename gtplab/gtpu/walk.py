"""The one walker of GTP-U headers in raw frame bytes: where each header of an
Ethernet [/VLAN...] /IPv4 [/UDP 2152 /GTP-U [ext...] /IPv4]... /UDP|TCP frame starts.

Used by the traffic engine (gtplab.traffic.engine.vm: which L4 checksums to keep right when it
writes a stream's trailer) and by tests that look into captured frames. Pure bytes, no Scapy: the
engine runs it in processes that must not load Scapy (gtplab/gtpu/packets.py builds packets with
Scapy; tests/lib/oracle.py is an independent model on purpose and does not use this).

A frame that is cut short or is not one of the above yields the headers found before that point.
With ipv6=True an IPv6 header (fixed 40 bytes, its next header UDP or TCP: no extension headers)
is walked wherever an IPv4 one is (Ethernet type 0x86dd, or an IPv6 G-PDU inside GTP-U: issue 32);
without it an IPv6 frame yields its Ethernet header only, as before.
"""

from __future__ import annotations

from typing import NamedTuple

GTPU_PORT = 2152                 # TS 29.281 section 4.4.2
ETH_P_IPV4 = 0x0800
ETH_P_IPV6 = 0x86DD
VLAN_TPIDS = (0x8100, 0x88A8)
MAX_IPV4 = 4                     # IPv4 headers walked at the most (outer + nested tunnels)


class Header(NamedTuple):
    kind: str    # "eth", "vlan", "ipv4", "ipv6", "udp", "tcp", "gtpu" (its optional fields and extensions included)
    off: int     # where it starts in the frame
    len: int     # its length in bytes


class L4Checksum(NamedTuple):
    csum_off: int   # the checksum field
    l4: int         # where the UDP/TCP header starts
    udp: bool       # UDP (else TCP)


def headers(frame: bytes, ipv6: bool = False) -> list[Header]:
    """Every header of the frame, outermost first, up to the first UDP/TCP that is not GTP-U's;
    ipv6: IPv6 headers too (see above)."""
    n = len(frame)
    if n < 14:
        return []
    out = [Header("eth", 0, 14)]
    etype = int.from_bytes(frame[12:14], "big")
    off = 14
    while etype in VLAN_TPIDS and off + 4 <= n:
        out.append(Header("vlan", off, 4))
        etype = int.from_bytes(frame[off + 2:off + 4], "big")
        off += 4
    if etype == ETH_P_IPV4:
        want = 4
    elif etype == ETH_P_IPV6 and ipv6:
        want = 6
    else:
        return out
    for _ in range(MAX_IPV4):
        if off >= n:
            return out
        ver = frame[off] >> 4
        if want and ver != want:
            return out
        want = 0                       # inside GTP-U: the version nibble says which
        if ver == 4 and off + 20 <= n:
            ihl = (frame[off] & 0xF) * 4
            out.append(Header("ipv4", off, ihl))
            proto = frame[off + 9]
            l4 = off + ihl
        elif ver == 6 and ipv6 and off + 40 <= n:
            out.append(Header("ipv6", off, 40))
            proto = frame[off + 6]
            l4 = off + 40
        else:
            return out
        if proto == 6 and l4 + 20 <= n:
            out.append(Header("tcp", l4, (frame[l4 + 12] >> 4) * 4))
            return out
        if proto != 17 or l4 + 8 > n:
            return out
        out.append(Header("udp", l4, 8))
        if int.from_bytes(frame[l4 + 2:l4 + 4], "big") != GTPU_PORT:
            return out
        g = l4 + 8
        if g + 8 > n:
            return out
        off = g + 8
        if frame[g] & 0x07:            # E, S or PN: 4 more bytes, then extension headers
            off += 4
            if off > n:
                return out
            nxt = frame[off - 1]
            while nxt:                 # each: length in 4-octet units, content, next type
                length = frame[off] * 4 if off < n else 0
                if length == 0 or off + length > n:
                    return out
                nxt = frame[off + length - 1]
                off += length
        out.append(Header("gtpu", g, off - g))
    return out


def l4_checksums(frame: bytes, ipv6: bool = False) -> list[L4Checksum]:
    """The UDP/TCP checksum fields of the frame, outermost first."""
    return [L4Checksum(h.off + (6 if h.kind == "udp" else 16), h.off, h.kind == "udp")
            for h in headers(frame, ipv6) if h.kind in ("udp", "tcp")]
