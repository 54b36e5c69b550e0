"""GTP-U over IPv6 in the uplink profile (issue 32 item 2: --n3 6) and the bearer file's sgw6=.

Loaded by TRex's own client library (tests/lib/trex_ref.TrexWorker) and dissected with Scapy 2.8:
the base packets (Ether / IPv6 sgw6 -> pgw_addr6 / UDP 2152 with its checksum over the IPv6 pseudo
header, never 0 / GTP-U / the inner IPv4 or IPv6 packet with its own checksums), the smallest
sizes and the refusals, and the packets of the field engine's programs (tests/lib/trex_ref.run_program)
on 1, 2 and 3 cores over two cycles: bearer i's TEID, UE and SGW (outer IPv6 source sgw6_base +
i % sgws) in every packet, every checksum valid. The engine's own transmit and receive of these
frames: tests/engine/test_engine_ipv6.py."""

from __future__ import annotations

import ipaddress
import random

import pytest
from scapy.all import Ether, raw
from scapy.contrib.gtp import GTP_U_Header
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.inet6 import IPv6

from gtplab.cli import main as gtplab_main
from tests.lib.streams import ipv6_l4_ok
from tests.lib.trex_ref import LoadError, argv, binary, common, params, run_program

SGW6 = int(ipaddress.IPv6Address("fd47:7473::10"))


def outer6_ok(p) -> bool:
    """The outer UDP checksum is the one Scapy computes over the IPv6 pseudo header, and not 0."""
    q = p.copy()
    q[UDP].chksum = None
    return p[UDP].chksum != 0 and Ether(raw(q))[UDP].chksum == p[UDP].chksum


def inner4_ok(ip4) -> bool:
    q = ip4.copy()
    q.chksum = None
    q.payload.chksum = None
    r = IP(raw(q))
    return r.chksum == ip4.chksum and r.payload.chksum == ip4.payload.chksum


def test_minimum_sizes_are_said():
    assert common.min_frame_size("uplink", n3=6) == 14 + 40 + 8 + 8 + 20 + 8 + 4 == 102
    assert common.min_frame_size("uplink", "tcp", n3=6) == 114
    assert common.min_frame_size("uplink", ip=6, n3=6) == 14 + 40 + 8 + 8 + 40 + 8 + 4 == 122
    assert common.min_frame_size("uplink", "tcp", ip="4v6", n3=6) == 134
    assert common.min_frame_size("downlink", n3=6) == 64          # the generator's downlink is not tunnelled
    with pytest.raises(common.ProfileError, match=r"smallest uplink frame with inner IPv4/UDP is 102 bytes "
                                                  r"\(FCS included; IPv4 G-PDU over IPv6: 14 Ethernet \+ 40 IPv6 \+ 8 UDP "
                                                  r"\+ 8 GTP-U \+ 20 IPv4 \+ 8 UDP\)"):
        params("uplink", argv(n3=6, outer_udp_csum="valid", size=101))
    with pytest.raises(common.ProfileError, match="inner IPv6/UDP is 122"):
        params("uplink", argv(n3=6, ip=6, outer_udp_csum="valid", size=121))
    assert params("uplink", argv(n3=6, ip=6, outer_udp_csum="valid", size=100, clamp="yes")).size == 122


