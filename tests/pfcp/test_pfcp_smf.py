"""gtplab's PFCP control plane behaves as an SMF does towards any UPF (issue 22, docs/pfcp.md):
its node listens on port 8805 of its N4 address and answers the UPF's requests there (heartbeats,
association setup, Session and Node Reports, which it keeps), sees a UPF restart from either
direction, says in one line when 8805 cannot be bound, lets the UPF's UP Function Features decide
who allocates the F-TEIDs (choose: auto), treats an unanswered Association Release as a warning,
and never lets a clean-up error replace the error that caused the clean-up.

Against tests/fake_upf.py on loopback: the fake on 127.0.0.N, the CP node on a random address of
127.64.0.0/10 with port 8805 (fake_upf.cp_addr), so runs on one machine do not collide. The fake's
eupf_like() mode is eUPF's behaviour with its defaults as seen on the wire (timers scaled down).
"""

from __future__ import annotations

import json
import socket
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from tests.lib.fake_upf import FakeUpf, cp_addr  # noqa: E402

from gtplab.errors import UserError  # noqa: E402
from gtplab.pfcp import messages as m  # noqa: E402
from gtplab.pfcp import provision as prov  # noqa: E402
from gtplab.pfcp.errors import PfcpError, PfcpRejected  # noqa: E402
from gtplab.pfcp.node import Node, Timers  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
UE0, SGW0, SGWTEID0, TEID0 = 0x0A400001, 0x0AC90010, 0x80000000, 0x00010000


def bearers(n, given=False):
    return [m.Bearer(i, UE0 + i, SGW0 + i % 4, SGWTEID0 + i, TEID0 + i if given else None) for i in range(n)]


def wait_for(cond, timeout=20.0, step=0.02):
    """Poll cond() until it is true or the deadline passes (no timed assertion: a loaded machine
    only makes this slower); returns its last value."""
    deadline = time.monotonic() + timeout
    while not (v := cond()) and time.monotonic() < deadline:
        time.sleep(step)
    return v


@pytest.fixture
def upf():
    f = FakeUpf()
    yield f
    f.close()
    assert f.errors == []


@pytest.fixture
def cp():
    """gtplab's N4 address for one test: port 8805 free on it."""
    return cp_addr()


def config(upf, cp, **kw) -> prov.PfcpConfig:
    """dut.pfcp for the fake: gtplab's node on cp (port 8805 unless listen_port says)."""
    d = {"upf": f"{upf.addr[0]}:{upf.addr[1]}", "n3": "10.201.0.1", "n6": "10.202.0.1", "local": cp,
         "t1": 0.3, "n1": 1, "heartbeat": 0}
    d.update(kw)
    return prov.parse_config(d, "test")


def lab_config(tmp_path, upf, cp, **kw) -> str:
    """A lab config file (the embedded-pfcp one) whose dut.pfcp points at the fake."""
    cfg = yaml.safe_load((ROOT / "gtplab/lab/labs/embedded-pfcp.yaml").read_text())
    cfg["dut"]["pfcp"] = {"upf": f"{upf.addr[0]}:{upf.addr[1]}", "n3": "10.201.0.1", "n6": "10.202.0.1",
                          "local": cp, "t1": 0.3, "n1": 1, "heartbeat": 0, **kw}
    f = tmp_path / "lab.yaml"
    f.write_text(yaml.safe_dump(cfg))
    return str(f)


def gtplab(argv, capsys):
    from gtplab.cli import main
    rc = main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


# ---------------------------------------------------------------------------------------------
# 8805


def test_node_listens_and_sends_on_8805_of_its_n4_address(upf, cp):
    """The node's socket is cp:8805; its requests leave from it (the UPF sees source port 8805),
    and the answers come back to it."""
    n = Node(upf.addr, local=cp, timers=Timers(t1=0.3, n1=1, heartbeat=0))
    try:
        assert (n.addr, n.port) == (cp, m.PORT) and n.node_id == cp
        n.associate()
        assert upf.peer == (cp, m.PORT)
    finally:
        n.close()


