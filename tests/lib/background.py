"""Background frames, defined once (tests/measure/test_background.py, tests/trex/test_background.py,
tests/trex/test_trex_lab.py): what a real link carries beside the test's frames, by the kind the
generator counts it as, and a packet socket to write them on a namespace's interface."""

from __future__ import annotations

import socket
import struct

from scapy.all import ARP, IP, UDP, Ether, IPv6, Raw, raw
from scapy.layers.inet6 import ICMPv6ND_NS, ICMPv6ND_RS

from gtplab.kernel import netns


def lldp(src: str) -> bytes:
    """An LLDPDU (IEEE 802.1AB): chassis ID (MAC), port ID (name), TTL 120, end."""
    def tlv(t, v):
        return struct.pack("!H", t << 9 | len(v)) + v
    body = (tlv(1, b"\x04" + bytes.fromhex(src.replace(":", ""))) + tlv(2, b"\x05bg34")
            + tlv(3, struct.pack("!H", 120)) + tlv(0, b""))
    return raw(Ether(dst="01:80:c2:00:00:0e", src=src, type=0x88CC) / Raw(body))


def background_frames(src_mac: str, dst_mac: str, src_ip: str, dst_ip: str) -> dict[str, list[bytes]]:
    """Background from one end of a link, by the kind the generator counts it as: an ARP request
    for the other end, an IPv6 router and a neighbour solicitation, an LLDPDU, a UDP datagram to
    the other end's discard port."""
    return {
        "arp": [raw(Ether(dst="ff:ff:ff:ff:ff:ff", src=src_mac) / ARP(op=1, hwsrc=src_mac, psrc=src_ip,
                                                                       pdst=dst_ip))],
        "nd": [raw(Ether(dst="33:33:00:00:00:02", src=src_mac) / IPv6(src="fe80::b634", dst="ff02::2")
                   / ICMPv6ND_RS()),
               raw(Ether(dst="33:33:ff:00:00:99", src=src_mac) / IPv6(src="fe80::b634", dst="ff02::1:ff00:99")
                   / ICMPv6ND_NS(tgt="fe80::99"))],
        "lldp": [lldp(src_mac)],
        "udp": [raw(Ether(dst=dst_mac, src=src_mac) / IP(src=src_ip, dst=dst_ip) / UDP(sport=40000, dport=9)
                    / Raw(b"bg34 stray datagram"))],
    }


def packet_socket(ns: str, ifname: str) -> socket.socket:
    """A packet socket on ifname in netns ns (a socket stays in the netns it was made in)."""
    def make():
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
        s.bind((ifname, 0))
        return s
    return netns.run_in(ns, make)
