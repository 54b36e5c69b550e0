"""The socket-path lab's tc program (gtplab/dut/tc_drop_dst.bpf.c, loaded by
gtplab.kernel.bpf.tc_drop_dst_prog) run with BPF_PROG_TEST_RUN on a table of frames: each row is
{description, prefix, frame, expected verdict}. Every row also runs on the hand-assembled program it
replaced (its 14 instructions kept here, as they were in gtplab/kernel/bpf.py), so the C program is
seen to behave as the old one did on every case."""

from __future__ import annotations

import ipaddress
import struct

import pytest
from scapy.all import ARP, IP, TCP, UDP, Dot1Q, Ether, IPv6, Raw, raw

from gtplab.kernel import bpf

pytestmark = pytest.mark.bpf

TC_ACT_OK, TC_ACT_SHOT = 0, 2
POOL = "10.64.0.0/12"


def old_prog(prefix: str) -> bpf.Prog:
    """The hand-assembled program tc_drop_dst_prog loaded before the .bpf.c (the reference)."""
    net = ipaddress.ip_network(prefix, strict=True)

    def le(a) -> int:
        return struct.unpack("=i", a.packed)[0]

    def ins(op, dst=0, src=0, off=0, imm=0):
        return struct.pack("<BBhi", op, dst | src << 4, off, imm)
    insns = b"".join([
        ins(0x61, 2, 1, 76), ins(0x61, 3, 1, 80), ins(0xbf, 4, 2), ins(0x07, 4, 0, 0, 34),
        ins(0x2d, 4, 3, 7), ins(0x69, 5, 2, 12), ins(0x55, 5, 0, 5, 0x0008), ins(0x61, 5, 2, 30),
        ins(0x54, 5, 0, 0, le(net.netmask)), ins(0x56, 5, 0, 2, le(net.network_address)),
        ins(0xb7, 0, 0, 0, 2), ins(0x95), ins(0xb7, 0, 0, 0, 0), ins(0x95),
    ])
    return bpf.Prog(bpf.prog_load(bpf.BPF_PROG_TYPE_SCHED_CLS, insns, "tc_drop_old"), "tc_drop_old")


ETH = Ether(dst="02:00:00:00:00:02", src="02:00:00:00:00:01")
ROWS = [
    ("to the pool, first address", POOL, ETH / IP(src="192.0.2.1", dst="10.64.0.0") / UDP(), TC_ACT_SHOT),
    ("to the pool, last address", POOL, ETH / IP(src="192.0.2.1", dst="10.79.255.255") / UDP(), TC_ACT_SHOT),
    ("to the pool, TCP", POOL, ETH / IP(src="192.0.2.1", dst="10.70.1.2") / TCP(), TC_ACT_SHOT),
    ("to the pool, bare IPv4 header", POOL, ETH / IP(src="192.0.2.1", dst="10.64.0.9", proto=253), TC_ACT_SHOT),
    ("just below the pool", POOL, ETH / IP(dst="10.63.255.255") / UDP(), TC_ACT_OK),
    ("just above the pool", POOL, ETH / IP(dst="10.80.0.0") / UDP(), TC_ACT_OK),
    ("from the pool, elsewhere", POOL, ETH / IP(src="10.64.0.1", dst="198.18.0.1") / UDP(), TC_ACT_OK),
    ("IPv6", POOL, ETH / IPv6(dst="2001:db8::1") / UDP(), TC_ACT_OK),
    ("ARP for a pool address", POOL, ETH / ARP(pdst="10.64.0.1"), TC_ACT_OK),
    ("VLAN tag still on (not at tcx ingress)", POOL, ETH / Dot1Q(vlan=5) / IP(dst="10.64.0.1") / UDP(), TC_ACT_OK),
    # a frame shorter than Ethernet + IPv4 (BPF_PROG_TEST_RUN refuses one with the IPv4 EtherType)
    ("frame too short for an IPv4 header", POOL, raw(ETH / ARP(pdst="10.64.0.1"))[:33], TC_ACT_OK),
    ("IPv4 EtherType, destination in the last byte", POOL, raw(ETH / IP(dst="10.64.0.1"))[:34], TC_ACT_SHOT),
    ("a /32, that address", "192.0.2.7/32", ETH / IP(dst="192.0.2.7") / UDP(), TC_ACT_SHOT),
    ("a /32, its neighbour", "192.0.2.7/32", ETH / IP(dst="192.0.2.6") / UDP(), TC_ACT_OK),
    ("/0: every IPv4 packet", "0.0.0.0/0", ETH / IP(dst="203.0.113.1") / Raw(b"x" * 100), TC_ACT_SHOT),
    ("/0: not IPv6", "0.0.0.0/0", ETH / IPv6() / UDP(), TC_ACT_OK),
    ("odd prefix /25", "198.51.100.128/25", ETH / IP(dst="198.51.100.200") / UDP(), TC_ACT_SHOT),
    ("odd prefix /25, lower half", "198.51.100.128/25", ETH / IP(dst="198.51.100.127") / UDP(), TC_ACT_OK),
]


