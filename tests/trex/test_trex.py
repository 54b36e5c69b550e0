"""Against a real TRex server (v3.08, DPDK af_packet on a veth pair in a namespace of its own:
tests/lib/trex_server.py, the `trex_server` fixture in conftest.py): the backend's client, TRex's
capture, and the profiles of trex_profiles/ as TRex sends them (docs/trex.md)."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest
from scapy.utils import rdpcap

from gtplab.traffic.backend import Backend, engine_client
from gtplab.traffic.trex.client import TrexClient
from tests.lib.streams import PROFILE
from tests.lib.tshark import tshark_checksums
from tests.lib import REPO

pytestmark = [pytest.mark.trex, pytest.mark.lab]    # TRex in a network namespace: root


@pytest.fixture(scope="module")
def client(trex_server):
    c = TrexClient(trex_server.server, netns=trex_server.netns)
    c.connect()
    try:
        yield c
    finally:
        try:
            c.reset(ports=[0, 1])
        finally:
            c.disconnect()


def test_trex_server_short_run(trex_server, tmp_path):
    """Backend.open("trex") in the server's namespace: one stream (TRex returns a plain int for it),
    200 packets at 100 pps, all sent by port 0 and received by port 1 over the veth pair."""
    prof = tmp_path / "prof_tiny.py"
    prof.write_text(PROFILE)
    with Backend.open("trex", server=trex_server.server, netns=trex_server.netns) as be:
        c = be.client
        c.reset(ports=[0, 1])
        ids = c.load_profile(str(prof), ports=[0], direction=0)
        assert len(ids) == 1 and isinstance(ids[0], int)
        c.clear_stats()
        c.start(ports=[0], mult="100pps", duration=2)
        c.wait_on_traffic(ports=[0], timeout=30)
        deadline = time.monotonic() + 5
        while (st := c.get_stats())[1]["ipackets"] < st[0]["opackets"] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert 190 <= st[0]["opackets"] <= 210, st[0]
        assert st[1]["ipackets"] == st[0]["opackets"], (st[0], st[1])
        c.reset(ports=[0, 1])


# ---------------------------------------------------------------------------------------------
# The profiles as TRex sends them: TRex's own capture on the receiving port of the veth pair

PROFILE_PATH = {p: str(REPO / "trex_profiles" / f"gtpu_{p}.py") for p in ("uplink", "downlink")}
TX_PORT = {"uplink": 0, "downlink": 1}


def send_and_capture(c, profile, tunables, n, pcap: Path) -> list[bytes]:
    """Load the profile on its port, send n packets (a single burst per stream would change the
    profile: the stream runs continuous at a low rate instead, and the first n are kept), capture
    them on the other port with TRex's capture. Returns the first n frames in order."""
    tx = TX_PORT[profile]
    rx = 1 - tx
    c.reset(ports=[0, 1])
    c.load_profile(PROFILE_PATH[profile], ports=[tx], tunables=list(tunables))
    cap = c.start_capture(rx_ports=[rx], limit=n)
    c.start(ports=[tx], mult="2000pps", duration=max(0.5, 1.5 * n / 2000))
    c.wait_on_traffic(ports=[tx], timeout=60)
    time.sleep(0.3)
    c.stop_capture(cap["id"], output=str(pcap))
    frames = [bytes(p) for p in rdpcap(str(pcap))]
    assert len(frames) == n, (profile, tunables, len(frames))
    return frames


