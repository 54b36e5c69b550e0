"""End Marker on a path switch (TS 29.244 5.2.2.3 SNDEM, TS 29.281 7.3.2): an Update FAR that moves a
session's downlink to another tunnel (or stops it) with PFCPSMReq-Flags SNDEM makes `pgwu pfcp` send
exactly one End Marker on the OLD tunnel: from the GTP-U address, UDP 2152 -> 2152, GTP-U type 254
with the old TEID, carrying a PDU Session Container (DL, the bearer's QFI) when the bearer has a QFI.

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

from gtplab.gtpu import packets as P
from gtplab.dut.dataplane import Dataplane
from gtplab.kernel.netns import Worker
from tests.lib import pfcp_msgs as M
from tests.lib.lab import af_packet_socket
from tests.lib.pfcp_agent import PGWU, UE, Agent, cause, created_teid, forwarding_config, up_seid

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


@pytest.fixture
def lab(pin_dir):
    """(agent, capture socket on em0) in a fresh netns gtplab-em-<id>."""
    ns = f"gtplab-em-{secrets.token_hex(4)}"
    # undone in reverse, each step whatever the one before did (a stop() that raised left the
    # namespace behind: five gtplab-em-* once)
    with contextlib.ExitStack() as undo:
        subprocess.run(["ip", "netns", "add", ns], check=True)
        undo.callback(subprocess.run, ["ip", "netns", "del", ns], check=False)
        for cmd in (["link", "set", "lo", "up"], ["link", "add", "em0", "type", "veth", "peer", "name", "em1"],
                    ["addr", "add", f"{M.GTPU_ADDR}/24", "dev", "em0"], ["link", "set", "em0", "up"],
                    ["link", "set", "em1", "up"],
                    ["neigh", "add", M.SGW_ADDR, "lladdr", "02:00:00:00:0e:01", "dev", "em0", "nud", "permanent"],
                    ["neigh", "add", M.SGW_ADDR2, "lladdr", "02:00:00:00:0e:02", "dev", "em0", "nud", "permanent"]):
            subprocess.run(["ip", "-n", ns, *cmd], check=True)
        worker = Worker(ns)
        undo.callback(worker.close)

        cap = worker.call(af_packet_socket, "em0", None)
        undo.callback(cap.close)
        agent = NsAgent(pin_dir, ns, worker)
        undo.callback(agent.stop)
        assert cause(agent.req(M.assoc_setup(seq=1))) == 1
        yield agent, cap


def gtpu_sent(cap, wait: float) -> list[bytes]:
    """The IPv4 packets to UDP port 2152 seen on em0 within `wait` seconds (Ethernet removed)."""
    out = []
    deadline = time.monotonic() + wait
    while (left := deadline - time.monotonic()) > 0:
        cap.settimeout(left)
        try:
            f = cap.recv(65535)
        except socket.timeout:
            break
        if len(f) >= 14 + 28 and f[12:14] == b"\x08\x00" and f[14 + 9] == 17:
            ip = f[14:]
            ihl = (ip[0] & 0xF) * 4
            if struct.unpack_from("!H", ip, ihl + 2)[0] == 2152:
                out.append(ip[:struct.unpack_from("!H", ip, 2)[0]])
    return out


def csum16(b: bytes) -> int:
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack(f"!{len(b) // 2}H", b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s


def check_end_marker(ip: bytes, sgw: str, teid: int, qfi: int | None) -> None:
    """One End Marker, field by field (TS 29.281 5.1, 7.3.2; TS 38.415 5.5.2.1 for the container)."""
    assert (ip[0], ip[9]) == (0x45, 17)
    assert csum16(ip[:20]) == 0xFFFF, "IPv4 header checksum"
    assert (socket.inet_ntoa(ip[12:16]), socket.inet_ntoa(ip[16:20])) == (M.GTPU_ADDR, sgw)
    sport, dport, ulen, ck = struct.unpack_from("!HHHH", ip, 20)
    assert (sport, dport, ulen) == (2152, 2152, len(ip) - 20)
    pseudo = ip[12:20] + struct.pack("!BBH", 0, 17, ulen)
    assert ck == 0 or csum16(pseudo + ip[20:]) == 0xFFFF, "UDP checksum"
    g = ip[28:]
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
