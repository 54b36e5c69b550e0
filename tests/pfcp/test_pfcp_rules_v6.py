"""The rules builder (gtplab/pfcp/rules.py) for IPv6 UEs, GTP-U over IPv6 and several PDRs with SDF
filters (issue 32): each IE checked octet by octet against TS 29.244 Release 17 (8.2.62 UE IP
Address, 8.2.3 F-TEID, 8.2.56 Outer Header Creation, 8.2.64 Outer Header Removal, 8.2.79 PDN Type,
8.2.5 SDF Filter, 7.5.2.2 Create PDR), every message decoded by tshark with no malformed packet, no
expert warning and no reserved value; an IPv4 session's bytes are what they were; bad input is one
ValueError naming the field."""

from __future__ import annotations

import ipaddress
import re
import shutil
import struct

import pytest
from scapy.contrib import pfcp as sp
from scapy.utils import wrpcap

from gtplab.pfcp import messages as m
from gtplab.pfcp import rules as R
from tests.lib.tshark import pfcp_decoded_cleanly

NODE = CP = "10.0.0.1"
UE4, UE6 = "10.64.0.1", "fd47:7470:0:1::/64"
N3_6, GNB_6 = "fd47:7472::1", "fd47:7472::16"


def est(s: R.Session):
    return m.header(m.SESS_EST_REQ, 9, 0) / sp.PFCPSessionEstablishmentRequest(
        IE_list=R.establishment_ies(m.node_id_ie(NODE), CP, 0x55, s))


def raw_ies(buf: bytes, t: int, out=None) -> list[bytes]:
    """The value octets of every IE of type t in a PFCP message or grouped IE value, depth first
    (parsed from the bytes, not from Scapy's reading of them)."""
    out = [] if out is None else out
    i = 0
    while i + 4 <= len(buf):
        typ, n = struct.unpack_from("!HH", buf, i)
        val = buf[i + 4:i + 4 + n]
        if typ == t:
            out.append(val)
        if typ in (1, 2, 3, 4, 5, 7, 11, 17, 54):     # Create PDR/PDI/FAR/URR/QER, Forwarding Parameters, ...
            raw_ies(val, t, out)
        i += 4 + n
    return out


def body(msg) -> bytes:
    return bytes(msg)[16:]       # the header with SEID: 16 octets


def pdrs(msg) -> list[bytes]:
    return raw_ies(body(msg), 1)


V6 = R.Session(ue=None, ue6=UE6, teid=0x10, n3=N3_6, gnb=GNB_6, gnb_teid=0x20)
V4V6 = R.Session(ue=UE4, ue6=UE6, teid=0x10, n3="10.201.0.1", gnb="10.201.0.16", gnb_teid=0x20)
SDF = R.Session(ue=UE4, ue6=UE6, teid=0x10, n3="10.201.0.1", gnb="10.201.0.16", gnb_teid=0x20, pdrs=(
    R.Pdr(uplink=True, precedence=10, sdf=(R.SdfFilter(flow=R.flow_description(17, "198.51.100.0/24", "1000-2000",
                                                                                "5000")),),
          mbr_kbps=(1000, 2000), urr=R.UrrSpec(volume_threshold=1000)),
    R.Pdr(uplink=False, precedence=20, sdf=(R.SdfFilter(tos=(0xB8, 0xFC)), R.SdfFilter(spi=0x1234),
                                            R.SdfFilter(flow_label=0xABCDE)), forward=False),
    R.Pdr(uplink=True, precedence=5, sdf=(R.SdfFilter(flow=R.flow_description(58, "fd47:7471::1")),)),
))


def test_an_ipv6_ues_prefix_is_the_ue_ip_address_with_v6_and_pdn_type_ipv6():
    msg = est(V6)
    ul, dl = raw_ies(body(msg), 93)
    prefix = ipaddress.IPv6Network(UE6).network_address.packed
    assert ul == b"\x01" + prefix and dl == b"\x05" + prefix     # V6 (bit 1); S/D (bit 3) in the downlink
    assert raw_ies(body(msg), 113) == [b"\x02"]                  # PDN Type IPv6


