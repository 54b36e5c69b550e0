"""gtplab as a PFCP control plane (gtplab/pfcp/): messages decoded back by Scapy and by tshark,
templates, the bounded reader, and the procedures against a fake UPF (tests/lib/fake_upf.py) on
127.0.0.x: association, heartbeats both ways, CHOOSE, window, T1/N1, rejections, malformed answers,
wrong sequence numbers, cleanup after a failure, UPF restart."""

from __future__ import annotations

import random
import re
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from scapy.utils import wrpcap

from tests.lib.fake_upf import FakeUpf

from gtplab.pfcp import messages as m  # noqa: E402
from gtplab.pfcp.errors import (PfcpError, PfcpMalformed, PfcpRejected, PfcpSequenceError,  # noqa: E402
                                PfcpTimeout)
from gtplab.pfcp.node import Node, Timers  # noqa: E402
from gtplab.pfcp.sessions import Sessions  # noqa: E402
from tests.lib import REPO

UE0, SGW0, SGWTEID0, TEID0 = 0x0A400001, 0x0AC90010, 0x80000000, 0x00010000
FAST = Timers(t1=0.1, n1=2, heartbeat=0)


def bearers(n, given=False):
    return [m.Bearer(i, UE0 + i, SGW0 + i % 4, SGWTEID0 + i, TEID0 + i if given else None)
            for i in range(n)]


# ---------------------------------------------------------------------------------------------
# Every message built here, named once (Scapy packets), reused by the Scapy and tshark tests

B3 = m.Bearer(3, UE0 + 3, SGW0 + 1, SGWTEID0 + 3, TEID0 + 3)
FULL = m.SessionOptions(n3_addr="10.201.0.1", urr=True, mbr_kbps=(100000, 200000),
                        access_instance="access", core_instance="internet")
MESSAGES = {
    "heartbeat_request": m.heartbeat_request(1, 3_900_000_000),
    "heartbeat_response": m.heartbeat_response(1, 3_900_000_001),
    "association_setup_request_ipv4": m.association_setup_request(2, "10.0.0.1", 3_900_000_000),
    "association_setup_request_fqdn": m.association_setup_request(2, "cp.gtplab.test", 3_900_000_000),
    "association_setup_response": m.association_setup_response(2, "10.0.0.2", 3_900_000_002, ftup=True),
    "association_release_request": m.association_release_request(3, "10.0.0.1"),
    "association_release_response": m.association_release_response(3, "10.0.0.2"),
    "session_establishment_request_given": m.session_establishment_request(
        4, "10.0.0.1", "10.0.0.1", 0x1234, B3, FULL),
    "session_establishment_request_choose": m.session_establishment_request(
        4, "cp.gtplab.test", "10.0.0.1", 0x1234, B3, m.SessionOptions(choose=True)),
    "session_establishment_request_qfi": m.session_establishment_request(
        4, "10.0.0.1", "10.0.0.1", 0x1234, B3, m.SessionOptions(choose=True, qfi=9)),
    "session_establishment_response": m.session_establishment_response(
        4, 0x1234, "10.0.0.2", up_seid=0x99, up_addr="10.0.0.2", created=(0x7000_0001, "10.201.0.1")),
    "session_establishment_response_reject": m.session_establishment_response(
        4, 0x1234, "10.0.0.2", cause=73, offending=21),
    "session_modification_request": m.session_modification_request(5, 0x99, SGW0 + 2, 0x8000_0099),
    "session_modification_response": m.session_modification_response(5, 0x1234),
    "session_deletion_request": m.session_deletion_request(6, 0x99),
    "session_deletion_response": m.session_deletion_response(6, 0x1234, usage=(1000, 2000)),
}
# (tshark field, value as tshark prints it) every message must show
TSHARK = {
    "heartbeat_request": [("pfcp.msg_type", "1"), ("pfcp.seqno", "1"),
                          ("pfcp.recovery_time_stamp", None)],
    "association_setup_request_ipv4": [("pfcp.msg_type", "5"), ("pfcp.node_id_ipv4", "10.0.0.1")],
    "association_setup_request_fqdn": [("pfcp.node_id_fqdn", "cp.gtplab.test")],
    "session_establishment_request_given": [
        ("pfcp.msg_type", "50"), ("pfcp.seqno", "4"),
        ("pfcp.seid", "0x0000000000000000,0x0000000000001234"),     # header (0), then the F-SEID
        ("pfcp.f_teid.teid", "0x00010003"), ("pfcp.f_teid.ipv4_addr", "10.201.0.1"),
        ("pfcp.ue_ip_addr_ipv4", "10.64.0.4,10.64.0.4"), ("pfcp.outer_hdr_creation.teid", "0x80000003"),
        ("pfcp.outer_hdr_creation.ipv4", "10.201.0.17"), ("pfcp.source_interface", "0,1"),
        ("pfcp.dst_interface", "1,0"), ("pfcp.urr_id", None), ("pfcp.qer_id", None),
        ("pfcp.ul_mbr", "100000"), ("pfcp.dl_mbr", "200000")],
    "session_establishment_request_choose": [("pfcp.f_teid_flags.ch", "1"),
                                             ("pfcp.node_id_fqdn", "cp.gtplab.test")],
    "session_establishment_request_qfi": [("pfcp.qfi_value", "0x09,0x09")],     # uplink PDI, QER
    "session_establishment_response": [("pfcp.cause", "1"), ("pfcp.f_teid.teid", "0x70000001")],
    "association_setup_response": [("pfcp.cause", "1"), ("pfcp.up_function_features.ftup", "1")],
    "session_establishment_response_reject": [("pfcp.cause", "73")],
    "session_modification_request": [("pfcp.seid", "0x0000000000000099"),
                                     ("pfcp.outer_hdr_creation.teid", "0x80000099"),
                                     ("pfcp.outer_hdr_creation.ipv4", "10.201.0.18")],
    "session_deletion_request": [("pfcp.msg_type", "54"), ("pfcp.seid", "0x0000000000000099")],
    "session_deletion_response": [("pfcp.volume_measurement.ulvol", "1000"),
                                  ("pfcp.volume_measurement.dlvol", "2000")],
}


