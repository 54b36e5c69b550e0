"""Usage reporting by `pgwu pfcp` (TS 29.244 5.2.2, 7.5.8): Session Report Requests for a volume
threshold (recorded by the data path at the packet that reaches it), a volume quota (which the data path enforces: what is over it is dropped), a time threshold
and a measurement period; usage reports in the Session Modification Response to a Query URR (or
QAURR); and the final report at deletion. Every report carries the usage since the URR's last one, so
a URR's reports add up to what the bearer forwarded, exact in packets and octets (octets of the inner
IPv4 packets, per direction), dropped packets in none of them.

Packets run through the programs (BPF_PROG_TEST_RUN), one run each. Reports arrive on the CP's socket
on their own: each test waits for them with a deadline, never asserting how fast they came.
"""

from __future__ import annotations

import struct
import time

import pytest
from scapy.contrib.pfcp import PFCP

from gtplab.gtpu import packets as P
from gtplab.dut.dataplane import Dataplane
from tests.lib import pfcp_msgs as M
from tests.lib.pfcp_agent import UE, cause, created_teid, forwarding_config, up_seid, usage_report
from tests.lib.pfcp_sdf import agent_held, session_reports

pytestmark = pytest.mark.bpf

CP_SEID = 0x30


def establish(assoc, durat: bool = False, **params) -> tuple[int, int]:
    ies = [M.node_id(), M.IE_FSEID(v4=1, seid=CP_SEID, ipv4=M.CP_ADDR), M.ul_pdr(None, UE, urr=True),
           M.dl_pdr(UE, urr=True), M.ul_far(), M.dl_far(), M.create_urr(durat=durat, **params)]
    r = assoc.req(M.establish(2, CP_SEID, UE, ies=ies))
    assert cause(r) == 1
    return up_seid(r), created_teid(r)


def send(dp, teid: int, direction: str, n: int, tpdu: int = 1000) -> list[str]:
    if direction == "ul":
        f = bytes(P.gpdu(teid=teid, ue=UE, size=tpdu + 14 + 20 + 8 + 8 + 4))
        return [dp.run_access(f).verdict for _ in range(n)]
    f = bytes(P.downlink_ip(ue=UE, size=tpdu + 14 + 4))
    return [dp.run_sgi(f).verdict for _ in range(n)]


PERIO, VOLTH, TIMTH, IMMER = 0x01 << 16, 0x02 << 16, 0x04 << 16, 0x80 << 16     # Usage Report Trigger (8.2.41)
VOLQU, TERMR = 0x01 << 8, 0x08 << 8


def next_report(assoc, timeout: float) -> dict | None:
    """The next Session Report Request's Usage Report (for our session, Report Type USAR), or None
    after timeout seconds."""
    got = session_reports(assoc, CP_SEID, timeout, n=1)
    return got[0] if got else None


def final_report(assoc, seid: int, seq: int) -> dict:
    r = assoc.req(M.delete(seq, seid))
    assert cause(r) == 1
    [ur] = [i for i in r.payload.IE_list if i.ietype == 79]
    return usage_report(ur)


def test_volume_threshold_reported_once_crossed_then_rearmed(assoc, pin_dir):
    """Volume threshold 5000 octets total: 4 uplink T-PDUs of 1000 octets report nothing; the fifth
    (downlink) crosses it: one Session Report Request, VOLTH, 5000/4000/1000 octets, 5/4/1 packets,
    UR-SEQN 0. The measurement restarts there: 3 more are not reported, and the deletion's report
    carries just those (UR-SEQN 1)."""
    seid, teid = establish(assoc, vol_thresh=5000)
    with Dataplane(pin_dir) as dp:
        forwarding_config(dp)
        assert send(dp, teid, "ul", 4) == ["redirect"] * 4
        assert next_report(assoc, 0.5) is None
        assert send(dp, teid, "dl", 1) == ["redirect"]
        rep = next_report(assoc, 3)
        assert rep is not None, "no report after the threshold was crossed"
        assert (rep["urr"], rep["seqn"], rep["trigger"]) == (M.URR_ID, 0, VOLTH)
        assert rep["volume"] == (5000, 4000, 1000, 5, 4, 1)
        assert send(dp, teid, "ul", 3) == ["redirect"] * 3
        assert next_report(assoc, 0.5) is None
    fin = final_report(assoc, seid, 3)
    assert (fin["seqn"], fin["trigger"], fin["volume"]) == (1, TERMR, (3000, 3000, 0, 3, 3, 0))


