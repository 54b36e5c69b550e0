"""IPv6 user packets in the TRex profiles (issue 32 item 1: --ip 6 and 4v6) and the bearer file's ue6=.

The profiles are loaded by TRex's own client library in a subprocess (tests/trex/test_profiles.py's
TrexWorker); here, with Scapy 2.8: the base packets (layers, fields, lengths, the UDP/TCP checksum
over the IPv6 pseudo header recomputed), the smallest sizes and the refusals, and the packets of the
programs as TRex's field engine makes them (test_profiles.run_program: modular inc/dec, value
lists, split_to_cores phases) on 1, 2 and 3 cores over two cycles: bearer i's TEID, UE /64
fd47:7470:XXXX:YYYY::/64 (XXXX:YYYY = i) and SGW in every packet, interface identifiers and
ports varied, the inner checksum valid with no fix instruction, the outer UDP checksum valid."""

from __future__ import annotations

import ipaddress
import re

import pytest
from scapy.all import Ether, raw
from scapy.contrib.gtp import GTP_U_Header
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Dot1Q

from gtplab.cli import main as gtplab_main
from tests.lib.streams import ipv6_l4_ok as l4_ok
from tests.lib.trex_ref import LoadError, TrexWorker, argv, binary, common, params, run_program

BEARER6_LINE = re.compile(r"^0x[0-9a-f]{8} (\d+\.){3}\d+ (\d+\.){3}\d+ 0x[0-9a-f]{8}( csum=(on|off))?"
                          r" ue6=fd47:7470:[0-9a-f]{1,4}:[0-9a-f]{1,4}::/64$")


def outer_ok(p) -> bool:
    q = p.copy()
    q[UDP].chksum = None
    return p[UDP].chksum != 0 and Ether(raw(q))[UDP].chksum == p[UDP].chksum


def ue_index(addr: str) -> int:
    n = int(ipaddress.IPv6Address(addr))
    assert n >> 96 == 0xFD477470, addr
    return (n >> 64) & 0xFFFFFFFF


def test_minimum_sizes_are_said():
    assert common.min_frame_size("uplink", ip=6) == 14 + 20 + 8 + 8 + 40 + 8 + 4 == 102
    assert common.min_frame_size("uplink", "tcp", ip=6) == 114
    assert common.min_frame_size("downlink", ip=6) == 66 and common.min_frame_size("downlink", "tcp", ip=6) == 78
    assert common.min_frame_size("uplink", ip="4v6") == 102 and common.min_frame_size("uplink") == 82
    with pytest.raises(common.ProfileError, match=r"smallest uplink frame with inner IPv6/UDP is 102 bytes "
                                                  r"\(FCS included; IPv6 G-PDU: 14 Ethernet \+ 20 IPv4 \+ 8 UDP "
                                                  r"\+ 8 GTP-U \+ 40 IPv6 \+ 8 UDP\)"):
        params("uplink", argv(ip=6, size=101))
    with pytest.raises(common.ProfileError, match="downlink frame with inner IPv6/UDP is 66"):
        params("downlink", argv(ip=6, size=64))