@pytest.mark.parametrize("name", sorted(MESSAGES))
def test_message_decodes_back_with_scapy_and_scan(name):
    """Scapy's dissection of the bytes gives back the message, and scan() reads the same values."""
    pkt = MESSAGES[name]
    raw = bytes(pkt)
    back = m.decode(raw)
    assert bytes(back) == raw
    assert back.message_type == pkt.message_type and back.seq == pkt.seq
    assert not back.haslayer("IE_NotImplemented") and not back.haslayer("Raw")
    s = m.scan(raw)
    assert (s.mtype, s.seq) == (pkt.message_type, pkt.seq)
    assert s.seid == (pkt.seid if pkt.S else None)
    for ie in back.payload.IE_list if hasattr(back.payload, "IE_list") else []:
        if ie.ietype == m.IE_CAUSE:
            assert s.cause == ie.cause
        if ie.ietype == m.IE_FSEID and pkt.message_type % 2 == 1 and pkt.message_type > 50:
            assert s.up_seid == ie.seid
        if ie.ietype == m.IE_RECOVERY_TIME_STAMP:
            assert s.recovery_ts == ie.timestamp
        if ie.ietype == m.IE_UP_FUNCTION_FEATURES:
            assert s.up_features == bytes(ie)[4:] and s.up_features[0] & m.FTUP
        if ie.ietype == m.IE_CREATED_PDR:
            assert s.fteids == {ie.IE_list[0].id: (ie.IE_list[1].TEID, ie.IE_list[1].ipv4)}
        if ie.ietype == m.IE_USAGE_REPORT_SDR:
            v = ie.IE_list[-1]
            assert s.usage == {1: (v.total, v.uplink, v.downlink)}


def test_establishment_carries_the_rules_of_the_issue():
    """Uplink PDR: Access, F-TEID, UE source, OHR GTP-U/UDP/IPv4, FAR forward to Core; downlink PDR:
    Core, UE destination, FAR forward to Access with OHC (SGW TEID, SGW address); URR and QER."""
    p = m.decode(bytes(MESSAGES["session_establishment_request_given"]))
    ies = p.payload.IE_list
    pdr = {x.IE_list[0].id: x for x in ies if x.ietype == 1}
    far = {x.IE_list[0].id: x for x in ies if x.ietype == 3}
    pdi_ul = {i.ietype: i for i in pdr[1].IE_list[2].IE_list}
    assert pdi_ul[20].interface == 0 and pdi_ul[21].TEID == TEID0 + 3 and pdi_ul[21].ipv4 == "10.201.0.1"
    assert pdi_ul[93].ipv4 == "10.64.0.4" and pdi_ul[93].SD == 0
    assert {i.ietype: i for i in pdr[1].IE_list}[95].header == 0
    pdi_dl = {i.ietype: i for i in pdr[2].IE_list[2].IE_list}
    assert pdi_dl[20].interface == 1 and pdi_dl[93].SD == 1 and 21 not in pdi_dl
    fp_ul = {i.ietype: i for i in far[1].IE_list[2].IE_list}
    fp_dl = {i.ietype: i for i in far[2].IE_list[2].IE_list}
    assert far[1].IE_list[1].FORW == 1 and fp_ul[42].interface == 1
    assert fp_dl[42].interface == 0 and fp_dl[84].GTPUUDPIPV4 == 1
    assert (fp_dl[84].TEID, fp_dl[84].ipv4) == (SGWTEID0 + 3, "10.201.0.17")
    urr = next(x for x in ies if x.ietype == 6)
    assert {i.ietype: i for i in urr.IE_list}[62].VOLUM == 1
    qer = {i.ietype: i for i in next(x for x in ies if x.ietype == 7).IE_list}
    assert (qer[26].ul, qer[26].dl) == (100000, 200000) and qer[25].ul == 0 and qer[25].dl == 0


def test_establishment_with_a_qfi_puts_it_in_the_qer_and_the_uplink_pdi():
    """5G N3 (TS 29.244 8.2.89): the QFI in QER 1 (the UPF marks downlink G-PDUs with it), which
    both PDRs apply, and in the uplink PDI (uplink G-PDUs must carry it); not in the downlink PDI."""
    p = m.decode(bytes(MESSAGES["session_establishment_request_qfi"]))
    ies = p.payload.IE_list
    pdr = {x.IE_list[0].id: x for x in ies if x.ietype == 1}
    pdi_ul = {i.ietype: i for i in pdr[1].IE_list[2].IE_list}
    pdi_dl = {i.ietype: i for i in pdr[2].IE_list[2].IE_list}
    assert pdi_ul[124].QFI == 9 and 124 not in pdi_dl
    for i in (1, 2):
        assert [x.id for x in pdr[i].IE_list if x.ietype == 109] == [m.QER_ID]
    [qer] = [x for x in ies if x.ietype == 7]
    q = {i.ietype: i for i in qer.IE_list}
    assert q[109].id == m.QER_ID and q[124].QFI == 9 and 26 not in q     # no MBR asked
    assert bytes(q[124]) == b"\x00\x7c\x00\x01\x09"
    # without a QFI: no QFI IE anywhere, and no QER unless asked
    plain = bytes(MESSAGES["session_establishment_request_choose"])
    assert b"\x00\x7c\x00\x01" not in plain and not any(x.ietype == 7 for x in m.decode(plain).payload.IE_list)


@pytest.mark.parametrize("bad", [64, -1, True, "9"])
def test_session_options_refuse_a_qfi_out_of_range(bad):
    with pytest.raises(ValueError, match="a QFI is 0..63"):
        m.SessionOptions(qfi=bad)


def _tshark(pcap: Path, fields: list[str]) -> list[list[str]]:
    out = subprocess.run(["tshark", "-r", str(pcap), "-Y", "pfcp", "-T", "fields", "-E", "separator=|"]
                         + sum((["-e", f] for f in fields), []), capture_output=True, text=True, check=True)
    return [line.split("|") for line in out.stdout.splitlines()]


def test_messages_decode_with_tshark(tmp_path):
    """tshark's PFCP dissector reads every message: no malformed packet, no expert error or
    warning, and the fields hold what was built."""
    assert shutil.which("tshark"), "tshark is needed (setup.sh installs it)"
    names = sorted(MESSAGES)
    pcap = tmp_path / "pfcp.pcap"
    wrpcap(str(pcap), [m.frame(MESSAGES[n]) for n in names])
    verbose = subprocess.run(["tshark", "-r", str(pcap), "-V", "-Y", "pfcp"], capture_output=True,
                             text=True, check=True).stdout
    assert verbose.count("Packet Forwarding Control Protocol") == len(names)
    for bad in ("Malformed", "Expert Info (Error", "Expert Info (Warning", "not dissected"):
        assert bad not in verbose, verbose[max(0, verbose.find(bad) - 2000):verbose.find(bad) + 200]
    rows = _tshark(pcap, ["_ws.expert"])
    assert all(r == [""] for r in rows), rows
    fields = sorted({f for checks in TSHARK.values() for f, _ in checks})
    table = _tshark(pcap, fields)
    for i, n in enumerate(names):
        for fieldname, want in TSHARK.get(n, []):
            got = table[i][fields.index(fieldname)]
            assert got != "", f"{n}: tshark shows no {fieldname}"
            if want is not None:
                assert got == want, f"{n}: {fieldname} = {got!r}, built {want!r}"


