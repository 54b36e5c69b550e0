"""Bearer churn under load (issue 13, item 3): bearers are added and deleted at 10,000 a second
each for 10 s (`pgwu session load` / `pgwu session unload` of 1,000 bearers, ten times a second)
while traffic, far below NDR, runs in both directions to 256 untouched bearers and to the churned
range:

- no packet of an untouched bearer is lost: each untouched bearer's usage counters are exactly
  the packets sent to it, uplink and downlink, and the generator received every one of them;
- nothing is misrouted: every downlink frame received carries the TEID and goes to the SGW of the
  bearer of its inner destination, every uplink frame received comes from the UE it was sent for;
- packets for churned bearers are forwarded or counted under their drop reason
  (drop_unknown_teid, drop_unknown_ue): the DUT's counters account for every packet sent, the
  generator received exactly what the DUT forwarded, and nothing else was dropped.

The churn is a ring of 6 blocks of 1,000 bearers, 3 installed at any time: each tick adds the
next block and deletes the oldest, so every bearer of the ring comes and goes several times.

The traffic is sent and received with AF_PACKET sockets on the lab's generator ports (every frame
is known, so every count is exact); the lab's pass program on those ports lets the frames the DUT
forwards reach the sockets. (The embedded engine failed here with ENOSPC from its transmit
program's test runs during the churn: a generator problem, reported, not the DUT's.)
"""

from __future__ import annotations

import ipaddress
import os
import resource
import socket
import struct
import subprocess
import tempfile
import threading
import time
from collections import Counter
from dataclasses import asdict
from pathlib import Path

import pytest

from gtplab.gtpu import packets as P
from gtplab.lab.topology import Addressing, Lab

from tests.lib.lab import bearer_lines, dut_counters, load_bearers, packet_socket

pytestmark = pytest.mark.lab

UNTOUCHED = 256          # bearers 0..255: never touched by the churn
CH0 = 100_000            # churned bearers: CH0 .. CH0 + BLOCKS * BLOCK - 1
BLOCK = 1000
BLOCKS = 6               # ring of blocks; LIVE of them installed at any time
LIVE = 3
TICKS = 100              # one add of BLOCK and one delete of BLOCK each
TICK_S = 0.1             # 10 ticks a second: 10,000 adds and 10,000 deletes a second
SGWS = 4
SIZE = 128
# per 10 ms step: frames to untouched bearers and to churned ones, each direction (2,600 frames a
# second in all: far below NDR)
STEP_S = 0.01
PER_STEP_UNTOUCHED, PER_STEP_CHURN = 10, 3
PACKET_OUTGOING = 4
SO_RCVBUFFORCE = 33


def block(k: int) -> range:
    k %= BLOCKS
    return range(CH0 + k * BLOCK, CH0 + (k + 1) * BLOCK)


