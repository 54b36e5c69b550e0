"""`pgwu pfcp` as deployed control planes use it (issue 23): SMF-shaped sessions, CPs that restart,
retransmissions, and sessions no other peer can touch. Scapy-built messages (tests/lib/pfcp_msgs.py,
tests/lib/pfcp_smf_msgs.py) over loopback; what the agent did is read from the bearer tables, from
`pgwu session get/list --json` (the agent's published model), from `pgwu metrics`, and from packets
run through the programs (BPF_PROG_TEST_RUN). Every rejection is checked to leave the tables as
they were.

Each finding of the issue has a test here that fails against the agent before the fix (run them
against another binary with GTPLAB_PGWU=/path/to/pgwu). A CP at another address is a socket bound to
127.0.0.2 or 127.0.0.3 (loopback: nothing leaves the host). Each test gets its own PGW-U (a unique
PIN_DIR) and its own agents, stopped and removed afterwards, also on failure.
"""

from __future__ import annotations

import re
import socket
import struct
import subprocess
import time

import pytest
from scapy.contrib.pfcp import (IE_ApplyAction, IE_ApplicationId, IE_CreatePDR, IE_CreateQER, IE_FAR_Id, IE_FSEID,
                                IE_FTEID, IE_PDI, IE_PDR_Id, IE_Precedence, IE_SourceInterface, IE_UE_IP_Address,
                                IE_GateStatus, IE_MBR, IE_OuterHeaderCreation, IE_QER_Id, IE_QFI,
                                IE_UpdateFAR, IE_UpdateForwardingParameters,
                                IE_UpdateURR, IE_URR_Id, IE_VolumeThreshold, IE_DestinationInterface, PFCP,
                                PFCPSessionModificationRequest)
from scapy.packet import Raw

from tests.lib import pfcp_msgs as M
from tests.lib import pfcp_smf_msgs as S
from gtplab.dut.dataplane import Dataplane
from gtplab.gtpu import packets as P
from tests.lib.pfcp_smf import (PGWU, cause, created_teid, dl_teid, forwarding_config, heartbeat, ies, metric,
                                metrics, offending, pgwu, psc_qfi, rule, session_json, tables, up_seid,
                                usage_reports)

pytestmark = pytest.mark.bpf     # each test has a loaded PGW-U and its agents

UE = "10.45.0.7"
CP_B = "127.0.0.2"          # another CP's address (loopback)
CP_C = "127.0.0.3"


# ---- 1. retransmissions ----------------------------------------------------------------------------

def test_same_sequence_number_with_other_bytes_is_a_new_request(lab):
    """A retransmission is the same bytes: another establishment under a sequence number already used
    (a CP that restarted its numbering) is applied, not answered with the old answer."""
    a, cp = lab.start()
    r1 = cp.req(M.establish(5, 0x10, UE))
    assert cause(r1) == 1
    r2 = cp.req(M.establish(5, 0x11, "10.45.0.8"))
    assert r2.seid == 0x11, "answered with the first request's answer"
    assert cause(r2) == 1 and up_seid(r2) != up_seid(r1)
    assert sorted(b["ue"] for b in tables(lab.pin)) == [UE, "10.45.0.8"]
    # the very same bytes again: a retransmission, answered as before and not applied again
    assert bytes(cp.req(M.establish(5, 0x11, "10.45.0.8"))) == bytes(r2)
    assert len(tables(lab.pin)) == 2


def test_same_request_after_the_window_is_a_new_request(lab):
    """--cp-t1 100 --cp-n1 0: answers serve retransmissions for 100 ms; the same bytes after that are a
    new request (here: applied again, a second session for the UE is refused)."""
    a, cp = lab.start("--cp-t1", "100", "--cp-n1", "0")
    req = M.establish(7, 0x10, UE)
    r = cp.req(req)
    assert cause(r) == 1
    seid = up_seid(r)
    assert cause(cp.req(M.delete(8, seid))) == 1
    time.sleep(0.5)                       # well past the window: only ever longer on a slow machine
    r = cp.req(req)
    assert cause(r) == 1 and up_seid(r) != seid, "answered from the cache after the window"
    assert [b["ue"] for b in tables(lab.pin)] == [UE]
    assert metric(metrics(lab.pin), "pgwu_pfcp_retransmission_cache_total", event="expired") == 1


def test_association_release_drops_the_cps_cached_answers(lab):
    """After a release the CP's earlier requests are not its requests any more: the same
    establishment bytes after a new association are a new establishment."""
    a, cp = lab.start()
    est = M.establish(2, 0x10, UE)
    r = cp.req(est)
    assert cause(r) == 1
    assert cause(cp.req(M.assoc_release(seq=3))) == 1
    assert tables(lab.pin) == []
    assert cause(cp.req(M.assoc_setup(seq=4))) == 1
    r2 = cp.req(est)
    assert cause(r2) == 1 and up_seid(r2) != up_seid(r), "answered from before the release"
    assert [b["ue"] for b in tables(lab.pin)] == [UE]