# (profile, tunables, packets): each direction, single and multi-flow, IMIX, edge values
CASES = [
    ("uplink", ["--size", "128"], 64),
    ("uplink", ["--size", "1424", "--flows", "40", "--sgws", "8"], 80),
    ("uplink", ["--size", "3024", "--flows", "12", "--sgws", "4", "--l4", "tcp"], 24),
    ("uplink", ["--size", "86", "--flows", "1000", "--sgws", "1", "--teid-base", "0xfffffc00",
                "--ue-base", "10.64.255.250", "--outer-udp-csum", "valid"], 64),
    ("uplink", ["--size", "82", "--flows", "8", "--sgws", "4"], 16),
    ("uplink", ["--size", "94", "--flows", "8", "--l4", "tcp"], 16),
    ("uplink", ["--size", "1424", "--flow-mode", "single"], 8),
    ("uplink", ["--imix", "--flows", "8", "--sgws", "2", "--outer-udp-csum", "valid"], 48),
    ("uplink", ["--size", "300", "--flows", "16", "--sgws", "16", "--stats", "stats"], 32),
    ("downlink", ["--size", "64"], 64),
    ("downlink", ["--size", "1424", "--flows", "40", "--pdn-addrs", "3", "--vlans", "5"], 60),
    ("downlink", ["--size", "3024", "--l4", "tcp", "--flows", "7"], 14),
    ("downlink", ["--imix", "--flows", "8"], 48),
    ("downlink", ["--size", "64", "--flow-mode", "single"], 8),
]

# --order random (TRex's op=random): 400 packets over 16 bearers hit every bearer (P(miss) < 1e-10)
RANDOM_CASES = [
    ("uplink", ["--size", "128", "--flows", "16", "--sgws", "4", "--order", "random"], 400),
    ("downlink", ["--size", "128", "--flows", "16", "--vlans", "2", "--order", "random"], 400),
]


def case_id(case):
    return f"{case[0]} {' '.join(case[1])}"


@pytest.fixture(scope="module")
def captured(client, tmp_path_factory):
    """Every case sent once by TRex and captured: {case id: (pcap, frames)}."""
    d = tmp_path_factory.mktemp("trex-captures")
    out = {}
    for k, case in enumerate(CASES + RANDOM_CASES):
        pcap = d / f"case{k}.pcap"
        out[case_id(case)] = (pcap, send_and_capture(client, case[0], case[1], case[2], pcap))
    client.reset(ports=[0, 1])
    return out


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_trex_sends_every_checksum_right(captured, case):
    """tshark validates every IPv4, UDP and TCP checksum of every captured frame (af_packet: no
    checksum offload): none bad, none unverified, and the inner ones all present."""
    pcap, frames = captured[case_id(case)]
    st = tshark_checksums(pcap)
    n = len(frames)
    assert st[("ip", "bad")] == st[("udp", "bad")] == st[("tcp", "bad")] == 0, st
    assert st[("ip", "good")] == n * (2 if case[0] == "uplink" else 1), st
    l4 = "tcp" if "tcp" in case[1] else "udp"
    outer_valid = case[0] == "uplink" and "valid" in case[1]
    assert st[(l4, "good")] == n + (n if outer_valid and l4 == "udp" else 0), st
    if case[0] == "uplink":
        assert st[("udp", "good" if outer_valid else "none")] >= n, st


# ---------------------------------------------------------------------------------------------
# The same profiles from the embedded engine, byte for byte

# --stats stats is the one case where the two generators mark frames differently by design: TRex
# counts a stream by the IPv4 id it writes, the engine by its 16-byte trailer (docs/engine.md)
SAME_BYTES = [c for c in CASES if "stats" not in c[1]]


@pytest.fixture(scope="module")
def engine_lab():
    """An embedded-engine lab whose DUT is the reference forwarder: every frame crosses to the other
    generator port unchanged but for its MACs, where the engine captures it."""
    from gtplab.lab.topology import Lab
    lab = Lab.up(dut="fwd")
    c = None
    try:
        c = engine_client(lab)
        c.connect()
        yield lab, c
    finally:
        if c is not None:
            c.disconnect()
        lab.down()


