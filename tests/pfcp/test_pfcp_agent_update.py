"""`pgwu pfcp`: Update PDR in a Session Modification Request (TS 29.244 7.5.4.2, issue 32 item 4):
an SDF PDR's precedence, PDI (its SDF filters), FAR ID, URR IDs changed; a default PDR's
precedence (its place in its direction's filter list). What the data path cannot apply is 73 naming
the PDR, a line in the agent's log, and the tables as they were.

Sessions are built with gtplab/pfcp/rules.py; packets run through the loaded XDP program with
BPF_PROG_TEST_RUN (tests/lib/pfcp_sdf.py). docs/pfcp.md "Updated by a modification" says what is
accepted and refused.
"""

from __future__ import annotations

import scapy.contrib.pfcp as sp
import pytest
from scapy.contrib.pfcp import PFCP, PFCPSessionModificationRequest

from gtplab.dut.dataplane import Dataplane
from gtplab.kernel import bpf
from gtplab.pfcp import rules as R
from tests.lib import pfcp_msgs as M
from tests.lib.pfcp_agent import cause, created, up_seid
from tests.lib.pfcp_sdf import FAR, FWD_DL, FWD_UL, PDR, PORT, dl, est_msg, reports, rule, run, session, ul, vol
from tests.lib.pfcp_smf import forwarding_config, session_json

pytestmark = pytest.mark.bpf

PDR_FUL, PDR_FDL, PDR_ANY, FAR_FUL, FAR_FDL, FAR_ANY, URR_F, QER_F = 7, 8, 9, 7, 8, 9, 5, 5
PORT2 = 7000
FLOW = R.SdfFilter(flow=R.flow_description(17, "any", str(PORT)))
FLOW2 = R.SdfFilter(flow=R.flow_description(17, "any", str(PORT2)))
ANY_UDP = R.SdfFilter(flow=R.flow_description(17))
DROP = ("drop_far", "drop")


def mod(seq: int, seid: int, ies_):
    return PFCP(version=1, S=1, seid=seid, seq=seq) / PFCPSessionModificationRequest(IE_list=list(ies_))


def flow_ies(s: R.Session) -> list:
    """The flow: uplink PDR_FUL (precedence 10, UDP to PORT) to Core on URR_F; downlink PDR_FDL (UDP
    from PORT) whose FAR drops, on URR_F; uplink PDR_ANY (precedence 20, any UDP) whose FAR drops."""
    refs = [sp.IE_URR_Id(id=URR_F)]
    return [R._create_pdr(s, PDR_FUL, True, 10, (FLOW,), FAR_FUL, refs, []),
            R._create_pdr(s, PDR_FDL, False, 10, (FLOW,), FAR_FDL, refs, []),
            R._create_pdr(s, PDR_ANY, True, 20, (ANY_UDP,), FAR_ANY, [], []),
            R._create_far(s, FAR_FUL, True, True),
            R._create_far(s, FAR_FDL, False, False),
            R._create_far(s, FAR_ANY, True, False),
            R.create_urr(R.UrrSpec(), URR_F)]


def upd(pdr_id: int, *ies_) -> sp.IE_UpdatePDR:
    return sp.IE_UpdatePDR(IE_list=[sp.IE_PDR_Id(id=pdr_id), *ies_])


def pdi(s: R.Session, uplink: bool, sdf, pdr_id: int = PDR_FUL) -> sp.IE_PDI:
    """A whole PDI as Create PDR builds it (an Update PDR's PDI replaces the PDR's)."""
    return R._create_pdr(s, pdr_id, uplink, 10, sdf, 1, [], [])[sp.IE_PDI]


def other_tunnel(p: sp.IE_PDI) -> sp.IE_PDI:
    p.IE_list = [sp.IE_FTEID(V4=1, TEID=0x4242, ipv4=M.GTPU_ADDR) if isinstance(i, sp.IE_FTEID) else i
                 for i in p.IE_list]
    return p


def maps(pin_dir: str) -> dict:
    """every entry of the sdf maps, keys and values (counters included)"""
    out = {}
    for name in ("sdf_lists", "sdf_pdrs", "sdf_qos"):
        with bpf.Map.pinned(f"{pin_dir}/{name}") as m:
            out[name] = sorted(m.items())
    return out


