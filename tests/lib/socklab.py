"""What the socket-path PGW-U's lab tests share (tests/dataplane/test_sock_dataplane*.py): sending frames out
of a generator port and reading what comes back on both, with the DUT's counter delta and conservation
checked (`send`), and that delta as {reason/verdict: packets} (`only`)."""

from __future__ import annotations

import select
import socket
import time

from gtplab.measure import conservation
from tests.lib.lab import packet_socket, send_frames

SO_RCVBUFFORCE = 33


def _sockets(lab):
    socks = [packet_socket(lab, i, timeout=0.2) for i in (0, 1)]
    for s in socks:
        s.setblocking(False)
        s.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 16 << 20)     # a burst of 1000 frames
    return socks


def _drain(socks, until: float) -> list[list[bytes]]:
    """Frames received on each generator port (not the ones we sent: PACKET_OUTGOING) until quiet."""
    got: list[list[bytes]] = [[], []]
    quiet = 0.0
    while time.monotonic() < until:
        r, _, _ = select.select(socks, [], [], 0.05)
        if not r:
            quiet += 0.05
            if quiet >= 0.3:
                break
            continue
        quiet = 0.0
        for s in r:
            while True:
                try:
                    data, addr = s.recvfrom(65535)
                except BlockingIOError:
                    break
                if addr[2] != socket.PACKET_OUTGOING:
                    got[socks.index(s)].append(data)
    return got


def send(dut_t, port: int, frames: list[bytes]) -> tuple[list[list[bytes]], conservation.DutDelta]:
    """Send frames out of generator port `port`; returns what came back on each port and the DUT's
    counter delta. Asserts conservation: everything the DUT's ingress veth received is counted by
    the socket path or the kernel, and everything it forwarded arrived."""
    lab, d = dut_t
    direction = "uplink" if port == 0 else "downlink"
    socks = _sockets(lab)
    try:
        cnt0, link0 = d.counters(), d.link()
        send_frames(lab, port, frames)
        got = _drain(socks, time.monotonic() + 5)
        cnt1, link1 = d.counters(), d.link()
    finally:
        for s in socks:
            s.close()
    dd = conservation.DutDelta.from_counters(cnt0, cnt1)
    ld = d.link_delta(link0, link1, direction)
    assert ld["dut_rx"] == len(frames) and ld["lost_in"] == 0, (ld, len(frames))
    counted = dd.fwd_packets + dd.drop_packets + dd.pass_packets + sum(dd.other.values())
    assert counted == len(frames), f"DUT rx {len(frames)} != counted {counted}: {dd}"
    return got, dd


def only(dd: conservation.DutDelta) -> dict:
    """The delta as {reason/verdict: packets}."""
    out = {}
    if dd.fwd_packets:
        out["fwd"] = dd.fwd_packets
    out.update({f"{r}/drop": n for r, n in dd.drops_by_reason.items()})
    out.update({f"{r}/pass": n for r, n in dd.passed_by_reason.items()})
    out.update(dd.other)
    return out
