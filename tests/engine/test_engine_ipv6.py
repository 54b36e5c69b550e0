"""IPv6 user traffic in the embedded engine (issue 32 item 1): the GTP-U profiles with --ip 6 / 4v6,
loaded by TRex's client library (stream_loader), compiled by vm.py and run by tg_tx with
BPF_PROG_TEST_RUN (each output frame fed back in, as a recycled live frame), every frame checked
with Scapy: the inner IPv6 header, the UE's /64 per bearer, the servers, the lengths, and the UDP
checksum over the IPv6 pseudo header recomputed here (RFC 8200 8.1: mandatory, never 0); also
the full-sum path of fix_checksum_hw at an IPv6 header (no incremental plan) and walk.py's IPv6."""

from __future__ import annotations

import ipaddress

import pytest
from scapy.all import IP, TCP, UDP, Ether, raw
from scapy.contrib.gtp import GTP_U_Header
from scapy.layers.inet6 import IPv6

from gtplab.gtpu import walk
from gtplab.kernel import libbpf as kernel
from gtplab.traffic.engine import compile_stream, load_profile_streams, vm
from gtplab.traffic.engine.port import BPF_OBJ
from tests.lib.streams import ipv6_l4_ok as l4_csum_ok
from tests.lib.tg_run import full_sums, run

UP, DOWN = "trex_profiles/gtpu_uplink.py", "trex_profiles/gtpu_downlink.py"
TEID_BASE, SGW_BASE = 0x00010000, int(ipaddress.IPv4Address("10.201.0.16"))


@pytest.fixture(scope="module")
def obj():
    o = kernel.BpfObject(BPF_OBJ)
    yield o
    o.close()


def prefix_index(addr: str) -> int:
    """XXXX:YYYY of fd47:7470:XXXX:YYYY::/64 as an integer."""
    n = int(ipaddress.IPv6Address(addr))
    assert n >> 96 == 0xFD477470, addr
    return (n >> 64) & 0xFFFFFFFF


def streams(path, **t):
    return load_profile_streams(path, tunables=t)


def check_uplink6(frames, flows, size, sgws=4, outer_valid=True, seq=True):
    srcs, sports = set(), set()
    for n, f in enumerate(frames):
        assert len(f) == size - 4
        p = Ether(f)
        ip6 = p[GTP_U_Header].payload
        assert isinstance(ip6, IPv6), p.summary()
        i = prefix_index(ip6.src)
        if seq:
            assert i == n % flows, (n, ip6.src)
        assert p[GTP_U_Header].teid == TEID_BASE + i
        k = i % sgws
        assert int(ipaddress.IPv4Address(p[IP].src)) == SGW_BASE + k
        assert (ip6.version, ip6.nh, ip6.hlim, ip6.tc) == (6, 17, 64, 0)
        assert ip6.plen == len(f) - 50 - 40 == ip6[UDP].len
        assert p[GTP_U_Header].length == len(f) - 42 - 8
        assert p[IP].len == len(f) - 14 and p[IP].payload.len == len(f) - 34
        assert ipaddress.IPv6Address(ip6.dst) in ipaddress.IPv6Network("fd47:7471::/64")
        if seq:
            assert int(ipaddress.IPv6Address(ip6.dst)) & 0xFFFFFFFF == 1 + k
        assert l4_csum_ok(ip6), (n, p.summary())
        q = p.copy()
        q[IP].chksum = None
        assert Ether(raw(q))[IP].chksum == p[IP].chksum
        if outer_valid:
            q = p.copy()
            q[UDP].chksum = None
            assert p[UDP].chksum != 0 and Ether(raw(q))[UDP].chksum == p[UDP].chksum, n
        srcs.add(ip6.src)
        sports.add(ip6[UDP].sport)
    return srcs, sports


@pytest.mark.bpf
def test_uplink_ipv6_sw_frames_have_bearer_prefixes_and_valid_checksums(obj):
    """--ip 6, software checksums, outer UDP checksum valid: 2 cycles of 64 bearers."""
    (s,) = streams(UP, ip=6, size=256, flows=64, outer_udp_csum="valid")
    assert s["name"] == "uplink_256_ip6"
    cs = compile_stream(s)
    assert not [i for i in cs.insns if i.op == vm.OP_FIX_HW]     # by construction, no fix
    srcs, sports = check_uplink6(run(obj, s, n=128), 64, 256)
    assert len(srcs) == 64                   # every UE its own /64 and interface identifier
    assert sports == {1025, 1026, 1027, 1028}