@pytest.mark.parametrize("why", ["in use", "no such address"])
def test_n4_port_that_cannot_be_bound_is_one_line(upf, cp, tmp_path, capsys, why):
    """8805 taken on gtplab's N4 address (or an address this host does not have): one line naming
    the address, the reason and how to choose another port; nothing is sent to the UPF."""
    holder = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        if why == "in use":
            holder.bind((cp, m.PORT))
            local, reason = cp, "Address already in use"
        else:
            local, reason = "198.51.100.77", "Cannot assign requested address"     # TEST-NET-2
        rc, out, err = gtplab(["pfcp", "--upf", f"{upf.addr[0]}:{upf.addr[1]}", "--n3", "10.201.0.1",
                               "--n6", "10.202.0.1", "--local", local, "-t", "flows=2"], capsys)
    finally:
        holder.close()
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"gtplab pfcp: PFCP: cannot listen on {local}:8805, gtplab's N4 address: {reason}")
    assert "--listen-port N" in lines[0] and "dut.pfcp.listen_port" in lines[0]
    assert upf.requests == []


def test_listen_port_0_takes_any_free_port(upf, cp):
    holder = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    holder.bind((cp, m.PORT))
    try:
        p = prov.Provisioner(config(upf, cp, listen_port=0, choose=False))
        try:
            assert p.node.addr == cp and p.node.port not in (0, m.PORT)
        finally:
            p.close()
    finally:
        holder.close()


def test_datagrams_from_others_than_the_upf_are_not_read(upf, cp):
    """8805 is a well-known port: a datagram from another address is counted and dropped, not
    taken for an answer (or a malformed message that would end the run)."""
    n = Node(upf.addr, local=cp, timers=Timers(t1=0.3, n1=1, heartbeat=0))
    other = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    other.bind((cp_addr(0), 0))
    try:
        n.associate()
        other.sendto(b"\x01\x02garbage", (cp, m.PORT))
        other.sendto(bytes(m.heartbeat_request(9, 1)), (cp, m.PORT))
        assert wait_for(lambda: n.pump(0.05) or n.counters["foreign"] == 2)
        assert n.counters["foreign"] == 2 and n.counters["heartbeats_answered"] == 0
        other.settimeout(0.2)
        with pytest.raises(socket.timeout):
            other.recv(100)
    finally:
        other.close()
        n.close()


# ---------------------------------------------------------------------------------------------
# The UPF's heartbeats: answered on 8805, so the sessions stay


def test_upf_heartbeats_to_8805_are_answered_and_the_sessions_stay(upf, cp, tmp_path):
    """An eUPF-like UPF heartbeats the CP's address on 8805 and drops the association and its
    sessions after 3 in a row go unanswered for 1 s. Held through 40 of its heartbeats (more
    than 3 timeouts' worth), the sessions are all still there and their deletions are accepted."""
    upf.eupf_like(hb_interval=0.05, hb_timeout=1.0, hb_retries=3)
    p = prov.Provisioner(config(upf, cp, choose=False))
    try:
        src = tmp_path / "bearers.txt"
        from gtplab.gtpu import bearers as gb
        gb.write_bearer_file("uplink", ["--flows", "8", "--sgws", "4"], str(src))
        p.install(str(src), str(tmp_path / "out.txt"))
        assert len(upf.sessions) == 8
        wait_for(lambda: len(upf.hb_answers) >= 40 or upf.dropped)
        assert upf.dropped == 0 and upf.assoc and len(upf.sessions) == 8
        assert len(upf.hb_answers) >= 40 and set(upf.hb_answers) == {p.node.recovery_ts}
        p.node.check()
    finally:
        p.close()
    # every deletion found its session (the fake answers 65 or 72 otherwise, and close() raises)
    assert upf.sessions == {} and sum(t == m.SESS_DEL_REQ for t, _ in upf.requests) == 8
    assert p.warnings and "association release request" in p.warnings[0]


def test_gtplab_pfcp_against_an_eupf_like_upf_keeps_the_sessions_and_exits_0(upf, cp, tmp_path, capsys):
    """`gtplab pfcp` with eUPF's defaults (FTUP off, heartbeats to 8805, release never answered)
    and nothing told about them: given TEIDs, sessions held through its heartbeats, deleted,
    exit 0, the unanswered release a warning."""
    upf.eupf_like(hb_interval=0.05, hb_timeout=1.0, hb_retries=3)
    out = tmp_path / "provisioned.txt"
    rc, _, err = gtplab(["pfcp", "--lab-config", lab_config(tmp_path, upf, cp), "-t", "flows=8,sgws=4",
                         "-o", str(out), "--duration", "3.5"], capsys)
    assert rc == 0, err
    assert upf.dropped == 0 and len(upf.hb_answers) >= 20, (upf.dropped, len(upf.hb_answers))
    assert "F-TEIDs gtplab's" in err and f"listening on {cp}:8805" in err
    teids = [int(x.split()[0], 16) for x in out.read_text().splitlines() if not x.startswith("#")]
    assert teids == [TEID0 + i for i in range(8)]
    assert upf.sessions == {} and sum(t == m.SESS_DEL_REQ for t, _ in upf.requests) == 8
    assert upf.requests[-1][0] == m.ASSOC_RELEASE_REQ
    assert "gtplab pfcp: warning: the node: no answer from UPF" in err and "association release request" in err
    assert "sessions deleted, association ended" in err


