"""QoS enforcement in the XDP PGW-U (BPF_PROG_TEST_RUN): the QER gate, MBR policing per direction
with one token bucket shared by every CPU, the volume quota, and a URR's volume threshold measured
packet by packet (qos map, struct pgwu_qos in dataplane/pgwu.h; written by `pgwu pfcp`, here
straight into the map or with qos_ctl as the agent does).

The rate is the MBR over the bytes of the T-PDU (the inner IP packet: uplink the G-PDU's payload,
downlink the packet before encapsulation), 1 kbit/s = 1000 bit/s (TS 29.244 8.2.8). Every packet is
run once (no `repeat`: a repeated run would reuse the frame the program rewrote). No assertion depends
on the machine's speed: the policer's arithmetic is checked step by step against the clock values the
program itself stored (last_ns), and bounds that involve time use the time the test measured.
"""

from __future__ import annotations

import os
import random
import time

import pytest

from gtplab.gtpu import packets as P
from gtplab.dut.dataplane import (QOS_CTL_SET, QOS_CTL_TAKE_ALL, QOS_CTL_TAKE_CROSSING, QOS_DL_CLOSED, QOS_EXHAUSTED,
                                  QOS_KEEP_QUOTA, QOS_MICRO, QOS_QUOTA, QOS_QUOTA_DL, QOS_QUOTA_UL, QOS_UL_CLOSED,
                                  QOS_VOLTH, QOS_VOLTH_CROSSED, QOS_VOLTH_DL, QOS_VOLTH_UL, Police, Qos, Volth)
from tests.lib.pgwu_config import BASE_CONFIG
from tests.lib import oracle as O

TEID, UE, SGW, SGW_TEID = P.TEID_UL, P.UE_ADDR, P.SGW_ADDR, P.TEID_DL
PLAIN_TEID, PLAIN_UE = 0x777, "10.45.0.77"      # a bearer without B_QOS


@pytest.fixture(scope="module")
def dp(dataplane):
    return dataplane


@pytest.fixture
def qdp(dp):
    """The QoS bearer (B_QOS on both halves) and a plain one; the qos map empty; stats zero."""
    dp.set_config(BASE_CONFIG)
    dp.flush_bearers()
    dp.clear_map("qos")
    dp.add_bearer(TEID, UE, SGW, SGW_TEID, qos=True)
    dp.add_bearer(PLAIN_TEID, PLAIN_UE, SGW, 0x778)
    dp.reset_stats()
    return dp


def ul_frame(tpdu: int, teid: int = TEID, ue: str = UE) -> bytes:
    """An uplink G-PDU whose inner IPv4 packet (the T-PDU) is tpdu octets."""
    f = bytes(P.gpdu(teid, ue, size=tpdu + 14 + 20 + 8 + 8 + 4))
    assert len(O.gpdu_inner(f)) == tpdu
    return f


def dl_frame(tpdu: int, ue: str = UE) -> bytes:
    f = bytes(P.downlink_ip(ue=ue, size=tpdu + 14 + 4))
    assert len(O.ip_payload(f)) == tpdu
    return f


def send(dp, direction: str, tpdu: int, **kw):
    """(verdict, reason counted) of one packet of a T-PDU of tpdu octets."""
    before = dp.stats()
    r = dp.run_access(ul_frame(tpdu, **kw)) if direction == "ul" else dp.run_sgi(dl_frame(tpdu, **kw))
    after = dp.stats()
    delta = [k for k in after if after[k] != before.get(k)]
    assert len(delta) == 1, f"one packet, counted {delta}"
    return r.verdict, delta[0][0]


def usage(dp, direction: str) -> tuple[int, int]:
    b = dp.ul_bearer(TEID) if direction == "ul" else dp.dl_bearer(UE)
    return b.packets, b.bytes


def police(q: Qos, direction: str) -> Police:
    return q.ul if direction == "ul" else q.dl