def test_restarted_cp_gets_its_new_sessions_installed(lab):
    """A CP sends sessions, goes away, comes back on the same address and port with a new Recovery
    Time Stamp and sequence numbers from 1: its old sessions are deleted (--restart-policy delete),
    none of its new requests is answered from the cache, and its new sessions are installed and
    forward traffic, whether a request repeats one from before the restart byte for byte (same CP
    SEID) or not (new CP SEID and SGW TEID)."""
    a, cp = lab.start()
    port = cp.addr[1]
    old = {}
    for i in range(3):
        r = cp.req(M.establish(2 + i, 0x100 + i, f"10.45.0.{10 + i}", sgw_teid=0x500 + i))
        assert cause(r) == 1
        old[i] = (up_seid(r), created_teid(r))
    cp.close()                                            # the CP goes away ...
    cp2 = lab.cp_at(a, port=port)                         # ... and comes back, restarted
    assert cause(cp2.req(M.assoc_setup(seq=1, rts=M.CP_RTS + 100))) == 1
    assert tables(lab.pin) == [], "the restarted CP's old sessions are still installed"
    new = {}
    for i in range(3):
        same = i == 0                                     # session 0: the very same bytes as before
        r = cp2.req(M.establish(2 + i, 0x100 + i if same else 0x200 + i, f"10.45.0.{10 + i}",
                                sgw_teid=0x500 + i if same else 0x900 + i))
        assert cause(r) == 1 and r.seid == (0x100 if same else 0x200 + i)
        assert up_seid(r) != old[i][0], "answered from before the restart"
        new[i] = (up_seid(r), created_teid(r))
    by_ue = {b["ue"]: b for b in tables(lab.pin)}
    assert {ue: b["sgw_teid"] for ue, b in by_ue.items()} == {"10.45.0.10": 0x500, "10.45.0.11": 0x901,
                                                             "10.45.0.12": 0x902}
    with Dataplane(lab.pin) as dp:
        forwarding_config(dp)
        for i in range(3):
            ue = f"10.45.0.{10 + i}"
            assert dp.run_access(bytes(P.gpdu(teid=new[i][1], ue=ue, size=200))).verdict == "redirect"
            down = dp.run_sgi(bytes(P.downlink_ip(ue=ue, size=300)))
            assert down.verdict == "redirect" and dl_teid(down.data) == by_ue[ue]["sgw_teid"]
    for i in range(3):                                    # the CP can use the SEIDs it was given
        assert cause(cp2.req(M.delete(10 + i, new[i][0]))) == 1
    assert tables(lab.pin) == []


# ---- 2. SMF-shaped sessions ---------------------------------------------------------------------

