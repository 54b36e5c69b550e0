"""SDF filters and several PDRs per bearer in the XDP PGW-U (issue 32 item 4), with BPF_PROG_TEST_RUN.

A bearer half with PGWU_B_SDF has a precedence-ordered filter list (sdf_lists, dataplane/pgwu.h
struct pgwu_sdf_list), each filter naming its PDR (sdf_pdrs: FAR drop or forward, usage counters;
sdf_qos: its QER). The bearers here are made with `pgwu session add --filter`, the way a test or the
bench sets filters without PFCP; the Flow Description is the IPFilterRule of TS 29.212 5.4.2, written
remote -> UE ("permit out ... from REMOTE to assigned"), so an uplink packet matches it with source and
destination swapped. Each row below: a one-PDR filter, a packet that matches it (forwarded, counted in
that PDR's usage) and one that does not (drop_no_pdr, counted in nothing), in both directions, IPv4
and IPv6 inner packets.
"""

from __future__ import annotations

import os
import struct

import pytest
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.inet6 import IPv6, IPv6ExtHdrDestOpt
from scapy.layers.ipsec import AH, ESP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from gtplab.gtpu import packets as P
from gtplab.kernel import bpf
from tests.lib.pgwu import pgwu
from tests.lib.pgwu_config import BASE_CONFIG, NH_SGI

pytestmark = pytest.mark.bpf

TEID, UE, UE64, SGW, SGW_TEID = 0x900, "10.45.0.9", "fd47:7470:0:9::/64", P.SGW_ADDR, 0x9009
UE6 = "fd47:7470:0:9::10"
PLAIN_TEID, PLAIN_UE = 0x901, "10.45.0.19"        # a bearer without filters, beside it
R4, R4_OTHER = "198.51.100.7", "198.51.101.7"     # remote (N6) hosts
R6, R6_OTHER = "2001:db8:5:1::7", "2001:db8:6::7"


@pytest.fixture(scope="module")
def dp(dataplane):
    return dataplane


@pytest.fixture
def sdp(dp):
    """No bearer, no filter; stats zero. Returns a function that adds the bearer (TEID, UE, UE64)
    with `--filter spec`, and the plain one."""
    dp.set_config(BASE_CONFIG)
    pgwu(dp.pin_dir, "session", "flush")        # the filters with the bearers
    dp.reset_stats()

    def add(spec: str) -> None:
        pgwu(dp.pin_dir, "session", "add", "--teid", TEID, "--ue", UE, "--ue6", UE64, "--sgw", SGW,
             "--sgw-teid", SGW_TEID, "--filter", spec)
        pgwu(dp.pin_dir, "session", "add", "--teid", PLAIN_TEID, "--ue", PLAIN_UE, "--sgw", SGW,
             "--sgw-teid", 0x902)
    yield add
    pgwu(dp.pin_dir, "session", "flush")


def pdr_usage(dp) -> dict[int, tuple[int, int, int]]:
    """{precedence: (flags, packets, bytes)} of every PDR in sdf_pdrs (struct pgwu_sdf_pdr)."""
    out = {}
    with bpf.Map.pinned(os.path.join(dp.pin_dir, "sdf_pdrs")) as m:
        for _, v in m.items():
            flags, prec, _pdr, packets, nbytes = struct.unpack("=IIH6xQQ", v)
            out[prec] = (flags, packets, nbytes)
    return out


def frame(direction: str, inner) -> bytes:
    """The frame that carries the inner packet: a G-PDU to the bearer's TEID (uplink), the packet
    from the SGi router (downlink)."""
    if direction == "ul":
        return bytes(P.gtpu(inner, teid=TEID))
    return bytes(Ether(src=NH_SGI.dmac, dst=P.PGW_SGI_MAC) / inner)


def pkt(direction: str, family: int, remote: str | None = None, l4=None, tos: int = 0, fl: int = 0):
    """An inner packet between the UE and a remote host: from the UE uplink, to it downlink."""
    remote = remote or (R4 if family == 4 else R6)
    ue = UE if family == 4 else UE6
    src, dst = (ue, remote) if direction == "ul" else (remote, ue)
    l4 = l4 if l4 is not None else UDP(sport=40000, dport=5001)
    ip = IP(src=src, dst=dst, tos=tos) if family == 4 else IPv6(src=src, dst=dst, tc=tos, fl=fl)
    return ip / l4 / Raw(b"\x5a" * 40)


def ports(direction: str, remote_port: int, ue_port: int = 5000):
    """UDP between the remote's port and the UE's, in the packet's direction"""
    if direction == "ul":
        return UDP(sport=ue_port, dport=remote_port)
    return UDP(sport=remote_port, dport=ue_port)


def send(dp, direction: str, inner) -> tuple[str, str]:
    """(verdict, reason) of one packet, exactly one counted"""
    before = dp.stats()
    f = frame(direction, inner)
    r = dp.run_access(f) if direction == "ul" else dp.run_sgi(f)
    after = dp.stats()
    delta = [k for k in after if after[k] != before.get(k)]
    assert len(delta) == 1, f"one packet, counted {delta}"
    return r.verdict, delta[0][0]


