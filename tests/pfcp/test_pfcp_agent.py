"""`pgwu pfcp`: the PFCP (TS 29.244) user-plane agent, driven by Scapy-built messages over loopback.

Each test gets its own PGW-U (a unique PIN_DIR, /sys/fs/bpf/gtplab-pfcp-<id>) and its own agent on
127.0.0.1 with a port the kernel picks; both are stopped and removed afterwards, also on failure.
What the agent answers is checked field by field, and what it did is checked in the bearer tables
(`pgwu session list --json`); every rejection is checked to leave the tables exactly as they were.
Messages come from tests/lib/pfcp_msgs.py (the fuzz corpus and the benchmark use the same ones).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from scapy.contrib.pfcp import (PFCP, IE_FTEID, IE_FSEID, IE_NodeId, IE_PDI, IE_PDR_Id, IE_QFI,
                                IE_CreateQER, IE_QER_Id, IE_GateStatus, IE_UpdateQER,
                                PFCPSessionModificationRequest,
                                IE_RecoveryTimeStamp, IE_SourceInterface, IE_CreatePDR,
                                IE_Precedence, IE_FAR_Id, IE_OuterHeaderRemoval, IE_UE_IP_Address)
from scapy.packet import Raw

from tests.lib import pfcp_msgs as M
from gtplab.gtpu import packets as P
from gtplab.dut.dataplane import Dataplane
from tests.lib.pfcp_agent import (PGWU, UE, Agent, cause, created_teid, failed_rule, forwarding_config, ie, ies,
                                    offending, tables, up_seid)
from tests.lib.pgwu import pgwu
from tests.lib import REPO

pytestmark = pytest.mark.bpf     # each test has a loaded PGW-U and its agent

NTP_OFFSET = 2208988800


# ---- node procedures -----------------------------------------------------------------------------

def test_heartbeat_answered_with_recovery_time_stamp(agent):
    before = int(time.time()) + NTP_OFFSET
    r = agent.req(M.heartbeat(seq=77))
    assert r.message_type == 2 and r.seq == 77 and r.S == 0
    rts = ie(r, IE_RecoveryTimeStamp).timestamp
    assert before - 60 <= rts <= before + 1       # the agent started just now, in NTP seconds
    assert agent.req(M.heartbeat(seq=78)).payload.IE_list[0].timestamp == rts   # the same each time


@pytest.mark.parametrize("node", ["127.0.0.1", "smf.example.org"])
def test_association_setup(agent, node):
    r = agent.req(M.assoc_setup(seq=3, node=node))
    assert r.message_type == 6 and r.seq == 3 and cause(r) == 1
    assert ie(r, IE_NodeId).ipv4 == "127.0.0.1"          # ours: the listen address
    assert ie(r, IE_RecoveryTimeStamp) is not None
    upff = [i for i in ies(r) if i.ietype == 43][0]
    assert upff.FTUP == 1                                 # the UP allocates F-TEIDs on CHOOSE
    # sessions from that node are accepted now, from any other still not
    assert cause(agent.req(M.establish(4, 0x10, UE, node=node))) == 1
    other = "10.9.9.9" if node == "smf.example.org" else "smf.example.org"
    r = agent.req(M.establish(5, 0x11, "10.45.0.8", node=other))
    assert cause(r) == 72


def test_session_before_association_is_refused(agent, pin_dir):
    before = tables(pin_dir)
    r = agent.req(M.establish(2, 0x10, UE))
    assert r.message_type == 51 and cause(r) == 72 and r.seid == 0x10
    assert tables(pin_dir) == before == []


def test_association_release_deletes_its_sessions(assoc, pin_dir):
    assert cause(assoc.req(M.establish(2, 0x10, UE))) == 1
    assert len(tables(pin_dir)) == 1
    r = assoc.req(M.assoc_release(seq=3))
    assert r.message_type == 10 and cause(r) == 1
    assert tables(pin_dir) == []
    assert cause(assoc.req(M.establish(4, 0x11, UE))) == 72      # no association any more
    assert cause(assoc.req(M.assoc_release(seq=5))) == 72


def test_cp_restart_drops_its_old_sessions(assoc, pin_dir):
    assert cause(assoc.req(M.establish(2, 0x10, UE))) == 1
    assert cause(assoc.req(M.assoc_setup(seq=3))) == 1            # same recovery time stamp: kept
    assert len(tables(pin_dir)) == 1
    assert cause(assoc.req(M.assoc_setup(seq=4, rts=M.CP_RTS + 5))) == 1   # the CP restarted
    assert tables(pin_dir) == []


# ---- sessions ------------------------------------------------------------------------------------

def test_establish_choose_allocates_teid_in_the_slot_index(assoc, pin_dir):
    # a bearer someone else added holds TEID 2: the agent must never hand it out
    pgwu(pin_dir, "session", "add", "--teid", "2", "--ue", "10.45.1.1", "--sgw", M.SGW_ADDR,
         "--sgw-teid", "9")
    teids = []
    for i in range(3):
        r = assoc.req(M.establish(10 + i, 0x100 + i, f"10.45.0.{10 + i}", sgw_teid=0x500 + i))
        assert r.message_type == 51 and cause(r) == 1 and r.seid == 0x100 + i
        cp = [x for x in ies(r) if x.ietype == 8][0]
        assert cp.IE_list[0].id == M.UL_PDR
        f = cp.IE_list[1]
        assert f.V4 == 1 and f.CH == 0 and f.ipv4 == M.GTPU_ADDR
        teids.append(f.TEID)
    assert teids == [1, 3, 4]          # counted up from 1, skipping the live TEID 2
    by_teid = {b["teid"]: b for b in tables(pin_dir)}
    for i, t in enumerate(teids):
        b = by_teid[t]
        assert (b["ue"], b["sgw"], b["sgw_teid"]) == (f"10.45.0.{10 + i}", M.SGW_ADDR, 0x500 + i)
    with Dataplane(pin_dir) as dp:     # each in its own slot: one array access on the packet path
        for t in teids:
            assert dp._slot("ul", struct.pack("!I", t))[1] is not None


def _raw_bearer(pin_dir: str, teid: int, ue: str) -> tuple:
    """Every byte the packet path reads for this bearer: both hash entries and both slots."""
    with Dataplane(pin_dir) as dp:
        k_ul, k_dl = struct.pack("!I", teid), socket.inet_aton(ue)
        return (dp.maps["ul_bearers"].lookup(k_ul), dp.maps["dl_bearers"].lookup(k_dl),
                dp._slot("ul", k_ul), dp._slot("dl", k_dl))


# where the owner tag (flags bits 16-31, pgwu.h PGWU_B_OWNER_SHIFT) lies in each of _raw_bearer's values
_OWNER_AT = (6, 14, 14, 22)


def _owners(raw: tuple) -> list:
    vals = [raw[0], raw[1], raw[2][1], raw[3][1]]
    return [None if v is None else int.from_bytes(v[o:o + 2], "little") for v, o in zip(vals, _OWNER_AT)]


def _without_owner(raw: tuple) -> tuple:
    vals = [None if v is None else v[:o] + b"\0\0" + v[o + 2:]
            for v, o in zip([raw[0], raw[1], raw[2][1], raw[3][1]], _OWNER_AT)]
    return (vals[0], vals[1], (raw[2][0], vals[2]), (raw[3][0], vals[3]))


def test_session_writes_the_tables_exactly_as_session_add(assoc, pin_dir):
    """Byte for byte, but for the owner tag: the agent's session's (non-zero), or 0 (pgwu session)."""
    r = assoc.req(M.establish(2, 0x10, UE, teid=0x2345, sgw=M.SGW_ADDR, sgw_teid=0x678))
    assert cause(r) == 1
    via_pfcp = _raw_bearer(pin_dir, 0x2345, UE)
    tag = _owners(via_pfcp)[0]
    assert tag and _owners(via_pfcp) == [tag] * 4
    assert cause(assoc.req(M.delete(3, up_seid(r)))) == 1
    assert _raw_bearer(pin_dir, 0x2345, UE)[:2] == (None, None)
    pgwu(pin_dir, "session", "add", "--teid", str(0x2345), "--ue", UE, "--sgw", M.SGW_ADDR,
         "--sgw-teid", str(0x678))
    assert _owners(_raw_bearer(pin_dir, 0x2345, UE)) == [0] * 4
    assert _without_owner(_raw_bearer(pin_dir, 0x2345, UE)) == _without_owner(via_pfcp)
    assert via_pfcp[2][1] is not None and via_pfcp[3][1] is not None     # both slotted
    pgwu(pin_dir, "session", "del", "--teid", str(0x2345))
    assert _raw_bearer(pin_dir, 0x2345, UE) == (None, None, via_pfcp[2][:1] + (None,), via_pfcp[3][:1] + (None,))


def test_establish_given_teid_and_no_created_pdr(assoc, pin_dir):
    r = assoc.req(M.establish(2, 0x10, UE, teid=0x1234, sgw_teid=0x99))
    assert cause(r) == 1 and created_teid(r) is None
    assert [(b["teid"], b["ue"], b["sgw_teid"]) for b in tables(pin_dir)] == [(0x1234, UE, 0x99)]


def test_unknown_optional_ies_are_ignored(assoc, pin_dir):
    vendor = Raw(struct.pack("!HHH", 0x8000 | 7, 4, 18681) + b"\x01\x02")   # a vendor IE
    r = assoc.req(M.establish(2, 0x10, UE, extra=M.unknown_optional_ies() + [vendor]))
    assert cause(r) == 1
    assert len(tables(pin_dir)) == 1


def test_modification_moves_the_downlink_and_deletion_reports_usage(assoc, pin_dir):
    r = assoc.req(M.establish(2, 0x10, UE, urr=True, qer=True))
    assert cause(r) == 1
    seid, teid = up_seid(r), created_teid(r)
    r = assoc.req(M.modify_dl(3, seid, sgw=M.SGW_ADDR2, sgw_teid=0x777))
    assert r.message_type == 53 and cause(r) == 1 and r.seid == 0x10
    [b] = tables(pin_dir)
    assert (b["teid"], b["ue"], b["sgw"], b["sgw_teid"]) == (teid, UE, M.SGW_ADDR2, 0x777)
    assert cause(assoc.req(M.modify_qer(4, seid))) == 1          # MBR 5 Mbit/s, gates open

    # real packets through the programs (BPF_PROG_TEST_RUN): the session forwards both ways
    with Dataplane(pin_dir) as dp:
        forwarding_config(dp)
        for _ in range(3):
            up = dp.run_access(bytes(P.gpdu(teid=teid, ue=UE, size=200)))
            assert up.verdict == "redirect", up
        down = dp.run_sgi(bytes(P.downlink_ip(ue=UE, size=300)))
        assert down.verdict == "redirect", down
        outer_dst = socket.inet_ntoa(down.data[14 + 16:14 + 20])
        assert outer_dst == M.SGW_ADDR2
        assert struct.unpack_from("!I", down.data, 14 + 20 + 8 + 4)[0] == 0x777
    [b] = tables(pin_dir)
    ul_bytes, dl_bytes = b["uplink"]["bytes"], b["downlink"]["bytes"]
    assert b["uplink"]["packets"] == 3 and b["downlink"]["packets"] == 1

    r = assoc.req(M.delete(5, seid))
    assert r.message_type == 55 and cause(r) == 1 and r.seid == 0x10
    [rep] = [x for x in ies(r) if x.ietype == 79]
    sub = {x.ietype: x for x in rep.IE_list}
    assert sub[81].id == M.URR_ID
    assert sub[63].TERMR == 1
    vol = bytes(sub[66])[4:]
    assert vol[0] & 0x07 == 0x07
    tot, ul, dl, totp, ulp, dlp = struct.unpack("!6Q", vol[1:49])
    assert (ul, dl, tot) == (ul_bytes, dl_bytes, ul_bytes + dl_bytes)
    assert (ulp, dlp, totp) == (3, 1, 4)
    assert tables(pin_dir) == []
    assert cause(assoc.req(M.delete(6, seid))) == 65                 # gone


def _psc_qfi(frame: bytes) -> int | None:
    """The QFI of the DL PDU Session Container of a downlink G-PDU (TS 38.415 5.5.2.1), or None
    without one; the frame: Ethernet, IPv4 (20), UDP, GTP-U."""
    g = 14 + 20 + 8
    if not frame[g] & 0x04:                       # E flag
        return None
    assert frame[g + 11] == 0x85, frame[g:g + 16].hex()     # next extension: PDU Session Container
    length, pdu_type, qfi = frame[g + 12], frame[g + 13] >> 4, frame[g + 14] & 0x3F
    assert (length, pdu_type, frame[g + 15]) == (1, 0, 0)   # 4 octets, DL PDU SESSION INFORMATION, last
    return qfi


def _qfi_verdicts(dp, teid: int, ue: str = UE) -> dict[str, object]:
    """What the programs do with this session's packets: uplink with no PDU Session Container, with
    an UL one of each QFI asked, and the downlink marking."""
    out = {"ul no psc": dp.run_access(bytes(P.gpdu(teid=teid, ue=ue, size=200))).verdict}
    for q in (5, 7, 9):
        out[f"ul psc {q}"] = dp.run_access(bytes(P.gpdu(teid=teid, ue=ue, size=200,
                                                        ext=[P.pdu_session_container(q)]))).verdict
    down = dp.run_sgi(bytes(P.downlink_ip(ue=ue, size=300)))
    out["dl"] = (down.verdict, _psc_qfi(down.data) if down.verdict == "redirect" else None)
    return out


def test_session_qfi_checks_uplink_and_marks_downlink(assoc, pin_dir):
    """5G N3 over PFCP (TS 29.244 8.2.89): the uplink PDR's PDI QFI is what uplink G-PDUs must carry
    in an UL PDU Session Container, the QER's QFI is what downlink G-PDUs are marked with. An
    Update QER with a new QFI moves the marking; the uplink check stays."""
    r = assoc.req(M.establish(2, 0x10, UE, qfi=9))
    assert cause(r) == 1
    seid, teid = up_seid(r), created_teid(r)
    [b] = tables(pin_dir)
    assert (b["teid"], b["qfi"], b["ul_qfi"]) == (teid, 9, 9)
    human = pgwu(pin_dir, "session", "get", "--teid", str(teid)).stdout
    assert re.search(rf"^{teid}\s+{re.escape(UE)}\s+{re.escape(M.SGW_ADDR)}\s+256\s+default\s+9\s", human, re.M), human
    with Dataplane(pin_dir) as dp:
        forwarding_config(dp)
        before = dp.stats().get(("drop_qfi_mismatch", "drop"), (0, 0))[0]
        assert _qfi_verdicts(dp, teid) == {"ul no psc": "drop", "ul psc 5": "drop", "ul psc 7": "drop",
                                           "ul psc 9": "redirect", "dl": ("redirect", 9)}
        assert dp.stats()[("drop_qfi_mismatch", "drop")][0] - before == 3

        # Update QER: a new downlink marking, in the hash entry and the slot the packet path reads
        assert cause(assoc.req(M.modify_qer(3, seid, qfi=7))) == 1
        [b] = tables(pin_dir)
        assert (b["qfi"], b["ul_qfi"], b["uplink"]["packets"], b["downlink"]["packets"]) == (7, 9, 1, 1)
        assert _qfi_verdicts(dp, teid) == {"ul no psc": "drop", "ul psc 5": "drop", "ul psc 7": "drop",
                                           "ul psc 9": "redirect", "dl": ("redirect", 7)}
        _, dl_hash, _, (_, dl_slot) = _without_owner(_raw_bearer(pin_dir, teid, UE))
        assert dl_slot is not None and dl_slot[8 + 12:8 + 16] == dl_hash[12:16] == struct.pack("=I", 0x70C)   # QFI 7, B_QFI, B_QOS
        # an Update QER without a QFI keeps it; a handover keeps it too
        assert cause(assoc.req(M.modify_qer(4, seid))) == 1
        assert cause(assoc.req(M.modify_dl(5, seid, sgw=M.SGW_ADDR2, sgw_teid=0x777))) == 1
        [b] = tables(pin_dir)
        assert (b["qfi"], b["ul_qfi"], b["sgw"], b["sgw_teid"]) == (7, 9, M.SGW_ADDR2, 0x777)
        assert _qfi_verdicts(dp, teid)["dl"] == ("redirect", 7)
    assert cause(assoc.req(M.delete(6, seid))) == 1
    assert tables(pin_dir) == []


def test_session_qfi_halves_are_set_apart(assoc, pin_dir):
    """Only the uplink PDI QFI: the uplink check alone. Only a QER QFI: the downlink marking alone
    (uplink G-PDUs with or without a PDU Session Container pass). A QER the downlink PDR does not
    apply marks nothing. A QFI in the downlink PDI (N6 packets carry none) is accepted and unused."""
    ul_only = _base(ul_pdr=M.ul_pdr(None, UE, qfi=5))
    r = assoc.req(M.establish(2, 0x10, UE, ies=ul_only))
    assert cause(r) == 1
    seid, teid = up_seid(r), created_teid(r)
    assert [(b["qfi"], b["ul_qfi"]) for b in tables(pin_dir)] == [(None, 5)]
    with Dataplane(pin_dir) as dp:
        forwarding_config(dp)
        assert _qfi_verdicts(dp, teid) == {"ul no psc": "drop", "ul psc 5": "redirect", "ul psc 7": "drop",
                                           "ul psc 9": "drop", "dl": ("redirect", None)}
    assert cause(assoc.req(M.delete(3, seid))) == 1

    ue2 = "10.45.0.8"
    dl_only = _base(fseid=IE_FSEID(v4=1, seid=0x11, ipv4="127.0.0.1"),
                    ul_pdr=M.ul_pdr(None, ue2, qer=True), dl_pdr=M.dl_pdr(ue2, qer=True)) + [M.create_qer(qfi=9)]
    r = assoc.req(M.establish(4, 0x11, ue2, ies=dl_only))
    assert cause(r) == 1
    teid2 = created_teid(r)
    ue3 = "10.45.0.9"
    dl_pdi_qfi = IE_CreatePDR(IE_list=[
        IE_PDR_Id(id=M.DL_PDR), IE_Precedence(precedence=100),
        IE_PDI(IE_list=[IE_SourceInterface(interface=1), IE_UE_IP_Address(V4=1, SD=1, ipv4=ue3), IE_QFI(QFI=3)]),
        IE_FAR_Id(id=M.DL_FAR)])
    not_applied = _base(fseid=IE_FSEID(v4=1, seid=0x12, ipv4="127.0.0.1"),
                        ul_pdr=M.ul_pdr(None, ue3, qer=True), dl_pdr=dl_pdi_qfi) + [M.create_qer(qfi=9)]
    r = assoc.req(M.establish(5, 0x12, ue3, ies=not_applied))
    assert cause(r) == 1
    teid3 = created_teid(r)
    got = {b["ue"]: (b["qfi"], b["ul_qfi"]) for b in tables(pin_dir)}
    assert got == {ue2: (9, None), ue3: (None, None)}
    with Dataplane(pin_dir) as dp:
        forwarding_config(dp)
        assert _qfi_verdicts(dp, teid2, ue2) == {"ul no psc": "redirect", "ul psc 5": "redirect",
                                                 "ul psc 7": "redirect", "ul psc 9": "redirect",
                                                 "dl": ("redirect", 9)}
        assert _qfi_verdicts(dp, teid3, ue3)["dl"] == ("redirect", None)


def test_session_qfi_reaches_a_downlink_added_later(assoc, pin_dir):
    """5G order: established with the downlink FAR buffering; the QER's QFI (and an Update QER's new
    one, while still buffering) marks the downlink half the modification to forwarding installs."""
    r = assoc.req(M.establish(2, 0x10, UE, sgw=None, qfi=9))
    assert cause(r) == 1
    seid, teid = up_seid(r), created_teid(r)
    assert [(b["qfi"], b["ul_qfi"], b["downlink"]) for b in tables(pin_dir)] == [(None, 9, None)]
    assert cause(assoc.req(M.modify_qer(3, seid, qfi=11))) == 1
    assert [(b["qfi"], b["ul_qfi"]) for b in tables(pin_dir)] == [(None, 9)]
    assert cause(assoc.req(M.modify_dl(4, seid, sgw=M.SGW_ADDR2, sgw_teid=0x321))) == 1
    assert [(b["qfi"], b["ul_qfi"]) for b in tables(pin_dir)] == [(11, 9)]
    with Dataplane(pin_dir) as dp:
        forwarding_config(dp)
        assert _qfi_verdicts(dp, teid)["dl"] == ("redirect", 11)


def test_buffering_downlink_far_then_forwarding(assoc, pin_dir):
    """5G order: established with the downlink FAR buffering (no RAN tunnel yet), then modified to
    forward with the RAN's F-TEID, back to buffering (idle), and deleted with the usage of all of it."""
    r = assoc.req(M.establish(2, 0x10, UE, sgw=None, urr=True))
    assert cause(r) == 1
    seid, teid = up_seid(r), created_teid(r)
    [b] = tables(pin_dir)
    assert (b["teid"], b["ue"], b["sgw"], b["downlink"]) == (teid, UE, None, None)   # uplink half only
    before = tables(pin_dir)
    # the UE is taken although dl_bearers has no entry for it
    r = assoc.req(M.establish(3, 0x11, UE))
    assert (cause(r), _rule(r)) == (73, (0, M.DL_PDR))
    assert tables(pin_dir) == before
    # forwarding without ever having had an Outer Header Creation: conditional IE missing
    from scapy.contrib.pfcp import IE_UpdateFAR, IE_ApplyAction, PFCPSessionModificationRequest
    upd = IE_UpdateFAR(IE_list=[IE_FAR_Id(id=M.DL_FAR), IE_ApplyAction(FORW=1)])
    r = assoc.req(PFCP(version=1, S=1, seid=seid, seq=4) / PFCPSessionModificationRequest(IE_list=[upd]))
    assert (cause(r), offending(r)) == (67, 84)
    assert tables(pin_dir) == before
    with Dataplane(pin_dir) as dp:
        forwarding_config(dp)
        assert dp.run_sgi(bytes(P.downlink_ip(ue=UE, size=300))).verdict == "drop"
        assert dp.run_access(bytes(P.gpdu(teid=teid, ue=UE, size=200))).verdict == "redirect"

        assert cause(assoc.req(M.modify_dl(5, seid, sgw=M.SGW_ADDR2, sgw_teid=0x321))) == 1
        [b] = tables(pin_dir)
        assert (b["sgw"], b["sgw_teid"]) == (M.SGW_ADDR2, 0x321)
        for _ in range(2):
            down = dp.run_sgi(bytes(P.downlink_ip(ue=UE, size=300)))
            assert down.verdict == "redirect"
            assert struct.unpack_from("!I", down.data, 14 + 20 + 8 + 4)[0] == 0x321
        dl_bytes = tables(pin_dir)[0]["downlink"]["bytes"]

        assert cause(assoc.req(M.modify_dl_buffer(6, seid))) == 1
        [b] = tables(pin_dir)
        assert b["downlink"] is None and b["uplink"]["packets"] == 1
        assert dp.run_sgi(bytes(P.downlink_ip(ue=UE, size=300))).verdict == "drop"
        # forwarding again to the SGW it had (no new Outer Header Creation needed)
        r = assoc.req(PFCP(version=1, S=1, seid=seid, seq=7) / PFCPSessionModificationRequest(IE_list=[upd]))
        assert cause(r) == 1
        assert tables(pin_dir)[0]["sgw_teid"] == 0x321
        assert dp.run_sgi(bytes(P.downlink_ip(ue=UE, size=300))).verdict == "redirect"
    r = assoc.req(M.delete(8, seid))
    assert cause(r) == 1
    [rep] = [x for x in ies(r) if x.ietype == 79]
    vol = bytes({x.ietype: x for x in rep.IE_list}[66])[4:]
    tot, ul, dl, totp, ulp, dlp = struct.unpack("!6Q", vol[1:49])
    assert (ulp, dlp) == (1, 3)                  # the downlink packets of both forwarding periods
    assert dl == dl_bytes * 3 // 2
    assert tables(pin_dir) == []


