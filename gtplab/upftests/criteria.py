"""The pass/fail criteria of the UPF behaviour tests, as pure functions of what was measured (unit
tested with synthetic data in tests/upftests/test_criteria.py). Each returns a dict with "verdict"
("pass" | "fail"), the figures it decided on, and "why" when it fails.

Rates and volumes are L3: the octets of the user's IP packets (the UE's packet, without the GTP-U
tunnel, Ethernet or FCS), as TS 29.244 defines the MBR (8.2.8, kbit/s of the QoS flow) and the
Volume Measurement (8.2.44).
"""

from __future__ import annotations

import struct

from gtplab.gtpu import packets as P

POLICING_TOLERANCE = 0.01          # delivered within +-1 % of the MBR above it
NO_LOSS_FACTOR = 0.99              # at or below this x MBR nothing may be lost
# The burst (L3 octets back to back) a policed session must take without loss below its MBR.
# TS 29.244's MBR (8.2.8) has no burst size: the UPF chooses its bucket. A TCP sender's initial
# window is sent back to back: 10 segments (RFC 6928), 10 x 1500 = 15,000 octets of IP packets
# at the common MTU; a UPF that cannot take them drops the first flight of a connection however
# far below its MBR the session runs. Not the PGW-U's figure (its bucket is 100 ms of the MBR, at
# least 3000 octets: 25,000 octets at 2 Mb/s, pgwu pfcp --mbr-burst-ms).
MIN_BURST_BYTES = 15_000
THRESHOLD_SLACK_PKTS = 10          # a volume threshold/quota report within this many packets of it
PERIOD_TOLERANCE_S = 0.25          # a periodic / time-threshold report within this of its time
TRAILER_MAGIC = 0x4C47             # the engine's per-stream trailer (docs/engine.md)


def policing(factor: float, mbr_bps: float, tx: int, rx: int, delivered_bps: float | None,
             gate_open: bool = True, offered_bps: float | None = None, burst_bytes: int | None = None,
             min_burst: int = MIN_BURST_BYTES) -> dict:
    """One session and direction at factor x MBR. delivered_bps / offered_bps: L3 bit rates
    received / sent in the steady window (after the bucket's initial burst). burst_bytes: the L3
    octets the generator sent back to back, every burst_bytes / (factor x MBR) s (None: smooth).

    At <= 0.99 x MBR nothing may be lost when the burst is at most min_burst octets; a larger burst
    may be policed (the MBR has no burst size: the UPF picks its bucket): its loss is "measured",
    no verdict (burst_tolerance decides on the largest burst passed). Above the MBR the delivered
    rate is never more than MBR + 1 %, and not less than MBR - 1 % when MBR x the bursts' period
    (burst_bytes / factor: what the bucket must hold for no token to go unused) is at most
    min_burst; a bucket smaller than that may deliver less (measured, passes). A load the
    generator did not offer (less than MBR + 2 x the tolerance) decides nothing: a failure that
    says so."""
    out = {"factor": factor, "mbr_bps": mbr_bps, "tx_packets": tx, "rx_packets": rx,
           "delivered_bps": delivered_bps, "offered_bps": offered_bps, "lost_packets": tx - rx,
           "burst_bytes": burst_bytes}
    big = burst_bytes is not None and burst_bytes > min_burst
    verdict = None
    if not gate_open:
        out["criterion"] = "gate closed: every packet dropped"
        ok = rx == 0 and tx > 0
        why = f"{rx} of {tx} packets passed a closed gate" if rx else ("nothing sent" if not tx else "")
    elif factor <= NO_LOSS_FACTOR and big:
        out["criterion"] = (f"<= {NO_LOSS_FACTOR} x MBR, burst {burst_bytes} octets > {min_burst}: loss measured, "
                            "no criterion (the UPF's bucket; see the burst tolerance)")
        ok = tx > 0
        verdict = "measured" if ok else None
        why = "nothing sent" if not tx else ""
    elif factor <= NO_LOSS_FACTOR:
        out["criterion"] = f"<= {NO_LOSS_FACTOR} x MBR" + (f", burst {burst_bytes} octets" if burst_bytes else "") \
            + ": no loss"
        ok = rx == tx and tx > 0
        why = f"{tx - rx} of {tx} packets lost below the MBR" if rx != tx else ("nothing sent" if not tx else "")
    else:
        kept = burst_bytes / factor if burst_bytes is not None else 0.0
        lower = kept <= min_burst
        out["criterion"] = (f"> MBR: delivered within +-{POLICING_TOLERANCE:.0%} of the MBR" if lower else
                            f"> MBR: delivered at most MBR + {POLICING_TOLERANCE:.0%} (bursts every "
                            f"{kept:.0f} octets of MBR > {min_burst}: a smaller bucket may deliver less)")
        err = None if not delivered_bps or not mbr_bps else delivered_bps / mbr_bps - 1
        out["error_ratio"] = err
        ok = err is not None and err <= POLICING_TOLERANCE and (not lower or err >= -POLICING_TOLERANCE)
        why = ("no rate measured" if err is None else
               f"delivered {delivered_bps / 1e6:.3f} Mb/s = MBR {mbr_bps / 1e6:.3f} Mb/s {err:+.1%}")
        if offered_bps is not None and offered_bps < mbr_bps * (1 + 2 * POLICING_TOLERANCE):
            ok = False
            why = (f"not decided: the generator offered {offered_bps / 1e6:.3f} Mb/s, not above the MBR "
                   f"{mbr_bps / 1e6:.3f} Mb/s")
    out["verdict"] = verdict or ("pass" if ok else "fail")
    if not ok:
        out["why"] = why
    elif verdict == "measured" and rx != tx:
        out["why"] = f"{tx - rx} of {tx} packets lost (burst above the required {min_burst} octets)"
    return out


