"""`pgwu pfcp` and SDF filters (issue 32 item 4): a session with several PDRs per direction, the
default PDR of each direction (no SDF filter) and PDRs with SDF Filter IEs, each with its own FAR
(forward or drop), QER and URR. The agent installs each direction's PDRs as the bearer half's filter
list (sdf_lists, by precedence), its PDRs (sdf_pdrs: FAR action, usage) and their QERs (sdf_qos); a
URR's usage is the counters of the PDRs that link it.

Sessions are built with gtplab/pfcp/rules.py (Session, Pdr, SdfFilter: the forms the lab's CP
sends). Packets run through the loaded XDP program with BPF_PROG_TEST_RUN (one run each, as
tests/dataplane/test_sdf.py); what went where is read from the stats map, the sdf_* maps and the
agent's Usage Reports. docs/pfcp.md (SDF filters) says what is accepted and what is refused.
"""

from __future__ import annotations

import pytest
from scapy.contrib.pfcp import IE_CreatePDR, IE_FTEID, IE_PDI, IE_PDR_Id

from gtplab.dut.dataplane import Dataplane
from gtplab.pfcp import rules as R
from tests.lib import pfcp_msgs as M
from tests.lib.pfcp_agent import cause, created, up_seid
from tests.lib.pfcp_sdf import (FAR, FLOW, FWD_DL, FWD_UL, PDR, PFX6, PORT, SERVER, SERVER6, URR, dl, est_msg,
                                reports, rule, run, sdf_maps, session, ul, vol)
from tests.lib.pfcp_smf import forwarding_config

pytestmark = pytest.mark.bpf


# ---- packets go to the PDR their precedence says; usage per URR exactly --------------------------------

def test_sdf_pdrs_classify_and_report_per_urr(assoc, pin_dir):
    """The defaults (URR 1, precedence 100) and, at precedence 10, an uplink and a downlink PDR with
    `permit out 17 from any 6000 to assigned` sharing URR 2 (Pdr.urr_of). The UE's UDP to 6000 is
    the SDF PDRs', the rest the defaults'; a Query URR and the deletion's report carry each URR's
    packets exactly (URR 2 both directions of its flow); the maps are empty after the deletion."""
    s = session([R.Pdr(uplink=True, precedence=10, sdf=(FLOW,), urr=R.UrrSpec()),
                 R.Pdr(uplink=False, precedence=10, sdf=(FLOW,), urr_of=0)])
    r = assoc.req(est_msg(2, 0x10, s))
    assert cause(r) == 1
    c = created(r)
    assert set(c) == {R.PDR_UL, 3} and c[3] == c[R.PDR_UL]          # the one F-TEID, for both
    teid, seid = c[R.PDR_UL], up_seid(r)
    assert sdf_maps(pin_dir) == {"sdf_lists": 2, "sdf_pdrs": 4, "sdf_qos": 0}
    flow_ul, flow_dl = [ul(teid, dport=PORT)] * 2, [dl(sport=PORT)]
    dflt_ul, dflt_dl = [ul(teid)] * 3, [dl()] * 4
    with Dataplane(pin_dir) as dp:
        forwarding_config(dp)
        assert run(dp, flow_ul + dflt_ul) == [FWD_UL] * 5
        assert run(dp, flow_dl + dflt_dl) == [FWD_DL] * 5
    q = assoc.req(M.query_urr(3, seid, urr_ids=(1, 2)))
    assert cause(q) == 1
    assert reports(q, 78) == {1: vol(dflt_ul, dflt_dl), 2: vol(flow_ul, flow_dl)}
    with Dataplane(pin_dir) as dp:
        forwarding_config(dp)
        assert run(dp, [ul(teid, dport=PORT), dl()]) == [FWD_UL, FWD_DL]
    d = assoc.req(M.delete(4, seid))
    assert cause(d) == 1
    assert reports(d, 79) == {1: vol([], [dl()]), 2: vol([ul(teid, dport=PORT)], [])}
    assert sdf_maps(pin_dir) == {"sdf_lists": 0, "sdf_pdrs": 0, "sdf_qos": 0}