# ---------------------------------------------------------------------------------------------
# Association Release: a UPF that ignores it is a warning


def test_release_the_upf_ignores_is_a_warning_not_a_failure(upf, cp, tmp_path):
    upf.silent = {m.ASSOC_RELEASE_REQ}
    p = prov.Provisioner(config(upf, cp, choose=True, urr=True))
    src = tmp_path / "bearers.txt"
    from gtplab.gtpu import bearers as gb
    gb.write_bearer_file("uplink", ["--flows", "4", "--sgws", "4"], str(src))
    p.install(str(src), str(tmp_path / "out.txt"))
    usage = p.close()                       # does not raise
    assert set(usage) == {0, 1, 2, 3} and upf.sessions == {}
    assert len(p.warnings) == 1
    assert "no answer from UPF" in p.warnings[0] and "association release request (seq" in p.warnings[0]
    assert p.warnings[0].endswith("the association ended on gtplab's side only")
    assert [c for (t, _), c in upf.seen.items() if t == m.ASSOC_RELEASE_REQ] == [2]      # T1/N1 applied


def test_release_wait_sends_the_release_once_and_waits_that_long(upf, cp, tmp_path, capsys):
    """dut.pfcp.release_wait (gtplab pfcp --release-wait): for a UPF that never answers Association
    Release (eUPF), the request goes once, with its own T1, and the warning says so; T1 and N1 of
    every other request are unchanged."""
    upf.eupf_like(hb_interval=0.05, hb_timeout=1.0, hb_retries=3)
    rc, _, err = gtplab(["pfcp", "--lab-config", lab_config(tmp_path, upf, cp, release_wait=0.2),
                         "-t", "flows=4,sgws=4", "--duration", "0.1"], capsys)
    assert rc == 0, err
    assert [c for (t, _), c in upf.seen.items() if t == m.ASSOC_RELEASE_REQ] == [1]
    assert "association release request (seq" in err and "after 1 send, T1 0.2 s, N1 0;" in err, err
    p = prov.parse_config({"upf": "10.0.0.2", "n3": "10.201.0.1", "n6": "10.202.0.1", "t1": 0.3,
                           "release_wait": 2}, "test")
    assert (p.release_wait, p.timers.t1, p.timers.n1) == (2.0, 0.3, 3)
    with pytest.raises(UserError, match=r"dut.pfcp.release_wait 0 must be a number >= 0.001"):
        prov.parse_config({"upf": "10.0.0.2", "n3": "10.201.0.1", "n6": "10.202.0.1", "release_wait": 0}, "t")


def test_release_the_upf_rejects_is_a_warning_with_its_cause(upf, cp):
    p = prov.Provisioner(config(upf, cp, choose=True))
    orig = upf._answer

    def reject_release(data):
        if m.parse_header(data)[0] == m.ASSOC_RELEASE_REQ:
            return bytes(m.association_release_response(m.parse_header(data)[1], upf.node_id, cause=72))
        return orig(data)
    upf._answer = reject_release
    p.close()
    assert len(p.warnings) == 1 and "rejected association release request: cause 72 (No established Sx Association)" in p.warnings[0], p.warnings


def test_sweep_notes_the_release_warning_and_the_reports_in_run_json():
    """What the sweep records of a PFCP DUT after the run: the warnings as run notes (and on
    stderr), the UPF's reports as pfcp_reports."""
    from gtplab.measure.sweep import _pfcp_notes
    run = {"notes": []}
    _pfcp_notes(run, SimpleNamespace(warnings=["the node: no answer ... association release request (seq 9)"],
                                     reports={"count": {"session USAR": 1}, "first": []}))
    assert run["notes"] == ["PFCP warning: the node: no answer ... association release request (seq 9)"]
    assert run["pfcp_reports"]["count"] == {"session USAR": 1}
    run = {"notes": []}
    _pfcp_notes(run, SimpleNamespace())                  # a DUT that is not provisioned over PFCP
    assert run == {"notes": []}