def test_ue_addresses_stay_unique_through_churn(assoc, pin_dir):
    """Sessions without a downlink half still hold their UE: through establishments and deletions in
    any order, a UE in use is refused and a freed one is accepted again."""
    seids, seq = {}, 10
    ues = [f"10.45.{i % 3}.{i}" for i in range(1, 41)]
    for i, ue in enumerate(ues):
        seq += 1
        r = assoc.req(M.establish(seq, 0x100 + i, ue, sgw=None if i % 2 else M.SGW_ADDR))
        assert cause(r) == 1, ue
        seids[ue] = up_seid(r)
    for ue in ues[::3]:
        seq += 1
        assert cause(assoc.req(M.delete(seq, seids.pop(ue)))) == 1
    before = tables(pin_dir)
    for i, ue in enumerate(ues):
        seq += 1
        r = assoc.req(M.establish(seq, 0x200 + i, ue, sgw=None if i % 4 else M.SGW_ADDR))
        assert cause(r) == (73 if ue in seids else 1), ue
        if ue not in seids:
            assert cause(assoc.req(M.delete(seq + 1000, up_seid(r)))) == 1
    assert tables(pin_dir) == before


def test_retransmitted_request_gets_the_same_answer(assoc, pin_dir):
    req = M.establish(9, 0x10, UE)
    first = bytes(assoc.req(req))
    again = bytes(assoc.req(req))          # same sequence number: answered from the cache
    assert again == first and cause(PFCP(first)) == 1
    assert len(tables(pin_dir)) == 1       # applied once
    # a new request (new sequence number) with the same content is a new establishment: refused
    # (its CP F-SEID names a live session: Mandatory IE incorrect, the F-SEID)
    r = assoc.req(M.establish(10, 0x10, UE))
    assert (cause(r), offending(r)) == (69, 57)