FWD = {"ul": ("redirect", "ul_fwd"), "dl": ("redirect", "dl_fwd")}
OTHER = {"ul": "dl", "dl": "ul"}


# ---- the gate ----------------------------------------------------------------------------------------
@pytest.mark.bpf
@pytest.mark.parametrize("closed", ["ul", "dl"])
def test_gate_closed_drops_its_direction_only(qdp, closed):
    """A closed gate (TS 29.244 8.2.7) drops every packet of its direction, counted drop_gate_closed
    and not in the bearer's usage; the other direction, open, forwards."""
    qdp.set_qos(TEID, Qos(flags=QOS_UL_CLOSED if closed == "ul" else QOS_DL_CLOSED))
    for _ in range(3):
        assert send(qdp, closed, 500) == ("drop", "drop_gate_closed")
    assert usage(qdp, closed) == (0, 0)
    assert send(qdp, OTHER[closed], 500) == FWD[OTHER[closed]]
    assert usage(qdp, OTHER[closed]) == (1, 500)
    assert qdp.stats()[("drop_gate_closed", "drop")][0] == 3
    qdp.set_qos(TEID, Qos())                              # opened again
    assert send(qdp, closed, 500) == FWD[closed]


@pytest.mark.bpf
def test_qos_entry_ignored_for_a_bearer_without_the_flag(qdp):
    """Only bearers with B_QOS look at the qos map: an entry under a plain bearer's TEID (gates
    closed) changes nothing for it."""
    qdp.set_qos(PLAIN_TEID, Qos(flags=QOS_UL_CLOSED | QOS_DL_CLOSED))
    assert send(qdp, "ul", 300, teid=PLAIN_TEID, ue=PLAIN_UE) == FWD["ul"]
    assert send(qdp, "dl", 300, ue=PLAIN_UE) == FWD["dl"]


# ---- the policer -------------------------------------------------------------------------------------
def refilled(p: Police, now: int) -> int:
    """The credit a token bucket p holds at CLOCK_MONOTONIC now (ns): + elapsed x kbps micro-bits,
    elapsed capped at fill_ns, the credit at depth."""
    el = min(max(now - p.last_ns, 0), p.fill_ns)
    return min(p.depth, p.credit + el * p.kbps)


@pytest.mark.bpf
@pytest.mark.parametrize("direction", ["ul", "dl"])
def test_policer_is_an_exact_token_bucket_at_the_mbr(qdp, direction):
    """300 packets of random sizes at random gaps through an MBR of 80 kbit/s, bucket 6000 octets:
    after each, the bucket's state is what a token bucket of rate MBR over T-PDU octets gives at the
    clock value the program stored; a packet passes exactly when the credit covers it, a dropped one
    costs nothing and is counted drop_mbr; the bearer's usage counts the forwarded ones only; the
    other direction's bucket is not touched."""
    kbps, depth_b = 80, 6000
    pol = Police.of(kbps, depth_b)
    qdp.set_qos(TEID, Qos(ul=pol) if direction == "ul" else Qos(dl=pol))
    rng = random.Random(7)
    passed = dropped = fwd_bytes = 0
    prev = police(qdp.qos(TEID), direction)
    for i in range(300):
        if rng.random() < 0.3:
            time.sleep(rng.uniform(0, 0.005))
        size = rng.choice([64, 100, 576, 1000, 1400, 1500])
        verdict, reason = send(qdp, direction, size)
        q = qdp.qos(TEID)
        cur = police(q, direction)
        assert police(q, OTHER[direction]) == Police(), "the other direction's bucket changed"
        credit = refilled(prev, cur.last_ns)
        cost = size * 8 * QOS_MICRO
        if credit >= cost:
            assert (verdict, reason) == FWD[direction], f"packet {i}: {size} B with credit {credit} not forwarded"
            assert cur.credit == credit - cost, f"packet {i}: credit {cur.credit}, a token bucket gives {credit - cost}"
            passed += 1
            fwd_bytes += size
        else:
            assert (verdict, reason) == ("drop", "drop_mbr"), f"packet {i}: {size} B over credit {credit} forwarded"
            assert cur.credit == credit, f"packet {i}: a dropped packet cost {credit - cur.credit}"
            dropped += 1
        prev = cur
    assert passed and dropped, (passed, dropped)
    assert usage(qdp, direction) == (passed, fwd_bytes)
    assert qdp.stats()[("drop_mbr", "drop")][0] == dropped


