"""GTP-U signalling end to end: a PGW-U attached (generic XDP) in one namespace, a GTP-U peer
(tests/lib/gtpu_peer.py, a plain UDP socket on port 2152) in another, one veth between them.

- `pgwu path --send` sends Echo Requests; the peer's Echo Responses are read by xdp_access, and
  `pgwu path` shows the peer up with its restart counter, and a restart when the counter changes.
- A G-PDU for an unknown TEID comes back to the peer's socket as an Error Indication, and a G-PDU with
  an unknown comprehension-required extension header as a Supported Extension Headers Notification.
- Error Indications and End Markers the peer sends are shown by `pgwu signalling` with their bearer.
- The same over IPv6 (N3 over IPv6, the gateway's n3_addr6): `pgwu path --send` to a bearer's IPv6
  peer, its Echo Responses read by xdp_ul_n3v6 (peers6), its End Markers in `pgwu signalling`.
Namespaces, pins and processes have unique names and are always removed.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys

import pytest
from scapy.contrib.gtp import GTP_U_Header

from gtplab.gtpu import packets as P
from gtplab.dut.dataplane import pgwu_binary
from tests.lib import REPO

pytestmark = pytest.mark.lab

PEER_PY = REPO / "tests" / "lib" / "gtpu_peer.py"
TEID, UE, SGW_TEID = 0x100, "10.45.0.2", 0x200


def run(*cmd, check=True, **kw):
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, check=check, timeout=60, **kw)


@pytest.fixture
def lab():
    ident = secrets.token_hex(3)
    gw, peer = f"gtplab-gw-{ident}", f"gtplab-peer-{ident}"
    pin = f"/sys/fs/bpf/gtplab-path-{ident}"
    net = f"10.{200 + secrets.randbelow(50)}.{secrets.randbelow(250)}"
    gw_addr, peer_addr = f"{net}.1", f"{net}.2"
    net6 = f"fd47:{secrets.randbelow(0xffff):x}:{secrets.randbelow(0xffff):x}::"
    gw6, peer6 = f"{net6}1", f"{net6}2"
    g0, p0, s0, s1 = f"g{ident}", f"p{ident}", f"s{ident}", f"t{ident}"
    try:
        for ns in (gw, peer):
            run("ip", "netns", "add", ns)
        run("ip", "-n", gw, "link", "add", g0, "type", "veth", "peer", "name", p0, "netns", peer)
        run("ip", "-n", gw, "link", "add", s0, "type", "veth", "peer", "name", s1)
        run("ip", "-n", gw, "addr", "add", f"{gw_addr}/24", "dev", g0)
        run("ip", "-n", peer, "addr", "add", f"{peer_addr}/24", "dev", p0)
        run("ip", "-n", gw, "addr", "add", f"{gw6}/64", "dev", g0, "nodad")
        run("ip", "-n", peer, "addr", "add", f"{peer6}/64", "dev", p0, "nodad")
        # the peer's datagrams leave with their UDP checksum complete, as from a NIC: a veth's
        # offload leaves it partial, which xdp_ul_n3v6 (checking it, mandatory over IPv6) drops
        run("ip", "netns", "exec", peer, "ethtool", "-K", p0, "tx", "off")
        for ns, ifs in ((gw, (g0, s0, s1, "lo")), (peer, (p0, "lo"))):
            for i in ifs:
                run("ip", "-n", ns, "link", "set", i, "up")
        run(pgwu_binary(), "-d", pin, "load", "--max-bearers", "64", "--local-addr", gw_addr, "--ue-pool", "10.45.0.0/16")
        run(pgwu_binary(), "-d", pin, "-n", gw, "attach", "--access", g0, "--sgi", s0, "--mode", "generic", "--no-watch")
        resolve_neighbour(peer, gw_addr)
        run(pgwu_binary(), "-d", pin, "session", "add", "--teid", str(TEID), "--ue", UE, "--sgw", peer_addr,
            "--sgw-teid", str(SGW_TEID))
        yield {"gw": gw, "peer": peer, "pin": pin, "gw_addr": gw_addr, "peer_addr": peer_addr,
               "gw6": gw6, "peer6": peer6}
    finally:
        if os.path.exists(pin):
            run(pgwu_binary(), "-d", pin, "unload", check=False)
        shutil.rmtree(pin, ignore_errors=True)
        for ns in (gw, peer):
            run("ip", "netns", "del", ns, check=False)


def resolve_neighbour(ns: str, addr: str, timeout: float = 5.0) -> None:
    """Have ns resolve addr's MAC (a datagram to its discard port; ARP passes xdp_access to the
    kernel), polled with a deadline: the peer's first messages are then not held by ARP."""
    import time
    run("nsenter", f"--net=/run/netns/{ns}", sys.executable, "-c",
        f"import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ({addr!r}, 9))")
    deadline = time.monotonic() + timeout
    while True:
        out = run("ip", "-n", ns, "neigh", "show", addr).stdout
        if any(s in out for s in ("REACHABLE", "STALE", "DELAY")):
            return
        if time.monotonic() > deadline:
            pytest.fail(f"{ns} did not resolve {addr}: {out!r}")
        time.sleep(0.05)