def test_smf_session_three_qers_two_urrs_drop_then_forward(lab):
    """A session as SMFs send it (tests/lib/pfcp_smf_msgs.py): 3 QERs, 2 URRs, SDF filters, the downlink
    FAR DROP with a placeholder outer header. Accepted and stored as the CP gave it (`pgwu session get
    --json`, metrics), the uplink forwards at once; the modification (Update FAR to FORW with the
    RAN's F-TEID, Update URR) makes the downlink forward, marked with the flow QER's QFI; the deletion
    reports both URRs."""
    a, cp = lab.start()
    r = cp.req(S.establish(2, 0x51, UE))
    assert (cause(r), rule(r)) == (1, None)
    seid, teid = up_seid(r), created_teid(r)
    [b] = tables(lab.pin)
    assert (b["teid"], b["ue"], b["downlink"], b["ul_qfi"]) == (teid, UE, None, S.QFI)
    j = session_json(lab.pin, teid)
    assert j["owner"] == "pfcp"
    s = j["pfcp"]
    assert (s["up_seid"], s["cp_seid"], s["node_id"]) == (seid, 0x51, M.CP_NODE)
    assert s["downlink_far"] == {"apply_action": 1, "forwarding": False}
    assert s["pdrs"] == [{"id": S.UL_PDR, "direction": "uplink", "far": S.UL_FAR, "qers": [1, 2], "urrs": [1, 2]},
                         {"id": S.DL_PDR, "direction": "downlink", "far": S.DL_FAR, "qers": [1, 3], "urrs": [1, 2]}]
    assert s["qers"] == [
        {"id": 1, "gate": {"uplink": "open", "downlink": "open"},
         "mbr_kbps": {"uplink": S.AMBR_KBPS[0], "downlink": S.AMBR_KBPS[1]}, "gbr_kbps": None, "qfi": None},
        {"id": 2, "gate": {"uplink": "open", "downlink": "open"},
         "mbr_kbps": {"uplink": S.FLOW_MBR_KBPS[0], "downlink": S.FLOW_MBR_KBPS[1]},
         "gbr_kbps": {"uplink": S.FLOW_GBR_KBPS[0], "downlink": S.FLOW_GBR_KBPS[1]}, "qfi": S.QFI},
        {"id": 3, "gate": {"uplink": "open", "downlink": "open"},
         "mbr_kbps": {"uplink": S.FLOW_MBR_KBPS[0], "downlink": S.FLOW_MBR_KBPS[1]}, "gbr_kbps": None,
         "qfi": S.QFI}]
    u1, u2 = s["urrs"]
    assert (u1["id"], u1["method"], u1["triggers"], u1["measurement_period"]) == (1, ["duration", "volume"],
                                                                                 ["perio"], S.PERIOD_S)
    assert (u2["id"], u2["method"], u2["triggers"]) == (2, ["volume"], ["volth", "volqu"])
    assert (u2["volume_threshold"], u2["volume_quota"]) == ({"total": S.VOL_THRESHOLD}, {"total": S.VOL_QUOTA})
    text = metrics(lab.pin)
    assert (metric(text, "pgwu_pfcp_rules", kind="qer"), metric(text, "pgwu_pfcp_rules", kind="urr")) == (3, 2)
    human = pgwu(lab.pin, "session", "get", "--teid", str(teid)).stdout
    assert "QER 2 gate open/open MBR 100000/150000 kbit/s GBR 1000/2000 kbit/s QFI 9" in human, human

    with Dataplane(lab.pin) as dp:
        forwarding_config(dp)
        ul = bytes(P.gpdu(teid=teid, ue=UE, size=200, ext=[P.pdu_session_container(S.QFI)]))
        assert dp.run_access(ul).verdict == "redirect"
        assert dp.run_sgi(bytes(P.downlink_ip(ue=UE, size=300))).verdict == "drop"     # DROP FAR
        r = cp.req(S.modify_forward(3, seid, sgw=M.SGW_ADDR2, sgw_teid=0x777))
        assert (cause(r), rule(r), r.seid) == (1, None, 0x51)
        for _ in range(2):
            down = dp.run_sgi(bytes(P.downlink_ip(ue=UE, size=300)))
            assert down.verdict == "redirect"
            assert (socket.inet_ntoa(down.data[30:34]), dl_teid(down.data), psc_qfi(down.data)) == \
                (M.SGW_ADDR2, 0x777, S.QFI)
        assert dp.run_access(ul).verdict == "redirect"
    [b] = tables(lab.pin)
    assert (b["sgw"], b["sgw_teid"], b["qfi"], b["uplink"]["packets"], b["downlink"]["packets"]) == \
        (M.SGW_ADDR2, 0x777, S.QFI, 2, 2)
    s = session_json(lab.pin, teid)["pfcp"]
    assert s["downlink_far"] == {"apply_action": 2, "forwarding": True}
    assert s["urrs"][1]["volume_threshold"] == {"total": S.VOL_THRESHOLD2}          # Update URR
    assert s["urrs"][1]["volume_quota"] == {"total": S.VOL_QUOTA}                   # untouched

    r = cp.req(M.delete(4, seid))
    assert cause(r) == 1
    rep = usage_reports(r)
    assert sorted(rep) == [S.URR_PERIODIC, S.URR_VOLUME]
    ul_b, dl_b = b["uplink"]["bytes"], b["downlink"]["bytes"]
    for u in rep.values():
        assert u["volume"] == (ul_b + dl_b, ul_b, dl_b, 4, 2, 2) and u["termr"] == 1
    assert rep[S.URR_PERIODIC]["duration"] is not None and rep[S.URR_VOLUME]["duration"] is None
    assert tables(lab.pin) == []
    assert metric(metrics(lab.pin), "pgwu_pfcp_rules", kind="qer") == 0


MATCH_ALL_SDFS = [
    "permit out ip from any to assigned",
    "permit out ip from any to any",
    "permit in ip from assigned to any",
    "permit out ip from 0.0.0.0/0 to assigned",
    f"permit out ip from any to {UE}",
    f"permit out ip from any to {UE}/32",
    "permit  out  ip  from  any  to  assigned",           # IPFilterRule words are blank-separated
]


@pytest.mark.parametrize("desc", MATCH_ALL_SDFS)
def test_sdf_filters_that_match_everything_are_accepted(lab, desc):
    a, cp = lab.start()
    r = cp.req(S.establish(2, 0x51, UE, ul=S.ul_pdr(UE, sdfs=(desc,)), dl=S.dl_pdr(UE, sdfs=(desc,))))
    assert (cause(r), rule(r)) == (1, None)