# ---------------------------------------------------------------------------------------------
# The first error is the one the user reads


def test_the_upf_cause_is_what_the_user_reads_not_the_release_timeout(upf, cp, tmp_path, capsys):
    """A rejected establishment at a UPF that also ignores Association Release: the error printed
    is the rejection with its Cause; the release the UPF left unanswered is a warning before it."""
    upf.silent = {m.ASSOC_RELEASE_REQ}
    upf.reject = {m.ip(UE0 + 3): 73}
    rc, _, err = gtplab(["pfcp", "--lab-config", lab_config(tmp_path, upf, cp, choose=True),
                         "-t", "flows=8,sgws=4", "--duration", "0.2"], capsys)
    assert rc == 2
    last = err.strip().splitlines()[-1]
    assert last.startswith("gtplab pfcp: PFCP, establishing 8 session(s): bearer 3 (UE 10.64.0.4): UPF "
                           "rejected the session establishment request: cause 73 (Rule creation/modification "
                           "Failure)"), err
    assert "association release" not in last
    assert "warning: the node: no answer from UPF" in err
    assert upf.sessions == {}


def test_a_cleanup_error_is_added_to_the_first_error_never_replaces_it(upf, cp, tmp_path):
    """close(error=e): deletions that fail (the UPF lost the sessions: cause 65) are added to e,
    which stays the error raised; the release is still tried. Without an error, the deletion's
    error is raised (with its Cause)."""
    p = prov.Provisioner(config(upf, cp, choose=True))
    p.sessions.establish(bearers(4))
    upf.sessions.clear()                                  # the UPF lost them
    first = UserError("traffic failed")
    p.close(error=first)
    assert str(first).startswith("traffic failed; while cleaning up: PFCP, deleting 4 session(s): bearer ")
    assert "cause 65 (Session context not found)" in str(first)
    assert first.__notes__ and "cause 65" in first.__notes__[0]
    assert upf.requests[-1][0] == m.ASSOC_RELEASE_REQ

    q = prov.Provisioner(config(upf, cp, choose=True))
    q.sessions.establish(bearers(2))
    upf.sessions.clear()
    with pytest.raises(PfcpRejected, match=r"deleting 2 session\(s\): .*cause 65") as e:
        q.close()
    assert e.value.cause == 65 and upf.requests[-1][0] == m.ASSOC_RELEASE_REQ


def test_runner_keeps_the_run_error_when_closing_the_dut_fails_too():
    """The sweep's runner: an error while closing the DUT (sessions it could not delete) after the
    run failed is added to the run's error, which is the one raised."""
    from gtplab.measure.runner import Runner

    def close():
        raise PfcpError("PFCP, deleting 8 session(s): ... cause 72 (No established PFCP Association)")
    first = UserError("TRex: port 0 link down")
    Runner.__exit__(SimpleNamespace(close=close), UserError, first, None)       # does not raise
    assert str(first) == ("TRex: port 0 link down; while cleaning up: closing the DUT: PFCP, deleting 8 "
                          "session(s): ... cause 72 (No established PFCP Association)")
    with pytest.raises(PfcpError, match="cause 72"):
        Runner.__exit__(SimpleNamespace(close=close), None, None, None)


# ---------------------------------------------------------------------------------------------
# F-TEID allocation: what the UPF offers


@pytest.mark.parametrize("ftup, choose, chosen", [
    (True, "auto", True), (False, "auto", False), (True, None, True), (False, None, False),
    (True, False, False), (False, True, "refused"), (True, True, True),
], ids=["ftup-auto", "noftup-auto", "ftup-default", "noftup-default", "ftup-false", "noftup-true",
        "ftup-true"])
