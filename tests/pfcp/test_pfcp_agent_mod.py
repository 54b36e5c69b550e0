"""`pgwu pfcp`: SDF PDRs created and removed by a Session Modification Request (issue 32 item 4):
Create PDR with Create FAR / URR / QER, and Remove PDR with Remove FAR / URR / QER, as Open5GS's and
free5GC's SMFs add a QoS flow to a running session and take it away again (TS 29.244 7.5.4). The
data path classifies the new PDRs' packets from the modification on and stops at their removal; a
removed URR's usage goes out in the Modification Response (7.5.5.2, Usage Report Trigger TERMR),
and the URRs that stay report what the removed PDRs counted for them.

Sessions are built with gtplab/pfcp/rules.py (the lab's CP's forms); packets run through the loaded
XDP program with BPF_PROG_TEST_RUN, one run each (tests/lib/pfcp_sdf.py's helpers, shared with
tests/pfcp/test_pfcp_agent_sdf.py).
docs/pfcp.md (SDF filters: several PDRs per direction) says what is accepted and what is refused.
"""

from __future__ import annotations

import dataclasses
import os

import scapy.contrib.pfcp as sp
import pytest
from scapy.contrib.pfcp import PFCP, PFCPSessionModificationRequest

from gtplab.dut.dataplane import Dataplane
from gtplab.kernel import bpf
from gtplab.pfcp import rules as R
from tests.lib import pfcp_msgs as M
from tests.lib.pfcp_agent import cause, created, ies, up_seid, usage_report
from tests.lib.pfcp_sdf import (FAR, FLOW, FWD_DL, FWD_UL, PDR, PFX6, PORT, URR, dl, est_msg, reports, rule, run,
                                sdf_maps, session, ul, vol)
from tests.lib.pfcp_smf import forwarding_config, session_json

pytestmark = pytest.mark.bpf

PDR_FUL, PDR_FDL, FAR_FUL, FAR_FDL, URR_F, QER_F = 7, 8, 7, 8, 5, 5
TERMR = 0x000800                          # Usage Report Trigger (8.2.41) octet 6 bit 4


def mod(seq: int, seid: int, ies_):
    return PFCP(version=1, S=1, seid=seid, seq=seq) / PFCPSessionModificationRequest(IE_list=list(ies_))


def flow_ies(s: R.Session, dl_drop: bool = True, urr: bool = True, qer_closed_ul: bool = False,
             urr_spec: R.UrrSpec = R.UrrSpec(), ul_fteid=None) -> list:
    """The QoS flow the SMF adds: an uplink PDR (precedence 10, UDP to PORT) forwarding to Core, a
    downlink PDR (UDP from PORT) whose FAR drops when dl_drop (else forwards as the default), both
    on URR_F (created here) and, with qer_closed_ul, QER_F closing the uplink gate."""
    refs = ([sp.IE_URR_Id(id=URR_F)] if urr else []) + \
        ([sp.IE_QER_Id(id=QER_F)] if qer_closed_ul else [])
    out = [R._create_pdr(s, PDR_FUL, True, 10, (FLOW,), FAR_FUL, refs, []),
           R._create_pdr(s, PDR_FDL, False, 10, (FLOW,), FAR_FDL, refs, []),
           R._create_far(s, FAR_FUL, True, True),
           R._create_far(s, FAR_FDL, False, not dl_drop)]
    if ul_fteid is not None:
        pdi = out[0][sp.IE_PDI]
        pdi.IE_list = [ul_fteid if isinstance(i, sp.IE_FTEID) else i for i in pdi.IE_list]
    if urr:
        out.append(R.create_urr(urr_spec, URR_F))
    if qer_closed_ul:
        out.append(R._qer(QER_F, (False, True), None, None))
    return out


def removal_ies(urr: bool = True, qer: bool = False) -> list:
    out = [sp.IE_RemovePDR(IE_list=[sp.IE_PDR_Id(id=PDR_FUL)]),
           sp.IE_RemovePDR(IE_list=[sp.IE_PDR_Id(id=PDR_FDL)]),
           sp.IE_RemoveFAR(IE_list=[sp.IE_FAR_Id(id=FAR_FUL)]),
           sp.IE_RemoveFAR(IE_list=[sp.IE_FAR_Id(id=FAR_FDL)])]
    if urr:
        out.append(sp.IE_RemoveURR(IE_list=[sp.IE_URR_Id(id=URR_F)]))
    if qer:
        out.append(sp.IE_RemoveQER(IE_list=[sp.IE_QER_Id(id=QER_F)]))
    return out