def test_an_ipv4v6_session_carries_both_addresses_and_pdn_type_ipv4v6():
    msg = est(V4V6)
    ul, dl = raw_ies(body(msg), 93)
    want = ipaddress.IPv4Address(UE4).packed + ipaddress.IPv6Network(UE6).network_address.packed
    assert ul == b"\x03" + want and dl == b"\x07" + want
    assert raw_ies(body(msg), 113) == [b"\x03"]


def test_gtpu_over_ipv6_fteid_outer_header_creation_and_removal():
    msg = est(V6)
    [fteid] = raw_ies(body(msg), 21)
    assert fteid == b"\x02" + struct.pack("!I", 0x10) + ipaddress.IPv6Address(N3_6).packed    # V6
    [ohc] = raw_ies(body(msg), 84)
    assert ohc == b"\x02\x00" + struct.pack("!I", 0x20) + ipaddress.IPv6Address(GNB_6).packed  # GTP-U/UDP/IPv6
    assert raw_ies(body(msg), 95) == [b"\x01"]                     # Outer Header Removal GTP-U/UDP/IPv6
    choose = est(R.Session(ue=None, ue6=UE6, teid=None, n3=N3_6, gnb=GNB_6, gnb_teid=1))
    assert raw_ies(body(choose), 21) == [b"\x06"]                 # CH and V6


@pytest.mark.parametrize("ohr", [0, 1, 6])
def test_outer_header_removal_as_asked(ohr):
    s = R.Session(ue=UE4, teid=1, n3="10.201.0.1", gnb="10.201.0.16", gnb_teid=2, ohr=ohr)
    assert raw_ies(body(est(s)), 95) == [bytes([ohr])]


def test_the_ipv4_sessions_default_outer_header_removal_is_gtpu_udp_ipv4():
    s = R.Session(ue=UE4, teid=1, n3="10.201.0.1", gnb="10.201.0.16", gnb_teid=2)
    assert raw_ies(body(est(s)), 95) == [b"\x00"]
    assert raw_ies(body(est(s)), 113) == [b"\x01"]


def test_several_pdrs_each_with_its_precedence_filters_far_qer_and_urr():
    msg = est(SDF)
    got = []
    for p in pdrs(msg):
        [pid] = raw_ies(p, 56)
        [prec] = raw_ies(p, 29)
        [far] = raw_ies(p, 108)
        [pdi] = raw_ies(p, 2)
        [src] = raw_ies(pdi, 20)
        got.append((struct.unpack("!H", pid)[0], struct.unpack("!I", prec)[0], struct.unpack("!I", far)[0],
                    src[0] & 0x0F, [struct.unpack("!I", x)[0] for x in raw_ies(p, 109)],
                    [struct.unpack("!I", x)[0] for x in raw_ies(p, 81)], len(raw_ies(pdi, 23))))
    # (PDR, precedence, FAR, source interface 0 Access / 1 Core, QERs, URRs, SDF filters)
    assert got == [(1, 100, 1, 0, [], [], 0), (2, 100, 2, 1, [], [], 0),
                   (3, 10, 3, 0, [2], [2], 1), (4, 20, 4, 1, [], [], 3), (5, 5, 5, 0, [], [], 1)]
    fars = {struct.unpack("!I", raw_ies(f, 108)[0])[0]: f for f in raw_ies(body(msg), 3)}
    assert raw_ies(fars[3], 44) == [b"\x02\x00"] and raw_ies(fars[3], 42) == [b"\x01"]     # FORW to Core
    assert raw_ies(fars[4], 44) == [b"\x01\x00"] and raw_ies(fars[4], 4) == []             # DROP
    assert raw_ies(fars[5], 44) == [b"\x02\x00"]
    [qer] = raw_ies(body(msg), 7)
    assert raw_ies(qer, 109) == [struct.pack("!I", 2)]
    assert raw_ies(qer, 26) == [(1000).to_bytes(5, "big") + (2000).to_bytes(5, "big")]
    [urr] = raw_ies(body(msg), 6)
    assert raw_ies(urr, 81) == [struct.pack("!I", 2)]


