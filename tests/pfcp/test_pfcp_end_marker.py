"""End Marker on a path switch (TS 29.244 5.2.2.3 SNDEM, TS 29.281 7.3.2): an Update FAR that moves a
session's downlink to another tunnel (or stops it) with PFCPSMReq-Flags SNDEM makes `pgwu pfcp` send
exactly one End Marker on the OLD tunnel: from the GTP-U address, UDP 2152 -> 2152, GTP-U type 254
with the old TEID, carrying a PDU Session Container (DL, the bearer's QFI) when the bearer has a QFI.
Over IPv6 when the old tunnel's peer is IPv6 (N3 over IPv6: from the N3 IPv6 address, its UDP checksum
computed), whichever family the new tunnel is.

The agent runs in a network namespace of the test's own (nsenter, so /sys/fs/bpf stays visible), where
the GTP-U address is on one end of a veth pair that routes the SGWs' addresses (their neighbours
static); what it sends there is captured on that end (AF_PACKET) and goes nowhere else. The PFCP client socket is made in the
namespace too. Namespace, pins and agent are removed afterwards, also on failure.
"""

from __future__ import annotations

import contextlib
import re
import secrets
import socket
import struct
import subprocess
import time

import pytest

from scapy.contrib.pfcp import IE_OuterHeaderCreation

from gtplab.gtpu import packets as P
from gtplab.dut.dataplane import Dataplane
from gtplab.kernel.netns import Worker
from tests.lib import pfcp_msgs as M
from tests.lib.lab import af_packet_socket
from tests.lib.pfcp_agent import PGWU, UE, Agent, cause, created_teid, forwarding_config, up_seid
from tests.pfcp.conftest import loaded_pgwu
from tests.lib.pfcp_n3v6 import GNB6, GNB6B, N3_6, dl_far6, ohc6
from tests.lib.pfcp_n3v6 import establish as establish6

pytestmark = pytest.mark.lab     # a network namespace and a veth pair of its own (and a loaded PGW-U)