@pytest.mark.bpf
@pytest.mark.parametrize("incremental", [True, False])
@pytest.mark.parametrize("extra", [dict(stats="latency"), dict(order="random"), dict(checksum="hw")])
def test_uplink_ipv6_fix_checksum_hw_at_the_inner_ipv6(obj, incremental, extra):
    """fix_checksum_hw at the inner IPv6 header (latency trailer, random order, --checksum hw),
    with the incremental plan and with full sums over the packet."""
    (s,) = streams(UP, ip=6, size=300, flows=32, **extra)
    cs = compile_stream(s)
    (fix,) = [i for i in cs.insns if i.op == vm.OP_FIX_HW]
    assert (fix.offset, fix.arg, fix.size) == (50, 40, 6)
    assert bool(fix.flags & vm.F_INCR)
    if not incremental:
        cs = full_sums(cs)
    check_uplink6(run(obj, s, n=70, cs=cs), 32, 300, outer_valid=False,
                  seq=extra.get("order") != "random")


@pytest.mark.bpf
@pytest.mark.parametrize("incremental", [True, False])
@pytest.mark.parametrize("t", [dict(size=66), dict(size=512, stats="latency", vlans=2),
                               dict(size=128, order="random", l4="tcp")])
def test_downlink_ipv6_frames_to_the_ue_prefixes(obj, incremental, t):
    (s,) = streams(DOWN, ip=6, flows=32, pdn_addrs=8, **t)
    cs = compile_stream(s)
    if not incremental:
        cs = full_sums(cs)
    frames = run(obj, s, n=70, cs=cs)
    servers = set()
    for n, f in enumerate(frames):
        assert len(f) == t["size"] - 4
        p = Ether(f)
        ip6 = p[IPv6]
        i = prefix_index(ip6.dst)
        if "order" not in t:
            assert i == n % 32
        assert 0 <= i < 32 and int(ipaddress.IPv6Address(ip6.dst)) & ((1 << 64) - 1) == 1
        assert (ip6.version, ip6.hlim, ip6.nh) == (6, 64, 6 if t.get("l4") == "tcp" else 17)
        l3 = 18 if t.get("vlans") else 14
        assert ip6.plen == len(f) - l3 - 40
        src = int(ipaddress.IPv6Address(ip6.src))
        assert src >> 64 == 0xFD47747100000000 and 1 <= src & 0xFFFFFFFF <= 8
        servers.add(src)
        assert l4_csum_ok(ip6), (n, p.summary())
        if isinstance(ip6.payload, TCP):
            assert ip6.payload.flags == "A"
    assert len(servers) == 8


@pytest.mark.bpf
def test_4v6_sends_one_stream_of_each_family(obj):
    s4, s6 = streams(UP, ip="4v6", size=256, flows=16)
    assert (s4["name"], s6["name"]) == ("uplink_256", "uplink_256_ip6")
    assert s4["mode"]["rate"] == s6["mode"]["rate"]
    assert isinstance(Ether(run(obj, s4, n=1)[0])[GTP_U_Header].payload, IP)
    check_uplink6(run(obj, s6, n=32), 16, 256, outer_valid=False)
    d4, d6 = streams(DOWN, ip="4v6", size=128, flows=16)
    assert Ether(run(obj, d4, n=1)[0]).type == 0x0800
    assert Ether(run(obj, d6, n=1)[0]).type == 0x86DD


def test_ip4_default_streams_unchanged():
    """--ip 4 is the default and builds the very same streams (names, bytes, programs)."""
    for path, t in ((UP, dict(size=256, flows=16, stats="latency")), (DOWN, dict(size=64))):
        assert streams(path, **t) == streams(path, ip=4, **t)
        (s,) = streams(path, **t)
        assert "_ip6" not in s["name"]


def test_walk_finds_inner_ipv6_only_when_asked():
    (s,) = streams(UP, ip=6, size=256, flows=4)
    frame = compile_stream(s).frame
    assert [h.kind for h in walk.headers(frame)] == ["eth", "ipv4", "udp", "gtpu"]
    assert [h.kind for h in walk.headers(frame, ipv6=True)] == ["eth", "ipv4", "udp", "gtpu", "ipv6", "udp"]
    assert walk.l4_checksums(frame, ipv6=True)[-1] == walk.L4Checksum(96, 90, True)


def test_fix_checksum_hw_ipv6_refusals():
    (s,) = streams(DOWN, ip=6, size=128, flows=4)
    s["vm"]["instructions"][-1]["l3_len"] = 48
    with pytest.raises(vm.EngineError, match="IPv6 header without extension headers"):
        compile_stream(s)
