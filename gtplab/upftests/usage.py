"""Usage report accuracy (issue 25 item 2): sessions with a URR each, traffic both ways at a steady
rate, the UPF's Usage Reports (Session Report Requests, the answer to a Query URR in a
modification, the report at deletion) compared with the generator's per-stream counters.

Sessions (all at once, PPS each way, DURATION_S):
    deletion   URR without triggers: one report, at deletion
    query      URR without triggers; Query URR at QUERY_AT_S; then deletion
    periodic   Measurement Period PERIOD_S: reports at t0 + k x PERIOD_S (+-0.25 s)
    volth      Volume Threshold: a VOLTH report within 10 packets above the threshold
    quota      Volume Quota: a VOLQU report within 10 packets above it, and nothing forwarded after
    timth      Time Threshold TIME_S: a TIMTH report at t0 + TIME_S (+-0.25 s)
    dropped    URR with the downlink gate closed: dropped packets are not counted (DL volume 0)
Criteria (criteria.py): for every session but quota, the reports' volumes summed (each Usage
Report carries the usage since the previous one, TS 29.244 5.2.2.3.1) equal the generator's
packets received beyond the UPF times their L3 length (the UE's IP packet, 8.2.44), uplink and
downlink separately, in octets and, when the UPF reports them, in packets: exact.

Premises ("not decided" when one fails): the generator sent each direction's packets as asked
(within 5 %); the reports' periods inside the traffic: the Query URR answered while the traffic
ran, the time threshold due while it ran, the periodic reports judged those whose period ends
inside it (two periods at least); volume threshold and quota: more offered than the limit and its
slack.
"""

from __future__ import annotations

import time

from gtplab.upftests import criteria as C
from gtplab.upftests import rules as R
from gtplab.upftests.harness import Unsupported, Upf, inner_len

PPS = 500
DURATION_S = 4.5
SIZE = 256
PERIOD_S = 1
TIME_S = 2
QUERY_AT_S = 2.0


def _sum(reports: list[R.Usage]) -> dict:
    def tot(attr, i):
        vals = [getattr(u, attr)[i] for u in reports]
        return None if not vals or any(v is None for v in vals) else sum(vals)
    return {"ul_bytes": tot("volume", 1), "dl_bytes": tot("volume", 2),
            "ul_packets": tot("packets", 1), "dl_packets": tot("packets", 2)}


def planned(**_) -> int:
    """The cases run() makes: one per session (deletion, query, periodic, volth, quota, timth, dropped)."""
    return 7