# ---------------------------------------------------------------------------------------------
# Templates and the reader


@pytest.mark.parametrize("opts", [FULL, m.SessionOptions(choose=True), m.SessionOptions(urr=True),
                                  m.SessionOptions(n3_addr="10.201.0.1", qfi=63)],
                         ids=["given+urr+qer", "choose", "urr", "given+qfi"])
def test_template_renders_what_scapy_builds(opts):
    """A sample of rendered establishments is byte-identical to Scapy's build of the same values,
    and decodes with the values in the right fields (the UE address in both PDRs)."""
    t = m.establishment_template("10.0.0.1", "10.0.0.1", opts)
    rnd = random.Random(7)
    for _ in range(50):
        v = dict(seq=rnd.randrange(1, 1 << 24), cp_seid=rnd.randrange(1, 1 << 64), ue=rnd.randrange(1 << 32),
                 sgw=rnd.randrange(1 << 32), sgw_teid=rnd.randrange(1, 1 << 32), teid=rnd.randrange(1, 1 << 32))
        b = m.Bearer(0, v["ue"], v["sgw"], v["sgw_teid"], None if opts.choose else v["teid"])
        raw = t.render(**v)
        assert raw == bytes(m.session_establishment_request(v["seq"], "10.0.0.1", "10.0.0.1",
                                                            v["cp_seid"], b, opts))
        p = m.decode(raw)
        assert p.seq == v["seq"] and p.seid == 0
        ues = [ie.ipv4 for pdr in p.payload.IE_list if pdr.ietype == 1
               for ie in pdr.IE_list[2].IE_list if ie.ietype == 93]
        assert ues == [m.ip(v["ue"])] * 2


def test_deletion_and_modification_templates():
    d = m.deletion_template().render(seq=77, up_seid=0xABCDEF0123)
    assert d == bytes(m.session_deletion_request(77, 0xABCDEF0123))
    md = m.modification_template().render(seq=78, up_seid=5, sgw=SGW0, sgw_teid=9)
    assert md == bytes(m.session_modification_request(78, 5, SGW0, 9))


def test_template_refuses_a_field_it_cannot_patch():
    """A field whose value changes the message length (an FQDN node id) cannot be a patch slot."""
    with pytest.raises(TypeError, match="length depends"):
        m.Template(lambda seq, n: m.association_setup_request(seq, "a" * (n % 50 + 1), 1), {"seq": 3, "n": 1})


GOOD_RSP = bytes(MESSAGES["session_establishment_response"])


def _msg(mtype: int, ies: bytes, seid: int = 0x1234, seq: int = 4) -> bytes:
    """A PFCP message around raw IEs (for IEs Scapy would not build wrong)."""
    return struct.pack("!BBHQ", 0x21, mtype, len(ies) + 12, seid) + seq.to_bytes(3, "big") + b"\0" + ies


@pytest.mark.parametrize("raw, match", [
    (GOOD_RSP[:6], "shorter than a PFCP header"),
    (b"\x41" + GOOD_RSP[1:], "PFCP version 2"),
    (GOOD_RSP + b"\0", "header length"),
    # the last IE claims 3 bytes more than the message has (length fixed up in the header)
    (GOOD_RSP[:2] + struct.pack("!H", len(GOOD_RSP) - 7) + GOOD_RSP[4:-3], "has length"),
    # a nested IE overruns its parent (Created PDR) although the message is long enough
    (_msg(51, struct.pack("!HHB", 19, 1, 1)
          + struct.pack("!HH", 8, 10) + struct.pack("!HHH", 56, 2, 1) + struct.pack("!HH", 21, 9)
          + struct.pack("!HHI", 96, 4, 1) * 3), "Created PDR: IE type 21 at byte .* has length 9, 0 bytes left"),
    # a Cause IE of length 0
    (GOOD_RSP[:2] + struct.pack("!H", len(GOOD_RSP) - 4 + 4) + GOOD_RSP[4:] + struct.pack("!HH", 19, 0),
     "Cause IE of 0 bytes"),
])
def test_scan_bounds_every_length(raw, match):
    with pytest.raises(PfcpMalformed, match=match):
        m.scan(raw)


def test_node_id_fqdn_and_bad():
    assert m.node_id_ie("upf.example.org").id_type == 2
    assert m.node_id_ie("192.0.2.1").id_type == 0
    with pytest.raises(ValueError, match="neither"):
        m.node_id_ie("a..b")


# ---------------------------------------------------------------------------------------------
# Against the fake UPF


@pytest.fixture
def upf():
    f = FakeUpf()
    yield f
    f.close()
    assert f.errors == []


@pytest.fixture
def node(upf):
    # T1 0.5 s: the machine is shared, answers can take 100 ms; the timeout tests take 1.5 s
    n = Node(upf.addr, node_id="cp.gtplab.test", port=0, timers=Timers(t1=0.5, n1=2, heartbeat=0))
    n.associate()
    yield n
    n.close()


def test_association_and_heartbeats_both_ways(upf, node):
    assert node.associated and node.upf_ts == upf.recovery_ts
    assert node.upf_node_id[1:] == b"\x03upf\x04fake\x04test"
    req = upf.requests[0][1]
    assert req.message_type == m.ASSOC_SETUP_REQ and req.payload.IE_list[0].id == b"cp.gtplab.test"
    # ours: the UPF's Recovery Time Stamp comes back
    assert node.heartbeat() == upf.recovery_ts
    # the UPF's: answered with ours
    upf.send_heartbeat()
    deadline = time.monotonic() + 5
    while not upf.hb_answers and time.monotonic() < deadline:
        node.poll(0.05)
    assert upf.hb_answers == [node.recovery_ts]
    assert not node.restart_detected
    node.release()
    assert not node.associated and upf.requests[-1][0] == m.ASSOC_RELEASE_REQ


@pytest.mark.timing        # a heartbeat period of 0.1 s: two sent within 5 s (25 x the 0.2 s they take)
def test_background_thread_sends_heartbeats_and_answers(upf):
    n = Node(upf.addr, port=0, timers=Timers(t1=0.1, n1=2, heartbeat=0.1))
    try:
        n.associate()
        n.start(0.02)
        upf.send_heartbeat()
        deadline = time.monotonic() + 5
        while (n.counters["heartbeats_sent"] < 2 or not upf.hb_answers) and time.monotonic() < deadline:
            time.sleep(0.02)
        n.check()
        assert n.counters["heartbeats_sent"] >= 2 and upf.hb_answers == [n.recovery_ts]
    finally:
        n.close()