FWD = {"ul": ("redirect", "ul_fwd"), "dl": ("redirect", "dl_fwd")}
NO_PDR = ("drop", "drop_no_pdr")

# (id, families, filter after "DIR 10", matching packet(direction, family), not matching one)
ROWS = [
    ("proto", (4, 6), "flow permit out 17 from any to assigned",
     lambda d, f: pkt(d, f), lambda d, f: pkt(d, f, l4=TCP(sport=40000, dport=5001))),
    ("remote-prefix-v4", (4,), "flow permit out ip from 198.51.100.0/24 to assigned",
     lambda d, f: pkt(d, f, R4), lambda d, f: pkt(d, f, R4_OTHER)),
    ("remote-prefix-v6", (6,), "flow permit out ip from 2001:db8:5::/48 to assigned",
     lambda d, f: pkt(d, f, R6), lambda d, f: pkt(d, f, R6_OTHER)),
    ("v4-address-not-v6", (6,), "flow permit out ip from 0.0.0.0/0 to assigned",
     lambda d, f: pkt(d, 4), lambda d, f: pkt(d, 6)),
    ("ue-side-address", (4,), f"flow permit out ip from any to {UE}",
     lambda d, f: pkt(d, f), lambda d, f: pkt(d, 6)),
    ("port-range", (4, 6), "flow permit out 17 from any 1000-2000 to assigned 5000",
     lambda d, f: pkt(d, f, l4=ports(d, 1500)), lambda d, f: pkt(d, f, l4=ports(d, 2001))),
    ("port-list", (4, 6), "flow permit out 17 from any 1000-2000,3000 to assigned",
     lambda d, f: pkt(d, f, l4=ports(d, 3000)), lambda d, f: pkt(d, f, l4=ports(d, 2999))),
    ("ue-port", (4, 6), "flow permit out 17 from any to assigned 5000",
     lambda d, f: pkt(d, f, l4=ports(d, 80, 5000)), lambda d, f: pkt(d, f, l4=ports(d, 80, 5001))),
    ("tos-masked", (4, 6), "tos 0xb8/0xfc",
     lambda d, f: pkt(d, f, tos=0xbb), lambda d, f: pkt(d, f, tos=0xb0)),
    ("flow-label", (6,), "flowlabel 0x12345",
     lambda d, f: pkt(d, f, fl=0x12345), lambda d, f: pkt(d, f, fl=0x12346)),
    ("spi-esp", (4, 6), "spi 4096",
     lambda d, f: pkt(d, f, l4=ESP(spi=4096, seq=1)), lambda d, f: pkt(d, f, l4=ESP(spi=4097, seq=1))),
    ("spi-ah", (4,), "spi 4096",
     lambda d, f: pkt(d, f, l4=AH(spi=4096, nh=59, payloadlen=4) / Raw(bytes(12))),
     lambda d, f: pkt(d, f, l4=AH(spi=4097, nh=59, payloadlen=4) / Raw(bytes(12)))),
    ("ports-behind-ext-header", (6,), "flow permit out 17 from any 1000-2000 to assigned",
     lambda d, f: pkt(d, f, l4=IPv6ExtHdrDestOpt() / ports(d, 1500)),
     lambda d, f: pkt(d, f, l4=IPv6ExtHdrDestOpt() / ports(d, 2500))),
]
CASES = [pytest.param(row, d, fam, id=f"{row[0]}-{d}-v{fam}") for row in ROWS for d in ("ul", "dl")
         for fam in row[1]]


@pytest.mark.parametrize("row,direction,family", CASES)
def test_filter_field_matches_its_packets_only(dp, sdp, row, direction, family):
    """The matching packet is forwarded as any bearer's and counted in its PDR's usage (T-PDU
    octets); the other one matches no filter: drop_no_pdr, counted in no usage."""
    _, _, spec, match, miss = row
    sdp(f"{direction} 10 {spec}")
    good, bad = match(direction, family), miss(direction, family)
    assert send(dp, direction, good) == FWD[direction]
    assert send(dp, direction, bad) == NO_PDR
    assert pdr_usage(dp)[10][1:] == (1, len(good))


