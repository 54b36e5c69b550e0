"""PFCP peers are their association (issue 35, item 3): a session answers only to the association that
created it (its Node ID and the address and port its Association Setup Request came from), heartbeats
and restart detection count only from an associated peer, and a Recovery Time Stamp in the future of
the agent's clock is not acted on. docs/pfcp.md "Sessions belong to their CP" has the rules.

Each attack of the issue is a test: another socket on the CP's address (another port, associated
or not, or a second CP with another Node ID there) deletes, modifies (Update FAR to another SGW) or
queries the CP's session; a heartbeat with a newer stamp from an unassociated port of the CP's
address; a stamp far in the future before the CP's real restart. Each asserts the Cause and that the
session is still there and forwards to its SGW (BPF_PROG_TEST_RUN). Run against another build with
GTPLAB_PGWU=/path/to/pgwu (the agent before the fix fails every attack test here).

Loopback only: every socket is on 127.0.0.1 (the CP's address) unless it says otherwise. The harness
(one PGW-U per test, the agents and CPs stopped and closed at the end) is test_pfcp_agent_smf.py's:
tests/lib/pfcp_smf.py and the `lab` fixture of tests/pfcp/conftest.py.
"""

from __future__ import annotations

import re
import time

import pytest

from gtplab.dut.dataplane import Dataplane
from gtplab.gtpu import packets as P
from tests.lib import pfcp_msgs as M
from tests.lib.pfcp_smf import (cause, created_teid, dl_teid, forwarding_config, heartbeat, ies, metric, metrics,
                                offending, session_json, tables, up_seid)

pytestmark = pytest.mark.bpf     # each test has a loaded PGW-U and its agent

UE, UE_B = "10.45.0.7", "10.45.0.8"
SGW_TEID = 0x100                 # M.establish's downlink FAR
NTP_OFFSET = 2208988800
FAR_AHEAD = 5 * 365 * 86400     # a stamp five years ahead of the clock
NODE_B = "smf-b.example.org"
PEER = {"node_id": M.CP_NODE, "address": M.CP_ADDR}


def ntp_now(ahead: int = 0) -> int:
    """NTP seconds (the Recovery Time Stamp's unit, TS 29.244 8.2.65), `ahead` of now, modulo 2^32
    (era 0 ends in 2036)."""
    return (int(time.time()) + NTP_OFFSET + ahead) % 2**32


def establish(cp, seq: int, cp_seid: int, ue: str, node: str = M.CP_NODE) -> tuple[int, int]:
    """A session with a URR (so Query URR has something to report); (UP SEID, its TEID)."""
    r = cp.req(M.establish(seq, cp_seid, ue, urr=True, node=node))
    assert cause(r) == 1, f"establishment of {ue}: cause {cause(r)}"
    return up_seid(r), created_teid(r)


def assert_forwards(pin: str, teid: int, ue: str, sgw_teid: int = SGW_TEID) -> None:
    """The bearer forwards uplink, and downlink into its SGW tunnel (the TEID it was set up with)."""
    with Dataplane(pin) as dp:
        forwarding_config(dp)
        assert dp.run_access(bytes(P.gpdu(teid=teid, ue=ue, size=200))).verdict == "redirect"
        down = dp.run_sgi(bytes(P.downlink_ip(ue=ue, size=300)))
        assert down.verdict == "redirect", f"downlink of {ue}: {down.verdict}"
        assert dl_teid(down.data) == sgw_teid, f"downlink of {ue} goes to TEID {dl_teid(down.data):#x}"


def assert_unknown_to(who, seid: int) -> None:
    """A handover to another SGW, a Query URR and a deletion of the session from `who`: each
    answered as for a session that does not exist (65, header SEID 0, no usage report)."""
    for req, resp_type in ((M.modify_dl(50, seid, sgw=M.SGW_ADDR2, sgw_teid=0x777), 53),
                           (M.query_urr(51, seid), 53), (M.delete(52, seid), 55)):
        r = who.req(req)
        assert (r.message_type, cause(r), r.seid) == (resp_type, 65, 0), req.payload.summary()
        assert not [x for x in ies(r) if x.ietype in (78, 79)], "a usage report went to another peer"


# ---- sessions answer only to their association ----------------------------------------------------