@pytest.mark.bpf
@pytest.mark.parametrize("direction", ["ul", "dl"])
def test_policer_is_shared_by_the_cpus(qdp, direction):
    """One bucket for all CPUs: 100 packets of 1000 octets alternately on CPU 0 and CPU 1 through an
    MBR of 80 kbit/s (10,000 octets/s) with a full bucket of 20,000 octets deliver the bucket and what
    the rate adds over the time taken, never more: a bucket per CPU would deliver twice the bucket."""
    cpus = sorted(os.sched_getaffinity(0))[:2]
    if len(cpus) < 2:
        pytest.fail("this test needs 2 CPUs to run the program on (the project's machine has 2)")
    depth_b, rate_bps = 20_000, 10_000
    qdp.set_qos(TEID, Qos(ul=Police.of(80, depth_b)) if direction == "ul" else Qos(dl=Police.of(80, depth_b)))
    saved = os.sched_getaffinity(0)
    delivered = 0
    t0 = time.monotonic()
    try:
        for i in range(100):
            os.sched_setaffinity(0, {cpus[i % 2]})
            verdict, reason = send(qdp, direction, 1000)
            delivered += 1000 if verdict == "redirect" else 0
    finally:
        os.sched_setaffinity(0, saved)
    elapsed = time.monotonic() - t0
    assert delivered >= depth_b, f"a full bucket of {depth_b} octets delivered only {delivered}"
    assert delivered <= depth_b + rate_bps * elapsed + 1000, (
        f"{delivered} octets delivered in {elapsed:.3f} s: more than the bucket ({depth_b}) and the rate allow")


@pytest.mark.bpf
@pytest.mark.parametrize("direction", ["ul", "dl"])
def test_nothing_lost_at_099_of_the_mbr(qdp, direction):
    """Offered at 0.99 x MBR (1000-octet T-PDUs, at least 1000 x 8 / (0.99 x 800 kbit/s) apart) from an
    empty bucket one packet deep, nothing is dropped. The bucket holds one T-PDU, so no credit saved
    over a late gap covers a shortfall: a rate 1 % low drops, and so does counting the tunnel's 36
    octets (the rate is over T-PDU octets)."""
    kbps = 800
    qdp.set_qos(TEID, Qos(ul=Police.of(kbps, 1000, full=False)) if direction == "ul"
                else Qos(dl=Police.of(kbps, 1000, full=False)))
    gap = 1000 * 8 / (0.99 * kbps * 1000)
    for i in range(30):
        t_next = time.monotonic() + gap
        while time.monotonic() < t_next:
            time.sleep(max(t_next - time.monotonic(), 0))
        assert send(qdp, direction, 1000) == FWD[direction], f"packet {i} dropped at 0.99 x MBR"
    assert usage(qdp, direction) == (30, 30_000)


# ---- the quota ---------------------------------------------------------------------------------------
@pytest.mark.bpf
def test_quota_forwards_what_fits_then_drops(qdp):
    """A total volume quota of 4,500 octets: 1000-octet T-PDUs of either direction pass while they fit
    (4), the fifth does not (drop_quota, EXHAUSTED set), and nothing passes after it, not even a
    smaller packet that would fit what is left (the quota is used up)."""
    qdp.set_qos(TEID, Qos(flags=QOS_QUOTA | QOS_QUOTA_UL | QOS_QUOTA_DL, quota_left=4500))
    for d in ("ul", "dl", "ul", "dl"):
        assert send(qdp, d, 1000) == FWD[d]
    q = qdp.qos(TEID)
    assert (q.quota_left, q.flags & QOS_EXHAUSTED) == (500, 0)
    assert send(qdp, "ul", 1000) == ("drop", "drop_quota")
    assert qdp.qos(TEID).flags & QOS_EXHAUSTED
    assert usage(qdp, "ul") == (2, 2000) and usage(qdp, "dl") == (2, 2000)