def test_precedence_not_message_order_decides(assoc, pin_dir):
    """An IPv4v6 session of ten PDRs and five URRs (the lab's fields case): per direction a port
    range (precedence 10), a ToS (20), an IPv6 server (30), a flow label (40), each with its own FAR
    and a URR both directions share; the ToS PDR comes first in the message. A packet matching both
    the range and the ToS is the range's; each other packet its PDR's; the rest the defaults'."""
    flt = {"tos": R.SdfFilter(tos=(0xB8, 0xFC)),
           "range": R.SdfFilter(flow=R.flow_description(17, SERVER, "6000-6010")),
           "addr6": R.SdfFilter(flow=R.flow_description(17, SERVER6)),
           "fl": R.SdfFilter(flow_label=0x12345)}
    pdrs = []
    for name, prec in (("tos", 20), ("range", 10), ("addr6", 30), ("fl", 40)):
        pdrs += [R.Pdr(uplink=True, precedence=prec, sdf=(flt[name],), urr=R.UrrSpec()),
                 R.Pdr(uplink=False, precedence=prec, sdf=(flt[name],), urr_of=len(pdrs))]
    r = assoc.req(est_msg(2, 0x10, session(pdrs, ue6=PFX6)))
    assert cause(r) == 1
    teid, seid = created(r)[R.PDR_UL], up_seid(r)
    other6 = "2001:db8:9::9"
    sent = {  # URR ID (urr 2 + k for the k-th uplink PDR: tos 2, range 4, addr6 6, fl 8) -> frames
        1: ([ul(teid), ul(teid, family=6, dst=other6)], [dl(), dl(family=6, src=other6)]),
        4: ([ul(teid, dport=6005), ul(teid, dport=6005, tos=0xB8)], [dl(sport=6005, tos=0xB9)]),
        2: ([ul(teid, tos=0xBB)], [dl(tos=0xB8), dl(family=6, src=other6, tos=0xB8)]),
        6: ([ul(teid, family=6)], [dl(family=6)]),
        8: ([ul(teid, family=6, dst=other6, fl=0x12345)], []),
    }
    with Dataplane(pin_dir) as dp:
        forwarding_config(dp)
        for u, (fu, fd) in sent.items():
            assert run(dp, fu) == [FWD_UL] * len(fu), u
            assert run(dp, fd) == [FWD_DL] * len(fd), u
    q = assoc.req(M.query_urr(3, seid, all_urrs=True))
    assert cause(q) == 1
    assert reports(q, 78) == {u: vol(fu, fd) for u, (fu, fd) in sent.items()}
    assert cause(assoc.req(M.delete(4, seid))) == 1
    assert sdf_maps(pin_dir) == {"sdf_lists": 0, "sdf_pdrs": 0, "sdf_qos": 0}


def test_far_drop_gate_and_mbr_per_pdr(assoc, pin_dir):
    """Each PDR's own FAR and QER apply to its packets only: an uplink PDR whose FAR drops (drop_far),
    a downlink PDR whose QER closes the gate (drop_gate_closed), another whose QER's MBR polices
    (drop_mbr for a burst past its bucket); the defaults' packets all forward. An Update QER of the
    gated PDR's QER opens it; the deletion empties the maps."""
    s = session([R.Pdr(uplink=True, precedence=10, sdf=(FLOW,), forward=False),
                 R.Pdr(uplink=False, precedence=10, sdf=(FLOW,), gate=(True, False)),
                 R.Pdr(uplink=False, precedence=20,
                       sdf=(R.SdfFilter(flow=R.flow_description(17, "any", "7000")),), mbr_kbps=(8, 8))],
                urr=None)
    r = assoc.req(est_msg(2, 0x10, s))
    assert cause(r) == 1
    teid, seid = created(r)[R.PDR_UL], up_seid(r)
    assert sdf_maps(pin_dir) == {"sdf_lists": 2, "sdf_pdrs": 5, "sdf_qos": 2}
    with Dataplane(pin_dir) as dp:
        forwarding_config(dp)
        assert run(dp, [ul(teid, dport=PORT), ul(teid)]) == [("drop_far", "drop"), FWD_UL]
        assert run(dp, [dl(sport=PORT), dl()]) == [("drop_gate_closed", "drop"), FWD_DL]
        burst = run(dp, [dl(sport=7000)] * 40)
        assert set(burst) == {FWD_DL, ("drop_mbr", "drop")}
        assert run(dp, [dl()] * 5) == [FWD_DL] * 5
    # QER 3 (the gated PDR's, QER_ID + 1 + k with k = 1) opened by an Update QER
    from scapy.contrib.pfcp import IE_GateStatus, IE_QER_Id, IE_UpdateQER, PFCP, PFCPSessionModificationRequest
    mod = PFCP(version=1, S=1, seid=seid, seq=3) / PFCPSessionModificationRequest(IE_list=[
        IE_UpdateQER(IE_list=[IE_QER_Id(id=R.QER_ID + 2), IE_GateStatus(ul="OPEN", dl="OPEN")])])
    assert cause(assoc.req(mod)) == 1
    with Dataplane(pin_dir) as dp:
        forwarding_config(dp)
        assert run(dp, [dl(sport=PORT)]) == [FWD_DL]
    assert cause(assoc.req(M.delete(4, seid))) == 1
    assert sdf_maps(pin_dir) == {"sdf_lists": 0, "sdf_pdrs": 0, "sdf_qos": 0}