def test_zero_outer_checksum_over_ipv6_is_refused_in_one_line(tmp_path, capsys):
    with pytest.raises(common.ProfileError, match=r"--outer-udp-csum zero with --n3 6: a UDP checksum is "
                                                  r"mandatory over IPv6 \(RFC 8200 8.1"):
        params("uplink", argv(n3=6))
    assert gtplab_main(["bearers", "--profile", "uplink", "-t", "n3=6,outer_udp_csum=zero",
                        "-o", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "RFC 8200" in err[0], err


@pytest.mark.parametrize("bad", [argv(n3=5), argv(n3=6, outer_udp_csum="valid", sgw6_base="10.0.0.1"),
                                 argv(n3=6, outer_udp_csum="valid", sgw6_base="fd47:7473::ffff:fffe", sgws=4),
                                 argv(n3=6, outer_udp_csum="valid", order="random", flows=8, sgws=4)])
def test_bad_tunables(bad):
    with pytest.raises(common.ProfileError):
        params("uplink", bad)


def test_bearer_file_lines_with_sgw6(tmp_path):
    out = tmp_path / "b.txt"
    assert gtplab_main(["bearers", "--profile", "downlink", "-t", "n3=6,ip=6,flows=8,sgws=4", "-o", str(out)]) == 0
    lines = [ln for ln in out.read_text().splitlines() if not ln.startswith("#")]
    assert lines[0] == "0x00010000 10.64.0.1 10.201.0.16 0x80000000 ue6=fd47:7470:0:0::/64 sgw6=fd47:7473::10"
    assert lines[7] == "0x00010007 10.64.0.8 10.201.0.19 0x80000007 ue6=fd47:7470:0:7::/64 sgw6=fd47:7473::13"
    assert gtplab_main(["bearers", "--profile", "uplink", "-t", "flows=4", "-o", str(out)]) == 0
    assert "sgw6=" not in out.read_text()


@pytest.mark.parametrize("ip,l4,size", [(4, "udp", 102), (4, "tcp", 300), (6, "udp", 122), (6, "udp", 1518)])
def test_uplink_base_packet(trex, ip, l4, size):
    (s,) = trex.streams("uplink", argv(n3=6, ip=ip, l4=l4, size=size, flows=8, outer_udp_csum="valid"))
    p = Ether(binary(s))
    assert len(raw(p)) == size - 4 and p.type == 0x86DD
    o = p[IPv6]
    assert (o.version, o.tc, o.fl, o.nh, o.hlim) == (6, 0, 0, 17, 64)
    assert (o.src, o.dst) == ("fd47:7473::10", "fd47:7473::1") and o.plen == size - 4 - 54
    assert (p[UDP].sport, p[UDP].dport, p[UDP].len) == (2152, 2152, o.plen) and outer6_ok(p)
    g = p[GTP_U_Header]
    assert (g.gtp_type, g.teid, g.length) == (255, 0x10000, size - 4 - 62 - 8)
    inner = g.payload
    if ip == 4:
        assert isinstance(inner, IP) and (inner.src, inner.dst) == ("10.64.0.1", "198.18.0.1")
        assert isinstance(inner.payload, TCP if l4 == "tcp" else UDP) and inner4_ok(inner)
    else:
        assert isinstance(inner, IPv6) and inner.dst == "fd47:7471::1" and ipv6_l4_ok(inner)


UPLINK = [argv(n3=6, outer_udp_csum="valid", flows=64, sgws=4),                      # sw checksum
          argv(n3=6, outer_udp_csum="valid", flows=12, sgws=4, l4="tcp", size=300, checksum="hw"),
          argv(n3=6, outer_udp_csum="valid", flows=16, sgws=4, size=256, stats="latency"),
          argv(n3=6, ip=6, outer_udp_csum="valid", flows=40, sgws=8, size=1424),
          argv(n3=6, ip="4v6", outer_udp_csum="valid", flows=9, sgws=3, size=200)]


@pytest.mark.parametrize("tunables", UPLINK, ids=lambda t: " ".join(t))
def test_uplink_packets_per_bearer_on_1_2_3_cores(trex, tunables):
    """Every packet: bearer i's TEID, UE and SGW IPv6 address (sgw6_base + i % sgws), the outer UDP
    checksum right over the IPv6 pseudo header (and the inner ones, after the fix instruction when
    the stream has one: the NIC's in TRex, tg_tx's in the engine, computed here)."""
    a = params("uplink", tunables)
    for s in trex.streams("uplink", tunables):
        ins = s["vm"]["instructions"]
        fix = [i for i in ins if i["type"] == "fix_checksum_hw"]
        assert all(f["l2_len"] == 70 for f in fix), fix        # the inner header, behind the outer IPv6
        base = binary(s)
        for cores in (1, 2, 3):
            seen = set()
            for core in range(cores):
                for k, pkt in enumerate(run_program(base, [i for i in ins if i["type"] != "fix_checksum_hw"],
                                                    2 * a.flows, core, cores, random.Random(7))):
                    p = Ether(pkt)
                    inner = p[GTP_U_Header].payload
                    if fix:                  # what the fix instruction does, over the inner pseudo header
                        inner.payload.chksum = None
                        if isinstance(inner, IP):
                            inner.chksum = None
                        p = Ether(raw(p))
                        inner = p[GTP_U_Header].payload
                    if isinstance(inner, IP):
                        i = int(ipaddress.IPv4Address(inner.src)) - a.ue_base
                        assert inner4_ok(inner), (cores, core, k)
                    else:
                        i = (int(ipaddress.IPv6Address(inner.src)) >> 64) & 0xFFFFFFFF
                        assert ipv6_l4_ok(inner), (cores, core, k)
                    assert 0 <= i < a.flows
                    if cores == 1 and a.order == "seq":
                        assert i == k % a.flows
                    teid, _, _, _ = common.bearer(a, i)
                    assert p[GTP_U_Header].teid == teid
                    assert int(ipaddress.IPv6Address(p[IPv6].src)) == SGW6 + i % a.sgws, (i, p[IPv6].src)
                    assert p[IPv6].dst == "fd47:7473::1"
                    assert outer6_ok(p), (cores, core, k, s["name"])
                    seen.add(i)
            if a.order == "seq":
                assert seen == set(range(a.flows))


def test_n3_4_is_the_default_and_unchanged(trex):
    t = argv(size=256, flows=16, outer_udp_csum="valid")
    assert trex.streams("uplink", t) == trex.streams("uplink", t + argv(n3=4))


def test_a_refused_profile_is_its_reason_on_one_line(trex):
    with pytest.raises(LoadError) as e:
        trex.streams("uplink", argv(n3=6, outer_udp_csum="zero"))
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("ProfileError: --outer-udp-csum zero with --n3 6"), msg