def burst_tolerance(trials: list[dict], mbr_bps: float, min_burst: int = MIN_BURST_BYTES) -> dict:
    """One session and direction at <= 0.99 x MBR over the burst sizes tried. trials: {"burst_bytes",
    "burst_packets", "tx_packets", "rx_packets", "max_burst"} (one per burst and load; max_burst:
    the most packets the generator sent back to back, None: unknown). The tolerance is the largest
    burst that lost nothing, with every smaller one; in ms at the MBR too. A trial with loss whose
    generator sent more than its burst back to back (held up, it caught up) says nothing of that
    burst: left out, and said. Pass when every burst of at most min_burst octets lost nothing and
    one of them is within a packet of min_burst (else it was not tried: not decided, a failure
    that says so)."""
    by: dict[int, bool] = {}
    pkt, unclear = 0, []
    for t in trials:
        b = t["burst_bytes"]
        ok = t["rx_packets"] == t["tx_packets"] > 0
        if not ok and (t.get("max_burst") or 0) > t.get("burst_packets", 1):
            unclear.append(b)
            continue
        by[b] = by.get(b, True) and ok
        pkt = max(pkt, b // max(1, t.get("burst_packets", 1)))
    tol, first_lost = 0, None
    for b in sorted(by):
        if not by[b]:
            first_lost = b
            break
        tol = b
    out = {"mbr_bps": mbr_bps, "tolerance_bytes": tol, "tolerance_ms": tol * 8 / mbr_bps * 1e3 if mbr_bps else None,
           "first_lost_bytes": first_lost, "min_burst_bytes": min_burst,
           "bursts_tried": ", ".join(f"{b} {'no loss' if ok else 'loss'}" for b, ok in sorted(by.items())),
           "criterion": f"<= {NO_LOSS_FACTOR} x MBR: every burst up to {min_burst} octets passes (RFC 6928 "
                        "initial window of 1500-byte packets)"}
    if unclear:
        out["left_out_bytes"] = sorted(set(unclear))
    lost_small = [b for b, ok in by.items() if b <= min_burst and not ok]
    near = [b for b in by if min_burst - pkt < b <= min_burst]
    if lost_small:
        out.update(verdict="fail", why=f"loss at a burst of {min(lost_small)} octets (at most {min_burst} required); "
                                       f"largest passed {tol} octets = {out['tolerance_ms']:.1f} ms at the MBR")
    elif not near:
        out.update(verdict="fail", why=f"not decided: no burst within a packet of {min_burst} octets tried"
                   + (f" (left out: the generator sent more back to back at {sorted(set(unclear))})" if unclear else ""))
    else:
        out["verdict"] = "pass"
    return out


def isolation(alone_bps: float | None, together_bps: float | None, alone_offered_bps: float | None = None) -> dict:
    """One session's delivered rate above its MBR, alone and with the other sessions policed at the
    same time: within +-1 % of each other. A session not policed alone (delivered = offered) decides
    nothing: its rate beside the others is the generator's (a failure that says so)."""
    out = {"alone_bps": alone_bps, "delivered_bps": together_bps, "alone_offered_bps": alone_offered_bps,
           "criterion": f"rate beside the other sessions = rate alone +-{POLICING_TOLERANCE:.0%}"}
    if not alone_bps or together_bps is None:
        out.update(verdict="fail", why="no rate measured alone")
        return out
    if alone_offered_bps and alone_bps >= alone_offered_bps * (1 - POLICING_TOLERANCE):
        out.update(verdict="fail", why=f"not decided: not policed alone ({alone_bps / 1e6:.3f} Mb/s delivered of "
                                       f"{alone_offered_bps / 1e6:.3f} Mb/s offered)")
        return out
    err = together_bps / alone_bps - 1
    out["error_ratio"] = err
    out["verdict"] = "pass" if abs(err) <= POLICING_TOLERANCE else "fail"
    if out["verdict"] == "fail":
        out["why"] = (f"{together_bps / 1e6:.3f} Mb/s beside the other sessions, {alone_bps / 1e6:.3f} Mb/s alone "
                      f"({err:+.1%})")
    return out


# ---------------------------------------------------------------------------------------------
# Handover: the capture on the access port


def classify(frame: bytes) -> dict | None:
    """A GTP-U frame as seen on N3 (Ethernet/IPv4/UDP 2152/GTP-U): {dst, teid, type, psc_qfi,
    pg, seq}; None for anything else. pg/seq: the engine's trailer of a G-PDU."""
    if len(frame) < 14 + 20 + 8 + 8 or frame[12:14] != b"\x08\x00":
        return None
    ihl = (frame[14] & 0x0F) * 4
    if frame[23] != 17:
        return None
    u = 14 + ihl
    if struct.unpack_from("!H", frame, u + 2)[0] != P.GTPU_PORT:
        return None
    g = u + 8
    flags, mtype, _, teid = struct.unpack_from("!BBHI", frame, g)
    dst = ".".join(str(b) for b in frame[30:34])
    out = {"dst": dst, "teid": teid, "type": mtype, "psc_qfi": None, "pg": None, "seq": None}
    pos = g + 8
    if flags & 0x07:
        if pos + 4 > len(frame):
            return out
        nxt = frame[pos + 3] if flags & 0x04 else 0
        pos += 4
        while nxt and pos < len(frame):
            n = frame[pos] * 4
            if n == 0 or pos + n > len(frame):
                break
            if nxt == P.EXT_PDU_SESSION_CONTAINER and n >= 4:
                out["psc_qfi"] = frame[pos + 2] & 0x3F
            nxt = frame[pos + n - 1]
            pos += n
    if mtype == P.GTP_GPDU and len(frame) >= pos + 16:
        magic, pg, seq = struct.unpack_from("<HHI", frame, len(frame) - 16)
        if magic == TRAILER_MAGIC:
            out["pg"], out["seq"] = pg, seq
    return out


def handover(frames: list[tuple[int, bytes]], pg: int, tx: int, old: tuple[str, int], new: tuple[str, int],
             qfi: int | None, t_request_ns: int) -> dict:
    """One session's downlink across a path switch. frames: (wall ns, bytes) captured on the
    access port in arrival order; pg: its stream; tx: how many it sent; old/new: (gNB address,
    TEID); qfi: the bearer's QFI (the End Marker must carry a PDU Session Container), or None;
    t_request_ns: when the Update FAR was sent."""
    seen: dict[int, int] = {}
    last_old = first_new = None
    markers = []          # (position, ns, classified)
    old_after_marker = 0
    elsewhere = 0
    for i, (ns, fr) in enumerate(frames):
        c = classify(fr)
        if c is None:
            continue
        path = (c["dst"], c["teid"])
        if c["type"] == P.GTP_END_MARKER:
            if path in (old, new):
                markers.append((i, ns, c, path))
            continue
        if c["type"] != P.GTP_GPDU or c["pg"] != pg:
            continue
        seen[c["seq"]] = seen.get(c["seq"], 0) + 1
        if path == old:
            last_old = (i, ns)
            if any(p == old for _, _, _, p in markers):
                old_after_marker += 1
        elif path == new:
            if first_new is None:
                first_new = (i, ns)
        else:
            elsewhere += 1
    on_old = [mk for mk in markers if mk[3] == old]
    on_new = [mk for mk in markers if mk[3] == new]
    dups = sum(n - 1 for n in seen.values() if n > 1)
    missing = sum(1 for q in range(tx) if q not in seen)
    out = {"tx_packets": tx, "received_unique": len(seen), "missing": missing, "duplicates": dups,
           "elsewhere": elsewhere, "end_markers_old": len(on_old), "end_markers_new": len(on_new),
           "old_after_end_marker": old_after_marker,
           "end_marker_psc_qfi": on_old[0][2]["psc_qfi"] if on_old else None,
           "switch_ms": (first_new[1] - t_request_ns) / 1e6 if first_new else None,
           "gap_ms": (first_new[1] - last_old[1]) / 1e6 if first_new and last_old else None}
    why = []
    if len(on_old) != 1:
        why.append(f"{len(on_old)} End Markers on the old tunnel (1 expected)")
    if on_new:
        why.append(f"{len(on_new)} End Marker(s) on the new tunnel")
    if on_old and last_old and on_old[0][0] < last_old[0]:
        why.append(f"End Marker before the last G-PDU on the old path ({old_after_marker} G-PDUs after it)")
    if on_old and qfi is not None and out["end_marker_psc_qfi"] is None:
        why.append("End Marker without the PDU Session Container (the bearer has a QFI)")
    if missing:
        why.append(f"{missing} of {tx} downlink packets on neither path")
    if dups:
        why.append(f"{dups} downlink packets on both paths (or twice)")
    if elsewhere:
        why.append(f"{elsewhere} packets to neither tunnel")
    if first_new is None:
        why.append("no packet on the new path")
    out["verdict"] = "fail" if why else "pass"
    if why:
        out["why"] = "; ".join(why)
    return out


# ---------------------------------------------------------------------------------------------
# Usage reports


def usage_exact(reported: dict, sent: dict) -> dict:
    """reported/sent: {"ul_bytes", "dl_bytes", "ul_packets", "dl_packets"} (a reported None: the
    UPF did not report it). Each must be equal; packet counts the UPF does not send are noted,
    not failed (TONOP/ULNOP/DLNOP are optional in 8.2.44)."""
    why, notes = [], []
    for k in ("ul_bytes", "dl_bytes", "ul_packets", "dl_packets"):
        r, s = reported.get(k), sent[k]
        if r is None:
            if k.endswith("bytes"):
                why.append(f"{k} not reported")
            else:
                notes.append(f"{k} not reported")
        elif r != s:
            why.append(f"{k} {r} reported, {s} sent ({r - s:+d})")
    out = {"reported": reported, "generator": sent, "verdict": "fail" if why else "pass"}
    if why:
        out["why"] = "; ".join(why)
    if notes:
        out["notes"] = notes
    return out


def report_times(times: list[float], t0: float, period: float, tolerance: float = PERIOD_TOLERANCE_S) -> dict:
    """Reports expected at t0 + k x period (k = 1, 2 ...): each within tolerance s of its time."""
    errs = [t - (t0 + (k + 1) * period) for k, t in enumerate(sorted(times))]
    bad = [round(e, 3) for e in errs if abs(e) > tolerance]
    out = {"count": len(times), "errors_s": [round(e, 3) for e in errs], "tolerance_s": tolerance,
           "verdict": "pass" if times and not bad else "fail"}
    if not times:
        out["why"] = "no report"
    elif bad:
        out["why"] = f"reports off their time by {bad} s (tolerance {tolerance} s)"
    return out


def report_intervals(times: list[float], period: float, tolerance: float = PERIOD_TOLERANCE_S) -> dict:
    """Periodic reports: every interval between two consecutive ones within tolerance s of the period
    (where the first period starts, the URR's creation or the first packet, is the UPF's choice)."""
    ts = sorted(times)
    errs = [round(b - a - period, 3) for a, b in zip(ts, ts[1:])]
    bad = [e for e in errs if abs(e) > tolerance]
    out = {"count": len(ts), "errors_s": errs, "tolerance_s": tolerance,
           "verdict": "pass" if len(ts) >= 2 and not bad else "fail"}
    if len(ts) < 2:
        out["why"] = f"{len(ts)} report(s): no period to check"
    elif bad:
        out["why"] = f"intervals off the period by {bad} s (tolerance {tolerance} s)"
    return out


def threshold(reported_volume: int | None, limit: int, packet_len: int,
              slack: int = THRESHOLD_SLACK_PKTS, below: int = 0) -> dict:
    """A volume threshold or quota report: its volume within (limit - below packets, limit + slack
    packets); below=0: at least the limit. A quota may be reported just below its limit by a UPF
    that forwards only whole packets within it (below=1: less than one packet short)."""
    lo = limit - below * packet_len
    ok = reported_volume is not None and (lo < reported_volume if below else limit <= reported_volume) \
        and reported_volume < limit + slack * packet_len
    out = {"reported": reported_volume, "limit": limit, "slack_packets": slack, "below_packets": below,
           "verdict": "pass" if ok else "fail"}
    if not ok:
        out["why"] = ("no report" if reported_volume is None else
                      f"reported at {reported_volume} octets, {(reported_volume - limit) / packet_len:+.1f} "
                      f"packets from the limit {limit}")
    return out


# ---------------------------------------------------------------------------------------------
# N4


def where_lost(lost: int, where: dict, gen_ifnames: list[str]) -> str:
    """Words for where `lost` packets went, from Upf.loss_delta: the generator's veths failing to
    hand frames to the DUT (XDP transmit errors: the DUT's receive ring was full, its CPU did not
    drain it in time) and the UPF's own drops."""
    ring = sum(v for k, v in where.get("veth", {}).items()
               if k.split(".")[0] in gen_ifnames and "xdp_xmit_err" in k)
    upf = sum((where.get("upf_drops_by_reason") or {}).values())
    parts = [f"{ring} at the DUT's receive ring (generator veth XDP transmit errors: not drained in time)",
             f"{upf} dropped by the UPF" + (f" {where['upf_drops_by_reason']}" if upf else "")
             if "upf_drops_by_reason" in where else "the UPF's drops unknown"]
    rest = lost - ring - upf
    if rest > 0:
        parts.append(f"{rest} not attributed")
    return f"of the {lost} lost: " + ", ".join(parts)


def percentile(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, int(round(q * (len(s) - 1)))))]


def bounded_growth(samples: list[int], max_ratio: float = 0.10, floor_kib: int = 4096) -> dict:
    """RSS samples (KiB) over a churn soak, one per cycle: the last may exceed the one after the
    first cycle by at most max_ratio or floor_kib, whichever is larger."""
    if len(samples) < 2:
        return {"verdict": "fail", "why": "fewer than 2 samples", "samples_kib": samples}
    base, last = samples[0], samples[-1]
    allowed = max(base * max_ratio, floor_kib)
    ok = last - base <= allowed
    out = {"first_kib": base, "last_kib": last, "allowed_kib": int(allowed), "verdict": "pass" if ok else "fail"}
    if not ok:
        out["why"] = f"RSS grew {last - base} KiB over the soak (allowed {int(allowed)})"
    return out