NARROW_SDFS = [
    ("a protocol", ["permit out 17 from any to assigned"]),
    ("ports", ["permit out ip from any 80 to assigned"]),
    ("a port range", ["permit out ip from any to assigned 1000-2000"]),
    ("a source prefix", ["permit out ip from 198.51.100.0/24 to assigned"]),
    ("another host", ["permit out ip from any to 10.45.9.9"]),
    ("deny", ["deny out ip from any to assigned"]),
    ("an option", ["permit out ip from any to assigned frag"]),
    ("ipv6 prefix", ["permit out ip from 2001:db8::/32 to assigned"]),
    ("garbage", ["permit out ip from any to"]),
    ("tos traffic class", [S.sdf(S.MATCH_ALL, TTC=1, tos_traffic_class=0x10)]),
    ("a flow label", [S.sdf(S.MATCH_ALL, FL=1, flow_label=7)]),
    ("an sdf filter id only", [S.IE_SDF_Filter(BID=1, sdf_filter_id=5)]),
    ("two narrow ones", ["permit out 6 from any to assigned", "permit out 17 from any to assigned"]),
]


def one_bearer(seq: int, cp_seid: int, ue: str, ul_sdfs=(), dl_sdfs=()):
    """tests/lib/pfcp_msgs.py's one-bearer establishment with SDF Filters in its PDIs."""
    as_ie = [S.sdf(d) if isinstance(d, str) else d for d in ul_sdfs], [S.sdf(d) if isinstance(d, str) else d
                                                                       for d in dl_sdfs]
    dl = IE_CreatePDR(IE_list=[IE_PDR_Id(id=M.DL_PDR), IE_Precedence(precedence=100), IE_PDI(IE_list=[
        IE_SourceInterface(interface=1), IE_UE_IP_Address(V4=1, SD=1, ipv4=ue), *as_ie[1]]), IE_FAR_Id(id=M.DL_FAR)])
    return M.establish(seq, cp_seid, ue, ies=[M.node_id(), IE_FSEID(v4=1, seid=cp_seid, ipv4=M.CP_ADDR),
                                              M.ul_pdr(None, ue, extra=as_ie[0]), dl, M.ul_far(), M.dl_far()])


@pytest.mark.parametrize("where", ["uplink", "downlink"])
@pytest.mark.parametrize("name,sdfs", NARROW_SDFS, ids=[n for n, _ in NARROW_SDFS])
def test_narrower_sdf_filters_are_refused_naming_the_pdr(lab, name, sdfs, where):
    """A bearer carries all of the UE's traffic: a PDR that would match less cannot be done (73,
    Failed Rule ID = that PDR), in a one-bearer session as in an SMF-shaped one; nothing is installed."""
    a, cp = lab.start()
    kw = {"ul_sdfs": sdfs} if where == "uplink" else {"dl_sdfs": sdfs}
    r = cp.req(one_bearer(2, 0x50, UE, **kw))
    assert (cause(r), rule(r)) == (73, (0, M.UL_PDR if where == "uplink" else M.DL_PDR))
    kw = {"ul": S.ul_pdr(UE, sdfs=sdfs)} if where == "uplink" else {"dl": S.dl_pdr(UE, sdfs=sdfs)}
    r = cp.req(S.establish(3, 0x51, UE, **kw))
    assert (cause(r), rule(r)) == (73, (0, S.UL_PDR if where == "uplink" else S.DL_PDR))
    assert tables(lab.pin) == []


def test_sdf_filters_are_alternatives_and_an_application_id_narrows(lab):
    a, cp = lab.start()
    both = ("permit out 17 from any to assigned", S.MATCH_ALL)      # one of them matches all
    r = cp.req(S.establish(2, 0x51, UE, ul=S.ul_pdr(UE, sdfs=both)))
    assert (cause(r), rule(r)) == (1, None)
    r = cp.req(S.establish(3, 0x52, "10.45.0.8", dl=S.dl_pdr("10.45.0.8", extra=[IE_ApplicationId(id="app")])))
    assert (cause(r), rule(r)) == (73, (0, S.DL_PDR))
    assert [b["ue"] for b in tables(lab.pin)] == [UE]


@pytest.mark.parametrize("far", [
    S.dl_far_drop(),                                                  # TEID 0 / 0.0.0.0
    S.dl_far_drop(teid=0, addr="255.255.255.255"),
    S.dl_far_drop(teid=0x42, addr="0.0.0.0", BUFF=1, NOCP=1),
    S.IE_CreateFAR(IE_list=[IE_FAR_Id(id=S.DL_FAR), IE_ApplyAction(DROP=1), S.IE_ForwardingParameters(IE_list=[
        IE_DestinationInterface(interface=0), IE_OuterHeaderCreation(UDPIPV4=1, ipv4="0.0.0.0", port=0)])]),
], ids=["teid0-addr0", "broadcast", "buff-nocp", "udp-ipv4"])
def test_a_far_that_does_not_forward_may_carry_any_outer_header(lab, far):
    """Accepted, kept, not used: forwarding then needs a usable outer header (73 naming the FAR
    without one), and gets it from the Update FAR that turns it on."""
    a, cp = lab.start()
    r = cp.req(S.establish(2, 0x51, UE, dl_far=far))
    assert (cause(r), rule(r)) == (1, None)
    seid = up_seid(r)
    before = tables(lab.pin)
    fwd_only = IE_UpdateFAR(IE_list=[IE_FAR_Id(id=S.DL_FAR), IE_ApplyAction(FORW=1)])
    r = cp.req(PFCP(version=1, S=1, seid=seid, seq=3) / PFCPSessionModificationRequest(IE_list=[fwd_only]))
    assert (cause(r), rule(r)) == (73, (1, S.DL_FAR))
    assert tables(lab.pin) == before
    assert cause(cp.req(S.modify_forward(4, seid, update_urr=False))) == 1
    [b] = tables(lab.pin)
    assert (b["sgw"], b["sgw_teid"]) == (M.SGW_ADDR, 0x100)