# ---- what the agent cannot do: 73 naming the rule, the tables as they were --------------------------

def _other_fteid(msg, pdr_id: int, teid: int):
    for i in msg.payload.IE_list:
        if isinstance(i, IE_CreatePDR) and any(isinstance(x, IE_PDR_Id) and x.id == pdr_id for x in i.IE_list):
            pdi = next(x for x in i.IE_list if isinstance(x, IE_PDI))
            f = next(x for x in pdi.IE_list if isinstance(x, IE_FTEID))
            f.TEID = teid
    return msg


REFUSED = [
    # a FAR to the CP function in a tunnel over IPv6 (over IPv4 it is relayed: test_pfcp_agent_cp.py)
    ("far-to-cp-function-over-ipv6", lambda: est_msg(2, 0x10, session(
        [R.Pdr(uplink=True, precedence=10, sdf=(R.SdfFilter(flow="permit out 58 from ff02::2/128 to assigned"),),
               to_cp=("2001:db8::50", 0xC0DE))], ue6=PFX6)), (FAR, 3)),
    ("uplink-pdr-another-f-teid", lambda: _other_fteid(est_msg(2, 0x10, session(
        [R.Pdr(uplink=True, precedence=10, sdf=(FLOW,))], teid=0x500)), 3, 0x501), (PDR, 3)),
    ("over-32-filters", lambda: est_msg(2, 0x10, session(
        [R.Pdr(uplink=False, precedence=10 + k, sdf=(R.SdfFilter(
            flow="permit out 17 from any 1,2,3,4,5,6,7,8 to assigned"),)) for k in range(4)]
        + [R.Pdr(uplink=False, precedence=20, sdf=(FLOW,))])), (PDR, 7)),
    # a quota's URR linked by the uplink default (a filter: uplink has an SDF PDR) and the downlink
    # default (the bearer's qos entry): two entries cannot hold one quota (test_pfcp_agent_sdf_urr.py)
    ("volume-quota-urr-of-a-filtered-and-an-unfiltered-half", lambda: est_msg(2, 0x10, session(
        [R.Pdr(uplink=True, precedence=10, sdf=(FLOW,))], urr=R.UrrSpec(volume_quota=10_000))), (URR, 1)),
    ("downlink-sdf-pdr-another-tunnel", None, (FAR, 3)),
]


@pytest.mark.parametrize("name,build,expect", REFUSED, ids=[x[0] for x in REFUSED])
def test_what_the_agent_cannot_do_is_73(assoc, pin_dir, name, build, expect):
    if build is None:
        s = session([R.Pdr(uplink=False, precedence=10, sdf=(FLOW,))])
        msg = est_msg(2, 0x10, s)
        # the SDF PDR's FAR (3) to another gNB TEID than the default's: one downlink tunnel a bearer
        from scapy.contrib.pfcp import IE_CreateFAR, IE_ForwardingParameters, IE_OuterHeaderCreation
        for i in msg.payload.IE_list:
            if isinstance(i, IE_CreateFAR) and i.IE_list[0].id == 3:
                fp = next(x for x in i.IE_list if isinstance(x, IE_ForwardingParameters))
                next(x for x in fp.IE_list if isinstance(x, IE_OuterHeaderCreation)).TEID = 0x999
    else:
        msg = build()
    r = assoc.req(msg)
    assert (cause(r), rule(r)) == (73, expect)
    assert sdf_maps(pin_dir) == {"sdf_lists": 0, "sdf_pdrs": 0, "sdf_qos": 0}
    # nothing of it stayed: the same UE is free for a plain session
    assert cause(assoc.req(est_msg(3, 0x11, session()))) == 1
