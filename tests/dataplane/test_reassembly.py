"""Outer fragments, end to end, on an embedded lab (Lab.up: generator and DUT namespaces, the PGW-U
attached in native mode, `pgwu reassemble` started with the DUT), access MTU 1500.

- An uplink G-PDU cut into outer fragments (scapy fragment()) comes out on SGi whole, TTL - 1,
  counted pass_outer_frag (each fragment) and forwarded (the datagram); with the reassembler
  stopped (SIGTERM) the same fragments are dropped, counted drop_outer_frag, and nothing comes out.
- Encap and receive agree: a downlink packet without DF too big for the access MTU once
  encapsulated leaves as outer fragments (captured on the access side), and those very fragments,
  sent back to the PGW-U's access side with the outer addresses swapped, come out whole on SGi.
- Bad datagrams (unknown TEID, spoofed inner source, bad inner checksum, other message types, ...)
  are each counted under their reason and nothing is forwarded; GTP-U reaching the GTP-U address
  from the SGi side is not taken.
The lab has a unique name and is always torn down (namespaces, pins, the reassembler).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time

import pytest
from scapy.all import IP, UDP, Ether, Raw, fragment, raw
from scapy.contrib.gtp import GTP_U_Header

from gtplab.lab.topology import Lab
from gtplab.dut.dataplane import pgwu_binary
from gtplab.kernel.sched import live_stat
from tests.lib.lab import add_bearer, dut_counters, leftovers, packet_socket, reassembler_pid, send_frames, wait_for

pytestmark = pytest.mark.lab

MTU = 1500


@pytest.fixture(scope="module")
def lab():
    with Lab.up(mtu=MTU) as lab:
        a = lab.addressing
        # bearer 0 sends downlink to the TEID of bearer 1, so that what the PGW-U encapsulates for
        # bearer 0 is, sent back to it, an uplink G-PDU of bearer 1 (inner source: UE 1)
        add_bearer(lab, 0, sgw_teid=a.local_teid(1))
        add_bearer(lab, 1)
        # uplink packets to UE 0 (the encap test's inner destination) leave through SGi
        subprocess.run(["ip", "-n", lab.dut_ns, "route", "add", f"{a.ue(0)}/32", "via", a.gen_sgi,
                        "dev", lab.ports[1].dut_ifname], check=True)
        yield lab
        pid = reassembler_pid(lab)
    assert leftovers(lab.name) == []
    # stopped with the lab (teardown kills what runs in the DUT netns)
    assert pid
    wait_for(lambda: not alive(pid), 5, f"pgwu reassemble {pid} to end with its lab")


def alive(pid: int) -> bool:
    """pid runs (a zombie has ended: its parent, init here, reaps it when it will)."""
    return live_stat(pid) is not None


def reasm(lab) -> dict:
    return lab.pgwu_json("stats")["reassembler"]


def gpdu(lab, teid: int, inner, *, src: str | None = None, gtp_type: int = 255, ident: int = 1):
    """An uplink GTP-U message from SGW 0 to the PGW-U, as an IP packet (no Ethernet)."""
    a = lab.addressing
    return IP(src=src or a.sgw(0), dst=a.dut_access, id=ident) / UDP(sport=2152, dport=2152) / \
        GTP_U_Header(teid=teid, gtp_type=gtp_type) / inner


def frames_of(lab, packets, port: int = 0) -> list[bytes]:
    p = lab.ports[port]
    return [raw(Ether(src=p.mac, dst=p.dut_mac) / x) for x in packets]


def inner_pkt(lab, marker: bytes, *, src: str | None = None, size: int = 1000, ttl: int = 64):
    a = lab.addressing
    return IP(src=src or a.ue(1), dst=a.pdn(0), ttl=ttl, id=0x4242) / UDP(sport=4000, dport=5000) / \
        Raw(marker + b"\xa5" * (size - 28 - len(marker)))


def capture(lab, port: int, send, match, quiet: float = 0.5, timeout: float = 5.0) -> list[bytes]:
    """Run send() with a packet socket on generator port `port`; return the received frames that
    match, waiting until `quiet` seconds passed with nothing new (at most `timeout`)."""
    got: list[bytes] = []
    with packet_socket(lab, port, timeout=0.05) as s:
        send()
        deadline = time.monotonic() + timeout
        last = time.monotonic()
        while time.monotonic() < deadline and time.monotonic() - last < quiet:
            try:
                f, addr = s.recvfrom(65535)
            except socket.timeout:
                continue
            if addr[2] == socket.PACKET_OUTGOING:
                continue
            if match(f):
                got.append(f)
                last = time.monotonic()
    return got


def has(marker: bytes):
    return lambda f: marker in f


def expected_out(inner, hops: int = 1) -> bytes:
    """The inner packet as it leaves after `hops` routers: TTL lower, header checksum redone."""
    p = IP(raw(inner))
    p.ttl -= hops
    p.chksum = None
    return raw(p)


def delta(before: dict, after: dict) -> dict:
    return {k: after.get(k, 0) - before.get(k, 0) for k in set(before) | set(after)
            if after.get(k, 0) != before.get(k, 0)}


def test_uplink_fragments_reassembled_then_dropped_without_reassembler(lab):
    a = lab.addressing
    pid = reassembler_pid(lab)
    assert pid, f"the lab did not start pgwu reassemble: {lab.state.get('reassembler')}"
    assert reasm(lab)["pid"] > 0
    inner = inner_pkt(lab, b"FRAG-UL-1")
    frs = fragment(gpdu(lab, a.local_teid(1), inner), fragsize=400)
    assert len(frs) == 3
    c0, r0 = dut_counters(lab), reasm(lab)
    got = capture(lab, 1, lambda: send_frames(lab, 0, frames_of(lab, frs)), has(b"FRAG-UL-1"))
    assert [raw(Ether(f)[IP]) for f in got] == [expected_out(inner)]
    wait_for(lambda: reasm(lab)["forwarded"] == r0["forwarded"] + 1, 5, "forwarded counted")
    assert delta(c0, dut_counters(lab)) == {"PASS_OUTER_FRAG/pass": 3}
    d = delta(r0, reasm(lab))
    assert d == {"received": 1, "forwarded": 1}, d

    # SIGTERM: the reassembler ends, the kernel clears its registration, fragments are dropped
    os.kill(pid, signal.SIGTERM)
    wait_for(lambda: not alive(pid), 5, "pgwu reassemble to exit")
    assert reasm(lab)["pid"] == 0
    c0, r0 = dut_counters(lab), reasm(lab)
    got = capture(lab, 1, lambda: send_frames(lab, 0, frames_of(lab, frs)), has(b"FRAG-UL-1"), quiet=1.0)
    assert got == []
    assert delta(c0, dut_counters(lab)) == {"DROP_OUTER_FRAG/drop": 3}
    assert delta(r0, reasm(lab)) == {}

    # and back, for the other tests
    lab._start_reassembler()
    assert reassembler_pid(lab) and reasm(lab)["pid"] > 0


def test_encap_and_receive_agree(lab):
    """What the PGW-U sends in outer fragments, it takes back whole."""
    a = lab.addressing
    acc, sgi = lab.ports
    # downlink to UE 0, no DF, 1480 octets: 1516 once encapsulated, over the access MTU
    dl = IP(src=a.ue(1), dst=a.ue(0), ttl=64, flags=0, id=0x1111) / UDP(sport=7, dport=9) / \
        Raw(b"FRAG-DL-1" + b"\x5a" * (1480 - 28 - 9))
    frame = raw(Ether(src=sgi.mac, dst=sgi.dut_mac) / dl)

    def outer_frag(f):
        e = Ether(f)
        return IP in e and e[IP].src == a.dut_access and e[IP].proto == 17 and \
            (e[IP].flags.MF or e[IP].frag > 0)
    c0 = dut_counters(lab)
    frs = capture(lab, 0, lambda: send_frames(lab, 1, [frame]), outer_frag)
    assert len(frs) >= 2 and all(len(f) <= MTU + 14 for f in frs), [Ether(f).summary() for f in frs]
    assert delta(c0, dut_counters(lab)) == {"PASS_FIB_OTHER/pass": 1}
    first = Ether(frs[0])
    assert first[IP].frag == 0 and first[GTP_U_Header].teid == a.local_teid(1)

    # the very fragments, back to the PGW-U: from the SGW, to the GTP-U address
    back = []
    for f in frs:
        ip = Ether(f)[IP].copy()
        ip.src, ip.dst = ip.dst, ip.src
        ip.chksum = None
        back.append(raw(Ether(src=acc.mac, dst=acc.dut_mac) / ip))
    c0, r0 = dut_counters(lab), reasm(lab)
    got = capture(lab, 1, lambda: send_frames(lab, 0, back), has(b"FRAG-DL-1"))
    # two IP hops inside the PGW-U: downlink (xdp_sgi) and uplink (pgwu reassemble)
    assert [raw(Ether(f)[IP]) for f in got] == [expected_out(dl, hops=2)]
    assert delta(c0, dut_counters(lab)) == {"PASS_OUTER_FRAG/pass": len(frs)}
    wait_for(lambda: reasm(lab)["forwarded"] == r0["forwarded"] + 1, 5, "forwarded counted")


def bad_cases(lab):
    a = lab.addressing
    good = inner_pkt(lab, b"FRAG-BAD")
    bad_csum = IP(raw(good))
    bad_csum.chksum ^= 0x0101
    return [
        ("drop_unknown_teid", gpdu(lab, 0x7777, good)),
        ("drop_spoofed", gpdu(lab, a.local_teid(1), inner_pkt(lab, b"FRAG-BAD", src=a.ue(0)))),
        ("drop_inner_csum", gpdu(lab, a.local_teid(1), bad_csum)),
        ("drop_not_gpdu", gpdu(lab, a.local_teid(1), Raw(raw(good)), gtp_type=254)),
        ("drop_not_gpdu", gpdu(lab, 0, Raw(raw(good)), gtp_type=1)),
        ("drop_ttl_expired", gpdu(lab, a.local_teid(1), inner_pkt(lab, b"FRAG-BAD", ttl=1))),
        ("drop_inner_not_ipv4", gpdu(lab, a.local_teid(1), Raw(b"\x60" + raw(good)[1:]))),
        ("drop_gtp_ext_unsupported",
         IP(src=a.sgw(0), dst=a.dut_access) / UDP(sport=2152, dport=2152) /
         GTP_U_Header(teid=a.local_teid(1), gtp_type=255, E=1, next_ex=0xc5) / Raw(b"\x01\x00\x00\x00" + raw(good))),
    ]


@pytest.mark.parametrize("i", range(8))
def test_bad_datagrams_counted_not_forwarded(lab, i):
    reason, pkt = bad_cases(lab)[i]
    frs = fragment(pkt, fragsize=400)
    assert len(frs) >= 2
    c0, r0 = dut_counters(lab), reasm(lab)
    got = capture(lab, 1, lambda: send_frames(lab, 0, frames_of(lab, frs)), has(b"FRAG-BAD"), quiet=0.3)
    wait_for(lambda: reasm(lab)["received"] == r0["received"] + 1, 5, "the datagram read")
    assert got == []
    assert delta(c0, dut_counters(lab)) == {"PASS_OUTER_FRAG/pass": len(frs)}
    assert delta(r0, reasm(lab)) == {"received": 1, reason: 1}


def test_gtpu_from_the_sgi_side_is_not_taken(lab):
    """GTP-U to the GTP-U address that comes in on SGi reaches the socket too (xdp_sgi passes it to
    the kernel: not for a UE): the reassembler takes only what came in where xdp_access is."""
    a = lab.addressing
    sgi = lab.ports[1]
    pkt = IP(src=a.gen_sgi, dst=a.dut_access) / UDP(sport=2152, dport=2152) / \
        GTP_U_Header(teid=a.local_teid(1), gtp_type=255) / inner_pkt(lab, b"FRAG-SGI")
    frame = raw(Ether(src=sgi.mac, dst=sgi.dut_mac) / pkt)
    r0 = reasm(lab)
    got = capture(lab, 1, lambda: send_frames(lab, 1, [frame]), has(b"FRAG-SGI"), quiet=0.3)
    wait_for(lambda: reasm(lab)["received"] == r0["received"] + 1, 5, "the datagram read")
    assert got == []
    assert delta(r0, reasm(lab)) == {"received": 1, "drop_not_access": 1}


def test_stats_show_the_reassembler(lab):
    out = subprocess.run(["nsenter", f"--net=/run/netns/{lab.dut_ns}", "--", str(pgwu_binary()), "-d", lab.pin_dir,
                          "stats"], capture_output=True, text=True, check=True).stdout
    assert f"pgwu reassemble pid {reasm(lab)['pid']}" in out