def test_idle_background_poller_leaves_the_lock_to_requests(upf):
    """The background poller waits for the UPF outside the node's lock: a request from another
    thread (a session delete, the release at the end of a run) gets the lock at once. Held while
    it waited, the unfair RLock went back to the poller each time and such a request waited 5-40 s
    (test_pfcp_smf took 322 s instead of 23)."""
    n = Node(upf.addr, port=0, timers=Timers(t1=0.5, n1=2, heartbeat=0))
    try:
        n.associate()
        n.start(0.2)
        time.sleep(0.1)
        free = 0
        for _ in range(20):
            if n.lock.acquire(blocking=False):
                free += 1
                n.lock.release()
            time.sleep(0.01)
        assert free >= 15, f"the lock was free {free} of 20 times while the poller idled"
        t0 = time.monotonic()
        for _ in range(5):
            n.heartbeat()
        n.check()
        assert n.counters["heartbeats_sent"] == 5
    finally:
        n.close()
    print(f"lock free {free}/20, 5 heartbeats beside the poller in {time.monotonic() - t0:.3f} s")


@pytest.mark.parametrize("given", [False, True], ids=["choose", "given"])
def test_session_per_bearer_and_fteid(upf, node, given):
    """CHOOSE: the TEIDs the UPF allocated are the ones recorded; given: the ones we sent."""
    sm = Sessions(node, m.SessionOptions(choose=not given, n3_addr="10.201.0.1"), window=16)
    got = sm.establish(bearers(40, given))
    assert len(upf.sessions) == 40
    by_cp = {s["cp_seid"]: s for s in upf.sessions.values()}
    for s in got:
        f = by_cp[s.cp_seid]
        assert f["choose"] is (not given)
        assert s.teid == f["teid"] and f["ue"] == m.ip(s.bearer.ue)
        assert (f["sgw"], f["sgw_teid"]) == (m.ip(s.bearer.sgw), s.bearer.sgw_teid)
        assert s.n3_addr == "10.201.0.1"
    if given:
        assert [s.teid for s in got] == [TEID0 + i for i in range(40)]
    else:
        assert sorted(s.teid for s in got) == list(range(0x7000_0001, 0x7000_0001 + 40))
    sm.delete()
    assert upf.sessions == {} and sm.sessions == {}


def test_choose_refused_when_the_upf_does_not_allocate_fteids(upf):
    upf.ftup = False
    n = Node(upf.addr, port=0, timers=Timers(t1=0.5, n1=2, heartbeat=0))
    try:
        n.associate()
        assert n.ftup is False
        with pytest.raises(PfcpError, match="does not allocate F-TEIDs .*FTUP 0"):
            Sessions(n, m.SessionOptions(choose=True)).establish(bearers(2))
        assert not any(t == m.SESS_EST_REQ for t, _ in upf.requests)
    finally:
        n.close()


def test_window_bounds_requests_in_flight_and_t1_retransmits(upf, node):
    """The fake drops the first copy of every establishment: each is sent twice (T1), all
    succeed, and never more than the window is in flight."""
    upf.drop_first = {m.SESS_EST_REQ}
    node.timers.t1 = 1.0          # a second copy's answer must come within T1 even on a loaded box
    sm = Sessions(node, m.SessionOptions(choose=True), window=10)
    sm.establish(bearers(50))
    assert len(upf.sessions) == 50
    copies = [c for (t, _), c in upf.seen.items() if t == m.SESS_EST_REQ]
    assert copies == [2] * 50
    assert node.counters["retransmitted"] == 50
    assert node.max_in_flight == 10


@pytest.mark.timing
def test_no_answer_after_n1_names_the_bearer_and_cleans_up(upf, node, record_property):
    upf.silent_ues = {m.ip(UE0 + 7)}
    sm = Sessions(node, m.SessionOptions(choose=True), window=4)
    t0 = time.monotonic()
    with pytest.raises(PfcpTimeout, match=r"bearer 7 \(UE 10\.64\.0\.8\): no answer .* session establishment "
                                          r"request .* after 3 sends, T1 0.5 s, N1 2") as e:
        sm.establish(bearers(20))
    took = time.monotonic() - t0
    record_property("gave_up_after_s", round(took, 3))
    # 3 sends T1 0.5 s apart: 1.5 s, then the deletions (1.6 s here, 2026-11-28); 6 s is 4 x the 1.5 s
    assert took < 6, f"gave up after {took:.2f} s"
    assert "were deleted" in str(e.value)
    assert [c for (t, _), c in upf.seen.items() if t == m.SESS_EST_REQ and c > 1] == [3]
    assert upf.sessions == {} and sm.sessions == {}


def test_rejection_names_bearer_cause_and_message_and_cleans_up(upf, node):
    upf.reject = {m.ip(UE0 + 5): 73}
    sm = Sessions(node, m.SessionOptions(choose=True), window=4)
    with pytest.raises(PfcpRejected, match=r"bearer 5 \(UE 10\.64\.0\.6\): UPF rejected the session "
                                           r"establishment request: cause 73 \(Rule creation/modification Failure\), "
                                           r"offending IE type 21") as e:
        sm.establish(bearers(30))
    assert e.value.cause == 73 and e.value.bearer.index == 5
    assert "session(s) established before it were deleted" in str(e.value)
    assert upf.sessions == {} and sm.sessions == {}
    assert any(t == m.SESS_DEL_REQ for t, _ in upf.requests)


def test_malformed_response_names_the_bearer(upf, node):
    upf.malformed = {m.ip(UE0 + 3)}
    sm = Sessions(node, m.SessionOptions(n3_addr="10.201.0.1"), window=2)
    with pytest.raises(PfcpMalformed, match=r"bearer 3 \(UE 10\.64\.0\.4\): malformed session establishment "
                                            r"response: IE type 57 .* has length 13"):
        sm.establish(bearers(10, given=True))
    # the other bearers' sessions are gone; bearer 3's answer could not be read (no UP SEID)
    assert [s["ue"] for s in upf.sessions.values()] == ["10.64.0.4"]
    assert sm.sessions == {}


def test_wrong_sequence_number_names_the_bearer_and_cleans_up(upf, node):
    upf.wrong_seq = {m.ip(UE0 + 2)}
    sm = Sessions(node, m.SessionOptions(choose=True), window=1)
    with pytest.raises(PfcpSequenceError, match=r"bearer 2 \(UE 10\.64\.0\.3\): UPF sent session establishment "
                                                r"response with sequence number \d+, which matches no request"):
        sm.establish(bearers(6))
    # bearer 2's session was made on the UPF: its UP SEID came in the stray answer, so it is deleted too
    assert upf.sessions == {} and sm.sessions == {}


