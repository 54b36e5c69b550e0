"""The sweep's sessions over N3 IPv6 (issue 32 item 2, `--n3 6`): a bearer file's sgw6= makes the
session's uplink F-TEID V6 (CHOOSE with V6 when the UPF chooses), its downlink Outer Header Creation
GTP-U/UDP/IPv6 toward the SGW's IPv6 address and its Outer Header Removal 1 (GTP-U/UDP/IPv6); the
template the sweep renders them from gives Scapy's bytes; a Created PDR's F-TEID with V4 and V6 is
read for its IPv6 address; dut.pfcp.n3 takes an IPv6 address or one of each family. No UPF."""

from __future__ import annotations

import ipaddress
import struct

import pytest
from scapy.contrib import pfcp as sp

from gtplab.errors import UserError
from gtplab.pfcp import messages as m
from gtplab.pfcp import provision as prov
from gtplab.pfcp.errors import PfcpMalformed
from gtplab.pfcp.sessions import Session

NODE = CP = "10.0.0.1"
N3, N3_6 = "10.201.0.1", "fd47:7473::1"
SGW6 = int(ipaddress.IPv6Address("fd47:7473::10"))
GROUPED = (1, 2, 3, 4, 5, 7, 11, 17, 54)     # Create PDR/PDI/FAR/URR/QER, Forwarding Parameters, ...


def raw_ies(buf: bytes, t: int) -> list[bytes]:
    """The value octets of every IE of type t in a PFCP message body, depth first, read from the
    octets (not from Scapy's reading of them)."""
    out, i = [], 0
    while i + 4 <= len(buf):
        typ, n = struct.unpack_from("!HH", buf, i)
        val = buf[i + 4:i + 4 + n]
        out += [val] if typ == t else []
        out += raw_ies(val, t) if typ in GROUPED else []
        i += 4 + n
    return out


def bearer(i=0, **kw):
    return m.Bearer(i, 0x0A400001 + i, 0x0AC90010 + i % 4, 0x80000000 + i, 0x10000 + i, **kw)


def test_a_bearer_with_sgw6_is_a_session_over_n3_ipv6():
    o = m.SessionOptions(n3_addr=N3, n3_addr6=N3_6)
    msg = bytes(m.session_establishment_request(1, NODE, CP, 0x55, bearer(sgw6=SGW6 + 1), o))[16:]
    [fteid] = raw_ies(msg, 21)
    assert fteid == b"\x02" + struct.pack("!I", 0x10000) + ipaddress.IPv6Address(N3_6).packed       # V6
    [ohc] = raw_ies(msg, 84)
    assert ohc == b"\x02\x00" + struct.pack("!I", 0x80000000) + ipaddress.IPv6Address("fd47:7473::11").packed
    assert raw_ies(msg, 95) == [b"\x01"]                                  # OHR GTP-U/UDP/IPv6
    choose = bytes(m.session_establishment_request(1, NODE, CP, 0x55, bearer(sgw6=SGW6),
                                                   m.SessionOptions(choose=True)))[16:]
    assert raw_ies(choose, 21) == [b"\x06"]                               # CH and V6
    four = bytes(m.session_establishment_request(1, NODE, CP, 0x55, bearer(), o))[16:]
    assert raw_ies(four, 21)[0][0] == 0x01 and raw_ies(four, 95) == [b"\x00"]      # IPv4 as before


@pytest.mark.parametrize("choose", [False, True])
@pytest.mark.parametrize("ue6", [False, True])
def test_the_sweeps_n3v6_template_renders_what_scapy_builds(choose, ue6):
    o = m.SessionOptions(n3_addr=N3, n3_addr6=N3_6, choose=choose, urr=True, qfi=9)
    t = m.establishment_template(NODE, CP, o, ue6=ue6, sgw6=True)
    for i in (0, 1, 3, 0x12345):
        b = bearer(i, sgw6=SGW6 + i % 4, ue6=((0xFD477470 << 32) + i) if ue6 else None)
        if choose:
            b.teid = None
        want = bytes(m.session_establishment_request(4, NODE, CP, 0x99 + i, b, o))
        got = t.render(seq=4, cp_seid=0x99 + i, ue=b.ue, sgw=b.sgw, sgw_teid=b.sgw_teid, teid=b.teid or 0,
                       ue6=b.ue6 or 0, sgw6=b.sgw6)
        assert got == want, i