def _pdr_without(field: str):
    ies_ = [IE_PDR_Id(id=1), IE_Precedence(precedence=1),
            IE_PDI(IE_list=[IE_SourceInterface(interface=0), IE_FTEID(V4=1, CH=1)]),
            IE_OuterHeaderRemoval(header=0), IE_FAR_Id(id=1)]
    return IE_CreatePDR(IE_list=[i for i in ies_ if type(i).__name__ != field])


def _est(ies_):
    return M.establish(20, 0x10, UE, ies=ies_)


def _base(**repl):
    """The IE list of a valid establishment with some IEs replaced (None: removed)."""
    d = {"node": M.node_id(), "fseid": IE_FSEID(v4=1, seid=0x10, ipv4="127.0.0.1"),
         "ul_pdr": M.ul_pdr(None, UE), "dl_pdr": M.dl_pdr(UE), "ul_far": M.ul_far(), "dl_far": M.dl_far()}
    d.update(repl)
    return [v for v in d.values() if v is not None]


def _empty_qfi():
    return Raw(struct.pack("!HH", 124, 0))                        # QFI (8.2.89) with no octet


def _trunc_fteid():
    f = Raw(struct.pack("!HH", 21, 3) + b"\x01\x00\x00")          # F-TEID: V4 but 3 octets
    return M.ul_pdr(None, UE, extra=()).__class__(IE_list=[
        IE_PDR_Id(id=1), IE_Precedence(precedence=1),
        IE_PDI(IE_list=[IE_SourceInterface(interface=0), f]), IE_OuterHeaderRemoval(header=0),
        IE_FAR_Id(id=1)])


