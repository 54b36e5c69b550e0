"""Conservation on a real link: frames that are not the test's (ARP, IPv6 neighbour and router
discovery, LLDP, a stray datagram, the kernels' answers to them) are counted apart by kind and never
enter the balance as a loss or as "unexplained"; the test's frames are known by their stream
(gtplab/measure/conservation.py, Background; the engine's tg_rx and tg_bg_out count them).

The lab tests put background frames on both links of the namespace lab, in both directions, while a
trial runs (Runner.on_start): from the generator's side into the DUT's ingress port, and from the
DUT's side onto the generator's receiving port (the generator's kernel answers the ARP request
there, into the DUT's other port). The trial's conservation is exact, each frame counted by kind
where it went; a frame that carries the stream's trailer is the test's, so one more of them than the
DUT forwarded is "unexplained", as is a lost test frame among background (the unit test).
"""

from __future__ import annotations

import os
import secrets
import struct

import pytest
from scapy.all import IP, UDP, Ether, Raw, raw

from gtplab.lab import config as labconfig
from gtplab.measure import conservation
from gtplab.measure.conservation import Background, DutDelta
from gtplab.measure.plan import CaseParams
from gtplab.measure.runner import PG_ID, Runner
from tests.lib.background import background_frames, packet_socket

CFG = labconfig.load("embedded")
TRAILER = struct.Struct("<HHIQ")        # struct tg_trailer: magic, pg_id, seq, ts_ns
TRAILER_MAGIC = 0x4C47


def stream_lookalike(src_mac: str, dst_mac: str, src_ip: str, dst_ip: str, pg_id: int) -> bytes:
    """A datagram ending in the stream's trailer: the generator takes it for one of the test's."""
    return raw(Ether(dst=dst_mac, src=src_mac) / IP(src=src_ip, dst=dst_ip) / UDP(sport=40000, dport=9)
               / Raw(b"\0" * 32 + TRAILER.pack(TRAILER_MAGIC, pg_id, 0, 0)))


# --------------------------------------------------------------------------------- no lab: the sums

def test_background_is_balanced_by_kind_and_a_lost_test_frame_among_it_is_unexplained():
    """1000 test frames sent, all forwarded; 5 background frames to the DUT's ingress, 1 to its other
    port (all passed to its kernel), 4 received by the generator. Exact. One test frame lost between
    DUT and generator with the same background: unexplained +1, not ok."""
    bg = Background(gen_rx={"arp": 1, "nd": 2, "lldp": 1}, to_dut_in={"arp": 1, "nd": 2, "lldp": 1, "udp": 1},
                    to_dut_other={"arp": 1})
    dut = DutDelta(rx_packets=1006, fwd_packets=1000,
                   passed_by_reason={"pass_not_ipv4": 5, "pass_not_gtpu": 1})
    c = conservation.check(1000, 1000 + 4, dut, dut_rx=1005, background=bg)
    assert c.ok, c.message()
    assert c.gen_rx == 1000 and c.dut_background == 6
    assert c.as_dict()["background"]["generator_rx"] == {"arp": 1, "nd": 2, "lldp": 1}
    assert "background" in c.message() and "2 nd" in c.message()
    lost = conservation.check(1000, 999 + 4, dut, dut_rx=1005, background=bg)
    assert not lost.ok and "(unexplained: +1)" in lost.message(), lost.message()
    # without the background's sums the same trial is unbalanced on every side
    bare = conservation.check(1000, 1000 + 4, dut, dut_rx=1005)
    assert not bare.ok and len(bare.errors) == 3, bare.message()
    # on the DUT's counters alone (no ingress count): its other port's background is taken off
    c = conservation.check(1000, 1004, dut, background=bg)
    assert c.ok and c.dut_rx == 1005, c.message()


def test_a_measured_background_is_recorded_and_an_unmeasured_one_leaves_the_record_as_it_was():
    dut = DutDelta(rx_packets=10, fwd_packets=10)
    assert "background" not in conservation.check(10, 10, dut).as_dict()
    d = conservation.check(10, 10, dut, background=Background({}, {}, {})).as_dict()
    assert d["background"] == {"generator_rx": {}, "to_dut_ingress": {}, "to_dut_other_port": {}}


# ------------------------------------------------------------------------------------- the lab