def test_churn_under_load():
    with Lab.up() as lab, tempfile.TemporaryDirectory(prefix="gtplab-churn-") as tmp:
        a = Addressing(**{**asdict(lab.addressing), "sgws": SGWS})
        ue0 = int(ipaddress.ip_address(a.ue(0)))
        acc, sgi = lab.ports[0], lab.ports[1]
        load_bearers(lab, UNTOUCHED, sgws=SGWS)
        files = {}
        for k in range(BLOCKS):
            files[k] = os.path.join(tmp, f"block{k}.bearers")
            Path(files[k]).write_text("".join(bearer_lines(a, block(k))))
        for k in range(LIVE):
            lab.pgwu("session", "load", files[k])

        # one frame per direction built with Scapy, then patched per bearer (inner UDP checksum 0,
        # valid for IPv4; IPv4 header checksums recomputed)
        ul_t = bytes(P.gpdu(teid=a.local_teid(0), ue=a.ue(0), dst=a.pdn(0), size=SIZE, outer_src=a.sgw(0),
                            outer_dst=a.dut_access, src_mac=acc.mac, dst_mac=acc.dut_mac, inner_udp_csum=False))
        dl_t = bytes(P.downlink_ip(ue=a.ue(0), src=a.pdn(0), size=SIZE, src_mac=sgi.mac, dst_mac=sgi.dut_mac,
                                   udp_csum=False))

        def with_ip_csum(f: bytearray, ip: int) -> bytes:
            f[ip + 10:ip + 12] = b"\0\0"
            w = sum(struct.unpack_from("!10H", f, ip))
            w = (w & 0xFFFF) + (w >> 16)
            w = (w & 0xFFFF) + (w >> 16)
            f[ip + 10:ip + 12] = struct.pack("!H", ~w & 0xFFFF)
            return bytes(f)

        def ul_frame(i):
            f = bytearray(ul_t)
            f[46:50] = struct.pack("!I", a.local_teid(i))
            f[62:66] = ipaddress.ip_address(a.ue(i)).packed
            return with_ip_csum(f, 50)

        def dl_frame(i):
            f = bytearray(dl_t)
            f[30:34] = ipaddress.ip_address(a.ue(i)).packed
            return with_ip_csum(f, 14)

        ring = [i for k in range(BLOCKS) for i in block(k)]
        frames = {"ul": {i: ul_frame(i) for i in [*range(UNTOUCHED), *ring]},
                  "dl": {i: dl_frame(i) for i in [*range(UNTOUCHED), *ring]}}

        def sock(port):
            s = packet_socket(lab, port.port_id, timeout=0.2)
            s.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 64 << 20)
            return s

        tx = {0: sock(acc), 1: sock(sgi)}
        rx = {0: sock(acc), 1: sock(sgi)}
        sent = {"ul": Counter(), "dl": Counter()}          # bearer index -> frames sent
        got = {"ul": Counter(), "dl": Counter()}           # bearer index -> frames received
        bad: list[str] = []
        errors: list[str] = []
        stop_rx = threading.Event()
        churn_done = threading.Event()
        churn_time: list[float] = []

        def receive(port_id):
            """port 1 gets the decapsulated uplink, port 0 the encapsulated downlink"""
            s = rx[port_id]
            while not stop_rx.is_set():
                try:
                    f, addr = s.recvfrom(65535)
                except socket.timeout:
                    continue
                if addr[2] == PACKET_OUTGOING or len(f) < 34 or f[12:14] != b"\x08\x00":
                    continue
                ihl = (f[14] & 0x0F) * 4
                if port_id == 1:
                    i = int.from_bytes(f[26:30], "big") - ue0
                    if f[30:34] != ipaddress.ip_address(a.pdn(0)).packed or f[23] != 17:
                        continue            # not one of ours (the kernel's own frames)
                    if not (0 <= i < UNTOUCHED or CH0 <= i < CH0 + BLOCKS * BLOCK):
                        bad.append(f"uplink from {ipaddress.ip_address(ue0 + i)}")
                    got["ul"][i] += 1
                else:
                    if f[23] != 17 or len(f) < 14 + ihl + 36 or \
                            struct.unpack_from("!H", f, 14 + ihl + 2)[0] != 2152:
                        continue
                    gtp = 14 + ihl + 8
                    inner = gtp + 8
                    i = int.from_bytes(f[inner + 16:inner + 20], "big") - ue0
                    teid = struct.unpack_from("!I", f, gtp + 4)[0]
                    if teid != a.sgw_teid(i) or f[30:34] != ipaddress.ip_address(a.sgw(i)).packed:
                        bad.append(f"downlink to UE {ipaddress.ip_address(ue0 + i)} with TEID {teid:#x} "
                                   f"to {ipaddress.ip_address(f[30:34])}")
                    got["dl"][i] += 1

        def churn():
            try:
                t_churn = time.monotonic()
                for t in range(TICKS):
                    if (d := t_churn + t * TICK_S - time.monotonic()) > 0:
                        time.sleep(d)
                    lab.pgwu("session", "load", files[(t + LIVE) % BLOCKS])
                    lab.pgwu("session", "unload", files[t % BLOCKS])
                churn_time.append(time.monotonic() - t_churn)
            except Exception as e:          # noqa: BLE001 - reported below
                errors.append(str(e))
            finally:
                churn_done.set()

        before = dut_counters(lab)
        receivers = [threading.Thread(target=receive, args=(p,), daemon=True) for p in (0, 1)]
        for r in receivers:
            r.start()
        worker = threading.Thread(target=churn, daemon=True)
        try:
            t0 = time.monotonic()
            step = u = c = 0
            t_done = None
            # traffic from 0.5 s before the churn to 0.5 s after it
            while True:
                now = time.monotonic()
                if step == int(0.5 / STEP_S):
                    worker.start()
                if churn_done.is_set() and t_done is None:
                    t_done = now
                if t_done is not None and now - t_done >= 0.5 or now - t0 > TICKS * TICK_S * 3 + 30:
                    break
                for _ in range(PER_STEP_UNTOUCHED):
                    i = u % UNTOUCHED
                    u += 1
                    for d, port in (("ul", 0), ("dl", 1)):
                        tx[port].send(frames[d][i])
                        sent[d][i] += 1
                for _ in range(PER_STEP_CHURN):
                    i = ring[c % len(ring)]
                    c += 1
                    for d, port in (("ul", 0), ("dl", 1)):
                        tx[port].send(frames[d][i])
                        sent[d][i] += 1
                step += 1
                if (d := t0 + step * STEP_S - time.monotonic()) > 0:
                    time.sleep(d)
            worker.join(timeout=60)
            traffic_s = time.monotonic() - t0
            # the last frames arrive: wait until the receivers have what the DUT forwarded
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                dut = dut_counters(lab)
                fwd_ul = dut.get("UL_FWD/redirect", 0) - before.get("UL_FWD/redirect", 0)
                fwd_dl = dut.get("DL_FWD/redirect", 0) - before.get("DL_FWD/redirect", 0)
                if sum(got["ul"].values()) >= fwd_ul and sum(got["dl"].values()) >= fwd_dl:
                    break
                time.sleep(0.05)
            time.sleep(0.3)                  # anything extra would show up now
        finally:
            stop_rx.set()
            for r in receivers:
                r.join(timeout=5)
            for s in (*tx.values(), *rx.values()):
                s.close()
        assert not errors, errors
        n_ul, n_dl = sum(sent["ul"].values()), sum(sent["dl"].values())
        print(f"churn: {TICKS * BLOCK:,} adds and {TICKS * BLOCK:,} deletes in {churn_time[0]:.1f} s "
              f"({TICKS * BLOCK / churn_time[0]:,.0f}/s each); traffic {traffic_s:.1f} s, {n_ul + n_dl:,} frames")

        # nothing misrouted
        assert not bad, bad[:10]
        # the DUT accounts for every packet: forwarded, or dropped for the churned bearers' reasons
        delta = {k: v - before.get(k, 0) for k, v in dut.items() if v - before.get(k, 0)}
        # an unknown TEID is dropped, or (within its SGW's budget) answered with an Error Indication
        drops_ul = delta.get("DROP_UNKNOWN_TEID/drop", 0) + delta.get("DROP_UNKNOWN_TEID/tx", 0)
        drops_dl = delta.get("DROP_UNKNOWN_UE/drop", 0)
        assert fwd_ul + drops_ul == n_ul, (delta, n_ul)
        assert fwd_dl + drops_dl == n_dl, (delta, n_dl)
        others = {k: v for k, v in delta.items() if k not in ("UL_FWD/redirect", "DL_FWD/redirect",
                  "DROP_UNKNOWN_TEID/drop", "DROP_UNKNOWN_TEID/tx", "DROP_UNKNOWN_UE/drop")
                  and not k.startswith("PASS_")}
        assert not others, delta
        # the churned range was really hit both ways: some of its packets forwarded, some dropped
        churned_ul = sum(v for i, v in sent["ul"].items() if i >= CH0)
        churned_dl = sum(v for i, v in sent["dl"].items() if i >= CH0)
        assert 0 < drops_ul < churned_ul and 0 < drops_dl < churned_dl, (delta, churned_ul, churned_dl)
        # the generator received exactly what the DUT forwarded: nothing lost after the DUT
        assert sum(got["ul"].values()) == fwd_ul and sum(got["dl"].values()) == fwd_dl, (got, delta)

        # untouched bearers: every packet sent to each arrived, and its usage counters are exact
        for d in ("ul", "dl"):
            lost = {i: (sent[d][i], got[d][i]) for i in range(UNTOUCHED) if got[d][i] != sent[d][i]}
            assert not lost, f"{d}: untouched bearers with packets lost (sent, received): {lost}"
        listed = {b["teid"]: b for b in lab.pgwu_json("session", "list")["bearers"]}
        for i in range(UNTOUCHED):
            b = listed.get(a.local_teid(i))
            assert b and b["ue"] == a.ue(i) and b["uplink"] and b["downlink"], f"untouched bearer {i}: {b}"
            assert (b["uplink"]["packets"], b["downlink"]["packets"]) == (sent["ul"][i], sent["dl"][i]), (i, b)
        # churned bearers: never more forwarded than sent
        assert all(got[d][i] <= sent[d][i] for d in ("ul", "dl") for i in got[d])
        # and what is installed now is the untouched bearers and the last LIVE blocks of the ring
        live = {a.local_teid(i) for i in range(UNTOUCHED)} | {
            a.local_teid(i) for t in range(TICKS, TICKS + LIVE) for i in block(t)}
        assert set(listed) == live


