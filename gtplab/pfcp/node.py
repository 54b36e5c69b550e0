"""The CP function's end of one Sx/N4 association: transport and node procedures (TS 29.244 6).

One socket, as an SMF has: bound to port 8805 of gtplab's N4 address (4.2.2: the port a PFCP entity
receives requests on; `port` 0 takes any free one, for tests). gtplab's own requests leave from it
too (4.2.2 lets the source port of a request be any port; SMFs use this one), and the UPF's answers
and its own requests arrive on it: a UPF that sends its Heartbeat Requests to the CP's address and
port 8805 (eUPF does, and drops the association after a few unanswered ones) reaches the node
whatever port gtplab's requests came from. Only datagrams from the UPF's address are read (others
are counted in counters["foreign"] and dropped); an answer goes to the address and port its request
came from.

Transport (6.4, 7.6): every request gets a sequence number (24 bits, wrapping, never 0 here) and
waits in `pending` until its response; a request unanswered after T1 is sent again, byte for byte,
up to N1 times, then fails with PfcpTimeout naming what it was for. Any number of requests may be in
flight (sessions.py keeps a window of them). A response that matches no request in flight is an
error (PfcpSequenceError), except a second answer to a request we retransmitted (the UPF answered
both copies).

Requests from the UPF are answered here: Heartbeat (6.2.2, with our Recovery Time Stamp),
Association Setup (6.2.6: a UPF may set the association up itself), Update, Release (6.2.8: the
UPF's sessions are gone; check() then says so), Session Report (7.5.8) and Node Report (7.4.5),
both with a Cause and kept in `reports`.

Node procedures: association setup and release, heartbeats both ways. A UPF restart shows as a
Recovery Time Stamp different from the one it gave at association (6.2.2, 6.2.6), in its Heartbeat
Request, in its answer to ours, or in an Association Setup Request from the UPF: its sessions are
gone, so poll() sets the association up again (unless the UPF just did) and calls the restart
handlers (sessions.py re-establishes every session).

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
from gtplab.pfcp.errors import (PfcpBindError, PfcpError, PfcpMalformed, PfcpRejected, PfcpSequenceError,
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
    __slots__ = ("seq", "data", "mtype", "deadline", "tries", "ctx", "on_done", "on_error", "timers")

    def __init__(self, seq, data, mtype, deadline, ctx, on_done, on_error, timers=None):
        self.seq, self.data, self.mtype, self.deadline = seq, data, mtype, deadline
        self.tries, self.ctx, self.on_done, self.on_error = 1, ctx, on_done, on_error
        self.timers = timers            # this request's T1/N1 when not the node's


@dataclass
class Report:
    """A Session Report or Node Report Request the UPF sent, as answered."""
    kind: str                       # "session" | "node"
    at: float                       # time.time() when it arrived
    seq: int
    types: list[str]                # Report Type / Node Report Type flags (DLDR, USAR, ERIR, UPFR ...)
    cause: int                      # what we answered
    bearer: str | None = None       # the session's bearer (session reports), None if unknown
    usage: dict | None = None       # URR ID -> (total, uplink, downlink) octets (USAR)
    raw: bytes = b""

    def as_dict(self) -> dict:
        return {"kind": self.kind, "at": round(self.at, 3), "types": self.types, "cause": self.cause,
                "bearer": self.bearer, "usage": {str(k): list(v) for k, v in (self.usage or {}).items()}}


def _label(ctx) -> str:
    if ctx is None:
        return "the node"
    return ctx.label() if hasattr(ctx, "label") else str(ctx)


_REQUESTS = {m.HEARTBEAT_REQ, m.ASSOC_SETUP_REQ, m.ASSOC_UPDATE_REQ, m.ASSOC_RELEASE_REQ,
             m.NODE_REPORT_REQ, m.SESS_EST_REQ, m.SESS_MOD_REQ, m.SESS_DEL_REQ, m.SESS_REPORT_REQ, 3, 14}


class Node:
    """gtplab as the CP function towards one UPF at upf (host, port)."""

    def __init__(self, upf: tuple[str, int], node_id: str | None = None, local: str | None = None,
                 port: int = m.PORT, timers: Timers | None = None):
        """upf: the UPF's N4 (host, port). local: gtplab's N4 address (default: the one the route
        to the UPF picks); port: where the node listens on it (8805; 0: any free port)."""
        try:
            self.upf = (socket.gethostbyname(upf[0]), int(upf[1]))
        except OSError as e:
            raise PfcpError(f"PFCP: UPF address {upf[0]}: {e.strerror or e}") from None
        self.timers = timers or Timers()
        self.sock = _bind(local or _route_source(self.upf), port)
        self.sock.setblocking(False)
        self.addr, self.port = self.sock.getsockname()
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
        self._restart_associated = False           # the UPF set the association up itself
        self._restart_ts: int | None = None        # the Recovery Time Stamp of the restart pending
        self.restarts = 0
        self.restarts_seen: list[str] = []         # how each restart showed (which message)
        self.released_by_upf = False
        self.reports: list[Report] = []            # the UPF's Session and Node Reports
        self.warnings: list[str] = []              # what did not fail the run but should be read
        self.max_in_flight = 0
        self.counters = {"sent": 0, "retransmitted": 0, "received": 0, "heartbeats_answered": 0,
                         "heartbeats_sent": 0, "foreign": 0}
        self._last_tx = time.monotonic()
        self._next_hb = time.monotonic() + self.timers.heartbeat
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.background_error: Exception | None = None

    # -- transport ---------------------------------------------------------------------------

    def next_seq(self) -> int:
        self._seq = self._seq % 0xFFFFFF + 1
        return self._seq

    def send(self, seq: int, data: bytes, ctx=None, on_done=None, on_error=None,
             timers: Timers | None = None) -> None:
        """Send request data (whose sequence number is seq) and keep it until answered (T1 and N1:
        timers', else the node's)."""
        t = timers or self.timers
        self.pending[seq] = Pending(seq, data, data[1], time.monotonic() + t.t1, ctx, on_done, on_error,
                                    timers)
        if len(self.pending) > self.max_in_flight:
            self.max_in_flight = len(self.pending)
        self._tx(data)
        self.counters["sent"] += 1

    def _tx(self, data: bytes, to: tuple[str, int] | None = None) -> None:
        """Send data to the UPF's N4 address (or to `to`: where a request of the UPF came from)."""
        to = to or self.upf
        try:
            self.sock.sendto(data, to)
        except BlockingIOError:
            select.select([], [self.sock], [], self.timers.t1)
            self.sock.sendto(data, to)
        except OSError as e:
            if e.errno != errno.ECONNREFUSED:      # an ICMP port unreachable from a previous send
                raise PfcpError(f"PFCP: sending to UPF {to[0]}:{to[1]}: {e.strerror}") from None
            self.sock.sendto(data, to)
        self._last_tx = time.monotonic()

    def _fail(self, p: Pending, exc: PfcpError) -> None:
        if p.on_error is None:
            raise exc
        p.on_error(exc)

    def _retransmit(self, now: float) -> None:
        for p in [p for p in self.pending.values() if p.deadline <= now]:
            t = p.timers or self.timers
            if p.tries > t.n1:
                del self.pending[p.seq]
                self._fail(p, PfcpTimeout(
                    f"{_label(p.ctx)}: no answer from UPF {self.upf[0]}:{self.upf[1]} to "
                    f"{m.message_name(p.mtype)} (seq {p.seq}) after {p.tries} send{'s' if p.tries > 1 else ''}, "
                    f"T1 {t.t1:g} s, N1 {t.n1}"))
                continue
            p.tries += 1
            p.deadline = now + t.t1
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
                data, src = self.sock.recvfrom(65536)
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
            if src[0] != self.upf[0]:
                self.counters["foreign"] += 1      # not the UPF: 8805 is a well-known port
                continue
            n += 1
            self._handle(data, src)
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

    def _handle(self, data: bytes, src: tuple[str, int]) -> None:
        self.counters["received"] += 1
        try:
            mtype, seq, seid, _ = m.parse_header(data)
        except PfcpMalformed as e:
            raise PfcpMalformed(f"malformed message from UPF {self.upf[0]}:{self.upf[1]}: {e} "
                                f"(first bytes {data[:16].hex()})") from None
        if mtype in _REQUESTS:
            self._answer(mtype, seq, seid, data, src)
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
        s.raw = data
        if s.recovery_ts is not None and mtype == m.HEARTBEAT_RSP:
            self._check_recovery(s.recovery_ts, "its Heartbeat Response")
        if p.on_done is not None:
            p.on_done(p, s)

    def _answer(self, mtype: int, seq: int, seid, data: bytes, src: tuple[str, int]) -> None:
        try:
            s = m.scan(data)
        except PfcpMalformed:
            return                 # a request we cannot read: no answer, the UPF will retransmit
        if mtype == m.HEARTBEAT_REQ:
            self._tx(bytes(m.heartbeat_response(seq, self.recovery_ts)), src)
            self.counters["heartbeats_answered"] += 1
            if s.recovery_ts is not None:
                self._check_recovery(s.recovery_ts, "its Heartbeat Request")
        elif mtype == m.ASSOC_SETUP_REQ:
            self._tx(bytes(m.cp_association_setup_response(seq, self.node_id, self.recovery_ts)), src)
            if s.up_features is not None:
                self.up_features = s.up_features
            if s.recovery_ts is not None:
                self._check_recovery(s.recovery_ts, "its Association Setup Request", associated=True)
            self.associated = True
        elif mtype == m.ASSOC_UPDATE_REQ:
            self._tx(bytes(m.association_update_response(seq, self.node_id)), src)
        elif mtype == m.ASSOC_RELEASE_REQ:
            self._tx(bytes(m.association_release_response(seq, self.node_id)), src)
            if self.associated:
                self.released_by_upf = True
            self.associated = False
        elif mtype == m.SESS_REPORT_REQ:
            up = self.up_seid_of(seid) if (self.up_seid_of and seid is not None) else None
            cause = m.CAUSE_ACCEPTED if up is not None else m.CAUSE_SESSION_NOT_FOUND
            self._tx(bytes(m.session_report_response(seq, up or 0, cause)), src)
            if self._seen_report(seq, data):
                return
            owner = self.seid_owner(seid) if (self.seid_owner and seid is not None) else None
            self.reports.append(Report("session", time.time(), seq, m.flag_names(s.report_type, m.REPORT_TYPES),
                                       cause, _label(owner) if owner is not None else None,
                                       dict(s.usage) or None, bytes(data)))
            for h in self.report_handlers:
                h(s)
        elif mtype == m.NODE_REPORT_REQ:
            self._tx(bytes(m.node_report_response(seq, self.node_id)), src)
            if not self._seen_report(seq, data):
                self.reports.append(Report("node", time.time(), seq,
                                           m.flag_names(s.node_report_type, m.NODE_REPORT_TYPES),
                                           m.CAUSE_ACCEPTED, raw=bytes(data)))

    def _seen_report(self, seq: int, data: bytes) -> bool:
        """A report the UPF sent again (our answer was lost): answered again, kept once."""
        return any(r.seq == seq and r.raw == data for r in self.reports[-64:])

    def _check_recovery(self, ts: int, via: str, associated: bool = False) -> None:
        """ts: the UPF's Recovery Time Stamp in a message (via). associated: the message set the
        association up again (the UPF's own Association Setup Request), so only the sessions are
        to be established again."""
        if self.upf_ts is None:
            self.upf_ts = ts
        elif ts != self.upf_ts:
            if self.restart_detected and ts == self._restart_ts:
                return             # the same restart again (eUPF heartbeats before it answers the setup)
            self.restart_detected = True
            self._restart_ts = ts
            self.restarts_seen.append(via)
            if associated:
                self.upf_ts = ts
                self._restart_associated = True

    # -- blocking requests ---------------------------------------------------------------------

    def request(self, data: bytes, seq: int, ctx=None, timers: Timers | None = None) -> m.Scanned:
        """Send one request and wait for its answer (T1/N1 apply, the node's or `timers`); raises
        its error."""
        box: dict = {}
        with self.lock:
            self.send(seq, data, ctx, on_done=lambda p, s: box.setdefault("s", s),
                      on_error=lambda e: box.setdefault("e", e), timers=timers)
            while not box:
                self.pump((timers or self.timers).t1 / 4)
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
        self.released_by_upf = False
        self.restart_detected = self._restart_associated = False

    @property
    def ftup(self) -> bool | None:
        """Whether the UPF said it allocates F-TEIDs (FTUP); None: it sent no UP Function Features."""
        if not self.up_features:
            return None
        return bool(self.up_features[0] & m.FTUP)

    def release(self, wait: float | None = None) -> None:
        """Association Release (6.2.7). wait: seconds to wait for its answer, the request sent once
        (for a UPF known to ignore it); None: T1 and N1 as for every request."""
        seq = self.next_seq()
        s = self.request(bytes(m.association_release_request(seq, self.node_id)), seq,
                         timers=None if wait is None else Timers(t1=wait, n1=0))
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
        association up again and run the restart handlers. The wait is outside the lock: a
        thread polling in the background must not hold it while idle, or a request from another
        thread waits for the lock (an RLock is not fair: the poller took it again at once, and a
        release or a session delete waited 5-40 s behind it)."""
        if timeout > 0:
            try:                                  # read without the lock: another thread may change it
                due = self._next_deadline()
            except RuntimeError:
                due = 0.0
            if self.timers.heartbeat and self.associated:
                due = min(due, self._next_hb)
            wait = min(timeout, due - time.monotonic())
            if wait > 0:
                try:
                    select.select([self.sock], [], [], wait)
                except (OSError, ValueError):
                    pass                          # closed under us: pump below reports it
        with self.lock:
            self.pump(0)
            if self.timers.heartbeat and time.monotonic() >= self._next_hb and self.associated:
                self.heartbeat()
            if self.restart_detected:
                self.restarts += 1
                if self._restart_associated:      # the UPF set the association up itself
                    self.restart_detected = self._restart_associated = False
                else:
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
        """Raise what the background thread failed with, if anything, or that the UPF released the
        association (its sessions are gone, TS 29.244 6.2.8)."""
        if self.background_error is not None:
            raise self.background_error
        if self.released_by_upf:
            raise PfcpError(f"UPF {self.upf[0]}:{self.upf[1]} released the association (it sent an "
                            "Association Release Request): its sessions are gone (TS 29.244 6.2.8)")

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        self.sock.close()


def _route_source(upf: tuple[str, int]) -> str:
    """The address the kernel's route to the UPF picks as source (a UDP connect sends nothing)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect(upf)
        return s.getsockname()[0]
    except OSError as e:
        raise PfcpError(f"PFCP: no route to UPF {upf[0]}:{upf[1]}: {e.strerror or e}") from None
    finally:
        s.close()


def _bind(addr: str, port: int) -> socket.socket:
    """The node's socket on addr:port, or one line saying why not and what to do."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
        s.bind((addr, port))
    except OSError as e:
        s.close()
        hint = {errno.EADDRINUSE: " (another PFCP node, or `pgwu pfcp`, listens there)",
                errno.EADDRNOTAVAIL: " (no interface of this host has that address: dut.pfcp.local, --local)"
                }.get(e.errno, "")
        raise PfcpBindError(f"PFCP: cannot listen on {addr}:{port}, gtplab's N4 address: {e.strerror or e}"
                            f"{hint}; choose another port with dut.pfcp.listen_port or gtplab pfcp "
                            "--listen-port N (0: any free port, which a UPF that sends its requests to "
                            "port 8805 does not reach)") from None
    return s