def test_another_port_of_the_cp_address_cannot_modify_query_or_delete_its_session(lab):
    """Attack 1: an unassociated socket on the CP's address (another port) gets 65 for the CP's
    session, and 72 when it establishes or releases in the CP's name; nothing changes."""
    a, cp = lab.start()
    seid, teid = establish(cp, 2, 0x10, UE)
    stranger = lab.cp_at(a)                                   # 127.0.0.1, another port
    assert stranger.addr[0] == cp.addr[0] and stranger.addr[1] != cp.addr[1]
    before = tables(lab.pin)
    assert_unknown_to(stranger, seid)
    assert cause(stranger.req(M.establish(60, 0x20, UE_B, node=M.CP_NODE))) == 72
    assert cause(stranger.req(M.assoc_release(seq=61))) == 72
    assert tables(lab.pin) == before
    assert_forwards(lab.pin, teid, UE)
    assert metric(metrics(lab.pin), "pgwu_pfcp_refused_total", reason="not_owner") == 5
    r = cp.req(M.query_urr(3, seid))                          # its CP still can
    assert cause(r) == 1 and [x for x in ies(r) if x.ietype == 78]
    assert cause(cp.req(M.delete(4, seid))) == 1
    assert tables(lab.pin) == []


def test_a_second_node_id_on_the_cp_address_cannot_touch_its_sessions(lab):
    """Attack 2: a second CP on the same address (another port, another Node ID, associated) gets 65
    for the first CP's session and 72 in its name; each CP has its own sessions, even under the same
    CP F-SEID (the F-SEID names a session within its association)."""
    a, cp = lab.start()
    seid, teid = establish(cp, 2, 0x10, UE)
    other = lab.cp_at(a)
    assert cause(other.req(M.assoc_setup(seq=1, node=NODE_B))) == 1
    before = tables(lab.pin)
    assert_unknown_to(other, seid)
    assert cause(other.req(M.establish(60, 0x20, "10.45.0.9", node=M.CP_NODE))) == 72
    assert cause(other.req(M.assoc_release(seq=61, node=M.CP_NODE))) == 72
    assert tables(lab.pin) == before
    seid_b, teid_b = establish(other, 2, 0x10, UE_B, node=NODE_B)   # the same CP F-SEID as A's
    assert_unknown_to(cp, seid_b)                             # and the other way round
    assert_forwards(lab.pin, teid, UE)
    assert_forwards(lab.pin, teid_b, UE_B)
    r = cp.req(M.modify_dl(3, seid, sgw=M.SGW_ADDR2, sgw_teid=0x777))   # each its own: accepted
    assert (cause(r), r.seid) == (1, 0x10)
    assert_forwards(lab.pin, teid, UE, sgw_teid=0x777)
    assert cause(other.req(M.delete(3, seid_b))) == 1
    assert cause(cp.req(M.delete(4, seid))) == 1
    assert tables(lab.pin) == []


# ---- heartbeats count only from an associated peer -------------------------------------------------

def test_heartbeat_with_a_newer_stamp_from_an_unassociated_port_deletes_nothing(lab):
    """Attack 3: a Heartbeat Request with a newer Recovery Time Stamp from an unassociated port of
    the CP's address is answered (heartbeats are node-level, TS 29.244 7.4.2) and changes nothing.
    The same heartbeat from the CP's own socket is its restart (--restart-policy delete)."""
    a, cp = lab.start()
    seid, teid = establish(cp, 2, 0x10, UE)
    stranger = lab.cp_at(a)
    r = stranger.req(heartbeat(7, M.CP_RTS + 100))
    assert (r.message_type, r.seq) == (2, 7) and [x for x in ies(r) if x.ietype == 96]
    assert len(tables(lab.pin)) == 1
    assert_forwards(lab.pin, teid, UE)
    text = metrics(lab.pin)
    assert metric(text, "pgwu_pfcp_cp_restarts_total") == 0
    assert metric(text, "pgwu_pfcp_peer_recovery_time_stamp_changes_total", **PEER) == 0
    cp.req(heartbeat(3, M.CP_RTS + 100))                      # from the CP: its restart
    assert tables(lab.pin) == []
    assert metric(metrics(lab.pin), "pgwu_pfcp_peer_restarts_total", **PEER) == 1


def test_a_second_cps_heartbeat_restarts_only_that_cp(lab):
    """Two CPs on one address, other ports and Node IDs: the second one's newer stamp deletes its
    own sessions, not the first one's."""
    a, cp = lab.start()
    seid, teid = establish(cp, 2, 0x10, UE)
    other = lab.cp_at(a)
    assert cause(other.req(M.assoc_setup(seq=1, node=NODE_B))) == 1
    establish(other, 2, 0x11, UE_B, node=NODE_B)
    other.req(heartbeat(3, M.CP_RTS + 100))
    assert [b["ue"] for b in tables(lab.pin)] == [UE]
    assert_forwards(lab.pin, teid, UE)
    text = metrics(lab.pin)
    assert metric(text, "pgwu_pfcp_peer_restarts_total", node_id=NODE_B) == 1
    assert metric(text, "pgwu_pfcp_peer_restarts_total", **PEER) == 0


