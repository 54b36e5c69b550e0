"""TRex's side of conservation with background frames (gtplab/traffic/trex/background.py), without
a TRex: the kinds as the embedded engine counts them, the capture's BPF filter (compiled and run by
libpcap, as TRex's receive core runs it), and a TRex trial recorded in the namespace lab
(data/trex_trial_background.json: TRex's port stats, its background capture with TRex's status and
frames, each port's MAC, the DUT's counters; recorded with background frames injected as in
test_trex_lab.py's test_trex_conservation_is_exact_with_background_frames) balanced exactly, and
unbalanced by one lost test frame. The live test is that one, in the lab."""

from __future__ import annotations

import base64
import ctypes
import ctypes.util
import json
from pathlib import Path

import pytest
from scapy.all import ARP, ICMP, IP, TCP, UDP, Dot1Q, Ether, IPv6, Raw, raw
from scapy.contrib.gtp import GTP_U_Header, GTPEchoRequest, GTPHeader
from scapy.layers.inet6 import (ICMPv6EchoRequest, ICMPv6MLReport2, ICMPv6ND_NA, ICMPv6ND_NS, ICMPv6ND_RA,
                                ICMPv6ND_Redirect, ICMPv6ND_RS, IPv6ExtHdrHopByHop, RouterAlert)

from gtplab.measure import conservation, runner
from gtplab.traffic.trex import background as B
from tests.lib.background import background_frames, lldp

RECORDED = json.loads((Path(__file__).parent / "data/trex_trial_background.json").read_text())
A, Z = "02:00:00:00:00:01", "02:00:00:00:00:02"


def test_the_kinds_are_the_engines():
    from gtplab.traffic.engine.stats import BG_KINDS
    assert B.KINDS == BG_KINDS


KIND_ROWS = [
    ("arp request", raw(Ether(src=A) / ARP(op=1, psrc="10.0.0.1", pdst="10.0.0.2")), "arp"),
    ("lldp", lldp(A), "lldp"),
    ("router solicitation", raw(Ether(src=A) / IPv6(src="fe80::1", dst="ff02::2") / ICMPv6ND_RS()), "nd"),
    ("router advertisement", raw(Ether(src=A) / IPv6(src="fe80::1", dst="ff02::1") / ICMPv6ND_RA()), "nd"),
    ("neighbour solicitation", raw(Ether(src=A) / IPv6(src="fe80::1") / ICMPv6ND_NS(tgt="fe80::2")), "nd"),
    ("neighbour advertisement", raw(Ether(src=A) / IPv6(src="fe80::1") / ICMPv6ND_NA(tgt="fe80::1")), "nd"),
    ("redirect", raw(Ether(src=A) / IPv6(src="fe80::1") / ICMPv6ND_Redirect()), "nd"),
    ("MLDv2 report behind hop-by-hop", raw(Ether(src=A) / IPv6(src="fe80::1", dst="ff02::16")
                                           / IPv6ExtHdrHopByHop(options=[RouterAlert()]) / ICMPv6MLReport2()), "icmp6"),
    ("ICMPv6 echo", raw(Ether(src=A) / IPv6(src="fe80::1", dst="fe80::2") / ICMPv6EchoRequest()), "icmp6"),
    ("IPv6 TCP", raw(Ether(src=A) / IPv6(src="fe80::1", dst="fe80::2") / TCP()), "ipv6"),
    ("IPv6 UDP", raw(Ether(src=A) / IPv6(src="fe80::1", dst="fe80::2") / UDP(dport=9)), "udp"),
    ("IPv4 ICMP", raw(Ether(src=A) / IP(src="10.0.0.1", dst="10.0.0.2") / ICMP()), "ipv4"),
    ("IPv4 UDP", raw(Ether(src=A) / IP(src="10.0.0.1", dst="10.0.0.2") / UDP(dport=9)), "udp"),
    ("802.1Q tagged", raw(Ether(src=A) / Dot1Q(vlan=5) / IP() / UDP()), "other"),
    ("runt", b"\x01\x02\x03", "other"),
]


@pytest.mark.parametrize("what,frame,kind", KIND_ROWS, ids=[r[0] for r in KIND_ROWS])
def test_a_frame_is_classified_as_the_engine_counts_it(what, frame, kind):
    assert B.classify(frame) == kind, what


