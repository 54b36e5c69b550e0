"""Policing accuracy (issue 25 item 1, RFC 7640's approach): per session a QER with its own MBR,
offered load swept below and above it, uplink and downlink at once, all sessions at once
(isolation: each is held to its own MBR), each load sent smoothly and as bursts of B frames back to
back at the same average rate (B = 1: one frame every frame time); and a session whose gate is
closed. Bursts that together would take more than a quarter of the lab's receive ring (RING_FRAMES: the
sessions' bursts leave one port at once) are sent one session at a time (`sessions_at_once`).

Criteria (criteria.policing, criteria.burst_tolerance): at <= 0.99 x MBR nothing is lost when the
burst is at most MIN_BURST_BYTES (15,000 L3 octets: TCP's initial window of 1500-byte packets);
larger bursts' loss is measured, and the largest burst passed is the UPF's burst tolerance (octets,
and ms at the MBR), required to be at least that (a burst of the largest whole number of packets
not above it is always tried: burst "min"). Above the MBR the delivered L3 bit rate (the UE's IP
packets, TS 29.244 8.2.8) is at most MBR + 1 %, and at least MBR - 1 % when the bursts' period holds
at most MIN_BURST_BYTES of MBR (a bucket that small must lose no token), measured between two
readings of the generator's per-stream counters in the steady part of the trial (from WARM_S after
the start to 0.2 s before its end: a token bucket's initial burst is outside the window). With
bursts more than PHASE_MIN_S apart the two readings are taken half-way between two of the stream's
bursts and the window is a whole number of its periods (readings every READ_STEP_S around both
ends): a window cut in mid-burst would count a burst or not by chance. A closed gate drops every
packet. Isolation (criteria.isolation): the last session at 2 x its MBR delivers the same rate
(+-1 %) with the other sessions at 2 x theirs as alone (a first trial with it alone).

Premises (criteria.policing; "not decided" when one fails, never pass or fail): the load offered
as asked (above the MBR the window's offered rate within 5 % of it; at or below, the trial's
packets within 5 % and a burst) and reaching the policer: the packets each trial lost before it
(the DUT's receive ring, a socket UPF's receive buffer or TUN queue: criteria.PRE_POLICER_PLACES)
may not explain a case's verdict. The burst tolerance leaves out trials not decided; isolation
is not decided when either of its trials is not. The burst that
actually left back to back is each case's max_burst (the engine's tx_max_burst: a port's streams
take turns, so even B = 1 leaves a few frames back to back when several share a port).
"""

from __future__ import annotations

import time

from gtplab.traffic.engine.vm import MAX_PACED_BURST
from gtplab.upftests import criteria as C
from gtplab.upftests.harness import Unsupported, Upf, inner_len

DEFAULT_MBRS_MBPS = (2, 3, 4, 5)       # x 2 x 2 directions: ~7 kpps a direction at 512 B
DEFAULT_FACTORS = (0.5, 0.99, 1.5, 2.0)
DEFAULT_BURSTS = (1, 8, 32, 128)
MIN = "min"                            # the burst of MIN_BURST_BYTES (per stream, whole packets)
DURATION_S = 3.0
WARM_S = 1.0
GATE_PPS = 1000
ISOLATION_FACTOR = 2.0    # the last session at this load alone first: its rate beside the others must not move
PHASE_MIN_S = 0.005       # bursts further apart than this: readings half-way between two of them
READ_STEP_S = 0.01
# The lab's medium: a veth's receive ring holds 256 frames (VETH_RING_SIZE, drivers/net/veth.c, not
# configurable). Bursts of all sessions leave one port at once: when together they would take more
# than a quarter of it, each session is sent alone, so what is measured is the policer, not the ring
# (measured at 128 B: four sessions' bursts of 128 frames lost 1,016-1,473 packets at the ring and
# none at the PGW-U's policer; of 32 frames (half the ring), 13 in one trial, again at the ring).
RING_FRAMES = 256
RING_SHARE = 4            # the sessions' bursts together take at most RING_FRAMES / RING_SHARE


