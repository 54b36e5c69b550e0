"""`pgwu pfcp` and N3 over IPv6 (issue 32 items 2-4): an uplink F-TEID with V6 (given, or CHOOSE: the
PGW-U's N3 IPv6 address, `pgwu load --n3-addr6`; V4 and V6 both when both are asked), Outer Header
Removal 1 (GTP-U/UDP/IPv6; 0 and 6 as before), a downlink FAR's Outer Header Creation GTP-U/UDP/IPv6
(the half's peer an n3v6_peers entry, PGWU_B_PEER6), Update FAR moving the downlink between an IPv4
and an IPv6 peer. What the agent answered is read from its responses, what it installed from the maps
and `pgwu session list --json`, and what the data path does with it from one BPF_PROG_TEST_RUN."""

from __future__ import annotations

import socket

import pytest
from scapy.contrib.pfcp import (IE_ApplyAction, IE_CreatePDR, IE_DestinationInterface, IE_FAR_Id, IE_FSEID, IE_FTEID,
                                IE_OuterHeaderCreation, IE_OuterHeaderRemoval, IE_PDI, IE_PDR_Id, IE_Precedence,
                                IE_SourceInterface, IE_UpdateFAR, IE_UpdateForwardingParameters)
from scapy.contrib.pfcp import PFCP, PFCPSessionModificationRequest
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether

from gtplab.dut.dataplane import B_PEER6, Dataplane
from gtplab.gtpu import packets as P
from tests.lib import pfcp_msgs as M
from tests.lib.pfcp_agent import cause, tables, up_seid
from tests.lib.pfcp_n3v6 import GNB6, GNB6B, N3_6, UE, dl_far6, establish, ohc6
from tests.lib.pfcp_smf import forwarding_config, ies
from tests.pfcp.conftest import loaded_pgwu

pytestmark = pytest.mark.bpf


@pytest.fixture(params=[True], ids=["n3-addr6"])
def pin_dir(request):
    """A PGW-U of the test's own with an N3 IPv6 address (param False: without)."""
    with loaded_pgwu(*(["--n3-addr6", N3_6] if request.param else [])) as d:
        yield d


def created_fteid(resp):
    for i in ies(resp):
        if i.ietype == 8:
            for sub in i.IE_list:
                if isinstance(sub, IE_FTEID):
                    return sub
    return None


def modify(seq, seid, ohc):
    upd = IE_UpdateFAR(IE_list=[IE_FAR_Id(id=M.DL_FAR), IE_ApplyAction(FORW=1),
                                IE_UpdateForwardingParameters(IE_list=[IE_DestinationInterface(interface=0), ohc])])
    return PFCP(version=1, S=1, seid=seid, seq=seq) / PFCPSessionModificationRequest(IE_list=[upd])


def dl_out(pin_dir):
    """A downlink packet to UE through xdp_sgi: (verdict, outer destination, family)."""
    with Dataplane(pin_dir) as dp:
        forwarding_config(dp)
        dp.set_config(n3_addr6=N3_6)
        res = dp.run_sgi(bytes(Ether(dst=P.PGW_SGI_MAC) / P.ip_packet(P.PDN_ADDR, UE, payload_len=40)))
    if res.verdict != "redirect":
        return res.verdict, None, None
    if res.data[12:14] == b"\x86\xdd":
        return res.verdict, Ether(res.data)[IPv6].dst, 6
    return res.verdict, socket.inet_ntoa(res.data[14 + 16:14 + 20]), 4


@pytest.mark.parametrize("v4", [False, True], ids=["v6", "v4v6"])
def test_choose_with_v6_answers_the_n3_ipv6_address(assoc, pin_dir, v4):
    r = establish(assoc, 2, v4=v4)
    assert cause(r) == 1, r.summary()
    f = created_fteid(r)
    assert (f.V6, f.ipv6, f.V4) == (1, N3_6, int(v4)), f.show(dump=True)
    if v4:
        assert f.ipv4 == M.GTPU_ADDR
    # and the data path takes that TEID over IPv6
    with Dataplane(pin_dir) as dp:
        forwarding_config(dp)
        dp.set_config(n3_addr6=N3_6)
        g = P.gtpu(P.ip_packet(UE, P.PDN_ADDR, payload_len=40), teid=f.TEID, src=GNB6, dst=N3_6)
        assert dp.run_access(bytes(g)).verdict == "redirect"


