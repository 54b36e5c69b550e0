"""The CP function's end of one Sx/N4 association: transport and node procedures (TS 29.244 6).

Transport (6.4, 7.6): every request gets a sequence number (24 bits, wrapping, never 0 here) and
waits in `pending` until its response; a request unanswered after T1 is sent again, byte for byte,
up to N1 times, then fails with PfcpTimeout naming what it was for. Any number of requests may be in
flight (sessions.py keeps a window of them). A response that matches no request in flight is an
error (PfcpSequenceError), except a second answer to a request we retransmitted (the UPF answered
both copies). Requests from the UPF are answered here: Heartbeat (6.2.2), Association Setup and
Release, Session Report (with Cause accepted).

Node procedures: association setup and release, heartbeats both ways. A UPF restart shows as a
Recovery Time Stamp different from the one it gave at association (6.2.2, 6.2.6): its sessions are
gone, so poll() sets the association up again and calls the restart handlers (sessions.py
re-establishes every session).

One thread at a time drives the socket (`lock`): the bulk procedures hold it while they run; between
them start() runs a thread that answers the UPF and sends heartbeats. Timers are data (Timers).
"""

from __future__ import annotations

import errno
import select
import socket
import threading
import time
from dataclasses import dataclass
from typing import Callable

from gtplab.pfcp import messages as m
from gtplab.pfcp.errors import (PfcpError, PfcpMalformed, PfcpRejected, PfcpSequenceError,
                                PfcpTimeout)


@dataclass
class Timers:
    """T1 (s): response timer; N1: retransmissions (TS 29.244 6.4 leaves both to configuration;
    3 s / 3 are what open5gs and free5gc default to). heartbeat (s): our Heartbeat Request interval
    while idle (0: none)."""
    t1: float = 3.0
    n1: int = 3
    heartbeat: float = 10.0


class Pending:
    __slots__ = ("seq", "data", "mtype", "deadline", "tries", "ctx", "on_done", "on_error")

    def __init__(self, seq, data, mtype, deadline, ctx, on_done, on_error):
        self.seq, self.data, self.mtype, self.deadline = seq, data, mtype, deadline
        self.tries, self.ctx, self.on_done, self.on_error = 1, ctx, on_done, on_error


def _label(ctx) -> str:
    if ctx is None:
        return "the node"
    return ctx.label() if hasattr(ctx, "label") else str(ctx)


_REQUESTS = {m.HEARTBEAT_REQ, m.ASSOC_SETUP_REQ, m.ASSOC_UPDATE_REQ, m.ASSOC_RELEASE_REQ,
             m.NODE_REPORT_REQ, m.SESS_EST_REQ, m.SESS_MOD_REQ, m.SESS_DEL_REQ, m.SESS_REPORT_REQ, 3, 14}