# ---- a Recovery Time Stamp in the future is not acted on -------------------------------------------

@pytest.mark.parametrize("restart_port", ["same", "new"])
def test_far_future_stamp_from_an_unassociated_port_leaves_the_real_restart_detected(lab, restart_port):
    """Attack 4: a stamp five years ahead from an unassociated port of the CP's address changes
    nothing; the CP's real restart afterwards (a newer stamp, from its port or a new one) deletes its
    old sessions, and its new ones are installed: not refused 69 (their CP F-SEIDs) and 73 (their
    UEs) as when the far stamp was in force and the restart looked older."""
    a, cp = lab.start()
    seid, teid = establish(cp, 2, 0x10, UE)
    stranger = lab.cp_at(a)
    r = stranger.req(heartbeat(7, ntp_now(FAR_AHEAD)))
    assert r.message_type == 2
    assert len(tables(lab.pin)) == 1
    assert_forwards(lab.pin, teid, UE)
    establish(cp, 3, 0x11, UE_B)                              # after it, as before it
    port = cp.addr[1]
    cp.close()                                                # the CP goes away and comes back
    cp2 = lab.cp_at(a, port=port if restart_port == "same" else 0)
    assert cause(cp2.req(M.assoc_setup(seq=1, rts=M.CP_RTS + 100))) == 1
    assert tables(lab.pin) == [], "the restarted CP's old sessions are still installed"
    for i, (cp_seid, ue) in enumerate(((0x10, UE), (0x11, UE_B))):   # the same CP SEIDs and UEs
        r = cp2.req(M.establish(5 + i, cp_seid, ue, urr=True))
        assert (cause(r), offending(r)) == (1, None), f"{ue}: the restart went unseen"
        assert up_seid(r) != seid
        assert_forwards(lab.pin, created_teid(r), ue)
    assert metric(metrics(lab.pin), "pgwu_pfcp_peer_restarts_total", **PEER) == 1


def test_far_future_stamp_from_the_cp_itself_is_refused_then_its_restart_counts(lab):
    """The CP's own heartbeat with a stamp far ahead of the agent's clock: answered, not a restart,
    counted and logged; a later real restart (a newer stamp in the past) is still one."""
    a, cp = lab.start()
    seid, teid = establish(cp, 2, 0x10, UE)
    assert cp.req(heartbeat(3, ntp_now(FAR_AHEAD))).message_type == 2
    assert len(tables(lab.pin)) == 1
    assert_forwards(lab.pin, teid, UE)
    text = metrics(lab.pin)
    assert metric(text, "pgwu_pfcp_refused_total", reason="future_recovery_time_stamp") == 1
    assert metric(text, "pgwu_pfcp_peer_restarts_total", **PEER) == 0
    cp.req(heartbeat(4, M.CP_RTS + 100))                      # the real restart
    assert tables(lab.pin) == []
    establish(cp, 5, 0x10, UE)                                # its new sessions go in
    assert metric(metrics(lab.pin), "pgwu_pfcp_peer_restarts_total", **PEER) == 1
    out = a.stop()
    assert re.search(r"CP 127\.0\.0\.1 \(127\.0\.0\.1\) sent a recovery time stamp \d+ s ahead of our "
                     r"clock .*in a heartbeat: ignored", out), out


def test_association_setup_with_a_future_stamp_is_refused(lab):
    """An Association Setup Request whose Recovery Time Stamp is more than 60 s ahead of the agent's
    clock is refused (69, Offending IE Recovery Time Stamp): a new association is not made, an
    existing one is left as it was. Within 60 s (clocks a little apart) it is accepted."""
    a, cp = lab.start()
    seid, teid = establish(cp, 2, 0x10, UE)
    newcomer = lab.cp_at(a)
    r = newcomer.req(M.assoc_setup(seq=1, node=NODE_B, rts=ntp_now(3600)))
    assert (r.message_type, cause(r), offending(r)) == (6, 69, 96)
    assert not [x for x in ies(r) if x.ietype == 43]          # no UP Function Features: not associated
    assert cause(newcomer.req(M.establish(2, 0x11, UE_B, node=NODE_B))) == 72
    r = cp.req(M.assoc_setup(seq=3, rts=ntp_now(3600)))    # the CP's own, again
    assert (cause(r), offending(r)) == (69, 96)
    assert len(tables(lab.pin)) == 1
    assert_forwards(lab.pin, teid, UE)
    r = lab.cp_at(a).req(M.assoc_setup(seq=1, node="smf-c.example.org", rts=ntp_now(30)))
    assert cause(r) == 1
    assert cause(cp.req(M.assoc_setup(seq=4, rts=M.CP_RTS + 5))) == 1   # its restart still counts
    assert tables(lab.pin) == []
    assert metric(metrics(lab.pin), "pgwu_pfcp_refused_total", reason="future_recovery_time_stamp") == 2