def test_modification_moves_the_downlink_and_a_rejected_one_names_the_bearer(upf, node):
    sm = Sessions(node, m.SessionOptions(choose=True), window=4)
    got = sm.establish(bearers(4))
    sm.modify([(1, SGW0 + 9, 0x8000_0900)])
    f = next(s for s in upf.sessions.values() if s["cp_seid"] == got[1].cp_seid)
    assert (f["sgw"], f["sgw_teid"]) == (m.ip(SGW0 + 9), 0x8000_0900)
    assert (got[1].sgw, got[1].sgw_teid) == (SGW0 + 9, 0x8000_0900)
    del upf.sessions[got[2].up_seid]              # the UPF lost it
    with pytest.raises(PfcpRejected, match=r"bearer 2 .* session modification request: cause 65 "
                                           r"\(Session context not found\)"):
        sm.modify([(2, SGW0, 1)])


def test_usage_reports_at_deletion(upf, node):
    upf.usage = {m.ip(UE0): (1500, 3000)}
    sm = Sessions(node, m.SessionOptions(choose=True, urr=True), window=4)
    sm.establish(bearers(3))
    assert sm.delete() == {0: (4500, 1500, 3000), 1: (0, 0, 0), 2: (0, 0, 0)}


@pytest.mark.parametrize("how", ["upf_heartbeat", "our_heartbeat"])
def test_upf_restart_reestablishes_sessions(upf, node, how):
    """A new Recovery Time Stamp (in the UPF's heartbeat request, or in the answer to ours): the
    association is set up again and every session is established again."""
    sm = Sessions(node, m.SessionOptions(choose=True), window=4)
    sm.establish(bearers(12))
    upf.restart()
    assert upf.sessions == {}
    if how == "upf_heartbeat":
        upf.send_heartbeat()
    else:
        node.heartbeat()
    deadline = time.monotonic() + 5
    while sm.reestablished < 12 and time.monotonic() < deadline:
        node.poll(0.05)
    assert node.restarts == 1 and sm.reestablished == 12 and upf.associated == 2
    assert node.upf_ts == upf.recovery_ts
    assert sorted(s["ue"] for s in upf.sessions.values()) == sorted(m.ip(UE0 + i) for i in range(12))
    # the TEIDs in force are the new ones the UPF chose
    assert {s.teid for s in sm.sessions.values()} == {s["teid"] for s in upf.sessions.values()}


def test_unresolvable_upf_is_a_clear_error():
    with pytest.raises(PfcpError, match=r"PFCP: UPF address no-such-upf\.invalid: "):
        Node(("no-such-upf.invalid", 8805), port=0)


def test_unreachable_upf_times_out_clearly():
    f = FakeUpf()
    addr = f.addr
    f.close()                               # nothing listens there any more
    n = Node(addr, port=0, timers=Timers(t1=0.05, n1=1, heartbeat=0))
    try:
        with pytest.raises(PfcpTimeout, match=r"no answer from UPF 127\.0\.0\.\d+:\d+ to association setup "
                                              r"request \(seq 1\) after 2 sends"):
            n.associate()
    finally:
        n.close()


# ---------------------------------------------------------------------------------------------
# Lab configs, provisioning a run, counters, usage


LABS = sorted(p.stem for p in (REPO / "gtplab" / "lab" / "labs").glob("*.yaml"))


@pytest.mark.parametrize("name", LABS)
def test_shipped_lab_configs_are_valid(name):
    from gtplab.lab import config as labconfig
    from gtplab.pfcp import provision as prov
    c = labconfig.load(name)
    assert c.provision in prov.PROVISION and c.counters in prov.COUNTERS
    if c.provision == "pfcp":
        pc = prov.parse_config(c.dut["pfcp"], name)
        # upf: lab takes N3 and N6 from the namespace lab (an external UPF's: gtplab/lab/external.py)
        assert pc.upf and (pc.upf == prov.LAB or (pc.n3 and pc.n6))
        assert (pc.upf == prov.LAB) == (c.dut_mode == "external")


def test_pfcp_lab_configs_exist_for_each_upf_of_the_docs():
    assert {"eupf", "open5gs-upf", "free5gc-upf", "omec-upf", "embedded-pfcp"} <= set(LABS)


@pytest.mark.parametrize("dut, msg", [
    ("{provision: sx}", r"dut.provision 'sx': one of pgwu, pfcp, none"),
    ("{counters: snmp}", r"dut.counters 'snmp'"),
    ("{provision: pfcp}", r"dut.pfcp must be a mapping"),
    ("{provision: pfcp, pfcp: {n3: 10.0.0.1, n6: 10.0.0.2}}", r"dut.pfcp.upf is required"),
    ("{provision: pfcp, pfcp: {upf: 'h:99999', n3: 10.0.0.1, n6: 10.0.0.2}}", r"use HOST\[:PORT\]"),
    ("{provision: pfcp, pfcp: {upf: h, n3: 10.0.0.300, n6: 10.0.0.2}}", r"dut.pfcp.n3: '10.0.0.300' is not an IPv4"),
    ("{provision: pfcp, pfcp: {upf: h, n3: 10.0.0.1, n6: 10.0.0.2, window: 0}}", r"dut.pfcp.window 0"),
    ("{provision: pfcp, pfcp: {upf: h, n3: 10.0.0.1, n6: 10.0.0.2, mbr_kbps: [1]}}", r"mbr_kbps"),
    ("{provision: pfcp, pfcp: {upf: h, n3: 10.0.0.1, n6: 10.0.0.2, qfi: 64}}", r"dut.pfcp.qfi 64 must be a QFI, 0..63"),
    ("{provision: pfcp, pfcp: {upf: h, n3: 10.0.0.1, n6: 10.0.0.2, qfi: x}}", r"dut.pfcp.qfi 'x' must be a QFI"),
    ("{provision: pfcp, pfcp: {upf: h, n3: 10.0.0.1, n6: 10.0.0.2, node_id: 'a..b'}}", r"node_id"),
    ("{provision: pfcp, pfcp: {upf: h, n3: 10.0.0.1, n6: 10.0.0.2, color: red}}", r"unknown key\(s\) in dut.pfcp: color"),
    ("{pfcp: {upf: h, n3: 10.0.0.1, n6: 10.0.0.2}}", r"dut.pfcp is given but dut.provision is 'pgwu'"),
    ("{counters: prometheus}", r"dut.prometheus must be"),
    ("{counters: prometheus, prometheus: {url: x, metrics: {fwd: a}}}", r"an http\(s\) URL"),
    ("{counters: prometheus, prometheus: {url: 'http://h/metrics', metrics: {drop: a}}}", r"fwd required"),
    ("{counters: prometheus, prometheus: {url: 'http://h/metrics', metrics: {fwd: 'a{b}'}}}", r"use name or"),
])
def test_lab_config_dut_access_errors(tmp_path, dut, msg):
    from gtplab.lab import config as labconfig
    from gtplab.errors import UserError
    f = tmp_path / "lab.yaml"
    f.write_text(f"dut: {dut}\n")
    with pytest.raises(UserError, match=msg):
        labconfig.load(str(f))


