"""The engine's classifier of frames that are not a stream's (tg_classify, trafficgen.bpf.c), run with
BPF_PROG_TEST_RUN: tg_rx counts each received frame without a known stream trailer under its kind, a
frame with one as the stream's only; tg_bg_out (tcx egress) counts what a port's stack sends by the
same kinds and lets it go. One row per kind: {description, frame, kind}. No interface, no namespace.
"""

from __future__ import annotations

import struct

import pytest
from scapy.all import ARP, ICMP, IP, TCP, UDP, Dot1Q, Ether, IPv6, Raw, raw
from scapy.layers.inet6 import (ICMPv6DestUnreach, ICMPv6EchoRequest, ICMPv6MLReport2, ICMPv6ND_NA, ICMPv6ND_RA,
                               ICMPv6TimeExceeded, IPv6ExtHdrHopByHop)

from gtplab.kernel import bpf
from gtplab.kernel import libbpf as kernel
from gtplab.traffic.engine.port import BPF_OBJ
from gtplab.traffic.engine.stats import BG_KINDS

TRAILER = struct.Struct("<HHIQ")     # struct tg_trailer
E = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
LLDP = raw(Ether(dst="01:80:c2:00:00:0e", src="02:00:00:00:00:01", type=0x88CC) / Raw(b"\x02\x07\x04" + b"\0" * 20))

ROWS = [
    ("ARP request", raw(Ether(dst="ff:ff:ff:ff:ff:ff") / ARP(pdst="10.0.0.1")), "arp"),
    ("LLDPDU", LLDP, "lldp"),
    ("IPv6 neighbour advertisement", raw(E / IPv6(dst="ff02::1") / ICMPv6ND_NA(tgt="fe80::1")), "nd"),
    ("IPv6 router advertisement", raw(E / IPv6(dst="ff02::1") / ICMPv6ND_RA()), "nd"),
    ("ICMPv6 echo request", raw(E / IPv6(dst="fe80::1") / ICMPv6EchoRequest()), "icmp6"),
    ("MLDv2 report behind a hop-by-hop header", raw(E / IPv6(dst="ff02::16") / IPv6ExtHdrHopByHop()
                                                   / ICMPv6MLReport2()), "icmp6"),
    ("IPv6 TCP", raw(E / IPv6(dst="fe80::1") / TCP()), "ipv6"),
    ("IPv6 UDP", raw(E / IPv6(dst="fe80::1") / UDP(dport=9) / Raw(b"x" * 20)), "udp"),
    ("IPv4 ICMP", raw(E / IP(dst="10.0.0.1") / ICMP()), "ipv4"),
    ("IPv4 UDP without a trailer", raw(E / IP(dst="10.0.0.1") / UDP(dport=9) / Raw(b"x" * 20)), "udp"),
    ("IPv4 UDP with an unknown stream's trailer", raw(E / IP(dst="10.0.0.1") / UDP(dport=9)
                                                     / Raw(b"x" * 20 + TRAILER.pack(0x4C47, 99, 0, 0))), "udp"),
    ("VLAN-tagged IPv4", raw(E / Dot1Q(vlan=5) / IP(dst="10.0.0.1") / UDP()), "other"),
    ("truncated IPv4", raw(E)[:12] + b"\x08\x00\x45", "ipv4"),      # ethertype IPv4, 1 byte of header
]


@pytest.fixture(scope="module")
def obj():
    o = kernel.BpfObject(BPF_OBJ)
    # a known stream: pg_id 10 (user space registers every stream's id before start)
    m = o.map("rx_flow")
    m.update(struct.pack("<I", 10), bytes(m.value_size), bpf.BPF_NOEXIST)
    yield o
    o.close()


def _bg(o, name, off):
    v = o.map(name).lookup(b"\0\0\0\0")
    return {k: sum(struct.unpack_from("<Q", c, off + 8 * i)[0] for c in v) for i, k in enumerate(BG_KINDS)}


def _run(o, prog, frame):
    return bpf.Prog(o.prog_fd(prog), prog).test_run(frame)


@pytest.mark.bpf
@pytest.mark.parametrize("what,frame,kind", ROWS, ids=[r[0] for r in ROWS])
def test_a_received_frame_without_a_streams_trailer_counts_under_its_kind(obj, what, frame, kind):
    before = _bg(obj, "rx_port", 32)
    r = _run(obj, "tg_rx", frame)
    got = {k: n - before[k] for k, n in _bg(obj, "rx_port", 32).items() if n != before[k]}
    assert got == {kind: 1}, (what, got)
    assert r.retval == (2 if kind == "arp" else 1)          # XDP_PASS for ARP, else XDP_DROP


# (BPF_PROG_TEST_RUN refuses an skb whose IPv4 header is cut: a stack sends none)
SENT = [r for r in ROWS if not r[0].startswith("truncated")]