def flow_session(assoc, pin_dir):
    s = session()
    r = assoc.req(est_msg(2, 0x10, s))
    assert cause(r) == 1
    teid, seid = created(r)[R.PDR_UL], up_seid(r)
    m = assoc.req(mod(3, seid, flow_ies(s)))
    assert cause(m) == 1, rule(m)
    return s, teid, seid


def test_update_pdr_precedence_far_and_urr(assoc, pin_dir):
    """Precedence: PDR_FUL (10, UDP to PORT, forwards) before PDR_ANY (20, any UDP, drops); moved to
    30, its packets are PDR_ANY's (drop_far); moved to 5 with URR 1 instead of URR_F, they forward
    again and count for URR 1 (URR_F keeps what it counted before). FAR ID: PDR_FDL moved from its
    dropping FAR to the default downlink FAR (its own removed in the same request) forwards. The
    default uplink PDR moved from 100 to 15: other UDP (PDR_ANY's, dropped) is the default's again.
    A Query URR is exact for both URRs."""
    s, teid, seid = flow_session(assoc, pin_dir)
    f_ul, o_ul, f_dl, o_dl = ul(teid, dport=PORT), ul(teid), dl(sport=PORT), dl()
    with Dataplane(pin_dir) as dp:
        forwarding_config(dp)
        assert run(dp, [f_ul, o_ul, f_dl, o_dl]) == [FWD_UL, DROP, DROP, FWD_DL]
    u1, uf = ([], [o_dl]), ([f_ul], [])          # o_ul: PDR_ANY's, no URR; f_dl dropped: counted nowhere

    m = assoc.req(mod(4, seid, [upd(PDR_FUL, sp.IE_Precedence(precedence=30))]))
    assert cause(m) == 1, rule(m)
    with Dataplane(pin_dir) as dp:
        forwarding_config(dp)
        assert run(dp, [f_ul]) == [DROP]            # PDR_ANY's now

    m = assoc.req(mod(5, seid, [upd(PDR_FUL, sp.IE_Precedence(precedence=5), sp.IE_URR_Id(id=1)),
                                upd(PDR_FDL, sp.IE_FAR_Id(id=R.FAR_DL)),
                                sp.IE_RemoveFAR(IE_list=[sp.IE_FAR_Id(id=FAR_FDL)])]))
    assert cause(m) == 1, rule(m)
    with Dataplane(pin_dir) as dp:
        forwarding_config(dp)
        assert run(dp, [f_ul, f_dl, o_ul]) == [FWD_UL, FWD_DL, DROP]
    u1, uf = (u1[0] + [f_ul], u1[1]), (uf[0], uf[1] + [f_dl])

    m = assoc.req(mod(6, seid, [upd(R.PDR_UL, sp.IE_Precedence(precedence=15))]))
    assert cause(m) == 1, rule(m)
    with Dataplane(pin_dir) as dp:
        forwarding_config(dp)
        assert run(dp, [o_ul, f_ul]) == [FWD_UL, FWD_UL]   # the default's; PDR_FUL (5) still first
    u1 = (u1[0] + [o_ul, f_ul], u1[1])
    q = assoc.req(M.query_urr(7, seid, urr_ids=(1, URR_F)))
    assert cause(q) == 1
    assert reports(q, 78) == {1: vol(*u1), URR_F: vol(*uf)}
    d = assoc.req(M.delete(8, seid))
    assert cause(d) == 1


def test_update_pdr_new_pdi(assoc, pin_dir):
    """An Update PDR's PDI replaces the PDR's filters: PDR_FUL from UDP to PORT to UDP to PORT2; the
    packets to PORT are PDR_ANY's (drop), those to PORT2 PDR_FUL's (URR_F); the list's size and the
    rules' count stay (one rule replaced by one). Then its QER ID: a QER created in the same request
    closes its uplink gate (drop_gate_closed for its packets only; an sdf_qos entry more)."""
    s, teid, seid = flow_session(assoc, pin_dir)
    f_ul, f2_ul = ul(teid, dport=PORT), ul(teid, dport=PORT2)
    before = {k: len(v) for k, v in maps(pin_dir).items()}
    m = assoc.req(mod(4, seid, [upd(PDR_FUL, pdi(s, True, (FLOW2,)))]))
    assert cause(m) == 1, rule(m)
    assert {k: len(v) for k, v in maps(pin_dir).items()} == before
    with Dataplane(pin_dir) as dp:
        forwarding_config(dp)
        assert run(dp, [f_ul, f2_ul]) == [DROP, FWD_UL]
    q = assoc.req(M.query_urr(5, seid, urr_ids=(URR_F,)))
    assert reports(q, 78) == {URR_F: vol([f2_ul], [])}
    # QER ID: a QER created in the request, closing the uplink gate, on PDR_FUL only
    m = assoc.req(mod(6, seid, [upd(PDR_FUL, sp.IE_QER_Id(id=QER_F)), R._qer(QER_F, (False, True), None, None)]))
    assert cause(m) == 1, rule(m)
    assert len(maps(pin_dir)["sdf_qos"]) == before["sdf_qos"] + 1
    with Dataplane(pin_dir) as dp:
        forwarding_config(dp)
        assert run(dp, [f2_ul, ul(teid)]) == [("drop_gate_closed", "drop"), DROP]   # the other UDP: PDR_ANY's