class NsAgent(Agent):
    """`pgwu pfcp` in netns ns, and a client socket made there."""

    def __init__(self, pin_dir: str, ns: str, worker: Worker):
        self.pin_dir = pin_dir
        self.proc = subprocess.Popen(["nsenter", f"--net=/run/netns/{ns}", "--", PGWU, "-d", pin_dir, "pfcp",
                                      "--listen", "127.0.0.1:0"],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        m = re.search(r"listening on ([\d.]+):(\d+)", line)
        assert m, f"agent did not start: {line!r} {self.proc.stderr.read() if self.proc.poll() is not None else ''}"
        self.addr = (m.group(1), int(m.group(2)))

        def client():
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.bind(("127.0.0.1", 0))
            return s
        self.sock = worker.call(client)
        self.sock.settimeout(2)
        self.log = []


@contextlib.contextmanager
def agent_lab(pin_dir):
    """(agent, capture socket on em0) in a fresh netns gtplab-em-<id>; em0 has the GTP-U address and
    the N3 IPv6 address N3_6, the SGWs' and gNBs' neighbours static."""
    ns = f"gtplab-em-{secrets.token_hex(4)}"
    # undone in reverse, each step whatever the one before did (a stop() that raised left the
    # namespace behind: five gtplab-em-* once)
    with contextlib.ExitStack() as undo:
        subprocess.run(["ip", "netns", "add", ns], check=True)
        undo.callback(subprocess.run, ["ip", "netns", "del", ns], check=False)
        for cmd in (["link", "set", "lo", "up"], ["link", "add", "em0", "type", "veth", "peer", "name", "em1"],
                    ["addr", "add", f"{M.GTPU_ADDR}/24", "dev", "em0"],
                    ["addr", "add", f"{N3_6}/64", "dev", "em0", "nodad"], ["link", "set", "em0", "up"],
                    ["link", "set", "em1", "up"],
                    ["neigh", "add", M.SGW_ADDR, "lladdr", "02:00:00:00:0e:01", "dev", "em0", "nud", "permanent"],
                    ["neigh", "add", M.SGW_ADDR2, "lladdr", "02:00:00:00:0e:02", "dev", "em0", "nud", "permanent"],
                    ["neigh", "add", GNB6, "lladdr", "02:00:00:00:0e:06", "dev", "em0", "nud", "permanent"],
                    ["neigh", "add", GNB6B, "lladdr", "02:00:00:00:0e:07", "dev", "em0", "nud", "permanent"]):
            subprocess.run(["ip", "-n", ns, *cmd], check=True)
        worker = Worker(ns)
        undo.callback(worker.close)

        cap = worker.call(af_packet_socket, "em0", None)
        undo.callback(cap.close)
        agent = NsAgent(pin_dir, ns, worker)
        undo.callback(agent.stop)
        assert cause(agent.req(M.assoc_setup(seq=1))) == 1
        yield agent, cap


@pytest.fixture
def lab(pin_dir):
    with agent_lab(pin_dir) as x:
        yield x


@pytest.fixture
def lab6():
    """agent_lab on a PGW-U of its own loaded with the N3 IPv6 address (`--n3-addr6 N3_6`)"""
    with loaded_pgwu("--n3-addr6", N3_6) as d, agent_lab(d) as x:
        yield x


def gtpu_sent(cap, wait: float, family: int = 4) -> list[bytes]:
    """The IPv4 (family 6: IPv6) packets to UDP port 2152 seen on em0 within `wait` seconds (Ethernet
    removed). An IPv6 one has UDP right after its header (what the agent sends)."""
    out = []
    deadline = time.monotonic() + wait
    while (left := deadline - time.monotonic()) > 0:
        cap.settimeout(left)
        try:
            f = cap.recv(65535)
        except socket.timeout:
            break
        if family == 4 and len(f) >= 14 + 28 and f[12:14] == b"\x08\x00" and f[14 + 9] == 17:
            ip = f[14:]
            ihl = (ip[0] & 0xF) * 4
            if struct.unpack_from("!H", ip, ihl + 2)[0] == 2152:
                out.append(ip[:struct.unpack_from("!H", ip, 2)[0]])
        if family == 6 and len(f) >= 14 + 48 and f[12:14] == b"\x86\xdd" and f[14 + 6] == 17:
            ip = f[14:]
            if struct.unpack_from("!H", ip, 40 + 2)[0] == 2152:
                out.append(ip[:40 + struct.unpack_from("!H", ip, 4)[0]])
    return out


def csum16(b: bytes) -> int:
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack(f"!{len(b) // 2}H", b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s


def check_end_marker(ip: bytes, sgw: str, teid: int, qfi: int | None) -> None:
    """One End Marker, field by field (TS 29.281 5.1, 7.3.2; TS 38.415 5.5.2.1 for the container); over
    IPv6 when sgw is an IPv6 address: from N3_6, class and flow label 0, hop limit 64, the UDP checksum
    present and right (RFC 8200 8.1)."""
    if ":" in sgw:
        assert (ip[0] >> 4, ip[6], ip[7], bytes(ip[0:4])) == (6, 17, 64, b"\x60\0\0\0"), ip[:8].hex()
        assert (socket.inet_ntop(socket.AF_INET6, ip[8:24]), socket.inet_ntop(socket.AF_INET6, ip[24:40])) == (
            N3_6, sgw)
        l3, pseudo_addrs = 40, ip[8:40]
    else:
        assert (ip[0], ip[9]) == (0x45, 17)
        assert csum16(ip[:20]) == 0xFFFF, "IPv4 header checksum"
        assert (socket.inet_ntoa(ip[12:16]), socket.inet_ntoa(ip[16:20])) == (M.GTPU_ADDR, sgw)
        l3, pseudo_addrs = 20, ip[12:20]
    sport, dport, ulen, ck = struct.unpack_from("!HHHH", ip, l3)
    assert (sport, dport, ulen) == (2152, 2152, len(ip) - l3)
    pseudo = pseudo_addrs + struct.pack("!BBH", 0, 17, ulen)
    assert (ck == 0 and l3 == 20) or csum16(pseudo + ip[l3:]) == 0xFFFF, "UDP checksum"
    g = ip[l3 + 8:]
    flags, mtype, glen, gteid = struct.unpack_from("!BBHI", g)
    assert (flags & 0xF0, mtype, gteid) == (0x30, 254, teid), g.hex()
    assert glen == len(g) - 8
    if qfi is None:
        assert (flags & 0x07, glen) == (0, 0), f"no container expected: {g.hex()}"
    else:
        assert flags & 0x04 and glen == 8, g.hex()
        assert g[11] == 0x85, "next extension: PDU Session Container"
        assert (g[12], g[13] >> 4, g[14] & 0x3F, g[15]) == (1, 0, qfi, 0), g[8:].hex()


@pytest.mark.parametrize("qfi", [None, 9])
def test_path_switch_with_sndem_sends_exactly_one_end_marker_on_the_old_tunnel(lab, pin_dir, qfi):
    """An Update FAR to SGW2/TEID 0x200 with SNDEM: exactly one End Marker, to the old SGW with the old
    TEID 0x100 (with the container carrying the QFI for a QFI bearer), none on the new tunnel; the
    downlink's next G-PDU goes to the new tunnel."""
    agent, cap = lab
    r = agent.req(M.establish(2, 0x10, UE, sgw_teid=0x100, qfi=qfi))
    assert cause(r) == 1
    seid, teid = up_seid(r), created_teid(r)
    gtpu_sent(cap, 0.1)                                  # nothing of the establishment matters
    assert cause(agent.req(M.modify_dl(3, seid, sgw=M.SGW_ADDR2, sgw_teid=0x200, sndem=True))) == 1
    sent = gtpu_sent(cap, 1.0)
    assert len(sent) == 1, f"{len(sent)} GTP-U packets sent: {[s.hex() for s in sent]}"
    check_end_marker(sent[0], M.SGW_ADDR, 0x100, qfi)
    with Dataplane(pin_dir) as dp:
        forwarding_config(dp)
        down = dp.run_sgi(bytes(P.downlink_ip(ue=UE, size=300)))
        assert down.verdict == "redirect"
        assert socket.inet_ntoa(down.data[30:34]) == M.SGW_ADDR2
        assert struct.unpack_from("!I", down.data, 14 + 20 + 8 + 4)[0] == 0x200
    # the same tunnel again with SNDEM: no switch, no End Marker
    assert cause(agent.req(M.modify_dl(4, seid, sgw=M.SGW_ADDR2, sgw_teid=0x200, sndem=True))) == 1
    assert gtpu_sent(cap, 0.5) == []


def test_path_switch_without_sndem_sends_nothing(lab):
    agent, cap = lab
    r = agent.req(M.establish(2, 0x10, UE, sgw_teid=0x100))
    assert cause(r) == 1
    assert cause(agent.req(M.modify_dl(3, up_seid(r), sgw=M.SGW_ADDR2, sgw_teid=0x200))) == 1
    assert gtpu_sent(cap, 0.5) == []


def test_downlink_stopped_with_sndem_marks_the_tunnel_it_leaves(lab):
    """The downlink FAR turns to buffering with SNDEM (the tunnel goes away): one End Marker on it."""
    agent, cap = lab
    r = agent.req(M.establish(2, 0x10, UE, sgw_teid=0x100))
    assert cause(r) == 1
    assert cause(agent.req(M.modify_dl_buffer(3, up_seid(r), sndem=True))) == 1
    sent = gtpu_sent(cap, 1.0)
    assert len(sent) == 1
    check_end_marker(sent[0], M.SGW_ADDR, 0x100, None)


# ---- N3 over IPv6: the old tunnel's peer is IPv6 (or the new one is) ---------------------------------------
def establish_v6_peer(agent):
    """A session whose downlink goes to GNB6/0x600 over IPv6 (OHC GTP-U/UDP/IPv6), uplink F-TEID IPv4"""
    r = establish6(agent, 2, v4=True, v6=False, ohr=0, dl_far=dl_far6(GNB6, 0x600))
    assert cause(r) == 1, r.summary()
    return up_seid(r)


@pytest.mark.parametrize("new", ["ipv4", "ipv6"])
def test_switch_away_from_an_ipv6_peer_sends_the_end_marker_over_ipv6(lab6, new):
    """Handover away from an IPv6 gNB (to an IPv4 SGW, or another IPv6 gNB) with SNDEM: exactly one End
    Marker, over IPv6 from N3_6 to the old gNB with the old TEID; nothing over IPv4."""
    agent, cap = lab6
    seid = establish_v6_peer(agent)
    gtpu_sent(cap, 0.1, 6)
    ohc = (IE_OuterHeaderCreation(GTPUUDPIPV4=1, TEID=0x200, ipv4=M.SGW_ADDR2) if new == "ipv4"
           else ohc6(GNB6B, 0x700))
    assert cause(agent.req(M.modify_dl(3, seid, ohc=ohc, sndem=True))) == 1
    sent6 = gtpu_sent(cap, 1.0, 6)
    assert len(sent6) == 1, f"{len(sent6)} GTP-U/IPv6 packets sent: {[s.hex() for s in sent6]}"
    check_end_marker(sent6[0], GNB6, 0x600, None)
    assert gtpu_sent(cap, 0.3, 4) == []


def test_switch_from_an_ipv4_peer_to_an_ipv6_one_marks_the_old_tunnel_over_ipv4(lab6):
    agent, cap = lab6
    r = agent.req(M.establish(2, 0x10, UE, sgw_teid=0x100))
    assert cause(r) == 1
    gtpu_sent(cap, 0.1)
    assert cause(agent.req(M.modify_dl(3, up_seid(r), ohc=ohc6(GNB6B, 0x700), sndem=True))) == 1
    sent = gtpu_sent(cap, 1.0)
    assert len(sent) == 1, [s.hex() for s in sent]
    check_end_marker(sent[0], M.SGW_ADDR, 0x100, None)
    assert gtpu_sent(cap, 0.3, 6) == []


def test_ipv6_downlink_stopped_with_sndem_marks_the_tunnel_it_leaves(lab6):
    agent, cap = lab6
    seid = establish_v6_peer(agent)
    gtpu_sent(cap, 0.1, 6)
    assert cause(agent.req(M.modify_dl_buffer(3, seid, sndem=True))) == 1
    sent6 = gtpu_sent(cap, 1.0, 6)
    assert len(sent6) == 1
    check_end_marker(sent6[0], GNB6, 0x600, None)
