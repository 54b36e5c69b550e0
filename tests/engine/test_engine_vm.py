"""Unit tests of the engine's field engine: the compiler (gtplab/traffic/engine/vm.py) and the BPF
interpreter (tg_tx in gtplab/traffic/engine/bpf/trafficgen.bpf.c) run with BPF_PROG_TEST_RUN, no
interface. Every expected field sequence is computed here from TRex's documented semantics,
independently of the engine's code. Each run feeds the previous output frame back in, as a
recycled live frame would be, with the stream's template loaded as the client loads it (see
docs/engine.md); the checksum tests also run with a DUT scribbling over the recycled frames and
compare the incremental checksums with full sums."""

from __future__ import annotations

import base64
import random
import struct
import time

import pytest
from scapy.all import IP, UDP, Dot1Q, Ether, Raw, raw
from scapy.contrib.gtp import GTP_U_Header

from gtplab.kernel import libbpf as kernel
from gtplab.rates import RateError, parse_mult
from gtplab.traffic.engine import EngineError, compile_stream
from gtplab.traffic.engine import vm
from gtplab.traffic.engine.port import BPF_OBJ
from gtplab.traffic.engine.stats import _bucket_hi, _percentile
from tests.lib.tg_run import N, full_sums, load, run  # noqa: F401
from tests.lib.streams import (GTP_TEID_OFF, GTPU_PKT, INNER_IP, INNER_SRC, TCP_PKT, UDP_PKT, VLAN_PKT, assert_checksums,
                                fastrand, fv, rand_values, stream, trex_dec, trex_inc, wr)



@pytest.fixture(scope="module")
def obj():
    o = kernel.BpfObject(BPF_OBJ)
    yield o
    o.close()


def field(frames, off, size, big=True):
    return [int.from_bytes(f[off:off + size], "big" if big else "little") for f in frames]


# ---- flow_var ------------------------------------------------------------------------------
@pytest.mark.parametrize("size,off", [(1, 29), (2, 28), (4, 26), (8, 26)])
@pytest.mark.parametrize("op,lo,hi,init,step", [
    ("inc", 1, 10, 3, 4), ("inc", 0, 255, 250, 3), ("dec", 1, 10, 2, 3), ("dec", 5, 7, 7, 1),
    ("inc", 7, 7, 7, 1), ("inc", 1, 5, 1, 12)])
@pytest.mark.bpf
def test_flow_var_inc_dec(obj, size, off, op, lo, hi, init, step):
    js = stream(UDP_PKT, [fv("a", size, op, lo, hi, init, step), wr("a", off)])
    got = field(run(obj, js), off, size)
    model = trex_inc if op == "inc" else trex_dec
    assert got == model(lo, hi, init, step, N)


@pytest.mark.bpf
def test_flow_var_8_byte_wrap(obj):
    top = (1 << 64) - 1
    js = stream(UDP_PKT, [fv("a", 8, "inc", 0, top, top - 2, 1), wr("a", 26)])
    assert field(run(obj, js, n=5), 26, 8) == [top - 2, top - 1, top, 0, 1]


@pytest.mark.parametrize("size,lo,hi", [(1, 10, 20), (2, 1000, 60000), (4, 5, 3_000_000_000)])
@pytest.mark.bpf
def test_flow_var_random_with_seed(obj, size, lo, hi):
    off = {1: 29, 2: 28, 4: 26}[size]
    js = stream(UDP_PKT, [fv("r", size, "random", lo, hi), wr("r", off)], random_seed=0x1234)
    got = field(run(obj, js, n=200), off, size)
    assert got == rand_values(0x1234, size, lo, hi, 200)
    assert all(lo <= x <= hi for x in got) and len(set(got)) > 5


@pytest.mark.parametrize("op", ["inc", "dec", "random"])
@pytest.mark.bpf
def test_flow_var_value_list(obj, op):
    values = [9, 0, 4, 7, 5]
    ins = {"type": "flow_var", "name": "l", "size": 2, "op": op, "value_list": values,
           "step": 2 if op != "random" else 1, "next_var": None, "split_to_cores": True}
    js = stream(UDP_PKT, [ins, wr("l", 28)], random_seed=77)
    got = field(run(obj, js, n=12), 28, 2)
    if op == "inc":     # docs: inc walks the list from its start
        assert got == [values[(2 * k) % 5] for k in range(12)]
    elif op == "dec":   # docs: dec walks from the end, [9,0,4,7,5] -> 5,7,4,0,9 for step 1
        assert got == [values[(4 - 2 * k) % 5] for k in range(12)]
    else:
        g = fastrand(77)
        assert got == [values[next(g) % 5] for _ in range(12)]