@pytest.fixture(scope="module")
def runner():
    from gtplab.traffic import backend
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces, XDP)")
    setup = backend.choose(CFG, "local", dut="pgwu")
    setup.lab_kwargs["name"] = f"bg34{secrets.token_hex(2)}"
    be = setup.open()
    try:
        with Runner(be, CFG) as r:
            yield r
    finally:
        be.close()


def _sides(runner, direction):
    """(generator port towards the DUT's ingress, DUT port towards the generator's receiving port)."""
    lab = runner.backend.lab
    tx, rx = runner.ports(direction)
    return lab.ports[tx], lab.ports[rx]


def _inject(runner, direction, extra: list[bytes] = ()):
    """Runner.on_start: the background of both ends, in both directions; returns what was sent."""
    lab = runner.backend.lab
    gin, gout = _sides(runner, direction)
    to_dut = background_frames(gin.mac, gin.dut_mac, gin.addr, gin.dut_addr)
    to_gen = background_frames(gout.dut_mac, gout.mac, gout.dut_addr, gout.addr)
    s_gen = packet_socket(lab.gen_ns, gin.ifname)
    s_dut = packet_socket(lab.dut_ns, gout.dut_ifname)

    def send():
        for kinds, s in ((to_dut, s_gen), (to_gen, s_dut)):
            for frames in kinds.values():
                for f in frames:
                    s.send(f)
        for f in extra:
            s_dut.send(f)
    return send, (s_gen, s_dut), {k: len(v) for k, v in to_dut.items()}, {k: len(v) for k, v in to_gen.items()}


@pytest.mark.lab
@pytest.mark.parametrize("direction", ["uplink", "downlink"])
def test_conservation_is_exact_with_background_frames_on_both_links(runner, direction):
    prep = runner.prepare(CaseParams(direction, 256, flows=16, latency=True))
    assert prep.tunables["stats"] == "latency"      # every test frame carries its stream's trailer
    send, socks, to_dut, to_gen = _inject(runner, direction)
    runner.on_start = send
    try:
        t = runner.trial(prep, 20e3, 0.5)
    finally:
        runner.on_start = None
        for s in socks:
            s.close()
    c = t["conservation"]
    assert c["ok"], c["errors"]
    assert "unexplained" not in (c.get("places") or {})
    bg = c["background"]
    # by kind, where each went: what the generator received is what the DUT's side sent it
    assert bg["generator_rx"] == to_gen, bg
    assert bg["to_dut_ingress"] == to_dut, bg
    # the generator's kernel answered the ARP request on its receiving port, into the DUT's other port
    assert bg["to_dut_other_port"] == {"arp": 1}, bg
    # the DUT passed every background frame to its kernel, and nothing of the test's
    assert sum(t["dut"]["passed_by_reason"].values()) == c["dut_background"] == sum(to_dut.values()) + 1
    # the trial's figures are the test's frames: a loss (a ring overflow on a busy host) is located
    assert t["rx_packets"] == c["gen_rx"] > 0 and t["tx_packets"] == c["gen_tx"], (t["loss"], c)


@pytest.mark.lab
def test_a_frame_with_the_streams_trailer_is_the_tests_and_one_too_many_is_unexplained(runner):
    """The background is counted, not the difference ignored: a datagram from the DUT's side that
    carries the uplink stream's trailer is counted as the test's; the generator then received one
    frame more than the DUT forwarded (the multihost sweep's `unexplained: -1`)."""
    prep = runner.prepare(CaseParams("uplink", 256, flows=16, latency=True))
    _, gout = _sides(runner, "uplink")
    fake = stream_lookalike(gout.dut_mac, gout.mac, gout.dut_addr, gout.addr, PG_ID["uplink"])
    send, socks, _, to_gen = _inject(runner, "uplink", extra=[fake])
    runner.on_start = send
    try:
        t = runner.trial(prep, 20e3, 0.5)
    finally:
        runner.on_start = None
        for s in socks:
            s.close()
    c = t["conservation"]
    assert not c["ok"], c
    assert c["background"]["generator_rx"] == to_gen      # the lookalike is not background
    assert any("(unexplained: -1)" in e for e in c["errors"]), c["errors"]
    assert t["rx_packets"] == t["tx_packets"] + 1