def start_peer(lab, restart: int, duration: float, send=(), v6: bool = False) -> subprocess.Popen:
    addr, gw = (lab["peer6"], lab["gw6"]) if v6 else (lab["peer_addr"], lab["gw_addr"])
    cmd = ["nsenter", f"--net=/run/netns/{lab['peer']}", sys.executable, str(PEER_PY), "--addr", addr,
           "--gw", gw, "--restart", str(restart), "--duration", str(duration)]
    for m in send:
        cmd += ["--send", bytes(m).hex()]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    if line.strip() != "ready":
        p.kill()
        pytest.fail(f"peer did not start: {line!r} {p.stderr.read()}")
    return p


def finish(p: subprocess.Popen) -> list[dict]:
    # read through p.stdout itself, not communicate(): start_peer's readline() may already hold the
    # lines of replies that arrived at once in its buffer, which communicate() would not see
    out = p.stdout.read()
    err = p.stderr.read()
    assert p.wait(timeout=30) == 0, err
    return [json.loads(x) for x in out.splitlines() if x.strip()]


def gtp_body(pkt) -> bytes:
    """The GTP-U message (UDP payload) of a packet built by gtplab.packets."""
    return bytes(pkt[GTP_U_Header])


def path(lab, *args) -> dict:
    cp = run(pgwu_binary(), "-d", lab["pin"], "-n", lab["gw"], "path", "--json", *args)
    return {p["addr"]: p for p in json.loads(cp.stdout)["peers"]}


def test_path_echo_and_restart(lab):
    assert path(lab)[lab["peer_addr"]]["state"] == "unprobed"     # an SGW a bearer names
    p = start_peer(lab, restart=42, duration=2.0)
    try:
        got = path(lab, "--send", "--wait", "1500")[lab["peer_addr"]]
    finally:
        finish(p)
    assert (got["state"], got["restart_counter"], got["restarts"], got["responses"]) == ("up", 42, 0, 1), got
    # no one answers now: the next probe finds the peer silent
    got = path(lab, "--send", "--wait", "300")[lab["peer_addr"]]
    assert got["state"] == "no-response" and got["responses"] == 1, got
    # the peer comes back with another restart counter: counted as a restart
    p = start_peer(lab, restart=43, duration=2.0)
    try:
        got = path(lab, "--send", "--wait", "1500", "--peer", lab["peer_addr"])[lab["peer_addr"]]
    finally:
        finish(p)
    assert (got["state"], got["restart_counter"], got["restarts"], got["responses"]) == ("up", 43, 1, 2), got
    text = run(pgwu_binary(), "-d", lab["pin"], "path").stdout.splitlines()
    assert text[1].split()[:4] == [lab["peer_addr"], "up", "43", "1"], text