@pytest.mark.parametrize("op", ["inc", "dec"])
@pytest.mark.bpf
def test_flow_var_long_value_list(obj, op):
    """A list longer than one chunk of the lists map (256 values): 3000 TEIDs, as a UPF that chose
    them (PFCP CHOOSE) hands them to the profile, walked across every chunk boundary."""
    values = random.Random(3000).sample(range(1, 1 << 32), 3000)
    ins = {"type": "flow_var", "name": "t", "size": 4, "op": op, "value_list": values, "step": 1,
           "next_var": None, "split_to_cores": True}
    got = field(run(obj, stream(UDP_PKT, [ins, wr("t", 26)]), n=3100), 26, 4)
    want = values if op == "inc" else values[::-1]
    assert got == [want[k % 3000] for k in range(3100)]


@pytest.mark.bpf
def test_flow_var_value_list_at_trex_limit(obj):
    """65535 values (TRex's own limit) run, the last chunk included; 65536 are refused by name."""
    values = list(range(7, 7 + 65535))
    ins = {"type": "flow_var", "name": "t", "size": 4, "op": "inc", "value_list": values, "step": 65534,
           "next_var": None, "split_to_cores": True}
    got = field(run(obj, stream(UDP_PKT, [ins, wr("t", 26)]), n=6), 26, 4)
    assert got == [values[(65534 * k) % 65535] for k in range(6)]
    with pytest.raises(EngineError, match="value_list of 65536 values"):
        compile_stream(stream(UDP_PKT, [{**ins, "value_list": values + [1]}, wr("t", 26)]))


@pytest.mark.bpf
def test_long_value_list_runs_from_the_frame_cache(obj):
    """A list of 1024 TEIDs repeats every 1024 frames: prebuilt, and the same bytes as per packet."""
    from gtplab.traffic.engine.streams import install_cache, prebuild_frames
    values = random.Random(1024).sample(range(1, 1 << 32), 1024)
    ins = {"type": "flow_var", "name": "t", "size": 4, "op": "inc", "value_list": values, "step": 1,
           "next_var": None, "split_to_cores": True}
    js = stream(GTPU_PKT, [ins, wr("t", GTP_TEID_OFF)])
    cs = compile_stream(js)
    assert cs.period() == 1024
    per_packet = run(obj, js, n=1100, cs=cs)
    load(obj, cs)
    frames = prebuild_frames(obj, cs, 0)
    assert frames == per_packet[:1024]
    install_cache(obj, cs, 0, frames, base=0)
    fd = obj.prog_fd("tg_tx")
    assert [kernel.run_once(fd, cs.frame, 0)[1] for _ in range(1100)] == per_packet


@pytest.mark.parametrize("size,off", [(1, 29), (2, 28), (4, 26)])
@pytest.mark.bpf
def test_flow_var_rand_limit(obj, size, off):
    ins = {"type": "flow_var_rand_limit", "name": "r", "size": size, "limit": 7, "seed": 4242,
           "min_value": 3, "max_value": 200, "split_to_cores": True, "next_var": None}
    got = field(run(obj, stream(UDP_PKT, [ins, wr("r", off)]), n=30), off, size)
    assert got == rand_values(4242, size, 3, 200, 30, limit=7)
    assert got[:7] == got[7:14] == got[14:21]      # repeats every `limit` packets


