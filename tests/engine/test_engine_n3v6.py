"""GTP-U over IPv6 in the embedded engine (issue 32 item 2, --n3 6): the uplink profile loaded by
TRex's client library (stream_loader), compiled by vm.py and run by tg_tx with BPF_PROG_TEST_RUN
(each output frame fed back in, as a recycled live frame), every frame dissected with Scapy: the
outer IPv6 header (SGW fd47:7473::10 + i % sgws -> fd47:7473::1), its UDP checksum recomputed over
the IPv6 pseudo header (never 0: RFC 8200 8.1), GTP-U with bearer i's TEID, the inner packet and
its checksums, the engine's trailer where the stream has flow stats. And the receive side: tg_rx
takes a downlink G-PDU with an outer IPv6 header that ends in a stream's trailer as the stream's,
and one without as background UDP, as it does over IPv4."""

from __future__ import annotations

import ipaddress
import struct

import pytest
from scapy.all import IP, UDP, Ether, Raw, raw
from scapy.contrib.gtp import GTP_U_Header
from scapy.layers.inet6 import IPv6

from gtplab.gtpu import walk
from gtplab.kernel import bpf
from gtplab.kernel import libbpf as kernel
from gtplab.traffic.engine import compile_stream, load_profile_streams, vm
from gtplab.traffic.engine.port import BPF_OBJ
from gtplab.traffic.engine.stats import BG_KINDS
from tests.lib.streams import ipv6_l4_ok
from tests.lib.tg_run import full_sums, run

UP = "trex_profiles/gtpu_uplink.py"
TEID_BASE, UE_BASE = 0x00010000, int(ipaddress.IPv4Address("10.64.0.1"))
SGW6 = int(ipaddress.IPv6Address("fd47:7473::10"))
TRAILER = struct.Struct("<HHIQ")     # struct tg_trailer
MAGIC = 0x4C47


@pytest.fixture(scope="module")
def obj():
    o = kernel.BpfObject(BPF_OBJ)
    m = o.map("rx_flow")
    m.update(struct.pack("<I", 10), bytes(m.value_size), bpf.BPF_NOEXIST)    # a known stream, pg_id 10
    yield o
    o.close()


def streams(**t):
    return load_profile_streams(UP, tunables=dict(n3=6, outer_udp_csum="valid", **t))


def outer_ok(p) -> bool:
    q = p.copy()
    q[UDP].chksum = None
    return p[UDP].chksum != 0 and Ether(raw(q))[UDP].chksum == p[UDP].chksum


def inner4_ok(ip4) -> bool:
    q = ip4.copy()
    q.chksum = None
    q.payload.chksum = None
    r = IP(raw(q))
    return r.chksum == ip4.chksum and r.payload.chksum == ip4.payload.chksum


def check(frames, flows, size, sgws=4, trailer=False):
    for n, f in enumerate(frames):
        assert len(f) == size - 4
        p = Ether(f)
        assert p.type == 0x86DD
        o = p[IPv6]
        assert (o.version, o.nh, o.hlim, o.plen) == (6, 17, 64, len(f) - 54)
        assert (p[UDP].sport, p[UDP].dport, p[UDP].len) == (2152, 2152, len(f) - 54)
        assert outer_ok(p), (n, p.summary())
        g = p[GTP_U_Header]
        assert g.gtp_type == 255 and g.length == len(f) - 62 - 8
        inner = g.payload
        if isinstance(inner, IP):
            i = int(ipaddress.IPv4Address(inner.src)) - UE_BASE
            assert inner4_ok(inner), (n, p.summary())
        else:
            assert isinstance(inner, IPv6), p.summary()
            i = (int(ipaddress.IPv6Address(inner.src)) >> 64) & 0xFFFFFFFF
            assert ipv6_l4_ok(inner), (n, p.summary())
        assert i == n % flows and g.teid == TEID_BASE + i
        assert int(ipaddress.IPv6Address(o.src)) == SGW6 + i % sgws and o.dst == "fd47:7473::1"
        if trailer:
            magic, pg, seq, _ = TRAILER.unpack(f[-TRAILER.size:])
            assert (magic, pg, seq) == (MAGIC, 10, n)


@pytest.mark.bpf
@pytest.mark.parametrize("t", [dict(size=102, flows=64), dict(size=256, flows=16, stats="latency"),
                               dict(size=300, flows=12, checksum="hw", l4="tcp"),
                               dict(size=122, flows=40, sgws=8, ip=6), dict(size=512, flows=8, ip=6, stats="stats")],
                         ids=lambda t: ",".join(f"{k}={v}" for k, v in t.items()))
@pytest.mark.parametrize("incremental", [True, False])
def test_uplink_gpdus_over_ipv6_every_frame(obj, t, incremental):
    (s,) = streams(**t)
    cs = compile_stream(s)
    for fix in (i for i in cs.insns if i.op == vm.OP_FIX_HW):
        assert fix.offset == 70                   # the inner header, behind 14 + 40 + 8 + 8
    if not incremental:
        cs = full_sums(cs)
    check(run(obj, s, n=2 * t["flows"], cs=cs), t["flows"], t["size"], t.get("sgws", 4),
          trailer=t.get("stats", "none") != "none")


def test_walk_finds_the_headers_behind_an_outer_ipv6():
    (s,) = streams(size=256, flows=4, ip=6)
    frame = compile_stream(s).frame
    assert [h.kind for h in walk.headers(frame, ipv6=True)] == ["eth", "ipv6", "udp", "gtpu", "ipv6", "udp"]
    assert [c[0] for c in walk.l4_checksums(frame, ipv6=True)] == [60, 116]


def _bg(o):
    v = o.map("rx_port").lookup(b"\0\0\0\0")
    return {k: sum(struct.unpack_from("<Q", c, 32 + 8 * i)[0] for c in v) for i, k in enumerate(BG_KINDS)}


def _flow_packets(o):
    return struct.unpack_from("<Q", o.map("rx_flow").lookup(struct.pack("<I", 10)), 0)[0]


def downlink_gpdu6(pg_id=None) -> bytes:
    """What a UPF sends the generator's N3 port for a downlink packet of stream pg_id: the user packet
    (its trailer at the end) in GTP-U over IPv6 to an SGW's address."""
    tail = TRAILER.pack(MAGIC, pg_id, 7, 0) if pg_id is not None else b"y" * TRAILER.size
    user = IP(src="198.18.0.1", dst="10.64.0.1") / UDP(sport=1025, dport=5001) / Raw(b"x" * 40 + tail)
    return raw(Ether(src="02:00:00:00:01:00", dst="02:00:00:00:00:00")
               / IPv6(src="fd47:7473::1", dst="fd47:7473::10") / UDP(sport=2152, dport=2152)
               / GTP_U_Header(gtp_type=255, teid=0x80000000) / user)


@pytest.mark.bpf
def test_rx_takes_a_downlink_gpdu_over_ipv6_as_the_streams(obj):
    before_bg, before = _bg(obj), _flow_packets(obj)
    r = bpf.Prog(obj.prog_fd("tg_rx"), "tg_rx").test_run(downlink_gpdu6(10))
    assert r.retval == 1                                   # XDP_DROP: counted, not passed on
    assert _flow_packets(obj) == before + 1 and _bg(obj) == before_bg
    bpf.Prog(obj.prog_fd("tg_rx"), "tg_rx").test_run(downlink_gpdu6(None))
    got = {k: n - before_bg[k] for k, n in _bg(obj).items() if n != before_bg[k]}
    assert got == {"udp": 1} and _flow_packets(obj) == before + 1