def test_replies_reach_the_sender(lab):
    """Error Indication and Supported Extension Headers Notification arrive at the peer's socket."""
    unknown = P.gpdu(teid=0xDEAD, size=200, outer_src=lab["peer_addr"], outer_dst=lab["gw_addr"])
    bad_ext = P.gpdu(teid=TEID, size=200, outer_src=lab["peer_addr"], outer_dst=lab["gw_addr"],
                     ext=[P.ext_header(0xA0, b"\x01\x02")])
    p = start_peer(lab, restart=1, duration=1.5, send=[gtp_body(unknown), gtp_body(bad_ext)])
    msgs = finish(p)
    st = json.loads(run(pgwu_binary(), "-d", lab["pin"], "stats", "--json").stdout)
    seen = {(k, a): b["packets"] for k, v in st["reasons"].items() for a, b in v.items() if b["packets"]}
    assert [(m["src"], m["sport"]) for m in msgs] == [(lab["gw_addr"], 2152)] * 2, (msgs, seen)
    ei, sehn = (bytes.fromhex(m["hex"]) for m in msgs)
    assert ei == (bytes([0x32, 26, 0, 16, 0, 0, 0, 0, 0, 0, 0, 0, 16]) + (0xDEAD).to_bytes(4, "big")
                  + bytes([133, 0, 4]) + bytes(int(x) for x in lab["gw_addr"].split("."))), ei.hex()
    assert sehn[:2] == bytes([0x32, 31]) and sehn[12:14] == bytes([141, 9]), sehn.hex()
    assert st["events"]["err_ind_sent"] == 1 and st["events"]["supp_ext_sent"] == 1, st["events"]
    assert st["reasons"]["drop_unknown_teid"]["tx"]["packets"] == 1
    assert st["reasons"]["drop_gtp_ext_unsupported"]["tx"]["packets"] == 1


def test_signalling_shows_the_bearer(lab):
    ei = P.error_indication(teid=SGW_TEID, peer=lab["peer_addr"], src=lab["peer_addr"], dst=lab["gw_addr"])
    em = P.end_marker(teid=TEID, src=lab["peer_addr"], dst=lab["gw_addr"])
    stray = P.end_marker(teid=0x999, src=lab["peer_addr"], dst=lab["gw_addr"])
    p = start_peer(lab, restart=1, duration=0.8, send=[gtp_body(ei), gtp_body(ei), gtp_body(em), gtp_body(stray)])
    finish(p)
    sig = json.loads(run(pgwu_binary(), "-d", lab["pin"], "signalling", "--json").stdout)["signalling"]
    got = {(s["message"], s["teid"]): (s["packets"], s["bearer"]) for s in sig}
    assert got == {("error_ind", SGW_TEID): (2, {"teid": TEID, "ue": UE}),
                   ("end_marker", TEID): (1, {"teid": TEID, "ue": UE}),
                   ("end_marker", 0x999): (1, None)}, sig
    st = json.loads(run(pgwu_binary(), "-d", lab["pin"], "stats", "--json").stdout)["reasons"]
    assert (st["sig_error_ind"]["drop"]["packets"], st["sig_end_marker"]["drop"]["packets"]) == (2, 2)


def test_qfi_bearer_added_by_the_cli_live(lab):
    """A 5G N3 bearer added with `pgwu session add --qfi 9`, live: an uplink G-PDU without an UL
    PDU Session Container is dropped (drop_qfi_mismatch, no answer); the same with the container
    and QFI 9 is taken (its inner TTL expired: the Time Exceeded comes back to the SGW's socket
    through the bearer's tunnel, marked with a DL PDU Session Container carrying QFI 9)."""
    from scapy.contrib.gtp import GTPPDUSessionContainer
    from scapy.layers.inet import ICMP, IP
    teid, ue, sgw_teid = 0x300, "10.45.0.3", 0x400
    run(pgwu_binary(), "-d", lab["pin"], "session", "add", "--teid", str(teid), "--ue", ue, "--sgw", lab["peer_addr"],
        "--sgw-teid", str(sgw_teid), "--qfi", "9")
    inner = P.ip_packet(ue, "198.51.100.10", ttl=1, payload_len=40)
    bare = P.gpdu(teid=teid, inner=inner, outer_src=lab["peer_addr"], outer_dst=lab["gw_addr"])
    marked = P.gpdu(teid=teid, inner=inner, outer_src=lab["peer_addr"], outer_dst=lab["gw_addr"],
                    ext=[P.pdu_session_container(9)])
    p = start_peer(lab, restart=1, duration=1.0, send=[gtp_body(bare), gtp_body(marked)])
    msgs = finish(p)
    assert len(msgs) == 1 and (msgs[0]["src"], msgs[0]["sport"]) == (lab["gw_addr"], 2152), msgs
    m = GTP_U_Header(bytes.fromhex(msgs[0]["hex"]))
    assert (m.gtp_type, m.teid, m.E, m.next_ex) == (255, sgw_teid, 1, 0x85)
    psc = m[GTPPDUSessionContainer]
    assert (psc.type, psc.QFI) == (0, 9)
    assert (m[IP].dst, m[IP][ICMP].type) == (ue, 11)
    st = json.loads(run(pgwu_binary(), "-d", lab["pin"], "stats", "--json").stdout)
    assert st["reasons"]["drop_qfi_mismatch"]["drop"]["packets"] == 1
    assert st["reasons"]["drop_ttl_expired"]["tx"]["packets"] == 1