def test_given_v6_fteid_must_be_ours(assoc, pin_dir):
    assert cause(establish(assoc, 2, v4=False, teid=0x1234)) == 1
    body = [M.node_id(), IE_FSEID(v4=1, seid=0x99, ipv4=M.CP_ADDR),
            IE_CreatePDR(IE_list=[IE_PDR_Id(id=M.UL_PDR), IE_Precedence(precedence=100),
                                  IE_PDI(IE_list=[IE_SourceInterface(interface=0),
                                                  IE_FTEID(V6=1, TEID=0x1235, ipv6="fd47:7473::99")]),
                                  IE_OuterHeaderRemoval(header=1), IE_FAR_Id(id=M.UL_FAR)]),
            M.dl_pdr("10.45.0.10"), M.ul_far(), dl_far6()]
    assert cause(assoc.req(M.establish(3, 0x99, "10.45.0.10", ies=body))) == 73


def test_ohc_v6_installs_a_peer6_downlink_sent_over_ipv6(assoc, pin_dir):
    assert cause(establish(assoc, 2)) == 1
    [b] = tables(pin_dir)
    assert (b["sgw"], b["sgw_teid"]) == (GNB6, 0x600), b
    assert dl_out(pin_dir) == ("redirect", GNB6, 6)


OHR_TABLE = [(0, True, False, 1), (1, False, True, 1), (6, False, True, 1), (6, True, False, 1),
             (1, True, False, 73), (0, False, True, 73)]


def test_ohr_matches_the_fteid_family(assoc, pin_dir):
    """OHR 0 (GTP-U/UDP/IPv4) of a V4 F-TEID, 1 (GTP-U/UDP/IPv6) of a V6 one, 6 (GTP-U/UDP/IP) of either;
    else 73 (Rule creation/modification Failure). One agent, each accepted session deleted after."""
    got = []
    for k, (ohr, v4, v6, _) in enumerate(OHR_TABLE):
        r = establish(assoc, 2 + 2 * k, v4=v4, v6=v6, ohr=ohr)
        got.append(cause(r))
        if got[-1] == 1:
            assert cause(assoc.req(M.delete(3 + 2 * k, up_seid(r)))) == 1
    assert got == [w for *_, w in OHR_TABLE], list(zip(OHR_TABLE, got))


def test_update_far_moves_the_downlink_between_ipv4_and_ipv6_peers(assoc, pin_dir):
    r = establish(assoc, 2, dl_far=M.dl_far(M.SGW_ADDR, 0x100))
    assert cause(r) == 1
    seid = up_seid(r)
    assert dl_out(pin_dir) == ("redirect", M.SGW_ADDR, 4)
    assert cause(assoc.req(modify(3, seid, ohc6(GNB6B, 0x700)))) == 1
    [b] = tables(pin_dir)
    assert (b["sgw"], b["sgw_teid"]) == (GNB6B, 0x700), b
    assert dl_out(pin_dir) == ("redirect", GNB6B, 6)
    with Dataplane(pin_dir) as dp:
        assert dp.dl_bearer(UE).flags & B_PEER6
    assert cause(assoc.req(modify(4, seid, IE_OuterHeaderCreation(GTPUUDPIPV4=1, TEID=0x800,
                                                                    ipv4=M.SGW_ADDR2)))) == 1
    [b] = tables(pin_dir)
    assert (b["sgw"], b["sgw_teid"]) == (M.SGW_ADDR2, 0x800), b
    assert dl_out(pin_dir) == ("redirect", M.SGW_ADDR2, 4)
    with Dataplane(pin_dir) as dp:
        assert not dp.dl_bearer(UE).flags & B_PEER6


@pytest.mark.parametrize("pin_dir", [False], ids=["no-n3-addr6"], indirect=True)
def test_without_an_n3_ipv6_address_v6_is_refused_73(assoc, pin_dir):
    assert cause(establish(assoc, 2, v4=False)) == 73                       # F-TEID V6
    assert cause(establish(assoc, 3, v6=False, ohr=0)) == 73                # OHC GTP-U/UDP/IPv6
    assert tables(pin_dir) == []