def min_burst_packets(l3: int) -> int:
    """Packets of l3 octets in the largest burst not above MIN_BURST_BYTES (the engine's limit)."""
    return max(1, min(MAX_PACED_BURST, C.MIN_BURST_BYTES // l3))


def planned(sizes=(512,), factors=DEFAULT_FACTORS, mbrs_mbps=DEFAULT_MBRS_MBPS, bursts=DEFAULT_BURSTS, **_) -> int:
    """How many cases run() makes when the UPF accepts every rule (run.json's cases_planned): per size,
    session and direction one per load and burst, one per load below the MBR at the minimum burst and
    the burst tolerance; the isolation's two directions; the gate's two."""
    per = len(mbrs_mbps) * 2 * (len(bursts) * len(factors) + sum(f <= C.NO_LOSS_FACTOR for f in factors)
                                + (1 if any(f <= C.NO_LOSS_FACTOR for f in factors) else 0))
    iso = 2 if len(mbrs_mbps) >= 2 and ISOLATION_FACTOR in factors else 0
    return len(sizes) * per + iso + 2


def run(upf: Upf, sizes=(512,), factors=DEFAULT_FACTORS, mbrs_mbps=DEFAULT_MBRS_MBPS,
        duration: float = DURATION_S, bursts=DEFAULT_BURSTS) -> list[dict]:
    cases = upf.cases()             # each case written to the results as it is added
    sessions = []
    try:
        for k, mbr in enumerate(mbrs_mbps):
            kbps = int(mbr * 1000)
            sessions.append((upf.establish(upf.rules(k, mbr_kbps=(kbps, kbps))), mbr * 1e6))
    except Unsupported as e:
        return [{"case_id": "policing-mbr", "kind": "policing", "verdict": "not supported", "why": str(e),
                 "cause": e.cause}]
    iso_burst = 1 if 1 in bursts else bursts[0]
    alone = {} if len(sessions) < 2 else {c["direction"]: c for c in
                                          _trial(upf, sessions[-1:], sizes[0], ISOLATION_FACTOR, duration, iso_burst)}
    for size in sizes:
        for b in bursts:
            for f in factors:
                cases += _trials(upf, sessions, size, f, duration, b)
        for f in factors:
            if f <= C.NO_LOSS_FACTOR:
                cases += _trials(upf, sessions, size, f, duration, MIN)
        cases += _tolerance(cases, size)
    cases += _isolation(alone, cases, sessions[-1][0].index, sizes[0], iso_burst)
    for s, _ in sessions:
        upf.delete(s)
    cases += _gate(upf, sizes[0])
    return cases


def burst_frames(size: int, burst) -> int:
    """The frames one stream sends back to back for `burst` (MIN: the larger direction's)."""
    if burst != MIN:
        return int(burst)
    return max(min_burst_packets(inner_len(size, d)) for d in ("uplink", "downlink"))


def together(n_sessions: int, size: int, burst) -> bool:
    """Whether the sessions' bursts may leave one port at once: at most a quarter of the receive ring."""
    return n_sessions * burst_frames(size, burst) <= RING_FRAMES // RING_SHARE


def _trials(upf: Upf, sessions, size: int, f: float, duration: float, burst) -> list[dict]:
    """The trial of every session at once, or one trial per session when their bursts together
    would fill the lab's receive ring (RING_FRAMES); each case says how many sessions ran at once."""
    if together(len(sessions), size, burst):
        out = _trial(upf, sessions, size, f, duration, burst)
        n = len(sessions)
    else:
        out = [c for s in sessions for c in _trial(upf, [s], size, f, duration, burst)]
        n = 1
    for c in out:
        c["sessions_at_once"] = n
    return out


def _phase_pick(reads: list[tuple[float, dict]], t0: float, period: float) -> tuple[float, dict]:
    """The reading farthest from the stream's bursts (at t0 + k x period): half-way between two."""
    return min(reads, key=lambda r: abs(((r[0] - t0) / period) % 1.0 - 0.5))


def _reads(upf: Upf, until: float, t_start: float) -> list[tuple[float, dict]]:
    """Readings of the counters (time: the middle of the read) every READ_STEP_S, the last at or
    after t_start + until."""
    out = []
    while True:
        a = time.monotonic()
        f = upf.flow()
        out.append(((a + time.monotonic()) / 2, f))
        if a - t_start >= until:
            return out
        time.sleep(max(0.0, min(READ_STEP_S, t_start + until - time.monotonic())))


def _trial(upf: Upf, sessions, size: int, f: float, duration: float, burst) -> list[dict]:
    """Every session of sessions at f x its MBR, both directions at once, for duration s, in bursts of
    burst frames (MIN: each stream's min_burst_packets)."""
    streams, meta, cases = [], {}, []
    for s, mbr in sessions:
        for d in ("uplink", "downlink"):
            l3 = inner_len(size, d)
            pps = f * mbr / (8 * l3)
            b = min_burst_packets(l3) if burst == MIN else burst
            st = upf.ul_stream(s, size, pps, burst=b) if d == "uplink" else upf.dl_stream(s, size, pps, burst=b)
            streams.append(st)
            meta[s.pg_ul if d == "uplink" else s.pg_dl] = (s, d, mbr, l3, pps, b, st[0])
    span = max(b / pps for _, _, _, _, pps, b, _ in meta.values())
    # readings around each end cover one period (above the MBR: below it the criteria count packets)
    edge = span if span > PHASE_MIN_S and f > 1 else 0.0
    snap = upf.loss_snapshot()
    ports = upf.start(streams, duration=duration)
    t_start = time.monotonic()
    time.sleep(WARM_S)
    first = _reads(upf, WARM_S + edge, t_start)
    time.sleep(max(0.05, t_start + duration - 0.2 - edge - time.monotonic()))
    last = _reads(upf, duration - 0.2, t_start)
    upf.wait(ports)
    end = upf.flow()
    max_burst = upf.max_bursts()
    # where this trial's lost packets went (every session and direction of it together): the DUT's
    # receive ring (the generator's veth XDP transmit errors) or the UPF's own drops (its policer's)
    where = upf.loss_delta(snap, upf.loss_snapshot())
    trial_lost = sum(max(0, tx - rx) for tx, rx in (end.get(pg, (0, 0)) for pg in meta))
    where_words = (C.where_lost(trial_lost, where, [p.ifname for p in upf.lab.ports]) + " (the whole trial)"
                   if trial_lost else None)
    for pg, (s, d, mbr, l3, pps, b, port) in meta.items():
        tx, rx = end.get(pg, (0, 0))
        period = b / pps
        t0 = upf.port_start(port)
        if period > PHASE_MIN_S and t0 is not None:
            (ta, a), (tb, bb) = _phase_pick(first, t0, period), _phase_pick(last, t0, period)
            win = max(1, round((tb - ta) / period)) * period
        else:
            (ta, a), (tb, bb) = first[0], last[-1]
            win = tb - ta
        delivered = (bb.get(pg, (0, 0))[1] - a.get(pg, (0, 0))[1]) * l3 * 8 / win
        offered = (bb.get(pg, (0, 0))[0] - a.get(pg, (0, 0))[0]) * l3 * 8 / win
        # the burst the criterion holds the UPF to is what left back to back: B, or more when the
        # generator was held up and caught up (max_burst)
        sent = max(b, max_burst.get(pg) or 0)
        before, before_at = C.lost_before_policer(where, d, upf.lab.ports[port].ifname)
        c = C.policing(f, mbr, tx, rx, delivered, offered_bps=offered, burst_bytes=sent * l3,
                       asked_packets=pps * duration, burst_packets=b, lost_before=before, lost_before_at=before_at,
                       window_s=win, l3_bytes=l3)
        tag = f"b{b}" if burst != MIN else "bmin"
        c.update(case_id=f"policing-s{s.index}-{d}-{size}-x{f:g}-{tag}", kind="policing", session=s.index,
                 direction=d, frame_size=size, l3_bytes=l3, window_s=round(win, 3), mbr_mbps=mbr / 1e6,
                 burst=b, burst_role="minimum" if burst == MIN else "swept",
                 burst_period_ms=round(period * 1e3, 3), max_burst=max_burst.get(pg))
        if where_words:
            c["loss_where"] = {"trial_lost": trial_lost, **where}
            if c.get("verdict") in ("fail", C.NOT_DECIDED) and tx > rx:
                c["why"] = f"{c.get('why', '')}; {where_words}"
        cases.append(c)
    return cases


def _tolerance(cases: list[dict], size: int) -> list[dict]:
    """Per session and direction: the largest burst passed at <= 0.99 x MBR (criteria.burst_tolerance)."""
    out = []
    keys = dict.fromkeys((c["session"], c["direction"]) for c in cases
                         if c.get("frame_size") == size and c.get("burst") is not None)
    for sess, d in keys:
        trials = [dict(burst_bytes=c["burst"] * c["l3_bytes"], burst_packets=c["burst"], tx_packets=c["tx_packets"],
                       rx_packets=c["rx_packets"], max_burst=c.get("max_burst"), decided=C.premises_held(c))
                  for c in cases if c.get("session") == sess and c["direction"] == d and c.get("frame_size") == size
                  and c.get("burst") is not None and c["factor"] <= C.NO_LOSS_FACTOR]
        if not trials:
            continue
        mbr = next(c["mbr_bps"] for c in cases if c.get("session") == sess)
        c = C.burst_tolerance(trials, mbr)
        c.update(case_id=f"policing-burst-tolerance-s{sess}-{d}-{size}", kind="policing", session=sess,
                 direction=d, frame_size=size)
        out.append(c)
    return out


def _isolation(alone: dict, cases: list[dict], index: int, size: int, burst: int) -> list[dict]:
    """The last session's delivered rate at ISOLATION_FACTOR x MBR, alone and beside the others."""
    out = []
    for d, a in alone.items():
        together = next((c for c in cases if c.get("session") == index and c["direction"] == d
                         and c["frame_size"] == size and c.get("factor") == ISOLATION_FACTOR
                         and c.get("burst") == burst and c.get("burst_role") == "swept"), None)
        if together is None:
            continue
        c = C.isolation(a["delivered_bps"], together["delivered_bps"], a["offered_bps"],
                        alone_decided=C.premises_held(a), together_decided=C.premises_held(together),
                        mbr_bps=a["mbr_bps"])
        c.update(case_id=f"policing-isolation-s{index}-{d}", kind="policing", session=index, direction=d,
                 frame_size=size, mbr_bps=a["mbr_bps"], factor=ISOLATION_FACTOR, burst=burst)
        out.append(c)
    return out


def _gate(upf: Upf, size: int) -> list[dict]:
    try:
        s = upf.establish(upf.rules(len(DEFAULT_MBRS_MBPS) + 1, gate=(False, False)))
    except Unsupported as e:
        return [{"case_id": "policing-gate", "kind": "policing", "verdict": "not supported", "why": str(e),
                 "cause": e.cause}]
    snap = upf.loss_snapshot()
    ports = upf.start([upf.ul_stream(s, size, GATE_PPS), upf.dl_stream(s, size, GATE_PPS)], duration=1.0)
    upf.wait(ports)
    end = upf.flow()
    where = upf.loss_delta(snap, upf.loss_snapshot())
    out = []
    for pg, d, port in ((s.pg_ul, "uplink", 0), (s.pg_dl, "downlink", 1)):
        tx, rx = end.get(pg, (0, 0))
        before, before_at = C.lost_before_policer(where, d, upf.lab.ports[port].ifname)
        c = C.policing(0.0, 0.0, tx, rx, None, gate_open=False, lost_before=before, lost_before_at=before_at)
        c.update(case_id=f"policing-gate-{d}", kind="policing", session=s.index, direction=d, frame_size=size,
                 dropped_packets=tx - rx)
        out.append(c)
    upf.delete(s)
    return out