def test_qos_flow_added_and_removed_in_a_running_session(assoc, pin_dir):
    """A session of the two defaults and URR 1 carries everything; a modification adds the flow (its
    uplink PDR's F-TEID CHOOSE: answered with the session's TEID), whose uplink packets from then on
    are URR_F's and not URR 1's, and whose downlink packets its FAR drops (drop_far); a Query URR
    reports both exactly; a modification removes the flow again: URR_F's final report (TERMR) in its
    answer holds what it counted since the query, and the flow's packets are the defaults' again;
    the deletion's report of URR 1 is exact to the packet and octet."""
    s = session()
    r = assoc.req(est_msg(2, 0x10, s))
    assert cause(r) == 1
    teid, seid = created(r)[R.PDR_UL], up_seid(r)
    assert sdf_maps(pin_dir) == {"sdf_lists": 0, "sdf_pdrs": 0, "sdf_qos": 0}
    f_ul, f_dl, o_ul, o_dl = ul(teid, dport=PORT), dl(sport=PORT), ul(teid), dl()
    with Dataplane(pin_dir) as dp:
        forwarding_config(dp)
        assert run(dp, [f_ul, o_ul, f_dl, o_dl]) == [FWD_UL, FWD_UL, FWD_DL, FWD_DL]
    u1 = ([f_ul, o_ul], [f_dl, o_dl])            # URR 1 so far

    m = assoc.req(mod(3, seid, flow_ies(s)))
    assert cause(m) == 1, rule(m)
    assert created(m) == {PDR_FUL: teid}           # the session's one F-TEID
    assert sdf_maps(pin_dir) == {"sdf_lists": 2, "sdf_pdrs": 4, "sdf_qos": 0}
    with Dataplane(pin_dir) as dp:
        forwarding_config(dp)
        assert run(dp, [f_ul, f_ul, o_ul]) == [FWD_UL] * 3
        assert run(dp, [f_dl, o_dl]) == [("drop_far", "drop"), FWD_DL]
    u1 = (u1[0] + [o_ul], u1[1] + [o_dl])
    q = assoc.req(M.query_urr(4, seid, urr_ids=(1, URR_F)))
    assert cause(q) == 1
    assert reports(q, 78) == {1: vol(*u1), URR_F: vol([f_ul, f_ul], [])}

    with Dataplane(pin_dir) as dp:
        forwarding_config(dp)
        assert run(dp, [f_ul]) == [FWD_UL]                     # URR_F's, after the query
    x = assoc.req(mod(5, seid, removal_ies()))
    assert cause(x) == 1, rule(x)
    [fin] = [usage_report(i) for i in ies(x) if i.ietype == 78]
    assert (fin["urr"], fin["trigger"], fin["volume"]) == (URR_F, TERMR, vol([f_ul], []))
    assert sdf_maps(pin_dir) == {"sdf_lists": 2, "sdf_pdrs": 2, "sdf_qos": 0}   # the defaults'
    with Dataplane(pin_dir) as dp:
        forwarding_config(dp)
        assert run(dp, [f_ul, f_dl, o_ul]) == [FWD_UL, FWD_DL, FWD_UL]   # the defaults' again
    d = assoc.req(M.delete(6, seid))
    assert cause(d) == 1
    assert reports(d, 79) == {1: vol([f_ul, o_ul], [f_dl])}   # since the query
    assert sdf_maps(pin_dir) == {"sdf_lists": 0, "sdf_pdrs": 0, "sdf_qos": 0}