def test_sdf_filter_fields_octet_by_octet():
    p3, p4, p5 = pdrs(est(SDF))[2:]
    [fd] = raw_ies(p3, 23)
    text = b"permit out 17 from 198.51.100.0/24 1000-2000 to assigned 5000"
    assert fd == b"\x01\x00" + struct.pack("!H", len(text)) + text                    # FD
    tos, spi, fl = raw_ies(p4, 23)
    assert tos == b"\x02\x00" + b"\xb8\xfc"                                             # TTC
    assert spi == b"\x04\x00" + struct.pack("!I", 0x1234)                              # SPI
    assert fl == b"\x08\x00" + (0xABCDE).to_bytes(3, "big")                            # FL
    [icmp6] = raw_ies(p5, 23)
    assert icmp6.endswith(b"permit out 58 from fd47:7471::1 to assigned")


UP2CP = R.Session(ue=UE4, ue6=UE6, teid=0x10, n3="10.201.0.1", gnb="10.201.0.16", gnb_teid=0x20, qfi=9, pdrs=(
    R.Pdr(uplink=True, precedence=10, sdf=(R.SdfFilter(flow="permit out 58 from ff02::2/128 to assigned"),),
          to_cp=("10.201.0.16", 0xC0DE0044)),))


def test_a_pdr_to_the_cp_function_forwards_in_a_tunnel_to_its_address():
    """Router Solicitations to the SMF (Open5GS's SMF's UP2CP PDR): the extra uplink PDR's FAR forwards
    (Apply Action FORW) to Destination Interface CP-function (3, 8.2.24) with Outer Header Creation
    GTP-U/UDP/IPv4 to the given address and TEID; its PDI is the default uplink PDR's (F-TEID, QFI)
    with the ICMPv6 filter."""
    msg = est(UP2CP)
    p3 = pdrs(msg)[2]
    assert struct.unpack("!I", raw_ies(p3, 29)[0])[0] == 10
    [pdi] = raw_ies(p3, 2)
    assert raw_ies(pdi, 20) == [b"\x00"] and raw_ies(pdi, 124) == [b"\x09"]           # Access, QFI 9
    assert raw_ies(pdi, 23)[0].endswith(b"permit out 58 from ff02::2/128 to assigned")
    fars = {struct.unpack("!I", raw_ies(f, 108)[0])[0]: f for f in raw_ies(body(msg), 3)}
    assert raw_ies(fars[3], 44) == [b"\x02\x00"]                                        # FORW
    [fp] = raw_ies(fars[3], 4)
    assert raw_ies(fp, 42) == [b"\x03"]                                                  # CP-function
    assert raw_ies(fp, 84) == [b"\x01\x00" + struct.pack("!I", 0xC0DE0044)
                               + ipaddress.IPv4Address("10.201.0.16").packed]            # OHC GTP-U/UDP/IPv4
    assert raw_ies(fp, 160) == []                                                         # no 3GPP Interface Type


def test_a_pdr_can_share_another_pdrs_urr():
    """One URR for both directions of a service data flow: the downlink PDR names the uplink one's
    URR 2 and no URR 3 is created."""
    f = (R.SdfFilter(tos=(0xB8, 0xFC)),)
    s = R.Session(ue=UE4, teid=0x10, n3="10.201.0.1", gnb="10.201.0.16", gnb_teid=0x20, pdrs=(
        R.Pdr(uplink=True, precedence=10, sdf=f, urr=R.UrrSpec()),
        R.Pdr(uplink=False, precedence=10, sdf=f, urr_of=0)))
    msg = est(s)
    assert [[struct.unpack("!I", x)[0] for x in raw_ies(p, 81)] for p in pdrs(msg)] == [[], [], [2], [2]]
    assert [struct.unpack("!I", raw_ies(u, 81)[0])[0] for u in raw_ies(body(msg), 6)] == [2]


@pytest.mark.parametrize("pdrs,msg", [
    ((R.Pdr(uplink=True, precedence=1, urr_of=0),), "pdrs[0].urr_of 0: the index of another"),
    ((R.Pdr(uplink=True, precedence=1), R.Pdr(uplink=False, precedence=1, urr_of=0)), "pdrs[1].urr_of 0"),
    ((R.Pdr(uplink=True, precedence=1, urr=R.UrrSpec()), R.Pdr(uplink=False, precedence=1, urr_of=2)),
     "pdrs[1].urr_of 2"),
])
def test_a_shared_urr_must_be_another_pdrs_own(pdrs, msg):
    with pytest.raises(ValueError, match=re.escape(msg)):
        R.Session(ue=UE4, teid=1, n3="10.201.0.1", gnb="10.201.0.16", gnb_teid=2, pdrs=pdrs)
    with pytest.raises(ValueError, match="not both"):
        R.Pdr(uplink=True, precedence=1, urr=R.UrrSpec(), urr_of=0)