# ---------------------------------------------------------------- the capture's filter, run by libpcap

class _PktHdr(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_usec", ctypes.c_long), ("caplen", ctypes.c_uint32),
                ("len", ctypes.c_uint32)]


def _matches(expr: str):
    """expr compiled by libpcap for Ethernet, and a function frame -> whether the filter takes it
    (pcap_offline_filter: the program as a capture runs it)."""
    from scapy.arch.common import compile_filter
    name = ctypes.util.find_library("pcap")
    if not name:
        pytest.skip("libpcap is not installed (apt-get install libpcap0.8)")
    lib = ctypes.CDLL(name)
    prog = compile_filter(expr, linktype=1)
    lib.pcap_offline_filter.restype = ctypes.c_int

    def match(frame: bytes) -> bool:
        h = _PktHdr(0, 0, len(frame), len(frame))
        buf = ctypes.create_string_buffer(frame, len(frame))
        return lib.pcap_offline_filter(ctypes.byref(prog), ctypes.byref(h), buf) != 0
    return match


UE, PDN, SGW, PGW = "10.64.0.1", "198.18.0.1", "10.201.0.2", "10.201.0.1"


def _decapsulated(ip=4, vlan=None):
    """The uplink's test frame as the PGW-U sends it to TRex's SGi port (the profile's user packet)."""
    l3 = IP(src=UE, dst=PDN) if ip == 4 else IPv6(src="fd00::1", dst="fd01::1")
    eth = Ether(src=Z, dst=A) / Dot1Q(vlan=vlan) if vlan else Ether(src=Z, dst=A)
    return raw(eth / l3 / UDP(sport=1025, dport=B.DEFAULT_DPORT) / Raw(b"x" * 64))


def _encapsulated(outer=4):
    """The downlink's test frame as the PGW-U sends it to TRex's access port: a G-PDU."""
    o = IP(src=PGW, dst=SGW) if outer == 4 else IPv6(src="fd47::1", dst="fd47::2")
    return raw(Ether(src=Z, dst=A) / o / UDP(sport=2152, dport=2152) / GTP_U_Header(teid=7, gtp_type=255)
               / IP(src=PDN, dst=UE) / UDP(sport=5001, dport=1025) / Raw(b"x" * 64))


def _second_fragment():
    return raw(Ether(src=Z, dst=A) / IP(src=PGW, dst=SGW, proto=17, frag=185) / Raw(b"x" * 100))


BACKGROUND = [f for kinds in background_frames(Z, A, "10.0.0.2", "10.0.0.1").values() for f in kinds]


@pytest.mark.parametrize("direction", ["uplink", "downlink"])
def test_the_capture_takes_every_background_frame_and_none_of_the_tests(direction):
    take = _matches(B.capture_filter(direction))
    tests = ([_decapsulated(4), _decapsulated(6), _decapsulated(4, vlan=100), _second_fragment()]
             if direction == "uplink" else [_encapsulated(4), _encapsulated(6), _second_fragment()])
    for f in tests:
        assert not take(f), Ether(f).summary()
    for f in BACKGROUND + [r[1] for r in KIND_ROWS if len(r[1]) >= 14]:    # (no runt on Ethernet)
        assert take(f), Ether(f).summary()
    # what looks alike but is not the test's: a GTP-U echo request on the access port, a datagram
    # to another port on the SGi port, the other direction's frames
    echo = raw(Ether(src=Z, dst=A) / IP(src=PGW, dst=SGW) / UDP(sport=2152, dport=2152)
               / GTPHeader(gtp_type=1) / GTPEchoRequest())
    other = raw(Ether(src=Z, dst=A) / IP(src=UE, dst=PDN) / UDP(sport=1025, dport=B.DEFAULT_DPORT + 1))
    for f in ([echo, other] + ([_encapsulated()] if direction == "uplink" else [_decapsulated()])):
        assert take(f), Ether(f).summary()


def test_another_destination_port_is_the_tests_when_the_case_says_so():
    take = _matches(B.capture_filter("uplink", dport=B.DEFAULT_DPORT + 1))
    other = raw(Ether(src=Z, dst=A) / IP(src=UE, dst=PDN) / UDP(sport=1025, dport=B.DEFAULT_DPORT + 1))
    assert not take(other) and take(_decapsulated())