@pytest.mark.bpf
def test_uplink_quota_leaves_downlink_alone(qdp):
    """A quota on uplink volume counts and stops uplink only."""
    qdp.set_qos(TEID, Qos(flags=QOS_QUOTA | QOS_QUOTA_UL, quota_left=1500))
    assert send(qdp, "ul", 1000) == FWD["ul"]
    assert send(qdp, "dl", 1400) == FWD["dl"]
    assert send(qdp, "ul", 1000) == ("drop", "drop_quota")
    assert send(qdp, "dl", 1400) == FWD["dl"]
    assert qdp.qos(TEID).quota_left == 500


# ---- the volume threshold ----------------------------------------------------------------------------
TH_BOTH = QOS_VOLTH | QOS_VOLTH_UL | QOS_VOLTH_DL


def th_qos(total: int | None = None, ul_vol: int | None = None, dl_vol: int | None = None, flags: int = TH_BOTH,
           urr_id: int = 7, extra: int = 0, **kw) -> Qos:
    """An entry measuring URR urr_id's volume threshold (total / UL / DL octets, each when given), with
    the flags extra and the other fields of kw."""
    vf = (1 if total is not None else 0) | (2 if ul_vol is not None else 0) | (4 if dl_vol is not None else 0)
    return Qos(flags=flags | extra, th=Volth(limit=(total or 0, ul_vol or 0, dl_vol or 0), urr_id=urr_id,
                                             vol_flags=vf), **kw)


def counts(pkts: list[tuple[str, int]]) -> tuple[int, int, int, int]:
    """(UL packets, UL octets, DL packets, DL octets) of (direction, T-PDU octets) packets."""
    ul = [n for d, n in pkts if d == "ul"]
    dl = [n for d, n in pkts if d == "dl"]
    return (len(ul), sum(ul), len(dl), sum(dl))


@pytest.mark.bpf
def test_volume_threshold_records_the_usage_at_the_packet_that_reaches_it(qdp):
    """Total volume threshold 5,000 octets, both directions counted: nothing recorded while the volume
    is under it; the packet that brings it to 5,000 or more records the usage at it, itself included
    (3 UL / 3,400 octets, 2 DL / 1,800: the crossing), sets CROSSED and restarts the count, which goes
    on with the packets after it. A packet the data path drops (here the quota's) counts nowhere."""
    qdp.set_qos(TEID, th_qos(total=5000, extra=QOS_QUOTA | QOS_QUOTA_UL | QOS_QUOTA_DL, quota_left=9000))
    sent = []
    for d, n in [("ul", 1200), ("dl", 800), ("ul", 1500), ("dl", 1000)]:
        assert send(qdp, d, n) == FWD[d]
        sent.append((d, n))
        q = qdp.qos(TEID)
        assert not q.flags & QOS_VOLTH_CROSSED and q.th.now == counts(sent), (sent, q.th)
    assert send(qdp, "ul", 700) == FWD["ul"]                   # 5,200 octets: reached
    q = qdp.qos(TEID)
    assert q.flags & QOS_VOLTH_CROSSED
    assert q.th.at == (3, 3400, 2, 1800) and q.th.now == (0, 0, 0, 0), q.th
    assert send(qdp, "dl", 1300) == FWD["dl"]
    assert send(qdp, "ul", 3000) == ("drop", "drop_quota")     # 3,000 > 9,000 - 6,500: dropped, not counted
    q = qdp.qos(TEID)
    assert q.th.at == (3, 3400, 2, 1800) and q.th.now == (0, 0, 1, 1300), q.th
    assert usage(qdp, "ul") == (3, 3400) and usage(qdp, "dl") == (3, 3100)