@pytest.mark.parametrize("kw", [{"uplink": False}, {"uplink": True, "forward": False}])
def test_a_cp_function_pdr_is_an_uplink_one_that_forwards(kw):
    with pytest.raises(ValueError, match="to_cp: an uplink PDR that forwards"):
        R.Pdr(precedence=10, to_cp=("10.0.0.1", 1), **kw)


def test_an_ipv4_session_is_built_as_before_the_ipv6_fields():
    """The sweep's and upftests' IPv4 sessions: the octets of a fixed session (as built before IPv6
    and SDF filters joined the builder)."""
    s = R.Session(ue=UE4, teid=0x10, n3="10.201.0.1", gnb="10.201.0.16", gnb_teid=0x20, mbr_kbps=(1, 2), qfi=9,
                  urr=R.UrrSpec(period=3))
    assert bytes(est(s)).hex() == WANT_V4


WANT_V4 = ("21320156000000000000000000000900003c0005000a0000010039000d0200000000000000550a000001000100540038"
           "00020001001d0004000000640002002500140001000015000901000000100ac90001005d0005020a400001007c000109"
           "00a000010b005f000100006c0004000000010051000400000001006d0004000000010001003d003800020002001d0004"
           "00000064000200130014000101005d0005060a40000100a0000111006c0004000000020051000400000001006d000400"
           "0000010003001c006c000400000001002c000202000004000a002a00010100a00001110003002a006c00040000000200"
           "2c0002020000040018002a00010000a000010b0054000a0100000000200ac900100006001c0051000400000001003e00"
           "010200250003010000004000040000000300070020006d0004000000010019000100001a000a00000000010000000002"
           "007c0001090071000101")


def test_catalogue_of_ipv6_and_sdf_sessions_decodes_cleanly_in_tshark(tmp_path):
    assert shutil.which("tshark"), "tshark is needed (setup.sh installs it)"
    msgs = {"v6": est(V6), "v4v6": est(V4V6), "sdf": est(SDF),
            "v6 choose": est(R.Session(ue=None, ue6=UE6, teid=None, n3=N3_6, gnb=GNB_6, gnb_teid=1)),
            "ohr 6": est(R.Session(ue=UE4, teid=1, n3="10.201.0.1", gnb="10.201.0.16", gnb_teid=2, ohr=6)),
            "cp": est(UP2CP)}
    names = sorted(msgs)
    for n in names:
        assert R.fixed_length_errors(msgs[n]) == [], n
    pcap = tmp_path / "v6.pcap"
    wrpcap(str(pcap), [m.frame(msgs[n]) for n in names])
    frames = pfcp_decoded_cleanly(pcap, names)
    assert "PDN Type: IPv6 (2)" in frames[names.index("v6")]
    assert "PDN Type: IPv4V6 (3)" in frames[names.index("v4v6")]
    assert "permit out 17 from 198.51.100.0/24 1000-2000 to assigned 5000" in frames[names.index("sdf")]
    assert "GTP-U/UDP/IP (6)" in frames[names.index("ohr 6")]
    assert "Interface: CP- Function (3)" in frames[names.index("cp")]


@pytest.mark.parametrize("kw,msg", [
    ({"ue": None}, "needs a UE IPv4 address, an IPv6 prefix or both"),
    ({"ue6": "fd47:7470::/48"}, "/64 prefix (TS 23.501 5.8.2.2.2), not /48"),
    ({"ue6": "fd47:7470::1/64"}, "ue6 'fd47:7470::1/64': an IPv6 /64 prefix"),
    ({"ue": "fd47::1"}, "the UE's IPv4 address"),
    ({"ohr": 3}, "ohr 3: Outer Header Removal"),
    ({"n3": "not-an-address"}, "n3 'not-an-address': not an IPv4 or IPv6 address"),
])
def test_a_bad_session_is_one_value_error_naming_the_field(kw, msg):
    base = dict(ue=UE4, teid=1, n3="10.201.0.1", gnb="10.201.0.16", gnb_teid=2)
    with pytest.raises(ValueError, match=None) as e:
        R.Session(**{**base, **kw})
    assert msg in str(e.value)