REJECTIONS = [
    # (name, ies, cause, offending IE, failed rule (type, id) or None)
    ("no node id", _base(node=None), 66, 60, None),
    ("no cp f-seid", _base(fseid=None), 66, 57, None),
    ("no create far", _base(ul_far=None, dl_far=None), 66, 3, None),
    ("pdr without pdi", _base(ul_pdr=_pdr_without("IE_PDI")), 66, 2, None),
    ("pdr without pdr id", _base(ul_pdr=_pdr_without("IE_PDR_Id")), 66, 56, None),
    ("pdr without precedence", _base(ul_pdr=_pdr_without("IE_Precedence")), 66, 29, None),
    ("f-teid too short", _base(ul_pdr=_trunc_fteid()), 69, 21, None),
    ("node id too short", _base(node=Raw(struct.pack("!HHB", 60, 1, 0))), 69, 60, None),
    ("ie past the message", _base() + [Raw(struct.pack("!HH", 96, 40) + b"\0" * 4)], 68, 96, None),
    ("no outer header creation", _base(dl_far=M.dl_far(ohc=False)), 67, 84, None),
    ("uplink without f-teid", _base(ul_pdr=IE_CreatePDR(IE_list=[
        IE_PDR_Id(id=1), IE_Precedence(precedence=1), IE_PDI(IE_list=[IE_SourceInterface(interface=0)]),
        IE_OuterHeaderRemoval(header=0), IE_FAR_Id(id=1)])), 67, 21, None),
    ("three pdrs", _base() + [M.dl_pdr("10.45.0.99", pdr_id=3)], 73, None, (0, 3)),
    ("far id unknown", _base(dl_pdr=M.dl_pdr(UE, far_id=9)), 73, None, (0, 2)),
    ("ue address mismatch", _base(dl_pdr=M.dl_pdr("10.45.0.200")), 73, None, (0, 2)),
    ("ipv6-only f-teid", _base(ul_pdr=IE_CreatePDR(IE_list=[
        IE_PDR_Id(id=1), IE_Precedence(precedence=1),
        IE_PDI(IE_list=[IE_SourceInterface(interface=0), IE_FTEID(V6=1, CH=1)]),
        IE_OuterHeaderRemoval(header=0), IE_FAR_Id(id=1)])), 73, None, (0, 1)),
    ("qfi ie empty in pdi", _base(ul_pdr=M.ul_pdr(None, UE, extra=[_empty_qfi()])), 69, 124, None),
    ("qfi ie empty in qer", _base(ul_pdr=M.ul_pdr(None, UE, qer=True), dl_pdr=M.dl_pdr(UE, qer=True)) + [
        IE_CreateQER(IE_list=[IE_QER_Id(id=M.QER_ID), IE_GateStatus(ul=0, dl=0), _empty_qfi()])], 69, 124, None),
    ("two qfis in the uplink pdi", _base(ul_pdr=M.ul_pdr(None, UE, qfi=5, extra=[IE_QFI(QFI=6)])), 73, None, (0, 1)),
    ("ue address chosen by up", _base(dl_pdr=IE_CreatePDR(IE_list=[
        IE_PDR_Id(id=2), IE_Precedence(precedence=1),
        IE_PDI(IE_list=[IE_SourceInterface(interface=1), IE_UE_IP_Address(V4=1, SD=1, ipv4="0.0.0.0")]),
        IE_FAR_Id(id=2)])), 73, None, (0, 2)),
]