def run(upf: Upf, pps: float = PPS, duration: float = DURATION_S, size: int = SIZE) -> list[dict]:
    l3u, l3d = inner_len(size, "uplink", n3=upf.n3), inner_len(size, "downlink")
    per = pps * duration
    specs = {
        "deletion": R.UrrSpec(),
        "query": R.UrrSpec(),
        "periodic": R.UrrSpec(period=PERIOD_S),
        "volth": R.UrrSpec(volume_threshold=int(per * (l3u + l3d) / 3)),
        "quota": R.UrrSpec(volume_quota=int(per * (l3u + l3d) / 3)),
        "timth": R.UrrSpec(time_threshold=TIME_S),
        "dropped": R.UrrSpec(),
    }
    cases, sess = upf.cases(), {}
    for k, (name, spec) in enumerate(specs.items()):
        try:
            kw = {"gate": (True, False)} if name == "dropped" else {}
            sess[name] = upf.establish(upf.rules(40 + k, urr=spec, **kw))
        except Unsupported as e:
            cases.append({"case_id": f"usage-{name}", "kind": "usage", "verdict": "not supported", "why": str(e),
                          "cause": e.cause})
    if not sess:
        return cases
    n_rep = len(upf.node.reports)
    streams = [st for s in sess.values() for st in (upf.ul_stream(s, size, pps), upf.dl_stream(s, size, pps))]
    ports = upf.start(streams, duration=duration)
    t0 = time.time()
    # the traffic's window on the reports' clock (time.time()): the generator's start and end
    t_port = [t for t in (upf.port_start(q) for q in ports) if t is not None]
    if t_port:
        t0 = min(t_port) + time.time() - time.monotonic()
    t_end = t0 + duration
    t_query = None
    if "query" in sess:
        time.sleep(QUERY_AT_S)
        try:
            upf.modify(sess["query"], "Query URR", query_urr=True)
            t_query = time.time()
        except Unsupported as e:
            cases.append({"case_id": "usage-query", "kind": "usage", "verdict": "not supported", "why": str(e),
                          "cause": e.cause})
            sess.pop("query")
    upf.wait(ports)
    time.sleep(0.5)                                 # reports due at the end of the traffic
    end = upf.flow()
    for name, s in sess.items():
        upf.delete(s)
    for name, s in sess.items():
        reps = upf.reports_for(s, n_rep)
        allr = reps + s.usage
        (ul_tx, ul_rx), (dl_tx, dl_rx) = end.get(s.pg_ul, (0, 0)), end.get(s.pg_dl, (0, 0))
        sent = {"ul_bytes": ul_rx * l3u, "dl_bytes": dl_rx * l3d, "ul_packets": ul_rx, "dl_packets": dl_rx}
        base = {"kind": "usage", "session": s.index, "frame_size": size, "offered_pps": pps, "n3": upf.n3,
                "reports": [u.as_dict() for u in allr]}
        # premises: the traffic as asked; the reports' periods inside the traffic (per case below)
        premises = [C.traffic_as_asked({"uplink": ul_tx, "downlink": dl_tx}, per)]
        offered = ul_tx * l3u + dl_tx * l3d
        if name == "quota":
            q = specs["quota"].volume_quota
            first = next((u for u in reps if "VOLQU" in u.triggers), None)
            # a UPF may stop at the last whole packet within the quota (reported just below it)
            c = C.threshold(first.volume[0] if first else None, q, (l3u + l3d) // 2, below=1)
            delivered = ul_rx * l3u + dl_rx * l3d
            c["delivered_octets"] = delivered
            if delivered >= q + C.THRESHOLD_SLACK_PKTS * max(l3u, l3d):
                c["verdict"] = "fail"
                c["why"] = (c.get("why", "") + f"; {delivered} octets forwarded, quota {q}").lstrip("; ")
            c.update(base, case_id="usage-quota", criterion="VOLQU report within 10 packets; traffic stops")
            premises.append(C.enough_traffic(offered, q, max(l3u, l3d)))
            cases.append(C.decide(c, premises))
            continue
        c = C.usage_exact(_sum(allr), sent)
        c.update(base, case_id=f"usage-{name}", criterion="sum of reports = generator, UL/DL octets and packets")
        why = [c["why"]] if c.get("why") else []
        if name == "query":
            if not any(u.where == "modification" for u in allr):
                why.append("no Usage Report in the answer to Query URR")
            premises.append(C.usage_timing("query answered while the traffic ran", t0, t_end,
                                           [t_query] if t_query is not None else None)[0])
        if name == "periodic":
            # when the first period starts differs between UPFs (the URR's creation, the first
            # packet): what is checked is the period between reports, of those whose period ends
            # inside the traffic (later ones report no traffic: left out)
            pr, kept = C.usage_timing("periods inside the traffic", t0, t_end,
                                      [u.at for u in reps if "PERIO" in u.triggers], period=PERIOD_S)
            premises.append(pr)
            t = C.report_intervals(kept, PERIOD_S)
            c["timing"] = t
            need = int((t_end - t0) / PERIOD_S)
            if t["count"] < need or t["verdict"] != "pass":
                why.append(f"periodic: {t.get('why') or ''} {t['count']} reports in {t_end - t0:.2f} s "
                           f"of traffic at period {PERIOD_S} s".strip())
        if name == "timth":
            premises.append(C.usage_timing("threshold time inside the traffic", t0, t_end, due=TIME_S)[0])
            t = C.report_times([u.at for u in reps if "TIMTH" in u.triggers][:1], t0, TIME_S)
            c["timing"] = t
            if t["verdict"] != "pass":
                why.append(f"time threshold: {t.get('why')}")
        if name == "volth":
            first = next((u for u in reps if "VOLTH" in u.triggers), None)
            t = C.threshold(first.volume[0] if first else None, specs["volth"].volume_threshold, (l3u + l3d) // 2)
            c["threshold"] = t
            premises.append(C.enough_traffic(offered, specs["volth"].volume_threshold, max(l3u, l3d)))
            if t["verdict"] != "pass":
                why.append(f"volume threshold: {t.get('why')}")
        if name == "dropped":
            c["dropped_dl_packets"] = end.get(s.pg_dl, (0, 0))[0] - dl_rx
        c["verdict"] = "fail" if why else "pass"
        if why:
            c["why"] = "; ".join(why)
        cases.append(C.decide(c, premises))
    return cases