def test_provisioner_installs_the_bearer_file_and_the_profile_uses_what_the_upf_chose(upf, tmp_path):
    """A run's bearer file in, a session per bearer on the UPF, the bearer file out with the UPF's
    TEIDs, which the uplink profile then sends; close() deletes every session and releases."""
    from gtplab.gtpu import bearers as gb
    from gtplab.pfcp import provision as prov
    tun = ["--flows", "16", "--sgws", "4"]
    src = tmp_path / "bearers.txt"
    gb.write_bearer_file("uplink", tun, str(src))
    cfg = prov.parse_config({"upf": f"{upf.addr[0]}:{upf.addr[1]}", "n3": "10.201.0.1", "n6": "10.202.0.1",
                             "choose": True, "urr": True, "t1": 0.5, "listen_port": 0}, "test")
    p = prov.Provisioner(cfg)
    try:
        out = tmp_path / "provisioned.txt"
        got = p.install(str(src), str(out))
        assert len(got) == 16 and len(upf.sessions) == 16
        chosen = {s["ue"]: s["teid"] for s in upf.sessions.values()}
        a = gb.load_common().parse("uplink", tun + ["--teid-file", str(out)])
        for i in range(16):
            teid, ue, sgw, sgw_teid = gb.load_common().bearer(a, i)
            assert teid == chosen[m.ip(ue)] and teid != TEID0 + i
        # installing again replaces the set (the old sessions deleted first, their usage kept)
        p.install(str(src), str(out))
        assert len(upf.sessions) == 16 and len(p.usage) == 16
    finally:
        usage = p.close()
    assert upf.sessions == {} and upf.requests[-1][0] == m.ASSOC_RELEASE_REQ
    assert set(usage) == set(range(16))


def test_runner_sends_uplink_to_n3_with_the_upf_teids():
    from types import SimpleNamespace
    from gtplab.pfcp import provision as prov
    from gtplab.measure.plan import CaseParams
    from gtplab.measure.runner import Runner
    cfg = prov.parse_config({"upf": "h", "n3": "10.9.9.9", "n6": "10.9.9.8", "choose": True}, "t")
    r = SimpleNamespace(dut=SimpleNamespace(cfg=cfg, teid_file="/tmp/x.txt"))
    up = Runner.provisioned_tunables(r, CaseParams("uplink", 128), {"size": 128})
    assert up == {"size": 128, "pgw_addr": "10.9.9.9", "teid_file": "/tmp/x.txt"}
    down = Runner.provisioned_tunables(r, CaseParams("downlink", 128), {"size": 128})
    assert down == {"size": 128}
    cfg.choose = False
    assert "teid_file" not in Runner.provisioned_tunables(r, CaseParams("uplink", 128), {"size": 128})


def test_prometheus_counters_follow_the_mapping(tmp_path):
    from types import SimpleNamespace
    from gtplab.measure import conservation
    from gtplab.dut.prometheus import PrometheusDut
    from tests.lib.http_server import serving
    text = ['upf_xdp_redirect 100', 'upf_xdp_tx 5', 'upf_xdp_drop 7', 'upf_xdp_aborted 1',
            'upf_rx{iface="n3"} 120', 'upf_rx{iface="n6"} 999']

    with serving(get=lambda path: (200, ("\n".join(text) + "\n").encode())) as url:
        cfg = SimpleNamespace(path="t", dut={"prometheus": {
            "url": f"{url}/metrics",
            "metrics": {"fwd": ["upf_xdp_redirect", "upf_xdp_tx"], "drop": ["upf_xdp_drop", "upf_xdp_aborted"],
                        "rx": 'upf_rx{iface="n3"}'}}})
        d = PrometheusDut(cfg)
        before = d.counters()
        assert before == {("upf_fwd", "tx"): 105, ("upf", "drop"): 8, ("upf_unaccounted", "other"): 7}
        text[0], text[2], text[4] = 'upf_xdp_redirect 190', 'upf_xdp_drop 17', 'upf_rx{iface="n3"} 220'
        dd = conservation.DutDelta.from_counters(before, d.counters())
        assert (dd.fwd_packets, dd.drop_packets, dd.rx_packets) == (90, 10, 100)


def test_no_counters_means_generator_side_only():
    from gtplab.measure import conservation
    c = conservation.generator_only(1000, 1000)
    assert c.ok and c.scope.startswith("generator only") and c.as_dict()["scope"] == c.scope
    assert not conservation.generator_only(1000, 990).ok     # a loss nothing located (tests/measure/test_kernelpath.py)
    assert conservation.check(10, 10, conservation.DutDelta(10, 10)).scope == "generator and DUT"


def test_usage_reports_compared_with_the_generator():
    from gtplab.pfcp.provision import packets_per_bearer, usage_differences
    assert packets_per_bearer(10, 4) == [3, 3, 2, 2] and sum(packets_per_bearer(12345, 7)) == 12345
    d = usage_differences({0: (300, 100, 200), 1: (10, 10, 0), 2: None},
                          {0: (100, 250), 1: (12, 0), 2: (5, 5)}, received=(110, 240))
    rows = {r["bearer"]: r for r in d["bearers"]}
    assert rows[0]["uplink_difference"] == 0 and rows[0]["downlink_difference"] == -50
    assert rows[1]["uplink_difference"] == -2 and rows[2]["uplink_difference"] is None
    assert d["bearers_without_report"] == [2]
    assert d["total"]["uplink_difference_sent"] == 110 - 117 and d["total"]["downlink_difference_received"] == 200 - 240


# ---------------------------------------------------------------------------------------------
# The sweep on the embedded lab, provisioned over PFCP by the PGW-U's own agent


