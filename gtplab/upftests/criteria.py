"""The pass/fail criteria of the UPF behaviour tests, as pure functions of what was measured (unit
tested with synthetic data in tests/upftests/test_criteria.py). Each returns a dict with "verdict"
("pass" | "fail" | "not decided"), the figures it decided on, "why" when it does not pass, and
"premises": what must have held for the measurement to say anything of the UPF (the load offered as
asked, the handover's switch while the traffic ran ...), each {"name", "held", "figures", "why"}.
When one did not hold the verdict is "not decided" (NOT_DECIDED), its why says which and with what
figures, and "criterion_verdict" keeps what the criterion alone would have said: never a pass or
a fail on a premise that did not hold (issue 31).

Rates and volumes are L3: the octets of the user's IP packets (the UE's packet, without the GTP-U
tunnel, Ethernet or FCS), as TS 29.244 defines the MBR (8.2.8, kbit/s of the QoS flow) and the
Volume Measurement (8.2.44).
"""

from __future__ import annotations

import ipaddress
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
NOT_DECIDED = "not decided"
# The generator offers the load asked within this: above the MBR the rate measured in the window,
# at or below it the packets of the whole trial (within a burst more: a trial holds whole bursts).
# Measured here: +-0.1 % smooth, +-1 % with bursts, in the window (issue 31).
OFFERED_TOLERANCE = 0.05
# Handover: the Update answered at least this long before the traffic ended, and the traffic
# started at least this long before it was sent: a switch that came as the traffic ended says
# nothing of the path switch (the UPF had nothing left to send on the new path).
SWITCH_MARGIN_S = 0.1
# the handover's per-packet record kept in its case (seq_series, for the report's plot): per path at
# most this many (time, sequence number) points, evenly spaced, plus the packets nearest the switch
SERIES_POINTS = 400
SERIES_SWITCH_POINTS = 25
# Where a packet is lost on its way to a UPF's policer, per direction: the DUT's receive ring (the
# generator veth's XDP transmit errors, on the port the direction enters by) and, for a UPF on the
# kernel's path (counters kernelpath, gtplab/dut/kernelpath.py), its namespace's receive side:
# uplink the N3 socket's UDP receive (buffer, memory, checksum, no socket), downlink the TUN
# device's queue, both the ingress veth's drops after the lab's XDP_PASS. A UPF's own drops by
# reason (the PGW-U's drop_mbr, ...) are after it: the policer's or the UPF's.
PRE_POLICER_PLACES = {"uplink": ("udp_rcvbuf", "udp_mem", "udp_in_csum", "udp_no_ports", "veth_rx_dropped"),
                      "downlink": ("tun_tx_dropped", "veth_rx_dropped")}


def premise(name: str, held: bool, why: str = "", **figures) -> dict:
    """One premise of a verdict: its name, whether it held, the figures it was decided on, and in
    words why it did not hold."""
    out = {"name": name, "held": bool(held), "figures": figures}
    if not held:
        out["why"] = why
    return out


def decide(out: dict, premises: list[dict]) -> dict:
    """out (a criterion's result, its "verdict" set) with its premises: when one did not hold, the
    verdict is NOT_DECIDED, "why" says which with their figures, and "criterion_verdict" what the
    criterion alone said (its own why kept as "criterion_why"). A "not supported" or "measured"
    verdict is left as it is (nothing was decided)."""
    out["premises"] = premises
    failed = [p for p in premises if not p["held"]]
    if failed and out.get("verdict") in ("pass", "fail", NOT_DECIDED):
        if out["verdict"] != NOT_DECIDED:
            out["criterion_verdict"] = out["verdict"]
            if out.get("why"):
                out["criterion_why"] = out["why"]
        out["verdict"] = NOT_DECIDED
        out["why"] = "not decided: " + "; ".join(p["why"] for p in failed)
    return out


def premises_held(case: dict) -> bool:
    """Whether every premise of a case held (a case without premises: yes)."""
    return all(p["held"] for p in case.get("premises", ()))