# ---- what a FILE can make `session load` use (issue 35, item 5) ---------------------------------

def _max_rss_kb(argv: list[str], stdin=None, timeout: float = 20) -> tuple[subprocess.CompletedProcess, int]:
    """Run argv under /usr/bin/time (its peak resident set, kB), with 1 GiB of address space at most:
    an unbounded reader fails fast with ENOMEM instead of taking the machine's memory."""
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
    cp = subprocess.run(["/usr/bin/time", "-f", "maxrss_kb=%M", *argv], stdin=stdin, capture_output=True,
                        text=True, timeout=timeout, preexec_fn=limit)
    rss = [int(ln.split("=")[1]) for ln in cp.stderr.splitlines() if ln.startswith("maxrss_kb=")]
    return cp, rss[-1] if rss else -1


@pytest.mark.skipif(not os.access("/usr/bin/time", os.X_OK), reason="/usr/bin/time (package time) not installed")
def test_session_load_reads_any_file_with_bounded_memory(tmp_path):
    """`pgwu session load /dev/zero` grew to 1.9 GB in 8 s (the whole file first, then the lines).
    It streams now: a line over 4096 bytes or with a NUL stops it at once, named by its number,
    exit 2, whatever follows; `session unload` reads the same way. (The FILE is read before the
    tables are opened: no pgwu needs to be loaded.)"""
    from gtplab.dut.dataplane import pgwu_binary
    pgwu = [str(pgwu_binary()), "-d", str(tmp_path / "no-pgwu-here")]
    t0 = time.monotonic()
    cp, rss = _max_rss_kb(pgwu + ["session", "load", "/dev/zero"])
    assert cp.returncode == 2, cp.stderr
    assert "/dev/zero:1: binary data (a NUL byte): not a bearer file" in cp.stderr and "nothing loaded" in cp.stderr
    assert 0 < rss < 64 * 1024, rss
    assert time.monotonic() - t0 < 10
    with open("/dev/zero", "rb") as zero:
        cp, rss = _max_rss_kb(pgwu + ["session", "unload", "-"], stdin=zero)
    assert cp.returncode == 2 and "<stdin>:1: binary data" in cp.stderr and 0 < rss < 64 * 1024, (cp.stderr, rss)
    # 200,000 good lines, then one endless line: the error names its line; the memory is the
    # bearers parsed (28 B each) and one read buffer, not the file
    f = tmp_path / "long.txt"
    with open(f, "w") as out:
        out.write("".join(f"{i + 1} 10.{64 + (i >> 16)}.{(i >> 8) & 255}.{(i & 255) or 1} 192.0.2.1 {i + 1}\n"
                          for i in range(200_000)))
        out.write("7 " + "9" * (8 << 20) + "\n")
    cp, rss = _max_rss_kb(pgwu + ["session", "load", str(f)])
    assert cp.returncode == 2 and f"{f}:200001: longer than 4096 bytes: not a bearer file" in cp.stderr, cp.stderr
    assert 0 < rss < 64 * 1024, rss
    # good lines without end, no PGW-U loaded to give its table's capacity: the default table's
    # (1,048,576 bearers, 28 B each) bounds what is read; the largest table's grew to 3.6 GB in 15 s
    yes = subprocess.Popen(["yes", "10 10.64.0.1 192.0.2.1 20"], stdout=subprocess.PIPE)
    try:
        cp, rss = _max_rss_kb(pgwu + ["session", "load", "-"], stdin=yes.stdout)
    finally:
        yes.kill()
        yes.wait()
    assert cp.returncode == 2, cp.stderr
    assert ("<stdin>:1048577: more than 1048576 bearers: more than the bearer table holds (the default capacity: "
            "no PGW-U is loaded to give its own)") in cp.stderr, cp.stderr
    assert 0 < rss < 128 * 1024, rss