# ---- re-association: the new association replaces the old one ----------------------------------------

def test_cp_back_on_a_new_port_replaces_its_association(lab):
    """A CP that restarted on a new port (same Node ID and address, a newer stamp): its old sessions
    are deleted, its new ones installed; its old port no longer speaks for it, not even by
    heartbeat."""
    a, cp = lab.start()
    old = [establish(cp, 2 + i, 0x100 + i, f"10.45.0.{10 + i}") for i in range(3)]
    cp2 = lab.cp_at(a)
    assert cause(cp2.req(M.assoc_setup(seq=1, rts=M.CP_RTS + 100))) == 1
    assert tables(lab.pin) == []
    new = [establish(cp2, 2 + i, 0x100 + i, f"10.45.0.{10 + i}") for i in range(3)]
    assert {s for s, _ in new}.isdisjoint(s for s, _ in old)
    assert cause(cp.req(M.establish(20, 0x200, "10.45.0.20"))) == 72
    assert_unknown_to(cp, new[0][0])
    cp.req(heartbeat(21, M.CP_RTS + 200))                     # the old port: not the CP any more
    assert len(tables(lab.pin)) == 3
    for i, (_, teid) in enumerate(new):
        assert_forwards(lab.pin, teid, f"10.45.0.{10 + i}")
    text = metrics(lab.pin)
    assert metric(text, "pgwu_pfcp_peer_restarts_total", **PEER) == 1
    assert metric(text, "pgwu_pfcp_associations") == 1


def test_a_setup_in_the_cps_name_from_another_port_takes_no_session_along(lab):
    """An Association Setup Request with the CP's Node ID and its very Recovery Time Stamp from
    another port of its address is a new association (the CP's socket is its association): the old
    association's sessions are deleted as at a restart, never handed over to the new port."""
    a, cp = lab.start()
    seid, teid = establish(cp, 2, 0x10, UE)
    taker = lab.cp_at(a)
    assert cause(taker.req(M.assoc_setup(seq=1, rts=M.CP_RTS))) == 1
    assert tables(lab.pin) == []
    assert_unknown_to(taker, seid)
    assert cause(cp.req(M.establish(3, 0x11, UE_B))) == 72


def test_restart_policy_keep_hands_the_sessions_to_the_cps_new_port(lab):
    """--restart-policy keep: a CP back on a new port keeps its sessions (it is to delete them
    itself): they answer to the new port only, and their records name it."""
    a, cp = lab.start("--restart-policy", "keep")
    seid, teid = establish(cp, 2, 0x10, UE)
    cp2 = lab.cp_at(a)
    assert cause(cp2.req(M.assoc_setup(seq=1, rts=M.CP_RTS + 100))) == 1
    assert len(tables(lab.pin)) == 1
    assert session_json(lab.pin, teid)["pfcp"]["cp"] == f"{M.CP_ADDR}:{cp2.addr[1]}"
    assert_unknown_to(cp, seid)
    assert cause(cp2.req(M.delete(2, seid))) == 1
    assert tables(lab.pin) == []


def test_one_association_per_address_and_port(lab):
    """A setup for another Node ID from the address and port of an association ends that association
    (its sessions deleted, as at a release): an address and port speak for one Node ID."""
    a, cp = lab.start()
    establish(cp, 2, 0x10, UE)
    assert cause(cp.req(M.assoc_setup(seq=3, node=NODE_B))) == 1
    assert tables(lab.pin) == []
    assert cause(cp.req(M.establish(4, 0x11, UE_B, node=M.CP_NODE))) == 72
    establish(cp, 5, 0x12, UE_B, node=NODE_B)
    assert metric(metrics(lab.pin), "pgwu_pfcp_associations") == 1