def test_volume_threshold_report_is_the_usage_at_the_crossing_packet(assoc, pin_dir):
    """The data path records the usage at the packet that reaches the threshold, so the report carries
    exactly that however late the agent looks: 7 T-PDUs of 1000 octets (UL UL DL UL DL UL UL) while the
    agent is held, threshold 5000 total: the VOLTH report says 5000 octets, 3000 UL and 2000 DL, 5
    packets (the fifth reached it), not the 7000 the counters hold when the agent reads them; the 2
    after it are the next measurement's (the deletion's report); the reports add up to what was sent."""
    seid, teid = establish(assoc, vol_thresh=5000)
    with Dataplane(pin_dir) as dp:
        forwarding_config(dp)
        with agent_held(assoc):
            for d in ("ul", "ul", "dl", "ul", "dl", "ul", "ul"):
                assert send(dp, teid, d, 1) == ["redirect"]
        rep = next_report(assoc, 3)
        assert rep is not None, "no report after the threshold was crossed"
        assert (rep["seqn"], rep["trigger"]) == (0, VOLTH)
        assert rep["volume"] == (5000, 3000, 2000, 5, 3, 2), f"reported {rep['volume']}, crossed at 5000 / 5 packets"
        assert next_report(assoc, 0.5) is None
    fin = final_report(assoc, seid, 3)
    assert (fin["seqn"], fin["volume"]) == (1, (2000, 2000, 0, 2, 2, 0))


def test_volume_threshold_reached_twice_before_the_agent_looks_is_reported_late_not_lost(assoc, pin_dir):
    """The data path looks for one crossing at a time: 12 T-PDUs of 1000 octets while the agent is held,
    threshold 5000: the first crossing is reported exactly (5 packets), the second, reached while the
    first waited, as soon as the first is taken, with everything since (7 packets: late, not lost);
    the deletion's report has nothing left; the three add up to the 12."""
    seid, teid = establish(assoc, vol_thresh=5000)
    with Dataplane(pin_dir) as dp:
        forwarding_config(dp)
        with agent_held(assoc):
            assert send(dp, teid, "ul", 12) == ["redirect"] * 12
        reps = [next_report(assoc, 3), next_report(assoc, 3)]
    assert None not in reps, reps
    assert [(r["trigger"], r["volume"]) for r in reps] == [(VOLTH, (5000, 5000, 0, 5, 5, 0)),
                                                           (VOLTH, (7000, 7000, 0, 7, 7, 0))]
    fin = final_report(assoc, seid, 3)
    assert fin["volume"] == (0, 0, 0, 0, 0, 0)


def test_volume_threshold_counts_from_the_last_report_of_any_kind(assoc, pin_dir):
    """A Query URR's report restarts the measurement the threshold applies to (TS 29.244 5.2.2.3.1:
    each report carries the usage since the last): 2 T-PDUs of 1500 octets, queried (3000, IMMER);
    then 6 of 1000 while the agent is held, threshold 5000: reached at the fifth after the query
    (5 packets, 5000), not at the second (where the count since the establishment reaches it)."""
    seid, teid = establish(assoc, vol_thresh=5000)
    with Dataplane(pin_dir) as dp:
        forwarding_config(dp)
        assert send(dp, teid, "ul", 2, tpdu=1500) == ["redirect"] * 2
        r = assoc.req(M.query_urr(3, seid))
        [ur] = [i for i in r.payload.IE_list if i.ietype == 78]
        assert (usage_report(ur)["trigger"], usage_report(ur)["volume"]) == (IMMER, (3000, 3000, 0, 2, 2, 0))
        with agent_held(assoc):
            assert send(dp, teid, "ul", 6) == ["redirect"] * 6
        rep = next_report(assoc, 3)
    assert rep is not None and (rep["seqn"], rep["trigger"]) == (1, VOLTH), rep
    assert rep["volume"] == (5000, 5000, 0, 5, 5, 0)
    fin = final_report(assoc, seid, 4)
    assert (fin["seqn"], fin["volume"]) == (2, (1000, 1000, 0, 1, 1, 0))


