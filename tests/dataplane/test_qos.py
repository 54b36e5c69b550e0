"""QoS enforcement in the XDP PGW-U (BPF_PROG_TEST_RUN): the QER gate, MBR policing per direction
with one token bucket shared by every CPU, and the volume quota (qos map, struct pgwu_qos in
dataplane/pgwu.h; written by `pgwu pfcp`, here straight into the map).

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
from gtplab.dut.dataplane import (QOS_DL_CLOSED, QOS_EXHAUSTED, QOS_MICRO, QOS_QUOTA, QOS_QUOTA_DL, QOS_QUOTA_UL,
                                  QOS_UL_CLOSED, Police, Qos)
from tests.dataplane.test_dataplane import BASE_CONFIG
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