# ----------------------------------------------------------------- a recorded TRex trial, replayed

def _recorded():
    rec = json.loads(json.dumps(RECORDED))
    st = {int(p): v for p, v in rec["stats"].items()}
    macs = {int(p): m for p, m in rec["macs"].items()}

    def counters(i):
        return {tuple(k.split("/")): v for k, v in rec["dut_counters"][i].items()}
    return rec, st, macs, counters(0), counters(1)


def test_the_recorded_capture_is_counted_by_port_and_source():
    """TRex's capture of the trial (its status and frames, as worker.background_fetch returns them):
    frames from the DUT's side on the receiving port are background received; those with the
    port's own MAC were sent by the generator host's stack, into the DUT's other port from the
    receiving port (and TRex counted them there too), into its ingress port from the sending one."""
    rec, st, macs, _, _ = _recorded()
    got = B.count(rec["capture"], rec["tx"], rec["rx"], macs)
    assert got["errors"] == []
    assert got["gen_rx"] == {"arp": 2, "nd": 2, "lldp": 1, "udp": 1, "ipv4": 1}
    assert got["to_dut_in"] == {"arp": 1, "nd": 2, "lldp": 1, "udp": 1}
    assert got["to_dut_other"] == {"arp": 1, "ipv4": 1}
    # TRex's port counters hold the background too: the sending port received the DUT's ARP reply
    # and what its own host sent (af_packet), which count() keeps apart
    assert st[rec["tx"]]["ipackets"] == sum(got["to_dut_in"].values()) + sum(got["tx_port_rx"].values())


def test_a_capture_that_overflowed_is_an_error_not_the_tests():
    rec, _, macs, _, _ = _recorded()
    cap = rec["capture"]
    cap["status"]["matched"] = len(cap["pkts"]) + 3
    got = B.count(cap, rec["tx"], rec["rx"], macs)
    assert got["errors"] and "3 background frames" in got["errors"][0]


def _balance(st, tx, rx, bg, before, after):
    if bg is not None:
        runner.trex_background_into(st, tx, rx, bg)
    dd = conservation.DutDelta.from_counters(before, after)
    return conservation.check(st[tx]["opackets"], st[rx]["ipackets"], dd, background=runner.background(st, tx, rx))


def test_the_recorded_trial_balances_exactly_with_its_background_and_not_without():
    """TRex's stats of the trial (receiving port's ipackets = the test's frames + 7 background), the
    DUT's counters (forwarded + 7 passed to its kernel: 5 from TRex's host into its ingress port, 2
    into its other port): exact with the background by kind; TRex's counters alone (before this
    module) leave it unexplained on every side; one test frame fewer at TRex is unexplained +1."""
    rec, st, macs, before, after = _recorded()
    tx, rx = rec["tx"], rec["rx"]
    bg = B.count(rec["capture"], tx, rx, macs)
    c = _balance({p: dict(v) for p, v in st.items()}, tx, rx, bg, before, after)
    assert c.ok, c.message()
    assert c.gen_rx == st[tx]["opackets"] and c.dut_background == 7, c.message()
    bare = _balance({p: dict(v) for p, v in st.items()}, tx, rx, None, before, after)
    assert not bare.ok and bare.message().count("(unexplained: -7)") == 2, bare.message()
    lost = {p: dict(v) for p, v in st.items()}
    lost[rx]["ipackets"] -= 1
    c = _balance(lost, tx, rx, bg, before, after)
    assert not c.ok and "(unexplained: +1)" in c.message(), c.message()


def test_a_background_frame_taken_for_the_tests_is_unexplained():
    """The filter's limit (docs/trex.md): a frame from the DUT's side that matches the test's
    signature is not captured, so TRex's receive count holds one frame more than the DUT forwarded."""
    rec, st, macs, before, after = _recorded()
    tx, rx = rec["tx"], rec["rx"]
    cap = rec["capture"]
    udp = next(i for i, p in enumerate(cap["pkts"])
               if B.classify(base64.b64decode(p["binary"])) == "udp" and p["port"] == rx)
    del cap["pkts"][udp]
    cap["status"]["matched"] -= 1
    c = _balance({p: dict(v) for p, v in st.items()}, tx, rx, B.count(cap, tx, rx, macs), before, after)
    assert not c.ok and "(unexplained: -1)" in c.message(), c.message()