@pytest.mark.lab
@pytest.mark.parametrize("variant", ["choose-urr", "given-nocounters"])
def test_sweep_provisions_the_embedded_lab_over_pfcp(tmp_path, variant):
    """`gtplab sweep` with dut.provision pfcp: sessions through `pgwu pfcp` (this fails, with the
    reason, when the pgwu binary has no agent), traffic with the TEIDs the agent chose, packet
    conservation, the usage reports equal to the generator's octets; without DUT counters the
    results say conservation was generator-side only."""
    import json
    import yaml
    from gtplab.cli import main as gtplab_main
    cfg = yaml.safe_load((REPO / "gtplab/lab/labs/embedded-pfcp.yaml").read_text())
    if variant == "choose-urr":
        cfg["dut"]["pfcp"].update(choose=True, urr=True)
    else:
        cfg["dut"]["counters"] = "none"
    lab_file = tmp_path / "lab.yaml"
    lab_file.write_text(yaml.safe_dump(cfg))
    out = tmp_path / "results"
    rc = gtplab_main(["sweep", "--lab-config", str(lab_file), "--sizes", "128", "--directions", "uplink,downlink",
                      "--rate-mode", "fixed", "--rate", "20000", "--duration", "0.5", "--flows", "64",
                      "--no-scale", "--out", str(out)])
    assert rc == 0
    run = json.loads((out / "run.json").read_text())
    cases = [json.loads(x) for x in (out / "cases.jsonl").read_text().splitlines()]
    assert run["dut_provision"] == "pfcp" and len(cases) == 2
    provisioned = (out / run["pfcp_bearer_file"]).read_text().splitlines()
    teids = [int(x.split()[0], 16) for x in provisioned if x and not x.startswith("#")]
    assert len(teids) == 64
    for c in cases:
        # every packet the PGW-U saw matched a session (nothing dropped by reason: an unknown TEID
        # would be); a loaded machine may lose some in the DUT's receive ring, accounted for
        assert c["conservation_ok"] and c["rx_packets"] > 0, c["case_id"]
        if variant == "choose-urr":
            assert c["dut"]["drops_by_reason"] == {}, c["dut"]
    up = next(c for c in cases if c["direction"] == "uplink")
    if variant == "choose-urr":
        assert "teid_file" in up["tunables"] and teids != [0x10000 + i for i in range(64)]
        tot = run["pfcp_usage"][0]["total"]
        # the UPF counted the inner packets it received: what was sent, less the ring losses
        ip_len = {"uplink": 128 - 4 - 14 - 36, "downlink": 128 - 4 - 14}
        for c in cases:
            d = c["direction"]
            lost = sum(t["loss"]["dut_ingress_ring"] or 0 for t in c["trials"])
            assert tot[f"upf_{d}"] == tot[f"gen_sent_{d}"] - lost * ip_len[d] > 0, (d, tot, lost)
    else:
        assert teids == [0x10000 + i for i in range(64)] and "teid_file" not in up["tunables"]
        assert run["dut_counters"] == "none" and any("generator's side only" in n for n in run["notes"])
        for c in cases:
            assert all(t["conservation"]["scope"].startswith("generator only") for t in c["trials"])
            assert any("generator's side only" in n for n in c["notes"])


def test_embedded_agent_missing_is_a_clear_error(tmp_path, monkeypatch):
    """A pgwu without the PFCP agent: one clear error naming the binary and what is missing."""
    from gtplab.errors import UserError
    from gtplab.dut import pfcp as pfcp_dut
    fake = tmp_path / "pgwu"
    fake.write_text("#!/bin/sh\necho 'pgwu: unknown command' >&2\nexit 2\n")
    fake.chmod(0o755)
    monkeypatch.setenv("GTPLAB_PGWU", str(fake))
    assert not pfcp_dut.agent_supported(fake)
    with pytest.raises(UserError, match=r"has no `pfcp --listen` command"):
        pfcp_dut.EmbeddedAgent("/sys/fs/bpf/none")


# ---------------------------------------------------------------------------------------------
# Long tier: a million sessions through the PGW-U's agent


@pytest.mark.long
@pytest.mark.bpf
def test_one_million_sessions_through_the_agent():
    """1,000,000 establishments (CHOOSE) and deletions through `pgwu pfcp`, window 1024: every
    one answered and accepted, a distinct TEID each, the agent's tables empty afterwards."""
    sys.path.insert(0, str(REPO / "bench"))
    import pfcp_cp_bench as pb
    n = 1_000_000
    agent = pb.Agent(n)          # fails, with the reason, without the agent or without root
    try:
        node = Node(agent.addr, port=0, timers=Timers(t1=3.0, n1=3, heartbeat=0))
        try:
            node.associate()
            sm = Sessions(node, m.SessionOptions(choose=True, n3_addr="10.201.0.1"), window=1024)
            t0 = time.monotonic()
            got = sm.establish(m.Bearer(i, UE0 + i, SGW0 + i % 4, SGWTEID0 + i) for i in range(n))
            est = n / (time.monotonic() - t0)
            assert len(got) == n and len({s.teid for s in got}) == n
            t0 = time.monotonic()
            sm.delete()
            dele = n / (time.monotonic() - t0)
            assert sm.sessions == {}
            print(f"\n1M sessions: {est:,.0f} establishments/s, {dele:,.0f} deletions/s, "
                  f"{node.counters['retransmitted']} retransmitted")
        finally:
            node.close()
        out = subprocess.run([str(pb.PGWU), "-d", agent.pin, "session", "list", "--json"], capture_output=True,
                             text=True, check=True).stdout
        assert '"bearers": []' in out.replace("\n", "").replace("  ", " ") or '"bearers":[]' in out
    finally:
        agent.close()


@pytest.mark.bpf
def test_sessions_with_a_qfi_become_5g_bearers_of_the_pgwu_agent():
    """gtplab as the CP of `pgwu pfcp` with dut.pfcp.qfi: every session's bearer has the QFI in
    both halves (the QER's for the downlink marking, the uplink PDI's for the uplink check)."""
    import json
    import os
    from gtplab.pfcp import provision as prov
    sys.path.insert(0, str(REPO / "bench"))
    import pfcp_cp_bench as pb
    cfg = prov.parse_config({"upf": "h", "n3": "10.201.0.1", "n6": "10.0.0.2", "qfi": 5, "choose": True}, "test")
    assert cfg.options().qfi == 5
    agent = pb.Agent(8)
    try:
        node = Node(agent.addr, port=0, timers=FAST)
        try:
            node.associate()
            sm = Sessions(node, cfg.options(), window=4)
            got = sm.establish(bearers(8))
            out = json.loads(subprocess.run([str(pb.PGWU), "-d", agent.pin, "session", "list", "--json"],
                                            capture_output=True, text=True, check=True).stdout)
            assert sorted((b["teid"], b["qfi"], b["ul_qfi"]) for b in out["bearers"]) == \
                sorted((s.teid, 5, 5) for s in got)
            sm.delete()
        finally:
            node.close()
    finally:
        agent.close()
    assert not os.path.exists(agent.pin)