def test_too_small_is_one_line_exit_2(tmp_path, capsys):
    assert gtplab_main(["bearers", "--profile", "uplink", "-t", "ip=6,size=64", "-o", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "102" in err[0], err
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize("bad", [argv(ip=5), argv(ip="v6"), argv(ip=6, imix="yes"),
                                 argv(ip=6, order="random", outer_udp_csum="valid", flows=64),
                                 argv(ip=6, sport=65535, flows=8)])
def test_bad_tunables(trex, bad):
    with pytest.raises((common.ProfileError, LoadError)):
        params("uplink", bad)
        trex.streams("uplink", bad)


def test_bearer_file_lines_with_ue6(tmp_path):
    out = tmp_path / "b.txt"
    assert gtplab_main(["bearers", "--profile", "uplink", "-t", "ip=6,flows=8,bearers=70000",
                        "--csum", "on", "-o", str(out)]) == 0
    text = out.read_text()
    assert "[csum=on|off] [ue6=PREFIX/64]" in text
    lines = [ln for ln in text.splitlines() if not ln.startswith("#")]
    assert len(lines) == 70000 and all(BEARER6_LINE.match(ln) for ln in lines[:10] + lines[-10:])
    assert lines[0] == "0x00010000 10.64.0.1 10.201.0.16 0x80000000 csum=on ue6=fd47:7470:0:0::/64"
    assert lines[65537] == "0x00020001 10.65.0.2 10.201.0.17 0x80010001 csum=on ue6=fd47:7470:1:1::/64"
    for i in (0, 1, 65535, 65536, 69999):
        f = lines[i].split()
        net = ipaddress.IPv6Network(f[-1].split("=", 1)[1])
        assert net.prefixlen == 64 and int(net.network_address) >> 64 == 0xFD47747000000000 | i
        assert int(ipaddress.IPv4Address(f[1])) == int(ipaddress.IPv4Address("10.64.0.1")) + i   # IPv4 UE kept
    out4 = tmp_path / "b4.txt"
    assert gtplab_main(["bearers", "--profile", "downlink", "-t", "ip=4v6,flows=4", "-o", str(out4)]) == 0
    l4v6 = [ln for ln in out4.read_text().splitlines() if not ln.startswith("#")]
    assert l4v6[3] == "0x00010003 10.64.0.4 10.201.0.19 0x80000003 ue6=fd47:7470:0:3::/64"
    assert gtplab_main(["bearers", "--profile", "uplink", "-t", "flows=4", "-o", str(out4)]) == 0
    assert "ue6=" not in out4.read_text()


@pytest.mark.parametrize("size", [102, 103, 128, 1518, 3024])
def test_uplink_base_packet(trex, size):
    (s,) = trex.streams("uplink", argv(ip=6, size=size, flows=8, outer_udp_csum="valid"))
    p = Ether(binary(s))
    assert len(raw(p)) == size - 4
    assert [type(x) for x in (p, p[IP], p[UDP], p[GTP_U_Header])] == [Ether, IP, UDP, GTP_U_Header]
    ip6 = p[GTP_U_Header].payload
    assert isinstance(ip6, IPv6) and isinstance(ip6.payload, UDP)
    assert (ip6.version, ip6.tc, ip6.fl, ip6.nh, ip6.hlim) == (6, 0, 0, 17, 64)
    assert ip6.plen == size - 4 - 90 and ip6[UDP].len == ip6.plen
    assert p[GTP_U_Header].length == size - 4 - 42 - 8 and p[GTP_U_Header].gtp_type == 255
    assert ue_index(ip6.src) == 0 and ip6.dst == "fd47:7471::1"
    assert l4_ok(ip6) and outer_ok(p)


def test_downlink_base_packet(trex):
    for t, l3 in ((argv(ip=6, size=66), 14), (argv(ip=6, size=200, vlans=3, l4="tcp"), 18)):
        (s,) = trex.streams("downlink", t)
        p = Ether(binary(s))
        ip6 = p[IPv6]
        assert len(raw(p)) == (66 if l3 == 14 else 200) - 4 and ip6.plen == len(raw(p)) - l3 - 40
        assert (ip6.hlim, ip6.src, ip6.dst) == (64, "fd47:7471::1", "fd47:7470::1")
        assert (Dot1Q in p) == (l3 == 18) and isinstance(ip6.payload, TCP if l3 == 18 else UDP)
        assert l4_ok(ip6)


def _ip6_stream(streams):
    (s,) = [x for x in streams if x["name"].endswith("_ip6")]
    return s


UPLINK6 = [argv(ip=6, flows=64, sgws=4),
           argv(ip=6, size=300, flows=12, sgws=4, l4="tcp", outer_udp_csum="valid"),
           argv(ip="4v6", size=1424, flows=40, sgws=8, teid_base=0xFFFFFF00, sgw_base="10.201.0.250",
                outer_udp_csum="valid"),
           argv(ip=6, size=128, flows=3, sgws=8, outer_udp_csum="valid")]


@pytest.mark.parametrize("tunables", UPLINK6, ids=lambda t: " ".join(t))
def test_uplink_packets_per_bearer_on_1_2_3_cores(trex, tunables):
    a = params("uplink", tunables)
    s = _ip6_stream(trex.streams("uplink", tunables))
    ins = s["vm"]["instructions"]
    assert not [i for i in ins if i["type"] == "fix_checksum_hw"]     # valid by construction
    base = binary(s)
    for cores in (1, 2, 3):
        seen, iids, sports, dsts = set(), set(), set(), set()
        for core in range(cores):
            for k, pkt in enumerate(run_program(base, ins, 2 * a.flows, core, cores)):
                p = Ether(pkt)
                ip6 = p[GTP_U_Header].payload
                i = ue_index(ip6.src)
                assert 0 <= i < a.flows
                if cores == 1:
                    assert i == k % a.flows
                teid, ue4, sgw, _ = common.bearer(a, i)
                assert p[GTP_U_Header].teid == teid
                assert int(ipaddress.IPv4Address(p[IP].src)) == sgw
                assert int(ipaddress.IPv6Address(ip6.dst)) == int(ipaddress.IPv6Address("fd47:7471::1")) + i % a.sgws
                assert l4_ok(ip6), (cores, core, k)
                q = p.copy()
                q[IP].chksum = None
                assert Ether(raw(q))[IP].chksum == p[IP].chksum
                if a.outer_udp_csum == "valid":
                    assert outer_ok(p), (cores, core, k)
                else:
                    assert p[UDP].chksum == 0
                seen.add(i)
                iids.add(int(ipaddress.IPv6Address(ip6.src)) & ((1 << 64) - 1))
                sports.add(ip6.payload.sport)
                dsts.add(ip6.dst)
        assert seen == set(range(a.flows))
        assert len(iids) == a.flows and len(dsts) == len(sports) == min(a.sgws, a.flows)


@pytest.mark.parametrize("tunables", [argv(ip=6, flows=50, pdn_addrs=7), argv(ip="4v6", flows=9, vlans=3, size=128)],
                         ids=lambda t: " ".join(t))
def test_downlink_packets_per_bearer(trex, tunables):
    a = params("downlink", tunables)
    s = _ip6_stream(trex.streams("downlink", tunables))
    ins = s["vm"]["instructions"]
    fix = [i for i in ins if i["type"] == "fix_checksum_hw"]
    l3 = 18 if a.vlans else 14
    assert [(f["l2_len"], f["l3_len"], f["l4_type"]) for f in fix] == [(l3, 40, 11)]
    srcs = set()
    for k, pkt in enumerate(run_program(binary(s), [i for i in ins if i["type"] != "fix_checksum_hw"],
                                        2 * a.flows)):
        p = Ether(pkt)
        ip6 = p[IPv6]
        assert ue_index(ip6.dst) == k % a.flows
        assert int(ipaddress.IPv6Address(ip6.dst)) & ((1 << 64) - 1) == 1
        srcs.add(int(ipaddress.IPv6Address(ip6.src)))
        ip6.payload.chksum = None        # the fix is the NIC's (TRex) or tg_tx's (tests/engine/test_engine_ipv6.py)
        assert l4_ok(Ether(raw(p))[IPv6])
    base = int(ipaddress.IPv6Address("fd47:7471::"))
    assert srcs == {base + n for n in range(1, min(a.pdn_addrs, 2 * a.flows) + 1)}


def test_4v6_streams_and_stats(trex):
    ss = trex.streams("uplink", argv(ip="4v6", size=256, flows=8, stats="latency"))
    assert [s["name"] for s in ss] == ["uplink_256", "uplink_256_ip6"]
    assert [s["flow_stats"]["stream_id"] for s in ss] == [10, 11]
    assert [s["mode"]["rate"] for s in ss] == [ss[0]["mode"]["rate"]] * 2
    ip6_fix = [i for i in ss[1]["vm"]["instructions"] if i["type"] == "fix_checksum_hw"]
    assert [(f["l2_len"], f["l3_len"]) for f in ip6_fix] == [(50, 40)]
    assert [s["name"] for s in trex.streams("downlink", argv(ip="4v6", size=128))] == \
        ["downlink_128", "downlink_128_ip6"]


def test_ip4_is_the_default_and_unchanged(trex):
    for prof, t in (("uplink", argv(size=256, flows=16, outer_udp_csum="valid")), ("downlink", argv(size=64))):
        assert trex.streams(prof, t) == trex.streams(prof, t + argv(ip=4))


def test_uplink_ipv6_with_the_teids_a_upf_chose(trex, tmp_path):
    """--teid-file (a UPF that chose its F-TEIDs: CHOOSE, as Open5GS does) with the outer UDP
    checksum valid: every IPv6 packet of two cycles on 1, 2 and 3 cores carries bearer i's TEID from
    the file, its /64, and valid outer and inner checksums (refused before: no IPv6 sweep of a UPF
    that chooses TEIDs could run with the checksum on)."""
    import random
    rnd = random.Random(5)
    teids = [rnd.randrange(1, 1 << 32) for _ in range(20)] + [0xFFFFFFFF, 1]
    flows = 20
    f = tmp_path / "teids.txt"
    f.write_text("".join(f"{t:#010x} 10.64.0.{1 + i} 10.201.0.{16 + i % 4} {0x80000000 + i:#010x}\n"
                         for i, t in enumerate(teids)))
    tunables = argv(ip=6, size=256, flows=flows, sgws=4, bearers=len(teids), outer_udp_csum="valid",
                    teid_file=str(f))
    a = params("uplink", tunables)
    s = _ip6_stream(trex.streams("uplink", tunables))
    ins, base = s["vm"]["instructions"], binary(s)
    for cores in (1, 2, 3):
        seen = set()
        for core in range(cores):
            for k, pkt in enumerate(run_program(base, ins, 2 * flows, core, cores)):
                p = Ether(pkt)
                ip6 = p[GTP_U_Header].payload
                i = ue_index(ip6.src)
                assert 0 <= i < flows and p[GTP_U_Header].teid == teids[i], (cores, core, k)
                assert outer_ok(p) and l4_ok(ip6), (cores, core, k)
                seen.add(i)
        assert seen == set(range(flows))
    assert a.teids[:flows] == teids[:flows]


def test_a_refused_profile_is_its_reason_on_one_line(trex):
    """The TRex worker answers a profile's own refusal (ProfileError) with its reason as one line,
    not TRex's summary with the traceback's text (what a sweep printed as its error)."""
    with pytest.raises(LoadError) as e:
        trex.streams("uplink", argv(ip=6, order="random", flows=8, sgws=4, outer_udp_csum="valid"))
    msg = str(e.value)
    assert "\n" not in msg and "Traceback" not in msg, msg
    assert msg.startswith("ProfileError: --outer-udp-csum valid with --ip 6 needs --order seq"), msg