def test_update_urr_updates_and_removes_parameters(lab):
    """Update URR (TS 29.244 7.5.4.4): a new threshold is stored, an IE with a null length removes its
    parameter (5.6.3), an unknown URR ID is a rule failure naming it, the session unchanged."""
    a, cp = lab.start()
    r = cp.req(S.establish(2, 0x51, UE))
    seid, teid = up_seid(r), created_teid(r)
    upd = IE_UpdateURR(IE_list=[IE_URR_Id(id=S.URR_VOLUME), IE_VolumeThreshold(TOVOL=1, ULVOL=1, total=7, uplink=3)])
    r = cp.req(PFCP(version=1, S=1, seid=seid, seq=3) / PFCPSessionModificationRequest(IE_list=[upd]))
    assert cause(r) == 1
    assert session_json(lab.pin, teid)["pfcp"]["urrs"][1]["volume_threshold"] == {"total": 7, "uplink": 3}
    clear = IE_UpdateURR(IE_list=[IE_URR_Id(id=S.URR_VOLUME), Raw(struct.pack("!HH", 31, 0))])
    assert cause(cp.req(PFCP(version=1, S=1, seid=seid, seq=4) / PFCPSessionModificationRequest(IE_list=[clear]))) == 1
    before = session_json(lab.pin, teid)
    assert before["pfcp"]["urrs"][1]["volume_threshold"] is None
    unknown = IE_UpdateURR(IE_list=[IE_URR_Id(id=9), IE_VolumeThreshold(TOVOL=1, total=1)])
    r = cp.req(PFCP(version=1, S=1, seid=seid, seq=5) / PFCPSessionModificationRequest(IE_list=[upd, unknown]))
    assert (cause(r), rule(r)) == (73, (3, 9))
    assert session_json(lab.pin, teid) == before                   # the valid Update URR not applied either


def test_qer_and_urr_ids_are_checked(lab):
    """Duplicate QER or URR IDs, a PDR naming a QER or URR no Create QER / URR has, two downlink QERs
    with different QFIs (which would a G-PDU carry?), a URR that measures neither volume nor duration:
    refused naming the rule, nothing installed."""
    a, cp = lab.start()
    other_qfi = IE_CreateQER(IE_list=[IE_QER_Id(id=4), IE_GateStatus(), IE_MBR(ul=1, dl=1), IE_QFI(QFI=5)])
    cases = [
        ("duplicate qer id", S.establish_ies(0x51, UE) + [IE_CreateQER(IE_list=[IE_QER_Id(id=1), IE_GateStatus()])],
         (2, 1)),
        ("duplicate urr id", S.establish_ies(0x52, UE) + [S.urrs()[0]], (3, S.URR_PERIODIC)),
        ("unknown qer", S.establish_ies(0x53, UE, dl=S.dl_pdr(UE, qers=(1, 7))), (0, S.DL_PDR)),
        ("unknown urr", S.establish_ies(0x54, UE, ul=S.ul_pdr(UE, urrs=(1, 8))), (0, S.UL_PDR)),
        ("two downlink qfis", S.establish_ies(0x55, UE, dl=S.dl_pdr(UE, qers=(3, 4))) + [other_qfi], (0, S.DL_PDR)),
        ("the same qfi twice", S.establish_ies(0x56, UE, dl=S.dl_pdr(UE, qers=(2, 3))), None),
        ("a urr measuring events only", S.establish_ies(0x57, UE) + [S.IE_CreateURR(IE_list=[
            IE_URR_Id(id=3), S.IE_MeasurementMethod(EVENT=1), S.IE_ReportingTriggers(periodic_reporting=1)])],
         (3, 3)),
    ]
    for i, (name, ies_, want) in enumerate(cases):
        r = cp.req(S.establish(10 + i, 0, UE, ies=ies_))
        if want is None:
            assert (cause(r), rule(r)) == (1, None), name
            assert cause(cp.req(M.delete(20 + i, up_seid(r)))) == 1
        else:
            assert (cause(r), rule(r)) == (73, want), name
        assert tables(lab.pin) == [], name