def lost_before_policer(where: dict | None, direction: str, gen_ifname: str | None) -> tuple[int | None, dict]:
    """Packets of one direction lost before the policer in a trial (PRE_POLICER_PLACES), from
    Upf.loss_delta: (count, {place: count}); (None, {}) when nothing was read."""
    if where is None:
        return None, {}
    at = {}
    if gen_ifname is not None:
        ring = sum(v for k, v in where.get("veth", {}).items()
                   if k.split(".")[0] == gen_ifname and "xdp_xmit_err" in k)
        if ring:
            at["dut_receive_ring"] = ring
    for k, v in (where.get("upf_drops_by_reason") or {}).items():
        if k in PRE_POLICER_PLACES[direction] and v:
            at[k] = v
    return sum(at.values()), at


def policing(factor: float, mbr_bps: float, tx: int, rx: int, delivered_bps: float | None,
             gate_open: bool = True, offered_bps: float | None = None, burst_bytes: int | None = None,
             min_burst: int = MIN_BURST_BYTES, asked_packets: float | None = None, burst_packets: int = 1,
             lost_before: int | None = None, lost_before_at: dict | None = None, window_s: float | None = None,
             l3_bytes: int | None = None) -> dict:
    """One session and direction at factor x MBR. delivered_bps / offered_bps: L3 bit rates
    received / sent in the steady window (window_s, after the bucket's initial burst). burst_bytes:
    the L3 octets the generator sent back to back, every burst_bytes / (factor x MBR) s (None:
    smooth).

    At <= 0.99 x MBR nothing may be lost when the burst is at most min_burst octets; a larger burst
    may be policed (the MBR has no burst size: the UPF picks its bucket): its loss is "measured",
    no verdict (burst_tolerance decides on the largest burst passed). Above the MBR the delivered
    rate is never more than MBR + 1 %, and not less than MBR - 1 % when MBR x the bursts' period
    (burst_bytes / factor: what the bucket must hold for no token to go unused) is at most
    min_burst; a bucket smaller than that may deliver less (measured, passes).

    Premises (not decided when one fails): traffic sent; the load offered as asked (above the MBR:
    offered_bps within OFFERED_TOLERANCE of factor x MBR and above MBR + 2 x the tolerance; at or
    below: tx within OFFERED_TOLERANCE and a burst of asked_packets, the trial's packets at the
    rate asked); what reached the policer (lost_before: this direction's packets lost before the
    policer in the trial, lost_before_at: where): above the MBR, the offered rate less the most of
    them this case can have lost still above MBR + 2 x the tolerance; below it, a case's loss is
    decided only when more was lost than the places before the policer took (that much the UPF
    lost) or nothing was lost before it; a closed gate had packets reach it."""
    out = {"factor": factor, "mbr_bps": mbr_bps, "tx_packets": tx, "rx_packets": rx,
           "delivered_bps": delivered_bps, "offered_bps": offered_bps, "lost_packets": tx - rx,
           "burst_bytes": burst_bytes}
    if lost_before is not None:
        out["lost_before_policer"] = lost_before
    big = burst_bytes is not None and burst_bytes > min_burst
    verdict = None
    if not gate_open:
        out["criterion"] = "gate closed: every packet dropped"
        ok = rx == 0
        why = f"{rx} of {tx} packets passed a closed gate" if rx else ""
    elif factor <= NO_LOSS_FACTOR and big:
        out["criterion"] = (f"<= {NO_LOSS_FACTOR} x MBR, burst {burst_bytes} octets > {min_burst}: loss measured, "
                            "no criterion (the UPF's bucket; see the burst tolerance)")
        ok, verdict, why = True, "measured", ""
    elif factor <= NO_LOSS_FACTOR:
        out["criterion"] = f"<= {NO_LOSS_FACTOR} x MBR" + (f", burst {burst_bytes} octets" if burst_bytes else "") \
            + ": no loss"
        ok = rx == tx
        why = f"{tx - rx} of {tx} packets lost below the MBR" if rx != tx else ""
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
    out["verdict"] = verdict or ("pass" if ok else "fail")
    if not ok:
        out["why"] = why
    elif verdict == "measured" and rx != tx:
        out["why"] = f"{tx - rx} of {tx} packets lost (burst above the required {min_burst} octets)"
    return decide(out, _policing_premises(factor, mbr_bps, tx, rx, gate_open, offered_bps, asked_packets,
                                          burst_packets, lost_before, lost_before_at, window_s, l3_bytes))


