"""`pgwu pfcp` and SDF filters: a URR with a Volume Threshold or a Volume Quota linked by PDRs of
halves with filters (issue 32 item 4). Such a URR has one sdf_urr entry {TEID, URR ID} that every PDR
linking it counts in (sdf_pdrs' PGWU_SDF_P_URR), so the usage of all its PDRs, both directions, adds
up against one threshold and one quota; other PDRs (other URRs, the defaults) are not affected. The
reports are the default PDR's: a Session Report Request with VOLTH carrying the usage at the packet
that reached the threshold, with VOLQU once the quota is used up, the packets over it dropped as
drop_quota (no FAR for quota action: TS 29.244 5.2.2.2).

Sessions are built with gtplab/pfcp/rules.py; packets run through the loaded XDP program with
BPF_PROG_TEST_RUN, one run each (tests/lib/pfcp_sdf.py). Each inner packet is 128 octets (IPv4 20,
UDP 8, 100 of payload). docs/pfcp.md (SDF filters) says what is accepted and what is refused.
"""

from __future__ import annotations

import pytest
from scapy.contrib import pfcp as sp

from gtplab.dut.dataplane import Dataplane
from gtplab.pfcp import rules as R
from tests.lib import pfcp_msgs as M
from tests.lib.pfcp_agent import cause, created, up_seid
from tests.lib.pfcp_sdf import (FLOW, FWD_DL, FWD_UL, PORT, URR, agent_held, dl, est_msg, reports, rule, run,
                                sdf_maps, sdf_urr_entries, session, session_reports, ul, vol)
from tests.lib.pfcp_smf import forwarding_config

pytestmark = pytest.mark.bpf

CP_SEID = 0x10
VOLTH, VOLQU = 0x02 << 16, 0x01 << 8        # Usage Report Trigger (8.2.41), as usage_report gives it
DROP_QUOTA = ("drop_quota", "drop")
PKT = 128                                   # octets of each inner packet
FLOW7 = R.SdfFilter(flow=R.flow_description(17, "any", "7000"))


def _est(assoc, s: R.Session) -> tuple[int, int]:
    r = assoc.req(est_msg(2, CP_SEID, s))
    assert cause(r) == 1
    return created(r)[R.PDR_UL], up_seid(r)


def _by_urr(reps: list[dict]) -> dict[int, tuple]:
    return {r["urr"]: (r["trigger"], r["volume"]) for r in reps}


def _deleted_empty(assoc, pin_dir, seid: int, seq: int) -> dict[int, tuple]:
    d = assoc.req(M.delete(seq, seid))
    assert cause(d) == 1
    assert sdf_maps(pin_dir) == {"sdf_lists": 0, "sdf_pdrs": 0, "sdf_qos": 0}
    assert sdf_urr_entries(pin_dir) == 0
    return reports(d, 79)


def test_quota_of_a_shared_urr_stops_its_pdrs_only(assoc, pin_dir):
    """URR 2 (quota 5 packets' worth) shared by an uplink and a downlink PDR of one flow (port 6000),
    URR 4 (quota 2 packets' worth) of an uplink PDR of its own (port 7000), the defaults' URR 1 without
    quota. The flow's packets, both directions, are counted against URR 2's one quota: the fifth fits,
    the sixth and seventh (either direction) are drop_quota; PDR 5's third packet is; the defaults'
    packets all forward. One VOLQU report per URR, with the packets forwarded, not the dropped ones;
    a modification removing a PDR of such a session is 73 naming URR 2 (set at establishment only)
    and changes nothing; the deletion's reports carry what came after, and every map is empty."""
    s = session([R.Pdr(uplink=True, precedence=10, sdf=(FLOW,), urr=R.UrrSpec(volume_quota=5 * PKT)),
                 R.Pdr(uplink=False, precedence=10, sdf=(FLOW,), urr_of=0),
                 R.Pdr(uplink=True, precedence=20, sdf=(FLOW7,), urr=R.UrrSpec(volume_quota=2 * PKT))])
    teid, seid = _est(assoc, s)
    assert sdf_urr_entries(pin_dir) == 2
    fu, fd, u7, du, dd = ul(teid, dport=PORT), dl(sport=PORT), ul(teid, dport=7000), ul(teid), dl()
    with Dataplane(pin_dir) as dp:
        forwarding_config(dp)
        assert run(dp, [fu, fd, fu, fd, fu]) == [FWD_UL, FWD_DL] * 2 + [FWD_UL]
        assert run(dp, [fd, fu]) == [DROP_QUOTA] * 2
        assert run(dp, [u7] * 3) == [FWD_UL] * 2 + [DROP_QUOTA]
        assert run(dp, [du, dd] * 2) == [FWD_UL, FWD_DL] * 2
        got = _by_urr(session_reports(assoc, CP_SEID, 3, n=2))
        assert got == {2: (VOLQU, vol([fu] * 3, [fd] * 2)), 4: (VOLQU, vol([u7] * 2, []))}
        assert session_reports(assoc, CP_SEID, 0.5) == [], "an exhaustion reported twice"
        mod = sp.PFCP(version=1, S=1, seid=seid, seq=3) / sp.PFCPSessionModificationRequest(
            IE_list=[sp.IE_RemovePDR(IE_list=[sp.IE_PDR_Id(id=5)])])
        r = assoc.req(mod)
        assert (cause(r), rule(r)) == (73, (URR, 2))
        assert run(dp, [fu, u7, du]) == [DROP_QUOTA, DROP_QUOTA, FWD_UL]
    assert _deleted_empty(assoc, pin_dir, seid, 4) == {
        1: vol([du] * 3, [dd] * 2), 2: vol([], []), 4: vol([], [])}