@pytest.mark.parametrize("args,msg", [
    ((300,), "protocol 300"), (("tcp",), "protocol 'tcp'"), ((17, "198.51.100.1/24"), "remote '198.51.100.1/24'"),
    ((17, "any", "70000"), "remote ports '70000'"), ((17, "any", "", "20-10"), "UE ports '20-10'"),
])
def test_a_bad_flow_description_is_refused(args, msg):
    with pytest.raises(ValueError) as e:
        R.flow_description(*args)
    assert msg in str(e.value)


def test_an_empty_sdf_filter_is_refused():
    with pytest.raises(ValueError, match="matches everything"):
        R.SdfFilter()


def test_the_sweeps_ipv4v6_template_renders_what_scapy_builds():
    """The sweep renders sessions from a template (10 k/s): an IPv4v6 bearer's message, rendered with
    its /64 prefix, is byte for byte the one the builder makes."""
    o = m.SessionOptions(n3_addr="10.201.0.1", urr=True, qfi=5)
    t = m.establishment_template(NODE, CP, o, ue6=True)
    for i in (0, 1, 0xFFFF, 0x12345):
        b = m.Bearer(i, 0x0A400001 + i, 0x0AC90010, 0x80000000 + i, 0x10000 + i, ue6=(0xFD477470 << 32) + i)
        want = bytes(m.session_establishment_request(4, NODE, CP, 0x99 + i, b, o))
        got = t.render(seq=4, cp_seid=0x99 + i, ue=b.ue, sgw=b.sgw, sgw_teid=b.sgw_teid, teid=b.teid, ue6=b.ue6)
        assert got == want
        [ul, _] = raw_ies(got[16:], 93)
        assert ul[5:13] == struct.pack("!Q", (0xFD477470 << 32) + i) and ul[13:] == bytes(8)


def test_a_bearer_files_ue6_makes_an_ipv4v6_session_and_is_written_back(tmp_path):
    from gtplab.pfcp import provision as prov
    f = tmp_path / "b.txt"
    f.write_text("0x10 10.64.0.1 10.201.0.16 0x20 csum=on ue6=fd47:7470:0:1::/64\n"
                 "0x11 10.64.0.2 10.201.0.16 0x21\n")
    a, b = prov.read_bearer_file(str(f), choose=False)
    assert a.ue6 == 0xFD47747000000001 and b.ue6 is None
    assert m.session_rules(a, m.SessionOptions(n3_addr="10.201.0.1")).pdn_type == R.PDN_IPV4V6
    assert m.session_rules(b, m.SessionOptions(n3_addr="10.201.0.1")).pdn_type == R.PDN_IPV4
    from gtplab.pfcp.sessions import Session
    out = tmp_path / "provisioned.txt"
    prov.write_bearer_file([Session(x, 0x100 + x.index, 0x200 + x.index, 0x30 + x.index, "10.201.0.1") for x in (a, b)],
                           str(out), "test")
    a2, b2 = prov.read_bearer_file(str(out), choose=False)
    assert (a2.ue6, b2.ue6, a2.teid, b2.teid) == (a.ue6, None, 0x30, 0x31)


@pytest.mark.parametrize("opt", ["ue6=fd47:7470::/48", "ue6=fd47:7470::1/64", "ue6=10.0.0.0/8", "ue6="])
def test_a_bearer_files_bad_ue6_is_one_line(tmp_path, opt):
    from gtplab.errors import UserError
    from gtplab.pfcp import provision as prov
    f = tmp_path / "b.txt"
    f.write_text(f"0x10 10.64.0.1 10.201.0.16 0x20 {opt}\n")
    with pytest.raises(UserError) as e:
        prov.read_bearer_file(str(f), choose=False)
    assert str(e.value) == f"bearer file {f}:1: {opt}: the UE's IPv6 prefix is a /64 (ue6=fd47:7470::/64)"
