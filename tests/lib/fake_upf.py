"""A fake UPF for the PFCP control-plane tests: a thread answering Sx/N4 on 127.0.0.x, an ephemeral
port (unique per instance).

It decodes every request with Scapy (scapy.contrib.pfcp) and answers with the builders of
gtplab.pfcp.messages, keeping the sessions it was given, so a test can check what the control plane
asked for. Faults are knobs:

    drop_first    message types whose first copy (per sequence number) is not answered
    silent        message types never answered (T1/N1 runs out)
    silent_ues    UE addresses whose establishment is never answered
    reject        {UE address: cause}: establishment of that UE's session rejected with cause
    malformed     UE addresses whose establishment response is truncated inside an IE
    wrong_seq     UE addresses whose establishment response carries another sequence number
    usage         {UE address: (uplink, downlink) octets} for the deletion's usage report

fast=True answers establishments and deletions from templates without decoding them with Scapy
(bench/pfcp_cp_bench.py: so that the fake is not the bottleneck); no fault knobs then.

eupf_like() makes it behave as eUPF does with its defaults (seen on the wire, docs/pfcp.md): UP
Function Features without FTUP (it gives no F-TEIDs), Heartbeat Requests to the CP's address (where
its Association Setup Request came from) on port 8805, every hb_interval s, the association and its
sessions dropped after hb_retries in a row unanswered for hb_timeout s; no answer to Association
Release; session requests without an association rejected with cause 72. Its own requests to the
CP (send_heartbeat, send_association_setup, send_session_report, send_node_report) go to that
address and port; the CP's answers to them are kept in `answers`.
"""

from __future__ import annotations

import random
import socket
import struct
import threading
import time

from gtplab.pfcp import messages as m

_next_host = [10]


def loopback_addr() -> str:
    """127.0.0.N, a different N per fake in this process (with its ephemeral port, unique)."""
    _next_host[0] = _next_host[0] % 250 + 1
    return f"127.0.0.{_next_host[0] + 1}"


def cp_addr(port: int = m.PORT) -> str:
    """A loopback address (127.64.0.0/10, away from the fakes' 127.0.0.N) whose `port` is free now:
    for a CP node that listens on 8805 as an SMF does, unique on a machine where other test runs
    bind their own."""
    for _ in range(100):
        a = f"127.{random.randrange(64, 128)}.{random.randrange(256)}.{random.randrange(1, 255)}"
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            s.bind((a, port))
            return a
        except OSError:
            continue
        finally:
            s.close()
    raise RuntimeError(f"no loopback address with UDP port {port} free in 100 tries")


_RESPONSES = {m.HEARTBEAT_RSP, m.ASSOC_SETUP_RSP, m.ASSOC_UPDATE_RSP, m.ASSOC_RELEASE_RSP, m.NODE_REPORT_RSP,
              m.SESS_EST_RSP, m.SESS_MOD_RSP, m.SESS_DEL_RSP, m.SESS_REPORT_RSP, 4, 16}   # + PFD, set deletion