def _policing_premises(factor, mbr_bps, tx, rx, gate_open, offered_bps, asked_packets, burst_packets,
                       lost_before, lost_before_at, window_s, l3_bytes) -> list[dict]:
    ps = [premise("traffic sent", tx > 0, "the generator sent nothing", tx_packets=tx)]
    floor = mbr_bps * (1 + 2 * POLICING_TOLERANCE)
    asked_bps = factor * mbr_bps
    if gate_open and factor > 1 and offered_bps is not None:
        held = abs(offered_bps / asked_bps - 1) <= OFFERED_TOLERANCE and offered_bps >= floor
        ps.append(premise("offered as asked", held,
                          f"the generator offered {offered_bps / 1e6:.3f} Mb/s in the window, asked "
                          f"{asked_bps / 1e6:.3f} Mb/s ({factor:g} x MBR {mbr_bps / 1e6:.3f} Mb/s; +-"
                          f"{OFFERED_TOLERANCE:.0%} and above MBR + {2 * POLICING_TOLERANCE:.0%} required)",
                          offered_bps=offered_bps, asked_bps=asked_bps, tolerance=OFFERED_TOLERANCE))
    elif gate_open and asked_packets is not None:
        slack = OFFERED_TOLERANCE * asked_packets + burst_packets
        held = abs(tx - asked_packets) <= slack
        ps.append(premise("offered as asked", held,
                          f"the generator sent {tx} packets, {asked_packets:.0f} asked (+-{slack:.0f}: "
                          f"{OFFERED_TOLERANCE:.0%} and a burst of {burst_packets})",
                          tx_packets=tx, asked_packets=round(asked_packets, 1), tolerance=OFFERED_TOLERANCE))
    if lost_before is None:
        return ps
    where = ", ".join(f"{n} at {k}" for k, n in sorted((lost_before_at or {}).items())) or "none"
    fig = {"lost_before_policer": lost_before, "where": dict(lost_before_at or {})}
    if not gate_open:
        ps.append(premise("reached the gate", lost_before < tx,
                          f"all {tx} packets lost before the gate ({where})", **fig))
    elif factor <= NO_LOSS_FACTOR:
        lost = tx - rx
        held = lost_before == 0 or lost == 0 or lost > lost_before
        ps.append(premise("reached the policer", held,
                          f"{lost} of {tx} packets lost, and {lost_before} of this direction's in the trial "
                          f"before the policer ({where}): the loss may not be the UPF's policer's", case_lost=lost,
                          **fig))
    elif lost_before and offered_bps is not None:
        most = min(lost_before, max(0, tx - rx))
        # at worst every one of them in the window (the trial's counters do not say when)
        reached = max(0.0, offered_bps - (most * l3_bytes * 8 / window_s if l3_bytes and window_s else offered_bps))
        ps.append(premise("reached the policer", reached >= floor,
                          f"{lost_before} packets of this direction lost before the policer in the trial ({where}): "
                          f"at worst {reached / 1e6:.3f} Mb/s of the {offered_bps / 1e6:.3f} Mb/s offered reached "
                          f"it, not above the MBR {mbr_bps / 1e6:.3f} Mb/s + {2 * POLICING_TOLERANCE:.0%}",
                          reached_bps_at_worst=reached, **fig))
    else:
        ps.append(premise("reached the policer", True, **fig))
    return ps


def burst_tolerance(trials: list[dict], mbr_bps: float, min_burst: int = MIN_BURST_BYTES) -> dict:
    """One session and direction at <= 0.99 x MBR over the burst sizes tried. trials: {"burst_bytes",
    "burst_packets", "tx_packets", "rx_packets", "max_burst", "decided"} (one per burst and load;
    max_burst: the most packets the generator sent back to back, None: unknown; decided: whether
    the trial's premises held, default yes). The tolerance is the largest burst that lost nothing,
    with every smaller one; in ms at the MBR too. A trial with loss whose generator sent more than
    its burst back to back (held up, it caught up), or whose premises did not hold (the load not
    offered as asked, its loss before the policer), says nothing of that burst: left out, and
    said. Pass when every burst of at most min_burst octets lost nothing and one of them is within
    a packet of min_burst; premise: such a burst was tried and kept (else not decided)."""
    by: dict[int, bool] = {}
    pkt, unclear = 0, []
    for t in trials:
        b = t["burst_bytes"]
        ok = t["rx_packets"] == t["tx_packets"] > 0
        if not t.get("decided", True) or (not ok and (t.get("max_burst") or 0) > t.get("burst_packets", 1)):
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
    else:
        out["verdict"] = "pass"
    # a loss at a smaller burst decides (a fail) without the required one; a pass needs it
    return decide(out, [premise(
        "required burst tried", bool(near) or bool(lost_small),
        f"no burst within a packet of {min_burst} octets tried and kept"
        + (f" (left out: the generator sent more back to back, or the trial's premises failed, at "
           f"{sorted(set(unclear))} octets)" if unclear else ""),
        min_burst_bytes=min_burst, kept_bytes=sorted(by), left_out_bytes=sorted(set(unclear)))])