REFUSED = {
    # (Update PDR IEs of the request, Failed Rule ID)
    "default-far": (lambda s: [upd(R.PDR_UL, sp.IE_FAR_Id(id=FAR_FUL))], (PDR, R.PDR_UL)),
    "default-urr": (lambda s: [upd(R.PDR_DL, sp.IE_URR_Id(id=URR_F))], (PDR, R.PDR_DL)),
    "default-pdi": (lambda s: [upd(R.PDR_DL, pdi(s, False, (FLOW,), R.PDR_DL))], (PDR, R.PDR_DL)),
    "unknown-pdr": (lambda s: [upd(99, sp.IE_Precedence(precedence=1))], (PDR, 99)),
    "unknown-far": (lambda s: [upd(PDR_FUL, sp.IE_FAR_Id(id=77))], (PDR, PDR_FUL)),
    "far-of-other-direction": (lambda s: [upd(PDR_FDL, sp.IE_FAR_Id(id=FAR_FUL))], (PDR, PDR_FDL)),
    "unknown-urr": (lambda s: [upd(PDR_FUL, sp.IE_URR_Id(id=42))], (PDR, PDR_FUL)),
    "pdi-matches-all": (lambda s: [upd(PDR_FUL, pdi(s, True, ()))], (PDR, PDR_FUL)),
    "pdi-other-tunnel": (lambda s: [upd(PDR_FUL, other_tunnel(pdi(s, True, (FLOW2,))))], (PDR, PDR_FUL)),
    "twice": (lambda s: [upd(PDR_FUL, sp.IE_Precedence(precedence=1)),
                         upd(PDR_FUL, sp.IE_Precedence(precedence=2))], (PDR, PDR_FUL)),
    # one good update and one bad: neither applied
    "half": (lambda s: [upd(PDR_FUL, sp.IE_Precedence(precedence=30)),
                        upd(PDR_FDL, sp.IE_FAR_Id(id=77))], (PDR, PDR_FDL)),
    "removed-far-still-used": (lambda s: [upd(PDR_FUL, sp.IE_Precedence(precedence=30)),
                                          sp.IE_RemoveFAR(IE_list=[sp.IE_FAR_Id(id=FAR_FUL)])],
                               (FAR, FAR_FUL)),
}


def test_what_update_pdr_cannot_do_is_73(assoc, pin_dir):
    """Each of REFUSED is 73 naming the rule, leaves every entry of the sdf maps (keys, values,
    counters) and `pgwu session get` as they were, and the packets classified as before; the agent's
    log says why. Then a good update is still taken."""
    s, teid, seid = flow_session(assoc, pin_dir)
    f_ul = ul(teid, dport=PORT)
    before = (maps(pin_dir), session_json(pin_dir, teid))
    for seq, case in enumerate(sorted(REFUSED), start=4):
        make, want = REFUSED[case]
        x = assoc.req(mod(seq, seid, make(s)))
        assert (cause(x), rule(x)) == (73, want), case
        assert (maps(pin_dir), session_json(pin_dir, teid)) == before, case
    with Dataplane(pin_dir) as dp:
        forwarding_config(dp)
        assert run(dp, [f_ul]) == [FWD_UL]
    m = assoc.req(mod(90, seid, [upd(PDR_FUL, sp.IE_Precedence(precedence=30))]))
    assert cause(m) == 1, rule(m)
    with Dataplane(pin_dir) as dp:
        forwarding_config(dp)
        assert run(dp, [f_ul]) == [DROP]
    log = assoc.stop()
    assert "modification with Update PDR refused, cause 73" in log, log