def test_choose_follows_the_upf_function_features(upf, cp, tmp_path, ftup, choose, chosen):
    """choose auto (the default): CHOOSE when the UPF's UP Function Features at association say
    FTUP, else gtplab's TEIDs; true/false as before (true at a UPF without FTUP: refused before
    anything is sent). The DUT the runner uses holds the resolved value: the uplink profile takes
    the UPF's TEIDs (teid_file) exactly when it chose them."""
    from gtplab.dut.pfcp import PfcpDut
    from gtplab.dut.prometheus import NoCountersDut
    from gtplab.gtpu import bearers as gb
    from gtplab.measure.plan import CaseParams
    from gtplab.measure.runner import Runner
    upf.ftup = ftup
    d = {"upf": f"{upf.addr[0]}:{upf.addr[1]}", "n3": "10.201.0.1", "n6": "10.202.0.1", "local": cp,
         "t1": 0.3, "n1": 1, "heartbeat": 0}
    if choose is not None:
        d["choose"] = choose
    src = tmp_path / "bearers.txt"
    gb.write_bearer_file("uplink", ["--flows", "4", "--sgws", "4"], str(src))
    dut = PfcpDut(NoCountersDut(), SimpleNamespace(path="t", dut={"pfcp": d}))
    try:
        if chosen == "refused":
            with pytest.raises(PfcpError, match=r"does not allocate F-TEIDs .*FTUP 0.*choose: auto or false"):
                dut.install_bearers(str(src))
            assert not any(t == m.SESS_EST_REQ for t, _ in upf.requests)
            return
        dut.install_bearers(str(src))
        assert dut.cfg.choose is chosen
        assert [s["choose"] for s in upf.sessions.values()] == [chosen] * 4
        teids = sorted(s["teid"] for s in upf.sessions.values())
        assert (teids == [TEID0 + i for i in range(4)]) is (not chosen)
        tun = Runner.provisioned_tunables(SimpleNamespace(dut=dut), CaseParams("uplink", 128), {"size": 128})
        assert ("teid_file" in tun) is chosen
    finally:
        dut.close()


@pytest.mark.parametrize("flag, chosen", [("--choose", True), ("--no-choose", False), (None, True)])
def test_gtplab_pfcp_choose_flags(upf, cp, tmp_path, capsys, flag, chosen):
    """--choose / --no-choose override dut.pfcp.choose; without either, auto (the fake offers FTUP)."""
    rc, _, err = gtplab(["pfcp", "--lab-config", lab_config(tmp_path, upf, cp), "-t", "flows=4,sgws=4"]
                        + ([flag] if flag else []) + ["--duration", "0.1"], capsys)
    assert rc == 0, err
    # one per session: a retransmission (T1 0.3 s: a late answer on a loaded host) is the same request
    est = list({p.seq: p for t, p in upf.requests if t == m.SESS_EST_REQ}.values())
    fteids = [i for p in est for pdr in p.payload.IE_list if pdr.ietype == 1
              for pdi in pdr.IE_list if pdi.ietype == 2 for i in pdi.IE_list if i.ietype == 21]
    assert [f.CH for f in fteids] == [int(chosen)] * 4


@pytest.mark.parametrize("value, want", [("auto", None), (True, True), (False, False)])
def test_lab_config_choose_values(value, want):
    c = prov.parse_config({"upf": "h", "n3": "10.0.0.1", "n6": "10.0.0.2", "choose": value}, "t")
    assert c.choose is want
    assert prov.parse_config({"upf": "h", "n3": "10.0.0.1", "n6": "10.0.0.2"}, "t").choose is None
    assert prov.resolve_choose(None, True) is True and prov.resolve_choose(None, None) is False


@pytest.mark.parametrize("bad, msg", [
    ({"choose": "yes"}, r"dut.pfcp.choose 'yes' must be auto, true or false"),
    ({"choose": 1}, r"dut.pfcp.choose 1 must be auto"),
    ({"listen_port": 70000}, r"dut.pfcp.listen_port 70000 must be a UDP port"),
    ({"listen_port": "8805"}, r"dut.pfcp.listen_port '8805'"),
])
def test_lab_config_bad_choose_and_listen_port(bad, msg):
    with pytest.raises(UserError, match=msg):
        prov.parse_config({"upf": "h", "n3": "10.0.0.1", "n6": "10.0.0.2", **bad}, "t")