def isolation(alone_bps: float | None, together_bps: float | None, alone_offered_bps: float | None = None,
              alone_decided: bool = True, together_decided: bool = True, mbr_bps: float | None = None) -> dict:
    """One session's delivered rate above its MBR, alone and with the other sessions policed at the
    same time: within +-1 % of each other. Premises: both rates measured; the session policed alone
    (delivered less than offered, and not above MBR + 1 % when the MBR is given: a UPF that loses
    some of an unpoliced load, Open5GS at its socket, is not policing it; else its rate beside the
    others is the generator's); both trials' own premises held (alone_decided, together_decided:
    the load offered as asked and reaching the policer). Any not holding: not decided."""
    out = {"alone_bps": alone_bps, "delivered_bps": together_bps, "alone_offered_bps": alone_offered_bps,
           "criterion": f"rate beside the other sessions = rate alone +-{POLICING_TOLERANCE:.0%}"}
    measured = bool(alone_bps) and together_bps is not None
    ps = [premise("rates measured", measured, "no rate measured alone" if not alone_bps else "no rate measured "
                  "beside the other sessions", alone_bps=alone_bps, together_bps=together_bps)]
    if measured and (alone_offered_bps or mbr_bps):
        held = ((not alone_offered_bps or alone_bps < alone_offered_bps * (1 - POLICING_TOLERANCE))
                and (not mbr_bps or alone_bps <= mbr_bps * (1 + POLICING_TOLERANCE)))
        ps.append(premise("policed alone", held,
                          f"not policed alone ({alone_bps / 1e6:.3f} Mb/s delivered"
                          + (f" of {alone_offered_bps / 1e6:.3f} Mb/s offered" if alone_offered_bps else "")
                          + (f", MBR {mbr_bps / 1e6:.3f} Mb/s" if mbr_bps else "") + ")",
                          alone_bps=alone_bps, alone_offered_bps=alone_offered_bps, mbr_bps=mbr_bps))
    ps.append(premise("trials decided", alone_decided and together_decided,
                      "the premises of the trial " + " and ".join(
                          w for w, ok in (("alone", alone_decided), ("beside the others", together_decided)) if not ok)
                      + " did not hold", alone=alone_decided, together=together_decided))
    if not measured:
        out["verdict"] = "fail"
        return decide(out, ps)
    err = together_bps / alone_bps - 1
    out["error_ratio"] = err
    out["verdict"] = "pass" if abs(err) <= POLICING_TOLERANCE else "fail"
    if out["verdict"] == "fail":
        out["why"] = (f"{together_bps / 1e6:.3f} Mb/s beside the other sessions, {alone_bps / 1e6:.3f} Mb/s alone "
                      f"({err:+.1%})")
    return decide(out, ps)


# ---------------------------------------------------------------------------------------------
# Handover: the capture on the access port


def _csum16(data: bytes, start: int) -> int:
    if len(data) % 2:
        data += b"\0"
    s = start + sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def udp6_ok(frame: bytes) -> bool:
    """An untagged Ethernet/IPv6/UDP frame's UDP checksum is the right one and not 0 (RFC 8200 8.1:
    mandatory over IPv6): the one's complement sum over the pseudo header (addresses, the UDP
    length, next header 17) and the datagram as long as the IPv6 payload length says."""
    plen = struct.unpack_from("!H", frame, 18)[0]
    udp = frame[54:54 + plen]
    if len(udp) < 8 or udp[6:8] == b"\0\0":
        return False
    return _csum16(udp, sum(struct.unpack("!16H", frame[22:54])) + 17 + len(udp)) == 0