def engine_frames(engine_lab, case) -> list[bytes]:
    """What the embedded engine sends for the case: the profile's stream JSON, built by TRex's own
    client library (the same that TRex's load_profile sends to the server), run by the engine."""
    lab, c = engine_lab
    profile, tunables, n = case
    tx = TX_PORT[profile]
    w = TrexClient()
    try:
        streams = w.profile_streams(PROFILE_PATH[profile], port_id=tx, tunables=list(tunables))
    finally:
        w.close()
    c.reset()
    c.add_streams(streams, ports=[tx])
    cap = c.start_capture([1 - tx], 4 * n)
    c.start(ports=[tx], mult="2000pps", duration=max(0.5, 2.0 * n / 2000))
    c.wait_on_traffic(ports=[tx], timeout=60, rx_delay_ms=200)
    return [f for _, f, _ in c.stop_capture(cap["id"])]


def by_stream(frames: list[bytes]) -> dict[int, list[bytes]]:
    """Frames in order per stream (the profiles' streams differ in frame length: IMIX rows)."""
    out: dict[int, list[bytes]] = {}
    for f in frames:
        out.setdefault(len(f), []).append(f)
    return out


@pytest.mark.parametrize("case", SAME_BYTES, ids=case_id)
def test_trex_and_engine_send_the_same_bytes(captured, engine_lab, case):
    """The first packets of every profile case (each direction, single and multi-flow, IMIX, edge
    values of the tunables) as TRex sent them (its capture) and as the embedded engine sends them:
    byte for byte, in the same order per stream, except the Ethernet addresses, which both take from
    their port's configuration (the profiles' MACs are placeholders). The cases compared declare no
    random field (the --order random cases, RANDOM_CASES, are random by declaration and checked on
    their own), so every other byte must match."""
    _, trex = captured[case_id(case)]
    eng = engine_frames(engine_lab, case)
    t, e = by_stream(trex), by_stream(eng)
    assert set(t) == set(e), (sorted(t), sorted(e))
    compared = 0
    for length in t:
        k = min(len(t[length]), len(e[length]))
        assert k >= 1
        for i in range(k):
            a, b = t[length][i][12:], e[length][i][12:]
            if a != b:
                diff = [j + 12 for j in range(len(a)) if a[j] != b[j]]
                pytest.fail(f"{length} B frame {i}: {len(diff)} bytes differ at offsets {diff[:12]}\n"
                            f"TRex:   {t[length][i].hex()}\nengine: {e[length][i].hex()}")
        compared += k
    assert compared >= 0.75 * case[2], (compared, case[2])
@pytest.mark.parametrize("case", RANDOM_CASES, ids=case_id)
def test_trex_random_order_sends_only_bearers_and_all_of_them(captured, case):
    """--order random as TRex itself runs it: every frame is one bearer's (the uplink's TEID, UE
    and SGW all of the same bearer: the SGW from the masked write of the bearer variable), and the
    random draws reach every bearer; IPv4 headers right (the inner L4 checksum of the uplink is
    STLVmFixChecksumHw's: wrong without an offload, docs/profiles.md)."""
    from gtplab.gtpu.bearers import load_common
    a = load_common().parse(case[0], case[1])
    pcap, frames = captured[case_id(case)]
    got = Counter()
    for f in frames:
        if case[0] == "uplink":
            teid = int.from_bytes(f[46:50], "big")
            i = teid - a.teid_base
            ue, pdn = int.from_bytes(f[62:66], "big"), int.from_bytes(f[66:70], "big")
            sgw = int.from_bytes(f[26:30], "big")
            assert 0 <= i < a.flows and (ue, sgw, pdn) == (
                a.ue_base + i, a.sgw_base + i % a.sgws, a.pdn_base), (teid, ue, sgw, pdn)
        else:
            i = int.from_bytes(f[34:38], "big") - a.ue_base   # after the 802.1Q tag
            assert 0 <= i < a.flows, i
        got[i] += 1
    assert set(got) == set(range(a.flows)), got
    st = tshark_checksums(pcap)
    assert st[("ip", "bad")] == 0 and st[("ip", "good")] == len(frames) * (2 if case[0] == "uplink" else 1)