def test_sweep_decides_random_uplink_cases_after_the_association_with_choose_auto():
    """Before the association only `choose: true` is known to CHOOSE; with auto the random-order
    uplink cases are kept until the association says (choose resolved: then skipped)."""
    from gtplab.measure.plan import CaseParams
    from gtplab.measure.sweep import without_unsendable
    cases = [CaseParams("uplink", 64, flows=1000, order="random", case_id="u-r"),
             CaseParams("uplink", 64, flows=1000, case_id="u-s")]
    auto = SimpleNamespace(provision="pfcp", dut={"pfcp": {}})
    assert without_unsendable(cases, [], auto) == (cases, [])
    assert without_unsendable(cases, [], SimpleNamespace(provision="pfcp", dut={"pfcp": {"choose": "auto"}})) \
        == (cases, [])
    keep, skipped = without_unsendable(cases, [], auto, choose=True)
    assert [c.case_id for c in keep] == ["u-s"] and skipped[0]["case_id"] == "u-r"


# ---------------------------------------------------------------------------------------------
# The UPF's reports


def test_session_and_node_reports_are_answered_and_kept(upf, cp):
    """Session Report Requests (to 8805): Cause 1 with the UPF's SEID of the session in the header,
    65 and SEID 0 for a session we do not have; a Node Report: Cause 1. All kept, with the bearer,
    the report types and the usage."""
    upf.cp_port = m.PORT
    p = prov.Provisioner(config(upf, cp, choose=True, urr=True))
    try:
        p.sessions.establish(bearers(4))
        ue2 = m.ip(UE0 + 2)
        up2 = next(k for k, s in upf.sessions.items() if s["ue"] == ue2)
        seqs = [upf.send_session_report(ue2, usage=(1000, 2000)),
                upf.send_session_report(m.ip(UE0 + 1), error_indication=(0x8000_0001, "10.201.0.17")),
                upf.send_session_report(cp_seid=0xDEAD, usage=(1, 1)),
                upf.send_node_report("10.201.0.99")]
        assert wait_for(lambda: all(upf.answer_to(s) for s in seqs) and len(p.reports) == 4)
        assert [upf.answer_to(s) for s in seqs] == [(m.SESS_REPORT_RSP, seqs[0], 1, up2),
                                                     (m.SESS_REPORT_RSP, seqs[1], 1, upf.answer_to(seqs[1])[3]),
                                                     (m.SESS_REPORT_RSP, seqs[2], 65, 0),
                                                     (m.NODE_REPORT_RSP, seqs[3], 1, None)]
        r = p.reports
        assert (r[0].kind, r[0].types, r[0].bearer, r[0].usage, r[0].cause) == \
            ("session", ["USAR"], "bearer 2 (UE 10.64.0.3)", {1: (3000, 1000, 2000)}, 1)
        assert (r[1].types, r[1].bearer) == (["ERIR"], "bearer 1 (UE 10.64.0.2)")
        assert (r[2].types, r[2].bearer, r[2].cause) == (["USAR"], None, 65)
        assert (r[3].kind, r[3].types, r[3].cause) == ("node", ["UPFR"], 1)
        assert m.decode(r[3].raw).message_type == m.NODE_REPORT_REQ
        # one sent again (its answer lost): answered again, kept once
        upf.sock.sendto(r[0].raw, (cp, m.PORT))
        assert wait_for(lambda: sum(a[1] == seqs[0] for a in upf.answers) == 2)
        assert len(p.reports) == 4
        s = p.reports_summary()
        assert s["count"] == {"session USAR": 2, "session ERIR": 1, "node UPFR": 1}
        json.dumps(s)
        p.node.check()
    finally:
        p.close()


# ---------------------------------------------------------------------------------------------
# UPF restart, seen from either direction


@pytest.mark.parametrize("via", ["its Heartbeat Request", "its Heartbeat Response", "its Association Setup Request"])
def test_upf_restart_seen_from_either_direction(upf, cp, via):
    """After a UPF restart (its sessions and association gone, a new Recovery Time Stamp): seen in
    the UPF's Heartbeat Request to 8805, in its answer to ours, or in an Association Setup Request
    the UPF sends to 8805 itself. gtplab answers the latter (with CP Function Features: eUPF wants
    them) and does not set the association up again; otherwise it does; then every session is
    established again."""
    upf.cp_port = m.PORT
    upf.require_association = True
    p = prov.Provisioner(config(upf, cp, choose=True))
    try:
        sm = p.sessions
        sm.establish(bearers(6))
        assert upf.associated == 1
        upf.restart()
        if via == "its Heartbeat Request":
            upf.send_heartbeat()
        elif via == "its Heartbeat Response":
            p.node.heartbeat()
        else:
            seq = upf.send_association_setup()
            assert wait_for(lambda: upf.answer_to(seq))
            assert upf.answer_to(seq)[:3] == (m.ASSOC_SETUP_RSP, seq, 1)
        assert wait_for(lambda: sm.reestablished == 6)
        p.node.check()
        assert p.node.restarts == 1 and p.node.restarts_seen == [via]
        assert p.node.upf_ts == upf.recovery_ts
        assert upf.associated == (1 if via == "its Association Setup Request" else 2)
        assert sorted(s["ue"] for s in upf.sessions.values()) == sorted(m.ip(UE0 + i) for i in range(6))
        assert {s.teid for s in sm.sessions.values()} == {s["teid"] for s in upf.sessions.values()}
    finally:
        p.close()