def _rule(resp):
    fr = failed_rule(resp)
    if fr is None:
        return None
    return (fr[0] & 0x1f, int.from_bytes(fr[1:], "big"))


@pytest.mark.parametrize("name,ies_,want_cause,want_off,want_rule", REJECTIONS, ids=[r[0] for r in REJECTIONS])
def test_rejected_establishment_changes_nothing(assoc, pin_dir, name, ies_, want_cause, want_off, want_rule):
    pgwu(pin_dir, "session", "add", "--teid", "0x77", "--ue", "10.45.9.9", "--sgw", M.SGW_ADDR,
         "--sgw-teid", "5")
    before = tables(pin_dir)
    r = assoc.req(_est(ies_))
    assert r.message_type == 51
    assert (cause(r), offending(r), _rule(r)) == (want_cause, want_off, want_rule)
    assert ie(r, IE_FSEID) is None                      # no session
    assert tables(pin_dir) == before


def test_conflicts_with_installed_bearers_change_nothing(assoc, pin_dir):
    pgwu(pin_dir, "session", "add", "--teid", "0x1234", "--ue", "10.45.9.9", "--sgw", M.SGW_ADDR,
         "--sgw-teid", "5")
    before = tables(pin_dir)
    r = assoc.req(M.establish(2, 0x10, UE, teid=0x1234))             # TEID taken
    assert (cause(r), _rule(r)) == (73, (0, M.UL_PDR))
    r = assoc.req(M.establish(3, 0x11, "10.45.9.9"))                 # UE taken
    assert (cause(r), _rule(r)) == (73, (0, M.DL_PDR))
    assert tables(pin_dir) == before
    # the CHOOSE attempt whose UE was taken installed nothing under the TEID it picked (1); the
    # counter has moved on, so the next establishment gets 2 and TEID 1 is still free
    r = assoc.req(M.establish(4, 0x12, UE))
    assert cause(r) == 1 and created_teid(r) == 2
    assert sorted(b["teid"] for b in tables(pin_dir)) == [2, 0x1234]


