"""What the socket-path PGW-U's lab tests share (tests/dataplane/test_sock_dataplane*.py): the lab with its
bearer file loaded (`socket_lab`) and its `pgwu socket` started with a knob set (`knobbed_dut`); sending
frames out of a generator port and reading what comes back on both, with the DUT's counter delta and
conservation checked (`send`), and that delta as {reason/verdict: packets} (`only`); a reply compared
but for the outer IPv4 id the kernel picks (`check_reply`); a route given a lowered MTU for one test
(`route_mtu`)."""

from __future__ import annotations

import contextlib
import os
import select
import socket
import subprocess
import time
from typing import Callable, Iterator

from gtplab.dut.local import LocalDut
from gtplab.dut.sock import SocketKnobs
from gtplab.lab.topology import Lab
from gtplab.measure import conservation
from tests.lib import oracle as O
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


@contextlib.contextmanager
def socket_lab(name: str, lines: Callable[[object], list[str]]) -> Iterator[Lab]:
    """A socket-path lab (`dut.mode: socket`, pgwu loaded with --max-bearers 4096) with the bearer file
    lines(lab.addressing) loaded (`pgwu session load`); torn down always."""
    lab = Lab.up(dut="socket", pgwu_load_args=("--max-bearers", "4096"))
    try:
        path = f"/tmp/gtplab-{name}-{lab.name}.bearers"
        with open(path, "w") as f:
            f.write("\n".join(lines(lab.addressing)) + "\n")
        lab.pgwu("session", "load", path)
        os.unlink(path)
        yield lab
    finally:
        lab.down()


@contextlib.contextmanager
def knobbed_dut(lab: Lab, knobs: dict) -> Iterator[tuple[Lab, LocalDut]]:
    """The lab's pgwu socket restarted with the knob set; (lab, a LocalDut reading it)."""
    lab.start_socket(SocketKnobs.parse(knobs))
    d = LocalDut(lab)
    try:
        yield lab, d
    finally:
        d.close()


# A worker remembers a route's MTU (the downlink's access MTU, an N3 IPv6 peer's address) for
# MTU_CACHE_MS (100 ms, dataplane/pgwu_sock_int.h): route_mtu waits that long after each change.
MTU_CACHE_S = 0.15


@contextlib.contextmanager
def route_mtu(lab: Lab, dest: str, dev: str, mtu: int, via: str | None = None):
    """A route to dest in the DUT's namespace with MTU mtu (`ip route add ... mtu lock N`) for the
    `with` block, removed after (also on failure)."""
    fam = "-6" if ":" in dest else "-4"
    args = [fam, "route", "{}", dest] + (["via", via] if via else []) + ["dev", dev, "mtu", "lock", str(mtu)]
    ip = lambda verb: subprocess.run(["ip", "-n", lab.dut_ns] + [verb if x == "{}" else x for x in args],
                                     capture_output=True, text=True)
    r = ip("add")
    assert r.returncode == 0, r.stderr
    try:
        time.sleep(MTU_CACHE_S)
        yield
    finally:
        ip("del")
        time.sleep(MTU_CACHE_S)


def _id_free(frame: bytes) -> bytes:
    """The frame with its outer IPv4 id and header checksum zeroed, after checking the checksum: the
    kernel picks the id of a raw socket's packet without DF."""
    l2, _ = O.l2_split(frame)
    ihl = (frame[l2] & 0xF) * 4
    assert O.ip_hdr_ok(frame[l2:l2 + ihl]), "outer IPv4 header checksum: " + O.describe("got", frame)
    b = bytearray(frame)
    b[l2 + 4:l2 + 6] = b"\0\0"
    b[l2 + 10:l2 + 12] = b"\0\0"
    return bytes(b)


def check_reply(got: list[bytes], want: bytes | None) -> None:
    """The one reply that came back (outer IPv4 id and checksum aside: the kernel's), or none."""
    if want is None:
        assert got == [], [O.describe("back", g) for g in got]
        return
    assert len(got) == 1, f"{len(got)} frames came back, want the one reply"
    assert _id_free(got[0]) == _id_free(want), O.mismatch_report(_id_free(want), _id_free(got[0]))