# ---- 3. the restart policy ------------------------------------------------------------------------


def test_restart_policy_delete_is_the_default_older_stamps_are_ignored(lab):
    """--restart-policy delete (default): a newer Recovery Time Stamp in a heartbeat means the CP
    restarted: its sessions are deleted, counted per peer; an older one is ignored (counted)."""
    a, cp = lab.start()
    assert cause(cp.req(M.establish(2, 0x10, UE))) == 1
    cp.req(heartbeat(3, M.CP_RTS - 50))                      # older: a stale or confused sender
    assert len(tables(lab.pin)) == 1
    cp.req(heartbeat(4, M.CP_RTS + 50))                      # newer: restarted
    assert tables(lab.pin) == []
    text = metrics(lab.pin)
    peer = {"node_id": M.CP_NODE, "address": "127.0.0.1"}
    assert metric(text, "pgwu_pfcp_peer_restarts_total", **peer) == 1
    assert metric(text, "pgwu_pfcp_peer_restart_sessions_deleted_total", **peer) == 1
    assert metric(text, "pgwu_pfcp_peer_recovery_time_stamp_older_total", **peer) == 1
    assert metric(text, "pgwu_pfcp_restart_policy", policy="delete") == 1


def test_changing_heartbeat_stamps_log_one_line_per_peer(lab):
    """A CP that puts "now" in every heartbeat: each is a restart under the default policy, but the
    log gets one line for the peer, not one per message."""
    a, cp = lab.start()
    for i in range(30):
        cp.req(heartbeat(10 + i, M.CP_RTS + 1 + i))
    out = a.stop()
    lines = [ln for ln in out.splitlines() if "restarted" in ln or "recovery time stamp" in ln]
    assert len(lines) == 1, out
    assert metric(metrics(lab.pin), "pgwu_pfcp_peer_restarts_total", node_id=M.CP_NODE) == 30


def test_restart_policy_on_setup_keeps_sessions_through_changing_heartbeats(lab):
    """--restart-policy on-setup: newer stamps in heartbeats are counted and logged (once), the
    sessions stay; an Association Setup with a newer one is the restart: the sessions go."""
    a, cp = lab.start("--restart-policy", "on-setup")
    assert cause(cp.req(M.establish(2, 0x10, UE))) == 1
    for i in range(20):
        cp.req(heartbeat(10 + i, M.CP_RTS + 1 + i))
    assert len(tables(lab.pin)) == 1
    text = metrics(lab.pin)
    assert metric(text, "pgwu_pfcp_peer_recovery_time_stamp_changes_total", node_id=M.CP_NODE) == 20
    assert metric(text, "pgwu_pfcp_peer_restarts_total", node_id=M.CP_NODE) == 0
    assert cause(cp.req(M.assoc_setup(seq=40, rts=M.CP_RTS + 1000))) == 1
    assert tables(lab.pin) == []
    assert metric(metrics(lab.pin), "pgwu_pfcp_peer_restarts_total", node_id=M.CP_NODE) == 1
    out = a.stop()
    assert len([ln for ln in out.splitlines() if "in a heartbeat" in ln]) == 1, out


def test_restart_policy_keep_deletes_nothing_but_forgets_the_cached_answers(lab):
    a, cp = lab.start("--restart-policy", "keep")
    est = M.establish(2, 0x10, UE)
    r = cp.req(est)
    assert cause(r) == 1
    assert cause(cp.req(M.assoc_setup(seq=3, rts=M.CP_RTS + 10))) == 1
    assert len(tables(lab.pin)) == 1                          # kept
    r2 = cp.req(est)                                          # not a retransmission any more:
    assert (cause(r2), offending(r2)) == (69, 57)             # the CP F-SEID is the kept session's
    assert metric(metrics(lab.pin), "pgwu_pfcp_peer_restarts_total", node_id=M.CP_NODE) == 1


def test_restart_policy_is_checked(pin_dir):
    cp = subprocess.run([PGWU, "-d", pin_dir, "pfcp", "--restart-policy", "sometimes"], capture_output=True,
                        text=True, timeout=30)
    assert cp.returncode == 2 and "--restart-policy" in cp.stderr


# ---- 4. sessions belong to their association -------------------------------------------------------

