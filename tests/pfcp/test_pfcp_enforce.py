"""`pgwu pfcp` enforcing what it is given (TS 29.244): the QER's gate and MBR per direction in the data
path, through the session's qos map entry (struct pgwu_qos, dataplane/pgwu.h).

Sessions are set up over PFCP (tests/lib/pfcp_msgs.py) and their packets run through the programs
(BPF_PROG_TEST_RUN, one run per packet), as test_pfcp_agent.py does; bounds that involve time use the
time the test measured, never an assumption about the machine's speed.
"""

from __future__ import annotations

import time

import pytest

from gtplab.gtpu import packets as P
from gtplab.dut.dataplane import B_QOS, QOS_DL_CLOSED, QOS_MICRO, QOS_UL_CLOSED, Dataplane
from tests.lib import pfcp_msgs as M
from tests.lib.pfcp_agent import UE, Agent, cause, created_teid, forwarding_config, tables, up_seid

pytestmark = pytest.mark.bpf

BURST_MS = 1000          # --mbr-burst-ms: buckets one second deep, so a burst test's arithmetic is plain


@pytest.fixture
def assoc(pin_dir):
    a = Agent(pin_dir, "--mbr-burst-ms", str(BURST_MS))
    try:
        assert cause(a.req(M.assoc_setup(seq=1))) == 1
        yield a
    finally:
        a.stop()


def establish_qer(assoc, seq: int, **qer) -> tuple[int, int]:
    ies = [M.node_id(), M.IE_FSEID(v4=1, seid=0x20 + seq, ipv4=M.CP_ADDR), M.ul_pdr(None, UE, qer=True),
           M.dl_pdr(UE, qer=True), M.ul_far(), M.dl_far(), M.create_qer(**qer)]
    r = assoc.req(M.establish(seq, 0x20 + seq, UE, ies=ies))
    assert cause(r) == 1
    return up_seid(r), created_teid(r)


def run(dp, direction: str, teid: int, tpdu: int = 1000) -> str:
    """The verdict for one packet whose T-PDU (inner IPv4 packet) is tpdu octets."""
    if direction == "ul":
        return dp.run_access(bytes(P.gpdu(teid=teid, ue=UE, size=tpdu + 14 + 20 + 8 + 8 + 4))).verdict
    return dp.run_sgi(bytes(P.downlink_ip(ue=UE, size=tpdu + 14 + 4))).verdict


def test_qer_gate_closed_drops_its_direction_until_opened(assoc, pin_dir):
    """A QER with the uplink gate closed (8.2.7): uplink G-PDUs are dropped (drop_gate_closed) and not
    counted in the bearer's usage, downlink ones forwarded; an Update QER closing downlink and opening
    uplink turns that round; deleting the session removes the entry."""
    seid, teid = establish_qer(assoc, 2, gate_ul=1)
    with Dataplane(pin_dir) as dp:
        forwarding_config(dp)
        q = dp.qos(teid)
        assert q is not None and q.flags & (QOS_UL_CLOSED | QOS_DL_CLOSED) == QOS_UL_CLOSED
        assert dp.ul_bearer(teid).flags & B_QOS and dp.dl_bearer(UE).flags & B_QOS
        assert [run(dp, "ul", teid) for _ in range(3)] == ["drop"] * 3
        assert run(dp, "dl", teid) == "redirect"
        assert dp.stats()[("drop_gate_closed", "drop")][0] == 3
        [b] = tables(pin_dir)
        assert (b["uplink"]["packets"], b["downlink"]["packets"]) == (0, 1)

        assert cause(assoc.req(M.modify_qer(3, seid, mbr_kbps=100_000, gate_ul=0, gate_dl=1))) == 1
        assert dp.qos(teid).flags & (QOS_UL_CLOSED | QOS_DL_CLOSED) == QOS_DL_CLOSED
        assert (run(dp, "ul", teid), run(dp, "dl", teid)) == ("redirect", "drop")
        assert dp.stats()[("drop_gate_closed", "drop")][0] == 4
        assert cause(assoc.req(M.delete(4, seid))) == 1
        assert dp.qos(teid) is None


def test_qer_mbr_polices_each_direction_at_its_rate(assoc, pin_dir):
    """A QER with MBR 80 kbit/s uplink and 160 kbit/s downlink: the entry holds one bucket per direction
    at that rate (kbit/s, 1000 bit/s each), --mbr-burst-ms deep; a burst of 1000-octet T-PDUs
    delivers each direction its bucket (10,000 and 20,000 octets) and what its rate adds in the time
    the burst took, no more; the rest is counted drop_mbr and not in the bearer's usage."""
    seid, teid = establish_qer(assoc, 2, mbr_kbps=80, mbr_dl_kbps=160)
    with Dataplane(pin_dir) as dp:
        forwarding_config(dp)
        q = dp.qos(teid)
        for pol, kbps in ((q.ul, 80), (q.dl, 160)):
            depth_octets = kbps * BURST_MS // 8
            assert (pol.kbps, pol.depth, pol.credit) == (kbps, depth_octets * 8 * QOS_MICRO, pol.depth)
        delivered = {}
        for d, kbps in (("ul", 80), ("dl", 160)):
            t0 = time.monotonic()
            n = sum(run(dp, d, teid) == "redirect" for _ in range(60))
            elapsed = time.monotonic() - t0
            bucket = kbps * BURST_MS // 8
            assert bucket <= n * 1000 <= bucket + kbps * 1000 / 8 * elapsed + 1000, (d, n, elapsed)
            delivered[d] = n
        assert dp.stats()[("drop_mbr", "drop")][0] == 120 - delivered["ul"] - delivered["dl"]
        [b] = tables(pin_dir)
        assert (b["uplink"]["packets"], b["downlink"]["packets"]) == (delivered["ul"], delivered["dl"])

        # Update QER: a new MBR is a new bucket (full, at the new rate); the gate alone keeps the state
        assert cause(assoc.req(M.modify_qer(3, seid, mbr_kbps=800))) == 1
        q = dp.qos(teid)
        assert (q.ul.kbps, q.dl.kbps, q.ul.credit) == (800, 800, 800 * BURST_MS // 8 * 8 * QOS_MICRO)
        run(dp, "ul", teid)
        before = dp.qos(teid).ul
        assert cause(assoc.req(M.modify_qer(4, seid, mbr_kbps=800, gate_dl=1))) == 1
        after = dp.qos(teid).ul
        assert (after.credit, after.last_ns) == (before.credit, before.last_ns)


def test_session_without_qer_or_urr_is_not_looked_up(assoc, pin_dir):
    """A session with no QER and no URR gets no qos entry and no B_QOS: its packets never touch the map."""
    r = assoc.req(M.establish(2, 0x10, UE))
    assert cause(r) == 1
    teid = created_teid(r)
    with Dataplane(pin_dir) as dp:
        assert dp.qos(teid) is None
        assert not dp.ul_bearer(teid).flags & B_QOS and not dp.dl_bearer(UE).flags & B_QOS