def test_a_created_pdrs_fteid_with_v4_and_v6_gives_both_addresses():
    rsp = m.header(m.SESS_EST_RSP, 7, 0x99) / sp.PFCPSessionEstablishmentResponse(IE_list=[
        m.node_id_ie("10.203.0.1"), sp.IE_Cause(cause=1), sp.IE_FSEID(v4=1, seid=0x77, ipv4="10.203.0.1"),
        sp.IE_CreatedPDR(IE_list=[sp.IE_PDR_Id(id=m.PDR_UL),
                                  sp.IE_FTEID(V4=1, V6=1, TEID=0x1234, ipv4=N3, ipv6=N3_6)])])
    s = m.scan(bytes(rsp))
    assert s.fteids[m.PDR_UL] == (0x1234, N3) and s.fteids6[m.PDR_UL] == N3_6
    only6 = m.header(m.SESS_EST_RSP, 7, 0x99) / sp.PFCPSessionEstablishmentResponse(IE_list=[
        sp.IE_Cause(cause=1), sp.IE_CreatedPDR(IE_list=[sp.IE_PDR_Id(id=m.PDR_UL),
                                                        sp.IE_FTEID(V6=1, TEID=5, ipv6=N3_6)])])
    s = m.scan(bytes(only6))
    assert s.fteids[m.PDR_UL] == (5, None) and s.fteids6[m.PDR_UL] == N3_6
    # an F-TEID that says V6 and holds 8 octets of an address: refused, not read past
    fteid = b"\x02" + struct.pack("!I", 5) + bytes(8)
    pdr = struct.pack("!HHH", m.IE_PDR_ID, 2, m.PDR_UL) + struct.pack("!HH", m.IE_FTEID, len(fteid)) + fteid
    ies = struct.pack("!HHB", m.IE_CAUSE, 1, 1) + struct.pack("!HH", m.IE_CREATED_PDR, len(pdr)) + pdr
    short = struct.pack("!BBHQ", 0x21, m.SESS_EST_RSP, 12 + len(ies), 0x99) + b"\0\0\7\0" + ies
    with pytest.raises(PfcpMalformed, match="F-TEID IE of 13 bytes, needs 21"):
        m.scan(short)


def test_a_bearer_files_sgw6_is_read_and_written_back(tmp_path):
    f = tmp_path / "b.txt"
    f.write_text("0x10 10.64.0.1 10.201.0.16 0x20 ue6=fd47:7470:0:1::/64 sgw6=fd47:7473::10\n"
                 "0x11 10.64.0.2 10.201.0.17 0x21\n")
    a, b = prov.read_bearer_file(str(f), choose=False)
    assert (a.sgw6, b.sgw6) == (SGW6, None)
    out = tmp_path / "provisioned.txt"
    prov.write_bearer_file([Session(x, 0x100 + x.index, 0x200 + x.index, 0x30 + x.index, N3_6) for x in (a, b)],
                           str(out), "test")
    a2, b2 = prov.read_bearer_file(str(out), choose=False)
    assert (a2.sgw6, b2.sgw6, a2.ue6) == (SGW6, None, a.ue6)
    f.write_text("0x10 10.64.0.1 10.201.0.16 0x20 sgw6=10.0.0.1\n")
    with pytest.raises(UserError, match=r":1: sgw6=10.0.0.1: the SGW's IPv6 address"):
        prov.read_bearer_file(str(f), choose=False)


@pytest.mark.parametrize("n3,want", [("10.201.0.1", ("10.201.0.1", None)), ("fd47:7473::1", (None, "fd47:7473::1")),
                                     (["10.201.0.1", "fd47:7473:0::1"], ("10.201.0.1", "fd47:7473::1"))])
def test_dut_pfcp_n3_takes_either_family_or_one_of_each(n3, want):
    c = prov.parse_config({"upf": "10.203.0.1", "n3": n3, "n6": "10.202.0.1"}, "x")
    assert (c.n3, c.n3_6) == want
    assert (c.options().n3_addr6) == want[1]


@pytest.mark.parametrize("n3", [["10.0.0.1", "10.0.0.2"], [], "host", ["fd00::1", "fd00::2"], [True]])
def test_a_bad_dut_pfcp_n3_is_one_line(n3):
    with pytest.raises(UserError, match="dut.pfcp.n3"):
        prov.parse_config({"upf": "10.203.0.1", "n3": n3, "n6": "10.202.0.1"}, "x")