@pytest.mark.bpf
def test_pfcp_cp_bench_small_run():
    """bench/pfcp_cp_bench.py: one row per target and window, every rate and CPU cost measured,
    no retransmission needed, no pin dir left behind."""
    import os
    before = set(os.listdir("/sys/fs/bpf"))
    cp = subprocess.run([sys.executable, str(REPO / "bench" / "pfcp_cp_bench.py"),
                         "--sessions", "500", "--windows", "16,64", "--markdown"],
                        capture_output=True, text=True, timeout=300)
    assert cp.returncode == 0, cp.stderr
    rows = [r for r in cp.stdout.splitlines() if re.match(r"\| (fake|pgwu)", r)]
    assert [(r.split("|")[1].strip()[:4], r.split("|")[2].strip()) for r in rows] == \
        [("fake", "16"), ("fake", "64"), ("pgwu", "16"), ("pgwu", "64")]
    for r in rows:
        cells = [c.strip().replace(",", "") for c in r.strip("|").split("|")[2:]]
        assert float(cells[1]) > 0 and float(cells[4]) > 0, r          # establish /s, delete /s
    assert not {d for d in os.listdir("/sys/fs/bpf") if d.startswith("gtplab-pfcpcp-")} - before


def test_pfcp_dut_rewrites_the_teid_file_after_a_upf_restart(upf, tmp_path):
    """The runner's DUT over PFCP: after a UPF restart the sessions are back and the TEID file
    the next uplink streams take holds the TEIDs the UPF chose the second time."""
    from types import SimpleNamespace
    from gtplab.gtpu import bearers as gb
    from gtplab.dut.pfcp import PfcpDut
    from gtplab.dut.prometheus import NoCountersDut
    src = tmp_path / "bearers.txt"
    gb.write_bearer_file("uplink", ["--flows", "8", "--sgws", "4"], str(src))
    cfg = SimpleNamespace(path="t", dut={"pfcp": {"upf": f"{upf.addr[0]}:{upf.addr[1]}", "n3": "10.201.0.1",
                                                  "n6": "10.202.0.1", "t1": 0.5, "heartbeat": 0,
                                                  "choose": True, "listen_port": 0}})
    d = PfcpDut(NoCountersDut(), cfg)
    try:
        d.install_bearers(str(src))
        first = d.teid_file
        upf._teid = 0x5000_0000
        upf.restart()
        upf.send_heartbeat()
        deadline = time.monotonic() + 5
        while d.teid_file == first and time.monotonic() < deadline:
            time.sleep(0.02)
        d.prov.node.check()
        assert d.teid_file != first and d.restarts == 1
        teids = [int(x.split()[0], 16) for x in Path(d.teid_file).read_text().splitlines() if not x.startswith("#")]
        assert sorted(teids) == sorted(s["teid"] for s in upf.sessions.values())
        assert min(teids) > 0x5000_0000
    finally:
        d.close()
    assert upf.sessions == {}


@pytest.mark.lab
def test_sweep_with_a_rejecting_upf_fails_clearly_and_leaves_nothing(upf, tmp_path, capsys):
    """A UPF that rejects bearer 3's session: the sweep stops with one line naming the bearer, the
    cause and the message, run.json says why it stopped, and the UPF holds no session of the run."""
    import json
    import yaml
    from gtplab.cli import main as gtplab_main
    upf.reject = {m.ip(UE0 + 3): 73}
    cfg = yaml.safe_load((REPO / "gtplab/lab/labs/embedded-pfcp.yaml").read_text())
    cfg["dut"]["pfcp"].update(upf=f"{upf.addr[0]}:{upf.addr[1]}", choose=True, t1=0.5, listen_port=0)
    lab_file = tmp_path / "lab.yaml"
    lab_file.write_text(yaml.safe_dump(cfg))
    out = tmp_path / "results"
    rc = gtplab_main(["sweep", "--lab-config", str(lab_file), "--sizes", "128", "--directions", "uplink",
                      "--rate-mode", "fixed", "--rate", "1000", "--duration", "0.2", "--flows", "16",
                      "--no-scale", "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2
    want = r"bearer 3 \(UE 10\.64\.0\.4\): UPF rejected the session establishment request: cause 73"
    assert re.search(want, err), err
    run = json.loads((out / "run.json").read_text())
    assert re.search(want, run["stopped"]["why"])
    assert upf.sessions == {} and upf.requests[-1][0] == m.ASSOC_RELEASE_REQ


def test_gtplab_pfcp_command_provisions_holds_and_deletes(upf, tmp_path, capsys):
    from gtplab.cli import main as gtplab_main
    out = tmp_path / "provisioned.txt"
    upf.usage = {m.ip(UE0): (100, 200)}
    rc = gtplab_main(["pfcp", "--upf", f"{upf.addr[0]}:{upf.addr[1]}", "--n3", "10.201.0.1", "--n6", "10.202.0.1",
                      "--listen-port", "0", "--choose", "--urr", "-t", "flows=8,sgws=4", "-o", str(out), "--duration", "0.3"])
    o = capsys.readouterr()
    assert rc == 0, o.err
    lines = [x for x in out.read_text().splitlines() if not x.startswith("#")]
    assert len(lines) == 8 and int(lines[0].split()[0], 16) >= 0x7000_0001
    assert "8 sessions on" in o.err and "usage reports: 8 sessions, uplink 100 octets, downlink 200 octets" in o.out
    assert upf.sessions == {} and upf.requests[-1][0] == m.ASSOC_RELEASE_REQ
    rc = gtplab_main(["pfcp", "--upf", f"{upf.addr[0]}:{upf.addr[1]}", "--n3", "10.201.0.1"])
    assert rc == 2 and "dut.pfcp.n6 is required" in capsys.readouterr().err


def test_sweep_skips_random_order_uplink_when_the_upf_chooses_teids():
    from types import SimpleNamespace
    from gtplab.measure.plan import CaseParams
    from gtplab.measure.sweep import without_unsendable
    cases = [CaseParams("uplink", 64, flows=1000, order="random", case_id="u-r"),
             CaseParams("uplink", 64, flows=1000, case_id="u-s"),
             CaseParams("downlink", 64, flows=1000, order="random", case_id="d-r")]
    choose = SimpleNamespace(provision="pfcp", dut={"pfcp": {"choose": True}})
    keep, skipped = without_unsendable(cases, [], choose)
    assert [c.case_id for c in keep] == ["u-s", "d-r"]
    assert skipped[0]["case_id"] == "u-r" and "seq order" in skipped[0]["note"]
    given = SimpleNamespace(provision="pfcp", dut={"pfcp": {"choose": False}})
    assert without_unsendable(cases, [], given) == (cases, [])
