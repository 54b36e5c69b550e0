"""Handover under load (issue 25 item 3): while downlink traffic runs, an Update FAR points each
session's downlink at a new gNB address and TEID with "send End Marker" (PFCPSMReq-Flags SNDEM,
TS 29.244 5.2.2.3 / TS 29.281 7.3.2). Two sessions: one without QFI (an S1-U bearer), one with a
QFI (a 5G QoS flow: its End Marker must carry the PDU Session Container).

Everything the UPF sends on N3 is captured on the access port (arrival order, engine timestamps);
criteria.handover checks per session: exactly one End Marker on the old tunnel, none on the new,
after the last G-PDU on the old path; every downlink packet (the engine's per-stream sequence
number) on exactly one path, none lost, none twice; the switch time (Update FAR sent -> first
packet on the new path) and the gap (last old -> first new) measured.

Premises (criteria.handover; "not decided" when one fails): the traffic ran before the Update FAR
was sent and still ran 0.1 s after it was answered (on a loaded host the Update can be answered
after the traffic ended: every packet then goes on the old path and says nothing of the switch),
and the capture lost nothing; and packets missing are not the host's: the veth rings on the way
(generator -> DUT on N6, DUT -> generator on N3) are read before and after the run, and when they
refused at least the packets missing, while the UPF dropped none, the case is not decided ("N
packets lost at <place> (host)"), never a fail of the UPF.
"""

from __future__ import annotations

import time

from gtplab.traffic.engine.capture import capture_clock_ns
from gtplab.upftests import criteria as C
from gtplab.upftests.harness import Unsupported, Upf

PPS = 5000            # per session; the lab forwards well over 10x this (docs/lab.md)
DURATION_S = 3.0
SWITCH_AT_S = 1.5
QFI = 9
SIZE = 256
LATE_S = 3.0         # the longest the capture waits for packets still on their way after the traffic


def planned(**_) -> int:
    """The cases run() makes: one per session."""
    return 2


def run(upf: Upf, pps: float = PPS, duration: float = DURATION_S, size: int = SIZE) -> list[dict]:
    a = upf.lab.addressing
    plan = [(0, None), (1, QFI)]
    sessions = []
    try:
        for i, qfi in plan:
            sessions.append(upf.establish(upf.rules(i, qfi=qfi)))
    except Unsupported as e:
        return [{"case_id": "handover", "kind": "handover", "verdict": "not supported", "why": str(e),
                 "cause": e.cause}]
    total = int(pps * duration * len(sessions)) + 10_000
    # the capture first: started after the traffic it can miss the first packets (once, on a loaded
    # host, 6 of 14,901 "on neither path" on both sessions alike: most likely those; each case now
    # lists its first missing sequence numbers, missing_seqs); the engine's capture is apart from
    # its streams, so it takes nothing from before them
    p0, p1 = upf.lab.ports
    host_places = {f"{p1.ifname}.tx_queue_0_xdp_xmit_errors": f"the DUT's N6 receive ring ({p1.dut_ifname})",
                   f"{p0.dut_ifname}.tx_queue_0_xdp_xmit_errors": f"the generator's N3 receive ring ({p0.ifname})"}
    snap = upf.loss_snapshot()
    cap = upf.client.start_capture(rx_ports=[0], limit=total)["id"]
    ports = upf.start([upf.dl_stream(s, size, pps) for s in sessions], duration=duration)
    # when the generator started (its port's start, else now), on the capture's clock; the switch
    # SWITCH_AT_S after it (not after this process got round to sleeping: on a loaded host that
    # came 2.3 s late once, after the traffic had ended)
    now_mono, now_cap = time.monotonic(), capture_clock_ns()
    t_port = upf.port_start(ports[0])
    t_start = now_cap if t_port is None else now_cap - int((now_mono - t_port) * 1e9)
    t_end = t_start + int(duration * 1e9)
    time.sleep(max(0.0, (t_port if t_port is not None else now_mono) + SWITCH_AT_S - time.monotonic()))
    targets, t_req, t_ans, errors = {}, {}, {}, {}
    for s in sessions:
        new = (upf.gnb(s.index + 8), s.rules.gnb_teid + 0x1000)
        try:
            upf.modify(s, "Update FAR with SNDEM", handover=new, end_marker=True)
            targets[s.index] = new
        except Unsupported as e:
            errors[s.index] = e
        t_req[s.index], t_ans[s.index] = upf.sent_ns, upf.answered_ns
    upf.wait(ports)
    # the capture stops once the generator's flow counters have every packet back (or LATE_S has
    # passed): a UPF that holds a few packets over the switch (Open5GS: 4-7 of 15,000 arrived more
    # than 0.3 s after the traffic ended) is not counted as losing them; then the End Markers' time
    end_by = time.monotonic() + LATE_S
    while time.monotonic() < end_by and any(rx < tx for tx, rx in
                                             (upf.flow().get(s.pg_dl, (0, 0)) for s in sessions)):
        time.sleep(0.05)
    time.sleep(0.3)                            # End Markers sent after the last G-PDU
    frames = upf.client.stop_capture(cap)
    end = upf.flow()
    lost_capture = upf.client.get_stats().get(0, {}).get("capture_lost", 0)
    where = upf.loss_delta(snap, upf.loss_snapshot())
    host_lost = C.host_losses(where, host_places)
    recs = [(ns, data) for ns, data, _ in frames]
    cases = upf.cases()
    for s in sessions:
        cid = f"handover-s{s.index}-{'qfi' if s.rules.qfi is not None else 'noqfi'}"
        if s.index in errors:
            e = errors[s.index]
            cases.append({"case_id": cid, "kind": "handover", "verdict": "not supported", "why": str(e),
                          "cause": e.cause})
            continue
        tx, rx = end.get(s.pg_dl, (0, 0))
        c = C.handover(recs, s.pg_dl, tx, (s.rules.gnb, s.rules.gnb_teid), targets[s.index], s.rules.qfi,
                       t_req[s.index], t_answer_ns=t_ans[s.index], traffic_start_ns=t_start, traffic_end_ns=t_end,
                       capture_lost=lost_capture, host_lost=host_lost, upf_drops=where.get("upf_drops_by_reason"),
                       n3_addr=upf.pcfg.n3_6 if upf.n3 == "6" else None)
        c.update(case_id=cid, kind="handover", session=s.index, qfi=s.rules.qfi, frame_size=size,
                 direction="downlink", criterion="1 End Marker on the old tunnel after its last G-PDU (with PSC "
                 "if QFI), every packet on exactly one path",
                 n3=upf.n3, offered_pps=pps, rx_packets=rx, captured=len(recs), capture_lost=lost_capture,
                 old=f"{s.rules.gnb}/{s.rules.gnb_teid:#x}", new=f"{targets[s.index][0]}/{targets[s.index][1]:#x}")
        cases.append(c)
    for s in sessions:
        upf.delete(s)
    return cases