class Node:
    """gtplab as the CP function towards one UPF at upf (host, port)."""

    def __init__(self, upf: tuple[str, int], node_id: str | None = None, local: tuple[str, int] | None = None,
                 timers: Timers | None = None):
        try:
            self.upf = (socket.gethostbyname(upf[0]), int(upf[1]))
        except OSError as e:
            raise PfcpError(f"PFCP: UPF address {upf[0]}: {e.strerror or e}") from None
        self.timers = timers or Timers()
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
            self.sock.bind(local or ("0.0.0.0", 0))
            self.sock.connect(self.upf)
        except OSError as e:
            self.sock.close()
            raise PfcpError(f"PFCP: cannot use UPF {self.upf[0]}:{self.upf[1]}"
                            f"{' from ' + str(local) if local else ''}: {e.strerror or e}") from None
        self.sock.setblocking(False)
        self.addr = self.sock.getsockname()[0]
        self.node_id = node_id or self.addr
        m.node_id_ie(self.node_id)                 # ValueError now rather than in the first message
        self.recovery_ts = m.recovery_timestamp()
        self.upf_ts: int | None = None             # the UPF's Recovery Time Stamp at association
        self.upf_node_id: bytes | None = None
        self.up_features: bytes | None = None      # UP Function Features (8.2.25) at association
        self.associated = False
        self.pending: dict[int, Pending] = {}
        self._seq = 0
        self._retransmitted: dict[int, float] = {}  # seq -> time: late duplicate answers are fine
        self.lock = threading.RLock()
        self.restart_handlers: list[Callable[[], None]] = []
        self.report_handlers: list[Callable[[m.Scanned], None]] = []
        self.seid_owner: Callable[[int], object] | None = None   # CP SEID -> bearer (for errors)
        self.up_seid_of: Callable[[int], int | None] | None = None
        self.orphan_handler: Callable[[object, m.Scanned], None] | None = None
        self.restart_detected = False
        self.restarts = 0
        self.max_in_flight = 0
        self.counters = {"sent": 0, "retransmitted": 0, "received": 0, "heartbeats_answered": 0,
                         "heartbeats_sent": 0}
        self._last_tx = time.monotonic()
        self._next_hb = time.monotonic() + self.timers.heartbeat
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.background_error: Exception | None = None

    # -- transport ---------------------------------------------------------------------------

    def next_seq(self) -> int:
        self._seq = self._seq % 0xFFFFFF + 1
        return self._seq

    def send(self, seq: int, data: bytes, ctx=None, on_done=None, on_error=None) -> None:
        """Send request data (whose sequence number is seq) and keep it until answered."""
        self.pending[seq] = Pending(seq, data, data[1], time.monotonic() + self.timers.t1, ctx,
                                    on_done, on_error)
        if len(self.pending) > self.max_in_flight:
            self.max_in_flight = len(self.pending)
        self._tx(data)
        self.counters["sent"] += 1

    def _tx(self, data: bytes) -> None:
        try:
            self.sock.send(data)
        except BlockingIOError:
            select.select([], [self.sock], [], self.timers.t1)
            self.sock.send(data)
        except OSError as e:
            if e.errno != errno.ECONNREFUSED:      # an ICMP port unreachable from a previous send
                raise PfcpError(f"PFCP: sending to UPF {self.upf[0]}:{self.upf[1]}: {e.strerror}") from None
            self.sock.send(data)
        self._last_tx = time.monotonic()

    def _fail(self, p: Pending, exc: PfcpError) -> None:
        if p.on_error is None:
            raise exc
        p.on_error(exc)

    def _retransmit(self, now: float) -> None:
        for p in [p for p in self.pending.values() if p.deadline <= now]:
            if p.tries > self.timers.n1:
                del self.pending[p.seq]
                self._fail(p, PfcpTimeout(
                    f"{_label(p.ctx)}: no answer from UPF {self.upf[0]}:{self.upf[1]} to "
                    f"{m.message_name(p.mtype)} (seq {p.seq}) after {p.tries} sends, "
                    f"T1 {self.timers.t1:g} s, N1 {self.timers.n1}"))
                continue
            p.tries += 1
            p.deadline = now + self.timers.t1
            self._retransmitted[p.seq] = now
            self.counters["retransmitted"] += 1
            try:
                self._tx(p.data)
            except ConnectionRefusedError:
                pass                               # counted as unanswered; the timer decides

    def pump(self, timeout: float = 0.0) -> int:
        """Read and handle what has arrived (waiting up to timeout for the first datagram), then
        retransmit what is due. Returns the number of datagrams handled. Raises the errors that
        belong to no request in flight (sequence numbers, undecodable headers); errors of a
        request in flight go to its on_error."""
        n = 0
        while True:
            try:
                data = self.sock.recv(65536)
            except BlockingIOError:
                if n or timeout <= 0:
                    break
                wait = min(timeout, self._next_deadline() - time.monotonic())
                if wait > 0:
                    select.select([self.sock], [], [], wait)
                timeout = 0
                continue
            except ConnectionRefusedError:
                # nothing listens at the UPF's address (ICMP port unreachable): the T1 timer decides
                continue
            n += 1
            self._handle(data)
        now = time.monotonic()
        if self.pending:
            self._retransmit(now)
        if len(self._retransmitted) > 4096 or (self._retransmitted and not self.pending):
            horizon = now - self.timers.t1 * (self.timers.n1 + 1)
            self._retransmitted = {s: t for s, t in self._retransmitted.items() if t > horizon}
        return n

    def _next_deadline(self) -> float:
        if not self.pending:
            return time.monotonic() + 3600
        return min(p.deadline for p in self.pending.values()) if len(self.pending) < 64 else \
            time.monotonic() + self.timers.t1 / 8

    def _handle(self, data: bytes) -> None:
        self.counters["received"] += 1
        try:
            mtype, seq, seid, _ = m.parse_header(data)
        except PfcpMalformed as e:
            raise PfcpMalformed(f"malformed message from UPF {self.upf[0]}:{self.upf[1]}: {e} "
                                f"(first bytes {data[:16].hex()})") from None
        if mtype in _REQUESTS:
            self._answer(mtype, seq, seid, data)
            return
        p = self.pending.pop(seq, None)
        if p is None:
            if seq in self._retransmitted:
                return                                        # answer to a copy we sent again
            owner = self.seid_owner(seid) if (seid is not None and self.seid_owner) else None
            if owner is not None and self.orphan_handler is not None:
                try:
                    self.orphan_handler(owner, m.scan(data))   # e.g. the UP SEID, for the cleanup
                except PfcpMalformed:
                    pass
            raise PfcpSequenceError(
                f"{_label(owner) + ': ' if owner is not None else ''}UPF sent {m.message_name(mtype)} "
                f"with sequence number {seq}, which matches no request in flight"
                + (f" (in flight: {len(self.pending)}, e.g. seq {next(iter(self.pending))})"
                   if self.pending else ""))
        if mtype == m.VERSION_NOT_SUPPORTED:
            self._fail(p, PfcpRejected(f"{_label(p.ctx)}: UPF answered {m.message_name(p.mtype)} with "
                                       "Version Not Supported (it does not speak PFCP version 1)",
                                       message=m.message_name(p.mtype), bearer=p.ctx))
            return
        if mtype != p.mtype + 1:
            self._fail(p, PfcpMalformed(f"{_label(p.ctx)}: UPF answered {m.message_name(p.mtype)} "
                                        f"(seq {seq}) with {m.message_name(mtype)}"))
            return
        try:
            s = m.scan(data)
        except PfcpMalformed as e:
            self._fail(p, PfcpMalformed(f"{_label(p.ctx)}: malformed {e}"))
            return
        if s.recovery_ts is not None:
            self._check_recovery(s.recovery_ts)
        if p.on_done is not None:
            p.on_done(p, s)

    def _answer(self, mtype: int, seq: int, seid, data: bytes) -> None:
        try:
            s = m.scan(data)
        except PfcpMalformed:
            return                 # a request we cannot read: no answer, the UPF will retransmit
        if mtype == m.HEARTBEAT_REQ:
            self._tx(bytes(m.heartbeat_response(seq, self.recovery_ts)))
            self.counters["heartbeats_answered"] += 1
            if s.recovery_ts is not None:
                self._check_recovery(s.recovery_ts)
        elif mtype == m.ASSOC_SETUP_REQ:
            self._tx(bytes(m.association_setup_response(seq, self.node_id, self.recovery_ts)))
            self.associated = True
            if s.recovery_ts is not None:
                self._check_recovery(s.recovery_ts)
        elif mtype == m.ASSOC_RELEASE_REQ:
            self._tx(bytes(m.association_release_response(seq, self.node_id)))
            self.associated = False
        elif mtype == m.SESS_REPORT_REQ:
            up = self.up_seid_of(seid) if (self.up_seid_of and seid is not None) else None
            cause = m.CAUSE_ACCEPTED if up is not None else 65     # 65: Session context not found
            rsp = m.header(m.SESS_REPORT_RSP, seq, up or 0) / m.sp.PFCPSessionReportResponse(
                IE_list=[m.sp.IE_Cause(cause=cause)])
            self._tx(bytes(rsp))
            for h in self.report_handlers:
                h(s)
        elif mtype == m.NODE_REPORT_REQ:
            rsp = m.header(m.NODE_REPORT_RSP, seq) / m.sp.PFCPNodeReportResponse(
                IE_list=[m.node_id_ie(self.node_id), m.sp.IE_Cause(cause=m.CAUSE_ACCEPTED)])
            self._tx(bytes(rsp))

    def _check_recovery(self, ts: int) -> None:
        if self.upf_ts is None:
            self.upf_ts = ts
        elif ts != self.upf_ts:
            self.restart_detected = True

    # -- blocking requests ---------------------------------------------------------------------

    def request(self, data: bytes, seq: int, ctx=None) -> m.Scanned:
        """Send one request and wait for its answer (T1/N1 apply); raises its error."""
        box: dict = {}
        with self.lock:
            self.send(seq, data, ctx, on_done=lambda p, s: box.setdefault("s", s),
                      on_error=lambda e: box.setdefault("e", e))
            while not box:
                self.pump(self.timers.t1 / 4)
        if "e" in box:
            raise box["e"]
        return box["s"]

    def _check_cause(self, s: m.Scanned, what: str) -> None:
        if s.cause != m.CAUSE_ACCEPTED:
            raise PfcpRejected(f"UPF {self.upf[0]}:{self.upf[1]} rejected {what}: cause "
                               f"{m.cause_name(s.cause)}", cause=s.cause, message=what)

    def associate(self) -> None:
        """Association Setup (6.2.6): Node ID and our Recovery Time Stamp; the UPF's goes in upf_ts."""
        seq = self.next_seq()
        s = self.request(bytes(m.association_setup_request(seq, self.node_id, self.recovery_ts)), seq)
        self._check_cause(s, "association setup request")
        if s.recovery_ts is None:
            raise PfcpMalformed("association setup response without a Recovery Time Stamp (mandatory, 7.4.4.2)")
        self.upf_ts = s.recovery_ts
        self.upf_node_id = s.node_id
        self.up_features = s.up_features
        self.associated = True
        self.restart_detected = False

    @property
    def ftup(self) -> bool | None:
        """Whether the UPF said it allocates F-TEIDs (FTUP); None: it sent no UP Function Features."""
        if not self.up_features:
            return None
        return bool(self.up_features[0] & m.FTUP)

    def release(self) -> None:
        seq = self.next_seq()
        s = self.request(bytes(m.association_release_request(seq, self.node_id)), seq)
        self._check_cause(s, "association release request")
        self.associated = False

    def heartbeat(self) -> int:
        """One Heartbeat Request; returns the UPF's Recovery Time Stamp (a change flags a restart)."""
        seq = self.next_seq()
        s = self.request(bytes(m.heartbeat_request(seq, self.recovery_ts)), seq)
        self.counters["heartbeats_sent"] += 1
        if s.recovery_ts is None:
            raise PfcpMalformed("heartbeat response without a Recovery Time Stamp (mandatory, 7.4.2.2)")
        self._next_hb = time.monotonic() + self.timers.heartbeat
        return s.recovery_ts

    def poll(self, timeout: float = 0.1) -> None:
        """Idle duty: answer the UPF, send a heartbeat when due, and after a UPF restart set the
        association up again and run the restart handlers."""
        with self.lock:
            self.pump(timeout)
            if self.timers.heartbeat and time.monotonic() >= self._next_hb and self.associated:
                self.heartbeat()
            if self.restart_detected:
                self.restarts += 1
                self.associate()
                for h in self.restart_handlers:
                    h()

    def start(self, interval: float = 0.05) -> None:
        """poll() in a background thread until close(); its first error is kept in background_error
        (and the thread stops)."""
        def run():
            while not self._stop.is_set():
                try:
                    self.poll(interval)
                except Exception as e:                  # noqa: BLE001 -- reported by check()
                    self.background_error = e
                    return
        self._thread = threading.Thread(target=run, name="pfcp-node", daemon=True)
        self._thread.start()

    def check(self) -> None:
        """Raise what the background thread failed with, if anything."""
        if self.background_error is not None:
            raise self.background_error

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        self.sock.close()