def test_table_full_is_no_resources(pin_dir):
    a = Agent(pin_dir, "--max-sessions", "2")
    try:
        assert cause(a.req(M.assoc_setup(1))) == 1
        for i in range(2):
            assert cause(a.req(M.establish(2 + i, 0x10 + i, f"10.45.0.{i + 1}"))) == 1
        before = tables(pin_dir)
        assert cause(a.req(M.establish(9, 0x30, "10.45.0.50"))) == 75
        assert tables(pin_dir) == before
    finally:
        a.stop()


def test_modification_errors_change_nothing(assoc, pin_dir):
    r = assoc.req(M.establish(2, 0x10, UE))
    seid = up_seid(r)
    before = tables(pin_dir)
    r = assoc.req(M.modify_dl(3, seid + 1))                          # no such session
    assert r.message_type == 53 and cause(r) == 65 and r.seid == 0
    r = assoc.req(M.modify_dl(4, seid, far_id=42))                   # no such FAR
    assert (cause(r), _rule(r)) == (73, (1, 42))
    r = assoc.req(M.modify_qer(5, seid))                             # the session has no QER
    assert (cause(r), _rule(r)) == (73, (2, M.QER_ID))
    assert tables(pin_dir) == before
    # a malformed QFI in an Update QER: Mandatory IE incorrect naming it, the marking unchanged
    r = assoc.req(M.establish(7, 0x11, "10.45.0.8", qfi=9))
    seid2 = up_seid(r)
    before = tables(pin_dir)
    bad = IE_UpdateQER(IE_list=[IE_QER_Id(id=M.QER_ID), _empty_qfi()])
    r = assoc.req(PFCP(version=1, S=1, seid=seid2, seq=8) / PFCPSessionModificationRequest(IE_list=[bad]))
    assert (cause(r), offending(r)) == (69, 124)
    assert tables(pin_dir) == before
    assert cause(assoc.req(M.delete(6, seid + 1))) == 65
    assert tables(pin_dir) == before


# ---- malformed input ----------------------------------------------------------------------------

def test_malformed_datagrams_are_dropped_without_harm(assoc, pin_dir):
    good = bytes(M.establish(2, 0x10, UE))
    assert cause(assoc.req(M.establish(3, 0x11, "10.45.0.50"))) == 1
    before = tables(pin_dir)
    bad = [b"", b"\x20", b"\x21\x32\x00", good[:10],             # shorter than a header
           good[:2] + b"\xff\xff" + good[4:],                    # length past the datagram
           b"\x20" + good[1:],                                   # session message without S flag
           bytes([0x20, 200]) + good[2:8],                       # unknown message type
           ]
    for b in bad:
        assoc.no_answer(Raw(b))
    # truncations of a valid request: answered with a rejection (or dropped), never applied
    for n in range(16, len(good)):
        b = bytearray(good[:n])
        struct.pack_into("!H", b, 2, n - 4)
        assoc.send(Raw(bytes(b)))
        try:
            r = PFCP(assoc.recv_raw(0.5))
            assert cause(r) != 1, n
        except socket.timeout:
            pass
    assert assoc.alive()
    assert tables(pin_dir) == before
    assert assoc.req(M.heartbeat(seq=99)).message_type == 2