def test_flow_added_twice_and_qer_of_its_own(assoc, pin_dir):
    """The flow added, removed and added again (the IDs of removed rules are free again), now with a
    QER of its own closing its uplink gate: its uplink packets drop_gate_closed, the default's
    forward; URR 1, which only the defaults link, counts none of the flow's packets while it is
    there; the QER is removed with it (Remove QER) and the maps hold the defaults' only."""
    s = session()
    r = assoc.req(est_msg(2, 0x10, s))
    teid, seid = created(r)[R.PDR_UL], up_seid(r)
    f_ul, o_ul, f_dl = ul(teid, dport=PORT), ul(teid), dl(sport=PORT)
    assert cause(assoc.req(mod(3, seid, flow_ies(s)))) == 1
    assert cause(assoc.req(mod(4, seid, removal_ies()))) == 1
    m = assoc.req(mod(5, seid, flow_ies(s, dl_drop=False, qer_closed_ul=True)))
    assert cause(m) == 1, rule(m)
    assert sdf_maps(pin_dir) == {"sdf_lists": 2, "sdf_pdrs": 4, "sdf_qos": 2}
    with Dataplane(pin_dir) as dp:
        forwarding_config(dp)
        assert run(dp, [f_ul, o_ul, f_dl]) == [("drop_gate_closed", "drop"), FWD_UL, FWD_DL]
    x = assoc.req(mod(6, seid, removal_ies(qer=True)))
    assert cause(x) == 1, rule(x)
    [fin] = [usage_report(i) for i in ies(x) if i.ietype == 78]
    assert (fin["urr"], fin["volume"]) == (URR_F, vol([], [f_dl]))
    assert sdf_maps(pin_dir) == {"sdf_lists": 2, "sdf_pdrs": 2, "sdf_qos": 0}
    d = assoc.req(M.delete(7, seid))
    assert reports(d, 79) == {1: vol([o_ul], [])}


def test_flow_added_to_an_ipv4v6_session_classifies_ipv6(assoc, pin_dir):
    """An IPv4v6 session: the flow added by a modification takes the IPv6 packets as the IPv4 ones
    (the uplink half's flags serve both families; the /64's downlink half is rewritten with the
    IPv4 one): IPv6 UDP to PORT uplink is URR_F's, from PORT downlink drop_far, the rest the
    defaults'; the Query URR is exact."""
    s = session(ue6=PFX6)
    r = assoc.req(est_msg(2, 0x10, s))
    assert cause(r) == 1
    teid, seid = created(r)[R.PDR_UL], up_seid(r)
    assert cause(assoc.req(mod(3, seid, flow_ies(s)))) == 1
    f_ul, f_dl, o_ul, o_dl = (ul(teid, dport=PORT, family=6), dl(sport=PORT, family=6), ul(teid, family=6),
                              dl(family=6))
    with Dataplane(pin_dir) as dp:
        forwarding_config(dp)
        assert run(dp, [f_ul, o_ul, f_dl, o_dl]) == [FWD_UL, FWD_UL, ("drop_far", "drop"), FWD_DL]
    q = assoc.req(M.query_urr(4, seid, urr_ids=(1, URR_F)))
    assert reports(q, 78) == {1: vol([o_ul], [o_dl]), URR_F: vol([f_ul], [])}


def qos_entries(pin_dir: str) -> int:
    with bpf.Map.pinned(os.path.join(pin_dir, "qos")) as m:
        return len(list(m.keys()))


def test_flow_added_to_a_session_without_rules(assoc, pin_dir):
    """A session of the two defaults alone (no QER, no URR: no qos entry, its halves without
    PGWU_B_QOS) takes the flow with its own FARs and URR_F: the flow's uplink packets are URR_F's,
    its downlink ones drop_far, the rest forward (the downlink half, PGWU_B_QOS from then on, has an
    entry without a gate or MBR); Query URR exact; a refused Create PDR before leaves it without
    rules (no qos entry, `pgwu session get` as it was); the removal and the deletion empty the
    maps."""
    s = session(urr=None)
    r = assoc.req(est_msg(2, 0x10, s))
    assert cause(r) == 1
    teid, seid = created(r)[R.PDR_UL], up_seid(r)
    before = session_json(pin_dir, teid)
    assert qos_entries(pin_dir) == 0
    x = assoc.req(mod(3, seid, flow_ies(s, ul_fteid=sp.IE_FTEID(V4=1, TEID=0x4242, ipv4=M.GTPU_ADDR))))
    assert (cause(x), rule(x)) == (73, (PDR, PDR_FUL))
    assert (qos_entries(pin_dir), session_json(pin_dir, teid)) == (0, before)
    m = assoc.req(mod(4, seid, flow_ies(s)))
    assert cause(m) == 1, rule(m)
    assert sdf_maps(pin_dir) == {"sdf_lists": 2, "sdf_pdrs": 4, "sdf_qos": 0}
    assert qos_entries(pin_dir) == 1
    f_ul, f_dl, o_ul, o_dl = ul(teid, dport=PORT), dl(sport=PORT), ul(teid), dl()
    with Dataplane(pin_dir) as dp:
        forwarding_config(dp)
        assert run(dp, [f_ul, o_ul, f_dl, o_dl]) == [FWD_UL, FWD_UL, ("drop_far", "drop"), FWD_DL]
    q = assoc.req(M.query_urr(5, seid, urr_ids=(URR_F,)))
    assert reports(q, 78) == {URR_F: vol([f_ul], [])}
    x = assoc.req(mod(6, seid, removal_ies()))
    assert cause(x) == 1, rule(x)
    with Dataplane(pin_dir) as dp:
        forwarding_config(dp)
        assert run(dp, [f_ul, f_dl]) == [FWD_UL, FWD_DL]
    assert cause(assoc.req(M.delete(7, seid))) == 1
    assert sdf_maps(pin_dir) == {"sdf_lists": 0, "sdf_pdrs": 0, "sdf_qos": 0}
    assert qos_entries(pin_dir) == 0


