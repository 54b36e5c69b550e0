"""One PFCP session per bearer: establishment, modification, deletion (TS 29.244 7.5), a window of
requests in flight, and nothing left half-provisioned.

    node = Node(("10.0.0.2", 8805)); node.associate()
    sm = Sessions(node, SessionOptions(choose=True, urr=True), window=512)
    sm.establish(bearers)          # all or nothing: on any failure, the ones made are deleted
    ...                            # sm.sessions[i].teid: what the UPF chose for bearer i
    sm.delete()                    # usage reports in sm.sessions[i].usage

Every response is checked: its type (node.py), its Cause (a rejection raises PfcpRejected naming the
bearer, the message and the Cause), its header SEID (our CP SEID of that bearer), the UP F-SEID and,
with CHOOSE, the F-TEID the UPF allocated. The first failure stops new requests; the ones in flight
are answered or time out; then the sessions this call established are deleted and the error is raised
with what the cleanup did.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Iterable

from gtplab.pfcp import messages as m
from gtplab.pfcp.errors import PfcpError, PfcpMalformed, PfcpRejected
from gtplab.pfcp.node import Node


@dataclass
class Session:
    bearer: m.Bearer
    cp_seid: int
    up_seid: int | None = None
    teid: int | None = None            # the uplink F-TEID in force (given, or the UPF's choice)
    n3_addr: str | None = None         # the F-TEID's address (the UPF's N3 address; IPv6 for N3 over IPv6)
    usage: tuple | None = None         # (total, uplink, downlink) octets of the deletion's report
    sgw: int | None = None             # downlink outer destination in force
    sgw_teid: int | None = None
    pending_dl: tuple | None = None    # (sgw, sgw_teid) of a modification in flight

    def label(self) -> str:
        return self.bearer.label()


class Sessions:
    """The sessions of one run on one Node."""

    def __init__(self, node: Node, opts: m.SessionOptions, window: int = 256):
        if window < 1:
            raise ValueError("window must be >= 1")
        self.node, self.opts, self.window = node, opts, window
        self.sessions: dict[int, Session] = {}
        self._by_cp: dict[int, Session] = {}
        self._seid_base = ((os.getpid() & 0xFFFF) << 40) | ((int(time.time()) & 0xFF) << 32)
        self._est = m.establishment_template(node.node_id, node.addr, opts)
        self._est_more: dict[tuple[bool, bool], m.Template] = {}   # (ue6, sgw6): IPv4v6 sessions' and
                                                                  # N3-over-IPv6 ones', when the first comes
        self._opts = opts
        self._mod = m.modification_template(opts.access_instance)
        self._del = m.deletion_template()
        self.reestablished = 0
        node.seid_owner = self._by_cp.get
        node.up_seid_of = lambda cp: (self._by_cp[cp].up_seid if cp in self._by_cp else None)
        node.restart_handlers.append(self._on_restart)
        node.orphan_handler = self._orphan

    def _orphan(self, s: Session, r: m.Scanned) -> None:
        """A response for session s that matched no request in flight: if it established the
        session on the UPF, remember the UP SEID so that the cleanup deletes it."""
        if r.mtype == m.SESS_EST_RSP and r.cause == m.CAUSE_ACCEPTED and r.up_seid is not None \
                and s.up_seid is None:
            s.up_seid = r.up_seid

    # -- the window ----------------------------------------------------------------------------

    def _run(self, items: Iterable, start, finish) -> list[PfcpError]:
        """For each item: start(item) -> (seq, data, ctx) sent when the window has room;
        finish(ctx, scanned) on its response (raises PfcpError to fail it). Stops sending at the
        first error, lets the requests in flight end, returns the errors in order."""
        node, errors, inflight = self.node, [], [0]
        it = iter(items)

        def done(p, s):
            inflight[0] -= 1
            try:
                finish(p.ctx, s)
            except PfcpError as e:
                errors.append(e)

        def failed(e):
            inflight[0] -= 1
            errors.append(e)

        with node.lock:
            exhausted = False
            while True:
                while not errors and not exhausted and inflight[0] < self.window:
                    item = next(it, None)
                    if item is None:
                        exhausted = True
                        break
                    seq, data, ctx = start(item)
                    inflight[0] += 1
                    node.send(seq, data, ctx, done, failed)
                if inflight[0] == 0:
                    break
                try:
                    node.pump(node.timers.t1 / 4)
                except PfcpError as e:          # belongs to no request in flight
                    errors.append(e)
        return errors

    # -- establishment -------------------------------------------------------------------------

    def _start_est(self, b: m.Bearer):
        s = self.sessions.get(b.index)
        if s is None:
            s = Session(b, self._seid_base + b.index + 1)
            self.sessions[b.index] = s
            self._by_cp[s.cp_seid] = s
        s.up_seid = None
        seq = self.node.next_seq()
        if b.ue6 is None and b.sgw6 is None:
            data = self._est.render(seq=seq, cp_seid=s.cp_seid, ue=b.ue, sgw=b.sgw, sgw_teid=b.sgw_teid,
                                    teid=b.teid or 0)
        else:                   # IPv4v6 and/or N3 over IPv6: a template of its own, made once
            key = (b.ue6 is not None, b.sgw6 is not None)
            if key not in self._est_more:
                self._est_more[key] = m.establishment_template(self.node.node_id, self.node.addr, self._opts,
                                                               ue6=key[0], sgw6=key[1])
            data = self._est_more[key].render(seq=seq, cp_seid=s.cp_seid, ue=b.ue, sgw=b.sgw, sgw_teid=b.sgw_teid,
                                              teid=b.teid or 0, ue6=b.ue6 or 0, sgw6=b.sgw6 or 0)
        return seq, data, s

    def _check(self, s: Session, r: m.Scanned, what: str) -> None:
        if r.cause != m.CAUSE_ACCEPTED:
            off = f", offending IE type {r.offending_ie}" if r.offending_ie is not None else ""
            raise PfcpRejected(f"{s.label()}: UPF rejected the {what}: cause {m.cause_name(r.cause)}{off}",
                               cause=r.cause, message=what, bearer=s.bearer)
        if r.seid != s.cp_seid:
            raise PfcpMalformed(f"{s.label()}: {what} answered with header SEID {r.seid:#x}, "
                                f"not the session's CP SEID {s.cp_seid:#x}")

    def _finish_est(self, s: Session, r: m.Scanned) -> None:
        self._check(s, r, "session establishment request")
        if r.up_seid is None:
            raise PfcpMalformed(f"{s.label()}: session establishment response without UP F-SEID")
        s.up_seid = r.up_seid
        s.sgw, s.sgw_teid = s.bearer.sgw, s.bearer.sgw_teid
        if self.opts.choose:
            got = r.fteids.get(m.PDR_UL)
            if got is None:
                raise PfcpMalformed(f"{s.label()}: the UPF was asked to CHOOSE the uplink F-TEID and "
                                    "returned no Created PDR with an F-TEID for PDR 1")
            s.teid, s.n3_addr = got
            if s.bearer.sgw6 is not None:      # N3 over IPv6: the uplink goes to its IPv6 address
                s.n3_addr = r.fteids6.get(m.PDR_UL)
                if s.n3_addr is None:
                    raise PfcpMalformed(f"{s.label()}: the UPF was asked to CHOOSE an IPv6 F-TEID (CH, V6) and "
                                        "returned one without an IPv6 address for PDR 1")
        else:
            s.teid, s.n3_addr = s.bearer.teid, (self.opts.n3_addr6 if s.bearer.sgw6 is not None
                                                else self.opts.n3_addr)

    def establish(self, bearers: Iterable[m.Bearer]) -> list[Session]:
        """A session for every bearer, or none: see the module doc."""
        bearers = list(bearers)
        if self.opts.choose and self.node.ftup is False:
            raise PfcpError(f"UPF {self.node.upf[0]}:{self.node.upf[1]} does not allocate F-TEIDs (its UP "
                            "Function Features at association have FTUP 0): let gtplab give the TEIDs "
                            "(dut.pfcp.choose: auto or false, gtplab pfcp --no-choose) or enable F-TEID "
                            "allocation on the UPF")
        if not self.opts.choose and any(b.teid is None for b in bearers):
            raise ValueError("a bearer without TEID needs SessionOptions(choose=True)")
        errors = self._run(bearers, self._start_est, self._finish_est)
        if errors:
            made = [self.sessions[b.index] for b in bearers
                    if b.index in self.sessions and self.sessions[b.index].up_seid is not None]
            self._cleanup(errors, made, f"establishing {len(bearers)} session(s)")
        return [self.sessions[b.index] for b in bearers]

    def _cleanup(self, errors: list[PfcpError], made: list[Session], doing: str):
        note = ""
        if made:
            left = self._run(made, self._start_del, self._finish_del)
            for s in made:
                if s.up_seid is None:
                    self._forget(s)
            note = (f"; the {len(made)} session(s) established before it were deleted"
                    + (f" except {len(left)} ({left[0]})" if left else ""))
        for s in [s for s in list(self.sessions.values()) if s.up_seid is None]:
            self._forget(s)
        more = f" (and {len(errors) - 1} more error(s))" if len(errors) > 1 else ""
        e = errors[0]
        e.args = (f"PFCP, {doing}: {e.args[0]}{more}{note}",)
        raise e

    def _forget(self, s: Session) -> None:
        self.sessions.pop(s.bearer.index, None)
        self._by_cp.pop(s.cp_seid, None)

    # -- modification --------------------------------------------------------------------------

    def modify(self, changes: Iterable[tuple[int, int, int]]) -> None:
        """Point the downlink FAR of bearer index at (sgw address, sgw TEID), as at a handover."""
        changes = list(changes)
        for idx, _, _ in changes:
            if idx not in self.sessions or self.sessions[idx].up_seid is None:
                raise PfcpError(f"bearer {idx}: no session to modify")

        def start(ch):
            idx, sgw, sgw_teid = ch
            s = self.sessions[idx]
            seq = self.node.next_seq()
            s.pending_dl = (sgw, sgw_teid)
            return seq, self._mod.render(seq=seq, up_seid=s.up_seid, sgw=sgw, sgw_teid=sgw_teid), s

        def finish(s, r):
            self._check(s, r, "session modification request")
            s.sgw, s.sgw_teid = s.pending_dl
        errors = self._run(changes, start, finish)
        if errors:
            raise errors[0]

    # -- deletion ------------------------------------------------------------------------------

    def _start_del(self, s: Session):
        seq = self.node.next_seq()
        return seq, self._del.render(seq=seq, up_seid=s.up_seid), s

    def _finish_del(self, s: Session, r: m.Scanned) -> None:
        self._check(s, r, "session deletion request")
        if self.opts.urr:
            if m.URR_ID not in r.usage:
                raise PfcpMalformed(f"{s.label()}: URR {m.URR_ID} was created but the session "
                                    "deletion response has no Usage Report for it")
            s.usage = r.usage[m.URR_ID]
        s.up_seid = None

    def delete(self, indices: Iterable[int] | None = None) -> dict[int, tuple | None]:
        """Delete sessions (all by default); returns {bearer index: usage (total, ul, dl) or None}.
        Tries every one, then raises the first error."""
        todo = [self.sessions[i] for i in (indices if indices is not None else list(self.sessions))
                if i in self.sessions and self.sessions[i].up_seid is not None]
        errors: list[PfcpError] = []
        for k in range(0, len(todo), 4096):         # keep going after an error: try every session
            errors += self._run(todo[k:k + 4096], self._start_del, self._finish_del)
        out = {s.bearer.index: s.usage for s in todo}
        for s in todo:
            if s.up_seid is None:
                self._forget(s)
        if errors:
            more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
            e = errors[0]
            e.args = (f"PFCP, deleting {len(todo)} session(s): {e.args[0]}{more}",)
            raise e
        return out

    # -- UPF restart ---------------------------------------------------------------------------

    def _on_restart(self) -> None:
        """The UPF restarted (node.py saw a new Recovery Time Stamp): its sessions are gone.
        Establish every session again, with the same bearers; with CHOOSE the TEIDs may change
        (sessions[i].teid says which are in force)."""
        bearers = [s.bearer for s in self.sessions.values()]
        for s in self.sessions.values():
            s.up_seid = None
        self.establish(bearers)
        self.reestablished += len(bearers)