def test_answer_to_a_upf_association_setup_carries_cp_function_features(upf, cp):
    n = Node(upf.addr, local=cp, timers=Timers(t1=0.3, n1=1, heartbeat=0))
    upf.cp_port = m.PORT
    try:
        n.associate()
        seq = upf.send_association_setup()
        assert wait_for(lambda: (n.pump(0.05), upf.answer_to(seq))[1])
        assert not n.restart_detected                       # same Recovery Time Stamp
        raw = bytes(m.cp_association_setup_response(seq, n.node_id, n.recovery_ts))
        ies = {i.ietype: i for i in m.decode(raw).payload.IE_list}
        assert set(ies) == {m.IE_NODE_ID, m.IE_CAUSE, m.IE_RECOVERY_TIME_STAMP, 89}
        assert upf.answer_to(seq)[2] == 1
    finally:
        n.close()


def test_upf_releasing_the_association_ends_the_hold_clearly(upf, cp, tmp_path, capsys):
    """The UPF sends an Association Release Request (6.2.8: its sessions are gone): answered, and
    the hold ends with that as the error; no deletion is sent for sessions that no longer exist."""
    upf.cp_port = m.PORT
    p = prov.Provisioner(config(upf, cp, choose=True))
    try:
        p.sessions.establish(bearers(3))
        seq = upf._request(m.header(m.ASSOC_RELEASE_REQ, upf._next_seq())
                           / m.sp.PFCPAssociationReleaseRequest(IE_list=[m.node_id_ie(upf.node_id)]))
        assert wait_for(lambda: upf.answer_to(seq))
        with pytest.raises(PfcpError, match=r"released the association .* its sessions are gone") as e:
            wait_for(lambda: p.node.released_by_upf)
            p.node.check()
        p.close(error=e.value)
    finally:
        if p.node.sock.fileno() != -1:
            p.close()
    assert not any(t == m.SESS_DEL_REQ for t, _ in upf.requests)


@pytest.mark.lab
def test_sweep_against_an_eupf_like_upf_ends_with_the_release_warning_in_run_json(upf, cp, tmp_path, capsys):
    """`gtplab sweep` with dut.provision pfcp on an eUPF-like UPF (FTUP off, heartbeats to 8805,
    release never answered) and choose left to auto: gtplab's TEIDs, the association kept through
    the run, the sessions deleted, exit 0, and the unanswered release a note in run.json and a
    warning on stderr, not a stopped run. (The fake programs no data plane: the embedded PGW-U
    drops the traffic as unknown bearers, counted by reason.)"""
    from gtplab.cli import main as gtplab_main
    upf.eupf_like(hb_interval=0.05, hb_timeout=1.0, hb_retries=3)
    out = tmp_path / "results"
    rc = gtplab_main(["sweep", "--lab-config", lab_config(tmp_path, upf, cp), "--sizes", "128",
                      "--directions", "uplink", "--rate-mode", "fixed", "--rate", "1000", "--duration", "0.2",
                      "--flows", "16", "--no-scale", "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 0, err
    run = json.loads((out / "run.json").read_text())
    assert "stopped" not in run and "finished" in run
    notes = [n for n in run["notes"] if n.startswith("PFCP warning: ")]
    assert len(notes) == 1 and "association release request" in notes[0], run["notes"]
    assert "gtplab sweep: warning: PFCP: " in err
    # (once gtplab is gone its heartbeats go unanswered and the fake drops the association, as
    # eUPF does: by then no session was left to lose)
    assert upf.lost == 0 and len(upf.hb_answers) >= 5 and upf.sessions == {}
    teids = [int(x.split()[0], 16) for x in (out / run["pfcp_bearer_file"]).read_text().splitlines()
             if x and not x.startswith("#")]
    assert teids == [TEID0 + i for i in range(16)]