def test_update_urr_keeps_the_threshold_count(assoc, pin_dir):
    """An Update URR that lowers the threshold to 4000 after 3 T-PDUs of 1000 keeps what was counted
    (the entry is rewritten in one step, qos_ctl SET; a URR the data path did not measure before
    starts from its usage since its last report): the fourth reaches it, 4 packets, 4000."""
    seid, teid = establish(assoc, vol_thresh=5000)
    with Dataplane(pin_dir) as dp:
        forwarding_config(dp)
        assert send(dp, teid, "ul", 3) == ["redirect"] * 3
        assert cause(assoc.req(M.modify_urr(3, seid, vol_thresh=4000))) == 1
        assert next_report(assoc, 0.5) is None
        assert send(dp, teid, "ul", 1) == ["redirect"]
        rep = next_report(assoc, 3)
    assert rep is not None and (rep["trigger"], rep["volume"]) == (VOLTH, (4000, 4000, 0, 4, 4, 0)), rep
    final_report(assoc, seid, 4)


def test_a_crossing_not_reported_yet_goes_out_before_the_deletion(assoc, pin_dir):
    """Threshold 5000, 6 T-PDUs of 1000 and the deletion request all while the agent is held: once
    released, the VOLTH report (5000, 5 packets) comes before the Session Deletion Response, whose
    report has the sixth."""
    seid, teid = establish(assoc, vol_thresh=5000)
    with Dataplane(pin_dir) as dp:
        forwarding_config(dp)
        with agent_held(assoc):
            assert send(dp, teid, "ul", 6) == ["redirect"] * 6
            assoc.send(M.delete(90, seid))
        got = []
        deadline = time.monotonic() + 5
        while not any(PFCP(b).message_type == 55 for b in got) and time.monotonic() < deadline:
            got.append(assoc.recv_raw(max(0.01, deadline - time.monotonic())))
    types = [PFCP(b).message_type for b in got]
    assert types == [56, 55], f"message types {types}: the VOLTH report first, then the deletion's answer"
    [ur] = [i for i in PFCP(got[0]).payload.IE_list if i.ietype == 80]
    assert (usage_report(ur)["trigger"], usage_report(ur)["volume"]) == (VOLTH, (5000, 5000, 0, 5, 5, 0))
    [ur] = [i for i in PFCP(got[1]).payload.IE_list if i.ietype == 79]
    assert (usage_report(ur)["trigger"], usage_report(ur)["volume"]) == (TERMR, (1000, 1000, 0, 1, 1, 0))


def test_volume_quota_enforced_then_reported_and_renewed(assoc, pin_dir):
    """Volume quota 3000 octets: of 5 uplink T-PDUs of 1000 octets, 3 are forwarded and 2 dropped
    (drop_quota, as the URR has no FAR for quota action: TS 29.244 5.2.2.2); a Session Report Request
    with VOLQU reports the 3 (not the dropped ones). An Update URR with a new quota forwards again."""
    seid, teid = establish(assoc, vol_quota=3000)
    with Dataplane(pin_dir) as dp:
        forwarding_config(dp)
        assert send(dp, teid, "ul", 5) == ["redirect"] * 3 + ["drop"] * 2
        assert dp.stats()[("drop_quota", "drop")][0] == 2
        rep = next_report(assoc, 3)
        assert rep is not None, "no report after the quota was used up"
        assert (rep["trigger"], rep["volume"]) == (VOLQU, (3000, 3000, 0, 3, 3, 0))
        assert next_report(assoc, 0.5) is None, "the exhaustion was reported twice"
        assert cause(assoc.req(M.modify_urr(3, seid, vol_quota=2000))) == 1
        assert send(dp, teid, "dl", 3) == ["redirect"] * 2 + ["drop"]
        rep = next_report(assoc, 3)
        assert rep is not None and (rep["trigger"], rep["volume"]) == (VOLQU, (2000, 0, 2000, 2, 0, 2))
    fin = final_report(assoc, seid, 4)
    assert fin["volume"] == (0, 0, 0, 0, 0, 0)