def test_another_peer_cannot_modify_or_delete_a_session(lab):
    """UP SEIDs are predictable: a session answers only its own CP's address. Another associated CP
    and an unassociated sender get Session context not found (65), the session stays as it was."""
    a, cp = lab.start()
    r = cp.req(M.establish(2, 0x10, UE))
    seid = up_seid(r)
    other = lab.cp_at(a, CP_B)
    assert cause(other.req(M.assoc_setup(seq=1, node="smf-b.example.org"))) == 1
    stranger = lab.cp_at(a, CP_C)
    before = tables(lab.pin)
    for who in (other, stranger):
        r = who.req(M.modify_dl(5, seid, sgw=M.SGW_ADDR2, sgw_teid=0x777))
        assert (r.message_type, cause(r), r.seid) == (53, 65, 0)
        r = who.req(M.delete(6, seid))
        assert (r.message_type, cause(r), r.seid) == (55, 65, 0)
        assert not [x for x in ies(r) if x.ietype == 79], "a usage report went to another peer"
    assert tables(lab.pin) == before
    assert metric(metrics(lab.pin), "pgwu_pfcp_refused_total", reason="not_owner") == 4
    assert cause(cp.req(M.delete(7, seid))) == 1              # its own CP can
    assert tables(lab.pin) == []


def test_node_id_of_another_association_is_refused_from_another_address(lab):
    """An Association Setup claiming an associated CP's Node ID from another address, with a new
    Recovery Time Stamp, is refused (64) and logged; the CP keeps its association and its sessions.
    Neither may that address establish sessions in the Node ID's name or release its association."""
    node = "smf.example.org"
    a, cp = lab.start(node=node)
    for i in range(12):
        assert cause(cp.req(M.establish(2 + i, 0x100 + i, f"10.45.0.{10 + i}", node=node))) == 1
    before = tables(lab.pin)
    thief = lab.cp_at(a, CP_B)
    r = thief.req(M.assoc_setup(seq=1, node=node, rts=M.CP_RTS + 77))
    assert (r.message_type, cause(r)) == (6, 64)
    assert not [x for x in ies(r) if x.ietype == 43]          # no UP Function Features: not associated
    assert cause(thief.req(M.establish(2, 0x900, "10.45.1.1", node=node))) == 72
    assert cause(thief.req(M.assoc_release(seq=3, node=node))) == 72
    assert tables(lab.pin) == before
    assert cause(cp.req(M.establish(40, 0x200, "10.45.1.2", node=node))) == 1   # still its association
    assert metric(metrics(lab.pin), "pgwu_pfcp_refused_total", reason="node_id_taken") == 1
    out = a.stop()
    assert re.search(r"refused an association setup from 127\.0\.0\.2 for Node ID smf\.example\.org: "
                     r"associated from 127\.0\.0\.1", out), out


def test_allow_cp_move_lets_the_association_follow_its_cp(lab):
    """--allow-cp-move: the same Node ID from another address (same Recovery Time Stamp: no restart)
    moves the association there, with its sessions; the old address no longer speaks for them."""
    node = "smf.example.org"
    a, cp = lab.start("--allow-cp-move", node=node)
    seid = up_seid(cp.req(M.establish(2, 0x10, UE, node=node)))
    moved = lab.cp_at(a, CP_B)
    assert cause(moved.req(M.assoc_setup(seq=1, node=node))) == 1
    assert len(tables(lab.pin)) == 1
    assert cause(cp.req(M.delete(3, seid))) == 65
    assert cause(moved.req(M.delete(2, seid))) == 1
    assert metric(metrics(lab.pin), "pgwu_pfcp_cp_moves_total") == 1


# ---- 5. the agent deletes only the bearer halves it installed ---------------------------------------

@pytest.mark.parametrize("replacement", [
    ("0x1234", "10.45.9.9"),          # the same TEID, another UE
    ("0x4321", UE),                   # the same UE, another TEID
    ("0x1234", UE),                   # the very same bearer, put back by the operator
], ids=["same-teid", "same-ue", "same-bearer"])
def test_deletion_leaves_a_bearer_the_operator_put_in_place(lab, replacement):
    a, cp = lab.start()
    r = cp.req(M.establish(2, 0x10, UE, teid=0x1234, sgw_teid=0x99))
    assert cause(r) == 1
    seid = up_seid(r)
    pgwu(lab.pin, "session", "del", "--teid", "0x1234")
    teid, ue = replacement
    pgwu(lab.pin, "session", "add", "--teid", teid, "--ue", ue, "--sgw", M.SGW_ADDR, "--sgw-teid", "0x99")
    operator = tables(lab.pin)
    # a handover must not rewrite the operator's downlink either
    r = cp.req(M.modify_dl(3, seid, sgw=M.SGW_ADDR2, sgw_teid=0x777))
    assert (cause(r), rule(r)) == (73, (1, M.DL_FAR))
    assert tables(lab.pin) == operator
    assert cause(cp.req(M.delete(4, seid))) == 1
    assert tables(lab.pin) == operator
    assert metric(metrics(lab.pin), "pgwu_pfcp_bearer_halves_kept_total") >= 1


# ---- 6. one address check; the odd establishments -----------------------------------------------------

BAD_UE = ["255.255.255.255", "224.0.0.1", "127.0.0.1", "0.1.2.3", "240.0.0.1"]
BAD_SGW = ["255.255.255.255", "224.0.0.5", "127.0.0.1"]