def test_time_exceeded_reaches_the_ue_through_its_tunnel(lab):
    """An uplink packet whose inner TTL expires: the ICMP Time Exceeded comes back to the SGW's
    GTP-U socket as a G-PDU for the bearer's SGW TEID, quoting the expired packet."""
    inner = P.ip_packet(UE, "198.51.100.10", ttl=1, payload_len=40)
    g = P.gpdu(teid=TEID, inner=inner, outer_src=lab["peer_addr"], outer_dst=lab["gw_addr"])
    p = start_peer(lab, restart=1, duration=1.0, send=[gtp_body(g)])
    msgs = finish(p)
    assert len(msgs) == 1 and (msgs[0]["src"], msgs[0]["sport"]) == (lab["gw_addr"], 2152), msgs
    m = GTP_U_Header(bytes.fromhex(msgs[0]["hex"]))
    from scapy.layers.inet import ICMP, IP
    assert (m.gtp_type, m.teid) == (255, SGW_TEID)
    ip = m[IP]
    assert (ip.src, ip.dst, ip[ICMP].type, ip[ICMP].code) == (lab["gw_addr"], UE, 11, 0)
    assert bytes(ip[ICMP].payload) == bytes(inner)[:28]
    st = json.loads(run(pgwu_binary(), "-d", lab["pin"], "stats", "--json").stdout)
    assert st["events"]["icmp_time_exceeded_sent"] == 1
    assert st["reasons"]["drop_ttl_expired"]["tx"]["packets"] == 1


def test_path_echo_and_signalling_over_ipv6(lab):
    """N3 over IPv6: `pgwu path --send` sends its Echo Request to a bearer's IPv6 peer from the
    gateway's n3_addr6; the peer's Echo Response (over IPv6, to port 2152) is read by xdp_ul_n3v6 and
    the peer shown up with its restart counter, next to the IPv4 SGW; the End Marker it sends is shown
    by `pgwu signalling` with its bearer."""
    teid6, ue6, steid6 = 0x500, "10.45.0.5", 0x600
    run(pgwu_binary(), "-d", lab["pin"], "config", "--n3-addr6", lab["gw6"])
    run(pgwu_binary(), "-d", lab["pin"], "session", "add", "--teid", str(teid6), "--ue", ue6, "--sgw6", lab["peer6"],
        "--sgw-teid", str(steid6))
    before = path(lab)
    assert (before[lab["peer6"]]["state"], before[lab["peer6"]]["family"]) == ("unprobed", 6), before
    assert before[lab["peer_addr"]]["family"] == 4, before
    em = P.end_marker(teid=teid6, src=lab["peer6"], dst=lab["gw6"])
    p = start_peer(lab, restart=42, duration=2.0, send=[gtp_body(em)], v6=True)
    try:
        got = path(lab, "--send", "--wait", "1500", "--peer6", lab["peer6"])
    finally:
        msgs = finish(p)
    assert msgs == [], msgs
    assert set(got) == {lab["peer6"]}, got
    g = got[lab["peer6"]]
    st = json.loads(run(pgwu_binary(), "-d", lab["pin"], "stats", "--json").stdout)["reasons"]
    seen = {(k, a): b["packets"] for k, v in st.items() for a, b in v.items() if b["packets"]}
    assert (g["state"], g["restart_counter"], g["restarts"], g["responses"]) == ("up", 42, 0, 1), (g, seen)
    assert st["sig_echo_response"]["drop"]["packets"] == 1, seen
    sig = json.loads(run(pgwu_binary(), "-d", lab["pin"], "signalling", "--json").stdout)["signalling"]
    assert [(s["message"], s["teid"], s["peer"], s["packets"], s["bearer"]) for s in sig] == [
        ("end_marker", teid6, lab["peer6"], 1, {"teid": teid6, "ue": ue6})], sig
    # nobody answers now: the next probe finds it silent
    g = path(lab, "--send", "--wait", "300", "--peer6", lab["peer6"])[lab["peer6"]]
    assert (g["state"], g["responses"]) == ("no-response", 1), g