@pytest.mark.bpf
@pytest.mark.parametrize("what,frame,kind", SENT, ids=[r[0] for r in SENT])
def test_a_frame_the_stack_sends_counts_under_its_kind_and_goes(obj, what, frame, kind):
    before = _bg(obj, "bg_out", 0)
    r = _run(obj, "tg_bg_out", frame)
    got = {k: n - before[k] for k, n in _bg(obj, "bg_out", 0).items() if n != before[k]}
    assert got == {kind: 1}, (what, got)
    assert r.retval == 0xFFFFFFFF                            # TCX_NEXT: the frame goes on


@pytest.mark.bpf
def test_a_frame_with_a_known_streams_trailer_is_the_streams_not_background(obj):
    frame = raw(E / IP(dst="10.0.0.1") / UDP(dport=9) / Raw(b"x" * 20 + TRAILER.pack(0x4C47, 10, 0, 0)))
    before = _bg(obj, "rx_port", 32)
    _run(obj, "tg_rx", frame)
    assert _bg(obj, "rx_port", 32) == before
    flow = obj.map("rx_flow").lookup(struct.pack("<I", 10))
    assert struct.unpack_from("<Q", flow, 0)[0] >= 1


def _streams_packet(ipv6: bool) -> bytes:
    """A packet of the known stream (pg_id 10) as sent, its trailer at the end."""
    body = UDP(sport=40000, dport=5001) / Raw(b"x" * 60 + TRAILER.pack(0x4C47, 10, 0, 0))
    return raw((IPv6(src="fd47:7471::1", dst="fd47:7470::1") if ipv6 else IP(src="198.18.0.1", dst="10.64.0.1"))
               / body)


# ICMP errors a kernel sends about a stream's packet: they quote it whole (RFC 1812 4.3.2.3: up to 576
# octets; RFC 4443 2.4: up to 1280), so the last octets of the frame are the stream's trailer
QUOTING = [
    ("ICMPv6 destination unreachable quoting a stream's packet",
     raw(E / IPv6(src="fd47:7472::1", dst="fd47:7471::1") / ICMPv6DestUnreach(code=0) / _streams_packet(True)),
     "icmp6"),
    ("ICMPv6 time exceeded quoting a stream's packet",
     raw(E / IPv6(src="fd47:7472::1", dst="fd47:7471::1") / ICMPv6TimeExceeded() / _streams_packet(True)), "icmp6"),
    ("ICMP port unreachable quoting a stream's packet",
     raw(E / IP(src="10.202.0.1", dst="198.18.0.1") / ICMP(type=3, code=3) / _streams_packet(False)), "ipv4"),
    ("ICMP time exceeded quoting a stream's packet",
     raw(E / IP(src="10.202.0.1", dst="198.18.0.1") / ICMP(type=11) / _streams_packet(False)), "ipv4"),
]


@pytest.mark.bpf
@pytest.mark.parametrize("what,frame,kind", QUOTING, ids=[r[0] for r in QUOTING])
def test_an_icmp_error_quoting_a_streams_packet_is_background_not_the_stream(obj, what, frame, kind):
    """The trailer at the end of an ICMP error is the quoted packet's: the error is counted under its
    kind, never as a packet of the stream (eUPF passed IPv6 packets to its kernel, whose ICMPv6
    errors were counted as 25 of 400 packets forwarded before)."""
    flow0 = struct.unpack_from("<Q", obj.map("rx_flow").lookup(struct.pack("<I", 10)), 0)[0]
    before = _bg(obj, "rx_port", 32)
    _run(obj, "tg_rx", frame)
    got = {k: n - before[k] for k, n in _bg(obj, "rx_port", 32).items() if n != before[k]}
    assert got == {kind: 1}, (what, got)
    assert struct.unpack_from("<Q", obj.map("rx_flow").lookup(struct.pack("<I", 10)), 0)[0] == flow0, what


@pytest.mark.bpf
@pytest.mark.parametrize("echo", ["ICMPv6 echo request", "ICMP echo request"])
def test_an_icmp_echo_of_a_stream_is_the_streams(obj, echo):
    """Only errors quote: an echo request with the stream's trailer is the stream's packet."""
    tail = Raw(b"x" * 40 + TRAILER.pack(0x4C47, 10, 0, 0))
    frame = raw(E / IPv6(dst="fd47:7471::1") / ICMPv6EchoRequest() / tail) if "v6" in echo else \
        raw(E / IP(dst="198.18.0.1") / ICMP(type=8) / tail)
    flow0 = struct.unpack_from("<Q", obj.map("rx_flow").lookup(struct.pack("<I", 10)), 0)[0]
    before = _bg(obj, "rx_port", 32)
    _run(obj, "tg_rx", frame)
    assert _bg(obj, "rx_port", 32) == before
    assert struct.unpack_from("<Q", obj.map("rx_flow").lookup(struct.pack("<I", 10)), 0)[0] == flow0 + 1