@pytest.mark.bpf
@pytest.mark.parametrize("case", ["ul volume", "uplink only counted"])
def test_volume_threshold_counts_what_its_urr_measures(qdp, case):
    """An uplink volume threshold compares the uplink octets only (downlink packets are counted, in
    their own figures, and never reach it); a URR only the uplink PDR links counts no downlink packet
    at all, even against a total threshold."""
    if case == "ul volume":
        qdp.set_qos(TEID, th_qos(ul_vol=2000))
    else:
        qdp.set_qos(TEID, th_qos(total=2000, flags=QOS_VOLTH | QOS_VOLTH_UL))
    for _ in range(3):
        assert send(qdp, "dl", 1400) == FWD["dl"]
    q = qdp.qos(TEID)
    assert not q.flags & QOS_VOLTH_CROSSED
    assert q.th.now == ((0, 0, 3, 4200) if case == "ul volume" else (0, 0, 0, 0))
    assert send(qdp, "ul", 1000) == FWD["ul"]
    assert not qdp.qos(TEID).flags & QOS_VOLTH_CROSSED
    assert send(qdp, "ul", 1000) == FWD["ul"]
    q = qdp.qos(TEID)
    assert q.flags & QOS_VOLTH_CROSSED
    assert q.th.at == ((2, 2000, 3, 4200) if case == "ul volume" else (2, 2000, 0, 0)), q.th


@pytest.mark.bpf
def test_volume_threshold_taken_by_the_agent_then_measured_on(qdp):
    """qos_ctl, as `pgwu pfcp` runs it: TAKE_CROSSING returns the usage at the crossing and clears it,
    the count since goes on; a crossing reached again while one waited is recorded when that one is
    taken (late, by what came after it, not lost); TAKE_ALL takes the count too and restarts it."""
    qdp.set_qos(TEID, th_qos(total=3000))
    for _ in range(4):
        assert send(qdp, "ul", 1000) == FWD["ul"]                  # crossed at the third
    q, after = qdp.qos_ctl(TEID, QOS_CTL_TAKE_CROSSING)
    assert q.flags & QOS_VOLTH_CROSSED and q.th.at == (3, 3000, 0, 0) and q.th.now == (1, 1000, 0, 0)
    assert not after & QOS_VOLTH_CROSSED
    assert qdp.qos(TEID).th.now == (1, 1000, 0, 0)                 # measured on from the crossing
    for _ in range(6):
        assert send(qdp, "dl", 1000) == FWD["dl"]                  # crossed at the second, then 4 more
    q = qdp.qos(TEID)
    assert q.th.at == (1, 1000, 2, 2000) and q.th.now == (0, 0, 4, 4000)
    q, after = qdp.qos_ctl(TEID, QOS_CTL_TAKE_CROSSING)
    assert q.th.at == (1, 1000, 2, 2000)
    assert after & QOS_VOLTH_CROSSED                              # 4,000 >= 3,000 waiting: recorded now
    q, after = qdp.qos_ctl(TEID, QOS_CTL_TAKE_CROSSING)
    assert q.th.at == (0, 0, 4, 4000) and q.th.now == (0, 0, 0, 0) and not after & QOS_VOLTH_CROSSED
    assert send(qdp, "ul", 500) == FWD["ul"]
    q, after = qdp.qos_ctl(TEID, QOS_CTL_TAKE_ALL)
    assert not q.flags & QOS_VOLTH_CROSSED and q.th.now == (1, 500, 0, 0)
    assert qdp.qos(TEID).th.now == (0, 0, 0, 0)
    assert qdp.qos_ctl(0xDEAD, QOS_CTL_TAKE_ALL) is None          # no entry