class FakeUpf:
    def __init__(self, node_id: str = "upf.fake.test", n3_addr: str = "10.201.0.1", fast: bool = False,
                 teid_base: int = 0x7000_0000):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        self.sock.bind((loopback_addr(), 0))
        self.sock.settimeout(0.05)
        self.addr = self.sock.getsockname()
        self.node_id, self.n3_addr, self.fast = node_id, n3_addr, fast
        self.recovery_ts = m.recovery_timestamp() - 1000
        self.sessions: dict[int, dict] = {}          # UP SEID -> {cp_seid, ue, teid, sgw, sgw_teid, ...}
        self.requests: list = []                     # (type, Scapy packet) of every request decoded
        self.drop_first: set[int] = set()
        self.silent: set[int] = set()
        self.reject: dict[str, int] = {}
        self.malformed: set[str] = set()
        self.wrong_seq: set[str] = set()
        self.silent_ues: set[str] = set()
        self.usage: dict[str, tuple[int, int]] = {}
        self.seen: dict[tuple[int, int], int] = {}   # (type, seq) -> copies received
        self.peer = None
        self.hb_answers: list[int] = []              # Recovery Time Stamps in the CP's heartbeat answers
        self.associated = 0
        self.errors: list[str] = []
        self.ftup = True                             # UP Function Features: allocates F-TEIDs
        # the association and the UPF's own requests (eupf_like)
        self.cp_port: int | None = None              # where its requests go (None: the last peer's port)
        self.cp_addr: str | None = None              # the CP's address (its Association Setup Request's)
        self.assoc = False
        self.require_association = False             # session requests without one: cause 72
        self.hb_interval = self.hb_timeout = 0.0
        self.hb_retries = 0
        self.hb_unanswered = 0
        self.dropped = 0                             # associations dropped: heartbeats unanswered
        self.lost = 0                                # sessions they took with them
        self.answers: list[tuple[int, int, int | None, int | None]] = []   # (type, seq, cause, SEID)
        self._useq = 0x100000
        self._hb_seq = None
        self._hb_answered = threading.Event()
        self._hb_thread = None
        self._teid = teid_base
        self._seid = 0x1000
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._fast_est = self._fast_del = None
        self._thread = threading.Thread(target=self._loop, name="fake-upf", daemon=True)
        self._thread.start()

    # -- control from the test -----------------------------------------------------------------

    def restart(self) -> None:
        """A restart: the sessions and the association are lost and the Recovery Time Stamp changes."""
        with self._lock:
            self.sessions.clear()
            self.recovery_ts += 7
            self.assoc = False

    def eupf_like(self, hb_interval: float = 0.1, hb_timeout: float = 1.0, hb_retries: int = 3) -> "FakeUpf":
        """Behave as eUPF with its defaults (module doc); the timers scaled down for tests."""
        self.ftup = False
        self.silent = self.silent | {m.ASSOC_RELEASE_REQ}
        self.require_association = True
        self.cp_port = m.PORT
        self.hb_interval, self.hb_timeout, self.hb_retries = hb_interval, hb_timeout, hb_retries
        self._hb_thread = threading.Thread(target=self._heartbeats, name="fake-upf-hb", daemon=True)
        self._hb_thread.start()
        return self

    def _cp(self) -> tuple[str, int]:
        if self.cp_port is None:
            return self.peer
        return (self.cp_addr, self.cp_port)

    def _request(self, msg) -> int:
        self.sock.sendto(bytes(msg), self._cp())
        return msg.seq

    def _next_seq(self) -> int:
        self._useq = self._useq % 0xFFFFFF + 1
        return self._useq

    def send_heartbeat(self, seq: int | None = None) -> None:
        """A Heartbeat Request to the CP; its answer lands in hb_answers."""
        self._request(m.heartbeat_request(seq or self._next_seq(), self.recovery_ts))

    def send_association_setup(self) -> int:
        """An Association Setup Request to the CP (the UPF sets the association up, 6.2.6.1)."""
        return self._request(m.header(m.ASSOC_SETUP_REQ, self._next_seq()) / m.sp.PFCPAssociationSetupRequest(
            IE_list=[m.node_id_ie(self.node_id), m.sp.IE_RecoveryTimeStamp(timestamp=self.recovery_ts)]))

    def send_session_report(self, ue: str | None = None, cp_seid: int | None = None, **kw) -> int:
        """A Session Report Request for the session of UE ue (or for cp_seid); kw: usage=(ul, dl),
        error_indication=(teid, addr) (messages.session_report_request)."""
        if cp_seid is None:
            cp_seid = next(s["cp_seid"] for s in self.sessions.values() if s["ue"] == ue)
        return self._request(m.session_report_request(self._next_seq(), cp_seid, **kw))

    def send_node_report(self, failed_peer: str = "10.201.0.99") -> int:
        return self._request(m.node_report_request(self._next_seq(), self.node_id, failed_peer))

    def answer_to(self, seq: int) -> tuple[int, int, int | None, int | None] | None:
        return next((a for a in self.answers if a[1] == seq), None)

    def _heartbeats(self) -> None:
        """eUPF's heartbeat loop: a request, hb_timeout for its answer, then the next after
        hb_interval; hb_retries unanswered in a row drop the association and its sessions."""
        while not self._stop.is_set():
            if not self.assoc:
                time.sleep(0.02)
                continue
            self._hb_answered.clear()
            self._hb_seq = self._next_seq()
            self.send_heartbeat(self._hb_seq)
            if self._hb_answered.wait(self.hb_timeout):
                self.hb_unanswered = 0
                self._stop.wait(self.hb_interval)
                continue
            self.hb_unanswered += 1
            if self.hb_unanswered >= self.hb_retries:
                with self._lock:
                    self.assoc = False
                    self.lost += len(self.sessions)
                    self.sessions.clear()
                    self.dropped += 1
                    self.hb_unanswered = 0

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        if self._hb_thread is not None:
            self._hb_thread.join(5)
        self.sock.close()

    # -- the loop ------------------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                data, peer = self.sock.recvfrom(65536)
            except socket.timeout:
                continue
            except OSError:
                return
            self.peer = peer
            with self._lock:
                try:
                    out = self._fast(data) if self.fast else self._answer(data)
                except Exception as e:           # noqa: BLE001 -- the test asserts errors == []
                    self.errors.append(repr(e))
                    continue
            if out is not None:
                self.sock.sendto(out, peer)

    def _fast(self, data: bytes):
        mtype, seq, seid, _ = m.parse_header(data)
        if mtype == m.SESS_EST_REQ:
            cp = m.scan(data).up_seid          # the request's F-SEID is the CP's
            if self._fast_est is None:
                self._fast_est = m.Template(
                    lambda seq, cp_seid, up_seid, teid: m.session_establishment_response(
                        seq, cp_seid, self.node_id, up_seid=up_seid, up_addr="127.0.0.1",
                        created=(teid, self.n3_addr)),
                    {"seq": 3, "cp_seid": 8, "up_seid": 8, "teid": 4})
            self._seid += 1
            self._teid += 1
            self.sessions[self._seid] = {"cp_seid": cp}
            return self._fast_est.render(seq=seq, cp_seid=cp, up_seid=self._seid, teid=self._teid)
        if mtype == m.SESS_DEL_REQ:
            s = self.sessions.pop(seid, None)
            if s is None:
                return bytes(m.session_deletion_response(seq, 0, cause=65))
            if self._fast_del is None:
                self._fast_del = m.Template(lambda seq, cp_seid: m.session_deletion_response(seq, cp_seid),
                                            {"seq": 3, "cp_seid": 8})
            return self._fast_del.render(seq=seq, cp_seid=s["cp_seid"])
        return self._answer(data)

    def _answer(self, data: bytes):
        pkt = m.decode(data)
        mtype, seq = pkt.message_type, pkt.seq
        if mtype in _RESPONSES:
            ies = getattr(pkt.payload, "IE_list", None) or []
            cause = next((i.cause for i in ies if i.ietype == m.IE_CAUSE), None)
            self.answers.append((mtype, seq, cause, pkt.seid if pkt.S else None))
            if mtype == m.ASSOC_SETUP_RSP and cause == m.CAUSE_ACCEPTED:
                self.assoc = True                    # the association it asked for (6.2.6.1)
            if mtype == m.HEARTBEAT_RSP:
                self.hb_answers.append(pkt.payload.IE_list[0].timestamp)
                if seq == self._hb_seq:
                    self._hb_answered.set()
            return None
        self.requests.append((mtype, pkt))
        copies = self.seen.get((mtype, seq), 0) + 1
        self.seen[(mtype, seq)] = copies
        if mtype in self.silent or (mtype in self.drop_first and copies == 1):
            return None
        ies = getattr(pkt.payload, "IE_list", None) or []
        if mtype == m.HEARTBEAT_REQ:
            return bytes(m.heartbeat_response(seq, self.recovery_ts))
        if mtype == m.ASSOC_SETUP_REQ:
            self.associated += 1
            self.assoc, self.cp_addr = True, self.peer[0]
            return bytes(m.association_setup_response(seq, self.node_id, self.recovery_ts, ftup=self.ftup))
        if mtype == m.ASSOC_RELEASE_REQ:
            self.assoc = False
            self.sessions.clear()
            return bytes(m.association_release_response(seq, self.node_id))
        if mtype in (m.SESS_EST_REQ, m.SESS_MOD_REQ, m.SESS_DEL_REQ) and self.require_association \
                and not self.assoc:
            if mtype == m.SESS_EST_REQ:
                cp = next(i for i in ies if i.ietype == 57).seid
                return bytes(m.session_establishment_response(seq, cp, self.node_id, cause=m.CAUSE_NO_ASSOCIATION))
            if mtype == m.SESS_MOD_REQ:
                return bytes(m.session_modification_response(seq, 0, cause=m.CAUSE_NO_ASSOCIATION))
            return bytes(m.session_deletion_response(seq, 0, cause=m.CAUSE_NO_ASSOCIATION))
        if mtype == m.SESS_EST_REQ:
            return self._establish(seq, ies, copies)
        if mtype == m.SESS_MOD_REQ:
            s = self.sessions.get(pkt.seid)
            if s is None:
                return bytes(m.session_modification_response(seq, 0, cause=65))
            far = next(i for i in ies if i.ietype == 10)
            ohc = far.IE_list[-1].IE_list[-1]
            s["sgw"], s["sgw_teid"] = ohc.ipv4, ohc.TEID
            return bytes(m.session_modification_response(seq, s["cp_seid"]))
        if mtype == m.SESS_DEL_REQ:
            s = self.sessions.pop(pkt.seid, None)
            if s is None:
                return bytes(m.session_deletion_response(seq, 0, cause=65))
            return bytes(m.session_deletion_response(seq, s["cp_seid"], usage=self.usage.get(s["ue"], (0, 0))
                                                     if s["urr"] else None))
        return None

    def _establish(self, seq: int, ies, copies: int):
        fseid = next(i for i in ies if i.ietype == 57)
        pdrs = [i for i in ies if i.ietype == 1]
        ul = next(p for p in pdrs if p.IE_list[0].id == m.PDR_UL)
        pdi = next(i for i in ul.IE_list if i.ietype == 2)
        fteid = next(i for i in pdi.IE_list if i.ietype == 21)
        ue = next(i for i in pdi.IE_list if i.ietype == 93).ipv4
        fars = [i for i in ies if i.ietype == 3]
        dl = next(f for f in fars if f.IE_list[0].id == m.FAR_DL)
        ohc = dl.IE_list[-1].IE_list[-1]
        if ue in self.silent_ues:
            return None
        if ue in self.reject:
            return bytes(m.session_establishment_response(seq, fseid.seid, self.node_id,
                                                          cause=self.reject[ue], offending=21))
        dup = next((k for k, s in self.sessions.items() if s["cp_seid"] == fseid.seid), None)
        if dup is None:
            self._seid += 1
            dup = self._seid
            if fteid.CH:
                self._teid += 1
            self.sessions[dup] = {"cp_seid": fseid.seid, "ue": ue, "teid": self._teid if fteid.CH else fteid.TEID,
                                  "choose": bool(fteid.CH), "sgw": ohc.ipv4, "sgw_teid": ohc.TEID,
                                  "urr": any(i.ietype == 6 for i in ies),
                                  "qer": any(i.ietype == 7 for i in ies)}
        s = self.sessions[dup]
        rsp = bytes(m.session_establishment_response(
            seq if ue not in self.wrong_seq else (seq + 1000) & 0xFFFFFF, fseid.seid, self.node_id,
            up_seid=dup, up_addr=self.addr[0], created=(s["teid"], self.n3_addr) if s["choose"] else None))
        if ue in self.malformed:
            # the Created PDR / F-SEID IE claims more bytes than the message has
            rsp = rsp[:-3]
            rsp = rsp[:2] + struct.pack("!H", len(rsp) - 4) + rsp[4:]
        return rsp