@pytest.mark.timing        # a 1 s measurement period: the packets sent between its reports fall in one period
def test_periodic_reports_carry_each_period_usage(assoc, pin_dir):
    """Measurement Period 1 s: reports come with PERIO and consecutive UR-SEQNs; their volumes add up
    to what was forwarded, each reporting only its own period's."""
    seid, teid = establish(assoc, period=1)
    reps = []
    with Dataplane(pin_dir) as dp:
        forwarding_config(dp)
        assert send(dp, teid, "ul", 2) == ["redirect"] * 2
        reps.append(next_report(assoc, 3))
        assert send(dp, teid, "dl", 1, tpdu=500) == ["redirect"]
        reps.append(next_report(assoc, 3))
        reps.append(next_report(assoc, 3))
    assert None not in reps, f"periodic reports missing: {reps}"
    assert [r["trigger"] for r in reps] == [PERIO] * 3
    assert [r["seqn"] for r in reps] == [0, 1, 2]
    total = tuple(sum(r["volume"][i] for r in reps) for i in range(6))
    assert total == (2500, 2000, 500, 3, 2, 1)
    # a period with no traffic reports none: a measurement that did not restart would repeat the total
    assert any(r["volume"] == (0, 0, 0, 0, 0, 0) for r in reps), reps
    fin = final_report(assoc, seid, 3)
    assert fin["seqn"] >= 3


@pytest.mark.timing        # a 1 s time threshold: reported 0.8 s (the agent's poll) to 4 s after the packet
def test_time_threshold_counts_from_the_first_packet(assoc, pin_dir):
    """Time Threshold 1 s on a URR measuring duration: it is traffic duration (TS 29.244 8.2.14), so
    no report while nothing flows; once a packet went through, a report with TIMTH 1 s later."""
    seid, teid = establish(assoc, durat=True, time_thresh=1)
    assert next_report(assoc, 1.6) is None, "a time threshold reported with no traffic at all"
    with Dataplane(pin_dir) as dp:
        forwarding_config(dp)
        assert send(dp, teid, "ul", 1) == ["redirect"]
        t = time.monotonic()
        rep = next_report(assoc, 4)
        waited = time.monotonic() - t
    assert rep is not None and rep["trigger"] == TIMTH and rep["duration"] >= 1, rep
    assert 0.8 <= waited, f"reported {waited:.2f} s after the first packet, before the threshold"
    final_report(assoc, seid, 3)


def test_query_urr_answered_with_the_usage_since_the_last_report(assoc, pin_dir):
    """A modification with Query URR gets a Usage Report (78, IMMER) in its response with the usage so
    far; the next query (QAURR this time) reports only what came after; an unknown URR ID is a rule
    failure naming it."""
    seid, teid = establish(assoc)
    with Dataplane(pin_dir) as dp:
        forwarding_config(dp)
        send(dp, teid, "ul", 2)
        send(dp, teid, "dl", 1, tpdu=700)
        r = assoc.req(M.query_urr(3, seid))
        assert cause(r) == 1
        [ur] = [i for i in r.payload.IE_list if i.ietype == 78]
        rep = usage_report(ur)
        assert (rep["urr"], rep["seqn"], rep["trigger"], rep["volume"]) == (M.URR_ID, 0, IMMER,
                                                                            (2700, 2000, 700, 3, 2, 1))
        send(dp, teid, "dl", 1, tpdu=300)
        r = assoc.req(M.query_urr(4, seid, urr_ids=(), all_urrs=True))
        [ur] = [i for i in r.payload.IE_list if i.ietype == 78]
        assert usage_report(ur)["volume"] == (300, 0, 300, 1, 0, 1)
        r = assoc.req(M.query_urr(5, seid, urr_ids=(99,)))
        assert cause(r) == 73 and bytes([i for i in r.payload.IE_list if i.ietype == 114][0])[4:] == \
            b"\x03" + struct.pack("!I", 99)   # rule type 3: URR (8.2.80)
    fin = final_report(assoc, seid, 6)
    assert (fin["seqn"], fin["volume"]) == (2, (0, 0, 0, 0, 0, 0))