@pytest.mark.bpf
def test_tuple_flow_var(obj):
    """Docs table: ip is the inner loop, port steps when ip wraps, limit_flows restarts."""
    ins = {"type": "tuple_flow_var", "name": "t", "ip_min": 0x0A000001, "ip_max": 0x0A000005,
           "port_min": 1025, "port_max": 1027, "limit_flows": 13, "flags": 0}
    js = stream(UDP_PKT, [ins, wr("t.ip", 26), wr("t.port", 34)])
    frames = run(obj, js, n=30)
    exp_ip = [0x0A000001 + (k % 13) % 5 for k in range(30)]
    exp_port = [1025 + ((k % 13) // 5) % 3 for k in range(30)]
    assert field(frames, 26, 4) == exp_ip
    assert field(frames, 34, 2) == exp_port


@pytest.mark.bpf
def test_write_add_value_wraps_and_little_endian(obj):
    js = stream(UDP_PKT, [fv("a", 1, "inc", 250, 255), wr("a", 29, add=10),
                          fv("b", 2, "inc", 0x1234, 0x1240), wr("b", 40, add=-0x1235, big=False)])
    frames = run(obj, js, n=8)
    assert field(frames, 29, 1) == [(v + 10) & 0xFF for v in trex_inc(250, 255, 250, 1, 8)]
    assert field(frames, 40, 2, big=False) == [(v - 0x1235) & 0xFFFF for v in trex_inc(0x1234, 0x1240, 0x1234, 1, 8)]


@pytest.mark.bpf
def test_write_mask_vlan_id(obj):
    """write_mask_flow_var: VLAN id into the 12 low bits of the TCI, priority bits kept."""
    ins = {"type": "write_mask_flow_var", "name": "v", "pkt_offset": 14, "pkt_cast_size": 2,
           "mask": 0x0FFF, "shift": 0, "add_value": 1, "is_big_endian": True}
    js = stream(VLAN_PKT, [fv("v", 2, "inc", 100, 4100), ins])
    frames = run(obj, js, n=N)
    vals = trex_inc(100, 4100, 100, 1, N)
    assert [Ether(f)[Dot1Q].vlan for f in frames] == [(v + 1) & 0xFFF for v in vals]
    assert {Ether(f)[Dot1Q].prio for f in frames} == {5}


@pytest.mark.parametrize("shift,mask", [(4, 0xF0), (-2, 0x3F)])
@pytest.mark.bpf
def test_write_mask_shift(obj, shift, mask):
    ins = {"type": "write_mask_flow_var", "name": "v", "pkt_offset": 15, "pkt_cast_size": 1,
           "mask": mask, "shift": shift, "add_value": 0, "is_big_endian": True}
    tos = raw(UDP_PKT)[15]
    js = stream(UDP_PKT, [fv("v", 1, "inc", 0, 255, 0, 7), ins])
    got = field(run(obj, js), 15, 1)
    vals = trex_inc(0, 255, 0, 7, N)
    sh = [(v << shift) if shift > 0 else (v >> -shift) for v in vals]
    assert got == [((tos & ~mask) | (s & mask)) & 0xFF for s in sh]


@pytest.mark.bpf
def test_fix_checksum_ipv4(obj):
    js = stream(UDP_PKT, [fv("s", 4, "inc", 0x10000001, 0x100000FF), wr("s", 26),
                          {"type": "fix_checksum_ipv4", "pkt_offset": 14}])
    for f in run(obj, js):
        p = Ether(f)
        assert p[IP].chksum == IP(raw(p[IP].copy().__class__(raw(p[IP]))))[IP].chksum
        q = p.copy()
        q[IP].chksum = None
        assert Ether(raw(q))[IP].chksum == p[IP].chksum


@pytest.mark.parametrize("pkt,l4_type", [(UDP_PKT, 11), (TCP_PKT, 13)])
@pytest.mark.bpf
def test_fix_checksum_hw(obj, pkt, l4_type):
    js = stream(pkt, [fv("s", 4, "random", 1, 0xFFFFFFFE), wr("s", 26),
                      fv("p", 2, "inc", 1, 65535, 1, 977), wr("p", 34),
                      {"type": "fix_checksum_hw", "l2_len": 14, "l3_len": 20, "l4_type": l4_type}])
    frames = run(obj, js)
    assert len(set(field(frames, 26, 4))) > N // 2
    for f in frames:
        assert_checksums(f)


@pytest.mark.bpf
def test_fix_checksum_hw_inner_gtpu(obj):
    """The uplink shape: TEID, inner source per bearer; inner UDP + outer IP fixed."""
    js = stream(GTPU_PKT, [
        fv("teid", 4, "inc", 0x10000, 0x10000 + 99), wr("teid", GTP_TEID_OFF),
        fv("ue", 4, "inc", 0x0A400001, 0x0A400001 + 99), wr("ue", INNER_SRC),
        {"type": "fix_checksum_hw", "l2_len": INNER_IP, "l3_len": 20, "l4_type": 11},
        {"type": "fix_checksum_hw", "l2_len": 14, "l3_len": 20, "l4_type": 11}])
    frames = run(obj, js)
    assert [Ether(f)[GTP_U_Header].teid for f in frames] == trex_inc(0x10000, 0x10063, 0x10000, 1, N)
    for f in frames:
        assert_checksums(f)


@pytest.mark.bpf
def test_trim_pkt_size(obj):
    """IMIX-like sizes: trim to the size var, write IP.len and UDP.len from it (TRex needs
    write_flow_var for the lengths), fix checksums."""
    pkt = UDP_PKT.copy()
    pkt[Raw].load = b"q" * 300
    js = stream(pkt, [fv("sz", 2, "inc", 64, len(pkt), 64, 37),
                      {"type": "trim_pkt_size", "name": "sz"},
                      wr("sz", 16, add=-14), wr("sz", 38, add=-34),
                      {"type": "fix_checksum_hw", "l2_len": 14, "l3_len": 20, "l4_type": 11}])
    frames = run(obj, js)
    assert [len(f) for f in frames] == trex_inc(64, len(pkt), 64, 37, N)
    for f in frames:
        p = Ether(f)
        assert p[IP].len == len(f) - 14 and p[UDP].len == len(f) - 34
        assert_checksums(f)


@pytest.mark.bpf
def test_trailer_keeps_checksums_without_fix(obj):
    """flow_stats adds a 16-byte trailer; L4 checksums (outer and inner) stay valid even
    when the profile fixes nothing, and the trailer counts up."""
    js = stream(GTPU_PKT, [], flow_stats={"enabled": True, "stream_id": 9, "rule_type": "latency"})
    frames = run(obj, js, n=10)
    for k, f in enumerate(frames):
        magic, pg, seq, ts = struct.unpack("<HHIQ", f[-16:])
        assert (magic, pg, seq) == (vm.TRAILER_MAGIC, 9, k) and ts > 0
        assert_checksums(f)


@pytest.mark.bpf
def test_trailer_with_trim_and_fix(obj):
    pkt = GTPU_PKT.copy()
    pkt[Raw].load = b"p" * 200
    js = stream(pkt, [fv("sz", 2, "dec", 120, len(pkt), None, 31),
                      {"type": "trim_pkt_size", "name": "sz"},
                      wr("sz", 16, add=-14), wr("sz", 38, add=-34),
                      wr("sz", 44, add=-50), wr("sz", 52, add=-50), wr("sz", 74, add=-70),
                      {"type": "fix_checksum_hw", "l2_len": INNER_IP, "l3_len": 20, "l4_type": 11},
                      {"type": "fix_checksum_hw", "l2_len": 14, "l3_len": 20, "l4_type": 11}],
                flow_stats={"enabled": True, "stream_id": 3, "rule_type": "stats"})
    cs = compile_stream(js)
    assert [i.op for i in cs.insns][:3] == [vm.OP_VAR_DEC, vm.OP_TRIM, vm.OP_TRAILER]
    frames = run(obj, js)
    assert [len(f) for f in frames] == trex_dec(120, len(pkt), len(pkt), 31, N)
    for k, f in enumerate(frames):
        assert struct.unpack("<HHI", f[-16:-8]) == (vm.TRAILER_MAGIC, 3, k)
        assert_checksums(f)


# ---- incremental checksums (trafficgen.h "Incremental checksums", vm._plan_checksums) -------
FIX4 = {"type": "fix_checksum_ipv4", "pkt_offset": 14}
HW_IN = {"type": "fix_checksum_hw", "l2_len": INNER_IP, "l3_len": 20, "l4_type": 11}
HW_OUT = {"type": "fix_checksum_hw", "l2_len": 14, "l3_len": 20, "l4_type": 11}
OUTER_CSUM_GTPU = Ether(raw(GTPU_PKT))       # outer UDP checksum valid (Scapy computed it)
GTPU_ZERO_CSUM = GTPU_PKT.copy()             # outer UDP checksum 0, as the uplink profile sends
GTPU_ZERO_CSUM[UDP].chksum = 0

INCR_CASES = {
    # name: (packet, instructions, fix instructions planned incremental)
    "uplink": (GTPU_ZERO_CSUM, [
        fv("b", 4, "inc", 0, 99), fv("s", 4, "inc", 0, 3),
        wr("b", GTP_TEID_OFF, add=0x10000), wr("b", INNER_SRC, add=0x0A400001),
        wr("s", 26, add=0x0AC90010), wr("s", INNER_SRC + 4, add=0x0A0A0A0A), FIX4, HW_IN], 2),
    "odd offsets, byte and 8-byte writes": (UDP_PKT, [
        fv("a", 1, "random", 0, 255), wr("a", 27), wr("a", 45),
        fv("q", 8, "inc", 1, (1 << 64) - 1, None, 0x123456789), wr("q", 43), wr("q", 51),
        {"type": "fix_checksum_hw", "l2_len": 14, "l3_len": 20, "l4_type": 11}], 1),
    "overlapping writes, little endian": (UDP_PKT, [
        fv("a", 4, "random", 0, 0xFFFFFFFF), wr("a", 44), wr("a", 45, big=False),
        fv("b", 2, "inc", 0, 65535, 0, 4099), wr("b", 46, big=False), wr("b", 28),
        {"type": "fix_checksum_hw", "l2_len": 14, "l3_len": 20, "l4_type": 11}], 1),
    "write_mask on TOS and ports, TCP": (TCP_PKT, [
        fv("v", 1, "inc", 0, 255, 0, 7),
        {"type": "write_mask_flow_var", "name": "v", "pkt_offset": 15, "pkt_cast_size": 1,
         "mask": 0xFC, "shift": 2, "add_value": 0, "is_big_endian": True},
        fv("p", 2, "random", 1, 65535), wr("p", 34), wr("p", 50),
        {"type": "fix_checksum_hw", "l2_len": 14, "l3_len": 20, "l4_type": 13}], 1),
    "write over TTL, protocol and the checksum": (UDP_PKT, [
        fv("a", 4, "inc", 0x40110000, 0x40110000 + 999, None, 77), wr("a", 22), FIX4], 1),
    "outer UDP checksum over the inner fix": (OUTER_CSUM_GTPU, [
        fv("u", 4, "inc", 0x0A400001, 0x0A400001 + 999), wr("u", INNER_SRC),
        fv("d", 2, "inc", 1000, 2000, 1000, 3), wr("d", INNER_IP + 22), HW_IN, HW_OUT], 2),
}


@pytest.mark.parametrize("scribble", [False, True], ids=["recycled", "dut-scribbled"])
@pytest.mark.parametrize("case", list(INCR_CASES))
@pytest.mark.bpf
def test_incremental_checksums_equal_full_sums(obj, case, scribble):
    """Checksums from the template's sums plus this packet's changes are the very bits a full
    sum gives (compared with the engine's full-sum path, and checked with Scapy), also when the
    recycled frame holds garbage of any length."""
    pkt, instructions, planned = INCR_CASES[case]
    js = stream(pkt, instructions, random_seed=5)
    cs = compile_stream(js)
    fixes = [i for i in cs.insns if i.op in (vm.OP_FIX_IPV4, vm.OP_FIX_HW)]
    assert sum(bool(i.flags & vm.F_INCR) for i in fixes) == planned
    incr = run(obj, js, n=200, scribble=scribble, cs=cs)
    full = run(obj, js, n=200, template=False, cs=full_sums(cs))
    assert incr == full
    for f in incr:
        assert_checksums(f)


@pytest.mark.parametrize("what,instructions", [
    ("IHL written", [fv("a", 1, "inc", 0x45, 0x45), wr("a", 14), FIX4]),
    ("total length written", [fv("a", 2, "inc", 60, 68), wr("a", 16),
                              {"type": "fix_checksum_hw", "l2_len": 14, "l3_len": 20, "l4_type": 11}]),
    ("after a trim", [fv("sz", 2, "inc", 60, 82), {"type": "trim_pkt_size", "name": "sz"},
                      wr("sz", 16, add=-14), wr("sz", 38, add=-34),
                      {"type": "fix_checksum_hw", "l2_len": 14, "l3_len": 20, "l4_type": 11}]),
])
@pytest.mark.bpf
def test_unplannable_checksums_are_summed(obj, what, instructions):
    """Where a checksum's ranges are not fixed by the template, the fix sums the packet: still
    right (as TRex computes it from the bytes), just not incremental."""
    js = stream(UDP_PKT, instructions)
    cs = compile_stream(js)
    assert not any(i.flags & vm.F_INCR for i in cs.insns), what
    frames = run(obj, js, n=20, scribble=True, cs=cs)
    for f in frames:
        ip = Ether(f)[IP]
        q = ip.copy()
        q.chksum = None
        assert IP(raw(q)).chksum == ip.chksum


@pytest.mark.bpf
def test_trimmed_frames_get_their_length_back(obj):
    """A recycled frame comes back as short as an earlier trim left it: tg_tx restores the
    template's length before the instructions run, so larger sizes follow smaller ones."""
    pkt = UDP_PKT.copy()
    pkt[Raw].load = b"q" * 100
    js = stream(pkt, [fv("sz", 2, "dec", 64, len(pkt), len(pkt) - 10, 30),
                      {"type": "trim_pkt_size", "name": "sz"},
                      wr("sz", 16, add=-14), wr("sz", 38, add=-34),
                      {"type": "fix_checksum_hw", "l2_len": 14, "l3_len": 20, "l4_type": 11}])
    frames = run(obj, js, n=12)          # each input is the previous, trimmed output as it is
    assert [len(f) for f in frames] == trex_dec(64, len(pkt), len(pkt) - 10, 30, 12)
    for f in frames:
        assert f[42:] == raw(pkt)[42:len(f)]
        assert_checksums(f)


# ---- refusals ------------------------------------------------------------------------------
@pytest.mark.parametrize("ins,words", [
    ({"type": "fix_checksum_icmpv6", "l2_len": 14, "l3_len": 40}, "fix_checksum_icmpv6"),
    ({"type": "frobnicate"}, "frobnicate"),
    (dict(fv("a", 2, "inc", 1, 5), next_var="b"), "next_var"),
    (dict(fv("a", 3, "inc", 1, 5)), "size 3"),
    ({"type": "tuple_flow_var", "name": "t", "ip_min": 1, "ip_max": 2, "port_min": 1,
      "port_max": 2, "limit_flows": 0, "flags": 1}, "flags=1"),
])
def test_unsupported_is_refused_by_name(ins, words):
    with pytest.raises(EngineError, match=words):
        compile_stream(stream(UDP_PKT, [ins]))


def test_refusals_of_stream_fields():
    with pytest.raises(EngineError, match="rate type"):
        compile_stream(stream(UDP_PKT, [], mode={"type": "continuous", "rate": {"type": "xx", "value": 1}}))
    with pytest.raises(EngineError, match="mode type"):
        compile_stream(stream(UDP_PKT, [], mode={"type": "pcap", "rate": {"type": "pps", "value": 1}}))
    with pytest.raises(EngineError, match="chaining"):
        compile_stream(stream(UDP_PKT, [], self_start=False))
    with pytest.raises(EngineError, match="payload"):
        compile_stream(stream(Ether() / IP() / UDP() / Raw(b"abc"), [],
                              flow_stats={"enabled": True, "stream_id": 1, "rule_type": "stats"}))
    with pytest.raises(EngineError, match="past the"):
        compile_stream(stream(UDP_PKT, [fv("a", 4, "inc", 1, 5), wr("a", len(UDP_PKT) - 2)]))


def test_parse_mult():
    assert parse_mult("2x") == ("factor", 2.0)
    assert parse_mult(3) == ("factor", 3.0)
    assert parse_mult("10kpps") == ("pps", 10e3)
    assert parse_mult("1.5gbps") == ("bps_l2", 1.5e9)
    assert parse_mult("1gbpsl1") == ("bps_l1", 1e9)
    assert parse_mult("50%") == ("percent", 50.0)
    with pytest.raises(RateError):
        parse_mult("fast")


def test_rates_of_rate_types():
    base = stream(UDP_PKT, [])          # 82-byte frame: 86 on the wire with FCS, 106 with L1
    for rtype, value, pps in [("pps", 1000, 1000), ("bps_L2", 86 * 8 * 500, 500),
                              ("bps_L1", 106 * 8 * 250, 250), ("percentage", 10, 1e9 / (106 * 8))]:
        js = dict(base, mode={"type": "continuous", "rate": {"type": rtype, "value": value}})
        assert compile_stream(js).pps(10e9) == pytest.approx(pps)


def test_latency_percentile_buckets():
    hist = [0] * 256
    hist[40] = 98       # 2^10 * 1.25 .. 1.25: upper edge 1280 ns
    hist[60] = 2        # 2^15 * 1.25 = 40960
    assert _bucket_hi(40) == 1280
    assert _percentile(hist, 0.5) == 1280 and _percentile(hist, 0.99) == 40960


# ---- the frame cache (struct tg_cframe): prebuilt frames of a periodic program ---------------------

def _uplink_like():
    """The uplink profile's shape: bearer and SGW variables in step, a counter-variable going
    down, writes into the TEID and both IPv4 headers, fixes of both (incremental)."""
    return stream(GTPU_PKT, [
        fv("bearer", 4, "inc", 0, 39), fv("sgw", 4, "inc", 0, 3), fv("down", 2, "dec", 0, 39),
        wr("bearer", GTP_TEID_OFF, 0x10000), wr("bearer", INNER_SRC, 0x0A400001),
        wr("sgw", 26, 0x0AC90010), wr("down", 90),
        {"type": "fix_checksum_ipv4", "pkt_offset": 14},
        {"type": "fix_checksum_hw", "l2_len": INNER_IP, "l3_len": 20, "l4_type": 11}])


@pytest.mark.bpf
def test_frame_cache_sends_exactly_what_the_program_makes(obj):
    """Two and a half periods, frame for frame: the program run per packet and the prebuilt
    frames copied in turn (a DUT scribbling over the recycled frames in between) are the same
    bytes; cached, the variables no longer move, the cache position does."""
    from gtplab.traffic.engine.streams import install_cache, prebuild_frames
    js = _uplink_like()
    cs = compile_stream(js)
    assert cs.period() == 40
    per_packet = run(obj, js, n=100, cs=cs)
    assert len({f[GTP_TEID_OFF:GTP_TEID_OFF + 4] for f in per_packet}) == 40
    load(obj, cs)
    frames = prebuild_frames(obj, cs, 0)
    assert frames == per_packet[:40]
    install_cache(obj, cs, 0, frames, base=100)
    fd = obj.prog_fd("tg_tx")
    rnd, cur, cached = random.Random(7), cs.frame, []
    for _ in range(100):
        verdict, out = kernel.run_once(fd, cur, 0)
        assert verdict == 3
        cached.append(out)
        cur = rnd.randbytes(rnd.randint(14, len(cs.frame)))
    assert cached == per_packet
    st = obj.map("state").lookup(struct.pack("<I", 0))
    tx, _, errors = struct.unpack_from("<QQQ", st, vm.STATE_TX_OFF)
    pos, = struct.unpack_from("<I", st, vm.STATE_TX_OFF + 24)
    assert (tx, errors, pos) == (100, 0, 100 % 40)
    assert st[:vm.MAX_VARS * 24] == cs.state_value()[:vm.MAX_VARS * 24]   # variables untouched


@pytest.mark.parametrize("change,why", [
    (lambda js: js["vm"]["instructions"].__setitem__(0, fv("bearer", 4, "random", 0, 39)), "random"),
    (lambda js: js["vm"]["instructions"].extend([fv("a", 2, "inc", 0, 4092), fv("b", 2, "inc", 0, 4090)]),
     "period over 4096"),
    (lambda js: js["packet"].__setitem__("binary", base64.b64encode(raw(GTPU_PKT / Raw(b"q" * 40))).decode()),
     "frame over 128 B"),
    (lambda js: js["vm"]["instructions"].extend([fv("len", 2, "inc", 60, 100),
                                                 {"type": "trim_pkt_size", "name": "len"}]), "trim"),
])
def test_frame_cache_only_for_periodic_small_programs(change, why):
    js = _uplink_like()
    change(js)
    try:
        cs = compile_stream(js)
    except EngineError:
        pytest.fail(f"{why}: the stream itself should compile")
    assert cs.period() is None, why


def test_frame_cache_period_is_the_lcm_of_the_cycles():
    js = stream(UDP_PKT, [fv("a", 1, "inc", 0, 5), fv("b", 2, "dec", 10, 13), fv("c", 1, "inc", 0, 9, step=4),
                          wr("a", 30), wr("b", 26), wr("c", 27)])
    assert compile_stream(js).period() == 60    # lcm(6, 4, 10 / gcd(4, 10) = 5)
    assert compile_stream(stream(UDP_PKT, [])).period() == 1


# ---------------------------------------------------------------------------------------------
# Paced bursts (struct tg_pace burst): tg_tx run once per call, not live, against the clock


def _pace(obj, slot, burst, gap_ns, late_ns, start_ns, end_ns=0):
    from gtplab.traffic.engine.streams import PACE
    obj.map("pace").update(struct.pack("<I", slot), PACE.pack(
        start_ns << 8, gap_ns << 8, end_ns, late_ns << 8, 0, 0, 0, burst, 0, 0, 0))


def _runs(verdicts):
    """Lengths of the runs of consecutive XDP_TX (3) in a verdict sequence."""
    out, n = [], 0
    for v in verdicts + [1]:
        if v == 3:
            n += 1
        elif n:
            out.append(n)
            n = 0
    return out


@pytest.mark.parametrize("burst", [1, 8, 32])
@pytest.mark.bpf
def test_paced_bursts_leave_back_to_back_at_the_average_rate(obj, burst):
    """A paced stream with burst B sends B frames in consecutive runs when a burst is due and
    nothing until the next (B / rate later): every run of frames sent is a whole number of bursts
    (more than one only when this process was held up and caught up), the time between the
    starts of bursts is B frame times, and max_run in the pace map is the longest run seen."""
    from gtplab.traffic.engine.streams import PACE, PACE_MAX_RUN
    cs = compile_stream(stream(UDP_PKT, [], mode={"type": "continuous", "burst": burst,
                                                 "rate": {"type": "pps", "value": 1000}}))
    assert cs.burst == burst
    load(obj, cs, slot=3)
    fd = obj.prog_fd("tg_tx")
    frame_ns = 200_000                      # 5 kpps: a burst every B x 0.2 ms
    gap = burst * frame_ns
    t0 = time.monotonic_ns() + 1_000_000
    _pace(obj, 3, burst, gap, 1 << 40, t0)
    verdicts, early, k = [], [], 0         # k: frames sent so far (the next opens burst k // B)
    while True:
        before = time.monotonic_ns()
        v, _ = kernel.run_once(fd, cs.frame, 3)
        after = time.monotonic_ns()
        if v == 3:
            # the kernel read its clock before `after`: burst k // B is due at t0 + (k // B) x gap
            if k % burst == 0 and after < t0 + (k // burst) * gap:
                early.append((k // burst, after - t0))
            k += 1
        verdicts.append(v)
        if v != 3 and before > t0 + 12 * gap + gap // 2:
            break                           # idle after 12.5 periods: everything due was sent
    runs = _runs(verdicts)
    assert runs and all(r % burst == 0 for r in runs), runs
    # every burst due before the last (idle) run was sent, none due after it: none skipped
    assert (before - t0) // gap + 1 <= sum(runs) // burst <= (after - t0) // gap + 1, (runs, before - t0, after - t0)
    if burst > 1:
        assert verdicts.count(1) > len(runs), "no idle run between bursts"
    # burst k's first frame is never sent before its time, t0 + k x B frame times (the clock gates it)
    assert early == [], early
    p = PACE.unpack(obj.map("pace").lookup(struct.pack("<I", 3)))
    assert p[PACE_MAX_RUN] == max(runs) and p[4] == 0


@pytest.mark.bpf
def test_paced_bursts_skip_whole_bursts_when_late(obj):
    """A stream far behind its time (a held-up transmitter) skips whole bursts, counted in frames,
    and then sends one burst of B, not what it missed."""
    from gtplab.traffic.engine.streams import PACE
    cs = compile_stream(stream(UDP_PKT, [], mode={"type": "continuous", "burst": 8,
                                                 "rate": {"type": "pps", "value": 1000}}))
    load(obj, cs, slot=4)
    fd = obj.prog_fd("tg_tx")
    gap = 10_000_000                        # a burst every 10 ms, 50 ms late, 5 ms allowed
    _pace(obj, 4, 8, gap, gap // 2, time.monotonic_ns() - 5 * gap)
    verdicts = [kernel.run_once(fd, cs.frame, 4)[0] for _ in range(40)]
    assert _runs(verdicts)[0] == 8, verdicts
    p = PACE.unpack(obj.map("pace").lookup(struct.pack("<I", 4)))
    assert p[4] > 0 and p[4] % 8 == 0, p


def test_burst_refused_outside_continuous_streams():
    for bad, mode in [(0, "continuous"), (vm.MAX_PACED_BURST + 1, "continuous"), ("8", "continuous"),
                      (8, "single_burst")]:
        m = {"type": mode, "burst": bad, "rate": {"type": "pps", "value": 1}, "total_pkts": 5}
        with pytest.raises(EngineError, match="burst"):
            compile_stream(stream(UDP_PKT, [], mode=m))


def test_late_limit_keeps_catch_up_within_max_burst():
    from gtplab.traffic.engine.pacing import MAX_BURST, late_q8
    assert late_q8(1000, 1) == MAX_BURST * 1000
    for b in (2, 8, 32, 64, 127):
        g = 1000 * b                        # the burst period: b frame times of 1000
        frames = b * (late_q8(g, b) // g + 1)
        assert frames <= MAX_BURST or late_q8(g, b) == g // 2
    assert late_q8(128_000, 128) == 64_000 and late_q8(256_000, 256) == 128_000


@pytest.mark.bpf
def test_one_call_serves_the_paced_stream_due_first(obj):
    """cur_slot TG_ANY_PACED: each run sends the next frame of whichever stream in map paced is due
    first, in its own length, a burst once begun finished first; so two streams interleave by
    their times instead of taking turns in calls (and catching up in bursts)."""
    from gtplab.traffic.engine.pacing import ANY_PACED, MAX_PACED
    a = compile_stream(stream(UDP_PKT, [], mode={"type": "continuous", "rate": {"type": "pps", "value": 1}}))
    big = Ether(dst="02:00:00:00:00:02", src="02:00:00:00:00:01") / IP(src="16.0.0.9", dst="48.0.0.1") / \
        UDP(sport=9, dport=9) / Raw(b"b" * 100)
    b = compile_stream(stream(big, [], mode={"type": "continuous", "burst": 3, "rate": {"type": "pps", "value": 1}}))
    load(obj, a, slot=5)
    load(obj, b, slot=6)
    fd = obj.prog_fd("tg_tx")
    ms = 1_000_000
    t0 = time.monotonic_ns() + ms
    _pace(obj, 5, 1, ms, 1 << 40, t0)                 # a: a frame every 1 ms from t0
    _pace(obj, 6, 3, 3 * ms, 1 << 40, t0 + ms // 2)   # b: 3 back to back every 3 ms from t0 + 0.5 ms
    obj.map("paced").update(b"\0\0\0\0", struct.pack(f"<I{MAX_PACED}I", 2, 5, 6, *[0] * (MAX_PACED - 2)))
    obj.map("cur_slot").update(b"\0\0\0\0", struct.pack("<I", ANY_PACED))
    seq, frame = [], raw(big)
    try:
        while True:
            before = time.monotonic_ns()
            v, out = kernel.run_once(fd, frame, 0)
            after = time.monotonic_ns()
            if v == 3:
                assert out in (a.frame, b.frame), out
                seq.append("a" if out == a.frame else "b")
            elif before > t0 + 9 * ms + ms // 4:
                break                   # idle after 9.25 ms: everything due was sent
    finally:
        obj.map("cur_slot").update(b"\0\0\0\0", b"\0\0\0\0")
        obj.map("paced").update(b"\0\0\0\0", bytes(4 + 4 * MAX_PACED))
    # every frame due before the last (idle) run was sent, none due after it
    na, nb = seq.count("a"), seq.count("b")
    assert (before - t0) // ms + 1 <= na <= (after - t0) // ms + 1, (seq, before - t0)
    assert 3 * ((before - t0 - ms // 2) // (3 * ms) + 1) <= nb <= 3 * ((after - t0 - ms // 2) // (3 * ms) + 1), seq
    # sent in the order of their times (a's k-th at k ms, b's j-th burst at 0.5 + 3 j ms), however
    # late this process ran; each burst of b whole
    due, ka, kb = [], 0, 0
    for x in seq:
        if x == "a":
            due.append(ka * ms)
            ka += 1
        else:
            due.append(ms // 2 + (kb // 3) * 3 * ms)
            kb += 1
    assert due == sorted(due), seq
    assert "".join(seq).replace("bbb", "").count("b") == 0, seq
