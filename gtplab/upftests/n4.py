"""N4 under data-plane load (issue 25 item 4).

Latency: BATCH sessions established, modified (Update FAR: a handover) and deleted, WINDOW requests
in flight, each request timed from its send to its answer; p50, p99 and the rate (requests / s of
the batch) per message type, first with the data plane idle, then while it carries LOAD_FRACTION
of its throughput. That throughput is measured first: one downlink and one uplink stream through
LOAD_SESSIONS sessions flat out for 1 s, the rate received (an upper bound of the NDR; --load-pps
overrides it). Criterion: every request accepted (the UPF's Cause), none lost. The latency ratio
loaded/idle is a figure, not a criterion (this VM's timing is shared).

Churn soak (bounded, SOAK_S): UNTOUCHED sessions carry traffic both ways at SOAK_PPS each while
cycles of CHURN sessions are established, modified and deleted; criteria: the untouched sessions'
traffic is forwarded exactly (every packet), every request accepted, and the UPF's PFCP process
(the PGW-U's agent, the external UPF) does not grow: its RSS at the end within 10 % (or 4 MiB) of
its RSS after the first cycle (criteria.bounded_growth); where the UPF shows its sessions (the
PGW-U's bearer table, eUPF's REST API: Upf.upf_sessions) it holds the untouched ones after every
cycle, and as many as before the soak once they are deleted too.

Premises ("not decided" when one fails): a loaded case's data plane carried at least 95 % of the
packets asked while its batch ran; the soak's untouched sessions too while the cycles ran.
"""

from __future__ import annotations

import time

from gtplab.pfcp import messages as m
from gtplab.upftests import criteria as C
from gtplab.upftests import rules as R
from gtplab.upftests.harness import Upf

BATCH = 200
WINDOW = 32
LOAD_FRACTION = 0.9
LOAD_SESSIONS = 4
SIZE = 512
UNTOUCHED = 4
CHURN = 64
SOAK_S = 20.0
SOAK_PPS = 2000
BASE = 1000                 # churned sessions' indices (UE, TEID) start here


def _batch(upf: Upf, indices: list[int]) -> dict:
    """Establish, modify, delete the sessions of indices, WINDOW in flight; per phase: latencies
    (ms), rejections, elapsed."""
    node = upf.node
    out = {}
    made: dict[int, int] = {}                 # index -> UP SEID
    seid = {i: upf._seid_base + (1 << 24) + i for i in indices}
    a = upf.lab.addressing

    def phase(name, build, on_ok=None):
        lat, bad, inflight = [], [], [0]
        # built before the clock starts: Scapy takes ms per message, which would count as the UPF's
        todo = []
        for i in indices:
            if name == "establishment" or i in made:
                seq = node.next_seq()
                todo.append((seq, build(seq, i), i))
        it = iter(todo)
        t0 = time.monotonic()

        def done(p, s):
            inflight[0] -= 1
            lat.append((time.monotonic() - p.ctx[1]) * 1e3)
            if s.cause != m.CAUSE_ACCEPTED:
                bad.append(f"cause {m.cause_name(s.cause)}")
            elif on_ok:
                on_ok(p.ctx[0], s)

        def failed(e):
            inflight[0] -= 1
            bad.append(str(e))
        with node.lock:
            while True:
                while inflight[0] < WINDOW:
                    item = next(it, None)
                    if item is None:
                        break
                    seq, data, i = item
                    inflight[0] += 1
                    node.send(seq, data, (i, time.monotonic()), done, failed)
                if inflight[0] == 0:
                    break
                node.pump(node.timers.t1 / 4)
        dt = time.monotonic() - t0
        out[name] = {"requests": len(lat) + len([b for b in bad if "cause" not in b]),
                     "p50_ms": C.percentile(lat, 0.5), "p90_ms": C.percentile(lat, 0.9),
                     "p99_ms": C.percentile(lat, 0.99), "max_ms": max(lat) if lat else None,
                     "rate_per_s": len(lat) / dt if dt > 0 else None, "rejected": bad[:5], "errors": len(bad)}

    def est(seq, i):
        return R.establishment(seq, node.node_id, node.addr, seid[i], upf.rules(i))
    phase("establishment", est, lambda i, s: made.__setitem__(i, s.up_seid))
    phase("modification", lambda seq, i: R.modification(seq, made[i], handover=(a.sgw(i + 1), a.sgw_teid(i) + 1)))
    phase("deletion", lambda seq, i: R.deletion(seq, made[i]))
    return out


def _throughput(upf: Upf, sessions) -> float:
    streams = [st for s in sessions for st in (upf.ul_stream(s, SIZE, 1e6), upf.dl_stream(s, SIZE, 1e6))]
    upf.client.reset()
    for p in (0, 1):
        upf.client.add_streams([st for q, st in streams if q == p], ports=[p])
    upf.client.start(ports=[0, 1], mult="100%", duration=1.0)
    upf.wait([0, 1])
    st = upf.client.get_stats()
    return sum(st[p]["ipackets"] for p in (0, 1)) / 1.0


def planned(**_) -> int:
    """The cases run() makes: 3 message types idle and loaded, and the churn soak."""
    return 7