def test_other_version_gets_version_not_supported(agent):
    b = bytearray(bytes(M.heartbeat(seq=42)))
    b[0] = (2 << 5) | (b[0] & 0x1f)
    r = agent.req(Raw(bytes(b)))
    assert r.message_type == 11 and r.version == 1 and r.seq == 42


# ---- metrics -------------------------------------------------------------------------------------

def test_metrics_count_sessions_and_messages(assoc, pin_dir):
    r = assoc.req(M.establish(2, 0x10, UE))
    assert cause(r) == 1
    assert cause(assoc.req(M.establish(3, 0x11, UE))) == 73
    assoc.req(M.heartbeat(seq=4))
    assoc.no_answer(Raw(b"\x20\x01"))
    p = subprocess.Popen([PGWU, "-d", pin_dir, "metrics", "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE,
                         text=True)
    try:
        port = re.search(r":(\d+)/metrics", p.stdout.readline()).group(1)
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    finally:
        p.terminate()
        p.wait(10)
    vals = dict(re.findall(r"^(pgwu_pfcp_\S+) (\d+)$", text, re.M))
    assert vals["pgwu_pfcp_sessions"] == "1"
    assert vals["pgwu_pfcp_associations"] == "1"
    assert vals['pgwu_pfcp_messages_received_total{type="session_establishment_request"}'] == "2"
    assert vals['pgwu_pfcp_messages_received_total{type="heartbeat_request"}'] == "1"
    assert vals['pgwu_pfcp_messages_sent_total{type="session_establishment_response",'
                'cause="request_accepted"}'] == "1"
    assert vals['pgwu_pfcp_messages_sent_total{type="session_establishment_response",'
                'cause="rule_creation_modification_failure"}'] == "1"
    assert vals["pgwu_pfcp_dropped_total"] == "1"
    assert "# TYPE pgwu_pfcp_sessions gauge" in text


def test_agent_exit_removes_its_bearers_only(assoc, pin_dir):
    pgwu(pin_dir, "session", "add", "--teid", "0x77", "--ue", "10.45.9.9", "--sgw", M.SGW_ADDR,
         "--sgw-teid", "5")
    assert cause(assoc.req(M.establish(2, 0x10, UE))) == 1
    assert len(tables(pin_dir)) == 2
    out = assoc.stop()
    assert "removed the 1 bearers" in out
    assert [b["teid"] for b in tables(pin_dir)] == [0x77]


# ---- an exchange decoded by Wireshark's PFCP dissector -------------------------------------------

def _captured_seqs(pcap: Path, decode: list[str]) -> set[int]:
    cp = subprocess.run(["tshark", "-r", str(pcap), *decode, "-T", "fields", "-e", "pfcp.seqno"],
                        capture_output=True, text=True, timeout=60)
    return {int(x) for x in cp.stdout.split() if x.isdigit()}


def _until_captured(agent, pcap: Path, decode: list[str], seq: int) -> None:
    """Send heartbeats numbered from seq until one shows up in the capture file (dumpcap writes
    each packet as it comes): the capture is live, or has everything sent before."""
    deadline = time.monotonic() + 20
    while True:
        agent.req(M.heartbeat(seq=seq))
        if pcap.exists() and seq in _captured_seqs(pcap, decode):
            return
        assert time.monotonic() < deadline, "dumpcap captured nothing"
        seq += 1
        time.sleep(0.05)


def test_tshark_decodes_the_exchange_without_malformed_packets(assoc, pin_dir, tmp_path):
    """The exchange captured on loopback (dumpcap, filtered on the agent's port) and decoded by
    Wireshark's PFCP dissector: every message recognised, no malformed packet, no expert error or
    warning, the answers' Causes as the agent meant them. Heartbeats numbered from 1000 mark the
    start and the end of the capture and are left out of the checks."""
    pcap = tmp_path / "pfcp.pcapng"
    decode = ["-d", f"udp.port=={assoc.addr[1]},pfcp"]
    cap = subprocess.Popen(["dumpcap", "-q", "-i", "lo", "-f", f"udp port {assoc.addr[1]}", "-a", "duration:120",
                            "-w", str(pcap)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _until_captured(assoc, pcap, decode, 1000)
        r = assoc.req(M.establish(2, 0x10, UE, urr=True, qer=True))
        seid = up_seid(r)
        assoc.req(M.modify_dl(3, seid))
        assoc.req(M.delete(4, seid))
        assoc.req(M.heartbeat(seq=5))
        assoc.req(M.assoc_release(seq=6))
        assoc.req(M.assoc_setup(seq=7))
        _until_captured(assoc, pcap, decode, 2000)
    finally:
        cap.send_signal(signal.SIGINT)
        try:
            cap.wait(10)
        except subprocess.TimeoutExpired:
            cap.kill()
            cap.wait()
    cp = subprocess.run(["tshark", "-r", str(pcap), *decode, "-T", "fields", "-e", "pfcp.msg_type",
                         "-e", "pfcp.seqno", "-e", "pfcp.cause", "-e", "_ws.expert.severity",
                         "-e", "_ws.malformed"], capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0, cp.stderr
    rows = [line.split("\t") for line in cp.stdout.splitlines()]
    for row in rows:
        assert row[4] == "", f"malformed: {row}"
        assert not set(row[3].split(",")) & {"8388608", "6291456"}, f"expert error/warning: {row}"  # error, warn
    rows = [r for r in rows if int(r[1]) < 1000]
    assert [r[0] for r in rows] == ["50", "51", "52", "53", "54", "55", "1", "2", "9", "10", "5", "6"]
    assert [r[2] for r in rows if r[0] in ("51", "53", "55", "10", "6")] == ["1"] * 5
    cp = subprocess.run(["tshark", "-r", str(pcap), *decode, "-z", "expert,warn", "-q"], capture_output=True,
                        text=True, timeout=60)
    assert "Malformed" not in cp.stdout and "Errors" not in cp.stdout, cp.stdout


# ---- the benchmark, run small: it measures every cell and leaves nothing behind ------------------

def test_pfcp_bench_small_run():
    before = set(os.listdir("/sys/fs/bpf"))
    cp = subprocess.run([sys.executable,
                         str(REPO / "bench" / "pfcp_agent_bench.py"), "--sessions", "300", "--windows", "1,16",
                         "--markdown"], capture_output=True, text=True, timeout=300)
    assert cp.returncode == 0, cp.stderr
    rows = [r for r in cp.stdout.splitlines() if re.match(r"\| \d+ \|", r)]
    assert [r.split("|")[1].strip() for r in rows] == ["1", "16"]
    for r in rows:
        cells = [c.strip().replace(",", "") for c in r.strip("|").split("|")]
        assert all(float(c) > 0 for c in cells), r
    assert not {d for d in os.listdir("/sys/fs/bpf") if d.startswith("gtplab-pfcpbench-")} - before


def test_agent_ends_when_pgwu_is_unloaded(assoc, pin_dir):
    assert cause(assoc.req(M.establish(2, 0x10, UE))) == 1
    pgwu(pin_dir, "unload")
    try:
        assoc.proc.wait(10)
    except subprocess.TimeoutExpired:
        pytest.fail("the agent still runs on maps nobody uses")
    assert assoc.proc.returncode != 0
    assert "are gone" in assoc.proc.stderr.read()


def test_heartbeats_to_the_cp_and_its_restart(pin_dir):
    """--heartbeat 1: the agent asks each associated CP every second; an answer with another Recovery
    Time Stamp than at association means the CP restarted: its sessions are deleted."""
    a = Agent(pin_dir, "--heartbeat", "1")
    try:
        assert cause(a.req(M.assoc_setup(1))) == 1
        assert cause(a.req(M.establish(2, 0x10, UE))) == 1

        def next_request(timeout=3.0) -> PFCP:
            r = PFCP(a.recv_raw(timeout))
            assert r.message_type == 1 and r.S == 0, r.summary()
            assert ie(r, IE_RecoveryTimeStamp) is not None
            return r

        from scapy.contrib.pfcp import PFCPHeartbeatResponse
        hb = next_request()
        a.send(PFCP(version=1, S=0, seq=hb.seq) /
               PFCPHeartbeatResponse(IE_list=[IE_RecoveryTimeStamp(timestamp=M.CP_RTS)]))
        hb2 = next_request()
        assert hb2.seq != hb.seq
        assert len(tables(pin_dir)) == 1                  # same time stamp: nothing happens
        hb3 = next_request()                             # hb2 unanswered: missed, asked again
        a.send(PFCP(version=1, S=0, seq=hb3.seq) /
               PFCPHeartbeatResponse(IE_list=[IE_RecoveryTimeStamp(timestamp=M.CP_RTS + 9)]))
        deadline = time.monotonic() + 5
        while tables(pin_dir):
            assert time.monotonic() < deadline, "the restarted CP's session is still installed"
            time.sleep(0.1)
        assert cause(a.req(M.establish(20, 0x11, UE))) == 1    # the association itself stays
    finally:
        out = a.stop()
    assert "restarted" in out
    p = subprocess.Popen([PGWU, "-d", pin_dir, "metrics", "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE,
                         text=True)
    try:
        port = re.search(r":(\d+)/metrics", p.stdout.readline()).group(1)
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    finally:
        p.terminate()
        p.wait(10)
    assert int(re.search(r"^pgwu_pfcp_heartbeats_missed_total (\d+)$", text, re.M).group(1)) >= 1
    assert int(re.search(r'^pgwu_pfcp_messages_sent_total\{type="heartbeat_request",cause="none"\} (\d+)$',
                         text, re.M).group(1)) >= 3


@pytest.mark.long
def test_one_million_sessions():
    """1,000,000 sessions with CHOOSE F-TEIDs in a 1,048,576-bearer PGW-U, 128 in flight (the
    benchmark's client): every Cause accepted, every TEID in its own slot, then all deleted."""
    sys.path.insert(0, str(REPO / "bench"))
    import pfcp_agent_bench as B
    n = 1_000_000
    d = f"/sys/fs/bpf/gtplab-pfcp-{secrets.token_hex(4)}"
    a = None
    try:
        pgwu(d, "load", "--max-bearers", str(1 << 20), "--local-addr", M.GTPU_ADDR, "--no-fib-cache")
        a = Agent(d)
        a.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        assert cause(a.req(M.assoc_setup(1))) == 1
        tpl, seids = B.Templates(), [0] * n
        res, seq = B.run_window(a.sock, a.addr, tpl, n, 128, a.proc.pid, 10, ("establish",), seids)
        stats = json.loads(pgwu(d, "stats", "--json").stdout)["bearers"]
        assert (stats["uplink"], stats["downlink"]) == (n, n)
        assert len(set(seids)) == n
        with Dataplane(d) as dp:
            for t in (1, 2, n // 2, n - 1, n):      # TEIDs 1..n, each its own slot
                assert dp._slot("ul", struct.pack("!I", t))[1] is not None, t
        B.run_window(a.sock, a.addr, tpl, n, 128, a.proc.pid, seq, ("delete",), seids)
        stats = json.loads(pgwu(d, "stats", "--json").stdout)["bearers"]
        assert (stats["uplink"], stats["downlink"]) == (0, 0)
        print(f"1M sessions: {res['establish'][0]:,.0f} establishments/s")
    finally:
        if a:
            a.stop()
        if os.path.exists(d):
            pgwu(d, "unload", check=False)
        if os.path.isdir(d):
            shutil.rmtree(d, ignore_errors=True)