REFUSED = {
    # what the agent cannot do in a modification: (IEs, Failed Rule ID (type, id) or Offending IE)
    "remove-default-pdr": (lambda s: [sp.IE_RemovePDR(IE_list=[sp.IE_PDR_Id(id=R.PDR_UL)])],
                           (PDR, R.PDR_UL)),
    "remove-unknown-pdr": (lambda s: [sp.IE_RemovePDR(IE_list=[sp.IE_PDR_Id(id=99)])], (PDR, 99)),
    "remove-linked-urr": (lambda s: [sp.IE_RemoveURR(IE_list=[sp.IE_URR_Id(id=1)])], (URR, 1)),
    "remove-default-far": (lambda s: [sp.IE_RemoveFAR(IE_list=[sp.IE_FAR_Id(id=R.FAR_DL)])],
                           (FAR, R.FAR_DL)),
    "second-default": (lambda s: [R._create_pdr(s, 9, True, 50, (), R.FAR_UL, [], [])], (PDR, 9)),
    "pdr-id-in-use": (lambda s: [R._create_pdr(s, R.PDR_DL, False, 10, (FLOW,), R.FAR_DL, [], [])],
                      (PDR, R.PDR_DL)),
    "far-no-pdr-uses": (lambda s: [R._create_far(s, 9, True, True)], (FAR, 9)),
    "unknown-urr": (lambda s: [R._create_pdr(s, 9, False, 10, (FLOW,), R.FAR_DL,
                                             [sp.IE_URR_Id(id=42)], [])], (PDR, 9)),
    "volume-threshold": (lambda s: flow_ies(s, urr_spec=R.UrrSpec(volume_threshold=10_000)),
                         (URR, URR_F)),
    "other-tunnel": (lambda s: flow_ies(s, ul_fteid=sp.IE_FTEID(V4=1, TEID=0x4242, ipv4=M.GTPU_ADDR)),
                     (PDR, PDR_FUL)),
    "dl-far-other-tunnel": (lambda s: flow_ies(dataclasses.replace(s, gnb_teid=0x999),
                                               dl_drop=False), (FAR, FAR_FDL)),
}


def test_what_a_modification_cannot_do_is_73(assoc, pin_dir):
    """Each of REFUSED is 73 naming the rule (or the IE), and leaves the tables and the session as
    they were (one session for all: each refusal must leave it as it was for the next)."""
    s = session()
    r = assoc.req(est_msg(2, 0x10, s))
    teid, seid = created(r)[R.PDR_UL], up_seid(r)
    before = (sdf_maps(pin_dir), session_json(pin_dir, teid))
    for seq, case in enumerate(sorted(REFUSED), start=3):
        make, want = REFUSED[case]
        x = assoc.req(mod(seq, seid, make(s)))
        assert cause(x) == 73, case
        if isinstance(want, tuple):
            assert rule(x) == want, case
        else:
            [o] = [i for i in ies(x) if i.ietype == 40]
            assert int.from_bytes(bytes(o)[4:6], "big") == want, case
        assert (sdf_maps(pin_dir), session_json(pin_dir, teid)) == before, case
    # and the session still takes the flow
    assert cause(assoc.req(mod(99, seid, flow_ies(s)))) == 1