def run(upf: Upf, load_pps: float | None = None, soak_s: float = SOAK_S) -> list[dict]:
    cases = upf.cases()
    bg = [upf.establish(upf.rules(i)) for i in range(LOAD_SESSIONS)]
    idle = _batch(upf, list(range(BASE, BASE + BATCH)))
    thr = load_pps / LOAD_FRACTION if load_pps else _throughput(upf, bg)
    pps = LOAD_FRACTION * thr / (2 * len(bg))
    ports = upf.start([st for s in bg for st in (upf.ul_stream(s, SIZE, pps), upf.dl_stream(s, SIZE, pps))],
                      duration=-1)
    t_load = time.monotonic()
    try:
        time.sleep(0.5)
        loaded = _batch(upf, list(range(BASE, BASE + BATCH)))
    finally:
        upf.client.stop(ports=ports)
        t_load = time.monotonic() - t_load
    fl = upf.flow()
    lost = sum(fl[s.pg_ul][0] - fl[s.pg_ul][1] + fl[s.pg_dl][0] - fl[s.pg_dl][1] for s in bg)
    load_tx = sum(fl[s.pg_ul][0] + fl[s.pg_dl][0] for s in bg)
    for ph in ("establishment", "modification", "deletion"):
        for cond, res in (("idle", idle), ("loaded", loaded)):
            r = res[ph]
            c = {"case_id": f"n4-{ph}-{cond}", "kind": "n4", "phase": ph, "condition": cond, **r,
                 "criterion": f"{BATCH} requests, {WINDOW} in flight: every one accepted"}
            if cond == "loaded":
                c.update(load_pps=round(2 * len(bg) * pps), throughput_pps=round(thr), load_lost_packets=lost,
                         p99_vs_idle=(r["p99_ms"] / idle[ph]["p99_ms"]) if r["p99_ms"] and idle[ph]["p99_ms"] else None)
            ok = r["errors"] == 0 and r["requests"] == BATCH
            c["verdict"] = "pass" if ok else "fail"
            if not ok:
                c["why"] = f"{r['errors']} of {BATCH} requests failed: {r['rejected'][:2]}"
            # premise of a loaded case: the data plane carried the load asked meanwhile
            ps = [C.load_as_asked(load_tx, 2 * len(bg) * pps * t_load)] if cond == "loaded" else []
            cases.append(C.decide(c, ps))
    for s in bg:
        upf.delete(s)
    cases.append(_soak(upf, soak_s))
    return cases


def _soak(upf: Upf, soak_s: float) -> dict:
    before = upf.upf_sessions()
    keep = [upf.establish(upf.rules(100 + i)) for i in range(UNTOUCHED)]
    held = upf.upf_sessions()
    counts = []
    ports = upf.start([st for s in keep for st in (upf.ul_stream(s, SIZE, SOAK_PPS), upf.dl_stream(s, SIZE, SOAK_PPS))],
                      duration=-1)
    rss, cycles, errors = [], 0, 0
    snap = upf.loss_snapshot()
    t_soak = time.monotonic()
    t_end = t_soak + soak_s
    try:
        while time.monotonic() < t_end or cycles < 2:       # 2 RSS samples at least
            res = _batch(upf, list(range(BASE + 500, BASE + 500 + CHURN)))
            errors += sum(r["errors"] for r in res.values())
            cycles += 1
            rss.append(upf.rss_kib())
            counts.append(upf.upf_sessions())
    finally:
        upf.client.stop(ports=ports)
        t_soak = time.monotonic() - t_soak
        time.sleep(0.2)
    fl = upf.flow()
    where = upf.loss_delta(snap, upf.loss_snapshot())
    lost = {s.index: (fl[s.pg_ul][0] - fl[s.pg_ul][1], fl[s.pg_dl][0] - fl[s.pg_dl][1]) for s in keep}
    growth = C.bounded_growth([x for x in rss if x is not None])
    for s in keep:
        upf.delete(s)
    after = upf.upf_sessions()
    why = []
    if held is not None and any(n != held for n in counts):
        why.append(f"the UPF held {counts} sessions after the cycles, {held} before them")
    if before is not None and after != before:
        why.append(f"the UPF holds {after} sessions after every one was deleted, {before} before the soak")
    if any(u or d for u, d in lost.values()):
        why.append(f"untouched sessions lost packets (UL, DL): {lost}; " + C.where_lost(
            sum(u + d for u, d in lost.values()), where, [p.ifname for p in upf.lab.ports]))
    if errors:
        why.append(f"{errors} churn requests failed")
    if growth["verdict"] != "pass":
        why.append(growth.get("why", ""))
    c = {"case_id": "n4-churn-soak", "kind": "n4", "cycles": cycles, "sessions_churned": cycles * CHURN,
         "soak_s": soak_s, "untouched_lost": {str(k): v for k, v in lost.items()},
         "untouched_tx": sum(fl[s.pg_ul][0] + fl[s.pg_dl][0] for s in keep), "rss": growth,
         "loss_where": where, "upf_sessions": {"before": before, "untouched": held, "after_each_cycle": counts, "after": after},
         "criterion": "untouched sessions exact, every request accepted, RSS bounded", "verdict": "fail" if why else "pass"}
    if why:
        c["why"] = "; ".join(why)
    # premise: the untouched sessions carried the traffic asked while the cycles ran
    return C.decide(c, [C.load_as_asked(c["untouched_tx"], 2 * len(keep) * SOAK_PPS * t_soak,
                                        "the untouched sessions' traffic")])
