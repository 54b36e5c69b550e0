"""Policing accuracy (issue 25 item 1, RFC 7640's approach): per session a QER with its own MBR,
offered load swept below and above it, uplink and downlink at once, all sessions at once
(isolation: each is held to its own MBR); and a session whose gate is closed.

Criteria (criteria.policing): at <= 0.99 x MBR nothing is lost; above the MBR the delivered L3 bit
rate (the UE's IP packets, TS 29.244 8.2.8) is within +-1 % of the MBR, measured between two
readings of the generator's per-stream counters in the steady part of the trial (from WARM_S after
the start to 0.2 s before its end: a token bucket's initial burst is outside the window); a closed
gate drops every packet. Isolation (criteria.isolation): the last session at 2 x its MBR delivers
the same rate (+-1 %) with the other sessions at 2 x theirs as alone (a first trial with it alone). The engine paces each stream in the kernel and sends at most 128 frames
back to back when it was held up (traffic/engine/pacing.py MAX_BURST): the offered burst size.
"""

from __future__ import annotations

import time

from gtplab.upftests import criteria as C
from gtplab.upftests.harness import Unsupported, Upf, inner_len

DEFAULT_MBRS_MBPS = (2, 3, 4, 5)       # x 2 x 2 directions: ~7 kpps a direction at 512 B
DEFAULT_FACTORS = (0.5, 0.99, 1.5, 2.0)
DURATION_S = 3.0
WARM_S = 1.0
GATE_PPS = 1000
ISOLATION_FACTOR = 2.0    # the last session at this load alone first: its rate beside the others must not move


def run(upf: Upf, sizes=(512,), factors=DEFAULT_FACTORS, mbrs_mbps=DEFAULT_MBRS_MBPS,
        duration: float = DURATION_S) -> list[dict]:
    cases = []
    sessions = []
    try:
        for k, mbr in enumerate(mbrs_mbps):
            kbps = int(mbr * 1000)
            sessions.append((upf.establish(upf.rules(k, mbr_kbps=(kbps, kbps))), mbr * 1e6))
    except Unsupported as e:
        return [{"case_id": "policing-mbr", "kind": "policing", "verdict": "not supported", "why": str(e),
                 "cause": e.cause}]
    alone = {} if len(sessions) < 2 else {c["direction"]: c for c in
                                          _trial(upf, sessions[-1:], sizes[0], ISOLATION_FACTOR, duration)}
    for size in sizes:
        for f in factors:
            cases += _trial(upf, sessions, size, f, duration)
    cases += _isolation(alone, cases, sessions[-1][0].index, sizes[0])
    for s, _ in sessions:
        upf.delete(s)
    cases += _gate(upf, sizes[0])
    return cases


def _trial(upf: Upf, sessions, size: int, f: float, duration: float) -> list[dict]:
    """Every session of sessions at f x its MBR, both directions at once, for duration s."""
    streams, meta, cases = [], {}, []
    for s, mbr in sessions:
        for d in ("uplink", "downlink"):
            l3 = inner_len(size, d)
            pps = f * mbr / (8 * l3)
            st = upf.ul_stream(s, size, pps) if d == "uplink" else upf.dl_stream(s, size, pps)
            streams.append(st)
            meta[s.pg_ul if d == "uplink" else s.pg_dl] = (s, d, mbr, l3, pps)
    ports = upf.start(streams, duration=duration)
    t_start = time.monotonic()
    time.sleep(WARM_S)
    a, ta = upf.flow(), time.monotonic()
    time.sleep(max(0.1, duration - WARM_S - 0.2 - (ta - t_start - WARM_S)))
    b, tb = upf.flow(), time.monotonic()
    upf.wait(ports)
    end = upf.flow()
    for pg, (s, d, mbr, l3, pps) in meta.items():
        tx, rx = end.get(pg, (0, 0))
        win = b.get(pg, (0, 0))[1] - a.get(pg, (0, 0))[1]
        delivered = win * l3 * 8 / (tb - ta)
        offered = (b.get(pg, (0, 0))[0] - a.get(pg, (0, 0))[0]) * l3 * 8 / (tb - ta)
        c = C.policing(f, mbr, tx, rx, delivered, offered_bps=offered)
        c.update(case_id=f"policing-s{s.index}-{d}-{size}-x{f:g}", kind="policing", session=s.index,
                 direction=d, frame_size=size, l3_bytes=l3, window_s=round(tb - ta, 3), mbr_mbps=mbr / 1e6)
        cases.append(c)
    return cases


def _isolation(alone: dict, cases: list[dict], index: int, size: int) -> list[dict]:
    """The last session's delivered rate at ISOLATION_FACTOR x MBR, alone and beside the others."""
    out = []
    for d, a in alone.items():
        together = next((c for c in cases if c.get("session") == index and c["direction"] == d
                         and c["frame_size"] == size and c.get("factor") == ISOLATION_FACTOR), None)
        if together is None:
            continue
        c = C.isolation(a["delivered_bps"], together["delivered_bps"], a["offered_bps"])
        c.update(case_id=f"policing-isolation-s{index}-{d}", kind="policing", session=index, direction=d,
                 frame_size=size, mbr_bps=a["mbr_bps"], factor=ISOLATION_FACTOR)
        out.append(c)
    return out


def _gate(upf: Upf, size: int) -> list[dict]:
    try:
        s = upf.establish(upf.rules(len(DEFAULT_MBRS_MBPS) + 1, gate=(False, False)))
    except Unsupported as e:
        return [{"case_id": "policing-gate", "kind": "policing", "verdict": "not supported", "why": str(e),
                 "cause": e.cause}]
    ports = upf.start([upf.ul_stream(s, size, GATE_PPS), upf.dl_stream(s, size, GATE_PPS)], duration=1.0)
    upf.wait(ports)
    end = upf.flow()
    out = []
    for pg, d in ((s.pg_ul, "uplink"), (s.pg_dl, "downlink")):
        tx, rx = end.get(pg, (0, 0))
        c = C.policing(0.0, 0.0, tx, rx, None, gate_open=False)
        c.update(case_id=f"policing-gate-{d}", kind="policing", session=s.index, direction=d, frame_size=size,
                 dropped_packets=tx - rx)
        out.append(c)
    upf.delete(s)
    return out