def classify(frame: bytes) -> dict | None:
    """A GTP-U frame as seen on N3 (Ethernet/IPv4 or IPv6/UDP 2152/GTP-U): {dst, teid, type, psc_qfi,
    pg, seq, inner}; over IPv6 also {src, udp_ok} (its UDP checksum right: udp6_ok); None for
    anything else. pg/seq: the engine's trailer of a G-PDU; inner: the offset of its T-PDU (None when
    its extension headers could not be walked)."""
    if len(frame) < 14 + 20 + 8 + 8:
        return None
    extra = {}
    if frame[12:14] == b"\x86\xdd":          # GTP-U over IPv6 (N3 over IPv6, --n3 6)
        if len(frame) < 14 + 40 + 8 + 8 or frame[20] != 17:
            return None
        u = 14 + 40
        dst = str(ipaddress.IPv6Address(frame[38:54]))
        extra = {"src": str(ipaddress.IPv6Address(frame[22:38])), "udp_ok": None}
    elif frame[12:14] == b"\x08\x00" and frame[23] == 17:
        u = 14 + (frame[14] & 0x0F) * 4
        dst = ".".join(str(b) for b in frame[30:34])
    else:
        return None
    if struct.unpack_from("!H", frame, u + 2)[0] != P.GTPU_PORT:
        return None
    g = u + 8
    flags, mtype, _, teid = struct.unpack_from("!BBHI", frame, g)
    out = {"dst": dst, "teid": teid, "type": mtype, "psc_qfi": None, "pg": None, "seq": None, "inner": None,
           **extra}
    if extra:
        out["udp_ok"] = udp6_ok(frame)
    pos, nxt = g + 8, 0
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
    if mtype == P.GTP_GPDU and not nxt:
        out["inner"] = pos
    if mtype == P.GTP_GPDU and len(frame) >= pos + 16:
        magic, pg, seq = struct.unpack_from("<HHI", frame, len(frame) - 16)
        if magic == TRAILER_MAGIC:
            out["pg"], out["seq"] = pg, seq
    return out


def end_marker6_problems(frame: bytes, n3_addr: str, old: tuple[str, int], qfi: int | None) -> list[str]:
    """What is wrong with an End Marker over IPv6 on the old tunnel, read with Scapy (TS 29.281 7.3.2,
    5.1; RFC 8200 8.1): from the UPF's N3 IPv6 address to the old gNB, UDP to 2152 with the checksum
    Scapy computes for it, GTP-U version 1 PT 1 type 254 with the old TEID, its length the octets
    after the first 8, and with a QFI a PDU Session Container of it (TS 38.415). [] when none."""
    from scapy.contrib.gtp import GTP_U_Header
    from scapy.layers.inet import UDP
    from scapy.layers.inet6 import IPv6
    from scapy.layers.l2 import Ether
    e = Ether(frame)
    if IPv6 not in e or UDP not in e:
        return ["not IPv6/UDP"]
    ip, udp = e[IPv6], e[UDP]
    bad = []
    if ipaddress.IPv6Address(ip.src) != ipaddress.IPv6Address(n3_addr):
        bad.append(f"from {ip.src}, not the UPF's N3 address {n3_addr}")
    if ipaddress.IPv6Address(ip.dst) != ipaddress.IPv6Address(old[0]):
        bad.append(f"to {ip.dst}, not the old gNB {old[0]}")
    redo = IPv6(bytes(ip)[:40 + ip.plen])
    redo[UDP].chksum = None
    want = IPv6(bytes(redo))[UDP].chksum
    if udp.dport != P.GTPU_PORT or udp.chksum != want:
        bad.append(f"UDP to {udp.dport}, checksum {udp.chksum:#06x} (Scapy's {want:#06x})")
    g = bytes(udp.payload)
    if GTP_U_Header not in e or len(g) < 8:
        bad.append("no GTP-U header")
        return bad
    h = e[GTP_U_Header]
    if (h.version, h.PT, h.gtp_type, h.teid) != (1, 1, P.GTP_END_MARKER, old[1]):
        bad.append(f"GTP-U version {h.version} PT {h.PT} type {h.gtp_type} TEID {h.teid:#x}")
    if h.length != len(g) - 8:
        bad.append(f"GTP-U length {h.length}, {len(g) - 8} octets follow")
    c = classify(frame)
    if qfi is not None and (c is None or c["psc_qfi"] != qfi):
        bad.append(f"PDU Session Container QFI {None if c is None else c['psc_qfi']} (the bearer's {qfi})")
    return bad