@pytest.mark.bpf
def test_volume_threshold_is_exact_with_both_cpus_forwarding(qdp):
    """One count for all CPUs (the entry's, under its lock): 200 packets of random sizes and
    directions, alternately on CPU 0 and CPU 1, against a total threshold of 60,000 octets: the usage
    recorded at the crossing is exactly that of the packets up to the one that reached it, and what
    was recorded plus what was counted since is everything forwarded (the bearer's own counters).
    A count per CPU would cross late, at about twice the threshold, or never."""
    cpus = sorted(os.sched_getaffinity(0))[:2]
    if len(cpus) < 2:
        pytest.fail("this test needs 2 CPUs to run the program on (the project's machine has 2)")
    limit = 60_000
    qdp.set_qos(TEID, th_qos(total=limit))
    rng = random.Random(25)
    pkts = [(rng.choice(("ul", "dl")), rng.randrange(100, 1400)) for _ in range(200)]
    saved = os.sched_getaffinity(0)
    try:
        for i, (d, n) in enumerate(pkts):
            os.sched_setaffinity(0, {cpus[i % 2]})
            assert send(qdp, d, n) == FWD[d]
    finally:
        os.sched_setaffinity(0, saved)
    total, k = 0, 0
    while total < limit:
        total += pkts[k][1]
        k += 1
    q = qdp.qos(TEID)
    assert q.flags & QOS_VOLTH_CROSSED
    assert q.th.at == counts(pkts[:k]), f"crossed at {q.th.at}, the {k}th packet reached it: {counts(pkts[:k])}"
    assert q.th.now == counts(pkts[k:])
    ul, dl = usage(qdp, "ul"), usage(qdp, "dl")
    assert tuple(a + b for a, b in zip(q.th.at, q.th.now)) == (*ul, *dl)


@pytest.mark.bpf
def test_qos_ctl_set_keeps_what_the_data_path_counted(qdp):
    """An Update QER/URR rewrites the entry with qos_ctl SET in one step: the policer's credit and
    clock kept when its rate and depth are the same (taken from the new entry when not), the quota
    left kept with KEEP_QUOTA (the new one without), the threshold's count and crossing kept while
    the same URR is measured; another URR's threshold starts from the count the agent gives."""
    pol = Police.of(1_000_000, 100_000)
    qdp.set_qos(TEID, th_qos(total=2500, extra=QOS_QUOTA | QOS_QUOTA_UL, quota_left=50_000, ul=pol))
    for _ in range(3):
        assert send(qdp, "ul", 1000) == FWD["ul"]
    before = qdp.qos(TEID)
    assert before.flags & QOS_VOLTH_CROSSED and before.th.at == (3, 3000, 0, 0)
    assert before.ul.credit < pol.credit and before.quota_left == 47_000
    new = th_qos(total=9000, extra=QOS_QUOTA | QOS_QUOTA_UL, quota_left=1, ul=pol)
    assert qdp.qos_ctl(TEID, QOS_CTL_SET, new, keep=QOS_KEEP_QUOTA) is not None
    q = qdp.qos(TEID)
    assert (q.ul.credit, q.ul.last_ns, q.quota_left) == (before.ul.credit, before.ul.last_ns, 47_000)
    assert q.flags & QOS_VOLTH_CROSSED and q.th.at == (3, 3000, 0, 0) and q.th.limit == (9000, 0, 0)
    assert send(qdp, "ul", 1000) == FWD["ul"]
    assert qdp.qos(TEID).th.now == (1, 1000, 0, 0)
    other = th_qos(total=9000, urr_id=8, quota_left=5000, ul=Police.of(2_000_000, 100_000),
                   extra=QOS_QUOTA | QOS_QUOTA_UL)
    other.th.now = (2, 2500, 1, 100)                                 # URR 8's usage since its last report
    qdp.qos_ctl(TEID, QOS_CTL_SET, other)
    q = qdp.qos(TEID)
    assert q.th.now == (2, 2500, 1, 100) and q.th.at == (0, 0, 0, 0) and not q.flags & QOS_VOLTH_CROSSED
    assert q.quota_left == 5000 and q.ul.credit == other.ul.credit and q.ul.kbps == 2_000_000