def test_threshold_of_a_shared_urr_reported_at_the_crossing_packet(agent, assoc, pin_dir):
    """Threshold 4 packets' worth on URR 2 (an uplink and a downlink PDR of port 6000), on URR 4 (an
    uplink PDR of port 7000) and on the defaults' URR 1 (their PDRs are filters too: both directions
    have SDF PDRs). While the agent is held: URR 2's fourth packet is a downlink one, then one more
    uplink; URR 4 gets three; the defaults six uplink. Released: one VOLTH report each for URR 2 and
    URR 1 with the usage at their fourth packet exactly (URR 2: 2 UL, 2 DL), none for URR 4; a Query
    URR gives what followed (URR 2's fifth packet, URR 1's last two, URR 4's three)."""
    t = 4 * PKT
    s = session([R.Pdr(uplink=True, precedence=10, sdf=(FLOW,), urr=R.UrrSpec(volume_threshold=t)),
                 R.Pdr(uplink=False, precedence=10, sdf=(FLOW,), urr_of=0),
                 R.Pdr(uplink=True, precedence=20, sdf=(FLOW7,), urr=R.UrrSpec(volume_threshold=t))],
                urr=R.UrrSpec(volume_threshold=t))
    teid, seid = _est(assoc, s)
    assert sdf_urr_entries(pin_dir) == 3
    fu, fd, u7, du = ul(teid, dport=PORT), dl(sport=PORT), ul(teid, dport=7000), ul(teid)
    with Dataplane(pin_dir) as dp:
        forwarding_config(dp)
        with agent_held(agent):
            assert run(dp, [fu, fd, fu, u7, u7, u7, fd, fu] + [du] * 6) == \
                [FWD_UL, FWD_DL, FWD_UL] + [FWD_UL] * 3 + [FWD_DL, FWD_UL] + [FWD_UL] * 6
    got = _by_urr(session_reports(assoc, CP_SEID, 3, n=2))
    assert got == {2: (VOLTH, vol([fu] * 2, [fd] * 2)), 1: (VOLTH, vol([du] * 4, []))}
    assert session_reports(assoc, CP_SEID, 0.5) == [], "a report beyond the two crossings"
    q = assoc.req(M.query_urr(3, seid, urr_ids=(1, 2, 4)))
    assert cause(q) == 1
    assert reports(q, 78) == {1: vol([du] * 2, []), 2: vol([fu], []), 4: vol([u7] * 3, [])}
    assert _deleted_empty(assoc, pin_dir, seid, 4) == {u: vol([], []) for u in (1, 2, 4)}


def test_removing_the_pdr_and_urr_of_a_quota_is_73(assoc, pin_dir):
    """A modification that removes an SDF PDR together with its FAR and its URR, the session's one
    URR with a quota: 73 naming that URR (its entry is set at establishment only; accepted, the entry
    would outlive the URR). The quota is still enforced after it; the deletion empties sdf_urr."""
    s = session([R.Pdr(uplink=True, precedence=10, sdf=(FLOW,), urr=R.UrrSpec(volume_quota=PKT))])
    teid, seid = _est(assoc, s)
    assert sdf_urr_entries(pin_dir) == 1
    mod = sp.PFCP(version=1, S=1, seid=seid, seq=3) / sp.PFCPSessionModificationRequest(IE_list=[
        sp.IE_RemovePDR(IE_list=[sp.IE_PDR_Id(id=3)]), sp.IE_RemoveFAR(IE_list=[sp.IE_FAR_Id(id=3)]),
        sp.IE_RemoveURR(IE_list=[sp.IE_URR_Id(id=2)])])
    r = assoc.req(mod)
    assert (cause(r), rule(r)) == (73, (URR, 2))
    fu = ul(teid, dport=PORT)
    with Dataplane(pin_dir) as dp:
        forwarding_config(dp)
        assert run(dp, [fu, fu, ul(teid)]) == [FWD_UL, DROP_QUOTA, FWD_UL]
    _deleted_empty(assoc, pin_dir, seid, 4)
