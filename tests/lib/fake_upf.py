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
"""

from __future__ import annotations

import socket
import struct
import threading

from gtplab.pfcp import messages as m

_next_host = [10]


def loopback_addr() -> str:
    """127.0.0.N, a different N per fake in this process (with its ephemeral port, unique)."""
    _next_host[0] = _next_host[0] % 250 + 1
    return f"127.0.0.{_next_host[0] + 1}"


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
        self._teid = teid_base
        self._seid = 0x1000
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._fast_est = self._fast_del = None
        self._thread = threading.Thread(target=self._loop, name="fake-upf", daemon=True)
        self._thread.start()

    # -- control from the test -----------------------------------------------------------------

    def restart(self) -> None:
        """A restart: the sessions are lost and the Recovery Time Stamp changes."""
        with self._lock:
            self.sessions.clear()
            self.recovery_ts += 7

    def send_heartbeat(self, seq: int = 4242) -> None:
        """A Heartbeat Request to the CP (the last peer); its answer lands in hb_answers."""
        self.sock.sendto(bytes(m.heartbeat_request(seq, self.recovery_ts)), self.peer)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
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
        if mtype % 2 == 0 and mtype < 50 or mtype in (51, 53, 55, 57):
            if mtype == m.HEARTBEAT_RSP:
                self.hb_answers.append(pkt.payload.IE_list[0].timestamp)
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
            return bytes(m.association_setup_response(seq, self.node_id, self.recovery_ts, ftup=self.ftup))
        if mtype == m.ASSOC_RELEASE_REQ:
            return bytes(m.association_release_response(seq, self.node_id))
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