@pytest.fixture(scope="module")
def progs():
    made: dict[str, tuple[bpf.Prog, bpf.Prog]] = {}
    yield lambda prefix: made.setdefault(prefix, (bpf.tc_drop_dst_prog(prefix), old_prog(prefix)))
    for new, old in made.values():
        new.close()
        old.close()


@pytest.mark.parametrize("what,prefix,frame,want", ROWS, ids=[r[0] for r in ROWS])
def test_tc_drop_dst_as_the_hand_assembled_program(progs, what, prefix, frame, want):
    new, old = progs(prefix)
    data = bytes(frame)
    got_new, got_old = new.test_run(data), old.test_run(data)
    assert (got_new.retval, got_old.retval) == (want, want), \
        f"{what}: {frame!r}: C program {got_new.retval}, hand-assembled {got_old.retval}, want {want}"
    assert got_new.data == got_old.data == data      # neither changes the frame


def test_tc_drop_dst_is_a_sched_cls_program_with_the_prefix_in_rodata():
    with bpf.tc_drop_dst_prog(POOL, "sgi_drop_pool") as p:
        info = p.info()
        assert (info.type, info.name, p.name) == (bpf.BPF_PROG_TYPE_SCHED_CLS, b"tc_drop_dst", "sgi_drop_pool")
    with pytest.raises(ValueError):
        bpf.tc_drop_dst_prog("10.64.0.1/12")     # host bits set: refused, as before


UE6 = "fd47:7470::/32"
ROWS6 = [
    ("IPv6 to the UE range", ETH / IPv6(src="fd47:7471::1", dst="fd47:7470:0:1::1") / UDP(), TC_ACT_SHOT),
    ("IPv6 to the range's last /64", ETH / IPv6(dst="fd47:7470:ffff:ffff:ffff::9") / UDP(), TC_ACT_SHOT),
    ("IPv6 just above the range", ETH / IPv6(dst="fd47:7471::1") / UDP(), TC_ACT_OK),
    ("IPv6 link-local (the kernel's neighbours)", ETH / IPv6(dst="fe80::1") / UDP(), TC_ACT_OK),
    ("IPv6 from the range, elsewhere", ETH / IPv6(src="fd47:7470:0:1::1", dst="fd47:7471::1") / UDP(), TC_ACT_OK),
    ("IPv4 to the pool, as before", ETH / IP(dst="10.64.0.1") / UDP(), TC_ACT_SHOT),
    ("IPv4 outside the pool, as before", ETH / IP(dst="198.18.0.1") / UDP(), TC_ACT_OK),
]


@pytest.mark.parametrize("what,frame,want", ROWS6, ids=[r[0] for r in ROWS6])
def test_tc_drop_dst_with_an_ipv6_prefix(what, frame, want):
    """With prefix6 (the socket-path lab's UE range) IPv6 packets to it are dropped too, nothing else;
    without it (the rows above) IPv6 is never dropped."""
    with bpf.tc_drop_dst_prog(POOL, prefix6=UE6) as p:
        got = p.test_run(bytes(frame))
    assert got.retval == want, f"{what}: {frame!r}: {got.retval}, want {want}"


def test_tc_drop_dst_ipv6_prefix_at_most_a_64():
    with pytest.raises(ValueError):
        bpf.tc_drop_dst_prog(POOL, prefix6="fd47:7470:0:1::/96")