def test_precedence_first_match_wins(dp, sdp):
    """Three uplink PDRs given out of order: precedence 10 (UDP to port 5000) forwards, 20 (UDP)
    drops (drop_far), 30 (no filter: everything) forwards; each packet goes to the lowest
    precedence it matches, and only that PDR counts it."""
    sdp("ul 30; ul 20 drop flow permit out 17 from any to assigned; "
        "ul 10 flow permit out 17 from any 5000 to assigned")
    assert send(dp, "ul", pkt("ul", 4, l4=ports("ul", 5000))) == FWD["ul"]
    assert send(dp, "ul", pkt("ul", 4, l4=ports("ul", 5001))) == ("drop", "drop_far")
    tcp = pkt("ul", 4, l4=TCP(sport=1, dport=5000))
    assert send(dp, "ul", tcp) == FWD["ul"]
    assert send(dp, "ul", pkt("ul", 6, l4=ports("ul", 5000))) == FWD["ul"]
    u = pdr_usage(dp)
    assert (u[10][1], u[20][1], u[30][1]) == (2, 0, 1)
    assert u[30][2] == len(tcp)
    # the downlink has no filters: every packet is the bearer's
    assert send(dp, "dl", pkt("dl", 4, l4=ports("dl", 1))) == FWD["dl"]


def test_each_pdr_has_its_own_qer(dp, sdp):
    """A closed gate on one PDR drops its packets only (drop_gate_closed); an MBR on another
    polices its packets only: 8 kbit/s with the smallest bucket (3,000 octets) lets three 1,000-octet
    T-PDUs through, then drop_mbr, while the default PDR forwards all of its own."""
    sdp("dl 10 gate closed flow permit out 6 from any to assigned; "
        "dl 20 mbr 8 flow permit out 17 from any to assigned; dl 30")
    assert send(dp, "dl", pkt("dl", 4, l4=TCP())) == ("drop", "drop_gate_closed")
    udp = IP(src=R4, dst=UE) / UDP(sport=1, dport=2) / Raw(bytes(1000 - 28))
    verdicts = [send(dp, "dl", udp) for _ in range(5)]
    assert verdicts[:3] == [FWD["dl"]] * 3 and verdicts[3:] == [("drop", "drop_mbr")] * 2, verdicts
    icmp = IP(src=R4, dst=UE, proto=1) / Raw(bytes(1000 - 20))
    assert [send(dp, "dl", icmp) for _ in range(5)] == [FWD["dl"]] * 5
    u = pdr_usage(dp)
    assert (u[10][1:], u[20][1:], u[30][1:]) == ((0, 0), (3, 3000), (5, 5000))
    assert send(dp, "ul", pkt("ul", 4)) == FWD["ul"]          # uplink: no filters


def test_bearer_without_filters_ignores_the_lists(dp, sdp):
    """Only a half with PGWU_B_SDF looks at sdf_lists: the plain bearer beside one forwards
    what the filtered one drops, and no PDR counts it."""
    sdp("ul 10 drop")
    assert send(dp, "ul", pkt("ul", 4)) == ("drop", "drop_far")
    plain = bytes(P.gtpu(IP(src=PLAIN_UE, dst=R4) / UDP() / Raw(bytes(40)), teid=PLAIN_TEID))
    assert dp.run_access(plain).verdict == "redirect"
    assert pdr_usage(dp)[10][1] == 0


@pytest.mark.parametrize("spec,why", [
    ("ul 10 flow permit in 17 from any to any", "expected 'out'"),
    ("ul 10 flow deny out 17 from any to any", "expected 'permit'"),
    ("ul 10 flow permit out 17 from 10.0.0.0/33 to assigned", "bad prefix length"),
    ("ul 10 flow permit out 1 from any 80 to assigned", "ports with a protocol that has none"),
    ("ul 10 flow permit out 17 from 10.0.0.1 to 2001:db8::1", "an IPv4 and an IPv6 address"),
    ("ul 10 flow permit out 17 from any 9-8 to assigned", "low above high"),
    ("up 10", "expected ul or dl"),
    ("ul x", "precedence"),
    ("ul 10 tos 300", "tos"),
    (";".join(f"ul {i} flow permit out 17 from any {i + 1} to assigned" for i in range(33)),
     "over 32"),
    (";".join(f"ul {i} flow permit out 17 from any 1,2,3,4,5,6,7,8 to assigned" for i in range(5)),
     "over 32 SDF filters"),                               # 5 PDRs, 40 filters: a port counts one
])
def test_bad_filter_is_one_line_exit_2(dp, sdp, spec, why):
    """Bad --filter input: exit 2, one line saying what, nothing installed."""
    cp = pgwu(dp.pin_dir, "session", "add", "--teid", TEID, "--ue", UE, "--sgw", SGW, "--sgw-teid", 1,
              "--filter", spec, check=False)
    assert cp.returncode == 2, cp.stderr
    assert why in cp.stderr and len(cp.stderr.strip().splitlines()) == 1, cp.stderr
    assert dp.ul_bearer(TEID) is None and pdr_usage(dp) == {}


def test_session_del_removes_the_filters(dp, sdp):
    """session del removes the bearer's lists and PDRs with it."""
    sdp("ul 10 flow permit out 17 from any to assigned; dl 11")
    assert len(pdr_usage(dp)) == 2
    pgwu(dp.pin_dir, "session", "del", "--teid", TEID)
    assert pdr_usage(dp) == {}
    with bpf.Map.pinned(os.path.join(dp.pin_dir, "sdf_lists")) as m:
        assert list(m.keys()) == []