def handover(frames: list[tuple[int, bytes]], pg: int, tx: int, old: tuple[str, int], new: tuple[str, int],
             qfi: int | None, t_request_ns: int, t_answer_ns: int | None = None, traffic_start_ns: int | None = None,
             traffic_end_ns: int | None = None, capture_lost: int = 0, host_lost: dict[str, int] | None = None,
             upf_drops: dict[str, int] | None = None, n3_addr: str | None = None) -> dict:
    """One session's downlink across a path switch. frames: (wall ns, bytes) captured on the
    access port in arrival order; pg: its stream; tx: how many it sent; old/new: (gNB address,
    TEID); qfi: the bearer's QFI (the End Marker must carry a PDU Session Container), or None;
    t_request_ns / t_answer_ns: when the Update FAR was sent / answered; traffic_start_ns /
    traffic_end_ns: when the generator started / stopped sending (all on the capture's clock).

    Premises (not decided when one fails): the traffic ran before the Update was sent and still
    ran SWITCH_MARGIN_S after it was answered (the end: the generator's, or the stream's last
    packet captured if later), so every packet of that time must go on the new path; the capture
    lost nothing (capture_lost). A UPF that answered in time and sent nothing on the new path
    fails; an Update answered as the traffic ended decides nothing.

    Missing packets are looked for on the counters: host_lost, {place: frames} the host's rings
    refused during the run (host_losses(): a veth ring that overflowed while a vCPU stalled), and
    upf_drops, the UPF's own drops by reason (None: not read). When missing packets are the only
    fault, the host's rings lost at least as many and the UPF dropped none, the loss is the host's:
    the premise "no loss at the host's rings" fails and the case is not decided, with the figures.
    Otherwise a missing packet fails the UPF (the host's share said in the why).

    Over N3 IPv6 (n3_addr: the UPF's N3 IPv6 address): every G-PDU of the stream and every End Marker
    on either tunnel must have its UDP checksum right (udp6_ok), and the End Marker on the old tunnel
    is read with Scapy (end_marker6_problems)."""
    seen: dict[int, int] = {}
    last_old = first_new = None
    last_any = None
    on_path: dict[str, list[tuple[int, int]]] = {"old": [], "new": []}     # (ns, seq) per path
    markers = []          # (position, ns, classified)
    old_after_marker = 0
    elsewhere = 0
    bad_csum = 0
    for i, (ns, fr) in enumerate(frames):
        c = classify(fr)
        if c is None:
            continue
        path = (c["dst"], c["teid"])
        if c["type"] == P.GTP_END_MARKER:
            if path in (old, new):
                markers.append((i, ns, c, path))
                bad_csum += c.get("udp_ok") is False
            continue
        if c["type"] != P.GTP_GPDU or c["pg"] != pg:
            continue
        bad_csum += c.get("udp_ok") is False
        seen[c["seq"]] = seen.get(c["seq"], 0) + 1
        last_any = ns if last_any is None else max(last_any, ns)
        if path in (old, new):
            on_path["old" if path == old else "new"].append((ns, c["seq"]))
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
    gone = [q for q in range(tx) if q not in seen]
    missing = len(gone)
    out = {"tx_packets": tx, "received_unique": len(seen), "missing": missing, "missing_seqs": gone[:10],
           "duplicates": dups,
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
    if n3_addr is not None:
        out["udp_checksum_wrong"] = bad_csum
        if bad_csum:
            why.append(f"{bad_csum} packets over IPv6 with a wrong or zero UDP checksum")
        if on_old:
            probs = end_marker6_problems(frames[on_old[0][0]][1], n3_addr, old, qfi)
            out["end_marker_checked"] = "Scapy: " + ("; ".join(probs) if probs else "right")
            if probs:
                why.append("End Marker over IPv6: " + "; ".join(probs))
    if missing:
        why.append(f"{missing} of {tx} downlink packets on neither path")
    host = {k: v for k, v in (host_lost or {}).items() if v}
    dropped = None if upf_drops is None else {k: v for k, v in upf_drops.items() if v}
    out["lost_at_host"] = host
    out["upf_drops"] = dropped
    at_host = bool(missing) and len(why) == 1 and sum(host.values()) >= missing and not dropped
    if missing and not at_host and (host or dropped):
        why[-1] += (f" ({sum(host.values())} frames lost at the host's rings {host}, "
                    + (f"the UPF dropped {sum(dropped.values())} {dropped}" if dropped else
                       "the UPF's drops " + ("none" if dropped is not None else "not read")) + ")")
    if dups:
        why.append(f"{dups} downlink packets on both paths (or twice)")
    if elsewhere:
        why.append(f"{elsewhere} packets to neither tunnel")
    if first_new is None:
        why.append("no packet on the new path")
    out["verdict"] = "fail" if why else "pass"
    if why:
        out["why"] = "; ".join(why)
    out["seq_series"] = seq_series(on_path, [ns for _, ns, _, p in markers if p == old],
                                   [ns for _, ns, _, p in markers if p == new], t_request_ns)
    ps = _handover_premises(t_request_ns, t_answer_ns, traffic_start_ns, traffic_end_ns, last_any, first_new,
                            last_old, capture_lost)
    places = " and ".join(f"{place} ({n} frames there in the run)" for place, n in host.items())
    ps.append(premise("no loss at the host's rings", not at_host, f"{missing} packets lost at {places} (host)",
                      missing=missing, lost_at_host=host, upf_drops=dropped))
    return decide(out, ps)


def host_losses(where: dict | None, places: dict[str, str]) -> dict[str, int] | None:
    """{place: frames} lost at the host's rings between two snapshots, from Upf.loss_delta's veth
    counters: places maps a counter ("<ifname>.<ethtool -S name>") to the place's words; a place
    that lost nothing is left out. None when nothing was read."""
    if where is None:
        return None
    out = {}
    for key, place in places.items():
        n = where.get("veth", {}).get(key, 0)
        if n:
            out[place] = out.get(place, 0) + n
    return out


def _downsample(pts: list, n: int, keep_first: int = 0, keep_last: int = 0) -> list:
    """At most n evenly spaced of pts (first and last kept), plus its first keep_first and last
    keep_last, in order."""
    if len(pts) <= n + keep_first + keep_last:
        return list(pts)
    idx = {round(k * (len(pts) - 1) / (n - 1)) for k in range(n)}
    idx |= set(range(keep_first)) | set(range(len(pts) - keep_last, len(pts)))
    return [pts[i] for i in sorted(idx)]


def seq_series(on_path: dict[str, list[tuple[int, int]]], markers_old: list[int], markers_new: list[int],
               t_request_ns: int) -> dict:
    """The handover's packets as the report plots them, bounded: per path ("old", "new") at most
    SERIES_POINTS (+ SERIES_SWITCH_POINTS next to the switch) [s from the Update's send, sequence
    number], in arrival order, with how many packets each path had; the End Markers' times."""
    def s(ns):
        return round((ns - t_request_ns) / 1e9, 6)
    near = {"old": (0, SERIES_SWITCH_POINTS), "new": (SERIES_SWITCH_POINTS, 0)}
    return {"clock": "s from the Update FAR's send",
            **{p: [[s(ns), q] for ns, q in _downsample(on_path[p], SERIES_POINTS, *near[p])] for p in ("old", "new")},
            "packets": {p: len(on_path[p]) for p in ("old", "new")},
            "end_markers_old_at": [s(ns) for ns in markers_old[:10]],
            "end_markers_new_at": [s(ns) for ns in markers_new[:10]]}


def _handover_premises(t_req, t_ans, t_start, t_end, last_any, first_new, last_old, capture_lost) -> list[dict]:
    def s(ns):                     # a time on the capture's clock, in s from the Update's send
        return None if ns is None else round((ns - t_req) / 1e9, 4)
    end = max((t for t in (t_end, last_any) if t is not None), default=None)
    margin = int(SWITCH_MARGIN_S * 1e9)
    fig = {"update_sent_at": 0.0, "update_answered_at": s(t_ans), "traffic_start": s(t_start),
           "traffic_end": s(end), "first_new_path_packet_at": s(first_new[1] if first_new else None),
           "last_old_path_packet_at": s(last_old[1] if last_old else None), "margin_s": SWITCH_MARGIN_S,
           "clock": "s from the Update FAR's send"}
    ps = []
    if t_start is not None:
        ps.append(premise("traffic before the switch", t_start + margin <= t_req,
                          f"the traffic started {s(t_start)} s from the Update's send (at least {SWITCH_MARGIN_S} s "
                          "before it required)", **fig))
    answered = t_ans if t_ans is not None else t_req
    if end is None:
        ps.append(premise("switch while the traffic ran", False, "no packet of the stream captured", **fig))
    else:
        ps.append(premise(
            "switch while the traffic ran", answered + margin <= end,
            f"the Update FAR was answered at {s(answered)} s and the traffic ended at {s(end)} s (from its send; "
            f"at least {SWITCH_MARGIN_S} s of traffic after the answer required): the switch came after the traffic",
            **fig))
    ps.append(premise("capture complete", not capture_lost, f"the capture lost {capture_lost} frames",
                      capture_lost=capture_lost))
    return ps


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


def load_as_asked(tx: int, asked: float, what: str = "the data plane's load") -> dict:
    """Premise of an N4 case under load: the generator sent at least the packets asked (pps x the
    time it ran) less OFFERED_TOLERANCE: else the case was not under the load it says."""
    return premise("load as asked", asked > 0 and tx >= (1 - OFFERED_TOLERANCE) * asked,
                   f"{what}: the generator sent {tx} packets, {asked:.0f} asked (at least "
                   f"{1 - OFFERED_TOLERANCE:.0%} required)", tx_packets=tx, asked_packets=round(asked, 1),
                   tolerance=OFFERED_TOLERANCE)


def traffic_as_asked(tx: dict, asked: float) -> dict:
    """Premise of a usage case: the generator sent each direction's packets as asked (tx: {"uplink",
    "downlink"} packets; asked: pps x duration), within OFFERED_TOLERANCE."""
    off = {d: n for d, n in tx.items() if abs(n - asked) > OFFERED_TOLERANCE * asked or not n}
    return premise("traffic as asked", not off,
                   "the generator sent " + ", ".join(f"{n} {d}" for d, n in off.items())
                   + f" packets, {asked:.0f} asked (+-{OFFERED_TOLERANCE:.0%})",
                   tx_packets=dict(tx), asked_packets=round(asked, 1), tolerance=OFFERED_TOLERANCE)


def usage_timing(name: str, t0: float, t_end: float, times: list[float] | None = None, due: float | None = None,
                 period: float | None = None, tolerance: float = PERIOD_TOLERANCE_S) -> tuple[dict, list[float]]:
    """Premise of a usage case's timing: the reports' periods inside the traffic [t0, t_end] (wall
    s). due: a report due at t0 + due (time threshold) must be due while the traffic ran; period:
    the periodic reports judged are those whose period ends inside the traffic (tolerance after its
    end: later ones report no traffic, left out), and the traffic must hold two periods at least;
    times (no due, no period): a report that must come while the traffic ran (the answer to a
    Query URR). Returns (the premise, the times judged)."""
    fig = {"traffic_start": round(t0, 3), "traffic_end": round(t_end, 3), "tolerance_s": tolerance}
    times = sorted(times or [])
    if due is not None:
        at = t0 + due
        return premise(name, at + tolerance <= t_end,
                       f"the report is due {due} s after the traffic started, the traffic ran {t_end - t0:.2f} s",
                       due_at=round(at, 3), **fig), times
    if period is not None:
        kept = [t for t in times if t <= t_end + tolerance]
        return premise(name, t_end - t0 >= 2 * period,
                       f"the traffic ran {t_end - t0:.2f} s: fewer than two periods of {period} s",
                       period_s=period, reports=[round(t, 3) for t in times],
                       after_traffic=[round(t, 3) for t in times if t > t_end + tolerance], **fig), kept
    inside = [t for t in times if t0 <= t <= t_end]
    return premise(name, bool(inside) or not times,
                   f"answered at {[round(t - t0, 3) for t in times]} s from the traffic's start, which ran "
                   f"{t_end - t0:.2f} s", at=[round(t, 3) for t in times], **fig), times


def enough_traffic(offered_octets: int, limit: int, packet_len: int, slack: int = THRESHOLD_SLACK_PKTS) -> dict:
    """Premise of a volume threshold or quota case: the generator offered more than the limit and
    the slack past it (else the report, or the traffic stopping, could not be seen)."""
    need = limit + slack * packet_len
    return premise("enough traffic for the limit", offered_octets >= need,
                   f"{offered_octets} octets offered, {need} needed to cross the limit {limit} and {slack} packets",
                   offered_octets=offered_octets, limit=limit, needed_octets=need)


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