@pytest.mark.parametrize("addr", BAD_UE)
def test_ue_addresses_no_host_has_are_refused_by_cli_bulk_and_pfcp(lab, addr, tmp_path):
    a, cp = lab.start()
    cli = pgwu(lab.pin, "session", "add", "--teid", "5", "--ue", addr, "--sgw", M.SGW_ADDR, "--sgw-teid", "1",
               check=False)
    assert cli.returncode == 2 and f"UE address {addr} is" in cli.stderr
    f = tmp_path / "bearers.txt"
    f.write_text(f"5 {addr} {M.SGW_ADDR} 1\n")
    bulk = pgwu(lab.pin, "session", "load", str(f), check=False)
    assert bulk.returncode != 0 and f"{f}:1: UE address '{addr}' is" in bulk.stderr
    r = cp.req(M.establish(2, 0x10, addr))
    assert (cause(r), rule(r)) == (73, (0, M.DL_PDR))
    r = cp.req(S.establish(3, 0x11, addr))
    assert (cause(r), rule(r)) == (73, (0, S.DL_PDR))
    assert tables(lab.pin) == []


@pytest.mark.parametrize("addr", BAD_SGW)
def test_sgw_addresses_no_host_has_are_refused_by_cli_bulk_and_pfcp(lab, addr, tmp_path):
    a, cp = lab.start()
    cli = pgwu(lab.pin, "session", "add", "--teid", "5", "--ue", "10.45.3.3", "--sgw", addr, "--sgw-teid", "1",
               check=False)
    assert cli.returncode == 2 and f"SGW address {addr} is" in cli.stderr
    f = tmp_path / "bearers.txt"
    f.write_text(f"5 10.45.3.3 {addr} 1\n")
    bulk = pgwu(lab.pin, "session", "load", str(f), check=False)
    assert bulk.returncode != 0 and f"{f}:1: SGW address '{addr}' is" in bulk.stderr
    r = cp.req(M.establish(2, 0x10, UE, sgw=addr))
    assert (cause(r), rule(r)) == (73, (1, M.DL_FAR))
    assert tables(lab.pin) == []
    # by modification: a handover to it, and an SMF's first forwarding to it
    r = cp.req(M.establish(3, 0x11, UE))
    seid = up_seid(r)
    before = tables(lab.pin)
    r = cp.req(M.modify_dl(4, seid, sgw=addr, sgw_teid=0x777))
    assert (cause(r), rule(r)) == (73, (1, M.DL_FAR))
    seid2 = up_seid(cp.req(S.establish(5, 0x12, "10.45.0.8")))
    before = tables(lab.pin)
    r = cp.req(S.modify_forward(6, seid2, sgw=addr))
    assert (cause(r), rule(r)) == (73, (1, S.DL_FAR))
    assert tables(lab.pin) == before


def _two_fteids():
    return S.ul_pdr(UE, teid=0x1234, extra=[IE_FTEID(V4=1, TEID=0x5678, ipv4=M.GTPU_ADDR)])


ODD = [
    # (name, request, cause, offending IE)
    ("non-zero header seid", lambda: S.establish(9, 0x60, UE, header_seid=0x100000001), 64, None),
    ("two cp f-seids", lambda: S.establish(9, 0, UE, ies=S.establish_ies(0x60, UE) + [
        IE_FSEID(v4=1, seid=0x61, ipv4=M.CP_ADDR)]), 69, 57),
    ("two f-teids in a pdi", lambda: S.establish(9, 0x60, UE, ul=_two_fteids()), 69, 21),
    ("a live session's cp f-seid", lambda: S.establish(9, 0x50, UE), 69, 57),
]


@pytest.mark.parametrize("name,req,want_cause,want_off", ODD, ids=[o[0] for o in ODD])
def test_odd_establishments_are_refused(lab, name, req, want_cause, want_off):
    a, cp = lab.start()
    assert cause(cp.req(S.establish(2, 0x50, "10.45.0.99"))) == 1          # the live session
    before = tables(lab.pin)
    r = cp.req(req())
    assert r.message_type == 51
    assert (cause(r), offending(r)) == (want_cause, want_off)
    assert not [x for x in ies(r) if isinstance(x, IE_FSEID)]
    assert tables(lab.pin) == before


def test_the_same_cp_seid_at_another_cp_address_is_another_session(lab):
    """A CP F-SEID is the SEID and the CP's address (TS 29.244 5.6.2)."""
    a, cp = lab.start()
    assert cause(cp.req(M.establish(2, 0x50, UE))) == 1
    other = M.establish(3, 0x50, "10.45.0.8")
    raw = bytearray(bytes(other))
    i = raw.find(struct.pack("!Q", 0x50) + socket.inet_aton(M.CP_ADDR))
    raw[i + 8:i + 12] = socket.inet_aton("127.0.0.9")
    assert cause(cp.req(Raw(bytes(raw)))) == 1
    assert len(tables(lab.pin)) == 2
